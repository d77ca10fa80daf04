//! OpenAI's real Codex CLI (`codex exec`, pinned in `tests/codex/package.json`) driven end to end
//! through `/v1/responses` against a Chat Completions upstream and an Anthropic upstream: the mock
//! asks Codex to run a shell command, Codex runs it and sends the output back, and the mock's final
//! text must reach Codex's output.
//!
//! The binary comes from `KEYHAVEN_CODEX_BIN`, else from `tests/codex/node_modules` (`npm ci
//! --prefix tests/codex`). When it is missing the test is skipped with a message, unless
//! `KEYHAVEN_REQUIRE_TOOLS` is set. Codex runs with a throwaway `HOME`/`CODEX_HOME` whose config
//! points only at the engine on 127.0.0.1.

use crate::support::skip::skip;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use keyhaven::model::CallStatus;

use crate::support::{MockUpstream, Reply, TestEngine, Up};

const TIMEOUT: Duration = Duration::from_secs(60);
const MARKER: &str = "hello-from-keyhaven";
const FINAL_TEXT: &str = "Codex-through-Keyhaven-done";

/// `vendor/<triple>/bin/codex` inside an installed `@openai/codex-<platform>` package.
fn find_in_node_modules(root: &Path) -> Option<PathBuf> {
    let scope = root.join("node_modules/@openai");
    for pkg in std::fs::read_dir(&scope).ok()?.flatten() {
        let vendor = pkg.path().join("vendor");
        for triple in std::fs::read_dir(&vendor).into_iter().flatten().flatten() {
            let bin = triple.path().join("bin/codex");
            if bin.is_file() {
                return Some(bin);
            }
        }
    }
    None
}

/// The pinned Codex binary: `KEYHAVEN_CODEX_BIN`, else `tests/codex/node_modules` (no skip logic;
/// the client matrix in `clients.rs` uses it too).
pub(crate) fn find_codex() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("KEYHAVEN_CODEX_BIN") {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "KEYHAVEN_CODEX_BIN={} is not a file", p.display());
        return Some(p);
    }
    find_in_node_modules(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/codex"))
}

fn codex_bin() -> Option<PathBuf> {
    if let Some(p) = find_codex() {
        return Some(p);
    }
    assert!(
        std::env::var_os("KEYHAVEN_REQUIRE_TOOLS").is_none(),
        "the Codex CLI is required (KEYHAVEN_REQUIRE_TOOLS is set): run `npm ci --prefix tests/codex` or set \
         KEYHAVEN_CODEX_BIN"
    );
    skip(
        "Codex CLI not found: run `npm ci --prefix tests/codex` or set KEYHAVEN_CODEX_BIN; set KEYHAVEN_REQUIRE_TOOLS \
         to make this fatal",
    );
    None
}

// ---------------------------------------------------------------------------------------------
// Upstream streams

fn oa(delta: Value, finish: Option<&str>) -> String {
    let chunk = json!({
        "id": "chatcmpl-cx", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": "gpt-4o-mini",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
    });
    format!("data: {chunk}\n\n")
}

fn oa_usage(prompt: u64, completion: u64) -> String {
    let chunk = json!({
        "id": "chatcmpl-cx", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": "gpt-4o-mini",
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    });
    format!("data: {chunk}\n\n")
}

fn an(event: &str, data: Value) -> String {
    format!("event: {event}\ndata: {data}\n\n")
}

fn an_start(input: u64) -> String {
    an(
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_cx", "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-5", "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": input, "output_tokens": 1}}}),
    )
}

fn an_end(reason: &str, output: u64) -> String {
    an(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": null}, "usage": {"output_tokens": output}}),
    ) + &an("message_stop", json!({"type": "message_stop"}))
}

