//! Review sessions: one review round of a task or a git range, with one job per reviewer on the
//! same packet. Spawning, settling a reviewer's answer, the consensus once all have answered,
//! bounded waits, retries, status and recovery after a restart.
//!
//! Who runs a reviewer job: the daemon itself (`runner.rs`) for codex, claude, gemini, command
//! and local; an external worker (`worker.rs`) for the `worker` reviewer, under a lease.

pub mod diff;
pub mod runner;
pub mod template;
pub mod worker;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use scafld_protocol::methods::{self as m, ReviewerProgress};
use scafld_protocol::{ErrorKind, Event};
use tracing::warn;

use crate::clock;
use crate::config::Config;
use crate::daemon::Daemon;
use crate::domain::consensus::{self, Answer, Outcome, ReportPart, Reviewer};
use crate::domain::dossier::{Dossier, Request};
use crate::domain::job::{
    FailureClass, JobKind, JobRecord, JobState, Provenance, RequestRecord, ReviewWork, ReviewerFailure, SessionRecord,
    TemplateJob,
};
use crate::domain::ledger::BaselinePath;
use crate::error::{RpcError, RpcResult};
use crate::providers;
use crate::workspace::Workspace;
use runner::now_ms;

/// The session table: records (persisted) and the lock that settles one session at a time.
#[derive(Default)]
pub struct Sessions {
    records: Mutex<HashMap<String, SessionRecord>>,
    settling: tokio::sync::Mutex<()>,
    /// Invocations handed to automated workers, by job id (to read their answer back).
    pub(crate) invocations: Mutex<HashMap<String, providers::Invocation>>,
}

impl Sessions {
    pub fn new(records: Vec<SessionRecord>) -> Sessions {
        Sessions {
            records: Mutex::new(records.into_iter().map(|r| (r.key.clone(), r)).collect()),
            ..Sessions::default()
        }
    }

    pub fn get(&self, key: &str) -> Option<SessionRecord> {
        self.records.lock().expect("sessions").get(key).cloned()
    }

    /// The next creation sequence number.
    pub(crate) fn next_seq(&self) -> u64 {
        self.records.lock().expect("sessions").values().map(|s| s.seq).max().unwrap_or(0) + 1
    }

    pub(crate) fn put(&self, daemon: &Daemon, session: SessionRecord) {
        if let Err(e) = daemon.store().save_session(&session) {
            warn!(session = %session.key, "cannot persist review session: {e}");
        }
        self.records.lock().expect("sessions").insert(session.key.clone(), session);
    }

    pub(crate) fn all(&self) -> Vec<SessionRecord> {
        self.records.lock().expect("sessions").values().cloned().collect()
    }

    /// The most recent session of a workspace (optionally of one task).
    pub fn latest(&self, workspace_id: &str, task: Option<&str>) -> Option<SessionRecord> {
        self.all()
            .into_iter()
            .filter(|s| s.workspace_id == workspace_id && task.is_none_or(|t| s.task_id == t))
            .max_by_key(|s| s.seq)
    }
}

/// Everything a new session needs; the caller has built the packet and snapshot.
pub struct Spawn<'a> {
    pub ws: Arc<Workspace>,
    pub config: &'a Config,
    pub task_id: String,
    pub range: String,
    pub context_digest: String,
    /// Requested reviewer names (already validated).
    pub reviewers: Vec<String>,
    pub approval: String,
    pub request: Request,
    pub packet: String,
    pub files: Vec<String>,
    pub scope: Vec<String>,
    pub snapshot: Vec<BaselinePath>,
    pub tree: String,
    pub preflight: String,
    pub caller: &'a m::CallerContext,
    pub model: Option<String>,
    pub reasoning: Option<String>,
    pub provider_command: Option<String>,
    /// A standalone template review: every reviewer runs this template.
    pub template: Option<TemplateJob>,
    /// Template passes of a task's gate: each runs with the first daemon-run reviewer.
    pub passes: Vec<TemplateJob>,
}

