-- nn.lua - dl.nn: every layer and loss constructs, prints, and rejects bad arguments by name
local dl = require "dlbench"
local nn = dl.nn

test("every layer constructs and prints", function ()
  local cases = {
    { nn.Linear(4, 3), "Linear" }, { nn.Linear(4, 3, { bias = false }), "Linear" },
    { nn.Conv2d(1, 8, 3, { pad = 1 }), "Conv2d" }, { nn.Conv2d(1, 8, 3, 2, 1), "Conv2d" },
    { nn.MaxPool2d(2), "MaxPool2d" }, { nn.AvgPool2d(2, 2), "AvgPool2d" },
    { nn.ReLU(), "ReLU" }, { nn.GELU(), "GELU" }, { nn.Tanh(), "Tanh" }, { nn.Sigmoid(), "Sigmoid" },
    { nn.Dropout(0.3), "Dropout" }, { nn.Dropout(), "Dropout" },
    { nn.BatchNorm(8), "BatchNorm" }, { nn.BatchNorm2d(8, { eps = 1e-3, momentum = 0.2 }), "BatchNorm" },
    { nn.LayerNorm(16), "LayerNorm" }, { nn.Flatten(), "Flatten" }, { nn.Embedding(100, 8), "Embedding" },
  }
  for i, c in ipairs(cases) do
    local text = tostring(c[1])
    assert(text:find(c[2], 1, true), ("case %d: %s does not mention %s"):format(i, text, c[2]))
  end
end)

test("pooling takes padding, as Conv2d and PyTorch name it, or pad", function ()
  local a = tostring(nn.MaxPool2d(3, { stride = 2, padding = 1 }))
  local b = tostring(nn.MaxPool2d(3, { stride = 2, pad = 1 }))
  assert(a == b, a .. " / " .. b)
  assert(a ~= tostring(nn.MaxPool2d(3, { stride = 2 })), a)
  assert(tostring(nn.AvgPool2d(3, { padding = 1 })) == tostring(nn.AvgPool2d(3, 3, 1)))
  expect_error("give padding or pad, not both", nn.MaxPool2d, 3, { padding = 1, pad = 1 })
end)

test("containers take their children", function ()
  local a, b = nn.Linear(2, 4), nn.ReLU()
  local seq = nn.Sequential { a, b, nn.Linear(4, 2) }
  assert(tostring(seq):find("Sequential"))
  assert(tostring(a):find("in a container"), tostring(a))
  expect_error("already part of another container", nn.Sequential, { a })
  local res = nn.Residual(nn.Sequential { nn.Linear(4, 4), nn.ReLU() })
  assert(tostring(res):find("Residual"))
  local varargs = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
  assert(tostring(varargs):find("2 layers"), tostring(varargs))
end)

test("a failed container leaves its children usable", function ()
  local a = nn.Linear(2, 2)
  expect_error("expected a layer", nn.Sequential, { a, 42 })
  assert(not tostring(a):find("in a container"))
  nn.Sequential { a }
end)

test("bad arguments name the function, the argument and the expectation", function ()
  expect_error("bad argument #1 (in_features) to nn.Linear: expected a positive integer, got 0", nn.Linear, 0, 3)
  expect_error("bad argument #2 (out_features) to nn.Linear: expected a positive integer, got 2.5", nn.Linear, 3, 2.5)
  expect_error("nn.Linear: unknown option 'biass'", nn.Linear, 3, 2, { biass = false })
  expect_error("bad field 'bias' to nn.Linear: expected true or false", nn.Linear, 3, 2, { bias = 1 })
  expect_error("bad argument #3 (kernel_size) to nn.Conv2d", nn.Conv2d, 1, 2)
  expect_error("bad argument #1 (p) to nn.Dropout", nn.Dropout, 1.0)
  expect_error("bad argument #1 (num_features) to nn.BatchNorm", nn.BatchNorm, "x")
  expect_error("nn.Sequential: needs at least one layer", nn.Sequential, {})
  expect_error("bad argument #1 (block) to nn.Residual", nn.Residual, 3)
  local ok, err = pcall(function () return nn.Linear(-1, 1) end)
  assert(not ok and err:find("tests/lua/nn.lua:%d+: bad argument"), err) -- the script's line
end)

test("losses", function ()
  assert(tostring(nn.CrossEntropy()) == "CrossEntropy()")
  assert(tostring(nn.CrossEntropy { smoothing = 0.1 }):find("smoothing"))
  assert(tostring(nn.MSE()) == "MSE()")
  assert(tostring(nn.BCEWithLogits()):find("BCE"))
  expect_error("bad field 'smoothing' to nn.CrossEntropy", nn.CrossEntropy, { smoothing = 1.5 })
  expect_error("unknown option 'smooth'", nn.CrossEntropy, { smooth = 0.1 })
end)

test("layers are collected without leaks", function ()
  for _ = 1, 2000 do local _ = nn.Sequential { nn.Linear(8, 8), nn.ReLU() } end
  collectgarbage()
end)
