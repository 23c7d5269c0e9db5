//! Host inputs: random data from a seeded generator, and their construction on a backend —
//! contiguous, or as a non-contiguous view made by `transpose` or `slice` on that backend.
//!
//! The reference backend stores every array contiguously and does not care how an input was
//! made; real backends (candle's strided tensors, MLX views) do, so every op is also checked on
//! inputs that come out of a backend `transpose` or `slice`.

use mtp_core::{Backend, CoreError, DType};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Host values of an [`Input`].
#[derive(Debug, Clone, PartialEq)]
pub enum Values {
    /// Float values (stored in the input's float dtype, rounded by the backend).
    Float(Vec<f32>),
    /// `U32` values.
    U32(Vec<u32>),
    /// `I32` values.
    I32(Vec<i32>),
}

impl Values {
    /// Number of values.
    pub fn len(&self) -> usize {
        match self {
            Values::Float(v) => v.len(),
            Values::U32(v) => v.len(),
            Values::I32(v) => v.len(),
        }
    }

    /// True when there are no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// New values picking `map[i]` for each output element, or a padding value for `None`.
    fn remap(&self, map: &[Option<usize>]) -> Values {
        fn pick<T: Copy>(src: &[T], map: &[Option<usize>], pad: T) -> Vec<T> {
            map.iter()
                .map(|m| m.and_then(|i| src.get(i).copied()).unwrap_or(pad))
                .collect()
        }
        match self {
            // Padding that a mis-strided read would turn into obviously wrong results.
            Values::Float(v) => Values::Float(pick(v, map, 999.0)),
            Values::U32(v) => Values::U32(pick(v, map, 99_999)),
            Values::I32(v) => Values::I32(pick(v, map, -99_999)),
        }
    }
}

/// How an input array is produced on a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Straight from host data.
    Contiguous,
    /// Created with the first and last axes swapped, then `transpose`d back (rank ≥ 2; rank 1
    /// falls back to [`Layout::Sliced`], rank 0 to contiguous).
    Transposed,
    /// Created with padding around the last axis, then `slice`d (rank ≥ 1).
    Sliced,
}

impl Layout {
    /// Every layout, contiguous first.
    pub const ALL: [Layout; 3] = [Layout::Contiguous, Layout::Transposed, Layout::Sliced];

    /// The layout actually used for an input of `rank`.
    pub fn effective(self, rank: usize) -> Layout {
        match (self, rank) {
            (_, 0) => Layout::Contiguous,
            (Layout::Transposed, 1) => Layout::Sliced,
            (l, _) => l,
        }
    }
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Layout::Contiguous => "contiguous",
            Layout::Transposed => "transposed view",
            Layout::Sliced => "sliced view",
        })
    }
}

/// One input of a checked op: host values, their logical shape and the dtype to store them in.
#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    /// Logical shape (row-major).
    pub shape: Vec<usize>,
    /// Storage dtype (a float dtype for [`Values::Float`], else `U32`/`I32`).
    pub dtype: DType,
    /// Row-major values.
    pub values: Values,
}

impl Input {
    /// A float input stored as `dtype`.
    pub fn float(shape: &[usize], data: Vec<f32>, dtype: DType) -> Self {
        Self {
            shape: shape.to_vec(),
            dtype,
            values: Values::Float(data),
        }
    }

    /// A `U32` input.
    pub fn u32(shape: &[usize], data: Vec<u32>) -> Self {
        Self {
            shape: shape.to_vec(),
            dtype: DType::U32,
            values: Values::U32(data),
        }
    }

    /// An `I32` input.
    pub fn i32(shape: &[usize], data: Vec<i32>) -> Self {
        Self {
            shape: shape.to_vec(),
            dtype: DType::I32,
            values: Values::I32(data),
        }
    }

    /// The same values stored as another float dtype (float inputs only; others unchanged).
    pub fn with_dtype(mut self, dtype: DType) -> Self {
        if matches!(self.values, Values::Float(_)) && dtype.is_float() {
            self.dtype = dtype;
        }
        self
    }