/// The reviewers the caller asked for, else the configured list, else the single provider.
pub fn requested_reviewers(explicit: &[String], provider: Option<&str>, config: &Config) -> RpcResult<Vec<String>> {
    let names = if !explicit.is_empty() {
        explicit.to_vec()
    } else if let Some(provider) = provider {
        vec![provider.to_string()]
    } else if !config.review.external.reviewers.is_empty() {
        config.review.external.reviewers.clone()
    } else {
        vec![config.review.external.provider.clone()]
    };
    consensus::parse_reviewers(&names).map_err(|e| RpcError::new(ErrorKind::InvalidInput, e))
}

/// `auto` or manual approval, from the call or config.
pub fn approval_mode(explicit: Option<&str>, config: &Config) -> RpcResult<String> {
    let mode = explicit.unwrap_or(&config.review.approval);
    match mode {
        "auto" | "manual" => Ok(mode.to_string()),
        other => Err(RpcError::new(ErrorKind::InvalidInput, format!("approval {other:?} is not auto or manual"))),
    }
}

/// Resolve each requested reviewer to one that can run, or report it missing. A reviewer that
/// is misconfigured (a `command` without a command line) is an error, not "missing".
fn available(
    names: &[String],
    config: &Config,
    caller: &m::CallerContext,
    command: Option<&str>,
) -> RpcResult<(Vec<String>, Vec<String>)> {
    let (mut spawned, mut missing) = (Vec::new(), Vec::new());
    for name in names {
        if name == "worker" {
            spawned.push(name.clone());
            continue;
        }
        let choice = providers::Choice { provider: Some(name), command, model: None, reasoning: None };
        match providers::select(&choice, config, &caller.env) {
            Ok(provider) if !spawned.iter().any(|s| s == provider.name()) => spawned.push(provider.name().to_string()),
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::ReviewFailed => missing.push(name.clone()),
            Err(e) => return Err(e),
        }
    }
    Ok((spawned, missing))
}

/// Start a session: persist its packet, create one job per available reviewer and start the
/// daemon-run ones. With no reviewer available the session settles at once (`no_reviewers`).
pub fn spawn(daemon: &Arc<Daemon>, s: Spawn<'_>) -> RpcResult<m::SpawnResult> {
    let (mut spawned, mut missing) = available(&s.reviewers, s.config, s.caller, s.provider_command.as_deref())?;
    // Which job runs which template: every reviewer the standalone template, plus one job per
    // gate pass with the first reviewer the daemon runs.
    let mut templates: Vec<Option<TemplateJob>> = spawned
        .iter()
        .map(|reviewer| s.template.clone().map(|t| TemplateJob { provider: reviewer.clone(), ..t }))
        .collect();
    let pass_provider = spawned.iter().find(|r| *r != "worker").cloned();
    for pass in &s.passes {
        match &pass_provider {
            Some(provider) => {
                spawned.push(format!("{}:{provider}", pass.name));
                templates.push(Some(TemplateJob { provider: provider.clone(), ..pass.clone() }));
            }
            None => missing.push(format!("{}:(no provider)", pass.name)),
        }
    }
    let key = crate::workspace::layout::new_id().map_err(RpcError::internal)?;
    let dir = s.ws.root.join(".scafld/reviews").join(&key);
    std::fs::create_dir_all(&dir)
        .and_then(|_| std::fs::write(dir.join("packet.md"), &s.packet))
        .map_err(|e| RpcError::new(ErrorKind::WorkspaceError, format!("cannot write the review packet: {e}")))?;
    let report_path = if s.task_id.is_empty() {
        format!(".scafld/reviews/{key}/review_report.md")
    } else {
        format!(".scafld/runs/{}/review_report.md", s.task_id)
    };
    let iteration = 1 + daemon
        .sessions
        .all()
        .iter()
        .filter(|o| {
            o.workspace_id == s.ws.id
                && o.task_id == s.task_id
                && (!s.task_id.is_empty() || (o.context_digest == s.context_digest && same_base(&o.range, &s.range)))
        })
        .count() as u32;
    let mut session = SessionRecord {
        key: key.clone(),
        seq: daemon.sessions.next_seq(),
        workspace_id: s.ws.id.clone(),
        root: s.ws.root.display().to_string(),
        task_id: s.task_id.clone(),
        range: s.range,
        iteration,
        created_at: clock::now_rfc3339(),
        approval: s.approval,
        reviewers: spawned.clone(),
        job_ids: Vec::new(),
        missing: missing.clone(),
        files: s.files,
        snapshot: s.snapshot,
        tree: s.tree,
        scope: s.scope,
        request: RequestRecord {
            mode: s.request.mode.clone(),
            max_findings: s.request.max_findings,
            min_attack_angles: s.request.min_attack_angles,
            depth: s.request.depth.clone(),
        },
        packet_path: dir.join("packet.md").display().to_string(),
        report_path,
        preflight: s.preflight,
        caller_cwd: s.caller.cwd.clone(),
        caller_env: s.caller.env.clone(),
        client_exe: s.caller.client_exe.clone(),
        model: s.model,
        reasoning: s.reasoning,
        provider_command: s.provider_command,
        result: None,
        context_digest: s.context_digest,
        template: s.template.as_ref().map(|t| t.name.clone()),
    };
    for (reviewer, template) in spawned.iter().zip(templates) {
        session.job_ids.push(new_job(daemon, &s.ws, &session, reviewer, 1, template));
    }
    daemon.sessions.put(daemon, session.clone());
    write_report(daemon, &session);
    start_jobs(daemon, &session);
    if spawned.is_empty() {
        let daemon = daemon.clone();
        let key = key.clone();
        tokio::spawn(async move { settle(&daemon, &key).await });
    }
    Ok(m::SpawnResult {
        session_key: key,
        reviewers_spawned: spawned,
        reviewers_missing: missing,
        job_ids: session.job_ids,
        resolved: None,
    })
}

