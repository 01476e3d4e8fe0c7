-- full_validation.lua - a wasteful experiment for the advisor: short epochs
-- (2,000 samples) each followed by a validation over the full 10,000-image
-- test split.
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
local hp = dl.hparams { epochs = 12 }
return dl.experiment {
  name = "waste-full-validation",
  data = dl.data.hdf5 {
    path = "data/fashion-mnist.h5", train = "/train", val = "/test",
    workers = 2, prefetch = 4, shuffle = true, limit = 2000,
  },
  model = nn.Sequential {
    nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10),
  },
  loss = nn.CrossEntropy(),
  optimizer = optim.SGD { lr = 0.05, momentum = 0.9 },
  batch = 128, epochs = hp.epochs, precision = "fp32", device = "cpu", seed = 1,
}
