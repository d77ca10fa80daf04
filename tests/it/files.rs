//! Files and retention (issue 14 §4): what Keyhaven writes to disk is the user's only, old agent
//! transcripts go with `retention_days`, and `record_calls = false` keeps no transcript.
//!
//! The modes are checked on Unix; Windows keeps the profile's ACL (README).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use serde_json::json;

use keyhaven::app::EngineExtras;
use keyhaven::control::logs::LogRing;
use keyhaven::model::{Entry, Message, Role, RunFinish, RunStart, RunStatus, Usage};
use keyhaven::proxy::allowlist::InterceptList;
use keyhaven::proxy::ca::{CaPaths, LocalCa};
use keyhaven::secrets::{Keyring, MemoryKeyring, SecretError};
use keyhaven::store::{CheckpointRecord, ConversationOp, Store};
use secrecy::SecretString;
use tracing_subscriber::layer::SubscriberExt;

use crate::support::cursor_client::{self, Turn, oa_text};
use crate::support::{Client, MockUpstream, Reply, TestEngine, config_text};

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o7777
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// A keyring that is not there (a headless server): the CA key goes to its 0600 file.
struct NoKeyring;

impl Keyring for NoKeyring {
    fn get(&self, _: &str) -> Result<Option<SecretString>, SecretError> {
        Err(SecretError::Unavailable("no keyring in this test".into()))
    }
    fn set(&self, _: &str, _: &SecretString) -> Result<(), SecretError> {
        Err(SecretError::Unavailable("no keyring in this test".into()))
    }
    fn delete(&self, _: &str) -> Result<bool, SecretError> {
        Err(SecretError::Unavailable("no keyring in this test".into()))
    }
}

fn companion(db: &Path, suffix: &str) -> std::path::PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(suffix);
    name.into()
}

async fn one_call(te: &TestEngine) {
    let resp =
        te.post(Client::Openai, &json!({"model": "oa-model", "messages": [{"role": "user", "content": "hi"}]})).await;
    assert_eq!(resp.status(), 200);
    te.only_call().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_engine_writes_owner_only_files() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::sse(&oa_text("hello")));
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let config = config_text(&mock.url(), "");
    // A data dir as a umask of 022 leaves it; the engine makes it the owner's.
    let engine_dir = tempfile::tempdir_in(tmp.path()).expect("dir");
    chmod(engine_dir.path(), 0o755);
    let te =
        TestEngine::start_full(engine_dir, &config, Arc::new(MemoryKeyring::default()), true, EngineExtras::default())
            .await;
    one_call(&te).await;
    let dir = te.dir.path().to_path_buf();
    let db = dir.join("keyhaven.db");
    // While the engine runs, SQLite's companions exist and carry the database's mode.
    assert_eq!(mode(&dir), 0o700, "data dir");
    assert_eq!(mode(&db), 0o600, "database");
    assert_eq!(mode(&companion(&db, "-wal")), 0o600, "WAL");
    assert_eq!(mode(&companion(&db, "-shm")), 0o600, "SHM");
    assert_eq!(mode(&dir.join("control-token")), 0o600, "control token");
    assert_eq!(mode(&dir.join("config.toml")), 0o600, "config file");
    te.stop().await;
    // A data dir that does not exist yet is created 0700 (Store::open on its own too).
    let store = Store::open(&data.join("keyhaven.db"), Default::default()).expect("store");
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&data.join("keyhaven.db")), 0o600);
    drop(store);
}

