#!/usr/bin/env python3
"""Peer benchmark for `mtp bench` on a GGUF model: the same prompt ids through llama.cpp.

Reads our report (`mtp bench --model MODEL.gguf --json ours.json`): the prompt token ids and the
number of tokens to generate, so both engines see exactly the same input. Then, through
llama-cpp-python (PyPI; it builds llama.cpp from its source distribution), for every prompt and
repetition:

    prefill tokens/s   prompt tokens / (wall time from the call to the first generated token)
    decode tokens/s    (num_predict - 1) / (wall time from the first to the last generated token)

greedy (top_k 1, temperature 0, no penalties), EOS ignored — as `mtp bench` measures plain
decoding (`decode_tokens_per_second` of its `plain` row, `prefill_tokens_per_second`). It prints
min / median / max over all prompts and repetitions for llama.cpp and ours, and ours / llama.cpp,
and writes them as JSON (`--json`).

Usage:
    python3 -m venv /tmp/llcpp-venv
    CMAKE_ARGS="-DGGML_NATIVE=ON" /tmp/llcpp-venv/bin/pip install llama-cpp-python==0.3.36 numpy
    cargo run --release -p runner -- bench --model MODEL.gguf --no-draft --json ours.json
    /tmp/llcpp-venv/bin/python tools/bench_peers/bench_llamacpp.py --model MODEL.gguf \
        --ours ours.json --json llamacpp-bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

SCHEMA_VERSION = 1


def spread(values: list[float]) -> dict | None:
    if not values:
        return None
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def plain_row(ours: dict) -> dict:
    for variant in ours.get("variants", []):
        if variant.get("name") == "plain":
            return variant
    sys.exit("error: the report has no `plain` row (run mtp bench with plain decoding)")


def run_prompt(llm, ids: list[int], num_predict: int, out: list[int] | None = None) -> tuple[float, float]:
    """(prefill tokens/s, decode tokens/s) of one greedy generation of `num_predict` tokens (the
    tokens appended to `out` when given)."""
    # llama-cpp-python keeps the last prompt's KV and `generate(reset=True)` still reuses its
    # longest common prefix, so a repeated prompt would "prefill" one token: forget it first.
    llm.reset()
    start = time.perf_counter()
    first = last = None
    count = 0
    for token in llm.generate(
        ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, reset=True
    ):
        now = time.perf_counter()
        if out is not None:
            out.append(int(token))
        if first is None:
            first = now
        last = now
        count += 1
        if count >= num_predict:
            break
    if first is None or count < 2:
        raise RuntimeError("llama.cpp generated fewer than two tokens")
    return len(ids) / (first - start), (count - 1) / (last - first)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, type=Path, help="the .gguf file")
    parser.add_argument("--ours", required=True, type=Path, help="mtp bench --json report")
    parser.add_argument("--reps", type=int, default=3, help="timed passes over the prompts")
    parser.add_argument("--warmup", type=int, default=1, help="untimed passes first")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()

    from llama_cpp import Llama  # imported late: --help works without it

    ours = json.loads(args.ours.read_text())
    setup = ours["setup"]
    prompt_ids: list[list[int]] = setup["prompt_ids"]
    num_predict: int = setup["num_predict"]
    context = max(len(ids) for ids in prompt_ids) + num_predict + 8
    llm = Llama(
        model_path=str(args.model),
        n_ctx=context,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        verbose=False,
    )
    prefill, decode = [], []
    for rep in range(args.warmup + args.reps):
        for ids in prompt_ids:
            p, d = run_prompt(llm, ids, num_predict)
            if rep >= args.warmup:
                prefill.append(p)
                decode.append(d)
    peer = {"prefill_tokens_per_second": spread(prefill), "decode_tokens_per_second": spread(decode)}
    mine = {
        "prefill_tokens_per_second": ours.get("prefill_tokens_per_second"),
        "decode_tokens_per_second": plain_row(ours).get("decode_tokens_per_second"),
    }
    ratios = {}
    for key in ("prefill_tokens_per_second", "decode_tokens_per_second"):
        if mine[key] and peer[key]:
            ratios[key] = mine[key]["median"] / peer[key]["median"]
    print(f"{'':26} {'ours (median)':>14} {'llama.cpp':>12} {'ours / llama.cpp':>18}")
    for key, label in (("prefill_tokens_per_second", "prefill tokens/s"),
                       ("decode_tokens_per_second", "plain decode tokens/s")):
        o = mine[key]["median"] if mine[key] else float("nan")
        l = peer[key]["median"] if peer[key] else float("nan")
        print(f"{label:26} {o:14.1f} {l:12.1f} {ratios.get(key, float('nan')):18.3f}")
    if args.json:
        import llama_cpp

        args.json.write_text(json.dumps({
            "schema_version": SCHEMA_VERSION,
            "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
            "setup": {
                "model": str(args.model),
                "llama_cpp_python": getattr(llama_cpp, "__version__", "unknown"),
                "threads": args.threads,
                "reps": args.reps,
                "warmup": args.warmup,
                "prompts": len(prompt_ids),
                "num_predict": num_predict,
                "ours": str(args.ours),
            },
            "llama_cpp": peer,
            "ours": mine,
            "ours_over_llama_cpp": ratios,
        }, indent=2) + "\n")


if __name__ == "__main__":
    main()
