#!/usr/bin/env bash
# t_regression.sh - float features and float targets: an HDF5 file and a CSV (import --regression) train a linear model with MSE to numpy's lstsq solution
. "$(dirname "$0")/lib.sh"
test_init
PY=/usr/bin/python3
require_subcommand regression run

if ! "$PY" -c 'import h5py, numpy' 2>/dev/null; then
    skip regression "needs /usr/bin/python3 with h5py and numpy (python3-h5py, python3-numpy)"
    exit 0
fi

# r.h5: x f32 [N, 5], y f32 [N, 2] in /train and /test; r1.h5: y f32 [N];
# data.csv: two features and an integer-valued target column
"$PY" - "$OUT" <<'PYEOF' || { fail regression_setup "the python generator failed"; exit 1; }
import sys, h5py, numpy as np
out = sys.argv[1]
rng = np.random.default_rng(3)
N, F = 600, 5
X = rng.normal(size=(N, F)).astype(np.float32)
W = rng.normal(size=(F, 2))
Y = (X @ W + [0.5, -1.0] + 0.05 * rng.normal(size=(N, 2))).astype(np.float32)
for name, y in (("r.h5", Y), ("r1.h5", Y[:, 0])):
    with h5py.File(f"{out}/{name}", "w") as f:
        for g, sl in (("train", slice(0, 500)), ("test", slice(500, N))):
            f[f"{g}/x"] = X[sl]
            f[f"{g}/y"] = y[sl]
a, b = rng.uniform(-1, 1, 400), rng.uniform(-1, 1, 400)
t = np.rint(6 + 2 * a - 3 * b).astype(int)  # integers 1..11: classes unless --regression
with open(f"{out}/data.csv", "w") as f:
    f.write("a,b,target\n")
    for i in range(400):
        f.write(f"{a[i]:.6f},{b[i]:.6f},{t[i]}\n")
PYEOF

# script FILE K: a linear model of 5 (or 2) inputs and K outputs trained with MSE
script() {
    cat >"$OUT/$1.lua" <<EOF
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
return dl.experiment {
  name = "$1",
  data = dl.data.hdf5 { path = "$OUT/$2", train = "/train", val = "$4", shuffle = true },
  model = nn.Linear($3, $5),
  loss = nn.MSE(),
  optimizer = optim.SGD { lr = 0.05, momentum = 0.9 },
  schedule = optim.cosine {},
  batch = 25, epochs = 25, device = "cpu",
}
EOF
}

# lstsq RUNS H5 FEATURES: the trained Linear's weight and bias against numpy's
# least squares on the file's /train (read back from the checkpoint's layout)
lstsq() {
    "$PY" - "$@" <<'PYEOF'
import glob, sys, h5py, numpy as np
run = glob.glob(f"{sys.argv[1]}/*/checkpoint.h5")
assert len(run) == 1, run
ck = h5py.File(run[0], "r")
lay = {}
if isinstance(ck["params"], h5py.Group):  # format 2: a dataset per tensor
    for name in ck["params"]:
        lay[name.split(".")[-1]] = ck["params"][name][...].ravel()
else:  # format 1: one array and a layout
    p = ck["params"][:]
    for line in ck.attrs["layout"].decode().splitlines()[1:]:
        name, off, n = line.split()
        lay[name.split(".")[-1]] = p[int(off):int(off) + int(n)]
assert sorted(lay) == ["bias", "weight"], sorted(lay)
g = h5py.File(sys.argv[2], "r")["train"]
x, y = g["x"][:].astype(np.float64), g["y"][:].astype(np.float64)
assert g["y"].dtype == np.float32, g["y"].dtype
y = y.reshape(len(y), -1)
sol = np.linalg.lstsq(np.hstack([x, np.ones((len(x), 1))]), y, rcond=None)[0]
k = y.shape[1]
w, b = lay["weight"].reshape(k, -1), lay["bias"]
err = max(np.abs(w - sol[:-1].T).max(), np.abs(b - sol[-1]).max())
assert err < 0.02, f"largest difference {err:.4f} from lstsq\n{w}\n{sol[:-1].T}"
print(f"largest difference {err:.5f}")
PYEOF
}

for k in 2 1; do
    f=r.h5
    [ $k = 1 ] && f=r1.h5
    script reg$k "$f" 5 /test $k
    if run regression_h5_k$k 0 run "$OUT/reg$k.lua" --out "$OUT/runs$k"; then
        if msg=$(lstsq "$OUT/runs$k" "$OUT/$f" 2>&1); then
            pass regression_h5_lstsq_k$k
        else
            fail regression_h5_lstsq_k$k "$(echo "$msg" | tail -3)"
        fi
    fi
done

# CSV: integer targets are classes by default, f32 targets with --regression
if run regression_csv_classes 0 import "$OUT/data.csv" "$OUT/c.h5" --label target &&
    [ "$("$PY" -c 'import sys, h5py; print(h5py.File(sys.argv[1])["train/y"].dtype)' "$OUT/c.h5")" = int32 ]; then
    pass regression_csv_default_classes
else
    fail regression_csv_default_classes "integer targets without --regression are not i32 classes"
fi
if run regression_csv_import 0 import "$OUT/data.csv" "$OUT/csv.h5" --label target --regression --val-fraction 0.2; then
    script regcsv csv.h5 2 /val 1
    if run regression_csv_run 0 run "$OUT/regcsv.lua" --out "$OUT/runscsv"; then
        if msg=$(lstsq "$OUT/runscsv" "$OUT/csv.h5" 2>&1); then
            pass regression_csv_lstsq
        else
            fail regression_csv_lstsq "$(echo "$msg" | tail -3)"
        fi
    fi
fi
printf 'a,target\n1.5,x\n' >"$OUT/bad.csv"
if run regression_csv_bad 2 import "$OUT/bad.csv" "$OUT/bad.h5" --label target --regression &&
    grep -q 'bad.csv:2: target "x" is not a number (--regression)' "$OUT/regression_csv_bad.log"; then
    pass regression_csv_bad_target
else
    fail regression_csv_bad_target "$(cat "$OUT/regression_csv_bad.log" 2>/dev/null)"
fi
run regression_not_csv 2 import "$OUT/r.h5" "$OUT/x.h5" --regression &&
    grep -q -- "--regression applies to a CSV file" "$OUT/regression_not_csv.log" && pass regression_flag_csv_only ||
    fail regression_flag_csv_only "$(cat "$OUT/regression_not_csv.log")"
exit "$((${fails:-0} > 0))"