fn same_base(a: &str, b: &str) -> bool {
    a.split("..").next() == b.split("..").next()
}

fn new_job(
    daemon: &Daemon,
    ws: &Workspace,
    session: &SessionRecord,
    reviewer: &str,
    attempt: u32,
    template: Option<TemplateJob>,
) -> String {
    let work = ReviewWork {
        session_key: session.key.clone(),
        reviewer: reviewer.to_string(),
        template,
        ..ReviewWork::default()
    };
    let (job, _) = daemon.jobs.create(daemon.store(), JobKind::Review, ws, &session.task_id, Some(work));
    if attempt > 1 {
        daemon.jobs.update(daemon.store(), &job.id, true, |r| r.attempt = attempt);
    }
    if reviewer == "worker" {
        daemon.jobs.update(daemon.store(), &job.id, true, |r| r.activity = Some("waiting for a worker".into()));
    }
    publish(daemon, session, &job.id, "queued", &format!("{reviewer} reviewer queued"));
    job.id
}

/// Start the daemon-run reviewers of a session that are queued.
fn start_jobs(daemon: &Arc<Daemon>, session: &SessionRecord) {
    for job_id in &session.job_ids {
        if let Some(job) = daemon.jobs.get(job_id)
            && job.state == JobState::Queued
            && job.review.as_ref().is_some_and(|w| w.reviewer != "worker")
        {
            runner::start(daemon, job_id.clone());
        }
    }
}

pub fn publish(daemon: &Daemon, session: &SessionRecord, job_id: &str, what: &str, detail: &str) {
    daemon.publish(Event::Review {
        session_key: session.key.clone(),
        task_id: session.task_id.clone(),
        job_id: job_id.to_string(),
        what: what.to_string(),
        detail: detail.to_string(),
    });
}

