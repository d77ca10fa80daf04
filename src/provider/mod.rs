//! Upstream providers: the model catalog, the HTTP client (the only module that uses `reqwest`),
//! retries and timeouts, stream normalisation into [`crate::model::StreamEvent`]s, and the call
//! recorder.
//!
//! Invariants: no retry once anything reached the client; every call is recorded before the
//! first upstream byte and finalised on every exit path, through a [`CallSink`] that `app`
//! connects to the store (this module does not name `store`).

pub mod budget;
mod catalog;
pub mod emulation;
mod error;
mod gateway;
mod health;
pub mod lingma;
mod memory;
mod recorder;
mod retry;
pub mod tokens;
mod upstream;

/// How a spent budget's refusal message starts (front ends that show it differently look for it).
pub const BUDGET_MESSAGE_PREFIX: &str = "Keyhaven budget";

pub use budget::Budgets;
pub use catalog::{Catalog, ModelEntry, ProviderEntry, Route, model_id};
pub use error::ProviderError;
pub use gateway::{
    CallContext, CallFailure, CallStream, CountRequest, FimStream, Gateway, GatewayOptions, Timings, TokenCount,
    fim_url, row_dialect,
};
pub use health::ProviderHealth;
pub use memory::ttl_ms as reasoning_ttl_ms;
pub use recorder::{Ack, CallSink, NullSink};
pub use retry::parse_retry_after;
