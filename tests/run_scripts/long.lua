-- long.lua - a run that lasts far longer than any test waits (no early stopping):
-- used by tests/t_run.sh to interrupt training with SIGINT
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim

return dl.experiment {
  name = "long",
  data = dl.data.synthetic { n = 20000, val = 500 },
  model = nn.Sequential { nn.Linear(2, 64), nn.ReLU(), nn.Linear(64, 2) },
  optimizer = optim.SGD { lr = 0.05, momentum = 0.9 },
  batch = 64, epochs = 100000,
}
