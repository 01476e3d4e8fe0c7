-- expect: MultiheadAttention(10, 3): heads must be positive and divide d_model
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
return dl.experiment {
  data = dl.data.synthetic { n = 64, val = 0 },
  model = nn.Sequential { nn.Embedding(4, 10), nn.MultiheadAttention(10, 3), nn.Flatten(), nn.Linear(20, 2) },
  optimizer = optim.SGD { lr = 0.1 },
  epochs = 1, batch = 16,
}
