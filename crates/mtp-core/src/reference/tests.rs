//! Tests of the reference backend.
