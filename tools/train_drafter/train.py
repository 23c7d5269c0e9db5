#!/usr/bin/env python3
"""Train a Gemma-4-assistant-style MTP drafter for any target from features our engine wrote
(`cargo run --release -p runner --example drafter_features`), and write it as an HF
`gemma4_assistant` directory that `mtp generate --draft DIR` loads.

The drafter is HF's `Gemma4AssistantForCausalLM` (so the output is what `save_pretrained` writes):
KV-shared layers reading the target's last sliding and last full layer, `pre_projection` of
`concat(target_embed(token), hidden)`, `post_projection` fed back, and the centroid-routed
("ordered embeddings") head, which makes a draft step cheap beside a target step: the
`centroid_intermediate_top_k` best of `num_centroids` token clusters are scored, 4096 of the
262,144 tokens of Gemma's vocabulary, instead of the whole table.

Conditioning is HF's single-position MTP generator's: to draft after position t the assistant
runs at position t on `concat(target_embed(x_t), h_{t-1})` and reads the target's keys and values
at positions <= t-1 (the `sliding_window + 1` most recent on sliding layers). Step k of a chain
stays at position t, is fed x_{t+k-1} (teacher forcing) and its own previous projected hidden,
and learns the target's distribution at t+k-1. Losses, per step (weights `STEP_WEIGHTS`):

* tokens: cross-entropy from the target's top-k distribution (renormalized; equal to the KL up
  to a constant) to the drafter's softmax over a sampled candidate set (every top-k id of the
  batch and `--negatives` random tokens): the full 262k softmax would cost ~20x more;
* clusters: cross-entropy from the target's top-k mass per cluster to the centroid logits, so
  the routing finds the clusters the target's likely tokens are in.

Clusters are a balanced partition of the vocabulary by recursive median splits along the
principal direction of the (projected) target embeddings: 2048 clusters of 128 tokens, fixed.
The LM head starts as the target's embedding projected on its top principal directions.

Runs are resumable: a checkpoint (`checkpoint.pt`, weights, optimizer, step, random state,
history) is written every `--checkpoint-every` steps and at the end; the same command goes on
from it. Progress and losses are printed; held-out teacher-forced agreement with the target's
greedy token (through the routed head, per chain step) every `--eval-every` steps.

    python3 tools/train_drafter/train.py --features /tmp/f-train --heldout /tmp/f-held \
        --out /tmp/drafter-run --steps 2000 --threads 2
    python3 tools/train_drafter/train.py ... --export models/gemma-3-270m-drafter
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from transformers import Gemma4AssistantConfig, Gemma4AssistantForCausalLM, Gemma4TextConfig

# The tiny pair's modules first (its `corpus` is not this folder's), then this folder's.
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train_tiny_pair"))
from features import Features, open_features  # noqa: E402
# The conditioning (masks, one chain step) is the tiny pair's, shared (tools/train_tiny_pair).
from train_assistant import assistant_step as step_hidden, query_masks  # noqa: E402

STEP_WEIGHTS = (1.0, 0.6, 0.4)
S, F_ = "sliding_attention", "full_attention"


def assistant_config(meta: dict, args) -> Gemma4AssistantConfig:
    """The drafter's shape: `--width` wide, `--layers` KV-shared layers (sliding ones, the last
    full), each layer type with the target's head geometry."""
    layers = meta["layers"]
    sliding, full = layers[S], layers[F_]
    vocab = meta["vocab_size"]
    if args.centroids & (args.centroids - 1) or vocab % args.centroids:
        raise SystemExit(f"--centroids {args.centroids} must be a power of two dividing the vocabulary ({vocab})")
    # The queries must rotate as the target's cached keys were rotated (plain RoPE at the bases).
    for kind, base in ((S, args.rope_local_base), (F_, args.rope_base)):
        theirs = torch.tensor(meta["inv_freq"][kind], dtype=torch.float64)
        d = layers[kind]["head_dim"]
        ours = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        if theirs.shape != ours.shape or not torch.allclose(theirs, ours, rtol=1e-5, atol=0):
            raise SystemExit(f"the target's {kind} RoPE is not plain RoPE at base {base} "
                             "(set --rope-base / --rope-local-base; scaled RoPE is not supported here)")
    if sliding["head_dim"] != full["head_dim"] or sliding["kv_heads"] != full["kv_heads"]:
        raise SystemExit("the target's two source layers differ in head geometry (not supported here)")
    types = [S] * (args.layers - 1) + [F_]
    text = Gemma4TextConfig(
        vocab_size=meta["vocab_size"],
        hidden_size=args.width,
        intermediate_size=4 * args.width,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=sliding["kv_heads"],
        head_dim=sliding["head_dim"],
        global_head_dim=full["head_dim"],
        layer_types=types,
        sliding_window=args.sliding_window,
        rope_parameters={
            S: {"rope_type": "default", "rope_theta": args.rope_local_base},
            F_: {"rope_type": "default", "rope_theta": args.rope_base},
        },
        num_kv_shared_layers=args.layers,
        hidden_size_per_layer_input=0,
        vocab_size_per_layer_input=0,
        enable_moe_block=False,
        use_double_wide_mlp=False,
        final_logit_softcapping=None,
        max_position_embeddings=args.max_positions,
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    config = Gemma4AssistantConfig(
        text_config=text,
        backbone_hidden_size=meta["hidden_size"],
        use_ordered_embeddings=True,
        num_centroids=args.centroids,
        centroid_intermediate_top_k=args.centroid_top_k,
    )
    config.text_config._attn_implementation = "sdpa"
    return config


def load_embeddings(features_dir: Path, meta: dict) -> torch.Tensor:
    table = np.fromfile(features_dir / "embeddings.f16", dtype="<f2")
    return torch.from_numpy(table.astype(np.float32)).view(meta["vocab_size"], meta["hidden_size"])


def principal_directions(table: torch.Tensor, k: int, seed: int) -> torch.Tensor:
    """The top `k` principal directions of the rows of `table` ([H, k]), by randomized SVD."""
    gen = torch.Generator().manual_seed(seed)
    sample = table[torch.randperm(table.shape[0], generator=gen)[:65536]]
    sample = sample - sample.mean(0)
    _, _, v = torch.linalg.svd(sample, full_matrices=False)
    return v[:k].T.contiguous()


def balanced_clusters(points: torch.Tensor, clusters: int) -> torch.Tensor:
    """A token ordering whose `clusters` consecutive runs partition the rows of `points` into equal
    clusters: recursive median splits along each subset's principal direction."""
    ids = [torch.arange(points.shape[0])]
    while len(ids) < clusters:
        nxt = []
        for subset in ids:
            x = points[subset]
            x = x - x.mean(0)
            # The principal direction by a few power iterations (deterministic start).
            v = torch.ones(x.shape[1]) / math.sqrt(x.shape[1])
            for _ in range(8):
                v = x.T @ (x @ v)
                v = v / v.norm().clamp_min(1e-12)
            order = torch.argsort(x @ v, stable=True)
            half = subset.numel() // 2
            nxt += [subset[order[:half]], subset[order[half:]]]
        ids = nxt
    return torch.cat(ids)


def initialise(assistant: Gemma4AssistantForCausalLM, embeddings: torch.Tensor, seed: int) -> None:
    """LM head = the target's embedding on its top principal directions (scaled to unit RMS per
    row); clusters by balanced splits of those rows; centroids = their clusters' mean rows."""
    width = assistant.config.get_text_config().hidden_size
    directions = principal_directions(embeddings, width, seed)
    head = (embeddings - embeddings.mean(0)) @ directions
    head = head / head.pow(2).mean().sqrt().clamp_min(1e-12)
    masked = assistant.masked_embedding
    ordering = balanced_clusters(head, masked.num_centroids)
    with torch.no_grad():
        assistant.lm_head.weight.copy_(head)
        masked.token_ordering.copy_(ordering)
        runs = head[ordering].view(masked.num_centroids, -1, width)
        masked.centroids.weight.copy_(runs.mean(1))


def routed_argmax(assistant, hidden: torch.Tensor) -> torch.Tensor:
    """The drafter's greedy token through the centroid-routed head (what inference drafts)."""
    logits = assistant.masked_embedding(hidden, assistant.lm_head.weight)
    return logits.argmax(-1)


class Trainer:
    def __init__(self, args, features: Features, embeddings: torch.Tensor):
        self.args = args
        self.features = features
        self.embeddings = embeddings
        self.config = assistant_config(features.meta, args)
        torch.manual_seed(args.seed)
        self.assistant = Gemma4AssistantForCausalLM(self.config).float()
        initialise(self.assistant, embeddings, args.seed)
        self.assistant.train()
        self.opt = torch.optim.AdamW(self.assistant.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
        self.gen = torch.Generator().manual_seed(args.seed + 1)
        self.step = 0
        self.history: list[dict] = []
        self.seconds = 0.0
        L = features.window
        self.masks = query_masks(L, args.sliding_window)
        self.cluster_of = self.clusters()

    def clusters(self) -> torch.Tensor:
        """Each token's cluster, from the assistant's token ordering."""
        ordering = self.assistant.masked_embedding.token_ordering.long()
        cluster_of = torch.empty(ordering.numel(), dtype=torch.long)
        cluster_of[ordering] = torch.arange(ordering.numel()) // (ordering.numel() // self.args.centroids)
        return cluster_of

    # -- checkpoints ---------------------------------------------------------------------------
    def state(self) -> dict:
        return {"assistant": self.assistant.state_dict(), "opt": self.opt.state_dict(), "step": self.step,
                "gen": self.gen.get_state(), "torch": torch.get_rng_state(), "history": self.history,
                "seconds": self.seconds, "args": vars(self.args)}

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        torch.save(self.state(), tmp)
        tmp.replace(path)

    def load(self, path: Path) -> None:
        state = torch.load(path, weights_only=False)
        self.assistant.load_state_dict(state["assistant"])
        self.opt.load_state_dict(state["opt"])
        self.step, self.history, self.seconds = state["step"], state["history"], state["seconds"]
        self.gen.set_state(state["gen"])
        torch.set_rng_state(state["torch"])
        # The checkpoint's ordering (a buffer) replaced the freshly computed one.
        self.cluster_of = self.clusters()

    def freeze_quantized_head(self, bits: int, group_size: int) -> None:
        """Puts the tied head on the grid it will be stored on (`quantize.py`'s `quantize_head`)
        and freezes it, so the rest of the drafter trains against the head inference reads.
        Stored at 4 bits after float training only, the committed drafter's first drafts were
        accepted in the engine 0.31 of the time against 0.38 in float (open prompts, depth 1);
        1,000 steps against the frozen grid brought it back to 0.38."""
        import mlx.core as mx  # only this option needs MLX
        from quantize import quantize_head

        weight = self.assistant.lm_head.weight
        packed, scales, biases = quantize_head(mx.array(weight.detach().numpy()), bits, group_size)
        grid = mx.dequantize(packed, scales.astype(mx.float32), biases.astype(mx.float32),
                             group_size=group_size, bits=bits)
        with torch.no_grad():
            weight.copy_(torch.from_numpy(np.array(grid, dtype=np.float32)))
        weight.requires_grad_(False)

    # -- one batch -----------------------------------------------------------------------------
    def inputs(self, batch: dict):
        x = batch["tokens"]
        B, L = x.shape
        emb = self.embeddings[x]  # the target's input embedding of each token
        positions = torch.arange(1, L).view(1, -1).expand(B, -1)
        return x, emb, positions, batch["hidden"][:, :-1], batch["shared"]

    def loss(self, batch: dict) -> tuple[torch.Tensor, list[float]]:
        x, emb, positions, h_in, shared = self.inputs(batch)
        B, L = x.shape
        ids, logp = batch["topk_ids"], batch["topk_logp"]
        p = logp.exp()
        p = p / p.sum(-1, keepdim=True)
        vocab = self.features.meta["vocab_size"]
        negatives = torch.randint(0, vocab, (self.args.negatives,), generator=self.gen)
        candidates = torch.unique(torch.cat([ids.reshape(-1), negatives]))
        slot = torch.full((vocab,), -1, dtype=torch.long)
        slot[candidates] = torch.arange(candidates.numel())
        total = torch.zeros(())
        parts = []
        for k, weight in enumerate(STEP_WEIGHTS, start=1):
            valid = L - k  # queries t = 1..L-k; their target distribution is at t+k-1
            hidden = step_hidden(self.assistant, emb[:, k : k + valid], h_in[:, :valid], self.masks, positions, shared)
            rows = self.assistant.lm_head.weight[candidates]
            q_log = F.log_softmax(hidden @ rows.T, dim=-1)  # [B, valid, C]
            target_ids = slot[ids[:, k : k + valid]]
            target_p = p[:, k : k + valid]
            token_loss = -(target_p * torch.gather(q_log, -1, target_ids)).sum(-1).mean()
            c_log = F.log_softmax(self.assistant.masked_embedding.centroids(hidden), dim=-1)
            c_target = torch.zeros(B, valid, self.args.centroids)
            c_target.scatter_add_(-1, self.cluster_of[ids[:, k : k + valid]], target_p)
            cluster_loss = -(c_target * c_log).sum(-1).mean()
            total = total + weight * (token_loss + self.args.cluster_weight * cluster_loss)
            parts.append(round(token_loss.item(), 4))
            parts.append(round(cluster_loss.item(), 4))
            h_in = self.assistant.post_projection(hidden)
        return total, parts

    @torch.no_grad()
    def agreement(self, held: Features, windows: int) -> list[float]:
        """Teacher-forced agreement of the routed greedy draft with the target's greedy token, per
        chain step, over the first `windows` held-out windows."""
        self.assistant.eval()
        hits = [0.0] * len(STEP_WEIGHTS)
        counts = [0] * len(STEP_WEIGHTS)
        for start in range(0, min(windows, held.windows), 4):
            batch = held.batch(list(range(start, min(start + 4, windows, held.windows))))
            x, emb, positions, h_in, shared = self.inputs(batch)
            L = x.shape[1]
            greedy = batch["topk_ids"][..., 0]
            for k in range(1, len(STEP_WEIGHTS) + 1):
                valid = L - k
                hidden = step_hidden(self.assistant, emb[:, k : k + valid], h_in[:, :valid], self.masks, positions,
                                     shared)
                drafted = routed_argmax(self.assistant, hidden)
                hits[k - 1] += float((drafted == greedy[:, k : k + valid]).sum())
                counts[k - 1] += drafted.numel()
                h_in = self.assistant.post_projection(hidden)
        self.assistant.train()
        return [h / max(c, 1) for h, c in zip(hits, counts)]

    def lr_at(self, step: int) -> float:
        warmup = min(100, self.args.steps // 10)
        if step < warmup:
            return self.args.lr * (step + 1) / warmup
        progress = (step - warmup) / max(1, self.args.steps - warmup)
        return self.args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))

    def run(self, held: Features | None, checkpoint: Path) -> None:
        a = self.args
        while self.step < a.steps:
            began = time.time()
            for g in self.opt.param_groups:
                g["lr"] = self.lr_at(self.step)
            rows = torch.randint(0, self.features.windows, (a.batch,), generator=self.gen).tolist()
            loss, parts = self.loss(self.features.batch(rows))
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.assistant.parameters(), 1.0)
            self.opt.step()
            self.step += 1
            self.seconds += time.time() - began
            if self.step % a.log_every == 0:
                rate = self.step * a.batch * (self.features.window - 1) / max(self.seconds, 1e-9)
                print(f"step {self.step}/{a.steps} loss {loss.item():.4f} (token, cluster per chain step {parts}) "
                      f"{rate:.0f} positions/s, {self.seconds / 3600:.2f} CPU-h", flush=True)
            entry = None
            if held is not None and (self.step % a.eval_every == 0 or self.step == a.steps):
                acc = self.agreement(held, a.eval_windows)
                entry = {"step": self.step, "loss_parts": parts, "heldout_agreement": acc,
                         "seconds": self.seconds}
                self.history.append(entry)
                print(f"step {self.step}: held-out agreement per chain step {[round(x, 3) for x in acc]}", flush=True)
            if self.step % a.checkpoint_every == 0 or self.step == a.steps:
                self.save(checkpoint)


