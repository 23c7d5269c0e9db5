#!/usr/bin/env python3
"""The race: our engine and llama.cpp at full strength, on the same GGUF, prompts, token ids,
token counts and threads, with every ratio taken within one run; writes one JSON file that
`race_table.py` turns into BENCHMARKS.md's headline table.

Per prompt set (open, grounded, chat) and sampling (greedy; sampled at temperature 0.8 with
fixed seeds). The chat set renders each prompt as one user turn with `--chat-template` (default:
the Gemma turn format as llama.cpp's vendored tree ships it, `models/templates/
google-gemma-2-2b-it.jinja` of the sdist — for one user turn it renders exactly as Gemma 3's own
template; the real GGUF is Gemma 3 270M's base model, which has no template of its own):

* ours: `mtp bench --draft-kind ngram` on the real GGUF — plain decoding, prompt lookup under
  the default (adaptive) schedule with a new controller per request (as a first `mtp generate`
  has) and with the controller carried over from request to request (as `mtp serve` and later
  `mtp generate` runs have), and lookup at fixed depths, all in one interleaved run; per-prompt
  decode rates (first token to last), prefill, the generated ids;
* llama.cpp: `llama-server` built natively from the same release's vendored tree
  (`build_llama_cpp.sh`), one server per speculation kind (none, and its C++ n-gram
  speculators `ngram-simple`, `ngram-map-k`, `ngram-mod` with their defaults), fed our prompt
  ids through `/completion`; its `timings` (prompt and generation phases) and draft counts;
* `llama-bench` plain rows (pp512, tg128) for reference;
* per prompt, the share of our plain output a prompt-lookup drafter could have copied (a
  continuation that loops shows here).

And the default pair (`models/default/`, ours only: no peer runs it): plain, the default
schedule (adaptive, new and carried-over controllers), the seed's constant depth 4, and fixed
depths.

Usage (about 60 minutes on 2 cores):
  cargo build --release -p runner
  bash tools/bench_peers/build_llama_cpp.sh
  python3 tools/real_models/fetch.py
  python3 tools/bench_peers/race.py --out benchmarks/race
  python3 tools/bench_peers/race_table.py benchmarks/race/race.json --update BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = ROOT / "tools" / "bench_peers" / "prompts"
DEFAULT_GGUF = Path.home() / ".cache" / "mtp-rs" / "models" / "gemma-3-270m-q4_k_m.gguf"
DEFAULT_PEERS = Path(os.environ.get("MTP_PEERS_DIR", Path.home() / ".cache" / "mtp-rs" / "peers"))
DEFAULT_CHAT_TEMPLATE = (DEFAULT_PEERS / "llama_cpp_python-0.3.36" / "vendor" / "llama.cpp" / "models"
                         / "templates" / "google-gemma-2-2b-it.jinja")
LLAMA_SPEC_KINDS = ["none", "ngram-simple", "ngram-map-k", "ngram-mod"]
SAMPLED = {"temperature": 0.8, "seed": 0}


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    print("+", " ".join(str(c) for c in cmd), file=sys.stderr, flush=True)
    return subprocess.run([str(c) for c in cmd], check=True, **kw)


def replace_section(doc: Path, section: str, text: str) -> None:
    """Replace what stands between `<!-- SECTION:begin -->` and `<!-- SECTION:end -->` in `doc`."""
    begin, end = f"<!-- {section}:begin -->", f"<!-- {section}:end -->"
    body = doc.read_text()
    start, stop = body.index(begin) + len(begin), body.index(end)
    doc.write_text(body[:start] + "\n" + text + "\n" + body[stop:])


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True).stdout.strip()


def sampling_flags(sampling: str) -> list[str]:
    if sampling == "greedy":
        return ["--temperature", "0"]
    return ["--temperature", str(SAMPLED["temperature"]), "--seed", str(SAMPLED["seed"]),
            "--top-k", "0", "--top-p", "1"]


def ours(args, prompts: Path, sampling: str, chat: bool, out: Path, *, model: list[str],
         depths: str, reps: int | None = None) -> dict:
    """One `mtp bench` run: plain, the default schedule with a new and a carried-over
    controller, and the fixed `depths`, interleaved prompt by prompt."""
    cmd = [args.mtp, "bench", *model, "--prompts", prompts, "-n", args.num_predict,
           "--reps", reps or args.reps, "--warmup", 1, "--depths", depths, "--schedules", "adaptive",
           "--controllers", "fresh,carried", "--cost-reps", 5, "--max-width", 9,
           "--threads", args.threads, *sampling_flags(sampling), "--json", out]
    if chat:
        cmd += ["--chat", "--chat-template", args.chat_template]
    sh(cmd, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port: int, path: str, body: dict, timeout: float = 600) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


class LlamaServer:
    """One llama-server on 127.0.0.1 with one speculation kind; stopped on exit."""

    def __init__(self, args, kind: str, log: Path, extra: tuple = ()):
        self.port = free_port()
        cmd = [args.llama / "bin" / "llama-server", "-m", args.gguf, "--host", "127.0.0.1",
               "--port", self.port, "-t", args.threads, "-tb", args.threads, "-c", 4096,
               "-np", 1, "--no-webui", *extra]
        if kind != "none":
            cmd += ["--spec-type", kind]
        self.log = log
        self.proc = subprocess.Popen([str(c) for c in cmd], stdout=log.open("w"),
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def __enter__(self):
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited: see {self.log}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"llama-server did not come up: see {self.log}")

    def __exit__(self, *exc):
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)

    def system_info(self) -> str:
        for line in self.log.read_text(errors="replace").splitlines():
            if "system_info" in line:
                return line.split("system_info:", 1)[-1].strip()
        return ""

    def complete(self, ids: list[int], n: int, sampling: str, seed: int) -> dict:
        body = {"prompt": ids, "n_predict": n, "ignore_eos": True, "cache_prompt": False,
                "return_tokens": True, "stream": False, "top_k": 0, "top_p": 1.0, "min_p": 0.0,
                "repeat_penalty": 1.0, "typical_p": 1.0}
        if sampling == "greedy":
            body["temperature"] = 0.0
        else:
            body["temperature"] = SAMPLED["temperature"]
            body["seed"] = seed
        return post(self.port, "/completion", body)


def peer_system_info(args) -> str:
    """ggml's system_info line (threads, the instruction sets it uses), logged at trace level."""
    with LlamaServer(args, "none", args.out / "llama-server-system-info.log", ("-lv", 5)) as server:
        return server.system_info()


