#!/usr/bin/env python3
"""Generate tiny, seeded Gemma 4 target + assistant (MTP drafter) reference fixtures.

Each case writes, under ``<out>/<case>/``:

    target/config.json          Gemma4TextConfig of a tiny random Gemma4ForCausalLM (text only), or for the
                                published-layout cases (`mm_*`, see `layout`) the Gemma4Config of a
                                Gemma4ForConditionalGeneration (text_config + vision/audio towers)
    target/model.safetensors    its weights (f32, save_pretrained); bf16 shards + model.safetensors.index.json
                                for `mm_e2b_bf16_sharded`
    target/tokenizer.json       a WordLevel tokenizer over the fixture vocabulary (see `write_tokenizer`)
    target/tokenizer_config.json  add_bos_token false, special tokens, a Gemma-style chat template
    assistant/config.json       Gemma4AssistantConfig of a tiny random Gemma4AssistantForCausalLM
    assistant/model.safetensors its weights (f32, save_pretrained)
    reference.safetensors       reference tensors (see README.md)
    reference.json              human/machine-readable description of the case

Everything is computed on CPU in float32 with deterministic algorithms, so two runs give
byte-identical files (``--check`` regenerates into a temp dir and compares SHA-256 hashes).

Usage:
    python make_fixtures.py                 # writes <repo>/tests/fixtures/gemma4
    python make_fixtures.py --out /tmp/x    # writes elsewhere
    python make_fixtures.py --check         # regenerate into a temp dir, compare with committed files
    python make_fixtures.py --cases swa_basic
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

# Must be set before torch initialises its BLAS / threading.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import (  # noqa: E402
    Gemma4AssistantConfig,
    Gemma4AssistantForCausalLM,
    Gemma4AudioConfig,
    Gemma4Config,
    Gemma4ForCausalLM,
    Gemma4ForConditionalGeneration,
    Gemma4TextConfig,
    Gemma4VisionConfig,
)
from transformers.generation import candidate_generator as hf_candidate_generator  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO_ROOT / "tests" / "fixtures" / "gemma4"
EXPECTED_TRANSFORMERS = "5.24.0"

# Special ids of the (absent) tokenizer; Gemma4TextConfig defaults.
PAD_ID, EOS_ID, BOS_ID = 0, 1, 2

# The fixture tokenizer (written next to the target's config; the weights never see it).
# Gemma's ids for <pad> <eos> <bos> <unk>, then the chat-turn markers and the two role words.
UNK_ID, START_OF_TURN_ID, END_OF_TURN_ID = 3, 4, 5
SPECIAL_WORDS = {
    PAD_ID: "<pad>",
    EOS_ID: "<eos>",
    BOS_ID: "<bos>",
    UNK_ID: "<unk>",
    START_OF_TURN_ID: "<start_of_turn>",
    END_OF_TURN_ID: "<end_of_turn>",
}
ROLE_WORDS = {6: "user", 7: "model"}
# Given to the first distinct ids (>= 8) of each greedy continuation, so the generated text has
# multi-byte characters (2-, 3- and 4-byte UTF-8).
MULTIBYTE_WORDS = ["é", "日本", "🙂"]
GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
    "<start_of_turn>{{ role }}\n{{ message['content'] | trim }}<end_of_turn>\n"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)

PROPORTIONAL_ROPE = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
    "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0},
}
DEFAULT_ROPE_BOTH = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
    "full_attention": {"rope_type": "default", "rope_theta": 10_000.0},
}

# --------------------------------------------------------------------------------------------
# The case table: the one place that says what each fixture covers.
#
# `target`: Gemma4TextConfig kwargs for the target.
# `assistant_text`: Gemma4TextConfig kwargs for the assistant's inner text model. The attention
#   geometry that touches the target's shared KV (head_dim, global_head_dim, kv heads,
#   attention_k_eq_v, num_global_key_value_heads, rope_parameters, sliding_window) is copied from
#   the target automatically (see `assistant_text_config`), the rest is set here.
# `assistant`: extra Gemma4AssistantConfig kwargs (ordered embeddings / centroids).
# --------------------------------------------------------------------------------------------
# Text models shared by a text-only case and its published-layout twin.
E2B_LIKE_TARGET = dict(
    vocab_size=128,
    hidden_size=48,
    intermediate_size=64,
    num_hidden_layers=4,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=16,
    global_head_dim=32,
    sliding_window=8,
    layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
    rope_parameters=PROPORTIONAL_ROPE,
    hidden_size_per_layer_input=8,
    vocab_size_per_layer_input=128,
    num_kv_shared_layers=2,
    use_double_wide_mlp=True,
    final_logit_softcapping=30.0,
)

K_EQ_V_TARGET = dict(
    vocab_size=96,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    global_head_dim=32,
    num_global_key_value_heads=1,
    attention_k_eq_v=True,
    sliding_window=6,
    layer_types=["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
    rope_parameters=PROPORTIONAL_ROPE,
    hidden_size_per_layer_input=0,
    vocab_size_per_layer_input=0,
    final_logit_softcapping=None,
)

CASES: dict[str, dict] = {
    "swa_basic": {
        "seed": 1001,
        "features": [
            "sliding_window_shorter_than_prompt",
            "default_rope_on_both_layer_types",
            "final_logit_softcapping",
            "assistant_plain_lm_head",
        ],
        "notes": "Baseline: no PLE, no KV sharing, no k_eq_v, full layers use plain (default) RoPE with "
        "the same head_dim as sliding layers.",
        "prompt_len": 20,
        "max_new_tokens": 40,
        "draft_steps": 4,
        "target": dict(
            vocab_size=128,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=3,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=16,
            global_head_dim=16,
            sliding_window=8,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"],
            rope_parameters=DEFAULT_ROPE_BOTH,
            hidden_size_per_layer_input=0,
            vocab_size_per_layer_input=0,
            final_logit_softcapping=30.0,
        ),
        "assistant_text": dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            layer_types=["sliding_attention", "full_attention"],
        ),
        "assistant": dict(use_ordered_embeddings=False),
    },
    "copy_drafter": {
        "seed": 4004,
        "features": [
            "sliding_window_shorter_than_prompt",
            "proportional_partial_rope_on_full_layers",
            "final_logit_softcapping",
            "assistant_plain_lm_head",
            "assistant_constructed_copy_drafter",
            "assisted_rounds_with_accepted_drafts",
        ],
        "notes": "Same kind of target as swa_basic (proportional RoPE on the full layer), but the assistant is "
        "*constructed* to draft 'repeat the token I was fed' (its embedding/lm_head is a copy of the "
        "target's embedding and the token half of pre_projection is 100 * I), so drafts are accepted "
        "whenever the target repeats a token. This exercises rounds with accepted drafts (hidden "
        "taken at n_last_matches, KV cropped to the accepted length). Random assistants accept ~nothing.",
        "prompt_len": 20,
        "max_new_tokens": 48,
        "draft_steps": 4,
        "copy_drafter_scale": 100.0,
        "target": dict(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=3,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=16,
            global_head_dim=16,
            sliding_window=8,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"],
            rope_parameters=PROPORTIONAL_ROPE,
            hidden_size_per_layer_input=0,
            vocab_size_per_layer_input=0,
            final_logit_softcapping=30.0,
        ),
        "assistant_text": dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            layer_types=["sliding_attention", "full_attention"],
        ),
        "assistant": dict(use_ordered_embeddings=False),
    },
    "e2b_like": {
        "seed": 2002,
        "features": [
            "sliding_window_shorter_than_prompt",
            "proportional_partial_rope_on_full_layers",
            "global_head_dim_differs_from_head_dim",
            "per_layer_input_embeddings_ple",
            "kv_shared_layers",
            "double_wide_mlp_on_kv_shared_layers",
            "final_logit_softcapping",
            "assistant_ordered_embeddings_centroids",
            "assistant_hidden_differs_from_target_hidden",
        ],
        "notes": "Shaped like gemma-4-E2B: PLE, the last 2 of 4 layers reuse KV of the last non-shared layer "
        "of the same type, those 2 layers have a double-wide MLP, full layers have head_dim 32 with "
        "proportional RoPE (partial_rotary_factor 0.25). The assistant uses ordered embeddings "
        "(8 centroids, top-2 -> 32 of 128 vocab entries get real logits).",
        "prompt_len": 21,
        "max_new_tokens": 40,
        "draft_steps": 4,
        "target": E2B_LIKE_TARGET,
        "assistant_text": dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            layer_types=["sliding_attention", "full_attention"],
        ),
        "assistant": dict(use_ordered_embeddings=True, num_centroids=8, centroid_intermediate_top_k=2),
    },
    "k_eq_v": {
        "seed": 3003,
        "features": [
            "sliding_window_shorter_than_prompt",
            "proportional_partial_rope_on_full_layers",
            "global_head_dim_differs_from_head_dim",
            "attention_k_eq_v",
            "num_global_key_value_heads",
            "no_final_logit_softcapping",
            "assistant_plain_lm_head",
            "assistant_three_layers",
        ],
        "notes": "Shaped like the big Gemma 4 models: full layers have no v_proj (V = v_norm(raw k_proj output)), "
        "1 global KV head vs 2 sliding KV heads, 4 query heads, global_head_dim 32. No softcapping "
        "(final_logit_softcapping = null) to cover the branch.",
        "prompt_len": 19,
        "max_new_tokens": 40,
        "draft_steps": 4,
        "target": K_EQ_V_TARGET,
        "assistant_text": dict(
            hidden_size=32,
            intermediate_size=48,
            num_hidden_layers=3,
            num_attention_heads=4,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        ),
        "assistant": dict(use_ordered_embeddings=False),
    },

    # ---- The layouts Google publishes: Gemma4ForConditionalGeneration (model_type "gemma4") with the
    # text model under model.language_model.* and the towers in the same files. `layout` says how the
    # target is built and written (see `build_target` / `save_target`).
    "mm_e2b": {
        "seed": 5005,
        "layout": {"multimodal": True, "vision": True, "audio": True, "published_shared_kv": True},
        "features": [
            "multimodal_wrapper_gemma4",
            "vision_and_audio_towers_present",
            "kv_shared_layer_projections_present_in_files",
            "per_layer_input_embeddings_ple",
            "kv_shared_layers",
            "double_wide_mlp_on_kv_shared_layers",
            "assistant_ordered_embeddings_centroids",
        ],
        "notes": "Laid out like google/gemma-4-E2B-it: a Gemma4ForConditionalGeneration (text model as in e2b_like, "
        "tiny vision and audio towers with their embedders) written by save_pretrained; then, as in the published "
        "files, k_proj/v_proj/k_norm tensors for the KV-shared layers are added (HF ignores them on load: the "
        "script reloads the directory with from_pretrained and checks the logits are unchanged).",
        "prompt_len": 21,
        "max_new_tokens": 40,
        "draft_steps": 4,
        "target": E2B_LIKE_TARGET,
        "assistant_text": dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            layer_types=["sliding_attention", "full_attention"],
        ),
        "assistant": dict(use_ordered_embeddings=True, num_centroids=8, centroid_intermediate_top_k=2),
    },
    "mm_31b_dense": {
        "seed": 6006,
        "layout": {"multimodal": True, "vision": True, "audio": False},
        "features": [
            "multimodal_wrapper_gemma4",
            "vision_tower_present",
            "attention_k_eq_v",
            "num_global_key_value_heads",
            "use_bidirectional_attention_vision",
        ],
        "notes": "Laid out like google/gemma-4-31B-it: Gemma4ForConditionalGeneration with a vision tower only, a dense "
        "text model whose full layers use their keys as values (attention_k_eq_v, 1 global KV head).",
        "prompt_len": 19,
        "max_new_tokens": 40,
        "draft_steps": 4,
        "target": {**K_EQ_V_TARGET, "use_bidirectional_attention": "vision", "final_logit_softcapping": 30.0},
        "assistant_text": dict(
            hidden_size=32,
            intermediate_size=48,
            num_hidden_layers=2,
            num_attention_heads=4,
            layer_types=["sliding_attention", "full_attention"],
        ),
        "assistant": dict(use_ordered_embeddings=False),
    },
    "mm_26b_moe": {
        "seed": 7007,
        "layout": {"multimodal": True, "vision": True, "audio": False, "decisive_router": True},
        "features": [
            "multimodal_wrapper_gemma4",
            "vision_tower_present",
            "enable_moe_block",
            "router_top_k_experts",
            "dense_mlp_beside_experts",
            "attention_k_eq_v",
        ],
        "notes": "Laid out like google/gemma-4-26B-A4B-it: every layer has the dense MLP and, beside it, a router "
        "choosing the top 2 of 8 experts (moe_intermediate_size 16). The router projection is scaled up (x 40) and "
        "its scales perturbed so that routing is decisive (default init routes almost uniformly, where float "
        "rounding alone could flip an expert).",
        "prompt_len": 19,
        "max_new_tokens": 40,
        "draft_steps": 4,
        "target": dict(
            vocab_size=96,
            hidden_size=32,
            intermediate_size=48,
            num_hidden_layers=3,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=16,
            global_head_dim=32,
            num_global_key_value_heads=1,
            attention_k_eq_v=True,
            sliding_window=6,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"],
            rope_parameters=PROPORTIONAL_ROPE,
            hidden_size_per_layer_input=0,
            vocab_size_per_layer_input=0,
            enable_moe_block=True,
            num_experts=8,
            top_k_experts=2,
            moe_intermediate_size=16,
            final_logit_softcapping=30.0,
        ),
        "assistant_text": dict(
            hidden_size=32,
            intermediate_size=48,
            num_hidden_layers=2,
            num_attention_heads=2,
            layer_types=["sliding_attention", "full_attention"],
        ),
        "assistant": dict(use_ordered_embeddings=False),
    },
    "mm_e2b_bf16_sharded": {
        "seed": 8008,
        "layout": {"multimodal": True, "vision": True, "audio": True, "bf16": True, "max_shard_size": "100KB"},
        "features": [
            "multimodal_wrapper_gemma4",
            "bf16_weights",
            "sharded_safetensors_index",
            "per_layer_input_embeddings_ple",
            "kv_shared_layers",
        ],
        "notes": "The mm_e2b shape stored as published: bf16 weights, sharded by save_pretrained into several files "
        "with model.safetensors.index.json. The reference is computed in float32 from the bf16-rounded weights "
        "(bf16 -> f32 is exact), so an f32 implementation reading these files must match it to f32 precision.",
        "prompt_len": 21,
        "max_new_tokens": 40,
        "draft_steps": 4,
        "target": E2B_LIKE_TARGET,
        "assistant_text": dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            layer_types=["sliding_attention", "full_attention"],
        ),
        "assistant": dict(use_ordered_embeddings=True, num_centroids=8, centroid_intermediate_top_k=2),
    },
}

# Attention geometry the assistant must share with the target (it attends to the target's KV).
SHARED_GEOMETRY_KEYS = (
    "head_dim",
    "global_head_dim",
    "num_key_value_heads",
    "num_global_key_value_heads",
    "attention_k_eq_v",
    "rope_parameters",
    "sliding_window",
    "vocab_size",
    "final_logit_softcapping",
)


# --------------------------------------------------------------------------------------------
# Model construction
# --------------------------------------------------------------------------------------------
def common_text_kwargs() -> dict:
    return dict(
        max_position_embeddings=256,
        pad_token_id=PAD_ID,
        eos_token_id=EOS_ID,
        bos_token_id=BOS_ID,
        tie_word_embeddings=True,
    )


def target_config(case: dict) -> Gemma4TextConfig:
    return Gemma4TextConfig(**common_text_kwargs(), **case["target"])


def assistant_config(case: dict) -> Gemma4AssistantConfig:
    kw = {k: case["target"][k] for k in SHARED_GEOMETRY_KEYS if k in case["target"]}
    kw.update(case["assistant_text"])
    kw.update(
        hidden_size_per_layer_input=0,
        vocab_size_per_layer_input=0,
        use_double_wide_mlp=False,
        enable_moe_block=False,
        num_kv_shared_layers=case["assistant_text"]["num_hidden_layers"],
    )
    text = Gemma4TextConfig(**common_text_kwargs(), **kw)
    return Gemma4AssistantConfig(
        text_config=text,
        backbone_hidden_size=case["target"]["hidden_size"],
        **case["assistant"],
    )


def perturb_scales(model: torch.nn.Module, gen: torch.Generator) -> None:
    """Default init sets every RMSNorm weight and every `layer_scalar` to exactly 1.0, which would
    let an implementation that forgets a norm scale (or uses (1 + w)) pass. Multiply them by
    1 + 0.1 * N(0, 1) (layer_scalar by 1 + 0.1 * U(-1, 1)). Small enough to keep outputs varied."""
    for name, tensor in sorted(model.state_dict(keep_vars=True).items()):
        if name.endswith("norm.weight"):
            noise = torch.randn(tensor.shape, generator=gen, dtype=torch.float32)
            tensor.data.mul_(1.0 + 0.1 * noise)
        elif name.endswith("layer_scalar"):
            noise = torch.rand(tensor.shape, generator=gen, dtype=torch.float32) * 2.0 - 1.0
            tensor.data.mul_(1.0 + 0.1 * noise)


# Tiny towers: present in the files (as in the published checkpoints), never used by a text prompt.
TINY_VISION = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                   num_key_value_heads=2, head_dim=8, position_embedding_size=64, patch_size=4,
                   pooling_kernel_size=2)
TINY_AUDIO = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, subsampling_conv_channels=[4, 4],
                  output_proj_dims=16)
# Multimodal placeholder ids beyond the vocabulary: a text prompt (or a generated token) never matches them, so
# the wrapper's forward is exactly the text model's.
MULTIMODAL_TOKEN_IDS = dict(image_token_id=1000, boi_token_id=1001, eoi_token_id=1002, video_token_id=1003,
                            boa_token_id=1004, eoa_token_index=1005, audio_token_id=1006)


def multimodal_config(case: dict) -> Gemma4Config:
    layout = case["layout"]
    return Gemma4Config(
        text_config=target_config(case),
        vision_config=Gemma4VisionConfig(**TINY_VISION) if layout.get("vision") else None,
        audio_config=Gemma4AudioConfig(**TINY_AUDIO) if layout.get("audio") else None,
        **MULTIMODAL_TOKEN_IDS,
    )


def text_config_of(model) -> Gemma4TextConfig:
    return model.config.get_text_config()


def build_target(case: dict):
    if case.get("layout", {}).get("multimodal"):
        return Gemma4ForConditionalGeneration(multimodal_config(case)).float().eval()
    return Gemma4ForCausalLM(target_config(case)).float().eval()


def make_router_decisive(model: torch.nn.Module, gen: torch.Generator) -> None:
    """Scale every router projection by 40 and perturb the router's `scale` and `per_expert_scale` (default
    init: ones) by 1 + 0.1 * N(0, 1), so that routing is decisive and every scale is exercised."""
    for name, tensor in sorted(model.state_dict(keep_vars=True).items()):
        if name.endswith("router.proj.weight"):
            tensor.data.mul_(40.0)
        elif name.endswith("router.scale") or name.endswith("router.per_expert_scale"):
            noise = torch.randn(tensor.shape, generator=gen, dtype=torch.float32)
            tensor.data.mul_(1.0 + 0.1 * noise)


def build_models(case: dict):
    torch.manual_seed(case["seed"])
    target = build_target(case)
    assistant = Gemma4AssistantForCausalLM(assistant_config(case)).float().eval()

    gen = torch.Generator().manual_seed(case["seed"] + 17)
    perturb_scales(target, gen)
    perturb_scales(assistant, gen)
    layout = case.get("layout", {})
    if layout.get("decisive_router"):
        make_router_decisive(target, gen)
    if layout.get("bf16"):
        # The weights as they will be stored: the reference is computed from exactly these values.
        for tensor in target.state_dict(keep_vars=True).values():
            if tensor.dtype == torch.float32:
                tensor.data.copy_(tensor.data.to(torch.bfloat16).to(torch.float32))
    if assistant.config.use_ordered_embeddings:
        # Default init leaves `token_ordering` all zeros (every centroid maps to token 0), which makes
        # the drafter emit token 0 forever. Real checkpoints ship a permutation of the vocab.
        vocab = assistant.config.get_text_config().vocab_size
        perm = torch.randperm(vocab, generator=gen)
        assistant.masked_embedding.token_ordering.data.copy_(perm)

    if "copy_drafter_scale" in case:
        make_copy_drafter(target, assistant, case["copy_drafter_scale"])

    # Never stop early: greedy and assisted runs always produce exactly N new tokens.
    for m in (target, assistant):
        m.generation_config.eos_token_id = None
        m.generation_config.pad_token_id = PAD_ID
    assistant.generation_config.num_assistant_tokens = case["draft_steps"]
    assistant.generation_config.num_assistant_tokens_schedule = "constant"
    return target, assistant


def make_copy_drafter(target, assistant, scale: float) -> None:
    """Turn the assistant into a 'copy the fed token' drafter: its tied embedding/lm_head becomes the
    target's embedding table and the token half of pre_projection becomes scale * I, so the residual
    stream is dominated by the fed token's embedding and argmax(logits) is (almost always) that token.
    The hidden half of pre_projection keeps its default init (small but non-zero)."""
    h = target.config.hidden_size
    assert assistant.config.get_text_config().hidden_size == h
    assistant.model.embed_tokens.weight.data.copy_(target.model.embed_tokens.weight.data)
    assert assistant.lm_head.weight.data_ptr() == assistant.model.embed_tokens.weight.data_ptr()
    assistant.pre_projection.weight.data[:, :h] = scale * torch.eye(h)


def make_prompt(case: dict) -> torch.Tensor:
    gen = torch.Generator().manual_seed(case["seed"] + 31)
    vocab = case["target"]["vocab_size"]
    body = torch.randint(3, vocab, (case["prompt_len"] - 1,), generator=gen, dtype=torch.long)
    return torch.cat([torch.tensor([BOS_ID], dtype=torch.long), body])


# --------------------------------------------------------------------------------------------
# Instrumentation of HF's assisted generation (to record what actually happens)
# --------------------------------------------------------------------------------------------
class AssistedRecorder:
    """Wraps the assistant forward and the candidate generator's per-round bookkeeping."""

    def __init__(self, assistant):
        self.assistant = assistant
        self.calls: list[dict] = []
        self.rounds_accepted: list[int] = []
        self.rounds_drafted: list[int] = []
        self.rounds_drafts: list[list[int]] = []

    def __enter__(self):
        recorder = self
        orig_forward = self.assistant.forward

        def forward(*args, **kwargs):
            out = orig_forward(*args, **kwargs)
            recorder.calls.append(
                {
                    "inputs_embeds": kwargs["inputs_embeds"].detach().clone(),
                    "position_ids": kwargs["position_ids"].detach().clone(),
                    "attention_mask": None
                    if kwargs.get("attention_mask") is None
                    else kwargs["attention_mask"].detach().clone(),
                    "shared_kv_states": {
                        k: (v[0].detach().clone(), v[1].detach().clone())
                        for k, v in kwargs["shared_kv_states"].items()
                    },
                    "logits": out.logits.detach().clone(),
                    "last_hidden_state": out.last_hidden_state.detach().clone(),
                }
            )
            return out

        self.assistant.forward = forward
        cls = hf_candidate_generator.SinglePositionMultiTokenCandidateGenerator
        self._cls = cls
        self._orig_update = cls.update_candidate_strategy
        self._orig_get = cls.get_candidates

        def update_candidate_strategy(gen_self, input_ids, scores, num_matches):
            recorder.rounds_accepted.append(int(num_matches))
            return recorder._orig_update(gen_self, input_ids, scores, num_matches)

        def get_candidates(gen_self, input_ids, *args, **kwargs):
            cand, logits = recorder._orig_get(gen_self, input_ids, *args, **kwargs)
            recorder.rounds_drafted.append(int(cand.shape[1] - input_ids.shape[1]))
            recorder.rounds_drafts.append(cand[0, input_ids.shape[1]:].tolist())
            return cand, logits

        cls.update_candidate_strategy = update_candidate_strategy
        cls.get_candidates = get_candidates
        return self

    def __exit__(self, *exc):
        del self.assistant.forward  # restore the bound class method
        self._cls.update_candidate_strategy = self._orig_update
        self._cls.get_candidates = self._orig_get
        return False


