-- plateau.lua - a wasteful experiment for the advisor: a softmax regression
-- that reaches its accuracy in a few epochs, trained for 40; it does not
-- overfit (the validation loss barely moves), it just stops improving.
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
local hp = dl.hparams { epochs = 40 }
return dl.experiment {
  name = "waste-plateau",
  data = dl.data.hdf5 {
    path = "data/fashion-mnist.h5", train = "/train", val = "/test",
    workers = 2, prefetch = 4, shuffle = true, val_limit = 5000,
  },
  model = nn.Sequential { nn.Flatten(), nn.Linear(784, 10) },
  loss = nn.CrossEntropy(),
  optimizer = optim.Adam { lr = 1e-3 },
  batch = 128, epochs = hp.epochs, precision = "fp32", device = "cpu", seed = 1,
}
