//! The threads the quantized matmul splits its output rows over: the calling thread and
//! `threads - 1` workers that wait for the next product by spinning briefly, then sleeping.
//!
//! A decode step runs about seven quantized products per layer, each a few tens of
//! microseconds, with host work between them. Handing each one to rayon's global pool from a
//! thread outside it (what the engine's threads are) costs a futex wake to start it and another
//! to report back, while the caller sleeps and the pool's threads run it: measured on Gemma 3
//! 270M (2 cores), about a fifth of all CPU samples sat in futex and scheduler calls. Here the
//! caller takes tasks itself, the workers claim the rest through one atomic counter, and a
//! worker that finished one product is still polling when the next arrives, so within a decode
//! step the products make no system call; a worker is woken by `unpark` only after it sat idle
//! for [`SPIN`] (llama.cpp's CPU thread pool polls the same way).
//!
//! * Size: rayon's global pool size when first used (what `--threads` sets), so one knob
//!   sizes every CPU kernel; one thread means every product runs on the caller alone.
//! * A worker spins for [`SPIN`] after its last task, then parks until woken.
//! * Several callers at once (the tests' threads, several engines): one product holds the
//!   workers; a caller that finds them busy runs its product on its own thread instead of
//!   queueing (results do not depend on which thread computes a task).
//! * A task that panics is counted as done and reported to the caller as an error, so no
//!   caller waits forever.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, TryLockError};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

/// How long an idle worker polls for the next product before it parks.
pub const SPIN: Duration = Duration::from_micros(300);

/// Spins between two looks at the clock while polling.
const SPINS_PER_CLOCK_READ: u32 = 64;

/// One product: `tasks` calls of `work(task)`, claimed in any order by any thread.
struct Job {
    work: Box<dyn Fn(usize) + Send + Sync>,
    tasks: usize,
    next: AtomicUsize,
    done: AtomicUsize,
    panicked: AtomicBool,
}

impl Job {
    /// Run tasks until none is left unclaimed.
    fn help(&self) {
        loop {
            let task = self.next.fetch_add(1, Ordering::Relaxed);
            if task >= self.tasks {
                return;
            }
            if catch_unwind(AssertUnwindSafe(|| (self.work)(task))).is_err() {
                self.panicked.store(true, Ordering::Relaxed);
            }
            self.done.fetch_add(1, Ordering::Release);
        }
    }

    fn finished(&self) -> bool {
        self.done.load(Ordering::Acquire) >= self.tasks
    }
}

/// What the caller and the workers share.
struct Shared {
    /// Bumped once per product handed to the workers.
    epoch: AtomicU64,
    /// The product of the current epoch.
    job: Mutex<Option<Arc<Job>>>,
    /// Per worker: whether it is parked (or about to park) and must be woken.
    sleeping: Vec<AtomicBool>,
}

/// A task panicked (a kernel bug: every slice access is bounds-checked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskPanicked;

/// The pool; see the [module docs](self).
pub struct SpinPool {
    shared: Arc<Shared>,
    workers: Vec<Thread>,
    /// Held by the caller whose product the workers are running.
    busy: Mutex<()>,
}

impl SpinPool {
    /// The process-wide pool, sized once from rayon's global pool.
    pub fn global() -> &'static SpinPool {
        static POOL: OnceLock<SpinPool> = OnceLock::new();
        POOL.get_or_init(|| SpinPool::new(rayon::current_num_threads()))
    }

    /// A pool of `threads` threads in all: the caller and `threads - 1` workers (at least one
    /// thread; a worker that cannot be spawned is left out, said once at `warn`).
    pub fn new(threads: usize) -> Self {
        let wanted = threads.max(1) - 1;
        let shared = Arc::new(Shared {
            epoch: AtomicU64::new(0),
            job: Mutex::new(None),
            sleeping: (0..wanted).map(|_| AtomicBool::new(false)).collect(),
        });
        let mut workers = Vec::with_capacity(wanted);
        for index in 0..wanted {
            let shared = shared.clone();
            let spawned = thread::Builder::new()
                .name(format!("mtp-qmatmul-{index}"))
                .spawn(move || work_loop(&shared, index));
            match spawned {
                Ok(handle) => workers.push(handle.thread().clone()),
                Err(e) => {
                    tracing::warn!(
                        "quantized matmul: could not start worker thread {index} ({e}); using {} threads",
                        workers.len() + 1
                    );
                    break;
                }
            }
        }
        Self {
            shared,
            workers,
            busy: Mutex::new(()),
        }
    }

    /// Threads a product can run on (the caller's included).
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Run `work(task)` for every task in `0..tasks`, on the caller and the workers, and return
    /// when all are done.
    pub fn run(
        &self,
        tasks: usize,
        work: impl Fn(usize) + Send + Sync + 'static,
    ) -> Result<(), TaskPanicked> {
        let job = Arc::new(Job {
            work: Box::new(work),
            tasks,
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
        });
        let guard = if tasks > 1 && !self.workers.is_empty() {
            match self.busy.try_lock() {
                Ok(guard) => Some(guard),
                Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
                Err(TryLockError::WouldBlock) => None,
            }
        } else {
            None
        };
        if let Some(_guard) = guard {
            self.hand_out(&job);
            job.help();
            wait_until(|| job.finished());
            // Drop the slot's reference, so the product's inputs are not kept alive until the
            // next one (a worker may still hold the `Arc` for a moment; every task is done).
            *lock(&self.shared.job) = None;
        } else {
            job.help();
        }
        if job.panicked.load(Ordering::Relaxed) {
            Err(TaskPanicked)
        } else {
            Ok(())
        }
    }

    /// Publish `job` as the next epoch and wake the workers that sleep.
    fn hand_out(&self, job: &Arc<Job>) {
        *lock(&self.shared.job) = Some(job.clone());
        self.shared.epoch.fetch_add(1, Ordering::SeqCst);
        for (worker, sleeping) in self.workers.iter().zip(&self.shared.sleeping) {
            if sleeping.load(Ordering::SeqCst) {
                worker.unpark();
            }
        }
    }
}

