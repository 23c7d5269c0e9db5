"""Read a feature directory written by `cargo run --release -p runner --example drafter_features`.

Every file is a flat little-endian array with one row per window (see the example's docs); this
module maps them with numpy (nothing is read until used) and hands out windows as torch tensors.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

KINDS = ("sliding_attention", "full_attention")


@dataclass
class Features:
    """The memory-mapped arrays of a feature directory, `windows` rows each."""

    meta: dict
    tokens: np.ndarray  # [n, L] u32
    hidden: np.ndarray  # [n, L, H] f16
    kv: dict  # kind -> (keys, values), each [n, L, kv_heads, head_dim] f16
    topk_ids: np.ndarray  # [n, L, k] u32
    topk_logp: np.ndarray  # [n, L, k] f16

    @property
    def windows(self) -> int:
        return int(self.meta["windows"])

    @property
    def window(self) -> int:
        return int(self.meta["window"])

    def batch(self, rows: list[int]) -> dict:
        """The windows `rows` as torch tensors (f32; ids int64), keys and values `[B, heads, L, dim]`
        as HF's `shared_kv_states` holds them."""
        def t(a):
            return torch.from_numpy(np.ascontiguousarray(a[rows]))

        shared = {kind: (t(k).float().permute(0, 2, 1, 3), t(v).float().permute(0, 2, 1, 3))
                  for kind, (k, v) in self.kv.items()}
        return {
            "tokens": t(self.tokens).long(),
            "hidden": t(self.hidden).float(),
            "shared": shared,
            "topk_ids": t(self.topk_ids).long(),
            "topk_logp": t(self.topk_logp).float(),
        }


def open_features(directory: Path) -> Features:
    meta = json.loads((directory / "meta.json").read_text())
    n, L, H, k = meta["windows"], meta["window"], meta["hidden_size"], meta["top_k"]

    def mapped(name: str, dtype, shape):
        count = int(np.prod(shape))
        return np.memmap(directory / name, dtype=dtype, mode="r", shape=shape) if count else np.zeros(shape, dtype)

    kv = {}
    for kind in KINDS:
        layer = meta["layers"][kind]
        shape = (n, L, layer["kv_heads"], layer["head_dim"])
        prefix = "sliding" if kind == "sliding_attention" else "full"
        kv[kind] = (mapped(f"{prefix}_k.f16", "<f2", shape), mapped(f"{prefix}_v.f16", "<f2", shape))
    return Features(
        meta=meta,
        tokens=mapped("tokens.u32", "<u4", (n, L)),
        hidden=mapped("hidden.f16", "<f2", (n, L, H)),
        kv=kv,
        topk_ids=mapped("topk_ids.u32", "<u4", (n, L, k)),
        topk_logp=mapped("topk_logp.f16", "<f2", (n, L, k)),
    )
