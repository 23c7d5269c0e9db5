//! `--format`, `--json-schema`, `--regex`, `--grammar`: structured output on the command line.

use std::path::Path;

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};

use runner::structured::{OutputFormat, MAX_GRAMMAR_BYTES};

/// The output formats named by `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatChoice {
    /// Any JSON object.
    Json,
}

/// What the generated text must be.
#[derive(Debug, Args, Default)]
#[command(next_help_heading = "Structured output")]
pub struct FormatArgs {
    /// Constrain the output to any JSON object [default: free text].
    #[arg(long, value_enum, group = "structured")]
    pub format: Option<FormatChoice>,
    /// Constrain the output to JSON matching this JSON schema: a file, or the schema itself
    /// when it starts with `{` [default: free text].
    #[arg(long, value_name = "FILE|JSON", group = "structured")]
    pub json_schema: Option<String>,
    /// Constrain the output to text matching this regular expression (the whole text)
    /// [default: free text].
    #[arg(long, value_name = "REGEX", group = "structured")]
    pub regex: Option<String>,
    /// Constrain the output to a Lark grammar (llguidance's dialect) read from this file
    /// [default: free text].
    #[arg(long, value_name = "FILE", group = "structured")]
    pub grammar: Option<std::path::PathBuf>,
}

impl FormatArgs {
    /// The format asked for, `None` for free text.
    pub fn output_format(&self) -> anyhow::Result<Option<OutputFormat>> {
        if self.format == Some(FormatChoice::Json) {
            return Ok(Some(OutputFormat::JsonObject));
        }
        if let Some(schema) = &self.json_schema {
            let text = if schema.trim_start().starts_with('{') {
                schema.clone()
            } else {
                read_bounded(Path::new(schema), "--json-schema")?
            };
            let value: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("--json-schema {schema} is not JSON"))?;
            return Ok(Some(OutputFormat::JsonSchema(value)));
        }
        if let Some(rx) = &self.regex {
            return Ok(Some(OutputFormat::Regex(rx.clone())));
        }
        if let Some(path) = &self.grammar {
            return Ok(Some(OutputFormat::Lark(read_bounded(path, "--grammar")?)));
        }
        Ok(None)
    }
}

/// A file's text, refused past [`MAX_GRAMMAR_BYTES`].
fn read_bounded(path: &Path, flag: &str) -> anyhow::Result<String> {
    let size = std::fs::metadata(path)
        .with_context(|| format!("{flag} {}: cannot read the file", path.display()))?
        .len();
    if size > MAX_GRAMMAR_BYTES as u64 {
        bail!(
            "{flag} {}: the file is {size} bytes; at most {MAX_GRAMMAR_BYTES} are accepted",
            path.display()
        );
    }
    std::fs::read_to_string(path)
        .with_context(|| format!("{flag} {}: cannot read the file", path.display()))
}
