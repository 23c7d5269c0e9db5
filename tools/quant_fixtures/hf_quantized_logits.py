#!/usr/bin/env python3
"""Record what HF transformers computes for a Gemma 4 fixture whose projection and embedding
weights went through GGUF Q8_0 / Q4_0 (llama.cpp's `gguf.quants` quantize, then dequantize): the
reference for `mtp --quantize q8|q4`, which must give the same logits on the exact (reference)
backend.

Every `nn.Linear` and `nn.Embedding` weight whose rows are whole 32-weight blocks is replaced
(the tied LM head with it); norms, scalars and MoE expert stacks stay as they are, as in the
runner's loader.

    python3 -m venv /tmp/quant-hf-venv
    /tmp/quant-hf-venv/bin/pip install -r tools/quant_fixtures/requirements-hf.txt
    /tmp/quant-hf-venv/bin/python tools/quant_fixtures/hf_quantized_logits.py

writes crates/runner/tests/fixtures/hf_quantized/<case>.safetensors (prompt ids and the logits
per scheme).
"""

import pathlib

import numpy as np
import torch
from gguf import GGMLQuantizationType as T
from gguf import quants
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests/fixtures/gemma4"
OUT = ROOT / "crates/runner/tests/fixtures/hf_quantized"
CASES = ["swa_basic", "e2b_like", "k_eq_v"]
SCHEMES = {"q8": T.Q8_0, "q4": T.Q4_0}


def quantize_model(model, qtype):
    seen = set()
    with torch.no_grad():
        for module in model.modules():
            if not isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
                continue
            w = module.weight
            if id(w) in seen or w.ndim != 2 or w.shape[-1] % 32 != 0:
                continue
            seen.add(id(w))
            blocks = quants.quantize(w.detach().float().numpy(), qtype)
            w.copy_(torch.from_numpy(np.asarray(quants.dequantize(blocks, qtype), dtype=np.float32)))
    return len(seen)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    for case in CASES:
        prompt = load_file(FIXTURES / case / "reference.safetensors")["prompt_ids"].reshape(1, -1).long()
        tensors = {"prompt_ids": prompt[0].contiguous()}
        for scheme, qtype in SCHEMES.items():
            model = AutoModelForCausalLM.from_pretrained(FIXTURES / case / "target", dtype=torch.float32).eval()
            n = quantize_model(model, qtype)
            with torch.no_grad():
                logits = model(prompt).logits[0].float()
            tensors[f"logits_{scheme}"] = logits.contiguous()
            print(case, scheme, n, "matrices quantized", tuple(logits.shape))
        save_file(tensors, OUT / f"{case}.safetensors", metadata={"recorded_by": "tools/quant_fixtures/hf_quantized_logits.py"})


if __name__ == "__main__":
    main()
