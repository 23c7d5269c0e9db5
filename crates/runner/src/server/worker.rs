//! The worker thread that owns the backend and the models, and serves queued jobs one at a time
//! or as a continuous batch.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use mtp_core::constraint::ConstraintSource;
use mtp_core::engine::batch::{self, BatchOptions, JobSource, JobWait, NextJob};
use mtp_core::engine::{DoneReason, Engine, PrefixCache, PrefixReuse, ScoredSink, SinkFlow};
use mtp_core::sampling::TokenLogprobs;
use mtp_core::Backend;
use tokio::sync::mpsc;

use super::engine::{
    EngineHandle, EventReceiver, FinishReason, Finished, GenerationEvent, GenerationJob, ModelInfo,
    SubmitError,
};
use super::metrics;
use super::stop::StopMatcher;
use crate::logprobs::TokenLogprob;
use crate::structured::{GrammarVocabulary, OutputFormat, StructuredError};
use crate::tokenizer::{ChatTemplate, Tokenizer};
use crate::{ModelPaths, Pipeline};

/// Settings of the worker, resolved once at start.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// The name requests must use.
    pub name: String,
    /// How many jobs may wait (beyond the running one) before submissions get "busy".
    pub queue_depth: usize,
    /// The `MTP_*` settings, read from the process environment once, at start.
    pub env: HashMap<String, String>,
    /// Keep the last request's caches and reuse the prefix the next prompt shares with them
    /// ([`PrefixCache`]; default on).
    pub prefix_reuse: PrefixReuse,
    /// Requests generated at once (continuous batching, [`mtp_core::engine::batch`]); 1: one
    /// at a time, as before.
    pub batch: BatchOptions,
}

impl WorkerOptions {
    /// `name` and `queue_depth`, with the `MTP_*` variables of the process environment now.
    pub fn from_process_env(name: String, queue_depth: usize) -> Self {
        let env = std::env::vars()
            .filter(|(k, _)| k.starts_with("MTP_"))
            .collect();
        Self {
            name,
            queue_depth,
            env,
            prefix_reuse: PrefixReuse::On,
            batch: BatchOptions {
                max_batch: 1,
                ..BatchOptions::default()
            },
        }
    }
}

struct Queued {
    job: GenerationJob,
    events: mpsc::UnboundedSender<GenerationEvent>,
    enqueued: Instant,
}

/// An [`EngineHandle`] backed by a worker thread.
pub struct WorkerEngine {
    model: ModelInfo,
    tokenizer: Tokenizer,
    template: Result<ChatTemplate, String>,
    queue: mpsc::Sender<Queued>,
    waiting: Arc<AtomicUsize>,
    depth: usize,
    /// The grammar engine's vocabulary, built on the first structured-output request.
    grammar: std::sync::OnceLock<GrammarVocabulary>,
}

impl std::fmt::Debug for WorkerEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerEngine")
            .field("model", &self.model.name)
            .field("depth", &self.depth)
            .finish()
    }
}

/// An error while starting the worker.
pub type StartError = Box<dyn std::error::Error + Send + Sync>;

/// What the worker reports once the pair is loaded.
struct Loaded {
    tokenizer: Tokenizer,
    max_context: usize,
    vocab: usize,
    drafter: bool,
    backend: String,
}

type Ready = Result<Loaded, StartError>;

/// The worker thread's side of start-up: [`WorkerSeat::run`] with the loaded pipeline (or
/// [`WorkerSeat::fail`]) reports to [`WorkerEngine::spawn`] and then serves the queue.
pub struct WorkerSeat {
    ready: std::sync::mpsc::Sender<Ready>,
    jobs: mpsc::Receiver<Queued>,
    waiting: Arc<AtomicUsize>,
    env: Arc<HashMap<String, String>>,
    prefix_reuse: PrefixReuse,
    batch: BatchOptions,
}

