#!/usr/bin/env python3
# resnet_block.py - golden values from PyTorch for tests/test_nn.c: a grouped
# convolution, a depthwise one and a ResNet basic block with a projection
# shortcut, each with fixed inputs and weights; the outputs and the gradients
# of L = sum(r * y) with respect to the input and every parameter.
# Writes tests/golden/resnet_block.txt (run from the repository root:
#   python3 tests/golden/resnet_block.py).
# Format: "case NAME", then "tensor NAME COUNT" lines each followed by COUNT
# values; parameters are listed in dlbench's registration order (p0, p1, ...)
# with their gradients (g0, g1, ...).
import os
import torch
import torch.nn as nn

torch.manual_seed(15)
torch.set_default_dtype(torch.float64)  # the reference in double; the C test runs f32


def emit(out, name, t):
    v = t.detach().reshape(-1).tolist()
    out.write("tensor %s %d\n" % (name, len(v)))
    for i in range(0, len(v), 8):
        out.write(" ".join("%.10g" % x for x in v[i:i + 8]) + "\n")


def run_case(out, name, model, params, x_shape, meta):
    x = torch.randn(*x_shape, requires_grad=True)
    y = model(x)
    r = torch.randn_like(y)
    (r * y).sum().backward()
    out.write("case %s\n" % name)
    out.write("meta %s\n" % " ".join(str(m) for m in meta))
    emit(out, "x", x)
    emit(out, "r", r)
    for i, p in enumerate(params):
        emit(out, "p%d" % i, p)
    emit(out, "y", y)
    emit(out, "dx", x.grad)
    for i, p in enumerate(params):
        emit(out, "g%d" % i, p.grad)


def conv_case(out, name, n, c, h, w, k, ks, stride, pad, groups, dilation):
    conv = nn.Conv2d(c, k, ks, stride=stride, padding=pad, groups=groups, dilation=dilation)
    run_case(out, name, conv, [conv.weight, conv.bias], (n, c, h, w),
             [n, c, h, w, k, ks, stride, pad, groups, dilation])


class BasicBlock(nn.Module):
    """relu(bn2(conv2(relu(bn1(conv1(x))))) + bn_s(conv_s(x)))"""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.conv_s = nn.Conv2d(cin, cout, 1, stride=stride, bias=False)
        self.bn_s = nn.BatchNorm2d(cout)
        for bn in (self.bn1, self.bn2, self.bn_s):  # not the trivial 1 and 0
            nn.init.uniform_(bn.weight, 0.5, 1.5)
            nn.init.uniform_(bn.bias, -0.5, 0.5)

    def forward(self, x):
        b = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(b + self.bn_s(self.conv_s(x)))

    def params(self):  # dlbench's order: the block's layers, then the shortcut's
        return [self.conv1.weight, self.bn1.weight, self.bn1.bias, self.conv2.weight,
                self.bn2.weight, self.bn2.bias, self.conv_s.weight, self.bn_s.weight,
                self.bn_s.bias]


def main():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "resnet_block.txt")
    with open(path + ".tmp", "w") as out:
        out.write("# resnet_block.txt - written by tests/golden/resnet_block.py (torch %s)\n"
                  % torch.__version__)
        conv_case(out, "grouped_conv", 2, 6, 7, 6, 4, 3, 1, 1, 2, 1)
        conv_case(out, "depthwise_conv", 2, 4, 8, 7, 4, 3, 2, 1, 4, 1)
        conv_case(out, "dilated_conv", 1, 3, 9, 8, 6, 3, 1, 2, 3, 2)
        blk = BasicBlock(4, 8, 2).train()
        run_case(out, "basic_block", blk, blk.params(), (3, 4, 8, 8), [3, 4, 8, 8, 8, 2])
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
