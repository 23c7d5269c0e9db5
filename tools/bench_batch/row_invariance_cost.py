#!/usr/bin/env python3
"""What the row-invariant CPU kernels cost (or save): `mtp bench` of two builds, one before the
kernels and one after, on the same machine in one run, alternating per configuration.

Configurations: the default pair (24 committed prompts, 64 tokens) in f32, bf16, f16 and with
`--quantize q8`; the real Gemma 3 270M Q4_K_M with prompt lookup on the 24 grounded prompts.
Each runs plain decoding, the default (adaptive) schedule and a fixed depth of 4, greedy, and
reports prefill and decode tokens per second, the verify cost t_v(5)/t_v(1), and whether
greedy MTP's output was identical to plain on every prompt (`greedy_identical`: batched
verification, no serial validation).

    python3 tools/bench_batch/row_invariance_cost.py --before /path/to/old/mtp \
        --after target/release/mtp --out benchmarks/invariance/cost.json.gz

Writes the gzipped JSON (every `mtp bench` report, keyed by build and configuration) and prints the
markdown table BENCHMARKS.md holds.
"""

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REAL_MODEL = Path.home() / ".cache/mtp-rs/models/gemma-3-270m-q4_k_m.gguf"


def configurations():
    pair = ["--prompts", str(ROOT / "models/prompts.txt"), "-n", "64"]
    yield "default pair f32", pair + ["--dtype", "f32"]
    yield "default pair bf16", pair + ["--dtype", "bf16"]
    yield "default pair f16", pair + ["--dtype", "f16"]
    yield "default pair q8", pair + ["--quantize", "q8"]
    if REAL_MODEL.exists():
        yield "Q4_K_M + lookup, grounded", [
            "--model", str(REAL_MODEL), "--draft-kind", "ngram",
            "--prompts", str(ROOT / "tools/bench_peers/prompts/grounded.txt"), "-n", "64",
        ]


def bench(binary, args, reps):
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        cmd = [binary, "bench", *args, "--reps", str(reps), "--warmup", "1", "--depths", "4",
               "--schedules", "adaptive", "--max-width", "8", "--cost-reps", "20",
               "--json", str(out)]
        env = dict(os.environ, RUST_LOG="warn")
        # `mtp bench` exits 1 when greedy MTP's output differed from plain (the report is
        # written first): that is a measurement here, not a failure of the run.
        done = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
        if not out.exists():
            raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}) without a report")
        return json.loads(out.read_text())


def summary(report):
    variants = {v["name"]: v for v in report["variants"]}
    t_v = {c["width"]: c["secs"]["median"] for c in report["cost"].get("verify_secs", [])}
    row = {
        "prefill": report["prefill_tokens_per_second"]["median"],
        "greedy_identical": report["greedy_identical"],
    }
    for name in ("plain", "mtp-adaptive", "mtp-k4"):
        if name in variants:
            row[name] = variants[name]["decode_tokens_per_second"]["median"]
    if 1 in t_v and 5 in t_v:
        row["t_v5_over_t_v1"] = t_v[5] / t_v[1]
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="mtp built before the row-invariant kernels")
    ap.add_argument("--after", required=True, help="mtp built with them")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    results = {"before": {}, "after": {}}
    for name, args in configurations():
        for build in ("before", "after"):
            print(f"{name}: {build}", file=sys.stderr)
            results[build][name] = bench(getattr(a, build), args, a.reps)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(a.out, "wt") as f:
        json.dump(results, f, separators=(",", ":"))
    print("| configuration | build | prefill t/s | plain t/s | adaptive t/s | depth 4 t/s "
          "| t_v(5)/t_v(1) | batched greedy MTP == plain |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in results["after"]:
        for build in ("before", "after"):
            r = summary(results[build][name])
            ratio = f"{r['t_v5_over_t_v1']:.2f}" if "t_v5_over_t_v1" in r else "—"
            print(f"| {name} | {build} | {r['prefill']:.0f} | {r['plain']:.1f} "
                  f"| {r['mtp-adaptive']:.1f} | {r['mtp-k4']:.1f} | {ratio} "
                  f"| {'yes' if r['greedy_identical'] else 'no'} |")


if __name__ == "__main__":
    main()