# --------------------------------------------------------------------------------------------
# Reference computation
# --------------------------------------------------------------------------------------------
def distinct(ids: torch.Tensor) -> int:
    return len(set(ids.tolist()))


def run_manual_draft(target, assistant, prompt, first_token, target_out, steps):
    """Re-implements SinglePositionMultiTokenCandidateGenerator.get_candidates for the first round
    after prefill, without generate(): input_ids = prompt + [first_token]."""
    T = prompt.shape[0]
    input_ids = torch.cat([prompt, first_token.view(1)]).unsqueeze(0)  # [1, T+1]
    attention_mask = torch.ones_like(input_ids)
    shared = {k: (v[0][:, :, : input_ids.shape[1]], v[1][:, :, : input_ids.shape[1]])
              for k, v in target_out.shared_kv_states.items()}
    hidden = target_out.hidden_states[-1][:, -1:]  # position T-1
    token = input_ids[:, -1:]
    position_ids = torch.tensor([[input_ids.shape[1] - 1]], dtype=torch.long)  # == T
    assert int(position_ids) == T
    embed = target.get_input_embeddings()
    toks, logits, hiddens, in_hiddens = [], [], [], []
    for _ in range(steps):
        inputs_embeds = torch.cat([embed(token), hidden], dim=-1)
        out = assistant(
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            position_ids=position_ids,
            shared_kv_states=shared,
            use_cache=False,
        )
        toks.append(token.view(()))
        in_hiddens.append(hidden.view(-1))
        logits.append(out.logits.view(-1))
        hiddens.append(out.last_hidden_state.view(-1))
        token = out.logits.argmax(dim=-1)
        hidden = out.last_hidden_state
    return {
        "draft_token_ids": torch.stack(toks),
        "draft_input_hidden": torch.stack(in_hiddens),
        "draft_logits": torch.stack(logits),
        "draft_hidden": torch.stack(hiddens),
        "draft_argmax": torch.stack(logits).argmax(dim=-1),
        "draft_position": position_ids.view(()).clone(),
        "shared_kv": shared,
    }


