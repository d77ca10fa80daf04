//! keyhaven binary.
fn main() {}
