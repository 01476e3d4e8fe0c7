-- expect: bad field 'context' to dl.data.text
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
return dl.experiment {
  data = dl.data.text { path = "tests/bad/text/nosuch.h5", context = 0 },
  model = nn.Sequential { nn.Linear(2, 2) },
  optimizer = optim.SGD { lr = 0.1 }, batch = 8, epochs = 1,
}
