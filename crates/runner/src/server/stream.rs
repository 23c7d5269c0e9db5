//! A submitted job's events as an async stream that cancels the job when it is dropped (the
//! client went away), and the whole result for non-streaming requests.

use futures_util::stream::{self, Stream};
use mtp_core::engine::CancelToken;

use super::engine::{EventReceiver, Finished, GenerationEvent, TokenLogprob};

/// Cancels a job when dropped before the job finished.
#[derive(Debug)]
pub struct CancelOnDrop(pub CancelToken);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// The events of a job, ending after its `Finished` or `Failed` event (or when the worker
/// drops the channel, reported as `Failed`).
pub fn events(
    receiver: EventReceiver,
    cancel: CancelToken,
) -> impl Stream<Item = GenerationEvent> + Send + 'static {
    let state = Some((receiver, CancelOnDrop(cancel)));
    stream::unfold(state, |state| async move {
        let (mut receiver, guard) = state?;
        match receiver.recv().await {
            Some(event @ GenerationEvent::Text { .. }) => Some((event, Some((receiver, guard)))),
            Some(last) => Some((last, None)),
            None => Some((
                GenerationEvent::Failed("the model worker stopped".to_string()),
                None,
            )),
        }
    })
}

/// The whole result of a job, for `"stream": false`.
#[derive(Debug, Clone)]
pub struct Collected {
    /// The text.
    pub text: String,
    /// The tokens' log-probabilities (when asked for).
    pub logprobs: Vec<TokenLogprob>,
    /// The end.
    pub done: Finished,
}

/// The whole result of a job, or the failure message.
pub async fn collect(
    mut receiver: EventReceiver,
    cancel: CancelToken,
) -> Result<Collected, String> {
    let _guard = CancelOnDrop(cancel);
    let mut text = String::new();
    let mut all = Vec::new();
    loop {
        match receiver.recv().await {
            Some(GenerationEvent::Text {
                text: piece,
                logprobs,
            }) => {
                text.push_str(&piece);
                all.extend(logprobs);
            }
            Some(GenerationEvent::Finished(done)) => {
                return Ok(Collected {
                    text,
                    logprobs: all,
                    done: *done,
                })
            }
            Some(GenerationEvent::Failed(e)) => return Err(e),
            None => return Err("the model worker stopped".to_string()),
        }
    }
}
