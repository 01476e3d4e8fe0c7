-- expect: batch 2000000000 is larger than the training set (64 samples)
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
return dl.experiment {
  data = dl.data.synthetic { n = 64, val = 0 },
  model = nn.Sequential { nn.Linear(2, 4096) },
  optimizer = optim.SGD { lr = 0.1 }, batch = 2000000000, epochs = 1,
}
