//! The tokenizer built from a Gemma 4 GGUF's embedded BPE (`tokenizer.ggml.model = "gemma4"`):
//! hand-built vocabularies (merge ranks, the newline-run rule, end-of-generation tokens, refusals),
//! and the converter-made fixture against llama.cpp's own `/tokenize` and `/detokenize`
//! (`tools/gemma4_gguf_fixtures/record_tokenizer.py`), token for token.

mod gguf_support;

use gguf_support::{fixture, gguf_bytes, write, Meta};
use runner::loading::gguf::GgufFile;
use runner::tokenizer::{ChatMessage, ChatOptions, PromptFormat, SpecialTokens, Tokenizer};

/// A GGUF holding only a `"gemma4"` vocabulary: `(token, type)` (llama.cpp types: 1 normal,
/// 2 unknown, 3 control, 4 user-defined, 6 byte), the merges, and `add_bos_token = false` (which
/// llama.cpp overrides for Gemma 4).
fn vocab_file(tokens: &[(&str, i32)], merges: &[&str]) -> (tempfile::TempDir, GgufFile) {
    let metadata = [
        ("general.architecture", Meta::Str("gemma4".into())),
        ("tokenizer.ggml.model", Meta::Str("gemma4".into())),
        (
            "tokenizer.ggml.tokens",
            Meta::Strs(tokens.iter().map(|t| t.0.to_string()).collect()),
        ),
        (
            "tokenizer.ggml.scores",
            Meta::F32s(vec![-1000.0; tokens.len()]),
        ),
        (
            "tokenizer.ggml.token_type",
            Meta::I32s(tokens.iter().map(|t| t.1).collect()),
        ),
        (
            "tokenizer.ggml.merges",
            Meta::Strs(merges.iter().map(|m| m.to_string()).collect()),
        ),
        ("tokenizer.ggml.bos_token_id", Meta::U32(2)),
        ("tokenizer.ggml.eos_token_id", Meta::U32(1)),
        ("tokenizer.ggml.unknown_token_id", Meta::U32(3)),
        ("tokenizer.ggml.add_space_prefix", Meta::Bool(false)),
        ("tokenizer.ggml.add_bos_token", Meta::Bool(false)),
    ];
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "vocab.gguf", &gguf_bytes(3, &metadata, &[]));
    let file = GgufFile::open(&path).unwrap();
    (dir, file)
}

/// ids 0..: `<pad> <eos> <bos> <unk> <turn|> \n \n\n \n\n\n\n a b ab ▁ ▁a <0xC3> <0xA9> ba aa`;
/// `<turn|>` is a normal token in the file (llama.cpp makes it control: it ends generation),
/// the run of 4 newlines and `aa` are tokens no merge reaches.
const TOKENS: [(&str, i32); 17] = [
    ("<pad>", 3),
    ("<eos>", 3),
    ("<bos>", 3),
    ("<unk>", 2),
    ("<turn|>", 1),
    ("\n", 1),
    ("\n\n", 1),
    ("\n\n\n\n", 1),
    ("a", 1),
    ("b", 1),
    ("ab", 1),
    ("\u{2581}", 1),
    ("\u{2581}a", 1),
    ("<0xC3>", 6),
    ("<0xA9>", 6),
    ("ba", 1),
    ("aa", 1),
];

fn tiny(merges: &[&str]) -> Tokenizer {
    let (_dir, file) = vocab_file(&TOKENS, merges);
    Tokenizer::from_gguf(&file).unwrap()
}

#[test]
fn merges_apply_by_rank_and_the_first_rank_of_a_repeat_counts() {
    // ab (rank 1) before ba (rank 3).
    let t = tiny(&["\n \n", "a b", "\u{2581} a", "b a"]);
    assert_eq!(t.encode_plain("aba").unwrap(), [10, 8]);
    // The repeated ba keeps rank 1, before ab (rank 2).
    let t = tiny(&["\n \n", "b a", "a b", "b a", "\u{2581} a"]);
    assert_eq!(t.encode_plain("aba").unwrap(), [8, 15]);
    // Spaces are ▁, with no prefix space.
    assert_eq!(t.encode_plain(" a a").unwrap(), [12, 12]);
    assert_eq!(t.encode_plain("a").unwrap(), [8]);
    // A token no merge reaches is not produced, even as a whole word.
    assert_eq!(t.encode_plain("aa").unwrap(), [8, 8]);
}

#[test]
fn a_newline_run_that_is_a_token_is_that_token_and_others_merge() {
    let t = tiny(&["\n \n", "a b"]);
    let runs = |k: usize| t.encode_plain(&"\n".repeat(k)).unwrap();
    assert_eq!(runs(1), [5]);
    assert_eq!(runs(2), [6]);
    assert_eq!(runs(3), [6, 5]);
    assert_eq!(runs(4), [7]); // a token, though no merge makes it
    assert_eq!(runs(5), [6, 6, 5]);
    assert_eq!(runs(8), [6, 6, 6, 6]); // not two runs of 4
    assert_eq!(t.encode_plain("a\n\n\n\nb").unwrap(), [8, 7, 9]);
    assert_eq!(t.encode_plain("ab\n\n\n\n\nab").unwrap(), [10, 6, 6, 5, 10]);
    assert_eq!(t.encode_plain("\n\n\n\n<turn|>\n\n").unwrap(), [7, 4, 6]);
    assert_eq!(t.decode(&[8, 7, 9, 6, 5]).unwrap(), "a\n\n\n\nb\n\n\n");
}

