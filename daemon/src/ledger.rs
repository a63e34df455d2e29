//! The task ledger service: the one way events reach a task's ledger (`record`: append, flush,
//! then project the spec; `record_ending`: the same with a job's end in the flush; a build
//! step gathers its results and records them with its conclusion), and the projection of the
//! ledger onto the spec file. Below the handlers (`tasks/`, `review/`), above the domain; it
//! calls neither handler module.

use std::path::PathBuf;

use scafld_protocol::ErrorKind;

use crate::clock;
use crate::daemon::Daemon;
use crate::domain::job::JobRecord;
use crate::domain::ledger::{self, LedgerEntry, LedgerEvent};
use crate::domain::lifecycle::Status;
use crate::domain::spec::project::project;
use crate::domain::spec::{Parsed, Spec, parse};
use crate::error::{RpcError, RpcResult};
use crate::workspace::Workspace;
use crate::workspace::specfile::{self, InPlace};

fn internal(e: impl std::fmt::Display) -> RpcError {
    RpcError::internal(e)
}

/// Append `events` to the task's ledger, then write the spec as the whole ledger says it is.
pub fn record(
    daemon: &Daemon,
    ws: &Workspace,
    task: &str,
    events: Vec<LedgerEvent>,
    cause: &str,
) -> RpcResult<Vec<LedgerEntry>> {
    let written = daemon.store().append(&ws.id, task, &clock::now_rfc3339(), events).map_err(internal)?;
    project_from_ledger(daemon, ws, task, cause)?;
    Ok(written)
}

/// [`record`] for the events that end a job: `end` gets the spec and the ledger as the events
/// leave them and returns the job's final record, which reaches the disk in the same flush as
/// the events. The spec's new bytes are written and synced under a temporary name meanwhile,
/// and put in place once the flush is done (never showing what the ledger does not hold).
/// Returns the job's record, for the caller to publish now that the spec says so too, and the
/// spec's rename, whose directory the caller syncs once it has answered (until then a power
/// loss may bring back the previous spec, which the ledger is ahead of). Callers hold the
/// task's lock, so nothing appends in between.
pub async fn record_ending(
    daemon: &Daemon,
    ws: &Workspace,
    task: &str,
    events: Vec<LedgerEvent>,
    cause: &str,
    end: impl FnOnce(&Spec, &[LedgerEntry]) -> JobRecord,
) -> RpcResult<(JobRecord, InPlace)> {
    let mut entries = daemon.store().ledger(&ws.id, task).map_err(internal)?;
    let recorded_at = clock::now_rfc3339();
    let (path, text) = match spec_file(ws, task) {
        Ok(found) => found,
        Err(e) => {
            // A spec that cannot be read still gets the events recorded (then the error): the
            // caller ends the job on its error path, after them.
            daemon.store().append(&ws.id, task, &recorded_at, events).map_err(internal)?;
            return Err(e);
        }
    };
    let first = entries.last().map_or(1, |e| e.seq + 1);
    entries.extend(events.iter().zip(first..).map(|(event, seq)| LedgerEntry {
        seq,
        recorded_at: recorded_at.clone(),
        event: event.clone(),
    }));
    let next = ledger::project(&parse(&text).spec, &entries, &recorded_at);
    let job = end(&next, &entries);
    // A spec that cannot take the projection still gets its events recorded (then the error).
    let rendered = render(ws, &path, &text, &next);
    // Staged, and parsed for the index, while the ledger flushes.
    let staging = rendered.as_ref().ok().and_then(Option::as_ref).map(|r| {
        let (path, target, text) = (path.clone(), r.target.clone(), r.text.clone());
        tokio::task::spawn_blocking(move || {
            specfile::stage_spec(Some(&path), &target, &text).map(|s| (s, parse(&text)))
        })
    });
    let written = daemon.store().append_ending(&ws.id, task, &recorded_at, events, &job).map_err(internal)?;
    let staged = match staging {
        Some(staging) => Some(staging.await.map_err(internal)?.map_err(write_error)?),
        None => None,
    };
    let mut in_place = InPlace::default();
    if written.first().is_some_and(|w| w.seq != first) {
        // Only a caller that broke the lock rule gets here: project what the ledger holds.
        drop(staged);
        project_from_ledger(daemon, ws, task, cause)?;
    } else if let (Some(rendered), Some((staged, parsed))) = (rendered?, staged) {
        let written = staged.written().clone();
        in_place = staged.put_in_place().map_err(write_error)?;
        rendered.announce(daemon, ws, task, cause, Some(parsed), &written);
    }
    Ok((job, in_place))
}

/// Rebuild the spec's runner-owned sections (and its folder) from the ledger.
pub fn project_from_ledger(daemon: &Daemon, ws: &Workspace, task: &str, cause: &str) -> RpcResult<PathBuf> {
    let entries = daemon.store().ledger(&ws.id, task).map_err(internal)?;
    let (path, text) = spec_file(ws, task)?;
    let next = ledger::project(&parse(&text).spec, &entries, &clock::now_rfc3339());
    write_projection(daemon, ws, &path, &text, &next, cause)
}

