//! `worker.*`: external reviewer workers. A worker claims a queued `worker` reviewer job and
//! holds it under a lease token; only the current holder may heartbeat, checkpoint, submit or
//! release. A lease that runs out sends the job back to the queue with its checkpoint
//! (`super::reap`), and the next claimer gets a resume briefing.

use std::sync::Arc;
use std::time::Duration;

use scafld_protocol::methods as m;
use scafld_protocol::{ErrorKind, Event};

use super::runner::{accept, now_ms};
use super::{conclude, publish, write_report};
use crate::clock;
use crate::daemon::Daemon;
use crate::domain::consensus;
use crate::domain::dossier::{Dossier, Finding};
use crate::domain::job::{JobRecord, JobState, Lease, Provenance, ReviewedFile, SessionRecord};
use crate::error::{RpcError, RpcResult};
use crate::providers::{self, Answer};

/// The lease a claim holds while it is prepared (packet, provider invocation).
const PREPARING_SECONDS: u64 = 30;

const PHASES: [&str; 4] = ["preflight", "reviewing", "writing_report", "done"];

fn stale_lease(job_id: &str) -> RpcError {
    RpcError::new(
        ErrorKind::InvalidState,
        format!("the lease on {job_id} is not yours any more (expired, released or finished)"),
    )
    .with_hint("claim work again with `scafld worker claim`; the job's checkpoint was kept for whoever holds it now")
}

/// A call on a job that has already finished: no lease of it is held any more, by anyone, and
/// nothing about it changes; the answer says how it ended (its verdict, or why it has none).
fn finished_job(daemon: &Daemon, job: &JobRecord) -> RpcError {
    let work = job.review.as_ref();
    let session = work.and_then(|w| daemon.sessions.get(&w.session_key));
    let verdict = work
        .and_then(|w| w.dossier.as_ref())
        .zip(session.as_ref())
        .map(|(d, s)| consensus::reviewer_verdict(d, consensus::Question::of(&s.subject)).to_string());
    let how = match (&verdict, job.reason.as_deref().filter(|r| !r.is_empty())) {
        (Some(verdict), _) => format!("{}, verdict {verdict}", job.state),
        (None, Some(reason)) => format!("{}: {reason}", job.state),
        (None, None) => job.state.to_string(),
    };
    let review = session
        .as_ref()
        .map(|s| format!(", `scafld review status --session-key {}` the review", s.key))
        .unwrap_or_default();
    RpcError::new(
        ErrorKind::InvalidState,
        format!("{} has already finished ({how}); its lease ended with it and nothing was changed", job.id),
    )
    .with_hint(format!(
        "nothing is left to do on it: `scafld job status {}` shows how it ended{review}; `scafld worker claim` takes other work",
        job.id
    ))
    // The workspace's root: a worker calls from any folder, and the client makes the hint's
    // commands run from there (`--root <root>`), as it does a submission's `next_command`.
    .with_details(serde_json::json!({"job_id": job.id, "state": job.state, "verdict": verdict,
        "root": session.map(|s| workspace_root(daemon, &s))}))
}

/// Why a lease call found no lease of `job_id` held by its token: the job finished, or the
/// lease expired or was released (the job queued or claimed again).
fn lease_lost(daemon: &Daemon, job_id: &str) -> RpcError {
    match daemon.jobs.get(daemon.store(), job_id).filter(|job| job.state.is_finished()) {
        Some(job) => finished_job(daemon, &job),
        None => stale_lease(job_id),
    }
}

/// The job and session of a call, if `token` is the job's current lease.
fn leased(daemon: &Daemon, job_id: &str, token: &str) -> RpcResult<(JobRecord, Lease, SessionRecord)> {
    let job = daemon.jobs.get(daemon.store(), job_id).ok_or_else(|| crate::jobs::unknown_job(job_id))?;
    if job.state.is_finished() {
        return Err(finished_job(daemon, &job));
    }
    let lease = job
        .review
        .as_ref()
        .and_then(|w| w.lease.clone())
        .filter(|l| job.state == JobState::Running && !token.is_empty() && l.token == token)
        .ok_or_else(|| stale_lease(job_id))?;
    let session = job
        .review
        .as_ref()
        .and_then(|w| daemon.sessions.get(&w.session_key))
        .ok_or_else(|| RpcError::internal("the job's review session is missing"))?;
    Ok((job, lease, session))
}

