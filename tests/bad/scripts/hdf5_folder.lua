-- expect: /: not an HDF5 file
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
return dl.experiment {
  data = dl.data.hdf5 { path = "/" },
  model = nn.Sequential { nn.Linear(2, 2) },
  optimizer = optim.SGD { lr = 0.1 }, batch = 8, epochs = 1,
}
