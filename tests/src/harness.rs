//! The comparison harness: build the same inputs on the backend and on the reference backend,
//! apply the same [`Op`], read both results back and compare them.

use std::panic::{catch_unwind, AssertUnwindSafe};

use mtp_core::reference::ReferenceBackend;
use mtp_core::{Backend, DType};

use crate::error::SuiteError;
use crate::inputs::{Gen, Input, Layout};
use crate::op::Op;
use crate::tolerance::Tolerance;

/// Host copy of one result array.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its dtype.
    pub dtype: DType,
    /// Its values.
    pub values: OutValues,
}

/// The values of an [`Output`].
#[derive(Debug, Clone, PartialEq)]
pub enum OutValues {
    /// Float values (read with `to_vec_f32`).
    Float(Vec<f32>),
    /// Integer values (`U32` read with `to_vec_u32`, `I32` with `to_vec_f32`, exact for the
    /// magnitudes the suite uses).
    Int(Vec<i64>),
}

impl Output {
    /// Read `x` back from `backend` (a sync point).
    pub fn read<X: Backend>(backend: &X, x: &X::Array) -> Result<Self, X::Error> {
        let dtype = backend.dtype(x);
        let values = match dtype {
            DType::U32 => {
                OutValues::Int(backend.to_vec_u32(x)?.into_iter().map(i64::from).collect())
            }
            DType::I32 => OutValues::Int(
                backend
                    .to_vec_f32(x)?
                    .into_iter()
                    .map(|v| v as i64)
                    .collect(),
            ),
            _ => OutValues::Float(backend.to_vec_f32(x)?),
        };
        Ok(Self {
            shape: backend.shape(x),
            dtype,
            values,
        })
    }

    /// `dtype[shape]`.
    pub fn describe(&self) -> String {
        format!("{}{:?}", self.dtype, self.shape)
    }
}

/// Describe a list of outputs, e.g. `[f32[2, 3], u32[2, 1]]`.
fn describe_all(outputs: &[Output]) -> String {
    let parts: Vec<String> = outputs.iter().map(Output::describe).collect();
    format!("[{}]", parts.join(", "))
}

/// Build `inputs` on `backend` with `layout`, apply `op`, evaluate and read the outputs.
pub fn run<X: Backend>(
    backend: &X,
    op: &Op,
    inputs: &[Input],
    layout: Layout,
) -> Result<Vec<Output>, X::Error> {
    let arrays = inputs
        .iter()
        .map(|i| i.build(backend, layout))
        .collect::<Result<Vec<_>, _>>()?;
    let refs: Vec<&X::Array> = arrays.iter().collect();
    let outputs = op.apply(backend, &refs)?;
    let out_refs: Vec<&X::Array> = outputs.iter().collect();
    backend.eval(&out_refs)?;
    outputs.iter().map(|a| Output::read(backend, a)).collect()
}

/// Compare `got` (the backend's) with `expected` (the reference's): counts, shapes and dtypes
/// equal, integers exact, floats within `tolerance`.
pub fn compare_outputs(
    backend: &str,
    what: &dyn Fn() -> String,
    got: &[Output],
    expected: &[Output],
    tolerance: Tolerance,
) -> Result<(), SuiteError> {
    let layout_ok = got.len() == expected.len()
        && got
            .iter()
            .zip(expected)
            .all(|(g, e)| g.shape == e.shape && g.dtype == e.dtype);
    if !layout_ok {
        return Err(SuiteError::Layout {
            backend: backend.to_string(),
            what: what(),
            got: describe_all(got),
            expected: describe_all(expected),
        });
    }
    for (g, e) in got.iter().zip(expected) {
        match (&g.values, &e.values) {
            (OutValues::Float(gv), OutValues::Float(ev)) if gv.len() == ev.len() => {
                if let Err(worst) = tolerance.compare(gv, ev) {
                    return Err(SuiteError::Values {
                        backend: backend.to_string(),
                        what: what(),
                        worst,
                        tolerance,
                    });
                }
            }
            (OutValues::Int(gv), OutValues::Int(ev)) if gv.len() == ev.len() => {
                if let Some((index, (&g, &e))) =
                    gv.iter().zip(ev).enumerate().find(|(_, (g, e))| g != e)
                {
                    return Err(SuiteError::Integers {
                        backend: backend.to_string(),
                        what: what(),
                        index,
                        got: g,
                        expected: e,
                    });
                }
            }
            _ => {
                return Err(SuiteError::Layout {
                    backend: backend.to_string(),
                    what: what(),
                    got: format!("{} values", describe_all(got)),
                    expected: describe_all(expected),
                })
            }
        }
    }
    Ok(())
}

