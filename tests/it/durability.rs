//! kill -9 during concurrent streams: after a restart no finished call is lost and every call
//! left in flight is marked interrupted. Runs the real `keyhaven` binary against a real SQLite file.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use keyhaven::model::CallStatus;
use keyhaven::store::{CallFilter, Store, StoreOptions};

use crate::support::fixtures::{Case, request, upstream_sse};
use crate::support::{Client, MockUpstream, Reply, Up, config_text};

/// Writes the engine's config in `dir` (the upstream at `upstream`, `server_extra` in
/// `[server]`, the key from the environment, the proxy on port 0 so the test never needs or
/// fights over the default port) and returns it with the data folder to use.
fn engine_files(dir: &tempfile::TempDir, upstream: &str, server_extra: &str) -> (PathBuf, PathBuf) {
    let config = dir.path().join("config.toml");
    let text = config_text(upstream, server_extra).replace("keyring:test-key", "env:KH_TEST_KEY")
        + "\n[proxy]\nlisten = \"127.0.0.1:0\"\n";
    std::fs::write(&config, text).expect("config");
    (config, dir.path().join("data"))
}

/// Starts `keyhaven serve` and returns it with the address it printed.
fn spawn_engine(config: &std::path::Path, data: &std::path::Path) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_keyhaven"))
        .args(["--config", &config.display().to_string(), "--data-dir", &data.display().to_string(), "serve"])
        .env("KH_TEST_KEY", "sk-test")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn keyhaven");
    let stdout = child.stdout.take().expect("stdout");
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    reader.read_line(&mut line).expect("read banner");
    // Keep draining stdout so the engine never writes into a closed pipe.
    std::thread::spawn(move || {
        let mut sink = String::new();
        while reader.read_line(&mut sink).is_ok_and(|n| n > 0) {
            sink.clear();
        }
    });
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("unexpected banner: {line}"))
        .to_owned();
    (child, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_loses_no_finished_call() {
    let mock = MockUpstream::start().await;
    // Half the streams finish quickly, half are still streaming when the process dies.
    mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)));
    let dir = tempfile::tempdir().expect("dir");
    let (config, data) = engine_files(&dir, &mock.url(), "");

    let (mut child, addr) = spawn_engine(&config, &data);
    let http = reqwest::Client::new();
    let post = || {
        let http = http.clone();
        let url = format!("http://{addr}/v1/chat/completions");
        let body = request(Client::Openai, "oa-model", true, Case::Text);
        async move {
            let resp = http.post(url).json(&body).send().await.ok()?;
            let id = resp.headers().get("x-request-id")?.to_str().ok()?.to_owned();
            let text = resp.text().await.ok();
            Some((id, text.is_some_and(|t| t.contains("[DONE]"))))
        }
    };
    // 25 complete calls.
    let done: Vec<_> = futures::future::join_all((0..25).map(|_| post())).await.into_iter().flatten().collect();
    assert_eq!(done.len(), 25);
    assert!(done.iter().all(|(_, complete)| *complete));
    // 25 calls that hang mid-stream.
    let partial = upstream_sse(Up::Openai, Case::Text).split_inclusive("\n\n").take(2).collect::<String>();
    mock.push(Reply::sse(&partial).hang());
    let mut hanging = Vec::new();
    for _ in 0..25 {
        let http = http.clone();
        let url = format!("http://{addr}/v1/chat/completions");
        let body = request(Client::Openai, "oa-model", true, Case::Text);
        hanging.push(tokio::spawn(async move {
            let resp = http.post(url).json(&body).send().await.ok()?;
            let id = resp.headers().get("x-request-id").and_then(|v| v.to_str().ok()).map(str::to_owned)?;
            // Keep the response open: these clients are still reading when the engine dies.
            Some((id, resp))
        }));
    }
    let mut started = Vec::new();
    let mut open_responses = Vec::new();
    for h in hanging {
        if let Ok(Some((id, resp))) = h.await {
            started.push(id);
            open_responses.push(resp);
        }
    }
    assert_eq!(started.len(), 25, "all hanging calls got their headers");
    // SIGKILL: no chance to flush anything.
    child.kill().expect("kill -9");
    let _ = child.wait();

    // Restart: the new process marks the old in-flight rows interrupted at startup.
    let (mut child, _addr) = spawn_engine(&config, &data);
    child.kill().expect("kill");
    let _ = child.wait();

    let db = data.join("keyhaven.db");
    let store = Store::open(&db, StoreOptions::default()).expect("reopen");
    let rows = store.recent_calls(CallFilter { limit: 1000, ..Default::default() }).await.expect("rows");
    assert_eq!(rows.len(), 50, "every call that reached the client has a row");
    for (id, _) in &done {
        let row = rows.iter().find(|r| &r.id == id).unwrap_or_else(|| panic!("finished call {id} lost"));
        assert_eq!(row.status, CallStatus::Ok, "{id}");
    }
    for id in &started {
        let row = rows.iter().find(|r| &r.id == id).unwrap_or_else(|| panic!("started call {id} lost"));
        assert_eq!(row.status, CallStatus::Interrupted, "{id}");
        assert!(row.usage_estimated);
    }
    store.close().expect("close");
    drop(open_responses);
    tokio::time::sleep(Duration::from_millis(10)).await;
}

