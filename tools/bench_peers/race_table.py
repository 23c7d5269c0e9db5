#!/usr/bin/env python3
"""BENCHMARKS.md's headline table from one `race.py` JSON file.

  python3 tools/bench_peers/race_table.py benchmarks/race/race.json              # print it
  python3 tools/bench_peers/race_table.py benchmarks/race/race.json --update BENCHMARKS.md

`--update` replaces what stands between the `<!-- race-table:begin -->` and
`<!-- race-table:end -->` lines of the file. Every figure comes from the JSON: decode rates are
per prompt (generated tokens after the first ÷ the time from the first token to the last),
shown as the median over the set's prompts with the min–max; a ratio is taken prompt by prompt
(ours on prompt i ÷ the other engine on prompt i, the same ids and token count) and shown the
same way.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

BEGIN, END = "<!-- race-table:begin -->", "<!-- race-table:end -->"
LLAMA_NAMES = {"none": "llama.cpp plain", "ngram-simple": "llama.cpp `ngram-simple`",
               "ngram-map-k": "llama.cpp `ngram-map-k`", "ngram-mod": "llama.cpp `ngram-mod`"}
# The default schedule's two variants: a controller new per request (a first `mtp generate`)
# and one carried over from request to request (`mtp serve`, later `mtp generate` runs).
DEFAULTS = {"mtp-adaptive-fresh": "new controller", "mtp-adaptive": "carried-over controller"}


def fixed_depth(name: str) -> int:
    return int(name.removeprefix("mtp-k"))


def variant_order(ours: dict) -> list[str]:
    fixed = sorted((k for k in ours if k.startswith("mtp-k")), key=fixed_depth)
    return [k for k in ["plain", *DEFAULTS] if k in ours] + fixed


def spread(xs) -> str:
    xs = [x for x in xs if x is not None]
    if not xs:
        return "–"
    return f"{statistics.median(xs):.1f} ({min(xs):.1f}–{max(xs):.1f})"


def ratio_spread(a, b) -> str:
    rs = [x / y for x, y in zip(a, b) if x and y]
    if not rs:
        return "–"
    return f"**{statistics.median(rs):.2f}×** ({min(rs):.2f}–{max(rs):.2f})"


def set_rate(xs) -> float | None:
    """The whole set's rate: every prompt decodes the same token count, so total tokens ÷
    total time is the harmonic mean of the per-prompt rates."""
    xs = [x for x in xs if x]
    return len(xs) / sum(1 / x for x in xs) if xs else None


def set_ratio(a, b) -> str:
    ra, rb = set_rate(a), set_rate(b)
    return f"{ra / rb:.3f}×" if ra and rb else "–"


def median(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def real_model_rows(s: dict) -> list[str]:
    ours, llama = s["ours"], s["llama"]
    lp = [e["decode_tps"] for e in llama["none"]]
    spec = {k: [e["decode_tps"] for e in v] for k, v in llama.items() if k != "none"}
    best_spec = max(spec, key=lambda k: median(spec[k]) or 0.0)
    own = ours["plain"]["per_prompt_tps"]
    plain_tokens = ours["plain"]["outputs"]
    llama_plain_tokens = [e["tokens"] for e in llama["none"]]
    rows = []
    for name in variant_order(ours):
        v = ours[name]
        label = ("ours plain" if name == "plain" else
                 f"ours lookup, default schedule, {DEFAULTS[name]}" if name in DEFAULTS else
                 f"ours lookup, depth {fixed_depth(name)}")
        same = "" if name == "plain" else same_count(v["outputs"], plain_tokens, s["sampling"])
        rows.append(f"| {label} | {spread(v['per_prompt_tps'])} | {ratio_spread(v['per_prompt_tps'], own)} | "
                    f"{set_ratio(v['per_prompt_tps'], own)} | {ratio_spread(v['per_prompt_tps'], lp)} | "
                    f"{'' if name == 'plain' else ratio_spread(v['per_prompt_tps'], spec[best_spec])} | "
                    f"{acc(name, v)} | {same} |")
    for kind, entries in llama.items():
        tps = [e["decode_tps"] for e in entries]
        drafted = sum(e["draft_n"] for e in entries)
        accepted = sum(e["draft_n_accepted"] for e in entries)
        same = "" if kind == "none" else same_count([e["tokens"] for e in entries], llama_plain_tokens,
                                                      s["sampling"])
        rows.append(f"| {LLAMA_NAMES.get(kind, kind)} | {spread(tps)} | {ratio_spread(tps, lp)} | "
                    f"{set_ratio(tps, lp)} | | | "
                    f"{'' if kind == 'none' else (f'{accepted / drafted:.2f}' if drafted else 'none drafted')} "
                    f"| {same} |")
    return rows, best_spec


def default_verdicts(ours: dict) -> list[tuple[str, str, bool]]:
    """Each default-schedule variant against plain decoding and against the best fixed depth,
    whole set (total tokens ÷ total time): (its controller, one line, whether it is ≥ 0.97×
    plain and ≥ 0.95× the best fixed choice)."""
    own = set_rate(ours["plain"]["per_prompt_tps"])
    fixed = {k: set_rate(v["per_prompt_tps"]) for k, v in ours.items() if k.startswith("mtp-k")}
    out = []
    for name, controller in DEFAULTS.items():
        adaptive = set_rate(ours[name]["per_prompt_tps"]) if name in ours else None
        if not (own and adaptive and fixed):
            continue
        best = max(fixed, key=lambda k: fixed[k] or 0.0)
        # The best fixed choice may be plain decoding itself.
        best_rate, best_label = max((fixed[best], f"depth {fixed_depth(best)}"), (own, "plain"))
        vs_plain, vs_best = adaptive / own, adaptive / best_rate
        ok = vs_plain >= 0.97 and vs_best >= 0.95
        out.append((controller, f"default schedule, {controller}: **{vs_plain:.3f}×** plain decoding, "
                                f"**{vs_best:.3f}×** the best fixed choice ({best_label}) — "
                                f"{'holds' if ok else 'misses'}", ok))
    return out


def verdict_text(verdicts: list[tuple[str, str, bool]]) -> str:
    if not verdicts:
        return ""
    return ("Whole set, against ≥ 0.97× plain and ≥ 0.95× the best fixed choice: "
            + "; ".join(line for _, line, _ in verdicts) + ".")


def depths_chosen(v: dict) -> str:
    """Rounds per drafted depth (`depth:rounds`; for prompt lookup the depth it had drafts for)."""
    return " ".join(f"{d['depth']}:{d['rounds']}" for d in v.get("rounds_by_depth", []))


def acc(name: str, v: dict) -> str:
    return "" if name == "plain" else f"{v['acceptance']:.2f}"


def same_count(outputs, reference, sampling: str) -> str:
    if sampling != "greedy":
        return "(sampled)"
    same = sum(1 for a, b in zip(outputs, reference) if a == b)
    return f"{same}/{len(reference)}"


def render(r: dict) -> str:
    m = r["machine"]
    b = r["peer_build"]
    lines = [
        f"Run {r['started']} – {r.get('finished', '(unfinished)')} on {m.get('cpu', '?')} "
        f"({m['cpus']} cores), {r['threads']} threads on both sides; ours at `{r['ours_commit'][:10]}`"
        f"{' (with uncommitted changes)' if r.get('ours_dirty') else ''}; llama.cpp `{b['commit']}` "
        f"({b['source']}, `GGML_NATIVE=ON`; its system_info: `{b.get('system_info', '?')}`). "
        f"{r['num_predict']} tokens per prompt, EOS ignored, {r['reps']} repetition(s); sampled runs at "
        f"temperature {r['sampled']['temperature']}, top-k/top-p off, seed {r['sampled']['seed']} + prompt "
        f"index. Raw: `race.json` and the per-run reports beside it"
        + (f"; the default-pair rows were run again on their own at `{r['default_pair_commit'][:10]}`"
           if r.get("default_pair_commit") else "") + ".",
        "",
    ]
    verdicts: list[tuple[str, bool]] = []
    header_end = len(lines)
    bench = r.get("llama_bench", {}).get("rows", [])
    if bench:
        lines.append("llama-bench (plain, its own timing): " + "; ".join(
            f"{'pp' + str(x['n_prompt']) if x['n_prompt'] else 'tg' + str(x['n_gen'])} "
            f"{x['avg_ts']:.1f} ± {x['stddev_ts']:.1f} tok/s" for x in bench) + ".")
        lines.append("")
    for s in r["sets"]:
        share = median(s["copyable_share"])
        lines += [
            f"**{s['model']}, {s['set']} prompts ({s['prompts']}"
            f"{', rendered with `' + s['chat_template'] + '`' if s.get('chat_template') else ''}), "
            f"{s['sampling']}** — the share of our plain "
            f"output a prompt lookup could copy: median {share:.2f} "
            f"(min–max {min(s['copyable_share']):.2f}–{max(s['copyable_share']):.2f}).",
            "",
            "| engine, mode | decode tok/s, median (min–max) | ÷ own plain | ÷ own plain, whole set "
            "| ÷ llama.cpp plain | ÷ llama.cpp's best n-gram | acceptance | output = own plain |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        rows, best = real_model_rows(s)
        lines += rows
        prefill_ours = s["ours_prefill_tps"]
        prefill_llama = median([e["prompt_tps"] for e in s["llama"]["none"]])
        table_verdicts = default_verdicts(s["ours"])
        verdicts += [(f"{s['set']} {s['sampling']} (GGUF, {c})", ok) for c, _, ok in table_verdicts]
        chosen = "; ".join(f"{c}: {depths_chosen(s['ours'][n])}" for n, c in DEFAULTS.items()
                           if n in s["ours"])
        lines += ["", f"Prefill: ours {prefill_ours['median']:.0f} tok/s (whole set), llama.cpp "
                      f"{prefill_llama:.0f} tok/s (median per prompt); llama.cpp's best n-gram kind here: "
                      f"`{best}`. {verdict_text(table_verdicts)} Depths the default schedule drafted "
                      f"(depth:rounds) — {chosen}.", ""]
    for s in r.get("default_pair", []):
        ours = s["ours"]
        own = ours["plain"]["per_prompt_tps"]
        lines += [f"**Default pair (tiny Gemma 4 + its assistant, f32, ours only), {s['set']} prompts "
                  f"({s['prompts']}), {s['sampling']}, "
                  f"{s['reps']} repetitions (per-prompt medians over them)** — t_d {s['cost']['draft_step_secs']['median'] * 1e3:.2f} ms, "
                  f"t_v(1) {s['cost']['verify_secs'][0]['secs']['median'] * 1e3:.2f} ms.", "",
                  "| mode | decode tok/s, median (min–max) | ÷ plain (per prompt) | ÷ plain, whole set "
                  "| acceptance | depths chosen (depth:rounds) |", "| --- | --- | --- | --- | --- | --- |"]
        for name in variant_order(ours):
            v = ours[name]
            label = ("plain (`--no-draft`)" if name == "plain" else
                     f"default schedule, {DEFAULTS[name]}" if name in DEFAULTS else
                     "depth 4 (the seed's constant)" if name == "mtp-k4" else f"depth {fixed_depth(name)}")
            depths = depths_chosen(v)
            lines.append(f"| {label} | {spread(v['per_prompt_tps'])} | "
                         f"{'' if name == 'plain' else ratio_spread(v['per_prompt_tps'], own)} | "
                         f"{'' if name == 'plain' else set_ratio(v['per_prompt_tps'], own)} | "
                         f"{acc(name, v)} | {depths} |")
        table_verdicts = default_verdicts(ours)
        verdicts += [(f"{s['set']} {s['sampling']} (default pair, {c})", ok) for c, _, ok in table_verdicts]
        lines += ["", verdict_text(table_verdicts), ""]
    misses = [name for name, ok in verdicts if not ok]
    summary = (f"The default schedule holds ≥ 0.97× plain decoding and ≥ 0.95× the best fixed choice in "
               f"{len(verdicts) - len(misses)} of {len(verdicts)} cases (table × controller)"
               + (f"; it misses in: {', '.join(misses)}." if misses else "."))
    lines.insert(header_end, summary)
    lines.insert(header_end + 1, "")
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", type=Path)
    ap.add_argument("--update", type=Path, help="a Markdown file with the begin/end markers")
    args = ap.parse_args()
    table = render(json.loads(args.json.read_text()))
    if not args.update:
        sys.stdout.write(table)
        return 0
    return update_block(args.update, (BEGIN, END), table)


def update_block(path: Path, markers: tuple[str, str], table: str) -> int:
    """Replace what stands between the `markers` lines of the Markdown file `path` with `table`."""
    begin, end = markers
    text = path.read_text()
    if begin not in text or end not in text:
        print(f"{path} has no {begin} ... {end} block", file=sys.stderr)
        return 1
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    path.write_text(f"{head}{begin}\n{table}{end}{tail}")
    print(f"updated {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
