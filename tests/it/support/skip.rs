//! The one way a behaviour test skips an external check: a `SKIPPED:` line on stderr (which cargo
//! hides) and a line appended to the file named by `KEYHAVEN_SKIP_LOG`, which `scripts/test`
//! prints at the end and CI (`KEYHAVEN_REQUIRE_TOOLS=1`) fails on.

use std::io::Write;

#[expect(clippy::print_stderr, reason = "a skipped external check must say so")]
pub fn skip(what: &str) {
    eprintln!("SKIPPED: {what}");
    if let Some(path) = std::env::var_os("KEYHAVEN_SKIP_LOG")
        && let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path)
    {
        let _ = writeln!(f, "{what}");
    }
}
