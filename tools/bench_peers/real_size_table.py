#!/usr/bin/env python3
"""BENCHMARKS.md's real-size load and speed table, from what `real_size.sh` wrote: `load.json` (our
wall time, peak RSS and memory estimate per way in), `race-mtp-gguf.json` (our prefill rate and
plain decode on the same GGUF files) and `llama-bench-<q>.json` (llama.cpp's prefill and decode with
the same threads).

Usage: real_size_table.py DIR [--update BENCHMARKS.md] [--section real-size-load]
       (replaces <!-- SECTION:begin --> ... <!-- SECTION:end -->)
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from race import replace_section

GGUF = {"q8_0": "gguf Q8_0", "q4_k_m": "gguf Q4_K_M"}


def llama_bench(path: Path) -> tuple[float | None, float | None]:
    """llama-bench's prefill and decode tokens/s (its own average over repetitions)."""
    if not path.is_file():
        return None, None
    rows = json.loads(path.read_text())
    pp = next((r["avg_ts"] for r in rows if r["n_prompt"] > 0 and r["n_gen"] == 0), None)
    tg = next((r["avg_ts"] for r in rows if r["n_gen"] > 0 and r["n_prompt"] == 0), None)
    return pp, tg


def fmt(x: float | None, digits: int = 1) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", type=Path)
    ap.add_argument("--update", type=Path)
    ap.add_argument("--section", default="real-size-load", help="the BENCHMARKS.md markers --update replaces")
    args = ap.parse_args()
    load = json.loads((args.dir / "load.json").read_text())
    race = json.loads((args.dir / "race-mtp-gguf.json").read_text())
    lines = ["| weights | load (s) | peak RSS (GiB) | our estimate (GiB) | ours prefill tok/s | "
             "llama.cpp prefill tok/s | ours plain decode tok/s | llama.cpp decode tok/s (llama-bench) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    parts = {p["outtype"]: p for p in race["outtypes"]}
    for name, entry in load.items():
        outtype = next((q for q, label in GGUF.items() if label == name), None)
        part = parts.get(outtype) if outtype else None
        prefill = (part or {}).get("ours_prefill_tokens_per_second") or {}
        plain = statistics.median(part["ours"]["plain"]["per_prompt_tps"]) if part else None
        pp, tg = llama_bench(args.dir / f"llama-bench-{outtype}.json") if outtype else (None, None)
        lines.append(f"| {name} | {entry['wall_secs']:.0f} | {entry['peak_rss_gib']:.2f} | "
                     f"{entry['estimate_gib']:.2f} | {fmt(prefill.get('median'))} | {fmt(pp)} | "
                     f"{fmt(plain)} | {fmt(tg)} |")
    text = "\n".join(lines)
    if args.update:
        replace_section(args.update, args.section, text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
