-- fmnist_tune.lua - a hyperparameter study over the Fashion-MNIST MLP: the
-- learning rate and width on log scales and the activation, with a TPE
-- sampler and median pruning (a trial whose validation accuracy after an
-- epoch is below the median of earlier trials at that epoch stops there).
-- Shows dl.study wrapping an experiment in an objective:
--   dlbench tune scripts/fmnist_tune.lua                     24 trials, 20000 images
--   dlbench tune scripts/fmnist_tune.lua trials=3 limit=2000 a quick look
--   dlbench tune scripts/fmnist_tune.lua --jobs 2            two worker processes
--   dlbench tune scripts/fmnist_tune.lua --report            the best, the table, the rerun
-- One trial by hand: dlbench run scripts/fmnist_tune.lua lr=0.05 hidden=256 act=relu
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim

local hp = dl.hparams {
  trials = 24, limit = 20000, val_limit = 5000, epochs = 3, batch = 128, seed = 0,
}

local function make_experiment(p)
  local act = p.act == "gelu" and nn.GELU or nn.ReLU
  return dl.experiment {
    name = "fmnist-tune-trial",
    data = dl.data.fashion_mnist {
      limit = hp.limit, val_limit = hp.val_limit, scale = 1/255, shuffle = true,
    },
    model = nn.Sequential {
      nn.Flatten(),
      nn.Linear(784, p.hidden), act(),
      nn.Linear(p.hidden, 10),
    },
    loss = nn.CrossEntropy(),
    optimizer = optim.SGD { lr = p.lr, momentum = 0.9 },
    schedule = optim.cosine { warmup = 50 },
    batch = hp.batch, epochs = hp.epochs,
  }
end

return dl.study {
  name = "fmnist-lr", metric = "val_acc", direction = "maximize",
  sampler = "tpe", pruner = "median", trials = hp.trials, seed = hp.seed,
  objective = function (trial)
    return make_experiment {
      lr = trial:float("lr", 1e-4, 1e-1, { log = true }),
      hidden = trial:int("hidden", 64, 1024, { log = true }),
      act = trial:choice("act", { "relu", "gelu" }),
    }
  end,
}
