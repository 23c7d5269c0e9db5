//! Bounds on what a JSON value may grow to where its schema leaves it open.
//!
//! A JSON schema's `integer` or `number` without `maximum` lets a number run on for ever, and
//! a weak model that starts one (`-1111117777…`) often never stops: the reply then ends at
//! the token budget and does not parse. llama.cpp's schema converter bounds an integer part
//! to 16 digits and a fraction to 16; XGrammar bounds numbers and whitespace. Here, a JSON
//! output (a schema or `json_object`) is read byte by byte as it is generated, and a token is
//! refused when it would take, outside strings,
//!
//! * an integer part past [`MAX_INTEGER_DIGITS`] digits (a number of 16 significant digits
//!   is as many as an IEEE double keeps; RFC 8259 §6),
//! * a fraction past [`MAX_FRACTION_DIGITS`] digits,
//! * an exponent past [`MAX_EXPONENT_DIGITS`] digits (a double's exponent is at most 308),
//! * or a run of whitespace past [`MAX_WHITESPACE`] bytes (room for a newline and 20 spaces of
//!   indentation, about llama.cpp's bound; the default layout has no free whitespace at all).
//!
//! Strings stay as the schema says (their `maxLength`, else unbounded). The bound narrows the
//! grammar's choices and never replaces them: where a schema itself needs a longer number
//! (a `const`, an `enum` or a `minimum` of 17 digits), the grammar's choices stand, so a
//! bounded output is still one the schema accepts, and the grammar never dead-ends.

use std::sync::Arc;

use llguidance::toktrie::TokEnv;

/// Most digits of a number's integer part written where the schema does not need more.
pub const MAX_INTEGER_DIGITS: u16 = 16;
/// Most digits of a number's fraction written where the schema does not need more.
pub const MAX_FRACTION_DIGITS: u16 = 16;
/// Most digits of a number's exponent written where the schema does not need more.
pub const MAX_EXPONENT_DIGITS: u16 = 3;
/// Most whitespace bytes in a row outside strings.
pub const MAX_WHITESPACE: u16 = 21;

/// Where a byte of JSON text falls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Place {
    /// Between values, inside a number or a literal.
    #[default]
    Outside,
    /// Inside a string.
    String,
    /// Right after a backslash inside a string.
    Escape,
}

/// The run of bytes a bound counts, outside strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Run {
    /// None counted (punctuation, a literal, a sign before its digits).
    #[default]
    None,
    /// Digits of a number's integer part.
    Integer(u16),
    /// Digits after its decimal point.
    Fraction(u16),
    /// Digits of its exponent (after `e` and a sign).
    Exponent(u16),
    /// Whitespace bytes.
    Space(u16),
}

/// A JSON lexer's state after some text: enough to tell whether a further byte stays within
/// the bounds. Counts saturate (a schema may need more than a bound allows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct JsonLexer {
    place: Place,
    run: Run,
}

impl JsonLexer {
    /// The state after one more byte.
    fn step(self, byte: u8) -> Self {
        let more = |n: u16| n.saturating_add(1);
        match self.place {
            Place::String => Self {
                place: match byte {
                    b'"' => Place::Outside,
                    b'\\' => Place::Escape,
                    _ => Place::String,
                },
                run: Run::None,
            },
            Place::Escape => Self {
                place: Place::String,
                run: Run::None,
            },
            Place::Outside => {
                let run = match (byte, self.run) {
                    (b'0'..=b'9', Run::Integer(n)) => Run::Integer(more(n)),
                    (b'0'..=b'9', Run::Fraction(n)) => Run::Fraction(more(n)),
                    (b'0'..=b'9', Run::Exponent(n)) => Run::Exponent(more(n)),
                    (b'0'..=b'9', _) => Run::Integer(1),
                    (b'.', Run::Integer(_)) => Run::Fraction(0),
                    (b'e' | b'E', Run::Integer(_) | Run::Fraction(_)) => Run::Exponent(0),
                    (b'+' | b'-', Run::Exponent(0)) => Run::Exponent(0),
                    (b'-', _) => Run::Integer(0),
                    (b' ' | b'\t' | b'\n' | b'\r', Run::Space(n)) => Run::Space(more(n)),
                    (b' ' | b'\t' | b'\n' | b'\r', _) => Run::Space(1),
                    _ => Run::None,
                };
                Self {
                    place: if byte == b'"' {
                        Place::String
                    } else {
                        Place::Outside
                    },
                    run,
                }
            }
        }
    }

    /// Whether the run counted so far is within its bound.
    fn within_bounds(&self) -> bool {
        match self.run {
            Run::None => true,
            Run::Integer(n) => n <= MAX_INTEGER_DIGITS,
            Run::Fraction(n) => n <= MAX_FRACTION_DIGITS,
            Run::Exponent(n) => n <= MAX_EXPONENT_DIGITS,
            Run::Space(n) => n <= MAX_WHITESPACE,
        }
    }

    /// The state after `bytes`, and whether every byte stayed within the bounds.
    fn after(self, bytes: &[u8]) -> (Self, bool) {
        bytes.iter().fold((self, true), |(state, ok), &b| {
            let next = state.step(b);
            (next, ok && next.within_bounds())
        })
    }

    /// Whether the text so far ends inside a string.
    fn in_string(&self) -> bool {
        self.place != Place::Outside
    }
}

