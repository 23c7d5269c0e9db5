#!/usr/bin/env python3
"""Time to first token of a second chat turn through `mtp serve`, with prefix reuse and without.

Starts two servers on the same model (`--no-prefix-reuse` on the second) and, repetition by
repetition, asks each the same two-turn conversation: turn 1 (not streamed), then turn 2 — the
first turn, its answer and a new question — streamed; the time to first token is the wall time
from sending turn 2 to its first NDJSON line that carries text. Also records turn 2's
`prompt_eval_count` (the prompt tokens the server evaluated). Greedy, so both servers answer
alike. Standard library only.

  cargo build --release -p runner
  python3 tools/serve_clients/bench_prefix_reuse.py --mtp target/release/mtp --reps 10 \
      --json /tmp/prefix-reuse.json [-- --model DIR ...]
"""

import argparse
import json
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

FIRST = "Who made the light, and what did he divide it from?"
SECOND = "And what did he call the darkness, and the waters above?"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port: int, path: str, body: dict):
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    return urllib.request.urlopen(request, timeout=600)


def start(mtp: str, extra: list[str], flags: list[str]) -> tuple[subprocess.Popen, int, str]:
    port = free_port()
    proc = subprocess.Popen([mtp, "serve", "--port", str(port), *flags, *extra], stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            tags = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/tags", timeout=5))
            return proc, port, tags["models"][0]["name"]
        except OSError:
            time.sleep(0.2)
    proc.kill()
    sys.exit("error: the server did not start")


def two_turns(port: int, name: str, num_predict: int) -> tuple[float, int, int]:
    """(turn-2 time to first token in seconds, its prompt_eval_count, turn 1's)."""
    options = {"temperature": 0, "num_predict": num_predict}
    messages = [{"role": "user", "content": FIRST}]
    first = json.load(post(port, "/api/chat", {"model": name, "messages": messages, "stream": False, "options": options}))
    messages += [first["message"], {"role": "user", "content": SECOND}]
    start = time.perf_counter()
    ttft, evaluated = None, None
    with post(port, "/api/chat", {"model": name, "messages": messages, "options": options}) as stream:
        for line in stream:
            chunk = json.loads(line)
            if ttft is None and chunk.get("message", {}).get("content"):
                ttft = time.perf_counter() - start
            if chunk.get("done"):
                evaluated = chunk.get("prompt_eval_count")
    return ttft, evaluated, first.get("prompt_eval_count")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mtp", required=True)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--num-predict", type=int, default=32)
    parser.add_argument("--json")
    parser.add_argument("extra", nargs="*", help="arguments for mtp serve (after --)")
    args = parser.parse_args()
    servers = {
        "reuse": start(args.mtp, args.extra, []),
        "no-reuse": start(args.mtp, args.extra, ["--no-prefix-reuse"]),
    }
    rows = {k: [] for k in servers}
    try:
        two_turns(servers["reuse"][1], servers["reuse"][2], args.num_predict)  # warm-up
        two_turns(servers["no-reuse"][1], servers["no-reuse"][2], args.num_predict)
        for _ in range(args.reps):
            for key, (_, port, name) in servers.items():
                rows[key].append(two_turns(port, name, args.num_predict))
    finally:
        for proc, _, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=30)
    ttft = {k: statistics.median(r[0] for r in v) for k, v in rows.items()}
    ratios = [a[0] / b[0] for a, b in zip(rows["reuse"], rows["no-reuse"])]
    summary = {
        "ttft_median_secs": ttft,
        "reuse_over_no_reuse_median": statistics.median(ratios),
        "turn2_prompt_eval_count": {k: v[0][1] for k, v in rows.items()},
        "turn1_prompt_eval_count": rows["reuse"][0][2],
        "reps": args.reps,
        "serve_args": args.extra,
    }
    print(json.dumps(summary, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": summary, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
