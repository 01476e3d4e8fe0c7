-- expect: bad argument #1 (output_size) to nn.AdaptiveAvgPool2d: expected a positive integer or {h, w} of them
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
return dl.experiment {
  data = dl.data.synthetic { n = 64, val = 0 },
  model = nn.Sequential { nn.AdaptiveAvgPool2d(0), nn.Flatten(), nn.Linear(2, 2) },
  optimizer = optim.SGD { lr = 0.1 },
  epochs = 1, batch = 16,
}
