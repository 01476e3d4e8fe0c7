#!/usr/bin/python3
"""bench_torch.py - the PyTorch peer of bench_train.c: same models, batches, optimizers and step counts

Run with Debian's interpreter (/usr/bin/python3, which has python3-torch):

    bench_torch.py --omp N --blas N [--torch-threads N] [--passive] [--setup NAME]
                   [--model NAME|all] [--warmup W] [--steps S] [--reps R]

The thread pools are fixed when torch is imported, so OMP_NUM_THREADS,
OPENBLAS_NUM_THREADS (and OMP_WAIT_POLICY with --passive) are set in the
environment before the import; torch.set_num_threads follows. One thread
set-up per process: bench/run.sh runs several and keeps PyTorch's best.

Prints, per model, the best of R windows of S steps after W warm-up steps
(each window cut short after 1.5 s, as in bench_train.c):
    torch <model> threads=T setup=NAME samples_per_s=X median=X
(char-gpt adds tokens_per_s=X, samples/s x its 64-token context.)

resnet is the small ResNet of scripts/resnet_fmnist.lua on Fashion-MNIST;
char-gpt the model of scripts/char_gpt.lua (pre-norm blocks:
nn.TransformerEncoderLayer with norm_first=True, GELU, dropout 0 and a
causal mask) on random token windows held in memory, as bench_train.c.
Exits 3 when torch cannot be imported.
"""
import argparse
import gzip
import os
import sys
import time

FMNIST = "/usr/share/datasets/fashion-mnist"
BATCH = 128
WINDOW_CAP_S = 1.5  # as bench_train.c
# char-gpt, as bench_models.h: vocabulary, context, width, heads, blocks
GPT_VOCAB, GPT_CONTEXT, GPT_D, GPT_HEADS, GPT_LAYERS = 96, 64, 128, 4, 4
TOKEN_WINDOWS = 4096

# name: (optimizer, lr, precision, warmup, steps, batch) -- as in bench_train.c
MODELS = {
    "mlp-sgd": ("sgd", 0.05, "f32", 30, 200, BATCH),
    "mlp-adam": ("adam", 1e-3, "f32", 30, 200, BATCH),
    "tiny-mlp": ("sgd", 0.05, "f32", 300, 3000, BATCH),
    "cnn": ("sgd", 0.01, "f32", 5, 40, BATCH),
    "mlp-bf16": ("sgd", 0.05, "bf16", 30, 300, BATCH),
    "cnn-user": ("adamw-plain", 1e-3, "f32", 5, 40, 64),
    "cnn-user-bf16": ("adamw-plain", 1e-3, "bf16", 5, 40, 64),
    "resnet": ("nesterov", 0.1, "f32", 2, 6, BATCH),
    "resnet-bf16": ("nesterov", 0.1, "bf16", 2, 6, BATCH),
    "char-gpt": ("adamw", 1e-3, "f32", 2, 8, 32),
    "mobilenet": ("sgd", 0.05, "f32", 2, 10, 64),
    "mobilenet-bf16": ("sgd", 0.05, "bf16", 2, 10, 64),
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--omp", type=int, default=1, help="OMP_NUM_THREADS")
    p.add_argument("--blas", type=int, default=1, help="OPENBLAS_NUM_THREADS")
    p.add_argument("--torch-threads", type=int, default=0,
                   help="torch.set_num_threads (default: --omp)")
    p.add_argument("--passive", action="store_true", help="OMP_WAIT_POLICY=PASSIVE")
    p.add_argument("--setup", default=None, help="label printed with the results")
    p.add_argument("--threads", type=int, default=0,
                   help="thread count reported (default: max of --omp and --blas)")
    p.add_argument("--model", default="all")
    p.add_argument("--warmup", type=int, default=-1)
    p.add_argument("--steps", type=int, default=-1)
    p.add_argument("--reps", type=int, default=3)
    return p.parse_args()


def read_idx(path):
    import numpy as np
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def build_resnet(nn):
    """scripts/resnet_fmnist.lua at width 16 (bench_build_resnet)."""
    def conv_bn(cin, cout, k, stride):
        return [nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False),
                nn.BatchNorm2d(cout)]

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.body = nn.Sequential(*conv_bn(cin, cout, 3, stride), nn.ReLU(),
                                      *conv_bn(cout, cout, 3, 1))
            self.shortcut = (nn.Sequential(*conv_bn(cin, cout, 1, stride))
                             if stride != 1 or cin != cout else nn.Identity())
            self.relu = nn.ReLU()

        def forward(self, x):
            return self.relu(self.body(x) + self.shortcut(x))

    layers, cin = [*conv_bn(1, 16, 3, 1), nn.ReLU()], 16
    for stage in range(3):
        for b in range(2):
            cout = 16 << stage
            layers.append(Block(cin, cout, 2 if stage > 0 and b == 0 else 1))
            cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 10)]
    return nn.Sequential(*layers)


