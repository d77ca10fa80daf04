//! Unit tests of the run engine.
