-- expect: dl.early_stopping: monitor 'val_los' is not a metric
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
return dl.experiment {
  data = dl.data.synthetic { n = 64, val = 0 },
  model = nn.Sequential { nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 2) },
  optimizer = optim.SGD { lr = 0.1 },
  callbacks = { dl.early_stopping { monitor = "val_los" } },
  epochs = 1, batch = 16,
}
