-- expect: bad field 'memory_budget' to dl.data.hdf5: expected a number of bytes or a size such as "512MiB"
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
return dl.experiment {
  data = dl.data.hdf5 { path = "data/fashion-mnist.h5", memory_budget = "2 gigs" },
  model = nn.Sequential { nn.Flatten(), nn.Linear(784, 10) },
  optimizer = optim.SGD { lr = 0.1 },
  epochs = 1, batch = 16,
}
