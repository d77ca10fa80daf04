//! Keyhaven engine: a local AI gateway. See ARCHITECTURE.md for the module map and invariants.

pub mod dialect;
pub mod model;
pub mod pricing;
pub mod store;
