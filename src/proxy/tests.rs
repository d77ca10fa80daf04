//! Unit tests of the proxy: allowlist matching, request heads, hop-by-hop headers.
