//! A prompt joining a running batch is forwarded one chunk per pass beside the running
//! sequences, and a joining request cancelled during its prefill stops within one chunk.

mod common;

use std::cell::{Cell, RefCell};

use common::*;
use mtp_core::cache::CacheSet;
use mtp_core::engine::batch::{
    serve, BatchOptions, JobSource, JobWait, NextJob, SpeculationPolicy,
};
use mtp_core::engine::{CancelToken, DiscardSink, DoneReason, Engine, GenerateRequest, Response};
use mtp_core::model::{ForwardJob, TargetModel, TargetOutput};
use mtp_core::testing::{TinyConfig, TinyTarget};
use mtp_core::{Backend, CoreError};

const CHUNK: usize = 4;
const LONG_PROMPT: usize = 50;

/// A target that logs the length of every forward it runs (alone or in a batch), in order,
/// marking the long prompt's chunks, and can cancel a token when it sees the long prompt's
/// `cancel_at`-th chunk.
struct Recording<'t> {
    inner: &'t TinyTarget<B>,
    log: RefCell<Vec<Forwarded>>,
    long_chunks: Cell<usize>,
    cancel_at: Option<(usize, CancelToken)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Forwarded {
    /// A chunk of the long prompt.
    LongChunk,
    /// Another forward of `len` tokens.
    Other(usize),
}

impl Recording<'_> {
    fn note(&self, b: &B, ids: &<B as Backend>::Array) -> Result<(), CoreError> {
        let len = b.shape(ids)[1];
        // The long prompt's chunks are the forwards of CHUNK tokens whose first token is 7.
        if len == CHUNK && b.to_vec_u32(ids)?[0] == 7 {
            self.long_chunks.set(self.long_chunks.get() + 1);
            self.log.borrow_mut().push(Forwarded::LongChunk);
            if let Some((at, token)) = &self.cancel_at {
                if self.long_chunks.get() == *at {
                    token.cancel();
                }
            }
        } else {
            self.log.borrow_mut().push(Forwarded::Other(len));
        }
        Ok(())
    }
}

impl TargetModel<B> for Recording<'_> {
    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }
    fn max_context(&self) -> usize {
        self.inner.max_context()
    }
    fn new_caches(&self, b: &B) -> Result<CacheSet<B>, CoreError> {
        self.inner.new_caches(b)
    }
    fn forward(
        &self,
        b: &B,
        ids: &<B as Backend>::Array,
        start: usize,
        caches: &mut CacheSet<B>,
    ) -> Result<TargetOutput<B>, CoreError> {
        self.note(b, ids)?;
        self.inner.forward(b, ids, start, caches)
    }
    fn forward_batch(
        &self,
        b: &B,
        jobs: &mut [ForwardJob<'_, B>],
    ) -> Result<Vec<TargetOutput<B>>, CoreError> {
        for job in jobs.iter() {
            self.note(b, job.ids)?;
        }
        self.inner.forward_batch(b, jobs)
    }
    fn unembed(
        &self,
        b: &B,
        hidden: &<B as Backend>::Array,
    ) -> Result<<B as Backend>::Array, CoreError> {
        self.inner.unembed(b, hidden)
    }
    fn token_embeddings(
        &self,
        b: &B,
        ids: &<B as Backend>::Array,
    ) -> Result<<B as Backend>::Array, CoreError> {
        self.inner.token_embeddings(b, ids)
    }
}

/// A short request first; the long one joins after `delay` passes, once the short one runs.
struct LateJoiner {
    jobs: Vec<(GenerateRequest, CancelToken)>,
    polls: usize,
    delay: usize,
}

impl JobSource<(GenerateRequest, CancelToken)> for LateJoiner {
    fn next_job(&mut self, wait: JobWait) -> NextJob<(GenerateRequest, CancelToken)> {
        self.polls += 1;
        if self.jobs.is_empty() {
            return NextJob::Ended;
        }
        if self.jobs.len() == 1 && self.polls <= self.delay && wait == JobWait::Poll {
            return NextJob::NotYet;
        }
        NextJob::Job(self.jobs.remove(0))
    }
}