def export(trainer: Trainer, out: Path, card: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    trainer.assistant.eval()
    trainer.assistant.save_pretrained(str(out), safe_serialization=True)
    (out / "training.json").write_text(json.dumps(card, indent=1) + "\n")
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--features", type=Path, required=True, help="training features (drafter_features)")
    parser.add_argument("--heldout", type=Path, help="held-out features for the agreement report")
    parser.add_argument("--out", type=Path, required=True, help="run directory (checkpoint.pt)")
    parser.add_argument("--export", type=Path, help="write the HF assistant directory here after training")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--sliding-window", type=int, default=510,
                        help="the assistant's window (at most the target's sliding window - 2)")
    parser.add_argument("--rope-base", type=float, default=1_000_000.0)
    parser.add_argument("--rope-local-base", type=float, default=10_000.0)
    parser.add_argument("--max-positions", type=int, default=32768)
    parser.add_argument("--centroids", type=int, default=2048)
    parser.add_argument("--centroid-top-k", type=int, default=32)
    parser.add_argument("--negatives", type=int, default=4096)
    parser.add_argument("--cluster-weight", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--eval-every", type=int, default=200)
    parser.add_argument("--eval-windows", type=int, default=32)
    parser.add_argument("--checkpoint-every", type=int, default=50)
    parser.add_argument("--quantized-head", type=int, default=0, choices=[0, 2, 4, 8],
                        help="train against the head quantized to this many bits (MLX affine, frozen); "
                             "resume a float run with it for the last steps, then store with quantize.py "
                             "at the same --bits / --group-size")
    parser.add_argument("--quantized-head-group", type=int, default=64, choices=[32, 64, 128])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    features = open_features(args.features)
    held = open_features(args.heldout) if args.heldout else None
    embeddings = load_embeddings(args.features, features.meta)
    trainer = Trainer(args, features, embeddings)
    args.out.mkdir(parents=True, exist_ok=True)
    checkpoint = args.out / "checkpoint.pt"
    if checkpoint.exists():
        trainer.load(checkpoint)
        print(f"resumed at step {trainer.step} ({trainer.seconds / 3600:.2f} CPU-h so far)", flush=True)
    if args.quantized_head:
        trainer.freeze_quantized_head(args.quantized_head, args.quantized_head_group)
        print(f"head frozen on its {args.quantized_head}-bit grid from step {trainer.step}", flush=True)
    trainer.run(held, checkpoint)
    if args.export:
        card = {"target": features.meta["target"], "features": str(args.features),
                "train_windows": features.windows, "window": features.window,
                "positions_seen": trainer.step * args.batch * (features.window - 1),
                "steps": trainer.step, "cpu_hours": round(trainer.seconds * args.threads / 3600, 3),
                "threads": args.threads, "settings": {k: (str(v) if isinstance(v, Path) else v)
                                                       for k, v in vars(args).items()},
                "history": trainer.history}
        export(trainer, args.export, card)


if __name__ == "__main__":
    main()
