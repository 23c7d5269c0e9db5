#!/usr/bin/env python3
"""A Gemma 4 assistant drafting for the tiny Gemma 3 target, from HF transformers itself.

Into tests/fixtures/gemma3/tiny/:

  assistant/config.json, assistant/model.safetensors
      save_pretrained of a seeded random `Gemma4AssistantForCausalLM` whose backbone is the tiny
      `Gemma3ForCausalLM` in hf/ (backbone_hidden_size 32, the same vocabulary, one sliding and one
      full layer of the target's head geometry and RoPE, a sliding window of 3 so that the window
      cuts the prompts below)
  assistant_reference.json
      for each prompt: HF's draft chain after the prompt. The target (Gemma3ForCausalLM, with a
      cache) runs the prompt; its first greedy token t0 and post-norm last hidden h start the chain;
      the assistant runs `Gemma4AssistantForCausalLM.forward` with
        inputs_embeds    = concat(target.embed_tokens(token) (Gemma 3's scaled embedding), hidden)
        shared_kv_states = {"sliding_attention": the keys and values the target cached in its last
                            sliding layer, "full_attention": those of its last full layer}
        position_ids     = [[len(prompt)]] (the newest token's position, fixed for the burst)
      then feeds back its own argmax and `last_hidden_state` (the post-projection), 3 steps. The
      logits of each step are recorded (rounded to 5 decimals) with its argmax.

This is how a Gemma 4 assistant sits beside a Gemma 3 target: the last sliding and the last full
layer are the pair HF's Gemma 4 passes as `shared_kv_states` (and llama.cpp aliases to for targets
without KV sharing). CPU, f32, deterministic, one thread.

    /tmp/g3-venv/bin/python tools/gemma3_fixtures/make_assistant_fixture.py      # about 5 s
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch
import transformers
from transformers import Gemma3ForCausalLM, Gemma4AssistantConfig, Gemma4AssistantForCausalLM, Gemma4TextConfig

REPO = Path(__file__).resolve().parents[2]
CASE = REPO / "tests" / "fixtures" / "gemma3" / "tiny"
SEED = 4321
STEPS = 3
S, F = "sliding_attention", "full_attention"


def assistant_for(target_config) -> Gemma4AssistantForCausalLM:
    rope = target_config.rope_parameters
    text = Gemma4TextConfig(
        vocab_size=target_config.vocab_size,
        hidden_size=24,
        intermediate_size=40,
        num_hidden_layers=2,
        num_attention_heads=3,
        num_key_value_heads=target_config.num_key_value_heads,
        head_dim=target_config.head_dim,
        global_head_dim=target_config.head_dim,
        layer_types=[S, F],
        sliding_window=3,
        rope_parameters={S: dict(rope[S]), F: dict(rope[F])},
        num_kv_shared_layers=2,
        hidden_size_per_layer_input=0,
        vocab_size_per_layer_input=0,
        enable_moe_block=False,
        use_double_wide_mlp=False,
        final_logit_softcapping=None,
        max_position_embeddings=target_config.max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    config = Gemma4AssistantConfig(text_config=text, backbone_hidden_size=target_config.hidden_size,
                                   use_ordered_embeddings=False)
    config._attn_implementation = "sdpa"
    config.text_config._attn_implementation = "sdpa"
    torch.manual_seed(SEED)
    model = Gemma4AssistantForCausalLM(config).eval()
    gen = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        # Larger weights than HF's init (which drafts one token everywhere), perturbed norms (HF's
        # Gemma 4 norms scale by w itself: 1 + noise keeps them away from a missing weight).
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=gen))
            elif name.endswith("proj.weight") or name.endswith("projection.weight"):
                p.mul_(6.0)
        model.model.embed_tokens.weight.mul_(3.0)
    return model


def last_of(layer_types: list[str], kind: str) -> int:
    return max(i for i, t in enumerate(layer_types) if t == kind)


def draft_chain(target, assistant, prompt: list[int]) -> dict:
    x = torch.tensor([prompt])
    with torch.no_grad():
        out = target(x, use_cache=True, output_hidden_states=True)
        token = int(out.logits[0, -1].argmax())
        hidden = out.hidden_states[-1][:, -1:]  # after the final norm (HF's last hidden state)
        cache = out.past_key_values
        types = target.config.layer_types
        shared = {}
        for kind in (S, F):
            layer = cache.layers[last_of(types, kind)]
            shared[kind] = (layer.keys, layer.values)
        embed = target.get_input_embeddings()
        steps = []
        first = token
        for _ in range(STEPS):
            inputs = torch.cat([embed(torch.tensor([[token]])), hidden], dim=-1)
            o = assistant(inputs_embeds=inputs, position_ids=torch.tensor([[len(prompt)]]),
                          shared_kv_states=shared)
            logits = o.logits[0, -1]
            token = int(logits.argmax())
            hidden = o.last_hidden_state
            steps.append({"argmax": token, "logits": [round(float(v), 5) for v in logits]})
    return {"prompt_ids": prompt, "first_token": first,
            "kv_kept": {k: int(v[0].shape[2]) for k, v in shared.items()}, "steps": steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", type=Path, default=CASE)
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    target = Gemma3ForCausalLM.from_pretrained(str(args.case / "hf"), attn_implementation="sdpa").eval()
    assistant = assistant_for(target.config)
    out = args.case / "assistant"
    if out.exists():
        shutil.rmtree(out)
    assistant.save_pretrained(str(out), safe_serialization=True)
    runs = json.loads((args.case / "reference.json").read_text())["runs"]
    # The committed prompts (longer than the target's window of 8, so the assistant's window of 3
    # and the target's sliding cache both cut them) and a short one (shorter than every window).
    prompts = [r["prompt_ids"] for r in runs] + [runs[0]["prompt_ids"][:3]]
    ref = {
        "source": f"HF transformers {transformers.__version__}, torch {torch.__version__} "
                  "(tools/gemma3_fixtures/make_assistant_fixture.py)",
        "chain": "target forward over prompt_ids with a cache; first_token = its argmax; then "
                 f"{STEPS} Gemma4AssistantForCausalLM steps at position len(prompt_ids), each fed the "
                 "previous argmax and last_hidden_state; logits rounded to 5 decimals",
        "runs": [draft_chain(target, assistant, p) for p in prompts],
    }
    for run in ref["runs"]:
        tokens = [run["first_token"]] + [s["argmax"] for s in run["steps"]]
        print(f"prompt of {len(run['prompt_ids'])}: chain {tokens}, kv kept {run['kv_kept']}")
    (args.case / "assistant_reference.json").write_text(json.dumps(ref, indent=1) + "\n")


if __name__ == "__main__":
    main()
