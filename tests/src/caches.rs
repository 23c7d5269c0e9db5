//! KV caches on the backend: the speculation transaction of [`FullKvCache`] and
//! [`RotatingKvCache`] (wrapped or not) and the isolation of forks.
//!
//! The property is the one `mtp-core` proves on the reference backend (`cache/tests.rs`), now
//! generic over the backend: after random `update` / `begin` / `update`s / `commit(keep)`
//! sequences, the backend's cache view equals the reference backend's after the same sequence
//! *and* a backend cache that appended only the committed positions. Caches move values and
//! never compute, so the comparisons are exact. Forks matter for backends whose `write_slice`
//! works in place: a fork must not share storage with its original.

use mtp_core::cache::{CacheKind, FullKvCache, KvCache, KvView, RotatingKvCache};
use mtp_core::reference::ReferenceBackend;
use mtp_core::{Backend, CoreError, DType};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::{backend_err, reference_err, SuiteError};
use crate::inputs::host_swap_axes;

const HEADS: usize = 2;
const DIM: usize = 3;
const VALUE_DIM: usize = 4;

/// A value in `[-1, 1]` identifying `(position, head, dim, salt)`, representable in bf16.
fn tag(position: usize, head: usize, dim: usize, salt: u32) -> f32 {
    let mut h = (position as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add((head as u64) << 40)
        .wrapping_add((dim as u64) << 20)
        .wrapping_add(u64::from(salt).wrapping_mul(0xBF58_476D_1CE4_E5B9));
    h ^= h >> 31;
    h = h.wrapping_mul(0x94D0_49BB_1331_11EB);
    h ^= h >> 29;
    ((h % 255) as f32 - 127.0) / 128.0
}

/// Keys `[1, HEADS, t, DIM]` and values `[1, HEADS, t, VALUE_DIM]` of positions
/// `first .. first + t`, tagged with `salt`.
fn entries<X: Backend>(
    b: &X,
    first: usize,
    t: usize,
    salt: u32,
    dtype: DType,
) -> Result<(X::Array, X::Array), X::Error> {
    let mut k = Vec::with_capacity(HEADS * t * DIM);
    let mut v = Vec::with_capacity(HEADS * t * VALUE_DIM);
    for h in 0..HEADS {
        for p in first..first + t {
            k.extend((0..DIM).map(|d| tag(p, h, d, salt)));
            v.extend((0..VALUE_DIM).map(|d| -tag(p, h, d + 7, salt)));
        }
    }
    // Made as a model makes them: `[1, t, heads, dim]` transposed to a non-contiguous
    // `[1, heads, t, dim]` view.
    let make = |data: &[f32], dim: usize| -> Result<X::Array, X::Error> {
        let stored = host_swap_axes(data, &[1, HEADS, t, dim], 1, 2);
        b.transpose(&b.from_f32(&stored, &[1, t, HEADS, dim], dtype)?, 1, 2)
    };
    Ok((make(&k, DIM)?, make(&v, VALUE_DIM)?))
}

/// A view read back to the host: start, key shape, keys, values.
type HostView = (usize, Vec<usize>, Vec<f32>, Vec<f32>);

fn read_view<X: Backend>(b: &X, view: Option<KvView<X>>) -> Result<Option<HostView>, X::Error> {
    view.map(|v| {
        Ok((
            v.start,
            b.shape(&v.keys),
            b.to_vec_f32(&v.keys)?,
            b.to_vec_f32(&v.values)?,
        ))
    })
    .transpose()
}

fn new_cache<X: Backend>(kind: CacheKind) -> Result<Box<dyn KvCache<X>>, CoreError> {
    Ok(match kind {
        CacheKind::Rotating { window } => Box::new(RotatingKvCache::new(window)?),
        _ => Box::new(FullKvCache::new()),
    })
}

/// One step of a random cache history.
#[derive(Debug, Clone)]
enum Step {
    /// A plain append of `t` positions.
    Append { t: usize, salt: u32 },
    /// A transaction: writes of these lengths, then `commit(keep)`.
    Speculate {
        writes: Vec<(usize, u32)>,
        keep: usize,
    },
}

/// Apply `step` to `cache` whose committed length is `len`.
fn apply<X: Backend>(
    b: &X,
    cache: &mut dyn KvCache<X>,
    step: &Step,
    dtype: DType,
) -> Result<(), X::Error> {
    match step {
        Step::Append { t, salt } => {
            let (k, v) = entries(b, cache.len(), *t, *salt, dtype)?;
            cache.update(b, &k, &v)?;
        }
        Step::Speculate { writes, keep } => {
            cache.begin_speculation(b)?;
            for &(t, salt) in writes {
                let (k, v) = entries(b, cache.len(), t, salt, dtype)?;
                cache.update(b, &k, &v)?;
            }
            cache.commit_speculation(b, *keep)?;
        }
    }
    Ok(())
}

/// The committed history as `(position salt)` per position after `steps`.
fn committed(steps: &[Step]) -> Vec<u32> {
    let mut out = Vec::new();
    for step in steps {
        match step {
            Step::Append { t, salt } => out.extend(std::iter::repeat_n(*salt, *t)),
            Step::Speculate { writes, keep } => {
                let pending: Vec<u32> = writes
                    .iter()
                    .flat_map(|&(t, salt)| std::iter::repeat_n(salt, t))
                    .collect();
                out.extend(pending.iter().take(*keep));
            }
        }
    }
    out
}

/// After each step: the view and the next write's view, `(view, next)`.
type Trace = Vec<(Option<HostView>, Option<HostView>)>;

/// Run `steps` on a fresh cache of `kind` on `b`, tracing the view after each step and the
/// view a further 2-position write would return (made on a fork, so the run goes on).
fn trace<X: Backend>(
    b: &X,
    kind: CacheKind,
    steps: &[Step],
    dtype: DType,
) -> Result<Trace, X::Error> {
    let mut cache = new_cache::<X>(kind)?;
    let mut out = Vec::with_capacity(steps.len());
    for step in steps {
        apply(b, cache.as_mut(), step, dtype)?;
        let view = read_view(b, cache.view(b)?)?;
        let mut fork = cache.fork(b)?;
        let (k, v) = entries(b, fork.len(), 2, 9_999, dtype)?;
        let next = read_view(b, Some(fork.update(b, &k, &v)?))?;
        out.push((view, next));
    }
    Ok(out)
}

/// The same trace from a cache that appended only the committed positions, one at a time.
fn rebuilt_trace<X: Backend>(
    b: &X,
    kind: CacheKind,
    steps: &[Step],
    dtype: DType,
) -> Result<Trace, X::Error> {
    let mut out = Vec::with_capacity(steps.len());
    for end in 1..=steps.len() {
        let mut cache = new_cache::<X>(kind)?;
        for (p, salt) in committed(&steps[..end]).into_iter().enumerate() {
            let (k, v) = entries(b, p, 1, salt, dtype)?;
            cache.update(b, &k, &v)?;
        }
        let view = read_view(b, cache.view(b)?)?;
        let (k, v) = entries(b, cache.len(), 2, 9_999, dtype)?;
        let next = read_view(b, Some(cache.update(b, &k, &v)?))?;
        out.push((view, next));
    }
    Ok(out)
}

/// A random history of 10 steps: appends, and transactions of 1–2 writes keeping any prefix.
fn random_steps(rng: &mut ChaCha8Rng) -> Vec<Step> {
    let mut salt = 0u32;
    let mut next_salt = || {
        salt += 1;
        salt
    };
    (0..10)
        .map(|_| {
            if rng.random_bool(0.3) {
                Step::Append {
                    t: rng.random_range(1..5),
                    salt: next_salt(),
                }
            } else {
                let writes: Vec<(usize, u32)> = (0..rng.random_range(1..3))
                    .map(|_| (rng.random_range(1..6), next_salt()))
                    .collect();
                let total = writes.iter().map(|w| w.0).sum::<usize>();
                Step::Speculate {
                    writes,
                    keep: rng.random_range(0..=total),
                }
            }
        })
        .collect()
}

/// Compare two traces step by step.
fn compare_traces(
    backend: &str,
    check: &str,
    steps: &[Step],
    got: &Trace,
    expected: &Trace,
) -> Result<(), SuiteError> {
    for (i, (g, e)) in got.iter().zip(expected).enumerate() {
        for (part, gv, ev) in [("view", &g.0, &e.0), ("next write's view", &g.1, &e.1)] {
            if gv != ev {
                let brief = |v: &Option<HostView>| {
                    v.as_ref()
                        .map(|(s, shape, ..)| format!("start {s}, keys {shape:?}"))
                        .unwrap_or_else(|| "empty".into())
                };
                return Err(SuiteError::Mismatch {
                    backend: backend.to_string(),
                    check: check.to_string(),
                    detail: format!(
                        "after step {i} of {:?}: {part} differs ({} vs {})",
                        steps.iter().take(i + 1).collect::<Vec<_>>(),
                        brief(gv),
                        brief(ev)
                    ),
                });
            }
        }
    }
    if got.len() != expected.len() {
        return Err(SuiteError::Mismatch {
            backend: backend.to_string(),
            check: check.to_string(),
            detail: format!("{} vs {} steps traced", got.len(), expected.len()),
        });
    }
    Ok(())
}

/// The rollback property for caches of `kind` over `seeds` random histories in `dtype`.
fn check_rollback<B: Backend>(
    backend: &B,
    kind: CacheKind,
    seeds: std::ops::Range<u64>,
    dtype: DType,
) -> Result<(), SuiteError> {
    let reference = ReferenceBackend::new();
    for seed in seeds {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let steps = random_steps(&mut rng);
        let check = format!("{kind:?} cache rollback, {dtype}, seed {seed}");
        let what = || check.clone();
        let ours = backend_err(backend, what, trace(backend, kind, &steps, dtype))?;
        let theirs = reference_err(what, trace(&reference, kind, &steps, dtype))?;
        let rebuilt = backend_err(backend, what, rebuilt_trace(backend, kind, &steps, dtype))?;
        let name = backend.name();
        compare_traces(
            &name,
            &format!("{check} vs reference"),
            &steps,
            &ours,
            &theirs,
        )?;
        compare_traces(
            &name,
            &format!("{check} vs committed-only"),
            &steps,
            &ours,
            &rebuilt,
        )?;
    }
    Ok(())
}

/// [`FullKvCache`]: random transactions leave exactly the committed positions.
pub fn full_cache_rollback<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    check_rollback(backend, CacheKind::Full, 0..12, DType::F32)?;
    check_rollback(backend, CacheKind::Full, 100..103, DType::BF16)
}