/// Record a reviewer's answer (or why it has none), end its job, and settle the session when
/// it was the last one.
pub async fn conclude(
    daemon: &Arc<Daemon>,
    job_id: &str,
    answer: Result<Dossier, ReviewerFailure>,
    provenance: Provenance,
) {
    let Some(job) = daemon.jobs.get(job_id) else { return };
    let Some(session) = job.review.as_ref().and_then(|w| daemon.sessions.get(&w.session_key)) else { return };
    if job.state.is_finished() {
        return;
    }
    let (state, detail) = match &answer {
        Ok(d) => (JobState::Succeeded, format!("verdict {}", consensus::reviewer_verdict(d))),
        Err(f) if f.class == FailureClass::Timeout => (JobState::TimedOut, f.message.clone()),
        Err(f) if f.class == FailureClass::Cancelled => (JobState::Cancelled, f.message.clone()),
        Err(f) => (JobState::Failed, f.message.clone()),
    };
    daemon.jobs.update(daemon.store(), job_id, true, |r| {
        r.state = state;
        r.finished_at = Some(clock::now_rfc3339());
        r.activity = None;
        r.pgid = None;
        r.reason = Some(detail.clone());
        if let Some(work) = r.review.as_mut() {
            work.lease = None;
            work.checkpoint.phase = "done".into();
            match &answer {
                Ok(d) => {
                    work.dossier = serde_json::to_value(d).ok();
                    work.provenance = Some(provenance.clone());
                }
                Err(f) => {
                    work.failure = Some(f.clone());
                    r.error_kind = Some(
                        match f.class {
                            FailureClass::Parse => "parse_error",
                            FailureClass::Timeout => "timeout",
                            FailureClass::Internal => "internal",
                            FailureClass::Cancelled => "cancelled",
                        }
                        .into(),
                    );
                }
            }
        }
    });
    daemon.publish(Event::JobChanged {
        job_id: job_id.into(),
        task_id: session.task_id.clone(),
        state: state.as_str().into(),
    });
    publish(daemon, &session, job_id, "verdict", &detail);
    write_report(daemon, &session);
    settle(daemon, &session.key).await;
}

/// After `job.cancel`: a reviewer job with no runner of ours (queued, or held by a worker)
/// ends here; the session settles without it.
pub async fn cancelled(daemon: &Arc<Daemon>, job: &JobRecord) {
    let Some(work) = &job.review else { return };
    let ours = work.lease.is_none() && work.reviewer != "worker" && job.state == JobState::Running;
    if ours {
        return; // the runner sees the cancellation and concludes the job itself
    }
    if job.state == JobState::Running {
        let failure = ReviewerFailure { class: FailureClass::Cancelled, message: "the reviewer was cancelled".into() };
        conclude(daemon, &job.id, Err(failure), Provenance::default()).await;
    } else {
        settle(daemon, &work.session_key).await;
    }
}

/// The consensus view of a session's reviewers.
pub fn reviewers_of(daemon: &Daemon, session: &SessionRecord) -> Vec<Reviewer> {
    session
        .reviewers
        .iter()
        .zip(&session.job_ids)
        .map(|(name, job_id)| {
            let job = daemon.jobs.get(job_id);
            let work = job.as_ref().and_then(|j| j.review.clone()).unwrap_or_default();
            let state = job.as_ref().map(|j| j.state);
            let answer = match (state, &work.dossier, &work.failure) {
                (_, Some(d), _) => match serde_json::from_value::<Dossier>(d.clone()) {
                    Ok(d) => Answer::Answered(Box::new(d)),
                    Err(e) => Answer::Failed(ReviewerFailure { class: FailureClass::Internal, message: e.to_string() }),
                },
                (_, None, Some(f)) => Answer::Failed(f.clone()),
                (Some(s), None, None) if s.is_finished() => Answer::Failed(ReviewerFailure {
                    class: if s == JobState::Cancelled { FailureClass::Cancelled } else { FailureClass::Internal },
                    message: job.as_ref().and_then(|j| j.reason.clone()).unwrap_or_else(|| s.as_str().into()),
                }),
                (None, None, None) => Answer::Failed(ReviewerFailure {
                    class: FailureClass::Internal,
                    message: format!("job {job_id} is missing"),
                }),
                _ => Answer::Pending,
            };
            Reviewer {
                name: name.clone(),
                job_id: job_id.clone(),
                state: state.map(|s| s.as_str().to_string()).unwrap_or_default(),
                provider: work.provenance.as_ref().map(|p| p.provider.clone()),
                model: work.provenance.as_ref().and_then(|p| p.model.clone()),
                answer,
            }
        })
        .collect()
}

