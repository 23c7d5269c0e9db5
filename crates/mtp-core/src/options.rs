//! MTP options: model defaults, then environment, then the request.

use crate::sampling::SamplerOptions;
use crate::schedule::ScheduleKind;
use crate::CoreError;

/// The seed's default initial draft depth (used when a model's default is 0).
pub const DEFAULT_INITIAL_DRAFT_TOKENS: usize = 4;
/// The seed's default maximum draft depth (used when a model's default is 0).
pub const DEFAULT_MAX_DRAFT_TOKENS: usize = 16;
/// The largest draft depth any setting may ask for (initial or maximum; environment, request
/// or command line): a value above it is rejected with [`CoreError::DraftDepthTooLarge`], and a
/// model default above it is clamped to it. The engine further clamps the depth to the
/// target's context. Acceptance falls geometrically with depth, so no real proposer pays this
/// deep; the bound keeps every per-depth table small.
pub const MAX_DRAFT_TOKENS_LIMIT: usize = 64;

/// Environment key: initial draft depth (positive integer).
pub const ENV_INITIAL_DRAFT_TOKENS: &str = "MTP_INITIAL_DRAFT_TOKENS";
/// Environment key: maximum draft depth (positive integer).
pub const ENV_MAX_DRAFT_TOKENS: &str = "MTP_MAX_DRAFT_TOKENS";
/// Environment key: draft schedule (`constant`, `heuristic` or `adaptive`).
pub const ENV_DRAFT_SCHEDULE: &str = "MTP_DRAFT_SCHEDULE";
/// Environment key: force serial validation (boolean).
pub const ENV_SERIAL_VALIDATE: &str = "MTP_SERIAL_VALIDATE";
/// Environment key: compare batched with serial validation (boolean, debug).
pub const ENV_COMPARE_SERIAL_VALIDATE: &str = "MTP_COMPARE_SERIAL_VALIDATE";

/// MTP defaults a model provides (the seed's `MTPDefaults`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MtpDefaults {
    /// Draft depth of the first round.
    pub initial_draft_tokens: usize,
    /// Upper bound on the draft depth.
    pub max_draft_tokens: usize,
    /// Whether MTP is used at all with this model.
    pub enabled: bool,
}

impl Default for MtpDefaults {
    /// The seed's defaults: 4 initial, 16 max, enabled.
    fn default() -> Self {
        Self {
            initial_draft_tokens: 4,
            max_draft_tokens: 16,
            enabled: true,
        }
    }
}

/// How drafts are validated against the target.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum ValidationMode {
    /// One target forward over all drafts (falls back to serial when a cache cannot speculate).
    #[default]
    Batched,
    /// Forward drafts one at a time on the live caches.
    Serial,
    /// Batched, then re-check the accepted prefix serially and report disagreements (debug).
    CompareSerial,
}

/// Per-request overrides of the MTP options; `None` keeps the value from the defaults and the
/// environment.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct DraftOverrides {
    /// Initial draft depth (must be ≥ 1).
    pub initial_draft_tokens: Option<usize>,
    /// Maximum draft depth (must be ≥ 1).
    pub max_draft_tokens: Option<usize>,
    /// Draft schedule.
    pub schedule: Option<ScheduleKind>,
    /// Validation mode.
    pub validation: Option<ValidationMode>,
    /// Whether MTP is used at all.
    pub enabled: Option<bool>,
}

impl DraftOverrides {
    /// Draft exactly `depth` tokens every round: the constant schedule at that depth (initial
    /// and maximum), everything else from the defaults.
    pub fn constant(depth: usize) -> Self {
        Self {
            initial_draft_tokens: Some(depth),
            max_draft_tokens: Some(depth),
            schedule: Some(ScheduleKind::Constant),
            ..Self::default()
        }
    }
}

