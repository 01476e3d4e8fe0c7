-- resnet.lua - dl.nn's ResNet vocabulary: Residual with a shortcut, Conv2d's PyTorch options
-- (groups, dilation, padding), AdaptiveAvgPool2d, SiLU and Identity; bad arguments by name
local dl = require "dlbench"
local nn = dl.nn

test("the new layers construct and print", function ()
  local cases = {
    { nn.Conv2d(4, 8, 3, { stride = 2, padding = 1, bias = false }), "Conv2d(4, 8, 3, stride=2, pad=1)" },
    { nn.Conv2d(4, 8, 3, { groups = 2 }), "groups=2" },
    { nn.Conv2d(8, 8, 3, { groups = 8, padding = 1 }), "Conv2d(8, 8, 3, stride=1, pad=1, groups=8)" },
    { nn.Conv2d(2, 2, 3, { dilation = 2, pad = 2 }), "pad=2, dilation=2" },
    { nn.Conv2d(1, 4, 3, 2, 1), "stride=2, pad=1" },
    { nn.AdaptiveAvgPool2d(1), "AdaptiveAvgPool2d(1)" },
    { nn.AdaptiveAvgPool2d { 2, 3 }, "AdaptiveAvgPool2d((2, 3))" },
    { nn.GlobalAvgPool2d(), "AdaptiveAvgPool2d(1)" },
    { nn.SiLU(), "SiLU" }, { nn.Identity(), "Identity" },
  }
  for i, c in ipairs(cases) do
    local text = tostring(c[1])
    assert(text:find(c[2], 1, true), ("case %d: %s does not mention %s"):format(i, text, c[2]))
  end
end)

test("Residual takes a block and a shortcut", function ()
  local block = nn.Sequential { nn.Conv2d(4, 8, 3, { stride = 2, padding = 1 }), nn.BatchNorm2d(8) }
  local sc = nn.Conv2d(4, 8, 1, { stride = 2 })
  local r = nn.Residual(block, { shortcut = sc, name = "down" })
  assert(tostring(r):find("shortcut=Conv2d(4, 8, 1", 1, true), tostring(r))
  assert(tostring(sc):find("in a container"), tostring(sc))
  assert(tostring(nn.Residual(nn.Identity())) == "Residual(Identity())")
  expect_error("nn.Residual: shortcut Conv2d(4, 8, 1, stride=2, pad=0) (in a container) is already part",
               nn.Residual, nn.Identity(), { shortcut = sc })
  local same = nn.Identity()
  expect_error("the block and the shortcut must be different layers", nn.Residual, same, { shortcut = same })
  expect_error("bad field 'shortcut' to nn.Residual: expected a layer", nn.Residual, nn.Identity(), { shortcut = 3 })
  expect_error("nn.Residual: unknown option 'short'", nn.Residual, nn.Identity(), { short = nn.Identity() })
end)

test("bad arguments name the layer and what was expected", function ()
  expect_error("nn.Conv2d: Conv2d(6, 4, 3, groups=4): in_channels 6 and out_channels 4 must both be divisible by groups 4",
               nn.Conv2d, 6, 4, 3, { groups = 4 })
  expect_error("bad field 'groups' to nn.Conv2d", nn.Conv2d, 4, 4, 3, { groups = 0 })
  expect_error("bad field 'dilation' to nn.Conv2d", nn.Conv2d, 4, 4, 3, { dilation = 0 })
  expect_error("nn.Conv2d: unknown option 'group'", nn.Conv2d, 4, 4, 3, { group = 2 })
  expect_error("bad argument #1 (output_size) to nn.AdaptiveAvgPool2d", nn.AdaptiveAvgPool2d, 0)
  expect_error("bad argument #1 (output_size) to nn.AdaptiveAvgPool2d", nn.AdaptiveAvgPool2d, { 2, 0 })
  expect_error("bad argument #1 (output_size) to nn.AdaptiveAvgPool2d", nn.AdaptiveAvgPool2d)
  expect_error("nn.SiLU: unknown option 'inplace'", nn.SiLU, { inplace = true })
end)