pub async fn claim(
    daemon: &Arc<Daemon>,
    p: m::ClaimParams,
    caller_gone: tokio_util::sync::CancellationToken,
) -> RpcResult<Option<m::Claim>> {
    if p.worker_id.trim().is_empty() || p.worker_id.len() > 128 || p.worker_id.chars().any(char::is_control) {
        return Err(RpcError::new(ErrorKind::InvalidInput, "worker_id must be 1-128 printable characters"));
    }
    if !matches!(p.provider.as_str(), "agent" | "auto" | "codex" | "claude" | "gemini" | "command") {
        return Err(RpcError::new(
            ErrorKind::InvalidInput,
            format!("a worker reviews with agent, auto, codex, claude, gemini or command (not {:?})", p.provider),
        ));
    }
    if !(p.timeout_seconds.is_finite() && p.timeout_seconds >= 0.0) {
        return Err(RpcError::new(ErrorKind::InvalidInput, "timeout must be a non-negative number of seconds"));
    }
    // A lease past the clock's reach would expire at once (its end wrapping round), the claim
    // answered as though it held.
    if let Some(seconds) = p.lease_seconds.filter(|s| *s > m::MAX_LEASE_SECONDS) {
        return Err(RpcError::new(
            ErrorKind::InvalidInput,
            format!("a lease of {seconds} s is longer than the {} s (a week) a claim may hold", m::MAX_LEASE_SECONDS),
        )
        .with_hint(
            "ask for a shorter lease and keep the job with `scafld worker heartbeat` (the loop does it itself)",
        ));
    }
    let only = match &p.root {
        Some(root) => Some(daemon.workspace(root).await?),
        None => None,
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(p.timeout_seconds.min(3600.0));
    let mut changes = daemon.jobs.changes();
    let token = crate::workspace::layout::new_id().map_err(RpcError::internal)?;
    let host_agent = providers::host_agent(&p.caller.env).map(str::to_string);
    let claimers = submitters(&p.caller, None);
    // The stop ends a wait at once, as it ends a wait on a job, rather than holding the stop
    // for its grace period. It comes first: the stop also closes connections, and a claim it
    // ended is told so, never "nothing is queued".
    let stopping = || {
        RpcError::new(ErrorKind::ShuttingDown, "the daemon is shutting down; no job was claimed")
            .with_hint("claim again once it runs again (`scafld worker` reconnects by itself)")
    };
    loop {
        if daemon.shutdown_token().is_cancelled() {
            return Err(stopping());
        }
        if caller_gone.is_cancelled() {
            return Ok(None);
        }
        let now = now_ms();
        let seconds = p.lease_seconds.unwrap_or(0);
        let claimed = daemon.jobs.claim(
            daemon.store(),
            |r| {
                r.review.as_ref().is_some_and(|w| w.reviewer == "worker" && daemon.sessions.names_job(&w.session_key, &r.id))
                    && only.as_ref().is_none_or(|ws| ws.owns(&r.workspace_id))
                    // Never a job its submission would be refused for (the worker's agent built
                    // the task): it stays queued for a worker that may grade it.
                    && implementer_is(daemon, r, &claimers, &p.provider).is_none()
            },
            |r| {
                r.state = JobState::Running;
                r.owner = format!("worker:{}", p.worker_id);
                r.started_at.get_or_insert_with(clock::now_rfc3339);
                r.last_heartbeat = Some(clock::now_rfc3339());
                r.activity = Some(format!("claimed by worker {}", p.worker_id));
                if let Some(w) = r.review.as_mut() {
                    w.heartbeat_ms = now;
                    w.lease = Some(Lease {
                        token: token.clone(),
                        worker_id: p.worker_id.clone(),
                        provider: p.provider.clone(),
                        host_agent: host_agent.clone(),
                        seconds,
                        // Provisional, until `claimed_job` has prepared the claim and
                        // sets the lease's length: long enough that preparing it never
                        // outlasts it, short enough that a claim the daemon lost is re-queued.
                        deadline: Some(clock::deadline_in(seconds.max(PREPARING_SECONDS))),
                        claimed_at: clock::now_rfc3339(),
                    });
                }
            },
        );
        if let Some(job) = claimed
            && let Some(claim) = claimed_job(daemon, job, &p).await?
        {
            return Ok(Some(claim));
        }
        tokio::select! {
            biased;
            _ = daemon.shutdown_token().cancelled() => return Err(stopping()),
            _ = caller_gone.cancelled() => {
                return if daemon.shutdown_token().is_cancelled() { Err(stopping()) } else { Ok(None) };
            }
            changed = tokio::time::timeout_at(deadline, changes.changed()) => if changed.is_err() {
                // Nothing this worker may take; a job queued but withheld from it is said.
                return match withheld(daemon, only.as_deref(), &claimers, &p.provider) {
                    Some(why) => Err(why),
                    None => Ok(None),
                };
            },
        }
    }
}

/// Finish a claim: the lease length, the preflight, the resume briefing and (for automated
/// workers) the provider invocation. None when the lease lapsed meanwhile (the claim waits on).
async fn claimed_job(daemon: &Arc<Daemon>, job: JobRecord, p: &m::ClaimParams) -> RpcResult<Option<m::Claim>> {
    let work = job.review.clone().unwrap_or_default();
    let token = work.lease.as_ref().map(|l| l.token.clone()).unwrap_or_default();
    // Only while this claim's lease still holds: one reaped meanwhile may be another
    // worker's job now, which a give-back must not take from it.
    let give_back = |why: RpcError| {
        let holds = |r: &JobRecord| r.review.as_ref().and_then(|w| w.lease.as_ref()).is_some_and(|l| l.token == token);
        // Scratch first, while the lease holds (the next claim of the same attempt reuses
        // its name); a lease reaped meanwhile moved the job to the next attempt's name.
        if daemon.jobs.get(daemon.store(), &job.id).is_some_and(|r| holds(&r)) {
            end_run(daemon, &job.id);
            drop_scratch(daemon, &job);
        }
        daemon.jobs.update_leased(daemon.store(), &job.id, &token, |r| {
            r.state = JobState::Queued;
            // Not "claimed by worker ...": a job given back is queued for the next claim.
            r.activity = Some(format!("queued: worker {} could not take it: {}", p.worker_id, why.0.message));
            if let Some(w) = r.review.as_mut() {
                w.lease = None;
            }
        });
        daemon.jobs.touch();
        why
    };
    let session = daemon
        .sessions
        .get(&work.session_key)
        .ok_or_else(|| give_back(RpcError::internal("the job's review session is missing")))?;
    // Where the session's workspace is now (its folder may have moved since the review began).
    let ws = super::home(daemon, &session).map_err(|why| give_back(RpcError::new(ErrorKind::WorkspaceError, why)))?;
    let config = ws.config().map_err(|e| give_back(e.into()))?;
    let seconds = p.lease_seconds.unwrap_or(config.review.workers.lease_seconds).clamp(1, m::MAX_LEASE_SECONDS);
    let resume = consensus::briefing(&session.files, &work.checkpoint);
    let packet =
        super::sealed_packet(&ws, &session).map_err(|e| give_back(RpcError::new(ErrorKind::WorkspaceError, e)))?;
    let (invocation, prepared_run) = if p.provider == "agent" {
        (None, None)
    } else {
        let choice = providers::Choice {
            provider: Some(&p.provider),
            command: p.provider_command.as_deref(),
            model: None,
            reasoning: session.reasoning.as_deref(),
            builders: &[],
        };
        let provider = providers::select(&choice, &config, &p.caller.env).map_err(|mut e| {
            // No reviewer CLI for this worker: its problem, not the review's, which waits on
            // (the job given back) for a worker that has one.
            if e.kind() == ErrorKind::ReviewFailed {
                let missing = e.0.message.strip_suffix(providers::FAILS_CLOSED).unwrap_or(&e.0.message).to_string();
                e.0.message = format!(
                    "this worker cannot review: {missing}; {} was given back to the queue, not failed, for a worker that can",
                    job.id
                );
            }
            give_back(e)
        })?;
        if let providers::Provider::Local = provider {
            return Err(give_back(RpcError::new(
                ErrorKind::InvalidInput,
                "the local provider cannot serve as a worker",
            )));
        }
        let expect = providers::Expect::Dossier(&session.request);
        let (_, invocation) = super::prepare_run(
            daemon,
            &ws,
            &scratch_name(&job),
            &provider,
            super::Runner { client_exe: &p.caller.client_exe, env: &p.caller.env },
            expect,
        )
        .map_err(|e| {
            give_back(RpcError::new(ErrorKind::WorkspaceError, format!("cannot prepare the provider run: {e}")))
        })?;
        let wire = m::WorkerInvocation {
            command: invocation.command.clone(),
            env: invocation.env.clone(),
            cwd: ws.root.display().to_string(),
            timeout_seconds: config.review.external.absolute_max_seconds,
            idle_timeout_seconds: config.review.external.idle_timeout_seconds,
            answer_file: match &invocation.answer {
                Answer::File(path) => Some(path.display().to_string()),
                _ => None,
            },
            idle_on_stdout: invocation.idle_on_stdout,
            stop_past_capture: invocation.stop_past_capture,
        };
        (Some(wire), Some(invocation))
    };
    let prepared = daemon.jobs.update_leased(daemon.store(), &job.id, &token, |r| {
        if let Some(w) = r.review.as_mut() {
            if let Some(lease) = w.lease.as_mut() {
                lease.seconds = seconds;
                lease.deadline = Some(clock::deadline_in(seconds));
            }
            if w.checkpoint.phase.is_empty() || w.checkpoint.phase == "done" {
                w.checkpoint.phase = "preflight".into();
            }
            w.checkpoint.preflight = Some(session.preflight.clone());
            w.checkpoint.last_activity = Some(clock::now_rfc3339());
        }
    });
    if prepared.is_none() {
        // The lease lapsed while the claim was prepared (a cancel ended the job, or it was
        // reaped, which moved it to its next attempt's scratch name): not this claim's to hand
        // out, and what it prepared is dropped.
        drop_scratch(daemon, &job);
        if let Some(run) = prepared_run {
            close_run(daemon, run);
        }
        return Ok(None);
    }
    // Kept only once the lease is this claim's: one kept before could outlive a cancel that
    // ended the job meanwhile (its `end_run` finding nothing to end), its submission slot open.
    if let Some(run) = prepared_run {
        crate::sync::lock(&daemon.sessions.invocations).insert(job.id.clone(), run);
    }
    let detail = match &resume {
        Some(b) => format!("worker {} resumes at {}", p.worker_id, b.next_file.as_deref().unwrap_or("the report")),
        None => format!("worker {} claimed it", p.worker_id),
    };
    publish(daemon, &session, &job.id, "claimed", &detail);
    daemon.publish(Event::JobChanged {
        job_id: job.id.clone(),
        task_id: job.task_id.clone(),
        state: JobState::Running,
    });
    write_report(daemon, &session);
    let lease = job.review.as_ref().and_then(|w| w.lease.clone()).unwrap_or_default();
    Ok(Some(m::Claim {
        commands: m::ClaimCommands::new(&job.id, &lease.token),
        job_id: job.id.clone(),
        lease_token: lease.token,
        lease_seconds: seconds,
        session_key: session.key.clone(),
        task_id: session.task().unwrap_or_default().to_string(),
        root: session.root.clone(),
        attempt: job.attempt,
        packet,
        files: session.files.clone(),
        preflight: session.preflight.clone(),
        resume,
        invocation,
    }))
}

/// Forget the provider invocation a claim of `job_id` prepared, and close its MCP submission
/// slot: once the lease is gone (released, reaped, given back, cancelled), a late
/// `submit_review` from that run is refused, never told it was recorded.
pub(super) fn end_run(daemon: &Daemon, job_id: &str) {
    let invocation = crate::sync::lock(&daemon.sessions.invocations).remove(job_id);
    if let Some(run) = invocation {
        close_run(daemon, run);
    }
}

/// Close the MCP submission slot a prepared provider run holds, if any.
fn close_run(daemon: &Daemon, run: providers::Invocation) {
    if let Answer::Submission(token) = run.answer {
        daemon.submissions.close(&token);
    }
}

/// The scratch directory name of a worker's provider run (one per claim attempt).
pub(super) fn scratch_name(job: &JobRecord) -> String {
    format!("review-{}-{}", job.id, job.attempt)
}

/// Remove the scratch directory of `job`'s claimed run (its lease ended: submitted, released,
/// expired, or given back).
fn drop_scratch(daemon: &Daemon, job: &JobRecord) {
    let dir = super::scratch_dir(daemon, &scratch_name(job));
    match std::fs::remove_dir_all(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            tracing::warn!("cannot remove the reviewer scratch directory {}: {e}", dir.display());
        }
        _ => {}
    }
}