    /// Rank of the logical shape.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// `dtype[shape]`, e.g. `f32[2, 3]`.
    pub fn describe(&self) -> String {
        format!("{}{:?}", self.dtype, self.shape)
    }

    /// Build this input on `backend` with `layout` (see [`Layout`]).
    pub fn build<X: Backend>(&self, backend: &X, layout: Layout) -> Result<X::Array, X::Error> {
        let rank = self.rank();
        if self.values.len() != self.shape.iter().product::<usize>() {
            return Err(CoreError::InvalidArgument {
                op: "suite input",
                message: format!("{} values for shape {:?}", self.values.len(), self.shape),
            }
            .into());
        }
        match layout.effective(rank) {
            Layout::Contiguous => create(backend, &self.shape, self.dtype, &self.values),
            Layout::Transposed => {
                let last = rank - 1;
                let (shape, map) = swap_axes_map(&self.shape, 0, last);
                let stored = create(backend, &shape, self.dtype, &self.values.remap(&map))?;
                backend.transpose(&stored, 0, last)
            }
            Layout::Sliced => {
                let (shape, map) = pad_last_map(&self.shape, 1, 2);
                let stored = create(backend, &shape, self.dtype, &self.values.remap(&map))?;
                backend.slice(&stored, rank - 1, 1, self.shape[rank - 1])
            }
        }
    }
}

/// An array of `shape` holding `values` on `backend`.
pub fn create<X: Backend>(
    backend: &X,
    shape: &[usize],
    dtype: DType,
    values: &Values,
) -> Result<X::Array, X::Error> {
    match values {
        Values::Float(v) => backend.from_f32(v, shape, dtype),
        Values::U32(v) => backend.from_u32(v, shape),
        Values::I32(v) => backend.from_i32(v, shape),
    }
}

/// Row-major multi-index of flat `index` in `shape`.
fn unravel(mut index: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        if shape[d] > 0 {
            idx[d] = index % shape[d];
            index /= shape[d];
        }
    }
    idx
}

/// Flat row-major index of `idx` in `shape`.
fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (&i, &d)| acc * d + i)
}

/// The shape with axes `a` and `b` swapped, and for each of its elements (row-major) the flat
/// index of the source element in `shape`.
///
/// Axes out of range leave the shape as it is (an identity map).
pub fn swap_axes_map(shape: &[usize], a: usize, b: usize) -> (Vec<usize>, Vec<Option<usize>>) {
    let (a, b) = if a.max(b) < shape.len() {
        (a, b)
    } else {
        (0, 0)
    };
    let mut swapped = shape.to_vec();
    if !shape.is_empty() {
        swapped.swap(a, b);
    }
    let numel: usize = swapped.iter().product();
    let map = (0..numel)
        .map(|i| {
            let mut idx = unravel(i, &swapped);
            if !idx.is_empty() {
                idx.swap(a, b);
            }
            Some(ravel(&idx, shape))
        })
        .collect();
    (swapped, map)
}

/// The shape with `before + after` extra elements on the last axis, and the source index of
/// each element (`None` for padding).
fn pad_last_map(shape: &[usize], before: usize, after: usize) -> (Vec<usize>, Vec<Option<usize>>) {
    let rank = shape.len();
    let n = shape[rank - 1];
    let mut padded = shape.to_vec();
    padded[rank - 1] = n + before + after;
    let rows: usize = shape[..rank - 1].iter().product();
    let mut map = Vec::with_capacity(rows * padded[rank - 1]);
    for r in 0..rows {
        for j in 0..padded[rank - 1] {
            map.push(
                (before..before + n)
                    .contains(&j)
                    .then(|| r * n + j - before),
            );
        }
    }
    (padded, map)
}

/// Host transpose of row-major `data` of `shape` (axes `a`, `b` swapped).
pub fn host_swap_axes<T: Copy>(data: &[T], shape: &[usize], a: usize, b: usize) -> Vec<T> {
    let (_, map) = swap_axes_map(shape, a, b);
    map.iter()
        .flatten()
        .filter_map(|&i| data.get(i).copied())
        .collect()
}

