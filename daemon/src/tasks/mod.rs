//! Handlers of the `task.*` methods: resolve the workspace and the task, call the domain, and
//! (for writes) project the result back into the spec file.

mod delegated_harden;
mod exec;
mod finalize;
pub mod job;
mod read;
pub(crate) mod review;
mod verify;
mod write;

pub(crate) use crate::ledger::{projected_spec, record, spec_file, target_for, write_error, write_projection};
pub use exec::{approve, archive, build, recover_jobs, session};
pub use finalize::finalize;
pub use read::{check, handoff, list, report, status, validate, validate_all};
pub use review::{complete, decide, review};
pub use verify::verify;
pub use write::{harden, plan, reconcile};

use std::sync::Arc;

use scafld_protocol::ErrorKind;
use scafld_protocol::methods::Diagnostic as WireDiagnostic;

use crate::daemon::Daemon;
use crate::domain::spec::{Diagnostic, Severity};
use crate::domain::task_id::TaskId;
use crate::error::{RpcError, RpcResult};
use crate::workspace::Workspace;
use crate::workspace::index::{LoadedSpec, SpecEntry};
use crate::workspace::specfile;

/// Validate a task id from any caller.
pub fn task_id(raw: &str) -> RpcResult<TaskId> {
    TaskId::parse(raw).map_err(|e| {
        RpcError::new(ErrorKind::InvalidInput, e.to_string()).with_hint("task ids look like `add-greeting-flag`")
    })
}

/// The workspace and the indexed spec of `task`, re-read first if the file changed on disk.
pub(crate) async fn entry(daemon: &Daemon, root: &str, raw_task: &str) -> RpcResult<(Arc<Workspace>, LoadedSpec)> {
    let task = task_id(raw_task)?;
    let ws = daemon.workspace(root).await?;
    let entry = fresh_entry(daemon, &ws, task.as_str())?;
    import_original_session(daemon, &ws, task.as_str()).await?;
    Ok((ws, entry))
}

/// The indexed spec of `task` as the file is now (stat first, re-read if it changed). A
/// transition calls it again once it holds the task's lock, so it decides on the state as it
/// is then, not as it was before another command finished.
pub(crate) fn fresh_entry(daemon: &Daemon, ws: &Workspace, task: &str) -> RpcResult<LoadedSpec> {
    let changed = crate::sync::write(&ws.index).sync_task(task);
    if let Some(task_id) = changed {
        daemon.publish_task_changed(ws, &task_id, "hand_edit");
    }
    resolve_leftover(daemon, ws, task)?;
    crate::sync::write(&ws.index).loaded(task).ok_or_else(|| {
        RpcError::new(
            ErrorKind::NotFound,
            format!("no spec for task `{task}` under {}/.scafld/specs", ws.root.display()),
        )
        .with_hint(format!("create it with `scafld plan {task}`, or see `scafld list`"))
    })
}

/// A move interrupted by a crash leaves the spec in two folders (the new copy is written
/// before the old one is removed). When the ledger says which status is current and exactly
/// one copy is in that status's folder, the other is a leftover: it is moved aside to
/// `.scafld/runs/<task>/superseded/` (never deleted) and the task reads again.
///
/// Only with the task's lock: a move in progress (new copy written, old one not yet removed)
/// looks exactly like a crash's leftover. While anyone holds the lock nothing is touched; the
/// next call resolves a real leftover.
fn resolve_leftover(daemon: &Daemon, ws: &Workspace, task: &str) -> RpcResult<()> {
    let duplicate =
        || crate::sync::read(&ws.index).get(task).and_then(|e| Some((e.path.clone(), e.duplicate.clone()?)));
    if duplicate().is_none() {
        return Ok(());
    }
    let lock = daemon.jobs.task_lock(ws, task);
    let Ok(_no_move_in_progress) = lock.try_lock() else { return Ok(()) };
    // Seen again with the lock held: a move that just finished leaves no duplicate.
    crate::sync::write(&ws.index).sync_task(task);
    let Some((current, other)) = duplicate() else { return Ok(()) };
    let entries = daemon.store().ledger(&ws.id, task).map_err(RpcError::internal)?;
    let Some(status) = crate::domain::ledger::replay(&entries).status else { return Ok(()) };
    let folder_of = |p: &std::path::Path| specfile::folder_of(&ws.root, p);
    let expected = Some(crate::domain::lifecycle::Folder::of(status));
    let leftover = match (folder_of(&current) == expected, folder_of(&other) == expected) {
        (true, false) => other,
        (false, true) => current,
        _ => return Ok(()), // not decidable from the ledger: the user chooses
    };
    let aside = ws.root.join(".scafld/runs").join(task).join("superseded");
    crate::workspace::layout::create_real_dir(&aside).map_err(super::daemon::workspace_io_error)?;
    let name =
        format!("{}-{}.md", folder_of(&leftover).map(|f| f.dir_name()).unwrap_or("spec"), crate::clock::now_rfc3339());
    std::fs::rename(&leftover, aside.join(&name)).map_err(super::daemon::workspace_io_error)?;
    tracing::warn!(task, leftover = %leftover.display(), "moved an interrupted move's leftover copy aside");
    let mut index = crate::sync::write(&ws.index);
    index.refresh(&leftover);
    index.sync_task(task);
    drop(index);
    daemon.publish_task_changed(ws, task, "recovery");
    Ok(())
}