TRACE_COLUMNS = ["round", "step", "position_id", "kv_len_sliding", "kv_len_full", "fed_token", "argmax"]


def trace_assistant_calls(target, rec: AssistedRecorder, h: int) -> torch.Tensor:
    """One row per assistant forward during assisted generate(), columns TRACE_COLUMNS. `round` indexes
    `assisted_accepted` / `assisted_drafted` (round 0 is the prefill round, which drafts nothing)."""
    table = target.get_input_embeddings()(torch.arange(text_config_of(target).vocab_size))  # scaled embeddings
    rows, i = [], 0
    for rnd, n in enumerate(rec.rounds_drafted):
        for step in range(n):
            c = rec.calls[i]
            i += 1
            fed = torch.nonzero((table == c["inputs_embeds"][0, 0, :h]).all(dim=-1)).view(-1)
            assert fed.numel() == 1
            kv = {k: int(v[0].shape[2]) for k, v in c["shared_kv_states"].items()}
            rows.append([rnd, step, int(c["position_ids"]), kv["sliding_attention"], kv["full_attention"],
                         int(fed[0]), int(c["logits"].argmax(-1))])
    assert i == len(rec.calls)
    return torch.tensor(rows, dtype=torch.int64)


def probe_attended(assistant, call: dict, shared_kv) -> dict:
    """Kv indices each assistant layer type may attend to (from the masks HF builds), per layer type."""
    masks = assistant.create_attention_masks(
        assistant.pre_projection(call["inputs_embeds"]), call["attention_mask"], shared_kv
    )
    kv_len = {k: v[0].shape[2] for k, v in shared_kv.items()}
    attended = {}
    for k, m in sorted(masks.items()):
        if m is None:
            allowed = torch.ones(kv_len[k], dtype=torch.bool)
        else:
            allowed = m.reshape(-1) if m.dtype == torch.bool else (m.reshape(-1) == 0)
        attended[k] = [int(i) for i in torch.nonzero(allowed).view(-1)]
    return attended


