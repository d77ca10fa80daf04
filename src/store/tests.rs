//! Unit tests of the call store: schema, writer semantics, rollups and failure paths.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::model::{CallFinish, CallStart, CallStatus, Usage};
use crate::store::{
    CallDetail, CallFilter, CallSummary, HISTORY_FLUSH_WAIT, LATENCY_BOUNDS_MS, Store, StoreError, StoreOptions,
    UsageGroup, UsageRow, read, schema,
};

/// 2025-01-01T00:00:00Z in ms.
const DAY0: i64 = 1_735_689_600_000;
const DAY_MS: i64 = 86_400_000;

fn opts(epoch: i64) -> StoreOptions {
    StoreOptions { epoch, ..StoreOptions::default() }
}

fn start(id: &str, started_ms: i64, model: &str) -> CallStart {
    CallStart {
        id: id.to_owned(),
        started_ms,
        dialect: "openai_chat".into(),
        client: "curl".into(),
        model: model.to_owned(),
        model_id: Some(format!("{model}-id")),
        provider: Some("openai".into()),
        upstream_model: Some(format!("{model}-up")),
        stream: true,
        request_body: Some("{\"req\":1}".into()),
        conversation_id: None,
        request_id: None,
        session_id: None,
        budget_downgrade: None,
    }
}

fn finish(id: &str, finished_ms: i64, status: CallStatus, tokens: u64) -> CallFinish {
    CallFinish {
        id: id.to_owned(),
        finished_ms,
        status,
        http_status: Some(200),
        usage: Usage {
            input_tokens: tokens,
            output_tokens: tokens * 2,
            cache_read_tokens: tokens * 3,
            cache_write_tokens: tokens * 4,
            reasoning_tokens: tokens,
        },
        usage_estimated: false,
        cost_micros: Some(i64::try_from(tokens).expect("small") * 10),
        price_version: Some("2026-11-30".into()),
        cost_source: Some(crate::model::CostSource::Reported),
        ttft_ms: Some(12),
        total_ms: 34,
        retries: 1,
        error_kind: None,
        error_message: None,
        request_body: Some("{\"req\":1}".into()),
        response_body: Some("{\"resp\":1}".into()),
        model_id: None,
        provider: None,
        upstream_model: None,
        notes: vec!["server tool `web_search_20250305` left out".into()],
    }
}

fn db_path(dir: &tempfile::TempDir) -> std::path::PathBuf {
    dir.path().join("data").join("keyhaven.db")
}

fn raw(path: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(path).expect("raw connection")
}

#[tokio::test]
async fn migrations_apply_on_a_fresh_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_path(&dir);
    let store = Store::open(&path, opts(1)).expect("open");
    assert_eq!(store.count_calls().await.expect("count"), 0);
    store.close().expect("close");
    let conn = raw(&path);
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).expect("user_version");
    assert_eq!(version, schema::supported_version());
    let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).expect("journal_mode");
    assert_eq!(mode, "wal");
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .expect("prepare")
        .query_map([], |r| r.get(0))
        .expect("query")
        .collect::<rusqlite::Result<_>>()
        .expect("rows");
    assert_eq!(
        tables,
        [
            "acked_blobs",
            "budget_alerts",
            "calls",
            "checkpoints",
            "conversations",
            "cursor_versions",
            "latency_daily",
            "messages",
            "pending_messages",
            "reasoning_memory",
            "run_context_blocks",
            "runs",
            "tool_rounds",
            "usage_daily"
        ]
    );
}

#[tokio::test]
async fn transcript_appends_are_idempotent_and_stale_runs_become_interrupted() {
    use crate::model::{Entry, Message, Role, RunStart, RunStatus};
    use crate::store::ConversationOp;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_path(&dir);
    let store = Store::open(&path, opts(1)).expect("open");
    let run = RunStart {
        id: "r1".into(),
        conversation_id: "c1".into(),
        client: "t".into(),
        model: "m".into(),
        started_ms: 1,
    };
    assert_eq!(store.conversation(ConversationOp::StartRun(run)).await.expect("start"), 1);
    let append = |seq: u64, id: &str| ConversationOp::Append {
        conversation_id: "c1".into(),
        seq,
        run_id: Some("r1".into()),
        entry: Entry::new(id, Message::text(Role::User, id)),
        created_ms: 2,
    };
    assert_eq!(store.conversation(append(0, "u1")).await.expect("append"), 1);
    assert_eq!(store.conversation(append(0, "u1")).await.expect("repeat"), 0, "the same message again");
    assert_eq!(store.conversation(append(1, "u1")).await.expect("same id"), 0, "the same id at another position");
    assert_eq!(store.conversation(append(0, "u2")).await.expect("same seq"), 0, "another id at a taken position");
    let msgs = store.conversation_messages("c1").await.expect("messages");
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0].entry, Entry::new("u1", Message::text(Role::User, "u1")));
    store.close().expect("close");
    // A later process finds the run still running: it becomes interrupted.
    let store = Store::open(&path, opts(2)).expect("reopen");
    store.interrupt_stale().await.expect("interrupt");
    let runs = store.conversation_runs("c1").await.expect("runs");
    assert_eq!((runs[0].status, runs[0].error_kind.as_deref()), (RunStatus::Interrupted, Some("interrupted")));
}

