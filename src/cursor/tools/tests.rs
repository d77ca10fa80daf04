//! Unit tests of the Cursor tool catalog, edits and JSON conversion.
