-- expect: dl.data.hdf5: unknown option 'num_workers' (did you mean workers?) (known: path, train, val, x, y,
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
return dl.experiment {
  data = dl.data.hdf5 { path = "data/fashion-mnist.h5", num_workers = 2 },
  model = nn.Sequential { nn.Flatten(), nn.Linear(784, 10) },
  optimizer = optim.SGD { lr = 0.1 },
  epochs = 1, batch = 16,
}
