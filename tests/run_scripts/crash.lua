-- crash.lua - the spirals experiment with a checkpoint every few steps, on
-- the CPU with a fixed seed: tests/t_crash.sh kills it with SIGKILL at
-- random moments, resumes it, and compares the final parameters with an
-- uninterrupted run's.
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim

local hp = dl.hparams { lr = 0.01, hidden = 128, batch = 64, epochs = 6, n = 6000, every = 5 }

return dl.experiment {
  name = "crash",
  data = dl.data.synthetic { kind = "spirals", n = hp.n, val = 500, classes = 2, noise = 0.05 },
  model = nn.Sequential {
    nn.Linear(2, hp.hidden), nn.Tanh(),
    nn.Linear(hp.hidden, hp.hidden), nn.Tanh(),
    nn.Linear(hp.hidden, 2),
  },
  loss = nn.CrossEntropy(),
  optimizer = optim.Adam { lr = hp.lr },
  schedule = optim.cosine { warmup = 20 },
  batch = hp.batch, epochs = hp.epochs, seed = 1234,
  precision = "fp32", device = "cpu",
  callbacks = {
    dl.early_stopping { monitor = "val_loss", patience = 3 },
    dl.checkpoint { every_steps = hp.every },
    dl.checkpoint { monitor = "val_acc" },
  },
}
