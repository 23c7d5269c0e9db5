//! What adaptive schedules learn, kept across requests: one [`DepthController`] per
//! [`ScheduleKey`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::adaptive::{AdaptiveSchedule, ControllerSnapshot, DepthController, SharedController};
use super::{ConstantSchedule, DraftSchedule, HeuristicSchedule, ScheduleKind};
use crate::options::{DecodeMode, ValidationMode};

/// Which learned state a request uses. Rounds differ in cost and acceptance along each of
/// these, so each combination learns on its own:
///
/// * `proposer` — who drafts (the MTP assistant, an n-gram lookup, a draft model): each
///   proposer has its own acceptance and cost;
/// * `backend` — the backend's name (e.g. `candle-cpu`);
/// * `mode` — greedy or sampled MTP (sampled rounds read logits on the host and accept
///   differently);
/// * `validation` — batched or serial verification;
/// * `overlap` — whether the engine's evaluation overlap is on.
///
/// The model pair is the [`ScheduleMemory`]'s own: one memory serves one target and drafter
/// (the engine and the runner's `Pipeline` each own one).
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ScheduleKey {
    /// The proposer's name.
    pub proposer: String,
    /// The backend's name.
    pub backend: String,
    /// The decode loop.
    pub mode: DecodeMode,
    /// How drafts are verified.
    pub validation: ValidationMode,
    /// Whether the evaluation overlap is on.
    pub overlap: bool,
}

/// The adaptive schedule's learned state for one model pair, shared by every request (and
/// every clone of the memory): per-position acceptance, per-depth cost and the depth planned
/// next, per [`ScheduleKey`]. Constant and heuristic schedules keep no state across requests.
#[derive(Clone, Debug, Default)]
pub struct ScheduleMemory {
    controllers: Arc<Mutex<HashMap<ScheduleKey, SharedController>>>,
}

impl ScheduleMemory {
    /// An empty memory.
    pub fn new() -> Self {
        Self::default()
    }

    /// The controller of `key` (created empty on first use).
    pub fn controller(&self, key: &ScheduleKey) -> SharedController {
        let mut map = self
            .controllers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        map.entry(key.clone()).or_default().clone()
    }

    /// The schedule of one request: `kind` starting at `initial` drafts (clamped to `max`) with
    /// at most `max` a round; the adaptive kind uses (and updates) `key`'s controller and
    /// ignores `initial` (it starts where the controller left off).
    pub fn schedule(
        &self,
        key: &ScheduleKey,
        kind: ScheduleKind,
        initial: usize,
        max: usize,
    ) -> Box<dyn DraftSchedule> {
        match kind {
            ScheduleKind::Constant => Box::new(ConstantSchedule::new(initial, max)),
            ScheduleKind::Heuristic => Box::new(HeuristicSchedule::new(initial, max)),
            ScheduleKind::Adaptive => {
                Box::new(AdaptiveSchedule::with_controller(self.controller(key), max))
            }
        }
    }

    /// Every controller's learned state, sorted by key, to keep elsewhere (a file between
    /// processes) and give back with [`import`](Self::import).
    pub fn export(&self) -> Vec<(ScheduleKey, DepthController)> {
        let map = self
            .controllers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut all: Vec<(ScheduleKey, DepthController)> = map
            .iter()
            .map(|(k, c)| {
                let c = c.lock().unwrap_or_else(PoisonError::into_inner);
                (k.clone(), c.clone())
            })
            .collect();
        all.sort_by(|a, b| format!("{:?}", a.0).cmp(&format!("{:?}", b.0)));
        all
    }

    /// Take `entries` as the learned state of their keys (replacing what the memory holds for
    /// them); entries that fail [`DepthController::is_valid`] are skipped. Returns how many
    /// were taken.
    pub fn import(
        &self,
        entries: impl IntoIterator<Item = (ScheduleKey, DepthController)>,
    ) -> usize {
        let mut map = self
            .controllers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut taken = 0;
        for (key, controller) in entries {
            if controller.is_valid() {
                map.insert(key, Arc::new(Mutex::new(controller)));
                taken += 1;
            }
        }
        taken
    }

