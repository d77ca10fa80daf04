//! The client matrix (issue 13 §4): real clients × the three upstream dialects, with Keyhaven
//! between them and a scripted vendor upstream ([`VendorUpstream`]). The clients are the oracle:
//! every assertion reads what the client itself reports (the SDK's objects and exceptions, the
//! CLI's JSON output and exit status), never Keyhaven's own decoders.
//!
//! Clients (pinned in `tests/clients/` and `tests/codex/`): the Claude Code CLI, the Codex CLI, the
//! Python `openai` (Chat and Responses) and `anthropic` SDKs, the TypeScript `openai` (Chat and
//! Responses) and `@anthropic-ai/sdk`. The SDKs run `tests/clients/drive.py` / `drive.mjs`, which
//! print one JSON object per scenario. Upstreams: a DeepSeek-style Chat reasoner, OpenAI
//! Responses, Anthropic Messages, each enforcing its vendor's rules on replayed reasoning.
//!
//! One engine and one upstream serve every cell; cells run in parallel (`KEYHAVEN_MATRIX_JOBS`,
//! default 4), `KEYHAVEN_MATRIX_FILTER` keeps the cells whose name contains it,
//! `KEYHAVEN_MATRIX_VERBOSE` shows what the upstream saw for passing cells too and
//! `KEYHAVEN_MATRIX_REPORT=FILE` writes the table and the failures to a file. A client that is
//! not installed is skipped with a message, unless `KEYHAVEN_REQUIRE_TOOLS` is set (CI), where it is
//! a failing cell. The test fails naming every failing cell, with the client's own report and what
//! the upstream saw for it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::vendor::{self, Dialect, Scenario, VendorUpstream, WireTap};
use crate::support::{TestEngine, config_text};

const SDK_TIMEOUT: Duration = Duration::from_secs(60);
const CLI_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lang {
    Python,
    Node,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    ClaudeCode,
    Codex,
    /// An SDK driver: language and `SDK` argument (`openai-chat`, `openai-responses`, `anthropic`).
    Sdk(Lang, &'static str),
}

impl Client {
    const ALL: [Client; 8] = [
        Client::ClaudeCode,
        Client::Codex,
        Client::Sdk(Lang::Python, "openai-chat"),
        Client::Sdk(Lang::Python, "openai-responses"),
        Client::Sdk(Lang::Python, "anthropic"),
        Client::Sdk(Lang::Node, "openai-chat"),
        Client::Sdk(Lang::Node, "openai-responses"),
        Client::Sdk(Lang::Node, "anthropic"),
    ];

    fn name(self) -> String {
        match self {
            Client::ClaudeCode => "claude-code".into(),
            Client::Codex => "codex".into(),
            Client::Sdk(Lang::Python, sdk) => format!("py-{sdk}"),
            Client::Sdk(Lang::Node, sdk) => format!("ts-{sdk}"),
        }
    }

    fn scenarios(self) -> &'static [Scenario] {
        match self {
            Client::ClaudeCode | Client::Codex => &Scenario::CLI,
            Client::Sdk(..) => &Scenario::SDK,
        }
    }
}

fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// How to start a client, or why it cannot be.
fn locate(client: Client) -> Result<PathBuf, String> {
    let dir = clients_dir();
    match client {
        Client::ClaudeCode => {
            if let Some(p) = std::env::var_os("KEYHAVEN_CLAUDE_BIN") {
                return Ok(PathBuf::from(p));
            }
            let p = dir.join("node_modules/@anthropic-ai/claude-code/bin/claude.exe");
            p.is_file().then_some(p).ok_or_else(|| {
                "the Claude Code CLI is not installed: run `npm ci --prefix tests/clients` then `node \
                 tests/clients/node_modules/@anthropic-ai/claude-code/install.cjs` (or set KEYHAVEN_CLAUDE_BIN)"
                    .into()
            })
        }
        Client::Codex => crate::codex::find_codex()
            .ok_or_else(|| "the Codex CLI is not installed: run `npm ci --prefix tests/codex`".into()),
        Client::Sdk(Lang::Python, _) => {
            let p = dir.join("venv/bin/python");
            let ok = p.is_file() && dir.join("venv/lib").is_dir();
            ok.then_some(p).ok_or_else(|| {
                "the Python SDKs are not installed: run `python3 -m venv tests/clients/venv && \
                 tests/clients/venv/bin/pip install --require-hashes -r tests/clients/requirements.txt`"
                    .into()
            })
        }
        Client::Sdk(Lang::Node, _) => {
            let ok = dir.join("node_modules/openai/package.json").is_file()
                && dir.join("node_modules/@anthropic-ai/sdk/package.json").is_file();
            ok.then(|| PathBuf::from("node"))
                .ok_or_else(|| "the TypeScript SDKs are not installed: run `npm ci --prefix tests/clients`".into())
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Running a process

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    secs: f32,
}

fn run_process(mut cmd: Command, dir: &Path, timeout: Duration) -> Run {
    let out_file = dir.join("client-stdout.txt");
    let err_file = dir.join("client-stderr.txt");
    let started = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_file).expect("stdout file"))
        .stderr(std::fs::File::create(&err_file).expect("stderr file"))
        .spawn()
        .expect("the client starts");
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the client") {
            break Some(status);
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        code: status.and_then(|s| s.code()),
        stdout: std::fs::read_to_string(&out_file).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err_file).unwrap_or_default(),
        secs: started.elapsed().as_secs_f32(),
    }
}

/// The environment every client gets: PATH only, a throwaway HOME, no proxy for loopback.
fn base_command(program: &Path, home: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .current_dir(home);
    cmd
}

// ---------------------------------------------------------------------------------------------
// One cell

struct Cell {
    client: Client,
    up: Dialect,
    scenario: Scenario,
}

impl Cell {
    fn name(&self) -> String {
        format!("{} → {} : {}", self.client.name(), self.up.name(), self.scenario.name())
    }

    fn run_id(&self) -> String {
        format!("{}-{}-{}", self.client.name(), self.up.name(), self.scenario.name())
    }
}

struct Outcome {
    scenario: Scenario,
    name: String,
    run: String,
    result: Result<(), String>,
    secs: f32,
}

fn run_cell(cell: &Cell, program: &Path, base: &str) -> (Result<(), String>, f32) {
    let home = tempfile::tempdir().expect("client home");
    let run = cell.run_id();
    let (run_out, result) = match cell.client {
        Client::Sdk(lang, sdk) => {
            let script = clients_dir().join(if lang == Lang::Python { "drive.py" } else { "drive.mjs" });
            let mut cmd = base_command(program, home.path());
            cmd.arg(script).args([sdk, cell.scenario.name(), base, cell.up.model(), &run]);
            let out = run_process(cmd, home.path(), SDK_TIMEOUT);
            let result = match serde_json::from_str::<Value>(out.stdout.trim()) {
                Ok(report) => check_sdk(sdk, cell.scenario, &report),
                Err(_) => Err(format!("the driver printed no report (exit {:?})", out.code)),
            };
            (out, result)
        }
        Client::ClaudeCode => {
            let (prompt, secret) = agent_prompt(cell.scenario, &run, home.path());
            let mut cmd = base_command(program, home.path());
            cmd.args(["-p", "--output-format", "json", "--model", cell.up.model()])
                .arg(prompt)
                .env("ANTHROPIC_BASE_URL", base)
                .env("ANTHROPIC_API_KEY", "sk-keyhaven-matrix-client")
                .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
                .env("DISABLE_AUTOUPDATER", "1")
                .env("DISABLE_TELEMETRY", "1")
                .env("CLAUDE_CODE_MAX_RETRIES", "2");
            let out = run_process(cmd, home.path(), CLI_TIMEOUT);
            let result = check_claude(cell.scenario, &out, &secret);
            (out, result)
        }
        Client::Codex => {
            let (prompt, secret) = agent_prompt(cell.scenario, &run, home.path());
            write_codex_config(home.path(), base);
            let last = home.path().join("last-message.txt");
            let mut cmd = base_command(program, home.path());
            cmd.args(["exec", "--skip-git-repo-check", "--ephemeral", "--dangerously-bypass-approvals-and-sandbox"])
                .args(["--json", "--color", "never", "-m", cell.up.model(), "-C"])
                .arg(home.path())
                .arg("-o")
                .arg(&last)
                .arg(prompt)
                .env("CODEX_HOME", home.path())
                .env("KEYHAVEN_CODEX_KEY", "sk-keyhaven-matrix-client")
                .env("RUST_LOG", "warn");
            let out = run_process(cmd, home.path(), CLI_TIMEOUT);
            let last = std::fs::read_to_string(&last).unwrap_or_default();
            let result = check_codex(cell.scenario, &out, last.trim(), &secret);
            (out, result)
        }
    };
    let secs = run_out.secs;
    let result = result.map_err(|e| {
        let code = match run_out.code {
            Some(c) => format!("exit {c}"),
            None => format!("killed after {:.0}s", run_out.secs),
        };
        format!("{e}\n      client {code}; stdout: {}\n      stderr: {}", clip(&run_out.stdout), clip(&run_out.stderr))
    });
    (result, secs)
}

