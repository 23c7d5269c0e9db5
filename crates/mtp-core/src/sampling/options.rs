//! Sampler options and their validation.

use crate::CoreError;

/// Sampling options, as in ollama's `sample.Options`.
///
/// The [`Default`] is greedy and neutral: temperature 0, no top-k / top-p / min-p, no
/// penalties (with a 64-token penalty window), and no seed.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct SamplerOptions {
    /// Softmax temperature; 0 means greedy (argmax of the penalised logits).
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; 0 (or ≥ the vocabulary) is off.
    pub top_k: usize,
    /// Nucleus sampling threshold in [0, 1]; 0 or 1 is off ([`validate`](Self::validate)
    /// refuses other values; the pipeline treats any value ≤ 0 or ≥ 1 as off).
    pub top_p: f32,
    /// Drop tokens whose probability is below `min_p` × the largest probability; 0 is off.
    pub min_p: f32,
    /// Repeat penalty over the penalty window; 1 is off.
    pub repeat_penalty: f32,
    /// Subtracted once from the logit of every distinct token in the penalty window.
    pub presence_penalty: f32,
    /// Subtracted from a token's logit once per occurrence in the penalty window.
    pub frequency_penalty: f32,
    /// Size of the penalty window in tokens; 0 disables all penalties.
    pub repeat_last_n: usize,
    /// Seed of the random stream; `None` seeds from OS entropy.
    pub seed: Option<u64>,
}

impl Default for SamplerOptions {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repeat_last_n: 64,
            seed: None,
        }
    }
}

impl SamplerOptions {
    /// Checks the options: every value finite, temperature ≥ 0, top-p and min-p in [0, 1]
    /// (top-p 0 or 1 means off, as OpenAI's API bounds it), repeat penalty > 0.
    pub fn validate(&self) -> Result<(), CoreError> {
        let check = |name: &'static str, v: f32, ok: bool, reason: &'static str| {
            if !v.is_finite() {
                Err(CoreError::InvalidOption {
                    name,
                    value: v.to_string(),
                    reason: "not finite",
                })
            } else if !ok {
                Err(CoreError::InvalidOption {
                    name,
                    value: v.to_string(),
                    reason,
                })
            } else {
                Ok(())
            }
        };
        check(
            "temperature",
            self.temperature,
            self.temperature >= 0.0,
            "must be >= 0",
        )?;
        check(
            "top_p",
            self.top_p,
            (0.0..=1.0).contains(&self.top_p),
            "must be between 0 and 1",
        )?;
        check(
            "min_p",
            self.min_p,
            (0.0..=1.0).contains(&self.min_p),
            "must be between 0 and 1",
        )?;
        check(
            "repeat_penalty",
            self.repeat_penalty,
            self.repeat_penalty > 0.0,
            "must be > 0",
        )?;
        check("presence_penalty", self.presence_penalty, true, "")?;
        check("frequency_penalty", self.frequency_penalty, true, "")?;
        Ok(())
    }

    /// Whether the options do no logit processing beyond temperature: no top-k, top-p, min-p
    /// or penalties (the seed's `useGreedyMTP` condition). A zero penalty window also counts as
    /// "no penalties", since the penalties then have nothing to act on.
    pub fn is_neutral(&self) -> bool {
        let penalties_off = self.repeat_last_n == 0
            || ((self.repeat_penalty <= 0.0 || self.repeat_penalty == 1.0)
                && self.presence_penalty == 0.0
                && self.frequency_penalty == 0.0);
        let top_p_off = self.top_p <= 0.0 || self.top_p >= 1.0;
        penalties_off && top_p_off && self.top_k == 0 && self.min_p == 0.0
    }

    /// Whether tokens can be chosen by a plain argmax of the raw logits: greedy without
    /// penalties. At temperature 0, top-k, top-p and min-p keep the most likely token, so they
    /// cannot change the choice and count as neutral here.
    pub fn is_device_argmax(&self) -> bool {
        self.is_greedy() && !self.has_penalties()
    }

    /// Whether sampling is greedy (temperature 0).
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// Whether the penalty stage does anything.
    pub fn has_penalties(&self) -> bool {
        self.repeat_last_n > 0
            && (self.repeat_penalty != 1.0
                || self.presence_penalty != 0.0
                || self.frequency_penalty != 0.0)
    }

    /// How many of a row's largest logits a device-side top-k must return for the pipeline to
    /// give exactly the dense row's distribution, or `None` when only the whole row will do
    /// (greedy, top-k off, penalties that can raise a logit, or as many candidates as tokens).
    ///
    /// With top-k on: `top_k` without penalties; with penalties that only lower logits (repeat
    /// ≥ 1, presence ≥ 0, frequency ≥ 0) `top_k + repeat_last_n`, a bound on the distinct ids of
    /// the penalty window (see `sampling::pipeline`).
    pub fn top_candidates(&self, vocab: usize) -> Option<usize> {
        if self.is_greedy() || self.top_k == 0 {
            return None;
        }
        let k = if !self.has_penalties() {
            self.top_k
        } else if self.repeat_penalty >= 1.0
            && self.presence_penalty >= 0.0
            && self.frequency_penalty >= 0.0
        {
            self.top_k.saturating_add(self.repeat_last_n)
        } else {
            return None;
        };
        (k < vocab).then_some(k)
    }