impl std::fmt::Debug for SpinPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpinPool")
            .field("threads", &self.threads())
            .finish()
    }
}

/// The job slot's lock, whatever a panicking holder left (the slot is only ever replaced).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Poll `done` (spinning, then yielding the core) until it holds.
fn wait_until(done: impl Fn() -> bool) {
    let mut spins = 0u32;
    while !done() {
        if spins < 1 << 16 {
            spins += 1;
            std::hint::spin_loop();
        } else {
            thread::yield_now();
        }
    }
}

/// A worker: wait for a new epoch (spin, then park), help with its job, repeat.
fn work_loop(shared: &Shared, index: usize) {
    let mut seen = 0u64;
    loop {
        let epoch = wait_for_epoch(shared, index, seen);
        seen = epoch;
        let job = lock(&shared.job).clone();
        if let Some(job) = job {
            job.help();
        }
    }
}

/// The first epoch after `seen`: polled for [`SPIN`], then waited for parked.
fn wait_for_epoch(shared: &Shared, index: usize, seen: u64) -> u64 {
    let started = Instant::now();
    let mut spins = 0u32;
    loop {
        let epoch = shared.epoch.load(Ordering::Acquire);
        if epoch != seen {
            return epoch;
        }
        spins = spins.wrapping_add(1);
        if !spins.is_multiple_of(SPINS_PER_CLOCK_READ) || started.elapsed() < SPIN {
            std::hint::spin_loop();
            continue;
        }
        // Say "wake me" before the last look, so a product published after it unparks us
        // (`unpark` before `park` makes `park` return at once).
        shared.sleeping[index].store(true, Ordering::SeqCst);
        let epoch = shared.epoch.load(Ordering::SeqCst);
        if epoch == seen {
            thread::park();
        }
        shared.sleeping[index].store(false, Ordering::SeqCst);
        let epoch = shared.epoch.load(Ordering::Acquire);
        if epoch != seen {
            return epoch;
        }
        spins = 0;
    }
}

/// The output of [`SpinPool::run_columns`], shared with its tasks (each writes columns no other
/// task writes).
struct SharedOutput(*mut f32);

// SAFETY: the tasks write disjoint ranges of the buffer, which outlives them (`run` returns
// only when every task is done).
#[allow(unsafe_code)]
unsafe impl Send for SharedOutput {}
// SAFETY: as for `Send`.
#[allow(unsafe_code)]
unsafe impl Sync for SharedOutput {}

impl SharedOutput {
    fn ptr(&self) -> *mut f32 {
        self.0
    }
}

