-- models.lua - models outside make bench's zoo, for bench/offlist/run.sh:
-- nothing in the engine was tuned for them. model=vgg: a CIFAR VGG (six 3x3
-- convolutions of 32, 64 and 128 channels with BatchNorm and ReLU, three
-- 2x2 max pools, Dropout, a linear head); model=mlp-ln: an MLP on the
-- flattened 3x32x32 images (3072-1024-512-10, LayerNorm, GELU, Dropout);
-- model=lenet: the PyTorch CIFAR tutorial's network (5x5 convolutions of 6
-- and 16 channels, ReLU, 2x2 max pools, 400-120-84-10); model=strided: an
-- all-convolutional net (3x3 convolutions of 32 to 128 channels, two of
-- stride 2, BatchNorm, SiLU, global average pooling). AdamW, batch 64, on
-- the CIFAR-format file run.sh writes.
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim

local hp = dl.hparams { model = "vgg", batch = 64, precision = "fp32", data = "offlist.h5" }

local function conv_bn_relu(cin, cout)
  return nn.Sequential {
    nn.Conv2d(cin, cout, 3, { padding = 1, bias = false }), nn.BatchNorm2d(cout), nn.ReLU(),
  }
end

local function conv_bn_silu(cin, cout, stride)
  return nn.Sequential {
    nn.Conv2d(cin, cout, 3, { stride = stride, padding = 1, bias = false }), nn.BatchNorm2d(cout),
    nn.SiLU(),
  }
end

local models = {
  vgg = function()
    return nn.Sequential {
      conv_bn_relu(3, 32), conv_bn_relu(32, 32), nn.MaxPool2d(2),
      conv_bn_relu(32, 64), conv_bn_relu(64, 64), nn.MaxPool2d(2),
      conv_bn_relu(64, 128), conv_bn_relu(128, 128), nn.MaxPool2d(2),
      nn.Flatten(), nn.Dropout(0.2), nn.Linear(128 * 4 * 4, 10),
    }
  end,
  ["mlp-ln"] = function()
    return nn.Sequential {
      nn.Flatten(),
      nn.Linear(3072, 1024), nn.LayerNorm(1024), nn.GELU(), nn.Dropout(0.1),
      nn.Linear(1024, 512), nn.LayerNorm(512), nn.GELU(), nn.Dropout(0.1),
      nn.Linear(512, 10),
    }
  end,
  lenet = function()
    return nn.Sequential {
      nn.Conv2d(3, 6, 5), nn.ReLU(), nn.MaxPool2d(2),
      nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
      nn.Flatten(), nn.Linear(16 * 5 * 5, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
      nn.Linear(84, 10),
    }
  end,
  strided = function()
    return nn.Sequential {
      conv_bn_silu(3, 32, 1), conv_bn_silu(32, 64, 2), conv_bn_silu(64, 64, 1),
      conv_bn_silu(64, 128, 2), conv_bn_silu(128, 128, 1),
      nn.GlobalAvgPool2d(), nn.Flatten(), nn.Linear(128, 10),
    }
  end,
}
local build = models[hp.model]
if not build then error("models.lua: model must be vgg, mlp-ln, lenet or strided, got " .. tostring(hp.model)) end

return dl.experiment {
  name = "offlist-" .. hp.model,
  data = dl.data.hdf5 {
    path = hp.data, train = "/train", val = "/test", workers = 1, shuffle = true,
    mean = { 0.5, 0.5, 0.5 }, std = { 0.25, 0.25, 0.25 },
  },
  model = build(),
  loss = nn.CrossEntropy(),
  optimizer = optim.AdamW { lr = 1e-3, weight_decay = 0.01 },
  batch = hp.batch, epochs = 1, precision = hp.precision,
}
