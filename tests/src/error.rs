//! What a failed conformance case reports.

use crate::tolerance::{Tolerance, Worst};

/// A failed check of the conformance suite. Every variant names the backend and *what* was
/// checked: the op with its parameters and the inputs' dtypes, shapes and layouts.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SuiteError {
    /// The backend returned an error where the reference succeeded.
    #[error("{backend}: {what}: the backend failed: {message}")]
    Backend {
        /// The backend's name.
        backend: String,
        /// What was checked.
        what: String,
        /// The backend's error, as text.
        message: String,
    },
    /// The reference backend failed: a bug in the suite, not in the backend under test.
    #[error("reference: {what}: the reference backend failed (a bug in the suite): {message}")]
    Reference {
        /// What was checked.
        what: String,
        /// The reference's error, as text.
        message: String,
    },
    /// Results differ in count, shape or dtype.
    #[error("{backend}: {what}: got {got}, the reference gives {expected}")]
    Layout {
        /// The backend's name.
        backend: String,
        /// What was checked.
        what: String,
        /// The backend's outputs (dtypes and shapes).
        got: String,
        /// The reference's outputs.
        expected: String,
    },
    /// Float results differ by more than the tolerance.
    #[error(
        "{backend}: {what}: max abs error {:e}, max rel error {:e} (worst at element {}: got {}, \
         expected {}); tolerance {tolerance}",
        worst.max_abs, worst.max_rel, worst.index, worst.got, worst.expected
    )]
    Values {
        /// The backend's name.
        backend: String,
        /// What was checked.
        what: String,
        /// The worst element and the error maxima.
        worst: Worst,
        /// The tolerance that was exceeded.
        tolerance: Tolerance,
    },
    /// Integer results (indices, masks, integer arithmetic) differ.
    #[error("{backend}: {what}: integer results differ at element {index}: got {got}, expected {expected}")]
    Integers {
        /// The backend's name.
        backend: String,
        /// What was checked.
        what: String,
        /// Flat index of the first difference.
        index: usize,
        /// The backend's value.
        got: i64,
        /// The reference value.
        expected: i64,
    },
    /// The backend accepted an invalid input that must be an error.
    #[error("{backend}: {what}: expected an error, the backend returned Ok")]
    MissingError {
        /// The backend's name.
        backend: String,
        /// What was checked.
        what: String,
    },
    /// The backend panicked where it must return `Err`.
    #[error("{backend}: {what}: the backend panicked instead of returning Err: {message}")]
    Panicked {
        /// The backend's name.
        backend: String,
        /// What was checked.
        what: String,
        /// The panic message.
        message: String,
    },
    /// A higher-level property (caches, engine) does not hold.
    #[error("{backend}: {check}: {detail}")]
    Mismatch {
        /// The backend's name.
        backend: String,
        /// Which property.
        check: String,
        /// What differed.
        detail: String,
    },
}

/// Map a backend error into [`SuiteError::Backend`] with the backend's name and `what`.
pub fn backend_err<X: mtp_core::Backend, T>(
    backend: &X,
    what: impl FnOnce() -> String,
    result: Result<T, X::Error>,
) -> Result<T, SuiteError> {
    result.map_err(|e| SuiteError::Backend {
        backend: backend.name(),
        what: what(),
        message: e.to_string(),
    })
}

/// Map a reference-backend error into [`SuiteError::Reference`].
pub fn reference_err<T>(
    what: impl FnOnce() -> String,
    result: Result<T, mtp_core::CoreError>,
) -> Result<T, SuiteError> {
    result.map_err(|e| SuiteError::Reference {
        what: what(),
        message: e.to_string(),
    })
}

/// The text a failed `#[test]` of [`conformance_suite!`](crate::conformance_suite) panics with.
pub fn report(group: &str, case: &str, error: &SuiteError) -> String {
    format!("conformance case {group}::{case} failed\n  {error}")
}
