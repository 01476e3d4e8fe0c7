"""bench_tune.py - the Optuna peer of bench_tune.c: the same problems, budgets, seeds and timing.

Run with Debian's /usr/bin/python3 (python3-optuna). Prints the same result
lines as bench_tune.c with impl=optuna; bench_tune runs it and prints the
table. Problems (all minimised), as written down in bench_tune.c:
  hartmann6    6-D Hartmann on [0, 1]^6 (minimum -3.32237)
  rosenbrock5  sum_{i<5} 100 (x_{i+1} - x_i^2)^2 + (1 - x_i)^2 on [-5, 10]^5
  mixed        opt in {sgd, adam, rmsprop}, lr log-uniform [1e-5, 1e-1], layers int [1, 8];
               u = log10(lr) - m[opt]: u^2 + 0.1 (layers-5)^2 + 0.05 u (layers-5) + c[opt],
               m = (-1.5, -3.3, -2.7), c = (0.3, 0, 0.15)
Sampler time per trial: ask + suggestions + tell, objective excluded, in
memory, averaged over a whole study of 60 or 200 trials on hartmann6
(median of 3 seeds).
"""
import argparse
import math
import statistics
import sys
import time
import warnings

try:
    import optuna
except ImportError as e:  # the table then says "-"
    print(f"# optuna not importable: {e}", file=sys.stderr)
    sys.exit(3)

optuna.logging.set_verbosity(optuna.logging.ERROR)
warnings.filterwarnings("ignore")

ALPHA = [1.0, 1.2, 3.0, 3.2]
A = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
     [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
P = [[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
     [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]]


def hartmann6(x):
    f = 0.0
    for i in range(4):
        e = sum(A[i][j] * (x[j] - 1e-4 * P[i][j]) ** 2 for j in range(6))
        f -= ALPHA[i] * math.exp(-e)
    return f


def rosenbrock5(x):
    return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(4))


def mixed(opt, lr, layers):
    m = {"sgd": -1.5, "adam": -3.3, "rmsprop": -2.7}[opt]
    c = {"sgd": 0.3, "adam": 0.0, "rmsprop": 0.15}[opt]
    u = math.log10(lr) - m
    l = layers - 5
    return u * u + 0.1 * l * l + 0.05 * u * l + c


def evaluate(problem, trial):
    if problem == "hartmann6":
        return hartmann6([trial.suggest_float(f"x{j}", 0, 1) for j in range(6)])
    if problem == "rosenbrock5":
        return rosenbrock5([trial.suggest_float(f"x{j}", -5, 10) for j in range(5)])
    opt = trial.suggest_categorical("opt", ["sgd", "adam", "rmsprop"])
    lr = trial.suggest_float("lr", 1e-5, 1e-1, log=True)
    layers = trial.suggest_int("layers", 1, 8)
    return mixed(opt, lr, layers)


def make_sampler(name, seed):
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    return optuna.samplers.RandomSampler(seed=seed)


def run_study(problem, sampler, seed, n):
    """Best-so-far after each trial and the sampler's seconds (objective excluded)."""
    study = optuna.create_study(direction="minimize", sampler=make_sampler(sampler, seed))
    best, b, spent = [], math.inf, 0.0
    for _ in range(n):
        t0 = time.perf_counter()
        trial = study.ask()
        # the suggestions are the sampler's work; the objective is cheap next to them
        f = evaluate(problem, trial)
        t1 = time.perf_counter()
        study.tell(trial, f)
        spent += (t1 - t0) + (time.perf_counter() - t1)
        b = min(b, f)
        best.append(b)
    return best, spent


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=10)
    args = ap.parse_args()
    for problem in ("hartmann6", "rosenbrock5", "mixed"):
        for sampler in ("random", "tpe"):
            b20, b60 = [], []
            for seed in range(args.seeds):
                best, _ = run_study(problem, sampler, seed, 60)
                b20.append(best[19])
                b60.append(best[59])
            print(f"tune impl=optuna problem={problem} sampler={sampler} "
                  f"best20={statistics.median(b20):.6g} best60={statistics.median(b60):.6g} "
                  f"seeds={args.seeds}", flush=True)
    for sampler in ("random", "tpe"):
        for n in (60, 200):
            ms = [1e3 * run_study("hartmann6", sampler, r, n)[1] / n for r in range(3)]
            print(f"tune-time impl=optuna sampler={sampler} trials={n} "
                  f"ms_per_trial={statistics.median(ms):.4f}", flush=True)


if __name__ == "__main__":
    main()
