-- convnext.lua - a probe: ConvNeXt-style blocks (depthwise 7x7, BatchNorm,
-- 1x1 to 4x the channels, GELU, 1x1 back, residual) on Fashion-MNIST.
--   DLBENCH_THREADS=1 dlbench profile bench/probes/convnext.lua --steps 10 --by layer --trace -
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
local hp = dl.hparams { batch = 32, precision = "fp32" }
local function block(c)
  return nn.Residual(nn.Sequential {
    nn.Conv2d(c, c, 7, { padding = 3, groups = c }), nn.BatchNorm2d(c),
    nn.Conv2d(c, 4 * c, 1), nn.GELU(), nn.Conv2d(4 * c, c, 1) })
end
return dl.experiment {
  name = "probe-convnext",
  data = dl.data.hdf5 { path = "data/fashion-mnist.h5", train = "/train", val = "/test", workers = 1, shuffle = true },
  model = nn.Sequential {
    nn.Conv2d(1, 48, 4, { stride = 2, padding = 1 }), nn.BatchNorm2d(48), -- 14x14
    block(48), block(48),
    nn.Conv2d(48, 96, 2, { stride = 2 }), nn.BatchNorm2d(96),           -- 7x7
    block(96), block(96),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(96, 10) },
  loss = nn.CrossEntropy(),
  optimizer = optim.AdamW { lr = 1e-3 },
  batch = hp.batch, epochs = 1, precision = hp.precision,
}
