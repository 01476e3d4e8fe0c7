-- expect: images
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
return dl.experiment {
  data = dl.data.hdf5 { path = "data/fashion-mnist.h5", x = "images", limit = 64 },
  model = nn.Sequential { nn.Flatten(), nn.Linear(784, 10) },
  optimizer = optim.SGD { lr = 0.1 },
  epochs = 1, batch = 16,
}