#[tokio::test]
async fn pending_messages_survive_a_reopen_until_appended_and_acked_blobs_change_by_differences() {
    use crate::model::{Entry, Message, Role, RunStart};
    use crate::store::{CheckpointRecord, ConversationOp};
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_path(&dir);
    let store = Store::open(&path, opts(1)).expect("open");
    let user = |id: &str| Entry::new(id, Message::text(Role::User, id));
    // Before any run: the conversation row is created (with no client yet).
    let pending =
        |entries: Vec<Entry>| ConversationOp::AddPending { conversation_id: "c1".into(), entries, created_ms: 1 };
    assert_eq!(store.conversation(pending(vec![user("p1"), user("p2")])).await.expect("pending"), 2);
    assert_eq!(store.conversation(pending(vec![user("p2"), user("p3")])).await.expect("again"), 1, "p2 is kept once");
    let acked = |added: &[&[u8]], removed: &[&[u8]]| ConversationOp::AckedBlobs {
        conversation_id: "c1".into(),
        added: added.iter().map(|b| b.to_vec()).collect(),
        removed: removed.iter().map(|b| b.to_vec()).collect(),
        acked_ms: 2,
    };
    store.conversation(acked(&[b"aaaa", b"bbbb", b"cccc"], &[])).await.expect("acked");
    store.conversation(acked(&[b"dddd"], &[b"bbbb"])).await.expect("diff");
    store.close().expect("close");

    let store = Store::open(&path, opts(2)).expect("reopen");
    let ids = |v: Vec<Entry>| v.into_iter().map(|e| e.id).collect::<Vec<_>>();
    assert_eq!(ids(store.pending_messages("c1").await.expect("read")), vec!["p1", "p2", "p3"], "in delivery order");
    assert_eq!(store.pending_messages("c1").await.expect("read")[0], user("p1"), "losslessly");
    assert_eq!(
        store.acked_blobs("c1").await.expect("read"),
        vec![b"aaaa".to_vec(), b"cccc".to_vec(), b"dddd".to_vec()]
    );
    let run = RunStart {
        id: "r1".into(),
        conversation_id: "c1".into(),
        client: "t".into(),
        model: "m".into(),
        started_ms: 3,
    };
    store.conversation(ConversationOp::StartRun(run)).await.expect("start");
    // Appending a pending message delivers it (same transaction); the others stay.
    let append = |seq: u64, entry: Entry| ConversationOp::Append {
        conversation_id: "c1".into(),
        seq,
        run_id: Some("r1".into()),
        entry,
        created_ms: 4,
    };
    store.conversation(append(0, user("p1"))).await.expect("append");
    assert_eq!(ids(store.pending_messages("c1").await.expect("read")), vec!["p2", "p3"]);
    // A pending row whose id the transcript held already is not pending either.
    store.conversation(append(1, user("p9"))).await.expect("append");
    store.conversation(pending(vec![user("p9")])).await.expect("pending");
    assert_eq!(ids(store.pending_messages("c1").await.expect("read")), vec!["p2", "p3"]);
    // The first run fills in the conversation's client.
    let client: String = store.with_read_conn(|c| {
        c.query_row("SELECT client FROM conversations WHERE id = 'c1'", [], |r| r.get(0)).expect("client")
    });
    assert_eq!(client, "t");
    // A compaction (replace) drops the checkpoints of the old transcript.
    let checkpoint = |seq: u64, last: &str| ConversationOp::Checkpoint {
        record: CheckpointRecord {
            conversation_id: "c1".into(),
            seq,
            run_id: None,
            version: 1,
            created_ms: 5,
            state: vec![1, 2, 3],
        },
        last_message_id: Some(last.into()),
    };
    assert_eq!(store.conversation(checkpoint(2, "p9")).await.expect("checkpoint"), 1);
    store
        .conversation(ConversationOp::Replace {
            conversation_id: "c1".into(),
            run_id: None,
            entries: vec![user("summary")],
            created_ms: 6,
        })
        .await
        .expect("replace");
    assert_eq!(store.latest_checkpoint("c1").await.expect("read"), None);
    // One taken before the compaction but written after it is stale: not stored.
    assert_eq!(store.conversation(checkpoint(2, "p9")).await.expect("stale"), 0);
    assert_eq!(store.latest_checkpoint("c1").await.expect("read"), None);
    store.conversation(checkpoint(1, "summary")).await.expect("checkpoint");
    assert_eq!(store.latest_checkpoint("c1").await.expect("read").map(|c| c.seq), Some(1));
}

#[tokio::test]
async fn reopen_keeps_rows_and_reapplies_no_migration() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_path(&dir);
    let store = Store::open(&path, opts(1)).expect("open");
    store.record_start(start("a", DAY0, "gpt-4o")).await.expect("start");
    store.record_finish(finish("a", DAY0 + 34, CallStatus::Ok, 5)).await.expect("finish");
    let before = store.call_detail("a").await.expect("detail");
    store.close().expect("close");

    let store = Store::open(&path, opts(2)).expect("reopen");
    assert_eq!(store.count_calls().await.expect("count"), 1);
    assert_eq!(store.call_detail("a").await.expect("detail"), before);
    assert_eq!(store.usage_totals("2000-01-01").await.expect("totals").calls, 1);
}

#[tokio::test]
async fn a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_path(&dir);
    Store::open(&path, opts(1)).expect("open").close().expect("close");
    raw(&path).pragma_update(None, "user_version", 999).expect("set user_version");
    let err = Store::open(&path, opts(2)).expect_err("must refuse");
    assert_eq!(err.kind(), "schema_too_new");
    assert_eq!(
        err,
        StoreError::SchemaTooNew {
            path: path.display().to_string(),
            found: 999,
            supported: schema::supported_version()
        }
    );
    let msg = err.to_string();
    assert!(msg.contains("newer Keyhaven") && msg.contains("schema 999"), "{msg}");
    assert!(msg.contains(&path.display().to_string()), "{msg}");
}

#[tokio::test]
async fn start_and_finish_round_trip_every_field() {
    let store = Store::open_in_memory(opts(77)).expect("open");
    let s = start("r1", DAY0 + 5, "claude-sonnet-4-5");
    let mut f = finish("r1", DAY0 + 1005, CallStatus::Error, 7);
    f.http_status = Some(529);
    f.usage_estimated = true;
    f.error_kind = Some("overloaded".into());
    f.error_message = Some("busy".into());
    f.retries = 3;
    f.total_ms = 1000;
    store.record_start(s.clone()).await.expect("start");

    let inflight = store.call_detail("r1").await.expect("detail").expect("row");
    assert_eq!(inflight.summary.status, CallStatus::InFlight);
    assert_eq!(inflight.summary.finished_ms, None);
    assert_eq!(inflight.summary.usage, Usage::default());

    store.record_finish(f.clone()).await.expect("finish");
    let got = store.call_detail("r1").await.expect("detail").expect("row");
    let want = CallDetail {
        summary: CallSummary {
            id: "r1".into(),
            started_ms: s.started_ms,
            finished_ms: Some(f.finished_ms),
            status: CallStatus::Error,
            dialect: s.dialect.clone(),
            client: s.client.clone(),
            model: s.model.clone(),
            model_id: s.model_id.clone(),
            provider: s.provider.clone(),
            upstream_model: s.upstream_model.clone(),
            stream: true,
            http_status: Some(529),
            usage: f.usage,
            usage_estimated: true,
            cost_micros: f.cost_micros,
            price_version: f.price_version.clone(),
            ttft_ms: f.ttft_ms,
            total_ms: Some(1000),
            retries: 3,
            error_kind: Some("overloaded".into()),
            error_message: Some("busy".into()),
            conversation_id: None,
            request_id: None,
            session_id: None,
            budget_downgrade: None,
            cost_source: f.cost_source,
        },
        request_body: s.request_body.clone(),
        response_body: f.response_body.clone(),
        process_epoch: Some(77),
        notes: vec!["server tool `web_search_20250305` left out".into()],
        context_blocks: Vec::new(),
    };
    assert_eq!(got, want);
    assert_eq!(store.call_detail("nope").await.expect("detail"), None);

    let listed = store.recent_calls(CallFilter::default()).await.expect("recent");
    assert_eq!(listed, vec![want.summary.clone()]);
    let json = serde_json::to_value(&got).expect("json");
    assert_eq!(json["status"], "error");
    assert_eq!(json["request_body"], "{\"req\":1}");
}

#[tokio::test]
async fn finish_without_start_inserts_a_complete_row() {
    let store = Store::open_in_memory(opts(1)).expect("open");
    let f = finish("orphan", DAY0 + 100, CallStatus::Ok, 3);
    store.record_finish(f.clone()).await.expect("finish");
    let got = store.call_detail("orphan").await.expect("detail").expect("row");
    assert_eq!(got.summary.started_ms, DAY0 + 100 - f.total_ms);
    assert_eq!(got.summary.status, CallStatus::Ok);
    assert_eq!(got.summary.usage, f.usage);
    assert_eq!(got.summary.model, "");
    assert_eq!(got.process_epoch, None);
    let days = store.usage_by_day("2025-01-01").await.expect("days");
    assert_eq!(days.len(), 1);
    assert_eq!((days[0].calls, days[0].model.as_str()), (1, ""));
    // A late start for the same id changes nothing.
    store.record_start(start("orphan", DAY0, "gpt-4o")).await.expect("late start");
    let again = store.call_detail("orphan").await.expect("detail").expect("row");
    assert_eq!(again, got);
}