def measure(server: "LlamaServer", ids: list[list[int]], num_predict: int, reps: int,
            sampling: str) -> list[dict]:
    """Every prompt `reps` times on `server` after a warm-up over the first three (as ours):
    per prompt the first repetition's timings, drafts and tokens, the later ones' decode rates."""
    for i in range(min(3, len(ids))):
        server.complete(ids[i], num_predict, sampling, SAMPLED["seed"] + i)
    per_prompt = []
    for rep in range(reps):
        for i, p in enumerate(ids):
            r = server.complete(p, num_predict, sampling, SAMPLED["seed"] + i)
            t = r["timings"]
            entry = {"decode_tps": t["predicted_per_second"], "prompt_tps": t["prompt_per_second"],
                     "predicted_n": t["predicted_n"], "prompt_n": t["prompt_n"],
                     "draft_n": t.get("draft_n", 0), "draft_n_accepted": t.get("draft_n_accepted", 0),
                     "tokens": r.get("tokens", [])}
            if rep == 0:
                per_prompt.append(entry)
            else:
                per_prompt[i].setdefault("more_decode_tps", []).append(entry["decode_tps"])
    return per_prompt


def llama_runs(args, ids: list[list[int]], sampling: str, logs: Path) -> dict:
    runs = {}
    for kind in LLAMA_SPEC_KINDS:
        with LlamaServer(args, kind, logs / f"llama-server-{kind}.log") as server:
            runs[kind] = measure(server, ids, args.num_predict, args.reps, sampling)
    return runs


def llama_bench(args) -> dict:
    out = sh([args.llama / "bin" / "llama-bench", "-m", args.gguf, "-t", args.threads,
              "-p", 512, "-n", 128, "-r", 3, "-o", "json"], capture_output=True, text=True).stdout
    rows = json.loads(out)
    return {"rows": [{k: r.get(k) for k in ("n_prompt", "n_gen", "avg_ts", "stddev_ts", "n_threads",
                                             "cpu_info", "backends", "build_commit", "type_k")}
                     for r in rows]}


def copyable_share(prompt: list[int], output: list[int], nmin: int = 2, nmax: int = 4) -> float:
    """Share of `output` a prompt-lookup drafter could have copied: token i counts when the
    longest suffix (nmin..nmax tokens) of the text before it occurred earlier and its latest
    earlier occurrence was followed by token i."""
    text = list(prompt)
    hits = 0
    for tok in output:
        for n in range(nmax, nmin - 1, -1):
            if len(text) <= n:
                continue
            suffix = text[-n:]
            found = None
            for s in range(len(text) - n - 1, -1, -1):
                if text[s:s + n] == suffix:
                    found = s
                    break
            if found is not None:
                hits += int(text[found + n] == tok)
                break
        text.append(tok)
    return hits / len(output) if output else 0.0


