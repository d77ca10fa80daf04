//! Cursor calls answered locally that are not the agent loop, and the one official answer
//! Keyhaven adjusts (`GetServerConfig`'s transport knob). Account calls are never here.

pub mod model_catalog;
pub mod server_config;
