-- rgb96.lua - a probe: a CNN on 96x96 RGB images from an image folder
-- (stride-2 stem, 3x3 stride-2 max pooling at 48x48, 64-256 channels),
-- crop-and-flip augmentation on 2 workers, batch 16, AdamW. Any folder of
-- class sub-folders will do; random ones, for timing:
--   python3 -c 'import numpy as n, PIL.Image as I, os; r = n.random.default_rng(0)
--   [os.makedirs(f"/tmp/rgb/{c}", exist_ok=True) or [I.fromarray(r.integers(0, 255,
--   (100, 100, 3), dtype=n.uint8)).save(f"/tmp/rgb/{c}/{i}.png") for i in range(300)] for c in "ab"]'
--   dlbench import /tmp/rgb data/rgb96.h5 --size 96x96 --channels 3 --val-fraction 0.1
--   DLBENCH_THREADS=1 dlbench profile bench/probes/rgb96.lua --steps 10 --by layer --trace -
-- The PyTorch twin: python3 bench/probes/torch_twins.py rgb96 1
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
local hp = dl.hparams { batch = 16, precision = "fp32", path = "data/rgb96.h5" }
local function cbr(ci, co, k, s)
  return { nn.Conv2d(ci, co, k, { stride = s, padding = k // 2, bias = false }), nn.BatchNorm2d(co), nn.ReLU() }
end
local L = {}
local function add(t) for _, l in ipairs(t) do L[#L + 1] = l end end
add(cbr(3, 32, 3, 2))                                      -- 48x48
add(cbr(32, 32, 3, 1)); add(cbr(32, 64, 3, 1))
L[#L + 1] = nn.MaxPool2d(3, { stride = 2, padding = 1 })   -- 24x24
add(cbr(64, 128, 3, 1)); add(cbr(128, 128, 3, 1))
L[#L + 1] = nn.MaxPool2d(2)                                -- 12x12
add(cbr(128, 256, 3, 1))
L[#L + 1] = nn.AdaptiveAvgPool2d(1); L[#L + 1] = nn.Flatten(); L[#L + 1] = nn.Dropout(0.2)
L[#L + 1] = nn.Linear(256, 2)
return dl.experiment {
  name = "probe-rgb96",
  data = dl.data.hdf5 { path = hp.path, train = "/train", val = "/val", workers = 2, shuffle = true,
                        augment = { crop = 4, flip = true } },
  model = nn.Sequential(L), loss = nn.CrossEntropy(),
  optimizer = optim.AdamW { lr = 1e-3 },
  batch = hp.batch, epochs = 1, precision = hp.precision,
}
