#!/usr/bin/env bash
# t_cuda_loader.sh - how the CUDA module is found and loaded, without a GPU: a
# broken module file and a missing dependency are named with the loader's reason
# (dlerror); a dependency in $CUDNN_HOME or a pip wheel's nvidia/*/lib is found.
# The stand-in module is a tiny shared object that needs a stand-in library
# (libdlfake.so.1); a module named by DLBENCH_CUDA_MODULE is loaded before the
# driver is looked for, so on this machine a load that worked ends at "no CUDA
# driver", one that did not at the file and dlerror's reason.
. "$(dirname "$0")/lib.sh"
test_init
require_subcommand t_cuda_loader run
CC=${CC:-cc}
if ! command -v "$CC" >/dev/null 2>&1; then
    skip t_cuda_loader "no C compiler ($CC) to build the stand-in module"
    exit 0
fi

# why NAME [VAR=VALUE...]: the reason --device cuda gives, with the environment given
why() {
    local name=$1
    shift
    env "$@" "$DLBENCH" run scripts/spirals.lua --device cuda --out "$OUT/runs" \
        >"$OUT/$name.log" 2>&1
    grep -m1 'not available' "$OUT/$name.log"
}
# expect NAME TEXT [VAR=VALUE...]: the reason holds TEXT
expect() {
    local name=$1 text=$2 got
    shift 2
    got=$(why "$name" "$@")
    case $got in
    *"$text"*) pass "$name" ;;
    *) fail "$name" "expected '$text' in: ${got:-$(tail -3 "$OUT/$name.log")}" ;;
    esac
}

echo 'int dlfake(void) { return 1; }' >"$OUT/dep.c"
echo 'int dlfake(void); int mod_probe(void) { return dlfake(); }' >"$OUT/mod.c"
mkdir -p "$OUT/cudnn/lib" "$OUT/venv/lib/python3.12/site-packages/nvidia/cudnn/lib" "$OUT/broken/lib"
"$CC" -shared -fPIC -o "$OUT/cudnn/lib/libdlfake.so.1" -Wl,-soname,libdlfake.so.1 "$OUT/dep.c" &&
    "$CC" -shared -fPIC -o "$OUT/mod.so" "$OUT/mod.c" "$OUT/cudnn/lib/libdlfake.so.1" ||
    { fail t_cuda_loader "cannot build the stand-in module"; exit 0; }
cp "$OUT/cudnn/lib/libdlfake.so.1" "$OUT/venv/lib/python3.12/site-packages/nvidia/cudnn/lib/"
echo "not a library" >"$OUT/broken/lib/libdlfake.so.1"
echo "not a library" >"$OUT/bad.so"
clean=(CUDNN_HOME= CUDA_HOME= CUDA_PATH= CONDA_PREFIX= VIRTUAL_ENV= HOME="$OUT")

expect loader_missing_file "DLBENCH_CUDA_MODULE=$OUT/none.so does not exist" \
    "${clean[@]}" DLBENCH_CUDA_MODULE="$OUT/none.so"
# the file and dlerror's reason (glibc: "file too short" or "invalid ELF header")
expect loader_bad_file "module $OUT/bad.so could not be loaded: $OUT/bad.so: " \
    "${clean[@]}" DLBENCH_CUDA_MODULE="$OUT/bad.so"
expect loader_missing_dep "could not be loaded: libdlfake.so.1: cannot open shared object file" \
    "${clean[@]}" DLBENCH_CUDA_MODULE="$OUT/mod.so"
expect loader_missing_dep_where "not on the library path, nor in \$CUDNN_HOME" \
    "${clean[@]}" DLBENCH_CUDA_MODULE="$OUT/mod.so"
expect loader_cudnn_home "no CUDA driver" \
    "${clean[@]}" CUDNN_HOME="$OUT/cudnn" DLBENCH_CUDA_MODULE="$OUT/mod.so"
expect loader_pip_wheel "no CUDA driver" \
    "${clean[@]}" VIRTUAL_ENV="$OUT/venv" DLBENCH_CUDA_MODULE="$OUT/mod.so"
expect loader_broken_dep "$OUT/broken/lib/libdlfake.so.1, needed by $OUT/mod.so, could not be loaded" \
    "${clean[@]}" CUDNN_HOME="$OUT/broken" DLBENCH_CUDA_MODULE="$OUT/mod.so"
# past the driver check (a stand-in libcuda.so.1): the module is opened and
# found not to be one of ours
mkdir -p "$OUT/driver"
"$CC" -shared -fPIC -o "$OUT/driver/libcuda.so.1" "$OUT/dep.c"
expect loader_not_dlbench "$OUT/mod.so is not a dlbench CUDA module (no dl_cuda_backend_open)" \
    "${clean[@]}" CUDNN_HOME="$OUT/cudnn" LD_LIBRARY_PATH="$OUT/driver" \
    DLBENCH_CUDA_MODULE="$OUT/mod.so"

# the real module loads here (its libraries found); only the driver is missing
if [ ! -f "$BUILD/dlbench-cuda.so" ]; then
    skip loader_real_module "$BUILD/dlbench-cuda.so not built (no nvcc)"
elif command -v nvidia-smi >/dev/null 2>&1; then
    skip loader_real_module "a GPU driver is here: tests/gpu/run.sh checks the real load"
else
    expect loader_real_module "no CUDA driver" DLBENCH_CUDA_MODULE="$PWD/$BUILD/dlbench-cuda.so"
fi
