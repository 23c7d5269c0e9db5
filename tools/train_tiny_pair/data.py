"""Token streams for training: each chapter is <bos> text <eos>, chapters concatenated."""

from __future__ import annotations

import torch
from tokenizers import Tokenizer

from corpus import Chapter
from tokenizer import BOS_ID, EOS_ID


def token_stream(tok: Tokenizer, chapters: list[Chapter]) -> torch.Tensor:
    ids: list[int] = []
    for c in chapters:
        ids.append(BOS_ID)
        ids.extend(tok.encode(c.text, add_special_tokens=False).ids)
        ids.append(EOS_ID)
    return torch.tensor(ids, dtype=torch.long)


def random_windows(stream: torch.Tensor, batch: int, length: int, gen: torch.Generator) -> torch.Tensor:
    """`batch` windows of `length` tokens at seeded random offsets."""
    starts = torch.randint(0, stream.numel() - length, (batch,), generator=gen)
    return torch.stack([stream[s : s + length] for s in starts.tolist()])


def fixed_windows(stream: torch.Tensor, count: int, length: int) -> torch.Tensor:
    """`count` evenly spaced windows (the same every call): the held-out evaluation set."""
    step = max(1, (stream.numel() - length) // count)
    return torch.stack([stream[i * step : i * step + length] for i in range(count)])
