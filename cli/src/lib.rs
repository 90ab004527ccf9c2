//! The self-test's signers as a library: the `selftest` binary signs with
//! them, and so do the worker's property tests — signing code that shares
//! nothing with the verifiers it checks.

pub mod fixtures;
pub mod signers;