impl WorkerSeat {
    /// Report `loaded` and, when it is a pipeline, serve jobs until the server is dropped.
    pub fn run<B: Backend>(self, loaded: Result<Pipeline<B>, StartError>) {
        let pipeline = match loaded {
            Ok(p) => p,
            Err(e) => return self.fail(e),
        };
        let info = Loaded {
            tokenizer: pipeline.tokenizer().clone(),
            max_context: pipeline.max_context(),
            vocab: mtp_core::model::TargetModel::vocab_size(pipeline.target()),
            drafter: pipeline.drafter().is_some(),
            backend: pipeline.backend().name(),
        };
        if self.ready.send(Ok(info)).is_err() {
            return;
        }
        run_worker(
            &pipeline,
            self.jobs,
            &self.waiting,
            &self.env,
            (self.prefix_reuse, self.batch),
        );
    }

    /// Report that the models could not be loaded.
    pub fn fail(self, error: StartError) {
        let _ = self.ready.send(Err(error));
    }
}

impl WorkerEngine {
    /// Start the worker thread and run `body` on it; `body` creates the backend and loads the
    /// pair there (they never leave that thread) and hands it to [`WorkerSeat::run`]. Returns
    /// once the pair is loaded, or with the loading error.
    pub fn spawn<F>(paths: &ModelPaths, options: WorkerOptions, body: F) -> Result<Self, StartError>
    where
        F: FnOnce(WorkerSeat) + Send + 'static,
    {
        let depth = options.queue_depth.max(1);
        let (queue, jobs) = mpsc::channel::<Queued>(depth);
        let (ready, ready_rx) = std::sync::mpsc::channel();
        let waiting = Arc::new(AtomicUsize::new(0));
        let seat = WorkerSeat {
            ready,
            jobs,
            waiting: waiting.clone(),
            env: Arc::new(options.env.clone()),
            prefix_reuse: options.prefix_reuse,
            batch: options.batch,
        };
        let started = Instant::now();
        std::thread::Builder::new()
            .name("mtp-engine".into())
            .spawn(move || body(seat))?;
        let Loaded {
            tokenizer,
            max_context,
            vocab,
            drafter,
            backend,
        } = ready_rx
            .recv()
            .map_err(|_| "the model worker stopped while loading")??;
        let template = tokenizer.chat_template().map_err(|e| e.to_string());
        let facts = super::model_facts::model_facts(paths);
        let model = ModelInfo {
            name: options.name,
            max_context,
            vocab,
            drafter,
            backend,
            facts,
            loaded_at: SystemTime::now(),
            load_duration: started.elapsed(),
        };
        Ok(Self {
            model,
            tokenizer,
            template,
            queue,
            waiting,
            depth,
            grammar: std::sync::OnceLock::new(),
        })
    }
}

#[async_trait]
impl EngineHandle for WorkerEngine {
    fn model(&self) -> &ModelInfo {
        &self.model
    }

    fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    fn chat_template(&self) -> Result<&ChatTemplate, String> {
        self.template.as_ref().map_err(Clone::clone)
    }

    async fn submit(&self, job: GenerationJob) -> Result<EventReceiver, SubmitError> {
        let (events, receiver) = mpsc::unbounded_channel();
        let queued = Queued {
            job,
            events,
            enqueued: Instant::now(),
        };
        self.waiting.fetch_add(1, Ordering::SeqCst);
        match self.queue.try_send(queued) {
            Ok(()) => {
                metrics::queue_depth(self.waiting.load(Ordering::SeqCst));
                Ok(receiver)
            }
            Err(e) => {
                self.waiting.fetch_sub(1, Ordering::SeqCst);
                Err(match e {
                    mpsc::error::TrySendError::Full(_) => {
                        SubmitError::QueueFull { depth: self.depth }
                    }
                    mpsc::error::TrySendError::Closed(_) => SubmitError::WorkerGone,
                })
            }
        }
    }

    fn constraint(&self, format: &OutputFormat) -> Result<ConstraintSource, StructuredError> {
        let vocabulary = match self.grammar.get() {
            Some(v) => v,
            None => {
                let built = GrammarVocabulary::new(&self.tokenizer, self.model.vocab)?;
                self.grammar.get_or_init(|| built)
            }
        };
        Ok(vocabulary.compile(format)?.source())
    }

    fn queue_depth(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }
}

