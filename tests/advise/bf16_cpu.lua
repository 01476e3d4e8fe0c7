-- bf16_cpu.lua - a wasteful experiment for the advisor: bf16 on a CPU
-- without bf16 arithmetic (DLBENCH_CPU_BF16=0 makes any CPU one), where it
-- is emulated and slower than fp32.
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
local hp = dl.hparams { epochs = 2, limit = 20000 }
return dl.experiment {
  name = "waste-bf16-cpu",
  data = dl.data.hdf5 {
    path = "data/fashion-mnist.h5", train = "/train", val = "/test",
    workers = 2, prefetch = 4, shuffle = true, limit = hp.limit,
  },
  model = nn.Sequential {
    nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
    nn.Linear(1024, 10),
  },
  loss = nn.CrossEntropy(),
  optimizer = optim.Adam { lr = 1e-3 },
  batch = 128, epochs = hp.epochs, precision = "bf16", device = "cpu", seed = 1,
}
