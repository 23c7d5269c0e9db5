#!/usr/bin/env python3
"""The real-model CPU bench, interleaved in one run: `mtp bench` and llama.cpp on the same GGUF and
the same prompt ids, with a memory-bandwidth probe, repetition by repetition.

For every repetition and each prompt set (open-ended, input-grounded):

1. ours: `mtp bench --model GGUF --prompts SET --reps 1 --draft-kind ngram --depths D` — plain
   decode, prompt lookup at each fixed depth and the adaptive schedule, prefill, the verify-cost
   curve t_v(w), and whether greedy MTP equals plain greedy token for token;
2. llama.cpp (llama-cpp-python): plain greedy over the prompt ids our report holds, then its prompt
   lookup (`LlamaPromptLookupDecoding`, `num_pred_tokens` = each depth); greedy (top_k 1,
   temperature 0), EOS ignored, `num_predict` tokens; decode tokens/s = (n - 1) / (first to last
   token), prefill tokens/s = prompt tokens / (call to first token), as `mtp bench` measures;
   whether its lookup output equals its plain output;
3. the bandwidth probe: numpy sums a 1 GiB float32 array (one thread, best of 3) — the read
   bandwidth a decode step is bound by.

Ratios are taken within a repetition (ours ÷ llama.cpp, lookup ÷ the same engine's plain), then the
median over repetitions is reported. "Fraction of the ceiling" = tokens/s × bytes read per token
(every tensor of the file once: the layers plus the tied head) ÷ the probe's bandwidth.

    /tmp/llcpp-venv/bin/python tools/bench_peers/bench_cpu_gguf.py --mtp target/release/mtp \
        --model ~/.cache/mtp-rs/models/gemma-3-270m-q4_k_m.gguf --out /tmp/cpu-gguf
Needs llama-cpp-python (see tools/real_models/README.md), numpy and gguf (PyPI).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_llamacpp import run_prompt  # noqa: E402

SCHEMA_VERSION = 1
SETS = {"open": HERE / "prompts_gguf_open.txt", "grounded": HERE / "prompts_gguf_grounded.txt"}


def bandwidth_gbps() -> float:
    a = np.ones(256 * 1024 * 1024, dtype=np.float32)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        a.sum()
        best = min(best, time.perf_counter() - start)
    return a.nbytes / best / 1e9


def bytes_per_token(model: Path) -> int:
    import gguf

    return sum(int(t.n_bytes) for t in gguf.GGUFReader(str(model)).tensors)


def median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def ours_rep(args, prompts: Path, out: Path) -> dict:
    cmd = [
        str(args.mtp), "bench", "--model", str(args.model), "--prompts", str(prompts),
        "--reps", "1", "--warmup", "1", "-n", str(args.num_predict), "--draft-kind", "ngram",
        "--depths", ",".join(map(str, args.depths)), "--schedules", "adaptive",
        "--max-width", str(args.max_width), "--cost-reps", str(args.cost_reps), "--json", str(out),
    ] + args.mtp_arg
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode not in (0, 1) or not out.exists():
        sys.exit(f"error: {' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    report = json.loads(out.read_text())
    rows = {v["name"]: v for v in report["variants"]}
    verify = report["cost"]["verify_secs"]
    return {
        "prompt_ids": report["setup"]["prompt_ids"],
        "prefill": report["prefill_tokens_per_second"]["median"],
        "decode": {name: v["decode_tokens_per_second"]["median"] for name, v in rows.items()},
        "greedy_identical": report["greedy_identical"],
        "verify_secs": verify,
    }


def llama_rep(args, prompt_ids: list[list[int]]) -> dict:
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    context = max(len(ids) for ids in prompt_ids) + args.num_predict + 16
    out = {"decode": {}, "prefill": None, "identical": {}}
    plain_ids = []
    for depth in [0] + args.depths:
        draft = None if depth == 0 else LlamaPromptLookupDecoding(num_pred_tokens=depth)
        llm = Llama(model_path=str(args.model), n_ctx=context, n_threads=args.threads,
                    n_threads_batch=args.threads, draft_model=draft, verbose=False)
        run_prompt(llm, prompt_ids[0], 8)  # warm-up
        decode, prefill, same = [], [], True
        for i, ids in enumerate(prompt_ids):
            tokens: list[int] = []
            p, d = run_prompt(llm, ids, args.num_predict, tokens)
            decode.append(d)
            prefill.append(p)
            if depth == 0:
                plain_ids.append(tokens)
            else:
                same = same and tokens == plain_ids[i]
        name = "plain" if depth == 0 else f"lookup-k{depth}"
        out["decode"][name] = statistics.median(decode)
        if depth == 0:
            out["prefill"] = statistics.median(prefill)
        else:
            out["identical"][name] = same
        del llm
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mtp", required=True, type=Path, help="the release `mtp` binary")
    parser.add_argument("--model", required=True, type=Path, help="the .gguf file")
    parser.add_argument("--out", required=True, type=Path, help="folder for the reports")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--num-predict", type=int, default=128)
    parser.add_argument("--depths", type=lambda s: [int(x) for x in s.split(",")], default=[2, 4])
    parser.add_argument("--max-width", type=int, default=8)
    parser.add_argument("--cost-reps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--sets", default="open,grounded")
    parser.add_argument("--mtp-arg", action="append", default=[], help="extra argument for mtp bench")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    per_token = bytes_per_token(args.model)
    reps = []
    for rep in range(args.reps):
        row = {"bandwidth_gbps": bandwidth_gbps(), "load_avg": os.getloadavg()[0], "sets": {}}
        for name in args.sets.split(","):
            ours = ours_rep(args, SETS[name], args.out / f"ours-{name}-{rep}.json")
            peer = llama_rep(args, ours["prompt_ids"])
            row["sets"][name] = {"ours": ours, "llama_cpp": peer}
            print(f"rep {rep} {name}: ours {ours['decode']} llama.cpp {peer['decode']}", file=sys.stderr)
        reps.append(row)
    summary = summarise(reps, per_token)
    (args.out / "summary.json").write_text(json.dumps({
        "schema_version": SCHEMA_VERSION,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "processor": platform.processor()},
        "setup": {"model": str(args.model), "num_predict": args.num_predict, "depths": args.depths,
                  "threads": args.threads, "reps": args.reps, "bytes_per_token": per_token,
                  "mtp_args": args.mtp_arg},
        "reps": reps,
        "summary": summary,
    }, indent=1) + "\n")
    print(render(summary))


def summarise(reps: list[dict], per_token: int) -> dict:
    out = {"bandwidth_gbps": median([r["bandwidth_gbps"] for r in reps]), "sets": {}}
    for name in reps[0]["sets"]:
        rows = {}
        def add(engine, config, key, fn):
            values = [fn(r["sets"][name], r) for r in reps]
            rows.setdefault(f"{engine} {config}", {})[key] = median(values)
        for engine, key in (("ours", "ours"), ("llama.cpp", "llama_cpp")):
            for config in reps[0]["sets"][name][key]["decode"]:
                def rate(s, r, k=key, c=config):
                    return s[k]["decode"][c]
                add(engine, config, "decode", rate)
                add(engine, config, "vs_own_plain", lambda s, r, k=key, f=rate: f(s, r) / s[k]["decode"]["plain"])
                add(engine, config, "ceiling_fraction",
                    lambda s, r, f=rate: f(s, r) * per_token / (r["bandwidth_gbps"] * 1e9))
        first = reps[0]["sets"][name]
        verify = first["ours"]["verify_secs"]
        out["sets"][name] = {
            "rows": rows,
            "ours_over_llama_cpp_decode": median([r["sets"][name]["ours"]["decode"]["plain"]
                                                  / r["sets"][name]["llama_cpp"]["decode"]["plain"] for r in reps]),
            "ours_over_llama_cpp_prefill": median([r["sets"][name]["ours"]["prefill"]
                                                   / r["sets"][name]["llama_cpp"]["prefill"] for r in reps]),
            "ours_greedy_identical": all(r["sets"][name]["ours"]["greedy_identical"] for r in reps),
            "llama_cpp_lookup_identical": {k: all(r["sets"][name]["llama_cpp"]["identical"][k] for r in reps)
                                           for k in first["llama_cpp"]["identical"]},
            "verify_cost_curve": verify,
            "verify_ratio_median": verify_ratio_median([r["sets"][name]["ours"]["verify_secs"] for r in reps]),
        }
    return out


def verify_ratio_median(curves: list[list[dict]]) -> dict[int, float]:
    """Per width w, the median over repetitions of t_v(w)/t_v(1), each ratio within one repetition
    (machine drift between repetitions cancels in the ratio)."""
    per_rep = []
    for curve in curves:
        medians = {c["width"]: c["secs"]["median"] for c in curve if c.get("secs")}
        if medians.get(1):
            per_rep.append({w: t / medians[1] for w, t in medians.items()})
    widths = sorted(set().union(*per_rep)) if per_rep else []
    return {w: median([r[w] for r in per_rep if w in r]) for w in widths}


def render(summary: dict) -> str:
    lines = [f"bandwidth probe: {summary['bandwidth_gbps']:.1f} GB/s"]
    for name, s in summary["sets"].items():
        lines.append(f"\n## {name}: ours/llama.cpp decode {s['ours_over_llama_cpp_decode']:.2f}x, "
                     f"prefill {s['ours_over_llama_cpp_prefill']:.2f}x; ours greedy identical "
                     f"{s['ours_greedy_identical']}; llama.cpp lookup identical {s['llama_cpp_lookup_identical']}")
        lines.append("| engine config | decode tok/s | ÷ own plain | fraction of ceiling |")
        lines.append("|---|---|---|---|")
        for row, v in s["rows"].items():
            lines.append(f"| {row} | {v['decode']:.1f} | {v['vs_own_plain']:.2f}x | {v['ceiling_fraction']:.2f} |")
        curve = {c["width"]: c["secs"]["median"] for c in s["verify_cost_curve"]}
        if 1 in curve:
            ratios = ", ".join(f"t_v({w})/t_v(1) {t / curve[1]:.2f}" for w, t in sorted(curve.items()) if w > 1)
            lines.append(f"verify cost (ours, first rep): t_v(1) {curve[1] * 1e3:.1f} ms; {ratios}")
        per_rep = s.get("verify_ratio_median") or {}
        if per_rep:
            ratios = ", ".join(f"t_v({w})/t_v(1) {r:.2f}" for w, r in sorted(per_rep.items(), key=lambda i: int(i[0]))
                               if int(w) > 1)
            lines.append(f"verify cost (ours, median over repetitions of each one's ratio): {ratios}")
    return "\n".join(lines)


def resummarise(path: Path) -> None:
    """Recompute and print the summary of a finished run's `summary.json` (its repetitions kept)."""
    report = json.loads(path.read_text())
    report["summary"] = summarise(report["reps"], report["setup"]["bytes_per_token"])
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(render(report["summary"]))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--resummarise":
        resummarise(Path(sys.argv[2]))
    else:
        main()
