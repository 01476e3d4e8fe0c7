-- expect: runtime_nil_call.lua:4: attempt to call a nil value
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
local m = undefined_function()
return dl.experiment {
  data = dl.data.synthetic { n = 64, val = 0 },
  model = nn.Sequential { nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 2) },
  optimizer = optim.SGD { lr = 0.1 },
  epochs = 1, batch = 16,
}