#[tokio::test]
async fn duplicate_start_and_finish_are_ignored() {
    let store = Store::open_in_memory(opts(1)).expect("open");
    store.record_start(start("d", DAY0, "first")).await.expect("start");
    store.record_start(start("d", DAY0 + 1, "second")).await.expect("duplicate start");
    let row = store.call_detail("d").await.expect("detail").expect("row");
    assert_eq!((row.summary.model.as_str(), row.summary.started_ms), ("first", DAY0));

    store.record_finish(finish("d", DAY0 + 10, CallStatus::Ok, 1)).await.expect("finish");
    store.record_finish(finish("d", DAY0 + 20, CallStatus::Error, 9)).await.expect("second finish");
    let row = store.call_detail("d").await.expect("detail").expect("row");
    assert_eq!((row.summary.status, row.summary.finished_ms), (CallStatus::Ok, Some(DAY0 + 10)));
    assert_eq!(store.count_calls().await.expect("count"), 1);
    let totals = store.usage_totals("2025-01-01").await.expect("totals");
    assert_eq!((totals.calls, totals.errors, totals.usage.input_tokens), (1, 0, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_concurrent_calls_all_commit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Store::open(&db_path(&dir), opts(1)).expect("open"));
    let mut tasks = Vec::new();
    for t in 0..4 {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            for i in 0..250 {
                let id = format!("c-{t}-{i}");
                let started = store.record_start(start(&id, DAY0 + i, "m"));
                let finished = store.record_finish(finish(&id, DAY0 + i + 34, CallStatus::Ok, 1));
                started.await?;
                finished.await?;
            }
            Ok::<(), StoreError>(())
        }));
    }
    for task in tasks {
        task.await.expect("join").expect("all acked");
    }
    assert_eq!(store.count_calls().await.expect("count"), 1000);
    let totals = store.usage_totals("2025-01-01").await.expect("totals");
    assert_eq!((totals.calls, totals.usage.input_tokens, totals.cost_micros), (1000, 1000, 10_000));
    assert_eq!(store.dropped(), 0);
}

#[tokio::test]
async fn stale_in_flight_rows_become_interrupted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_path(&dir);
    let old = Store::open(&path, opts(100)).expect("open");
    old.record_start(start("old", DAY0, "m")).await.expect("start");
    old.record_start(start("done", DAY0, "m")).await.expect("start");
    old.record_finish(finish("done", DAY0 + 34, CallStatus::Ok, 1)).await.expect("finish");
    old.close().expect("close");
    // A row stamped by a newer process (e.g. another instance) must stay in flight.
    let newer = Store::open(&path, opts(300)).expect("open");
    newer.record_start(start("newer", DAY0, "m")).await.expect("start");
    newer.close().expect("close");

    let store = Store::open(&path, opts(200)).expect("reopen");
    store.record_start(start("current", DAY0, "m")).await.expect("start");
    assert_eq!(store.interrupt_stale().await.expect("interrupt"), 1);
    assert_eq!(store.interrupt_stale().await.expect("idempotent"), 0);

    let old = store.call_detail("old").await.expect("detail").expect("row");
    assert_eq!(old.summary.status, CallStatus::Interrupted);
    assert_eq!(old.summary.finished_ms, Some(200));
    assert!(old.summary.usage_estimated);
    assert_eq!(old.summary.error_kind.as_deref(), Some("interrupted"));
    for id in ["newer", "current"] {
        let row = store.call_detail(id).await.expect("detail").expect("row");
        assert_eq!(row.summary.status, CallStatus::InFlight, "{id}");
    }
    assert_eq!(store.call_detail("done").await.expect("detail").expect("row").summary.status, CallStatus::Ok);
    let totals = store.usage_totals("2025-01-01").await.expect("totals");
    assert_eq!((totals.calls, totals.errors), (2, 1));
}

#[tokio::test]
async fn rollup_sums_match_the_rows() {
    let store = Store::open_in_memory(opts(1)).expect("open");
    let statuses = [CallStatus::Ok, CallStatus::Error, CallStatus::Canceled, CallStatus::Ok];
    for i in 0..40_i64 {
        let id = format!("r{i}");
        let model = if i % 3 == 0 { "a" } else { "b" };
        let mut s = start(&id, DAY0 + (i % 4) * DAY_MS + i, model);
        s.client = if i % 2 == 0 { "x".into() } else { "y".into() };
        if i % 5 == 0 {
            s.provider = None;
        }
        let started = s.started_ms;
        drop(store.record_start(s));
        let idx = usize::try_from(i).expect("small") % statuses.len();
        let mut f = finish(&id, started + 34, statuses[idx], u64::try_from(i).expect("small"));
        if i % 7 == 0 {
            f.cost_micros = None;
        }
        drop(store.record_finish(f));
    }
    store.flush().await.expect("flush");

    let rows = store.recent_calls(CallFilter { limit: 1000, ..CallFilter::default() }).await.expect("rows");
    assert_eq!(rows.len(), 40);
    let mut want: Vec<UsageRow> = Vec::new();
    for r in &rows {
        let secs = r.started_ms / 1000;
        let day = format!("2025-01-0{}", 1 + (secs - DAY0 / 1000) / 86_400);
        let pos = match want.iter().position(|w| w.day == day && w.model == r.model) {
            Some(p) => p,
            None => {
                want.push(UsageRow {
                    day,
                    model: r.model.clone(),
                    calls: 0,
                    errors: 0,
                    usage: Usage::default(),
                    cost_micros: 0,
                    total_ms_sum: 0,
                });
                want.len() - 1
            }
        };
        let w = &mut want[pos];
        w.calls += 1;
        w.errors += u64::from(matches!(r.status, CallStatus::Error | CallStatus::Interrupted));
        w.usage.input_tokens += r.usage.input_tokens;
        w.usage.output_tokens += r.usage.output_tokens;
        w.usage.cache_read_tokens += r.usage.cache_read_tokens;
        w.usage.cache_write_tokens += r.usage.cache_write_tokens;
        w.usage.reasoning_tokens += r.usage.reasoning_tokens;
        w.cost_micros += r.cost_micros.unwrap_or(0);
        w.total_ms_sum += r.total_ms.unwrap_or(0);
    }
    want.sort_by(|a, b| (&a.day, &a.model).cmp(&(&b.day, &b.model)));
    assert_eq!(store.usage_by_day("2025-01-01").await.expect("by day"), want);
    assert_eq!(
        store.usage_by_day("2025-01-03").await.expect("since").len(),
        want.iter().filter(|w| w.day.as_str() >= "2025-01-03").count()
    );

    let totals = store.usage_totals("2025-01-01").await.expect("totals");
    assert_eq!(totals.calls, 40);
    assert_eq!(totals.errors, 10);
    assert_eq!(totals.cost_micros, want.iter().map(|w| w.cost_micros).sum::<i64>());
    assert_eq!(totals.usage.input_tokens, (0..40).sum::<u64>());

    // Filters.
    let only_a = store
        .recent_calls(CallFilter { model: Some("a".into()), status: Some(CallStatus::Ok), ..CallFilter::default() })
        .await
        .expect("filtered");
    assert!(!only_a.is_empty());
    assert!(only_a.iter().all(|r| r.model == "a" && r.status == CallStatus::Ok));
    let page = store
        .recent_calls(CallFilter { limit: 5, offset: 5, client: Some("x".into()), ..CallFilter::default() })
        .await
        .expect("page");
    assert_eq!(page.len(), 5);
    assert!(page.windows(2).all(|w| w[0].started_ms >= w[1].started_ms));
    let since = store
        .recent_calls(CallFilter { since_ms: Some(DAY0 + 3 * DAY_MS), ..CallFilter::default() })
        .await
        .expect("since");
    assert_eq!(since.len(), 10);
}

