//! JSON text as Python's `json.dumps` writes it, for the `tojson` filter of chat templates
//! (HF's `tojson` is `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
//! sort_keys=False)` by default).

use std::fmt::Write;

use minijinja::value::{Value, ValueKind};

/// `json.dumps` keyword arguments.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct JsonTextOptions {
    /// Pretty-print with this many spaces per level (`None`: one line).
    pub indent: Option<usize>,
    /// Sort object keys.
    pub sort_keys: bool,
    /// Escape every non-ASCII character as `\uXXXX`.
    pub ensure_ascii: bool,
    /// `(item_separator, key_separator)`; Python's default is `(", ", ": ")` on one line and
    /// `(",", ": ")` when indenting.
    pub separators: Option<(String, String)>,
}

/// `value` as `json.dumps(value, **options)` writes it.
pub(crate) fn python_json(value: &Value, options: &JsonTextOptions) -> String {
    let (item, key) = options.separators.clone().unwrap_or_else(|| {
        let item = if options.indent.is_some() { "," } else { ", " };
        (item.to_string(), ": ".to_string())
    });
    let writer = Writer {
        options,
        item: &item,
        key: &key,
    };
    let mut out = String::new();
    writer.value(&mut out, value, 0);
    out
}

struct Writer<'a> {
    options: &'a JsonTextOptions,
    item: &'a str,
    key: &'a str,
}

impl Writer<'_> {
    /// Maps keep their insertion order (minijinja's `preserve_order`), as Python dicts do.
    fn value(&self, out: &mut String, value: &Value, depth: usize) {
        match value.kind() {
            ValueKind::Undefined | ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
            ValueKind::Number if value.is_integer() => out.push_str(&value.to_string()),
            ValueKind::Number => match f64::try_from(value.clone()) {
                Ok(f) => out.push_str(&python_float(f)),
                Err(_) => out.push_str(&value.to_string()),
            },
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = value.try_iter().map(|i| i.collect()).unwrap_or_default();
                let items: Vec<&Value> = items.iter().collect();
                self.container(out, ('[', ']'), &items, depth, |w, out, v, d| {
                    w.value(out, v, d)
                });
            }
            ValueKind::Map => {
                let keys: Vec<Value> = value.try_iter().map(|i| i.collect()).unwrap_or_default();
                let mut entries: Vec<(String, Value)> = keys
                    .into_iter()
                    .map(|k| {
                        let v = value.get_item(&k).unwrap_or_default();
                        (k.to_string(), v)
                    })
                    .collect();
                if self.options.sort_keys {
                    entries.sort_by(|a, b| a.0.cmp(&b.0));
                }
                let entries: Vec<&(String, Value)> = entries.iter().collect();
                self.container(out, ('{', '}'), &entries, depth, |w, out, (k, v), d| {
                    w.string(out, k);
                    out.push_str(w.key);
                    w.value(out, v, d);
                });
            }
            _ => self.string(out, value.as_str().unwrap_or(&value.to_string())),
        }
    }

    fn container<T: Copy>(
        &self,
        out: &mut String,
        (open, close): (char, char),
        items: &[T],
        depth: usize,
        mut each: impl FnMut(&Self, &mut String, T, usize),
    ) {
        out.push(open);
        if items.is_empty() {
            out.push(close);
            return;
        }
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push_str(self.item);
            }
            self.newline(out, depth + 1);
            each(self, out, *item, depth + 1);
        }
        self.newline(out, depth);
        out.push(close);
    }

    fn newline(&self, out: &mut String, depth: usize) {
        if let Some(indent) = self.options.indent {
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', indent * depth));
        }
    }

    fn string(&self, out: &mut String, s: &str) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 || (self.options.ensure_ascii && !c.is_ascii()) => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        let _ = write!(out, "\\u{unit:04x}");
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

/// A float as Python's `repr` writes it: the shortest round-trip digits, exponent form with a
/// sign and at least two digits (`1e-05`, `1e+16`), and `.0` on integral values.
fn python_float(f: f64) -> String {
    if !f.is_finite() {
        return if f.is_nan() {
            "NaN".into()
        } else if f > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    // `{:e}` has the shortest round-trip digits; Python writes positional for exponents in
    // [-4, 16) and scientific otherwise.
    let scientific = format!("{f:e}");
    let (mantissa, exp) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..16).contains(&exp) {
        let text = format!("{f}");
        if text.contains('.') {
            text
        } else {
            format!("{text}.0")
        }
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dumps(v: serde_json::Value, options: &JsonTextOptions) -> String {
        python_json(&Value::from_serialize(&v), options)
    }

    #[test]
    fn matches_python_json_dumps() {
        let v = serde_json::json!({"b": [1, 2.5, null, true], "a": "é\"\n<>&"});
        let sorted = JsonTextOptions {
            sort_keys: true,
            ..JsonTextOptions::default()
        };
        // json.dumps(v, ensure_ascii=False, sort_keys=True)
        assert_eq!(
            dumps(v, &sorted),
            r#"{"a": "é\"\n<>&", "b": [1, 2.5, null, true]}"#
        );
        let indented = JsonTextOptions {
            indent: Some(2),
            sort_keys: true,
            ensure_ascii: true,
            ..JsonTextOptions::default()
        };
        assert_eq!(
            dumps(serde_json::json!({"k": ["🙂", {}], "e": []}), &indented),
            "{\n  \"e\": [],\n  \"k\": [\n    \"\\ud83d\\ude42\",\n    {}\n  ]\n}"
        );
        assert_eq!(python_float(1e-5), "1e-05");
        assert_eq!(python_float(2.5), "2.5");
        assert_eq!(python_float(1.0), "1.0");
        assert_eq!(python_float(1e16), "1e+16");
        assert_eq!(python_float(-1.5e-7), "-1.5e-07");
        assert_eq!(python_float(0.0001), "0.0001");
        assert_eq!(python_float(123.0), "123.0");
    }
}