/// The spec as its ledger says it is (what build decisions are made from).
pub fn projected_spec(daemon: &Daemon, ws: &Workspace, task: &str) -> RpcResult<(Spec, Vec<LedgerEntry>)> {
    let entry = crate::sync::write(&ws.index)
        .loaded(task)
        .ok_or_else(|| RpcError::new(ErrorKind::NotFound, format!("no spec for task `{task}`")))?;
    let entries = daemon.store().ledger(&ws.id, task).map_err(internal)?;
    Ok((ledger::project(&entry.parsed.spec, &entries, &clock::now_rfc3339()), entries))
}

/// The task's spec file and its bytes as they are on disk (writes start from these, not from
/// the index).
pub fn spec_file(ws: &Workspace, task: &str) -> RpcResult<(std::path::PathBuf, String)> {
    let path = crate::sync::read(&ws.index)
        .get(task)
        .map(|e| e.path.clone())
        .ok_or_else(|| RpcError::new(ErrorKind::NotFound, format!("no spec for task `{task}`")))?;
    let unreadable = |e: String| RpcError::new(ErrorKind::WorkspaceError, format!("{}: {e}", ws.relative(&path)));
    let bytes = crate::workspace::index::read_spec(&ws.root, &path).map_err(unreadable)?;
    let text = String::from_utf8(bytes).map_err(|_| unreadable("the spec file is not valid UTF-8".into()))?;
    Ok((path, text))
}

/// Where the spec belongs for its status (archive month from `updated`).
pub fn target_for(ws: &Workspace, task: &str, spec: &Spec) -> std::path::PathBuf {
    let status = spec.status().unwrap_or(Status::Draft);
    let now = crate::clock::now_rfc3339();
    let month = crate::clock::month_of(&spec.front.updated)
        .or_else(|| crate::clock::month_of(&now))
        .unwrap_or("unknown")
        .to_string();
    specfile::target_path(&ws.root, task, status, &month)
}

/// Project `next` into `text` (the bytes at `path`) and write it where its status belongs;
/// nothing is written when neither the bytes nor the place change.
pub fn write_projection(
    daemon: &Daemon,
    ws: &Workspace,
    path: &std::path::Path,
    text: &str,
    next: &Spec,
    cause: &str,
) -> RpcResult<std::path::PathBuf> {
    let Some(rendered) = render(ws, path, text, next)? else {
        return Ok(path.to_path_buf());
    };
    let written = specfile::write_spec(Some(path), &rendered.target, &rendered.text).map_err(write_error)?;
    rendered.announce(daemon, ws, &next.front.task_id, cause, None, &written);
    Ok(rendered.target)
}

/// A projection that changes the spec: where it belongs now and its new bytes.
struct Rendered {
    /// Where the spec was.
    from: PathBuf,
    target: PathBuf,
    text: String,
}

/// `next` projected into `text` (the bytes at `path`); `None` when neither the bytes nor the
/// place change.
fn render(ws: &Workspace, path: &std::path::Path, text: &str, next: &Spec) -> RpcResult<Option<Rendered>> {
    let new_text = project(text, next).map_err(|e| RpcError::new(ErrorKind::ValidationFailed, e.to_string()))?;
    let target = target_for(ws, &next.front.task_id, next);
    Ok((target != path || new_text != text).then_some(Rendered { from: path.to_path_buf(), target, text: new_text }))
}

impl Rendered {
    /// The written spec, told to the index (`parsed`: its text, parsed already; `written`: the
    /// file's metadata as written) and to subscribers.
    fn announce(
        &self,
        daemon: &Daemon,
        ws: &Workspace,
        task: &str,
        cause: &str,
        parsed: Option<Parsed>,
        written: &std::fs::Metadata,
    ) {
        let parsed = parsed.unwrap_or_else(|| parse(&self.text));
        crate::sync::write(&ws.index).record_parsed(&self.target, parsed, Some(&self.from), written);
        daemon.publish_task_changed(ws, task, cause);
    }
}

pub fn write_error(e: std::io::Error) -> RpcError {
    let kind = if e.kind() == std::io::ErrorKind::AlreadyExists {
        ErrorKind::AlreadyExists
    } else {
        ErrorKind::WorkspaceError
    };
    RpcError::new(kind, format!("cannot write the spec: {e}"))
}

/// The host agent that last built the task (the implementer a reviewer must differ from).
pub fn implementer(entries: &[crate::domain::ledger::LedgerEntry]) -> Option<String> {
    entries.iter().rev().find_map(|e| match &e.event {
        LedgerEvent::Implementer { host_agent, .. } => Some(host_agent.clone()),
        _ => None,
    })
}