#[tokio::test]
async fn prune_and_delete_keep_rollups() {
    let store = Store::open_in_memory(opts(1)).expect("open");
    for (id, day) in [("p0", 0), ("p1", 1), ("p2", 2)] {
        store.record_start(start(id, DAY0 + day * DAY_MS, "m")).await.expect("start");
        store.record_finish(finish(id, DAY0 + day * DAY_MS + 34, CallStatus::Ok, 1)).await.expect("finish");
    }
    store.record_start(start("inflight", DAY0, "m")).await.expect("start");
    let before = store.usage_by_day("2025-01-01").await.expect("by day");
    assert_eq!(store.prune(DAY0 + 2 * DAY_MS).await.expect("prune"), 2);
    assert_eq!(store.count_calls().await.expect("count"), 2);
    assert!(store.call_detail("inflight").await.expect("detail").is_some());
    assert_eq!(store.delete_call("p2").await.expect("delete"), 1);
    assert_eq!(store.delete_call("p2").await.expect("delete again"), 0);
    assert_eq!(store.count_calls().await.expect("count"), 1);
    assert_eq!(store.usage_by_day("2025-01-01").await.expect("by day"), before);
    assert_eq!(before.len(), 3);
}

#[tokio::test]
async fn a_full_queue_drops_and_counts() {
    let store = Store::open_in_memory(StoreOptions { writer_queue: 2, ..opts(1) }).expect("open");
    let pause = store.pause_writer();
    let a = store.record_start(start("q1", DAY0, "m"));
    let b = store.record_start(start("q2", DAY0, "m"));
    let c = store.record_start(start("q3", DAY0, "m"));
    let d = store.record_finish(finish("q1", DAY0, CallStatus::Ok, 1));
    assert_eq!(c.await, Err(StoreError::QueueFull));
    assert_eq!(d.await.map_err(|e| e.kind()), Err("queue_full"));
    assert_eq!(store.dropped(), 2);
    drop(pause);
    a.await.expect("first committed");
    b.await.expect("second committed");
    assert_eq!(store.count_calls().await.expect("count"), 2);
}

#[tokio::test]
async fn ledger_stats_show_the_queue_and_the_commits() {
    let store = Store::open_in_memory(StoreOptions { writer_queue: 2, ..opts(1) }).expect("open");
    let pause = store.pause_writer();
    let a = store.record_start(start("s1", DAY0, "m"));
    let b = store.record_start(start("s2", DAY0, "m"));
    let c = store.record_start(start("s3", DAY0, "m"));
    assert_eq!(c.await, Err(StoreError::QueueFull));
    let held = store.ledger_stats();
    assert_eq!((held.queue_depth, held.dropped), (2, 1));
    drop(pause);
    a.await.expect("committed");
    b.await.expect("committed");
    store.flush().await.expect("flush");
    let after = store.ledger_stats();
    assert_eq!(after.queue_depth, 0);
    assert!(after.commits >= 1, "{after:?}");
    assert_eq!(after.commit_buckets.len(), crate::store::COMMIT_BOUNDS_SECONDS.len());
    let last = after.commit_buckets.last().map_or(0, |b| b.1);
    assert!(last <= after.commits && after.commit_buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{after:?}");
}

#[tokio::test]
async fn queued_starts_commit_ahead_of_the_finishes_queued_before_them() {
    let store = Store::open_in_memory(opts(1)).expect("open");
    let pause = store.pause_writer();
    let mut acks = Vec::new();
    for i in 0..5 {
        acks.push(store.record_finish(finish(&format!("f{i}"), DAY0 + 100, CallStatus::Ok, 1)));
    }
    acks.push(store.record_start(start("s1", DAY0, "m")));
    acks.push(store.record_finish(finish("f5", DAY0 + 100, CallStatus::Ok, 1)));
    acks.push(store.record_start(start("s2", DAY0, "m")));
    drop(pause);
    for ack in acks {
        ack.await.expect("committed");
    }
    // A finish without a start inserts its row, so the rowids give the order rows were written in.
    let order: Vec<String> = store.with_read_conn(|c| {
        c.prepare("SELECT id FROM calls ORDER BY rowid")
            .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
            .expect("ids")
    });
    assert_eq!(order, ["s1", "s2", "f0", "f1", "f2", "f3", "f4", "f5"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checkpointer_empties_a_wal_past_its_cap_without_waiting_for_idle() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_path(&dir);
    let cap = 256 * 1024;
    let store = Store::open(
        &path,
        StoreOptions {
            max_wal_bytes: cap,
            checkpoint_interval: Duration::from_millis(5),
            // Only the cap can empty the WAL in this test.
            idle_checkpoint: Duration::from_secs(3600),
            ..opts(1)
        },
    )
    .expect("open");
    let wal = path.with_extension("db-wal");
    let body = "x".repeat(16 * 1024);
    // 300 calls with 16 KiB bodies: several MB through the WAL, many times the cap.
    for i in 0..300 {
        let id = format!("w{i}");
        let s = CallStart { request_body: Some(body.clone()), ..start(&id, DAY0 + i, "m") };
        let started = store.record_start(s);
        let finished = store.record_finish(finish(&id, DAY0 + i + 34, CallStatus::Ok, 1));
        started.await.expect("start");
        finished.await.expect("finish");
    }
    let mut size = u64::MAX;
    // Up to 20 s: on a loaded 2-core CI machine the checkpointer thread can wait long for a core.
    for _ in 0..2000 {
        size = std::fs::metadata(&wal).map_or(0, |m| m.len());
        if size <= cap {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(size <= cap, "the WAL stays at {size} bytes (cap {cap})");
    assert_eq!(store.count_calls().await.expect("count"), 300);
    store.close().expect("close");
    let ok: String = raw(&path).query_row("PRAGMA integrity_check", [], |r| r.get(0)).expect("check");
    assert_eq!(ok, "ok");
}

#[tokio::test]
async fn an_unwritable_location_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A parent that is a file: fails for every user, root included.
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"x").expect("write file");
    let err = Store::open(&file.join("keyhaven.db"), opts(1)).expect_err("must fail");
    assert_eq!(err.kind(), "open");
    assert!(err.to_string().contains("not-a-dir"), "{err}");

    // A file that is not a database.
    let junk = dir.path().join("junk.db");
    std::fs::write(&junk, vec![7_u8; 4096]).expect("write junk");
    let err = Store::open(&junk, opts(1)).expect_err("must fail");
    assert_eq!(err.kind(), "open", "{err}");

    // A read-only directory (skipped when permissions do not bind, e.g. as root).
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let ro = dir.path().join("ro");
        std::fs::create_dir(&ro).expect("mkdir");
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).expect("chmod");
        if std::fs::write(ro.join("probe"), b"x").is_err() {
            let err = Store::open(&ro.join("keyhaven.db"), opts(1)).expect_err("must fail");
            assert_eq!(err.kind(), "open", "{err}");
            assert!(err.to_string().contains("cannot open database at"), "{err}");
        }
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).expect("chmod back");
    }
}

