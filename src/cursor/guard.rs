//! The Cursor update guard (issue 15 §7): Cursor updates often change what the IDE expects, so
//! the first time a Cursor version is seen (the IDE's `x-cursor-client-version` header), a local
//! self-test of Keyhaven's own answers runs in the background ([`SelfTest`]: the model list, a
//! text turn, one tool round, against a scripted provider). If a step fails, every request of
//! that version goes to Cursor's own servers ([`Verdict::Upstream`]) until the user retries
//! ([`Guard::retry`], which runs the self-test again).
//!
//! - The request that reveals a new version is served normally; the test never runs on the
//!   request path. A version whose test is still running is served locally.
//! - Each version is tested once: a version seen again (also after a restart: the rows are in
//!   the ledger, table `cursor_versions`) reruns nothing. A test interrupted by a shutdown is
//!   rerun the next time the version is seen.
//! - `last_seen_ms` is exact in memory and written at most once a minute per version.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use crate::store::{ConversationOp, CursorVersionRow, Store};
use crate::task::Spawner;

/// How often a version's `last_seen_ms` is written at most.
const SEEN_WRITE_EVERY_MS: i64 = 60_000;
/// The longest version string kept (longer ones are cut).
const MAX_VERSION_LEN: usize = 64;

/// A step of the self-test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// The model catalog answers (`AvailableModels`, `GetUsableModels`).
    ModelList,
    /// A run that answers with text.
    TextTurn,
    /// A run whose model calls a tool the IDE executes, then answers.
    ToolRound,
}

impl Step {
    pub const ALL: [Step; 3] = [Step::ModelList, Step::TextTurn, Step::ToolRound];

    pub fn as_str(self) -> &'static str {
        match self {
            Step::ModelList => "model_list",
            Step::TextTurn => "text_turn",
            Step::ToolRound => "tool_round",
        }
    }

    pub fn parse(s: &str) -> Option<Step> {
        Step::ALL.into_iter().find(|x| x.as_str() == s)
    }
}

/// A failed step and what it saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepFailure {
    pub step: Step,
    pub detail: String,
}

/// The self-test's result.
pub type SelfTestResult = Result<(), StepFailure>;

/// The self-test: runs Keyhaven's Cursor answers against a scripted provider and judges them.
/// `fault` (a test hook) makes that step fail on purpose.
pub trait SelfTest: Send + Sync + std::fmt::Debug {
    fn run(&self, fault: Option<Step>) -> Pin<Box<dyn Future<Output = SelfTestResult> + Send + 'static>>;
}

/// What a request of a version gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Served by Keyhaven as configured.
    Serve,
    /// Passed through to Cursor's servers (the version failed its self-test).
    Upstream,
}

/// The self-test state of one version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TestState {
    /// Never tested (a row from a test a shutdown interrupted).
    Untested,
    Running,
    Passed,
    Failed(StepFailure),
}

#[derive(Debug, Clone)]
struct Entry {
    first_seen_ms: i64,
    last_seen_ms: i64,
    /// `last_seen_ms` as last written.
    written_seen_ms: i64,
    state: TestState,
    tested_ms: Option<i64>,
}

/// The guard: versions seen, their test state, the self-test.
#[derive(Debug)]
pub struct Guard {
    store: Option<Arc<Store>>,
    spawner: Spawner,
    test: Arc<dyn SelfTest>,
    versions: Mutex<HashMap<String, Entry>>,
    fault: Mutex<Option<Step>>,
    enabled: std::sync::atomic::AtomicBool,
}

impl Guard {
    /// A guard with the versions the ledger remembers (`store`; `None`: memory only).
    pub async fn load(store: Option<Arc<Store>>, spawner: Spawner, test: Arc<dyn SelfTest>) -> Arc<Guard> {
        let mut versions = HashMap::new();
        if let Some(s) = &store {
            match s.cursor_versions().await {
                Ok(rows) => {
                    for row in rows {
                        let state = state_of(&row);
                        versions.insert(
                            row.version,
                            Entry {
                                first_seen_ms: row.first_seen_ms,
                                last_seen_ms: row.last_seen_ms,
                                written_seen_ms: row.last_seen_ms,
                                state,
                                tested_ms: row.tested_ms,
                            },
                        );
                    }
                }
                Err(e) => tracing::warn!(error = %e, "Cursor versions not loaded; each is tested again"),
            }
        }
        Arc::new(Guard {
            store,
            spawner,
            test,
            versions: Mutex::new(versions),
            fault: Mutex::new(None),
            enabled: std::sync::atomic::AtomicBool::new(true),
        })
    }

    /// `[cursor] update_guard`: when off, versions are neither recorded nor tested and every
    /// request is served as configured.
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Test hook: makes `step` fail in the following self-tests (`None`: no fault).
    pub fn set_fault(&self, step: Option<Step>) {
        *self.fault.lock().unwrap_or_else(PoisonError::into_inner) = step;
    }

