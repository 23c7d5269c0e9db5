#!/usr/bin/env bash
# Builds, on a machine without a GPU, what scripts/device-check.sh runs on a CUDA machine: the
# candle CUDA conformance suite, the runner's fixture and default-pair tests with the `cuda`
# feature, and `mtp`; strips them and packs them into .device-bin/bins.tar.xz (ignored by git,
# carried to the GPU machine beside the working tree).
#
# CUDA comes from PyPI, no system install: nvcc, its front end (nvvm), the headers (runtime, crt,
# CCCL) and the libraries the binaries link against (cudart, cuBLAS, cuRAND, NVRTC), version
# CUDA_VERSION (default 13.0: the driver of the GPU machines lent here runs CUDA 13.0, and PTX
# from a newer nvcc would not load on it). libcuda comes with the driver, so the link uses a stub
# of the driver API built here (the loader binds the real libcuda.so.1 at run time).
#
# Usage: scripts/device-build.sh            (about 30-60 min cold on 2 cores; the CUDA kernels
#                                            dominate)
#        CUDA_COMPUTE_CAP=90 is the default target (Hopper); set it for another GPU.
set -euo pipefail

cd "$(dirname "$0")/.."
CUDA_VERSION=${CUDA_VERSION:-13.0}
CACHE=${MTP_CUDA_CACHE:-$HOME/.cache/mtp-rs/cuda-$CUDA_VERSION}
ROOT=$CACHE/root
CUDA=$ROOT/nvidia/cu${CUDA_VERSION%%.*}

if [ ! -x "$CUDA/bin/nvcc" ] || [ ! -x "$CUDA/nvvm/bin/cicc" ]; then
    mkdir -p "$CACHE/whl" "$ROOT"
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
        --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d "$CACHE/whl" \
        "nvidia-cuda-nvcc==$CUDA_VERSION.*" "nvidia-nvvm==$CUDA_VERSION.*" \
        "nvidia-cuda-runtime==$CUDA_VERSION.*" "nvidia-cuda-crt==$CUDA_VERSION.*" \
        "nvidia-cuda-cccl==$CUDA_VERSION.*" "nvidia-cuda-nvrtc==$CUDA_VERSION.*" \
        "nvidia-cublas==$CUDA_VERSION.*" "nvidia-curand"
    for wheel in "$CACHE"/whl/*.whl; do unzip -q -o "$wheel" -d "$ROOT"; done
fi

# Unversioned names for the linker, and the driver-API stub.
for lib in cudart cublas cublasLt nvrtc curand; do
    versioned=$(find "$CUDA/lib" -maxdepth 1 -name "lib$lib.so.*" ! -name '*.alt.*' | sort | head -n 1)
    [ -n "$versioned" ] && ln -sf "$(basename "$versioned")" "$CUDA/lib/lib$lib.so"
done
if [ ! -f "$CUDA/lib/stubs/libcuda.so" ]; then
    mkdir -p "$CUDA/lib/stubs"
    cudarc=$(find "${CARGO_HOME:-$HOME/.cargo}"/registry/src -maxdepth 2 -type d -name 'cudarc-*' | sort -V | tail -n 1)
    grep -oE '^\s+fn cu[A-Za-z0-9_]+\(' "$cudarc/src/driver/sys/mod.rs" | sed -E 's/\s+fn //; s/\(//' |
        sort -u | sed 's/.*/int &(void) { return 999; }/' >"$CACHE/libcuda_stub.c"
    gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$CUDA/lib/stubs/libcuda.so" "$CACHE/libcuda_stub.c"
fi

export CUDA_HOME=$CUDA CUDA_PATH=$CUDA CUDA_ROOT=$CUDA PATH=$CUDA/bin:$PATH
export CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-90}
export LIBRARY_PATH=$CUDA/lib:$CUDA/lib/stubs LD_LIBRARY_PATH=$CUDA/lib

list_tests() { # the test executables a `cargo test --no-run` line builds
    cargo test --release --no-run --message-format=json "$@" 2>/dev/null |
        python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["target"]["name"], m["executable"])'
}

cargo test --release --no-run -p mtp-tests --features candle-cuda --test candle_cuda
cargo test --release --no-run -p runner --features cuda \
    --test fixture_target --test fixture_assistant --test default_pair
cargo build --release -p runner --features cuda --bin mtp

rm -rf .device-bin && mkdir -p .device-bin/stage
{
    list_tests -p mtp-tests --features candle-cuda --test candle_cuda
    list_tests -p runner --features cuda --test fixture_target --test fixture_assistant --test default_pair
    echo mtp target/release/mtp
} | while read -r name path; do
    cp "$path" ".device-bin/stage/$name"
    strip ".device-bin/stage/$name"
done
# One xz stream at -9 (64 MiB window): the binaries share most of their code and kernels.
tar -C .device-bin/stage -cf - . | xz -9 -T1 >.device-bin/bins.tar.xz
rm -rf .device-bin/stage
ls -la .device-bin
grep -qx '/.device-bin/' .git/info/exclude 2>/dev/null || echo '/.device-bin/' >>.git/info/exclude