#[test]
fn dropping_the_store_drains_and_does_not_hang() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_path(&dir);
    let store = Store::open(&path, opts(1)).expect("open");
    for i in 0..300 {
        drop(store.record_start(start(&format!("x{i}"), DAY0 + i, "m")));
    }
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(store);
        let _ = done_tx.send(());
    });
    done_rx.recv_timeout(Duration::from_secs(20)).expect("drop finished");
    let n: i64 = raw(&path).query_row("SELECT COUNT(*) FROM calls", [], |r| r.get(0)).expect("count");
    assert_eq!(n, 300);
}

#[test]
fn acks_can_be_waited_on_without_a_runtime() {
    let store = Store::open_in_memory(opts(1)).expect("open");
    store.record_start(start("w", DAY0, "m")).wait_blocking().expect("committed");
    store.close().expect("close");
}

/// Polls `done` every 20 ms for up to 20 s (a loaded CI machine); whether it came true.
fn eventually(mut done: impl FnMut() -> bool) -> bool {
    (0..1000).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        done()
    })
}

fn wal_is_empty(db: &Path) -> bool {
    std::fs::metadata(db.with_extension("db-wal")).map(|m| m.len()).unwrap_or(0) == 0
}

#[test]
fn idle_writer_checkpoints_the_wal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_path(&dir);
    let store =
        Store::open(&path, StoreOptions { idle_checkpoint: Duration::from_millis(50), ..opts(1) }).expect("open");
    store.record_start(start("k", DAY0, "m")).wait_blocking().expect("committed");
    assert!(eventually(|| wal_is_empty(&path)), "WAL was not checkpointed");
    store.close().expect("close");
}

#[test]
fn frames_written_while_opening_are_checkpointed_without_a_commit() {
    // The migrations and the journal's replay write before the writer commits anything (and a
    // checkpointer thread may start after the writer's first commit, on a loaded machine): the
    // checkpointer must not wait for a commit it has not seen to empty the WAL.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_path(&dir);
    let store =
        Store::open(&path, StoreOptions { idle_checkpoint: Duration::from_millis(50), ..opts(1) }).expect("open");
    assert!(eventually(|| wal_is_empty(&path)), "the WAL left by opening was not checkpointed");
    store.close().expect("close");
}

#[test]
fn journaled_records_wait_for_the_pace_and_commit_together_while_a_flush_goes_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_path(&dir);
    // A pace far longer than the test: only a batch or an urgent command can end the wait.
    let store = Store::open(&path, StoreOptions { commit_pace: Duration::from_secs(600), ..opts(1) }).expect("open");
    let commits = store.ledger_stats().commits;
    for i in 0..5 {
        store.record_start(start(&format!("p{i}"), DAY0 + i, "m")).wait_blocking().expect("journaled");
    }
    // A finish's ack is its commit (nobody on the request path waits for it).
    let finished = store.record_finish(finish("p0", DAY0 + 9, CallStatus::Ok, 3));
    std::thread::sleep(Duration::from_millis(300));
    let count = || -> i64 { raw(&path).query_row("SELECT COUNT(*) FROM calls", [], |r| r.get(0)).expect("count") };
    assert_eq!(count(), 0, "journaled records were committed before their pace ran out");
    assert_eq!(store.ledger_stats().commits, commits, "the writer committed within the pace");
    // A flush is urgent: it takes everything queued, in one transaction.
    store.flush().wait_blocking().expect("flush");
    finished.wait_blocking().expect("finish committed with the flush");
    assert_eq!(count(), 5);
    let status: String =
        raw(&path).query_row("SELECT status FROM calls WHERE id = 'p0'", [], |r| r.get(0)).expect("p0");
    assert_eq!(status, "ok");
    assert_eq!(store.ledger_stats().commits, commits + 1, "one transaction for the flush and what waited");
    store.close().expect("close");
}

#[tokio::test]
async fn history_reads_see_what_the_pace_holds_back() {
    // The dashboard loads the Calls page once: a call answered just before must be on it, not on
    // the next reload. A pace far longer than the test: only the read's own flush commits.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_path(&dir);
    let store = Store::open(&path, StoreOptions { commit_pace: Duration::from_secs(600), ..opts(1) }).expect("open");
    store.record_start(start("seen", DAY0, "m")).await.expect("journaled");
    let finished = store.record_finish(finish("seen", DAY0 + 5, CallStatus::Ok, 7));
    let listed = store.recent_calls(CallFilter { limit: 10, ..CallFilter::default() }).await.expect("calls");
    assert_eq!(listed.iter().map(|c| (c.id.as_str(), c.status)).collect::<Vec<_>>(), [("seen", CallStatus::Ok)]);
    finished.await.expect("finish committed by the read");
    assert_eq!(store.usage_totals("2000-01-01").await.expect("totals").calls, 1);
    store.close().expect("close");
}

#[tokio::test]
async fn a_stalled_writer_delays_a_history_read_by_the_wait_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&db_path(&dir), opts(1)).expect("open");
    store.record_start(start("old", DAY0, "m")).await.expect("journaled");
    store.flush().await.expect("committed");
    let pause = store.pause_writer();
    let calls = tokio::time::timeout(HISTORY_FLUSH_WAIT + Duration::from_secs(3), store.count_calls())
        .await
        .expect("the read waited past its bound")
        .expect("count");
    assert_eq!(calls, 1, "the read shows what is committed");
    drop(pause);
}

#[test]
fn journaled_records_are_committed_once_the_pace_runs_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_path(&dir);
    let store = Store::open(&path, StoreOptions { commit_pace: Duration::from_millis(30), ..opts(1) }).expect("open");
    store.record_start(start("late", DAY0, "m")).wait_blocking().expect("journaled");
    let committed =
        || raw(&path).query_row("SELECT COUNT(*) FROM calls", [], |r| r.get::<_, i64>(0)).expect("count") == 1;
    assert!(eventually(committed), "a journaled start was never committed without a flush");
    store.close().expect("close");
}

#[tokio::test]
async fn a_full_disk_fails_only_the_affected_records_and_the_writer_keeps_going() {
    let store = Store::open_in_memory(opts(1)).expect("open");
    store.record_start(start("before", DAY0, "m")).await.expect("start");
    // Simulate a full disk: the database may not grow beyond its current size.
    let pages: i64 = store.with_read_conn(|c| c.query_row("PRAGMA page_count", [], |r| r.get(0))).expect("pages");
    store.with_read_conn(|c| c.pragma_update(None, "max_page_count", pages)).expect("cap size");
    let big = |id: &str| CallStart { request_body: Some("x".repeat(256 * 1024)), ..start(id, DAY0, "m") };

    // One transaction (the queued starts commit together): the big record does not fit. SQLite
    // rolls back the whole transaction on a full disk, so every start of it fails with that error.
    let pause = store.pause_writer();
    let huge = store.record_start(big("huge"));
    let later = store.record_start(start("later", DAY0, "m"));
    drop(pause);
    for ack in [huge, later] {
        let err = ack.await.expect_err("must fail");
        assert_eq!(err.kind(), "sqlite");
        assert!(err.to_string().contains("full"), "{err}");
    }
    assert_eq!(store.count_calls().await.expect("count"), 1);

    // Space is back: the writer is still running and records again.
    store.with_read_conn(|c| c.pragma_update(None, "max_page_count", 1_000_000)).expect("uncap");
    store.record_start(big("after")).await.expect("writer still running");
    store.record_finish(finish("before", DAY0 + 34, CallStatus::Ok, 1)).await.expect("finish again");
    assert_eq!(store.count_calls().await.expect("count"), 2);
    assert_eq!(store.usage_totals("2025-01-01").await.expect("totals").calls, 1);
}