/// Renew the lease `token` holds, in one compare-and-update (a stale token renews nothing).
fn extend(daemon: &Daemon, job_id: &str, token: &str) -> RpcResult<f64> {
    // No such job is not a lost lease: the same answer every other lease call gives.
    daemon.jobs.get(daemon.store(), job_id).ok_or_else(|| crate::jobs::unknown_job(job_id))?;
    let now = now_ms();
    let record = daemon
        .jobs
        .update_leased(daemon.store(), job_id, token, |r| {
            r.last_heartbeat = Some(clock::now_rfc3339());
            if let Some(w) = r.review.as_mut() {
                w.heartbeat_ms = now;
                if let Some(l) = w.lease.as_mut() {
                    l.deadline = Some(clock::deadline_in(l.seconds));
                }
            }
        })
        .ok_or_else(|| lease_lost(daemon, job_id))?;
    Ok(record.review.and_then(|w| w.lease).map(|l| l.seconds as f64).unwrap_or_default())
}

pub fn heartbeat(daemon: &Daemon, p: m::LeaseParams) -> RpcResult<m::LeaseResult> {
    let left = extend(daemon, &p.job_id, &p.lease_token)?;
    Ok(m::LeaseResult { job_id: p.job_id, state: m::JobState::Running, lease_expires_in_seconds: left })
}

