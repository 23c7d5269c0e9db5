#!/usr/bin/env python3
"""Record HF transformers' assisted generation with a *draft model* (a small causal LM passed as
`assistant_model`, classic draft-target speculative decoding) on the committed Gemma 4 fixtures.

Pairs of committed fixture targets with the same vocabulary size play target and draft model
(token ids only: the tokenizers differ, the vocabularies have the same size). For each pair and
prompt, HF runs plain greedy and assisted greedy with the draft model (constant 4 drafts a round,
no confidence cut-off); the two must be equal (asserted here), and the Rust test
`crates/runner/tests/draft_model_fixtures.rs` checks that the runner's draft-model proposer emits
exactly HF's assisted tokens.

Writes tests/fixtures/gemma4/draft_model_assisted.json. Usage (the venv of requirements.txt):

    python tools/gemma4_fixtures/record_draft_model.py          # writes the fixture
    python tools/gemma4_fixtures/record_draft_model.py --check  # compares with the committed one
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = REPO_ROOT / "tests" / "fixtures" / "gemma4"
OUT = FIXTURES / "draft_model_assisted.json"
PAD_ID, BOS_ID = 0, 2
NEW_TOKENS = 24
DRAFTS = 4

# (target fixture, draft-model fixture): same vocabulary size.
PAIRS = [
    ("e2b_like", "swa_basic"),  # PLE + KV sharing target, plain sliding-window draft (128)
    ("swa_basic", "e2b_like"),  # and the other way round
    ("mm_31b_dense", "k_eq_v"),  # published multimodal layout target, k_eq_v draft (96)
]


def load(case: str):
    model = AutoModelForCausalLM.from_pretrained(
        FIXTURES / case / "target", dtype=torch.float32, attn_implementation="eager"
    )
    model.eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = PAD_ID
    return model


def prompts(vocab: int, seed: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for length in (5, 13, 21):
        body = torch.randint(3, vocab, (length - 1,), generator=gen).tolist()
        out.append([BOS_ID] + body)
    # A prompt that repeats itself (the draft model sees a pattern).
    out.append([BOS_ID] + (out[0][1:] * 4))
    return out


def record() -> dict:
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    cases = []
    for target_case, draft_case in PAIRS:
        target, draft = load(target_case), load(draft_case)
        vocab = target.config.get_text_config().vocab_size
        assert draft.config.get_text_config().vocab_size == vocab, (target_case, draft_case)
        draft.generation_config.num_assistant_tokens = DRAFTS
        draft.generation_config.num_assistant_tokens_schedule = "constant"
        draft.generation_config.assistant_confidence_threshold = 0.0
        for i, prompt in enumerate(prompts(vocab, 7 + len(cases))):
            ids = torch.tensor([prompt])
            kwargs = dict(
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS,
                eos_token_id=None,
                pad_token_id=PAD_ID,
            )
            with torch.no_grad():
                greedy = target.generate(ids, **kwargs)[0, len(prompt):].tolist()
                assisted = target.generate(ids, assistant_model=draft, **kwargs)[0, len(prompt):].tolist()
            assert assisted == greedy, (target_case, draft_case, i, assisted, greedy)
            cases.append(
                {
                    "target": f"{target_case}/target",
                    "draft_model": f"{draft_case}/target",
                    "prompt_ids": prompt,
                    "max_new_tokens": NEW_TOKENS,
                    "num_assistant_tokens": DRAFTS,
                    "assisted_ids": assisted,
                }
            )
    return {
        "description": "HF assisted generation (greedy) with a draft model as assistant_model; "
        "recorded by tools/gemma4_fixtures/record_draft_model.py",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__.split("+")[0],
        "cases": cases,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare with the committed fixture")
    args = parser.parse_args()
    data = record()
    text = json.dumps(data, indent=1) + "\n"
    if args.check:
        same = OUT.read_text() == text
        print("identical" if same else f"{OUT} differs")
        return 0 if same else 1
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(data['cases'])} cases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
