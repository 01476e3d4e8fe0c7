-- fmnist_mlp.lua - the default experiment: a two-layer MLP on Fashion-MNIST
-- with SGD + momentum, a cosine schedule with warmup and early stopping.
-- Shows the basic shape of an experiment script: hyperparameters declared
-- with dl.hparams (override them: dlbench run scripts/fmnist_mlp.lua lr=0.1),
-- data, model, loss, optimizer, schedule and callbacks.
--
-- It reads data/fashion-mnist.h5, which `make run` prepares from Debian's
-- dataset-fashion-mnist (or: dlbench import /usr/share/datasets/fashion-mnist
-- data/fashion-mnist.h5); limit = 0 keeps all 60000 training images.
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim

local hp = dl.hparams {
  lr = 0.05, hidden = 512, batch = 128, epochs = 5,
  limit = 0, val_limit = 0, warmup = 100,
}

return dl.experiment {
  name = "fmnist-mlp",
  data = dl.data.hdf5 {
    path = "data/fashion-mnist.h5", train = "/train", val = "/test",
    workers = 2, prefetch = 4, shuffle = true,
    limit = hp.limit, val_limit = hp.val_limit,
  },
  model = nn.Sequential {
    nn.Flatten(),
    nn.Linear(784, hp.hidden), nn.ReLU(),
    nn.Linear(hp.hidden, 10),
  },
  loss = nn.CrossEntropy(),
  optimizer = optim.SGD { lr = hp.lr, momentum = 0.9 },
  schedule = optim.cosine { warmup = hp.warmup },
  batch = hp.batch, accumulate = 1, epochs = hp.epochs,
  precision = "fp32", device = "auto",
  callbacks = { dl.early_stopping { monitor = "val_loss", patience = 3 } },
}