pub fn checkpoint(daemon: &Daemon, p: m::CheckpointParams) -> RpcResult<m::CheckpointResult> {
    let (job, _, session) = leased(daemon, &p.job_id, &p.lease_token)?;
    if let Some(phase) = &p.phase
        && !PHASES.contains(&phase.as_str())
    {
        return Err(RpcError::new(
            ErrorKind::InvalidInput,
            format!("phase {phase:?} is not preflight, reviewing, writing_report or done"),
        ));
    }
    if let Some(file) = p.file.as_deref().filter(|f| f.chars().any(char::is_control)) {
        return Err(RpcError::new(ErrorKind::InvalidInput, format!("--file {file:?} contains a control character"))
            .with_hint("name the file by its path relative to the workspace"));
    }
    // Only a file under review counts as reviewed, by the session's own name for it.
    let file = match p.file.as_deref() {
        None => None,
        Some(path) => Some(consensus::under_review(&session.files, path).cloned().ok_or_else(|| {
            let named: Vec<_> = session.files.iter().take(5).map(|f| scafld_protocol::text::one_line(f)).collect();
            let more = session.files.len().saturating_sub(named.len());
            let listed = match (named.is_empty(), more) {
                (true, _) => "it reviews no files".to_string(),
                (false, 0) => format!("its files: {}", named.join(", ")),
                (false, more) => format!("its files: {} and {more} more", named.join(", ")),
            };
            RpcError::new(
                ErrorKind::InvalidInput,
                format!("--file {path:?} is not one of the files this review session reviews ({listed}); nothing was recorded"),
            )
            .with_hint("checkpoint a file of the packet's scope by its path relative to the workspace, as the packet names it")
        })?),
    };
    if p.file.is_none() && !p.findings.is_empty() {
        return Err(RpcError::new(ErrorKind::InvalidInput, "findings belong to a file: pass --file PATH"));
    }
    let mut findings = Vec::new();
    for (i, value) in p.findings.into_iter().enumerate() {
        let mut finding: Finding = crate::domain::dossier::finding_from_value(value, &format!("finding {}", i + 1))
            .map_err(|e| RpcError::new(ErrorKind::InvalidInput, format!("{e}; nothing was recorded")).with_hint(
                "a finding is a JSON object, as in a dossier: {\"severity\":\"high\",\"blocks_completion\":true,\"summary\":\"...\",\"location\":{\"path\":\"...\",\"line\":3}}, severity one of critical, high, medium, low",
            ))?;
        let path = file.clone().unwrap_or_default();
        if finding.id.trim().is_empty() {
            finding.id = format!("{}-{}", path.replace(['/', '.'], "-"), i + 1);
        }
        match finding.location.as_mut() {
            None => finding.location = Some(crate::domain::dossier::Location { path, line: None }),
            // A finding is filed under the checkpointed file: one placed in another file would be
            // reported at this file's lines, pointing the reader at the wrong place.
            Some(at)
                if !at.path.is_empty() && consensus::under_review(std::slice::from_ref(&path), &at.path).is_none() =>
            {
                return Err(RpcError::new(
                    ErrorKind::InvalidInput,
                    format!(
                        "finding {}: its location.path {:?} is not the checkpointed --file {path:?}; nothing was recorded",
                        i + 1,
                        scafld_protocol::text::one_line(&at.path)
                    ),
                )
                .with_hint("checkpoint each file with the findings in it: --file names the file every --finding's location.path is in"));
            }
            Some(_) => {}
        }
        let problems = crate::domain::dossier::finding_problems(&finding);
        if !problems.is_empty() {
            let error = RpcError::new(ErrorKind::InvalidInput, format!("finding {}: {}", i + 1, problems.join("; ")));
            return Err(if finding.blocks() {
                error.with_hint("a blocking finding needs location.path, evidence, impact and validation")
            } else {
                error.with_hint("severity is one of critical, high, medium, low; confidence one of high, medium, low")
            });
        }
        findings.push(finding);
    }
    extend(daemon, &job.id, &p.lease_token)?;
    let record = daemon
        .jobs
        .update_leased(daemon.store(), &job.id, &p.lease_token, |r| {
            if let Some(w) = r.review.as_mut() {
                let c = &mut w.checkpoint;
                if let Some(path) = &file {
                    let findings = findings.clone();
                    match c.reviewed.iter_mut().find(|r| &r.path == path) {
                        Some(existing) => existing.findings = findings,
                        None => c.reviewed.push(ReviewedFile { path: path.clone(), findings }),
                    }
                    if c.phase.is_empty() || c.phase == "preflight" {
                        c.phase = "reviewing".into();
                    }
                }
                if let Some(phase) = &p.phase {
                    c.phase = phase.clone();
                }
                c.last_activity = Some(clock::now_rfc3339());
            }
        })
        .ok_or_else(|| lease_lost(daemon, &job.id))?;
    let checkpoint = record.review.map(|w| w.checkpoint).unwrap_or_default();
    let remaining = consensus::remaining(&session.files, &checkpoint);
    publish(
        daemon,
        &session,
        &job.id,
        "checkpoint",
        &format!("{} of {} files reviewed", checkpoint.reviewed.len(), session.files.len()),
    );
    write_report(daemon, &session);
    Ok(m::CheckpointResult {
        job_id: job.id,
        phase: checkpoint.phase.clone(),
        files_reviewed: checkpoint.reviewed.len(),
        files_remaining: remaining,
        findings_so_far: consensus::findings_so_far(&checkpoint),
        report_path: session.report_path.clone(),
        root: workspace_root(daemon, &session),
    })
}

/// An agent that built `job`'s task (any build, not only the latest), when it is one a worker
/// (running inside `submitters`, reviewing with `provider`) would grade it as: the
/// independence rule forbids that.
fn implementer_is(daemon: &Daemon, job: &JobRecord, submitters: &[String], provider: &str) -> Option<String> {
    if job.task_id.is_empty() {
        return None;
    }
    let entries = daemon.store().ledger(&job.workspace_id, &job.task_id).ok()?;
    crate::ledger::implementers(&entries)
        .find(|agent| submitters.iter().any(|s| s == agent) || provider == *agent)
        .map(str::to_string)
}

