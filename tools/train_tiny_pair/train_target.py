"""Train the Gemma 4 target from scratch (next-token cross entropy), keeping the best held-out loss."""

from __future__ import annotations

import logging
import math
import time

import torch
from transformers import Gemma4ForCausalLM

import configs
from data import fixed_windows, random_windows

log = logging.getLogger("train_target")


def lr_at(step: int, steps: int, peak: float, warmup: int) -> float:
    """Linear warm-up, then cosine decay to 10% of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


@torch.no_grad()
def heldout_loss(model: Gemma4ForCausalLM, windows: torch.Tensor, batch: int = 16) -> float:
    model.eval()
    total, count = 0.0, 0
    for i in range(0, windows.shape[0], batch):
        x = windows[i : i + batch]
        out = model(input_ids=x, labels=x, use_cache=False)
        n = x.shape[0] * (x.shape[1] - 1)
        total += out.loss.item() * n
        count += n
    model.train()
    return total / count


def train(train_stream, held_stream, *, seed: int, steps: int, batch: int, lr: float, eval_every: int):
    torch.manual_seed(seed)
    model = Gemma4ForCausalLM(configs.target_config()).float()
    model.config._attn_implementation = "sdpa"
    model.train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr,
        betas=(0.9, 0.95),
    )
    gen = torch.Generator().manual_seed(seed + 1)
    held = fixed_windows(held_stream, 64, configs.SEQ_LEN + 1)
    best, best_state, history = float("inf"), None, []
    t0 = time.time()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, warmup=min(200, steps // 10))
        x = random_windows(train_stream, batch, configs.SEQ_LEN + 1, gen)
        out = model(input_ids=x, labels=x, use_cache=False)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (step + 1) % eval_every == 0 or step + 1 == steps:
            h = heldout_loss(model, held)
            elapsed = time.time() - t0
            tps = (step + 1) * batch * configs.SEQ_LEN / elapsed
            history.append({"step": step + 1, "train_loss": out.loss.item(), "heldout_loss": h, "seconds": elapsed})
            log.info("step %d train %.3f held-out %.3f (ppl %.1f) %.0f tok/s %.0fs",
                     step + 1, out.loss.item(), h, math.exp(h), tps, elapsed)
            if h < best:
                best = h
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model.load_state_dict(best_state)
    model.eval()
    return model, {"best_heldout_loss": best, "history": history, "seconds": time.time() - t0}
