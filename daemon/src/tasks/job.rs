//! Handlers of the `job.*` methods: list, status, bounded wait and cancel of the daemon's jobs
//! (builds and reviewer runs).

use std::sync::Arc;
use std::time::Duration;

use scafld_protocol::ErrorKind;
use scafld_protocol::methods as m;

use crate::daemon::Daemon;
use crate::domain::job::{JobKind, JobRecord};
use crate::error::{RpcError, RpcResult};
use crate::jobs::{self, unknown_job};

pub async fn list(daemon: &Daemon, p: m::JobListParams) -> RpcResult<m::JobListResult> {
    let ws = match p.root {
        Some(root) => Some(daemon.workspace_to_read(&root).await?),
        None => None,
    };
    let mut roots = roots_now(daemon);
    if let Some(ws) = &ws {
        // The folder asked about is where its own jobs' workspace is now.
        for id in [&ws.id, &ws.range.id] {
            roots.insert(id.clone(), ws.root.display().to_string());
        }
    }
    let jobs = daemon
        .jobs
        .all(daemon.store())
        .iter()
        .filter(|j| ws.as_ref().is_none_or(|ws| ws.owns(&j.workspace_id)))
        .map(|j| shown(j, &roots))
        .collect();
    Ok(m::JobListResult { jobs })
}

/// Where each workspace the daemon records is now: the folder on record for its id, which
/// follows a move (the workspace opened at its new folder is recorded there).
fn roots_now(daemon: &Daemon) -> std::collections::HashMap<String, String> {
    let records = daemon.store().workspaces().unwrap_or_default();
    records.into_iter().map(|record| (record.id, record.root)).collect()
}

/// `job` as a reply shows it: its `root` is its workspace's folder now (`roots`), not the one
/// it ran in when that workspace was moved since; a job of a workspace on record nowhere keeps
/// the folder it ran in. A build's outcome names the same folder: its diagnostics, written
/// where the workspace went, are relative to it.
fn shown(job: &JobRecord, roots: &std::collections::HashMap<String, String>) -> m::JobInfo {
    let mut info = jobs::info(job);
    if let Some(root) = roots.get(&job.workspace_id) {
        info.root = root.clone();
    }
    if let Some(outcome) = info.outcome.as_mut() {
        outcome.root = info.root.clone();
    }
    info
}

/// The outcome of a finished build `job` as replies show it ([`shown`]).
pub fn outcome(daemon: &Daemon, job: &JobRecord) -> Option<m::BuildOutcome> {
    shown(job, &roots_now(daemon)).outcome
}

pub fn status(daemon: &Daemon, p: m::JobParams) -> RpcResult<m::JobInfo> {
    daemon
        .jobs
        .get(daemon.store(), &p.job_id)
        .map(|r| shown(&r, &roots_now(daemon)))
        .ok_or_else(|| unknown_job(&p.job_id))
}

pub async fn wait(daemon: &Daemon, p: m::JobWaitParams) -> RpcResult<m::JobInfo> {
    let timeout = Duration::from_secs_f64(p.timeout_seconds.clamp(0.0, 3600.0));
    let record = daemon
        .jobs
        .wait(daemon.store(), &p.job_id, timeout, daemon.shutdown_token())
        .await
        .ok_or_else(|| unknown_job(&p.job_id))?;
    if !record.state.is_finished() && daemon.shutdown_token().is_cancelled() {
        return Err(stopped_before_end(&record));
    }
    Ok(shown(&record, &roots_now(daemon)))
}

/// The answer to a wait on `job` that the daemon's orderly stop cut short. The stop ends the
/// job (it kills its commands and records nothing; the next start records it abandoned), so
/// every wait on it says so at once, the same way whenever the stop comes, instead of running
/// on until the connection is closed under it.
pub fn stopped_before_end(job: &JobRecord) -> RpcError {
    let again = match job.kind {
        JobKind::Acceptance => format!("; `scafld build {}` runs the step again", job.task_id),
        _ => String::new(),
    };
    RpcError::new(
        ErrorKind::ShuttingDown,
        format!("the daemon is shutting down: job {} had not finished, and the stop ends it", job.id),
    )
    .with_hint(format!("once the daemon runs again, `scafld job status {}` shows how it ended{again}", job.id))
    .with_details(serde_json::json!({"job_id": job.id, "state": job.state}))
}

/// Cancel a job; a reviewer job's session learns of it. A job that had already finished is
/// left as it ended and the answer says so (`invalid_state`, with its state in the details):
/// nothing was cancelled.
pub async fn cancel(daemon: &Arc<Daemon>, p: m::JobParams) -> RpcResult<m::JobInfo> {
    let before = daemon.jobs.get(daemon.store(), &p.job_id).ok_or_else(|| unknown_job(&p.job_id))?;
    if let Some(root) = &p.root {
        let ws = daemon.workspace_to_read(root).await?;
        if !ws.owns(&before.workspace_id) {
            return Err(RpcError::new(
                ErrorKind::NotFound,
                format!(
                    "{} is a job of workspace {} at {}, not of this workspace ({}); nothing was cancelled",
                    before.id,
                    before.workspace_id,
                    before.root,
                    ws.root.display()
                ),
            )
            .with_hint(format!(
                "to cancel it, run `scafld --root {} job cancel {}`",
                scafld_protocol::cli::shell_word(&before.root),
                before.id
            ))
            .with_details(
                serde_json::json!({"job_id": before.id, "workspace_id": before.workspace_id, "root": before.root}),
            ));
        }
    }
    if before.state.is_finished() {
        let when = before.finished_at.as_deref().map(|at| format!(" at {at}")).unwrap_or_default();
        return Err(RpcError::new(
            ErrorKind::InvalidState,
            format!("{} had already finished ({}{when}); nothing was cancelled", before.id, before.state),
        )
        .with_hint(format!("`scafld job status {}` shows how it ended", before.id))
        .with_details(serde_json::json!({"job_id": before.id, "state": before.state})));
    }
    let record = daemon.jobs.cancel(daemon.store(), &p.job_id).ok_or_else(|| unknown_job(&p.job_id))?;
    crate::review::cancelled(daemon, &record).await;
    Ok(shown(&daemon.jobs.get(daemon.store(), &p.job_id).unwrap_or(record), &roots_now(daemon)))
}