/// The host agents that built nothing of `job`'s task: the reviewers that may grade it.
fn may_grade(daemon: &Daemon, job: &JobRecord) -> Vec<&'static str> {
    let entries = daemon.store().ledger(&job.workspace_id, &job.task_id).unwrap_or_default();
    let built: Vec<&str> = crate::ledger::implementers(&entries).collect();
    scafld_protocol::hosts::HOST_AGENTS.into_iter().filter(|agent| !built.contains(agent)).collect()
}

/// "codex or gemini", or a human review when every known agent built the task: the human
/// review as a command that runs as printed (the task's id, a reason to fill in).
fn others_who_may(daemon: &Daemon, job: &JobRecord) -> String {
    let human = format!(
        "record an audited `scafld review {} --human-reviewed --reason \"<who reviewed what>\"`",
        scafld_protocol::cli::shell_word(&job.task_id)
    );
    match may_grade(daemon, job).as_slice() {
        [] => format!("{human} (every reviewer agent built it)"),
        [one] => format!("run the worker under {one}, or {human}"),
        [rest @ .., last] => format!("run the worker under {} or {last}, or {human}", rest.join(", ")),
    }
}

/// A claim that found nothing it may take while a `worker` job of its scope is queued, withheld
/// from this claimer by the independence rule (its agent built the task): which job, why, and
/// who may take it, rather than "nothing is queued".
fn withheld(
    daemon: &Daemon,
    only: Option<&crate::workspace::Workspace>,
    claimers: &[String],
    provider: &str,
) -> Option<RpcError> {
    let queued = daemon.jobs.matching(|r| {
        r.state == JobState::Queued
            && r.review
                .as_ref()
                .is_some_and(|w| w.reviewer == "worker" && daemon.sessions.names_job(&w.session_key, &r.id))
            && only.is_none_or(|ws| ws.owns(&r.workspace_id))
    });
    let (job, implementer) =
        queued.into_iter().find_map(|job| implementer_is(daemon, &job, claimers, provider).map(|who| (job, who)))?;
    let task = scafld_protocol::text::one_line(&job.task_id);
    Some(
        RpcError::new(
            ErrorKind::InvalidState,
            format!(
                "no review job this worker may take: {} (task {task}) is queued, but withheld from it by the independence rule: {task} was built from {implementer}, and this worker is {implementer} too; the implementing agent must not grade its own work",
                job.id
            ),
        )
        .with_hint(format!("to have it reviewed, {}", others_who_may(daemon, &job)))
        .with_details(serde_json::json!({
            "withheld": {"job_id": job.id, "task_id": job.task_id, "implementer": implementer,
                         "may_review": may_grade(daemon, &job)},
        })),
    )
}

/// The agents a caller may be running inside (see [`providers::host_agents`]), and the one its
/// lease recorded at the claim.
fn submitters(caller: &m::CallerContext, lease: Option<&Lease>) -> Vec<String> {
    let mut agents: Vec<String> = providers::host_agents(&caller.env).into_iter().map(str::to_string).collect();
    agents.extend(lease.and_then(|l| l.host_agent.clone()));
    agents
}

/// The independence rule: the host agent that built the task may not grade it.
fn independent(daemon: &Daemon, job: &JobRecord, lease: &Lease, caller: &m::CallerContext) -> RpcResult<()> {
    if let Some(implementer) = implementer_is(daemon, job, &submitters(caller, Some(lease)), &lease.provider) {
        return Err(RpcError::new(
            ErrorKind::InvalidState,
            format!(
                "independence: {} was built from {implementer}, and this submission comes from {implementer} too; the implementing agent must not grade its own work",
                job.task_id
            ),
        )
        .with_hint(others_who_may(daemon, job)));
    }
    Ok(())
}

/// The digest an accepted worker answer is known again by ([`crate::domain::job::Answered`]).
fn answer_digest(dossier: &Dossier) -> String {
    use sha2::Digest;
    format!("{:x}", sha2::Sha256::digest(serde_json::to_vec(dossier).unwrap_or_default()))
}

/// A submission to a job that has finished: the answer its lease already handed in, given
/// again (`digest`: the same accepted dossier), is answered as recorded, counted once, with what
/// the review recorded; anything else is told the job finished.
fn submitted_again(
    daemon: &Daemon,
    job: &JobRecord,
    token: &str,
    digest: Option<&str>,
) -> RpcResult<m::WorkerSubmitResult> {
    let work = job.review.as_ref();
    let same = work
        .and_then(|w| w.answered.as_ref())
        .is_some_and(|a| !token.is_empty() && a.lease_token == token && digest.is_some_and(|d| d == a.digest));
    let session = work.and_then(|w| daemon.sessions.get(&w.session_key));
    let (Some(dossier), Some(session), true) = (work.and_then(|w| w.dossier.as_ref()), session, same) else {
        return Err(finished_job(daemon, job));
    };
    let mut result = m::WorkerSubmitResult {
        job_id: job.id.clone(),
        accepted: true,
        already_recorded: true,
        verdict: consensus::reviewer_verdict(dossier, consensus::Question::of(&session.subject)).to_string(),
        ..m::WorkerSubmitResult::default()
    };
    settled(daemon, &session.key, &mut result);
    Ok(result)
}

/// Where the session's workspace is now (its folder may have moved since the review began).
fn workspace_root(daemon: &Daemon, session: &SessionRecord) -> String {
    super::home(daemon, session).map(|ws| ws.root.display().to_string()).unwrap_or_else(|_| session.root.clone())
}

