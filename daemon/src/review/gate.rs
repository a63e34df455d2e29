//! The review gate's decisions on a settled task session: the mutation guard (did a reviewer
//! change the workspace?), recording the consensus in the task's ledger (an accepted or
//! proposed review, or a failed attempt), and the checks before a retry. Called by the
//! session machinery in this module and by the `task.review` handler; it calls only services
//! below it (the task ledger, the workspace, git).

use std::sync::Arc;

use scafld_protocol::ErrorKind;
use scafld_protocol::methods as m;
use scafld_protocol::vocab::Approval;

use crate::baseline;
use crate::daemon::Daemon;
use crate::domain::consensus;
use crate::domain::dossier::{Attack, Dossier, Finding, Location};
use crate::domain::job::{Provenance, SessionRecord};
use crate::domain::ledger::{BaselinePath, LedgerEvent, RecordedReview, ReviewerRecord};
use crate::domain::lifecycle::Status;
use crate::domain::review;
use crate::error::{RpcError, RpcResult};
use crate::ledger::{projected_spec, record};
use crate::workspace::Workspace;

/// The mutation guard's view of the task: the material of the review scope and the task's
/// own spec file.
pub(crate) async fn guard_snapshot(ws: &Workspace, task: &str, scope: &[String]) -> RpcResult<Vec<BaselinePath>> {
    let spec_path = ws.spec_path(task);
    let (root, scope) = (ws.root.clone(), scope.to_vec());
    baseline::in_workspace(move || baseline::guard_snapshot(&root, &scope, &[spec_path])).await
}

/// What a settled task session did to the gate.
pub struct Gate {
    /// pass, fail, awaiting_approval, retry or no_reviewers.
    pub state: String,
    pub review: Option<m::ReviewResult>,
    /// The mutation guard's finding, when the workspace changed during the review.
    pub guard_issue: Option<m::ReviewIssue>,
}

