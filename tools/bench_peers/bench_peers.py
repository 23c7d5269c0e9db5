#!/usr/bin/env python3
"""Peer benchmark for `mtp bench`: the same prompts, through HF transformers (and mlx-lm).

Runs, interleaved in one process (the variant order rotates every repetition):

    hf-plain-greedy        the target alone, greedy              (model.generate)
    hf-assisted-greedy     target + gemma4_assistant, greedy     (generate(assistant_model=...))
    hf-assisted-sampled    target + gemma4_assistant, sampled    (temperature --temperature,
                                                                  top_k 0, top_p 1, seeded)
    mlx-lm-plain-greedy    the target alone on mlx-lm (--mlx, when mlx-lm is installed and can
                           load the target; mlx-lm cannot drive a gemma4_assistant drafter)

Each reports generated tokens / wall time of the whole generate() call (prefill included), the
figure `mtp bench` reports as `end_to_end_tokens_per_second`. With `--ours mtp-bench.json` the
prompt token ids and the number of tokens come from our report, and the script prints
"ours / peer" for every row from this one run.

Usage (see README.md):
    /work/venv-hf/bin/python tools/bench_peers/bench_peers.py --ours mtp-bench.json
    /work/venv-hf/bin/python tools/bench_peers/bench_peers.py --target T --assistant A \
        --prompts models/prompts.txt --num-predict 128 --reps 5 --json peers.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCHEMA_VERSION = 1
WARMUP_PROMPTS = 3


def default_pair() -> tuple[Path, Path]:
    """$MTP_MODEL_DIR, else models/default of the checkout (as `mtp` resolves it)."""
    root = Path(os.environ.get("MTP_MODEL_DIR") or REPO / "models" / "default")
    return root / "target", root / "assistant"


def read_prompts(path: Path) -> list[str]:
    """Non-empty, non-comment lines, trimmed (as `mtp bench` reads them)."""
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    prompts = [line for line in lines if line and not line.startswith("#")]
    if not prompts:
        sys.exit(f"error: {path} holds no prompts")
    return prompts


def encode(target: Path, prompts: list[str]) -> list[list[int]]:
    """Token ids as `mtp` encodes a raw prompt: tokenizer.json without specials, plus BOS when
    tokenizer_config.json sets add_bos_token (unless the text already starts with it)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(target / "tokenizer.json"))
    config_path = target / "tokenizer_config.json"
    config = json.loads(config_path.read_text()) if config_path.is_file() else {}
    bos = config.get("bos_token")
    if isinstance(bos, dict):
        bos = bos.get("content")
    bos_id = tok.token_to_id(bos) if isinstance(bos, str) else None
    out = []
    for text in prompts:
        ids = tok.encode(text, add_special_tokens=False).ids
        if config.get("add_bos_token") and bos_id is not None and ids[:1] != [bos_id]:
            ids = [bos_id] + ids
        out.append(ids)
    return out


def spread(values: list[float]) -> dict | None:
    if not values:
        return None
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


class Peer:
    """One variant: a name, how it generates one prompt, and its per-repetition totals."""

    def __init__(self, name: str, library: str, mode: str, run):
        self.name, self.library, self.mode, self.run = name, library, mode, run
        self.rates: list[float] = []
        self.tokens: list[list[int]] = []

    def report(self) -> dict:
        return {
            "name": self.name,
            "library": self.library,
            "mode": self.mode,
            "tokens_per_second": spread(self.rates),
        }


def hf_peers(args, prompt_ids: list[list[int]]) -> tuple[list[Peer], dict]:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    target = AutoModelForCausalLM.from_pretrained(args.target, dtype=dtype).eval()
    assistant = AutoModelForCausalLM.from_pretrained(args.assistant, dtype=dtype).eval()
    eos = None if not args.stop_at_eos else target.generation_config.eos_token_id
    pad = target.generation_config.pad_token_id
    if pad is None:
        pad = 0
    for m in (target, assistant):
        m.generation_config.eos_token_id = eos
        m.generation_config.pad_token_id = pad
    gc = assistant.generation_config
    # Unset in the assistant's generation_config: our seed's defaults (4 drafts, constant).
    gc.num_assistant_tokens = args.num_assistant_tokens or gc.num_assistant_tokens or 4
    gc.num_assistant_tokens_schedule = (
        args.assistant_schedule or gc.num_assistant_tokens_schedule or "constant"
    )
    n = args.num_predict

    def generate(ids: list[int], index: int, **kwargs) -> list[int]:
        x = torch.tensor([ids], dtype=torch.long)
        with torch.inference_mode():
            out = target.generate(
                x,
                attention_mask=torch.ones_like(x),
                max_new_tokens=n,
                min_new_tokens=0,
                eos_token_id=eos,
                pad_token_id=pad,
                **kwargs,
            )
        return out[0, len(ids):].tolist()

    sampled = dict(do_sample=True, temperature=args.temperature, top_k=0, top_p=1.0)

    def assisted_sampled(ids, index):
        torch.manual_seed(args.seed + index)
        return generate(ids, index, assistant_model=assistant, **sampled)

    peers = [
        Peer("hf-plain-greedy", "transformers", "greedy",
             lambda ids, i: generate(ids, i, do_sample=False)),
        Peer("hf-assisted-greedy", "transformers", "greedy",
             lambda ids, i: generate(ids, i, do_sample=False, assistant_model=assistant)),
        Peer("hf-assisted-sampled", "transformers", f"temperature {args.temperature}",
             assisted_sampled),
    ]
    info = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "torch_threads": torch.get_num_threads(),
        "num_assistant_tokens": assistant.generation_config.num_assistant_tokens,
        "assistant_schedule": assistant.generation_config.num_assistant_tokens_schedule,
    }
    return peers, info


