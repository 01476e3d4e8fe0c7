-- expect: PositionalEmbedding(1, 8) expects [t, 8] (positions, features) with t <= max_len 1, got per-sample input [2, 8]
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
-- synthetic samples have 2 values: a context of 2 positions, one more than max_len
return dl.experiment {
  data = dl.data.synthetic { n = 64, val = 0 },
  model = nn.Sequential { nn.Embedding(4, 8), nn.PositionalEmbedding(1, 8), nn.Flatten(), nn.Linear(16, 2) },
  optimizer = optim.SGD { lr = 0.1 },
  epochs = 1, batch = 16,
}
