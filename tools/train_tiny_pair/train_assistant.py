"""Train the gemma4_assistant drafter against the frozen target by distillation.

Conditioning is HF's single-position MTP generator's (SinglePositionMultiTokenCandidateGenerator):
to draft the token after position t, the assistant runs *at position t* on
`concat(target_embed(x_t), h_{t-1})`, where h_{t-1} is the target's last hidden state at t-1, and
attends to the target's shared KV (the last full and last sliding layer) at positions <= t-1:
all of them on full layers, the `sliding_window + 1` most recent on sliding layers. Step k of a
chain stays at position t and feeds the previous step's token and projected hidden state.

Training runs every position of a window at once: query t (1 <= t < L) gets a mask that allows
exactly those KV positions. Step 1 learns the target's distribution at t (the next token); step
k > 1 is teacher-forced with the data token x_{t+k-1} and the assistant's own hidden output of
step k-1, and learns the target's distribution at t+k-1. The loss is KL(p_target || q_assistant).
"""

from __future__ import annotations

import logging
import time

import torch
import torch.nn.functional as F
from transformers import Gemma4AssistantForCausalLM, Gemma4ForCausalLM

import configs
from data import fixed_windows, random_windows
from train_target import lr_at

log = logging.getLogger("train_assistant")
STEP_WEIGHTS = (1.0, 0.6, 0.4)


def query_masks(length: int, window: int) -> dict[str, torch.Tensor]:
    """Boolean masks [1, 1, length-1, length] for queries at positions t = 1..length-1."""
    q = torch.arange(1, length).view(-1, 1)
    j = torch.arange(length).view(1, -1)
    full = j <= q - 1
    sliding = full & (j >= q - 1 - window)
    return {"full_attention": full.view(1, 1, length - 1, length), "sliding_attention": sliding.view(1, 1, length - 1, length)}


def init_from_target(assistant: Gemma4AssistantForCausalLM, target: Gemma4ForCausalLM) -> None:
    """Warm start: the target's embedding as the assistant's (tied) lm_head, and the target's last
    layers (same types) as the assistant's layers, wherever the shapes agree."""
    t_state = target.state_dict()
    a_state = assistant.state_dict()
    offset = target.config.num_hidden_layers - assistant.config.get_text_config().num_hidden_layers
    copied = []
    for name, tensor in a_state.items():
        source = name
        if name.startswith("model.layers."):
            idx, rest = name[len("model.layers."):].split(".", 1)
            source = f"model.layers.{int(idx) + offset}.{rest}"
        elif name == "lm_head.weight":
            source = "model.embed_tokens.weight"
        if source in t_state and t_state[source].shape == tensor.shape:
            tensor.copy_(t_state[source])
            copied.append(name)
    log.info("assistant warm start: %d of %d tensors from the target", len(copied), len(a_state))


def assistant_step(assistant, tok_emb, h_in, masks, positions, shared) -> torch.Tensor:
    """One chain step for the first `tok_emb.shape[1]` queries: the assistant's last hidden state
    (before `post_projection`) from concat(token embedding, incoming hidden)."""
    valid = tok_emb.shape[1]
    out = assistant.model(
        inputs_embeds=assistant.pre_projection(torch.cat([tok_emb, h_in], dim=-1)),
        attention_mask={n: m[:, :, :valid] for n, m in masks.items()},
        position_ids=positions[:, :valid],
        shared_kv_states=shared,
        use_cache=False,
        # Keeps every query row (HF otherwise slices KV-shared layers' inputs to the last token).
        output_hidden_states=True,
    )
    return out.last_hidden_state