    /// A request of `version` arrived: records the sighting, starts the self-test for a version
    /// not tested yet, and says how to serve it. Never waits.
    pub fn observe(self: &Arc<Self>, version: &str) -> Verdict {
        let version = clean(version);
        if version.is_empty() || !self.enabled.load(std::sync::atomic::Ordering::Relaxed) {
            return Verdict::Serve;
        }
        let now = crate::clock::now_ms();
        let (verdict, write, start) = {
            let mut map = self.versions.lock().unwrap_or_else(PoisonError::into_inner);
            let entry = map.entry(version.clone()).or_insert_with(|| Entry {
                first_seen_ms: now,
                last_seen_ms: now,
                written_seen_ms: i64::MIN,
                state: TestState::Untested,
                tested_ms: None,
            });
            entry.last_seen_ms = entry.last_seen_ms.max(now);
            let start = entry.state == TestState::Untested;
            if start {
                entry.state = TestState::Running;
                entry.tested_ms = Some(now);
            }
            let write = start || now - entry.written_seen_ms >= SEEN_WRITE_EVERY_MS;
            if write {
                entry.written_seen_ms = entry.last_seen_ms;
            }
            let verdict = if matches!(entry.state, TestState::Failed(_)) { Verdict::Upstream } else { Verdict::Serve };
            (verdict, write.then(|| row(&version, entry)), start)
        };
        if let Some(r) = write {
            self.persist(r);
        }
        if start {
            tracing::info!(version = %version, "new Cursor version: running the self-test");
            self.spawn_test(version);
        }
        verdict
    }

    /// Runs the self-test of `version` again (the user's Retry). `false`: the version was never
    /// seen, or its test is running already.
    pub fn retry(self: &Arc<Self>, version: &str) -> bool {
        let now = crate::clock::now_ms();
        let r = {
            let mut map = self.versions.lock().unwrap_or_else(PoisonError::into_inner);
            let Some(entry) = map.get_mut(version) else { return false };
            if entry.state == TestState::Running {
                return false;
            }
            entry.state = TestState::Running;
            entry.tested_ms = Some(now);
            row(version, entry)
        };
        self.persist(r);
        tracing::info!(version, "Cursor self-test retried");
        self.spawn_test(version.to_owned());
        true
    }

    /// Every version seen, the most recently seen first.
    pub fn versions(&self) -> Vec<CursorVersionRow> {
        let map = self.versions.lock().unwrap_or_else(PoisonError::into_inner);
        let mut rows: Vec<CursorVersionRow> = map.iter().map(|(v, e)| row(v, e)).collect();
        rows.sort_by(|a, b| b.last_seen_ms.cmp(&a.last_seen_ms).then_with(|| a.version.cmp(&b.version)));
        rows
    }

    /// The test state of `version`, if it was seen.
    pub fn state(&self, version: &str) -> Option<TestState> {
        self.versions.lock().unwrap_or_else(PoisonError::into_inner).get(version).map(|e| e.state.clone())
    }

    /// Runs the self-test in the background. A result that arrives once shutdown has begun is
    /// not recorded: the test's own parts (its provider, its runs) are being cancelled then, so a
    /// failure says nothing about the version, and recording it would pass every later request
    /// of that version through to Cursor's servers. The row stays `running`, so the version is
    /// tested again when it is next seen.
    fn spawn_test(self: &Arc<Self>, version: String) {
        let guard = self.clone();
        let fault = *self.fault.lock().unwrap_or_else(PoisonError::into_inner);
        let fut = self.test.run(fault);
        let token = self.spawner.root_token().child_token();
        let stopping = token.clone();
        self.spawner.spawn(token, async move {
            let result = fut.await;
            if stopping.is_cancelled() {
                tracing::debug!(version, "Cursor self-test interrupted by shutdown; it runs again next time");
                return;
            }
            guard.finish(&version, result);
        });
    }

    fn finish(&self, version: &str, result: SelfTestResult) {
        let now = crate::clock::now_ms();
        let r = {
            let mut map = self.versions.lock().unwrap_or_else(PoisonError::into_inner);
            let Some(entry) = map.get_mut(version) else { return };
            match &result {
                Ok(()) => tracing::info!(version, "Cursor self-test passed"),
                Err(f) => tracing::warn!(
                    version,
                    step = f.step.as_str(),
                    detail = %f.detail,
                    "Cursor self-test failed: this Cursor version is passed through to Cursor's servers until Retry"
                ),
            }
            entry.state = match result {
                Ok(()) => TestState::Passed,
                Err(f) => TestState::Failed(f),
            };
            entry.tested_ms = Some(now);
            row(version, entry)
        };
        self.persist(r);
    }

    fn persist(&self, row: CursorVersionRow) {
        if let Some(s) = &self.store {
            // Queued; a full queue drops the write (the memory state stays right).
            drop(s.conversation(ConversationOp::CursorVersion(row)));
        }
    }
}

/// The version as recorded: printable ASCII, at most [`MAX_VERSION_LEN`] characters.
fn clean(version: &str) -> String {
    version.trim().chars().filter(|c| c.is_ascii_graphic()).take(MAX_VERSION_LEN).collect()
}

fn state_of(row: &CursorVersionRow) -> TestState {
    match row.test_status.as_deref() {
        Some("passed") => TestState::Passed,
        Some("failed") => TestState::Failed(StepFailure {
            step: row.failed_step.as_deref().and_then(Step::parse).unwrap_or(Step::ModelList),
            detail: row.detail.clone().unwrap_or_default(),
        }),
        // `running`: a shutdown interrupted it; tested again when the version is next seen.
        _ => TestState::Untested,
    }
}

fn row(version: &str, e: &Entry) -> CursorVersionRow {
    let (status, step, detail) = match &e.state {
        TestState::Untested => (None, None, None),
        TestState::Running => (Some("running"), None, None),
        TestState::Passed => (Some("passed"), None, None),
        TestState::Failed(f) => (Some("failed"), Some(f.step.as_str().to_owned()), Some(f.detail.clone())),
    };
    CursorVersionRow {
        version: version.to_owned(),
        first_seen_ms: e.first_seen_ms,
        last_seen_ms: e.last_seen_ms,
        test_status: status.map(str::to_owned),
        failed_step: step,
        detail,
        tested_ms: e.tested_ms,
    }
}

#[cfg(test)]
mod tests;
