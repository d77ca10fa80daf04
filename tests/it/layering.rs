//! layering
