#!/usr/bin/env python3
"""Tiny Gemma 3 text fixtures, from the real tools: HF transformers (`Gemma3ForCausalLM`,
save_pretrained, generate) and llama.cpp's own converter (`convert_hf_to_gguf.py`).

For each case, into tests/fixtures/gemma3/<case>/:

  hf/config.json, hf/model.safetensors   save_pretrained of a seeded random tiny Gemma3ForCausalLM (f32)
  hf/tokenizer.model                     a tiny SentencePiece BPE model (trained here, byte fallback,
                                         Gemma's special ids), + tokenizer_config.json (added tokens)
  model-f32.gguf, model-f16.gguf         [gguf cases] convert_hf_to_gguf.py --outtype f32 / f16 of hf/
  reference.json                         prompt ids, HF logits of the prompt (no cache), HF greedy ids

Every RMSNorm weight is perturbed (HF's init makes them 0, i.e. a scale of exactly 1 + 0, which would
hide a missing `1 + w`). CPU, f32, deterministic algorithms, one thread, attention `sdpa`.

    python3 -m venv /tmp/g3-venv && /tmp/g3-venv/bin/pip install -r tools/gemma3_fixtures/requirements.txt
    # llama.cpp's converter: the vendored llama.cpp of the llama-cpp-python sdist (PyPI)
    pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d /tmp/llsdist && tar xzf ...
    /tmp/g3-venv/bin/python tools/gemma3_fixtures/make_fixtures.py \
        --llama-cpp /tmp/llsdist/llama_cpp_python-0.3.36/vendor/llama.cpp
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import transformers
from transformers import (
    Gemma3Config,
    Gemma3ForCausalLM,
    Gemma3ForConditionalGeneration,
    Gemma3TextConfig,
    SiglipVisionConfig,
)

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "fixtures" / "gemma3"
PAD_ID, EOS_ID, BOS_ID, UNK_ID = 0, 1, 2, 3

# The SentencePiece training text (also what the prompts are drawn from).
CORPUS = [
    "Once upon a time, there was a little robot who loved to read books about the sea.",
    "The quick brown fox jumps over the lazy dog while the cat watches from the window.",
    "Every morning the baker opens the shop and the smell of fresh bread fills the street.",
    "def add(a, b):    return a + b  # a tiny function with  two  spaces",
    "In the beginning the river was small, but after the rain it grew wide and fast.",
    "She said: hello, world! Are you ready for the story of the stars and the moon?",
    "Numbers like 12, 345 and 6789 appear in lists: one, two, three, four, five.",
    "The garden had roses, tulips and sunflowers; the children played there all day long.",
    "Les élèves ont mangé des crêpes au café, puis ils sont rentrés à la maison.",
    "A storm came from the north and the lighthouse keeper climbed the stairs again.",
]
USER_DEFINED = ["\n", "\u2581\u2581", "\u2581\u2581\u2581", "<table>"]
CONTROL = ["<start_of_turn>", "<end_of_turn>"]
VOCAB = 400

PROMPT = "Once upon a time, there was a little robot who loved the sea and the stars."
GGUF_PROMPTS = [PROMPT, "def add(a, b):\n    return a  +  b", "<start_of_turn>user\nhello<end_of_turn>\n"]

CASES = {
    # 6 layers: llama.cpp's Gemma 3 sliding pattern is fixed at 6 (5 sliding, then 1 full) unless
    # the GGUF says otherwise, and the converter does not write it; HF's default pattern is the same.
    # query_pre_attn_scalar = head_dim, as llama.cpp assumes for every size but 27B.
    "tiny": dict(
        config=dict(hidden_size=32, intermediate_size=48, num_hidden_layers=6, num_attention_heads=2,
                    num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16, sliding_window=8,
                    max_position_embeddings=256),
        gguf=True, new_tokens=16,
    ),
    # HF-only: its own pieces that the GGUF converter cannot carry (or llama.cpp ignores):
    # query_pre_attn_scalar != head_dim, final logit softcapping, linear RoPE scaling on full layers,
    # explicit layer_types, local RoPE base 5e3.
    "scaled": dict(
        config=dict(hidden_size=32, intermediate_size=40, num_hidden_layers=4, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=24, sliding_window=6,
                    max_position_embeddings=256, final_logit_softcapping=30.0,
                    layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
                    rope_parameters={
                        "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1_000_000.0},
                        "sliding_attention": {"rope_type": "default", "rope_theta": 5_000.0},
                    }),
        gguf=False, new_tokens=16,
    ),
    # The layout Google publishes (gemma-3-4b-it and up): Gemma3ForConditionalGeneration, config
    # model_type "gemma3" with the text model in text_config, a (tiny) SigLIP vision tower and the
    # multimodal projector in the same file; save_pretrained writes the text model under
    # `language_model.model.` and the tower under `vision_tower.` as the published files have it.
    # A text prompt never runs the tower.
    "multimodal": dict(
        config=dict(hidden_size=32, intermediate_size=48, num_hidden_layers=6, num_attention_heads=2,
                    num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16, sliding_window=8,
                    max_position_embeddings=256),
        gguf=False, new_tokens=16,
        vision=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                    image_size=28, patch_size=14),
    ),
}


def setup_determinism() -> None:
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)


def train_spm(out_dir: Path) -> "sentencepiece.SentencePieceProcessor":
    import sentencepiece as spm

    # Relative paths inside the temp dir: the model records its trainer's input and prefix, and
    # a random directory name would make the file differ from run to run.
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "corpus.txt").write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
        cwd = os.getcwd()
        os.chdir(tmp)
        try:
            spm.SentencePieceTrainer.train(
                input="corpus.txt", model_prefix="m", model_type="bpe", vocab_size=VOCAB,
                character_coverage=1.0, byte_fallback=True, pad_id=PAD_ID, eos_id=EOS_ID, bos_id=BOS_ID,
                unk_id=UNK_ID, pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>", unk_piece="<unk>",
                control_symbols=CONTROL, user_defined_symbols=USER_DEFINED, add_dummy_prefix=False,
                remove_extra_whitespaces=False, normalization_rule_name="identity", split_digits=True,
                num_threads=1, minloglevel=2, allow_whitespace_only_pieces=True,
            )
        finally:
            os.chdir(cwd)
        shutil.copy(Path(tmp) / "m.model", out_dir / "tokenizer.model")
    sp = spm.SentencePieceProcessor(model_file=str(out_dir / "tokenizer.model"))
    assert sp.vocab_size() == VOCAB
    return sp


def write_tokenizer_config(out_dir: Path, sp) -> None:
    """Added tokens as Gemma's tokenizer_config.json lists them (the converter reads their types)."""
    decoder = {}
    for i in range(sp.vocab_size()):
        piece = sp.id_to_piece(i)
        if i <= UNK_ID or piece in CONTROL:
            decoder[str(i)] = {"content": piece, "special": True}
        elif piece in USER_DEFINED:
            decoder[str(i)] = {"content": piece, "special": False}
    cfg = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<bos>", "eos_token": "<eos>",
           "pad_token": "<pad>", "unk_token": "<unk>", "added_tokens_decoder": decoder}
    (out_dir / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1, ensure_ascii=False) + "\n")


