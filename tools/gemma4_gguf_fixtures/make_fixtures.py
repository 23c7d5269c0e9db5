#!/usr/bin/env python3
"""Tiny Gemma 4 target + assistant checkpoints written by HF transformers and converted to GGUF by
llama.cpp's own converter (the files a llama.cpp / LM Studio / ollama user has, in miniature).

Per case, under ``<out>/<case>/``:

    Cases: e2b_like (PLE, KV sharing), dense_like (31B-like: keys as values, KV heads of their
    own on full layers), moe_like (26B-A4B-like experts), e2b_like_f16 (`--outtype f16`),
    wide_q4_k_m (256-wide rows, `llama-quantize Q4_K_M`), e2b_like_q8_0 (`--outtype q8_0`).

    hf/target/      Gemma4ForCausalLM (text), save_pretrained, with a byte-fallback BPE tokenizer
                    (tokenizers' BPE trainer: Gemma's special ids first, the 256 byte tokens, merges)
    hf/assistant/   Gemma4AssistantForCausalLM over the target's KV (tied dense head)
    hf/assistant_ordered/
                    (e2b_like) the same with HF's centroid-routed head, converted too (the
                    converter drops the centroids)
    target-f32.gguf, assistant-f32.gguf
                    `convert_hf_to_gguf.py --outtype f32` of the vendored llama.cpp tree (its own gguf-py)
    reference.json  prompts, HF's greedy continuation and last-position logits of the target, and
                    llama.cpp's greedy continuation on the GGUF (`llama-server`, with its top-5
                    log-probabilities at each position), alone and with the
                    assistant under `--spec-type draft-mtp` (its default depth, and k = 1..4 with the
                    draft tokens it proposed and accepted)

Usage (the converter needs torch; PyPI's CUDA wheel works on a CPU):
    python3 -m venv /tmp/g4g && /tmp/g4g/bin/pip install -r tools/gemma4_gguf_fixtures/requirements.txt
    /tmp/g4g/bin/python tools/gemma4_gguf_fixtures/make_fixtures.py \\
        --llama-cpp ~/.cache/mtp-rs/peers/llama_cpp_python-0.3.36/vendor/llama.cpp \
        --llama-bin ~/.cache/mtp-rs/peers/llama.cpp-0.3.36/bin      # tools/bench_peers/build_llama_cpp.sh
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Tokenizer, decoders, models, normalizers, trainers  # noqa: E402
from transformers import (  # noqa: E402
    Gemma4AssistantConfig,
    Gemma4AssistantForCausalLM,
    Gemma4ForCausalLM,
    Gemma4TextConfig,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO_ROOT / "tests" / "fixtures" / "gemma4_gguf"
EXPECTED_TRANSFORMERS = "5.24.0"
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
PAD_ID, EOS_ID, BOS_ID = 0, 1, 2
VOCAB = 320
CORPUS = [
    "In the beginning God created the heaven and the earth.",
    "And the earth was without form, and void; and darkness was upon the face of the deep.",
    "The quick brown fox jumps over the lazy dog. Café, naïve, 日本語, 🙂.",
    "def add(a, b):\n    return a + b\n",
]
PROMPTS = ["In the beginning", "The quick brown fox", "def add(a, b):"]
TOP_LOGPROBS = 5

PROPORTIONAL_ROPE = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
    "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0},
}

CASES = {
    # E2B-like: per-layer embeddings, KV sharing, double-wide MLP, proportional partial RoPE.
    "e2b_like": dict(
        seed=7007,
        target=dict(
            hidden_size=48, intermediate_size=64, num_hidden_layers=4, num_attention_heads=2,
            num_key_value_heads=1, head_dim=16, global_head_dim=32, sliding_window=8,
            layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            rope_parameters=PROPORTIONAL_ROPE, hidden_size_per_layer_input=8,
            num_kv_shared_layers=2, use_double_wide_mlp=True, final_logit_softcapping=30.0,
        ),
        assistant_text=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                            num_attention_heads=2,
                            layer_types=["sliding_attention", "full_attention"]),
        # 8 clusters of 40 tokens, the best 2 routed (E2B: 2048 of 128, the best 32).
        ordered=dict(num_centroids=8, centroid_intermediate_top_k=2),
    ),
    # 31B-like dense: no PLE and no KV sharing; full layers with keys as values and KV heads of
    # their own (attention_k_eq_v, num_global_key_value_heads), sliding layers 3 in 4.
    "dense_like": dict(
        seed=7207,
        target=dict(
            hidden_size=48, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, num_global_key_value_heads=1, attention_k_eq_v=True,
            head_dim=16, global_head_dim=32, sliding_window=8,
            layer_types=["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
            rope_parameters=PROPORTIONAL_ROPE, hidden_size_per_layer_input=0,
            num_kv_shared_layers=0, final_logit_softcapping=30.0,
        ),
        assistant_text=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                            num_attention_heads=4,
                            layer_types=["sliding_attention", "full_attention"]),
    ),
    # 26B-A4B-like MoE: every layer a dense MLP beside 4 experts (2 routed per token), keys as
    # values on full layers.
    "moe_like": dict(
        seed=7307,
        target=dict(
            hidden_size=48, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, num_global_key_value_heads=1, attention_k_eq_v=True,
            head_dim=16, global_head_dim=32, sliding_window=8,
            layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            rope_parameters=PROPORTIONAL_ROPE, hidden_size_per_layer_input=0,
            num_kv_shared_layers=0, final_logit_softcapping=30.0,
            enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=32,
        ),
        assistant_text=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                            num_attention_heads=4,
                            layer_types=["sliding_attention", "full_attention"]),
    ),
    # The E2B-like structure converted with `--outtype f16` (another seed; the HF checkpoint is
    # not kept: the reference holds what the tests need).
    "e2b_like_f16": dict(
        seed=7407,
        outtype="f16",
        keep_hf=False,
        target=dict(
            hidden_size=48, intermediate_size=64, num_hidden_layers=4, num_attention_heads=2,
            num_key_value_heads=1, head_dim=16, global_head_dim=32, sliding_window=8,
            layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            rope_parameters=PROPORTIONAL_ROPE, hidden_size_per_layer_input=8,
            num_kv_shared_layers=2, use_double_wide_mlp=True, final_logit_softcapping=30.0,
        ),
        assistant_text=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                            num_attention_heads=2,
                            layer_types=["sliding_attention", "full_attention"]),
    ),
    # Every matrix row a whole number of K-quant super-blocks (256), quantized by llama.cpp's
    # `llama-quantize ... Q4_K_M` from the f32 conversion (its mix of Q4_K and Q6_K; the narrower
    # assistant's rows fall back to the types llama.cpp picks for them).
    "wide_q4_k_m": dict(
        seed=7507,
        quantize="Q4_K_M",
        keep_hf=False,
        target=dict(
            hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=2,
            num_key_value_heads=1, head_dim=128, global_head_dim=256, sliding_window=8,
            layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            rope_parameters=PROPORTIONAL_ROPE, hidden_size_per_layer_input=0,
            num_kv_shared_layers=0, final_logit_softcapping=30.0,
        ),
        assistant_text=dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                            num_attention_heads=2,
                            layer_types=["sliding_attention", "full_attention"]),
    ),
    # The same structure with every matrix row a whole number of Q8_0 blocks (32), converted with
    # `--outtype q8_0`: the quantized GGUF a user has, in miniature.
    "e2b_like_q8_0": dict(
        seed=7107,
        outtype="q8_0",
        target=dict(
            hidden_size=64, intermediate_size=64, num_hidden_layers=4, num_attention_heads=2,
            num_key_value_heads=1, head_dim=32, global_head_dim=64, sliding_window=8,
            layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            rope_parameters=PROPORTIONAL_ROPE, hidden_size_per_layer_input=32,
            num_kv_shared_layers=2, use_double_wide_mlp=True, final_logit_softcapping=30.0,
        ),
        # llama.cpp's loader needs the assistant narrower than the target (its
        # embedding_length_out carries the target's width only when they differ).
        assistant_text=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                            num_attention_heads=2,
                            layer_types=["sliding_attention", "full_attention"]),
    ),
}


def write_tokenizer(path: Path) -> Tokenizer:
    """A byte-fallback BPE in Gemma's shape: `▁` for spaces, specials at Gemma's ids, the 256
    byte tokens, then merges up to `VOCAB`."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse()])
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS + byte_tokens,
                                  initial_alphabet=[], show_progress=False)
    tok.train_from_iterator([t.replace(" ", "▁") for t in CORPUS], trainer)
    path.mkdir(parents=True, exist_ok=True)
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": True, "add_eos_token": False,
        "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
    }, indent=2) + "\n")
    return tok


