-- mobilenet.lua - a probe: the zoo's MobileNet (bench/bench_models.h) as a
-- script, for per-layer profiles: depthwise 3x3 and 1x1 blocks on
-- Fashion-MNIST, batch 64, SGD.
--   DLBENCH_THREADS=1 dlbench profile bench/probes/mobilenet.lua --steps 10 --by layer --trace -
-- The PyTorch twin: python3 bench/probes/torch_twins.py mobilenet 1
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
local hp = dl.hparams { batch = 64, precision = "fp32" }
local function cbr(cin, cout, k, stride, groups)
  return { nn.Conv2d(cin, cout, k, { stride = stride, padding = (k == 3) and 1 or 0, groups = groups, bias = false }),
           nn.BatchNorm2d(cout), nn.ReLU() }
end
local L = {}
local function add(t) for _, l in ipairs(t) do L[#L + 1] = l end end
add(cbr(1, 32, 3, 1, 1))
for _, b in ipairs { {32, 64, 1}, {64, 128, 2}, {128, 128, 1}, {128, 256, 2}, {256, 256, 1} } do
  add(cbr(b[1], b[1], 3, b[3], b[1])); add(cbr(b[1], b[2], 1, 1, 1))
end
L[#L + 1] = nn.AdaptiveAvgPool2d(1); L[#L + 1] = nn.Flatten(); L[#L + 1] = nn.Linear(256, 10)
return dl.experiment {
  name = "probe-mobilenet",
  data = dl.data.hdf5 { path = "data/fashion-mnist.h5", train = "/train", val = "/test", workers = 1, shuffle = true },
  model = nn.Sequential(L), loss = nn.CrossEntropy(),
  optimizer = optim.SGD { lr = 0.05, momentum = 0.9 },
  batch = hp.batch, epochs = 1, precision = hp.precision,
}