/// The vocabulary as the bounds read it: every token's bytes, and the tokens that can close a
/// string (the only ones a bound can refuse while a string is open).
pub(crate) struct JsonTokens {
    env: TokEnv,
    quoting: Vec<u32>,
}

impl JsonTokens {
    /// The tokens of `env` (special tokens have no text here).
    pub(crate) fn new(env: TokEnv) -> Self {
        let trie = env.tok_trie();
        let quoting = (0..trie.vocab_size() as u32)
            .filter(|&id| Self::text_of(&env, id).contains(&b'"'))
            .collect();
        Self { env, quoting }
    }

    fn text_of(env: &TokEnv, id: u32) -> &[u8] {
        let trie = env.tok_trie();
        if id as usize >= trie.vocab_size() {
            return &[];
        }
        match trie.token(id) {
            [llguidance::toktrie::TokTrie::SPECIAL_TOKEN_MARKER, ..] => &[],
            bytes => bytes,
        }
    }

    fn text(&self, id: u32) -> &[u8] {
        Self::text_of(&self.env, id)
    }
}

/// One generation's bounds: the lexer's state after every token taken (for rollback).
pub(crate) struct JsonBounds {
    tokens: Arc<JsonTokens>,
    /// The state before the first token, then after each.
    states: Vec<JsonLexer>,
}

impl JsonBounds {
    /// Bounds at the start of a JSON text.
    pub(crate) fn new(tokens: Arc<JsonTokens>) -> Self {
        Self {
            tokens,
            states: vec![JsonLexer::default()],
        }
    }

    fn current(&self) -> JsonLexer {
        self.states.last().copied().unwrap_or_default()
    }

    /// `mask` (the grammar's allowed tokens, one bit each, low bit first) without the tokens
    /// that would take the text past a bound, unless that leaves none (the schema then needs
    /// the longer value).
    pub(crate) fn restrict(&self, mask: &mut [u32]) {
        let state = self.current();
        let refused = |id: u32| !state.after(self.tokens.text(id)).1;
        let allowed = |mask: &[u32], id: u32| {
            mask.get(id as usize / 32)
                .is_some_and(|w| w & (1 << (id % 32)) != 0)
        };
        let mut cut = Vec::new();
        if state.in_string() {
            cut.extend(
                self.tokens
                    .quoting
                    .iter()
                    .copied()
                    .filter(|&id| allowed(mask, id) && refused(id)),
            );
        } else {
            for (w, &word) in mask.iter().enumerate() {
                let mut bits = word;
                while bits != 0 {
                    let id = (w * 32) as u32 + bits.trailing_zeros();
                    bits &= bits - 1;
                    if refused(id) {
                        cut.push(id);
                    }
                }
            }
        }
        if cut.is_empty() {
            return;
        }
        let total: usize = mask.iter().map(|w| w.count_ones() as usize).sum();
        if cut.len() == total {
            return;
        }
        for id in cut {
            mask[id as usize / 32] &= !(1 << (id % 32));
        }
    }

    /// Take `ids` (already accepted by the grammar).
    pub(crate) fn advance(&mut self, ids: &[u32]) {
        for &id in ids {
            let next = self.current().after(self.tokens.text(id)).0;
            self.states.push(next);
        }
    }

    /// Undo the last `n` tokens taken.
    pub(crate) fn rollback(&mut self, n: usize) {
        let keep = self.states.len().saturating_sub(n).max(1);
        self.states.truncate(keep);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fits(text: &str) -> bool {
        JsonLexer::default().after(text.as_bytes()).1
    }

    #[test]
    fn numbers_are_bounded_part_by_part() {
        assert!(fits("{\"n\": -1234567890123456}"));
        assert!(!fits("{\"n\": -12345678901234567"));
        assert!(fits("[0.1234567890123456, 1]"));
        assert!(!fits("[0.12345678901234567"));
        assert!(fits("1234567890123456.1234567890123456e-308"));
        assert!(!fits("1.5e+1000"));
        assert!(fits("1.5E+100"));
        // Runs do not carry across values.
        assert!(fits("[1234567890123456, 1234567890123456]"));
    }

    #[test]
    fn strings_are_not_bounded_and_escapes_do_not_close_them() {
        assert!(fits("\"12345678901234567890123456789\""));
        assert!(fits("\"a\\\"12345678901234567890123456789\""));
        let after = JsonLexer::default().after(b"\"a\\\"").0;
        assert!(after.in_string());
        assert!(!JsonLexer::default().after(b"\"a\\\\\"").0.in_string());
        // Digits after a closed string count again.
        assert!(!fits("[\"x\", 12345678901234567]"));
    }

    #[test]
    fn whitespace_is_bounded_outside_strings() {
        let indent = format!("{{\n{}\"a\": 1}}", " ".repeat(20));
        assert!(fits(&indent));
        let deep = format!("{{\n{}\"a\": 1}}", " ".repeat(21));
        assert!(!fits(&deep));
        assert!(fits(&format!("\"{}\"", " ".repeat(100))));
    }

    #[test]
    fn literals_reset_the_count() {
        // The `e` of `true` is no exponent.
        assert!(fits("[true, false, null, 12]"));
        assert!(JsonLexer::default().after(b"true").0.run == Run::None);
    }
}
