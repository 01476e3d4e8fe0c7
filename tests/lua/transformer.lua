-- transformer.lua - dl.nn's transformer layers and per-token loss options: construct, print, reject bad arguments by name
local dl = require "dlbench"
local nn = dl.nn

test("attention and positional embedding construct and print", function ()
  local a = nn.MultiheadAttention(16, 4)
  assert(tostring(a) == "MultiheadAttention(16, 4)", tostring(a))
  local c = nn.MultiheadAttention(16, 4, { causal = true, dropout = 0, bias = false, batch_first = true })
  assert(tostring(c):find("causal") and tostring(c):find("bias=false"), tostring(c))
  assert(tostring(nn.PositionalEmbedding(64, 16)) == "PositionalEmbedding(64, 16)")
  local named = nn.MultiheadAttention(8, 2, { name = "attn" })
  assert(tostring(named):find("MultiheadAttention"))
end)

test("a pre-norm transformer block composes", function ()
  local d = 16
  local block = nn.Sequential {
    nn.Residual(nn.Sequential { nn.LayerNorm(d), nn.MultiheadAttention(d, 4, { causal = true }) }),
    nn.Residual(nn.Sequential { nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d) }),
  }
  local gpt = nn.Sequential { nn.Embedding(65, d), nn.PositionalEmbedding(32, d), block,
                              nn.LayerNorm(d), nn.Linear(d, 65) }
  assert(tostring(gpt):find("5 layers"), tostring(gpt))
end)

test("bad arguments name the layer", function ()
  expect_error("MultiheadAttention(10, 3): heads must be positive and divide d_model",
               nn.MultiheadAttention, 10, 3)
  expect_error("bad argument #2 (num_heads) to nn.MultiheadAttention", nn.MultiheadAttention, 8, 0)
  expect_error("dropout = 0.1 on the attention weights is not supported", nn.MultiheadAttention, 8, 2,
               { dropout = 0.1 })
  expect_error("unknown option 'casual'", nn.MultiheadAttention, 8, 2, { casual = true })
  expect_error("bad field 'batch_first' to nn.MultiheadAttention", nn.MultiheadAttention, 8, 2,
               { batch_first = false })
  expect_error("bad argument #1 (max_len) to nn.PositionalEmbedding", nn.PositionalEmbedding, 0, 8)
end)

test("per-token cross-entropy options", function ()
  local l = nn.CrossEntropy { ignore_index = -1, smoothing = 0.1 }
  assert(tostring(l):find("ignore_index = %-1"), tostring(l))
  assert(tostring(nn.CrossEntropy { label_smoothing = 0.2 }):find("smoothing"))
  assert(tostring(nn.CrossEntropy { ignore_index = -100 }):find("-100", 1, true))
  expect_error("bad field 'label_smoothing' to nn.CrossEntropy", nn.CrossEntropy, { label_smoothing = 1 })
  expect_error("bad field 'ignore_index' to nn.CrossEntropy", nn.CrossEntropy, { ignore_index = 0.5 })
end)
