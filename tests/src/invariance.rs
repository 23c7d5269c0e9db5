//! Row invariance: every op on a verify forward's path gives a row of a block the bits the
//! same op gives that row alone — whatever the number of rows (1 to 128: every verify width,
//! prefill chunks and the packed rows of a continuous batch), whatever the row's place in the
//! block. A speculative verify forwards
//! `k + 1` rows where plain decoding forwards one; where an op rounds differently for the
//! two, greedy speculation can leave plain greedy's path at a near-tie (in the logits, or
//! through the keys and values the verify writes to the caches). These cases compare the
//! backend with itself, bit for bit, in every float dtype and quantized weight format:
//!
//! * `linear_rows` — dense `x @ Wᵀ`;
//! * `quant_linear_rows` — quantized weights (GGUF Q8_0, Q4_0, Q5_0, Q4_K, Q6_K), the
//!   activations quantized per row;
//! * `attention_rows` — a query row at position `p` of a block against the block's cache
//!   (causal, sliding windows, grouped heads) equals that query alone against the cache as it
//!   stood at `p`;
//! * `row_ops_rows` — the row-wise ops between them: norms, softmax, log-softmax, GELU, tanh,
//!   rotary embedding at each row's own position, affine and elementwise arithmetic.

use std::sync::Arc;

use mtp_core::quant::{GgmlType, QuantTensor};
use mtp_core::{AttentionMask, Backend, DType, UnaryOp};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::{backend_err, SuiteError};
use crate::harness::FLOATS;

/// The block sizes checked: every width up to 17 rows, wider packed batches, the widest verify
/// (65 rows) and candle's default row-invariance bound (128).
pub const BLOCK_ROWS: [usize; 21] = [
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 24, 40, 65, 128,
];

/// Seeded uniform values in `[-1, 1)`.
fn uniform(rng: &mut ChaCha8Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

/// The first element at which `block` (the rows of a block) differs in bits from `alone`
/// (the same rows, each computed alone), as `(row, column, block value, alone value)`.
fn first_difference(
    block: &[f32],
    alone: &[f32],
    width: usize,
) -> Option<(usize, usize, f32, f32)> {
    block
        .iter()
        .zip(alone)
        .position(|(a, b)| a.to_bits() != b.to_bits())
        .map(|i| (i / width, i % width, block[i], alone[i]))
}

/// Compare the block's rows with the rows computed alone; `what` names the check.
fn check_bits<B: Backend>(
    backend: &B,
    what: impl Fn() -> String,
    block: &[f32],
    alone: &[f32],
    width: usize,
) -> Result<(), SuiteError> {
    if block.len() != alone.len() {
        return Err(SuiteError::Mismatch {
            backend: backend.name(),
            check: what(),
            detail: format!("{} values in the block, {} alone", block.len(), alone.len()),
        });
    }
    match first_difference(block, alone, width) {
        None => Ok(()),
        Some((row, col, got, alone)) => Err(SuiteError::Mismatch {
            backend: backend.name(),
            check: what(),
            detail: format!(
                "row {row}, column {col}: {got:e} ({:#010x}) in the block, {alone:e} ({:#010x}) alone",
                got.to_bits(),
                alone.to_bits()
            ),
        }),
    }
}

/// `f` on the whole block `[1, rows, width]` and on each row alone (`[1, 1, width]`, built
/// from the same host values), read back as `f32`.
fn block_and_alone<B: Backend>(
    backend: &B,
    x: &[f32],
    rows: usize,
    width: usize,
    dtype: DType,
    f: impl Fn(&B::Array, usize) -> Result<B::Array, B::Error>,
) -> Result<(Vec<f32>, Vec<f32>), B::Error> {
    let block = backend.from_f32(x, &[1, rows, width], dtype)?;
    let block = backend.to_vec_f32(&f(&block, 0)?)?;
    let mut alone = Vec::with_capacity(block.len());
    for (r, row) in x.chunks_exact(width).enumerate() {
        let row = backend.from_f32(row, &[1, 1, width], dtype)?;
        alone.extend(backend.to_vec_f32(&f(&row, r)?)?);
    }
    Ok((block, alone))
}

/// Dense `linear(x, W)`: `(in, out)` sizes past one SIMD step, with tails, and a
/// Gemma-3-270M-sized projection.
const LINEAR_SHAPES: [(usize, usize); 4] = [(8, 5), (67, 33), (256, 96), (640, 160)];

/// Dense `x @ Wᵀ` on blocks of every size in every float dtype: each row as alone.
pub fn linear_rows<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut rng = ChaCha8Rng::seed_from_u64(0x11ea);
    for dtype in FLOATS {
        for (cols, out) in LINEAR_SHAPES {
            let w = backend_err(
                backend,
                || "linear weight".into(),
                backend.from_f32(&uniform(&mut rng, out * cols), &[out, cols], dtype),
            )?;
            for rows in BLOCK_ROWS {
                let x = uniform(&mut rng, rows * cols);
                let what = || format!("linear {dtype} [{rows}, {cols}] x [{out}, {cols}]ᵀ");
                let (block, alone) = backend_err(
                    backend,
                    what,
                    block_and_alone(backend, &x, rows, cols, dtype, |x, _| backend.linear(x, &w)),
                )?;
                check_bits(backend, what, &block, &alone, out)?;
            }
        }
    }
    Ok(())
}