impl SpinPool {
    /// [`run`](Self::run) for a `work` that borrows (the caller's slices, its stack): the same
    /// tasks, the same return once every task is done.
    #[allow(unsafe_code)]
    pub fn run_scoped(
        &self,
        tasks: usize,
        work: &(dyn Fn(usize) + Sync),
    ) -> Result<(), TaskPanicked> {
        // SAFETY: `run` returns only when every task is done (a panicking one counted), and no
        // thread calls a job's `work` after that (every task number is claimed). What outlives
        // this call is a worker's clone of the job, whose closure holds only this reference
        // and is dropped without reading through it.
        let work: &'static (dyn Fn(usize) + Sync) = unsafe {
            std::mem::transmute::<&(dyn Fn(usize) + Sync), &'static (dyn Fn(usize) + Sync)>(work)
        };
        self.run(tasks, work)
    }

    /// An `[n, width]` output (row-major) filled in place by `width.div_ceil(per_task)` tasks:
    /// task `t` gets, for every row `j`, its columns `t · per_task ..` (at most `per_task`) as
    /// one slice, and `work(first column, those slices)` fills them. No per-task buffer and
    /// no copy afterwards (a 5-row product over the 262 144-entry head writes 5 MiB once).
    #[allow(unsafe_code)]
    pub fn run_columns(
        &self,
        n: usize,
        width: usize,
        per_task: usize,
        work: impl Fn(usize, &mut [&mut [f32]]) + Sync,
    ) -> Result<Vec<f32>, TaskPanicked> {
        if n == 0 || width == 0 {
            return Ok(vec![0f32; n * width]);
        }
        // Zeroed by the tasks, each its own columns just before filling them (in parallel and
        // into the cache the kernel then writes, where a zeroed allocation is one more serial
        // pass over the whole output); the length is set once every task has run.
        let mut y: Vec<f32> = Vec::with_capacity(n * width);
        let per_task = per_task.clamp(1, width);
        let out = SharedOutput(y.as_mut_ptr());
        let task = |t: usize| {
            let start = t * per_task;
            let len = per_task.min(width - start);
            let mut rows: Vec<&mut [f32]> = (0..n)
                .map(|j| {
                    // SAFETY: columns `start .. start + len` of row `j` lie inside the
                    // `n · width` allocation, no other task's range overlaps them, and the
                    // allocation lives until `run_scoped` returns, after every task. They are
                    // zeroed (initialised) before the slice is made.
                    unsafe {
                        let at = out.ptr().add(j * width + start);
                        std::ptr::write_bytes(at, 0, len);
                        std::slice::from_raw_parts_mut(at, len)
                    }
                })
                .collect();
            work(start, &mut rows);
        };
        self.run_scoped(width.div_ceil(per_task), &task)?;
        // SAFETY: the tasks cover columns `0 .. width` of every row (task `t` from
        // `t · per_task`), so all `n · width` values were initialised; a panicking task
        // returned above.
        unsafe { y.set_len(n * width) };
        Ok(y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_runs_once_whatever_the_pool_size() {
        for threads in [1, 2, 3] {
            let pool = SpinPool::new(threads);
            for tasks in [0, 1, 2, 7, 64] {
                let counts: Arc<Vec<AtomicUsize>> =
                    Arc::new((0..tasks).map(|_| AtomicUsize::new(0)).collect());
                let seen = counts.clone();
                pool.run(tasks, move |t| {
                    seen[t].fetch_add(1, Ordering::Relaxed);
                })
                .expect("no panic");
                assert!(counts.iter().all(|c| c.load(Ordering::Relaxed) == 1));
            }
        }
    }

    #[test]
    fn every_column_range_is_written_in_place_once() {
        for threads in [1, 2, 3] {
            let pool = SpinPool::new(threads);
            for (n, width, per_task) in [(1, 1, 1), (3, 10, 4), (2, 64, 16), (5, 7, 100), (0, 4, 2)]
            {
                let y = pool
                    .run_columns(n, width, per_task, |start, rows| {
                        for (j, row) in rows.iter_mut().enumerate() {
                            for (i, v) in row.iter_mut().enumerate() {
                                *v += (j * 1000 + start + i) as f32;
                            }
                        }
                    })
                    .expect("no panic");
                let want: Vec<f32> = (0..n)
                    .flat_map(|j| (0..width).map(move |i| (j * 1000 + i) as f32))
                    .collect();
                assert_eq!(y, want, "n={n} width={width} per_task={per_task}");
            }
        }
    }

    #[test]
    fn a_panicking_task_is_reported_and_the_pool_goes_on() {
        let pool = SpinPool::new(2);
        let result = pool.run(8, |t| {
            if t == 3 {
                panic!("task 3");
            }
        });
        assert_eq!(result, Err(TaskPanicked));
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        pool.run(8, move |_| {
            r.fetch_add(1, Ordering::Relaxed);
        })
        .expect("no panic");
        assert_eq!(ran.load(Ordering::Relaxed), 8);
    }

    #[test]
    fn concurrent_callers_and_parked_workers_all_finish() {
        let pool = Arc::new(SpinPool::new(3));
        let callers: Vec<_> = (0..4)
            .map(|c| {
                let pool = pool.clone();
                thread::spawn(move || {
                    for round in 0..50 {
                        if round % 10 == 9 {
                            // Long enough for the workers to park.
                            thread::sleep(SPIN * 3);
                        }
                        let sum = Arc::new(AtomicUsize::new(0));
                        let s = sum.clone();
                        pool.run(16, move |t| {
                            s.fetch_add(t + c, Ordering::Relaxed);
                        })
                        .expect("no panic");
                        assert_eq!(sum.load(Ordering::Relaxed), 120 + 16 * c);
                    }
                })
            })
            .collect();
        for c in callers {
            c.join().expect("caller finished");
        }
    }
}