fn clip(s: &str) -> String {
    let s = s.trim();
    let chars: Vec<char> = s.chars().collect();
    if chars.len() > 1500 { format!("{}…", chars[..1500].iter().collect::<String>()) } else { s.to_owned() }
}

/// The CLI prompt: the scenario marker; for the agent turn, a file with a secret in the work dir.
fn agent_prompt(scenario: Scenario, run: &str, home: &Path) -> (String, String) {
    let marker = VendorUpstream::marker(scenario, run);
    if scenario != Scenario::Agent {
        return (format!("{marker} Say hello."), String::new());
    }
    let secret = format!("kh-secret-{}", run.replace(['-', '_'], ""));
    let path = home.join("note.txt");
    std::fs::write(&path, format!("{secret}\n")).expect("write the note");
    let marker = marker.trim_end_matches(']').to_owned() + &format!(" path={}]", path.display());
    (format!("{marker} Read the file {} and tell me what it says.", path.display()), secret)
}

fn write_codex_config(home: &Path, base: &str) {
    crate::codex::write_codex_config(home, base, 2);
}

// ---------------------------------------------------------------------------------------------
// What each client must report

fn text_of(turn: &Value) -> &str {
    turn["text"].as_str().unwrap_or_default()
}

fn want_text(turns: &[Value], i: usize, want: &str) -> Result<(), String> {
    let Some(t) = turns.get(i) else {
        return Err(format!("the client reports {} turn(s), expected turn {} with text {want:?}", turns.len(), i + 1));
    };
    if text_of(t) != want {
        return Err(format!("turn {} text is {:?}, expected {want:?}", i + 1, t["text"]));
    }
    Ok(())
}

fn calls_of(turn: &Value) -> Vec<(String, String, Value)> {
    turn["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["id"].as_str().unwrap_or_default().to_owned(),
                c["name"].as_str().unwrap_or_default().to_owned(),
                c["arguments"].clone(),
            )
        })
        .collect()
}