/// Largest original session.json imported (real ones are kilobytes).
const MAX_SESSION_BYTES: u64 = 64 << 20;

/// A task of the original tool has `.scafld/runs/<task-id>/session.json` and no ledger here:
/// import it once, in one atomic batch under the task's lock (the file is left untouched).
async fn import_original_session(daemon: &Daemon, ws: &Workspace, task: &str) -> RpcResult<()> {
    let path = ws.root.join(".scafld/runs").join(task).join("session.json");
    if !path.is_file() || !daemon.store().ledger(&ws.id, task).map_err(RpcError::internal)?.is_empty() {
        return Ok(());
    }
    let lock = daemon.jobs.task_lock(ws, task);
    let _guard = lock.lock().await;
    let invalid = |why: String| {
        RpcError::new(ErrorKind::WorkspaceError, format!("cannot import {}: {why}", ws.relative(&path)))
            .with_hint("fix or move the file; it is only read, never changed")
    };
    if std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0) > MAX_SESSION_BYTES {
        return Err(invalid(format!("it is larger than {} MiB", MAX_SESSION_BYTES >> 20)));
    }
    let text = std::fs::read_to_string(&path).map_err(|e| invalid(e.to_string()))?;
    let document: serde_json::Value = serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
    let now = crate::clock::now_rfc3339();
    let events: Vec<(String, crate::domain::ledger::LedgerEvent)> = crate::domain::import::events(&document)
        .map_err(invalid)?
        .into_iter()
        .map(|(at, event)| (if at.is_empty() { now.clone() } else { at }, event))
        .collect();
    let imported = daemon.store().import(&ws.id, task, events).map_err(RpcError::internal)?;
    if imported > 0 {
        tracing::info!(task, imported, "imported the original session ledger from {}", path.display());
    }
    Ok(())
}

pub(crate) fn wire(d: &Diagnostic) -> WireDiagnostic {
    WireDiagnostic { line: d.line, severity: d.severity, message: d.message.clone() }
}

/// Every error of an entry (read, duplicate and parse errors) as wire diagnostics.
pub(crate) fn entry_errors(entry: &SpecEntry) -> Vec<WireDiagnostic> {
    let mut errors: Vec<WireDiagnostic> = entry.listing.errors().map(wire).collect();
    if let Some(e) = &entry.read_error {
        errors.insert(0, WireDiagnostic { line: 0, severity: Severity::Error, message: e.clone() });
    }
    if let Some(other) = &entry.duplicate {
        errors.insert(
            0,
            WireDiagnostic {
                line: 0,
                severity: Severity::Error,
                message: format!("the task also exists at {}; keep one of the two files", other.display()),
            },
        );
    }
    errors
}

/// Refuse to operate on a spec with errors, listing them.
pub(crate) fn require_valid(ws: &Workspace, entry: &SpecEntry) -> RpcResult<()> {
    let errors = entry_errors(entry);
    if errors.is_empty() {
        return Ok(());
    }
    let first = errors.first().map(|d| d.message.clone()).unwrap_or_default();
    Err(RpcError::new(
        ErrorKind::ValidationFailed,
        format!("{} has {} error(s); first: {first}", ws.relative(&entry.path), errors.len()),
    )
    .with_hint(format!("run `scafld validate {}` for every diagnostic", entry.task_id))
    .with_details(serde_json::json!({ "diagnostics": errors })))
}
