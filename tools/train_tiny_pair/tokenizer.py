"""A byte-fallback BPE tokenizer (Gemma style: "▁" marks a space, unknown bytes become <0xXX>).

Ids 0..5 are Gemma's specials in Gemma's order (<pad> <eos> <bos> <unk>) plus the two chat-turn
markers; ids 6..261 are the 256 byte tokens; merges learned on the training chapters fill the rest.
The runner adds <bos> itself (`add_bos_token` in tokenizer_config.json), so tokenizer.json has no
post-processor.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

PAD, EOS, BOS, UNK = "<pad>", "<eos>", "<bos>", "<unk>"
START_OF_TURN, END_OF_TURN = "<start_of_turn>", "<end_of_turn>"
SPECIALS = [PAD, EOS, BOS, UNK, START_OF_TURN, END_OF_TURN]
BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]
PAD_ID, EOS_ID, BOS_ID = 0, 1, 2

GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
    "<start_of_turn>{{ role }}\n{{ message['content'] | trim }}<end_of_turn>\n"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


def train_tokenizer(texts: list[str], vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token=UNK, byte_fallback=True, fuse_unk=False))
    # Spaces become "▁" (kept on the following word); punctuation and newlines are tokens of their own.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never"),
            pre_tokenizers.Punctuation(behavior="isolated"),
            pre_tokenizers.Split("\n", behavior="isolated"),
        ]
    )
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIALS + BYTE_TOKENS,
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    # The byte tokens were passed as "special" only to pin their ids; they are ordinary vocabulary
    # entries (ByteFallback needs them in the model's vocab, decoding must not skip them).
    spec = json.loads(tok.to_str())
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] in SPECIALS]
    tok = Tokenizer.from_str(json.dumps(spec))
    check(tok)
    return tok


def check(tok: Tokenizer) -> None:
    for i, s in enumerate(SPECIALS):
        assert tok.token_to_id(s) == i, (s, tok.token_to_id(s))
    for b, s in enumerate(BYTE_TOKENS):
        assert tok.token_to_id(s) == len(SPECIALS) + b, s
    for text in ["In the beginning God created the heaven and the earth.", "é 日本 🙂\nAmen."]:
        ids = tok.encode(text, add_special_tokens=False).ids
        back = tok.decode(ids, skip_special_tokens=True)
        assert back == text, (text, back)


def save(tok: Tokenizer, out: Path, max_length: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    config = {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "unk_token": UNK,
        "chat_template": GEMMA_CHAT_TEMPLATE,
        "model_max_length": max_length,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