/// A random quantized `[rows, cols]` weight of `ty`: produced by the quantizer where it makes
/// `ty`, else random blocks with finite `f16` scales.
fn quant_weight(rng: &mut ChaCha8Rng, ty: GgmlType, rows: usize, cols: usize) -> QuantTensor {
    if let Ok(t) = mtp_core::quant::quantize_ggml(ty, &uniform(rng, rows * cols), rows, cols) {
        return t;
    }
    let bytes = ty.tensor_bytes(rows, cols).unwrap_or(0);
    let mut data: Vec<u8> = (0..bytes).map(|_| rng.random()).collect();
    // Every f16 in a block: small finite scales (the K-quants keep theirs at known offsets;
    // random bytes elsewhere are valid quants).
    let block = ty.block_bytes();
    let scale_offsets: &[usize] = match ty {
        GgmlType::Q4K => &[0, 2],
        GgmlType::Q6K => &[208],
        GgmlType::Q5_0 => &[0],
        _ => &[],
    };
    for chunk in data.chunks_exact_mut(block) {
        for &at in scale_offsets {
            let d = half::f16::from_f32(rng.random_range(0.001f32..0.02));
            chunk[at..at + 2].copy_from_slice(&d.to_le_bytes());
        }
    }
    QuantTensor::ggml(ty, rows, cols, data).unwrap_or_else(|e| panic!("{ty} weight: {e}"))
}

/// The GGUF block types with a CPU kernel of their own on some backend.
const QUANT_TYPES: [GgmlType; 5] = [
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q5_0,
    GgmlType::Q4K,
    GgmlType::Q6K,
];

/// Quantized `x @ Wᵀ` (the activations quantized per row where the kernel does so) on blocks of
/// every size, in every float dtype: each row as alone.
pub fn quant_linear_rows<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut rng = ChaCha8Rng::seed_from_u64(0x9a17);
    for ty in QUANT_TYPES {
        for dtype in FLOATS {
            for (cols, out) in [(256, 48), (512, 160), (2560, 256), (10240, 64)] {
                let t = Arc::new(quant_weight(&mut rng, ty, out, cols));
                let w = backend_err(
                    backend,
                    || "quantized weight".into(),
                    backend.quant_weight(t, dtype),
                )?;
                for rows in BLOCK_ROWS {
                    let x = uniform(&mut rng, rows * cols);
                    let what =
                        || format!("quant_linear {ty} {dtype} [{rows}, {cols}] x [{out}, {cols}]ᵀ");
                    let (block, alone) = backend_err(
                        backend,
                        what,
                        block_and_alone(backend, &x, rows, cols, dtype, |x, _| {
                            backend.quant_linear(x, &w)
                        }),
                    )?;
                    check_bits(backend, what, &block, &alone, out)?;
                }
            }
        }
    }
    Ok(())
}

/// One attention geometry: query heads, key/value heads, head dim, the cache positions
/// before the block, and the sliding window (if any).
struct AttentionCase {
    heads: usize,
    kv_heads: usize,
    dim: usize,
    before: usize,
    window: Option<usize>,
}

const ATTENTION_CASES: [AttentionCase; 4] = [
    AttentionCase {
        heads: 4,
        kv_heads: 1,
        dim: 64,
        before: 37,
        window: None,
    },
    AttentionCase {
        heads: 2,
        kv_heads: 2,
        dim: 8,
        before: 0,
        window: None,
    },
    AttentionCase {
        heads: 8,
        kv_heads: 2,
        dim: 32,
        before: 20,
        window: Some(9),
    },
    AttentionCase {
        heads: 3,
        kv_heads: 1,
        dim: 256,
        before: 130,
        window: None,
    },
];

