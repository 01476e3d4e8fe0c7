-- cnn_user.lua - a probe: bench_models.h's cnn-user (the CNN as a user
-- writes it) as a script, for `dlbench profile` by layer: Conv2d with
-- padding 1 (1 -> 16), BatchNorm, GELU, a Residual block at 16 channels,
-- max pooling, 16 -> 32, Flatten, Dropout, Linear(1568 -> 128), batch
-- 64, AdamW, on Fashion-MNIST (scripts/prepare-data.sh). Round 15 timed
-- its emulated bf16 against f32 with it:
--   DLBENCH_THREADS=1 dlbench profile bench/probes/cnn_user.lua precision=bf16 --steps 30 --by layer --trace -
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim

local hp = dl.hparams { precision = "fp32", data = "data/fashion-mnist.h5" }

local layers = {}
local function add(list)
  for _, l in ipairs(list) do layers[#layers + 1] = l end
end
local function conv_bn(cin, cout, gelu)
  local t = { nn.Conv2d(cin, cout, 3, { padding = 1 }), nn.BatchNorm2d(cout) }
  if gelu then t[#t + 1] = nn.GELU() end
  return t
end

add(conv_bn(1, 16, true))
local block = {}
for _, l in ipairs(conv_bn(16, 16, true)) do block[#block + 1] = l end
for _, l in ipairs(conv_bn(16, 16, false)) do block[#block + 1] = l end
add { nn.Residual(nn.Sequential(block)), nn.GELU(), nn.MaxPool2d(2) }
add(conv_bn(16, 32, true))
add {
  nn.MaxPool2d(2), nn.Flatten(), nn.Dropout(0.25), nn.Linear(32 * 7 * 7, 128), nn.GELU(),
  nn.Dropout(0.25), nn.Linear(128, 10),
}

return dl.experiment {
  name = "probe-cnn-user",
  data = dl.data.hdf5 { path = hp.data, train = "/train", val = "/test", workers = 1, shuffle = true },
  model = nn.Sequential(layers),
  loss = nn.CrossEntropy(),
  optimizer = optim.AdamW { lr = 1e-3, weight_decay = 0.01 },
  batch = 64, epochs = 1, precision = hp.precision,
}
