//! Fuzzed command-line values (proptest): every value option of `mtp generate` and `mtp bench`
//! given random text — numbers out of range, negatives, NaN, infinities, huge integers, empty,
//! unicode — parses to a clear clap error or to arguments whose resolution (sampling options
//! validated, draft overrides resolved, prompt-lookup options checked) is `Ok` or `Err`: never
//! a panic. `PROPTEST_CASES` sets the cases per option (default 10_000 over all options, what CI
//! runs; `PROPTEST_CASES=1000000 cargo test --release -p runner --bin mtp args_fuzz` for 10^6).

use clap::Parser;
use mtp_core::options::{MtpDefaults, MtpOptions};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::args::{Cli, Command};

/// The value options of `mtp generate`.
const GENERATE_OPTIONS: &[&str] = &[
    "--temperature",
    "--top-k",
    "--top-p",
    "--min-p",
    "--repeat-penalty",
    "--presence-penalty",
    "--frequency-penalty",
    "--repeat-last-n",
    "--seed",
    "--num-predict",
    "--eos",
    "--draft-tokens",
    "--max-draft-tokens",
    "--draft-schedule",
    "--draft-kind",
    "--ngram-min",
    "--ngram-max",
    "--backend",
    "--device",
    "--dtype",
    "--logprobs",
];

/// The value options only `mtp bench` has.
const BENCH_OPTIONS: &[&str] = &[
    "--num-predict",
    "--reps",
    "--warmup",
    "--depths",
    "--sync-depths",
    "--schedules",
    "--max-width",
    "--cost-reps",
    "--model-clock",
];

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

/// Text a user might type as a value, and text nobody would.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|x| x.to_string()),
        any::<u64>().prop_map(|x| x.to_string()),
        any::<f64>().prop_map(|x| format!("{x:?}")),
        any::<f32>().prop_map(|x| x.to_string()),
        prop::sample::select(vec![
            "",
            "0",
            "-0",
            "-1",
            "nan",
            "NaN",
            "inf",
            "-inf",
            "1e400",
            "-1e400",
            "1e-400",
            "18446744073709551615",
            "18446744073709551616",
            "99999999999999999999999",
            "0x10",
            "1,2",
            ",",
            "1,,2",
            "adaptive",
            "ngram",
            "mtp",
            "cpu",
            "cuda:0",
            "bf16",
        ])
        .prop_map(str::to_string),
        "[ -~]{0,12}",
        "\\PC{0,6}",
    ]
}

/// Parse `argv`; when it parses, resolve everything `run` resolves before loading a model.
/// Returns whether it parsed.
fn parse_and_resolve(argv: &[String]) -> bool {
    let Ok(cli) = Cli::try_parse_from(argv) else {
        return false;
    };
    let (sampling, draft, proposers) = match &cli.command {
        Command::Generate(args) => (&args.sampling, Some(&args.draft), &args.proposers),
        Command::Bench(args) => (&args.sampling, None, &args.proposers),
        Command::BenchBatch(args) => {
            let _ = args.proposers.choice(None);
            return true;
        }
        #[cfg(feature = "server")]
        Command::Serve(_) => return true,
    };
    let _ = sampling.options().validate();
    if let Some(draft) = draft {
        let _ = MtpOptions::resolve(&MtpDefaults::default(), &|_| None, &draft.overrides());
    }
    let _ = proposers.choice(None);
    true
}

fn fuzz_command(command: &str, options: &'static [&'static str]) {
    let n = cases();
    let mut runner = TestRunner::new(Config {
        cases: n,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (prop::sample::select(options), value(), any::<bool>());
    let parsed = std::cell::Cell::new(0u32);
    let result = runner.run(&strategy, |(option, value, joined)| {
        let mut argv = vec!["mtp".to_string(), command.to_string()];
        if joined {
            argv.push(format!("{option}={value}"));
        } else {
            argv.extend([option.to_string(), value]);
        }
        if command == "generate" {
            argv.push("a prompt".into());
        }
        if option == "--logprobs" {
            // It requires --json.
            argv.push("--json".into());
        }
        if parse_and_resolve(&argv) {
            parsed.set(parsed.get() + 1);
        }
        Ok(())
    });
    let parsed = parsed.get();
    eprintln!("fuzz mtp {command} option values: {n} cases ({parsed} parsed), 0 panics");
    if let Err(e) = result {
        panic!("fuzz mtp {command}: {e}");
    }
    // Both paths ran: clap's rejections and the resolution of accepted values.
    assert!(parsed > 0 && parsed < n, "{parsed} of {n} parsed");
}

#[test]
fn generate_option_values() {
    fuzz_command("generate", GENERATE_OPTIONS);
}

#[test]
fn bench_option_values() {
    fuzz_command("bench", BENCH_OPTIONS);
}
