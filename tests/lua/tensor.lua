-- tensor.lua - dl.tensor: create, index, views, print, totable, and the GC seeing tensor memory
local dl = require "dlbench"

test("create and index", function ()
  local t = dl.tensor { { 1, 2, 3 }, { 4, 5, 6 } }
  assert(t:dim() == 2 and t:numel() == 6 and #t == 2)
  assert(t:size(1) == 2 and t:size(2) == 3 and t:size()[2] == 3)
  assert(t:get(2, 3) == 6 and t[2][1] == 4)
  t:set(1, 1, 10)
  assert(t[1][1] == 10)
  t[2][2] = 50              -- a row is a view: writes reach the parent
  assert(t:get(2, 2) == 50)
  assert(dl.zeros(3):sum() == 0 and dl.ones(2, 2):sum() == 4)
  assert(dl.tensor(2, 2):numel() == 4)
  local c = t:clone(); c:fill(1)
  assert(t:get(1, 1) == 10 and c:mean() == 1)
  assert(t:max() == 50 and t:min() == 2)
end)

test("totable and print", function ()
  local t = dl.tensor { { 1, 2 }, { 3, 4 } }
  local tt = t:totable()
  assert(tt[2][1] == 3 and #tt == 2 and #tt[1] == 2)
  local s = tostring(t)
  assert(s:find("tensor %[2, 2%]") and s:find("4"), s)
  assert(dl.tensor(tt) == t)
end)

test("errors", function ()
  local t = dl.tensor { 1, 2, 3 }
  expect_error("bad argument #2 (index) to tensor[]: expected an index in 1..3, got 4", function () return t[4] end)
  expect_error("expected 1 indices", t.get, t, 1, 1)
  expect_error("ragged nested list", dl.tensor, { { 1, 2 }, { 3 } })
  expect_error("is a string, expected a number", dl.tensor, { 1, "x" })
  expect_error("too large", dl.zeros, 100000, 100000)
end)

test("memory is reported to the collector", function ()
  collectgarbage()
  local before = collectgarbage("count")
  local t = dl.zeros(1000, 1000) -- 4 MB inside the userdata
  local after = collectgarbage("count")
  assert(after - before > 3900, ("GC saw only %.0f KB"):format(after - before))
  t = nil
  for _ = 1, 200 do local _ = dl.zeros(256, 256) end -- 50 MB churn, collected on its own
  assert(collectgarbage("count") < before + 20000, "tensors were not collected")
end)