#[test]
fn special_tokens_bytes_and_end_of_generation() {
    let t = tiny(&["\n \n", "a b", "\u{2581} a"]);
    // Control, unknown and end-of-generation tokens are cut out of the raw text.
    assert_eq!(
        t.encode_plain("a<turn|>b<unk>é").unwrap(),
        [8, 4, 9, 3, 13, 14]
    );
    assert_eq!(t.decode(&[8, 4, 12, 13, 14, 3]).unwrap(), "a aé");
    assert_eq!(
        t.decode_with(&[8, 4, 12, 3], SpecialTokens::Keep).unwrap(),
        "a<turn|> a<unk>"
    );
    // llama.cpp adds BOS to Gemma 4 prompts whatever add_bos_token says.
    assert_eq!(t.encode_prompt("ab", PromptFormat::Raw).unwrap(), [2, 10]);
    assert_eq!(t.bos_id(), Some(2));
    assert_eq!(t.eos_ids(), [1, 4]);
}

#[test]
fn broken_vocabularies_are_refused() {
    let refused = |tokens: &[(&str, i32)], merges: &[&str]| -> String {
        let (_dir, file) = vocab_file(tokens, merges);
        Tokenizer::from_gguf(&file).unwrap_err().to_string()
    };
    let err = refused(&TOKENS, &["a b", "b b"]);
    assert!(err.contains("merges[1]") && err.contains("\"bb\""), "{err}");
    let err = refused(&TOKENS, &["a c"]);
    assert!(err.contains("\"c\" is not a token"), "{err}");
    let repeated = [
        ("<pad>", 3),
        ("<eos>", 3),
        ("<bos>", 3),
        ("<unk>", 2),
        ("a", 1),
        ("a", 1),
    ];
    let err = refused(&repeated, &[]);
    assert!(err.contains("repeats tokens"), "{err}");
    // Gemma 4's merges are required, as llama.cpp requires them.
    let metadata = [
        ("tokenizer.ggml.model", Meta::Str("gemma4".into())),
        ("tokenizer.ggml.tokens", Meta::Strs(vec!["a".into()])),
    ];
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "no_merges.gguf", &gguf_bytes(3, &metadata, &[]));
    let err = Tokenizer::from_gguf(&GgufFile::open(&path).unwrap()).unwrap_err();
    assert!(err.to_string().contains("tokenizer.ggml.merges"), "{err}");
}

#[test]
fn other_vocabulary_kinds_name_the_supported_ones() {
    let metadata = [
        ("tokenizer.ggml.model", Meta::Str("gpt2".into())),
        ("tokenizer.ggml.tokens", Meta::Strs(vec!["a".into()])),
        ("tokenizer.ggml.eos_token_id", Meta::U32(0)),
    ];
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "gpt2.gguf", &gguf_bytes(3, &metadata, &[]));
    let file = GgufFile::open(&path).unwrap();
    let err = Tokenizer::from_gguf(&file).unwrap_err().to_string();
    assert!(
        err.contains("\"gpt2\"") && err.contains("\"llama\"") && err.contains("\"gemma4\""),
        "{err}"
    );
    assert!(err.contains("--tokenizer"), "{err}");
    // The settings for a --tokenizer file are still read.
    assert_eq!(Tokenizer::gguf_settings(&file).unwrap().eos, [0]);
}

fn ids(value: &serde_json::Value) -> Vec<u32> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn recorded() -> (Tokenizer, serde_json::Value) {
    let file = GgufFile::open(&fixture("gemma4_gguf/tokenizer/model.gguf")).unwrap();
    let tokenizer = Tokenizer::from_gguf(&file).unwrap();
    let path = fixture("gemma4_gguf/tokenizer/tokenization.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (record_tokenizer.py)", path.display()));
    (tokenizer, serde_json::from_str(&text).unwrap())
}

#[test]
fn converter_fixture_tokenizes_as_llama_cpp() {
    let (tokenizer, json) = recorded();
    assert_eq!(
        tokenizer.vocab_size(),
        json["vocab"].as_u64().unwrap() as usize
    );
    let bos = json["bos"].as_u64().unwrap() as u32;
    let runs = json["runs"].as_array().unwrap();
    assert!(runs.len() >= 90);
    for run in runs {
        let name = run["name"].as_str().unwrap();
        let text = run["text"].as_str().unwrap();
        let got = tokenizer.encode_plain(text).unwrap();
        assert_eq!(got, ids(&run["ids"]), "{name}: {text:?}");
        // The one deliberate difference: a text that starts with BOS gets no second one
        // (llama.cpp adds it, with a warning).
        let mut want = ids(&run["ids_with_bos"]);
        if got.first() == Some(&bos) {
            assert_eq!(want[..2], [bos, bos], "{name}");
            want.remove(0);
        }
        let with_bos = tokenizer.encode_prompt(text, PromptFormat::Raw).unwrap();
        assert_eq!(with_bos, want, "{name}: {text:?}");
        assert_eq!(
            tokenizer.decode_with(&got, SpecialTokens::Keep).unwrap(),
            run["detokenized"].as_str().unwrap(),
            "{name}"
        );
        assert_eq!(
            tokenizer.decode(&got).unwrap(),
            run["detokenized_without_special"].as_str().unwrap(),
            "{name}"
        );
    }
}

