//! Unit tests of the local CA: parameters, custody, leaves, cache.