/// Once every reviewer has finished: decide, record the gate (for a task) and keep the result.
/// Idempotent; safe to call after every change.
pub async fn settle(daemon: &Arc<Daemon>, key: &str) {
    let _one_at_a_time = daemon.sessions.settling.lock().await;
    let Some(mut session) = daemon.sessions.get(key) else { return };
    if session.result.is_some() {
        return;
    }
    let reviewers = reviewers_of(daemon, &session);
    let outcome = consensus::decide(&reviewers);
    if outcome == Outcome::Pending {
        return;
    }
    let mut result = consensus::wait_result(&session.key, session.iteration, &reviewers, outcome);
    result.task_id = session.task_id.clone();
    result.report_path = session.report_path.clone();
    result.gate = outcome.as_str().to_string();
    if !session.task_id.is_empty() {
        match crate::tasks::review::record_consensus(daemon, &session, &reviewers, outcome).await {
            Ok(gate) => {
                if let Some(issue) = gate.guard_issue {
                    result.issues.insert(0, issue);
                    result.outcome = Outcome::Fail.as_str().into();
                    result.status = "resolved".into();
                    result.consensus.verdict = Some("FAIL".into());
                }
                result.gate = gate.state;
                result.review = gate.review;
            }
            Err(e) => {
                warn!(session = %key, "cannot record the review: {}", e.0.message);
                result.outcome = Outcome::Internal.as_str().into();
                result.status = "error".into();
                result.parse_errors.push(format!("scafld: cannot record the review: {}", e.0.message));
            }
        }
    }
    if session.template.is_some() {
        result.template_result = Some(template_outcome(daemon, &session).await);
    }
    session.result = serde_json::to_value(&result).ok();
    daemon.sessions.put(daemon, session.clone());
    write_report(daemon, &session);
    publish(daemon, &session, "", "resolved", &format!("consensus {}", result.outcome));
    if result.gate == "awaiting_approval" {
        publish(daemon, &session, "", "awaiting_approval", "a human must accept or reject the proposed verdict");
    }
    daemon.jobs.touch();
}

/// A standalone template session's result: the reviewers' results combined (a reviewer with
/// none counts as UNKNOWN), under the read-only mutation guard.
async fn template_outcome(daemon: &Daemon, session: &SessionRecord) -> m::TemplateReviewResult {
    let mut results = Vec::new();
    for (name, job_id) in session.reviewers.iter().zip(&session.job_ids) {
        let work = daemon.jobs.get(job_id).and_then(|j| j.review).unwrap_or_default();
        let result = work
            .template_result
            .and_then(|v| serde_json::from_value::<m::TemplateReviewResult>(v).ok())
            .unwrap_or_else(|| m::TemplateReviewResult {
                verdict: "UNKNOWN".into(),
                raw_output: work.failure.map(|f| f.message).unwrap_or_default(),
                provider: name.clone(),
                ..m::TemplateReviewResult::default()
            });
        results.push((name.clone(), result));
    }
    let several = results.len() > 1;
    let verdicts: Vec<&str> = results.iter().map(|(_, r)| r.verdict.as_str()).collect();
    let mut combined = m::TemplateReviewResult {
        verdict: crate::domain::template::combine(&verdicts),
        summary: results
            .iter()
            .map(|(_, r)| r.summary.clone())
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" | "),
        findings: results
            .iter()
            .flat_map(|(name, r)| {
                r.findings.iter().cloned().map(move |mut f| {
                    if several {
                        f.reviewer = Some(name.clone());
                    }
                    f
                })
            })
            .collect(),
        raw_output: if several {
            results.iter().map(|(n, r)| format!("--- {n}\n{}", r.raw_output)).collect::<Vec<_>>().join("\n")
        } else {
            results.first().map(|(_, r)| r.raw_output.clone()).unwrap_or_default()
        },
        template: session.template.clone().unwrap_or_default(),
        inputs: results.iter().map(|(_, r)| r.inputs.clone()).find(|i| !i.is_empty()).unwrap_or_default(),
        timestamp: clock::now_rfc3339(),
        provider: session.reviewers.join(","),
        model: results.iter().find_map(|(_, r)| r.model.clone()),
        session_key: session.key.clone(),
    };
    let root = std::path::PathBuf::from(&session.root);
    let after = tokio::task::spawn_blocking(move || crate::baseline::snapshot(&root)).await.ok().and_then(Result::ok);
    let changed = match after {
        Some(after) => crate::tasks::review::changed_paths(&session.snapshot, &after.paths),
        None => vec!["(the workspace could not be snapshotted after the review)".into()],
    };
    if !changed.is_empty() {
        combined.verdict = "FAIL".into();
        combined.findings.insert(
            0,
            m::TemplateFinding {
                severity: "FAIL".into(),
                title: "The workspace changed during review".into(),
                description: format!(
                    "changed while the reviewer ran: {}; a review must not modify files, so its verdict cannot be trusted",
                    changed.join(", ")
                ),
                file: changed.first().cloned(),
                reviewer: Some("scafld".into()),
            },
        );
    }
    combined
}