    /// How many of a row's largest logits a device-side top-k reads, beside a device sum of the
    /// row's softmax weight, to settle top-p / min-p without reading the whole row
    /// ([`NUCLEUS_CANDIDATES`](Self::NUCLEUS_CANDIDATES)); `None` when that does not apply:
    /// greedy, top-k on (see [`top_candidates`](Self::top_candidates)), penalties, neither
    /// top-p nor min-p on (every token survives), or a vocabulary no larger than the count.
    /// A row the candidates do not settle is read whole.
    pub fn nucleus_candidates(&self, vocab: usize) -> Option<usize> {
        let top_k_off = self.top_k == 0 || self.top_k >= vocab;
        let top_p_on = self.top_p > 0.0 && self.top_p < 1.0;
        let applies = !self.is_greedy()
            && top_k_off
            && !self.has_penalties()
            && (top_p_on || self.min_p > 0.0);
        (applies && Self::NUCLEUS_CANDIDATES < vocab).then_some(Self::NUCLEUS_CANDIDATES)
    }

    /// The candidates read per row for top-p / min-p with top-k off
    /// ([`nucleus_candidates`](Self::nucleus_candidates)).
    pub const NUCLEUS_CANDIDATES: usize = 256;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_greedy_and_neutral() {
        let o = SamplerOptions::default();
        assert!(o.is_greedy());
        assert!(o.is_neutral());
        assert!(o.validate().is_ok());
        assert_eq!(o.repeat_last_n, 64);
        assert_eq!(o.seed, None);
    }

    #[test]
    fn neutrality() {
        let base = SamplerOptions::default();
        let cases = [
            SamplerOptions {
                top_k: 40,
                ..base.clone()
            },
            SamplerOptions {
                top_p: 0.9,
                ..base.clone()
            },
            SamplerOptions {
                min_p: 0.05,
                ..base.clone()
            },
            SamplerOptions {
                repeat_penalty: 1.1,
                ..base.clone()
            },
            SamplerOptions {
                presence_penalty: 0.5,
                ..base.clone()
            },
            SamplerOptions {
                frequency_penalty: 0.5,
                ..base.clone()
            },
        ];
        for c in &cases {
            assert!(!c.is_neutral(), "{c:?}");
        }
        assert!(SamplerOptions {
            top_p: 0.0,
            ..base.clone()
        }
        .is_neutral());
        assert!(SamplerOptions {
            top_p: 1.5,
            ..base.clone()
        }
        .is_neutral());
        assert!(SamplerOptions {
            repeat_penalty: 1.3,
            repeat_last_n: 0,
            ..base.clone()
        }
        .is_neutral());
        assert!(SamplerOptions {
            temperature: 0.8,
            ..base
        }
        .is_neutral());
    }

    #[test]
    fn validation_errors() {
        let base = SamplerOptions::default();
        let bad = [
            (
                SamplerOptions {
                    temperature: -0.1,
                    ..base.clone()
                },
                "temperature",
            ),
            (
                SamplerOptions {
                    temperature: f32::NAN,
                    ..base.clone()
                },
                "temperature",
            ),
            (
                SamplerOptions {
                    temperature: f32::INFINITY,
                    ..base.clone()
                },
                "temperature",
            ),
            (
                SamplerOptions {
                    top_p: f32::NAN,
                    ..base.clone()
                },
                "top_p",
            ),
            (
                SamplerOptions {
                    min_p: 1.5,
                    ..base.clone()
                },
                "min_p",
            ),
            (
                SamplerOptions {
                    min_p: -0.5,
                    ..base.clone()
                },
                "min_p",
            ),
            (
                SamplerOptions {
                    repeat_penalty: 0.0,
                    ..base.clone()
                },
                "repeat_penalty",
            ),
            (
                SamplerOptions {
                    repeat_penalty: -1.0,
                    ..base.clone()
                },
                "repeat_penalty",
            ),
            (
                SamplerOptions {
                    presence_penalty: f32::NAN,
                    ..base.clone()
                },
                "presence_penalty",
            ),
            (
                SamplerOptions {
                    frequency_penalty: f32::INFINITY,
                    ..base.clone()
                },
                "frequency_penalty",
            ),
        ];
        for (o, name) in bad {
            match o.validate() {
                Err(CoreError::InvalidOption { name: n, .. }) => assert_eq!(n, name),
                other => panic!("{o:?}: {other:?}"),
            }
        }
        for top_p in [-3.0, 7.0, 1.0001] {
            match (SamplerOptions {
                top_p,
                ..base.clone()
            })
            .validate()
            {
                Err(CoreError::InvalidOption { name, .. }) => assert_eq!(name, "top_p"),
                other => panic!("top_p {top_p}: {other:?}"),
            }
        }
        for top_p in [0.0, 0.5, 1.0] {
            assert!(SamplerOptions {
                top_p,
                ..base.clone()
            }
            .validate()
            .is_ok());
        }
    }
}
