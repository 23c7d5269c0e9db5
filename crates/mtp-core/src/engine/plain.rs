//! Plain decode: one target forward per token. The oracle the speculative loops are tested
//! against, so its default loop stays deliberately simple; the pipelined loop (evaluation
//! overlap on lazy backends) is tested against it.

use super::session::Session;
use crate::cache::SpeculationSupport;
use crate::{Backend, CoreError};

/// Prefill, then forward one token at a time until EOS, the budget or cancellation.
///
/// With the evaluation overlap (`overlap`, lazy backends, greedy neutral sampling, caches that
/// can roll back, no log-probabilities, which read each row, and no constraint, whose mask
/// needs each chosen token) the loop runs one token ahead instead: see [`pipelined`]. A
/// constraint that allows nothing more ends the run (see [`crate::constraint`]).
pub(super) fn run<B: Backend>(session: &mut Session<'_, B>, overlap: bool) -> Result<(), B::Error> {
    session.prefill()?;
    if overlap
        && session.device_argmax()
        && session.caches.can_speculate()
        && session.top_logprobs().is_none()
        && session.constraint.is_none()
    {
        return pipelined(session);
    }
    while !session.is_done() && !session.cancelled() && !session.constraint_exhausted()? {
        session.plain_step()?;
    }
    Ok(())
}

/// Greedy plain decode one token ahead (as mlx-lm's generate loop): the forward of token `t + 1`
/// is built on its still-lazy argmax and its evaluation started *before* token `t + 1` is read
/// and emitted, so the device computes while the host reads, emits and builds the next graph.
///
/// That forward writes the caches before the engine knows whether token `t + 1` ends the
/// generation (EOS, a sink that stops, cancellation), so it runs inside a one-position
/// speculation transaction: committed once the token is emitted and generation goes on, rolled
/// back otherwise (and on errors). The caches then hold exactly what the simple loop leaves; the
/// only trace is one extra, rolled-back target forward when a run ends early.
fn pipelined<B: Backend>(s: &mut Session<'_, B>) -> Result<(), B::Error> {
    if s.is_done() || s.cancelled() {
        return Ok(());
    }
    // `current` is emitted and generation goes on: its forward needs no transaction.
    let ids = s.ids(&[s.current])?;
    let mut next = s.forward_argmax(&ids)?;
    loop {
        // After emitting `next`, is another token wanted? Then forward `next` already.
        let ahead = if s.remaining() > 1 {
            let undo = Undo::open(s)?;
            match s.forward_argmax(&next.id) {
                Ok(after) => Some((after, undo)),
                Err(e) => return Err(undo.after_error(s, e)),
            }
        } else {
            None
        };
        let goes_on = match s.take_device_token(&next) {
            Ok(emitted) => emitted && !s.cancelled(),
            Err(e) => {
                return Err(match ahead {
                    Some((_, undo)) => undo.after_error(s, e),
                    None => e,
                })
            }
        };
        match ahead {
            Some((after, _)) if goes_on => {
                s.caches.commit_speculation(s.backend, 1)?;
                next = after;
            }
            Some((_, undo)) => return undo.roll_back(s),
            None => return Ok(()),
        }
    }
}

/// What undoes a look-ahead forward: the session's position and draft hidden before it, with
/// the caches' speculation transaction opened for it.
struct Undo<B: Backend> {
    position: usize,
    hidden: Option<B::Array>,
}

impl<B: Backend> Undo<B> {
    /// Open the transaction and remember the session state.
    fn open(s: &mut Session<'_, B>) -> Result<Self, B::Error> {
        if s.caches.begin_speculation(s.backend)? != SpeculationSupport::Started {
            return Err(CoreError::Cache(
                "pipelined decode on caches that cannot speculate".into(),
            )
            .into());
        }
        Ok(Self {
            position: s.position,
            hidden: s.hidden.clone(),
        })
    }

    /// Drop every position written since [`Undo::open`] and restore the session state.
    fn roll_back(self, s: &mut Session<'_, B>) -> Result<(), B::Error> {
        s.position = self.position;
        s.hidden = self.hidden;
        s.caches.commit_speculation(s.backend, 0)
    }

    /// Roll back after `error` and return it (a failed rollback is logged: the first error is
    /// the one to report).
    fn after_error(self, s: &mut Session<'_, B>, error: B::Error) -> B::Error {
        if let Err(rollback) = self.roll_back(s) {
            tracing::warn!(target: "mtp", %rollback, "rolling back a look-ahead forward failed");
        }
        error
    }
}
