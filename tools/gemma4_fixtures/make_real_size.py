#!/usr/bin/env python3
"""Gemma 4 at its published width: HF transformers checkpoints whose weights follow a counter-based
rule anyone can regenerate, and the reference HF computes from them.

The published E2B / E4B text configurations (`E2B_TEXT`, `E4B_TEXT`) and their assistants
(`E2B_ASSISTANT`, `E4B_ASSISTANT`) are built with `Gemma4ForCausalLM` / `Gemma4AssistantForCausalLM`;
every weight is then overwritten by `rule_values` (the "Weight rule" below; README.md, "Real size") and the
models are written by their own `save_pretrained` in bfloat16 (every rule value is exact in bf16, so
the f32 reference and a bf16 file hold the same numbers).

Full-size checkpoints are gigabytes, so nothing here commits weights. What is committed, per case, under
`tests/fixtures/gemma4_real_size/<case>/`:

  target/config.json, assistant/config.json   as save_pretrained wrote them
  manifest.json                               every tensor save_pretrained wrote: file, name, dtype,
                                              shape, rule and the SHA-256 of its bytes
  reference.safetensors                       HF's outputs from those weights (f32 forward)
  reference.json                              the case, versions, per-round numbers

The Rust test (`crates/runner/tests/real_size_gemma4.rs`) regenerates the weights by the same rule,
checks every tensor's SHA-256 against the manifest (so its checkpoint is byte-for-byte the one HF
saved), loads it and compares with the reference.

Commands:
  make_real_size.py                              # the CI case(s) into tests/fixtures/gemma4_real_size
  make_real_size.py --cases e2b_4_layers --out /tmp/fx
  make_real_size.py --check                      # regenerate in a temp dir, compare SHA-256 per file
  make_real_size.py --weights-only e2b --out /big/dir   # a full-size checkpoint pair (no reference),
                                                        # for the benchmarks and llama.cpp's converter
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_fixtures as mf  # noqa: E402  (determinism setup, the assisted-generation recorder)

import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import (  # noqa: E402
    Gemma4AssistantConfig,
    Gemma4AssistantForCausalLM,
    Gemma4ForCausalLM,
    Gemma4TextConfig,
)

DEFAULT_OUT = mf.REPO_ROOT / "tests" / "fixtures" / "gemma4_real_size"
S_, F_ = "sliding_attention", "full_attention"

# ---------------------------------------------------------------------------------------------
# The published configurations (google/gemma-4-E2B-it, google/gemma-4-E4B-it text_config and their
# -assistant drafters), the fields a Gemma4TextConfig takes.
# ---------------------------------------------------------------------------------------------
PUBLISHED_ROPE = {
    S_: {"rope_type": "default", "rope_theta": 10_000.0},
    F_: {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0},
}
COMMON_TEXT = dict(
    vocab_size=262_144,
    vocab_size_per_layer_input=262_144,
    hidden_size_per_layer_input=256,
    head_dim=256,
    global_head_dim=512,
    num_attention_heads=8,
    sliding_window=512,
    max_position_embeddings=131_072,
    rms_norm_eps=1e-6,
    final_logit_softcapping=30.0,
    hidden_activation="gelu_pytorch_tanh",
    attention_k_eq_v=False,
    enable_moe_block=False,
    rope_parameters=PUBLISHED_ROPE,
    tie_word_embeddings=True,
    pad_token_id=mf.PAD_ID,
    eos_token_id=mf.EOS_ID,
    bos_token_id=mf.BOS_ID,
)
E2B_TEXT = dict(
    COMMON_TEXT,
    hidden_size=1536,
    intermediate_size=6144,
    num_hidden_layers=35,
    num_key_value_heads=1,
    num_kv_shared_layers=20,
    use_double_wide_mlp=True,
    layer_types=([S_] * 4 + [F_]) * 7,
)
E4B_TEXT = dict(
    COMMON_TEXT,
    hidden_size=2560,
    intermediate_size=10240,
    num_hidden_layers=42,
    num_key_value_heads=2,
    num_kv_shared_layers=18,
    use_double_wide_mlp=False,
    layer_types=[F_ if i % 6 == 5 else S_ for i in range(42)],
)
# The assistants: 4 layers at width 256, FFN 2048, 4 query heads, the target's attention geometry,
# the centroid-routed ("ordered embeddings") head: 2048 centroids, the top 32 (4096 tokens).
ASSISTANT_TEXT = dict(
    hidden_size=256,
    intermediate_size=2048,
    num_hidden_layers=4,
    num_attention_heads=4,
    layer_types=[S_, S_, S_, F_],
)
ASSISTANT_HEAD = dict(use_ordered_embeddings=True, num_centroids=2048, centroid_intermediate_top_k=32)
SHARED_GEOMETRY = ("head_dim", "global_head_dim", "num_key_value_heads", "attention_k_eq_v",
                   "rope_parameters", "sliding_window", "vocab_size", "final_logit_softcapping",
                   "max_position_embeddings", "rms_norm_eps", "hidden_activation")

CASES = {
    # In CI: E2B's every width (hidden, vocabulary, per-layer inputs, head dims, MLP, window) at 4
    # layers; the last 2 share KV (so layers 2 and 3 have the double-wide MLP), one store per type.
    "e2b_4_layers": dict(
        target=dict(E2B_TEXT, num_hidden_layers=4, num_kv_shared_layers=2, layer_types=[S_, F_, S_, F_]),
        prompt_len=16,
        max_new_tokens=16,
        draft_steps=4,
        probe_ids=4096,
        top_k=32,
    ),
}
FULL_SIZE = {"e2b": E2B_TEXT, "e4b": E4B_TEXT}

# ---------------------------------------------------------------------------------------------
# Weight rule. Tensor `name`, element i (row-major): z = splitmix64(fnv1a64(name) + (i + 1) * GAMMA).
#   matrices and embeddings ("weight"):   2 * (z >> 56) - 255, times 2^-13  (256 odd levels in ±2^-5,
#                                         mean exactly 0: a biased rule drives every position's
#                                         hidden to one direction and the greedy text to one token)
#   embedding tables ("embedding"):       2 * (z >> 56) - 255, times 2^-15  (a quarter of the above:
#                                         at full width a token's own scaled embedding otherwise
#                                         outweighs 4 layers, and every position predicts its input)
#   norm weights and layer scalars ("scale"): 1 + ((z >> 60) - 8) * 2^-5  (16 levels in [0.75, 1.22])
#   token_ordering ("permutation"):       the indices sorted by z (ascending; z never ties)
# Every value is exact in bf16, f16 and f32.
# ---------------------------------------------------------------------------------------------
GAMMA = np.uint64(0x9E3779B97F4A7C15)
MIX1, MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
CHUNK = 1 << 24


def fnv1a64(text: str) -> int:
    h = 0xCBF29CE484222325
    for byte in text.encode():
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def stream(name: str, start: int, stop: int) -> np.ndarray:
    with np.errstate(over="ignore"):
        i = np.arange(start + 1, stop + 1, dtype=np.uint64)
        z = np.uint64(fnv1a64(name)) + i * GAMMA
        z = (z ^ (z >> np.uint64(30))) * MIX1
        z = (z ^ (z >> np.uint64(27))) * MIX2
        return z ^ (z >> np.uint64(31))


def rule_of(name: str) -> str:
    if name.endswith("token_ordering"):
        return "permutation"
    if name.endswith("norm.weight") or name.endswith("layer_scalar"):
        return "scale"
    if "embed_tokens" in name:
        return "embedding"
    return "weight"


def rule_chunk(name: str, start: int, stop: int) -> np.ndarray:
    """Elements start..stop of a float tensor by the rule."""
    z = stream(name, start, stop)
    if rule_of(name) == "scale":
        return 1.0 + ((z >> np.uint64(60)).astype(np.int32) - 8).astype(np.float32) * 2.0**-5
    step = 2.0**-13 if rule_of(name) == "weight" else 2.0**-15
    return (2 * (z >> np.uint64(56)).astype(np.int32) - 255).astype(np.float32) * step


def rule_values(name: str, numel: int) -> np.ndarray:
    if rule_of(name) == "permutation":
        keys = stream(name, 0, numel)
        assert len(np.unique(keys)) == numel, f"{name}: tied keys"
        return np.argsort(keys, kind="stable").astype(np.int64)
    out = np.empty(numel, dtype=np.float32)
    for start in range(0, numel, CHUNK):
        stop = min(numel, start + CHUNK)
        out[start:stop] = rule_chunk(name, start, stop)
    return out


def fill_by_rule(model: torch.nn.Module) -> list[str]:
    """Overwrite every parameter and persistent buffer by the rule; returns the names filled. A
    tied tensor (`lm_head.weight` is `model.embed_tokens.weight`) keeps its first name's values, the
    name save_pretrained writes."""
    filled, seen = [], set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if tensor.data_ptr() in seen:
            continue
        seen.add(tensor.data_ptr())
        if rule_of(name) == "permutation":
            tensor.data.copy_(torch.from_numpy(rule_values(name, tensor.numel())).view(tensor.shape))
        else:  # chunk by chunk: a full-size table is gigabytes
            flat = tensor.data.view(-1)
            for start in range(0, flat.numel(), CHUNK):
                stop = min(flat.numel(), start + CHUNK)
                flat[start:stop].copy_(torch.from_numpy(rule_chunk(name, start, stop)))
        filled.append(name)
    return filled


# ---------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------
def assistant_config(target_text: dict) -> Gemma4AssistantConfig:
    kw = {k: target_text[k] for k in SHARED_GEOMETRY}
    kw.update(ASSISTANT_TEXT)
    kw.update(hidden_size_per_layer_input=0, vocab_size_per_layer_input=0, use_double_wide_mlp=False,
              enable_moe_block=False, num_kv_shared_layers=ASSISTANT_TEXT["num_hidden_layers"],
              tie_word_embeddings=True, pad_token_id=mf.PAD_ID, eos_token_id=mf.EOS_ID, bos_token_id=mf.BOS_ID)
    return Gemma4AssistantConfig(text_config=Gemma4TextConfig(**kw),
                                 backbone_hidden_size=target_text["hidden_size"], **ASSISTANT_HEAD)


def build_pair(target_text: dict, dtype: torch.dtype):
    torch.set_default_dtype(dtype)
    try:
        target = Gemma4ForCausalLM(Gemma4TextConfig(**target_text)).eval()
        assistant = Gemma4AssistantForCausalLM(assistant_config(target_text)).eval()
    finally:
        torch.set_default_dtype(torch.float32)
    for model in (target, assistant):
        fill_by_rule(model)
        model.generation_config.eos_token_id = None
        model.generation_config.pad_token_id = mf.PAD_ID
    return target, assistant


def save_bf16(model, path: Path) -> None:
    """`save_pretrained` in bfloat16 (exact: every rule value is a bf16 number), config + weights only.
    The live model is left as it is: converting it (`model.to(bf16)` and back) would also round its
    float buffers (RoPE frequencies, embedding scales) and so the reference computed after."""
    path.mkdir(parents=True, exist_ok=True)
    state, seen = {}, set()
    for k, v in model.state_dict().items():
        if v.data_ptr() not in seen:  # a tied alias (lm_head.weight) is not written
            seen.add(v.data_ptr())
            state[k] = v.to(torch.bfloat16) if v.is_floating_point() else v
    model.save_pretrained(str(path), state_dict=state, safe_serialization=True, max_shard_size="50GB")
    # save_pretrained names the live model's dtype; the file holds bf16, as the published ones do.
    config = json.loads((path / "config.json").read_text())
    config["dtype"] = "bfloat16"
    (path / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    for f in sorted(path.iterdir()):
        if f.name not in ("config.json", "model.safetensors"):
            f.unlink()


def manifest_of(dirs: dict[str, Path]) -> list[dict]:
    """Every tensor of the saved files, checked against the rule, with the SHA-256 of its bytes."""
    rows = []
    for role, path in dirs.items():
        file = path / "model.safetensors"
        with safe_open(str(file), framework="pt") as f:
            for name in sorted(f.keys()):
                tensor = f.get_tensor(name)
                want = torch.from_numpy(rule_values(name, tensor.numel())).view(tensor.shape)
                assert torch.equal(tensor.to(want.dtype), want), f"{role}/{name}: not the rule's values"
                data = tensor.contiguous().view(-1).view(torch.uint8).numpy().tobytes()
                rows.append({
                    "file": f"{role}/model.safetensors",
                    "name": name,
                    "dtype": {torch.bfloat16: "BF16", torch.int64: "I64", torch.float32: "F32"}[tensor.dtype],
                    "shape": list(tensor.shape),
                    "rule": rule_of(name),
                    "sha256": hashlib.sha256(data).hexdigest(),
                })
    return rows


# ---------------------------------------------------------------------------------------------
# Reference
# ---------------------------------------------------------------------------------------------
def seeded_ids(seed: int, count: int, vocab: int, low: int = 3) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(low, vocab, (count,), generator=gen, dtype=torch.long)


def compute_case(name: str, case: dict, out_dir: Path) -> dict:
    text = case["target"]
    V, H = text["vocab_size"], text["hidden_size"]
    T, N, S = case["prompt_len"], case["max_new_tokens"], case["draft_steps"]
    started = time.time()
    target, assistant = build_pair(text, torch.float32)
    case_dir = out_dir / name
    if case_dir.exists():
        shutil.rmtree(case_dir)
    dirs = {"target": case_dir / "target", "assistant": case_dir / "assistant"}
    save_bf16(target, dirs["target"])
    save_bf16(assistant, dirs["assistant"])
    manifest = manifest_of(dirs)
    print(f"{name}: built and saved in {time.time() - started:.0f} s", flush=True)

    prompt = torch.cat([torch.tensor([mf.BOS_ID]), seeded_ids(1, T - 1, V)])
    probe = torch.sort(torch.unique(seeded_ids(2, case["probe_ids"] * 2, V, low=0))[: case["probe_ids"]]).values
    def prefill_and_draft(first_token=None):
        with torch.no_grad():
            out = target(input_ids=prompt.unsqueeze(0), use_cache=False, output_hidden_states=True,
                         return_shared_kv_states=True)
            token = out.logits[0, -1].argmax() if first_token is None else first_token
            return out, mf.run_manual_draft(target, assistant, prompt, token, out, S)

    # The reference is HF in float64 (the bf16 weights widened exactly): at this width HF's own f32
    # run drifts from it by up to ~1e-4 along the drafting chain, so an f32 reference would only
    # say "as close as another f32 run". HF's f32 error is recorded beside it, per quantity.
    tout32, draft32 = prefill_and_draft()
    target.double()
    assistant.double()
    tout, draft = prefill_and_draft()
    assert torch.equal(draft32["draft_argmax"], draft["draft_argmax"]), "f32 and f64 drafts differ"

    def rel_err(ours: torch.Tensor, exact: torch.Tensor) -> float:
        ours, exact = ours.double().flatten(0, -2), exact.double().flatten(0, -2)
        return float(((ours - exact).abs().amax(-1) / exact.abs().amax(-1)).max())

    hf_f32_err = {
        "target_logits": rel_err(tout32.logits[0], tout.logits[0]),
        "target_last_hidden": rel_err(tout32.hidden_states[-1][0], tout.hidden_states[-1][0]),
        "draft_logits": rel_err(draft32["draft_logits"], draft["draft_logits"]),
        "draft_hidden": rel_err(draft32["draft_hidden"], draft["draft_hidden"]),
    }
    del tout32, draft32
    logits = tout.logits[0]
    hidden_states = torch.stack([h[0] for h in tout.hidden_states])
    top = torch.topk(logits, case["top_k"], dim=-1)

    gen_kwargs = dict(attention_mask=torch.ones(1, T, dtype=torch.long), do_sample=False, max_new_tokens=N,
                      min_new_tokens=0, eos_token_id=None, pad_token_id=mf.PAD_ID)
    greedy = target.generate(prompt.unsqueeze(0), **gen_kwargs)[0, T:]
    assert int(greedy[0]) == int(logits[-1].argmax())
    # A parity test can only compare argmaxes HF decides by a margin far above f32 rounding.
    with torch.no_grad():
        full = target(input_ids=torch.cat([prompt, greedy[:-1]]).unsqueeze(0), use_cache=False).logits[0, T - 1:]
    top2 = torch.topk(full, 2, dim=-1).values
    margins = (top2[:, 0] - top2[:, 1]) / top2[:, 0].abs()
    assert float(margins.min()) > 1e-4, f"{name}: greedy step decided by {float(margins.min()):.2e}"
    distinct = len(set(greedy.tolist()))
    assert distinct >= 5, f"{name}: greedy continuation too repetitive ({distinct} distinct): {greedy.tolist()}"
    assistant.generation_config.num_assistant_tokens = S
    assistant.generation_config.num_assistant_tokens_schedule = "constant"
    with mf.AssistedRecorder(assistant) as rec:
        assisted = target.generate(prompt.unsqueeze(0), assistant_model=assistant, **gen_kwargs)[0, T:]
    assert torch.equal(assisted, greedy), f"{name}: assisted {assisted.tolist()} != greedy {greedy.tolist()}"
    for i, call in enumerate(rec.calls[:S]):
        assert torch.allclose(call["logits"].view(-1), draft["draft_logits"][i], atol=1e-9, rtol=1e-9), (name, i)

    # The centroid head gives real logits to the tokens of its chosen clusters and one fill value to
    # every other token: store the chosen ones (sorted by id) and the fill, which is the whole row.
    fill = draft["draft_logits"].min(dim=-1).values
    chosen = [torch.nonzero(row != f).view(-1) for row, f in zip(draft["draft_logits"], fill)]
    width = ASSISTANT_HEAD["centroid_intermediate_top_k"] * V // ASSISTANT_HEAD["num_centroids"]
    assert all(len(c) == width for c in chosen), [len(c) for c in chosen]
    chosen_ids = torch.stack(chosen)
    tensors = {
        "prompt_ids": prompt,
        "probe_ids": probe,
        "target_logits_probe": logits[:, probe],
        "target_logits_last": logits[-1],
        "target_top_ids": top.indices,
        "target_top_logits": top.values,
        "target_last_hidden": hidden_states[-1],
        "target_hidden_states": hidden_states,
        "greedy_ids": greedy,
        "draft_token_ids": draft["draft_token_ids"],
        "draft_position": draft["draft_position"],
        "draft_input_hidden": draft["draft_input_hidden"],
        "draft_hidden": draft["draft_hidden"],
        "draft_argmax": draft["draft_argmax"],
        "draft_chosen_ids": chosen_ids,
        "draft_chosen_logits": torch.gather(draft["draft_logits"], 1, chosen_ids),
        "draft_fill": fill,
        "assisted_ids": assisted,
        "num_assistant_tokens": torch.tensor(S),
    }
    tensors = {k: (v.to(torch.int64) if not v.is_floating_point() else v.float()).detach().contiguous().clone()
               for k, v in tensors.items()}
    save_file(tensors, str(case_dir / "reference.safetensors"), metadata={"format": "pt"})
    # Only what the Rust test needs stays: the weights are regenerated from the rule.
    for path in dirs.values():
        (path / "model.safetensors").unlink()
    (case_dir / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    info = {
        "case": name,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__.split("+")[0],
        "stored_dtype": "bfloat16 (every value exact; the reference computed in float64, stored as float32)",
        "attn_implementation": target.config._attn_implementation,
        "target_parameters": sum(p.numel() for p in target.parameters()),
        "assistant_parameters": sum(p.numel() for p in assistant.parameters()),
        "prompt_len": T,
        "max_new_tokens": N,
        "draft_steps": S,
        "greedy_ids": greedy.tolist(),
        "greedy_min_relative_margin": float(margins.min()),
        "reference_dtype": "float64",
        "hf_float32_max_rel_err": hf_f32_err,
        "draft_argmax": draft["draft_argmax"].tolist(),
        "assisted_drafted_per_round": rec.rounds_drafted,
        "assisted_accepted_per_round": rec.rounds_accepted,
        "reference_tensors": {k: {"dtype": str(v.dtype).replace("torch.", ""), "shape": list(v.shape)}
                              for k, v in sorted(tensors.items())},
    }
    (case_dir / "reference.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def weights_only(which: str, out: Path) -> None:
    """A full-size pair in bfloat16 (no reference: an HF forward at this size is not the point)."""
    started = time.time()
    target, assistant = build_pair(FULL_SIZE[which], torch.bfloat16)
    save_bf16(target, out / f"{which}/target")
    save_bf16(assistant, out / f"{which}/assistant")
    print(f"{which}: {sum(p.numel() for p in target.parameters()):,} target parameters, "
          f"{sum(p.numel() for p in assistant.parameters()):,} assistant, {time.time() - started:.0f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="*", default=sorted(CASES), choices=sorted(CASES))
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--weights-only", choices=sorted(FULL_SIZE))
    parser.add_argument("--check", action="store_true",
                        help="regenerate into a temp dir and compare every file's SHA-256 with --out's")
    args = parser.parse_args()
    assert transformers.__version__ == mf.EXPECTED_TRANSFORMERS, transformers.__version__
    mf.setup_determinism()
    torch.set_num_threads(2)
    if args.weights_only:
        weights_only(args.weights_only, args.out)
        return 0
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            for name in args.cases:
                compute_case(name, CASES[name], Path(tmp))
            fresh, committed = mf.hash_tree(Path(tmp)), mf.hash_tree(args.out)
            bad = [f for f in sorted(set(fresh) | set(committed))
                   if f.split("/")[0] in args.cases and fresh.get(f) != committed.get(f)]
            for f in bad:
                print(f"MISMATCH {f}")
            return 1 if bad else 0
    for name in args.cases:
        started = time.time()
        info = compute_case(name, CASES[name], args.out)
        print(f"{name}: greedy {info['greedy_ids']}, {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