/// The session a call names, checked against the workspace it came from.
pub fn find(daemon: &Daemon, ws: &Workspace, key: Option<&str>, task: Option<&str>) -> RpcResult<SessionRecord> {
    let session = match key {
        Some(key) => daemon.sessions.get(key).filter(|s| s.workspace_id == ws.id),
        None => daemon.sessions.latest(&ws.id, task),
    };
    session.ok_or_else(|| {
        let what = match (key, task) {
            (Some(key), _) => format!("no review session {key:?} in this workspace"),
            (None, Some(task)) => format!("no review session for {task}"),
            (None, None) => "no review session in this workspace".into(),
        };
        RpcError::new(ErrorKind::NotFound, what)
            .with_hint("start one with `scafld review <task-id>` or `scafld review --diff BASE..HEAD`")
    })
}

/// `review.wait`: the settled result, or the current state when the timeout runs out.
pub async fn wait(daemon: &Arc<Daemon>, p: m::ReviewWaitParams) -> RpcResult<m::WaitResult> {
    if !(p.timeout_seconds.is_finite() && p.timeout_seconds >= 0.0) {
        return Err(RpcError::new(ErrorKind::InvalidInput, "timeout must be a non-negative number of seconds"));
    }
    let ws = daemon.workspace(&p.root).await?;
    let key = find(daemon, &ws, p.session_key.as_deref(), None)?.key;
    let mut changes = daemon.jobs.changes();
    let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(p.timeout_seconds.min(86_400.0));
    loop {
        let session = daemon.sessions.get(&key).ok_or_else(|| RpcError::internal("session vanished"))?;
        if let Some(result) = session.result.as_ref().and_then(|r| serde_json::from_value(r.clone()).ok()) {
            return Ok(result);
        }
        if tokio::time::timeout_at(deadline, changes.changed()).await.is_err() {
            let reviewers = reviewers_of(daemon, &session);
            let mut result = consensus::wait_result(&session.key, session.iteration, &reviewers, Outcome::Pending);
            result.task_id = session.task_id.clone();
            result.report_path = session.report_path.clone();
            return Ok(result);
        }
    }
}

