#!/usr/bin/env python3
"""Write an MLX affine-quantized copy of a tiny Gemma 4 fixture checkpoint, the way mlx-lm's
`convert -q` does (`mlx.nn.quantize`: every Linear / Embedding weight whose last axis is a
multiple of the group size becomes `weight` (packed uint32) + `scales` + `biases` from
`mlx.core.quantize`; config.json gains `"quantization": {"group_size", "bits"}`), plus a dense
copy whose matrices are `mlx.core.dequantize` of those (what the quantized model computes).

    /tmp/quant-venv/bin/python tools/quant_fixtures/mlx_checkpoint.py

reads tests/fixtures/gemma4/swa_basic/target and writes
crates/runner/tests/fixtures/mlx_q4_swa_basic/{quantized,dequantized}/.
"""

import json
import pathlib
import shutil

import mlx.core as mx

ROOT = pathlib.Path(__file__).resolve().parents[2]
SRC = ROOT / "tests/fixtures/gemma4/swa_basic/target"
OUT = ROOT / "crates/runner/tests/fixtures/mlx_q4_swa_basic"
GROUP, BITS = 32, 4


def quantizable(name, w):
    # mlx-lm quantizes Linear and Embedding modules: 2-D `.weight`s that are not norms.
    return name.endswith(".weight") and w.ndim == 2 and "norm" not in name and w.shape[-1] % GROUP == 0


def main():
    weights = mx.load(str(SRC / "model.safetensors"))
    quantized, dense = {}, {}
    for name, w in sorted(weights.items()):
        if quantizable(name, w):
            q, s, b = mx.quantize(w, group_size=GROUP, bits=BITS)
            module = name[: -len(".weight")]
            quantized[name] = q
            quantized[module + ".scales"] = s
            quantized[module + ".biases"] = b
            dense[name] = mx.dequantize(q, s, b, group_size=GROUP, bits=BITS)
        else:
            quantized[name] = w
            dense[name] = w
    config = json.loads((SRC / "config.json").read_text())
    for sub, tensors, quant in [("quantized", quantized, True), ("dequantized", dense, False)]:
        out = OUT / sub
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        mx.save_safetensors(str(out / "model.safetensors"), tensors, metadata={"format": "mlx"})
        c = dict(config)
        if quant:
            c["quantization"] = {"group_size": GROUP, "bits": BITS}
            c["quantization_config"] = {"group_size": GROUP, "bits": BITS}
        (out / "config.json").write_text(json.dumps(c, indent=2) + "\n")
        for f in ["tokenizer.json", "tokenizer_config.json"]:
            shutil.copy(SRC / f, out / f)
    (OUT / "SOURCE.md").write_text(
        f"Written by tools/quant_fixtures/mlx_checkpoint.py with mlx {mx.__version__} from "
        f"tests/fixtures/gemma4/swa_basic/target (affine, bits {BITS}, group {GROUP}).\n"
    )
    for f in sorted(OUT.rglob("*.safetensors")):
        print(f, f.stat().st_size)


if __name__ == "__main__":
    main()
