#!/usr/bin/env python3
"""Acceptance of the default pair over the committed prompts: HF transformers vs our runner.

    python tools/train_tiny_pair/evaluate.py hf      # HF assisted generation -> models/default/eval/hf.json
    python tools/train_tiny_pair/evaluate.py ours    # `mtp generate --json` -> models/default/eval/ours.json
    python tools/train_tiny_pair/evaluate.py card    # the model card's tables (markdown) from both

For every prompt (BOS + the prompt's tokens), both sides generate `--num-predict` tokens with EOS
ignored: the target alone (greedy, recorded to compare token for token), then greedy and
temperature-0.8 (no top-k / top-p) speculative decoding at constant draft depths 1..8 (sampled
runs repeat over `--seeds` seeds). Per depth we sum, over prompts and seeds, the rounds and the
drafted / accepted counts at each draft position. Per-position acceptance at i is
accepted_i / drafted_i (the chance the i-th draft is accepted given it was drafted); the mean
accepted length is accepted drafts per round (tokens per round = that + 1).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))
import prompts as prompts_mod  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
MODEL_DIR = REPO_ROOT / "models" / "default"
EVAL_DIR = MODEL_DIR / "eval"
MODES = {"greedy": 0.0, "t0.8": 0.8}


def depth_list(spec: str) -> list[int]:
    lo, _, hi = spec.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


class Tally:
    """Rounds and per-position drafted/accepted counts of one (mode, depth) cell."""

    def __init__(self, depth: int):
        self.depth = depth
        self.rounds = 0
        self.drafted = [0] * depth
        self.accepted = [0] * depth
        self.tokens = 0

    def add_round(self, drafted: int, accepted: int) -> None:
        self.rounds += 1
        for i in range(drafted):
            self.drafted[i] += 1
        for i in range(accepted):
            self.accepted[i] += 1

    def as_json(self) -> dict:
        acc = sum(self.accepted)
        return {
            "depth": self.depth,
            "rounds": self.rounds,
            "tokens": self.tokens,
            "drafted_per_position": self.drafted,
            "accepted_per_position": self.accepted,
            "acceptance_per_position": [a / d if d else None for a, d in zip(self.accepted, self.drafted)],
            "mean_accepted_length": acc / self.rounds if self.rounds else None,
        }


# ------------------------------------------------------------------------------------------------
# HF transformers
# ------------------------------------------------------------------------------------------------
def run_hf(args) -> dict:
    import torch
    import transformers
    from tokenizers import Tokenizer
    from transformers import Gemma4AssistantForCausalLM, Gemma4ForCausalLM
    from transformers.generation import candidate_generator as cg

    torch.set_num_threads(args.threads)
    target = Gemma4ForCausalLM.from_pretrained(args.model_dir / "target", dtype=torch.float32).eval()
    assistant = Gemma4AssistantForCausalLM.from_pretrained(args.model_dir / "assistant", dtype=torch.float32).eval()
    tok = Tokenizer.from_file(str(args.model_dir / "target" / "tokenizer.json"))
    for m in (target, assistant):
        m.generation_config.eos_token_id = None
    bos = target.config.bos_token_id

    rounds: list[tuple[int, int]] = []
    cls = cg.SinglePositionMultiTokenCandidateGenerator
    orig_get, orig_update = cls.get_candidates, cls.update_candidate_strategy
    pending: list[int] = []

    def get_candidates(self, input_ids, *a, **kw):
        cand, logits = orig_get(self, input_ids, *a, **kw)
        pending.append(int(cand.shape[1] - input_ids.shape[1]))
        return cand, logits

    def update(self, input_ids, scores, num_matches):
        rounds.append((pending.pop(), int(num_matches)))
        return orig_update(self, input_ids, scores, num_matches)

    cls.get_candidates, cls.update_candidate_strategy = get_candidates, update

    prompts = prompts_mod.read(args.prompts)
    N = args.num_predict
    result = {"runner": f"transformers {transformers.__version__} / torch {torch.__version__}",
              "prompt_ids": [], "target_greedy": [], "cells": {}}
    base = dict(max_new_tokens=N, min_new_tokens=N, eos_token_id=None, pad_token_id=target.config.pad_token_id,
                top_k=None, top_p=None)
    t0 = time.time()
    encoded = []
    for p in prompts:
        ids = [bos] + tok.encode(p, add_special_tokens=False).ids
        encoded.append(torch.tensor([ids]))
        result["prompt_ids"].append(ids)
        with torch.no_grad():
            out = target.generate(encoded[-1], attention_mask=torch.ones_like(encoded[-1]), do_sample=False, **base)
        result["target_greedy"].append(out[0, len(ids):].tolist())
    for mode, temperature in MODES.items():
        for depth in args.depths:
            tally = Tally(depth)
            assistant.generation_config.num_assistant_tokens = depth
            assistant.generation_config.num_assistant_tokens_schedule = "constant"
            seeds = [0] if temperature == 0 else list(range(args.seeds))
            for seed in seeds:
                for x in encoded:
                    rounds.clear()
                    torch.manual_seed(seed)
                    sample = dict(do_sample=True, temperature=temperature) if temperature else dict(do_sample=False)
                    with torch.no_grad():
                        out = target.generate(x, attention_mask=torch.ones_like(x), assistant_model=assistant,
                                              **sample, **base)
                    tally.tokens += out.shape[1] - x.shape[1]
                    for d, a in rounds:
                        if d > 0:
                            tally.add_round(d, min(a, d))
            result["cells"][f"{mode}/{depth}"] = tally.as_json()
            print(f"hf {mode} depth {depth}: {tally.as_json()['mean_accepted_length']:.3f} ({time.time() - t0:.0f}s)",
                  flush=True)
    cls.get_candidates, cls.update_candidate_strategy = orig_get, orig_update
    return result


# ------------------------------------------------------------------------------------------------
# Our runner
# ------------------------------------------------------------------------------------------------
def mtp_json(mtp: Path, model_dir: Path, prompt: str, extra: list[str]) -> dict:
    cmd = [str(mtp), "generate", "--model", str(model_dir / "target"), "--json", "--ignore-eos", *extra, prompt]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def run_ours(args) -> dict:
    prompts = prompts_mod.read(args.prompts)
    N = str(args.num_predict)
    result = {"runner": f"mtp ({args.backend})", "prompt_ids": [], "target_greedy": [], "cells": {}}
    common = ["--backend", args.backend, "-n", N]
    t0 = time.time()
    for p in prompts:
        r = mtp_json(args.mtp, args.model_dir, p, common + ["--temperature", "0"])
        result["prompt_ids"].append(r["prompt_tokens"])
        result["target_greedy"].append(r["tokens"])
    for mode, temperature in MODES.items():
        for depth in args.depths:
            tally = Tally(depth)
            seeds = [0] if temperature == 0 else list(range(args.seeds))
            for seed in seeds:
                for p in prompts:
                    extra = common + ["--draft", str(args.model_dir / "assistant"), "--temperature", str(temperature),
                                      "--draft-tokens", str(depth), "--max-draft-tokens", str(depth),
                                      "--draft-schedule", "constant", "--seed", str(seed)]
                    r = mtp_json(args.mtp, args.model_dir, p, extra)
                    tally.tokens += len(r["tokens"])
                    stats = r["mtp"]
                    tally.rounds += stats["iterations"]
                    for i, pos in enumerate(stats["per_position"][:depth]):
                        tally.drafted[i] += pos["drafted"]
                        tally.accepted[i] += pos["accepted"]
            result["cells"][f"{mode}/{depth}"] = tally.as_json()
            print(f"ours {mode} depth {depth}: {tally.as_json()['mean_accepted_length']:.3f} ({time.time() - t0:.0f}s)",
                  flush=True)
    return result


# ------------------------------------------------------------------------------------------------
# The model card's tables
# ------------------------------------------------------------------------------------------------
def fmt(v) -> str:
    return "–" if v is None else f"{v:.3f}"


def card(args) -> str:
    hf = json.loads(args.hf.read_text())
    ours = json.loads(args.ours.read_text())
    lines = []
    same_prompts = hf["prompt_ids"] == ours["prompt_ids"]
    same = sum(a == b for a, b in zip(hf["target_greedy"], ours["target_greedy"]))
    lines.append(f"Prompt tokens identical: {'yes' if same_prompts else 'NO'}; target greedy continuations "
                 f"identical: {same} of {len(hf['target_greedy'])} prompts.\n")
    for mode in MODES:
        lines.append(f"**{mode}** — mean accepted drafts per round (ours / HF), then per-position acceptance "
                     "(ours / HF):\n")
        depth_max = max(c["depth"] for c in ours["cells"].values())
        header = "| depth | rounds (ours / HF) | mean accepted | " + " | ".join(
            f"p{i}" for i in range(1, depth_max + 1)) + " |"
        lines.append(header)
        lines.append("|" + "---|" * (3 + depth_max))
        for key in sorted((k for k in ours["cells"] if k.startswith(mode + "/")), key=lambda k: int(k.split("/")[1])):
            o, h = ours["cells"][key], hf["cells"].get(key)
            if h is None:
                continue
            cells = [f"{fmt(a)} / {fmt(b)}" for a, b in zip(o["acceptance_per_position"], h["acceptance_per_position"])]
            cells += [""] * (depth_max - len(cells))
            lines.append(f"| {o['depth']} | {o['rounds']} / {h['rounds']} | "
                         f"{fmt(o['mean_accepted_length'])} / {fmt(h['mean_accepted_length'])} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["hf", "ours", "card"])
    ap.add_argument("--model-dir", type=Path, default=MODEL_DIR)
    ap.add_argument("--prompts", type=Path, default=REPO_ROOT / "models" / "prompts.txt")
    ap.add_argument("--num-predict", type=int, default=48)
    ap.add_argument("--depths", type=depth_list, default=depth_list("1-8"))
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--mtp", type=Path, default=REPO_ROOT / "target" / "release" / "mtp")
    ap.add_argument("--backend", default="candle")
    ap.add_argument("--hf", type=Path, default=EVAL_DIR / "hf.json")
    ap.add_argument("--ours", type=Path, default=EVAL_DIR / "ours.json")
    args = ap.parse_args()
    if args.command == "card":
        print(card(args))
        return 0
    result = run_hf(args) if args.command == "hf" else run_ours(args)
    result.update(num_predict=args.num_predict, seeds=args.seeds, temperatures=MODES)
    out = args.hf if args.command == "hf" else args.ours
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
