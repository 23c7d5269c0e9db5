//! Creation and host reads: `from_f32`, `from_le_bytes`, `from_u32`, `from_i32`, `full`,
//! `scalar`, `to_vec_f32`, `to_vec_u32`, `shape`, `dtype` and `cast` between every pair of
//! dtypes.

use mtp_core::{Backend, DType};
use rand::Rng;

use crate::error::SuiteError;
use crate::harness::{Harness, Output, ALL_DTYPES, FLOATS};
use crate::inputs::Input;
use crate::op::Op;
use crate::tolerance::Tolerance;

/// Shapes of the creation cases, the 0-d scalar included.
const SHAPES: [&[usize]; 5] = [&[], &[1], &[7], &[2, 3], &[2, 3, 4]];

/// `from_f32` in every float dtype reads back (rounded to the dtype exactly as the reference
/// rounds), with the right shape and dtype, from every layout.
pub fn from_f32<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "from_f32");
    for dtype in FLOATS {
        for shape in SHAPES {
            let x = h.gen.uniform(shape, -100.0, 100.0, dtype);
            h.check(&Op::Identity, &[x], Tolerance::EXACT)?;
        }
    }
    Ok(())
}

/// `values` as the little-endian bytes of `src` (`F32`, `F16` or `BF16`): a safetensors tensor.
fn le_bytes(values: &[f32], src: DType) -> Vec<u8> {
    match src {
        DType::F16 => values
            .iter()
            .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
            .collect(),
        DType::BF16 => values
            .iter()
            .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
            .collect(),
        _ => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

fn read_le<X: Backend>(
    b: &X,
    bytes: &[u8],
    src: DType,
    shape: &[usize],
    dtype: DType,
) -> Result<Vec<Output>, X::Error> {
    let x = b.from_le_bytes(bytes, src, shape, dtype)?;
    Ok(vec![Output::read(b, &x)?])
}

/// `from_le_bytes` — how weights leave a memory map — for values stored as every float dtype,
/// read into every float dtype: equal to the reference's decode exactly, from bytes at the start
/// of a buffer and from the same bytes one byte further on (misaligned for every width, as a
/// tensor at an odd file offset). Bytes that do not fill the shape, integer stored dtypes and
/// integer target dtypes are errors.
pub fn from_le_bytes<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "from_le_bytes");
    for src in FLOATS {
        for shape in SHAPES {
            let n: usize = shape.iter().product();
            let values: Vec<f32> = (0..n)
                .map(|_| h.gen.rng().random_range(-100.0..100.0))
                .collect();
            let bytes = le_bytes(&values, src);
            let mut shifted = vec![0u8; bytes.len() + 1];
            shifted[1..].copy_from_slice(&bytes);
            for (stored, at) in [(&bytes[..], 0), (&shifted[1..], 1)] {
                for dtype in FLOATS {
                    let what = || {
                        format!("from_le_bytes({src} stored at offset {at}, {shape:?}, to {dtype})")
                    };
                    h.compare_results(
                        &what,
                        read_le(backend, stored, src, shape, dtype),
                        read_le(h.reference(), stored, src, shape, dtype),
                        Tolerance::EXACT,
                    )?;
                }
            }
        }
    }
    let bytes = le_bytes(&[0.5; 24], DType::F32);
    let invalid: [(&[u8], DType, DType, &str); 4] = [
        (&bytes[..95], DType::F32, DType::F32, "a partial value"),
        (&bytes[..92], DType::F32, DType::F32, "23 values for 24"),
        (&bytes[..], DType::U32, DType::F32, "integers stored"),
        (&bytes[..], DType::F32, DType::I32, "an integer target"),
    ];
    for (stored, src, dtype, why) in invalid {
        let what = || {
            format!(
                "from_le_bytes of {why} ({} bytes, {src} to {dtype})",
                stored.len()
            )
        };
        if h.reference()
            .from_le_bytes(stored, src, &[4, 6], dtype)
            .is_ok()
        {
            return Err(SuiteError::Reference {
                what: what(),
                message: "the reference accepted an input the suite expects to be invalid".into(),
            });
        }
        h.expect_err(&what, || backend.from_le_bytes(stored, src, &[4, 6], dtype))?;
    }
    Ok(())
}

