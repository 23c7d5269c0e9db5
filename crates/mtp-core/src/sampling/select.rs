//! Selection of the `k` best `(id, value)` pairs with a `k`-entry heap: O(n log k), nothing of
//! the input's size allocated. Shared by the sampler's top-k and the backends' host `top_k`.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// `Less` when `a` ranks before (is better than) `b`: the larger value, NaN ranked as `-inf`,
/// the lower id on ties — the order of a stable descending sort.
fn rank(a: &(u32, f64), b: &(u32, f64)) -> Ordering {
    let key = |v: f64| if v.is_nan() { f64::NEG_INFINITY } else { v };
    key(b.1)
        .partial_cmp(&key(a.1))
        .unwrap_or(Ordering::Equal)
        .then(a.0.cmp(&b.0))
}

/// A kept pair in the heap: the heap's top is the worst one kept.
struct Worst((u32, f64));

impl PartialEq for Worst {
    fn eq(&self, other: &Self) -> bool {
        rank(&self.0, &other.0) == Ordering::Equal
    }
}
impl Eq for Worst {}
impl PartialOrd for Worst {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Worst {
    fn cmp(&self, other: &Self) -> Ordering {
        rank(&self.0, &other.0)
    }
}

/// The `k` best pairs of `items` (larger value first, NaN as `-inf`, lower id
/// on ties), best first. Fewer when `items` has fewer than `k`.
pub fn best_k(items: impl IntoIterator<Item = (u32, f64)>, k: usize) -> Vec<(u32, f64)> {
    if k == 0 {
        return Vec::new();
    }
    let mut heap: BinaryHeap<Worst> = BinaryHeap::with_capacity(k + 1);
    for item in items {
        if heap.len() < k {
            heap.push(Worst(item));
        } else if heap
            .peek()
            .is_some_and(|w| rank(&item, &w.0) == Ordering::Less)
        {
            heap.pop();
            heap.push(Worst(item));
        }
    }
    let mut best: Vec<(u32, f64)> = heap.into_iter().map(|w| w.0).collect();
    best.sort_unstable_by(rank);
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_k_is_a_stable_descending_sort_with_nan_last() {
        let values = [1.0, 3.0, f64::NAN, 3.0, -1.0, f64::NEG_INFINITY, 2.0];
        let items = values.iter().enumerate().map(|(i, &v)| (i as u32, v));
        let ids: Vec<u32> = best_k(items.clone(), 4).iter().map(|p| p.0).collect();
        assert_eq!(ids, [1, 3, 6, 0]);
        let all: Vec<u32> = best_k(items.clone(), 99).iter().map(|p| p.0).collect();
        // NaN ranks as -inf: tied with the -inf at id 5, the lower id first.
        assert_eq!(all, [1, 3, 6, 0, 4, 2, 5]);
        assert!(best_k(items, 0).is_empty());
    }
}
