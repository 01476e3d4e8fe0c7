-- expect: data file not found: run `make run`
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
return dl.experiment {
  data = dl.data.hdf5 { path = "data/does-not-exist.h5", train = "/train" },
  model = nn.Sequential { nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 2) },
  optimizer = optim.SGD { lr = 0.1 },
  epochs = 1, batch = 16,
}
