#!/usr/bin/env bash
# scripts/deps.sh - installs what dlbench needs from Debian, skipping what is there.
# Idempotent; run as root (or with sudo available). Pass --no-bench to skip
# the benchmark peers (PyTorch, h5py, Optuna).
set -eu
build=(build-essential pkg-config liblua5.4-dev lua5.4 libhdf5-dev hdf5-tools libopenblas-dev
       libcjson-dev libncurses-dev zlib1g-dev libpng-dev libjpeg62-turbo-dev libdnnl-dev dataset-fashion-mnist tmux
       libopenmpi-dev openmpi-bin clang libclang-rt-14-dev valgrind python3 python3-pil clang-format fortunes)
bench=(python3-torch python3-h5py python3-optuna python3-numpy)
want=("${build[@]}")
[ "${1:-}" = "--no-bench" ] || want+=("${bench[@]}")

missing=()
for p in "${want[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "deps: everything is installed"
    exit 0
fi
echo "deps: installing ${missing[*]}"
SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