def build_mobilenet(nn):
    """MobileNet v1 blocks on 28x28 (bench_build_mobilenet)."""
    def block(cin, cout, stride):
        return [nn.Conv2d(cin, cin, 3, stride=stride, padding=1, groups=cin, bias=False),
                nn.BatchNorm2d(cin), nn.ReLU(),
                nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]

    layers = [nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU()]
    for cin, cout, stride in ((32, 64, 1), (64, 128, 2), (128, 128, 1), (128, 256, 2),
                              (256, 256, 1)):
        layers += block(cin, cout, stride)
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 10)]
    return nn.Sequential(*layers)


def build_char_gpt(torch, nn):
    """scripts/char_gpt.lua (bench_build_char_gpt): token and learned position
    embeddings, pre-norm causal blocks, final LayerNorm, linear head."""
    class CharGPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(GPT_VOCAB, GPT_D)
            self.pos = nn.Parameter(torch.zeros(GPT_CONTEXT, GPT_D))
            self.blocks = nn.ModuleList(
                nn.TransformerEncoderLayer(GPT_D, GPT_HEADS, 4 * GPT_D, dropout=0.0,
                                           activation="gelu", batch_first=True,
                                           norm_first=True)
                for _ in range(GPT_LAYERS))
            self.norm = nn.LayerNorm(GPT_D)
            self.head = nn.Linear(GPT_D, GPT_VOCAB)
            self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(
                GPT_CONTEXT), persistent=False)

        def forward(self, ids):
            h = self.tok(ids) + self.pos[:ids.shape[1]]
            for blk in self.blocks:
                h = blk(h, src_mask=self.mask)  # torch 1.13: no is_causal
            return self.head(self.norm(h))

    return CharGPT()


def build_user_cnn(nn):
    """A CNN as a user writes it (bench_build_user_cnn)."""
    class Residual(nn.Module):
        def __init__(self, block):
            super().__init__()
            self.block = block

        def forward(self, x):
            return x + self.block(x)

    def cbg(cin, cout, gelu=True):
        layers = [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout)]
        return layers + ([nn.GELU()] if gelu else [])

    return nn.Sequential(
        *cbg(1, 16), Residual(nn.Sequential(*cbg(16, 16), *cbg(16, 16, False))),
        nn.GELU(), nn.MaxPool2d(2), *cbg(16, 32), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.25), nn.Linear(32 * 7 * 7, 128), nn.GELU(),
        nn.Dropout(0.25), nn.Linear(128, 10))


def build(name, torch, nn):
    name = name.replace("-bf16", "") if name != "mlp-bf16" else name
    if name == "cnn-user":
        return build_user_cnn(nn)
    if name == "resnet":
        return build_resnet(nn)
    if name == "mobilenet":
        return build_mobilenet(nn)
    if name == "char-gpt":
        return build_char_gpt(torch, nn)
    if name == "tiny-mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 10))
    if name == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(1600, 128), nn.ReLU(), nn.Linear(128, 10))
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(),
                         nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))


def make_optimizer(torch, opt_kind, lr, params):
    if opt_kind == "adam":
        return torch.optim.Adam(params, lr=lr)
    if opt_kind == "adamw-plain":  # cnn-user
        return torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    if opt_kind == "adamw":  # char_gpt.lua
        return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.99), weight_decay=0.1)
    if opt_kind == "nesterov":  # resnet_fmnist.lua
        return torch.optim.SGD(params, lr=lr, momentum=0.9, nesterov=True, weight_decay=5e-4)
    return torch.optim.SGD(params, lr=lr, momentum=0.9)


