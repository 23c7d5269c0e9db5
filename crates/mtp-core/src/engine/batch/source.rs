//! Where a batch's jobs come from.

/// Whether a [`JobSource`] may block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobWait {
    /// Nothing is running: wait for the next job (or the end).
    Block,
    /// Sequences are running: answer at once, with a job or [`NextJob::NotYet`], so they keep
    /// flowing.
    Poll,
}

/// A [`JobSource`]'s answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NextJob<J> {
    /// A job to start.
    Job(J),
    /// No job now (only an answer to [`JobWait::Poll`]); ask again after the next pass.
    NotYet,
    /// No job ever again: the batch ends when the running ones have.
    Ended,
}

/// The jobs of a continuous batch ([`serve`](super::serve)). The scheduler asks whenever a place
/// is free: between passes while sequences run ([`JobWait::Poll`]), and blocking when none
/// does ([`JobWait::Block`]).
///
/// Any `FnMut() -> Option<J>` is a source that never waits: `None` ends it (an iterator's
/// `next`, say). Such a closure runs on the scheduler's thread between passes, so one that
/// blocks holds every running sequence until it returns.
pub trait JobSource<J> {
    /// The next job, or why there is none.
    fn next_job(&mut self, wait: JobWait) -> NextJob<J>;
}

impl<J, F: FnMut() -> Option<J>> JobSource<J> for F {
    fn next_job(&mut self, _wait: JobWait) -> NextJob<J> {
        match self() {
            Some(job) => NextJob::Job(job),
            None => NextJob::Ended,
        }
    }
}
