-- dp.lua - the data-parallel script of tests/t_mpi.sh and bench/bench_mpi.sh:
-- deterministic two-spiral data with a short last batch (2000 = 15 x 128 + 80),
-- no dropout, SGD with momentum; `batch` is the global batch of the job.
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim

local hp = dl.hparams { batch = 128, epochs = 3, n = 2000, hidden = 64, lr = 0.05 }

return dl.experiment {
  name = "dp",
  data = dl.data.synthetic { kind = "spirals", n = hp.n, val = 256, classes = 2, noise = 0.05 },
  model = nn.Sequential {
    nn.Linear(2, hp.hidden), nn.Tanh(),
    nn.Linear(hp.hidden, hp.hidden), nn.Tanh(),
    nn.Linear(hp.hidden, 2),
  },
  loss = nn.CrossEntropy(),
  optimizer = optim.SGD { lr = hp.lr, momentum = 0.9 },
  batch = hp.batch, epochs = hp.epochs,
}