#[tokio::test]
async fn grouped_usage_and_latency_histograms_come_from_the_rollups() {
    let store = Store::open_in_memory(opts(1)).expect("open");
    let cases = [("g0", "m1", "p1", "c1", 40), ("g1", "m1", "p2", "c1", 400), ("g2", "m2", "p2", "c2", 4_000)];
    for (id, model, provider, client, total) in cases {
        let mut s = start(id, DAY0, model);
        s.provider = Some(provider.into());
        s.client = client.into();
        store.record_start(s).await.expect("start");
        let mut f = finish(id, DAY0 + total, CallStatus::Ok, 1);
        f.total_ms = total;
        store.record_finish(f).await.expect("finish");
    }
    let by_provider = store.usage_grouped("2025-01-01", "2025-01-01", UsageGroup::Provider).await.expect("grouped");
    let keys: Vec<_> = by_provider.iter().map(|r| (r.key.as_str(), r.calls)).collect();
    assert_eq!(keys, [("p1", 1), ("p2", 2)]);
    let by_client = store.usage_grouped("2025-01-01", "2025-01-01", UsageGroup::Client).await.expect("grouped");
    assert_eq!(by_client.iter().map(|r| r.calls).collect::<Vec<_>>(), [2, 1]);
    assert!(store.usage_grouped("2025-01-02", "2025-01-09", UsageGroup::Day).await.expect("empty").is_empty());

    let all = store.latency_histograms("2025-01-01", "2025-01-01", None).await.expect("histogram");
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].counts.len(), LATENCY_BOUNDS_MS.len() + 1);
    assert_eq!(all[0].counts.iter().sum::<u64>(), 3);
    assert_eq!(all[0].counts[0], 1, "40 ms is in the first bucket");
    assert_eq!(all[0].counts[4], 1, "400 ms is in the 300..=500 bucket");
    let by_model = store.latency_histograms("2025-01-01", "2025-01-01", Some(UsageGroup::Model)).await.expect("h");
    assert_eq!(by_model.iter().map(|h| h.key.as_str()).collect::<Vec<_>>(), ["m1", "m2"]);
    // Pruning keeps the histogram, like usage_daily.
    store.prune(DAY0 + DAY_MS).await.expect("prune");
    assert_eq!(store.latency_histograms("2025-01-01", "2025-01-01", None).await.expect("h"), all);
    let only_p2 = store
        .recent_calls(CallFilter { provider: Some("p2".into()), ..CallFilter::default() })
        .await
        .expect("filtered");
    assert!(only_p2.is_empty(), "pruned");
}

#[tokio::test]
async fn calls_carry_their_conversation_and_request_and_filter_by_conversation() {
    let store = Store::open_in_memory(opts(1)).expect("open");
    let with = |id: &str, conv: Option<&str>| CallStart {
        conversation_id: conv.map(str::to_owned),
        request_id: conv.map(|c| format!("{c}-req-{id}")),
        ..start(id, DAY0, "m")
    };
    for (id, conv) in [("a", Some("c1")), ("b", Some("c2")), ("c", Some("c1")), ("d", None)] {
        store.record_start(with(id, conv)).await.expect("start");
        store.record_finish(finish(id, DAY0 + 5, CallStatus::Ok, 1)).await.expect("finish");
    }
    let filter = CallFilter { conversation_id: Some("c1".into()), ..CallFilter::default() };
    let rows = store.recent_calls(filter).await.expect("rows");
    let mut ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, vec!["a", "c"]);
    let detail = store.call_detail("a").await.expect("read").expect("row");
    assert_eq!(detail.summary.conversation_id.as_deref(), Some("c1"));
    assert_eq!(detail.summary.request_id.as_deref(), Some("c1-req-a"));
    assert_eq!(detail.request_body.as_deref(), Some("{\"req\":1}"), "the body columns still line up");
    let none = store.call_detail("d").await.expect("read").expect("row");
    assert_eq!((none.summary.conversation_id, none.summary.request_id), (None, None));
}

#[tokio::test]
async fn calls_carry_their_client_session_and_group_by_it() {
    let store = Store::open_in_memory(opts(1)).expect("open");
    let with = |id: &str, session: Option<&str>, client: &str, at: i64| CallStart {
        session_id: session.map(str::to_owned),
        client: client.to_owned(),
        ..start(id, at, "m")
    };
    let calls = [
        ("a", Some("s-claude"), "claude-code", DAY0, CallStatus::Ok, 10),
        ("b", Some("s-codex"), "codex", DAY0 + 10, CallStatus::Ok, 100),
        ("c", Some("s-claude"), "claude-code", DAY0 + 20, CallStatus::Error, 1),
        ("d", None, "curl", DAY0 + 30, CallStatus::Ok, 1000),
        ("e", Some("s-old"), "codex", DAY0 - DAY_MS, CallStatus::Ok, 5),
    ];
    for (id, session, client, at, status, tokens) in calls {
        store.record_start(with(id, session, client, at)).await.expect("start");
        store.record_finish(finish(id, at + 5, status, tokens)).await.expect("finish");
    }
    let filter = CallFilter { session_id: Some("s-claude".into()), ..CallFilter::default() };
    let ids: Vec<String> = store.recent_calls(filter).await.expect("rows").into_iter().map(|r| r.id).collect();
    assert_eq!(ids, vec!["c", "a"], "newest first, only that session");
    let detail = store.call_detail("b").await.expect("read").expect("row");
    assert_eq!(detail.summary.session_id.as_deref(), Some("s-codex"));
    assert_eq!(detail.request_body.as_deref(), Some("{\"req\":1}"), "the body columns still line up");
    assert_eq!(detail.process_epoch, Some(1));

    let sessions = store.sessions(DAY0, 0).await.expect("sessions");
    let got: Vec<(&str, &str, u64, u64, u64, i64, i64)> = sessions
        .iter()
        .map(|s| {
            (s.session_id.as_str(), s.client.as_str(), s.calls, s.errors, s.usage.input_tokens, s.first_ms, s.last_ms)
        })
        .collect();
    // `s-old` was last active before `since`; calls without a session are in no group.
    assert_eq!(
        got,
        vec![
            ("s-claude", "claude-code", 2, 1, 11, DAY0, DAY0 + 20),
            ("s-codex", "codex", 1, 0, 100, DAY0 + 10, DAY0 + 10),
        ]
    );
    assert_eq!(store.sessions(DAY0 - DAY_MS, 1).await.expect("limited").len(), 1, "the limit holds");
}

