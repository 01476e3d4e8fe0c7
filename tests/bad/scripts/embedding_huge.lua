-- expect: (num_embeddings) to nn.Embedding: expected a positive integer up to 2147483647
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
return dl.experiment {
  data = dl.data.synthetic { n = 64, val = 0 },
  model = nn.Sequential { nn.Embedding(2^31, 2^31) },
  optimizer = optim.SGD { lr = 0.1 }, batch = 8, epochs = 1,
}