/// `from_u32` reads back exactly with `to_vec_u32`, including values above `i32::MAX`.
pub fn from_u32<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "from_u32");
    for shape in SHAPES {
        let x = h.gen.u32s(shape, 0, 1 << 20);
        h.check(&Op::Identity, &[x], Tolerance::EXACT)?;
    }
    let big = Input::u32(&[3], vec![0, u32::MAX, 1 << 31]);
    h.check(&Op::Identity, &[big], Tolerance::EXACT)
}

/// `from_i32` reads back exactly, negative values included.
pub fn from_i32<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "from_i32");
    for shape in SHAPES {
        let x = h.gen.i32s(shape, -(1 << 20), 1 << 20);
        h.check(&Op::Identity, &[x], Tolerance::EXACT)?;
    }
    Ok(())
}

/// The host reads agree across dtypes: `to_vec_u32` of a non-negative `I32` array and
/// `to_vec_f32` of a `U32` array give the stored integers.
pub fn host_reads_of_integers<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let data = [0i32, 5, 17, 1 << 20];
    let what = || "to_vec_u32 of i32[4] and to_vec_f32 of u32[4]".to_string();
    let read = |b: &B| -> Result<(Vec<u32>, Vec<f32>), B::Error> {
        let i = b.from_i32(&data, &[4])?;
        let u = b.from_u32(&[0, 5, 17, 1 << 20], &[4])?;
        Ok((b.to_vec_u32(&i)?, b.to_vec_f32(&u)?))
    };
    let (as_u32, as_f32) = crate::error::backend_err(backend, what, read(backend))?;
    let expected_u32: Vec<u32> = data.iter().map(|&v| v as u32).collect();
    let expected_f32: Vec<f32> = data.iter().map(|&v| v as f32).collect();
    if as_u32 != expected_u32 || as_f32 != expected_f32 {
        return Err(SuiteError::Mismatch {
            backend: backend.name(),
            check: what(),
            detail: format!("got {as_u32:?} and {as_f32:?}"),
        });
    }
    Ok(())
}

fn full_on<X: Backend>(
    b: &X,
    shape: &[usize],
    value: f32,
    dtype: DType,
    as_scalar: bool,
) -> Result<Vec<Output>, X::Error> {
    let x = if as_scalar {
        b.scalar(value, dtype)?
    } else {
        b.full(shape, value, dtype)?
    };
    Ok(vec![Output::read(b, &x)?])
}

/// `full` in every dtype (float values rounded to the dtype, integer dtypes truncating toward
/// zero) and `scalar` (a 0-d `full`).
pub fn full_and_scalar<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let h = Harness::new(backend, "full");
    for dtype in ALL_DTYPES {
        let values: &[f32] = match dtype {
            DType::U32 => &[0.0, 3.0, 7.9, 65_536.0],
            DType::I32 => &[0.0, -3.0, -7.9, 2.5],
            _ => &[0.0, -1.5, 0.1, 2.71, -1e4],
        };
        for &value in values {
            for shape in SHAPES {
                let what = || format!("full({shape:?}, {value}, {dtype})");
                h.compare_results(
                    &what,
                    full_on(backend, shape, value, dtype, false),
                    full_on(h.reference(), shape, value, dtype, false),
                    Tolerance::EXACT,
                )?;
            }
            let what = || format!("scalar({value}, {dtype})");
            h.compare_results(
                &what,
                full_on(backend, &[], value, dtype, true),
                full_on(h.reference(), &[], value, dtype, true),
                Tolerance::EXACT,
            )?;
        }
    }
    Ok(())
}

/// `cast` between every pair of dtypes on values meaningful for both: float→int truncates
/// toward zero, int→float and float→float round to the target, int→int keeps values.
pub fn cast_all_pairs<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "cast");
    for from in ALL_DTYPES {
        for to in ALL_DTYPES {
            for shape in [&[5][..], &[3, 4], &[2, 3, 2]] {
                let x = match (from, to) {
                    (f, DType::U32) if f.is_float() => h.gen.uniform(shape, 0.0, 99.9, f),
                    (f, DType::I32) if f.is_float() => h.gen.uniform(shape, -99.9, 99.9, f),
                    (f, _) if f.is_float() => h.gen.uniform(shape, -300.0, 300.0, f),
                    (DType::U32, _) => h.gen.u32s(shape, 0, 2048),
                    (_, DType::U32) => h.gen.i32s(shape, 0, 2048),
                    _ => h.gen.i32s(shape, -2048, 2048),
                };
                h.check(&Op::Cast(to), &[x], Tolerance::EXACT)?;
            }
        }
    }
    Ok(())
}
