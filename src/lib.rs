//! Keyhaven engine: a local AI gateway. See ARCHITECTURE.md for the module map and invariants.

pub mod api;
pub mod app;
pub mod clock;
pub mod config;
pub mod control;
pub mod cursor;
pub mod dialect;
pub mod metrics;
pub mod model;
pub mod perms;
pub mod pricing;
pub mod provider;
pub mod proxy;
pub mod run;
pub mod search;
pub mod secrets;
pub mod setup;
pub mod store;
pub mod task;
