-- expect: dl.experiment: model is required
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
return dl.experiment { data = dl.data.synthetic {}, optimizer = optim.SGD { lr = 0.1 } }
