//! Commands a front end sends to a running run, and what became of each.
//!
//! [`RunHandle::send`] answers at once from the run's phase and the message ids it has seen:
//!
//! | command | Running | Finalizing | Ended |
//! |---|---|---|---|
//! | `InsertMessages` | Applied (after the current step) / Duplicate | RunClosing | RunEnded |
//! | `BreakMessages` | Applied (current step canceled) / Duplicate | RunClosing | RunEnded |
//! | `Cancel` | Applied | RunClosing | RunEnded |
//!
//! A command for another run (`target` ≠ this run's id) is `StaleTarget` and ignored.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use crate::model::Entry;

#[derive(Debug, Clone, PartialEq)]
pub enum RunCommand {
    /// Messages appended once the current step (model call and its tool round) completes.
    InsertMessages(Vec<Entry>),
    /// Cancels the current step (model call or tool round), then appends the messages and
    /// re-enters the model cycle. The run continues.
    BreakMessages(Vec<Entry>),
    /// Ends the run as canceled.
    Cancel { reason: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandResult {
    Applied,
    /// Every message of the batch was delivered already.
    Duplicate,
    RunClosing,
    RunEnded,
    StaleTarget,
}

pub(crate) const RUNNING: u8 = 0;
pub(crate) const FINALIZING: u8 = 1;
pub(crate) const ENDED: u8 = 2;

/// The front end's side: sends commands to one run.
#[derive(Debug, Clone)]
pub struct RunHandle {
    run_id: String,
    tx: mpsc::UnboundedSender<RunCommand>,
    phase: Arc<AtomicU8>,
    ids: Arc<Mutex<HashSet<String>>>,
}

/// The run's side of the command channel.
#[derive(Debug)]
pub struct RunInbox {
    pub(crate) rx: mpsc::UnboundedReceiver<RunCommand>,
    pub(crate) phase: Arc<AtomicU8>,
    pub(crate) ids: Arc<Mutex<HashSet<String>>>,
}

impl RunInbox {
    pub(crate) fn set_phase(&self, phase: u8) {
        self.phase.store(phase, Ordering::SeqCst);
    }

    /// Records ids appended by the run itself, so a later delivery of the same id is a duplicate.
    pub(crate) fn remember(&self, id: &str) {
        if let Ok(mut ids) = self.ids.lock() {
            ids.insert(id.to_owned());
        }
    }
}

/// A command channel for run `run_id`; `known` are the message ids the transcript holds already.
pub fn command_channel<'a>(run_id: &str, known: impl IntoIterator<Item = &'a str>) -> (RunHandle, RunInbox) {
    let (tx, rx) = mpsc::unbounded_channel();
    let phase = Arc::new(AtomicU8::new(RUNNING));
    let ids = Arc::new(Mutex::new(known.into_iter().map(str::to_owned).collect::<HashSet<_>>()));
    (RunHandle { run_id: run_id.to_owned(), tx, phase: phase.clone(), ids: ids.clone() }, RunInbox { rx, phase, ids })
}

impl RunHandle {
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Whether the run has returned its outcome.
    pub fn is_ended(&self) -> bool {
        self.phase.load(Ordering::SeqCst) == ENDED
    }

    /// Delivers `cmd` to the run (see the module table). `target` is the run the sender meant.
    pub fn send(&self, target: Option<&str>, cmd: RunCommand) -> CommandResult {
        if target.is_some_and(|t| t != self.run_id) {
            return CommandResult::StaleTarget;
        }
        match self.phase.load(Ordering::SeqCst) {
            RUNNING => {}
            FINALIZING => return CommandResult::RunClosing,
            _ => return CommandResult::RunEnded,
        }
        let cmd = match cmd {
            RunCommand::InsertMessages(batch) => match self.fresh(batch) {
                Some(batch) => RunCommand::InsertMessages(batch),
                None => return CommandResult::Duplicate,
            },
            RunCommand::BreakMessages(batch) => match self.fresh(batch) {
                Some(batch) => RunCommand::BreakMessages(batch),
                None => return CommandResult::Duplicate,
            },
            cancel @ RunCommand::Cancel { .. } => cancel,
        };
        match self.tx.send(cmd) {
            Ok(()) => CommandResult::Applied,
            Err(_) => CommandResult::RunEnded,
        }
    }

    /// The entries of `batch` whose ids were not seen yet (recording them), or `None` when none.
    fn fresh(&self, batch: Vec<Entry>) -> Option<Vec<Entry>> {
        let Ok(mut ids) = self.ids.lock() else { return None };
        let fresh: Vec<Entry> = batch.into_iter().filter(|e| ids.insert(e.id.clone())).collect();
        (!fresh.is_empty()).then_some(fresh)
    }
}