/// What the review recorded once a job's answer counted: the wait for the other reviewers, or
/// (once the session settled) its gate, why it differs from the verdict, and the task's next step.
fn settled(daemon: &Daemon, session_key: &str, result: &mut m::WorkerSubmitResult) {
    if let Some(session) = daemon.sessions.get(session_key) {
        result.root = workspace_root(daemon, &session);
    }
    if result.accepted {
        result.next_command = format!("scafld review wait --session-key {session_key}");
    }
    if let Some(settled) = daemon.sessions.get(session_key).and_then(|s| s.result) {
        result.gate = settled.gate;
        if let Some(review) = settled.review.as_ref().filter(|r| result.accepted && !r.next_command.is_empty()) {
            result.next_command.clone_from(&review.next_command);
        }
        // A gate that records less than the verdict says why (a pass with findings that block
        // nothing is a pass of the gate, with nothing to explain).
        let explained =
            settled.gate.is_some_and(|g| g == m::GateState::Pass || g.as_str().eq_ignore_ascii_case(&result.verdict));
        if !explained {
            result.gate_reason = settled
                .issues
                .first()
                .map(|i| i.title.clone())
                .or_else(|| settled.parse_errors.first().cloned())
                .unwrap_or_default();
        }
    }
}

pub async fn submit(daemon: &Arc<Daemon>, p: m::WorkerSubmitParams) -> RpcResult<m::WorkerSubmitResult> {
    if let Some(done) = daemon.jobs.get(daemon.store(), &p.job_id).filter(|job| job.state.is_finished()) {
        // The same dossier again, read as the first one was (its checkpoint merged in).
        let session = done.review.as_ref().and_then(|w| daemon.sessions.get(&w.session_key));
        let checkpoint = done.review.as_ref().map(|w| w.checkpoint.clone()).unwrap_or_default();
        let digest = p
            .dossier
            .zip(session)
            .and_then(|(value, s)| crate::domain::dossier::from_value(value).ok().zip(Some(s)))
            .and_then(|(d, s)| accept(consensus::merge_checkpoint(d, &checkpoint), &s.request).ok())
            .map(|d| answer_digest(&d));
        return submitted_again(daemon, &done, &p.lease_token, digest.as_deref());
    }
    let (job, lease, session) = leased(daemon, &p.job_id, &p.lease_token)?;
    independent(daemon, &job, &lease, &p.caller)?;
    let checkpoint = job.review.as_ref().map(|w| w.checkpoint.clone()).unwrap_or_default();
    let request = session.request.clone();
    let refused = |problems: Vec<String>| m::WorkerSubmitResult {
        job_id: job.id.clone(),
        accepted: false,
        problems,
        ..m::WorkerSubmitResult::default()
    };
    let answer = match (p.dossier, p.run) {
        (Some(value), None) => {
            // An agent's dossier: a bad one is refused and the lease kept, so it can be fixed.
            // Held to the schema as written (a null is no string), and to the one answer cap.
            let length = scafld_protocol::json::encoded_len(&value);
            if length > scafld_protocol::MAX_ANSWER_BYTES {
                return Ok(refused(vec![providers::answer_over_cap(length as u64)]));
            }
            let dossier: Dossier = match crate::domain::dossier::from_value(value) {
                Ok(d) => d,
                Err(e) => return Ok(refused(vec![e])),
            };
            match accept(consensus::merge_checkpoint(dossier, &checkpoint), &request) {
                Ok(d) => Ok(d),
                Err(f) => return Ok(refused(vec![f.message])),
            }
        }
        (None, Some(run)) => {
            let invocation =
                crate::sync::lock(&daemon.sessions.invocations).remove(&job.id).unwrap_or(providers::Invocation {
                    command: String::new(),
                    env: Default::default(),
                    answer: match &run.answer_file {
                        Some(path) => Answer::File(path.into()),
                        None => Answer::Stdout,
                    },
                    output_format: "worker.stdout",
                    idle_on_stdout: false,
                    stop_past_capture: false,
                });
            let submitted = match &invocation.answer {
                Answer::Submission(token) => daemon.submissions.close(token),
                _ => providers::Closed::default(),
            };
            let diagnostic = run_diagnostics(daemon, &session, &invocation, &run).await;
            let left = providers::Leftovers {
                exit_code: run.exit_code,
                timed_out: run.timed_out,
                runner_error: run.timed_out.then(|| "the worker's provider run timed out".to_string()),
                stdout: run.stdout,
                stdout_dropped: run.stdout_dropped,
                submitted,
                tail: run.stderr_tail,
                diagnostic,
                reported: Default::default(),
            };
            let answer = providers::interpret(&invocation, left)
                .map(|d| consensus::merge_checkpoint(d, &checkpoint))
                .and_then(|d| accept(d, &request));
            // The run's scratch directory (codex's answer file, MCP config, auth) has served.
            drop_scratch(daemon, &job);
            answer
        }
        _ => {
            return Err(RpcError::new(ErrorKind::InvalidInput, "submit exactly one of a dossier or a provider run"));
        }
    };
    let provenance = Provenance {
        provider: lease.provider.clone(),
        model: p.model.clone().or_else(|| answer.as_ref().ok().and_then(|d| d.model.clone())),
        channel: "worker.lease".into(),
        worker_id: Some(lease.worker_id.clone()),
        reasoning: None,
    };
    // The lease ends here, in one compare-and-update: a submission whose lease expired (or was
    // re-claimed) while it was being checked changes nothing.
    let digest = answer.as_ref().ok().map(answer_digest);
    let ended = daemon.jobs.update_leased(daemon.store(), &job.id, &p.lease_token, |r| {
        if let Some(w) = r.review.as_mut() {
            w.lease = None;
            w.answered = digest
                .clone()
                .map(|digest| crate::domain::job::Answered { lease_token: p.lease_token.clone(), digest });
        }
    });
    if ended.is_none() {
        return match daemon.jobs.get(daemon.store(), &job.id).filter(|job| job.state.is_finished()) {
            Some(done) => submitted_again(daemon, &done, &p.lease_token, digest.as_deref()),
            None => Err(stale_lease(&job.id)),
        };
    }
    let mut result = match &answer {
        // What the job records (`conclude`): the reviewer's verdict read from its findings.
        Ok(d) => m::WorkerSubmitResult {
            job_id: job.id.clone(),
            accepted: true,
            verdict: consensus::reviewer_verdict(d, consensus::Question::of(&session.subject)).to_string(),
            ..m::WorkerSubmitResult::default()
        },
        Err(f) => refused(vec![f.message.clone()]),
    };
    conclude(daemon, &job.id, answer, provenance).await;
    // The session this answer settled: what the review recorded, which the gate decides (its
    // guard, the other reviewers, manual approval), not this reviewer alone.
    settled(daemon, &session.key, &mut result);
    Ok(result)
}

