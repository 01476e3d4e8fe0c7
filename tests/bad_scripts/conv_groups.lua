-- expect: nn.Conv2d: Conv2d(6, 4, 3, groups=4): in_channels 6 and out_channels 4 must both be divisible by groups 4
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
return dl.experiment {
  data = dl.data.synthetic { n = 64, val = 0 },
  model = nn.Sequential { nn.Conv2d(6, 4, 3, { groups = 4 }), nn.Flatten(), nn.Linear(4, 2) },
  optimizer = optim.SGD { lr = 0.1 },
  epochs = 1, batch = 16,
}
