//! The dependency rules of ARCHITECTURE.md, checked by scanning `src/`. The table below is the
//! one source; ARCHITECTURE.md copies it.

use std::path::{Path, PathBuf};

/// Modules any module may use (except `model` and `dialect`, which are pure).
const LEAVES: &[&str] = &["config", "task", "secrets", "clock", "perms"];
/// Allowed edges between the other top-level modules. `*` = anything.
const ALLOWED: &[(&str, &[&str])] = &[
    ("model", &[]),
    ("dialect", &["model"]),
    ("store", &["model"]),
    ("pricing", &["model"]),
    ("provider", &["model", "dialect", "pricing"]),
    ("control", &["model", "provider", "pricing", "store", "proxy", "setup", "search"]),
    ("cursor", &["model", "provider", "store", "run", "search"]),
    ("search", &[]),
    ("run", &["model", "provider", "store"]),
    ("api", &["model", "dialect", "provider", "control", "cursor", "proxy", "metrics"]),
    ("metrics", &["model", "store"]),
    ("proxy", &[]),
    ("setup", &[]),
    ("config", &[]),
    ("task", &[]),
    ("clock", &[]),
    ("perms", &[]),
    ("secrets", &["config"]),
    ("app", &["*"]),
];
/// Modules that must stay pure: no async runtime, clock, randomness or leaves.
const PURE: &[&str] = &["model", "dialect"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a file belongs to (`src/provider/gateway.rs` → `provider`).
fn module_of(file: &Path) -> String {
    let rel = file.strip_prefix(src()).expect("under src");
    let first = rel.components().next().expect("component").as_os_str().to_string_lossy().into_owned();
    first.trim_end_matches(".rs").to_owned()
}

/// Source lines without comments (good enough: `//` to end of line).
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.split("//").next().unwrap_or("")))
        .filter(|(_, l)| !l.trim().is_empty())
}

fn is_test_file(file: &Path) -> bool {
    file.file_name().is_some_and(|n| n == "tests.rs")
}

#[test]
fn module_dependencies_follow_the_table() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut violations = Vec::new();
    for file in &files {
        let module = module_of(file);
        if matches!(module.as_str(), "lib" | "main") {
            continue;
        }
        let Some((_, allowed)) = ALLOWED.iter().find(|(m, _)| *m == module) else {
            violations.push(format!("{}: module `{module}` is missing from the layering table", file.display()));
            continue;
        };
        let text = std::fs::read_to_string(file).expect("read");
        for (line, code) in code_lines(&text) {
            for (pos, _) in code.match_indices("crate::") {
                let rest = &code[pos + "crate::".len()..];
                let target: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if target.is_empty() || target == module {
                    continue;
                }
                let leaf_ok = LEAVES.contains(&target.as_str()) && !PURE.contains(&module.as_str());
                if allowed.contains(&"*") || allowed.contains(&target.as_str()) || leaf_ok {
                    continue;
                }
                violations.push(format!("{}:{line}: `{module}` must not depend on `{target}`", file.display()));
            }
            if code.contains("super::super") {
                violations.push(format!("{}:{line}: `super::super` hides a dependency; use `crate::`", file.display()));
            }
        }
    }
    assert!(violations.is_empty(), "layering violations:\n{}", violations.join("\n"));
}

#[test]
fn io_crates_stay_in_their_modules() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut violations = Vec::new();
    for file in &files {
        let module = module_of(file);
        let text = std::fs::read_to_string(file).expect("read");
        let rel = file.strip_prefix(src()).expect("rel").display().to_string();
        for (line, code) in code_lines(&text) {
            let mut bad = |what: &str| violations.push(format!("src/{rel}:{line}: {what}"));
            if code.contains("rusqlite") && module != "store" {
                bad("rusqlite outside store");
            }
            if code.contains("reqwest") && !matches!(module.as_str(), "provider" | "search") {
                bad("reqwest outside provider and search");
            }
            if (code.contains("tokio::spawn(") || code.contains("tokio::task::spawn("))
                && rel != "task.rs"
                && !is_test_file(file)
            {
                bad("tasks are spawned only through task::Spawner");
            }
            if code.contains("std::env::") && rel != "main.rs" && !is_test_file(file) {
                bad("the environment is read only in main.rs");
            }
            if PURE.contains(&module.as_str()) && !is_test_file(file) {
                for banned in ["tokio", "SystemTime::now", "Instant::now", "rand::", "std::fs", "std::net"] {
                    if code.contains(banned) {
                        bad(&format!("`{banned}` in a pure module"));
                    }
                }
            }
        }
    }
    assert!(violations.is_empty(), "violations:\n{}", violations.join("\n"));
}