def chain_loss(target, assistant, x: torch.Tensor, masks) -> tuple[torch.Tensor, list[float]]:
    B, L = x.shape
    with torch.no_grad():
        out = target(input_ids=x, output_hidden_states=True, return_shared_kv_states=True, use_cache=False)
        p_log = F.log_softmax(out.logits.float(), dim=-1)  # [B, L, V]: position s predicts s+1
        hidden = out.hidden_states[-1]  # [B, L, H]
        shared = {k: (v[0], v[1]) for k, v in out.shared_kv_states.items()}
        emb = target.get_input_embeddings()(x)  # scaled, as generate() feeds it
    positions = torch.arange(1, L).view(1, -1).expand(B, -1)
    h_in = hidden[:, :-1]  # h_{t-1} for t = 1..L-1
    total = torch.zeros(())
    per_step = []
    for k, weight in enumerate(STEP_WEIGHTS, start=1):
        # Token fed at step k for query t is x_{t+k-1}; valid while t+k-1 <= L-1.
        valid = L - k  # queries t = 1..L-k
        last = assistant_step(assistant, emb[:, k : k + valid], h_in[:, :valid], masks, positions, shared)
        q_log = F.log_softmax(assistant.lm_head(last).float(), dim=-1)
        p = p_log[:, k : k + valid]  # target's distribution at t+k-1
        kl = (p.exp() * (p - q_log)).sum(-1).mean()
        total = total + weight * kl
        per_step.append(kl.item())
        h_in = assistant.post_projection(last)
    return total, per_step


@torch.no_grad()
def heldout_acceptance(target, assistant, windows, masks) -> list[float]:
    """Teacher-forced greedy agreement per chain step: argmax(q) == argmax(p)."""
    assistant.eval()
    hits = [0.0] * len(STEP_WEIGHTS)
    counts = [0] * len(STEP_WEIGHTS)
    for i in range(0, windows.shape[0], 16):
        x = windows[i : i + 16]
        B, L = x.shape
        out = target(input_ids=x, output_hidden_states=True, return_shared_kv_states=True, use_cache=False)
        p_arg = out.logits.argmax(-1)
        shared = {k: (v[0], v[1]) for k, v in out.shared_kv_states.items()}
        emb = target.get_input_embeddings()(x)
        positions = torch.arange(1, L).view(1, -1).expand(B, -1)
        h_in = out.hidden_states[-1][:, :-1]
        for k in range(1, len(STEP_WEIGHTS) + 1):
            valid = L - k
            last = assistant_step(assistant, emb[:, k : k + valid], h_in[:, :valid], masks, positions, shared)
            q_arg = assistant.lm_head(last).argmax(-1)
            hits[k - 1] += float((q_arg == p_arg[:, k : k + valid]).sum())
            counts[k - 1] += q_arg.numel()
            h_in = assistant.post_projection(last)
    assistant.train()
    return [h / c for h, c in zip(hits, counts)]


def train(target, train_stream, held_stream, *, seed: int, steps: int, batch: int, lr: float, eval_every: int,
          width: int = 192):
    torch.manual_seed(seed)
    target.eval()
    for p in target.parameters():
        p.requires_grad_(False)
    assistant = Gemma4AssistantForCausalLM(configs.assistant_config(width)).float()
    assistant.config.get_text_config()._attn_implementation = "sdpa"
    init_from_target(assistant, target)
    assistant.train()
    opt = torch.optim.AdamW(assistant.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed + 1)
    masks = query_masks(configs.SEQ_LEN, configs.SLIDING_WINDOW)
    held = fixed_windows(held_stream, 32, configs.SEQ_LEN)
    best, best_state, history = -1.0, None, []
    t0 = time.time()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, warmup=min(100, steps // 10))
        x = random_windows(train_stream, batch, configs.SEQ_LEN, gen)
        loss, per_step = chain_loss(target, assistant, x, masks)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(assistant.parameters(), 1.0)
        opt.step()
        if (step + 1) % eval_every == 0 or step + 1 == steps:
            acc = heldout_acceptance(target, assistant, held, masks)
            elapsed = time.time() - t0
            history.append({"step": step + 1, "kl_per_step": per_step, "heldout_greedy_agreement": acc, "seconds": elapsed})
            log.info("step %d kl %s held-out agreement %s %.0fs", step + 1,
                     [round(v, 3) for v in per_step], [round(a, 3) for a in acc], elapsed)
            if acc[0] > best:
                best = acc[0]
                best_state = {k: v.detach().clone() for k, v in assistant.state_dict().items()}
    assistant.load_state_dict(best_state)
    assistant.eval()
    return assistant, {"best_heldout_agreement_step1": best, "history": history, "seconds": time.time() - t0}
