-- expect: bad field 'batch' to dl.experiment: expected a positive integer up to 2147483647, got 1.09951e+12
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
return dl.experiment {
  data = dl.data.synthetic { n = 64, val = 0 },
  model = nn.Sequential { nn.Linear(2, 2) },
  optimizer = optim.SGD { lr = 0.1 }, batch = 2^40, epochs = 1,
}
