-- expect: dl.data.synthetic: at most 10 million samples
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
return dl.experiment {
  data = dl.data.synthetic { n = 1e15, val = 0 },
  model = nn.Sequential { nn.Linear(2, 2) },
  optimizer = optim.SGD { lr = 0.1 }, batch = 8, epochs = 1,
}
