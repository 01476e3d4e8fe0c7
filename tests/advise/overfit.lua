-- overfit.lua - a wasteful experiment for the advisor: a wide MLP on a
-- 3,000-sample subset for 40 epochs with no regularisation.
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
local hp = dl.hparams { epochs = 40 }
return dl.experiment {
  name = "waste-overfit",
  data = dl.data.hdf5 {
    path = "data/fashion-mnist.h5", train = "/train", val = "/test",
    workers = 2, prefetch = 4, shuffle = true, limit = 3000, val_limit = 2000,
  },
  model = nn.Sequential {
    nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
    nn.Linear(1024, 10),
  },
  loss = nn.CrossEntropy(),
  optimizer = optim.Adam { lr = 1e-3 },
  batch = 64, epochs = hp.epochs, precision = "fp32", device = "cpu", seed = 1,
}
