"""The King James Bible from Debian's `bible-kjv` package, split into train and held-out chapters.

`bible -f off "gen1:1-rev22:21"` prints one verse a line ("Ge1:1 In the beginning ..."). It first
prints a stray Obad1:1, which is dropped. A chapter becomes one document: its verses joined by "\\n".
Every `HELDOUT_EVERY`-th chapter (offset `HELDOUT_OFFSET`) is held out for evaluation.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

BIBLE_RANGE = "gen1:1-rev22:21"
HELDOUT_EVERY = 20
HELDOUT_OFFSET = 7
_REF = re.compile(r"^(?P<book>[1-3]?[A-Za-z]+)(?P<chapter>\d+):(?P<verse>\d+)$")


@dataclass(frozen=True)
class Chapter:
    book: str
    number: int
    text: str


def read_verses() -> list[tuple[str, int, str]]:
    """(book, chapter, verse text) for every verse, in canon order."""
    if shutil.which("bible") is None:
        raise SystemExit("`bible` not found: apt-get install -y bible-kjv")
    out = subprocess.run(["bible", "-f", "off", BIBLE_RANGE], capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    if lines and lines[0].startswith("Obad1:1 "):
        lines = lines[1:]
    verses = []
    for line in lines:
        if not line.strip():
            continue
        ref, _, text = line.partition(" ")
        m = _REF.match(ref)
        if m is None:
            raise ValueError(f"unexpected verse reference {ref!r} in line {line[:60]!r}")
        verses.append((m["book"], int(m["chapter"]), " ".join(text.split())))
    if len(verses) != 31102:
        raise ValueError(f"expected the 31,102 verses of the KJV, got {len(verses)}")
    return verses


def read_chapters() -> list[Chapter]:
    chapters: list[Chapter] = []
    current: tuple[str, int] | None = None
    buf: list[str] = []
    for book, number, text in read_verses():
        if (book, number) != current:
            if current is not None:
                chapters.append(Chapter(current[0], current[1], "\n".join(buf)))
            current, buf = (book, number), []
        buf.append(text)
    if current is not None:
        chapters.append(Chapter(current[0], current[1], "\n".join(buf)))
    return chapters


def split(chapters: list[Chapter]) -> tuple[list[Chapter], list[Chapter]]:
    """(train, held-out): every HELDOUT_EVERY-th chapter is held out."""
    train = [c for i, c in enumerate(chapters) if i % HELDOUT_EVERY != HELDOUT_OFFSET]
    held = [c for i, c in enumerate(chapters) if i % HELDOUT_EVERY == HELDOUT_OFFSET]
    return train, held