fn check_sdk(sdk: &str, scenario: Scenario, report: &Value) -> Result<(), String> {
    let turns = report["turns"].as_array().cloned().unwrap_or_default();
    let error = &report["error"];
    let error_text = || format!("{} (status {}): {}", error["type"], error["status"], error["message"]);
    let expects_error = matches!(scenario, Scenario::ErrorMidStream | Scenario::Dropped);
    if !expects_error && !error.is_null() {
        return Err(format!("the client raised {}", error_text()));
    }
    match scenario {
        Scenario::Text => {
            want_text(&turns, 0, vendor::TEXT)?;
            want_text(&turns, 1, vendor::TEXT)
        }
        Scenario::ParallelTools => {
            let calls = turns.first().map(calls_of).unwrap_or_default();
            let got: Vec<(String, Value)> = calls.iter().map(|(_, n, a)| (n.clone(), a.clone())).collect();
            let want =
                vec![("get_weather".to_owned(), vendor::weather_args()), ("get_time".to_owned(), vendor::time_args())];
            if got != want {
                return Err(format!("turn 1 tool calls are {got:?}, expected {want:?}"));
            }
            if calls.iter().any(|(id, _, _)| id.is_empty()) || calls[0].0 == calls[1].0 {
                return Err(format!("tool call ids must be distinct and non-empty: {calls:?}"));
            }
            want_text(&turns, 1, vendor::PARALLEL_DONE)
        }
        Scenario::ToolResult => {
            let calls = turns.first().map(calls_of).unwrap_or_default();
            if calls.len() != 1 || calls[0].1 != "get_weather" || calls[0].2 != json!({"city": "Paris, FR"}) {
                return Err(format!(
                    "turn 1 tool calls are {calls:?}, expected one get_weather {{\"city\": \"Paris, FR\"}}"
                ));
            }
            want_text(&turns, 1, "tool said: 22C and sunny")
        }
        Scenario::Reasoning => {
            let Some(first) = turns.first() else { return Err("the client reports no turn".into()) };
            let r = &first["reasoning"];
            // Chat has no standard reasoning field: a Chat client is only asked to get through the
            // tool turn (the TypeScript SDK's accumulator even keeps only the last fragment of
            // `reasoning_content`). Anthropic and Responses clients must see the upstream's text.
            if sdk != "openai-chat" && r["text"].as_str() != Some(vendor::REASONING) {
                return Err(format!("turn 1 reasoning is {r}, expected the upstream's text {:?}", vendor::REASONING));
            }
            for key in ["signature", "encrypted_content"] {
                if r.get(key).is_some() && r[key].as_str().is_none_or(str::is_empty) {
                    return Err(format!("turn 1 reasoning has no {key}: {r}"));
                }
            }
            if calls_of(first).len() != 1 {
                return Err(format!("turn 1 has tool calls {:?}, expected one", calls_of(first)));
            }
            want_text(&turns, 1, vendor::REASONED)
        }
        Scenario::ReasoningDropped => {
            if turns.first().map(calls_of).unwrap_or_default().len() != 1 {
                return Err(format!("turn 1 has tool calls {:?}, expected one", turns.first().map(calls_of)));
            }
            want_text(&turns, 1, vendor::REASONED)
        }
        Scenario::Image => want_text(&turns, 0, vendor::IMAGE_OK),
        Scenario::ErrorMidStream => {
            if error.is_null() {
                return Err(format!("the client reports success ({turns:?}), expected the upstream's error event"));
            }
            if !error["message"].as_str().unwrap_or_default().contains(vendor::ERROR_MSG) {
                return Err(format!(
                    "the client's error lacks the upstream's message {:?}: {}",
                    vendor::ERROR_MSG,
                    error_text()
                ));
            }
            Ok(())
        }
        Scenario::Dropped => {
            if turns.iter().any(|t| text_of(t).contains(vendor::RETRIED)) {
                return Err(format!(
                    "the client got the answer of a second upstream request after a 2xx head was dropped (a retry \
                     while the provider may be billing): {turns:?}"
                ));
            }
            if error.is_null() {
                return Err(format!(
                    "the client reports success ({turns:?}), expected an error for the dropped stream"
                ));
            }
            Ok(())
        }
        Scenario::RateLimited => want_text(&turns, 0, vendor::AFTER_429),
        Scenario::Agent => Err("not an SDK scenario".into()),
    }
}

