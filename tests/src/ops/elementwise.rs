//! Elementwise ops: `binary` (every [`BinaryOp`], broadcasting, 0-d operands, integer dtypes),
//! the derived `add`/`sub`/`mul`/`div`, `unary` (every [`UnaryOp`] on its domain), `compare`
//! (every [`CompareOp`], ties included), `where_cond` and `affine`.

use mtp_core::{Backend, BinaryOp, CompareOp, DType, UnaryOp};
use rand::Rng;

use crate::error::SuiteError;
use crate::harness::{Harness, ALL_DTYPES, FLOATS};
use crate::inputs::{Gen, Input, Values};
use crate::op::Op;
use crate::tolerance::Tolerance;

/// Every binary op.
pub const BINARY_OPS: [BinaryOp; 6] = [
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Div,
    BinaryOp::Maximum,
    BinaryOp::Minimum,
];

/// Every comparison.
pub const COMPARE_OPS: [CompareOp; 6] = [
    CompareOp::Eq,
    CompareOp::Ne,
    CompareOp::Lt,
    CompareOp::Le,
    CompareOp::Gt,
    CompareOp::Ge,
];

/// Every unary op.
pub const UNARY_OPS: [UnaryOp; 7] = [
    UnaryOp::Neg,
    UnaryOp::Exp,
    UnaryOp::Log,
    UnaryOp::Sqrt,
    UnaryOp::Rsqrt,
    UnaryOp::Tanh,
    UnaryOp::Abs,
];

/// Operand shapes whose NumPy broadcast is defined: equal, trailing, 0-d scalars, both sides
/// stretched.
pub const BROADCAST_PAIRS: [(&[usize], &[usize]); 8] = [
    (&[2, 3], &[2, 3]),
    (&[2, 1, 3], &[4, 1]),
    (&[3], &[2, 3]),
    (&[], &[2, 3]),
    (&[2, 3], &[]),
    (&[], &[]),
    (&[1, 4], &[3, 1]),
    (&[2, 1, 3, 1], &[1, 4, 1, 5]),
];

/// Float values in `±[0.5, 2)` (safe divisors).
fn away_from_zero(gen: &mut Gen, shape: &[usize], dtype: DType) -> Input {
    let mut x = gen.uniform(shape, 0.5, 2.0, dtype);
    if let Values::Float(v) = &mut x.values {
        for e in v.iter_mut() {
            if gen.rng().random_bool(0.5) {
                *e = -*e;
            }
        }
    }
    x
}

/// Operands of `op` in `dtype`: integer operands keep results in range (no wrap-around, no
/// division by zero); divisors stay away from zero.
fn operands(gen: &mut Gen, op: BinaryOp, a: &[usize], b: &[usize], dtype: DType) -> [Input; 2] {
    match (dtype, op) {
        (DType::U32, BinaryOp::Sub) => [gen.u32s(a, 1000, 2000), gen.u32s(b, 0, 1000)],
        (DType::U32, _) => [gen.u32s(a, 0, 2000), gen.u32s(b, 1, 1000)],
        (DType::I32, BinaryOp::Div) => {
            let mut d = gen.i32s(b, 1, 50);
            if let Values::I32(v) = &mut d.values {
                for e in v.iter_mut() {
                    if gen.rng().random_bool(0.5) {
                        *e = -*e;
                    }
                }
            }
            [gen.i32s(a, -1000, 1000), d]
        }
        (DType::I32, _) => [gen.i32s(a, -1000, 1000), gen.i32s(b, -1000, 1000)],
        (float, BinaryOp::Div) => [
            gen.uniform(a, -4.0, 4.0, float),
            away_from_zero(gen, b, float),
        ],
        (float, _) => [
            gen.uniform(a, -4.0, 4.0, float),
            gen.uniform(b, -4.0, 4.0, float),
        ],
    }
}

/// The tolerance of a one-rounding op in `dtype` (exact for integers).
fn rounding(dtype: DType) -> Tolerance {
    if dtype.is_float() {
        Tolerance::rounding(dtype)
    } else {
        Tolerance::EXACT
    }
}

