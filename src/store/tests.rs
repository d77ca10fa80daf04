//! Unit tests of the call store.
