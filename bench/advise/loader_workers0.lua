-- loader_workers0.lua - a wasteful experiment for the advisor (not used by
-- the tests): random crops and flips prepared on the training thread
-- (workers = 0) for a small MLP, which then waits for every batch.
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
local hp = dl.hparams { epochs = 3 }
return dl.experiment {
  name = "waste-loader-workers0",
  data = dl.data.hdf5 {
    path = "data/fashion-mnist.h5", train = "/train", val = "/test",
    workers = 0, shuffle = true, limit = 30000, val_limit = 5000, mode = "streaming",
    augment = { crop = 4, flip = true },
  },
  model = nn.Sequential {
    nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10),
  },
  loss = nn.CrossEntropy(),
  optimizer = optim.Adam { lr = 1e-3 },
  batch = 128, epochs = hp.epochs, precision = "fp32", device = "cpu", seed = 1,
}
