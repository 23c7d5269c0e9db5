#!/usr/bin/env python3
"""Record the quantization fixtures of mtp-core's `quant` tests from the real implementations.

* GGUF blocks: llama.cpp's own Python package `gguf` (`gguf.quants`). For the types it can
  quantize (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) the blocks are random normal weights quantized by
  gguf-py (the inputs are recorded too, so the Rust Q8_0/Q4_0 quantizer is checked bit for bit);
  for the K-quants (no quantizer in gguf-py) they are random bytes with finite, small f16 scales.
  The expected values are gguf-py's numpy `dequantize`.
* MLX affine: `mlx.core.quantize` / `dequantize` / `quantized_matmul` (pip `mlx[cpu]`) on random
  weights, for bits 2/4/8 and group sizes 32/64/128.

Run (from the repository root, any machine with Python 3.10+):

    python3 -m venv /tmp/quant-venv
    /tmp/quant-venv/bin/pip install -r tools/quant_fixtures/requirements.txt
    /tmp/quant-venv/bin/python tools/quant_fixtures/record.py

It rewrites crates/mtp-core/src/quant/fixtures/{gguf_blocks,mlx_affine}.json (a few KB each).
"""

import json
import pathlib

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

OUT = pathlib.Path(__file__).resolve().parents[2] / "crates/mtp-core/src/quant/fixtures"
rng = np.random.default_rng(20261201)

QUANTIZABLE = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]
# (name, byte offsets of the f16 scale fields inside one block)
K_TYPES = {
    "Q2_K": [80, 82],
    "Q3_K": [108],
    "Q4_K": [0, 2],
    "Q5_K": [0, 2],
    "Q6_K": [208],
}


def floats(a):
    return [float(x) for x in np.asarray(a, dtype=np.float32).reshape(-1)]


def gguf_cases():
    cases = []
    for name in QUANTIZABLE:
        qtype = T[name]
        rows, cols = 2, 64
        values = rng.standard_normal((rows, cols)).astype(np.float32)
        values[0, 5] = 0.0
        blocks = quants.quantize(values, qtype)
        deq = quants.dequantize(blocks, qtype)
        cases.append(
            {
                "type": name,
                "id": int(qtype),
                "rows": rows,
                "cols": cols,
                "input": floats(values),
                "bytes": blocks.tobytes().hex(),
                "expected": floats(deq),
            }
        )
    for name, scale_offsets in K_TYPES.items():
        qtype = T[name]
        block, size = quants.GGML_QUANT_SIZES[qtype]
        rows, cols = 2, block
        raw = rng.integers(0, 256, size=(rows, size), dtype=np.uint8)
        for r in range(rows):
            for off in scale_offsets:
                d = np.float16(rng.uniform(-0.05, 0.05))
                raw[r, off : off + 2] = np.frombuffer(d.tobytes(), dtype=np.uint8)
        deq = quants.dequantize(raw, qtype)
        cases.append(
            {
                "type": name,
                "id": int(qtype),
                "rows": rows,
                "cols": cols,
                "bytes": raw.tobytes().hex(),
                "expected": floats(deq),
            }
        )
    return cases


def mlx_cases():
    import mlx.core as mx

    cases = []
    for bits, group in [(4, 32), (4, 64), (8, 32), (8, 128), (2, 64)]:
        rows, cols = 3, 128
        w = mx.array(rng.standard_normal((rows, cols)).astype(np.float32))
        q, scales, biases = mx.quantize(w, group_size=group, bits=bits)
        deq = mx.dequantize(q, scales, biases, group_size=group, bits=bits)
        x = mx.array(rng.standard_normal((2, cols)).astype(np.float32))
        y = mx.quantized_matmul(x, q, scales, biases, transpose=True, group_size=group, bits=bits)
        mx.eval(q, scales, biases, deq, y)
        cases.append(
            {
                "bits": bits,
                "group_size": group,
                "rows": rows,
                "cols": cols,
                "words": [int(v) for v in np.array(q).reshape(-1)],
                "scales": floats(np.array(scales)),
                "biases": floats(np.array(biases)),
                "expected": floats(np.array(deq)),
                "x": floats(np.array(x)),
                "x_rows": 2,
                "y": floats(np.array(y)),
            }
        )
    return cases, mx.__version__


def main():
    import gguf
    from importlib.metadata import version

    OUT.mkdir(parents=True, exist_ok=True)
    gguf_doc = {
        "source": f"gguf-py {version('gguf')} (gguf.quants.quantize / dequantize)",
        "recorded_by": "tools/quant_fixtures/record.py",
        "cases": gguf_cases(),
    }
    (OUT / "gguf_blocks.json").write_text(json.dumps(gguf_doc) + "\n")
    cases, mlx_version = mlx_cases()
    mlx_doc = {
        "source": f"mlx {mlx_version} (mlx.core.quantize / dequantize / quantized_matmul, CPU)",
        "recorded_by": "tools/quant_fixtures/record.py",
        "cases": cases,
    }
    (OUT / "mlx_affine.json").write_text(json.dumps(mlx_doc) + "\n")
    for f in sorted(OUT.glob("*.json")):
        print(f, f.stat().st_size, "bytes")
    del gguf


if __name__ == "__main__":
    main()
