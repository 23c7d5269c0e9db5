//! Special tokens and tokenizer settings from the HF side files: `config.json`,
//! `generation_config.json`, `tokenizer_config.json` and `chat_template.jinja`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::error::{TokenizerError, TokenizerResult};

/// What the side files of a model directory say about special tokens and prompt formatting.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TokenizerSettings {
    /// The BOS id (`config.json` `bos_token_id`, else `tokenizer_config.json` `bos_token`).
    pub bos: Option<u32>,
    /// Ids that end generation, as HF's `generate` takes them: `generation_config.json`'s
    /// `eos_token_id` (an integer or a list) when that file names one, else `config.json`'s,
    /// else `tokenizer_config.json`'s `eos_token`. Sorted, no duplicates.
    pub eos: Vec<u32>,
    /// Whether encoding a raw prompt starts it with BOS (`add_bos_token`; default true, as
    /// Gemma's tokenizers do).
    pub add_bos: bool,
    /// The chat template: `chat_template.jinja` when the directory has one (it takes priority,
    /// as in HF transformers), else `tokenizer_config.json`'s `chat_template` (the `default`
    /// one of a list).
    pub chat_template: Option<String>,
    /// The file the chat template came from (`tokenizer_config.json` when there is none; named
    /// in chat-template errors).
    pub chat_template_path: PathBuf,
    /// The tokenizer configuration file.
    pub tokenizer_config_path: PathBuf,
    /// The strings of the named special tokens in `tokenizer_config.json` (`bos_token`,
    /// `eos_token`, `unk_token`, `pad_token`, ...), which chat templates render with.
    pub special_tokens: BTreeMap<String, String>,
}

/// The named special tokens HF passes to chat templates (`SPECIAL_TOKENS_ATTRIBUTES`).
const NAMED_SPECIAL_TOKENS: [&str; 7] = [
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
];

/// The chat template file HF writes beside `tokenizer_config.json`.
const CHAT_TEMPLATE_FILE: &str = "chat_template.jinja";

/// Token strings of `tokenizer_config.json` that still need mapping to ids.
#[derive(Debug, Default)]
pub(crate) struct TokenNames {
    pub bos: Option<String>,
    pub eos: Option<String>,
}

/// Reads the side files of `dir`. Missing files are fine (every field has a default); a file that
/// exists but is not valid JSON, or has a field of the wrong form, is an error.
pub(crate) fn read_settings(dir: &Path) -> TokenizerResult<(TokenizerSettings, TokenNames)> {
    let config_path = dir.join("config.json");
    let generation_path = dir.join("generation_config.json");
    let tokenizer_config_path = dir.join("tokenizer_config.json");
    let config = read_optional_json(&config_path)?;
    let generation = read_optional_json(&generation_path)?;
    let tok_config = read_optional_json(&tokenizer_config_path)?;

    let mut settings = TokenizerSettings {
        add_bos: true,
        tokenizer_config_path: tokenizer_config_path.clone(),
        chat_template_path: tokenizer_config_path.clone(),
        ..TokenizerSettings::default()
    };
    if let Some(config) = &config {
        settings.bos = id_field(config, "bos_token_id", &config_path)?;
        settings.eos = ids_field(config, "eos_token_id", &config_path)?;
    }
    if let Some(generation) = &generation {
        if settings.bos.is_none() {
            settings.bos = id_field(generation, "bos_token_id", &generation_path)?;
        }
        let eos = ids_field(generation, "eos_token_id", &generation_path)?;
        if !eos.is_empty() {
            settings.eos = eos;
        }
    }
    let mut names = TokenNames::default();
    if let Some(tok) = &tok_config {
        match tok.get("add_bos_token") {
            None | Some(Value::Null) => {}
            Some(Value::Bool(b)) => settings.add_bos = *b,
            Some(other) => {
                return Err(bad(
                    &tokenizer_config_path,
                    format!("add_bos_token must be true or false, found {other}"),
                ))
            }
        }
        names.bos = token_name(tok, "bos_token", &tokenizer_config_path)?;
        names.eos = token_name(tok, "eos_token", &tokenizer_config_path)?;
        for key in NAMED_SPECIAL_TOKENS {
            if let Some(name) = token_name(tok, key, &tokenizer_config_path)? {
                settings.special_tokens.insert(key.to_string(), name);
            }
        }
        settings.chat_template = chat_template(tok, &tokenizer_config_path)?;
    }
    let template_file = dir.join(CHAT_TEMPLATE_FILE);
    match std::fs::read_to_string(&template_file) {
        Ok(text) => {
            settings.chat_template = Some(text);
            settings.chat_template_path = template_file;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(TokenizerError::MissingFile {
                path: template_file,
                reason: e.to_string(),
            })
        }
    }
    settings.eos.sort_unstable();
    settings.eos.dedup();
    Ok((settings, names))
}

fn bad(path: &Path, reason: String) -> TokenizerError {
    TokenizerError::BadJson {
        path: path.to_path_buf(),
        reason,
    }
}

fn read_optional_json(path: &Path) -> TokenizerResult<Option<Value>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(TokenizerError::MissingFile {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })
        }
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| bad(path, e.to_string()))
}

