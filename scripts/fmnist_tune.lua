-- fmnist_tune.lua - a hyperparameter study over the Fashion-MNIST MLP: the
-- learning rate and width on log scales and the activation, with a TPE
-- sampler and median pruning. Shows dl.study wrapping an experiment in an
-- objective. NOTE: it needs the tuner (`dlbench tune`), which is not
-- implemented yet; `dlbench run` refuses a study with a clear message.
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim

local function make_experiment(p)
  local act = p.act == "gelu" and nn.GELU or nn.ReLU
  return dl.experiment {
    name = "fmnist-tune-trial",
    data = dl.data.fashion_mnist { limit = 20000, val_limit = 5000 },
    model = nn.Sequential {
      nn.Flatten(),
      nn.Linear(784, p.hidden), act(),
      nn.Linear(p.hidden, 10),
    },
    loss = nn.CrossEntropy(),
    optimizer = optim.SGD { lr = p.lr, momentum = 0.9 },
    schedule = optim.cosine { warmup = 50 },
    batch = 128, epochs = 3,
  }
end

return dl.study {
  name = "fmnist-lr", metric = "val_acc", direction = "maximize",
  sampler = "tpe", pruner = "median", trials = 40,
  objective = function (trial)
    return make_experiment {
      lr = trial:float("lr", 1e-4, 1e-1, { log = true }),
      hidden = trial:int("hidden", 64, 1024, { log = true }),
      act = trial:choice("act", { "relu", "gelu" }),
    }
  end,
}