/// The diagnostics file of a worker's provider run, written as the daemon's own runs write
/// theirs (`runner::diagnostics_of`, in the session's runs folder) from what the worker
/// reported; how a message cites it (by its path in the workspace, or why there is none).
async fn run_diagnostics(
    daemon: &Daemon,
    session: &SessionRecord,
    invocation: &providers::Invocation,
    run: &m::WorkerRun,
) -> String {
    let ws = match super::home(daemon, session) {
        Ok(ws) => ws,
        Err(why) => return format!("none, the workspace's runs folder cannot be found: {why}"),
    };
    let external = ws.config().map(|c| c.review.external.clone()).unwrap_or_default();
    let outcome = crate::runner::RunOutcome {
        exit_code: run.exit_code,
        signal: None,
        kill_reason: run.kill_reason.as_deref().and_then(crate::runner::KillReason::parse),
        start_error: None,
        stdout: crate::runner::Capture { bytes: run.stdout.clone().into_bytes(), dropped: run.stdout_dropped },
        stderr: crate::runner::Capture { bytes: run.stderr.clone().into_bytes(), dropped: run.stderr_dropped },
        duration: Duration::from_millis(run.duration_ms),
        silent_for: Duration::from_millis(run.silent_for_ms),
    };
    // What the worker set on top of its own environment: the invocation's, and the task id.
    let env_overrides: Vec<String> = invocation.env.keys().cloned().chain(["SCAFLD_TASK_ID".to_string()]).collect();
    let ran = crate::runner::Ran {
        command: &invocation.command,
        cwd: &ws.root,
        idle_timeout: (external.idle_timeout_seconds > 0).then(|| Duration::from_secs(external.idle_timeout_seconds)),
        absolute_timeout: Duration::from_secs(external.absolute_max_seconds.max(1)),
        env_overrides: &env_overrides,
    };
    let written =
        crate::runner::diagnostics_of(&ran, &outcome, super::runs_dir(&ws, session).join("diagnostics")).await;
    // Named from the workspace's root, as a daemon-run reviewer's failure names its file.
    written.cited().replace(&format!("{}/", ws.root.display()), "")
}

pub fn release(daemon: &Daemon, p: m::LeaseParams) -> RpcResult<m::LeaseResult> {
    let (job, lease, session) = leased(daemon, &p.job_id, &p.lease_token)?;
    // While the lease still holds, as a claim given back does: once the job is queued again the
    // next claim (same attempt, so the same scratch name) may be preparing its own run.
    end_run(daemon, &job.id);
    drop_scratch(daemon, &job);
    daemon
        .jobs
        .update_leased(daemon.store(), &job.id, &p.lease_token, |r| {
            r.state = JobState::Queued;
            r.activity = Some(format!("released by worker {}", lease.worker_id));
            if let Some(w) = r.review.as_mut() {
                w.lease = None;
            }
        })
        .ok_or_else(|| lease_lost(daemon, &job.id))?;
    publish(daemon, &session, &job.id, "requeued", &format!("released by worker {}", lease.worker_id));
    daemon.publish(Event::JobChanged { job_id: job.id.clone(), task_id: job.task_id.clone(), state: JobState::Queued });
    Ok(m::LeaseResult { job_id: job.id, state: m::JobState::Queued, lease_expires_in_seconds: 0.0 })
}

/// Expired leases: the job goes back to the queue with its checkpoint for the next worker.
pub fn reap(daemon: &Arc<Daemon>) {
    let now = std::time::Instant::now();
    let ran_out = |l: &Lease| l.deadline.is_some_and(|d| d <= now);
    let expired = daemon.jobs.matching(|r| {
        r.state == JobState::Running && r.review.as_ref().and_then(|w| w.lease.as_ref()).is_some_and(ran_out)
    });
    for job in expired {
        let Some(lease) = job.review.as_ref().and_then(|w| w.lease.clone()) else { continue };
        if let Some(group) = &job.group {
            group.kill_if_ours();
        }
        let Some(session) = job.review.as_ref().and_then(|w| daemon.sessions.get(&w.session_key)) else { continue };
        // A worker's provider runs on the worker's machine, out of our reach: the old run may
        // still be finishing (and its late submission is refused: the lease is gone).
        let reason = format!(
            "worker {} went silent past its {} s lease; its provider run may still be finishing, and anything it submits now is refused",
            lease.worker_id, lease.seconds
        );
        // Only if the same lease is still the expired one (a heartbeat may have just renewed it).
        let still_expired = |r: &JobRecord| {
            r.state == JobState::Running
                && r.review
                    .as_ref()
                    .and_then(|w| w.lease.as_ref())
                    .is_some_and(|l| l.token == lease.token && ran_out(l))
        };
        // First the lease ends (its holder's calls are refused from now), the job still running
        // and so claimed by nobody; then its run is ended; only then is it queued again. Queued
        // first, a new claim could prepare its own run (kept under the same job id) before the
        // old one was ended, and ending the old one would end it.
        let ended = daemon.jobs.update_if(daemon.store(), &job.id, true, still_expired, |r| {
            if let Some(work) = r.review.as_mut() {
                work.lease = None;
            }
        });
        if ended.is_none() {
            continue;
        }
        end_run(daemon, &job.id);
        drop_scratch(daemon, &job);
        // Unless the job ended meanwhile (a cancel); a restart in between re-queues it too
        // (`Jobs::recover`: a running review job without a lease).
        let unleased =
            |r: &JobRecord| r.state == JobState::Running && r.review.as_ref().is_some_and(|w| w.lease.is_none());
        let requeued = daemon.jobs.update_if(daemon.store(), &job.id, true, unleased, |r| {
            r.state = JobState::Queued;
            r.attempt += 1;
            r.group = None;
            r.activity = Some(format!("re-queued: {reason}"));
        });
        if requeued.is_none() {
            continue;
        }
        publish(daemon, &session, &job.id, "heartbeat_stale", &reason);
        publish(daemon, &session, &job.id, "requeued", "the checkpoint is kept for the next worker");
        daemon.publish(Event::JobChanged {
            job_id: job.id.clone(),
            task_id: job.task_id.clone(),
            state: JobState::Queued,
        });
        write_report(daemon, &session);
    }
}