/// A field at the top level, else inside `text_config` (multimodal configs nest the text model).
fn field<'v>(json: &'v Value, key: &str) -> Option<&'v Value> {
    match json.get(key) {
        Some(Value::Null) | None => json.get("text_config").and_then(|t| t.get(key)),
        found => found,
    }
    .filter(|v| !v.is_null())
}

fn as_id(value: &Value, key: &str, path: &Path) -> TokenizerResult<u32> {
    value
        .as_u64()
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| bad(path, format!("{key} must be a token id, found {value}")))
}

fn id_field(json: &Value, key: &str, path: &Path) -> TokenizerResult<Option<u32>> {
    field(json, key).map(|v| as_id(v, key, path)).transpose()
}

fn ids_field(json: &Value, key: &str, path: &Path) -> TokenizerResult<Vec<u32>> {
    match field(json, key) {
        None => Ok(Vec::new()),
        Some(Value::Array(items)) => items.iter().map(|v| as_id(v, key, path)).collect(),
        Some(v) => Ok(vec![as_id(v, key, path)?]),
    }
}

/// `"<bos>"` or `{"content": "<bos>", ...}`.
fn token_name(json: &Value, key: &str, path: &Path) -> TokenizerResult<Option<String>> {
    match json.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Object(o)) => match o.get("content") {
            Some(Value::String(s)) => Ok(Some(s.clone())),
            _ => Err(bad(path, format!("{key} has no string `content`"))),
        },
        Some(other) => Err(bad(path, format!("{key} must be a string, found {other}"))),
    }
}

/// A string, or a list of `{"name", "template"}` (the `default` one, else the first).
fn chat_template(json: &Value, path: &Path) -> TokenizerResult<Option<String>> {
    match json.get("chat_template") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Array(items)) => {
            let named = |name: &str| {
                items
                    .iter()
                    .find(|t| t.get("name").and_then(Value::as_str) == Some(name))
            };
            let chosen = named("default").or_else(|| items.first());
            match chosen
                .and_then(|t| t.get("template"))
                .and_then(Value::as_str)
            {
                Some(s) => Ok(Some(s.to_string())),
                None => Err(bad(
                    path,
                    "chat_template list has no entry with a string `template`".to_string(),
                )),
            }
        }
        Some(other) => Err(bad(
            path,
            format!("chat_template must be a string or a list, found {other}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::write(dir.join(name), text).unwrap();
    }

    #[test]
    fn defaults_without_side_files() {
        let dir = tempfile::tempdir().unwrap();
        let (s, names) = read_settings(dir.path()).unwrap();
        assert_eq!((s.bos, s.eos.is_empty(), s.add_bos), (None, true, true));
        assert!(names.bos.is_none() && s.chat_template.is_none());
    }

    #[test]
    fn ids_lists_nested_configs_and_names() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "config.json",
            r#"{"text_config": {"bos_token_id": 2, "eos_token_id": [1, 106]}}"#,
        );
        write(
            dir.path(),
            "generation_config.json",
            r#"{"eos_token_id": [106, 50]}"#,
        );
        write(
            dir.path(),
            "tokenizer_config.json",
            r#"{"add_bos_token": false, "bos_token": {"content": "<bos>"}, "eos_token": "<eos>",
                "chat_template": [{"name": "tool_use", "template": "x"},
                                  {"name": "default", "template": "<start_of_turn>"}]}"#,
        );
        let (s, names) = read_settings(dir.path()).unwrap();
        assert_eq!(s.bos, Some(2));
        // generation_config.json's list replaces config.json's, as in HF's generate.
        assert_eq!(s.eos, vec![50, 106]);
        assert!(!s.add_bos);
        assert_eq!(s.chat_template.as_deref(), Some("<start_of_turn>"));
        assert_eq!(names.bos.as_deref(), Some("<bos>"));
        assert_eq!(names.eos.as_deref(), Some("<eos>"));
        assert_eq!(s.special_tokens["bos_token"], "<bos>");
        assert_eq!(s.special_tokens["eos_token"], "<eos>");

        // chat_template.jinja takes priority over tokenizer_config.json's template.
        write(dir.path(), "chat_template.jinja", "{{ bos_token }}jinja");
        let (s, _) = read_settings(dir.path()).unwrap();
        assert_eq!(s.chat_template.as_deref(), Some("{{ bos_token }}jinja"));
        assert!(s.chat_template_path.ends_with("chat_template.jinja"));
    }

    #[test]
    fn wrong_forms_are_errors() {
        for (file, text) in [
            ("config.json", r#"{"eos_token_id": "one"}"#),
            ("config.json", "{not json"),
            ("tokenizer_config.json", r#"{"add_bos_token": "yes"}"#),
            ("tokenizer_config.json", r#"{"chat_template": 3}"#),
        ] {
            let dir = tempfile::tempdir().unwrap();
            write(dir.path(), file, text);
            let err = read_settings(dir.path()).unwrap_err();
            assert!(
                matches!(err, TokenizerError::BadJson { .. }),
                "{file}: {err}"
            );
            assert!(err.to_string().contains(file), "{err}");
        }
    }
}