/// `binary` for every op and dtype on every broadcast pair; integer division truncates toward
/// zero.
pub fn binary<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "binary");
    for dtype in ALL_DTYPES {
        for op in BINARY_OPS {
            for (a, b) in BROADCAST_PAIRS {
                let inputs = operands(&mut h.gen, op, a, b, dtype);
                h.check(&Op::Binary(op), &inputs, rounding(dtype))?;
            }
        }
    }
    Ok(())
}

/// The derived `add`, `sub`, `mul` and `div` helpers agree with the reference (a backend may
/// override them).
pub fn derived_arithmetic<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "derived_arithmetic");
    for dtype in ALL_DTYPES {
        for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div] {
            for (a, b) in [BROADCAST_PAIRS[0], BROADCAST_PAIRS[1], BROADCAST_PAIRS[4]] {
                let inputs = operands(&mut h.gen, op, a, b, dtype);
                h.check(&Op::Derived(op), &inputs, rounding(dtype))?;
            }
        }
    }
    Ok(())
}

/// `unary` for every op on inputs inside its domain (positive for `Log`, `Sqrt`, `Rsqrt`).
pub fn unary<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "unary");
    for dtype in FLOATS {
        for op in UNARY_OPS {
            let (lo, hi) = match op {
                UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt => (0.1, 4.0),
                UnaryOp::Exp => (-5.0, 3.0),
                _ => (-3.0, 3.0),
            };
            for shape in [&[][..], &[7], &[3, 4], &[2, 3, 4]] {
                let x = h.gen.uniform(shape, lo, hi, dtype);
                h.check(&Op::Unary(op), &[x], Tolerance::rounding(dtype))?;
            }
        }
    }
    Ok(())
}

/// `compare` for every op and dtype, broadcasting, on small integers so ties are frequent.
pub fn compare<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "compare");
    for dtype in ALL_DTYPES {
        for op in COMPARE_OPS {
            for (a, b) in BROADCAST_PAIRS {
                let inputs = match dtype {
                    DType::U32 => [h.gen.u32s(a, 0, 3), h.gen.u32s(b, 0, 3)],
                    DType::I32 => [h.gen.i32s(a, -2, 2), h.gen.i32s(b, -2, 2)],
                    f => [h.gen.small_ints(a, -2, 2, f), h.gen.small_ints(b, -2, 2, f)],
                };
                h.check(&Op::Compare(op), &inputs, Tolerance::EXACT)?;
            }
        }
    }
    Ok(())
}

/// `where_cond` with `U32` conditions (0, 1 and other nonzero values), broadcasting all three
/// operands, in every dtype.
pub fn where_cond<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "where_cond");
    let shapes: [[&[usize]; 3]; 4] = [
        [&[3, 4], &[3, 4], &[3, 4]],
        [&[2, 1, 3], &[4, 1], &[]],
        [&[4], &[3, 4], &[3, 1]],
        [&[], &[2, 2], &[2, 2]],
    ];
    for dtype in ALL_DTYPES {
        for [c, a, b] in shapes {
            let cond = h.gen.u32s(c, 0, 3);
            let a = crate::ops::shape::any(&mut h.gen, a, dtype);
            let b = crate::ops::shape::any(&mut h.gen, b, dtype);
            h.check(&Op::WhereCond, &[cond, a, b], Tolerance::EXACT)?;
        }
    }
    Ok(())
}

/// `affine(x, mul, add)` in every float dtype, `add = 0` included.
pub fn affine<B: Backend>(backend: &B) -> Result<(), SuiteError> {
    let mut h = Harness::new(backend, "affine");
    for dtype in FLOATS {
        for (mul, add) in [
            (2.0, 0.0),
            (-0.5, 1.25),
            (1.0, -3.0),
            (0.0, 0.0),
            (0.125, 0.5),
        ] {
            for shape in [&[][..], &[5], &[3, 4]] {
                let x = h.gen.uniform(shape, -2.0, 2.0, dtype);
                let op = Op::Affine { mul, add };
                h.check(&op, &[x], Tolerance::accumulating(dtype))?;
            }
        }
    }
    Ok(())
}
