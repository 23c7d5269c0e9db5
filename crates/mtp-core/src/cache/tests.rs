//! Cache tests: exact rollback under random transactions, isolation of forks, misuse errors.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;
use crate::reference::ReferenceBackend;
use crate::testing::SerialOnlyCache;
use crate::DType;

type B = ReferenceBackend;

const HEADS: usize = 2;
const DIM: usize = 3;

/// Keys and values for `t` positions starting at absolute position `first`, with values that
/// identify the position (so a wrong slot shows up).
fn entries(
    b: &B,
    first: usize,
    t: usize,
    salt: f32,
) -> (<B as Backend>::Array, <B as Backend>::Array) {
    let mut k = Vec::new();
    let mut v = Vec::new();
    for h in 0..HEADS {
        for p in first..first + t {
            for d in 0..DIM {
                k.push(p as f32 * 100.0 + h as f32 * 10.0 + d as f32 + salt);
                v.push(-(p as f32) * 100.0 - h as f32 * 10.0 - d as f32 - salt);
            }
        }
    }
    (
        b.from_f32(&k, &[1, HEADS, t, DIM], DType::F32).unwrap(),
        b.from_f32(&v, &[1, HEADS, t, DIM], DType::F32).unwrap(),
    )
}

fn snapshot(b: &B, view: Option<KvView<B>>) -> Option<(usize, Vec<f32>, Vec<f32>)> {
    view.map(|v| {
        (
            v.start,
            b.to_vec_f32(&v.keys).unwrap(),
            b.to_vec_f32(&v.values).unwrap(),
        )
    })
}

fn new_cache(kind: CacheKind) -> Box<dyn KvCache<B>> {
    match kind {
        CacheKind::Rotating { window } => Box::new(RotatingKvCache::new(window).unwrap()),
        _ => Box::new(FullKvCache::new()),
    }
}

/// Rebuild the committed history position by position in a fresh cache.
fn rebuilt(b: &B, kind: CacheKind, committed: &[f32]) -> Box<dyn KvCache<B>> {
    let mut cache = new_cache(kind);
    for (p, &salt) in committed.iter().enumerate() {
        let (k, v) = entries(b, p, 1, salt);
        cache.update(b, &k, &v).unwrap();
    }
    cache
}

fn check_rollback(kind: CacheKind, seed: u64) {
    let b = B::default();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut cache = new_cache(kind);
    // `committed[p]` is the salt of the entry committed at position p.
    let mut committed: Vec<f32> = Vec::new();
    for round in 0..12 {
        let salt = (round + 1) as f32 * 0.001;
        if rng.random_bool(0.3) {
            let t = rng.random_range(1..5);
            let (k, v) = entries(&b, committed.len(), t, salt);
            cache.update(&b, &k, &v).unwrap();
            committed.extend(std::iter::repeat_n(salt, t));
        } else {
            assert_eq!(
                cache.begin_speculation(&b).unwrap(),
                SpeculationSupport::Started
            );
            let mut pending: Vec<f32> = Vec::new();
            for w in 0..rng.random_range(1..3) {
                let t = rng.random_range(1..6);
                let write_salt = salt + w as f32 * 0.1;
                let (k, v) = entries(&b, committed.len() + pending.len(), t, write_salt);
                cache.update(&b, &k, &v).unwrap();
                pending.extend(std::iter::repeat_n(write_salt, t));
            }
            let keep = rng.random_range(0..=pending.len());
            cache.commit_speculation(&b, keep).unwrap();
            assert!(!cache.is_speculating());
            committed.extend_from_slice(&pending[..keep]);
        }
        let context = format!("{kind:?} seed {seed} round {round}");
        assert_eq!(cache.len(), committed.len(), "{context}");
        let expected = rebuilt(&b, kind, &committed);
        assert_eq!(
            snapshot(&b, cache.view(&b).unwrap()),
            snapshot(&b, expected.view(&b).unwrap()),
            "{context}"
        );
        // The next write must see the same history in both.
        let (k, v) = entries(&b, committed.len(), 2, 9.0);
        let ours = cache.fork(&b).unwrap().update(&b, &k, &v).unwrap();
        let theirs = rebuilt(&b, kind, &committed).update(&b, &k, &v).unwrap();
        assert_eq!(
            snapshot(&b, Some(ours)),
            snapshot(&b, Some(theirs)),
            "{context}"
        );
    }
}

#[test]
fn rollback_is_exact_for_full_caches() {
    for seed in 0..100 {
        check_rollback(CacheKind::Full, seed);
    }
}

#[test]
fn rollback_is_exact_for_rotating_caches_wrapped_or_not() {
    for seed in 0..100 {
        for window in [1, 2, 3, 5, 8, 64] {
            check_rollback(CacheKind::Rotating { window }, seed);
        }
    }
}

