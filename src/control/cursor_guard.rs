//! The Cursor update guard as the UI and the tray see it: the versions seen with their self-test
//! results, and Retry. The guard itself lives in the Cursor backend; `app` hands the service a
//! [`CursorGuardPort`] onto it (control does not depend on `cursor`).

use std::sync::Arc;

use crate::control::{ControlError, ControlService, dto};
use crate::store::CursorVersionRow;

/// What the control service needs of the update guard.
pub trait CursorGuardPort: Send + Sync + std::fmt::Debug {
    /// Every version seen, the most recently seen first.
    fn versions(&self) -> Vec<CursorVersionRow>;
    /// Reruns the self-test of `version`; `false` when it was never seen or its test runs.
    fn retry(&self, version: &str) -> bool;
}

/// The tray's line for a failed version.
pub fn notice(version: &str) -> String {
    format!("Cursor {version}: self-test failed — using Cursor's servers")
}

fn to_dto(row: CursorVersionRow) -> dto::CursorVersion {
    let status = match row.test_status.as_deref() {
        Some("running") => dto::CursorTestStatus::Running,
        Some("passed") => dto::CursorTestStatus::Passed,
        Some("failed") => dto::CursorTestStatus::Failed,
        _ => dto::CursorTestStatus::Untested,
    };
    dto::CursorVersion {
        notice: (status == dto::CursorTestStatus::Failed).then(|| notice(&row.version)),
        version: row.version,
        first_seen_ms: row.first_seen_ms,
        last_seen_ms: row.last_seen_ms,
        status,
        failed_step: row.failed_step,
        detail: row.detail,
        tested_ms: row.tested_ms,
    }
}

impl ControlService {
    fn guard(&self) -> Option<&Arc<dyn CursorGuardPort>> {
        self.inner.cursor_guard.as_ref()
    }

    /// The Cursor versions seen and their self-test results.
    pub async fn cursor_versions(&self) -> Result<dto::CursorGuardReport, ControlError> {
        Ok(match self.guard() {
            Some(g) => {
                dto::CursorGuardReport { available: true, versions: g.versions().into_iter().map(to_dto).collect() }
            }
            None => dto::CursorGuardReport { available: false, versions: Vec::new() },
        })
    }

    /// Reruns a version's self-test; answers the versions as they are right after (the version's
    /// status is `running`).
    pub async fn retry_cursor_version(&self, version: &str) -> Result<dto::CursorGuardReport, ControlError> {
        let Some(g) = self.guard() else {
            return Err(ControlError::Unavailable("the Cursor proxy is not running".to_owned()));
        };
        if !g.retry(version) {
            let known = g.versions().iter().any(|v| v.version == version);
            return Err(if known {
                ControlError::Conflict(format!("the self-test of Cursor {version} is running"))
            } else {
                ControlError::NotFound(format!("Cursor {version} was never seen"))
            });
        }
        self.cursor_versions().await
    }
}
