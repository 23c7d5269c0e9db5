#!/usr/bin/env python3
"""A trained drafter on the real model: ours with it against our plain decode, prompt lookup and
llama.cpp's plain decode, on the same GGUF, prompt ids, token counts and threads.

Per prompt set (open, grounded, chat; held out from the drafter's training) and sampling
(greedy; temperature 0.8 with seed 0 + prompt index, top-k/top-p off), three `mtp bench` runs,
each with its own plain decode interleaved prompt by prompt:

* `--draft DIR --draft-kind mtp`: the drafter at fixed depths 1-4 and under the default
  (adaptive) schedule with a new controller per request;
* `--draft-kind ngram`: prompt lookup under the default schedule;
* `--draft DIR --draft-kind mtp,ngram`: both side by side under the default schedule;

then llama.cpp's plain decode (`llama-server`, `race.py`'s native build) on our prompt ids, and
per prompt the share of our plain output a prompt lookup could have copied (a 270M base model
repeats itself under greedy decoding: where that share is high, a gain may come from a loop).

    cargo build --release -p runner
    python3 tools/bench_peers/race_drafter.py --draft models/gemma-3-270m-drafter --out benchmarks/drafter
    python3 tools/bench_peers/race_drafter.py --table benchmarks/drafter/race-drafter.json --update BENCHMARKS.md
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import race  # noqa: E402
from race_table import median, ratio_spread, same_count, set_ratio, spread, update_block  # noqa: E402

BEGIN, END = "<!-- drafter-table:begin -->", "<!-- drafter-table:end -->"
# (run, draft kinds, fixed depths): every run also measures plain and the default schedule.
RUNS = [("drafter", "mtp", "1,2,3,4"), ("lookup", "ngram", None), ("drafter+lookup", "mtp,ngram", None)]


def bench(args, prompts: Path, sampling: str, chat: bool, out: Path, kinds: str, depths: str | None) -> dict:
    draft = ["--draft", args.draft] if "mtp" in kinds else []
    cmd = [args.mtp, "bench", "--model", args.gguf, *draft, "--draft-kind", kinds, "--prompts", prompts,
           "-n", args.num_predict, "--reps", args.reps, "--warmup", 1, "--schedules", "adaptive",
           "--controllers", "fresh", "--cost-reps", 5, "--max-width", 9, "--threads", args.threads,
           *race.sampling_flags(sampling), "--json", out]
    # `--depths` needs at least one: a run without fixed depths measures depth 1 and drops it.
    cmd += ["--depths", depths or "1"]
    if chat:
        cmd += ["--chat", "--chat-template", args.chat_template]
    race.sh(cmd, stdout=subprocess.DEVNULL)
    report = json.loads(out.read_text())
    if depths is None:
        report["variants"] = [v for v in report["variants"] if v["name"] != "mtp-k1"]
    return report


def variant_entry(v: dict) -> dict:
    return {"per_prompt_tps": v["per_prompt_decode_tokens_per_second"], "acceptance": v["acceptance"],
            "mean_accepted": v["mean_accepted"], "per_position_acceptance": v["per_position_acceptance"],
            "greedy_match": v["greedy_match"], "outputs": v["outputs"],
            "drafter_secs_per_round": v["drafter_secs_per_round"],
            "target_secs_per_round": v["target_secs_per_round"],
            "rounds_by_depth": v["round_secs_by_depth"]}


def run(args) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"schema_version": 1, "machine": race.machine(), "ours_commit": race.git("rev-parse", "HEAD"),
              "ours_dirty": bool(race.git("status", "--porcelain", "--untracked-files=no")),
              "peer_build": json.loads((args.llama / "build-info.json").read_text()),
              "draft": str(args.draft), "gguf": str(args.gguf), "num_predict": args.num_predict,
              "threads": args.threads, "reps": args.reps, "sampled": race.SAMPLED,
              "started": time.strftime("%Y-%m-%d %H:%M:%S"), "sets": []}
    drafter_card = Path(args.draft) / "training.json"
    if drafter_card.exists():
        card = json.loads(drafter_card.read_text())
        report["drafter"] = {k: card.get(k) for k in ("steps", "cpu_hours", "train_windows", "positions_seen")}
    for set_name in args.sets.split(","):
        prompts = race.prompt_file(args, set_name)
        for sampling in args.samplings.split(","):
            tag = f"{set_name}-{sampling}"
            runs = {}
            for name, kinds, depths in RUNS:
                runs[name] = bench(args, prompts, sampling, set_name == "chat",
                                   args.out / f"ours-{name}-{tag}.json", kinds, depths)
            ids = runs["drafter"]["setup"]["prompt_ids"]
            with race.LlamaServer(args, "none", args.out / "llama-server-none.log") as server:
                llama = race.measure(server, ids, args.num_predict, args.reps, sampling)
            plain = next(v for v in runs["drafter"]["variants"] if v["name"] == "plain")
            report["sets"].append({
                "set": set_name, "sampling": sampling, "prompts": len(ids),
                "runs": {name: {v["name"]: variant_entry(v) for v in r["variants"]} for name, r in runs.items()},
                "cost": {name: r["cost"] for name, r in runs.items()},
                "copyable_share": [race.copyable_share(p, o) for p, o in zip(ids, plain["outputs"])],
                "llama_plain": [{"decode_tps": e["decode_tps"], "tokens": e["tokens"]} for e in llama],
            })
            (args.out / "race-drafter.json").write_text(json.dumps(report, indent=1) + "\n")
    report["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    (args.out / "race-drafter.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out / 'race-drafter.json'}", file=sys.stderr)
    return 0


def label(run_name: str, variant: str) -> str:
    if variant == "plain":
        return "ours plain"
    what = {"drafter": "drafter", "lookup": "prompt lookup", "drafter+lookup": "drafter + lookup"}[run_name]
    if variant.startswith("mtp-k"):
        return f"ours {what}, depth {variant.removeprefix('mtp-k')}"
    return f"ours {what}, default schedule"


def render(r: dict) -> str:
    lines = [f"Run {r['started']} – {r.get('finished', '(unfinished)')}, {r['machine'].get('cpu', '?')} "
             f"({r['machine']['cpus']} cores), {r['threads']} threads on both sides; ours at "
             f"`{r['ours_commit'][:10]}`{' (with uncommitted changes)' if r.get('ours_dirty') else ''}, "
             f"drafter `{r['draft']}`; llama.cpp `{r['peer_build'].get('commit', '?')}`. {r['num_predict']} "
             f"tokens per prompt, EOS ignored, {r['reps']} repetition(s). Raw: `race-drafter.json` and the "
             f"`mtp bench` reports beside it."
             + "".join(f" Then {x['sets']} in a later run ({x['started']} – {x['finished']}, ours at "
                       f"`{x['ours_commit'][:10]}`, the same drafter and binary)." for x in r.get("later_runs", []))
             + (f" Note: {r['note']}." if r.get("note") else ""), ""]
    for s in r["sets"]:
        runs = s["runs"]
        plain = runs["drafter"]["plain"]
        lp = [e["decode_tps"] for e in s["llama_plain"]]
        share = median(s["copyable_share"])
        lines += [f"**{s['set']} prompts ({s['prompts']}), {s['sampling']}** — the share of our plain output a "
                  f"prompt lookup could copy: median {share:.2f} (min–max {min(s['copyable_share']):.2f}–"
                  f"{max(s['copyable_share']):.2f}).", "",
                  "| mode | decode tok/s, median (min–max) | ÷ own plain | ÷ own plain, whole set | "
                  "÷ llama.cpp plain | acceptance | accepted per round | rounds accepting draft position 1, 2, 3, 4 "
                  "| output = own plain |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for run_name, variants in runs.items():
            own = variants["plain"]["per_prompt_tps"]
            for name, v in variants.items():
                if name == "plain" and run_name != "drafter":
                    continue
                tps = v["per_prompt_tps"]
                positions = ", ".join(f"{x:.2f}" for x in v["per_position_acceptance"][:4])
                extra = ("| | | | |" if name == "plain" else
                         f"| {v['acceptance']:.2f} | {v['mean_accepted']:.2f} | {positions} | "
                         f"{same_count(v['outputs'], variants['plain']['outputs'], s['sampling'])} |")
                lines.append(f"| {label(run_name, name)} | {spread(tps)} | "
                             f"{'' if name == 'plain' else ratio_spread(tps, own)} | "
                             f"{'' if name == 'plain' else set_ratio(tps, own)} | {ratio_spread(tps, lp)} {extra}")
        lines.append(f"| llama.cpp plain | {spread(lp)} | | | | | | | |")
        cost = s["cost"]["drafter"]
        if cost.get("draft_step_secs"):
            verify = " / ".join(f"{w['secs']['median'] * 1e3:.1f}" for w in cost["verify_secs"][:5])
            lines += ["", f"Drafter step {cost['draft_step_secs']['median'] * 1e3:.2f} ms; target verify of 1-5 "
                          f"rows {verify} ms; our plain {median(plain['per_prompt_tps']):.1f} tok/s."]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draft", type=Path, help="the drafter directory (mtp generate --draft)")
    ap.add_argument("--mtp", type=Path, default=race.ROOT / "target" / "release" / "mtp")
    ap.add_argument("--gguf", type=Path, default=race.DEFAULT_GGUF)
    ap.add_argument("--llama", type=Path, default=race.DEFAULT_PEERS / "llama.cpp-0.3.36")
    ap.add_argument("--chat-template", type=Path, default=race.DEFAULT_CHAT_TEMPLATE)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--sets", default="open,grounded,chat")
    ap.add_argument("--samplings", default="greedy,sampled")
    ap.add_argument("-n", "--num-predict", type=int, default=128)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-prompts", type=int, default=0, help="smoke runs: only the first N prompts")
    ap.add_argument("--table", type=Path, help="render this race-drafter.json instead of running")
    ap.add_argument("--update", type=Path, help="with --table: a Markdown file with the begin/end markers")
    args = ap.parse_args()
    if args.table:
        table = render(json.loads(args.table.read_text()))
        if not args.update:
            sys.stdout.write(table)
            return 0
        return update_block(args.update, (BEGIN, END), table)
    if not (args.draft and args.out):
        ap.error("--draft and --out are needed to run (or --table to render)")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