/// kill -9 under sustained load while the checkpointer works: the WAL is capped at 1 MB, so the
/// checkpointer copies and empties it again and again during the load (seen as the `-wal` file
/// shrinking). Every call whose response head reached a client has its row afterwards, finished
/// or interrupted, and the database is intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_while_the_wal_is_checkpointed_loses_no_call_whose_head_was_sent() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    let mock = MockUpstream::start().await;
    mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)));
    let dir = tempfile::tempdir().expect("dir");
    let (config, data) = engine_files(&dir, &mock.url(), "max_wal_mb = 1");
    let (mut child, addr) = spawn_engine(&config, &data);

    // 16 KB of request body per call (captured in the row) so the WAL fills quickly.
    let mut body = request(Client::Openai, "oa-model", false, Case::Text);
    body["messages"][1]["content"] = serde_json::Value::String("Hi ".repeat(5500));
    let heads = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let http = reqwest::Client::new();
    let mut workers = Vec::new();
    for _ in 0..8 {
        let (http, body, heads, stop) = (http.clone(), body.clone(), Arc::clone(&heads), Arc::clone(&stop));
        let url = format!("http://{addr}/v1/chat/completions");
        workers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let Ok(resp) = http.post(&url).json(&body).send().await else { break };
                // The head reached this client: from here on the call must have a row.
                if let Some(id) = resp.headers().get("x-request-id").and_then(|v| v.to_str().ok()) {
                    heads.lock().expect("heads").push(id.to_owned());
                }
                let _ = resp.bytes().await;
            }
        }));
    }
    // Wait until the checkpointer has emptied the WAL a few times under load, then kill.
    let wal = data.join("keyhaven.db-wal");
    let (mut emptied, mut last) = (0, 0);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while emptied < 3 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(2)).await;
        let size = std::fs::metadata(&wal).map_or(0, |m| m.len());
        if size < last {
            emptied += 1;
        }
        last = size;
    }
    assert!(emptied >= 3, "the WAL was emptied {emptied} times under load");
    child.kill().expect("kill -9");
    let _ = child.wait();
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.await;
    }
    let heads = heads.lock().expect("heads").clone();
    assert!(heads.len() >= 50, "only {} calls got their head", heads.len());

    let (mut child, _addr) = spawn_engine(&config, &data);
    child.kill().expect("kill");
    let _ = child.wait();
    let db = data.join("keyhaven.db");
    let conn = rusqlite::Connection::open(&db).expect("open the database");
    let mut status = conn.prepare("SELECT status FROM calls WHERE id = ?1").expect("prepare");
    for id in &heads {
        let s: Option<String> = status.query_row([id], |r| r.get(0)).ok();
        let s = s.unwrap_or_else(|| panic!("call {id} reached its client but has no row"));
        assert!(s == "ok" || s == "interrupted", "{id}: {s}");
    }
    drop(status);
    let in_flight: i64 =
        conn.query_row("SELECT COUNT(*) FROM calls WHERE status = 'in_flight'", [], |r| r.get(0)).expect("count");
    assert_eq!(in_flight, 0, "the restart marks every in-flight row interrupted");
    let check: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).expect("integrity check");
    assert_eq!(check, "ok");
}

/// kill -9 while SQLite cannot commit at all (another connection holds its write lock): answers
/// still go out at once, because a call's start and finish wait for the call journal's append,
/// not for SQLite; and after the restart every call whose answer was sent has its finished row,
/// replayed from the journal (a whole answer is sent after its finish is journaled).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_sqlite_is_locked_loses_no_call_whose_head_was_sent() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)));
    let dir = tempfile::tempdir().expect("dir");
    let (config, data) = engine_files(&dir, &mock.url(), "");
    let (mut child, addr) = spawn_engine(&config, &data);
    let db = data.join("keyhaven.db");

    // Hold SQLite's write lock: the engine's writer cannot commit anything from here on.
    let blocker = rusqlite::Connection::open(&db).expect("open the database");
    blocker.execute_batch("BEGIN IMMEDIATE").expect("take the write lock");
    let http = reqwest::Client::new();
    let url = format!("http://{addr}/v1/chat/completions");
    let body = request(Client::Openai, "oa-model", false, Case::Text);
    let began = std::time::Instant::now();
    let mut heads = Vec::new();
    for _ in 0..20 {
        let resp = http.post(&url).json(&body).send().await.expect("response");
        assert_eq!(resp.status(), 200);
        let id = resp.headers().get("x-request-id").and_then(|v| v.to_str().ok()).expect("x-request-id");
        heads.push(id.to_owned());
        let _ = resp.bytes().await;
    }
    // SQLite's busy timeout is 5 s: a head that waited for a commit would take at least that.
    assert!(began.elapsed() < Duration::from_secs(4), "20 calls took {:?} with SQLite locked", began.elapsed());
    child.kill().expect("kill -9");
    let _ = child.wait();
    blocker.execute_batch("ROLLBACK").expect("release the write lock");
    let in_sqlite: i64 = blocker.query_row("SELECT COUNT(*) FROM calls", [], |r| r.get(0)).expect("count");
    assert_eq!(in_sqlite, 0, "a row was committed while the write lock was held");
    drop(blocker);

    let (mut child, _addr) = spawn_engine(&config, &data);
    child.kill().expect("kill");
    let _ = child.wait();
    let conn = rusqlite::Connection::open(&db).expect("open the database");
    let mut status = conn.prepare("SELECT status FROM calls WHERE id = ?1").expect("prepare");
    for id in &heads {
        let s: Option<String> = status.query_row([id], |r| r.get(0)).ok();
        let s = s.unwrap_or_else(|| panic!("call {id} reached its client but has no row"));
        assert_eq!(s, "ok", "{id}");
    }
    let (calls, input): (i64, i64) = conn
        .query_row("SELECT SUM(calls), SUM(input_tokens) FROM usage_daily", [], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("usage");
    assert_eq!(calls, 20, "the replayed finishes count in the usage rollup");
    assert!(input > 0, "{input}");
}
