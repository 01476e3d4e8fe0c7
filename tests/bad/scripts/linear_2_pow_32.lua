-- expect: (out_features) to nn.Linear: expected a positive integer up to 2147483647, got 4.29497e+09
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
return dl.experiment {
  data = dl.data.synthetic { n = 64, val = 0 },
  model = nn.Sequential { nn.Linear(2, 2^32), nn.Linear(2^32, 2) },
  optimizer = optim.SGD { lr = 0.1 }, batch = 8, epochs = 1,
}
