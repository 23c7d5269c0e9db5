//! Shared helpers of the cross-backend test suite.