def llama_greedy(bin_dir: Path, gguf: Path, runs: list[dict], extra: list[str]) -> list[dict]:
    """Greedy continuations of every run's prompt ids from `llama-server` on `gguf`, with the
    draft tokens it proposed and accepted (zero without a drafter)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([str(bin_dir / "llama-server"), "-m", str(gguf), "--port", str(port), "-t", "2",
                             "-c", "512", "-np", "1", "--no-webui", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"llama-server did not start on {gguf}")
                time.sleep(0.3)
        out = []
        for run in runs:
            body = {"prompt": run["prompt_ids"], "n_predict": len(run["greedy_ids"]), "samplers": ["top_k"],
                    "top_k": 1, "ignore_eos": True, "cache_prompt": False, "return_tokens": True,
                    "n_probs": TOP_LOGPROBS}
            req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=120) as r:
                reply = json.loads(r.read())
            timings = reply.get("timings", {})
            # llama.cpp's own log-probabilities (softmax of its logits) of the best tokens at
            # each generated position: how near a tie a divergence from it is. One request per
            # position (a reply merges the positions of a character split over byte tokens).
            top = []
            if not extra:
                for i in range(len(reply["tokens"])):
                    one = dict(body, prompt=run["prompt_ids"] + reply["tokens"][:i], n_predict=1)
                    req1 = urllib.request.Request(f"http://127.0.0.1:{port}/completion",
                                                  data=json.dumps(one).encode(),
                                                  headers={"Content-Type": "application/json"})
                    with urllib.request.urlopen(req1, timeout=120) as r:
                        probs = json.loads(r.read()).get("completion_probabilities")
                    # None: the server gives no probabilities for a token that ends in the
                    # middle of a character (these byte-fallback models emit such bytes).
                    top.append([[t["id"], round(t["logprob"], 5)] for t in probs[0]["top_logprobs"]]
                               if probs else None)
            out.append({"ids": reply["tokens"], "drafted": timings.get("draft_n", 0),
                        "accepted": timings.get("draft_n_accepted", 0), "top_logprobs": top})
        return out
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-cpp", type=Path, required=True, help="the vendored llama.cpp tree")
    ap.add_argument("--llama-bin", type=Path, required=True, help="llama.cpp's native tools (llama-server)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    if transformers.__version__ != EXPECTED_TRANSFORMERS:
        print(f"warning: transformers {transformers.__version__}, fixtures were made with "
              f"{EXPECTED_TRANSFORMERS}", file=sys.stderr)
    torch.use_deterministic_algorithms(True)
    for name, case in CASES.items():
        out = args.out / name
        tok = write_tokenizer(out / "hf" / "target")
        vocab = tok.get_vocab_size()
        torch.manual_seed(case["seed"])
        tcfg = Gemma4TextConfig(vocab_size=vocab, vocab_size_per_layer_input=vocab,
                                pad_token_id=PAD_ID, eos_token_id=EOS_ID, bos_token_id=BOS_ID,
                                **case["target"])
        target = Gemma4ForCausalLM(tcfg).eval()
        with torch.no_grad():
            for n, p in target.named_parameters():
                if n.endswith("norm.weight"):
                    p.add_(0.3 * torch.randn_like(p))
                elif p.dim() == 2:
                    p.mul_(8.0 if "embed" not in n else 3.0)
        target.save_pretrained(out / "hf" / "target", safe_serialization=True)
        t = case["target"]
        # The assistant reads the target's KV: the same heads, head sizes and window.
        shared = {k: t[k] for k in ("head_dim", "global_head_dim", "num_key_value_heads", "sliding_window",
                                    "rope_parameters", "num_global_key_value_heads", "attention_k_eq_v")
                  if k in t}
        atext = dict(case["assistant_text"], vocab_size=vocab, hidden_size_per_layer_input=0,
                     vocab_size_per_layer_input=0, **shared)
        acfg = Gemma4AssistantConfig(text_config=atext, backbone_hidden_size=t["hidden_size"],
                                     use_ordered_embeddings=False)
        assistant = Gemma4AssistantForCausalLM(acfg).eval()
        assistant.save_pretrained(out / "hf" / "assistant", safe_serialization=True)
        parts = ["target", "assistant"]
        if "ordered" in case:
            # An assistant with HF's centroid-routed head: the converter drops the centroids,
            # which `--draft-centroids hf/assistant_ordered` gives back.
            ocfg = Gemma4AssistantConfig(text_config=atext, backbone_hidden_size=t["hidden_size"],
                                         use_ordered_embeddings=True, **case["ordered"])
            ordered = Gemma4AssistantForCausalLM(ocfg).eval()
            with torch.no_grad():
                ordered.masked_embedding.token_ordering.copy_(torch.randperm(vocab))
                ordered.masked_embedding.centroids.weight.normal_(0.0, 1.0)
            ordered.save_pretrained(out / "hf" / "assistant_ordered", safe_serialization=True)
            parts.append("assistant_ordered")
        # The assistant ships the target's tokenizer (the converter writes it into its GGUF too).
        for part in parts[1:]:
            for f in ("tokenizer.json", "tokenizer_config.json"):
                shutil.copy(out / "hf" / "target" / f, out / "hf" / part / f)
        runs = []
        for text in PROMPTS:
            ids = [BOS_ID] + tok.encode(text).ids
            with torch.no_grad():
                logits = target(torch.tensor([ids])).logits[0, -1]
                greedy = target.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False,
                                         eos_token_id=None, pad_token_id=PAD_ID)[0, len(ids):]
            runs.append({"text": text, "prompt_ids": ids, "greedy_ids": greedy.tolist(),
                         "last_logits": [round(x, 5) for x in logits.tolist()]})
        convert = args.llama_cpp / "convert_hf_to_gguf.py"
        outtype = case.get("outtype", "f32")
        for part in parts:
            subprocess.run([sys.executable, str(convert), str(out / "hf" / part), "--outtype", outtype,
                            "--outfile", str(out / f"{part}-{outtype}.gguf")], check=True)
        if "quantize" in case:
            # llama.cpp's own quantizer, from the f32 conversion (which is not kept).
            quant = case["quantize"]
            for part in parts:
                src, dst = out / f"{part}-{outtype}.gguf", out / f"{part}-{quant.lower()}.gguf"
                subprocess.run([str(args.llama_bin / "llama-quantize"), str(src), str(dst), quant],
                               check=True, stdout=subprocess.DEVNULL)
                src.unlink()
            outtype = quant.lower()
        target_gguf, assistant_gguf = out / f"target-{outtype}.gguf", out / f"assistant-{outtype}.gguf"
        alone = llama_greedy(args.llama_bin, target_gguf, runs, [])
        paired = llama_greedy(args.llama_bin, target_gguf, runs,
                              ["-md", str(assistant_gguf), "--spec-type", "draft-mtp"])
        # draft-mtp at fixed depths k = 1..4 (`--spec-draft-n-max k`): tokens, drafted, accepted.
        depths = {k: llama_greedy(args.llama_bin, target_gguf, runs,
                                  ["-md", str(assistant_gguf), "--spec-type", "draft-mtp",
                                   "--spec-draft-n-max", str(k)])
                  for k in range(1, 5)}
        for i, (run, a, p) in enumerate(zip(runs, alone, paired)):
            run["llama_greedy_ids"] = a["ids"]
            run["llama_top_logprobs"] = a["top_logprobs"]
            run["llama_draft_mtp_greedy_ids"] = p["ids"]
            run["llama_draft_mtp_by_depth"] = {str(k): depths[k][i] for k in depths}
            mismatched = [k for k in depths if depths[k][i]["ids"] != a["ids"]]
            if not run["greedy_ids"] == a["ids"] == p["ids"] or mismatched:
                print(f"{name}: {run['text']!r}: HF {run['greedy_ids']} llama.cpp {a['ids']} "
                      f"draft-mtp {p['ids']}, depths differing {mismatched}", file=sys.stderr)
        (out / "reference.json").write_text(json.dumps({
            "case": name, "vocab": vocab, "outtype": outtype, "transformers": transformers.__version__,
            "torch": torch.__version__, "runs": runs}, indent=1) + "\n")
        if not case.get("keep_hf", True):
            shutil.rmtree(out / "hf")
    return 0


if __name__ == "__main__":
    sys.exit(main())