def token_windows(torch):
    """Random next-token windows: x [N, 64] ids, y [N, 64] the following ids."""
    gen = torch.Generator().manual_seed(1)
    seq = torch.randint(0, GPT_VOCAB, (TOKEN_WINDOWS, GPT_CONTEXT + 1), generator=gen)
    return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()


def bench(torch, name, x_all, y_all, warmup, steps, reps):
    import contextlib
    nn, F = torch.nn, torch.nn.functional
    opt_kind, lr, prec, _, _, batch = MODELS[name]
    torch.manual_seed(1)
    model = build(name, torch, nn)
    opt = make_optimizer(torch, opt_kind, lr, model.parameters())
    clip = 1.0 if name == "char-gpt" else 0.0  # char_gpt.lua's clip = 1.0
    n = x_all.shape[0]
    per_epoch = n // batch  # drop_last, as bench_train.c
    gen = torch.Generator().manual_seed(1)
    state = {"perm": torch.randperm(n, generator=gen), "i": 0}

    def step():
        if state["i"] == per_epoch:
            state["perm"], state["i"] = torch.randperm(n, generator=gen), 0
        idx = state["perm"][state["i"] * batch:(state["i"] + 1) * batch]
        state["i"] += 1
        x, y = x_all[idx], y_all[idx]
        opt.zero_grad(set_to_none=True)
        ctx = (torch.autocast("cpu", dtype=torch.bfloat16) if prec == "bf16"
               else contextlib.nullcontext())
        with ctx:
            out = model(x)
        loss = F.cross_entropy(out.float().flatten(0, -2), y.flatten())
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()

    def window(count):
        # count steps or WINDOW_CAP_S seconds, whichever ends first
        t0 = time.perf_counter()
        n, dt = 0, 0.0
        while n < count and (n < 1 or dt < WINDOW_CAP_S):
            step()
            n += 1
            dt = time.perf_counter() - t0
        return n * batch / dt if n else 0.0

    window(warmup)
    rates = [window(steps) for _ in range(reps)]
    rates.sort()
    return rates[-1], rates[len(rates) // 2]


def main():
    a = parse_args()
    # before torch (and its OpenMP and OpenBLAS) is loaded
    os.environ["OMP_NUM_THREADS"] = str(a.omp)
    os.environ["OPENBLAS_NUM_THREADS"] = str(a.blas)
    os.environ["MKL_NUM_THREADS"] = str(a.omp)
    if a.passive:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    try:
        import torch
    except ImportError as e:
        print(f"bench_torch: torch not available ({e})", file=sys.stderr)
        return 3
    torch.set_num_threads(a.torch_threads or a.omp)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    threads = a.threads or max(a.omp, a.blas)
    setup = a.setup or f"omp{a.omp}-blas{a.blas}" + ("-passive" if a.passive else "")
    print(f"# torch {torch.__version__}, setup {setup}: torch.get_num_threads()="
          f"{torch.get_num_threads()}", flush=True)

    images = read_idx(os.path.join(FMNIST, "train-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(FMNIST, "train-labels-idx1-ubyte.gz"))
    x_all = torch.from_numpy(images.copy()).float().div_(255.0).unsqueeze(1)  # [N, 1, 28, 28]
    y_all = torch.from_numpy(labels.astype("int64"))

    names = list(MODELS) if a.model == "all" else [a.model]
    for name in names:
        if name not in MODELS:
            print(f"bench_torch: unknown model {name}; models: {' '.join(MODELS)}",
                  file=sys.stderr)
            return 2
        _, _, _, warmup, steps, batch = MODELS[name]
        x, y = (token_windows(torch) if name == "char-gpt" else (x_all, y_all))
        best, med = bench(torch, name, x, y,
                          a.warmup if a.warmup >= 0 else warmup,
                          a.steps if a.steps > 0 else steps, a.reps)
        extra = (f" tokens_per_s={best * GPT_CONTEXT:.0f} batch={batch}"
                 if name == "char-gpt" else "")
        print(f"torch {name} threads={threads} setup={setup} samples_per_s={best:.0f} "
              f"median={med:.0f}{extra}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
