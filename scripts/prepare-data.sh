#!/usr/bin/env bash
# prepare-data.sh - makes data/fashion-mnist.h5 from the Debian Fashion-MNIST package, once
#
# Idempotent: does nothing when the file exists and is newer than its
# sources. Without the package it makes data/synthetic.h5 (two spirals) so
# dlbench still has something to train on, and says so. `dlbench import`
# writes through a temporary file, so an interrupted run leaves nothing
# half-written under the final name.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DLBENCH=${DLBENCH:-$BUILD/dlbench}
SRC=${FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
OUT=data/fashion-mnist.h5

mkdir -p data
if [ ! -x "$DLBENCH" ]; then
    echo "prepare-data: $DLBENCH not built; run make first" >&2
    exit 2
fi
if [ -f "$SRC/train-images-idx3-ubyte.gz" ] || [ -f "$SRC/train-images-idx3-ubyte" ]; then
    newest=$(ls -t "$SRC"/*-ubyte* | head -n 1)
    if [ -f "$OUT" ] && [ "$OUT" -nt "$newest" ]; then
        exit 0
    fi
    echo "prepare-data: importing $SRC into $OUT"
    "$DLBENCH" import "$SRC" "$OUT"
else
    echo "prepare-data: no Fashion-MNIST under $SRC (Debian package dataset-fashion-mnist);" \
         "making data/synthetic.h5 instead" >&2
    [ -f data/synthetic.h5 ] || "$DLBENCH" import --synthetic spirals --samples 4000 data/synthetic.h5
fi
