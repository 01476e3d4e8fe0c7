-- dilated.lua - a probe: a CNN with dilated 3x3 layers (dilation 2 and 4,
-- 32 channels) and 4x4 stride-2 layers on Fashion-MNIST, AdamW.
--   DLBENCH_THREADS=1 dlbench profile bench/probes/dilated.lua --steps 10 --trace -
-- The PyTorch twin: python3 bench/probes/torch_twins.py dilated 1
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
local hp = dl.hparams { batch = 32, precision = "fp32" }
return dl.experiment {
  name = "probe-dilated",
  data = dl.data.hdf5 { path = "data/fashion-mnist.h5", train = "/train", val = "/test", workers = 1, shuffle = true },
  model = nn.Sequential {
    nn.Conv2d(1, 32, 3, { padding = 1 }), nn.ReLU(),
    nn.Conv2d(32, 32, 3, { padding = 2, dilation = 2 }), nn.BatchNorm2d(32), nn.ReLU(),
    nn.Conv2d(32, 32, 3, { padding = 4, dilation = 4 }), nn.BatchNorm2d(32), nn.ReLU(),
    nn.Conv2d(32, 64, 4, { stride = 2, padding = 1 }), nn.BatchNorm2d(64), nn.ReLU(),
    nn.Conv2d(64, 64, 4, { stride = 2, padding = 1 }), nn.BatchNorm2d(64), nn.ReLU(),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10) },
  loss = nn.CrossEntropy(),
  optimizer = optim.AdamW { lr = 1e-3 },
  batch = hp.batch, epochs = 1, precision = hp.precision,
}
