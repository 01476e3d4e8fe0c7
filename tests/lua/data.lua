-- data.lua - dl.data: dataset descriptions and their argument errors
local dl = require "dlbench"

test("descriptions", function ()
  assert(tostring(dl.data.synthetic { kind = "blobs", n = 100, classes = 3 }):find("blobs"))
  assert(tostring(dl.data.fashion_mnist { limit = 10 }):find("fashion"))
  assert(tostring(dl.data.hdf5 { path = "x.h5", train = "/train", val = "/test", workers = 2,
                                 prefetch = 4, shuffle = true, scale = 1/255 }):find("x.h5"))
  dl.data.hdf5 { path = "x.h5", mean = { 0.5 }, std = { 0.25 } }
end)

test("errors", function ()
  expect_error("dl.data.hdf5: path (the .h5 file) is required", dl.data.hdf5, {})
  expect_error("kind must be \"spirals\" or \"blobs\"", dl.data.synthetic, { kind = "moons" })
  expect_error("bad field 'n' to dl.data.synthetic: expected a positive integer", dl.data.synthetic, { n = 0 })
  expect_error("mean and std must be given together", dl.data.hdf5, { path = "x", mean = { 0.5 } })
  expect_error("std[1] must be positive", dl.data.hdf5, { path = "x", mean = 0, std = 0 })
  expect_error("unknown option 'pth'", dl.data.hdf5, { pth = "x" })
end)
