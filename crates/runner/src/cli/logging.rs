//! Log output on stderr through `tracing`.

use tracing_subscriber::EnvFilter;

/// Install the subscriber: `RUST_LOG` when set, else warnings (`-v` info, `-vv` debug, `-vvv`
/// trace).
pub fn init(verbose: u8) {
    let fallback = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.is_empty() => EnvFilter::try_new(&spec).unwrap_or_else(|e| {
            eprintln!("mtp: ignoring RUST_LOG={spec:?}: {e}");
            EnvFilter::new(fallback)
        }),
        _ => EnvFilter::new(fallback),
    };
    // A second initialisation (impossible in this program) would only keep the first.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}