fn check_claude(scenario: Scenario, run: &Run, secret: &str) -> Result<(), String> {
    let Ok(report) = serde_json::from_str::<Value>(run.stdout.trim()) else {
        return Err("Claude Code printed no JSON result".into());
    };
    let is_error = report["is_error"] == true || run.code != Some(0);
    let result = report["result"].as_str().unwrap_or_default();
    let want_ok = |want: &str| {
        if is_error {
            Err(format!("Claude Code reports an error: {result:?} (api_error_status {})", report["api_error_status"]))
        } else if result != want {
            Err(format!("Claude Code's result is {result:?}, expected {want:?}"))
        } else {
            Ok(())
        }
    };
    match scenario {
        Scenario::Text => want_ok(vendor::TEXT),
        Scenario::RateLimited => want_ok(vendor::AFTER_429),
        Scenario::Agent => want_ok(&format!("The file says: {secret}")),
        Scenario::ErrorMidStream => {
            if !is_error {
                Err(format!("Claude Code reports success ({result:?}), expected the upstream's error"))
            } else if !(result.contains(vendor::ERROR_MSG) || result.to_lowercase().contains("overloaded")) {
                Err(format!("Claude Code's error does not name the upstream's overload: {result:?}"))
            } else {
                Ok(())
            }
        }
        Scenario::Dropped => {
            // Claude Code retries a broken stream itself; either it reports the error or its retry
            // gets the clean second answer. Text from the dropped attempt must not be mixed in.
            if is_error || result == vendor::RETRIED {
                Ok(())
            } else {
                Err(format!("Claude Code's result is {result:?}: neither an error nor the clean retry"))
            }
        }
        _ => Err("not a CLI scenario".into()),
    }
}

fn check_codex(scenario: Scenario, run: &Run, last: &str, secret: &str) -> Result<(), String> {
    let events: Vec<Value> = run.stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let errors: Vec<String> = events
        .iter()
        .filter(|e| e["type"] == "error" || e["type"] == "turn.failed")
        .map(|e| e["message"].as_str().or_else(|| e["error"]["message"].as_str()).unwrap_or_default().to_owned())
        .collect();
    let failed = run.code != Some(0) || !errors.is_empty();
    let want_ok = |want: &str| {
        if failed {
            Err(format!("Codex reports an error: {errors:?}"))
        } else if last != want {
            Err(format!("Codex's last message is {last:?}, expected {want:?}"))
        } else {
            Ok(())
        }
    };
    match scenario {
        Scenario::Text => want_ok(vendor::TEXT),
        Scenario::RateLimited => want_ok(vendor::AFTER_429),
        Scenario::Agent => {
            want_ok(&format!("The file says: {secret}"))?;
            let ran = events.iter().any(|ev| {
                ev["item"]["type"] == "command_execution"
                    && ev["item"]["aggregated_output"].as_str().is_some_and(|o| o.contains(secret))
            });
            if ran { Ok(()) } else { Err("Codex did not report running the command that reads the file".into()) }
        }
        Scenario::ErrorMidStream => {
            if !failed {
                Err(format!("Codex reports success ({last:?}), expected the upstream's error"))
            } else if !errors.iter().any(|e| {
                // Codex words an overload error code its own way ("Selected model is at capacity").
                let l = e.to_lowercase();
                e.contains(vendor::ERROR_MSG) || l.contains("overload") || l.contains("capacity")
            }) {
                Err(format!(
                    "Codex's errors name neither the upstream's message {:?} nor an overload: {errors:?}",
                    vendor::ERROR_MSG
                ))
            } else {
                Ok(())
            }
        }
        Scenario::Dropped => {
            if failed || last == vendor::RETRIED {
                Ok(())
            } else {
                Err(format!("Codex's last message is {last:?}: neither an error nor the clean retry"))
            }
        }
        _ => Err("not a CLI scenario".into()),
    }
}

// ---------------------------------------------------------------------------------------------
// The matrix

