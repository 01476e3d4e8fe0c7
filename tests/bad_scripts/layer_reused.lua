-- expect: appears twice
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
local r = nn.ReLU()
return dl.experiment {
  data = dl.data.synthetic { n = 64, val = 0 },
  model = nn.Sequential { nn.Linear(2, 8), r, nn.Linear(8, 8), r, nn.Linear(8, 2) },
  optimizer = optim.SGD { lr = 0.1 },
  epochs = 1, batch = 16,
}
