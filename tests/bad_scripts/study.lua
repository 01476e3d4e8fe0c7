-- expect: the study's objective must return dl.experiment{...} (it returned nil)
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
return dl.study {
  name = "s", metric = "val_acc", direction = "maximize", trials = 2,
  objective = function (trial) return nil end,
}
