//! The clock behind [`RoundPhases`]: the session's cumulative time in each timed part of a
//! round, and a round's share of it.

use std::time::Duration;

use crate::schedule::RoundPhases;

/// Time a session spent in the parts of its rounds it times itself, cumulative.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PhaseTimes {
    /// Target forwards.
    pub forward: Duration,
    /// Unembeddings of their rows.
    pub unembed: Duration,
    /// Cache commits and rollbacks after verification.
    pub commit: Duration,
}

/// One round's split: the session's [`PhaseTimes`] when it began (its wall time comes from
/// the round's own timer, which leaves out time spent waiting on other sequences).
pub(crate) struct PhaseClock {
    at_start: PhaseTimes,
}

/// The measured parts of a round that the session's times do not split.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RoundParts {
    /// The proposal's drafting.
    pub draft: Duration,
    /// Of `draft`, what ran before the round began (the evaluation overlap).
    pub drafted_before: Duration,
    /// Verification's wall time (its forwards, unembeddings and commits included).
    pub verify: Duration,
    /// Emission.
    pub emit: Duration,
    /// Drafting for the next round done inside this one (counted as the next round's).
    pub drafted_ahead: Duration,
}

impl PhaseClock {
    /// A round starting with the session's times so far.
    pub(crate) fn start(times: PhaseTimes) -> Self {
        Self { at_start: times }
    }

    /// The round's phases: `now` the session's times at its end, `elapsed` its wall time from
    /// its start to its last emission.
    pub(crate) fn phases(
        &self,
        now: PhaseTimes,
        elapsed: Duration,
        parts: RoundParts,
    ) -> RoundPhases {
        let forward = now.forward.saturating_sub(self.at_start.forward);
        let unembed = now.unembed.saturating_sub(self.at_start.unembed);
        let commit = now.commit.saturating_sub(self.at_start.commit);
        let host = parts.verify.saturating_sub(forward + unembed + commit);
        let wall = (elapsed + parts.drafted_before).saturating_sub(parts.drafted_ahead);
        let timed = parts.draft + parts.verify + parts.emit;
        RoundPhases {
            draft: parts.draft.as_secs_f64(),
            forward: forward.as_secs_f64(),
            unembed: unembed.as_secs_f64(),
            host: host.as_secs_f64(),
            commit: commit.as_secs_f64(),
            emit: parts.emit.as_secs_f64(),
            other: wall.saturating_sub(timed).as_secs_f64(),
            wall: wall.as_secs_f64(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parts_add_up_to_the_wall() {
        let ms = Duration::from_millis;
        let clock = PhaseClock {
            at_start: PhaseTimes {
                forward: ms(100),
                unembed: ms(10),
                commit: ms(1),
            },
        };
        let now = PhaseTimes {
            forward: ms(108),
            unembed: ms(12),
            commit: ms(2),
        };
        let parts = RoundParts {
            draft: ms(3),
            drafted_before: ms(1),
            verify: ms(13),
            emit: ms(1),
            drafted_ahead: ms(2),
        };
        let p = clock.phases(now, ms(20), parts);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(p.forward, 0.008) && close(p.unembed, 0.002) && close(p.commit, 0.001));
        assert!(close(p.host, 0.002), "{p:?}");
        // 20 ms elapsed + 1 ms drafted before - 2 ms drafted ahead.
        assert!(close(p.wall, 0.019), "{p:?}");
        assert!(close(p.other, 0.002), "{p:?}");
        let sum = p.draft + p.forward + p.unembed + p.host + p.commit + p.emit + p.other;
        assert!((sum - p.wall).abs() < 1e-9, "{p:?}");
    }
}
