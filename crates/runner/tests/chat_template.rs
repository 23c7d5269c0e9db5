//! Chat templates render exactly as HF transformers' `apply_chat_template` renders them: text and
//! token ids recorded by `tools/chat_templates/record.py` (transformers 5.24.0) for Gemma 4's own
//! template, the default pair's template and a template exercising the Jinja/Python features HF
//! templates use. Also `mtp generate --chat --system` on the default pair.

mod cli_common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use runner::tokenizer::{ChatMessage, ChatOptions, Tokenizer};
use serde::Deserialize;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/chat_templates")
}

fn default_target() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/default/target")
}

#[derive(Debug, Deserialize)]
struct Recorded {
    transformers: String,
    cases: Vec<Case>,
}

#[derive(Debug, Deserialize)]
struct Case {
    name: String,
    messages: Vec<ChatMessage>,
    options: BTreeMap<String, minijinja::Value>,
    text: Option<String>,
    ids: Option<Vec<u32>>,
    error: Option<String>,
}

fn recorded(path: &Path) -> Recorded {
    let text = std::fs::read_to_string(path).expect("recorded cases are committed");
    let recorded: Recorded = serde_json::from_str(&text).expect("hf_cases.json parses");
    assert_eq!(recorded.transformers, "5.24.0");
    assert!(!recorded.cases.is_empty());
    recorded
}

fn options(case: &Case) -> ChatOptions {
    let mut extra = case.options.clone();
    let add_generation_prompt = extra
        .remove("add_generation_prompt")
        .map(|v| v.is_true())
        .unwrap_or(true);
    ChatOptions {
        add_generation_prompt,
        extra,
    }
}

/// Renders every recorded case of `cases` with the template of `dir` and compares with HF.
fn check_dir(dir: &Path, cases: &Path) {
    let tokenizer = Tokenizer::from_dir(dir).expect("the tokenizer loads");
    let template = tokenizer.chat_template().expect("the template compiles");
    for case in recorded(cases).cases {
        let opts = options(&case);
        match (&case.text, &case.error) {
            (Some(want), None) => {
                let text = template
                    .render(&case.messages, &opts)
                    .unwrap_or_else(|e| panic!("{}: {e}", case.name));
                assert_eq!(
                    &text, want,
                    "{}: rendered text differs from HF's",
                    case.name
                );
                let ids = tokenizer
                    .encode_chat(&template, &case.messages, &opts)
                    .unwrap();
                assert_eq!(Some(&ids), case.ids.as_ref(), "{}: ids differ", case.name);
            }
            (None, Some(message)) => {
                let err = template.render(&case.messages, &opts).unwrap_err();
                assert!(
                    err.to_string().contains(message.as_str()),
                    "{}: {err}",
                    case.name
                );
            }
            _ => panic!("{}: a case has text or an error", case.name),
        }
    }
}

#[test]
fn gemma4_template_renders_as_hf() {
    let dir = fixtures().join("gemma4");
    check_dir(&dir, &dir.join("hf_cases.json"));
    // Gemma 4's stop tokens: generation_config.json's list, as HF's generate uses it.
    let tokenizer = Tokenizer::from_dir(&dir).unwrap();
    let turn_end = tokenizer.inner().token_to_id("<turn|>").unwrap();
    let mut want = vec![1, turn_end];
    want.sort_unstable();
    assert_eq!(tokenizer.eos_ids(), want);
}

#[test]
fn default_pair_template_renders_as_hf() {
    check_dir(
        &default_target(),
        &fixtures().join("default_pair_hf_cases.json"),
    );
}

#[test]
fn template_features_render_as_hf() {
    let dir = fixtures().join("features");
    check_dir(&dir, &dir.join("hf_cases.json"));
}

