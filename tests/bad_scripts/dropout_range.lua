-- expect: bad argument #1 (p) to nn.Dropout: expected a drop probability in [0, 1), got 1.5
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
return dl.experiment {
  data = dl.data.synthetic { n = 64, val = 0 },
  model = nn.Sequential { nn.Linear(2, 2), nn.Dropout(1.5) },
  optimizer = optim.SGD { lr = 0.1 },
  epochs = 1, batch = 16,
}
