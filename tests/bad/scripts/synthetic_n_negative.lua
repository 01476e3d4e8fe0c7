-- expect: bad field 'n' to dl.data.synthetic: expected a positive integer, got -5
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
return dl.experiment {
  data = dl.data.synthetic { n = -5, val = 0 },
  model = nn.Sequential { nn.Linear(2, 2) },
  optimizer = optim.SGD { lr = 0.1 }, batch = 8, epochs = 1,
}
