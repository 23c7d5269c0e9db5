#!/usr/bin/env python3
"""Record llama.cpp's outputs on the real model (or only its tokenizer on any GGUF) as a small JSON
reference for the Rust tests.

llama.cpp comes from PyPI's `llama-cpp-python` (its sdist builds the vendored llama.cpp); see
README.md for the exact install. For each prompt of prompts.py:

* `prompt_ids`: llama.cpp's tokenization, BOS added as llama.cpp adds it (`add_bos=True`), special
  tokens written in the text parsed (`special=True`);
* `greedy_ids`: the greedy continuation (argmax at every step, i.e. temperature 0), 32 tokens,
  EOS not treated specially (llama.cpp keeps going);
* `top5`: at every position p of prompt + continuation (except the last generated token), the five
  highest logits of the next-token distribution after position p, as `[[id, logit], ...]`.
  The prompt is evaluated in one batch (`n_batch` ≥ its length), then one token per step.

For each case of TOKENIZER_CASES: `ids` with `add_bos=False, special=True`.

    python record_llama_cpp.py --model MODEL.gguf --out FILE.json               # everything
    python record_llama_cpp.py --model TINY.gguf --out FILE.json --tokenize-only   # vocab only
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fetch import sha256_of  # noqa: E402
from prompts import PROMPTS, TOKENIZER_CASES  # noqa: E402

import llama_cpp  # noqa: E402

NEW_TOKENS = 32
TOP_K = 5


def top_k(row: np.ndarray) -> list[list[float]]:
    ids = np.argsort(-row, kind="stable")[:TOP_K]
    return [[int(i), float(row[i])] for i in ids]


def tokenize(llm: llama_cpp.Llama, text: str, add_bos: bool) -> list[int]:
    return [int(t) for t in llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)]


def tokenizer_cases(llm: llama_cpp.Llama) -> list[dict]:
    return [{"name": name, "text": text, "ids": tokenize(llm, text, add_bos=False)} for name, text in TOKENIZER_CASES]


def run_prompt(llm: llama_cpp.Llama, text: str) -> dict:
    ids = tokenize(llm, text, add_bos=True)
    llm.reset()
    llm.eval(ids)
    rows = [llm.scores[p].copy() for p in range(len(ids))]
    greedy = []
    for step in range(NEW_TOKENS):
        next_id = int(np.argmax(rows[-1]))
        greedy.append(next_id)
        if step + 1 < NEW_TOKENS:
            llm.eval([next_id])
            rows.append(llm.scores[llm.n_tokens - 1].copy())
    return {"prompt_ids": ids, "greedy_ids": greedy, "top5": [top_k(r) for r in rows]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--tokenize-only", action="store_true", help="load the vocabulary only")
    parser.add_argument("--threads", type=int, default=int(os.environ.get("LLAMA_THREADS", "2")))
    args = parser.parse_args()

    n_ctx = 1024
    llm = llama_cpp.Llama(
        model_path=str(args.model),
        vocab_only=args.tokenize_only,
        n_ctx=n_ctx,
        n_batch=n_ctx,
        n_ubatch=n_ctx,
        n_threads=args.threads,
        logits_all=not args.tokenize_only,
        seed=0,
        verbose=False,
    )
    out = {
        "source": "llama.cpp via llama-cpp-python " + llama_cpp.__version__ + " (tools/real_models/record_llama_cpp.py)",
        "model_file": args.model.name,
        "model_sha256": sha256_of(args.model),
        "tokenize": "add_bos=False, special=True",
        "tokenizer_cases": tokenizer_cases(llm),
    }
    if not args.tokenize_only:
        out.update(
            {
                "system_info": llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip(),
                "threads": args.threads,
                "new_tokens": NEW_TOKENS,
                "prompt_tokenize": "add_bos=True, special=True",
                "prompts": [],
            }
        )
        for name, text in PROMPTS:
            print(f"prompt {name}", file=sys.stderr)
            out["prompts"].append({"name": name, "text": text, **run_prompt(llm, text)})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
