//! The `mtp` command (placeholder until the runner issue lands).

use std::process::ExitCode;

fn main() -> ExitCode {
    eprintln!(
        "mtp: no default model yet. The Gemma 4 models, the tokenizer and `mtp generate` are \
         not built: the runner and the tiny default pair land in their own issues. What works \
         today is the backend-neutral engine in mtp-core; run the tests with `cargo test \
         --workspace`."
    );
    ExitCode::from(2)
}
