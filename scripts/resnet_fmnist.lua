-- resnet_fmnist.lua - a small ResNet on Fashion-MNIST: a 3x3 stem, three
-- stages of two basic blocks (16, 32, 64 channels; stride 2 and a 1x1
-- projection shortcut where the shape changes), global average pooling and
-- a linear classifier. SGD with Nesterov momentum and a one-cycle schedule.
-- Shows nn.Residual with and without a shortcut and nn.AdaptiveAvgPool2d.
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim

local hp = dl.hparams {
  lr = 0.1, weight_decay = 5e-4, width = 16, batch = 128, epochs = 10,
  limit = 0, val_limit = 0, precision = "fp32",
}

-- conv 3x3 -> BN -> ReLU -> conv 3x3 -> BN, added to the shortcut, then ReLU
local function basic_block(cin, cout, stride)
  local block = nn.Sequential {
    nn.Conv2d(cin, cout, 3, { stride = stride, padding = 1, bias = false }),
    nn.BatchNorm2d(cout), nn.ReLU(),
    nn.Conv2d(cout, cout, 3, { padding = 1, bias = false }),
    nn.BatchNorm2d(cout),
  }
  local shortcut = nil -- the identity
  if stride ~= 1 or cin ~= cout then
    shortcut = nn.Sequential {
      nn.Conv2d(cin, cout, 1, { stride = stride, bias = false }),
      nn.BatchNorm2d(cout),
    }
  end
  return nn.Sequential { nn.Residual(block, { shortcut = shortcut }), nn.ReLU() }
end

local w = hp.width
local layers = {
  nn.Conv2d(1, w, 3, { padding = 1, bias = false }), nn.BatchNorm2d(w), nn.ReLU(), -- 28 x 28
}
local cin = w
for stage, cout in ipairs { w, 2 * w, 4 * w } do -- 28, 14, 7
  for b = 1, 2 do
    local stride = (stage > 1 and b == 1) and 2 or 1
    layers[#layers + 1] = basic_block(cin, cout, stride)
    cin = cout
  end
end
layers[#layers + 1] = nn.AdaptiveAvgPool2d(1)
layers[#layers + 1] = nn.Flatten()
layers[#layers + 1] = nn.Linear(cin, 10)

return dl.experiment {
  name = "resnet-fmnist",
  data = dl.data.hdf5 {
    path = "data/fashion-mnist.h5", train = "/train", val = "/test",
    workers = 2, prefetch = 4, shuffle = true,
    mean = { 0.286 }, std = { 0.353 }, -- the training set's pixel statistics
    limit = hp.limit, val_limit = hp.val_limit,
  },
  model = nn.Sequential(layers),
  loss = nn.CrossEntropy(),
  optimizer = optim.SGD { lr = hp.lr, momentum = 0.9, nesterov = true,
                          weight_decay = hp.weight_decay },
  schedule = optim.onecycle { max_lr = hp.lr },
  batch = hp.batch, epochs = hp.epochs,
  precision = hp.precision, device = "auto",
  callbacks = { dl.checkpoint { monitor = "val_acc" } },
}