def perturb_norms(model: torch.nn.Module, gen: torch.Generator) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.3 * torch.randn(p.shape, generator=gen))


def build(case: dict, vocab: int, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    config = Gemma3TextConfig(vocab_size=vocab, rms_norm_eps=1e-6, pad_token_id=PAD_ID, eos_token_id=EOS_ID,
                              bos_token_id=BOS_ID, tie_word_embeddings=True, **case["config"])
    if "vision" in case:
        # Special image ids inside the tiny vocabulary (unused by text prompts).
        config = Gemma3Config(text_config=config, vision_config=SiglipVisionConfig(**case["vision"]),
                              mm_tokens_per_image=4, boi_token_index=5, eoi_token_index=6, image_token_index=7,
                              tie_word_embeddings=True)
        config._attn_implementation = "sdpa"
        model = Gemma3ForConditionalGeneration(config).eval()
        text = model.model.language_model
    else:
        config._attn_implementation = "sdpa"
        model = Gemma3ForCausalLM(config).eval()
        text = model.model
    # Larger weights than HF's init (std 0.02 everywhere makes the continuation one repeated token).
    with torch.no_grad():
        text.embed_tokens.weight.mul_(3.0)
        for name, p in text.named_parameters():
            if name.endswith("proj.weight"):
                p.mul_(8.0)
    perturb_norms(model, torch.Generator().manual_seed(seed + 1))
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = PAD_ID
    return model


def reference_run(model, ids: list[int], new_tokens: int, all_rows: bool) -> dict:
    x = torch.tensor([ids])
    with torch.no_grad():
        logits = model(x, use_cache=False).logits[0]
        out = model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=new_tokens,
                             min_new_tokens=0, eos_token_id=None, pad_token_id=PAD_ID)[0, len(ids):]
    greedy = out.tolist()
    assert len(greedy) == new_tokens
    assert greedy[0] == int(logits[-1].argmax()), "first greedy token != argmax of the prefill logits"
    assert len(set(greedy)) >= 4, f"degenerate greedy continuation {greedy}"
    rows = logits if all_rows else logits[-1:]
    return {"prompt_ids": ids, "greedy_ids": greedy, "logits_from": len(ids) - len(rows),
            "logits": [[round(float(v), 5) for v in row] for row in rows]}


