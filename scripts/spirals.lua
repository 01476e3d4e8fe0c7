-- spirals.lua - shows the smallest complete experiment: synthetic two-spiral
-- data generated in C, a small MLP, Adam with a cosine schedule, early
-- stopping. Runs anywhere in seconds:  dlbench run scripts/spirals.lua
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim

local hp = dl.hparams {
  lr = 0.03, hidden = 64, batch = 64, epochs = 20, n = 2000, noise = 0.05,
}

return dl.experiment {
  name = "spirals",
  data = dl.data.synthetic { kind = "spirals", n = hp.n, val = 500, classes = 2, noise = hp.noise },
  model = nn.Sequential {
    nn.Linear(2, hp.hidden), nn.Tanh(),
    nn.Linear(hp.hidden, hp.hidden), nn.Tanh(),
    nn.Linear(hp.hidden, 2),
  },
  loss = nn.CrossEntropy(),
  optimizer = optim.Adam { lr = hp.lr },
  schedule = optim.cosine { warmup = 20 },
  batch = hp.batch, epochs = hp.epochs,
  precision = "fp32", device = "auto",
  callbacks = {
    dl.early_stopping { monitor = "val_loss", patience = 5 },
    dl.checkpoint { monitor = "val_acc" },
  },
}
