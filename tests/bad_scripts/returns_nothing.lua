-- expect: the script must return dl.experiment{...} or dl.study{...} (it returned nil)
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
local x = 1
