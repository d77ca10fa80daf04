//! The guard's bookkeeping with a counting self-test: one test per new version, none for a
//! version the ledger remembers as tested, a rerun for one a shutdown interrupted, pass-through
//! for a failed one until a retry passes.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::store::StoreOptions;

#[derive(Debug, Default)]
struct Counting {
    runs: AtomicUsize,
}

impl SelfTest for Arc<Counting> {
    fn run(&self, fault: Option<Step>) -> Pin<Box<dyn Future<Output = SelfTestResult> + Send + 'static>> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            match fault {
                Some(step) => Err(StepFailure { step, detail: "scripted".into() }),
                None => Ok(()),
            }
        })
    }
}

async fn settle(guard: &Guard, version: &str) -> TestState {
    for _ in 0..200 {
        match guard.state(version) {
            Some(TestState::Running) | None => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
            Some(s) => return s,
        }
    }
    panic!("the self-test of {version} never ended");
}

fn row(version: &str, status: Option<&str>) -> CursorVersionRow {
    CursorVersionRow {
        version: version.into(),
        first_seen_ms: 1,
        last_seen_ms: 2,
        test_status: status.map(str::to_owned),
        failed_step: (status == Some("failed")).then(|| "text_turn".to_owned()),
        detail: None,
        tested_ms: Some(2),
    }
}

#[tokio::test]
async fn remembered_versions_are_not_retested_and_interrupted_ones_are() {
    let store = Arc::new(Store::open_in_memory(StoreOptions::default()).expect("store"));
    for (v, s) in [("1.0.0", Some("passed")), ("1.1.0", Some("running")), ("1.2.0", Some("failed"))] {
        store.conversation(ConversationOp::CursorVersion(row(v, s))).await.expect("row");
    }
    let counting = Arc::new(Counting::default());
    let guard = Guard::load(Some(store.clone()), Spawner::new(), Arc::new(counting.clone())).await;
    assert_eq!(guard.observe("1.0.0"), Verdict::Serve);
    assert_eq!(guard.observe("1.2.0"), Verdict::Upstream, "a remembered failure still passes through");
    assert_eq!(counting.runs.load(Ordering::SeqCst), 0);
    assert_eq!(guard.observe("1.1.0"), Verdict::Serve);
    assert_eq!(settle(&guard, "1.1.0").await, TestState::Passed);
    assert_eq!(counting.runs.load(Ordering::SeqCst), 1, "the interrupted test runs again");
    // Header noise is cleaned; empty versions are ignored.
    assert_eq!(guard.observe("  "), Verdict::Serve);
    assert_eq!(guard.versions().len(), 3);
}

#[tokio::test]
async fn a_failure_passes_through_until_a_retry_passes() {
    let counting = Arc::new(Counting::default());
    let guard = Guard::load(None, Spawner::new(), Arc::new(counting.clone())).await;
    guard.set_fault(Some(Step::ToolRound));
    assert_eq!(guard.observe("3.16.2"), Verdict::Serve, "served while the test runs");
    let failed = TestState::Failed(StepFailure { step: Step::ToolRound, detail: "scripted".into() });
    assert_eq!(settle(&guard, "3.16.2").await, failed);
    assert_eq!(guard.observe("3.16.2"), Verdict::Upstream);
    assert!(!guard.retry("9.9.9"), "never seen");
    guard.set_fault(None);
    assert!(guard.retry("3.16.2"));
    assert_eq!(settle(&guard, "3.16.2").await, TestState::Passed);
    assert_eq!(guard.observe("3.16.2"), Verdict::Serve);
    assert_eq!(counting.runs.load(Ordering::SeqCst), 2);
    guard.set_enabled(false);
    assert_eq!(guard.observe("4.0.0"), Verdict::Serve);
    assert_eq!(guard.state("4.0.0"), None, "off: nothing recorded or tested");
}

/// A self-test whose step sees the shutdown: it cancels the engine's tasks, as the shutdown does,
/// and fails the way a step fails when its provider and runs are cancelled under it.
#[derive(Debug)]
struct SeesShutdown {
    spawner: Spawner,
    ran: Arc<std::sync::atomic::AtomicBool>,
}

impl SelfTest for SeesShutdown {
    fn run(&self, _fault: Option<Step>) -> Pin<Box<dyn Future<Output = SelfTestResult> + Send + 'static>> {
        let root = self.spawner.root_token().clone();
        let ran = self.ran.clone();
        Box::pin(async move {
            root.cancel();
            ran.store(true, Ordering::SeqCst);
            Err(StepFailure { step: Step::TextTurn, detail: "the run ended".into() })
        })
    }
}

#[tokio::test]
async fn a_failure_seen_during_shutdown_is_not_recorded_and_the_version_is_tested_again() {
    let store = Arc::new(Store::open_in_memory(StoreOptions::default()).expect("store"));
    let spawner = Spawner::new();
    let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let test = Arc::new(SeesShutdown { spawner: spawner.clone(), ran: ran.clone() });
    let guard = Guard::load(Some(store.clone()), spawner.clone(), test).await;
    assert_eq!(guard.observe("2.6.19"), Verdict::Serve);
    while !ran.load(Ordering::SeqCst) {
        tokio::task::yield_now().await;
    }
    assert!(spawner.shutdown(std::time::Duration::from_secs(5)).await, "the test task ends");
    assert_eq!(guard.state("2.6.19"), Some(TestState::Running), "no verdict from a shutdown");
    store.flush().await.expect("flush");
    let rows = store.cursor_versions().await.expect("rows");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].test_status.as_deref(), Some("running"), "{rows:?}");

    // The next engine tests the version again and serves it meanwhile.
    let counting = Arc::new(Counting::default());
    let guard = Guard::load(Some(store), Spawner::new(), Arc::new(counting.clone())).await;
    assert_eq!(guard.observe("2.6.19"), Verdict::Serve);
    assert_eq!(settle(&guard, "2.6.19").await, TestState::Passed);
    assert_eq!(counting.runs.load(Ordering::SeqCst), 1);
}
