#!/usr/bin/env python3
"""Render `mtp bench-batch` JSON reports as the Markdown tables of BENCHMARKS.md.

    python3 tools/bench_batch/render_table.py benchmarks/batch/default-pair-candle-cpu.json ...

One table per report: per concurrency, each variant's total rate (the median repetition), the
ratios the batch is judged by (batched / one at a time, plain and speculative; the measured
policy against the better batched choice and against the better one-at-a-time choice), the
least wall time of a variant's repetitions together, and whether every variant emitted the same
greedy tokens. Beside the ratio of medians, the *paired* ratio: the median over repetitions of
batched / one at a time within one repetition (its variants run back to back, in a rotated order),
which cancels the machine's drift between repetitions that the ratio of two medians keeps; and
the ratio of the *best* repetitions (each variant's fastest run): on a shared machine whose noise
only ever slows a run down, the fastest run is the least disturbed estimate of its speed (as
Python's `timeit` takes the minimum time).
"""

import json
import sys

VARIANTS = ["serial-plain", "serial-mtp", "batch-plain", "batch-mtp", "batch-measured"]


def fmt_rate(x):
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def paired(row_a, row_b):
    """Median over repetitions of a's rate / b's rate in the same repetition."""
    ratios = sorted(a / b for a, b in zip(row_a["runs_tokens_per_sec"], row_b["runs_tokens_per_sec"]) if b > 0)
    if not ratios:
        return float("nan")
    mid = len(ratios) // 2
    return ratios[mid] if len(ratios) % 2 else 0.5 * (ratios[mid - 1] + ratios[mid])


def best(row_a, row_b):
    """a's fastest repetition / b's fastest repetition."""
    a, b = max(row_a["runs_tokens_per_sec"], default=0.0), max(row_b["runs_tokens_per_sec"], default=0.0)
    return a / b if b > 0 else float("nan")


def render(path):
    with open(path) as f:
        report = json.load(f)
    rows = {}
    for row in report["rows"]:
        rows.setdefault(row["clients"], {})[row["variant"]] = row
    out = [
        f"`{path}`: {report['target']} on {report['backend']}, {report['num_predict']} tokens "
        f"per request, {report['prompts']} prompts, median of {report['reps']} repetitions "
        f"(at least {report.get('seconds', 0)} s per variant and concurrency)",
        "",
        "| clients | one at a time, plain | one at a time, spec | batch, plain | batch, spec "
        "| batch, measured policy | batched ÷ one at a time (plain) | batched ÷ one at a time "
        "(spec) | paired, plain | paired, spec | best runs, plain | best runs, spec | measured ÷ better batched | measured ÷ better one at "
        "a time | least s per variant | same tokens |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for clients in sorted(rows):
        r = rows[clients]
        rate = {v: r[v]["total_tokens_per_sec"] for v in VARIANTS}
        secs = min(sum(r[v]["runs_secs"]) for v in VARIANTS)
        same = all(r[v]["identical"] for v in VARIANTS)
        cells = [str(clients)] + [fmt_rate(rate[v]) for v in VARIANTS]
        cells += [
            f"{rate['batch-plain'] / rate['serial-plain']:.2f}x",
            f"{rate['batch-mtp'] / rate['serial-mtp']:.2f}x",
            f"{paired(r['batch-plain'], r['serial-plain']):.2f}x",
            f"{paired(r['batch-mtp'], r['serial-mtp']):.2f}x",
            f"{best(r['batch-plain'], r['serial-plain']):.2f}x",
            f"{best(r['batch-mtp'], r['serial-mtp']):.2f}x",
            f"{rate['batch-measured'] / max(rate['batch-plain'], rate['batch-mtp']):.2f}x",
            f"{rate['batch-measured'] / max(rate['serial-plain'], rate['serial-mtp']):.2f}x",
            f"{secs:.0f}",
            "yes" if same else "NO",
        ]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: render_table.py REPORT.json ...")
    print("\n\n".join(render(p) for p in sys.argv[1:]))


if __name__ == "__main__":
    main()