#[test]
fn rotating_update_returns_the_window_before_each_query() {
    let b = B::default();
    let mut cache = RotatingKvCache::<B>::new(3).unwrap();
    let (k, v) = entries(&b, 0, 5, 0.0);
    let view = cache.update(&b, &k, &v).unwrap();
    assert_eq!(view.start, 0);
    assert_eq!(b.shape(&view.keys), vec![1, HEADS, 5, DIM]);
    let (k, v) = entries(&b, 5, 4, 0.0);
    let view = cache.update(&b, &k, &v).unwrap();
    // Two positions of history (window - 1) then the four new ones.
    assert_eq!(view.start, 3);
    assert_eq!(b.shape(&view.keys), vec![1, HEADS, 6, DIM]);
    let stored = cache.view(&b).unwrap().unwrap();
    assert_eq!(stored.start, 6);
    let (expected, _) = entries(&b, 6, 3, 0.0);
    assert_eq!(
        b.to_vec_f32(&stored.keys).unwrap(),
        b.to_vec_f32(&expected).unwrap()
    );
}

/// Attention of `q` (`[1, HEADS, 1, DIM]`) at `position` over `view` with a window of `w`.
fn attend(
    b: &B,
    q: &<B as Backend>::Array,
    view: &KvView<B>,
    position: usize,
    w: usize,
) -> Vec<f32> {
    let mask = crate::AttentionMask::causal(position, view.start).with_window(Some(w));
    b.to_vec_f32(
        &b.attention(q, &view.keys, &view.values, &mask, 0.5)
            .unwrap(),
    )
    .unwrap()
}

#[test]
fn long_sliding_run_equals_naive_attention_bit_for_bit() {
    // Many times the window, single-token steps with speculative rounds in between: every
    // step's attention over the ring's zero-copy view equals attention over the whole history
    // with the window as a mask, exactly (the view keeps chronological order).
    let b = B::default();
    let w = 5;
    let mut ring = RotatingKvCache::<B>::new(w).unwrap();
    let mut all = FullKvCache::<B>::new();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    while ring.len() < 12 * w {
        let p = ring.len();
        let salt = (p % 7) as f32 * 0.01;
        let (k, v) = entries(&b, p, 1, salt);
        let (q, _) = entries(&b, p, 1, salt + 0.5);
        let before = crate::attention::mask_tables_built();
        let got = attend(&b, &q, &ring.update(&b, &k, &v).unwrap(), p, w);
        // A single query over exactly its window needs no mask.
        assert_eq!(crate::attention::mask_tables_built(), before, "step {p}");
        let want = attend(&b, &q, &all.update(&b, &k, &v).unwrap(), p, w);
        assert_eq!(got, want, "step {p}");
        if rng.random_bool(0.3) {
            // A round of 1 + 2 writes, partly kept: only the slots written are saved.
            ring.begin_speculation(&b).unwrap();
            all.begin_speculation(&b).unwrap();
            let n = ring.len();
            for (first, t) in [(n, 1), (n + 1, 2)] {
                let (k, v) = entries(&b, first, t, 0.3);
                ring.update(&b, &k, &v).unwrap();
                all.update(&b, &k, &v).unwrap();
            }
            assert_eq!(ring.saved_rows(&b), 3, "a round saves what it overwrites");
            let keep = rng.random_range(0..=3);
            ring.commit_speculation(&b, keep).unwrap();
            all.commit_speculation(&b, keep).unwrap();
        }
    }
}

#[test]
fn multi_token_writes_attend_as_over_the_whole_history() {
    // Writes of 1-4 tokens (a verify), inside rounds that keep part of them, before and after
    // the ring fills: the queries of each write attend over the returned view (a slice of the
    // ring while the write fits, a fresh copy after) as over the whole history with the window
    // as a mask, bit for bit.
    let b = B::default();
    let w = 8;
    let mut ring = RotatingKvCache::<B>::new(w).unwrap();
    let mut all = FullKvCache::<B>::new();
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    while ring.len() < 4 * w {
        ring.begin_speculation(&b).unwrap();
        all.begin_speculation(&b).unwrap();
        let p = ring.len();
        let t = rng.random_range(1..=4);
        let salt = (p % 5) as f32 * 0.01;
        let (k, v) = entries(&b, p, t, salt);
        let (q, _) = entries(&b, p, t, salt + 0.5);
        let mask = |start| crate::AttentionMask::causal(p, start).with_window(Some(w));
        let got_view = ring.update(&b, &k, &v).unwrap();
        let want_view = all.update(&b, &k, &v).unwrap();
        let attend = |view: &KvView<B>| {
            b.to_vec_f32(
                &b.attention(&q, &view.keys, &view.values, &mask(view.start), 0.5)
                    .unwrap(),
            )
            .unwrap()
        };
        assert_eq!(attend(&got_view), attend(&want_view), "write of {t} at {p}");
        let keep = rng.random_range(1..=t);
        ring.commit_speculation(&b, keep).unwrap();
        all.commit_speculation(&b, keep).unwrap();
    }
}