#[tokio::test(flavor = "current_thread")]
async fn loosened_modes_are_restricted_at_start_and_logged() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::sse(&oa_text("hello")));
    let config = config_text(&mock.url(), "");
    let dir = tempfile::tempdir().expect("tempdir");
    // The CA key in its fallback file (no keyring when it was made).
    let ca = CaPaths::new(dir.path().join("ca"));
    LocalCa::create(&ca, &NoKeyring, &InterceptList::new(["cursor.sh", "cursor.com"]), time::OffsetDateTime::now_utc())
        .expect("ca in a file");
    let te =
        TestEngine::start_full(dir, &config, Arc::new(MemoryKeyring::default()), true, EngineExtras::default()).await;
    one_call(&te).await;
    let dir = te.stop().await;
    let path = dir.path().to_path_buf();
    let db = path.join("keyhaven.db");
    for suffix in ["-wal", "-shm"] {
        if !companion(&db, suffix).exists() {
            std::fs::write(companion(&db, suffix), b"").expect("companion");
        }
    }
    let loosened = [
        (path.clone(), 0o755, 0o700),
        (db.clone(), 0o644, 0o600),
        (companion(&db, "-wal"), 0o644, 0o600),
        (companion(&db, "-shm"), 0o666, 0o600),
        (path.join("control-token"), 0o644, 0o600),
        (path.join("config.toml"), 0o664, 0o600),
        (ca.key_dir(), 0o755, 0o700),
        (ca.key_file(), 0o644, 0o600),
    ];
    for (p, loose, _) in &loosened {
        chmod(p, *loose);
    }
    // The engine's own start, with a log layer on this thread (current-thread runtime).
    let ring = LogRing::new(500);
    let _log = tracing::subscriber::set_default(tracing_subscriber::registry().with(ring.layer()));
    tracing::callsite::rebuild_interest_cache();
    let te =
        TestEngine::start_full(dir, &config, Arc::new(MemoryKeyring::default()), true, EngineExtras::default()).await;
    let lines = ring.tail(500);
    for (p, loose, strict) in &loosened {
        assert_eq!(mode(p), *strict, "{} restricted", p.display());
        let shown = p.display().to_string();
        let old = format!("{loose:04o}");
        assert!(
            lines.iter().any(|l| l.level == "WARN" && l.message.contains(&shown) && l.message.contains(&old)),
            "a warning names {shown} and its old mode {old}: {lines:#?}"
        );
    }
    // Stricter modes are left as they are, and an unchanged start logs nothing about modes.
    let dir = te.stop().await;
    chmod(&dir.path().join("control-token"), 0o400);
    let ring = LogRing::new(500);
    let _log = tracing::subscriber::set_default(tracing_subscriber::registry().with(ring.layer()));
    tracing::callsite::rebuild_interest_cache();
    let te =
        TestEngine::start_full(dir, &config, Arc::new(MemoryKeyring::default()), true, EngineExtras::default()).await;
    assert_eq!(mode(&te.dir.path().join("control-token")), 0o400);
    assert!(!ring.tail(500).iter().any(|l| l.message.contains("readable by other users")), "{:#?}", ring.tail(500));
    te.stop().await;
}

const DAY_MS: i64 = 86_400_000;

fn text(role: Role, t: &str) -> Message {
    Message::text(role, t)
}