#[test]
fn converter_fixture_saved_as_tokenizer_json_tokenizes_the_same() {
    // `--tokenizer FILE` with a file saved from the embedded vocabulary.
    let (tokenizer, json) = recorded();
    let saved = tokenizer.inner().to_string(false).unwrap();
    let reloaded = Tokenizer::from_json(&saved, tokenizer.settings().clone()).unwrap();
    for run in json["runs"].as_array().unwrap() {
        let text = run["text"].as_str().unwrap();
        let got = reloaded.encode_plain(text).unwrap();
        assert_eq!(got, ids(&run["ids"]), "{}", run["name"]);
        assert_eq!(
            reloaded.decode_with(&got, SpecialTokens::Keep).unwrap(),
            run["detokenized"].as_str().unwrap()
        );
    }
}

#[test]
fn converter_fixture_special_tokens() {
    let (tokenizer, json) = recorded();
    assert_eq!(
        tokenizer.bos_id(),
        Some(json["bos"].as_u64().unwrap() as u32)
    );
    assert!(tokenizer.settings().add_bos);
    // llama.cpp's end-of-generation tokens: <eos>, <end_of_turn>, <turn|> and <|tool_response>
    // (a user-defined token in the file).
    assert_eq!(tokenizer.eos_ids(), ids(&json["end_of_generation"]));
    let id = |text: &str| tokenizer.inner().token_to_id(text).unwrap();
    for text in ["<eos>", "<turn|>", "<|tool_response>"] {
        assert!(tokenizer.eos_ids().contains(&id(text)), "{text}");
    }
}

#[test]
fn converter_fixture_chat_template_renders_a_user_turn() {
    let (tokenizer, json) = recorded();
    let chat = &json["chat"];
    let content = chat["messages"][0]["content"].as_str().unwrap();
    let template = tokenizer.chat_template().unwrap();
    let rendered = template
        .render(
            &[ChatMessage::text("user", content)],
            &ChatOptions::default(),
        )
        .unwrap();
    // HF renders `{{ bos_token }}` as `<bos>`; llama.cpp renders nothing and adds BOS itself.
    assert_eq!(rendered, chat["hf_prompt"].as_str().unwrap());
    assert_eq!(
        rendered,
        format!("<bos>{}", chat["prompt"].as_str().unwrap())
    );
    assert_eq!(
        rendered,
        "<bos><|turn>user\nWhy is the sky blue?<turn|>\n<|turn>model\n"
    );
    let got = tokenizer
        .encode_prompt(content, PromptFormat::Chat)
        .unwrap();
    assert_eq!(got, ids(&chat["ids_with_bos"]));
}

#[test]
fn e2b_like_fixture_prompts_match_the_reference() {
    let file = GgufFile::open(&fixture("gemma4_gguf/e2b_like/target-f32.gguf")).unwrap();
    let tokenizer = Tokenizer::from_gguf(&file).unwrap();
    let text = std::fs::read_to_string(fixture("gemma4_gguf/e2b_like/reference.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let runs = json["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    for run in runs {
        let prompt = run["text"].as_str().unwrap();
        let got = tokenizer.encode_prompt(prompt, PromptFormat::Raw).unwrap();
        assert_eq!(got, ids(&run["prompt_ids"]), "{prompt:?}");
        assert_eq!(tokenizer.decode(&got).unwrap(), prompt);
    }
}

#[cfg(feature = "structured")]
#[test]
fn converter_fixture_vocabulary_constrains_newline_runs() {
    use mtp_core::constraint::ConstraintFactory;
    use runner::structured::{GrammarVocabulary, OutputFormat};
    // The grammar engine reads every token's bytes from the tokenizer: the newline runs (added
    // tokens matched on the normalized text) are their newlines.
    let (tokenizer, _) = recorded();
    let vocab = tokenizer.vocab_size();
    let vocabulary = GrammarVocabulary::new(&tokenizer, vocab).expect("the vocabulary builds");
    let factory = vocabulary
        .compile(&OutputFormat::Regex("[\na]+".into()))
        .expect("the regex compiles");
    let mut constraint = factory.start(vocab).unwrap();
    let allowed = constraint.mask().unwrap().ids();
    let id = |text: &str| tokenizer.inner().token_to_id(text).unwrap();
    let mut want: Vec<u32> = [1, 2, 3, 4, 8].map(|k| id(&"\n".repeat(k))).to_vec();
    want.extend(["a", "<0x0A>", "<0x61>"].map(id));
    want.sort_unstable();
    assert_eq!(allowed, want);
}