/// A seeded source of random inputs.
#[derive(Debug, Clone)]
pub struct Gen {
    rng: ChaCha8Rng,
}

impl Gen {
    /// A generator seeded from `name` (a case name: each case gets its own fixed stream).
    pub fn new(name: &str) -> Self {
        // FNV-1a: stable across platforms and Rust versions, unlike `DefaultHasher`.
        let seed = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        Self {
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// The underlying generator.
    pub fn rng(&mut self) -> &mut ChaCha8Rng {
        &mut self.rng
    }

    /// A float input with values uniform in `[lo, hi)`.
    pub fn uniform(&mut self, shape: &[usize], lo: f32, hi: f32, dtype: DType) -> Input {
        let n = shape.iter().product();
        let data = (0..n).map(|_| self.rng.random_range(lo..hi)).collect();
        Input::float(shape, data, dtype)
    }

    /// A float input of small integers in `lo..=hi`: exact in every float dtype, with many ties.
    pub fn small_ints(&mut self, shape: &[usize], lo: i32, hi: i32, dtype: DType) -> Input {
        let n = shape.iter().product();
        let data = (0..n)
            .map(|_| self.rng.random_range(lo..=hi) as f32)
            .collect();
        Input::float(shape, data, dtype)
    }

    /// A float input whose values are all distinct, in every float dtype (at most 256
    /// elements): a random permutation of `k / 4` for `k` in `-n/2 .. n/2`.
    pub fn distinct(&mut self, shape: &[usize], dtype: DType) -> Input {
        let n: usize = shape.iter().product();
        let mut ks: Vec<i32> = (0..n as i32).map(|k| k - n as i32 / 2).collect();
        ks.shuffle(&mut self.rng);
        Input::float(
            shape,
            ks.into_iter().map(|k| k as f32 * 0.25).collect(),
            dtype,
        )
    }

    /// A `U32` input uniform in `lo..hi`.
    pub fn u32s(&mut self, shape: &[usize], lo: u32, hi: u32) -> Input {
        let n = shape.iter().product();
        Input::u32(
            shape,
            (0..n).map(|_| self.rng.random_range(lo..hi)).collect(),
        )
    }

    /// An `I32` input uniform in `lo..hi`.
    pub fn i32s(&mut self, shape: &[usize], lo: i32, hi: i32) -> Input {
        let n = shape.iter().product();
        Input::i32(
            shape,
            (0..n).map(|_| self.rng.random_range(lo..hi)).collect(),
        )
    }

    /// A random integer in `lo..hi`.
    pub fn below(&mut self, lo: usize, hi: usize) -> usize {
        self.rng.random_range(lo..hi)
    }

    /// `count` distinct values of `0..n` in random order (`count <= n`).
    pub fn distinct_indices(&mut self, n: usize, count: usize) -> Vec<u32> {
        let mut all: Vec<u32> = (0..n as u32).collect();
        all.shuffle(&mut self.rng);
        all.truncate(count);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mtp_core::reference::ReferenceBackend;

    #[test]
    fn every_layout_builds_the_same_logical_array() {
        let b = ReferenceBackend::new();
        let mut g = Gen::new("layouts");
        for shape in [vec![], vec![5], vec![2, 3], vec![2, 3, 4]] {
            let x = g.uniform(&shape, -1.0, 1.0, DType::F32);
            let Values::Float(expected) = &x.values else {
                unreachable!()
            };
            for layout in Layout::ALL {
                let a = x.build(&b, layout).unwrap();
                assert_eq!(b.shape(&a), shape, "{layout}");
                assert_eq!(&b.to_vec_f32(&a).unwrap(), expected, "{layout}");
            }
        }
    }

    #[test]
    fn host_swap_matches_the_reference_transpose() {
        let b = ReferenceBackend::new();
        let data: Vec<f32> = (0..24).map(|i| i as f32).collect();
        let a = b.from_f32(&data, &[2, 3, 4], DType::F32).unwrap();
        let t = b.to_vec_f32(&b.transpose(&a, 0, 2).unwrap()).unwrap();
        assert_eq!(host_swap_axes(&data, &[2, 3, 4], 0, 2), t);
    }
}