/// The resolved MTP options of one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MtpOptions {
    /// Draft depth of the first round (≤ `max_draft_tokens`).
    pub initial_draft_tokens: usize,
    /// Upper bound on the draft depth.
    pub max_draft_tokens: usize,
    /// Draft schedule.
    pub schedule: ScheduleKind,
    /// Validation mode.
    pub validation: ValidationMode,
    /// Whether MTP is used at all.
    pub enabled: bool,
}

impl MtpOptions {
    /// Resolves the options: model `defaults` (a 0 depth becomes the seed's 4 initial / 16
    /// max; a depth above [`MAX_DRAFT_TOKENS_LIMIT`] is clamped to it), then the environment
    /// read through `env`, then `overrides`; finally the initial depth is clamped to the
    /// maximum.
    ///
    /// Environment: [`ENV_INITIAL_DRAFT_TOKENS`] and [`ENV_MAX_DRAFT_TOKENS`] (integers from 1
    /// to [`MAX_DRAFT_TOKENS_LIMIT`]), [`ENV_DRAFT_SCHEDULE`] (`constant`, `heuristic` or
    /// `adaptive`, any case), [`ENV_SERIAL_VALIDATE`] and [`ENV_COMPARE_SERIAL_VALIDATE`]
    /// (booleans as Go's `strconv.ParseBool`; compare-serial wins when both are true). Empty
    /// values count as unset; an unparsable value logs a warning naming the key and value (once per
    /// process) and is ignored.
    ///
    /// Errors: an override depth of 0 is [`CoreError::InvalidOption`]; a depth above
    /// [`MAX_DRAFT_TOKENS_LIMIT`] from the environment or an override (any run of digits, also
    /// one too long for `usize`) is [`CoreError::DraftDepthTooLarge`].
    pub fn resolve(
        defaults: &MtpDefaults,
        env: &dyn Fn(&str) -> Option<String>,
        overrides: &DraftOverrides,
    ) -> Result<MtpOptions, CoreError> {
        let mut opts = MtpOptions {
            initial_draft_tokens: model_depth(
                defaults.initial_draft_tokens,
                DEFAULT_INITIAL_DRAFT_TOKENS,
            ),
            max_draft_tokens: model_depth(defaults.max_draft_tokens, DEFAULT_MAX_DRAFT_TOKENS),
            schedule: ScheduleKind::default(),
            validation: ValidationMode::default(),
            enabled: defaults.enabled,
        };
        opts.apply_env(env)?;
        opts.apply_overrides(overrides)?;
        opts.initial_draft_tokens = opts.initial_draft_tokens.min(opts.max_draft_tokens);
        Ok(opts)
    }

    /// [`resolve`](Self::resolve) with the process environment.
    pub fn from_env(
        defaults: &MtpDefaults,
        overrides: &DraftOverrides,
    ) -> Result<MtpOptions, CoreError> {
        Self::resolve(defaults, &|key| std::env::var(key).ok(), overrides)
    }

    fn apply_env(&mut self, env: &dyn Fn(&str) -> Option<String>) -> Result<(), CoreError> {
        if let Some(v) = env_depth(env, ENV_MAX_DRAFT_TOKENS)? {
            self.max_draft_tokens = v;
        }
        if let Some(v) = env_depth(env, ENV_INITIAL_DRAFT_TOKENS)? {
            self.initial_draft_tokens = v;
        }
        if let Some(v) = env_value(env, ENV_DRAFT_SCHEDULE, |s| s.parse().ok()) {
            self.schedule = v;
        }
        let serial = env_value(env, ENV_SERIAL_VALIDATE, parse_go_bool);
        let compare = env_value(env, ENV_COMPARE_SERIAL_VALIDATE, parse_go_bool);
        if compare == Some(true) {
            self.validation = ValidationMode::CompareSerial;
        } else if serial == Some(true) {
            self.validation = ValidationMode::Serial;
        }
        Ok(())
    }

