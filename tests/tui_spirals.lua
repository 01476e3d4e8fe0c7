-- tui_spirals.lua - a spirals experiment that trains until stopped (no early
-- stopping), for the workbench tests in t_tui.sh
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim

local hp = dl.hparams { lr = 0.03, hidden = 64, epochs = 1000, n = 20000 }

return dl.experiment {
  name = "tui-spirals",
  data = dl.data.synthetic { kind = "spirals", n = hp.n, val = 500, classes = 2, noise = 0.05 },
  model = nn.Sequential {
    nn.Linear(2, hp.hidden), nn.Tanh(),
    nn.Linear(hp.hidden, hp.hidden), nn.Tanh(),
    nn.Linear(hp.hidden, 2),
  },
  loss = nn.CrossEntropy(),
  optimizer = optim.Adam { lr = hp.lr },
  batch = 64, epochs = hp.epochs,
  precision = "fp32", device = "cpu",
}