def mlx_peers(args) -> tuple[list[Peer], list[dict]]:
    """mlx-lm's target alone, when mlx-lm is installed and loads the target."""
    try:
        import mlx.core as mx
        from mlx_lm import load
        from mlx_lm.generate import generate_step
    except ImportError as e:
        return [], [{"name": "mlx-lm-plain-greedy", "reason": f"mlx-lm not importable: {e}"}]
    try:
        model, _tokenizer = load(str(args.target))
    except Exception as e:  # noqa: BLE001 - any load failure is a reason to skip, reported
        return [], [{"name": "mlx-lm-plain-greedy", "reason": f"mlx-lm cannot load the target: {e}"}]

    def run(ids: list[int], index: int) -> list[int]:
        out = []
        prompt = mx.array(ids)
        for token, _ in generate_step(prompt, model, max_tokens=args.num_predict):
            out.append(int(token))
        return out

    return [Peer("mlx-lm-plain-greedy", "mlx-lm", "greedy", run)], []


def run_all(peers: list[Peer], prompt_ids: list[list[int]], args) -> None:
    passes = ["warmup"] * args.warmup + list(range(args.reps))
    for index, rep in enumerate(passes):
        order = peers[index % len(peers):] + peers[: index % len(peers)]
        for peer in order:
            chosen = prompt_ids[:WARMUP_PROMPTS] if rep == "warmup" else prompt_ids
            tokens, secs = 0, 0.0
            for i, ids in enumerate(chosen):
                t0 = time.perf_counter()
                out = peer.run(ids, i)
                secs += time.perf_counter() - t0
                tokens += len(out)
                if rep == 0:
                    peer.tokens.append(out)
            if rep != "warmup":
                peer.rates.append(tokens / secs if secs > 0 else 0.0)
        print(f"pass {index + 1}/{len(passes)} done", file=sys.stderr)


def comparison(ours: dict, peers: list[Peer]) -> list[dict]:
    """ours (end-to-end tokens/s, median) / peer (median), row by row."""
    by_name = {p.name: p.report()["tokens_per_second"] for p in peers}
    greedy = ours["setup"]["sampling"]["temperature"] == 0
    rows = []
    for v in ours["variants"]:
        e2e = v.get("end_to_end_tokens_per_second")
        if not e2e:
            continue
        if v["name"] == "plain":
            against = ["hf-plain-greedy", "mlx-lm-plain-greedy"] if greedy else []
        else:
            against = ["hf-assisted-greedy"] if greedy else ["hf-assisted-sampled"]
        for name in against:
            peer = by_name.get(name)
            if peer and peer["median"] > 0:
                rows.append({
                    "ours": v["name"],
                    "peer": name,
                    "ours_tokens_per_second": e2e["median"],
                    "peer_tokens_per_second": peer["median"],
                    "ratio": e2e["median"] / peer["median"],
                })
    return rows


