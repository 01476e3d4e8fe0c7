-- expect: module 'nonexistent' not found
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
local x = require "nonexistent"
return dl.experiment {
  data = dl.data.synthetic { n = 64, val = 0 },
  model = nn.Sequential { nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 2) },
  optimizer = optim.SGD { lr = 0.1 },
  epochs = 1, batch = 16,
}