/// [`RotatingKvCache`] for windows 1, 2, 3, 5 and 8 (wrapped or not): random transactions
/// leave exactly the committed positions.
pub fn rotating_cache_rollback<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    for window in [1, 2, 3, 5, 8] {
        check_rollback(backend, CacheKind::Rotating { window }, 0..8, DType::F32)?;
    }
    check_rollback(
        backend,
        CacheKind::Rotating { window: 3 },
        100..103,
        DType::F16,
    )
}

/// Views of `(original, fork)` after: fork at 4 positions, then different writes of the same
/// positions to each, then another to the original.
fn fork_story<X: Backend>(b: &X, kind: CacheKind) -> Result<Vec<Option<HostView>>, X::Error> {
    let mut original = new_cache::<X>(kind)?;
    let (k, v) = entries(b, 0, 4, 1, DType::F32)?;
    original.update(b, &k, &v)?;
    let mut fork = original.fork(b)?;
    let (k, v) = entries(b, 4, 3, 2, DType::F32)?;
    original.update(b, &k, &v)?;
    let after_original_write = read_view(b, fork.view(b)?)?;
    let (k, v) = entries(b, 4, 3, 3, DType::F32)?;
    fork.update(b, &k, &v)?;
    let mut out = vec![
        after_original_write,
        read_view(b, original.view(b)?)?,
        read_view(b, fork.view(b)?)?,
    ];
    // A transaction rolled back on the original leaves the fork alone too.
    original.begin_speculation(b)?;
    let (k, v) = entries(b, 7, 5, 4, DType::F32)?;
    original.update(b, &k, &v)?;
    original.commit_speculation(b, 1)?;
    out.push(read_view(b, original.view(b)?)?);
    out.push(read_view(b, fork.view(b)?)?);
    Ok(out)
}

