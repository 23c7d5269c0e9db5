"""The committed evaluation prompts (models/prompts.txt): one prompt a line.

Four openings from the training text, then twenty held-out chapter openings cut at varied lengths
(2 to 60 words), so that prompts run from a few tokens to well past the 32-token sliding window.
"""

from __future__ import annotations

from pathlib import Path

import corpus

TRAIN_OPENINGS = [
    "In the beginning",
    "The LORD is my shepherd;",
    "And God said,",
    "Blessed are the poor in spirit:",
]
WORD_COUNTS = [2, 4, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60, 30]


def heldout_prompts() -> list[str]:
    _, held = corpus.split(corpus.read_chapters())
    # Every third held-out chapter, for variety across the canon.
    chosen = held[::3][: len(WORD_COUNTS)]
    prompts = []
    for chapter, words in zip(chosen, WORD_COUNTS):
        text = " ".join(chapter.text.split())  # verses of the chapter as one line
        prompts.append(" ".join(text.split(" ")[:words]))
    return prompts


def write(path: Path) -> list[str]:
    prompts = TRAIN_OPENINGS + heldout_prompts()
    path.write_text("\n".join(prompts) + "\n")
    return prompts


def read(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip()]
