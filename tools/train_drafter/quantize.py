"""Store a trained drafter small: its tied head MLX-quantized, everything else in bfloat16.

The drafter's `vocab x width` head (`model.embed_tokens`, tied) is almost all of its size; this
quantizes it with MLX's own affine quantizer (`mlx.core.quantize`: packed `u32` words plus
per-group `scales` and `biases`, the layout mlx-lm writes) and records the parameters in
`config.json`'s `quantization` section, which `mtp generate --draft DIR` reads. The other
floating-point tensors are stored as bfloat16 and the token ordering as int32.

    python tools/train_drafter/quantize.py --src /tmp/gemma-3-270m-drafter \
        --out models/gemma-3-270m-drafter --bits 4 --group-size 64
"""

import argparse
import json
import shutil
from pathlib import Path

import mlx.core as mx

HEAD = "model.embed_tokens"


def quantize_head(weight, bits: int, group_size: int):
    """The head as it is stored: MLX affine `(packed, scales, biases)`, scales and biases in
    bfloat16. `train.py --quantized-head` trains against exactly this grid."""
    packed, scales, biases = mx.quantize(weight.astype(mx.float32), group_size=group_size, bits=bits)
    return packed, scales.astype(mx.bfloat16), biases.astype(mx.bfloat16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", type=Path, required=True, help="the HF directory train.py exported")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--bits", type=int, default=4, choices=[2, 4, 8])
    parser.add_argument("--group-size", type=int, default=64, choices=[32, 64, 128])
    args = parser.parse_args()

    tensors = mx.load(str(args.src / "model.safetensors"))
    if f"{HEAD}.weight" not in tensors:
        raise SystemExit(f"{args.src}: no {HEAD}.weight (not a gemma4_assistant export?)")
    out = {}
    for name, value in tensors.items():
        if name == f"{HEAD}.weight":
            packed, scales, biases = quantize_head(value, args.bits, args.group_size)
            out[name] = packed
            out[f"{HEAD}.scales"] = scales
            out[f"{HEAD}.biases"] = biases
        elif mx.issubdtype(value.dtype, mx.floating):
            out[name] = value.astype(mx.bfloat16)
        else:
            out[name] = value.astype(mx.int32)
    args.out.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(args.out / "model.safetensors"), out, metadata={"format": "mlx"})

    config = json.loads((args.src / "config.json").read_text())
    config["quantization"] = {"group_size": args.group_size, "bits": args.bits, "mode": "affine"}
    config["dtype"] = "bfloat16"
    (args.out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for extra in ("generation_config.json", "training.json"):
        if (args.src / extra).exists():
            shutil.copy(args.src / extra, args.out / extra)
    size = sum(p.stat().st_size for p in args.out.iterdir())
    print(f"wrote {args.out} ({size / 1e6:.1f} MB; head {args.bits}-bit, group {args.group_size})")


if __name__ == "__main__":
    main()
