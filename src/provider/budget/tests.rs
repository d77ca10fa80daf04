//! Unit tests of the budget tracker.