/// Serve jobs until every sender is gone: one at a time in order, or (`batch.max_batch > 1`) as
/// a continuous batch. With prefix reuse the caches of each job are kept for a later one: the
/// last job's, or in a batch a pool of up to `max_batch`, each job taking the one that shares
/// the longest prefix with its prompt.
fn run_worker<B: Backend>(
    pipeline: &Pipeline<B>,
    mut jobs: mpsc::Receiver<Queued>,
    waiting: &AtomicUsize,
    env: &Arc<HashMap<String, String>>,
    (prefix_reuse, batch): (PrefixReuse, BatchOptions),
) {
    let env = env.clone();
    let engine = pipeline
        .engine()
        .with_env(Arc::new(move |k: &str| env.get(k).cloned()));
    let mut queue = JobQueue {
        jobs: &mut jobs,
        waiting,
    };
    if batch.max_batch <= 1 {
        let mut held = PrefixCache::new();
        while let NextJob::Job(queued) = queue.next_job(JobWait::Block) {
            if prefix_reuse == PrefixReuse::Off {
                held.clear();
            }
            let event = run_job(&engine, pipeline, &queued, &mut held);
            let _ = queued.events.send(event);
        }
        return;
    }
    let pool = CachePool::new(batch.max_batch);
    let served = batch::serve(&engine, &batch, queue, |engine, queued: Queued| {
        let mut held = match prefix_reuse {
            PrefixReuse::On => pool.take(&queued.job.request.prompt),
            PrefixReuse::Off => PrefixCache::new(),
        };
        let event = run_job(engine, pipeline, &queued, &mut held);
        if prefix_reuse == PrefixReuse::On {
            pool.put(held);
        }
        let _ = queued.events.send(event);
    });
    match served {
        Ok(report) => tracing::info!(
            passes = report.counts.passes,
            items = report.counts.items,
            widest = report.counts.widest,
            "the batch ended"
        ),
        Err(e) => tracing::error!("the batch could not run: {e}"),
    }
}

/// The worker's queue as a batch's job source: between passes it answers at once (running
/// streams keep flowing), and with nothing running it waits for the next request.
struct JobQueue<'w> {
    jobs: &'w mut mpsc::Receiver<Queued>,
    waiting: &'w AtomicUsize,
}

impl JobSource<Queued> for JobQueue<'_> {
    fn next_job(&mut self, wait: JobWait) -> NextJob<Queued> {
        let queued = match wait {
            JobWait::Block => match self.jobs.blocking_recv() {
                Some(queued) => queued,
                None => return NextJob::Ended,
            },
            JobWait::Poll => match self.jobs.try_recv() {
                Ok(queued) => queued,
                Err(mpsc::error::TryRecvError::Empty) => return NextJob::NotYet,
                Err(mpsc::error::TryRecvError::Disconnected) => return NextJob::Ended,
            },
        };
        let left = self
            .waiting
            .fetch_sub(1, Ordering::SeqCst)
            .saturating_sub(1);
        metrics::queue_depth(left);
        NextJob::Job(queued)
    }
}

/// Kept caches of ended jobs, for later prompts that share a prefix with them.
struct CachePool<B: Backend> {
    held: std::cell::RefCell<Vec<PrefixCache<B>>>,
    capacity: usize,
}

impl<B: Backend> CachePool<B> {
    fn new(capacity: usize) -> Self {
        Self {
            held: std::cell::RefCell::new(Vec::new()),
            capacity,
        }
    }

    /// The kept caches sharing the longest prefix with `prompt` (fresh ones if none shares).
    fn take(&self, prompt: &[u32]) -> PrefixCache<B> {
        let mut held = self.held.borrow_mut();
        let shared = |c: &PrefixCache<B>| {
            c.tokens()
                .iter()
                .zip(prompt)
                .take_while(|(a, b)| a == b)
                .count()
        };
        let best = held
            .iter()
            .enumerate()
            .map(|(i, c)| (shared(c), i))
            .max()
            .filter(|&(n, _)| n > 0);
        match best {
            Some((_, i)) => held.swap_remove(i),
            None => PrefixCache::new(),
        }
    }

    /// Keep `caches` (the oldest kept ones go when the pool is full).
    fn put(&self, caches: PrefixCache<B>) {
        let mut held = self.held.borrow_mut();
        if held.len() >= self.capacity {
            held.remove(0);
        }
        held.push(caches);
    }
}

