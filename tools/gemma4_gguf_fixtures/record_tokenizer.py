#!/usr/bin/env python3
"""A Gemma 4 GGUF whose vocabulary exercises the `gemma4` tokenizer, and llama.cpp's tokenization
of a set of texts with it (the reference the Rust tokenizer built from the GGUF must match).

Output, under ``<out>/`` (default ``tests/fixtures/gemma4_gguf/tokenizer/``):

    model.gguf          a tiny Gemma4ForCausalLM (2 layers, hidden 32) saved by HF transformers
                        with the tokenizer below and converted by llama.cpp's own converter
                        (`convert_hf_to_gguf.py --outtype f16`): `tokenizer.ggml.model = "gemma4"`
    tokenization.json   per text (the cases of `TEXTS`, then 60 seeded random texts): llama.cpp's
                        ids with and without BOS (`llama-server` `/tokenize`, special tokens
                        parsed), its `/detokenize` of them, the same with the control tokens left
                        out (llama.cpp's `token_to_piece(special = false)` writes none), and HF's
                        `AutoTokenizer` ids (for information: HF's BPE has no newline rule); the
                        chat template rendered by `/apply-template` for one user turn, with the ids
                        llama.cpp gives it (BOS added), and HF's rendering

The tokenizer: a byte-fallback BPE trained with `tokenizers` on a small multi-line corpus (spaces as
`▁`, newline runs split off as llama.cpp's `gemma4` pre-tokenizer does), Gemma's special ids first
(`<pad> <eos> <bos> <unk>`), then Gemma 4's turn and tool tokens, the 256 byte tokens and the merges
(1500 asked, the corpus gives 1338); then normal tokens no merge reaches (a run of 4 and of 8
newlines, `xyzzy`), and two user-defined tokens (`<table>`, `<tr>`). The converter makes the tool
tokens user-defined (it always renders them) and llama.cpp makes `<|tool_response>` an
end-of-generation control token again.

Usage (the converter needs torch; PyPI's CUDA wheel works on a CPU):
    python3 -m venv /tmp/g4g && /tmp/g4g/bin/pip install -r tools/gemma4_gguf_fixtures/requirements.txt
    /tmp/g4g/bin/python tools/gemma4_gguf_fixtures/record_tokenizer.py \\
        --llama-cpp ~/.cache/mtp-rs/peers/llama_cpp_python-0.3.36/vendor/llama.cpp \\
        --llama-bin ~/.cache/mtp-rs/peers/llama.cpp-0.3.36/bin      # tools/bench_peers/build_llama_cpp.sh
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from tokenizers import (  # noqa: E402
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)
from transformers import AutoTokenizer, Gemma4ForCausalLM, Gemma4TextConfig  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO_ROOT / "tests" / "fixtures" / "gemma4_gguf" / "tokenizer"
EXPECTED_TRANSFORMERS = "5.24.0"
SEED = 7607
NAMED = ["<pad>", "<eos>", "<bos>", "<unk>"]
PAD_ID, EOS_ID, BOS_ID = 0, 1, 2
# Control tokens of Gemma 4's chat format, then the tool tokens the converter makes user-defined.
CONTROL = ["<start_of_turn>", "<end_of_turn>", "<|turn>", "<turn|>", "<|think|>"]
TOOL = ["<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>", '<|"|>']
BYTES = [f"<0x{b:02X}>" for b in range(256)]
MERGES = 1500
# Normal tokens that no merge reaches: llama.cpp tokenizes a newline run that is a token as that
# token, and every other word with the merges alone. (The corpus has no run longer than 3: the
# merges would reach a run of 4.)
UNREACHABLE = ["\n" * 4, "\n" * 8, "xyzzy"]
USER_DEFINED = ["<table>", "<tr>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "<|turn>{{ role }}\n{{ message['content'] | trim }}<turn|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|turn>model\n{% endif %}"
)
CHAT_MESSAGES = [{"role": "user", "content": "  Why is the sky blue?\n"}]

CORPUS = [
    "In the beginning God created the heaven and the earth.\n\nAnd the earth was without form, and void;"
    " and darkness was upon the face of the deep.\n\n\nAnd the Spirit of God moved upon the face of the"
    " waters.\n",
    "The quick brown fox jumps over the lazy dog.\nThe quick brown fox jumps over the lazy dog again.\n\n",
    "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n\n\nclass Point:\n"
    "    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n",
    "if x:\n\tif y:\n\t\treturn 1\n\telse:\n\t\treturn 2\n\n",
    "Café, naïve, résumé, déjà vu, façade, jalapeño, Zürich, Ærøskøbing.\n",
    "日本語のテキストです。東京は日本の首都です。\n中文文本。北京是中国的首都。\n\n",
    "Emoji: 🙂 🚀 🎉 👍 — and “quotes”, ‘single’, and ellipsis…\n",
    "Multiple   spaces    here, and     more     spaces.\n\n\n",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000 3.14159 2.71828 42\n",
    "<start_of_turn>user\nHello there!<end_of_turn>\n<start_of_turn>model\nHi! How can I help?<end_of_turn>\n",
    "And God said, Let there be light: and there was light.\nAnd God saw the light, that it was good: and God"
    " divided the light from the darkness.\nAnd God called the light Day, and the darkness he called Night."
    " And the evening and the morning were the first day.\n\n",
    "And God said, Let there be a firmament in the midst of the waters, and let it divide the waters from"
    " the waters.\nAnd God made the firmament, and divided the waters which were under the firmament from"
    " the waters which were above the firmament: and it was so.\n\n",
    "And God said, Let the waters under the heaven be gathered together unto one place, and let the dry"
    " land appear: and it was so.\nAnd God called the dry land Earth; and the gathering together of the"
    " waters called he Seas: and God saw that it was good.\n\n\n",
    "import json\nimport sys\n\n\ndef main(argv):\n    with open(argv[1]) as f:\n        data = json.load(f)\n"
    "    for key, value in sorted(data.items()):\n        print(f\"{key}: {value}\")\n    return 0\n\n\n"
    "if __name__ == \"__main__\":\n    sys.exit(main(sys.argv))\n",
    "fn main() {\n    let numbers = vec![1, 2, 3, 4, 5];\n    let total: i32 = numbers.iter().sum();\n"
    "    println!(\"total = {total}\");\n}\n\n",
    "{\"name\": \"example\", \"version\": \"1.0.0\", \"tags\": [\"alpha\", \"beta\"], \"enabled\": true}\n",
    "# Heading\n\n- first item\n- second item\n- third item\n\n## Subheading\n\n1. one\n2. two\n3. three\n\n",
    "Le renard brun rapide saute par-dessus le chien paresseux. Où est la bibliothèque ?\n"
    "Der schnelle braune Fuchs springt über den faulen Hund. Größe, Straße, schön.\n"
    "El rápido zorro marrón salta sobre el perro perezoso. ¿Dónde está la estación?\n\n",
    "今日はいい天気ですね。明日は雨が降るでしょう。私は学生です。\n我们今天去公园散步吧。你好，世界！\n\n",
    "Stars: ★ ☆ ✓ ✗ → ← ↑ ↓ • ° ± × ÷ € £ ¥ © ®\n",
    "She sells sea shells by the sea shore; the shells she sells are sea shells, I'm sure.\n"
    "Peter Piper picked a peck of pickled peppers. How many pickled peppers did Peter Piper pick?\n\n",
    "The rain in Spain stays mainly in the plain. In Hartford, Hereford and Hampshire, hurricanes hardly"
    " ever happen.\nTo be, or not to be, that is the question: whether 'tis nobler in the mind to suffer"
    " the slings and arrows of outrageous fortune.\n\n",
]

TEXTS = [
    ("plain", "Hello world"),
    ("sentence", "The quick brown fox jumps over the lazy dog."),
    ("leading_space", " leading space"),
    ("leading_spaces", "   three leading spaces"),
    ("trailing_spaces", "trailing spaces  "),
    ("multiple_spaces", "multiple   spaces    here"),
    ("only_spaces", "    "),
    ("newline", "\n"),
    ("two_newlines", "\n\n"),
    ("three_newlines", "\n\n\n"),
    ("four_newlines_unreachable_token", "\n" * 4),
    ("five_newlines", "\n" * 5),
    ("six_newlines", "\n" * 6),
    ("seven_newlines", "\n" * 7),
    ("eight_newlines_unreachable_token", "\n" * 8),
    ("forty_newlines", "\n" * 40),
    ("newline_space_newline", "\n \n"),
    ("lines", "line one\nline two\n\nline three\n\n\n\nline four\n\n\n\n\n\n\n\n\nend\n"),
    ("tabs", "\tindented\twith\ttabs\t\t"),
    ("code", "def add(a, b):\n    return a + b\n"),
    ("accents", "Café naïve résumé"),
    ("cjk", "日本語のテキスト、東京。"),
    ("emoji", "emoji 🙂🚀🎉"),
    ("byte_fallback", "Ωμέγα ∑ ≠ Ж ü"),
    ("crlf", "windows\r\nline\r\n"),
    ("unreachable_word", "xyzzy"),
    ("unreachable_inside", "say xyzzy\nxyzzy"),
    ("byte_token_text", "<0x41> and <0x0A>"),
    ("control_tokens", "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"),
    ("gemma4_turn", "<|turn>user\nWhy?<turn|>\n<|turn>model\nBecause.<turn|>"),
    ("specials_inside", "a<bos>b<eos>c<pad>d<unk>e"),
    ("tool_tokens", '<|tool_call>call:f{x:<|"|>1<|"|>}<tool_call|><|tool_response>ok<tool_response|>'),
    ("user_defined", "a<table>b<tr>c <table>\n<tr>"),
    ("think", "<|think|>\n\nthoughts"),
    ("empty", ""),
]


# Pieces of the seeded random texts: newline runs of every length around the tokens, spaces, tabs,
# carriage returns, special and user-defined tokens, byte-fallback characters, literal `▁`.
RANDOM_PIECES = ["\n"] * 8 + ["\n\n\n\n", " ", " ", "  ", "\t", "\r", "a", "the", " the", "quick", "fox",
                                "é", "日本", "🙂", "Ω", "▁", "xyzzy", "<0x41>", "def", "(", ")", ":", ",", "."]
RANDOM_PIECES += CONTROL + TOOL + USER_DEFINED + NAMED
RANDOM_TEXTS = 60


def random_texts() -> list[tuple[str, str]]:
    rng = random.Random(SEED)
    return [(f"random_{i:02}", "".join(rng.choice(RANDOM_PIECES) for _ in range(rng.randint(1, 40))))
            for i in range(RANDOM_TEXTS)]


def write_tokenizer(path: Path) -> None:
    """Train the BPE, add the unreachable normal tokens and the user-defined ones, and save it with
    a tokenizer config (PreTrainedTokenizerFast: transformers' GemmaTokenizer adds `<mask>`)."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("\n+"), behavior="isolated")
    specials = NAMED + CONTROL + TOOL + BYTES
    alphabet = sorted({c for text in CORPUS for c in text.replace(" ", "▁")})
    trainer = trainers.BpeTrainer(vocab_size=len(specials) + len(alphabet) + MERGES,
                                  special_tokens=specials, initial_alphabet=alphabet,
                                  limit_alphabet=len(alphabet), show_progress=False)
    tok.train_from_iterator(CORPUS * 4, trainer)
    trained = json.loads(tok.to_str())["model"]
    vocab: dict[str, int] = trained["vocab"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in trained["merges"]]
    for token in UNREACHABLE:
        if token in vocab:
            raise SystemExit(f"{token!r} was learned; it must stay unreachable")
        vocab[token] = len(vocab)
    final = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True,
                                 fuse_unk=True))
    final.normalizer = normalizers.Replace(" ", "▁")
    final.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    final.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in NAMED + CONTROL + TOOL])
    final.add_tokens([AddedToken(t, special=False, normalized=False) for t in USER_DEFINED])
    path.mkdir(parents=True, exist_ok=True)
    final.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": True, "add_eos_token": False,
        "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
        "extra_special_tokens": CONTROL + TOOL, "chat_template": CHAT_TEMPLATE,
    }, indent=2) + "\n")


