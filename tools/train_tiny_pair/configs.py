"""The shapes of the tiny pair: a Gemma 4 text target and its gemma4_assistant drafter."""

from __future__ import annotations

from transformers import Gemma4AssistantConfig, Gemma4TextConfig

from tokenizer import BOS_ID, EOS_ID, PAD_ID

VOCAB_SIZE = 4096
SEQ_LEN = 256
MAX_POSITIONS = 1024
SLIDING_WINDOW = 32

# Like Gemma 4: default RoPE on sliding layers, proportional partial RoPE on full layers.
ROPE = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
    "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0},
}
S, F = "sliding_attention", "full_attention"

# Attention geometry the assistant reads from the target's KV (copied into the assistant config).
SHARED_GEOMETRY = dict(
    head_dim=64,
    global_head_dim=64,
    num_key_value_heads=1,
    sliding_window=SLIDING_WINDOW,
    rope_parameters=ROPE,
)


def _common() -> dict:
    return dict(
        vocab_size=VOCAB_SIZE,
        max_position_embeddings=MAX_POSITIONS,
        pad_token_id=PAD_ID,
        eos_token_id=EOS_ID,
        bos_token_id=BOS_ID,
        tie_word_embeddings=True,
        hidden_size_per_layer_input=0,
        vocab_size_per_layer_input=0,
        final_logit_softcapping=30.0,
        **SHARED_GEOMETRY,
    )


def target_config() -> Gemma4TextConfig:
    return Gemma4TextConfig(
        hidden_size=192,
        intermediate_size=576,
        num_hidden_layers=6,
        num_attention_heads=3,
        layer_types=[S, S, F, S, S, F],
        **_common(),
    )


def assistant_config(width: int = 192) -> Gemma4AssistantConfig:
    """The assistant, `width` wide (the default pair's: the target's 192; llama.cpp's loader
    takes only an assistant narrower than its target, so its GGUF race pair uses 128). Heads are
    the 64-wide heads of the target's KV, `width / 64` of them; the MLP is 3 x `width`."""
    layers = 2
    text = Gemma4TextConfig(
        hidden_size=width,
        intermediate_size=3 * width,
        num_hidden_layers=layers,
        num_attention_heads=width // 64,
        layer_types=[S, F],
        use_double_wide_mlp=False,
        enable_moe_block=False,
        num_kv_shared_layers=layers,
        **_common(),
    )
    return Gemma4AssistantConfig(text_config=text, backbone_hidden_size=192, use_ordered_embeddings=False)
