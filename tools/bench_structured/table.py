#!/usr/bin/env python3
"""The structured-output table of BENCHMARKS.md, from `mtp bench --json-schema` reports.

Every figure comes from the JSON `mtp bench` wrote (one run: every variant interleaved prompt
by prompt, so ratios compare runs seconds apart): decode tokens/s (median of the passes, with
min-max), each variant's decode rate ÷ constrained plain decoding in the same pass, and the
share of the output the grammar's forced tokens drafted. `plain-free` is plain decoding of the
same prompts without the constraint: constrained plain ÷ it is what the mask costs.

  python3 tools/bench_structured/table.py benchmarks/structured/ours-gemma3-270m-ngram.json.gz \
      --update BENCHMARKS.md

(reports are committed gzipped: `gzip -9 -n` after `mtp bench`; a plain `.json` is read too).

`--update` replaces what stands between the `<!-- structured-table:begin -->` and
`<!-- structured-table:end -->` lines of the file; without it the table is printed.
"""

import argparse
import gzip
import json
import pathlib
import sys

BEGIN, END = "<!-- structured-table:begin -->", "<!-- structured-table:end -->"


def spread(s, digits=1):
    if not s:
        return "–"
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}–{s['max']:.{digits}f})"


def describe(schema):
    if "json_schema" in schema:
        props = schema["json_schema"].get("properties", {})
        return f"a JSON schema of {len(props)} properties ({', '.join(props)})"
    if schema.get("json_object"):
        return "any JSON object"
    return f"the format {json.dumps(schema)[:80]}"


def table(report, source):
    setup, machine = report["setup"], report["machine"]
    variants = {v["name"]: v for v in report["variants"]}
    free = variants.get("plain-free")
    lines = []
    schema = setup.get("structured_output") or {}
    lines.append(
        f"Machine: {machine['cpu_model']}, {machine['cpus']} cores ({machine['os']}); backend "
        f"{setup['backend']}; target `{pathlib.Path(setup['target']).name}`; proposer "
        f"{setup['drafter']}; {setup['prompts']} prompts (`{pathlib.Path(setup['prompts_file']).name}`), "
        f"up to {setup['num_predict']} tokens, {setup['reps']} measured passes; "
        f"{'greedy' if setup['sampling']['temperature'] == 0 else 'sampled'}; every row but "
        f"`plain-free` constrained to {describe(schema)} (recorded in the report's "
        f"`setup.structured_output`). Source: `{source}`.")
    lines.append("")
    lines.append("| variant | decode tok/s, median (min–max) | ÷ constrained plain, median (min–max) "
                 "| acceptance | forced drafts (accepted) | output drafted by the grammar | "
                 "greedy = plain |")
    lines.append("|---|---|---|---|---|---|---|")
    for v in report["variants"]:
        match = {True: "yes", False: "**no**", None: "–"}[v.get("greedy_match")]
        forced = f"{v.get('forced', 0)} ({v.get('forced_accepted', 0)})" if v["mode"] != "plain" else "–"
        share = f"{100 * v.get('forced_share', 0):.0f} %" if v["mode"] != "plain" else "–"
        acceptance = f"{v['acceptance']:.2f}" if v["mode"] != "plain" else "–"
        lines.append(f"| `{v['name']}` | {spread(v['decode_tokens_per_second'])} | "
                     f"{spread(v['speedup_vs_plain'], 2)} | {acceptance} | {forced} | {share} | {match} |")
    lines.append("")
    if free and free.get("speedup_vs_plain"):
        s = free["speedup_vs_plain"]
        cost = 1 - 1 / s["median"]
        lines.append(
            f"The mask's cost: constrained plain decodes at {1 / s['median']:.3f}× the rate of "
            f"unconstrained plain decoding (per-pass range {1 / s['max']:.3f}–{1 / s['min']:.3f}×), "
            f"{100 * cost:.1f} % slower.")
        lines.append("")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("report", type=pathlib.Path)
    ap.add_argument("--update", type=pathlib.Path)
    args = ap.parse_args()
    raw = args.report.read_bytes()
    report = json.loads(gzip.decompress(raw) if args.report.suffix == ".gz" else raw)
    text = table(report, args.report.as_posix())
    if not args.update:
        print(text)
        return 0
    doc = args.update.read_text()
    if BEGIN not in doc or END not in doc:
        print(f"{args.update} has no {BEGIN} ... {END} block", file=sys.stderr)
        return 1
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    args.update.write_text(f"{head}{BEGIN}\n{text}{END}{tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
