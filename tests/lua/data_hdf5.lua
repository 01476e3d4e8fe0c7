-- data_hdf5.lua - dl.data.hdf5's loader options: augment, mode, memory_budget, shuffle_window, x/y names, hints
local dl = require "dlbench"
local F = "data/fashion-mnist.h5"

test("options accepted", function ()
  local d = dl.data.hdf5 { path = F, train = "/train", val = "/test", x = "x", y = "y",
                           augment = { crop = 4, flip = true }, mode = "streaming",
                           memory_budget = "64MiB", shuffle_window = 4096, workers = 2 }
  assert(tostring(d):find("fashion%-mnist.h5"))
  assert(d.mode == "streaming", tostring(d.mode))
  assert(dl.data.hdf5 { path = F }.mode == "auto")
  assert(dl.data.hdf5 { path = F, mode = "memory" }.mode == "memory")
  dl.data.hdf5 { path = F, memory_budget = 1 << 30 }
  dl.data.hdf5 { path = F, memory_budget = "2GiB" }
  dl.data.hdf5 { path = F, memory_budget = "1.5 KiB" }
  dl.data.hdf5 { path = F, augment = { flip = true } }
  dl.data.hdf5 { path = F, augment = {} }
end)

test("bad values name the field", function ()
  expect_error("bad field 'mode' to dl.data.hdf5: expected \"memory\", \"streaming\" or \"auto\"",
               dl.data.hdf5, { path = F, mode = "ram" })
  expect_error("bad field 'memory_budget' to dl.data.hdf5: expected a number of bytes",
               dl.data.hdf5, { path = F, memory_budget = "2GB" })
  expect_error("bad field 'memory_budget'", dl.data.hdf5, { path = F, memory_budget = "lots" })
  expect_error("bad field 'memory_budget'", dl.data.hdf5, { path = F, memory_budget = -5 })
  expect_error("bad field 'memory_budget'", dl.data.hdf5, { path = F, memory_budget = true })
  expect_error("bad field 'augment' to dl.data.hdf5", dl.data.hdf5, { path = F, augment = 4 })
  expect_error("bad field 'crop' to dl.data.hdf5 augment", dl.data.hdf5,
               { path = F, augment = { crop = -1 } })
  expect_error("dl.data.hdf5 augment: unknown option 'flp' (known: crop, flip)", dl.data.hdf5,
               { path = F, augment = { flp = true } })
  expect_error("bad field 'shuffle_window'", dl.data.hdf5, { path = F, shuffle_window = -1 })
end)

test("did you mean", function ()
  expect_error("unknown option 'num_workers' (did you mean workers?) (known: path, train", dl.data.hdf5,
               { path = F, num_workers = 2 })
  expect_error("unknown option 'batch_size' (did you mean set batch in dl.experiment",
               dl.data.hdf5, { path = F, batch_size = 64 })
  expect_error("unknown option 'modee' (known: ", dl.data.hdf5, { path = F, modee = "auto" })
  expect_error("shuffle_window", dl.data.hdf5, { path = F, modee = "auto" })
end)

test("class names", function ()
  local f = io.open(F)
  if not f then skip(F .. " not prepared (make run, or t_run.sh, prepares it)") end
  f:close()
  local c = dl.data.hdf5 { path = F }.classes
  assert(type(c) == "table" and #c == 10, tostring(c))
  assert(c[1] == "T-shirt/top" and c[10] == "Ankle boot", tostring(c[1]) .. " / " .. tostring(c[10]))
  assert(dl.data.hdf5 { path = "data/does-not-exist.h5" }.classes == nil)
  assert(dl.data.hdf5 { path = F, train = "/nope" }.classes == nil)
end)
