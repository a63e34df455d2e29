//! Handlers of the `job.*` methods: list, status, bounded wait and cancel of the daemon's jobs
//! (builds and reviewer runs).

use std::sync::Arc;
use std::time::Duration;

use scafld_protocol::methods as m;

use crate::daemon::Daemon;
use crate::error::RpcResult;
use crate::jobs::{self, unknown_job};

pub async fn list(daemon: &Daemon, p: m::JobListParams) -> RpcResult<m::JobListResult> {
    let ws = match p.root {
        Some(root) => Some(daemon.workspace(&root).await?),
        None => None,
    };
    let jobs = daemon
        .jobs
        .all()
        .iter()
        .filter(|j| ws.as_ref().is_none_or(|ws| ws.owns(&j.workspace_id)))
        .map(jobs::info)
        .collect();
    Ok(m::JobListResult { jobs })
}

pub fn status(daemon: &Daemon, p: m::JobParams) -> RpcResult<m::JobInfo> {
    daemon.jobs.get(&p.job_id).map(|r| jobs::info(&r)).ok_or_else(|| unknown_job(&p.job_id))
}

pub async fn wait(daemon: &Daemon, p: m::JobWaitParams) -> RpcResult<m::JobInfo> {
    let timeout = Duration::from_secs_f64(p.timeout_seconds.clamp(0.0, 3600.0));
    daemon.jobs.wait(&p.job_id, timeout).await.map(|r| jobs::info(&r)).ok_or_else(|| unknown_job(&p.job_id))
}

/// Cancel a job; a reviewer job's session learns of it.
pub async fn cancel(daemon: &Arc<Daemon>, p: m::JobParams) -> RpcResult<m::JobInfo> {
    let record = daemon.jobs.cancel(daemon.store(), &p.job_id).ok_or_else(|| unknown_job(&p.job_id))?;
    crate::review::cancelled(daemon, &record).await;
    Ok(jobs::info(&daemon.jobs.get(&p.job_id).unwrap_or(record)))
}
