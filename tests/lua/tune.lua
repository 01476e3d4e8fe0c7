-- tune.lua - study objectives: trial:float/int/choice/report/should_prune, trial.number,
-- fixed trials, in-memory studies, and arguments rejected with the function's name
local dl = require "dlbench"

test("suggestions respect bounds and types", function ()
  local st = dl.memory_study { sampler = "random", seed = 3 }
  for _ = 1, 20 do
    local t = st:ask()
    local lr = t:float("lr", 1e-4, 1e-1, { log = true })
    local x = t:float("x", -2, 3)
    local h = t:int("hidden", 16, 512, { log = true })
    local k = t:int("k", 1, 3)
    local act = t:choice("act", { "relu", "gelu" })
    local w = t:choice("w", { 32, 64, true })
    assert(math.type(lr) == "float" and lr >= 1e-4 and lr <= 1e-1)
    assert(x >= -2 and x <= 3)
    assert(math.type(h) == "integer" and h >= 16 and h <= 512)
    assert(math.type(k) == "integer" and k >= 1 and k <= 3)
    assert(act == "relu" or act == "gelu")
    assert(w == 32 or w == 64 or w == true, "choice returns the element itself")
    st:tell(t, x * x)
  end
  assert(#st == 20)
end)

test("the same name in a trial gives the same value", function ()
  local st = dl.memory_study { sampler = "tpe" }
  local t = st:ask()
  local a = t:float("lr", 0.01, 1)
  assert(t:float("lr", 0.01, 1) == a)
  expect_error("another distribution", t.float, t, "lr", 0.01, 2)
  local p = t.params
  assert(p.lr == a)
end)

test("same seed, same suggestions", function ()
  local function run(seed)
    local st = dl.memory_study { sampler = "tpe", seed = seed }
    local out = {}
    for i = 1, 12 do
      local t = st:ask()
      local x = t:float("x", -5, 5)
      local c = t:choice("c", { "a", "b", "c" })
      out[#out + 1] = string.format("%.17g/%s", x, c)
      st:tell(t, (x - 1) ^ 2 + (c == "b" and 0 or 1))
    end
    return table.concat(out, " ")
  end
  assert(run(7) == run(7))
  assert(run(7) ~= run(8))
end)

test("trial.number, report, should_prune and best", function ()
  local st = dl.memory_study { direction = "maximize", sampler = "random", pruner = "median" }
  for i = 0, 5 do
    local t = st:ask()
    assert(t.number == i)
    t:float("x", 0, 1)
    for step = 1, 4 do t:report(step, i + step * 0.1) end
    assert(t:should_prune() == false, "no warm-up yet or better than the median")
    st:tell(t, i + 0.4)
  end
  local bad = st:ask()
  bad:float("x", 0, 1)
  bad:report(1, -10)
  assert(bad:should_prune() == true, "far below the median of the others at step 1")
  st:tell(bad, "pruned")
  local v, n, params = st:best()
  assert(n == 5 and math.abs(v - 5.4) < 1e-12 and params.x)
  assert(tostring(bad) == "trial 6")
end)

test("a fixed trial returns the given values, checked", function ()
  local t = dl.fixed_trial { lr = 0.01, hidden = 64, act = "gelu", w = 32 }
  assert(t:float("lr", 1e-4, 0.1, { log = true }) == 0.01)
  assert(t:int("hidden", 8, 512) == 64)
  assert(t:choice("act", { "relu", "gelu" }) == "gelu")
  assert(t:choice("w", { 16, 32 }) == 32)
  assert(t.number == -1 and t:should_prune() == false)
  t:report(1, 0.5) -- accepted, ignored
  expect_error("no value for 'depth'", t.int, t, "depth", 1, 4)
  expect_error("lr=0.01: expected a number in [0.1, 1]", t.float, t, "lr", 0.1, 1)
  expect_error("act=gelu: expected one of relu tanh", t.choice, t, "act", { "relu", "tanh" })
end)

test("wrong arguments name the function, the argument and what was expected", function ()
  local st = dl.memory_study {}
  local t = st:ask()
  expect_error("bad argument #2 (name) to trial:float: expected a parameter name", t.float, t, 3, 0, 1)
  expect_error("bad argument #4 (hi) to trial:float: expected a number >= lo (1)", t.float, t, "x", 1, 0)
  expect_error("bad argument #3 (lo) to trial:float: expected a number > 0", t.float, t, "x", 0, 1, { log = true })
  expect_error("bad argument #3 (lo) to trial:float: expected a finite number", t.float, t, "x", "a", 1)
  expect_error("bad argument #4 (hi) to trial:float: expected a finite number", t.float, t, "x", 0, 1 / 0)
  expect_error("trial:float: unknown option 'lg'", t.float, t, "x", 1, 2, { lg = true })
  expect_error("bad argument #3 (lo) to trial:int: expected an integer", t.int, t, "n", 1.5, 4)
  expect_error("bad argument #4 (hi) to trial:int: expected an integer >= lo (4)", t.int, t, "n", 4, 1)
  expect_error("bad argument #3 (lo) to trial:int: expected an integer >= 1", t.int, t, "n", 0, 4, { log = true })
  expect_error("bad argument #3 (choices) to trial:choice: expected a non-empty list", t.choice, t, "c", {})
  expect_error("bad argument #3 (choices) to trial:choice: expected a non-empty list", t.choice, t, "c", "relu")
  expect_error("choice 2 is a table", t.choice, t, "c", { "a", {} })
  expect_error("\"a\" is listed twice", t.choice, t, "c", { "a", "a" })
  expect_error("bad argument #2 (step) to trial:report: expected a non-negative integer", t.report, t, -1, 0.5)
  expect_error("bad argument #3 (value) to trial:report: expected a number", t.report, t, 1, "x")
  expect_error("bad argument #1 (self) to trial:float", t.float, 5, "x", 0, 1)
  expect_error("trial has no field 'sugest'", function () return t.sugest end)
  expect_error("trial is read-only", function () t.number = 3 end)
  expect_error("bad argument #3 (result) to study:tell", st.tell, st, t, "done")
end)

test("study settings are checked", function ()
  local f = function (trial) end
  expect_error("sampler must be \"tpe\", \"random\" or \"grid\", got \"bayes\"", dl.study, { sampler = "bayes", objective = f })
  expect_error("pruner must be", dl.study, { pruner = "hyperband", objective = f })
  expect_error("monitor 'accuracy' is not a metric", dl.study, { metric = "accuracy", objective = f })
  expect_error("direction must be", dl.study, { direction = "up", objective = f })
  expect_error("bad field 'trials' to dl.study: expected a positive integer", dl.study, { trials = 0, objective = f })
  expect_error("bad field 'name' to dl.study", dl.study, { name = "a/b", objective = f })
  local s = dl.study { metric = "val_acc", pruner = "halving", objective = f }
  assert(s.metric == "val_acc")
end)