def machine() -> dict:
    info = {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return info


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mtp", type=Path, default=ROOT / "target" / "release" / "mtp")
    ap.add_argument("--gguf", type=Path, default=DEFAULT_GGUF)
    ap.add_argument("--llama", type=Path, default=DEFAULT_PEERS / "llama.cpp-0.3.36")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--sets", default="open,grounded,chat", help="prompt sets of prompts/")
    ap.add_argument("--chat-template", type=Path, default=DEFAULT_CHAT_TEMPLATE,
                    help="the chat set's template (the real GGUF, a base model, has none)")
    ap.add_argument("--samplings", default="greedy,sampled")
    ap.add_argument("-n", "--num-predict", type=int, default=128)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--depths", default="2,4,8,16", help="our fixed lookup depths")
    ap.add_argument("--parts", default="real,default-pair",
                    help="what to run: `real` (the GGUF against llama.cpp), `default-pair`; "
                         "running only `default-pair` replaces those rows of an existing race.json")
    ap.add_argument("--default-pair-reps", type=int, default=5,
                    help="repetitions of the default pair's runs (its prompts take milliseconds)")
    ap.add_argument("--max-prompts", type=int, default=0, help="smoke runs: only the first N prompts")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    build_info = json.loads((args.llama / "build-info.json").read_text())

    parts = set(args.parts.split(","))
    existing = args.out / "race.json"
    if "real" not in parts and existing.exists():
        report = json.loads(existing.read_text())
        report["default_pair"] = []
        report["default_pair_commit"] = git("rev-parse", "HEAD")
        run_default_pair(args, report)
        report["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
        existing.write_text(json.dumps(report, indent=1) + "\n")
        return 0
    report = {"schema_version": 1, "machine": machine(), "ours_commit": git("rev-parse", "HEAD"),
              "ours_dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
              "peer_build": build_info, "num_predict": args.num_predict, "threads": args.threads,
              "reps": args.reps, "sampled": SAMPLED, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
              "gguf": str(args.gguf), "sets": []}
    if "real" in parts:
        run_real(args, report)
    if "default-pair" in parts:
        run_default_pair(args, report)
    report["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    (args.out / "race.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out / 'race.json'}", file=sys.stderr)
    return 0


def prompt_file(args, set_name: str) -> Path:
    """The prompt set `set_name`, or (`--max-prompts N`) a file of its first N prompts."""
    prompts = PROMPTS / f"{set_name}.txt"
    if args.max_prompts:
        lines = [l for l in prompts.read_text().splitlines() if l.strip() and not l.startswith("#")]
        prompts = args.out / f"{set_name}-first{args.max_prompts}.txt"
        prompts.write_text("\n".join(lines[: args.max_prompts]) + "\n")
    return prompts


def run_real(args, report: dict) -> None:
    """The GGUF: ours and llama.cpp, per prompt set and sampling."""
    report["peer_build"]["system_info"] = peer_system_info(args)
    report["llama_bench"] = llama_bench(args)
    for set_name in args.sets.split(","):
        prompts = prompt_file(args, set_name)
        for sampling in args.samplings.split(","):
            tag = f"{set_name}-{sampling}"
            our = ours(args, prompts, sampling, set_name == "chat", args.out / f"ours-{tag}.json",
                       model=["--model", args.gguf, "--draft-kind", "ngram"], depths=args.depths)
            ids = our["setup"]["prompt_ids"]
            llama = llama_runs(args, ids, sampling, args.out)
            plain = next(v for v in our["variants"] if v["name"] == "plain")
            report["sets"].append({
                "set": set_name, "sampling": sampling, "model": "gemma-3-270m Q4_K_M (GGUF)",
                "chat_template": args.chat_template.name if set_name == "chat" else None,
                "prompts": len(ids), "prompt_tokens": our["setup"]["prompt_tokens"],
                "ours": {v["name"]: {"per_prompt_tps": v["per_prompt_decode_tokens_per_second"],
                                     "acceptance": v["acceptance"], "mean_accepted": v["mean_accepted"],
                                     "greedy_match": v["greedy_match"], "outputs": v["outputs"],
                                     "rounds_by_depth": v["round_secs_by_depth"]}
                         for v in our["variants"]},
                "ours_prefill_tps": our["prefill_tokens_per_second"],
                "copyable_share": [copyable_share(p, o) for p, o in zip(ids, plain["outputs"])],
                "llama": llama,
            })
            (args.out / "race.json").write_text(json.dumps(report, indent=1) + "\n")


def run_default_pair(args, report: dict) -> None:
    """The default pair: ours only, the controller new per request and carried over."""
    sets = [("open", ROOT / "models" / "prompts.txt"),
            ("grounded", ROOT / "models" / "prompts-grounded.txt")]
    for (set_name, file), sampling in itertools.product(sets, args.samplings.split(",")):
        tag = f"default-pair-{set_name}-{sampling}"
        our = ours(args, file, sampling, False, args.out / f"ours-{tag}.json", model=[],
                   depths="1,2,3,4", reps=args.default_pair_reps)
        report.setdefault("default_pair", []).append({
            "set": set_name, "sampling": sampling, "prompts": our["setup"]["prompts"],
            "reps": our["setup"]["reps"],
            "ours": {v["name"]: {"per_prompt_tps": v["per_prompt_decode_tokens_per_second"],
                                 "acceptance": v["acceptance"], "mean_accepted": v["mean_accepted"],
                                 "greedy_match": v["greedy_match"],
                                 "rounds_by_depth": v["round_secs_by_depth"]}
                     for v in our["variants"]},
            "cost": our["cost"],
        })
        (args.out / "race.json").write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
