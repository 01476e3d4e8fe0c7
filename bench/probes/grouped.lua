-- grouped.lua - a probe: a ResNeXt-style CNN on Fashion-MNIST, grouped 3x3
-- layers (g groups) at 64 and 128 channels between 1x1 layers, SGD.
--   DLBENCH_THREADS=1 dlbench profile bench/probes/grouped.lua g=8 --steps 10 --trace -
-- The PyTorch twin: python3 bench/probes/torch_twins.py grp8 1 (grp32 for g=32)
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
local hp = dl.hparams { batch = 32, precision = "fp32", g = 8 }
local g = hp.g
return dl.experiment {
  name = "probe-grouped",
  data = dl.data.hdf5 { path = "data/fashion-mnist.h5", train = "/train", val = "/test", workers = 1, shuffle = true },
  model = nn.Sequential {
    nn.Conv2d(1, 64, 3, { padding = 1, bias = false }), nn.BatchNorm2d(64), nn.ReLU(),
    nn.Conv2d(64, 64, 3, { padding = 1, groups = g, bias = false }), nn.BatchNorm2d(64), nn.ReLU(),
    nn.Conv2d(64, 128, 1, { bias = false }), nn.BatchNorm2d(128), nn.ReLU(),
    nn.MaxPool2d(2),
    nn.Conv2d(128, 128, 3, { padding = 1, groups = g, bias = false }), nn.BatchNorm2d(128), nn.ReLU(),
    nn.Conv2d(128, 128, 1, { bias = false }), nn.BatchNorm2d(128), nn.ReLU(),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10) },
  loss = nn.CrossEntropy(),
  optimizer = optim.SGD { lr = 0.05, momentum = 0.9 },
  batch = hp.batch, epochs = 1, precision = hp.precision,
}
