-- experiment.lua - dl.experiment, dl.study and callbacks: shapes accepted, mistakes rejected at the line
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim

local function base(over)
  local t = {
    data = dl.data.synthetic { n = 64 },
    model = nn.Sequential { nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 2) },
    optimizer = optim.SGD { lr = 0.1 },
  }
  for k, v in pairs(over or {}) do t[k] = v end
  return t
end

test("a complete experiment", function ()
  local e = dl.experiment(base {
    name = "x", loss = nn.CrossEntropy(), schedule = optim.cosine {}, batch = 8, epochs = 2,
    accumulate = 2, precision = "bf16", device = "cpu", seed = 3, log_every = 5,
    callbacks = {
      dl.early_stopping { monitor = "val_acc", patience = 2 },
      dl.checkpoint { every_epochs = 1 },
      dl.checkpoint { monitor = "val_loss" },
      dl.callback { on_step = function (run, m) end, on_epoch = function (run, m) end },
      function (run, m) end,
    },
    on_validation = function (run, m) end,
  })
  assert(e.name == "x" and e.batch == 8)
end)

test("mistakes", function ()
  local nodata = base(); nodata.data = nil
  expect_error("data is required", dl.experiment, nodata)
  expect_error("bad field 'optimizer' to dl.experiment", dl.experiment, base { optimizer = "sgd" })
  expect_error("bad field 'batch' to dl.experiment: expected a positive integer", dl.experiment, base { batch = 0 })
  expect_error("device must be", dl.experiment, base { device = "tpu" })
  expect_error("unknown option 'epoch'", dl.experiment, base { epoch = 3 })
  expect_error("callbacks[1] is a string", dl.experiment, base { callbacks = { "stop" } })
  expect_error("bad field 'on_step' to dl.experiment", dl.experiment, base { on_step = 1 })
  expect_error("monitor 'val_los' is not a metric", dl.early_stopping, { monitor = "val_los" })
  expect_error("give at least one of on_step", dl.callback, {})
  -- init = dl.from_run(...)
  local e = dl.experiment(base { init = dl.from_run("some-run", { checkpoint = "best", exclude = { "Linear3" } }) })
  assert(e.init ~= nil)
  expect_error("bad field 'init' to dl.experiment", dl.experiment, base { init = "some-run" })
  expect_error("bad argument #1 (run) to dl.from_run", dl.from_run, 42)
  expect_error("exclude[1] is a number", dl.from_run, "r", { exclude = { 3 } })
  expect_error("unknown option 'excludes'", dl.from_run, "r", { excludes = { "x" } })
end)

test("study shape", function ()
  local s = dl.study { name = "s", metric = "val_acc", direction = "maximize", sampler = "tpe",
                       pruner = "median", trials = 4, objective = function (trial) end }
  assert(s.trials == 4)
  expect_error("sampler must be", dl.study, { sampler = "bayes", objective = print })
  expect_error("bad field 'objective' to dl.study", dl.study, { trials = 3 })
end)
