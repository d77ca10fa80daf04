//! Behaviour tests.
