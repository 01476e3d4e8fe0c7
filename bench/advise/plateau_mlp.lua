-- plateau_mlp.lua - a wasteful experiment for the advisor (not used by the
-- tests): a narrow MLP with weight decay on 12,000 samples for 30 epochs;
-- its validation accuracy settles after a handful.
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
local hp = dl.hparams { epochs = 30 }
return dl.experiment {
  name = "waste-plateau-mlp",
  data = dl.data.hdf5 {
    path = "data/fashion-mnist.h5", train = "/train", val = "/test",
    workers = 2, prefetch = 4, shuffle = true, limit = 12000, val_limit = 5000,
  },
  model = nn.Sequential {
    nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10),
  },
  loss = nn.CrossEntropy(),
  optimizer = optim.AdamW { lr = 3e-3, weight_decay = 0.1 },
  batch = 128, epochs = hp.epochs, precision = "fp32", device = "cpu", seed = 1,
}