/// `review.retry`: new jobs for the reviewers that gave no verdict; the others' answers stand.
pub async fn retry(daemon: &Arc<Daemon>, p: m::ReviewRetryParams) -> RpcResult<m::SpawnResult> {
    let ws = daemon.workspace(&p.root).await?;
    let mut session = find(daemon, &ws, Some(&p.session_key), None)?;
    let _one_at_a_time = daemon.sessions.settling.lock().await;
    let reviewers = reviewers_of(daemon, &session);
    if reviewers.iter().any(|r| matches!(r.answer, Answer::Pending)) {
        return Err(RpcError::new(ErrorKind::Busy, "the session's reviewers are still running")
            .with_hint(format!("wait with `scafld review wait --session-key {}`", session.key)));
    }
    let failed: Vec<usize> =
        reviewers.iter().enumerate().filter(|(_, r)| matches!(r.answer, Answer::Failed(_))).map(|(i, _)| i).collect();
    if failed.is_empty() {
        return Err(RpcError::new(
            ErrorKind::InvalidState,
            "every reviewer of this session gave a verdict; nothing to retry",
        )
        .with_hint("a failing verdict is fixed in the code, then reviewed in a new session"));
    }
    if !session.task_id.is_empty() {
        session.snapshot = crate::tasks::review::check_retry(daemon, &ws, &session).await?;
    }
    session.caller_env = p.caller.env.clone();
    session.caller_cwd = p.caller.cwd.clone();
    if !p.caller.client_exe.is_empty() {
        session.client_exe = p.caller.client_exe.clone();
    }
    let mut respawned = Vec::new();
    for i in failed {
        let old = daemon.jobs.get(&session.job_ids[i]);
        let attempt = old.as_ref().map(|j| j.attempt + 1).unwrap_or(2);
        let template = old.and_then(|j| j.review.and_then(|w| w.template));
        session.job_ids[i] = new_job(daemon, &ws, &session, &session.reviewers[i], attempt, template);
        respawned.push(session.reviewers[i].clone());
    }
    session.result = None;
    daemon.sessions.put(daemon, session.clone());
    write_report(daemon, &session);
    start_jobs(daemon, &session);
    Ok(m::SpawnResult {
        session_key: session.key.clone(),
        reviewers_spawned: respawned,
        reviewers_missing: session.missing.clone(),
        job_ids: session.job_ids.clone(),
        resolved: None,
    })
}

/// `review.status`: a session's reviewers with liveness and progress.
pub async fn status(daemon: &Arc<Daemon>, p: m::ReviewStatusParams) -> RpcResult<m::ReviewStatusResult> {
    let ws = daemon.workspace(&p.root).await?;
    let task = match &p.task_id {
        Some(t) => Some(
            crate::domain::task_id::TaskId::parse(t)
                .map_err(|e| RpcError::new(ErrorKind::InvalidInput, e.to_string()))?,
        ),
        None => None,
    };
    let session = find(daemon, &ws, p.session_key.as_deref(), task.as_ref().map(|t| t.as_str()))?;
    let now = now_ms();
    let lease_ms = |job: &JobRecord| {
        job.review
            .as_ref()
            .and_then(|w| w.lease.as_ref())
            .map(|l| l.seconds * 1000)
            .unwrap_or(runner::HEARTBEAT_LEASE_MS)
    };
    let reviewers = session
        .reviewers
        .iter()
        .zip(&session.job_ids)
        .filter_map(|(name, id)| {
            let job = daemon.jobs.get(id)?;
            let work = job.review.clone().unwrap_or_default();
            let running = job.state == JobState::Running;
            let age = (running && work.heartbeat_ms > 0).then(|| now.saturating_sub(work.heartbeat_ms));
            Some(ReviewerProgress {
                reviewer: name.clone(),
                job_id: id.clone(),
                state: job.state.as_str().into(),
                attempt: job.attempt,
                liveness: age.map(|a| consensus::liveness(a, lease_ms(&job)).to_string()).unwrap_or_default(),
                heartbeat_age_seconds: age.map(|a| a as f64 / 1000.0),
                worker_id: work.lease.as_ref().map(|l| l.worker_id.clone()),
                phase: if work.checkpoint.phase.is_empty() {
                    job.state.as_str().into()
                } else {
                    work.checkpoint.phase.clone()
                },
                files_reviewed: work.checkpoint.reviewed.len(),
                findings_so_far: consensus::findings_so_far(&work.checkpoint),
                files_remaining: consensus::remaining(&session.files, &work.checkpoint),
                preflight: work.checkpoint.preflight.clone(),
                verdict: work
                    .dossier
                    .and_then(|d| serde_json::from_value::<Dossier>(d).ok())
                    .map(|d| consensus::reviewer_verdict(&d).to_string()),
                error: work.failure.map(|f| f.message),
            })
        })
        .collect();
    let gate = session.result.as_ref().and_then(|r| r.get("gate")).and_then(|g| g.as_str()).unwrap_or("");
    Ok(m::ReviewStatusResult {
        session_key: session.key.clone(),
        task_id: session.task_id.clone(),
        range: session.range.clone(),
        iteration: session.iteration,
        approval: session.approval.clone(),
        state: match (&session.result, gate) {
            (None, _) => "running".into(),
            (Some(_), "awaiting_approval") => "awaiting_approval".into(),
            (Some(_), _) => "resolved".into(),
        },
        files_total: session.files.len(),
        reviewers,
        report_path: session.report_path.clone(),
    })
}