/// The upstream's first answer: one call of `tool` with `args` (a JSON object as text).
fn tool_call_sse(up: Up, tool: &str, args: &str) -> String {
    let (head, tail) = args.split_at(args.len() / 2);
    match up {
        Up::Openai => [
            oa(json!({"role": "assistant", "content": null}), None),
            oa(
                json!({"tool_calls": [{"index": 0, "id": "call_cx1", "type": "function", "function": {"name": tool, "arguments": ""}}]}),
                None,
            ),
            oa(json!({"tool_calls": [{"index": 0, "function": {"arguments": head}}]}), None),
            oa(json!({"tool_calls": [{"index": 0, "function": {"arguments": tail}}]}), None),
            oa(json!({}), Some("tool_calls")),
            oa_usage(900, 20),
            "data: [DONE]\n\n".into(),
        ]
        .concat(),
        _ => [
            an_start(900),
            an(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_cx1", "name": tool, "input": {}}}),
            ),
            an(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": head}}),
            ),
            an(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": tail}}),
            ),
            an("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
            an_end("tool_use", 20),
        ]
        .concat(),
    }
}

/// The upstream's final answer: plain text.
fn text_sse(up: Up, text: &str) -> String {
    let (head, tail) = text.split_at(text.len() / 2);
    match up {
        Up::Openai => [
            oa(json!({"role": "assistant", "content": ""}), None),
            oa(json!({"content": head}), None),
            oa(json!({"content": tail}), None),
            oa(json!({}), Some("stop")),
            oa_usage(950, 8),
            "data: [DONE]\n\n".into(),
        ]
        .concat(),
        _ => [
            an_start(950),
            an(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ),
            an(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": head}}),
            ),
            an(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": tail}}),
            ),
            an("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
            an_end("end_turn", 8),
        ]
        .concat(),
    }
}

/// The tool names a request offers, whatever its dialect.
fn tool_names(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().or_else(|| t["name"].as_str()))
        .map(str::to_owned)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Running Codex

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    last_message: String,
}

/// A throwaway `CODEX_HOME` whose only provider is the engine.
fn codex_home(engine: &TestEngine) -> tempfile::TempDir {
    let home = tempfile::tempdir().expect("codex home");
    write_codex_config(home.path(), &engine.base, 0);
    home
}

/// Codex's `config.toml` in `home`: the engine at `base` as the only provider, `retries` request
/// and stream retries, nothing else that talks to the network.
pub(crate) fn write_codex_config(home: &Path, base: &str, retries: u32) {
    let config = format!(
        r#"model_provider = "keyhaven"
check_for_update_on_startup = false

[model_providers.keyhaven]
name = "Keyhaven"
base_url = "{base}/v1"
wire_api = "responses"
env_key = "KEYHAVEN_CODEX_KEY"
request_max_retries = {retries}
stream_max_retries = {retries}

[analytics]
enabled = false

[feedback]
enabled = false

[features]
plugins = false
remote_plugin = false
plugin_sharing = false
apps = false
in_app_updates = false
"#
    );
    std::fs::write(home.join("config.toml"), config).expect("write codex config");
}

fn run_codex(bin: &Path, home: &Path, work: &Path, model: &str) -> Run {
    let out_file = home.join("stdout.txt");
    let err_file = home.join("stderr.txt");
    let last_file = home.join("last-message.txt");
    let mut child = Command::new(bin)
        .args(["exec", "--skip-git-repo-check", "--ephemeral", "--dangerously-bypass-approvals-and-sandbox", "--json"])
        .args(["--color", "never", "-m", model, "-C"])
        .arg(work)
        .arg("-o")
        .arg(&last_file)
        .arg(format!("Run `echo {MARKER}` in the shell, then tell me you are done."))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("CODEX_HOME", home)
        .env("KEYHAVEN_CODEX_KEY", "sk-keyhaven-codex-test")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_file).expect("stdout file"))
        .stderr(std::fs::File::create(&err_file).expect("stderr file"))
        .spawn()
        .expect("codex starts");
    let deadline = Instant::now() + TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for codex") {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Run {
        code: status.and_then(|s| s.code()),
        stdout: std::fs::read_to_string(&out_file).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err_file).unwrap_or_default(),
        last_message: std::fs::read_to_string(&last_file).unwrap_or_default(),
    }
}

// ---------------------------------------------------------------------------------------------
// The check

