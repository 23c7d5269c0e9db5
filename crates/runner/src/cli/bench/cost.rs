//! The cost curve: the time of a verify forward of `w` tokens, t_v(w), on a warm cache at a
//! realistic context length, and of one drafter step, t_d.
//!
//! A verify point is timed as the engine's verification does its work: one target forward over
//! `w` tokens inside a speculation transaction, the unembedding of all `w` rows, a device argmax
//! and one host read of the ids (which syncs the backend). The transaction is then rolled back,
//! so every point sees the same context. A drafter point is one step as the engine drafts: the
//! token embedding, the concatenation with the conditioning hidden, the drafter step and a
//! device argmax, evaluated before the clock stops.

use std::time::{Duration, Instant};

use mtp_core::cache::{CacheSet, SpeculationSupport};
use mtp_core::model::{MtpDrafter, TargetModel};
use mtp_core::Backend;

/// Timed samples of the cost curve.
#[derive(Debug, Clone)]
pub struct CostSamples {
    /// Tokens in the cache when each point was timed.
    pub context: usize,
    /// `verify[w - 1]`: the samples of t_v(w).
    pub verify: Vec<Vec<Duration>>,
    /// The samples of t_d.
    pub draft_step: Vec<Duration>,
}

/// The models and backend the curve is measured on.
pub struct CostModels<'a, B: Backend> {
    /// The backend.
    pub backend: &'a B,
    /// The target (untimed: this module keeps its own clock).
    pub target: &'a dyn TargetModel<B>,
    /// The drafter (`None` for a proposer without one, such as prompt lookup: no t_d).
    pub drafter: Option<&'a dyn MtpDrafter<B>>,
}

/// Measure t_v(1..=max_width) and t_d `reps` times each after one warm-up round, interleaving
/// the widths, on caches prefilled with `context_ids`.
pub fn measure<B: Backend>(
    models: &CostModels<'_, B>,
    context_ids: &[u32],
    max_width: usize,
    reps: usize,
) -> Result<CostSamples, B::Error> {
    let backend = models.backend;
    let context = context_ids.len();
    let mut caches = models.target.new_caches(backend)?;
    let ids = backend.from_u32(context_ids, &[1, context])?;
    let prefill = models.target.forward(backend, &ids, 0, &mut caches)?;
    let hidden = backend.slice(&prefill.draft_hidden, 1, context.saturating_sub(1), 1)?;
    let mut verify = vec![Vec::with_capacity(reps); max_width];
    let mut draft_step = Vec::with_capacity(reps);
    for round in 0..=reps {
        let measured = round > 0;
        let current = context_ids.last().copied().unwrap_or(0);
        if let Some(drafter) = models.drafter {
            let elapsed = time_draft_step(models, drafter, current, &hidden, context, &caches)?;
            if measured {
                draft_step.push(elapsed);
            }
        }
        for (w, samples) in (1..=max_width).zip(verify.iter_mut()) {
            let input: Vec<u32> = context_ids.iter().copied().cycle().take(w).collect();
            let elapsed = time_verify(models, &input, context, &mut caches)?;
            if measured {
                samples.push(elapsed);
            }
        }
    }
    Ok(CostSamples {
        context,
        verify,
        draft_step,
    })
}

/// One verify forward of `input` at `position`, rolled back afterwards (on a fork when the
/// caches cannot speculate).
fn time_verify<B: Backend>(
    models: &CostModels<'_, B>,
    input: &[u32],
    position: usize,
    caches: &mut CacheSet<B>,
) -> Result<Duration, B::Error> {
    let backend = models.backend;
    let mut fork = None;
    let speculating = caches.begin_speculation(backend)? == SpeculationSupport::Started;
    let live = if speculating {
        caches
    } else {
        fork.insert(caches.fork(backend)?)
    };
    let ids = backend.from_u32(input, &[1, input.len()])?;
    let t0 = Instant::now();
    let out = models.target.forward(backend, &ids, position, live)?;
    let logits = models.target.unembed(backend, &out.hidden)?;
    let argmax = backend.argmax(&logits, 2)?;
    backend.to_vec_u32(&argmax)?;
    let elapsed = t0.elapsed();
    if speculating {
        live.commit_speculation(backend, 0)?;
    }
    Ok(elapsed)
}

/// One drafter step from `(embed(current), hidden)` at `position`.
fn time_draft_step<B: Backend>(
    models: &CostModels<'_, B>,
    drafter: &dyn MtpDrafter<B>,
    current: u32,
    hidden: &B::Array,
    position: usize,
    caches: &CacheSet<B>,
) -> Result<Duration, B::Error> {
    let backend = models.backend;
    let token = backend.from_u32(&[current], &[1, 1])?;
    let t0 = Instant::now();
    let embedding = models.target.token_embeddings(backend, &token)?;
    let input = backend.concat(&[&embedding, hidden], 2)?;
    let step = drafter.draft_step(backend, &input, position, caches)?;
    let argmax = backend.argmax(&step.logits, 2)?;
    backend.eval(&[&argmax, &step.projected])?;
    Ok(t0.elapsed())
}
