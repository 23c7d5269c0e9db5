"""The committed prompts and tokenizer cases for the llama.cpp reference (record_llama_cpp.py).

PROMPTS are generated from (greedy, 32 tokens) and compared token for token and logit for logit.
TOKENIZER_CASES are only tokenized: whitespace runs, special tokens written in the text, byte
fallback, scripts and symbols. Changing either list means re-running record_llama_cpp.py.
"""

LONG = (
    "The old lighthouse stood at the edge of the cliff, its white paint peeling after decades of salt "
    "and wind. Every evening the keeper climbed the one hundred and twelve steps to light the lamp, "
    "and every morning he climbed them again to put it out. Ships passed far below, their captains "
    "trusting the beam to guide them around the rocks that had claimed so many vessels before. One "
    "winter night a storm rolled in from the north, heavier than any the keeper had seen in thirty "
    "years. The wind howled through the cracks in the windows, and the waves rose so high that spray "
    "reached the gallery. Still the lamp burned. Near midnight the keeper saw a small light "
    "flickering on the water, far closer to the rocks than any ship should be. He"
)

# (name, text): ten prompts of different kinds.
PROMPTS = [
    ("story", "Once upon a time"),
    ("code", 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'),
    ("list", "Here is a list of fruits:\n1. Apple\n2. Banana\n3."),
    ("qa", "Question: What is the capital of France?\nAnswer:"),
    ("repetition", "one two three four, one two three four, one two three four,"),
    ("unicode", "Les élèves ont mangé des crêpes 🥞 au café — « délicieux ! » 日本語も少し。"),
    ("leading_spaces", "   Indented  text with  double spaces and a tab\there:"),
    ("long", LONG),
    ("numbers", "The year 1969 was when humans first landed on the Moon. In 2024,"),
    (
        "turns",
        "<start_of_turn>user\nWrite one sentence about the sea.<end_of_turn>\n<start_of_turn>model\n",
    ),
]

# (name, text): tokenizer-only cases (no BOS added; special tokens in the text are parsed).
TOKENIZER_CASES = [
    ("empty", ""),
    ("space", " "),
    ("two_spaces", "  "),
    ("newlines", "\n\n\n"),
    ("hello", "Hello world"),
    ("hello_leading_space", " Hello world"),
    ("hello_double_space", "Hello  world"),
    ("whitespace_runs", "a  b   c    d     e          f"),
    ("forty_spaces", "x" + " " * 40 + "y"),
    ("tabs", "\tone\t\ttwo\t\t\tthree"),
    ("crlf", "line one\r\nline two\r\n"),
    ("trailing_spaces", "end   "),
    ("nbsp", "a\u00a0b\u2009c"),
    ("bos_in_text", "<bos>Hello"),
    ("turn_markers", "<start_of_turn>user\nHi!<end_of_turn>\n<start_of_turn>model\n"),
    ("unused_token", "<unused0> and <unused17>"),
    ("partial_special", "<start_of_tur n> <bos <eos>"),
    ("emoji", "🦀🦀 rust 🚀✨👩‍👩‍👧‍👦"),
    ("math_alnum", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛"),
    ("control_chars", "bell\x07 nul-free \x01\x02 esc\x1b[0m"),
    ("rare_cjk", "𠀀𠀁 龘 鱻"),
    ("korean", "안녕하세요, 세계!"),
    ("arabic", "مرحبا بالعالم"),
    ("hindi", "नमस्ते दुनिया"),
    ("russian", "Привет, мир! Ёжик."),
    ("greek_accents", "Ελληνικά ά έ ή ί ό ύ ώ"),
    ("code_indent", "fn main() {\n    let x = vec![1, 2, 3];\n    println!(\"{x:?}\");\n}\n"),
    ("url", "https://example.com/path?query=1&b=two#frag"),
    ("numbers", "3.14159 2,718 1e-6 0x1F 1_000_000"),
    ("punctuation", "...!!!???---___***///\\\\"),
    ("mixed_case", "HeLLo WoRLD camelCase snake_case SCREAMING_CASE"),
    ("long_word", "Pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism"),
    ("repeated_char", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
    ("json", '{"key": [1, 2, {"nested": null}], "s": "\\u00e9"}'),
    ("markdown", "# Title\n\n- item *one*\n- item **two**\n\n```python\nprint(1)\n```"),
]
