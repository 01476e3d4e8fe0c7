-- expect: Conv2d(1, 4, 100000, stride=1, pad=0) expects [1, h, w]
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
return dl.experiment {
  data = dl.data.synthetic { n = 64, val = 0 },
  model = nn.Sequential { nn.Conv2d(1, 4, 100000) },
  optimizer = optim.SGD { lr = 0.1 }, batch = 8, epochs = 1,
}
