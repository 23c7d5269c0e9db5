#!/usr/bin/env bash
# Type-check the Apple targets from Linux: backend-candle and the runner with `metal` for
# aarch64-apple-darwin, `cargo check` and `cargo clippy -D warnings`.
#
# No Apple SDK is needed to type-check: objc2 and candle's Metal code are plain Rust, and
# nothing links. The target's standard library is not shipped for Linux hosts by Debian, so it
# is built from source (`-Zbuild-std`), which needs a compiler with its source: Debian
# bookworm-security's `rustc-web` 1.96 with `rust-web-src` (and `libllvm22`, its LLVM), fetched
# with `apt-get download` and unpacked with `dpkg -x` into .apple-toolchain/ (nothing is
# installed; the rustup toolchain stays the default). RUSTC_BOOTSTRAP=1 lets that stable
# compiler take `-Z` flags. The packages come from the distribution's registry, the one place
# besides crates.io and PyPI that CI reaches.
#
# What cannot be checked here: `backend-mlx --features mlx` for macOS (mlx-sys's build script
# runs cmake over MLX's C++ and Metal sources, which needs Xcode's SDK and the Metal compiler),
# and anything past type-checking (linking, running) on either Apple path.
#
#   scripts/check-apple.sh          # ~8 min cold on 2 cores (std from source, then the crates)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VERSION="1.96.0+dfsg1-1~deb12u2"
TOOLS="${MTP_APPLE_TOOLCHAIN_DIR:-$PWD/.apple-toolchain}"
ROOT="$TOOLS/root"
TARGET=aarch64-apple-darwin

step() { printf '\n== %s ==\n' "$*"; }

if [ ! -x "$ROOT/usr/bin/clippy-driver" ]; then
  step "fetch rustc-web $VERSION and its std source (apt-get download, dpkg -x)"
  mkdir -p "$TOOLS/debs"
  packages=(
    "rustc-web=$VERSION" "libstd-rust-web-1.96=$VERSION" "libstd-rust-web-dev=$VERSION"
    "rust-web-src=$VERSION" "rust-web-clippy=$VERSION" libllvm22
  )
  if ! (cd "$TOOLS/debs" && apt-get download "${packages[@]}"); then
    # A fresh machine's package lists may predate the security update.
    apt-get update -qq
    (cd "$TOOLS/debs" && apt-get download "${packages[@]}")
  fi
  for deb in "$TOOLS"/debs/*.deb; do
    dpkg -x "$deb" "$ROOT"
  done
fi

export LD_LIBRARY_PATH="$ROOT/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export RUSTC="$ROOT/usr/bin/rustc"
export RUSTC_BOOTSTRAP=1
# Its own target directory: another compiler's artefacts never mix with the workspace's.
export CARGO_TARGET_DIR="$PWD/target/apple"
"$RUSTC" --version

BUILD_STD=(-Zbuild-std=std,panic_abort --target "$TARGET")
RUNNER_FEATURES=(--no-default-features --features metal,cli,server,embedded-model,structured)

step "cargo check: backend-candle --features metal ($TARGET)"
cargo check "${BUILD_STD[@]}" -p backend-candle --features metal

step "cargo check: runner with metal ($TARGET)"
cargo check "${BUILD_STD[@]}" -p runner "${RUNNER_FEATURES[@]}"

step "cargo clippy -D warnings: backend-candle and runner with metal ($TARGET)"
# Debian's cargo-clippy runs `cargo check` with its clippy-driver (of the same compiler) as the
# workspace wrapper.
CLIPPY=("$ROOT/usr/bin/cargo-clippy" clippy)
"${CLIPPY[@]}" "${BUILD_STD[@]}" -p backend-candle --features metal -- -D warnings
"${CLIPPY[@]}" "${BUILD_STD[@]}" -p runner "${RUNNER_FEATURES[@]}" -- -D warnings

step "Apple targets type-check"