@torch.no_grad()
def compute_case(name: str, case: dict, out_dir: Path) -> dict:
    target, assistant = build_models(case)
    prompt = make_prompt(case)
    T, N, S = prompt.shape[0], case["max_new_tokens"], case["draft_steps"]
    V, H = case["target"]["vocab_size"], case["target"]["hidden_size"]
    assert T > case["target"]["sliding_window"], "prompt must be longer than the sliding window"

    # 1. One forward over the prompt, no cache.
    tout = target(
        input_ids=prompt.unsqueeze(0),
        use_cache=False,
        output_hidden_states=True,
        return_shared_kv_states=True,
    )
    target_logits = tout.logits[0].float()
    hidden_states = torch.stack([h[0] for h in tout.hidden_states])  # [L+1, T, H]
    target_last_hidden = hidden_states[-1]
    # hidden_states[-1] is the *final-normed* output (== model.model(...).last_hidden_state).
    text_model = target.model.language_model if case.get("layout", {}).get("multimodal") else target.model
    base = text_model(input_ids=prompt.unsqueeze(0), use_cache=False)
    assert torch.equal(base.last_hidden_state[0], target_last_hidden), "hidden_states[-1] != normed output"

    # 2. Plain greedy.
    gen_kwargs = dict(attention_mask=torch.ones(1, T, dtype=torch.long), do_sample=False, max_new_tokens=N, min_new_tokens=0, eos_token_id=None, pad_token_id=PAD_ID)
    greedy = target.generate(prompt.unsqueeze(0), **gen_kwargs)[0, T:]
    assert greedy.shape[0] == N
    assert int(greedy[0]) == int(target_logits[-1].argmax()), "first greedy token != argmax of prefill logits"
    n_distinct = distinct(greedy)
    assert n_distinct >= 5, f"{name}: greedy continuation too repetitive ({n_distinct} distinct): {greedy.tolist()}"

    # 3. Assisted greedy, instrumented.
    with AssistedRecorder(assistant) as rec:
        assisted = target.generate(prompt.unsqueeze(0), assistant_model=assistant, **gen_kwargs)[0, T:]
    assert torch.equal(assisted, greedy), f"{name}: assisted {assisted.tolist()} != greedy {greedy.tolist()}"
    # First get_candidates call is the prefill trick (returns no drafts) and is not followed by a
    # separate update; rounds_drafted[0] == 0 belongs to the prefill round.
    assert rec.rounds_drafted[0] == 0
    drafted = rec.rounds_drafted
    accepted = rec.rounds_accepted
    assert len(drafted) == len(accepted)
    assert sum(a + 1 for a in accepted) == N  # every round adds its accepted drafts + 1 target token

    call_trace = trace_assistant_calls(target, rec, H)

    # 4. First drafting round, re-run by hand, compared with what generate() actually did.
    draft = run_manual_draft(target, assistant, prompt, greedy[0], tout, S)
    hf_calls = rec.calls[:S]
    for i, call in enumerate(hf_calls):
        assert int(call["position_ids"]) == T
        assert torch.allclose(call["inputs_embeds"][0, 0, H:], draft["draft_input_hidden"][i], atol=1e-5, rtol=1e-5)
        assert torch.allclose(call["logits"].view(-1), draft["draft_logits"][i], atol=1e-5, rtol=1e-5), (name, i)
        assert torch.allclose(call["last_hidden_state"].view(-1), draft["draft_hidden"][i], atol=1e-5, rtol=1e-5)
        for k, (kk, vv) in call["shared_kv_states"].items():
            ref_k, ref_v = draft["shared_kv"][k]
            assert kk.shape == ref_k.shape, (name, k, kk.shape, ref_k.shape)
            assert torch.allclose(kk, ref_k, atol=1e-5, rtol=1e-5) and torch.allclose(vv, ref_v, atol=1e-5, rtol=1e-5)
    hf_draft_tokens = torch.stack([c["logits"].argmax(-1).view(()) for c in hf_calls])
    assert torch.equal(hf_draft_tokens, draft["draft_argmax"])
    assert rec.rounds_drafts[1] == draft["draft_argmax"].tolist()
    first_round_kv_len = {k: int(v[0].shape[2]) for k, v in hf_calls[0]["shared_kv_states"].items()}
    first_round_mask_len = None if hf_calls[0]["attention_mask"] is None else int(hf_calls[0]["attention_mask"].shape[-1])

    # Which kv positions each assistant layer type actually attends to in round 1 (probe the mask).
    attended = probe_attended(assistant, hf_calls[0], draft["shared_kv"])
    # The same with no 2D mask at all (generate() without attention_mask): must not change anything.
    assert attended == probe_attended(assistant, dict(hf_calls[0], attention_mask=None), draft["shared_kv"])

    tensors = {
        "prompt_ids": prompt.to(torch.int64),
        "target_logits": target_logits.contiguous(),
        "target_last_hidden": target_last_hidden.contiguous(),
        "target_hidden_states": hidden_states.contiguous(),
        "greedy_ids": greedy.to(torch.int64).contiguous(),
        "draft_token_ids": draft["draft_token_ids"].to(torch.int64).contiguous(),
        "draft_position": draft["draft_position"].to(torch.int64),
        "draft_input_hidden": draft["draft_input_hidden"].contiguous(),
        "draft_logits": draft["draft_logits"].contiguous(),
        "draft_hidden": draft["draft_hidden"].contiguous(),
        "draft_argmax": draft["draft_argmax"].to(torch.int64).contiguous(),
        "assisted_ids": assisted.to(torch.int64).contiguous(),
        "assisted_drafted": torch.tensor(drafted, dtype=torch.int64),
        "assisted_accepted": torch.tensor(accepted, dtype=torch.int64),
        "assisted_round_drafts": torch.tensor(
            [d + [-1] * (S - len(d)) for d in rec.rounds_drafts], dtype=torch.int64
        ),
        "assisted_call_trace": call_trace,
        "num_assistant_tokens": torch.tensor(S, dtype=torch.int64),
    }
    for layer_type, (k, v) in sorted(draft["shared_kv"].items()):
        short = "sliding" if layer_type == "sliding_attention" else "full"
        tensors[f"shared_k_{short}"] = k[0]
        tensors[f"shared_v_{short}"] = v[0]
    tensors = {k: v.detach().clone().contiguous() for k, v in tensors.items()}

    # 5. Write everything.
    case_dir = out_dir / name
    if case_dir.exists():
        shutil.rmtree(case_dir)
    save_target(target, case, case_dir / "target", prompt, target_logits)
    save_model(assistant, case_dir / "assistant")
    prompt_text = write_tokenizer(case_dir / "target", V, prompt.tolist(), greedy.tolist())
    save_file(tensors, str(case_dir / "reference.safetensors"), metadata={"format": "pt"})
    # (a single metadata key on purpose: safetensors writes a multi-key metadata map in random order)

    tcfg = text_config_of(target)
    acfg = assistant.config.get_text_config()
    info = {
        "case": name,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__.split("+")[0],
        "seed": case["seed"],
        "dtype": "bfloat16 (reference computed in float32)" if case.get("layout", {}).get("bf16") else "float32",
        "attn_implementation": tcfg._attn_implementation,
        "features": case["features"],
        "notes": case["notes"],
        "prompt_len": T,
        "prompt_text": prompt_text,
        "sliding_window": tcfg.sliding_window,
        "target_layer_types": list(tcfg.layer_types),
        "target_kv_sharing_modes": list(tcfg.kv_sharing_modes),
        "target_head_dims": [tcfg.per_layer_config[i].head_dim for i in range(tcfg.num_hidden_layers)],
        "target_num_kv_heads": [tcfg.per_layer_config[i].num_key_value_heads for i in range(tcfg.num_hidden_layers)],
        "assistant_layer_types": list(acfg.layer_types),
        "assistant_use_ordered_embeddings": bool(assistant.config.use_ordered_embeddings),
        "vocab_size": V,
        "target_hidden_size": H,
        "assistant_hidden_size": acfg.hidden_size,
        "max_new_tokens": N,
        "draft_steps": S,
        "num_assistant_tokens": S,
        "num_assistant_tokens_schedule": "constant",
        "draft_position": T,
        "draft_round1_shared_kv_len": first_round_kv_len,
        "draft_round1_attention_mask_len": first_round_mask_len,
        "draft_round1_attended_kv_indices": attended,
        "greedy_distinct_tokens": n_distinct,
        "greedy_ids": greedy.tolist(),
        "draft_token_ids": tensors["draft_token_ids"].tolist(),
        "draft_argmax": tensors["draft_argmax"].tolist(),
        "assisted_drafted_per_round": drafted,
        "assisted_accepted_per_round": accepted,
        "assisted_call_trace_columns": TRACE_COLUMNS,
        "reference_tensors": {k: {"dtype": str(v.dtype).replace("torch.", ""), "shape": list(v.shape)}
                              for k, v in sorted(tensors.items())},
    }
    if "layout" in case:  # (only for the published-layout cases: the older files stay byte-identical)
        info["layout"] = case["layout"]
        info["target_architecture"] = type(target).__name__
    (case_dir / "reference.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def fixture_vocab(vocab_size: int, greedy_ids: list[int]) -> list[str]:
    """The word of every id: Gemma's special tokens at Gemma's ids, the chat roles, multi-byte words
    for the first distinct ids (>= 8) of the greedy continuation, and `w<id>` for the rest."""
    words = [f"w{i}" for i in range(vocab_size)]
    for i, w in {**SPECIAL_WORDS, **ROLE_WORDS}.items():
        words[i] = w
    firsts = [i for i in dict.fromkeys(greedy_ids) if i >= 8][: len(MULTIBYTE_WORDS)]
    assert len(firsts) == len(MULTIBYTE_WORDS), f"greedy continuation too short for {MULTIBYTE_WORDS}"
    for i, w in zip(firsts, MULTIBYTE_WORDS):
        words[i] = w
    assert len(set(words)) == vocab_size
    return words


def write_tokenizer(path: Path, vocab_size: int, prompt_ids: list[int], greedy_ids: list[int]) -> str:
    """Write `tokenizer.json` (WordLevel over the fixture vocabulary, split on whitespace, no decoder:
    decoding joins words with one space) and `tokenizer_config.json` (add_bos_token false, so the
    returned prompt text, which starts with the literal `<bos>`, encodes to exactly `prompt_ids`).
    Returns the prompt text. The weights are not touched: the tokenizer only names the ids."""
    words = fixture_vocab(vocab_size, greedy_ids)
    added = [
        {"id": i, "content": w, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
        for i, w in sorted(SPECIAL_WORDS.items())
    ]
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": {w: i for i, w in enumerate(words)}, "unk_token": "<unk>"},
    }
    config = {
        "add_bos_token": False,
        "add_eos_token": False,
        "bos_token": SPECIAL_WORDS[BOS_ID],
        "eos_token": SPECIAL_WORDS[EOS_ID],
        "pad_token": SPECIAL_WORDS[PAD_ID],
        "unk_token": SPECIAL_WORDS[UNK_ID],
        "chat_template": GEMMA_CHAT_TEMPLATE,
        "model_max_length": 256,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    tokenizer_text = json.dumps(tokenizer, indent=2, ensure_ascii=False) + "\n"
    (path / "tokenizer.json").write_text(tokenizer_text, encoding="utf-8")
    (path / "tokenizer_config.json").write_text(
        json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    prompt_text = " ".join(words[i] for i in prompt_ids)
    check_tokenizer(tokenizer_text, prompt_text, prompt_ids, greedy_ids, words)
    return prompt_text


def check_tokenizer(tokenizer_text: str, prompt_text: str, prompt_ids: list[int], greedy_ids: list[int],
                    words: list[str]) -> None:
    """With HF `tokenizers` (a transformers dependency): the prompt text encodes to `prompt_ids` without
    special-token post-processing, and the greedy ids decode to their words joined by spaces."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tokenizer_text)
    got = tok.encode(prompt_text, add_special_tokens=False).ids
    assert got == prompt_ids, f"prompt text encodes to {got}, expected {prompt_ids}"
    special = set(SPECIAL_WORDS)
    want = " ".join(words[i] for i in greedy_ids if i not in special)
    assert tok.decode(greedy_ids, skip_special_tokens=True) == want


def save_model(model, path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(path), safe_serialization=True)
    # Keep only config.json + model.safetensors (generation_config.json is not part of the fixture;
    # the target's tokenizer files are written afterwards by `write_tokenizer`).
    for f in sorted(path.iterdir()):
        if f.name not in ("config.json", "model.safetensors"):
            f.unlink()
    assert (path / "model.safetensors").is_file() and (path / "config.json").is_file()


def kv_shared_layers(model) -> list[int]:
    cfg = text_config_of(model)
    return [i for i, mode in enumerate(cfg.kv_sharing_modes) if mode == "reuse"]


def add_published_shared_kv(path: Path, model, gen: torch.Generator) -> list[str]:
    """Add k_proj / v_proj / k_norm weights for the KV-shared layers to `path`/model.safetensors, as the
    published E2B/E4B files carry them (HF has no such modules and skips the keys on load). Returns the names."""
    from safetensors.torch import load_file

    cfg = text_config_of(model)
    tensors = load_file(str(path / "model.safetensors"))
    added = []
    for i in kv_shared_layers(model):
        hd = cfg.per_layer_config[i].head_dim
        kvh = cfg.per_layer_config[i].num_key_value_heads
        prefix = f"model.language_model.layers.{i}.self_attn"
        for name, shape in (("k_proj", (kvh * hd, cfg.hidden_size)), ("v_proj", (kvh * hd, cfg.hidden_size)),
                            ("k_norm", (hd,))):
            key = f"{prefix}.{name}.weight"
            assert key not in tensors
            tensors[key] = torch.randn(shape, generator=gen, dtype=torch.float32)
            added.append(key)
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    return added


def save_target(target, case: dict, path: Path, prompt: torch.Tensor, want_logits: torch.Tensor) -> None:
    """Write the target in its case's layout, then reload it with HF's from_pretrained and check that HF
    computes the same logits from the files (the files are what HF itself would load)."""
    layout = case.get("layout", {})
    if not layout.get("multimodal"):
        save_model(target, path)
        return
    path.mkdir(parents=True, exist_ok=True)
    # A copy: `Module.to` converts in place, buffers (RoPE tables) included.
    model = copy.deepcopy(target).to(torch.bfloat16) if layout.get("bf16") else target
    kwargs = {"max_shard_size": layout["max_shard_size"]} if "max_shard_size" in layout else {}
    model.save_pretrained(str(path), safe_serialization=True, **kwargs)
    keep = {"config.json", "model.safetensors", "model.safetensors.index.json"}
    for f in sorted(path.iterdir()):
        if f.name not in keep and not f.name.startswith("model-"):
            f.unlink()
    if layout.get("published_shared_kv"):
        add_published_shared_kv(path, target, torch.Generator().manual_seed(case["seed"] + 53))
    if "max_shard_size" in layout:
        shards = sorted(f.name for f in path.iterdir() if f.name.startswith("model-"))
        assert len(shards) >= 3, f"expected several shards, got {shards}"
        assert (path / "model.safetensors.index.json").is_file()
    reloaded = Gemma4ForConditionalGeneration.from_pretrained(str(path), dtype=torch.float32).eval()
    got = reloaded(input_ids=prompt.unsqueeze(0), use_cache=False).logits[0].float()
    if text_config_of(target).enable_moe_block:
        # HF's default experts kernel (grouped_mm) rounds differently from run to run at the 1e-7 level.
        assert torch.allclose(got, want_logits, rtol=1e-5, atol=1e-6), "HF computes other logits from the files"
    else:
        assert torch.equal(got, want_logits), "HF computes other logits from the written files"


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------
def setup_determinism() -> None:
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)
    transformers.logging.set_verbosity_error()


def hash_tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def generate(out: Path, names: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        info = compute_case(name, CASES[name], out)
        print(
            f"[{name}] T={info['prompt_len']} window={info['sliding_window']} N={info['max_new_tokens']} "
            f"distinct={info['greedy_distinct_tokens']} drafts={info['draft_argmax']} "
            f"accepted/round={info['assisted_accepted_per_round']}"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    ap.add_argument("--check", action="store_true", help="regenerate into a temp dir and compare with --out")
    args = ap.parse_args()

    if transformers.__version__ != EXPECTED_TRANSFORMERS:
        print(f"warning: transformers {transformers.__version__}, fixtures were made with {EXPECTED_TRANSFORMERS}")
    setup_determinism()

    if not args.check:
        generate(args.out, args.cases)
        return 0

    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp), args.cases)
        ok = True
        for name in args.cases:
            want, got = hash_tree(args.out / name), hash_tree(Path(tmp) / name)
            if want != got:
                ok = False
                for f in sorted(set(want) | set(got)):
                    if want.get(f) != got.get(f):
                        print(f"MISMATCH {name}/{f}: committed={want.get(f)} regenerated={got.get(f)}")
            else:
                print(f"[{name}] identical ({len(got)} files)")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
