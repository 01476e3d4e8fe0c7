-- optim.lua - dl.optim: optimizers and schedules, their defaults and their argument errors
local dl = require "dlbench"
local optim = dl.optim

test("optimizers", function ()
  local sgd = optim.SGD { lr = 0.1, momentum = 0.9, nesterov = true, weight_decay = 1e-4 }
  assert(sgd.kind == "SGD" and math.abs(sgd.lr - 0.1) < 1e-7 and math.abs(sgd.momentum - 0.9) < 1e-7)
  local adam = optim.Adam { lr = 1e-3, betas = { 0.8, 0.99 } }
  assert(adam.kind == "Adam" and tostring(adam):find("0.8"))
  local adamw = optim.AdamW {}
  assert(adamw.kind == "AdamW" and math.abs(adamw.weight_decay - 0.01) < 1e-7, tostring(adamw))
end)

test("optimizer errors", function ()
  expect_error("bad field 'lr' to optim.SGD: expected a positive number, got -1", optim.SGD, { lr = -1 })
  expect_error("optim.SGD: unknown option 'momentun'", optim.SGD, { lr = 0.1, momentun = 0.9 })
  expect_error("momentum must be below 1", optim.SGD, { lr = 0.1, momentum = 1 })
  expect_error("nesterov needs a momentum", optim.SGD, { lr = 0.1, nesterov = true })
  expect_error("bad field 'betas' to optim.Adam", optim.Adam, { betas = { 0.9 } })
  expect_error("bad argument #1 to optim.SGD: expected a table", optim.SGD, 0.1)
end)

test("schedules", function ()
  for _, s in ipairs {
    optim.constant(), optim.step { step_size = 100, gamma = 0.5 }, optim.cosine { warmup = 10 },
    optim.warmup(100), optim.warmup { steps = 10 }, optim.onecycle { max_lr = 0.1 },
    optim.plateau { patience = 2, mode = "max" },
  } do
    assert(tostring(s):find("schedule"))
  end
  expect_error("step_size", optim.step, {})
  expect_error("mode must be \"min\" or \"max\"", optim.plateau, { mode = "up" })
  expect_error("pct_start must be below 1", optim.onecycle, { pct_start = 1 })
end)
