#!/usr/bin/env python3
"""Decode tokens/s through `mtp serve`'s API against `mtp generate` on the same prompt.

For each repetition: `mtp generate --json --temperature 0 --ignore-eos -n N PROMPT` (its
`eval_count / eval_duration`), then the same greedy request streamed from `/api/generate` of a
server started once (`eval_count / eval_duration` of its final object: the engine's own clock,
so both sides time decoding alike), alternating. Prints the medians and API ÷ generate. Standard
library only.

  cargo build --release -p runner
  python3 tools/serve_clients/bench_api_throughput.py --mtp target/release/mtp --reps 5 [--json FILE]
"""

import argparse
import json
import socket
import statistics
import subprocess
import time
import urllib.request

PROMPT = "In the beginning God created"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def generate(mtp: str, n: int) -> float:
    out = subprocess.run(
        [mtp, "generate", "--json", "--temperature", "0", "--ignore-eos", "-n", str(n), PROMPT],
        capture_output=True, text=True, check=True,
    )
    j = json.loads(out.stdout)
    return j["eval_count"] / j["eval_duration"]


def api(port: int, name: str, n: int) -> float:
    body = json.dumps({"model": name, "prompt": PROMPT, "raw": True, "stream": True,
                       "options": {"temperature": 0, "num_predict": n}}).encode()
    last = None
    with urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/api/generate", body)) as r:
        for line in r:
            last = json.loads(line)
    return last["eval_count"] / (last["eval_duration"] / 1e9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mtp", required=True)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("-n", type=int, default=200)
    parser.add_argument("--json")
    args = parser.parse_args()
    port = free_port()
    server = subprocess.Popen([args.mtp, "serve", "--port", str(port), "--no-prefix-reuse"],
                              stderr=subprocess.DEVNULL)
    try:
        name = None
        for _ in range(600):
            try:
                tags = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/tags", timeout=1))
                name = tags["models"][0]["name"]
                break
            except OSError:
                time.sleep(0.2)
        api(port, name, 8)
        gen, served = [], []
        for _ in range(args.reps):
            gen.append(generate(args.mtp, args.n))
            served.append(api(port, name, args.n))
    finally:
        server.terminate()
        server.wait(timeout=30)
    summary = {
        "generate_tokens_per_second": statistics.median(gen),
        "api_tokens_per_second": statistics.median(served),
        "api_over_generate": statistics.median(a / g for a, g in zip(served, gen)),
        "runs": {"generate": gen, "api": served},
        "num_predict": args.n,
    }
    print(json.dumps(summary, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
