//! Pure-Rust decoding of one GGUF block into `f32` weights: the oracle every backend's kernels
//! are checked against. Each function follows ggml's reference `dequantize_row_*`
//! (`ggml-quants.c`) and does its float arithmetic in the same order, so the results are
//! bit-identical to ggml's and to `gguf-py`'s numpy `dequantize` (checked on committed fixtures).

use super::ggml::{GgmlType, QK_K};

fn f16_at(b: &[u8], at: usize) -> f32 {
    half::f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// Decode `block` (exactly `ty.block_bytes()` bytes) into `out` (`ty.block_size()` values).
pub(super) fn dequantize_block(ty: GgmlType, block: &[u8], out: &mut [f32]) {
    match ty {
        GgmlType::F32 => out[0] = f32::from_le_bytes([block[0], block[1], block[2], block[3]]),
        GgmlType::F16 => out[0] = f16_at(block, 0),
        GgmlType::BF16 => out[0] = half::bf16::from_le_bytes([block[0], block[1]]).to_f32(),
        GgmlType::Q4_0 => q4_0(block, out),
        GgmlType::Q4_1 => q4_1(block, out),
        GgmlType::Q5_0 => q5_0(block, out),
        GgmlType::Q5_1 => q5_1(block, out),
        GgmlType::Q8_0 => q8_0(block, out),
        GgmlType::Q2K => q2_k(block, out),
        GgmlType::Q3K => q3_k(block, out),
        GgmlType::Q4K => q4_k(block, out),
        GgmlType::Q5K => q5_k(block, out),
        GgmlType::Q6K => q6_k(block, out),
        GgmlType::Q8K => q8_k(block, out),
    }
}

/// `block_q4_0`: `w = d (q - 8)`, low nibbles first.
fn q4_0(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 0);
    for (j, &q) in b[2..18].iter().enumerate() {
        out[j] = f32::from((q & 0x0F) as i8 - 8) * d;
        out[j + 16] = f32::from((q >> 4) as i8 - 8) * d;
    }
}

/// `block_q4_1`: `w = d q + m`.
fn q4_1(b: &[u8], out: &mut [f32]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    for (j, &q) in b[4..20].iter().enumerate() {
        out[j] = d * f32::from(q & 0x0F) + m;
        out[j + 16] = d * f32::from(q >> 4) + m;
    }
}

/// The 5-bit values of a Q5 block: low nibbles from `qs`, bit `i` of `qh` the fifth bit of `i`.
fn five_bit(qh: &[u8], qs: &[u8], j: usize) -> (u8, u8) {
    let qh = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    let hi = |i: usize| (((qh >> i) & 1) as u8) << 4;
    ((qs[j] & 0x0F) | hi(j), (qs[j] >> 4) | hi(j + 16))
}

/// `block_q5_0`: `w = d (q - 16)`.
fn q5_0(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 0);
    for j in 0..16 {
        let (lo, hi) = five_bit(&b[2..6], &b[6..22], j);
        out[j] = f32::from(lo as i8 - 16) * d;
        out[j + 16] = f32::from(hi as i8 - 16) * d;
    }
}

/// `block_q5_1`: `w = d q + m`.
fn q5_1(b: &[u8], out: &mut [f32]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    for j in 0..16 {
        let (lo, hi) = five_bit(&b[4..8], &b[8..24], j);
        out[j] = d * f32::from(lo) + m;
        out[j + 16] = d * f32::from(hi) + m;
    }
}

/// `block_q8_0`: `w = d q`.
fn q8_0(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 0);
    for (o, &q) in out.iter_mut().zip(&b[2..34]) {
        *o = f32::from(q as i8) * d;
    }
}

/// `block_q2_K`: 16 groups of 16 with 4-bit scale (low) and min (high) per group;
/// `w = d sc q - dmin m`. The 64 bytes of `qs` hold four 2-bit planes per 32-byte half.
fn q2_k(b: &[u8], out: &mut [f32]) {
    let (scales, qs) = (&b[0..16], &b[16..80]);
    let (d, dmin) = (f16_at(b, 80), f16_at(b, 82));
    for (i, o) in out.iter_mut().enumerate().take(QK_K) {
        let (half, plane, l) = (i / 128, (i % 128) / 32, i % 32);
        let q = (qs[half * 32 + l] >> (2 * plane)) & 3;
        let sc = scales[i / 16];
        let dl = d * f32::from(sc & 0x0F);
        let ml = dmin * f32::from(sc >> 4);
        *o = dl * f32::from(q) - ml;
    }
}