#[expect(clippy::print_stderr, reason = "the matrix table and skipped clients must be visible")]
fn report(lines: &str) {
    eprintln!("{lines}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_matrix() {
    let require = std::env::var_os("KEYHAVEN_REQUIRE_TOOLS").is_some();
    let filter = std::env::var("KEYHAVEN_MATRIX_FILTER").unwrap_or_default();
    let verbose = std::env::var_os("KEYHAVEN_MATRIX_VERBOSE").is_some();
    let jobs: usize = std::env::var("KEYHAVEN_MATRIX_JOBS").ok().and_then(|j| j.parse().ok()).unwrap_or(4).max(1);

    let upstream = VendorUpstream::start().await;
    let dir = tempfile::tempdir().expect("engine dir");
    let engine = TestEngine::start_in(dir, &config_text(&upstream.url(), "")).await;

    let mut missing = Vec::new();
    let mut cells = Vec::new();
    for client in Client::ALL {
        let program = match locate(client) {
            Ok(p) => p,
            Err(why) => {
                missing.push(format!("{}: {why}", client.name()));
                continue;
            }
        };
        for up in Dialect::ALL {
            for &scenario in client.scenarios() {
                let cell = Cell { client, up, scenario };
                if cell.name().contains(&filter) {
                    cells.push((cell, program.clone()));
                }
            }
        }
    }
    if !missing.is_empty() && !require {
        for m in &missing {
            crate::support::skip::skip(&format!("client matrix: {m}"));
        }
    }

    let gate = Arc::new(tokio::sync::Semaphore::new(jobs));
    let tap = WireTap::start(&engine.base).await;
    let base = tap.url();
    let mut tasks = Vec::new();
    for (cell, program) in cells {
        let gate = gate.clone();
        let base = base.clone();
        tasks.push(tokio::task::spawn_blocking(move || {
            let _permit = futures::executor::block_on(gate.acquire_owned()).expect("gate");
            let (result, secs) = run_cell(&cell, &program, &base);
            Outcome { scenario: cell.scenario, name: cell.name(), run: cell.run_id(), result, secs }
        }));
    }
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(t.await.expect("cell runner"));
    }

    let mut table = String::from("client matrix (client → upstream : scenario):\n");
    let mut failures = Vec::new();
    let mut passed = 0;
    for o in &outcomes {
        // A refusal the scenario explains (its 429, the upstream's 5xx) is no finding; any other
        // 4xx/5xx is, even when the client recovered from it.
        let explained = |s: u16| o.scenario.expects_error() && (s == 429 || s >= 500);
        let refused: Vec<String> =
            tap.log(&o.run).into_iter().filter(|(s, _)| *s >= 400 && !explained(*s)).map(|(_, l)| l).collect();
        let o_result = match (&o.result, refused.is_empty()) {
            (Ok(()), false) => Err(format!(
                "the client reports success, but the engine refused a request it then worked around:\n        {}",
                refused.join("\n        ")
            )),
            (r, _) => r.clone(),
        };
        if let Err(e) = &o_result {
            let log = upstream.log(&o.run);
            failures.push(format!("{}\n      {e}\n      upstream saw:\n        {}", o.name, log.join("\n        ")));
        }
        let mark = if o_result.is_ok() { "pass" } else { "FAIL" };
        table += &format!("  {mark}  {:<50} {:>5.1}s\n", o.name, o.secs);
        if verbose && o_result.is_ok() {
            let engine_log: Vec<String> = tap.log(&o.run).into_iter().map(|(_, l)| l).collect();
            table += &format!("        engine answered:\n          {}\n", engine_log.join("\n          "));
            table += &format!("        upstream saw:\n          {}\n", upstream.log(&o.run).join("\n          "));
        }
        if o_result.is_ok() {
            passed += 1;
        }
    }
    if require {
        failures.extend(missing.iter().map(|m| format!("client missing (KEYHAVEN_REQUIRE_TOOLS is set): {m}")));
    }
    let unmarked: Vec<String> = tap.log("(no marker)").into_iter().map(|(_, l)| l).collect();
    if !unmarked.is_empty() {
        table += &format!("requests without a scenario marker (probes):\n  {}\n", unmarked.join("\n  "));
    }
    table += &format!("{passed} of {} cells pass", outcomes.len());
    report(&table);
    if let Ok(path) = std::env::var("KEYHAVEN_MATRIX_REPORT") {
        let text = format!("{table}\n\n{}\n", failures.join("\n\n"));
        std::fs::write(&path, text).expect("write the matrix report");
    }
    engine.stop().await;
    assert!(failures.is_empty(), "{} failing cell(s):\n\n{}", failures.len(), failures.join("\n\n"));
}
