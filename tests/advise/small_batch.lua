-- small_batch.lua - a wasteful experiment for the advisor: an MLP on
-- Fashion-MNIST at batch 16, where the step's fixed cost dominates.
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
local hp = dl.hparams { limit = 20000, epochs = 2 }
return dl.experiment {
  name = "waste-small-batch",
  data = dl.data.hdf5 {
    path = "data/fashion-mnist.h5", train = "/train", val = "/test",
    workers = 2, prefetch = 4, shuffle = true, limit = hp.limit,
  },
  model = nn.Sequential {
    nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10),
  },
  loss = nn.CrossEntropy(),
  optimizer = optim.Adam { lr = 1e-3 },
  batch = 16, epochs = hp.epochs, precision = "fp32", device = "cpu", seed = 1,
}
