#!/usr/bin/env bash
# Build and test the MLX backend on Linux in one command (also run by .ci/run):
#
#   1. setup (scripts/setup-mlx.sh): apt cmake + libclang-dev, pip mlx-cpu into .mlx/, the
#      registry's mlx-sys copied to .mlx/ with this repository's build script;
#   2. clippy on every crate that has MLX code, with the `mlx` features on (warnings denied);
#   3. backend-mlx's own tests (src/mlx_tests.rs), the conformance suite on MLX
#      (tests/tests/mlx.rs), the Gemma 4 fixture parity tests on MLX
#      (logits within 1e-4 of HF, greedy and greedy-MTP tokens identical to HF, hence to the
#      reference and candle), and `mtp generate --backend mlx` against `--backend candle` (same
#      text, tokens and MTP counts on every fixture pair and on models/default when present).
#
# Every MLX test runs with --test-threads=1 (MLX is not thread-safe). Extra arguments go to
# every `cargo` call (e.g. `--release`).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
cargo_mlx="$root/scripts/cargo-mlx"
step() { printf '\n== mlx: %s ==\n' "$*"; }
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

step "setup (apt, pip mlx-cpu, patched mlx-sys)"
"$root/scripts/setup-mlx.sh"

# One package selection, one feature set and one target list for both cargo calls: cargo then
# resolves one dependency graph and builds it once (another selection, or test targets with other
# dev-dependencies, would rebuild candle, mlx-sys and mlx-rs with other unified features).
selection=(-p backend-mlx -p mtp-tests -p runner --features backend-mlx/mlx,mtp-tests/mlx,runner/mlx)
targets=(--lib --test mlx --test fixture_target --test fixture_assistant --test gemma4_gguf --test gemma4_gguf_assistant --test gemma3_assistant --test cli_generate --test batched_forward)

step "clippy with the mlx features (warnings denied)"
"$cargo_mlx" clippy "$@" "${selection[@]}" --all-targets -- -D warnings

step "MLX tests: unit, conformance suite, Gemma 4 fixtures (HF and GGUF), mtp generate mlx vs candle and HF"
# Every MLX test has "mlx" in its name (the others in these targets are not run here).
"$cargo_mlx" test "$@" "${selection[@]}" "${targets[@]}" -- --test-threads=1 mlx