/// Rewrite `review_report.md` from the session's checkpoints.
pub fn write_report(daemon: &Daemon, session: &SessionRecord) {
    let jobs: Vec<Option<JobRecord>> = session.job_ids.iter().map(|id| daemon.jobs.get(id)).collect();
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
                        .and_then(|d| serde_json::from_value::<Dossier>(d.clone()).ok())
                        .map(|d| format!("{} - {}", consensus::reviewer_verdict(&d), d.summary.trim()))
                        .or_else(|| w.failure.as_ref().map(|f| format!("NO VERDICT - {}", f.message)))
                }),
            }
        })
        .collect();
    let target = if session.task_id.is_empty() {
        format!("Range: {}", session.range)
    } else {
        format!("Task: {}", session.task_id)
    };
    let mut text = consensus::report(
        &format!(
            "{target} | Session: {} | Iteration: {}\nPre-flight: {}",
            session.key, session.iteration, session.preflight
        ),
        &session.files,
        &parts,
    );
    if let Some(outcome) = session.result.as_ref().and_then(|r| r.get("outcome")).and_then(|o| o.as_str()) {
        text.push_str(&format!("\n## Consensus\n{outcome}\n"));
    }
    let path = std::path::Path::new(&session.root).join(&session.report_path);
    let written = path
        .parent()
        .map(std::fs::create_dir_all)
        .unwrap_or(Ok(()))
        .and_then(|_| crate::workspace::specfile::write_atomic(&path, &text));
    if let Err(e) = written {
        warn!(session = %session.key, "cannot write {}: {e}", path.display());
    }
}

/// After a restart: start the daemon-run reviewers that were re-queued, and settle sessions
/// whose reviewers all finished before the daemon stopped.
pub async fn recover(daemon: &Arc<Daemon>) {
    for session in daemon.sessions.all() {
        if session.result.is_some() {
            continue;
        }
        start_jobs(daemon, &session);
        settle(daemon, &session.key).await;
    }
}

/// Expired leases: the job goes back to the queue with its checkpoint for the next worker.
pub fn reap(daemon: &Arc<Daemon>) {
    let now = now_ms();
    for job in daemon.jobs.all() {
        let Some(lease) = job.review.as_ref().and_then(|w| w.lease.clone()) else { continue };
        if job.state != JobState::Running || lease.expires_ms > now {
            continue;
        }
        if let Some(pgid) = job.pgid {
            crate::runner::kill_group(pgid);
        }
        let Some(session) = job.review.as_ref().and_then(|w| daemon.sessions.get(&w.session_key)) else { continue };
        let reason = format!("worker {} went silent past its {} s lease", lease.worker_id, lease.seconds);
        daemon.jobs.update(daemon.store(), &job.id, true, |r| {
            if r.state == JobState::Running {
                r.state = JobState::Queued;
                r.attempt += 1;
                r.pgid = None;
                r.activity = Some(format!("re-queued: {reason}"));
                if let Some(work) = r.review.as_mut() {
                    work.lease = None;
                }
            }
        });
        daemon.sessions.invocations.lock().expect("invocations").remove(&job.id);
        publish(daemon, &session, &job.id, "heartbeat_stale", &reason);
        publish(daemon, &session, &job.id, "requeued", "the checkpoint is kept for the next worker");
        daemon.publish(Event::JobChanged {
            job_id: job.id.clone(),
            task_id: job.task_id.clone(),
            state: "queued".into(),
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
