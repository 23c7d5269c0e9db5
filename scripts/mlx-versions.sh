# Sourced by the MLX scripts: the pinned versions and where their files go (all under .mlx/).
# mlx-sys must match the `mlx-rs = "=0.33.0"` pin in Cargo.toml (mlx-rs 0.33.0 depends on
# mlx-sys 0.7.0), and MLX_VERSION the `GIT_TAG` of its mlx-c (setup-mlx.sh checks it).
# shellcheck shell=bash
MLX_SYS_VERSION=0.7.0
MLX_VERSION=0.32.2
MLX_HOME="$root/.mlx"
MLX_WHEEL_DIR="$MLX_HOME/wheel"
MLX_SYS_DIR="$MLX_HOME/mlx-sys-$MLX_SYS_VERSION"