    fn apply_overrides(&mut self, overrides: &DraftOverrides) -> Result<(), CoreError> {
        if let Some(v) = overrides.max_draft_tokens {
            self.max_draft_tokens = positive_override("max_draft_tokens", v)?;
        }
        if let Some(v) = overrides.initial_draft_tokens {
            self.initial_draft_tokens = positive_override("initial_draft_tokens", v)?;
        }
        if let Some(v) = overrides.schedule {
            self.schedule = v;
        }
        if let Some(v) = overrides.validation {
            self.validation = v;
        }
        if let Some(v) = overrides.enabled {
            self.enabled = v;
        }
        Ok(())
    }
}

/// A model's default depth: 0 means `fallback`; above [`MAX_DRAFT_TOKENS_LIMIT`] it is
/// clamped (with a warning: the model's configuration asks for more than the engine drafts).
fn model_depth(value: usize, fallback: usize) -> usize {
    match value {
        0 => fallback,
        v if v > MAX_DRAFT_TOKENS_LIMIT => {
            tracing::warn!(
                depth = v,
                max = MAX_DRAFT_TOKENS_LIMIT,
                "the model's default draft depth is above the largest supported; clamped"
            );
            MAX_DRAFT_TOKENS_LIMIT
        }
        v => v,
    }
}

fn positive_override(name: &'static str, value: usize) -> Result<usize, CoreError> {
    if value == 0 {
        Err(CoreError::InvalidOption {
            name,
            value: value.to_string(),
            reason: "must be >= 1",
        })
    } else {
        check_depth(name, value)
    }
}

/// `value` when it is at most [`MAX_DRAFT_TOKENS_LIMIT`], else
/// [`CoreError::DraftDepthTooLarge`] naming the setting `name`.
fn check_depth(name: &'static str, value: usize) -> Result<usize, CoreError> {
    if value > MAX_DRAFT_TOKENS_LIMIT {
        Err(CoreError::DraftDepthTooLarge {
            name,
            value: value.to_string(),
            max: MAX_DRAFT_TOKENS_LIMIT,
        })
    } else {
        Ok(value)
    }
}

/// A draft depth from the environment key `key`: unset, empty or unparsable is `None` (the
/// last with a warning); a run of digits above [`MAX_DRAFT_TOKENS_LIMIT`] (even one too long
/// for `usize`) is an error.
fn env_depth(
    env: &dyn Fn(&str) -> Option<String>,
    key: &'static str,
) -> Result<Option<usize>, CoreError> {
    let Some(raw) = env(key) else {
        return Ok(None);
    };
    let digits = raw.trim();
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        let fits = digits
            .parse::<usize>()
            .is_ok_and(|v| v <= MAX_DRAFT_TOKENS_LIMIT);
        if !fits {
            return Err(CoreError::DraftDepthTooLarge {
                name: key,
                value: digits.to_string(),
                max: MAX_DRAFT_TOKENS_LIMIT,
            });
        }
    }
    Ok(env_value(env, key, parse_positive))
}

/// Reads and parses one environment key; unset or empty is `None`, an unparsable value warns
/// and is `None`.
fn env_value<T>(
    env: &dyn Fn(&str) -> Option<String>,
    key: &str,
    parse: impl Fn(&str) -> Option<T>,
) -> Option<T> {
    let raw = env(key)?;
    if raw.is_empty() {
        return None;
    }
    let parsed = parse(&raw);
    if parsed.is_none() && first_time(key, &raw) {
        tracing::warn!(key, value = %raw, "invalid MTP env setting; ignored");
    }
    parsed
}

/// Whether `key=value` is seen for the first time in this process: the options are resolved
/// for every request (and more than once for one), and each invalid setting is worth one
/// warning, not one per resolution.
fn first_time(key: &str, value: &str) -> bool {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};
    static SEEN: OnceLock<Mutex<HashSet<(String, String)>>> = OnceLock::new();
    let seen = SEEN.get_or_init(|| Mutex::new(HashSet::new()));
    match seen.lock() {
        Ok(mut set) => set.insert((key.to_string(), value.to_string())),
        // A poisoned set only means another thread panicked while inserting: warn again.
        Err(_) => true,
    }
}

