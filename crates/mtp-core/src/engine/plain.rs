//! Plain decode: one target forward per token. The oracle the speculative loops are tested
//! against, so it stays deliberately simple.

use super::session::Session;
use crate::Backend;

/// Prefill, then forward one token at a time until EOS, the budget or cancellation.
pub(super) fn run<B: Backend>(session: &mut Session<'_, B>) -> Result<(), B::Error> {
    session.prefill()?;
    while !session.is_done() && !session.cancelled() {
        session.plain_step()?;
    }
    Ok(())
}
