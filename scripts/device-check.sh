#!/usr/bin/env bash
# The candle CUDA backend's check on a GPU machine, in one call of at most 8 minutes (each step
# has its own time limit): the conformance suite on candle-cuda, the Gemma 4 fixture parity
# tests, the default pair's greedy checks (f32 plain and MTP equal HF's greedy on every prompt;
# bf16 and f16 exact with serial validation, batched drift reported per prompt), a first
# `mtp generate`, and `mtp bench` on the default pair in f32 and bf16 (plain, MTP k = 1..4,
# adaptive; the verify-cost curve w = 1..16). The bf16 bench exits 1 when batched greedy MTP
# drifts from plain greedy at a near-tie, which bf16 allows (README, "What is exact"): its
# table is still written.
#
# Run from the repository root on the GPU machine, with .device-bin/bins.tar.xz built here by
# scripts/device-build.sh beside the working tree. Logs and bench JSON go to $OUT (default
# /tmp/device-check): summary.txt (one line per step with its exit status and seconds),
# device-check.log (every step's output), bench-f32.json, bench-bf16.json.
set -u

OUT=${OUT:-/tmp/device-check}
mkdir -p "$OUT"
BIN=$PWD/.device-bin
LOG=$OUT/device-check.log
SUMMARY=$OUT/summary.txt
: >"$LOG"
: >"$SUMMARY"

tar -C "$BIN" -xJf "$BIN/bins.tar.xz" || { echo "no $BIN/bins.tar.xz: run scripts/device-build.sh" | tee "$SUMMARY"; exit 1; }

# The test binaries name their fixtures by the absolute path of the checkout they were built in.
BUILT_IN=${DEVICE_BUILT_IN:-/work/main}
if [ "$PWD" != "$BUILT_IN" ] && [ ! -e "$BUILT_IN" ]; then
    mkdir -p "$(dirname "$BUILT_IN")" && ln -s "$PWD" "$BUILT_IN"
fi

# The CUDA libraries the binaries link against, from the machine's own CUDA or Python wheels.
libdirs=$(find /usr/local /opt /usr/lib -xdev \( -name 'libcublas.so.1[0-9]' -o -name 'libcudart.so.1[0-9]' \
    -o -name 'libcurand.so.1[0-9]' -o -name 'libnvrtc.so.1[0-9]' -o -name 'libcuda.so.1' \) \
    -printf '%h\n' 2>/dev/null | sort -u | paste -sd:)
export LD_LIBRARY_PATH=$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

step() { # step NAME SECONDS COMMAND...: run with a time limit, log, record status and time
    local name=$1 limit=$2 start rc
    shift 2
    start=$(date +%s)
    echo "=== $name: $*" >>"$LOG"
    timeout "$limit" "$@" >>"$LOG" 2>&1
    rc=$?
    echo "$name rc=$rc $(($(date +%s) - start))s" | tee -a "$SUMMARY"
}

{
    echo "=== machine"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    ldd "$BIN/mtp" | grep -E 'cu|nvrtc|not found'
} >>"$LOG" 2>&1

step conformance 90 "$BIN/candle_cuda"
step fixture_target 45 "$BIN/fixture_target" candle_cuda --nocapture
step fixture_assistant 45 "$BIN/fixture_assistant" candle_cuda --nocapture
step default_pair 120 "$BIN/default_pair" candle_cuda --nocapture --test-threads=1
step generate 25 "$BIN/mtp" generate --device cuda --temperature 0 -n 48 "In the beginning"
for dtype in f32 bf16; do
    step "bench-$dtype" 80 "$BIN/mtp" bench --device cuda --dtype "$dtype" -n 64 --reps 2 \
        --depths 1,2,3,4 --schedules adaptive --max-width 16 --cost-reps 10 \
        --json "$OUT/bench-$dtype.json"
done
echo "=== summary" >>"$LOG"
cat "$SUMMARY" >>"$LOG"