/// Check leases a few times a second until shutdown.
pub async fn reaper_loop(daemon: Arc<Daemon>) {
    let stop = daemon.shutdown_token().clone();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(200)) => reap(&daemon),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::DaemonOptions;
    use crate::domain::job::{JobKind, ReviewWork};
    use crate::store::{SledStore, Store};

    /// A store holding review session `s` of workspace `w`, whose one job is `job-1-a`.
    fn store_with_session(dir: &std::path::Path) -> Arc<dyn Store> {
        let store: Arc<dyn Store> = Arc::new(SledStore::open(&dir.join("db")).unwrap());
        let session = SessionRecord {
            key: "s".into(),
            job_ids: vec!["job-1-a".into()],
            root: "/nowhere".into(),
            workspace_id: "w".into(),
            ..Default::default()
        };
        store.save_session(&session).unwrap();
        store
    }

    /// A daemon (not serving) on `store`, its state in `dir`.
    fn daemon_on(dir: &std::path::Path, store: Arc<dyn Store>) -> Arc<Daemon> {
        let options = DaemonOptions {
            socket_path: dir.join("scafldd.sock"),
            socket_activated: false,
            state_dir: dir.to_path_buf(),
            log_file: dir.join("log"),
            retention: Duration::from_secs(3600),
            limits: Default::default(),
            executable: None,
        };
        Arc::new(Daemon::new(options, store, tokio_util::sync::CancellationToken::new()))
    }

    /// Job `id`'s lease deadline passes now (deadlines live in memory only).
    fn lease_runs_out(daemon: &Daemon, id: &str) {
        daemon.jobs.note(id, |r| {
            if let Some(lease) = r.review.as_mut().and_then(|w| w.lease.as_mut()) {
                lease.deadline = Some(clock::deadline_in(0));
            }
        });
    }

    /// A lease the reaper takes back ends the old run (its prepared invocation, its submission
    /// slot) before the job can be claimed again: a new claim prepares its own run under the
    /// same job id, which ending the old one afterwards would end instead. The run table is
    /// held while the reaper comes to end the old run, as a claim preparing one would reach it.
    #[test]
    fn a_reaped_job_is_claimable_only_once_its_old_run_has_ended() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_with_session(dir.path());
        let mut job = JobRecord::queued(
            "job-1-a".into(),
            JobKind::Review,
            "w".into(),
            "/nowhere".into(),
            String::new(),
            "t".into(),
        );
        job.state = JobState::Running;
        job.review = Some(ReviewWork {
            session_key: "s".into(),
            reviewer: "worker".into(),
            lease: Some(Lease { token: "old".into(), ..Default::default() }),
            ..Default::default()
        });
        store.save_job(&job).unwrap();
        let daemon = daemon_on(dir.path(), store);
        let run = providers::Invocation {
            command: "old run".into(),
            env: Default::default(),
            answer: Answer::Stdout,
            output_format: "worker.stdout",
            idle_on_stdout: false,
            stop_past_capture: false,
        };
        crate::sync::lock(&daemon.sessions.invocations).insert(job.id.clone(), run);
        // Its lease has run out (deadlines are not stored: set in memory).
        lease_runs_out(&daemon, &job.id);

        let held = crate::sync::lock(&daemon.sessions.invocations);
        let reaper = {
            let daemon = daemon.clone();
            std::thread::spawn(move || reap(&daemon))
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while daemon.jobs.get(daemon.store(), &job.id).and_then(|r| r.review).is_some_and(|w| w.lease.is_some()) {
            assert!(std::time::Instant::now() < deadline, "the reaper never ended the lease");
            std::thread::sleep(Duration::from_millis(5));
        }
        let claimed = daemon.jobs.claim(daemon.store(), |_| true, |_| {});
        assert!(claimed.is_none(), "claimable again before its old run was ended: {claimed:?}");
        drop(held);
        reaper.join().unwrap();
        let job = daemon.jobs.get(daemon.store(), &job.id).unwrap();
        assert_eq!((job.state, job.attempt), (JobState::Queued, 2));
        assert!(crate::sync::lock(&daemon.sessions.invocations).is_empty(), "the old run was ended");
    }

    /// Leases run out on the monotonic clock. A lease stored with a wall-clock end long past (a
    /// clock set forward, or a daemon stopped for long) keeps its job through the next start's
    /// recovery, with a fresh term; it is reaped once that term (the monotonic deadline) ends.
    #[test]
    fn a_lease_runs_out_on_the_monotonic_clock_and_a_restart_gives_it_a_fresh_term() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_with_session(dir.path());
        // As an older daemon stored it: a wall-clock end in 1970.
        let job: JobRecord = serde_json::from_value(serde_json::json!({
            "id": "job-1-a", "kind": "review", "workspace_id": "w", "root": "/nowhere", "task_id": "",
            "state": "running", "owner": "worker:w1", "attempt": 1, "created_at": "t",
            "started_at": null, "finished_at": null, "last_heartbeat": null, "activity": null,
            "reason": null, "outcome": null,
            "review": {"session_key": "s", "reviewer": "worker", "lease": {"token": "held", "worker_id": "w1",
                "provider": "agent", "seconds": 300, "expires_ms": 1, "claimed_at": "t"}},
        }))
        .unwrap();
        store.save_job(&job).unwrap();
        let daemon = daemon_on(dir.path(), store.clone());
        daemon.jobs.recover(daemon.store());
        reap(&daemon);
        let kept = daemon.jobs.get(daemon.store(), "job-1-a").unwrap();
        assert_eq!(kept.state, JobState::Running, "{kept:?}");
        assert_eq!(kept.review.and_then(|w| w.lease).map(|l| l.token).as_deref(), Some("held"));

        // Its monotonic term ends: reaped.
        lease_runs_out(&daemon, "job-1-a");
        reap(&daemon);
        assert_eq!(daemon.jobs.get(daemon.store(), "job-1-a").unwrap().state, JobState::Queued);
    }
}
