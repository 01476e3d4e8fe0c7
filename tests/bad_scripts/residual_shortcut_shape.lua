-- expect: nn.Residual Residual1: block Linear2 gives [4] but shortcut Linear3 gives [8]
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
return dl.experiment {
  data = dl.data.synthetic { n = 64, val = 0 },
  model = nn.Sequential {
    nn.Residual(nn.Linear(2, 4), { shortcut = nn.Linear(2, 8) }), nn.Linear(4, 2),
  },
  optimizer = optim.SGD { lr = 0.1 },
  epochs = 1, batch = 16,
}
