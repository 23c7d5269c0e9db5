//! `top_k` along the last axis. On the CPU the values already live in host memory, so a
//! selection with a `k`-entry heap per row (O(n log k)) replaces the trait default's full
//! `argsort` of every row (a 262k-token vocabulary sorted per sampled row); on GPUs the default
//! (sort, slice, gather) stays on the device.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use candle_core::Tensor;
use mtp_core::{CoreError, SortOrder};

use crate::error::Result;
use crate::ops;

/// One entry: larger value first, NaN ranked as `-inf`, lower index first on ties (the order
/// of a stable descending `argsort`).
#[derive(Clone, Copy)]
struct Entry {
    value: f32,
    index: u32,
}

impl Entry {
    fn key(&self) -> f32 {
        if self.value.is_nan() {
            f32::NEG_INFINITY
        } else {
            self.value
        }
    }
}

/// `Less` when `a` ranks before `b`.
fn rank(a: &Entry, b: &Entry) -> Ordering {
    b.key()
        .partial_cmp(&a.key())
        .unwrap_or(Ordering::Equal)
        .then(a.index.cmp(&b.index))
}

/// Heap order: the top of the heap is the worst kept entry.
struct Worst(Entry);

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

/// The `k` best entries of `row`, best first.
fn select(row: &[f32], k: usize) -> Vec<Entry> {
    let mut heap: BinaryHeap<Worst> = BinaryHeap::with_capacity(k + 1);
    for (i, &value) in row.iter().enumerate() {
        let e = Entry {
            value,
            index: i as u32,
        };
        if heap.len() < k {
            heap.push(Worst(e));
        } else if heap
            .peek()
            .is_some_and(|w| rank(&e, &w.0) == Ordering::Less)
        {
            heap.pop();
            heap.push(Worst(e));
        }
    }
    let mut best: Vec<Entry> = heap.into_iter().map(|w| w.0).collect();
    best.sort_unstable_by(rank);
    best
}

/// The `k` largest values along the last axis and their `U32` indices, largest first.
pub(crate) fn top_k(x: &Tensor, k: usize) -> Result<(Tensor, Tensor)> {
    const OP: &str = "top_k";
    let dims = x.dims().to_vec();
    let Some((&n, outer)) = dims.split_last() else {
        return Err(CoreError::AxisOutOfRange {
            op: OP,
            axis: 0,
            rank: 0,
        }
        .into());
    };
    if k == 0 || k > n {
        return Err(CoreError::InvalidArgument {
            op: OP,
            message: format!("k = {k} for an axis of {n}"),
        }
        .into());
    }
    let dtype = ops::require_float(OP, x)?;
    let last = dims.len() - 1;
    if !x.device().is_cpu() {
        let order = ops::argsort(x, last, SortOrder::Descending)?;
        let idx = ops::slice(&order, last, 0, k)?;
        return Ok((ops::take_along_axis(x, &idx, last)?, idx));
    }
    let data = ops::to_vec_f32(x)?;
    let mut values = Vec::with_capacity(data.len() / n * k);
    let mut indices = Vec::with_capacity(data.len() / n * k);
    for row in data.chunks(n) {
        for e in select(row, k) {
            values.push(e.value);
            indices.push(e.index);
        }
    }
    let mut shape = outer.to_vec();
    shape.push(k);
    Ok((
        ops::from_f32(x.device(), &values, &shape, dtype)?,
        ops::from_u32(x.device(), &indices, &shape)?,
    ))
}
