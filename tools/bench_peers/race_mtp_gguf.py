#!/usr/bin/env python3
"""The Gemma 4 MTP race on GGUF: our engine against llama.cpp's own `draft-mtp`, on the same
trained Gemma 4 target + assistant converted by llama.cpp's converter, the same prompt ids,
greedy, in one run; writes one JSON file, and `--table` turns it into BENCHMARKS.md's section.

The pair: the default pair's target (`models/default/target`) with an assistant trained by
`tools/train_tiny_pair` for it, 128 wide (`--assistant-width 128`): llama.cpp's loader takes only
an assistant narrower than its target, and the default pair's own assistant is as wide as its
target (192). Both are converted by the vendored `convert_hf_to_gguf.py` at each `--outtypes`
(f32, q8_0), cached under `--work` (through `convert_gemma4.py`: the pair's full-attention layers
have the sliding layers' head size, which the converter cannot read back from HF 5.24's config).

Per outtype:

* ours: `mtp bench --model T.gguf --draft A.gguf` — plain decoding, the MTP assistant at fixed
  depths k = 1..4 and under the default (adaptive) schedule, interleaved prompt by prompt; per
  prompt decode rates (first token to last), acceptance, the generated ids. Prompts are encoded
  with the pair's own `tokenizer.json` (`--tokenizer`), the ids the model was trained on;
* llama.cpp: `llama-server` built natively (`build_llama_cpp.sh`) with the target alone, then
  with `-md A.gguf --spec-type draft-mtp --spec-draft-n-max k` for each k, fed our prompt ids
  through `/completion` (greedy, EOS ignored, as many tokens); its `timings` (decode rate, draft
  tokens proposed and accepted) and the tokens it generated, compared with ours.

Tokens per target forward = generated ÷ (generated − accepted drafts), for both engines.

Usage (about 15 minutes on 2 cores):
  cargo build --release -p runner
  bash tools/bench_peers/build_llama_cpp.sh
  python3 tools/train_tiny_pair/train_tiny_pair.py --stage assistant --assistant-width 128 \\
      --out ~/.cache/mtp-rs/race-pair        # a copy of models/default/target in it first
  python3 tools/bench_peers/race_mtp_gguf.py --pair ~/.cache/mtp-rs/race-pair --out benchmarks/mtp-gguf
  python3 tools/bench_peers/race_mtp_gguf.py --table benchmarks/mtp-gguf/race-mtp-gguf.json \\
      --update BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from race import ROOT, DEFAULT_PEERS, LlamaServer, git, machine, measure, post, sh

SECTION = "mtp-gguf-table"  # BENCHMARKS.md's markers: <!-- SECTION:begin --> ... <!-- SECTION:end -->
# Outtypes llama.cpp's converter does not write: converted to bf16, then `llama-quantize`d (the
# assistant stays at q8_0).
QUANTIZE_TYPES = {"q4_k_m": "Q4_K_M"}
DEPTHS = [1, 2, 3, 4]
DEFAULT_PAIR = Path.home() / ".cache" / "mtp-rs" / "race-pair"
# The converter, run through a shim that completes `global_head_dim` (see convert_gemma4.py).
SHIM = Path(__file__).resolve().parent / "convert_gemma4.py"
CONVERTER = DEFAULT_PEERS / "llama_cpp_python-0.3.36" / "vendor" / "llama.cpp" / "convert_hf_to_gguf.py"


def rate(tokens_per_second: float) -> str:
    """A decode rate for the table: one decimal below 100 tokens/s (real-size models run at a
    few), whole tokens above."""
    return f"{tokens_per_second:.1f}" if tokens_per_second < 100 else f"{tokens_per_second:.0f}"


def convert(args, outtype: str) -> tuple[Path, Path]:
    """The pair's GGUF files at `outtype`, converted once."""
    if outtype in QUANTIZE_TYPES:
        base, assistant = convert(args, "bf16")[0], convert(args, "q8_0")[1]
        out = args.work / f"target-{outtype}.gguf"
        if not out.exists():
            sh([args.llama / "bin" / "llama-quantize", base, out, QUANTIZE_TYPES[outtype]],
               stdout=subprocess.DEVNULL)
        return out, assistant
    files = []
    for part in ("target", "assistant"):
        out = args.work / f"{part}-{outtype}.gguf"
        if not out.exists():
            src = staged(args, part)
            sh([args.python, SHIM, CONVERTER, src, "--outtype", outtype, "--outfile", out],
               stdout=subprocess.DEVNULL)
        files.append(out)
    return files[0], files[1]


