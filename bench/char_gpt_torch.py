#!/usr/bin/env python3
"""char_gpt_torch.py - scripts/char_gpt.lua in PyTorch, the peer for the validation-loss check.

The same model (token embedding + learned positions, pre-norm blocks of causal
multi-head attention and a GELU MLP of 4d, final LayerNorm, linear head), the
same initialisation rules, the same data windows (the training windows at the
positions dl.data.text draws: Philox4x32-10 keyed by (seed, DL_STREAM_SHUFFLE +
1), counter (epoch, window index), mapped onto [0, tokens - T); validation
over the fixed windows i * T of /test), the same batch, steps, AdamW settings
(weight decay on weights and embeddings only, as dlbench's parameters say),
cosine schedule with linear warmup (dl_schedule_lr) and gradient clipping.
Prints the validation loss (nats per token) after each epoch and at the end
one line `val_loss X` to compare with dlbench's run of the same settings:

  dlbench run scripts/char_gpt.lua epochs=1 limit=16000
  python3 bench/char_gpt_torch.py --data data/fortunes.h5 --epochs 1 --limit 16000

Needs python3-torch and python3-h5py (Debian). Weights are random on both
sides (the same rules, not the same draws), so the two losses agree within
the run-to-run spread, not bit for bit.
"""
import argparse
import math
import time

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

M32 = 0xFFFFFFFF
DL_STREAM_SHUFFLE = 3 << 20


def philox(seed, stream, counter, index):
    """dl_rng_philox (engine/base/rng.h): four 32-bit words."""
    k0 = (seed & M32) ^ ((stream * 0x9E3779B9) & M32)
    k1 = ((seed >> 32) & M32) ^ ((stream >> 32) & M32) ^ (stream & M32)
    c = [index & M32, (index >> 32) & M32, counter & M32, (counter >> 32) & M32]
    for _ in range(10):
        p0 = 0xD2511F53 * c[0]
        p1 = 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & M32, (p0 >> 32) ^ c[3] ^ k1, p0 & M32]
        k0 = (k0 + 0x9E3779B9) & M32
        k1 = (k1 + 0xBB67AE85) & M32
    return c


def position(seed, epoch, k, tokens, context):
    """dl_text_position (engine/data/text.c)."""
    r = philox(seed, DL_STREAM_SHUFFLE + 1, epoch, k)
    bits = (r[0] << 32) | r[1]
    return (bits * (tokens - context)) >> 64


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d, eps=1e-5)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d, eps=1e-5)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class CharGPT(nn.Module):
    def __init__(self, vocab, d, heads, layers, context):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)  # N(0, 1), as dlbench's Embedding
        self.pos = nn.Parameter(torch.randn(context, d) * 0.02)  # PositionalEmbedding
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d, eps=1e-5)
        self.head = nn.Linear(d, vocab)
        self.register_buffer("mask", torch.triu(torch.ones(context, context, dtype=torch.bool), 1))

    def forward(self, ids):
        x = self.tok(ids) + self.pos[: ids.shape[1]]
        for b in self.blocks:
            x = b(x, self.mask)
        return self.head(self.ln(x))


def decay_groups(model, wd):
    """dlbench decays Linear, attention and embedding weights; not biases or norms."""
    decay, keep = [], []
    for name, p in model.named_parameters():
        is_norm = name.startswith("ln") or ".ln" in name
        (keep if name.endswith("bias") or is_norm else decay).append(p)
    return [{"params": decay, "weight_decay": wd}, {"params": keep, "weight_decay": 0.0}]


def schedule(step, total, base, warmup, min_lr):
    """dl_schedule_lr, DL_SCHED_COSINE."""
    if step < warmup:
        return base * (step + 1) / warmup
    span = total - warmup
    if span <= 0:
        return base
    frac = min(max((step - warmup) / span, 0.0), 1.0)
    return min_lr + (base - min_lr) * 0.5 * (1 + math.cos(math.pi * frac))


def windows(tokens, starts, context):
    idx = starts[:, None] + np.arange(context + 1)[None, :]
    w = torch.from_numpy(tokens[idx].astype(np.int64))
    return w[:, :-1], w[:, 1:]


@torch.no_grad()
def evaluate(model, val, a):
    model.eval()
    n = min(a.val_limit, (len(val) - 1) // a.context) if a.val_limit else (len(val) - 1) // a.context
    total, count = 0.0, 0
    for b in range(0, n, a.batch):
        starts = np.arange(b, min(b + a.batch, n)) * a.context
        x, y = windows(val, starts, a.context)
        logits = model(x)
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                                 reduction="sum").item()
        count += y.numel()
    model.train()
    return total / count


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default="data/fortunes.h5")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--limit", type=int, default=32000, help="training windows per epoch")
    p.add_argument("--val-limit", type=int, default=2048)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1337, help="the run's seed (windows; init here)")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    with h5py.File(a.data, "r") as f:
        vocab = int(f.attrs["vocab_size"])
        train = f["/train/tokens"][()]
        val = f["/test/tokens"][()]
    model = CharGPT(vocab, a.d, a.heads, a.layers, a.context)
    opt = torch.optim.AdamW(decay_groups(model, a.weight_decay), lr=a.lr, betas=(0.9, 0.99),
                            eps=1e-8)
    steps_per_epoch = (a.limit + a.batch - 1) // a.batch
    total = steps_per_epoch * a.epochs
    step, t0 = 0, time.time()
    for epoch in range(a.epochs):
        for s in range(steps_per_epoch):
            ks = range(s * a.batch, min((s + 1) * a.batch, a.limit))
            starts = np.array([position(a.seed, epoch, k, len(train), a.context) for k in ks])
            x, y = windows(train, starts, a.context)
            for g in opt.param_groups:
                g["lr"] = schedule(step, total, a.lr, a.warmup, a.min_lr)
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if a.clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
            opt.step()
            step += 1
        v = evaluate(model, val, a)
        print(f"epoch {epoch + 1}/{a.epochs}: step {step}  train_loss(last batch) {loss.item():.4f}  "
              f"val_loss {v:.4f}  ({time.time() - t0:.1f} s)", flush=True)
    print(f"val_loss {v:.4f}")


if __name__ == "__main__":
    main()