#[test]
fn forks_are_isolated() {
    let b = B::default();
    for kind in [CacheKind::Full, CacheKind::Rotating { window: 3 }] {
        let mut cache = new_cache(kind);
        let (k, v) = entries(&b, 0, 4, 0.0);
        cache.update(&b, &k, &v).unwrap();
        let before = snapshot(&b, cache.view(&b).unwrap());
        let mut fork = cache.fork(&b).unwrap();
        let (k, v) = entries(&b, 4, 3, 0.5);
        fork.update(&b, &k, &v).unwrap();
        assert_eq!(snapshot(&b, cache.view(&b).unwrap()), before);
        assert_eq!(fork.len(), 7);
        cache.begin_speculation(&b).unwrap();
        assert!(cache.fork(&b).is_err(), "fork while speculating must fail");
    }
}

#[test]
fn misuse_is_an_error_not_a_panic() {
    let b = B::default();
    for kind in [CacheKind::Full, CacheKind::Rotating { window: 2 }] {
        let mut cache = new_cache(kind);
        assert!(
            cache.commit_speculation(&b, 0).is_err(),
            "commit without begin"
        );
        cache.begin_speculation(&b).unwrap();
        assert!(cache.begin_speculation(&b).is_err(), "nested begin");
        let (k, v) = entries(&b, 0, 2, 0.0);
        cache.update(&b, &k, &v).unwrap();
        assert!(
            cache.commit_speculation(&b, 3).is_err(),
            "keep more than written"
        );
        cache.commit_speculation(&b, 1).unwrap();
        assert_eq!(cache.len(), 1);
        let (bad, _) = entries(&b, 1, 1, 0.0);
        let wrong = b.from_f32(&[0.0; 4], &[1, 1, 2, 2], DType::F32).unwrap();
        assert!(
            cache.update(&b, &bad, &wrong).is_err(),
            "mismatched keys and values"
        );
    }
    assert!(RotatingKvCache::<B>::new(0).is_err());
}

#[test]
fn a_set_with_a_cache_that_cannot_speculate_opens_nothing() {
    let b = B::default();
    let mut set = CacheSet::<B>::new(vec![
        Box::new(FullKvCache::new()),
        Box::new(SerialOnlyCache::new()),
    ]);
    assert!(!set.can_speculate());
    assert_eq!(
        set.begin_speculation(&b).unwrap(),
        SpeculationSupport::Unsupported
    );
    assert!(!set.is_speculating());
    assert!(set.layer(2).is_err());
}

/// Truncation (prefix reuse): wherever a cache says it can cut to `len`, the cut cache equals
/// one that appended only the first `len` positions — its view and the view the next write
/// sees. Full caches cut anywhere; a rotating cache cuts to its own length, to empty, and
/// anywhere while it has not wrapped; a wrapped ring refuses a shorter length; an open
/// transaction refuses everything.
#[test]
fn truncation_is_exact_where_possible_and_refused_elsewhere() {
    let b = B::default();
    for kind in [CacheKind::Full, CacheKind::Rotating { window: 6 }] {
        for written in [3usize, 6, 11] {
            let salts: Vec<f32> = (0..written).map(|p| p as f32 * 0.01).collect();
            for len in 0..=written + 1 {
                let mut cache = rebuilt(&b, kind, &salts);
                let wrapped = matches!(kind, CacheKind::Rotating { window } if written > window);
                let expect = if len > written || (wrapped && len != written && len != 0) {
                    Truncation::Impossible
                } else {
                    Truncation::Possible
                };
                let context = format!("{kind:?}: {written} written, cut to {len}");
                assert_eq!(cache.can_truncate(len), expect, "{context}");
                if expect == Truncation::Impossible {
                    assert!(cache.truncate(&b, len).is_err(), "{context}");
                    assert_eq!(cache.len(), written, "{context}: unchanged");
                    continue;
                }
                cache.truncate(&b, len).unwrap();
                let expected = rebuilt(&b, kind, &salts[..len]);
                assert_eq!(cache.len(), len, "{context}");
                assert_eq!(
                    snapshot(&b, cache.view(&b).unwrap()),
                    snapshot(&b, expected.view(&b).unwrap()),
                    "{context}"
                );
                let (k, v) = entries(&b, len, 3, 5.0);
                let ours = cache.update(&b, &k, &v).unwrap();
                let theirs = rebuilt(&b, kind, &salts[..len]).update(&b, &k, &v).unwrap();
                assert_eq!(
                    snapshot(&b, Some(ours)),
                    snapshot(&b, Some(theirs)),
                    "{context}"
                );
            }
        }
        let mut open = rebuilt(&b, kind, &[0.0, 0.1]);
        open.begin_speculation(&b).unwrap();
        assert_eq!(open.can_truncate(2), Truncation::Impossible);
        assert_eq!(open.can_truncate(0), Truncation::Impossible);
    }
}