/// What a check is about: the op and its inputs, e.g. `softmax(axis 1) on [f32[2, 3]] (sliced
/// view)`.
pub fn describe(op: &Op, inputs: &[Input], layout: Layout) -> String {
    let parts: Vec<String> = inputs.iter().map(Input::describe).collect();
    format!("{op} on [{}] ({layout})", parts.join(", "))
}

/// Runs checks of one case: a backend, the reference, and the case's seeded generator.
#[derive(Debug)]
pub struct Harness<'a, B: Backend> {
    backend: &'a B,
    reference: ReferenceBackend,
    /// The case's random inputs.
    pub gen: Gen,
}

impl<'a, B: Backend> Harness<'a, B> {
    /// A harness for the case `name` (which also seeds [`Harness::gen`]).
    pub fn new(backend: &'a B, name: &str) -> Self {
        Self {
            backend,
            reference: ReferenceBackend::new(),
            gen: Gen::new(name),
        }
    }

    /// The backend under test.
    pub fn backend(&self) -> &'a B {
        self.backend
    }

    /// `op` on `inputs` agrees with the reference, with every input contiguous, then every
    /// input a transposed view, then every input a sliced view.
    pub fn check(&self, op: &Op, inputs: &[Input], tolerance: Tolerance) -> Result<(), SuiteError> {
        for layout in Layout::ALL {
            self.check_layout(op, inputs, layout, tolerance)?;
        }
        Ok(())
    }

    /// `op` on `inputs` built with `layout` agrees with the reference.
    pub fn check_layout(
        &self,
        op: &Op,
        inputs: &[Input],
        layout: Layout,
        tolerance: Tolerance,
    ) -> Result<(), SuiteError> {
        let what = || describe(op, inputs, layout);
        let expected =
            run(&self.reference, op, inputs, layout).map_err(|e| SuiteError::Reference {
                what: what(),
                message: e.to_string(),
            })?;
        let got = run(self.backend, op, inputs, layout).map_err(|e| SuiteError::Backend {
            backend: self.backend.name(),
            what: what(),
            message: e.to_string(),
        })?;
        compare_outputs(&self.backend.name(), &what, &got, &expected, tolerance)
    }

    /// `op` on `inputs` (contiguous) is an error on the backend — `Err`, not a panic and not
    /// `Ok` — as it is on the reference.
    pub fn check_err(&self, op: &Op, inputs: &[Input]) -> Result<(), SuiteError> {
        let what = || format!("invalid call {}", describe(op, inputs, Layout::Contiguous));
        if run(&self.reference, op, inputs, Layout::Contiguous).is_ok() {
            return Err(SuiteError::Reference {
                what: what(),
                message: "the reference accepted an input the suite expects to be invalid".into(),
            });
        }
        self.expect_err(&what, || {
            run(self.backend, op, inputs, Layout::Contiguous).map(|_| ())
        })
    }

    /// `call` (made on the backend under test) returns `Err`: not `Ok`, and no panic.
    pub fn expect_err<T>(
        &self,
        what: &dyn Fn() -> String,
        call: impl FnOnce() -> Result<T, B::Error>,
    ) -> Result<(), SuiteError> {
        match catch_unwind(AssertUnwindSafe(call)) {
            Ok(Err(_)) => Ok(()),
            Ok(Ok(_)) => Err(SuiteError::MissingError {
                backend: self.backend.name(),
                what: what(),
            }),
            Err(payload) => {
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a non-text panic payload".into());
                Err(SuiteError::Panicked {
                    backend: self.backend.name(),
                    what: what(),
                    message,
                })
            }
        }
    }
}

/// The float dtypes, f32 first.
pub const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

/// Every dtype.
pub const ALL_DTYPES: [DType; 5] = [DType::F32, DType::F16, DType::BF16, DType::U32, DType::I32];

impl<B: Backend> Harness<'_, B> {
    /// Compare results the case computed itself on both backends (for calls that take no array
    /// inputs, such as `full`).
    pub fn compare_results(
        &self,
        what: &dyn Fn() -> String,
        got: Result<Vec<Output>, B::Error>,
        expected: Result<Vec<Output>, mtp_core::CoreError>,
        tolerance: Tolerance,
    ) -> Result<(), SuiteError> {
        let expected = expected.map_err(|e| SuiteError::Reference {
            what: what(),
            message: e.to_string(),
        })?;
        let got = got.map_err(|e| SuiteError::Backend {
            backend: self.backend.name(),
            what: what(),
            message: e.to_string(),
        })?;
        compare_outputs(&self.backend.name(), what, &got, &expected, tolerance)
    }

    /// The reference backend.
    pub fn reference(&self) -> &ReferenceBackend {
        &self.reference
    }
}
