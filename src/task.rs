//! The only code that spawns tasks: onto the engine's [`TaskTracker`], each racing a
//! cancellation token, so shutdown can cancel everything and wait for it to drain.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Spawns onto the engine's tracker. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Spawner {
    tracker: TaskTracker,
    root: CancellationToken,
}

impl Spawner {
    pub fn new() -> Spawner {
        Spawner { tracker: TaskTracker::new(), root: CancellationToken::new() }
    }

    /// The engine's root token; listeners and calls take child tokens of it.
    pub fn root_token(&self) -> &CancellationToken {
        &self.root
    }

    /// Runs `fut` until it finishes or `token` is cancelled, whichever comes first.
    pub fn spawn<F>(&self, token: CancellationToken, fut: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.tracker.spawn(async move {
            tokio::select! {
                biased;
                () = token.cancelled() => {}
                () = fut => {}
            }
        });
    }

    /// Runs `fut` to completion; it watches the root token itself (listeners with graceful
    /// shutdown). Shutdown still waits for it.
    pub fn spawn_graceful<F>(&self, fut: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.tracker.spawn(fut);
    }

    /// Cancels every task and waits up to `grace` for them to finish. Returns false on timeout.
    pub async fn shutdown(&self, grace: Duration) -> bool {
        self.root.cancel();
        self.tracker.close();
        tokio::time::timeout(grace, self.tracker.wait()).await.is_ok()
    }

    /// Number of tasks still running (for tests and diagnostics).
    pub fn len(&self) -> usize {
        self.tracker.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tracker.is_empty()
    }
}

impl Default for Spawner {
    fn default() -> Spawner {
        Spawner::new()
    }
}
