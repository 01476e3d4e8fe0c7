-- expect: bad argument #2 (out_features) to nn.Linear: expected a positive integer, got -1
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
return dl.experiment {
  data = dl.data.synthetic { n = 64, val = 0 },
  model = nn.Sequential { nn.Linear(2, -1) },
  optimizer = optim.SGD { lr = 0.1 },
  epochs = 1, batch = 16,
}
