-- after.lua - a small classifier with BatchNorm trained by tests/t_after.sh
-- for the commands used after training (eval, predict, fine-tuning):
-- 4-class blobs from `dlbench import --synthetic blobs` (path=), Adam, a
-- checkpoint of the best val_acc; scale = the inputs' scale. head = the classes of the last layer;
-- from = a run to start from (dl.from_run), exclude = a layer not taken;
-- extra = true adds ReLU5 and Linear6 after the head (tensors no run has).
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim

local hp = dl.hparams { path = "blobs.h5", lr = 0.02, hidden = 16, head = 4, epochs = 3,
                        batch = 32, scale = 1.0, from = "", exclude = "",
                        extra = false }

return dl.experiment {
  name = "after",
  data = dl.data.hdf5 { path = hp.path, train = "/train", val = "/test", shuffle = true,
                       scale = hp.scale },
  model = nn.Sequential(hp.extra and {
    nn.Linear(2, hp.hidden), nn.BatchNorm1d(hp.hidden), nn.ReLU(),
    nn.Linear(hp.hidden, hp.head), nn.ReLU(), nn.Linear(hp.head, hp.head),
  } or {
    nn.Linear(2, hp.hidden), nn.BatchNorm1d(hp.hidden), nn.ReLU(),
    nn.Linear(hp.hidden, hp.head),
  }),
  init = hp.from ~= "" and dl.from_run(hp.from, {
    checkpoint = "best", exclude = hp.exclude ~= "" and { hp.exclude } or {} }) or nil,
  loss = nn.CrossEntropy(),
  optimizer = optim.Adam { lr = hp.lr },
  batch = hp.batch, epochs = hp.epochs, seed = 5,
  precision = "fp32", device = "cpu",
  callbacks = { dl.checkpoint { monitor = "val_acc" } },
}