/// The view of a fresh cache after the first 4 positions of [`fork_story`].
fn first_four<X: Backend>(b: &X, kind: CacheKind) -> Result<Option<HostView>, X::Error> {
    let mut cache = new_cache::<X>(kind)?;
    let (k, v) = entries(b, 0, 4, 1, DType::F32)?;
    cache.update(b, &k, &v)?;
    read_view(b, cache.view(b)?)
}

/// A fork and its original never see each other's writes (full and rotating caches), and
/// forking while speculating is an error.
pub fn cache_forks_are_isolated<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let reference = ReferenceBackend::new();
    for kind in [CacheKind::Full, CacheKind::Rotating { window: 3 }] {
        let what = || format!("{kind:?} cache fork isolation");
        let ours = backend_err(backend, what, fork_story(backend, kind))?;
        let theirs = reference_err(what, fork_story(&reference, kind))?;
        // The fork, before its own write, must still hold the 4 forked positions.
        let forked = backend_err(backend, what, first_four(backend, kind))?;
        if ours != theirs || ours.first() != Some(&forked) {
            let index = ours
                .iter()
                .zip(&theirs)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            return Err(SuiteError::Mismatch {
                backend: backend.name(),
                check: what(),
                detail: format!(
                    "view {index} of [fork after original's write, original, fork, original \
                     after rollback, fork after original's rollback] differs"
                ),
            });
        }
        let mut cache = backend_err(backend, what, new_cache::<B>(kind).map_err(B::Error::from))?;
        backend_err(backend, what, cache.begin_speculation(backend))?;
        if cache.fork(backend).is_ok() {
            return Err(SuiteError::MissingError {
                backend: backend.name(),
                what: format!("{kind:?} cache fork while speculating"),
            });
        }
    }
    Ok(())
}
