-- tiny_batch.lua - a wasteful experiment for the advisor (not used by the
-- tests): a two-layer MLP at batch 8 with SGD, where the optimizer's pass
-- over every parameter is paid every 8 samples.
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
local hp = dl.hparams { epochs = 1 }
return dl.experiment {
  name = "waste-tiny-batch",
  data = dl.data.hdf5 {
    path = "data/fashion-mnist.h5", train = "/train", val = "/test",
    workers = 2, prefetch = 4, shuffle = true, limit = 30000, val_limit = 5000,
  },
  model = nn.Sequential {
    nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 10),
  },
  loss = nn.CrossEntropy(),
  optimizer = optim.SGD { lr = 0.01, momentum = 0.9 },
  batch = 8, epochs = hp.epochs, precision = "fp32", device = "cpu", seed = 1,
}