    /// Every controller's state, sorted by key (proposer, backend, mode, ...) for stable
    /// output.
    pub fn snapshot(&self) -> Vec<(ScheduleKey, ControllerSnapshot)> {
        self.export()
            .into_iter()
            .map(|(key, controller)| (key, controller.snapshot()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::RoundReport;
    use std::time::Duration;

    fn key(proposer: &str) -> ScheduleKey {
        ScheduleKey {
            proposer: proposer.into(),
            backend: "reference".into(),
            mode: DecodeMode::GreedyMtp,
            validation: ValidationMode::Batched,
            overlap: false,
        }
    }

    /// Plays `rounds` rounds where every draft is accepted at `accept` and costs `ms`.
    fn play(s: &mut dyn DraftSchedule, rounds: usize, accept: bool, ms: u64) {
        for _ in 0..rounds {
            let d = s.depth();
            s.observe(&RoundReport {
                planned: d,
                asked: d,
                drafted: d,
                judged: d,
                accepted: if accept { d } else { 0 },
                elapsed: Duration::from_millis(ms),
            });
        }
    }

    #[test]
    fn each_proposer_learns_on_its_own_and_state_outlives_requests() {
        let memory = ScheduleMemory::new();
        let mut good = memory.schedule(&key("assistant"), ScheduleKind::Adaptive, 4, 8);
        let mut bad = memory.schedule(&key("ngram"), ScheduleKind::Adaptive, 4, 8);
        play(good.as_mut(), 150, true, 10);
        play(bad.as_mut(), 150, false, 10);
        let snaps = memory.snapshot();
        assert_eq!(snaps.len(), 2);
        let find = |p: &str| {
            snaps
                .iter()
                .find(|(k, _)| k.proposer == p)
                .map(|(_, s)| s.clone())
                .expect("a controller per proposer")
        };
        assert!(find("assistant").frontier >= 3, "{:?}", find("assistant"));
        assert!(find("assistant").acceptance.iter().all(|&a| a > 0.99));
        assert!(find("ngram").acceptance[0] < 0.01, "{:?}", find("ngram"));
        // A later request of the same key starts from the learned depth; another key does not.
        let next = memory.schedule(&key("assistant"), ScheduleKind::Adaptive, 4, 8);
        assert_eq!(next.max_depth(), 8);
        let mut next = next;
        assert!(next.depth() >= 2);
        let mut other = memory.schedule(
            &ScheduleKey {
                mode: DecodeMode::SampledMtp,
                ..key("assistant")
            },
            ScheduleKind::Adaptive,
            4,
            8,
        );
        assert_eq!(other.depth(), 0);
        // Clones share the memory; constant schedules keep nothing.
        let clone = memory.clone();
        let mut constant = clone.schedule(&key("assistant"), ScheduleKind::Constant, 4, 8);
        assert_eq!(constant.depth(), 4);
        assert_eq!(clone.snapshot().len(), 3);
    }

    #[test]
    fn exported_state_comes_back_through_json_and_bad_state_is_refused() {
        let memory = ScheduleMemory::new();
        let mut good = memory.schedule(&key("assistant"), ScheduleKind::Adaptive, 4, 8);
        play(good.as_mut(), 150, true, 10);
        let learned = good.depth();
        assert!(learned > 0);
        let json = serde_json::to_string(&memory.export()).expect("serialise");
        let entries: Vec<(ScheduleKey, DepthController)> =
            serde_json::from_str(&json).expect("deserialise");
        let restored = ScheduleMemory::new();
        assert_eq!(restored.import(entries.clone()), 1);
        let mut again = restored.schedule(&key("assistant"), ScheduleKind::Adaptive, 4, 8);
        assert_eq!(
            again.depth(),
            learned,
            "a new process starts where the last one settled"
        );
        // A tampered file: a rate above 1 is refused, not taken.
        let broken = json.replacen("\"value\":", "\"value\":7.5,\"was\":", 1);
        let entries: Vec<(ScheduleKey, DepthController)> =
            serde_json::from_str(&broken).expect("still JSON");
        assert_eq!(ScheduleMemory::new().import(entries), 0);
    }
}