/// The 16 signed 6-bit scales of a Q3_K block (`scales[12]`: low nibbles in bytes 0..8, the two
/// high bits of each in bytes 8..12), minus 32.
fn q3_k_scales(s: &[u8]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        let low = if i < 8 { s[i] & 0x0F } else { s[i - 8] >> 4 };
        let high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        *o = (low | (high << 4)) as i8 - 32;
    }
    out
}

/// `block_q3_K`: 16 groups of 16, `w = d sc (q_low - 4 (1 - hmask_bit))`.
fn q3_k(b: &[u8], out: &mut [f32]) {
    let (hmask, qs) = (&b[0..32], &b[32..96]);
    let scales = q3_k_scales(&b[96..108]);
    let d = f16_at(b, 108);
    for (i, o) in out.iter_mut().enumerate().take(QK_K) {
        let (half, plane, l) = (i / 128, (i % 128) / 32, i % 32);
        let low = ((qs[half * 32 + l] >> (2 * plane)) & 3) as i8;
        let high = (hmask[l] >> (i / 32)) & 1;
        let q = low - if high == 0 { 4 } else { 0 };
        let dl = d * f32::from(scales[i / 16]);
        *o = dl * f32::from(q);
    }
}

/// The 8 (scale, min) pairs of 6 bits of a Q4_K / Q5_K block (`get_scale_min_k4`).
fn scale_min_k4(s: &[u8]) -> [(u8, u8); 8] {
    let mut out = [(0u8, 0u8); 8];
    for (j, o) in out.iter_mut().enumerate() {
        *o = if j < 4 {
            (s[j] & 0x3F, s[j + 4] & 0x3F)
        } else {
            (
                (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4),
                (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
            )
        };
    }
    out
}

/// `block_q4_K`: 8 groups of 32, `w = d sc q - dmin m`; each 32 bytes of `qs` hold two groups
/// (low nibbles, then high nibbles).
fn q4_k(b: &[u8], out: &mut [f32]) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let sm = scale_min_k4(&b[4..16]);
    let qs = &b[16..144];
    for (i, o) in out.iter_mut().enumerate().take(QK_K) {
        let (g, l) = (i / 32, i % 32);
        let q = (qs[(g / 2) * 32 + l] >> (4 * (g % 2))) & 0x0F;
        let (sc, m) = sm[g];
        *o = d * f32::from(sc) * f32::from(q) - dmin * f32::from(m);
    }
}

/// `block_q5_K`: as Q4_K with bit `g` of `qh[l]` the fifth bit of weight `l` of group `g`.
fn q5_k(b: &[u8], out: &mut [f32]) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let sm = scale_min_k4(&b[4..16]);
    let (qh, qs) = (&b[16..48], &b[48..176]);
    for (i, o) in out.iter_mut().enumerate().take(QK_K) {
        let (g, l) = (i / 32, i % 32);
        let low = (qs[(g / 2) * 32 + l] >> (4 * (g % 2))) & 0x0F;
        let q = low | (((qh[l] >> g) & 1) << 4);
        let (sc, m) = sm[g];
        *o = d * f32::from(sc) * f32::from(q) - dmin * f32::from(m);
    }
}

/// `block_q6_K`: 16 groups of 16, `w = d sc (q - 32)` with 4 low bits from `ql` and 2 high bits
/// from `qh`, in two halves of 128.
fn q6_k(b: &[u8], out: &mut [f32]) {
    let (ql, qh, scales) = (&b[0..128], &b[128..192], &b[192..208]);
    let d = f16_at(b, 208);
    for (i, o) in out.iter_mut().enumerate().take(QK_K) {
        let (half, r) = (i / 128, i % 128);
        let low = (ql[half * 64 + r % 64] >> (4 * (r / 64))) & 0x0F;
        let high = (qh[half * 32 + r % 32] >> (2 * (r / 32))) & 3;
        let q = (low | (high << 4)) as i8 - 32;
        let dl = d * f32::from(scales[i / 16] as i8);
        *o = dl * f32::from(q);
    }
}

/// `block_q8_K`: `w = d q` (`d` is an `f32`; the group sums are for dot products only).
fn q8_k(b: &[u8], out: &mut [f32]) {
    let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    for (o, &q) in out.iter_mut().zip(&b[4..4 + QK_K]) {
        *o = d * f32::from(q as i8);
    }
}