#[test]
fn generate_chat_with_a_system_message_uses_hf_prompt_ids() {
    let recorded = recorded(&fixtures().join("default_pair_hf_cases.json"));
    let case = recorded
        .cases
        .iter()
        .find(|c| c.name == "system_and_user")
        .unwrap();
    let text = |i: usize| match &case.messages[i].content {
        runner::tokenizer::ChatContent::Text(t) => t.clone(),
        other => panic!("{other:?}"),
    };
    let out = cli_common::mtp()
        .args(["generate", "--json", "-n", "2", "--no-draft", "--model"])
        .arg(default_target())
        .args(["--chat", "--system", &text(0), &text(1)])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(Some(cli_common::ids(&json["prompt_tokens"])), case.ids);

    // --system without --chat is refused by name.
    let out = cli_common::mtp()
        .args(["generate", "--system", "x", "hi"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--chat"));
}

/// Gemma 4's tool calls: the template renders HF's calls (above); the call HF rendered, as the
/// model's token ids, reads back as the call when special tokens are written out (its markers
/// are special tokens, which plain decoding drops), and the grammar of a forced call names the
/// markers by token id and compiles over this vocabulary.
#[test]
fn gemma4_tool_calls_read_back_and_force() {
    use runner::structured::{GrammarVocabulary, OutputFormat};
    use runner::tokenizer::SpecialTokens;
    use runner::tools::{call_grammar, parse_call, ToolSyntax};

    let dir = fixtures().join("gemma4");
    let tokenizer = Tokenizer::from_dir(&dir).expect("the tokenizer loads");
    let template = tokenizer.chat_template().expect("the template compiles");
    let syntax = template
        .tool_syntax()
        .expect("Gemma 4's template renders tools")
        .clone();
    assert_eq!(syntax, ToolSyntax::gemma4());
    let case = recorded(&dir.join("hf_cases.json"))
        .cases
        .into_iter()
        .find(|c| c.name == "tool_call_and_result")
        .expect("the recorded tool case");
    let ids = case.ids.expect("HF's ids");
    let id = |m: &str| tokenizer.inner().token_to_id(m).expect("a marker token");
    let start = ids
        .iter()
        .position(|&t| t == id("<|tool_call>"))
        .expect("a call");
    let end = ids
        .iter()
        .position(|&t| t == id("<tool_call|>"))
        .expect("its end");
    let kept = tokenizer
        .decode_with(&ids[start..=end], SpecialTokens::Keep)
        .expect("decodes");
    let skipped = tokenizer.decode(&ids[start..=end]).expect("decodes");
    assert!(
        !skipped.contains("<|tool_call>"),
        "plain decoding drops the markers"
    );
    let (content, calls) = {
        let mut splitter = runner::tools::ToolCallSplitter::new(syntax.clone());
        let mut pieces = splitter.push(&kept);
        pieces.extend(splitter.finish());
        let calls: Vec<_> = pieces
            .into_iter()
            .filter_map(|p| match p {
                runner::tools::Split::Call(c) => Some(c),
                runner::tools::Split::Text(_) | runner::tools::Split::Cut(_) => None,
            })
            .collect();
        (kept.clone(), calls)
    };
    assert_eq!(calls.len(), 1, "{content}");
    assert_eq!(calls[0].name, "get_weather");
    assert_eq!(
        serde_json::Value::Object(calls[0].arguments.clone()),
        serde_json::json!({"city": "Paris", "days": 2})
    );
    let body = &kept["<|tool_call>".len()..kept.len() - "<tool_call|>".len()];
    assert_eq!(parse_call(body, &syntax).expect("parses"), calls[0]);

    let tools = vec![(
        "get_weather".to_string(),
        serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}),
    )];
    let marker = |m: &str| tokenizer.inner().token_to_id(m);
    let grammar = call_grammar(&syntax, &tools, &marker);
    assert!(
        grammar.contains(&format!("<[{}]>", id("<|tool_call>"))),
        "{grammar}"
    );
    let vocab = tokenizer.inner().get_vocab_size(true);
    let vocabulary = GrammarVocabulary::new(&tokenizer, vocab).expect("the vocabulary builds");
    vocabulary
        .compile(&OutputFormat::Lark(grammar))
        .expect("the grammar compiles");
}
