-- expect: dl.data.text: path: tests/bad/text/nosuch.h5: no such file
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
local data = dl.data.text { path = "tests/bad/text/nosuch.h5", context = 64 }
return dl.experiment {
  data = data,
  model = nn.Sequential { nn.Embedding(data.vocab, 8), nn.Linear(8, data.vocab) },
  optimizer = optim.SGD { lr = 0.1 }, batch = 8, epochs = 1,
}
