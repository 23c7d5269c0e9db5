//! The tokenizer built from a GGUF's embedded SentencePiece vocabulary: a hand-built vocabulary
//! (merge order by score, byte fallback, added tokens, the space prefix), the converter-made
//! fixture against SentencePiece itself, and the real model against llama.cpp token for token.

mod gguf_support;

use gguf_support::{fixture, gguf_bytes, llama_cpp_reference, real_model, write, Meta};
use runner::loading::gguf::GgufFile;
use runner::tokenizer::{PromptFormat, Tokenizer};

/// `(token, score, type)` (llama.cpp types: 1 normal, 2 unknown, 3 control, 4 user-defined,
/// 6 byte).
fn vocab_file(
    tokens: &[(&str, f32, i32)],
    add_space_prefix: bool,
) -> (tempfile::TempDir, Tokenizer) {
    let metadata = [
        ("general.architecture", Meta::Str("gemma3".into())),
        ("tokenizer.ggml.model", Meta::Str("llama".into())),
        (
            "tokenizer.ggml.tokens",
            Meta::Strs(tokens.iter().map(|t| t.0.to_string()).collect()),
        ),
        (
            "tokenizer.ggml.scores",
            Meta::F32s(tokens.iter().map(|t| t.1).collect()),
        ),
        (
            "tokenizer.ggml.token_type",
            Meta::I32s(tokens.iter().map(|t| t.2).collect()),
        ),
        ("tokenizer.ggml.bos_token_id", Meta::U32(2)),
        ("tokenizer.ggml.eos_token_id", Meta::U32(1)),
        ("tokenizer.ggml.unknown_token_id", Meta::U32(3)),
        (
            "tokenizer.ggml.add_space_prefix",
            Meta::Bool(add_space_prefix),
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "vocab.gguf", &gguf_bytes(3, &metadata, &[]));
    let file = GgufFile::open(&path).unwrap();
    let tokenizer = Tokenizer::from_gguf(&file).unwrap();
    (dir, tokenizer)
}

/// ids 0..: `<pad> <eos> <bos> <unk> <start_of_turn> \n ▁ a b c ab bc ▁a <0xC3> <0xA9>`.
fn tiny_vocab(ab: f32, bc: f32) -> Vec<(&'static str, f32, i32)> {
    vec![
        ("<pad>", -1000.0, 3),
        ("<eos>", -1000.0, 3),
        ("<bos>", -1000.0, 3),
        ("<unk>", -1000.0, 2),
        ("<start_of_turn>", -1000.0, 3),
        ("\n", -1000.0, 4),
        ("\u{2581}", -10.0, 1),
        ("a", -11.0, 1),
        ("b", -12.0, 1),
        ("c", -13.0, 1),
        ("ab", ab, 1),
        ("bc", bc, 1),
        ("\u{2581}a", -0.5, 1),
        ("<0xC3>", 0.0, 6),
        ("<0xA9>", 0.0, 6),
    ]
}

#[test]
fn merges_follow_the_merged_tokens_score() {
    let (_d, t) = vocab_file(&tiny_vocab(-1.0, -2.0), false);
    assert_eq!(t.encode_plain("abc").unwrap(), [10, 9]); // ab (-1) beats bc (-2)
    let (_d, t) = vocab_file(&tiny_vocab(-2.0, -1.0), false);
    assert_eq!(t.encode_plain("abc").unwrap(), [7, 11]); // bc (-1) beats ab (-2)
                                                         // " ab": ▁a (-0.5) beats ab (-2); no space prefix is added.
    assert_eq!(t.encode_plain(" ab").unwrap(), [12, 8]);
    assert_eq!(t.encode_plain("ab").unwrap(), [10]);
}

#[test]
fn added_tokens_byte_fallback_and_unknown() {
    let (_d, t) = vocab_file(&tiny_vocab(-1.0, -2.0), false);
    // Control and user-defined tokens are cut out of the raw text first.
    assert_eq!(
        t.encode_plain("<start_of_turn>ab\nc").unwrap(),
        [4, 10, 5, 9]
    );
    // é is not a token: its UTF-8 bytes are; z has no byte token either: unknown.
    assert_eq!(t.encode_plain("éz").unwrap(), [13, 14, 3]);
    assert_eq!(t.decode(&[4, 12, 8, 5, 13, 14]).unwrap(), " ab\né");
    // BOS as the GGUF says (add_bos_token defaults to true), EOS from its id.
    assert_eq!(t.encode_prompt("ab", PromptFormat::Raw).unwrap(), [2, 10]);
    assert_eq!(t.bos_id(), Some(2));
    assert_eq!(t.eos_ids(), [1]);
}

#[test]
fn space_prefix_is_added_and_stripped() {
    let (_d, t) = vocab_file(&tiny_vocab(-1.0, -2.0), true);
    assert_eq!(t.encode_plain("ab").unwrap(), [12, 8]);
    assert_eq!(t.decode(&[12, 8]).unwrap(), "ab");
}

#[test]
fn non_spm_vocabularies_are_refused() {
    let metadata = [
        ("tokenizer.ggml.model", Meta::Str("gpt2".into())),
        ("tokenizer.ggml.tokens", Meta::Strs(vec!["a".into()])),
    ];
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "bpe.gguf", &gguf_bytes(3, &metadata, &[]));
    let err = Tokenizer::from_gguf(&GgufFile::open(&path).unwrap()).unwrap_err();
    assert!(err.to_string().contains("--tokenizer"), "{err}");
}

fn reference_ids(run: &serde_json::Value, key: &str) -> Vec<u32> {
    run[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn converter_fixture_matches_sentencepiece() {
    let file = GgufFile::open(&fixture("gemma3/tiny/model-f32.gguf")).unwrap();
    let tokenizer = Tokenizer::from_gguf(&file).unwrap();
    let text = std::fs::read_to_string(fixture("gemma3/tiny/reference.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    for run in json["runs"].as_array().unwrap() {
        let prompt = run["text"].as_str().unwrap();
        let want = reference_ids(run, "prompt_ids");
        let got = tokenizer.encode_prompt(prompt, PromptFormat::Raw).unwrap();
        assert_eq!(got, want, "{prompt:?}");
        assert_eq!(
            tokenizer.decode(&got).unwrap(),
            prompt
                .replace("<start_of_turn>", "")
                .replace("<end_of_turn>", "")
        );
    }
}

#[test]
fn real_model_tokenizes_as_llama_cpp() {
    let Some(path) = real_model("real_model_tokenizes_as_llama_cpp") else {
        return;
    };
    let file = GgufFile::open(&path).unwrap();
    let tokenizer = Tokenizer::from_gguf(&file).unwrap();
    assert_eq!(tokenizer.bos_id(), Some(2));
    assert_eq!(tokenizer.eos_ids(), [1, 106]);
    let reference = llama_cpp_reference();
    let mut checked = 0;
    for case in reference["tokenizer_cases"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let got = tokenizer.encode_plain(text).unwrap();
        assert_eq!(
            got,
            reference_ids(case, "ids"),
            "{}: {text:?}",
            case["name"]
        );
        checked += 1;
    }
    for prompt in reference["prompts"].as_array().unwrap() {
        let text = prompt["text"].as_str().unwrap();
        let got = tokenizer.encode_prompt(text, PromptFormat::Raw).unwrap();
        assert_eq!(
            got,
            reference_ids(prompt, "prompt_ids"),
            "{}",
            prompt["name"]
        );
        checked += 1;
    }
    eprintln!("real_model_tokenizes_as_llama_cpp: {checked} texts identical to llama.cpp");
}
