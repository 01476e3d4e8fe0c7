-- char_gpt.lua - a character-level GPT on the text of Debian's fortunes:
-- token and learned position embeddings, pre-norm transformer blocks
-- (LayerNorm -> causal multi-head attention -> residual; LayerNorm -> MLP
-- of 4d with GELU -> residual), a final LayerNorm and a linear head over
-- the vocabulary; per-token cross-entropy, AdamW with a cosine schedule
-- after a warmup.
--
-- The data:  dlbench import --text /usr/share/games/fortunes data/fortunes.h5 --vocab chars
-- Train:     dlbench run scripts/char_gpt.lua
-- Shorter:   dlbench run scripts/char_gpt.lua layers=2 d=32 context=16 limit=640 epochs=2
-- Sample:    dlbench sample RUN --prompt "The " --tokens 300 --temperature 0.8
--
-- An epoch is `limit` windows at random positions (limit / batch steps);
-- validation runs over val_limit fixed windows of the test split after each
-- epoch. precision: "fp32" by default; on a CPU with AVX-512 BF16 (or a GPU)
-- precision=bf16 computes the products in bf16 with fp32 master weights. The
-- engine has no way yet for a script to ask whether the CPU has bf16
-- arithmetic, so the default does not choose it by itself.
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim

local hp = dl.hparams {
  path = "data/fortunes.h5",
  layers = 4, d = 128, heads = 4, context = 64,
  lr = 1e-3, weight_decay = 0.1, warmup = 100, min_lr = 1e-4, clip = 1.0,
  batch = 32, epochs = 10, limit = 32000, val_limit = 2048,
  dropout = 0.0, precision = "fp32", seed = 1337,
}

local data = dl.data.text {
  path = hp.path, train = "/train", val = "/test", context = hp.context,
  limit = hp.limit, val_limit = hp.val_limit, shuffle = true,
}

local function block(d)
  -- dropout (when asked) on each branch's output before the residual add,
  -- GPT-2's resid_pdrop; the engine has no dropout on the attention
  -- weights yet
  local attention = { nn.LayerNorm(d), nn.MultiheadAttention(d, hp.heads, { causal = true }) }
  local mlp = { nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d) }
  if hp.dropout > 0 then
    attention[#attention + 1] = nn.Dropout(hp.dropout)
    mlp[#mlp + 1] = nn.Dropout(hp.dropout)
  end
  return nn.Sequential {
    nn.Residual(nn.Sequential(attention)),
    nn.Residual(nn.Sequential(mlp)),
  }
end

local layers = {
  nn.Embedding(data.vocab, hp.d),          -- [T] ids -> [T, d]
  nn.PositionalEmbedding(hp.context, hp.d), -- + a learned vector per position
}
for _ = 1, hp.layers do
  layers[#layers + 1] = block(hp.d)
end
layers[#layers + 1] = nn.LayerNorm(hp.d)
layers[#layers + 1] = nn.Linear(hp.d, data.vocab) -- [T, vocab] logits

return dl.experiment {
  name = "char-gpt",
  data = data,
  model = nn.Sequential(layers),
  loss = nn.CrossEntropy(),
  optimizer = optim.AdamW { lr = hp.lr, betas = { 0.9, 0.99 }, weight_decay = hp.weight_decay,
                            clip = hp.clip },
  schedule = optim.cosine { warmup = hp.warmup, min_lr = hp.min_lr },
  batch = hp.batch, epochs = hp.epochs,
  precision = hp.precision, device = "auto", seed = hp.seed,
  callbacks = { dl.checkpoint { monitor = "val_loss" } },
}