/// Run one job, streaming its text; returns its last event.
fn run_job<B: Backend>(
    engine: &Engine<'_, B>,
    pipeline: &Pipeline<B>,
    queued: &Queued,
    held: &mut PrefixCache<B>,
) -> GenerationEvent {
    let job = &queued.job;
    let queued_for = queued.enqueued.elapsed();
    let expired = |now: Instant| job.deadline.is_some_and(|d| now >= d);
    if job.cancel.is_cancelled() || queued.events.is_closed() {
        return finished(Finished::before_start(FinishReason::Cancelled, queued_for));
    }
    if expired(Instant::now()) {
        return finished(Finished::before_start(FinishReason::Timeout, queued_for));
    }
    let tokenizer = pipeline.tokenizer();
    // The engine's log-probabilities of each token (when the request asks for them), read from
    // the rows it computes anyway, with the tokens' text.
    let mut scored = Vec::new();
    let mut detok = pipeline
        .tokenizer()
        .detokenizer()
        .with_special_tokens(job.special_tokens);
    let mut stop = StopMatcher::new(&job.stop);
    let mut timed_out = false;
    let mut gone = false;
    let mut failure = None;
    let first_token = Instant::now();
    let mut first_seen = false;
    let result = {
        let mut sink = ScoredSink(|id: u32, logprobs: Option<&TokenLogprobs>| {
            if !first_seen {
                first_seen = true;
                metrics::time_to_first_token(queued_for + first_token.elapsed());
            }
            if let Some(lp) = logprobs {
                scored.push(TokenLogprob::from_engine(lp, tokenizer));
            }
            match detok.push(id) {
                Ok(Some(piece)) => {
                    let released = stop.push(&piece);
                    if !released.text.is_empty() || (released.stopped && !scored.is_empty()) {
                        let event = GenerationEvent::Text {
                            text: released.text,
                            logprobs: std::mem::take(&mut scored),
                        };
                        if queued.events.send(event).is_err() {
                            gone = true;
                        }
                    }
                    if released.stopped {
                        return SinkFlow::Stop;
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    failure = Some(e.to_string());
                    return SinkFlow::Stop;
                }
            }
            if gone || job.shutdown.is_cancelled() {
                return SinkFlow::Stop;
            }
            if expired(Instant::now()) {
                timed_out = true;
                return SinkFlow::Stop;
            }
            SinkFlow::Continue
        });
        engine.generate_reusing(held, &job.request, &mut sink, &job.cancel)
    };
    let response = match result {
        Ok(r) => r,
        Err(e) => return GenerationEvent::Failed(format!("generation failed: {e}")),
    };
    if let Some(e) = failure {
        return GenerationEvent::Failed(e);
    }
    if !stop.stopped() {
        let mut rest = match detok.finish() {
            Ok(Some(rest)) => stop.push(&rest).text,
            Ok(None) => String::new(),
            Err(e) => return GenerationEvent::Failed(e.to_string()),
        };
        rest.push_str(&stop.finish());
        if !rest.is_empty() || !scored.is_empty() {
            let _ = queued.events.send(GenerationEvent::Text {
                text: rest,
                logprobs: scored,
            });
        }
    }
    let reason = if stop.stopped() {
        FinishReason::Stop
    } else if timed_out {
        FinishReason::Timeout
    } else {
        match response.done_reason {
            DoneReason::Stop => FinishReason::Stop,
            DoneReason::Length => FinishReason::Length,
            DoneReason::Cancelled => FinishReason::Cancelled,
        }
    };
    let mut response = response;
    if stop.stopped() && response.constraint_complete.is_some() {
        // A stop string cut the text: what the client gets is not the grammar's sentence.
        response.constraint_complete = Some(false);
    }
    metrics::generation(&response, first_token.elapsed());
    finished(Finished::from_response(response, reason, queued_for))
}

fn finished(f: Finished) -> GenerationEvent {
    GenerationEvent::Finished(Box::new(f))
}

/// How long a request may wait and run, from `--request-timeout` (`None`: no limit).
pub fn deadline(timeout: Option<Duration>) -> Option<Instant> {
    timeout.map(|t| Instant::now() + t)
}
