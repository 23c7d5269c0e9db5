#!/usr/bin/env python3
"""BENCHMARKS.md's per-round breakdown table from `mtp bench` JSON files (plain or gzipped):
for every fixed-depth variant, the mean time of each part of a round (`round_secs_by_depth[].
mean_phases`: draft, target forward, unembedding, host work of verification, cache commit,
emission, the rest), the cost model's k·t_d + t_v(k+1) from the same run's cost curve, and
the share of the round outside drafting, the forward and the unembedding.

Usage: phases_table.py LABEL=FILE.json[.gz] ... [--update BENCHMARKS.md]
       (replaces <!-- round-phases:begin --> ... <!-- round-phases:end -->)
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

from race import replace_section

PARTS = ["draft", "forward", "unembed", "host", "commit", "emit", "other"]


def load(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def rows(label: str, report: dict) -> list[str]:
    out = []
    for v in report["variants"]:
        if v.get("depth") is None:
            continue
        for d in v["round_secs_by_depth"]:
            if d["depth"] != v["depth"]:
                continue
            p = d["mean_phases"]
            overhead = (p["host"] + p["commit"] + p["emit"] + p["other"]) / p["wall"]
            model, ratio = d.get("model_secs"), d.get("wall_over_model")
            cells = " | ".join(f"{p[k] * 1e3:.3f}" for k in PARTS)
            out.append(
                f"| {label} | {d['depth']} | {d['rounds']} | {cells} | {p['wall'] * 1e3:.3f} | "
                f"{'—' if model is None else f'{model * 1e3:.3f}'} | "
                f"{'—' if ratio is None else f'{ratio:.2f}'} | "
                f"{overhead * 100:.1f} % |")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="LABEL=FILE")
    ap.add_argument("--update", type=Path)
    args = ap.parse_args()
    lines = ["| run | k | rounds | draft ms | forward ms | unembed ms | host ms | commit ms | emit ms | "
             "other ms | round ms | k·t_d + t_v(k+1) ms | round ÷ model | outside draft + forward + unembed |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for run in args.runs:
        label, _, file = run.partition("=")
        lines += rows(label, load(Path(file)))
    text = "\n".join(lines)
    if args.update:
        replace_section(args.update, "round-phases", text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
