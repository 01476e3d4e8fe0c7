-- expect: unknown hyperparameter 'hiden' (declared: hidden, lr)
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
local hp = dl.hparams { lr = 0.1, hidden = 8 }
return dl.experiment {
  data = dl.data.synthetic { n = 64, val = 0 },
  model = nn.Sequential { nn.Linear(2, hp.hiden) },
  optimizer = optim.SGD { lr = 0.1 },
  epochs = 1, batch = 16,
}
