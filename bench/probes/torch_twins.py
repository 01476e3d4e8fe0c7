#!/usr/bin/env python3
"""torch_twins.py - the PyTorch peers of the probes in bench/probes (and of
scripts/resnet_fmnist.lua at any batch): the same layers, batch and
optimizer on random inputs of the same shape; prints the best of three
windows of 10 steps after 5 warm-up steps, in ms a step.

usage: python3 bench/probes/torch_twins.py MODEL [THREADS]
  MODEL: dilated, grp8, grp32, mobilenet, rgb96, resnet (batch 128) or
  resnetN (batch N)
"""
import sys
import time

import torch
import torch.nn as nn

which = sys.argv[1]
torch.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else 1)


def cbr(ci, co, k, s=1, g=1):
    return [nn.Conv2d(ci, co, k, stride=s, padding=k // 2, groups=g, bias=False),
            nn.BatchNorm2d(co), nn.ReLU()]


class Block(nn.Module):
    """scripts/resnet_fmnist.lua's basic block"""

    def __init__(self, ci, co, st):
        super().__init__()
        self.b = nn.Sequential(nn.Conv2d(ci, co, 3, st, 1, bias=False), nn.BatchNorm2d(co), nn.ReLU(),
                               nn.Conv2d(co, co, 3, 1, 1, bias=False), nn.BatchNorm2d(co))
        self.sc = (nn.Sequential(nn.Conv2d(ci, co, 1, st, bias=False), nn.BatchNorm2d(co))
                   if st != 1 or ci != co else nn.Identity())
        self.r = nn.ReLU()

    def forward(self, x):
        return self.r(self.b(x) + self.sc(x))


shape, classes = (1, 28, 28), 10
if which == "dilated":
    B = 32
    m = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(),
                      nn.Conv2d(32, 32, 3, padding=2, dilation=2), nn.BatchNorm2d(32), nn.ReLU(),
                      nn.Conv2d(32, 32, 3, padding=4, dilation=4), nn.BatchNorm2d(32), nn.ReLU(),
                      nn.Conv2d(32, 64, 4, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
                      nn.Conv2d(64, 64, 4, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
elif which.startswith("grp"):
    B, g = 32, int(which[3:])
    m = nn.Sequential(*cbr(1, 64, 3), *cbr(64, 64, 3, 1, g), *cbr(64, 128, 1), nn.MaxPool2d(2),
                      *cbr(128, 128, 3, 1, g), *cbr(128, 128, 1),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10))
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
elif which == "mobilenet":
    B = 64
    L = cbr(1, 32, 3)
    for ci, co, s in [(32, 64, 1), (64, 128, 2), (128, 128, 1), (128, 256, 2), (256, 256, 1)]:
        L += cbr(ci, ci, 3, s, ci) + cbr(ci, co, 1)
    m = nn.Sequential(*L, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 10))
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
elif which == "rgb96":
    B, shape, classes = 16, (3, 96, 96), 2
    L = cbr(3, 32, 3, 2) + cbr(32, 32, 3) + cbr(32, 64, 3) + [nn.MaxPool2d(3, 2, 1)]
    L += cbr(64, 128, 3) + cbr(128, 128, 3) + [nn.MaxPool2d(2)] + cbr(128, 256, 3)
    m = nn.Sequential(*L, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(256, 2))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
elif which.startswith("resnet"):
    B = int(which[6:] or 128)
    L = [nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU()]
    ci = 16
    for stage, co in enumerate([16, 32, 64]):
        for b in range(2):
            L.append(Block(ci, co, 2 if (stage > 0 and b == 0) else 1))
            ci = co
    m = nn.Sequential(*L, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
else:
    sys.exit(f"torch_twins.py: unknown model {which!r}")

x = torch.randn(B, *shape)
y = torch.randint(0, classes, (B,))
lossf = nn.CrossEntropyLoss()


def step():
    opt.zero_grad()
    lossf(m(x), y).backward()
    opt.step()


for _ in range(5):
    step()
best = float("inf")
for _ in range(3):
    t = time.perf_counter()
    for _ in range(10):
        step()
    best = min(best, (time.perf_counter() - t) / 10)
print(f"torch {which} threads {torch.get_num_threads()}: {best * 1e3:.1f} ms/step")
