//! Log output on stderr through `tracing`.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Install the subscriber: `RUST_LOG` when set, else warnings (`-v` info, `-vv` debug, `-vvv`
/// trace). Colours only when stderr is a terminal and `NO_COLOR` is unset; a failed write (a
/// closed stderr) is dropped instead of reported on the same closed stream.
pub fn init(verbose: u8) {
    let fallback = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.is_empty() => EnvFilter::try_new(&spec).unwrap_or_else(|e| {
            let _ = super::console::err(&format!("mtp: ignoring RUST_LOG={spec:?}: {e}\n"));
            EnvFilter::new(fallback)
        }),
        _ => EnvFilter::new(fallback),
    };
    // A second initialisation (impossible in this program) would only keep the first.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(colours())
        .log_internal_errors(false)
        .try_init();
}

/// Whether log lines may carry ANSI colours: stderr is a terminal and `NO_COLOR` is not set
/// (<https://no-color.org>).
fn colours() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}