def write_model(path: Path, vocab: int) -> None:
    torch.manual_seed(SEED)
    cfg = Gemma4TextConfig(
        vocab_size=vocab, vocab_size_per_layer_input=vocab, pad_token_id=PAD_ID, eos_token_id=EOS_ID,
        bos_token_id=BOS_ID, hidden_size=32, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, global_head_dim=32, sliding_window=8,
        layer_types=["sliding_attention", "full_attention"], hidden_size_per_layer_input=0,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                               "rope_theta": 1_000_000.0},
        },
        num_kv_shared_layers=0, final_logit_softcapping=30.0,
    )
    Gemma4ForCausalLM(cfg).eval().save_pretrained(path, safe_serialization=True)


class Server:
    """`llama-server` on a GGUF, for `/tokenize`, `/detokenize` and `/apply-template`."""

    def __init__(self, bin_dir: Path, gguf: Path, log: Path):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log = log.open("w")
        self.proc = subprocess.Popen(
            [str(bin_dir / "llama-server"), "-m", str(gguf), "--port", str(self.port), "-t", "2", "-c", "256",
             "-np", "1", "--no-webui", "--jinja", "-lv", "4"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None:
                    self.close()
                    raise RuntimeError(f"llama-server did not start on {gguf} (log: {log})")
                time.sleep(0.3)

    def post(self, endpoint: str, body: dict) -> dict:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{endpoint}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait(timeout=20)
        self.log.close()


def end_of_generation_ids(log: Path) -> list[int]:
    """The ids llama.cpp lists as end-of-generation tokens when it loads the vocabulary."""
    text = log.read_text(errors="replace")
    start = text.index("printing all EOG tokens")  # an info line: `-lv 4`
    ids = []
    for line in text[start:].splitlines()[1:]:
        m = re.search(r"-\s+(\d+) \('", line)
        if not m:
            break
        ids.append(int(m.group(1)))
    return sorted(ids)


def gguf_token_types(llama_cpp: Path, gguf: Path) -> list[int]:
    sys.path.insert(0, str(llama_cpp / "gguf-py"))
    from gguf import GGUFReader  # noqa: PLC0415

    return [int(t) for t in GGUFReader(str(gguf)).fields["tokenizer.ggml.token_type"].contents()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-cpp", type=Path, required=True, help="the vendored llama.cpp tree")
    ap.add_argument("--llama-bin", type=Path, required=True, help="llama.cpp's native tools (llama-server)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    if transformers.__version__ != EXPECTED_TRANSFORMERS:
        print(f"warning: transformers {transformers.__version__}, the fixture was made with "
              f"{EXPECTED_TRANSFORMERS}", file=sys.stderr)
    torch.use_deterministic_algorithms(True)
    args.out.mkdir(parents=True, exist_ok=True)
    gguf = args.out / "model.gguf"
    with tempfile.TemporaryDirectory() as tmp:
        hf = Path(tmp) / "hf"
        write_tokenizer(hf)
        hf_tok = AutoTokenizer.from_pretrained(hf)
        write_model(hf, len(hf_tok))
        subprocess.run([sys.executable, str(args.llama_cpp / "convert_hf_to_gguf.py"), str(hf),
                        "--outtype", "f16", "--outfile", str(gguf)], check=True)
        types = gguf_token_types(args.llama_cpp, gguf)
        log = Path(tmp) / "llama-server.log"
        server = Server(args.llama_bin, gguf, log)
        try:
            eog = end_of_generation_ids(log)
            # llama.cpp's attributes: control (3) and unknown (2) tokens, and the end-of-generation
            # ones it makes control, are what `token_to_piece(special = false)` leaves out.
            hidden = {i for i, t in enumerate(types) if t in (2, 3)} | set(eog)
            runs = []
            for name, text in TEXTS + random_texts():
                ids = server.post("/tokenize", {"content": text, "add_special": False,
                                                "parse_special": True})["tokens"]
                with_bos = server.post("/tokenize", {"content": text, "add_special": True,
                                                     "parse_special": True})["tokens"]
                shown = [i for i in ids if i not in hidden]
                runs.append({
                    "name": name, "text": text, "ids": ids, "ids_with_bos": with_bos,
                    "detokenized": server.post("/detokenize", {"tokens": ids})["content"],
                    "detokenized_without_special": server.post("/detokenize", {"tokens": shown})["content"],
                    "hf_ids": hf_tok.encode(text, add_special_tokens=False),
                })
            # llama.cpp renders `bos_token` as nothing and adds BOS when it tokenizes the prompt;
            # HF renders `<bos>` (which tokenizes to the same ids).
            prompt = server.post("/apply-template", {"messages": CHAT_MESSAGES})["prompt"]
            chat = {"messages": CHAT_MESSAGES, "prompt": prompt,
                    "ids_with_bos": server.post("/tokenize", {"content": prompt, "add_special": True,
                                                              "parse_special": True})["tokens"],
                    "hf_prompt": hf_tok.apply_chat_template(CHAT_MESSAGES, tokenize=False,
                                                            add_generation_prompt=True)}
        finally:
            server.close()
    differing = [r["name"] for r in runs if r["ids"] != r["hf_ids"]]
    print(f"{len(runs)} texts; HF's ids differ from llama.cpp's on {differing}", file=sys.stderr)
    (args.out / "tokenization.json").write_text(json.dumps({
        "vocab": len(types), "bos": BOS_ID, "end_of_generation": eog, "transformers": transformers.__version__,
        "runs": runs, "chat": chat}, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
