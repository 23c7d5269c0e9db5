//! Writing to stdout and stderr without panicking when the reader has gone.
//!
//! Rust ignores `SIGPIPE`, so a write to a closed pipe (`mtp generate … | head`) fails with
//! `BrokenPipe`, and the `print!` family panics on it. Every subcommand writes through
//! [`out`] and [`err`] instead, which return the error; `main` turns a closed stream anywhere
//! in an error chain into a quiet exit with [`EXIT_CLOSED_PIPE`], the status shells report for
//! a command killed by `SIGPIPE` (what `cat` or `seq` give in the same pipe). [`install`] adds a
//! panic hook that does the same for a `print!` that slips through (ours or a dependency's), so
//! a future subcommand cannot reintroduce the panic.

use std::io::{self, Write};

/// Exit status after stdout or stderr was closed: 128 + `SIGPIPE` (13).
pub const EXIT_CLOSED_PIPE: u8 = 141;

/// Write `text` to stdout and flush it.
pub fn out(text: &str) -> io::Result<()> {
    let mut lock = io::stdout().lock();
    lock.write_all(text.as_bytes())?;
    lock.flush()
}

/// Write `text` to stderr (unbuffered).
pub fn err(text: &str) -> io::Result<()> {
    io::stderr().lock().write_all(text.as_bytes())
}

/// Whether `error` is a write to a closed pipe.
pub fn is_closed_pipe(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::BrokenPipe
}

/// Whether any error in the chain of `error` is a write to a closed pipe.
pub fn closed_pipe_in(error: &anyhow::Error) -> bool {
    error
        .chain()
        .filter_map(|e| e.downcast_ref::<io::Error>())
        .any(is_closed_pipe)
}

/// A `BrokenPipe` error naming the stream, for code that noticed a closed stream earlier (a
/// sink that stopped generation) and reports it now.
pub fn closed(stream: &str) -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, format!("{stream} is closed"))
}

/// Install the panic hook: a panic from the `print!` family on a closed pipe exits quietly with
/// [`EXIT_CLOSED_PIPE`]; every other panic goes to the default hook.
pub fn install() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if is_print_on_closed_pipe(panic_message(info.payload())) {
            std::process::exit(i32::from(EXIT_CLOSED_PIPE));
        }
        default(info);
    }));
}

/// The text of a panic payload (`panic!` with a literal or a formatted message).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        ""
    }
}

/// The standard library's message for a failed `print!`/`eprint!` on a closed pipe, e.g.
/// "failed printing to stderr: Broken pipe (os error 32)".
fn is_print_on_closed_pipe(message: &str) -> bool {
    let broken = io::Error::from(io::ErrorKind::BrokenPipe).to_string();
    message.starts_with("failed printing to std")
        && (message.contains("Broken pipe") || message.contains(&broken))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_pipes_are_found_in_error_chains() {
        let e = anyhow::Error::from(closed("stdout")).context("cannot write the JSON");
        assert!(closed_pipe_in(&e));
        let other = anyhow::Error::from(io::Error::other("disk full")).context("x");
        assert!(!closed_pipe_in(&other));
    }

    #[test]
    fn print_panics_on_closed_pipes_are_recognised() {
        assert!(is_print_on_closed_pipe(
            "failed printing to stderr: Broken pipe (os error 32)"
        ));
        assert!(is_print_on_closed_pipe(
            "failed printing to stdout: Broken pipe (os error 32)"
        ));
        assert!(!is_print_on_closed_pipe("index out of bounds"));
        assert!(!is_print_on_closed_pipe(
            "failed printing to stdout: No space left on device"
        ));
    }
}
