//! Cursor calls answered locally that are not the agent loop. Account calls are never here.

pub mod model_catalog;