/// A positive decimal integer (surrounding whitespace allowed).
fn parse_positive(s: &str) -> Option<usize> {
    s.trim().parse::<usize>().ok().filter(|&v| v > 0)
}

/// Go's `strconv.ParseBool`: 1 t T TRUE true True / 0 f F FALSE false False.
fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Which decode loop a request runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DecodeMode {
    /// Plain decoding, one target forward per token.
    Plain,
    /// Greedy MTP: drafts verified against the target's argmax.
    GreedyMtp,
    /// Sampled MTP: drafts verified by speculative sampling.
    SampledMtp,
}

/// Whether an MTP drafter is loaded for the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DrafterPresence {
    /// A drafter is loaded.
    Loaded,
    /// No drafter.
    Absent,
}

/// Whether a request asks for the log-probability of each emitted token, and for how many
/// alternatives. Speculation stays on: the engine reads them from the logits rows it already
/// computes (the plain step's row, or the target's verification rows), under the request's
/// sampling transform (see [`crate::sampling::logprobs`]). Off, the fast paths (device argmax,
/// device top-k) read no full logits row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LogprobsRequest {
    /// No log-probabilities.
    #[default]
    None,
    /// Each emitted token's log-probability and the given number of most likely alternatives
    /// (0 to [`MAX_TOP_LOGPROBS`](crate::sampling::MAX_TOP_LOGPROBS)).
    Top(usize),
}

impl LogprobsRequest {
    /// How many alternatives are asked for, `None` when log-probabilities are not.
    pub fn top(self) -> Option<usize> {
        match self {
            LogprobsRequest::None => None,
            LogprobsRequest::Top(n) => Some(n),
        }
    }

    /// Errors when more than [`MAX_TOP_LOGPROBS`](crate::sampling::MAX_TOP_LOGPROBS)
    /// alternatives are asked for.
    pub fn validate(self) -> Result<(), CoreError> {
        match self {
            LogprobsRequest::Top(n) if n > crate::sampling::MAX_TOP_LOGPROBS => {
                Err(CoreError::InvalidOption {
                    name: "top_logprobs",
                    value: n.to_string(),
                    reason: "at most 20 alternatives per token",
                })
            }
            _ => Ok(()),
        }
    }
}

/// Why a request decodes without speculation (reported once, in the response).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SpeculationOff {
    /// MTP is disabled (by the request or by the model's defaults).
    Disabled,
    /// No drafter is loaded.
    NoDrafter,
    /// Sampling at temperature > 0 with serial or compare-serial validation: sampled
    /// verification needs the batched, rollback-capable forward.
    SampledNeedsBatched,
}

impl std::fmt::Display for SpeculationOff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SpeculationOff::Disabled => "MTP is disabled for this request",
            SpeculationOff::NoDrafter => "no drafter is loaded",
            SpeculationOff::SampledNeedsBatched => {
                "sampling (temperature > 0) needs batched validation, and serial or \
                 compare-serial validation was asked for"
            }
        })
    }
}

/// Why `sampling` with `mtp` decodes without speculation, or `None` when it speculates: MTP
/// disabled, no drafter, or sampling at temperature > 0 with serial or compare-serial
/// validation. (Log-probabilities do not turn it off, unlike in the seed: see
/// [`LogprobsRequest`].)
pub fn speculation_off(
    sampling: &SamplerOptions,
    mtp: &MtpOptions,
    drafter: DrafterPresence,
) -> Option<SpeculationOff> {
    if !mtp.enabled {
        Some(SpeculationOff::Disabled)
    } else if drafter == DrafterPresence::Absent {
        Some(SpeculationOff::NoDrafter)
    } else if !sampling.is_greedy() && mtp.validation != ValidationMode::Batched {
        Some(SpeculationOff::SampledNeedsBatched)
    } else {
        None
    }
}