def staged(args, part: str) -> Path:
    """The pair's `part` directory as the converter reads it, under `--out`: its files linked,
    and the target's tokenizer beside the assistant (the converter writes it into the
    assistant's GGUF too)."""
    src, dst = args.pair / part, args.work / "hf" / part
    dst.mkdir(parents=True, exist_ok=True)
    files = {f.name: f for f in src.iterdir()}
    for name in ("tokenizer.json", "tokenizer_config.json"):
        files.setdefault(name, args.pair / "target" / name)
    for name, f in files.items():
        if not (dst / name).exists():
            (dst / name).symlink_to(f.resolve())
    return dst


def ours(args, target: Path, assistant: Path, prompts: Path, out: Path) -> dict:
    cmd = [args.mtp, "bench", "--model", target, "--draft", assistant,
           "--tokenizer", args.pair / "target" / "tokenizer.json", "--prompts", prompts,
           "-n", args.num_predict, "--reps", args.reps, "--warmup", 1,
           "--depths", ",".join(map(str, DEPTHS)), "--schedules", "adaptive",
           "--controllers", "fresh,carried", "--threads", args.threads, "--temperature", "0",
           "--json", out, *args.ours_args.split()]
    if args.centroids:
        # llama.cpp's converter drops the assistant's centroids; ours reads them from the HF dir.
        cmd += ["--draft-centroids", args.pair / "assistant"]
    sh(cmd, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def kv_args(args) -> tuple:
    """llama.cpp's KV cache type: its default (f16) unless `--llama-kv f32` (ours is f32; the
    f16 cache rounds every cached key and value)."""
    return ("-ctk", "f32", "-ctv", "f32") if args.llama_kv == "f32" else ()


def llama(args, target: Path, assistant: Path, ids: list[list[int]], logs: Path, tag: str) -> dict:
    """llama.cpp plain and draft-mtp at each depth: per prompt decode rate, drafts, tokens."""
    runs = {}
    configs = [("plain", ())] + [
        (f"draft-mtp-k{k}", ("-md", assistant, "--spec-type", "draft-mtp", "--spec-draft-n-max", k))
        for k in DEPTHS]
    server_args = argparse.Namespace(llama=args.llama, gguf=target, threads=args.threads)
    for name, extra in configs:
        log = logs / f"llama-server-{tag}-{name}.log"
        with LlamaServer(server_args, "none", log, (*kv_args(args), *extra)) as server:
            runs[name] = measure(server, ids, args.num_predict, args.reps, "greedy")
    return runs


def divergences(args, target: Path, ids: list[list[int]], ours: list[list[int]],
                theirs: list[dict], log: Path) -> list[dict | None]:
    """Where our plain greedy tokens first leave llama.cpp's, per prompt (`None`: identical):
    the position, both tokens, and llama.cpp's own log-probabilities of its top tokens there
    (its margin over our token says how near a tie the step is; `null` where its server gives
    no probabilities, a token ending inside a character)."""
    out: list[dict | None] = []
    server_args = argparse.Namespace(llama=args.llama, gguf=target, threads=args.threads)
    with LlamaServer(server_args, "none", log, kv_args(args)) as server:
        for prompt, mine, entry in zip(ids, ours, theirs):
            tokens = entry["tokens"]
            at = next((i for i, (a, b) in enumerate(zip(mine, tokens)) if a != b), None)
            if at is None:
                out.append(None)
                continue
            body = {"prompt": prompt + tokens[:at], "n_predict": 1, "temperature": 0.0,
                    "n_probs": 10, "cache_prompt": False, "return_tokens": True}
            probs = post(server.port, "/completion", body).get("completion_probabilities")
            top = {t["id"]: t["logprob"] for t in probs[0]["top_logprobs"]} if probs else None
            margin = None
            if top is not None and tokens[at] in top:
                margin = top[tokens[at]] - top.get(mine[at], min(top.values()))
            out.append({"position": at, "ours": mine[at], "llama": tokens[at],
                        "llama_top_logprobs": top and [[k, round(v, 5)] for k, v in top.items()],
                        "margin_nats": margin, "ours_in_llama_top10": top is not None and mine[at] in top})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mtp", type=Path, default=ROOT / "target" / "release" / "mtp")
    ap.add_argument("--llama", type=Path, default=DEFAULT_PEERS / "llama.cpp-0.3.36")
    ap.add_argument("--python", type=Path, default=Path(sys.executable),
                    help="a Python with the converter's packages (torch, transformers 5.24)")
    ap.add_argument("--pair", type=Path, default=DEFAULT_PAIR,
                    help="target/ and assistant/ HF directories (assistant narrower than the target)")
    ap.add_argument("--out", type=Path, help="where race-mtp-gguf.json goes")
    ap.add_argument("--work", type=Path, default=Path.home() / ".cache" / "mtp-rs" / "race-mtp-gguf",
                    help="the converted GGUF files (kept for the next run), our bench JSON, the server logs")
    ap.add_argument("--prompts", type=Path, default=ROOT / "models" / "prompts.txt")
    ap.add_argument("--outtypes", default="f32,q8_0")
    ap.add_argument("-n", "--num-predict", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llama-kv", choices=["f16", "f32"], default="f16",
                    help="llama.cpp's KV cache type (f16 is its default, at full strength)")
    ap.add_argument("--centroids", action="store_true",
                    help="ours drafts through the HF assistant's centroid head (--draft-centroids); "
                         "llama.cpp has only the dense head")
    ap.add_argument("--ours-args", default="", help="more `mtp bench` options, e.g. '--max-width 8'")
    ap.add_argument("--convert-only", action="store_true",
                    help="convert (and quantize) the pair at each --outtypes into --work, then stop")
    ap.add_argument("--section", default=SECTION, help="the BENCHMARKS.md markers --update replaces")
    ap.add_argument("--table", type=Path, help="print (or --update) the table of this JSON file")
    ap.add_argument("--update", type=Path, help="with --table: replace the section in this file")
    args = ap.parse_args()
    if args.table:
        return table(args)
    if args.convert_only:
        args.work.mkdir(parents=True, exist_ok=True)
        for outtype in args.outtypes.split(","):
            print(*convert(args, outtype))
        return 0
    if args.out is None:
        ap.error("--out is required")
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    report = {"schema_version": 1, "machine": machine(), "ours_commit": git("rev-parse", "HEAD"),
              "ours_dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
              "peer_build": json.loads((args.llama / "build-info.json").read_text()),
              "num_predict": args.num_predict, "threads": args.threads, "reps": args.reps,
              "llama_kv_cache": args.llama_kv,
              "prompts": str(args.prompts.relative_to(ROOT)), "pair": str(args.pair),
              "training": json.loads((args.pair / "training.json").read_text()).get("assistant")
              if (args.pair / "training.json").is_file() else None,
              "centroids": args.centroids,
              "started": time.strftime("%Y-%m-%d %H:%M:%S"), "outtypes": []}
    for outtype in args.outtypes.split(","):
        target, assistant = convert(args, outtype)
        our = ours(args, target, assistant, args.prompts, args.work / f"ours-{outtype}.json")
        ids = our["setup"]["prompt_ids"]
        theirs = llama(args, target, assistant, ids, args.work, outtype)
        plain = next(v for v in our["variants"] if v["name"] == "plain")
        split = divergences(args, target, ids, plain["outputs"], theirs["plain"],
                            args.work / f"llama-server-{outtype}-divergences.log")
        report["outtypes"].append({
            "outtype": outtype, "prompts": len(ids), "prompt_ids": ids,
            "ours": {v["name"]: {"per_prompt_tps": v["per_prompt_decode_tokens_per_second"],
                                 "acceptance": v["acceptance"], "mean_accepted": v["mean_accepted"],
                                 "greedy_match": v["greedy_match"], "outputs": v["outputs"],
                                 "mean_emitted_per_round": v.get("mean_emitted_per_round")}
                     for v in our["variants"]},
            "llama": theirs,
            "plain_divergences": split,
            "ours_cost": our.get("cost"), "ours_prefill_tokens_per_second": our.get("prefill_tokens_per_second"),
            "ours_peak_rss_bytes": our.get("peak_rss_bytes"),
        })
        (args.out / "race-mtp-gguf.json").write_text(json.dumps(report, indent=1) + "\n")
    report["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    (args.out / "race-mtp-gguf.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out / 'race-mtp-gguf.json'}", file=sys.stderr)
    return 0


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def llama_tps(entry: dict) -> float:
    """The median of a prompt's repetitions."""
    return median([entry["decode_tps"], *entry.get("more_decode_tps", [])])


def llama_per_forward(runs: list[dict]) -> float:
    generated = sum(r["predicted_n"] for r in runs)
    accepted = sum(r["draft_n_accepted"] for r in runs)
    return generated / max(generated - accepted, 1)


def table(args) -> int:
    report = json.loads(args.table.read_text())
    lines = [f"Greedy, {report['num_predict']} tokens per prompt, {report['threads']} threads, "
             f"prompts `{report['prompts']}`, {report['reps']} repetitions (median per prompt, then "
             f"the median over prompts); ratios are taken prompt by prompt within this run. "
             f"Ours at commit `{report['ours_commit'][:7]}`, llama.cpp "
             f"`{report['peer_build'].get('commit', '?')}` built natively, its KV cache "
             f"{report.get('llama_kv_cache', 'f32')}. Machine: {report['machine'].get('cpu', '?')}, "
             f"{report['machine'].get('cpus', '?')} CPUs. Run {report['started']}.", ""]
    for part in report["outtypes"]:
        ours = part["ours"]
        plain = ours["plain"]["per_prompt_tps"]
        lplain_runs = part["llama"]["plain"]
        lplain = [llama_tps(e) for e in lplain_runs]
        lines += [f"**{part['outtype'].upper()}** ({part['prompts']} prompts)", "",
                  "| k | ours tok/s | ours ÷ our plain | ours tokens/forward | llama.cpp tok/s | "
                  "llama.cpp ÷ its plain | llama.cpp tokens/forward | ours ÷ llama.cpp | "
                  "= own plain (ours, llama.cpp) | = each other |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        lines.append(f"| plain | {rate(median(plain))} | 1.00 | 1.00 | {rate(median(lplain))} | 1.00 | 1.00 | "
                     f"{median([a / b for a, b in zip(plain, lplain)]):.2f} | | "
                     f"{same_tokens(ours['plain']['outputs'], lplain_runs)} |")
        mine_best = theirs_best = None
        for k in DEPTHS:
            mine, theirs = ours.get(f"mtp-k{k}"), part["llama"].get(f"draft-mtp-k{k}")
            if mine is None or theirs is None:
                continue
            tps = mine["per_prompt_tps"]
            ltps = [llama_tps(e) for e in theirs]
            per_fwd = mine.get("mean_emitted_per_round") or float("nan")
            lines.append(f"| {k} | {rate(median(tps))} | {median([a / b for a, b in zip(tps, plain)]):.2f} | "
                         f"{per_fwd:.2f} | {rate(median(ltps))} | "
                         f"{median([a / b for a, b in zip(ltps, lplain)]):.2f} | {llama_per_forward(theirs):.2f} | "
                         f"{median([a / b for a, b in zip(tps, ltps)]):.2f} | "
                         f"{same_ids(mine['outputs'], ours['plain']['outputs'])}, "
                         f"{same_tokens([e['tokens'] for e in theirs], lplain_runs)} | "
                         f"{same_tokens(mine['outputs'], theirs)} |")
            if mine_best is None or median(tps) > mine_best[1]:
                mine_best = (k, median(tps), tps)
            if theirs_best is None or median(ltps) > theirs_best[1]:
                theirs_best = (k, median(ltps), ltps)
        for name, label in (("mtp-adaptive-fresh", "ours, default schedule (new controller)"),
                            ("mtp-adaptive", "ours, default schedule (carried-over controller)")):
            if name in ours and theirs_best is not None:
                tps = ours[name]["per_prompt_tps"]
                lines.append(f"| {label} | {rate(median(tps))} | {median([a / b for a, b in zip(tps, plain)]):.2f} | "
                             f"{ours[name].get('mean_emitted_per_round') or float('nan'):.2f} | | | | "
                             f"{median([a / b for a, b in zip(tps, theirs_best[2])]):.2f} (vs llama.cpp "
                             f"k={theirs_best[0]}) | {same_ids(ours[name]['outputs'], ours['plain']['outputs'])}, — | "
                             f"{same_tokens(ours[name]['outputs'], lplain_runs)} |")
        lines.append("")
        cost = part.get("ours_cost")
        if cost and cost.get("verify_secs"):
            t1 = cost["verify_secs"][0]["secs"]["median"]
            curve = ", ".join(f"{c['secs']['median'] / t1:.2f}" for c in cost["verify_secs"])
            lines.append(f"Ours: one target step t_v(1) {1000 * t1:.0f} ms, a draft step t_d "
                         f"{1000 * cost['draft_step_secs']['median']:.1f} ms "
                         f"({cost['draft_step_secs']['median'] / t1:.3f} of a step); "
                         f"t_v(w)/t_v(1) for w = 1..{len(cost['verify_secs'])}: {curve}.")
        if mine_best and theirs_best:
            ratio = median([a / b for a, b in zip(mine_best[2], theirs_best[2])])
            lines.append(f"Best fixed depth against best fixed depth: ours at k = {mine_best[0]} ÷ "
                         f"llama.cpp at k = {theirs_best[0]}: **{ratio:.2f}**.")
        split = [d for d in part.get("plain_divergences") or [] if d is not None]
        if split:
            margins = [d["margin_nats"] for d in split if d["margin_nats"] is not None]
            unknown = len(split) - len(margins)
            lines.append(f"Plain greedy leaves llama.cpp's on {len(split)} of {part['prompts']} prompts; "
                         f"at each first divergence llama.cpp's own log-probability of its token is "
                         + (f"at most {max(margins):.3f} nats above ours" if margins else "not given")
                         + (f" ({unknown} where its server gives none or ours is outside its top 10)"
                            if unknown else "") + ".")
        lines.append("")
    text = "\n".join(lines)
    if args.update:
        doc = args.update.read_text()
        begin, end = f"<!-- {args.section}:begin -->", f"<!-- {args.section}:end -->"
        start, end = doc.index(begin) + len(begin), doc.index(end)
        args.update.write_text(doc[:start] + "\n" + text + "\n" + doc[end:])
    else:
        print(text)
    return 0


def same_ids(a: list[list[int]], b: list[list[int]]) -> str:
    """How many prompts' generated ids are identical in two runs of ours."""
    return f"{sum(x == y for x, y in zip(a, b))}/{len(b)}"


def same_tokens(ours: list[list[int]], theirs: list[dict]) -> str:
    """How many prompts' generated ids are identical in both engines."""
    same = sum(o == t["tokens"] for o, t in zip(ours, theirs))
    return f"{same}/{len(theirs)}"


if __name__ == "__main__":
    sys.exit(main())