#[tokio::test]
async fn cost_sources_exports_and_daily_rows_read_back() {
    use crate::model::CostSource;
    let store = Store::open_in_memory(opts(1)).expect("open");
    for (id, at, source, cost) in [
        ("e1", DAY0, Some(CostSource::Reported), 10),
        ("e2", DAY0 + 1, Some(CostSource::Estimated), 20),
        ("e3", DAY0 + 2, Some(CostSource::Computed), 40),
        ("e4", DAY0 + DAY_MS, Some(CostSource::Reported), 80),
        ("e5", DAY0 + 3, None, 0),
    ] {
        store.record_start(start(id, at, "m")).await.expect("start");
        let mut f = finish(id, at + 1, CallStatus::Ok, 1);
        f.cost_source = source;
        f.cost_micros = Some(cost);
        store.record_finish(f).await.expect("finish");
    }
    let day1 = store.cost_sources(DAY0, DAY0 + DAY_MS).await.expect("sources");
    let got: Vec<_> = day1.iter().map(|r| (r.source, r.calls, r.cost_micros)).collect();
    assert_eq!(
        got,
        vec![
            (None, 1, 0),
            (Some(CostSource::Computed), 1, 40),
            (Some(CostSource::Estimated), 1, 20),
            (Some(CostSource::Reported), 1, 10),
        ]
    );
    // Keyset pages, oldest first, bounded by the window.
    let first = store.calls_page(DAY0, DAY0 + 2 * DAY_MS, None, 2).await.expect("page");
    assert_eq!(first.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["e1", "e2"]);
    let last = first.last().map(|c| (c.started_ms, c.id.clone()));
    let next = store.calls_page(DAY0, DAY0 + 2 * DAY_MS, last, 10).await.expect("page");
    assert_eq!(next.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["e3", "e5", "e4"]);
    assert_eq!(next[0].cost_source, Some(CostSource::Computed));
    let daily = store.usage_daily("2025-01-01", "2025-01-01").await.expect("daily");
    assert_eq!(daily.len(), 1);
    assert_eq!((daily[0].calls, daily[0].cost_micros, daily[0].client.as_str()), (4, 70, "curl"));
}

#[test]
fn migration_0010_backfills_the_cost_source_of_older_rows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("old.db");
    {
        let conn = rusqlite::Connection::open(&path).expect("open");
        // Up to migration 8, as an older build left it.
        for sql in [
            include_str!("migrations/0001_create_calls.sql"),
            include_str!("migrations/0002_create_usage_daily.sql"),
            include_str!("migrations/0003_create_latency_daily.sql"),
            include_str!("migrations/0004_create_agent_transcripts.sql"),
            include_str!("migrations/0005_add_call_conversation.sql"),
            include_str!("migrations/0006_create_pending_and_acked_blobs.sql"),
            include_str!("migrations/0007_add_call_session.sql"),
            include_str!("migrations/0008_create_reasoning_memory.sql"),
        ] {
            conn.execute_batch(sql).expect("old schema");
        }
        conn.pragma_update(None, "user_version", 8).expect("version");
        conn.execute_batch(
            "INSERT INTO calls (id, started_ms, status, input_tokens, usage_estimated) VALUES \
             ('rep', 1, 'ok', 10, 0), ('est', 2, 'canceled', 10, 1), ('refused', 3, 'error', 0, 0), \
             ('flight', 4, 'in_flight', 0, 0)",
        )
        .expect("rows");
    }
    let store = Store::open(&path, opts(9)).expect("migrates");
    let source = |id: &str| {
        store.with_read_conn(|c| {
            c.query_row("SELECT cost_source FROM calls WHERE id = ?1", [id], |r| r.get::<_, Option<String>>(0))
                .expect("row")
        })
    };
    assert_eq!(source("rep").as_deref(), Some("reported"));
    assert_eq!(source("est").as_deref(), Some("estimated"));
    assert_eq!(source("refused"), None);
    assert_eq!(source("flight"), None);
}

#[tokio::test]
async fn a_calls_detail_lists_its_runs_context_blocks() {
    use crate::store::{ContextBlock, ConversationOp};
    let store = Store::open_in_memory(opts(1)).expect("open");
    let block = |kind: &str, source: &str, bytes: u64| ContextBlock { kind: kind.into(), source: source.into(), bytes };
    let blocks = vec![block("file", "src/a.rs", 42), block("image", "", 16)];
    let op = |blocks: Vec<ContextBlock>| ConversationOp::RunContext {
        run_id: "run-1".into(),
        conversation_id: "conv-1".into(),
        blocks,
        created_ms: DAY0,
    };
    assert_eq!(store.conversation(op(blocks.clone())).await.expect("write"), 1);
    assert_eq!(store.conversation(op(vec![block("rule", "x", 1)])).await.expect("repeat"), 0, "written once per run");
    let of_run = CallStart { request_id: Some("run-1".into()), ..start("c1", DAY0, "m") };
    store.record_start(of_run).await.expect("start");
    store.record_start(start("c2", DAY0, "m")).await.expect("start");
    assert_eq!(store.call_detail("c1").await.expect("read").expect("row").context_blocks, blocks);
    assert!(store.call_detail("c2").await.expect("read").expect("row").context_blocks.is_empty());
}

#[tokio::test]
async fn a_cursor_versions_row_keeps_its_first_sighting_and_takes_the_latest_test() {
    use crate::store::{ConversationOp, CursorVersionRow};
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_path(&dir);
    let store = Store::open(&path, opts(1)).expect("open");
    let row = |first: i64, last: i64, status: Option<&str>, step: Option<&str>| CursorVersionRow {
        version: "3.16.2".into(),
        first_seen_ms: first,
        last_seen_ms: last,
        test_status: status.map(str::to_owned),
        failed_step: step.map(str::to_owned),
        detail: step.map(|_| "no exec".to_owned()),
        tested_ms: status.map(|_| last),
    };
    store.conversation(ConversationOp::CursorVersion(row(100, 100, Some("running"), None))).await.expect("seen");
    // A later write with a later first sighting (another process's memory) keeps the first one.
    store
        .conversation(ConversationOp::CursorVersion(row(150, 200, Some("failed"), Some("tool_round"))))
        .await
        .expect("failed");
    store.close().expect("close");
    let store = Store::open(&path, opts(2)).expect("reopen");
    let rows = store.cursor_versions().await.expect("read");
    assert_eq!(rows, vec![row(100, 200, Some("failed"), Some("tool_round"))]);
}

#[tokio::test]
async fn budget_alerts_are_kept_once_per_budget_period_and_level() {
    use crate::model::{AlertLevel, BudgetAlert};
    let store = Store::open_in_memory(opts(1)).expect("open");
    let alert = |budget: &str, level, start, at| BudgetAlert {
        budget: budget.into(),
        level,
        period_start_ms: start,
        reset_ms: start + 86_400_000,
        spent_micros: 800_000,
        limit_micros: 1_000_000,
        at_ms: at,
    };
    assert_eq!(store.record_budget_alert(alert("d", AlertLevel::Soft, 1000, 1001)).await.expect("ok"), 1);
    assert_eq!(store.record_budget_alert(alert("d", AlertLevel::Soft, 1000, 1005)).await.expect("ok"), 0, "kept once");
    assert_eq!(store.record_budget_alert(alert("d", AlertLevel::Hard, 1000, 1002)).await.expect("ok"), 1);
    assert_eq!(store.record_budget_alert(alert("d", AlertLevel::Soft, 500, 501)).await.expect("ok"), 1);
    let got = store.budget_alerts_since(1000).await.expect("read");
    assert_eq!(got, [alert("d", AlertLevel::Soft, 1000, 1001), alert("d", AlertLevel::Hard, 1000, 1002)]);
    store.close().expect("close");
}

