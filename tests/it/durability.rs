//! durability
