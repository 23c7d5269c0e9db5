//! A call the model wrote (`call:NAME{key:value,...}`) as a name and JSON arguments.

use serde_json::{Map, Number, Value};

use super::ToolSyntax;

/// One tool call: the function's name and its arguments (a JSON object).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The function called.
    pub name: String,
    /// Its arguments.
    pub arguments: Map<String, Value>,
}

/// The call in `body` (the text between the call markers: `call:NAME{...}`), or why it is not
/// one.
pub fn parse_call(body: &str, syntax: &ToolSyntax) -> Result<ToolCall, String> {
    let (name, arguments) = call_head(body.trim())?;
    let mut cursor = Cursor {
        text: arguments,
        quote: &syntax.quote,
        depth: 0,
    };
    let arguments = cursor.object()?;
    if !cursor.text.trim().is_empty() {
        return Err(format!("text after the arguments: {:?}", cursor.text));
    }
    Ok(ToolCall {
        name: name.to_string(),
        arguments,
    })
}

/// A call cut short (the text ended inside it): its name and the arguments written in full so
/// far (a value counts once the `,` or `}` after it is written); `None` before the name and
/// its `{` are complete.
pub fn parse_cut_call(body: &str, syntax: &ToolSyntax) -> Option<ToolCall> {
    let (name, arguments) = call_head(body.trim_start()).ok()?;
    let mut cursor = Cursor {
        text: arguments.strip_prefix('{')?,
        quote: &syntax.quote,
        depth: 1,
    };
    let mut arguments = Map::new();
    while let Ok((key, value)) = cursor.pair() {
        if !(cursor.eat(",") || cursor.eat("}")) {
            break;
        }
        arguments.insert(key, value);
    }
    Some(ToolCall {
        name: name.to_string(),
        arguments,
    })
}

/// `call:NAME{...`: the function's name and the text from its `{` on, or why it is not a call.
fn call_head(body: &str) -> Result<(&str, &str), String> {
    let rest = body
        .strip_prefix("call:")
        .ok_or_else(|| format!("a tool call starts with `call:`, got {body:?}"))?;
    let open = rest
        .find('{')
        .ok_or_else(|| format!("no `{{` after the function name in {body:?}"))?;
    let name = rest[..open].trim();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_alphanumeric() || "_-.".contains(c))
    {
        return Err(format!("bad function name {name:?}"));
    }
    Ok((name, &rest[open..]))
}

/// Most objects and arrays nested in a call's arguments (serde_json's limit): the reader
/// recurses once per level, and model output must not be able to exhaust the stack.
const MAX_DEPTH: usize = 128;

/// A recursive-descent reader over the rest of a call.
struct Cursor<'a> {
    text: &'a str,
    quote: &'a str,
    /// Objects and arrays open around the reader.
    depth: usize,
}

impl Cursor<'_> {
    fn skip_space(&mut self) {
        self.text = self.text.trim_start();
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip_space();
        match self.text.strip_prefix(token) {
            Some(rest) => {
                self.text = rest;
                true
            }
            None => false,
        }
    }

    fn expect(&mut self, token: &str) -> Result<(), String> {
        if self.eat(token) {
            Ok(())
        } else {
            Err(format!("expected `{token}` at {:?}", self.head()))
        }
    }

    fn head(&self) -> String {
        self.text.chars().take(24).collect()
    }

    /// One level deeper; an error past [`MAX_DEPTH`].
    fn descend(&mut self) -> Result<(), String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!("arguments nested deeper than {MAX_DEPTH} levels"));
        }
        Ok(())
    }

    fn object(&mut self) -> Result<Map<String, Value>, String> {
        self.expect("{")?;
        self.descend()?;
        let mut map = Map::new();
        if self.eat("}") {
            self.depth -= 1;
            return Ok(map);
        }
        loop {
            let (key, value) = self.pair()?;
            map.insert(key, value);
            if self.eat("}") {
                self.depth -= 1;
                return Ok(map);
            }
            self.expect(",")?;
        }
    }

    /// `key:value`.
    fn pair(&mut self) -> Result<(String, Value), String> {
        let key = self.key()?;
        self.expect(":")?;
        Ok((key, self.value()?))
    }

    fn key(&mut self) -> Result<String, String> {
        self.skip_space();
        if self.text.starts_with(self.quote) {
            return self.string();
        }
        let end = self
            .text
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-'))
            .unwrap_or(self.text.len());
        if end == 0 {
            return Err(format!("expected a key at {:?}", self.head()));
        }
        let key = self.text[..end].to_string();
        self.text = &self.text[end..];
        Ok(key)
    }

    fn string(&mut self) -> Result<String, String> {
        self.expect(self.quote)?;
        let end = self
            .text
            .find(self.quote)
            .ok_or_else(|| "an unterminated string".to_string())?;
        let s = self.text[..end].to_string();
        self.text = &self.text[end + self.quote.len()..];
        Ok(s)
    }

    fn value(&mut self) -> Result<Value, String> {
        self.skip_space();
        if self.text.starts_with(self.quote) {
            return self.string().map(Value::String);
        }
        if self.text.starts_with('{') {
            return self.object().map(Value::Object);
        }
        if self.eat("[") {
            self.descend()?;
            let mut items = Vec::new();
            if self.eat("]") {
                self.depth -= 1;
                return Ok(Value::Array(items));
            }
            loop {
                items.push(self.value()?);
                if self.eat("]") {
                    self.depth -= 1;
                    return Ok(Value::Array(items));
                }
                self.expect(",")?;
            }
        }
        let end = self.text.find([',', '}', ']']).unwrap_or(self.text.len());
        let word = self.text[..end].trim();
        self.text = &self.text[end..];
        match word {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            "null" | "None" => Ok(Value::Null),
            _ => number(word).ok_or_else(|| format!("not a value: {word:?}")),
        }
    }
}