/// A conversation with everything a transcript has, all written at `at_ms`.
async fn conversation(store: &Store, id: &str, at_ms: i64) {
    let run = format!("{id}-run");
    let ops = vec![
        ConversationOp::StartRun(RunStart {
            id: run.clone(),
            conversation_id: id.into(),
            client: "cursor".into(),
            model: "oa-model".into(),
            started_ms: at_ms,
        }),
        ConversationOp::Append {
            conversation_id: id.into(),
            seq: 0,
            run_id: Some(run.clone()),
            entry: Entry::new("user:1", text(Role::User, "read ~/.ssh/config for me")),
            created_ms: at_ms,
        },
        ConversationOp::Append {
            conversation_id: id.into(),
            seq: 1,
            run_id: Some(run.clone()),
            entry: Entry::new("a:1", text(Role::Assistant, "Host secret-box ...")),
            created_ms: at_ms,
        },
        ConversationOp::FinishRun(RunFinish {
            id: run.clone(),
            finished_ms: at_ms,
            status: RunStatus::Completed,
            error: None,
            steps: 1,
            usage: Usage::default(),
        }),
        ConversationOp::Checkpoint {
            record: CheckpointRecord {
                conversation_id: id.into(),
                seq: 2,
                run_id: Some(run),
                version: 1,
                created_ms: at_ms,
                state: b"state".to_vec(),
            },
            last_message_id: Some("a:1".into()),
        },
        ConversationOp::AddPending {
            conversation_id: id.into(),
            entries: vec![Entry::new("user:2", text(Role::User, "and the keys"))],
            created_ms: at_ms,
        },
        ConversationOp::AckedBlobs {
            conversation_id: id.into(),
            added: vec![vec![7; 32]],
            removed: Vec::new(),
            acked_ms: at_ms,
        },
    ];
    for op in ops {
        store.conversation(op).await.expect("transcript write");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_old_transcripts_with_their_checkpoints_pending_messages_and_blobs() {
    let mock = MockUpstream::start().await;
    let te = TestEngine::start(&mock).await;
    let store = te.handle.store.clone();
    let now = keyhaven::clock::now_ms();
    conversation(&store, "old", now - 40 * DAY_MS).await;
    conversation(&store, "recent", now - DAY_MS).await;
    // Old, but its conversation is still in use: a message from today keeps it.
    conversation(&store, "revived", now - 40 * DAY_MS).await;
    store
        .conversation(ConversationOp::Append {
            conversation_id: "revived".into(),
            seq: 2,
            run_id: None,
            entry: Entry::new("user:3", text(Role::User, "still here")),
            created_ms: now,
        })
        .await
        .expect("append");
    let (status, body) = te.control(reqwest::Method::PUT, "/api/retention", Some(json!({"days": 30}))).await;
    assert_eq!(status, 200, "{body}");
    assert!(store.conversation_messages("old").await.expect("read").is_empty(), "old messages deleted");
    assert!(store.conversation_runs("old").await.expect("read").is_empty(), "old runs deleted");
    assert_eq!(store.latest_checkpoint("old").await.expect("read"), None, "old checkpoints deleted");
    assert!(store.pending_messages("old").await.expect("read").is_empty(), "old pending messages deleted");
    assert!(store.acked_blobs("old").await.expect("read").is_empty(), "old acked blobs deleted");
    for kept in ["recent", "revived"] {
        assert!(!store.conversation_messages(kept).await.expect("read").is_empty(), "{kept} kept");
        assert_eq!(store.conversation_runs(kept).await.expect("read").len(), 1, "{kept} kept");
        assert!(store.latest_checkpoint(kept).await.expect("read").is_some(), "{kept} kept");
        assert_eq!(store.pending_messages(kept).await.expect("read").len(), 1, "{kept} kept");
        assert_eq!(store.acked_blobs(kept).await.expect("read").len(), 1, "{kept} kept");
    }
    // 0 keeps everything.
    let (status, body) = te.control(reqwest::Method::PUT, "/api/retention", Some(json!({"days": 0}))).await;
    assert_eq!(status, 200, "{body}");
    assert!(!store.conversation_messages("recent").await.expect("read").is_empty());
    te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_record_calls_a_cursor_conversation_lives_in_memory_only() {
    let s = cursor_client::start_server("record_calls = false", "", "").await;
    s.mock.push(Reply::sse(&oa_text("first answer")));
    s.mock.push(Reply::sse(&oa_text("second answer")));
    let first = s.turn(&Turn::new("req-p1", "conv-private", "my secret plan")).await;
    assert_eq!(first.end, Some(Default::default()));
    let second = s.turn(&Turn::new("req-p2", "conv-private", "go on")).await;
    assert_eq!(second.end, Some(Default::default()));
    // The live conversation still has its transcript: the second model call carries the first turn.
    let seen = s.mock.seen();
    assert_eq!(seen.len(), 2);
    let body = serde_json::to_string(&seen[1].body["messages"]).expect("json");
    assert!(body.contains("my secret plan") && body.contains("first answer"), "{body}");
    // Nothing of it reached the database: no messages, runs, checkpoints, calls.
    let store = s.te.handle.store.clone();
    store.flush().await.expect("flush");
    assert!(store.conversation_messages("conv-private").await.expect("read").is_empty());
    assert!(store.conversation_runs("conv-private").await.expect("read").is_empty());
    assert_eq!(store.latest_checkpoint("conv-private").await.expect("read"), None);
    assert_eq!(store.count_calls().await.expect("count"), 0);
    let raw = file_contains(&s.te.dir.path().join("keyhaven.db"), "my secret plan");
    assert!(!raw, "the user's words are nowhere in the database file");
    s.te.stop().await;
}

/// Whether `needle` appears in the database file or its WAL (bytes, no SQL).
fn file_contains(db: &Path, needle: &str) -> bool {
    [db.to_path_buf(), companion(db, "-wal")]
        .iter()
        .filter_map(|p| std::fs::read(p).ok())
        .any(|bytes| bytes.windows(needle.len()).any(|w| w == needle.as_bytes()))
}
