#!/usr/bin/env python3
"""Convert the tiny Gemma 4 mixture-of-experts fixture with mlx-vlm, 4-bit affine, the way the
`mlx-community` Gemma 4 checkpoints are made (`mlx_vlm convert -q`: mlx-vlm's `sanitize` splits
each layer's `experts.gate_up_proj` into SwitchGLU `gate_proj` / `up_proj`, renames the text
model to `language_model.model.`, and `mlx.nn.quantize` packs every matrix whose rows split into
whole groups), then record what mlx-vlm's own forward computes on the quantized model: the
logits of every prompt position and a greedy continuation (full recompute per step, no cache).

    python3 -m venv /tmp/mlxvlm && /tmp/mlxvlm/bin/pip install -r tools/quant_fixtures/requirements-mlx-vlm.txt
    /tmp/mlxvlm/bin/python tools/quant_fixtures/mlx_vlm_moe.py

reads tests/fixtures/gemma4/mm_26b_moe/target and writes
crates/runner/tests/fixtures/mlx_q4_mm_26b_moe/{model files, reference.json}.

mlx-vlm 0.7.10 reads the full-attention head size from `global_head_dim` (default 512), while
transformers 5.24 serialises it as `per_layer_config`; the copy converted here gets
`global_head_dim` set to the per-layer value, which both then read alike.
"""

import json
import pathlib
import shutil
import tempfile

import mlx.core as mx
import mlx_vlm
from mlx_vlm.convert import convert
from mlx_vlm.utils import load_model

ROOT = pathlib.Path(__file__).resolve().parents[2]
SRC = ROOT / "tests/fixtures/gemma4/mm_26b_moe/target"
OUT = ROOT / "crates/runner/tests/fixtures/mlx_q4_mm_26b_moe"
GROUP, BITS = 32, 4
PROMPT = [2, 17, 33, 48, 5, 61, 70, 12, 9, 40, 27]
NEW_TOKENS = 12
KEEP = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]


def logits_of(model, ids):
    out = model.language_model(mx.array([ids]))
    return out.logits[0].astype(mx.float32)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        src = pathlib.Path(tmp) / "src"
        shutil.copytree(SRC, src)
        config = json.loads((src / "config.json").read_text())
        text = config["text_config"]
        heads = {int(v["head_dim"]) for v in text.get("per_layer_config", {}).values() if "head_dim" in v}
        if len(heads) == 1:
            text["global_head_dim"] = heads.pop()
        (src / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        dst = pathlib.Path(tmp) / "mlx"
        convert(str(src), mlx_path=str(dst), quantize=True, q_group_size=GROUP, q_bits=BITS, dtype="float32")
        if OUT.exists():
            shutil.rmtree(OUT)
        OUT.mkdir(parents=True)
        for f in KEEP:
            shutil.copy(dst / f, OUT / f)
        model = load_model(dst)
    logits = logits_of(model, PROMPT)
    ids = list(PROMPT)
    for _ in range(NEW_TOKENS):
        ids.append(int(mx.argmax(logits_of(model, ids)[-1]).item()))
    stored = mx.load(str(OUT / "model.safetensors"))
    reference = {
        "source": "tests/fixtures/gemma4/mm_26b_moe/target",
        "mlx_version": mx.__version__,
        "mlx_vlm_version": mlx_vlm.__version__,
        "group_size": GROUP,
        "bits": BITS,
        "quantized_modules": sorted(k[: -len(".scales")] for k in stored if k.endswith(".scales")),
        "prompt_ids": PROMPT,
        "prompt_logits": [[float(x) for x in row] for row in logits.tolist()],
        "greedy_ids": ids[len(PROMPT):],
    }
    (OUT / "reference.json").write_text(json.dumps(reference) + "\n")
    (OUT / "SOURCE.md").write_text(
        f"Written by tools/quant_fixtures/mlx_vlm_moe.py with mlx {mx.__version__} and mlx-vlm "
        f"{mlx_vlm.__version__} from tests/fixtures/gemma4/mm_26b_moe/target "
        f"(`mlx_vlm convert -q --q-group-size {GROUP} --q-bits {BITS} --dtype float32`).\n"
    )
    print(f"wrote {OUT}: greedy {reference['greedy_ids']}")


if __name__ == "__main__":
    main()
