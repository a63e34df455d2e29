//! What a review session looks like from outside: `review.status` (reviewers, liveness,
//! progress) and the incremental `review_report.md` rebuilt from the checkpoints.

use std::sync::Arc;

use scafld_protocol::ErrorKind;
use scafld_protocol::methods::{self as m, ReviewerProgress, SessionState};
use tracing::warn;

use super::find;
use super::runner::{self, now_ms};
use crate::daemon::Daemon;
use crate::domain::consensus::{self, ReportPart};
use crate::domain::job::{JobRecord, JobState, SessionRecord, Subject};
use crate::error::{RpcError, RpcResult};

/// `review.status`: a session's reviewers with liveness and progress.
pub async fn status(daemon: &Arc<Daemon>, p: m::ReviewStatusParams) -> RpcResult<m::ReviewStatusResult> {
    let key = p.session_key.as_deref();
    let again = |key: &str| format!("status --session-key {key}");
    let ws = super::session_workspace(daemon, &p.root, key, daemon.workspace_to_read(&p.root).await, again).await?;
    let task = match &p.task_id {
        Some(t) => Some(
            crate::domain::task_id::TaskId::parse(t)
                .map_err(|e| RpcError::new(ErrorKind::InvalidInput, e.to_string()))?,
        ),
        None => None,
    };
    let session = find(daemon, &ws, key, task.as_ref().map(|t| t.as_str()))?;
    let now = now_ms();
    let lease_ms = |job: &JobRecord| {
        job.review
            .as_ref()
            .and_then(|w| w.lease.as_ref())
            .map(|l| l.seconds.saturating_mul(1000))
            .unwrap_or(runner::HEARTBEAT_LEASE_MS)
    };
    let reviewers = session
        .reviewers
        .iter()
        .zip(&session.job_ids)
        .filter_map(|(name, id)| {
            let job = daemon.jobs.get(daemon.store(), id)?;
            let work = job.review.clone().unwrap_or_default();
            let running = job.state == JobState::Running;
            let age = (running && work.heartbeat_ms > 0).then(|| now.saturating_sub(work.heartbeat_ms));
            Some(ReviewerProgress {
                reviewer: name.clone(),
                job_id: id.clone(),
                state: job.state,
                attempt: job.attempt,
                liveness: age.map(|a| consensus::liveness(a, lease_ms(&job)).to_string()).unwrap_or_default(),
                heartbeat_age_seconds: age.map(|a| a as f64 / 1000.0),
                worker_id: work.lease.as_ref().map(|l| l.worker_id.clone()),
                phase: if work.checkpoint.phase.is_empty() {
                    job.state.as_str().into()
                } else {
                    work.checkpoint.phase.clone()
                },
                // A reviewer that answered judged the whole packet, checkpoints or not.
                files_reviewed: if work.dossier.is_some() {
                    session.files.len()
                } else {
                    work.checkpoint.reviewed.len()
                },
                findings_so_far: consensus::findings_so_far(&work.checkpoint),
                files_remaining: if work.dossier.is_some() {
                    Vec::new()
                } else {
                    consensus::remaining(&session.files, &work.checkpoint)
                },
                preflight: work.checkpoint.preflight.clone(),
                verdict: work
                    .dossier
                    .map(|d| consensus::reviewer_verdict(&d, consensus::Question::of(&session.subject))),
                error: work.failure.map(|f| f.message),
            })
        })
        .collect();
    let gate = session.result.as_ref().and_then(|r| r.gate);
    Ok(m::ReviewStatusResult {
        session_key: session.key.clone(),
        task_id: session.task().unwrap_or_default().to_string(),
        range: session.subject.range().to_string(),
        iteration: session.iteration,
        approval: session.approval,
        state: match (&session.result, gate) {
            (None, _) => SessionState::Running,
            (Some(_), Some(m::GateState::AwaitingApproval)) => SessionState::AwaitingApproval,
            (Some(_), Some(m::GateState::Unrecorded)) => SessionState::Unrecorded,
            (Some(_), _) => SessionState::Resolved,
        },
        files_total: session.files.len(),
        reviewers,
        report_path: session.report_path.clone(),
    })
}

/// Rewrite `review_report.md` from the session's checkpoints.
pub fn write_report(daemon: &Daemon, session: &SessionRecord) {
    let jobs: Vec<Option<JobRecord>> = session.job_ids.iter().map(|id| daemon.jobs.get(daemon.store(), id)).collect();
    let empty = Default::default();
    let parts: Vec<ReportPart<'_>> = session
        .reviewers
        .iter()
        .zip(&jobs)
        .map(|(name, job)| {
            let work = job.as_ref().and_then(|j| j.review.as_ref());
            ReportPart {
                reviewer: name,
                checkpoint: work.map(|w| &w.checkpoint).unwrap_or(&empty),
                verdict: work.and_then(|w| {
                    w.dossier
                        .as_ref()
                        .map(|d| {
                            let question = consensus::Question::of(&session.subject);
                            format!("{} - {}", consensus::reviewer_verdict(d, question), d.summary.trim())
                        })
                        .or_else(|| w.failure.as_ref().map(|f| format!("NO VERDICT - {}", f.message)))
                }),
            }
        })
        .collect();
    let target = match &session.subject {
        Subject::Task(task) => format!("Task: {task}"),
        Subject::Range(range) => format!("Range: {range}"),
        Subject::Template { name, .. } => format!("Template: {name}"),
    };
    let mut text = consensus::report(
        &format!(
            "{target} | Session: {} | Iteration: {}\nPre-flight: {}",
            session.key, session.iteration, session.preflight
        ),
        &session.files,
        &parts,
    );
    if let Some(outcome) = session.result.as_ref().map(|r| r.outcome) {
        text.push_str(&format!("\n## Consensus\n{outcome}\n"));
    }
    // Where the session's workspace is now (its folder may have been renamed while the review
    // ran), never into whatever holds the folder it began in.
    let ws = match super::home(daemon, session) {
        Ok(ws) => ws,
        Err(why) => {
            warn!(session = %session.key, "the review report is not written: {why}");
            return;
        }
    };
    let path = ws.root.join(&session.report_path);
    let written = path
        .parent()
        .map(crate::workspace::layout::create_real_dir)
        .unwrap_or(Ok(()))
        .and_then(|_| crate::workspace::specfile::write_atomic(&path, &text));
    if let Err(e) = written {
        warn!(session = %session.key, "cannot write {}: {e}", path.display());
    }
}
