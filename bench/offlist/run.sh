#!/bin/bash
# run.sh - models outside the zoo (bench/offlist/models.lua) against PyTorch
# (torch_peer.py), 1 and 2 threads, alternating, with their ratio: the
# check that the engine is fast on models nobody tuned it for.
#
# Writes a CIFAR-format file of random images (10000 train, 2000 test) and
# imports it with `dlbench import` into $BUILD/bench/offlist.h5 (once).
# dlbench's figure is the mean step of `dlbench profile` (20 steps after 5
# warm-up steps: the real training path, loader included); PyTorch's the
# best of three windows of 20 steps on batches in memory, at the better of
# one and t OpenBLAS threads.
#
# Environment: BUILD (build), OFFLIST_MODELS ("vgg mlp-ln lenet strided"), OFFLIST_THREADS ("1 2").
set -u
BUILD=${BUILD:-build}
PY=/usr/bin/python3
here=$(cd "$(dirname "$0")" && pwd)
data="$BUILD/bench/offlist.h5"
if [ ! -f "$data" ]; then
    tmp=$(mktemp -d)
    $PY - "$tmp" <<'PYEOF' || { echo "offlist: could not write the CIFAR-format data (python3-numpy)"; exit 1; }
import sys
import numpy as np
r = np.random.default_rng(0)
for name, n in (("data_batch_1.bin", 10000), ("test_batch.bin", 2000)):
    labels = r.integers(0, 10, n, dtype=np.uint8)
    images = (r.integers(0, 128, (n, 3072), dtype=np.uint8) + labels[:, None] * 12).astype(np.uint8)
    np.concatenate([labels[:, None], images], 1).tofile(f"{sys.argv[1]}/{name}")
PYEOF
    mkdir -p "$BUILD/bench"
    "$BUILD/dlbench" import "$tmp" "$data" >/dev/null || { echo "offlist: import failed"; rm -rf "$tmp"; exit 1; }
    rm -rf "$tmp"
fi
for model in ${OFFLIST_MODELS:-vgg mlp-ln lenet strided}; do
    for t in ${OFFLIST_THREADS:-1 2}; do
        ours=$(DLBENCH_THREADS=$t "$BUILD/dlbench" profile "$here/models.lua" model="$model" \
            data="$data" --steps 20 --warmup 5 --by op --trace - 2>&1 |
            awk '/^Steps:/ { for (i = 1; i <= NF; i++) if ($i == "mean:") print $(i + 1) }')
        # PyTorch at its better BLAS set-up: one OpenBLAS thread, or t
        theirs=$(for blas in $(printf '%s\n' 1 "$t" | sort -u); do
            $PY "$here/torch_peer.py" "$model" "$t" f32 "$blas" 2>/dev/null
        done | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^ms_per_step=/) { sub(/ms_per_step=/, "", $i);
                      if (best == "" || $i + 0 < best + 0) best = $i } } END { print best }')
        ours_ms=$(echo "$ours" | awk '/ms$/ { sub(/ms$/, ""); print; next } /us$/ { sub(/us$/, ""); print $0 / 1000; next } /s$/ { sub(/s$/, ""); print $0 * 1000 }')
        if [ -z "$ours_ms" ] || [ -z "$theirs" ]; then
            echo "offlist $model threads=$t: dlbench '${ours:-failed}', PyTorch '${theirs:-failed}'"
            continue
        fi
        awk -v m="$model" -v t="$t" -v a="$ours_ms" -v b="$theirs" 'BEGIN {
            printf "offlist %-7s threads=%d  dlbench %7.2f ms/step  PyTorch %7.2f ms/step  %.2fx%s\n",
                m, t, a, b, b / a, (b / a >= 1.5) ? "" : "  (target 1.5x: NO)" }'
    done
done
