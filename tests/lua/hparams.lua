-- hparams.lua - dl.hparams: values, read-only table, typo detection
local dl = require "dlbench"

test("declared values", function ()
  local hp = dl.hparams { lr = 0.05, hidden = 512, act = "relu", bn = true }
  assert(hp.lr == 0.05 and hp.hidden == 512 and hp.act == "relu" and hp.bn == true)
  assert(math.type(hp.hidden) == "integer")
end)

test("typos and writes are errors", function ()
  local hp = dl.hparams { lr = 0.05, width = 8 }
  expect_error("unknown hyperparameter 'lrr' (declared:", function () return hp.lrr end)
  expect_error("hyperparameters are read-only", function () hp.depth = 3 end)
  expect_error("must default to a number, boolean or string", dl.hparams, { f = {} })
  expect_error("every hyperparameter needs a name", dl.hparams, { 1, 2 })
end)
