#!/usr/bin/env python3
"""Record HF transformers' outputs on the real model's GGUF, dequantized, as a JSON reference for
the Rust tests: the exact computation the quantized file stands for, to set beside llama.cpp's.

transformers loads a GGUF by dequantizing every tensor (`from_pretrained(dir, gguf_file=...)`,
which needs the `gguf` and `accelerate` packages); here in float32 with eager attention. For each
prompt of prompts.py, fed the token ids llama.cpp gave it (taken from the llama.cpp fixture, whose
tokenization the Rust tokenizer matches):

* `greedy_ids`: 32 greedy tokens (`generate(do_sample=False)`, EOS ignored);
* `top5`: at every position p of prompt + continuation (except the last generated token), the five
  highest next-token logits `[[id, logit], ...]`, from one forward over the whole sequence.

    python record_hf_gguf.py --model MODEL.gguf --llama-cpp gemma3_270m_llama_cpp.json --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fetch import sha256_of  # noqa: E402

NEW_TOKENS = 32
TOP_K = 5


def top_k(row: torch.Tensor) -> list[list[float]]:
    values, ids = torch.topk(row, TOP_K)
    return [[int(i), float(v)] for v, i in zip(values, ids)]


def run_prompt(model, prompt_ids: list[int]) -> dict:
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt_ids]),
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            do_sample=False,
            eos_token_id=None,
        )
        greedy = [int(t) for t in out[0][len(prompt_ids) :]]
        fed = prompt_ids + greedy[:-1]
        logits = model(torch.tensor([fed])).logits[0]
    return {"prompt_ids": prompt_ids, "greedy_ids": greedy, "top5": [top_k(r) for r in logits]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, type=Path)
    parser.add_argument("--llama-cpp", required=True, type=Path, help="the llama.cpp fixture (prompt ids)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(
        args.model.parent, gguf_file=args.model.name, dtype=torch.float32, attn_implementation="eager"
    )
    model.eval()
    model.generation_config.pad_token_id = 0
    reference = json.loads(args.llama_cpp.read_text(encoding="utf-8"))
    out = {
        "source": "HF transformers "
        + transformers.__version__
        + ", torch "
        + torch.__version__
        + ", GGUF dequantized to float32, eager attention (tools/real_models/record_hf_gguf.py)",
        "model_file": args.model.name,
        "model_sha256": sha256_of(args.model),
        "new_tokens": NEW_TOKENS,
        "prompts": [],
    }
    for p in reference["prompts"]:
        print(f"prompt {p['name']}", file=sys.stderr)
        out["prompts"].append({"name": p["name"], **run_prompt(model, p["prompt_ids"])})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