fn number(word: &str) -> Option<Value> {
    if let Ok(i) = word.parse::<i64>() {
        return Some(Value::Number(i.into()));
    }
    word.parse::<f64>()
        .ok()
        .and_then(Number::from_f64)
        .map(Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn calls_of_both_conventions_parse() {
        let g4 = ToolSyntax::gemma4();
        let call = parse_call(
            r#"call:get_weather{location:<|"|>Paris, France<|"|>,days:3,metric:true,extra:null,where:{lat:48.8,tags:[<|"|>a<|"|>,1]}}"#,
            &g4,
        )
        .unwrap();
        assert_eq!(call.name, "get_weather");
        assert_eq!(
            Value::Object(call.arguments),
            json!({"location": "Paris, France", "days": 3, "metric": true, "extra": null,
                   "where": {"lat": 48.8, "tags": ["a", 1]}})
        );
        let fg = ToolSyntax::function_gemma();
        let call = parse_call("call:ping{}", &fg).unwrap();
        assert_eq!(call.name, "ping");
        assert!(call.arguments.is_empty());
        let call = parse_call("call:echo{text:<escape>a,b}<escape>}", &fg).unwrap();
        assert_eq!(call.arguments["text"], "a,b}");
    }

    #[test]
    fn a_cut_call_keeps_its_name_and_the_arguments_written_in_full() {
        let g4 = ToolSyntax::gemma4();
        let q = "<|\"|>";
        let cut =
            |body: &str| parse_cut_call(body, &g4).map(|c| (c.name, Value::Object(c.arguments)));
        assert_eq!(cut("call:get_"), None);
        assert_eq!(cut("call:bad name{a:1,"), None);
        assert_eq!(cut("call:f{"), Some(("f".into(), json!({}))));
        assert_eq!(cut("call:f{chapter:12"), Some(("f".into(), json!({}))));
        assert_eq!(
            cut(&format!("call:f{{chapter:12,book:{q}Gen")),
            Some(("f".into(), json!({"chapter": 12})))
        );
        assert_eq!(
            cut(&format!("call:f{{book:{q}Gen{q},at:{{v:[1,2]}},n:")),
            Some(("f".into(), json!({"book": "Gen", "at": {"v": [1, 2]}})))
        );
        let open = format!("call:f{{a:{}", "[".repeat(100_000));
        assert_eq!(
            parse_cut_call(&open, &g4).map(|c| c.arguments.len()),
            Some(0)
        );
    }

    #[test]
    fn malformed_calls_are_errors_not_panics() {
        let g4 = ToolSyntax::gemma4();
        for bad in [
            "",
            "call:",
            "get{}",
            "call:x{",
            "call:x{a:}",
            "call:x{a:<|\"|>open}",
            "call:x{a:1} trailing",
            "call:bad name{}",
            "call:x{a:[1,}",
            "call:x{:1}",
        ] {
            assert!(parse_call(bad, &g4).is_err(), "{bad:?}");
        }
        // Deep nesting is an error, not a stack overflow (unbalanced or not).
        let deep = format!(
            "call:f{{a:{}1{}}}",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        assert!(parse_call(&deep, &g4).unwrap_err().contains("nested"));
        let open = format!("call:f{{a:{}", "[".repeat(100_000));
        assert!(parse_call(&open, &g4).is_err());
        let fine = format!("call:f{{a:{}1{}}}", "[".repeat(100), "]".repeat(100));
        assert!(parse_call(&fine, &g4).is_ok());
    }
}