/// Run the short and the long request through a batch over `target`; their responses.
fn run(target: &Recording<'_>, long_cancel: CancelToken) -> Vec<Response> {
    let b = B::default();
    let engine = Engine::new(&b, target).with_env(no_env());
    let short = GenerateRequest::greedy(vec![1, 2], 40);
    // Every prompt token of the long one is 7, so its chunks are recognisable.
    let long = GenerateRequest::greedy(vec![7; LONG_PROMPT], 4);
    let source = LateJoiner {
        jobs: vec![(short, CancelToken::new()), (long, long_cancel)],
        polls: 0,
        delay: 3,
    };
    let options = BatchOptions {
        max_batch: 2,
        prefill_chunk: CHUNK,
        policy: SpeculationPolicy::Never,
    };
    let responses = RefCell::new(Vec::new());
    serve(&engine, &options, source, |engine, (request, cancel)| {
        let out = engine
            .generate(&request, &mut DiscardSink, &cancel)
            .expect("generates");
        responses.borrow_mut().push(out);
    })
    .expect("the batch runs");
    responses.into_inner()
}

fn tiny() -> TinyTarget<B> {
    target(TinyConfig {
        seed: 4,
        ..TinyConfig::default()
    })
}

#[test]
fn a_joining_prompt_goes_one_chunk_per_pass_beside_the_running_sequence() {
    let inner = tiny();
    let target = Recording {
        inner: &inner,
        log: RefCell::new(Vec::new()),
        long_chunks: Cell::new(0),
        cancel_at: None,
    };
    let responses = run(&target, CancelToken::new());
    assert_eq!(responses.len(), 2);
    let log = target.log.into_inner();
    // No forward longer than a chunk; the long prompt took 12 full ones (and a last of 2).
    assert!(
        log.iter()
            .all(|f| matches!(f, Forwarded::LongChunk | Forwarded::Other(1..=CHUNK))),
        "{log:?}"
    );
    assert_eq!(target.long_chunks.get(), LONG_PROMPT / CHUNK);
    // The long one joined once the short one ran (the short prompt's forward came first).
    assert_eq!(log[0], Forwarded::Other(2), "{log:?}");
    // While the long prompt was forwarded, one chunk per pass, the short sequence kept
    // stepping: a pass serves its forward or its logits, so it steps every other pass.
    let first = log
        .iter()
        .position(|f| *f == Forwarded::LongChunk)
        .unwrap_or(0);
    let last = log
        .iter()
        .rposition(|f| *f == Forwarded::LongChunk)
        .unwrap_or(0);
    let steps = log[first..last]
        .iter()
        .filter(|f| **f == Forwarded::Other(1))
        .count();
    let chunks = target.long_chunks.get();
    assert!(
        steps + 1 >= chunks / 2,
        "{steps} steps beside {chunks} chunks: {log:?}"
    );
    // Each equals itself alone.
    let b = B::default();
    for out in &responses {
        assert_eq!(out.done_reason, DoneReason::Length);
    }
    let alone = Engine::new(&b, &inner)
        .with_env(no_env())
        .generate(
            &GenerateRequest::greedy(vec![1, 2], 40),
            &mut DiscardSink,
            &CancelToken::new(),
        )
        .expect("alone");
    assert!(responses.iter().any(|r| r.tokens == alone.tokens));
}

#[test]
fn a_request_cancelled_during_its_prefill_stops_within_one_chunk() {
    let inner = tiny();
    let cancel = CancelToken::new();
    let target = Recording {
        inner: &inner,
        log: RefCell::new(Vec::new()),
        long_chunks: Cell::new(0),
        cancel_at: Some((2, cancel.clone())),
    };
    let responses = run(&target, cancel);
    // Cancelled while its second chunk ran: no third chunk was forwarded.
    assert_eq!(target.long_chunks.get(), 2);
    let cancelled: Vec<&Response> = responses
        .iter()
        .filter(|r| r.done_reason == DoneReason::Cancelled)
        .collect();
    assert_eq!(cancelled.len(), 1, "{responses:?}");
    assert!(cancelled[0].tokens.is_empty());
    // The running sequence was not disturbed.
    assert!(responses
        .iter()
        .any(|r| r.done_reason == DoneReason::Length && r.tokens.len() == 40));
}