/// How a call's keys and values are laid out: as an array of their own, or as a cache's view
/// (a `[1, kv_heads, capacity, dim]` buffer sliced to the filled positions: with several
/// key/value heads the heads lie apart in memory).
#[derive(Clone, Copy, Debug)]
enum KeyLayout {
    Packed,
    CacheView,
}

/// Positions a cache view's buffer holds past the filled ones.
const SPARE_CAPACITY: usize = 11;

/// The first `len` positions of each head of `x` (`[kv_heads, keys, dim]`, row-major) as a
/// `[1, kv_heads, len, dim]` array laid out as `layout` says.
fn key_array<B: Backend>(
    backend: &B,
    x: &[f32],
    (kv_heads, keys, dim): (usize, usize, usize),
    len: usize,
    layout: KeyLayout,
    dtype: DType,
) -> Result<B::Array, B::Error> {
    let capacity = match layout {
        KeyLayout::Packed => len,
        KeyLayout::CacheView => len + SPARE_CAPACITY,
    };
    // Positions past `len` hold values no query may see.
    let buffer: Vec<f32> = (0..kv_heads)
        .flat_map(|h| {
            let head = &x[h * keys * dim..][..len * dim];
            head.iter()
                .copied()
                .chain(std::iter::repeat_n(7.0, (capacity - len) * dim))
        })
        .collect();
    let array = backend.from_f32(&buffer, &[1, kv_heads, capacity, dim], dtype)?;
    match layout {
        KeyLayout::Packed => Ok(array),
        KeyLayout::CacheView => backend.slice(&array, 2, 0, len),
    }
}

/// The key layouts of the block and of each row alone that are compared: what the engine
/// meets (a verify block on a cache's view against a decode row on a view of another length,
/// packed when its buffer is full) and the packed arrays of both.
const KEY_LAYOUTS: [(KeyLayout, KeyLayout); 3] = [
    (KeyLayout::Packed, KeyLayout::Packed),
    (KeyLayout::CacheView, KeyLayout::Packed),
    (KeyLayout::Packed, KeyLayout::CacheView),
];

/// A query row at position `p` of a block (its keys and values appended to the cache, the
/// causal mask hiding the later ones) equals that query alone against the cache as it stood
/// at `p` — every float dtype, causal and windowed, grouped heads, blocks of every size, keys
/// packed or read through a cache's view.
pub fn attention_rows<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut rng = ChaCha8Rng::seed_from_u64(0xa77e);
    for dtype in FLOATS {
        for case in ATTENTION_CASES {
            let &AttentionCase {
                heads,
                kv_heads,
                dim,
                before,
                window,
            } = &case;
            for (rows, (block_layout, alone_layout)) in BLOCK_ROWS
                .into_iter()
                .flat_map(|rows| KEY_LAYOUTS.map(|layouts| (rows, layouts)))
            {
                let keys = before + rows;
                let geometry = (kv_heads, keys, dim);
                let q = uniform(&mut rng, heads * rows * dim);
                let k = uniform(&mut rng, kv_heads * keys * dim);
                let v = uniform(&mut rng, kv_heads * keys * dim);
                let scale = 1.0 / (dim as f32).sqrt();
                let what = || {
                    format!(
                        "attention {dtype} {heads}/{kv_heads} heads x {dim}, {rows} rows after \
                         {before} cached, window {window:?}, keys {block_layout:?} in the \
                         block and {alone_layout:?} alone"
                    )
                };
                let run = || -> Result<(Vec<f32>, Vec<f32>), B::Error> {
                    let mask = AttentionMask::causal(before, 0).with_window(window);
                    let qa = backend.from_f32(&q, &[1, heads, rows, dim], dtype)?;
                    let ka = key_array(backend, &k, geometry, keys, block_layout, dtype)?;
                    let va = key_array(backend, &v, geometry, keys, block_layout, dtype)?;
                    let block =
                        backend.to_vec_f32(&backend.attention(&qa, &ka, &va, &mask, scale)?)?;
                    // `[heads, rows, dim]` → each row alone, in the block's layout.
                    let mut alone = vec![0f32; block.len()];
                    for r in 0..rows {
                        let seen = before + r + 1;
                        let qr: Vec<f32> = (0..heads)
                            .flat_map(|h| q[(h * rows + r) * dim..][..dim].iter().copied())
                            .collect();
                        let mask = AttentionMask::causal(before + r, 0).with_window(window);
                        let qa = backend.from_f32(&qr, &[1, heads, 1, dim], dtype)?;
                        let ka = key_array(backend, &k, geometry, seen, alone_layout, dtype)?;
                        let va = key_array(backend, &v, geometry, seen, alone_layout, dtype)?;
                        let one =
                            backend.to_vec_f32(&backend.attention(&qa, &ka, &va, &mask, scale)?)?;
                        for h in 0..heads {
                            alone[(h * rows + r) * dim..][..dim]
                                .copy_from_slice(&one[h * dim..][..dim]);
                        }
                    }
                    Ok((block, alone))
                };
                let (block, alone) = backend_err(backend, what, run())?;
                check_bits(backend, what, &block, &alone, dim)?;
            }
        }
    }
    Ok(())
}

