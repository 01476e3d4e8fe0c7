-- spirals_tune.lua - a small study that runs anywhere in seconds: the
-- learning rate (log scale), the width (int, log scale) and the activation
-- of the two-spiral MLP, with a TPE sampler and median pruning.
--   dlbench tune scripts/spirals_tune.lua              8 trials
--   dlbench tune scripts/spirals_tune.lua --report     the best and how to rerun it
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim

local hp = dl.hparams { trials = 8, epochs = 6, n = 1000, seed = 0 }

return dl.study {
  name = "spirals-tune", metric = "val_acc", direction = "maximize",
  sampler = "tpe", pruner = "median", trials = hp.trials, seed = hp.seed,
  objective = function (trial)
    local lr = trial:float("lr", 1e-3, 0.3, { log = true })
    local hidden = trial:int("hidden", 8, 64, { log = true })
    local act = trial:choice("act", { "tanh", "relu" }) == "relu" and nn.ReLU or nn.Tanh
    return dl.experiment {
      name = "spirals-trial",
      data = dl.data.synthetic { kind = "spirals", n = hp.n, val = 400, classes = 2, noise = 0.05 },
      model = nn.Sequential {
        nn.Linear(2, hidden), act(),
        nn.Linear(hidden, hidden), act(),
        nn.Linear(hidden, 2),
      },
      loss = nn.CrossEntropy(),
      optimizer = optim.Adam { lr = lr },
      batch = 64, epochs = hp.epochs, device = "cpu",
    }
  end,
}