/// Where the command's output sits in the upstream's second request: a `tool` message (Chat) or
/// a `tool_result` block (Anthropic), answering the call the first reply made.
fn tool_result_text(up: Up, body: &Value) -> Option<String> {
    let messages = body["messages"].as_array()?;
    match up {
        Up::Openai => messages
            .iter()
            .find(|m| m["role"] == "tool" && m["tool_call_id"] == "call_cx1")
            .map(|m| m["content"].to_string()),
        _ => messages
            .iter()
            .flat_map(|m| m["content"].as_array().into_iter().flatten())
            .find(|b| b["type"] == "tool_result" && b["tool_use_id"] == "toolu_cx1")
            .map(|b| b["content"].to_string()),
    }
}

async fn codex_runs_a_shell_command(up: Up) {
    let Some(bin) = codex_bin() else { return };
    let mock = MockUpstream::start().await;
    let args = json!({"cmd": format!("echo {MARKER}")}).to_string();
    mock.push(Reply::sse(&tool_call_sse(up, "exec_command", &args)));
    mock.push(Reply::sse(&text_sse(up, FINAL_TEXT)));
    let engine = TestEngine::start(&mock).await;
    let home = codex_home(&engine);
    let work = tempfile::tempdir().expect("codex work dir");

    let (home_path, work_path) = (home.path().to_owned(), work.path().to_owned());
    let run = tokio::task::spawn_blocking(move || run_codex(&bin, &home_path, &work_path, up.model()))
        .await
        .expect("codex runner");

    let seen = mock.seen();
    let transcript = format!(
        "codex exit: {:?}\n--- stdout\n{}\n--- stderr\n{}\n--- upstream requests: {}\n{}",
        run.code,
        run.stdout,
        run.stderr,
        seen.len(),
        seen.iter().map(|s| format!("{} tools={:?}", s.path, tool_names(&s.body))).collect::<Vec<_>>().join("\n")
    );
    assert_eq!(run.code, Some(0), "Codex must exit 0\n{transcript}");
    assert!(run.stdout.contains(FINAL_TEXT), "Codex's output lacks the final text\n{transcript}");
    assert!(run.last_message.contains(FINAL_TEXT), "Codex's last message is {:?}\n{transcript}", run.last_message);
    let ran = run.stdout.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).any(|ev| {
        ev["item"]["type"] == "command_execution"
            && ev["item"]["exit_code"] == 0
            && ev["item"]["aggregated_output"].as_str().is_some_and(|o| o.contains(MARKER))
    });
    assert!(ran, "Codex did not run the command the upstream asked for\n{transcript}");

    assert!(seen.len() >= 2, "the upstream must see the tool turn and the follow-up\n{transcript}");
    assert!(seen.iter().all(|s| s.path == up.path()), "every upstream call goes to {}\n{transcript}", up.path());
    assert!(
        tool_names(&seen[0].body).iter().any(|n| n == "exec_command"),
        "Codex's tools reach the upstream\n{transcript}"
    );
    let result = tool_result_text(up, &seen[1].body)
        .unwrap_or_else(|| panic!("no tool result in the second upstream request: {}\n{transcript}", seen[1].body));
    assert!(result.contains(MARKER), "the tool result lacks the command output: {result}\n{transcript}");
    for s in &seen {
        assert!(!s.body.to_string().contains("sk-keyhaven-codex-test"), "the client's key must not reach the upstream");
    }

    let calls = engine.wait_calls(seen.len()).await;
    assert_eq!(calls.len(), seen.len(), "one call row per upstream request\n{transcript}");
    for c in &calls {
        assert_eq!(c.summary.status, CallStatus::Ok, "call row {c:?}");
        assert_eq!(c.summary.dialect, "openai_responses", "call row {c:?}");
        assert_eq!(c.summary.model, up.model(), "call row {c:?}");
    }
    drop((home, work));
    engine.stop().await;
}

#[tokio::test]
async fn codex_exec_through_responses_to_a_chat_upstream() {
    codex_runs_a_shell_command(Up::Openai).await;
}

#[tokio::test]
async fn codex_exec_through_responses_to_an_anthropic_upstream() {
    codex_runs_a_shell_command(Up::Anthropic).await;
}