/// The row-wise ops of a forward on blocks of every size, every float dtype: each row as alone.
pub fn row_ops_rows<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut rng = ChaCha8Rng::seed_from_u64(0x5017);
    /// Rows start at this position (the rotary angle of row `r` is `(START + r) · freq`).
    const START: usize = 29;
    for dtype in FLOATS {
        for width in [8usize, 64, 640] {
            let weight = backend_err(
                backend,
                || "norm weight".into(),
                backend.from_f32(&uniform(&mut rng, width), &[width], dtype),
            )?;
            let other = uniform(&mut rng, width);
            let other = backend_err(
                backend,
                || "operand".into(),
                backend.from_f32(&other, &[width], dtype),
            )?;
            let inv_freq: Vec<f32> = (0..width / 4)
                .map(|i| 10_000f32.powf(-(2.0 * i as f32) / (width / 2) as f32))
                .collect();
            type RowOp<'a, B> = Box<
                dyn Fn(
                        &<B as Backend>::Array,
                        usize,
                    ) -> Result<<B as Backend>::Array, <B as Backend>::Error>
                    + 'a,
            >;
            let ops: Vec<(&str, RowOp<'_, B>)> = vec![
                (
                    "rms_norm",
                    Box::new(|x, _| backend.rms_norm(x, Some(&weight), 1e-6)),
                ),
                (
                    "rms_norm without weight",
                    Box::new(|x, _| backend.rms_norm(x, None, 1e-6)),
                ),
                ("softmax", Box::new(|x, _| backend.softmax(x, 2))),
                ("log_softmax", Box::new(|x, _| backend.log_softmax(x, 2))),
                ("gelu_tanh", Box::new(|x, _| backend.gelu_tanh(x))),
                ("tanh", Box::new(|x, _| backend.unary(x, UnaryOp::Tanh))),
                ("affine", Box::new(|x, _| backend.affine(x, 0.37, -1.5))),
                ("mul", Box::new(|x, _| backend.mul(x, &other))),
                ("add", Box::new(|x, _| backend.add(x, &other))),
                (
                    "rope",
                    Box::new(|x, r| {
                        // `[1, t, width]` as `[1, 2, t, width / 2]`: two heads.
                        let t = backend.shape(x)[1];
                        let heads = backend.reshape(x, &[1, t, 2, width / 2])?;
                        let heads = backend.transpose(&heads, 1, 2)?;
                        let start = START + if t == 1 { r } else { 0 };
                        backend.rope(&heads, start, &inv_freq)
                    }),
                ),
            ];
            for rows in BLOCK_ROWS {
                let x: Vec<f32> = uniform(&mut rng, rows * width)
                    .into_iter()
                    .map(|v| 4.0 * v)
                    .collect();
                for (name, op) in &ops {
                    let what = || format!("{name} {dtype} [{rows}, {width}]");
                    let (block, alone) = backend_err(
                        backend,
                        what,
                        block_and_alone(backend, &x, rows, width, dtype, op),
                    )?;
                    let (block, alone) = if *name == "rope" {
                        // `[1, 2, rows, width / 2]`: back to row-major rows.
                        (heads_to_rows(&block, rows, width / 2), alone)
                    } else {
                        (block, alone)
                    };
                    check_bits(backend, what, &block, &alone, width)?;
                }
            }
        }
    }
    Ok(())
}

/// A block's rotary output `[2, rows, half]` (two heads) in the order of the rows computed
/// alone, `rows` consecutive `[2, 1, half]`: `[rows, 2, half]`.
fn heads_to_rows(x: &[f32], rows: usize, half: usize) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    for h in 0..2 {
        for r in 0..rows {
            out[(r * 2 + h) * half..][..half].copy_from_slice(&x[(h * rows + r) * half..][..half]);
        }
    }
    out
}
