-- expect: AdaptiveAvgPool2d(1) expects [channels, height, width], got per-sample input [2]
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
return dl.experiment {
  data = dl.data.synthetic { n = 64, val = 0 },
  model = nn.Sequential { nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2, 2) },
  optimizer = optim.SGD { lr = 0.1 },
  epochs = 1, batch = 16,
}
