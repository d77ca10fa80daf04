//! Unit tests of the setup module's document editing, hashing and tokens.