#[test]
fn every_file_has_a_module_doc_and_no_inline_test_module() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    rust_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests"), &mut files);
    let mut violations = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read");
        if !text.trim_start().starts_with("//!") {
            violations.push(format!("{}: missing `//!` module doc", file.display()));
        }
        if file.starts_with(src()) && text.contains(concat!("mod tests", " {")) {
            violations.push(format!("{}: inline `mod tests {{ }}`; put tests in a sibling tests.rs", file.display()));
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

/// The checker itself must catch a violation (a test that cannot fail is a defect).
#[test]
fn the_scanner_sees_crate_paths() {
    let lines: Vec<_> = code_lines("use crate::store::Store; // crate::api\n").collect();
    assert_eq!(lines.len(), 1);
    assert!(lines[0].1.contains("crate::store"));
    assert!(!lines[0].1.contains("crate::api"));
}

/// Where `code` (one test file) reaches for the engine's own dialect codecs or its canonical
/// accumulator: a behaviour test must read what a client received with `support::wire`, written
/// from the vendors' formats, so that a mistake mirrored on both sides cannot pass.
fn engine_codec_uses(code: &str) -> Vec<String> {
    let dialect = concat!("keyhaven", "::", "dialect");
    let flat: String = code_lines(code).map(|(_, l)| l.trim()).collect::<Vec<_>>().join(" ");
    let mut found = Vec::new();
    if flat.contains(dialect) {
        found.push(format!("uses `{dialect}`"));
    }
    if flat.contains(concat!("Accu", "mulator")) {
        found.push("uses the engine's canonical accumulator".to_owned());
    }
    // Grouped imports: `use keyhaven::{dialect::…, …}`.
    for group in flat.split("keyhaven::{").skip(1) {
        let group = group.split('}').next().unwrap_or("");
        if group.split(',').any(|item| item.trim().starts_with("dialect")) {
            found.push("imports `dialect` in a `keyhaven::{…}` group".to_owned());
        }
    }
    found
}

#[test]
fn behaviour_tests_never_decode_with_the_engine_codecs() {
    let mut files = Vec::new();
    rust_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("it"), &mut files);
    assert!(files.len() > 20, "the scan sees the test files: {files:?}");
    let mut violations = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read");
        for v in engine_codec_uses(&text) {
            violations.push(format!("{}: {v}", file.display()));
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

/// The check catches what the harness used to do (it decoded client streams with the engine's
/// decoders and accumulated them with its `Accumulator`), and does not flag the wire reader.
#[test]
fn the_codec_check_catches_the_old_harness() {
    let old = concat!(
        "use keyhaven::",
        "dialect::sse::SseEvent;\n",
        "use keyhaven::",
        "dialect::{anthropic, openai_chat, openai_responses};\n",
        "use keyhaven::model::{",
        "Accu",
        "mulator, Response, StreamEvent};\n",
    );
    assert_eq!(engine_codec_uses(old).len(), 2, "{:?}", engine_codec_uses(old));
    let grouped = concat!("use keyhaven::{config::load_str,\n    ", "dialect::anthropic};\n");
    assert_eq!(engine_codec_uses(grouped).len(), 1);
    let fine = "use crate::support::wire::{self, Answer};\n// never keyhaven::dialect here\nuse keyhaven::model::CallStatus;\n";
    assert!(engine_codec_uses(fine).is_empty());
}
