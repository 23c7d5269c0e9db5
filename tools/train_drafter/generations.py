#!/usr/bin/env python3
"""The target's own text for the drafter's corpus: continuations our engine generates from the
opening of each training document (plain decoding, `mtp generate --no-draft --json`), half
greedy and half sampled at temperature 0.8 with a fixed seed, written as `{"text": opening +
continuation}` lines that `drafter_features` reads beside the public-domain text.

A drafter sits beside the target's own decoding, so these are the contexts it meets at inference
(a small base model's greedy text repeats itself: that is what it will draft for). Resumable:
documents already in `--out` are skipped.

    python3 tools/train_drafter/generations.py --mtp target/release/mtp \
        --model ~/.cache/mtp-rs/models/gemma-3-270m-q4_k_m.gguf \
        --corpus /tmp/drafter-corpus/train.jsonl --out /tmp/drafter-corpus/generated.jsonl --count 200
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

OPENING_CHARS = 200


def opening(text: str) -> str:
    """The first sentence or so of a document (at most OPENING_CHARS, cut at a space)."""
    head = text[:OPENING_CHARS]
    for stop in (". ", "\n"):
        at = head.find(stop)
        if 40 <= at:
            return head[: at + 1]
    return head.rsplit(" ", 1)[0] if " " in head else head


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mtp", type=Path, required=True, help="the mtp binary")
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--corpus", type=Path, required=True, help="training documents (JSONL)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=256)
    args = parser.parse_args()
    docs = [json.loads(line) for line in args.corpus.read_text().splitlines() if line.strip()]
    done = 0
    if args.out.exists():
        # A line cut by a stop mid-write is dropped (and generated again).
        lines = args.out.read_text().splitlines(keepends=True)
        whole = [line for line in lines if line.endswith("\n")]
        if len(whole) != len(lines):
            args.out.write_text("".join(whole))
        done = len(whole)
    with open(args.out, "a") as out:
        for i, doc in enumerate(docs[: args.count]):
            if i < done:
                continue
            prompt = opening(doc["text"])
            sampling = ["--temperature", "0"] if i % 2 == 0 else ["--temperature", "0.8", "--seed", str(i)]
            cmd = [str(args.mtp), "generate", "--model", str(args.model), "--no-draft", "--json",
                   "-n", str(args.tokens), *sampling, prompt]
            reply = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
            out.write(json.dumps({"source": "generated", "sampling": sampling[1], "text": prompt + reply["text"]}) + "\n")
            out.flush()
            print(f"{i + 1}/{min(args.count, len(docs))}: {reply['eval_count']} tokens", flush=True)


if __name__ == "__main__":
    main()
