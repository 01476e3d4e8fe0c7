-- expect: bad argument #1 to dl.experiment: expected a table of options
local dl = require "dlbench"
return dl.experiment(42)
