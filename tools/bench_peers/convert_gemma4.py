#!/usr/bin/env python3
"""llama.cpp's `convert_hf_to_gguf.py` on a Gemma 4 checkpoint whose full-attention layers have
the sliding layers' head size.

The converter reads the full layers' head size from `global_head_dim` or from a full layer's
entry in `per_layer_config`, and asserts one is there. HF transformers 5.24 loads a Gemma 4
config into `per_layer_config` and leaves out an entry equal to the model's `head_dim` (as the
default pair's is: 64 everywhere), so the converter finds neither and stops. This runs the
converter unchanged with its hyperparameters completed by what the config means:
`global_head_dim = head_dim` where neither says otherwise.

Usage: convert_gemma4.py CONVERTER [converter arguments...]
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path


def complete(hparams: dict) -> dict:
    """`global_head_dim` = `head_dim` where no full layer has a head size of its own."""
    for h in (hparams, hparams.get("text_config") or {}):
        if "head_dim" not in h or h.get("global_head_dim") is not None:
            continue
        per_layer = h.get("per_layer_config") or {}
        full = [i for i, kind in enumerate(h.get("layer_types", [])) if kind == "full_attention"]
        if not any("head_dim" in per_layer.get(str(i), per_layer.get(i, {})) for i in full):
            h["global_head_dim"] = h["head_dim"]
    return hparams


def main() -> None:
    converter = Path(sys.argv[1]).resolve()
    sys.path.insert(0, str(converter.parent))
    sys.path.insert(1, str(converter.parent / "gguf-py"))
    from conversion import base  # the converter's own package, beside it

    load = base.ModelBase.load_hparams

    def load_completed(dir_model, is_mistral_format):
        return complete(load(dir_model, is_mistral_format))

    base.ModelBase.load_hparams = staticmethod(load_completed)
    sys.argv = [str(converter), *sys.argv[2:]]
    runpy.run_path(str(converter), run_name="__main__")


if __name__ == "__main__":
    main()
