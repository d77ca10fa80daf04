//! Unit tests of trust-store handling: golden command lines, parsers, Linux fixture installs.