/// Chooses the decode loop (the seed's `useGreedyMTP` / `useSampleMTP`, extended to penalties):
///
/// * [`DecodeMode::Plain`] whenever [`speculation_off`] gives a reason;
/// * [`DecodeMode::GreedyMtp`] at temperature 0, with any processing: top-k, top-p and min-p
///   cannot change the argmax, and penalties are applied in verification (row `i` sees the
///   drafts before it), so the output is exactly plain penalised greedy decoding — where the
///   seed falls back to plain decoding;
/// * [`DecodeMode::SampledMtp`] at temperature > 0 with batched validation.
pub fn decode_mode(
    sampling: &SamplerOptions,
    mtp: &MtpOptions,
    drafter: DrafterPresence,
) -> DecodeMode {
    if speculation_off(sampling, mtp, drafter).is_some() {
        DecodeMode::Plain
    } else if sampling.is_greedy() {
        DecodeMode::GreedyMtp
    } else {
        DecodeMode::SampledMtp
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn resolve(
        defaults: MtpDefaults,
        pairs: &[(&str, &str)],
        overrides: DraftOverrides,
    ) -> Result<MtpOptions, CoreError> {
        MtpOptions::resolve(&defaults, &env_of(pairs), &overrides)
    }

    #[test]
    fn defaults_only() {
        let o = resolve(MtpDefaults::default(), &[], DraftOverrides::default()).unwrap();
        assert_eq!(
            o,
            MtpOptions {
                initial_draft_tokens: 4,
                max_draft_tokens: 16,
                schedule: ScheduleKind::Adaptive,
                validation: ValidationMode::Batched,
                enabled: true,
            }
        );
        let zeros = MtpDefaults {
            initial_draft_tokens: 0,
            max_draft_tokens: 0,
            enabled: false,
        };
        let o = resolve(zeros, &[], DraftOverrides::default()).unwrap();
        assert_eq!(
            (o.initial_draft_tokens, o.max_draft_tokens, o.enabled),
            (4, 16, false)
        );
        let small = MtpDefaults {
            initial_draft_tokens: 8,
            max_draft_tokens: 3,
            enabled: true,
        };
        let o = resolve(small, &[], DraftOverrides::default()).unwrap();
        assert_eq!((o.initial_draft_tokens, o.max_draft_tokens), (3, 3));
    }

    #[test]
    fn environment_applies() {
        let o = resolve(
            MtpDefaults::default(),
            &[
                (ENV_INITIAL_DRAFT_TOKENS, "6"),
                (ENV_MAX_DRAFT_TOKENS, "8"),
                (ENV_DRAFT_SCHEDULE, " Heuristic "),
                (ENV_SERIAL_VALIDATE, "T"),
            ],
            DraftOverrides::default(),
        )
        .unwrap();
        assert_eq!(o.initial_draft_tokens, 6);
        assert_eq!(o.max_draft_tokens, 8);
        assert_eq!(o.schedule, ScheduleKind::Heuristic);
        assert_eq!(o.validation, ValidationMode::Serial);
        let o = resolve(
            MtpDefaults::default(),
            &[
                (ENV_INITIAL_DRAFT_TOKENS, "12"),
                (ENV_MAX_DRAFT_TOKENS, "5"),
            ],
            DraftOverrides::default(),
        )
        .unwrap();
        assert_eq!((o.initial_draft_tokens, o.max_draft_tokens), (5, 5));
    }

    #[test]
    fn compare_serial_wins() {
        let o = resolve(
            MtpDefaults::default(),
            &[
                (ENV_SERIAL_VALIDATE, "1"),
                (ENV_COMPARE_SERIAL_VALIDATE, "true"),
            ],
            DraftOverrides::default(),
        )
        .unwrap();
        assert_eq!(o.validation, ValidationMode::CompareSerial);
        let o = resolve(
            MtpDefaults::default(),
            &[
                (ENV_SERIAL_VALIDATE, "False"),
                (ENV_COMPARE_SERIAL_VALIDATE, "0"),
            ],
            DraftOverrides::default(),
        )
        .unwrap();
        assert_eq!(o.validation, ValidationMode::Batched);
    }

    #[test]
    fn invalid_environment_is_ignored() {
        let o = resolve(
            MtpDefaults::default(),
            &[
                (ENV_INITIAL_DRAFT_TOKENS, "0"),
                (ENV_MAX_DRAFT_TOKENS, "-3"),
                (ENV_DRAFT_SCHEDULE, "fastest"),
                (ENV_SERIAL_VALIDATE, "yes"),
                (ENV_COMPARE_SERIAL_VALIDATE, "TrUe"),
            ],
            DraftOverrides::default(),
        )
        .unwrap();
        assert_eq!(
            o,
            resolve(MtpDefaults::default(), &[], DraftOverrides::default()).unwrap()
        );
    }

    #[test]
    fn each_invalid_setting_warns_once() {
        assert!(first_time("MTP_TEST_ONLY_KEY", "x"));
        assert!(!first_time("MTP_TEST_ONLY_KEY", "x"));
        assert!(first_time("MTP_TEST_ONLY_KEY", "y"));
    }

    #[test]
    fn go_parse_bool_set() {
        for s in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_go_bool(s), Some(true), "{s}");
        }
        for s in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_go_bool(s), Some(false), "{s}");
        }
        for s in ["", "yes", "tRUE", " true", "2"] {
            assert_eq!(parse_go_bool(s), None, "{s}");
        }
    }

    #[test]
    fn overrides_win_and_are_checked() {
        let env = [
            (ENV_MAX_DRAFT_TOKENS, "8"),
            (ENV_DRAFT_SCHEDULE, "heuristic"),
        ];
        let o = resolve(
            MtpDefaults::default(),
            &env,
            DraftOverrides {
                initial_draft_tokens: Some(10),
                max_draft_tokens: Some(12),
                schedule: Some(ScheduleKind::Constant),
                validation: Some(ValidationMode::Serial),
                enabled: Some(false),
            },
        )
        .unwrap();
        assert_eq!(
            o,
            MtpOptions {
                initial_draft_tokens: 10,
                max_draft_tokens: 12,
                schedule: ScheduleKind::Constant,
                validation: ValidationMode::Serial,
                enabled: false,
            }
        );
        let o = resolve(
            MtpDefaults::default(),
            &env,
            DraftOverrides {
                initial_draft_tokens: Some(10),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!((o.initial_draft_tokens, o.max_draft_tokens), (8, 8));
        for bad in [
            DraftOverrides {
                max_draft_tokens: Some(0),
                ..Default::default()
            },
            DraftOverrides {
                initial_draft_tokens: Some(0),
                ..Default::default()
            },
        ] {
            assert!(matches!(
                resolve(MtpDefaults::default(), &[], bad),
                Err(CoreError::InvalidOption { .. })
            ));
        }
    }

    #[test]
    fn depths_above_the_limit_are_rejected_everywhere() {
        let limit = MAX_DRAFT_TOKENS_LIMIT.to_string();
        let above = (MAX_DRAFT_TOKENS_LIMIT + 1).to_string();
        // The limit itself is accepted on every path.
        let o = resolve(
            MtpDefaults::default(),
            &[
                (ENV_MAX_DRAFT_TOKENS, &limit),
                (ENV_INITIAL_DRAFT_TOKENS, &limit),
            ],
            DraftOverrides::default(),
        )
        .unwrap();
        assert_eq!(o.max_draft_tokens, MAX_DRAFT_TOKENS_LIMIT);
        assert_eq!(o.initial_draft_tokens, MAX_DRAFT_TOKENS_LIMIT);
        // Environment: above the limit, at usize::MAX, and past what usize holds.
        for key in [ENV_MAX_DRAFT_TOKENS, ENV_INITIAL_DRAFT_TOKENS] {
            for value in [
                above.as_str(),
                " 10000 ",
                "18446744073709551615",
                "99999999999999999999999",
            ] {
                let err = resolve(MtpDefaults::default(), &[(key, value)], Default::default())
                    .unwrap_err();
                assert!(
                    matches!(&err, CoreError::DraftDepthTooLarge { name, max, .. }
                        if *name == key && *max == MAX_DRAFT_TOKENS_LIMIT),
                    "{key}={value}: {err:?}"
                );
                let message = err.to_string();
                assert!(
                    message.contains(key)
                        && message.contains(value.trim())
                        && message.contains(&format!("from 1 to {MAX_DRAFT_TOKENS_LIMIT}")),
                    "{message}"
                );
            }
        }
        // Overrides (the request and the command line).
        for bad in [
            DraftOverrides {
                max_draft_tokens: Some(MAX_DRAFT_TOKENS_LIMIT + 1),
                ..Default::default()
            },
            DraftOverrides {
                initial_draft_tokens: Some(usize::MAX),
                ..Default::default()
            },
        ] {
            let err = resolve(MtpDefaults::default(), &[], bad).unwrap_err();
            assert!(
                matches!(err, CoreError::DraftDepthTooLarge { .. }),
                "{err:?}"
            );
        }
        // A model default above the limit is clamped, not an error.
        let deep = MtpDefaults {
            initial_draft_tokens: 1000,
            max_draft_tokens: usize::MAX,
            enabled: true,
        };
        let o = resolve(deep, &[], DraftOverrides::default()).unwrap();
        assert_eq!(
            (o.initial_draft_tokens, o.max_draft_tokens),
            (MAX_DRAFT_TOKENS_LIMIT, MAX_DRAFT_TOKENS_LIMIT)
        );
    }

    #[test]
    fn from_env_reads_process_environment() {
        // Only checks that it resolves; the process environment is not modified here.
        assert!(MtpOptions::from_env(&MtpDefaults::default(), &DraftOverrides::default()).is_ok());
    }

    #[test]
    fn decode_mode_selection() {
        let mtp = resolve(MtpDefaults::default(), &[], DraftOverrides::default()).unwrap();
        let greedy = SamplerOptions::default();
        let sampled = SamplerOptions {
            temperature: 0.8,
            top_k: 40,
            ..Default::default()
        };
        let l = DrafterPresence::Loaded;
        assert_eq!(decode_mode(&greedy, &mtp, l), DecodeMode::GreedyMtp);
        assert_eq!(decode_mode(&sampled, &mtp, l), DecodeMode::SampledMtp);
        let penalised = SamplerOptions {
            repeat_penalty: 1.1,
            top_k: 40,
            top_p: 0.9,
            min_p: 0.05,
            ..Default::default()
        };
        assert_eq!(decode_mode(&penalised, &mtp, l), DecodeMode::GreedyMtp);
        assert_eq!(speculation_off(&penalised, &mtp, l), None);
        assert_eq!(
            decode_mode(&greedy, &mtp, DrafterPresence::Absent),
            DecodeMode::Plain
        );
        let off = MtpOptions {
            enabled: false,
            ..mtp
        };
        assert_eq!(decode_mode(&greedy, &off, l), DecodeMode::Plain);
        for v in [ValidationMode::Serial, ValidationMode::CompareSerial] {
            let forced = MtpOptions {
                validation: v,
                ..mtp
            };
            assert_eq!(decode_mode(&sampled, &forced, l), DecodeMode::Plain);
            assert_eq!(
                speculation_off(&sampled, &forced, l),
                Some(SpeculationOff::SampledNeedsBatched)
            );
            assert_eq!(decode_mode(&greedy, &forced, l), DecodeMode::GreedyMtp);
        }
        assert_eq!(
            speculation_off(&greedy, &off, l),
            Some(SpeculationOff::Disabled)
        );
        assert_eq!(
            speculation_off(&greedy, &mtp, DrafterPresence::Absent),
            Some(SpeculationOff::NoDrafter)
        );
        assert!(LogprobsRequest::Top(20).validate().is_ok());
        assert!(LogprobsRequest::Top(21).validate().is_err());
        assert_eq!(LogprobsRequest::Top(3).top(), Some(3));
        assert_eq!(LogprobsRequest::None.top(), None);
    }
}