#[tokio::test]
async fn a_start_is_acked_from_the_journal_while_the_writer_is_stalled() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_path(&dir);
    let store = Store::open(&path, opts(1)).expect("open");
    let pause = store.pause_writer();
    // SQLite is not reached while the writer is held; the head may go out anyway.
    tokio::time::timeout(Duration::from_secs(5), store.record_start(start("j1", DAY0, "m")))
        .await
        .expect("acked without the writer")
        .expect("journaled");
    // What SQLite holds (a history read would wait for the writer to commit it first).
    let committed = store.with_read_conn(|c| read::call_detail(c, "j1")).expect("detail");
    assert!(committed.is_none(), "committed while the writer was held");
    drop(pause);
    store.flush().await.expect("flush");
    let row = store.call_detail("j1").await.expect("detail").expect("row");
    assert_eq!(row.summary.status, CallStatus::InFlight);
    assert_eq!(row.request_body.as_deref(), Some("{\"req\":1}"), "the row keeps the body the journal leaves out");
    store.close().expect("close");
    // A clean close leaves nothing to replay.
    for segment in crate::store::journal::segment_paths(&path) {
        assert_eq!(std::fs::metadata(&segment).expect("segment").len(), 0, "{}", segment.display());
    }
}

#[tokio::test]
async fn records_left_in_the_journal_by_a_killed_process_are_replayed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_path(&dir);
    // The earlier process: one call finished; one whose start was committed, not its finish.
    let old = Store::open(&path, opts(100)).expect("open");
    old.record_start(start("done", DAY0, "m")).await.expect("start");
    old.record_finish(finish("done", DAY0 + 34, CallStatus::Ok, 1)).await.expect("finish");
    old.record_start(start("unfinished", DAY0 + 3, "m")).await.expect("start");
    old.close().expect("close");
    {
        let (journal, replayed) = crate::store::journal::Journal::open(&crate::store::journal::segment_paths(&path))
            .expect("journal")
            .expect("no owner");
        assert!(replayed.is_empty());
        let journal = Arc::new(journal);
        // Journaled, never committed (the active segment keeps it): what `kill -9` leaves.
        let entry = |mut s: CallStart| journal.append_start(100, &mut s);
        drop(entry(start("lost", DAY0 + 1, "m")).expect("append"));
        // A call journaled again for a row that exists changes nothing.
        drop(entry(start("done", DAY0, "m")).expect("append"));
        // A call that finished, whose finish never reached SQLite, and one whose start and
        // finish both are only in the journal.
        drop(entry(start("both", DAY0 + 2, "m")).expect("append"));
        let finished = |id: &str| journal.append_finish(&mut finish(id, DAY0 + 40, CallStatus::Ok, 2));
        drop(finished("unfinished").expect("append"));
        drop(finished("both").expect("append"));
    }

    let store = Store::open(&path, opts(200)).expect("reopen");
    let lost = store.call_detail("lost").await.expect("detail").expect("replayed row");
    assert_eq!(lost.summary.status, CallStatus::InFlight);
    assert_eq!(lost.summary.model, "m");
    assert_eq!(store.interrupt_stale().await.expect("interrupt"), 1);
    let lost = store.call_detail("lost").await.expect("detail").expect("row");
    assert_eq!(lost.summary.status, CallStatus::Interrupted);
    assert_eq!(store.call_detail("done").await.expect("detail").expect("row").summary.status, CallStatus::Ok);
    for id in ["unfinished", "both"] {
        let row = store.call_detail(id).await.expect("detail").expect("row");
        assert_eq!(row.summary.status, CallStatus::Ok, "{id}");
        assert_eq!((row.summary.usage.input_tokens, row.summary.model.as_str()), (2, "m"), "{id}");
        assert_eq!(row.summary.client, "curl", "{id}: the start's columns, replayed before its finish");
        assert_eq!(row.response_body, None, "{id}: bodies are not journaled");
    }
    for segment in crate::store::journal::segment_paths(&path) {
        assert_eq!(std::fs::metadata(&segment).expect("segment").len(), 0, "replayed, then emptied");
    }
    let totals = store.usage_totals("2025-01-01").await.expect("totals");
    assert_eq!((totals.calls, totals.errors, totals.usage.input_tokens), (4, 1, 5));
}

#[tokio::test]
async fn with_synchronous_full_a_start_waits_for_its_commit_and_no_journal_is_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_path(&dir);
    let store = Store::open(&path, StoreOptions { synchronous_full: true, ..opts(1) }).expect("open");
    for segment in crate::store::journal::segment_paths(&path) {
        assert!(!segment.exists(), "{}", segment.display());
    }
    let pause = store.pause_writer();
    let ack = store.record_start(start("f1", DAY0, "m"));
    tokio::pin!(ack);
    assert!(tokio::time::timeout(Duration::from_millis(200), &mut ack).await.is_err(), "acked before its commit");
    drop(pause);
    ack.await.expect("committed");
    assert!(store.call_detail("f1").await.expect("detail").is_some());
}

#[tokio::test]
async fn a_second_store_on_the_same_file_leaves_the_live_owners_journal_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_path(&dir);
    let engine = Store::open(&path, opts(1)).expect("open");
    let pause = engine.pause_writer();
    engine.record_start(start("live", DAY0, "m")).await.expect("journaled");
    // The command line reading the database while the engine runs.
    let cli = Store::open(&path, StoreOptions::default()).expect("second open");
    assert!(cli.call_detail("live").await.expect("detail").is_none(), "replayed a live engine's journal");
    cli.close().expect("close");
    let [a, _] = crate::store::journal::segment_paths(&path);
    assert!(std::fs::metadata(&a).expect("segment").len() > 0, "the live engine's journal was emptied");
    drop(pause);
    engine.flush().await.expect("flush");
    assert!(engine.call_detail("live").await.expect("detail").is_some());
}

#[cfg(target_os = "linux")]
#[test]
fn the_writer_and_checkpointer_threads_run_below_the_request_paths_priority() {
    // Each thread names itself and lowers its priority when it starts: poll for both.
    fn store_threads() -> Vec<(String, i32)> {
        let mut found = Vec::new();
        for task in std::fs::read_dir("/proc/self/task").expect("threads").flatten() {
            let Ok(comm) = std::fs::read_to_string(task.path().join("comm")) else { continue };
            let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else { continue };
            if comm.trim().starts_with("keyhaven-store") {
                // "pid (comm) state ppid …": nice is the 19th field, the 17th after the comm.
                let nice = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(16)?.parse().ok());
                found.push((comm.trim().to_owned(), nice.expect("nice")));
            }
        }
        found.sort();
        found
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&db_path(&dir), opts(1)).expect("open");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    // Other tests' stores run in this process too: every store thread must end up at nice 10,
    // and both kinds must be there (the checkpointer's name is cut to 15 bytes by the kernel).
    let settled = |seen: &[(String, i32)]| {
        ["keyhaven-store", "keyhaven-store-"].iter().all(|name| seen.iter().any(|(n, _)| n == name))
            && seen.iter().all(|(_, nice)| *nice == 10)
    };
    let mut seen = store_threads();
    while !settled(&seen) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        seen = store_threads();
    }
    store.close().expect("close");
    assert!(settled(&seen), "{seen:?}");
}

#[test]
fn an_sqlite_older_than_3_37_is_refused_by_name() {
    assert_eq!(super::check_sqlite_version(3_037_000, "3.37.0"), Ok(()));
    assert_eq!(super::check_sqlite_version(3_040_001, "3.40.1"), Ok(()));
    let err = super::check_sqlite_version(3_036_000, "3.36.0").expect_err("too old");
    assert!(err.contains("3.36.0") && err.contains("3.37"), "{err}");
    // The library this build links passes (the store's tests would fail otherwise).
    assert!(rusqlite::version_number() >= super::MIN_SQLITE_VERSION, "linked: {}", rusqlite::version());
}
