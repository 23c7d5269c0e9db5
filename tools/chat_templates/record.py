#!/usr/bin/env python3
"""Record what HF transformers' `apply_chat_template` renders, for the Rust chat-template tests.

For every template directory below, the script renders a set of conversations with
`AutoTokenizer.from_pretrained(dir).apply_chat_template(...)` and writes, next to the template,
`hf_cases.json`: per case the messages, the options, HF's rendered text and HF's token ids
(`tokenize=True`, which encodes the text without adding special tokens). The Rust tests in
`crates/runner/tests/chat_template.rs` render the same conversations with minijinja and compare.

Template directories (inputs, committed):
  tests/fixtures/chat_templates/gemma4/   Gemma 4's -it template (chat_template.jinja) with a small
                                          BPE tokenizer carrying Gemma 4's turn/channel tokens
                                          (written by this script from models/default's tokenizer)
  models/default/target/                  the default pair (template in tokenizer_config.json)
  tests/fixtures/chat_templates/features/ a template exercising the Jinja/Python features HF
                                          templates use (tojson, namespace, dictsort, str methods,
                                          loop controls, raise_exception)

Run (transformers 5.24.0, no torch needed):
  python3 -m venv /work/venv-serve && /work/venv-serve/bin/pip install transformers==5.24.0 jinja2
  /work/venv-serve/bin/python tools/chat_templates/record.py
"""

import json
import pathlib

import transformers
from tokenizers import AddedToken, Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from transformers import AutoTokenizer

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "chat_templates"

# Gemma 4's control tokens (the markers its template writes).
GEMMA4_SPECIALS = [
    "<|turn>", "<turn|>", "<|channel>", "<channel|>", "<|think|>", "<|tool>", "<tool|>",
    "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>", '<|"|>',
    "<|image|>", "<|audio|>", "<|video|>",
]


def write_gemma4_tokenizer(out: pathlib.Path) -> None:
    """The default pair's BPE tokenizer plus Gemma 4's control tokens, and HF side files."""
    tok = Tokenizer.from_file(str(ROOT / "models/default/target/tokenizer.json"))
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in GEMMA4_SPECIALS])
    tok.save(str(out / "tokenizer.json"))
    turn_end = tok.token_to_id("<turn|>")
    config = json.loads((ROOT / "models/default/target/tokenizer_config.json").read_text())
    config.pop("chat_template", None)  # the template lives in chat_template.jinja, as Google ships it
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    # Gemma 4 -it checkpoints stop at <eos> and <turn|> (a list, as HF's generation_config has it).
    generation = {"bos_token_id": 2, "eos_token_id": [1, turn_end], "pad_token_id": 0}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")


def write_word_tokenizer(out: pathlib.Path) -> None:
    """A few-word tokenizer: the features template's cases compare text, the ids only need a vocabulary."""
    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3}
    tok = Tokenizer(WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = WhitespaceSplit()
    tok.add_special_tokens([AddedToken(s, special=True) for s in vocab])
    tok.save(str(out / "tokenizer.json"))
    config = {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>",
              "tokenizer_class": "PreTrainedTokenizerFast"}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def gemma4_cases():
    user = {"role": "user", "content": "Hello, who are you?"}
    return [
        ("user_only", [user], {}),
        ("system_and_user", [{"role": "system", "content": "  You are terse.\n"}, user], {}),
        (
            "multi_turn_strips_thinking",
            [
                user,
                {"role": "assistant", "content": "<|channel>thought\nmusing<channel|>I am a model."},
                {"role": "user", "content": "And what do you do?  "},
            ],
            {},
        ),
        ("developer_role", [{"role": "developer", "content": "Be kind."}, user], {}),
        ("enable_thinking", [{"role": "system", "content": "Think."}, user], {"enable_thinking": True}),
        (
            "content_parts",
            [{"role": "user", "content": [{"type": "text", "text": " part one "}, {"type": "text", "text": "two"}]}],
            {},
        ),
        ("unicode", [{"role": "user", "content": "café 日本 🙂 — ok?"}], {}),
        ("no_generation_prompt", [user, {"role": "assistant", "content": "Hi."}], {"add_generation_prompt": False}),
        ("tools_declared", [weather_question()], {"tools": [WEATHER_TOOL]}),
        (
            "tool_call_and_result",
            [
                weather_question(),
                {"role": "assistant", "content": "", "tool_calls": [
                    {"type": "function", "function": {"name": "get_weather",
                                                      "arguments": {"city": "Paris", "days": 2}}}]},
                {"role": "tool", "name": "get_weather", "content": "sunny"},
            ],
            {"tools": [WEATHER_TOOL]},
        ),
    ]


# A tool as OpenAI's and ollama's clients send it (HF templates take the same shape).
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city"},
                           "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}


def weather_question():
    return {"role": "user", "content": "What is the weather in Paris?"}


def default_pair_cases():
    user = {"role": "user", "content": "In the beginning"}
    return [
        ("user_only", [user], {}),
        ("system_and_user", [{"role": "system", "content": "Speak as the KJV."}, user], {}),
        ("multi_turn", [user, {"role": "assistant", "content": " God created "}, user], {}),
    ]


def feature_cases():
    return [
        (
            "features",
            [
                {"role": "system", "content": "sys: a, b"},
                {"role": "user", "content": "abc def \"quoted\" <tag> & é"},
                {"role": "assistant", "content": "x"},
            ],
            {"tools": [{"name": "f", "args": {"b": [1, 2.5, None, True], "a": "s"}}]},
        ),
        ("raises", [{"role": "assistant", "content": "first"}], {"tools": [{"name": "g", "args": {}}]}),
    ]


def render(tokenizer, messages, options):
    kwargs = {"add_generation_prompt": True, **options}
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)
    except Exception as e:  # the template raised (raise_exception): record the message
        return {"error": str(e)}
    ids = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False, **kwargs)
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):
        ids = ids["input_ids"]
    # HF tokenizes the rendered text with add_special_tokens=False: check that reading.
    assert ids == tokenizer(text, add_special_tokens=False)["input_ids"], "unexpected tokenization"
    return {"text": text, "ids": list(ids)}


def record(directory: pathlib.Path, cases, out: pathlib.Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    recorded = []
    for name, messages, options in cases:
        entry = {"name": name, "messages": messages, "options": options}
        entry.update(render(tokenizer, messages, options))
        recorded.append(entry)
    doc = {"transformers": transformers.__version__, "cases": recorded}
    out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    print(f"{out.relative_to(ROOT)}: {len(recorded)} cases")


def main() -> None:
    gemma4 = FIXTURES / "gemma4"
    write_gemma4_tokenizer(gemma4)
    record(gemma4, gemma4_cases(), gemma4 / "hf_cases.json")
    record(ROOT / "models/default/target", default_pair_cases(), FIXTURES / "default_pair_hf_cases.json")
    features = FIXTURES / "features"
    write_word_tokenizer(features)
    record(features, feature_cases(), features / "hf_cases.json")


if __name__ == "__main__":
    main()
