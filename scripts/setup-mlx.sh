#!/usr/bin/env bash
# Prepare this checkout to build backend-mlx on Linux (idempotent; macOS needs none of it).
#
# 1. apt: cmake and libclang-dev (mlx-c's build and bindgen), when missing;
# 2. pip: the PyPI `mlx-cpu` wheel whose MLX version equals the tag mlx-sys's mlx-c pins, into
#    .mlx/wheel (ignored by git);
# 3. cargo fetch, then a copy of the registry's mlx-sys source in .mlx/mlx-sys-<version> with this
#    repository's own build script (scripts/mlx-sys/build.rs) in place of upstream's.
#
# No third-party source enters git: .mlx/ is in .gitignore. scripts/cargo-mlx runs cargo against
# the copy (a `paths` override passed with `cargo --config`).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/mlx-versions.sh
source "$root/scripts/mlx-versions.sh"

note() { printf 'setup-mlx: %s\n' "$*" >&2; }

have_libclang() {
  [ -n "${LIBCLANG_PATH:-}" ] || compgen -G '/usr/lib/llvm-*/lib/libclang*.so*' >/dev/null ||
    compgen -G '/usr/lib/*/libclang*.so*' >/dev/null
}

if ! command -v cmake >/dev/null 2>&1 || ! have_libclang; then
  if [ "$(id -u)" -ne 0 ]; then
    note "cmake or libclang is missing: run 'apt-get install cmake libclang-dev' as root"
    exit 1
  fi
  note "apt-get install cmake libclang-dev"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    cmake libclang-dev >/dev/null
fi

if [ ! -f "$MLX_WHEEL_DIR/mlx/lib/libmlx.so" ]; then
  note "pip install mlx-cpu==$MLX_VERSION into ${MLX_WHEEL_DIR#"$root"/}"
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps \
    --target "$MLX_WHEEL_DIR" "mlx-cpu==$MLX_VERSION"
fi

cargo fetch --manifest-path "$root/Cargo.toml" --quiet
registry="${CARGO_HOME:-$HOME/.cargo}/registry/src"
upstream="$(compgen -G "$registry/*/mlx-sys-$MLX_SYS_VERSION" | head -n 1 || true)"
if [ -z "$upstream" ]; then
  note "mlx-sys $MLX_SYS_VERSION is not in $registry after cargo fetch"
  exit 1
fi
pinned="$(sed -n 's/^ *GIT_TAG v\([0-9.]*\).*/\1/p' "$upstream/src/mlx-c/CMakeLists.txt")"
if [ "$pinned" != "$MLX_VERSION" ]; then
  note "mlx-sys $MLX_SYS_VERSION pins MLX $pinned but scripts/mlx-versions.sh says $MLX_VERSION"
  exit 1
fi

# `cp -p` keeps modification times, so a re-created copy does not rebuild mlx-sys.
ours="$root/scripts/mlx-sys/build.rs"
if [ ! -f "$MLX_SYS_DIR/Cargo.toml" ]; then
  note "copy mlx-sys $MLX_SYS_VERSION to ${MLX_SYS_DIR#"$root"/}"
  mkdir -p "$(dirname "$MLX_SYS_DIR")"
  rm -rf "$MLX_SYS_DIR.tmp"
  cp -Rp "$upstream" "$MLX_SYS_DIR.tmp"
  rm -f "$MLX_SYS_DIR.tmp/.cargo-ok"
  mv "$MLX_SYS_DIR.tmp" "$MLX_SYS_DIR"
fi
if ! cmp -s "$ours" "$MLX_SYS_DIR/build.rs"; then
  note "overlay scripts/mlx-sys/build.rs on ${MLX_SYS_DIR#"$root"/}/build.rs"
  cp -p "$ours" "$MLX_SYS_DIR/build.rs"
fi
