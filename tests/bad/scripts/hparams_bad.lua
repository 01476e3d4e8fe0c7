-- expect: hyperparameter 'lr' must default to a number, boolean or string (got a function)
local dl = require "dlbench"
local hp = dl.hparams { lr = function() end }
