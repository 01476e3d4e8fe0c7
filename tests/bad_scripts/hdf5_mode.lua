-- expect: bad field 'mode' to dl.data.hdf5: expected "memory", "streaming" or "auto"
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
return dl.experiment {
  data = dl.data.hdf5 { path = "data/fashion-mnist.h5", mode = "stream" },
  model = nn.Sequential { nn.Flatten(), nn.Linear(784, 10) },
  optimizer = optim.SGD { lr = 0.1 },
  epochs = 1, batch = 16,
}
