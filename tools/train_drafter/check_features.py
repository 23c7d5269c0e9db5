#!/usr/bin/env python3
"""Check a feature directory against HF transformers: every window of `--features` (written by
our engine from an HF Gemma 3 or Gemma 4 directory, or a GGUF converted from one) is run through
HF's model with a cache, and the post-norm hidden states, the cached keys and values of the two
layers an assistant reads, and the top-k log-probabilities must agree (f16 storage: 1e-2
relative), and so must every token's input embedding (`embeddings.f16`). HF's cache keeps a sliding layer's last `sliding_window - 1` positions: those are
compared.

    python3 tools/train_drafter/check_features.py --hf tests/fixtures/gemma3/tiny/hf --features /tmp/tf
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
from features import KINDS, open_features  # noqa: E402


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hf", type=Path, required=True)
    parser.add_argument("--features", type=Path, required=True)
    parser.add_argument("--tolerance", type=float, default=1e-2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(str(args.hf), dtype=torch.float32).eval()
    feats = open_features(args.features)
    worst = {}
    for w in range(feats.windows):
        batch = feats.batch([w])
        with torch.no_grad():
            out = model(batch["tokens"], use_cache=True, output_hidden_states=True)
        checks = {"hidden": (batch["hidden"], out.hidden_states[-1])}
        logp = torch.log_softmax(out.logits.float(), -1)
        checks["topk_logp"] = (batch["topk_logp"], torch.gather(logp, -1, batch["topk_ids"]))
        hf_top = logp.topk(batch["topk_ids"].shape[-1], dim=-1).values
        checks["topk_order"] = (batch["topk_logp"], hf_top)
        for kind in KINDS:
            index = feats.meta["layers"][kind]["index"]
            layer = out.past_key_values.layers[index]
            kept = layer.keys.shape[2]
            ours_k, ours_v = batch["shared"][kind]
            checks[f"{kind}.keys"] = (ours_k[:, :, -kept:], layer.keys)
            checks[f"{kind}.values"] = (ours_v[:, :, -kept:], layer.values)
        for name, (ours, theirs) in checks.items():
            worst[name] = max(worst.get(name, 0.0), rel(ours, theirs))
    vocab, hidden = feats.meta["vocab_size"], feats.meta["hidden_size"]
    ours = torch.from_numpy(np.fromfile(args.features / "embeddings.f16", dtype="<f2").astype(np.float32))
    with torch.no_grad():
        theirs = model.get_input_embeddings()(torch.arange(vocab)).float()
    worst["embeddings"] = rel(ours.view(vocab, hidden), theirs)
    for name, err in worst.items():
        print(f"{name}: max rel err {err:.2e}")
    bad = {n: e for n, e in worst.items() if e > args.tolerance}
    if bad:
        raise SystemExit(f"features differ from HF beyond {args.tolerance}: {bad}")
    print(f"{feats.windows} windows agree with HF")


if __name__ == "__main__":
    main()
