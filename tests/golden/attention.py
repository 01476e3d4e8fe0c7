#!/usr/bin/python3
# attention.py - writes attention.txt: PyTorch's nn.MultiheadAttention (batch_first, causal and
# not) and a pre-norm transformer block, with their weights, inputs, outputs and gradients, for
# tests/test_nn.c (test_attention_golden). Run: /usr/bin/python3 tests/golden/attention.py (python3-torch).
#
# Each case: a line "case NAME n T d heads causal block", then arrays as lines
# "NAME COUNT" followed by COUNT values, one per line: x [n, T, d], the parameters in
# dlbench's registration order, r [n, T, d] (the loss is sum(r * y)), y, dx, and the
# gradient of each parameter ("grad.<param>"). Computed in float64.
import os
import torch

torch.manual_seed(15)
torch.set_default_dtype(torch.float64)


def causal_mask(t):
    return torch.triu(torch.full((t, t), float("-inf")), diagonal=1)


class Block(torch.nn.Module):
    """LayerNorm -> MHA -> residual -> LayerNorm -> Linear 4d -> GELU -> Linear -> residual."""

    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(d)
        self.attn = torch.nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = torch.nn.LayerNorm(d)
        self.fc1 = torch.nn.Linear(d, 4 * d)
        self.fc2 = torch.nn.Linear(4 * d, d)

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))


def mha_params(m, prefix=""):
    return [(prefix + "in_proj_weight", m.in_proj_weight), (prefix + "in_proj_bias", m.in_proj_bias),
            (prefix + "out_proj.weight", m.out_proj.weight), (prefix + "out_proj.bias", m.out_proj.bias)]


def block_params(b):
    out = [("ln1.weight", b.ln1.weight), ("ln1.bias", b.ln1.bias)]
    out += mha_params(b.attn, "attn.")
    out += [("ln2.weight", b.ln2.weight), ("ln2.bias", b.ln2.bias), ("fc1.weight", b.fc1.weight),
            ("fc1.bias", b.fc1.bias), ("fc2.weight", b.fc2.weight), ("fc2.bias", b.fc2.bias)]
    return out


def write(f, name, t):
    v = t.detach().reshape(-1).tolist()
    f.write("%s %d\n" % (name, len(v)))
    f.write("".join("%.8g\n" % x for x in v))


def case(f, name, n, t, d, heads, causal, block):
    if block:
        mod = Block(d, heads)
        params = block_params(mod)
        with torch.no_grad():  # non-trivial norms and biases
            for pname, p in params:
                if "ln" in pname or "bias" in pname:
                    p.add_(0.1 * torch.randn_like(p))
    else:
        mod = torch.nn.MultiheadAttention(d, heads, batch_first=True)
        params = mha_params(mod)
        with torch.no_grad():
            for _, p in params:
                if p.dim() == 1:
                    p.copy_(0.1 * torch.randn_like(p))
    x = torch.randn(n, t, d, requires_grad=True)
    r = torch.randn(n, t, d)
    mask = causal_mask(t) if causal else None
    y = mod(x, mask) if block else mod(x, x, x, attn_mask=mask, need_weights=False)[0]
    (r * y).sum().backward()
    f.write("case %s %d %d %d %d %d %d\n" % (name, n, t, d, heads, int(causal), int(block)))
    write(f, "x", x)
    for pname, p in params:
        write(f, pname, p)
    write(f, "r", r)
    write(f, "y", y)
    write(f, "dx", x.grad)
    for pname, p in params:
        write(f, "grad." + pname, p.grad)


out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "attention.txt")
with open(out, "w") as f:
    f.write("# written by tests/golden/attention.py with torch %s\n" % torch.__version__)
    case(f, "mha", 2, 7, 16, 4, False, False)
    case(f, "mha_causal", 2, 37, 8, 2, True, False)  # 37 > one 32-query tile
    case(f, "block_causal", 2, 9, 16, 4, True, True)