def print_table(peers: list[Peer], rows: list[dict], skipped: list[dict]) -> None:
    print(f"{'peer':<22} {'tok/s':>9} {'(min-max)':>19}")
    for p in peers:
        s = p.report()["tokens_per_second"]
        if s:
            print(f"{p.name:<22} {s['median']:>9.1f} {s['min']:>9.1f}-{s['max']:<9.1f}")
    for s in skipped:
        print(f"{s['name']:<22} skipped: {s['reason']}")
    if rows:
        print(f"\n{'ours':<14} {'peer':<22} {'ours t/s':>9} {'peer t/s':>9} {'ours/peer':>9}")
        for r in rows:
            print(f"{r['ours']:<14} {r['peer']:<22} {r['ours_tokens_per_second']:>9.1f} "
                  f"{r['peer_tokens_per_second']:>9.1f} {r['ratio']:>9.3f}")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", type=Path, default=None,
                   help="target model directory [ours' with --ours, else the default pair's]")
    p.add_argument("--assistant", type=Path, default=None,
                   help="assistant directory [ours' with --ours, else the default pair's]")
    p.add_argument("--prompts", type=Path, default=None,
                   help="prompt file [ours' prompts_file with --ours, else models/prompts.txt]")
    p.add_argument("--ours", type=Path, help="our `mtp bench` JSON: reuse its prompt ids and "
                   "num_predict, and print ours / peer")
    p.add_argument("--num-predict", "-n", type=int, default=None, help="tokens per prompt [ours, else 128]")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1, help="warm-up passes over the first 3 prompts")
    p.add_argument("--max-prompts", type=int, default=None, help="use only the first N prompts")
    p.add_argument("--temperature", type=float, default=None,
                   help="of hf-assisted-sampled [ours' when ours sampled, else 0.8]")
    p.add_argument("--seed", type=int, default=0, help="prompt i is sampled with torch seed SEED + i")
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    p.add_argument("--threads", type=int, default=None, help="torch threads [torch's default]")
    p.add_argument("--num-assistant-tokens", type=int, default=None,
                   help="drafts per round [the assistant's generation_config, else 4]")
    p.add_argument("--assistant-schedule", choices=["constant", "heuristic"], default=None,
                   help="HF's draft schedule [the assistant's generation_config, else constant]")
    p.add_argument("--stop-at-eos", action="store_true", help="stop at EOS [ignore EOS, as mtp bench]")
    p.add_argument("--mlx", action="store_true", help="also run mlx-lm (target alone) if installed")
    p.add_argument("--skip-hf", action="store_true",
                   help="run no transformers peer (e.g. --mlx alone, from an mlx-lm venv)")
    p.add_argument("--json", type=Path, default=Path("peers-bench.json"))
    return p.parse_args()


def main() -> int:
    args = parse_args()
    ours = json.loads(args.ours.read_text()) if args.ours else None
    target, assistant = default_pair()
    if args.target is None:
        args.target = Path(ours["setup"]["target"]) if ours else target
    if args.assistant is None:
        args.assistant = Path(ours["setup"]["drafter"]) if ours else assistant
    if args.prompts is None:
        args.prompts = Path(ours["setup"]["prompts_file"]) if ours else REPO / "models" / "prompts.txt"
    prompts = read_prompts(args.prompts)
    prompt_ids = encode(args.target, prompts)
    if ours:
        their_ids = ours["setup"]["prompt_ids"]
        if their_ids != prompt_ids[: len(their_ids)]:
            print("warning: our report's prompt ids differ from this tokenization; using ours",
                  file=sys.stderr)
        prompt_ids = their_ids
        if args.num_predict is None:
            args.num_predict = ours["setup"]["num_predict"]
    if args.num_predict is None:
        args.num_predict = 128
    if args.temperature is None:
        ours_t = ours["setup"]["sampling"]["temperature"] if ours else 0
        args.temperature = ours_t if ours_t > 0 else 0.8
    if args.max_prompts:
        prompt_ids = prompt_ids[: args.max_prompts]

    peers, info = hf_peers(args, prompt_ids) if not args.skip_hf else ([], {})
    skipped = []
    if args.mlx:
        more, why = mlx_peers(args)
        peers += more
        skipped += why
    if not peers:
        for s in skipped:
            print(f"{s['name']}: skipped: {s['reason']}", file=sys.stderr)
        sys.exit("error: no peer to run (--skip-hf without a loadable --mlx)")
    run_all(peers, prompt_ids, args)

    tokens = {p.name: p.tokens for p in peers}
    hf_identical = (
        tokens["hf-assisted-greedy"] == tokens["hf-plain-greedy"] if not args.skip_hf else None
    )
    like_for_like = ours is not None and len(prompt_ids) == ours["setup"]["prompts"]
    if ours and not like_for_like:
        print("note: fewer prompts than our report: no ours / peer table", file=sys.stderr)
    rows = comparison(ours, peers) if like_for_like else []
    report = {
        "schema_version": SCHEMA_VERSION,
        "tool": "bench_peers",
        "machine": {
            "platform": platform.platform(),
            "machine": platform.machine(),
            "processor": platform.processor(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            **{k: info.get(k) for k in ("torch", "transformers", "torch_threads")},
        },
        "setup": {
            "target": str(args.target),
            "assistant": str(args.assistant),
            "prompts_file": str(args.prompts),
            "prompts": len(prompt_ids),
            "prompt_ids_from": str(args.ours) if ours else "tokenizer.json",
            "num_predict": args.num_predict,
            "reps": args.reps,
            "warmup": args.warmup,
            "dtype": args.dtype,
            "temperature": args.temperature,
            "seed": args.seed,
            "eos": "stop" if args.stop_at_eos else "ignore",
            "num_assistant_tokens": info.get("num_assistant_tokens"),
            "assistant_schedule": info.get("assistant_schedule"),
        },
        "peers": [p.report() for p in peers],
        "skipped": skipped,
        "hf_assisted_greedy_equals_plain": hf_identical,
        "comparison": rows,
    }
    print_table(peers, rows, skipped)
    print(f"HF assisted greedy output identical to HF plain greedy: {hf_identical}")
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
