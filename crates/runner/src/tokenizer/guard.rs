//! A fence around the `tokenizers` crate: a panic inside it becomes an error.
//!
//! `tokenizers` 0.23 panics on some malformed `tokenizer.json` files instead of returning an
//! error (`expect("Helper")` while deserializing a decoder; found by the fuzz suite in
//! `tests/fuzz_parsers.rs`). A model directory is user input, so every call into the crate goes
//! through [`unpanicked`], which turns such a panic into the caller's error with the panic's
//! message. The default panic hook still prints that message once on stderr.

use std::panic::{catch_unwind, AssertUnwindSafe};

/// Run `f`; if it panics, return `on_panic(message)` instead of unwinding further.
///
/// `AssertUnwindSafe` is sound here: on a panic the values `f` touched (a tokenizer being built,
/// or an `&` tokenizer whose calls only allocate their own outputs) are dropped or left unused,
/// and the caller only sees the error.
pub(crate) fn unpanicked<T, E>(
    f: impl FnOnce() -> Result<T, E>,
    on_panic: impl FnOnce(String) -> E,
) -> Result<T, E> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => Err(on_panic(panic_message(payload.as_ref()))),
    }
}

/// The text of a panic payload (`panic!` with a literal gives `&str`, with a format `String`).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string());
    format!("the tokenizers library panicked: {text}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_the_error() {
        let r: Result<(), String> = unpanicked(|| panic!("boom {}", 1), |m| m);
        assert_eq!(
            r,
            Err("the tokenizers library panicked: boom 1".to_string())
        );
        let r: Result<(), String> = unpanicked(|| panic!("literal"), |m| m);
        assert_eq!(
            r,
            Err("the tokenizers library panicked: literal".to_string())
        );
    }

    #[test]
    fn results_pass_through() {
        assert_eq!(unpanicked(|| Ok::<_, String>(3), |m| m), Ok(3));
        assert_eq!(
            unpanicked(|| Err::<u8, _>("no".to_string()), |m| m),
            Err("no".into())
        );
    }
}
