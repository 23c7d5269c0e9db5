#!/usr/bin/env python3
"""Train the embedded default pair: a tiny Gemma 4 target and its gemma4_assistant drafter, on the KJV.

    python tools/train_tiny_pair/train_tiny_pair.py                 # everything -> models/default
    python tools/train_tiny_pair/train_tiny_pair.py --stage assistant   # reuse the saved target

Stages: corpus + tokenizer (seconds), target (--target-steps), assistant (--assistant-steps).
The target is trained in f32, rounded to bf16 (what ships), and the assistant is distilled from
that rounded target. Artifacts (HF format, bf16): <out>/target/{config.json, model.safetensors,
generation_config.json, tokenizer.json, tokenizer_config.json}, <out>/assistant/{config.json,
model.safetensors}, and <out>/training.json (settings, losses, times). Seeded; deterministic on
one machine with the same thread count.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import Gemma4AssistantForCausalLM, Gemma4ForCausalLM  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import configs  # noqa: E402
import corpus  # noqa: E402
import tokenizer as tokenizer_mod  # noqa: E402
import train_assistant  # noqa: E402
import train_target  # noqa: E402
from data import token_stream  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
EXPECTED_TRANSFORMERS = "5.24.0"
log = logging.getLogger("train_tiny_pair")


def save_model(model, path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(path, safe_serialization=True)
    model.float()


def set_generation_defaults(model) -> None:
    gc = model.generation_config
    gc.bos_token_id = tokenizer_mod.BOS_ID
    gc.eos_token_id = tokenizer_mod.EOS_ID
    gc.pad_token_id = tokenizer_mod.PAD_ID


def set_sampling_defaults(model) -> None:
    """The target's sampling defaults (models/README.md, "Sampling defaults"): `mtp generate`
    and HF generate() sample with them unless told otherwise; greedy decoding of a model this
    small loops, and at 0.6 with top-k 40 / top-p 0.9 the text stays KJV-like."""
    gc = model.generation_config
    gc.do_sample = True
    gc.temperature = 0.6
    gc.top_k = 40
    gc.top_p = 0.9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "models" / "default")
    ap.add_argument("--stage", choices=["all", "assistant"], default="all")
    ap.add_argument("--seed", type=int, default=20261130)
    ap.add_argument("--vocab-size", type=int, default=configs.VOCAB_SIZE)
    ap.add_argument("--target-steps", type=int, default=900)
    ap.add_argument("--assistant-steps", type=int, default=450)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--assistant-batch", type=int, default=8)
    ap.add_argument("--target-lr", type=float, default=2e-3)
    ap.add_argument("--assistant-lr", type=float, default=1e-3)
    ap.add_argument("--assistant-width", type=int, default=192,
                    help="the assistant's hidden size (a multiple of 64; llama.cpp needs it below the target's 192)")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if transformers.__version__ != EXPECTED_TRANSFORMERS:
        log.warning("transformers %s, expected %s", transformers.__version__, EXPECTED_TRANSFORMERS)
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)

    t0 = time.time()
    train_ch, held_ch = corpus.split(corpus.read_chapters())
    target_dir, assistant_dir = args.out / "target", args.out / "assistant"
    report_path = args.out / "training.json"
    report = json.loads(report_path.read_text()) if args.stage == "assistant" else {}

    if args.stage == "all":
        tok = tokenizer_mod.train_tokenizer([c.text for c in train_ch], args.vocab_size)
    else:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(target_dir / "tokenizer.json"))
    train_stream, held_stream = token_stream(tok, train_ch), token_stream(tok, held_ch)
    log.info("corpus: %d train chapters (%d tokens), %d held-out chapters (%d tokens)",
             len(train_ch), train_stream.numel(), len(held_ch), held_stream.numel())

    if args.stage == "all":
        target, target_report = train_target.train(
            train_stream, held_stream, seed=args.seed, steps=args.target_steps, batch=args.batch,
            lr=args.target_lr, eval_every=args.eval_every,
        )
        set_generation_defaults(target)
        set_sampling_defaults(target)
        save_model(target, target_dir)
        tokenizer_mod.save(tok, target_dir, configs.MAX_POSITIONS)
        # What ships is bf16: measure and distil against exactly that.
        target = Gemma4ForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
        target_report["shipped_bf16_heldout_loss"] = train_target.heldout_loss(
            target, train_target.fixed_windows(held_stream, 64, configs.SEQ_LEN + 1))
        target_report["shipped_bf16_heldout_perplexity"] = math.exp(target_report["shipped_bf16_heldout_loss"])
        report = {
            "seed": args.seed,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "machine": f"{platform.machine()} {platform.processor() or ''} threads={args.threads}".strip(),
            "corpus": {
                "train_chapters": len(train_ch), "train_tokens": int(train_stream.numel()),
                "heldout_chapters": len(held_ch), "heldout_tokens": int(held_stream.numel()),
            },
            "target": {"steps": args.target_steps, "batch": args.batch, "seq_len": configs.SEQ_LEN,
                       "lr": args.target_lr, **target_report},
        }
        report_path.parent.mkdir(parents=True, exist_ok=True)
        report_path.write_text(json.dumps(report, indent=2) + "\n")
    else:
        target = Gemma4ForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()

    assistant, assistant_report = train_assistant.train(
        target, train_stream, held_stream, seed=args.seed + 7, steps=args.assistant_steps, batch=args.assistant_batch,
        lr=args.assistant_lr, eval_every=args.eval_every, width=args.assistant_width,
    )
    set_generation_defaults(assistant)
    save_model(assistant, assistant_dir)
    report["assistant"] = {"steps": args.assistant_steps, "batch": args.assistant_batch, "lr": args.assistant_lr,
                           "width": args.assistant_width, **assistant_report}
    report["total_seconds"] = time.time() - t0
    report_path.write_text(json.dumps(report, indent=2) + "\n")
    log.info("done in %.0fs -> %s", time.time() - t0, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
