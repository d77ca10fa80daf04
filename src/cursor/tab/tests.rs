//! Prompt windows, modes and the completion → line replacement mapping.

use crate::config::CursorTabConfig;
use crate::cursor::protocol::aiserver;
use crate::cursor::tab::prompt::{self, PromptError, Suggestion};

fn request(path: &str, contents: &str, line: i32, column: i32, intent: &str) -> aiserver::StreamCppRequest {
    aiserver::StreamCppRequest {
        current_file: Some(aiserver::CurrentFileInfo {
            relative_workspace_path: path.into(),
            contents: contents.into(),
            cursor_position: Some(aiserver::CursorPosition { line, column }),
            ..Default::default()
        }),
        cpp_intent_info: Some(aiserver::CppIntentInfo { source: intent.into() }),
        ..Default::default()
    }
}

#[test]
fn typing_mid_line_is_single_line_with_path_header() {
    let req = request("src/lib.rs", "fn add(a: i32, b: i32) -> i32 {\n    a +\n}\n", 1, 7, "typing");
    let p = prompt::build(&req, &CursorTabConfig::default(), "m").expect("prompt");
    assert_eq!(p.request.prompt, "// Path: src/lib.rs\nfn add(a: i32, b: i32) -> i32 {\n    a +");
    assert_eq!(p.request.suffix, "\n}\n");
    assert_eq!(p.request.stop, vec!["\n".to_owned()]);
    assert_eq!(p.request.max_tokens, 64);
    assert!(!p.multi_line);
    assert_eq!(
        prompt::suggestion(&p, " b\n}"),
        Some(Suggestion { line: 2, text: "    a + b".into() }),
        "cut at the first line break"
    );
}

#[test]
fn empty_line_is_multi_line_and_drops_repeated_following_lines() {
    let req = request("a.py", "def f(x):\n    \nprint(f(1))", 1, 4, "line_change");
    let p = prompt::build(&req, &CursorTabConfig::default(), "m").expect("prompt");
    assert!(p.multi_line);
    assert_eq!(p.request.stop, vec!["\n\n".to_owned()]);
    assert_eq!(p.request.prompt, "# Path: a.py\ndef f(x):\n    ");
    assert_eq!(p.request.suffix, "\nprint(f(1))");
    assert_eq!(
        prompt::suggestion(&p, "y = x * 2\n    return y\nprint(f(1))\n"),
        Some(Suggestion { line: 2, text: "    y = x * 2\n    return y".into() })
    );
}

#[test]
fn overlap_with_the_line_suffix_is_removed_and_utf16_columns_count() {
    // "é" is one UTF-16 unit, "😀" two: column 17 is after the space.
    let req = request("x.js", "let s = f(\"é😀\", );", 0, 17, "typing");
    let p = prompt::build(&req, &CursorTabConfig::default(), "m").expect("prompt");
    assert_eq!(p.line_prefix, "let s = f(\"é😀\", ");
    assert_eq!(p.line_suffix, ");");
    assert_eq!(prompt::suggestion(&p, "2);"), Some(Suggestion { line: 1, text: "let s = f(\"é😀\", 2);".into() }));
    assert_eq!(prompt::suggestion(&p, ");"), None, "only a repetition: nothing to show");
}

#[test]
fn windows_are_bounded_by_tokens_and_cut_at_lines() {
    let contents: String = (0..100).map(|i| format!("line {i:03}\n")).collect();
    let settings = CursorTabConfig { prefix_tokens: 10, suffix_tokens: 5, ..CursorTabConfig::default() };
    // 40 bytes of prefix budget: the cursor line part (4 bytes) and four 8-byte lines with their
    // newlines (36); 20 of suffix: the rest of the line (4) and one line (9), the next would not fit.
    let req = request("notes.txt", &contents, 50, 4, "typing");
    let p = prompt::build(&req, &settings, "m").expect("prompt");
    assert_eq!(p.request.prompt, "line 046\nline 047\nline 048\nline 049\nline");
    assert_eq!(p.request.suffix, " 050\nline 051\n");
}

#[test]
fn offset_contents_file_sync_and_cursor_outside() {
    let mut req = request("a.go", "x := 1\ny := ", 41, 5, "typing");
    if let Some(f) = req.current_file.as_mut() {
        f.contents_start_at_line = 40;
    }
    let p = prompt::build(&req, &CursorTabConfig::default(), "m").expect("prompt");
    assert_eq!(p.line, 41);
    assert_eq!(prompt::suggestion(&p, "2").map(|s| s.line), Some(42));
    let mut sync = req.clone();
    if let Some(f) = sync.current_file.as_mut() {
        f.rely_on_filesync = true;
        f.contents.clear();
    }
    assert_eq!(prompt::build(&sync, &CursorTabConfig::default(), "m"), Err(PromptError::FileSync));
    let outside = request("a.go", "x", 7, 0, "typing");
    assert_eq!(prompt::build(&outside, &CursorTabConfig::default(), "m"), Err(PromptError::CursorOutside));
}

#[test]
fn recent_edits_of_the_file_precede_the_window_newest_kept() {
    let mut req = request("src/lib.rs", "fn a() {}\nfn b() {\n    \n}\n", 2, 4, "line_change");
    req.file_diff_histories = vec![
        aiserver::CppFileDiffHistory {
            file_name: "other.rs".into(),
            diff_history: vec!["1+|secret_elsewhere()\n".into()],
            ..Default::default()
        },
        aiserver::CppFileDiffHistory {
            file_name: "src/lib.rs".into(),
            diff_history: vec![
                "9-|old_one()\n".into(),
                "1-|fn a() { }\n1+|fn a() {}\n".into(),
                "2+|fn b() {\n3+|}\n".into(),
                format!("3+|    {}é\n", "x".repeat(160)),
            ],
            ..Default::default()
        },
    ];
    let p = prompt::build(&req, &CursorTabConfig::default(), "m").expect("prompt");
    // The last three entries, oldest first; the 169-byte line cut at 160 bytes (before the "é").
    let long = format!("// 3+|    {}", "x".repeat(153));
    assert_eq!(
        p.request.prompt,
        format!(
            "// Path: src/lib.rs\n// Recent edits (oldest first):\n// 1-|fn a() {{ }}\n// 1+|fn a() {{}}\n\
             // 2+|fn b() {{\n// 3+|}}\n{long}\nfn a() {{}}\nfn b() {{\n    "
        )
    );

    // A small budget keeps only the newest lines that fit in a quarter of it.
    let small = CursorTabConfig { prefix_tokens: 40, ..CursorTabConfig::default() };
    req.file_diff_histories[1].diff_history = vec!["1-|aaaaaaaa\n1+|bbbbbbbb\n".into()];
    let p = prompt::build(&req, &small, "m").expect("prompt");
    // 160 bytes / 4 = 40: the title (32) and one 15-byte line would be 47; nothing fits.
    assert_eq!(p.request.prompt, "// Path: src/lib.rs\nfn a() {}\nfn b() {\n    ");
    let roomy = CursorTabConfig { prefix_tokens: 60, ..CursorTabConfig::default() };
    let p = prompt::build(&req, &roomy, "m").expect("prompt");
    // 240 / 4 = 60: the title and the newest line (47) fit, with the older one (62) they do not.
    assert_eq!(
        p.request.prompt,
        "// Path: src/lib.rs\n// Recent edits (oldest first):\n// 1+|bbbbbbbb\nfn a() {}\nfn b() {\n    "
    );
}