def convert(llama_cpp: Path, hf_dir: Path, out: Path, outtype: str) -> None:
    # The converter's own gguf-py (vendored beside it): PyPI's gguf 0.19.0 predates the converter's
    # architecture table (it lacks MODEL_ARCH.DFLASH, which conversion/qwen.py needs at import).
    env = {k: v for k, v in os.environ.items() if k != "NO_LOCAL_GGUF"}
    cmd = [sys.executable, str(llama_cpp / "convert_hf_to_gguf.py"), str(hf_dir), "--outfile", str(out),
           "--outtype", outtype]
    print("+", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)


def make_case(name: str, case: dict, out_root: Path, llama_cpp: Path | None, seed: int) -> None:
    case_dir = out_root / name
    if case_dir.exists():
        shutil.rmtree(case_dir)
    hf_dir = case_dir / "hf"
    hf_dir.mkdir(parents=True)
    sp = train_spm(hf_dir)
    model = build(case, sp.vocab_size(), seed)
    model.save_pretrained(str(hf_dir), safe_serialization=True)
    write_tokenizer_config(hf_dir, sp)
    prompts = GGUF_PROMPTS if case["gguf"] else [PROMPT]
    runs = []
    for k, text in enumerate(prompts):
        # SentencePiece's own ids (control tokens written in the text are pieces to it, so
        # the chat-marker prompt is built from pieces).
        ids = [BOS_ID] + encode_with_specials(sp, text)
        runs.append({"text": text, **reference_run(model, ids, case["new_tokens"], all_rows=k == 0)})
    assert len(runs[0]["prompt_ids"]) > case["config"]["sliding_window"], "prompt must exceed the window"
    ref = {
        "case": name,
        "source": f"HF transformers {transformers.__version__}, torch {torch.__version__} "
                  "(tools/gemma3_fixtures/make_fixtures.py)",
        "config": case["config"],
        "logits": "HF forward over prompt_ids without a cache, f32, rounded to 5 decimals: rows for "
                  "positions logits_from.. (every position of the first run, the last one of the others)",
        "runs": runs,
    }
    if case["gguf"]:
        if llama_cpp is None:
            raise SystemExit("--llama-cpp DIR is needed for the GGUF cases")
        for outtype in ("f32", "f16"):
            convert(llama_cpp, hf_dir, case_dir / f"model-{outtype}.gguf", outtype)
        ref["gguf"] = "model-f32.gguf / model-f16.gguf: convert_hf_to_gguf.py --outtype f32 / f16 of hf/"
    (case_dir / "reference.json").write_text(json.dumps(ref, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {case_dir}", file=sys.stderr)


def encode_with_specials(sp, text: str) -> list[int]:
    ids: list[int] = []
    rest = text
    while rest:
        hits = [(rest.find(t), t) for t in CONTROL if rest.find(t) >= 0]
        if not hits:
            ids += sp.encode(rest)
            break
        at, tok = min(hits)
        if at:
            ids += sp.encode(rest[:at])
        ids.append(sp.piece_to_id(tok))
        rest = rest[at + len(tok):]
    return ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--llama-cpp", type=Path, help="llama.cpp source tree (convert_hf_to_gguf.py)")
    parser.add_argument("--cases", nargs="*", default=list(CASES))
    args = parser.parse_args()
    setup_determinism()
    for name in args.cases:
        # Seeded by the case's place in CASES, so one case can be regenerated alone.
        seed = 1234 + 17 * list(CASES).index(name)
        make_case(name, CASES[name], args.out, args.llama_cpp, seed=seed)


if __name__ == "__main__":
    main()