/// Record a settled session in the task's ledger: the accepted (or proposed) review, or a
/// failed attempt that asks for the review to be retried. Nothing here reports a pass that no
/// reviewer gave.
pub async fn record_consensus(
    daemon: &Arc<Daemon>,
    session: &SessionRecord,
    task: &str,
    reviewers: &[consensus::Reviewer],
    outcome: consensus::Outcome,
) -> RpcResult<Gate> {
    use consensus::{Answer, Outcome};
    let ws = daemon.workspace(&session.root).await?;
    let task = task.to_string();
    let lock = daemon.jobs.task_lock(&ws, &task);
    let _guard = lock.lock().await;
    let after = guard_snapshot(&ws, &task, &session.scope).await;
    let spec_path = ws.spec_path(&task);
    let mutated = match &after {
        Ok(after) => review::mutations(&session.snapshot, after, &session.scope, &spec_path),
        Err(e) => {
            attempt_failed(daemon, &ws, &task, format!("review workspace snapshot failed: {}", e.0.message))?;
            return Ok(Gate { state: "retry".into(), review: None, guard_issue: None });
        }
    };
    let answers: Vec<(String, Dossier)> = reviewers
        .iter()
        .filter_map(|r| match &r.answer {
            Answer::Answered(d) => Some((r.name.clone(), d.as_ref().clone())),
            _ => None,
        })
        .collect();
    if mutated.is_empty() {
        let why = match outcome {
            Outcome::NoReviewers => Some(format!(
                "no reviewer available ({} missing); the review fails closed",
                if session.missing.is_empty() { "none requested".into() } else { session.missing.join(", ") }
            )),
            Outcome::ParseError | Outcome::Timeout | Outcome::Internal => Some(
                reviewers
                    .iter()
                    .filter_map(|r| match &r.answer {
                        Answer::Failed(f) => Some(format!("{}: {}", r.name, f.message)),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
            _ => None,
        };
        if let Some(why) = why {
            attempt_failed(daemon, &ws, &task, why)?;
            let state = if outcome == Outcome::NoReviewers { "no_reviewers" } else { "retry" };
            return Ok(Gate { state: state.into(), review: None, guard_issue: None });
        }
    }
    let mut dossier = if answers.is_empty() {
        Dossier {
            verdict: "fail".into(),
            mode: session.request.mode.as_str().to_string(),
            summary: "No reviewer answered.".into(),
            provider: Some("scafld".into()),
            ..Dossier::default()
        }
    } else {
        consensus::merge(&answers)
    };
    let mut guard_issue = None;
    if !mutated.is_empty() {
        guard(&mut dossier, &mutated);
        guard_issue = consensus::issues("scafld", &dossier).into_iter().find(|i| i.title.contains("workspace changed"));
    }
    let provider = if !mutated.is_empty() {
        "scafld".to_string()
    } else if answers.len() == 1 {
        answers[0].0.clone()
    } else {
        "consensus".to_string()
    };
    let records: Vec<ReviewerRecord> = session
        .reviewers
        .iter()
        .zip(&session.job_ids)
        .zip(reviewers)
        .map(|((name, job_id), r)| ReviewerRecord {
            reviewer: name.clone(),
            provenance: daemon
                .jobs
                .get(job_id)
                .and_then(|j| j.review.and_then(|w| w.provenance))
                .unwrap_or(Provenance { provider: name.clone(), channel: "none".into(), ..Provenance::default() }),
            verdict: match &r.answer {
                Answer::Answered(d) => consensus::reviewer_verdict(d).to_string(),
                Answer::Failed(f) => format!("no verdict: {}", f.message),
                Answer::Pending => "pending".into(),
            },
        })
        .collect();
    let verdict = if dossier.verdict == "pass" && dossier.open_blockers() == 0 { "pass" } else { "fail" }.to_string();
    let reason = if verdict == "pass" {
        "review gate pass".to_string()
    } else {
        format!(
            "review gate fail: {} finding(s), {} completion blocker(s)",
            dossier.findings.len(),
            dossier.open_blockers()
        )
    };
    let manual = session.approval == Approval::Manual && mutated.is_empty();
    let value = serde_json::to_value(&dossier).ok();
    let event = if manual {
        LedgerEvent::ReviewProposed(RecordedReview {
            verdict: verdict.clone(),
            provider: provider.clone(),
            reason: format!("proposed, awaiting approval: {reason}"),
            dossier: value,
            tree: session.tree.clone(),
            reviewers: records,
        })
    } else {
        LedgerEvent::Review(RecordedReview {
            verdict: verdict.clone(),
            provider: provider.clone(),
            reason,
            dossier: value,
            tree: session.tree.clone(),
            reviewers: records,
        })
    };
    record(daemon, &ws, &task, vec![event], "command:review")?;
    let state = if manual { "awaiting_approval".to_string() } else { verdict.clone() };
    let review = m::ReviewResult {
        task_id: task.clone(),
        job_id: None,
        verdict: verdict.clone(),
        mode: session.request.mode,
        provider,
        summary: dossier.summary.clone(),
        output_format: dossier.output_format.clone().unwrap_or_default(),
        open_blockers: dossier.open_blockers(),
        findings: dossier.findings.iter().filter_map(|f| serde_json::to_value(f).ok()).collect(),
        next_command: match (manual, verdict.as_str()) {
            (true, _) => format!("scafld review accept {task} --reason R (or: scafld review reject {task} --reason R)"),
            (false, "pass") => format!("scafld complete {task}"),
            _ => format!("scafld handoff {task}"),
        },
        context: None,
        session: None,
        gate: state.clone(),
    };
    Ok(Gate { state, review: Some(review), guard_issue })
}

/// A retry re-runs reviewers on the tree the session started with; the task must still be in
/// review. Returns the snapshot to guard against: the original one, with the task's own spec
/// refreshed (settling the first round wrote it; that write is ours, not a reviewer's).
pub async fn check_retry(
    daemon: &Arc<Daemon>,
    ws: &Workspace,
    session: &SessionRecord,
    task: &str,
) -> RpcResult<Vec<BaselinePath>> {
    let (spec, _) = projected_spec(daemon, ws, task)?;
    if spec.status() != Some(Status::Review) {
        return Err(RpcError::new(
            ErrorKind::InvalidState,
            format!("{task} is {} now; only a task in review can retry its reviewers", spec.front.status),
        ));
    }
    let spec_path = ws.spec_path(task);
    let now = guard_snapshot(ws, task, &session.scope).await?;
    let mut snapshot: Vec<BaselinePath> = session.snapshot.iter().filter(|p| p.path != spec_path).cloned().collect();
    snapshot.extend(now.into_iter().filter(|p| p.path == spec_path));
    Ok(snapshot)
}

/// Record a review that ended without an accepted verdict ("retry the review").
pub(crate) fn attempt_failed(daemon: &Daemon, ws: &Workspace, task: &str, reason: String) -> RpcResult<()> {
    record(daemon, ws, task, vec![LedgerEvent::ReviewAttempt { status: "failed".into(), reason }], "command:review")
        .map(drop)
}

/// Turn workspace changes made during the review into a blocking finding.
pub(crate) fn guard(dossier: &mut Dossier, mutated: &[String]) {
    dossier.findings.push(Finding {
        id: "workspace-mutation".into(),
        severity: "critical".into(),
        blocks_completion: true,
        status: Some("open".into()),
        category: Some("review_integrity".into()),
        confidence: Some("high".into()),
        location: Some(Location { path: mutated[0].clone(), line: None }),
        evidence: Some(format!("changed during review: {}", mutated.join(", "))),
        impact: Some("the reviewer judged moving code, so its verdict cannot be trusted".into()),
        validation: Some("review again on an unchanged tree".into()),
        summary: Some("The workspace changed during review".into()),
        ..Finding::default()
    });
    dossier.attack_log.push(Attack {
        target: "workspace mutation guard".into(),
        attack: "compare pre-review and post-review workspace snapshots".into(),
        result: "finding".into(),
        notes: None,
    });
    dossier.summary = format!("{} Workspace changed during review; review failed closed.", dossier.summary.trim());
    dossier.verdict = "fail".into();
}
