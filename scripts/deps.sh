#!/usr/bin/env bash
# scripts/deps.sh - installs what dlbench needs from Debian, skipping what is there.
# Idempotent; run as root (or with sudo available). Pass --no-bench to skip
# the benchmark peers (PyTorch, h5py, Optuna). Then the ONNX runtime that
# tests/t_export.sh checks exports with: onnxruntime-node from the npm
# registry into build/ort (--ignore-scripts: the package ships its CPU
# runtime; nothing else is fetched); a failure there only makes that check
# skip.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=(build-essential pkg-config liblua5.4-dev lua5.4 libhdf5-dev hdf5-tools libopenblas-dev
       libcjson-dev libncurses-dev zlib1g-dev libpng-dev libjpeg62-turbo-dev libdnnl-dev dataset-fashion-mnist tmux
       libopenmpi-dev openmpi-bin clang libclang-rt-14-dev valgrind python3 python3-pil clang-format fortunes
       python3-onnx python3-numpy)
bench=(python3-torch python3-h5py python3-optuna python3-numpy)
want=("${build[@]}")
[ "${1:-}" = "--no-bench" ] || want+=("${bench[@]}")

missing=()
for p in "${want[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node and npm for onnxruntime-node (nodejs from another source may bring its own npm)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
if [ ${#missing[@]} -eq 0 ]; then
    echo "deps: every Debian package is installed"
else
    echo "deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

ort="$root/build/ort"
if [ -d "$ort/node_modules/onnxruntime-node" ]; then
    echo "deps: onnxruntime-node is in $ort"
elif mkdir -p "$ort" && npm install --prefix "$ort" --ignore-scripts --no-audit --no-fund \
    --loglevel=error onnxruntime-node >/dev/null; then
    echo "deps: onnxruntime-node installed in $ort"
else
    echo "deps: onnxruntime-node could not be installed (tests/t_export.sh skips its runtime check)"
fi
