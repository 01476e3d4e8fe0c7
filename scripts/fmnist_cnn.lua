-- fmnist_cnn.lua - a small convolutional network on Fashion-MNIST with
-- BatchNorm and Dropout, trained by AdamW with a cosine schedule. Shows
-- Conv2d/MaxPool2d stacks, weight decay done right (decoupled), keeping the
-- best checkpoint, and a custom Lua callback that reads the metrics and
-- writes a note into the run's events.log.
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim

local hp = dl.hparams {
  lr = 2e-3, weight_decay = 0.05, channels = 16, dropout = 0.25,
  batch = 128, epochs = 4, limit = 0, val_limit = 0, precision = "fp32",
}

local c = hp.channels

return dl.experiment {
  name = "fmnist-cnn",
  data = dl.data.hdf5 {
    path = "data/fashion-mnist.h5", train = "/train", val = "/test",
    workers = 2, prefetch = 4, shuffle = true,
    limit = hp.limit, val_limit = hp.val_limit,
  },
  model = nn.Sequential {
    nn.Conv2d(1, c, 3, { pad = 1 }), nn.BatchNorm(c), nn.ReLU(),
    nn.MaxPool2d(2),                                   -- 14 x 14
    nn.Conv2d(c, 2 * c, 3, { pad = 1 }), nn.BatchNorm(2 * c), nn.ReLU(),
    nn.MaxPool2d(2),                                   -- 7 x 7
    nn.Flatten(),
    nn.Dropout(hp.dropout),
    nn.Linear(2 * c * 7 * 7, 128), nn.ReLU(),
    nn.Linear(128, 10),
  },
  loss = nn.CrossEntropy { smoothing = 0.05 },
  optimizer = optim.AdamW { lr = hp.lr, weight_decay = hp.weight_decay },
  schedule = optim.cosine { warmup = 50 },
  batch = hp.batch, epochs = hp.epochs,
  precision = hp.precision, device = "auto",
  callbacks = {
    dl.checkpoint { monitor = "val_acc" },
    dl.callback {
      name = "overfit-note",
      on_validation = function (run, m)
        if m.val_loss > 1.1 * m.train_loss then
          run:note(string.format("epoch %d: val_loss %.3f is well above train_loss %.3f",
                                 run.epoch, m.val_loss, m.train_loss))
        end
      end,
    },
  },
}
