#!/usr/bin/env bash
# Builds llama.cpp at full strength for the peer race: the tree vendored in the llama-cpp-python
# 0.3.36 source distribution (PyPI), built standalone with the native instruction set
# (GGML_NATIVE=ON, the same AVX-512/VNNI our kernels use where the CPU has it), `common` and the
# tools on, the server's web UI off (its build would try to download assets). The result lives
# outside the repository, in $MTP_PEERS_DIR (default ~/.cache/mtp-rs/peers):
#
#   $MTP_PEERS_DIR/llama.cpp-0.3.36/bin/{llama-server,llama-bench,llama-speculative-simple,llama-cli,
#                                        llama-quantize}
#   $MTP_PEERS_DIR/llama.cpp-0.3.36/build-info.json   (commit, flags, compiler, system_info)
#
# A second run reuses the build. About 10-15 minutes on 2 cores the first time.
set -euo pipefail

VERSION=0.3.36
PEERS="${MTP_PEERS_DIR:-$HOME/.cache/mtp-rs/peers}"
OUT="$PEERS/llama.cpp-$VERSION"
JOBS="${JOBS:-$(nproc)}"
mkdir -p "$PEERS"

if [ -x "$OUT/bin/llama-server" ] && [ -x "$OUT/bin/llama-quantize" ] && [ -f "$OUT/build-info.json" ]; then
  echo "llama.cpp $VERSION already built in $OUT"
  exit 0
fi

# Build tools from PyPI (binary wheels of cmake and ninja) in a venv of their own.
if [ ! -x "$PEERS/venv/bin/cmake" ]; then
  python3 -m venv "$PEERS/venv"
  "$PEERS/venv/bin/pip" install -q cmake ninja scikit-build-core
fi
export PATH="$PEERS/venv/bin:$PATH"

# The source distribution (only this package from source; its metadata needs no build).
SDIST="$PEERS/llama_cpp_python-$VERSION.tar.gz"
if [ ! -f "$SDIST" ]; then
  "$PEERS/venv/bin/pip" download -q --no-deps --no-binary llama-cpp-python \
    --no-build-isolation "llama-cpp-python==$VERSION" -d "$PEERS"
fi
SRC="$PEERS/llama_cpp_python-$VERSION"
[ -d "$SRC" ] || tar -xzf "$SDIST" -C "$PEERS"
TREE="$SRC/vendor/llama.cpp"

FLAGS=(-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_USE_PREBUILT_UI=OFF
  -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_EXAMPLES=ON
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
  -DBUILD_SHARED_LIBS=OFF -G Ninja)
cmake -S "$TREE" -B "$OUT/build" "${FLAGS[@]}"
cmake --build "$OUT/build" -j "$JOBS" \
  --target llama-server llama-bench llama-speculative-simple llama-cli llama-quantize
mkdir -p "$OUT/bin"
for t in llama-server llama-bench llama-speculative-simple llama-cli llama-quantize; do
  cp "$OUT/build/bin/$t" "$OUT/bin/$t"
done

# What was built, for the benchmark's JSON: the vendored commit, the flags, the compiler and
# ggml's own system_info line (the instruction sets it uses).
COMMIT="$(sed -n 's/.*llama.cpp@\([0-9a-f]\{7,40\}\).*/\1/p' "$SRC/CHANGELOG.md" | head -1)"
SYSINFO="$("$OUT/bin/llama-cli" --version 2>&1 | tr '\n' ' ' || true)"
CC_VERSION="$(cc --version | head -1)"
python3 - "$OUT/build-info.json" "$VERSION" "$COMMIT" "$SYSINFO" "$CC_VERSION" "${FLAGS[*]}" <<'EOF'
import json, sys
path, version, commit, sysinfo, cc, flags = sys.argv[1:]
json.dump({"source": f"llama-cpp-python {version} sdist (PyPI), vendor/llama.cpp",
           "commit": commit, "version_output": sysinfo.strip(), "compiler": cc,
           "cmake_flags": flags.split()}, open(path, "w"), indent=2)
EOF
echo "built llama.cpp $VERSION ($COMMIT) in $OUT"
