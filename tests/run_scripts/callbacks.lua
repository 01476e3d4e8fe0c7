-- callbacks.lua - a custom Lua callback that reads metrics, sets the LR, adds a note,
-- reads a parameter as a tensor and stops the run (used by tests/t_run.sh)
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim

return dl.experiment {
  name = "callbacks",
  data = dl.data.synthetic { n = 512, val = 128 },
  model = nn.Sequential { nn.Linear(2, 8, { name = "fc1" }), nn.ReLU(), nn.Linear(8, 2) },
  optimizer = optim.SGD { lr = 0.1 },
  batch = 32, epochs = 10, log_every = 4,
  callbacks = {
    dl.callback {
      on_step = function (run, m)
        assert(m.loss and m.lr and run.step > 0)
      end,
      on_epoch = function (run, m)
        if run.epoch == 1 then
          run:set_lr(0.05)
          local w = run:param("fc1.weight")
          run:note(("epoch 1: train_loss %.3f, fc1.weight %dx%d"):format(m.train_loss, w:size(1), w:size(2)))
        elseif run.epoch == 3 then
          run:stop("enough after 3 epochs")
        end
      end,
    },
  },
}
