//! The review gate's decisions on a settled task session: the mutation guard (did a reviewer
//! change the workspace?), recording the consensus in the task's ledger (an accepted or
//! proposed review, or a failed attempt), and the checks before a retry; and the refusals that
//! build, review and complete share (a spec that left its approved contract, stale evidence),
//! with the completion checks. Called by the session machinery in this module and by the task
//! handlers; it calls only services below it (the task ledger, the workspace, git).

use std::sync::Arc;

use scafld_protocol::ErrorKind;
use scafld_protocol::methods as m;
use scafld_protocol::vocab::{Approval, GateState, Verdict};

use crate::baseline;
use crate::daemon::Daemon;
use crate::domain::consensus;
use crate::domain::dossier::{Attack, Dossier, Finding, Location};
use crate::domain::evidence;
use crate::domain::job::{Provenance, SessionRecord};
use crate::domain::ledger::{BaselinePath, LedgerEntry, LedgerEvent, RecordedReview, ReviewerRecord};
use crate::domain::lifecycle::Status;
use crate::domain::review::{self, Authority};
use crate::domain::spec::{Criterion, Spec};
use crate::error::{RpcError, RpcResult};
use crate::evidence::Freshness;
use crate::ledger::{projected_spec, record};
use crate::workspace::Workspace;

/// The mutation guard's view of the task: the material of the review scope and the task's
/// own spec file, by the digest of its authored text (`review::spec_guard_fingerprint`): the
/// runner's own writes to it (a build's evidence, another review's verdict) are never a
/// reviewer's mutation. `spec_path` is the spec's path relative to the root ([`guarded_spec`]);
/// `plain_spec` reads the spec as an older scafld stored it, by its bytes.
pub(crate) async fn guard_snapshot(
    ws: &Workspace,
    spec_path: &str,
    scope: &[String],
    plain_spec: bool,
) -> RpcResult<Vec<BaselinePath>> {
    let (root, scope, spec_path) = (ws.root.clone(), scope.to_vec(), spec_path.to_string());
    baseline::in_workspace(move || {
        let mut entries = baseline::guard_snapshot(&root, &scope, &[])?;
        if !spec_path.is_empty() {
            let fingerprint =
                if plain_spec { baseline::fingerprint(&root, &spec_path) } else { spec_fingerprint(&root, &spec_path) };
            entries.push(BaselinePath { status: "file".into(), fingerprint, path: spec_path });
        }
        Ok::<_, String>(entries)
    })
    .await
}

/// The guard's fingerprint of the spec at `relative`: its authored text's digest when it reads
/// as text within the size budget, else the file's plain fingerprint (a symlink, a folder, a
/// file gone, unreadable or oversized: any change to those still shows).
pub(crate) fn spec_fingerprint(root: &std::path::Path, relative: &str) -> String {
    let path = root.join(relative);
    let text = match std::fs::symlink_metadata(&path) {
        Ok(meta) if meta.is_file() && meta.len() <= crate::domain::spec::budget::MAX_SPEC_BYTES => {
            std::fs::read_to_string(&path).ok()
        }
        _ => None,
    };
    match text {
        Some(text) => review::spec_guard_fingerprint(&text),
        None => baseline::fingerprint(root, relative),
    }
}

/// The material digest now of the files the latest passing review was shown
/// (`ledger::shown_by_passing_review`): `None` when it recorded none or they cannot be read.
pub(crate) async fn shown_now(ws: &Workspace, entries: &[LedgerEntry]) -> Option<String> {
    let (shown, _) = crate::domain::ledger::shown_by_passing_review(entries)?;
    let (root, shown) = (ws.root.clone(), shown.to_vec());
    baseline::in_workspace(move || baseline::material(&root, &shown)).await.ok().map(|m| m.digest)
}

/// The fingerprint of the task's spec as the reviewer was shown it: the session's start snapshot
/// holds it by its authored text (never grouped: `.scafld/specs/` is the runner's folder).
/// `None` for a snapshot that holds it otherwise (an older scafld's, a spec that did not read).
fn reviewed_spec(snapshot: &[BaselinePath], spec_path: &str) -> Option<String> {
    snapshot
        .iter()
        .find(|p| p.path == spec_path && p.fingerprint.starts_with(review::AUTHORED_SPEC))
        .map(|p| p.fingerprint.clone())
}

/// The spec path the guard compares at a review's end: where the task's spec is now, or, when
/// it has none now (the file was deleted while the reviewers ran), the path the session's start
/// snapshot held it at, so the deletion is a mutation of it rather than nothing to compare.
pub(crate) fn guarded_spec(snapshot: &[BaselinePath], task: &str, now: String) -> String {
    if !now.is_empty() {
        return now;
    }
    let file = format!("/{task}.md");
    snapshot
        .iter()
        .find(|p| p.fingerprint.starts_with(review::AUTHORED_SPEC))
        .or_else(|| snapshot.iter().find(|p| p.path.starts_with(".scafld/specs/") && p.path.ends_with(&file)))
        .map(|p| p.path.clone())
        .unwrap_or_default()
}

/// Whether a stored snapshot holds the task's spec by its plain fingerprint (an older scafld's).
fn plain_spec(snapshot: &[BaselinePath], spec_path: &str) -> bool {
    snapshot.iter().any(|p| p.path == spec_path && !p.fingerprint.starts_with(review::AUTHORED_SPEC))
}

/// Refuse (`busy`) while a job of the task runs: a build, or a reviewer of a session.
pub(crate) fn refuse_while_running(daemon: &Daemon, ws: &Workspace, task: &str) -> RpcResult<()> {
    match daemon.jobs.active_for(ws, task) {
        Some(job) => Err(busy(&job, task)),
        None => Ok(()),
    }
}

/// Refuse (`busy`) to start a review of `task` while another of its reviews is still going:
/// a job of the task runs, or a session of the task has all its answers and is being recorded.
/// Asked under the task's lock, so of two reviews started at once the second is refused.
pub(crate) fn refuse_review_in_progress(daemon: &Daemon, ws: &Workspace, task: &str) -> RpcResult<()> {
    refuse_while_running(daemon, ws, task)?;
    match daemon.sessions.latest(ws, Some(task)) {
        Some(session) if session.result.is_none() => Err(RpcError::new(
            ErrorKind::Busy,
            format!("a review (session {}) is in progress for {task}: its verdict is being recorded", session.key),
        )
        .with_hint(format!("wait for it with `scafld review wait --session-key {}`", session.key))),
        _ => Ok(()),
    }
}

/// The `busy` refusal naming the running job of `task` and how to wait for it or stop it.
pub(crate) fn busy(job: &crate::domain::job::JobRecord, task: &str) -> RpcError {
    if job.kind == crate::domain::job::JobKind::Harden {
        return RpcError::new(ErrorKind::Busy, format!("a harden of {task} (job {}) is running", job.id)).with_hint(
            format!(
                "wait for its round with `scafld job wait {}` or stop it with `scafld job cancel {}`",
                job.id, job.id
            ),
        );
    }
    match &job.review {
        Some(work) => RpcError::new(
            ErrorKind::Busy,
            format!("a review ({} reviewer, job {}) is in progress for {task}", work.reviewer, job.id),
        )
        .with_hint(format!(
            "wait for it with `scafld review wait --session-key {}` or stop it with `scafld job cancel {}`",
            work.session_key, job.id
        )),
        None => RpcError::new(ErrorKind::Busy, format!("a build job ({}) is running for {task}", job.id)).with_hint(
            format!("wait for it with `scafld job wait {}` or stop it with `scafld job cancel {}`", job.id, job.id),
        ),
    }
}

/// What a settled task session did to the gate.
pub struct Gate {
    pub state: GateState,
    pub review: Option<m::TaskReviewResult>,
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
    let ws = daemon.workspace_of(&session.root, &session.workspace_id).await?;
    if ws.id != session.workspace_id {
        // Never into another workspace's ledger (the folder took a new identity meanwhile).
        return Err(RpcError::new(
            ErrorKind::WorkspaceError,
            format!(
                "{} holds workspace {} now, not {}, which this review is of",
                session.root, ws.id, session.workspace_id
            ),
        ));
    }
    let lock = daemon.jobs.task_lock(&ws, task);
    let _guard = lock.lock().await;
    let spec_path = guarded_spec(&session.snapshot, task, ws.spec_path(task));
    // Asked of the disk, not the index, which may not have seen the deletion yet.
    let spec_gone = !spec_path.is_empty() && std::fs::symlink_metadata(ws.root.join(&spec_path)).is_err();
    let plain = plain_spec(&session.snapshot, &spec_path);
    let mutated = match guard_snapshot(&ws, &spec_path, &session.scope, plain).await {
        Ok(after) => {
            let mut mutated = review::mutations(&session.snapshot, &after, &session.scope, &spec_path);
            // A file written while the reviewers ran, its content the same again now (a stash
            // and its pop, a branch switched and back): they may have read other content.
            if let Some(since) = session.guard_since {
                let root = ws.root.clone();
                let files: Vec<BaselinePath> = after.into_iter().filter(|p| p.path != spec_path).collect();
                let rewritten = tokio::task::spawn_blocking(move || baseline::rewritten_since(&root, &files, since))
                    .await
                    .unwrap_or_default();
                mutated.extend(rewritten);
                mutated.sort();
                mutated.dedup();
            }
            mutated
        }
        Err(e) => {
            attempt_failed(daemon, &ws, task, format!("review workspace snapshot failed: {}", e.0.message))?;
            return Ok(Gate { state: GateState::Retry, review: None, guard_issue: None });
        }
    };
    if mutated.is_empty()
        && let Some(why) = no_verdict(session, reviewers, outcome)
    {
        attempt_failed(daemon, &ws, task, why)?;
        let state = if outcome == consensus::Outcome::NoReviewers { GateState::NoReviewers } else { GateState::Retry };
        return Ok(Gate { state, review: None, guard_issue: None });
    }
    let answers: Vec<(String, Dossier)> = reviewers
        .iter()
        .filter_map(|r| match &r.answer {
            consensus::Answer::Answered(d) => Some((r.name.clone(), d.as_ref().clone())),
            _ => None,
        })
        .collect();
    let (mut dossier, guard_issue) = gate_dossier(session, &answers, &mutated);
    // The spec itself went away while the reviewers ran: the guard failed the review closed
    // (its fingerprint at the start is no file now); say so, and what brings it back.
    let spec_gone = spec_gone && mutated.contains(&spec_path);
    if spec_gone {
        dossier.summary = format!(
            "{} The task's spec {spec_path} was deleted while the reviewers ran: put it back, then review again.",
            dossier.summary.trim()
        );
    }
    let provider = match answers.as_slice() {
        _ if !mutated.is_empty() => "scafld".to_string(),
        [(only, _)] => only.clone(),
        _ => "consensus".to_string(),
    };
    // The word every surface shows for this session decides what the ledger records.
    let verdict = match consensus::reviewer_verdict(&dossier, consensus::Question::Completion) {
        m::ConsensusVerdict::Pass => Verdict::Pass,
        _ => Verdict::Fail,
    };
    let reason = match verdict {
        Verdict::Pass => "review gate pass".to_string(),
        Verdict::Fail => format!(
            "review gate fail: {} finding(s), {} completion blocker(s)",
            dossier.findings.len(),
            dossier.open_blockers()
        ),
    };
    let manual = session.approval == Approval::Manual && mutated.is_empty();
    // What the reviewer was shown as it is now (unchanged since the start, or the guard said
    // so): `complete` holds the files to it. Unreadable: nothing recorded, `tree` alone stands.
    let (root, shown) = (ws.root.clone(), session.scope.clone());
    let shown_material = match shown.is_empty() {
        true => String::new(),
        false => baseline::in_workspace(move || baseline::material(&root, &shown))
            .await
            .map(|m| m.digest)
            .unwrap_or_default(),
    };
    let recorded = RecordedReview {
        verdict: verdict.to_string(),
        provider: provider.clone(),
        reason,
        dossier: serde_json::to_value(&dossier).ok(),
        tree: session.tree.clone(),
        reviewers: reviewer_records(daemon, session, reviewers),
        spec_digest: reviewed_spec(&session.snapshot, &spec_path),
        shown: if shown_material.is_empty() { Vec::new() } else { session.scope.clone() },
        shown_material,
    };
    let event = if manual {
        LedgerEvent::ReviewProposed(RecordedReview {
            reason: format!("proposed, awaiting approval: {}", recorded.reason),
            ..recorded
        })
    } else {
        LedgerEvent::Review(recorded)
    };
    record(daemon, &ws, task, vec![event], "command:review")?;
    let state = if manual { GateState::AwaitingApproval } else { verdict.into() };
    let review = m::TaskReviewResult {
        task_id: task.to_string(),
        job_id: None,
        verdict: verdict.to_string(),
        mode: session.request.mode,
        provider,
        summary: dossier.summary.clone(),
        output_format: dossier.output_format.clone().unwrap_or_default(),
        open_blockers: dossier.open_blockers(),
        findings: dossier.findings.iter().filter_map(|f| serde_json::to_value(f).ok()).collect(),
        next_command: match (manual, verdict) {
            // A command that runs as printed, as `status` gives it (rejecting is the other way).
            (true, _) => format!("scafld review accept {task} --reason \"why\""),
            (false, Verdict::Pass) => after_pass(daemon, &ws, task)?,
            // Nothing but `status` works on a task without its spec file; it says where to
            // put the file back.
            (false, Verdict::Fail) if spec_gone => format!("scafld status {task}"),
            (false, Verdict::Fail) => format!("scafld handoff {task}"),
        },
        context: None,
        session: None,
        gate: Some(state),
    };
    Ok(Gate { state, review: Some(review), guard_issue })
}

/// What follows a pass just recorded: `complete` when `complete`'s own rule (the completion
/// authority walk) lets it close the task, else another review (a `local` member, say, never
/// completes one).
pub(crate) fn after_pass(daemon: &Daemon, ws: &Workspace, task: &str) -> RpcResult<String> {
    let entries = daemon.store().ledger(&ws.id, task).map_err(|e| RpcError::internal(e.to_string()))?;
    Ok(match review::completion_authority(&entries) {
        Authority::Valid { .. } => format!("scafld complete {task}"),
        Authority::Invalid { .. } => crate::templates::review_command(&ws.root, task),
    })
}

/// Why a session that left the workspace alone has no verdict to record (no reviewer ran, or
/// some reviewer gave none): the attempt fails and asks for a retry.
fn no_verdict(
    session: &SessionRecord,
    reviewers: &[consensus::Reviewer],
    outcome: consensus::Outcome,
) -> Option<String> {
    use consensus::{Answer, Outcome};
    match outcome {
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
    }
}

/// The one dossier the ledger records: the reviewers' answers merged (a fail when none
/// answered), failed by the mutation guard when the workspace changed, with the guard's issue.
fn gate_dossier(
    session: &SessionRecord,
    answers: &[(String, Dossier)],
    mutated: &[String],
) -> (Dossier, Option<m::ReviewIssue>) {
    let mut dossier = if answers.is_empty() {
        Dossier {
            verdict: "fail".into(),
            mode: session.request.mode.as_str().to_string(),
            summary: "No reviewer answered.".into(),
            provider: Some("scafld".into()),
            ..Dossier::default()
        }
    } else {
        consensus::merge(answers)
    };
    if mutated.is_empty() {
        return (dossier, None);
    }
    guard(&mut dossier, mutated);
    let issue = consensus::issues("scafld", &dossier).into_iter().find(|i| i.title.contains("workspace changed"));
    (dossier, issue)
}

/// Each reviewer of the session as the ledger records it: provenance and verdict.
fn reviewer_records(
    daemon: &Daemon,
    session: &SessionRecord,
    reviewers: &[consensus::Reviewer],
) -> Vec<ReviewerRecord> {
    session
        .reviewers
        .iter()
        .zip(&session.job_ids)
        .zip(reviewers)
        .map(|((name, job_id), r)| ReviewerRecord {
            reviewer: name.clone(),
            provenance: daemon
                .jobs
                .get(daemon.store(), job_id)
                .and_then(|j| j.review.and_then(|w| w.provenance))
                .unwrap_or(Provenance { provider: name.clone(), channel: "none".into(), ..Provenance::default() }),
            verdict: match &r.answer {
                consensus::Answer::Answered(d) => {
                    consensus::reviewer_verdict(d, consensus::Question::of(&session.subject)).to_string()
                }
                consensus::Answer::Failed(f) => format!("no verdict: {}", f.message),
                consensus::Answer::Pending => "pending".into(),
            },
        })
        .collect()
}

/// The next step `status` gives for a task, as a refusal's hint (`tasks::read::refusal_hint`),
/// handed down by the handler: nothing in `review/` calls up into `tasks/`.
pub type NextHint = for<'a> fn(&'a Daemon, &'a Workspace, &'a str) -> futures::future::BoxFuture<'a, String>;

/// The next action `status` gives for a task (`tasks::read::status_next`), handed down by the
/// handler as [`NextHint`] is.
pub type NextStep =
    for<'a> fn(&'a Daemon, &'a Workspace, &'a str) -> futures::future::BoxFuture<'a, RpcResult<m::NextAction>>;

/// A retry re-runs reviewers on the packet the session started with, so it is refused unless
/// that packet is still the task's review: the task in review, its approved contract
/// unchanged, no build or other review of it running, no newer session of it, and the material
/// of its scope the one the session judged (a change since, built or not, needs a new review
/// with a new packet), and the spec's authored text the one its packet holds. The caller holds
/// the task's lock. Returns the snapshot to guard against: the original one, with the task's
/// own spec read again (settling the first round wrote it; that write is ours, not a
/// reviewer's), which leaves its authored fingerprint as it was and reads one an older scafld
/// stored by its bytes by its authored text.
pub async fn check_retry(
    daemon: &Arc<Daemon>,
    ws: &Workspace,
    session: &SessionRecord,
    task: &str,
    next: NextHint,
) -> RpcResult<Vec<BaselinePath>> {
    let (spec, entries) = projected_spec(daemon, ws, task)?;
    if spec.status() != Some(Status::Review) {
        return Err(RpcError::new(
            ErrorKind::InvalidState,
            format!("{task} is {} now; only a task in review can retry its reviewers", spec.status_word()),
        ));
    }
    refuse_contract_changes(task, &spec, &entries, "retry the review of", ErrorKind::ReviewFailed)?;
    refuse_while_running(daemon, ws, task)?;
    let new_review =
        format!("start a new review of the files as they are: `{}`", crate::templates::review_command(&ws.root, task));
    if let Some(newer) = daemon.sessions.latest(ws, Some(task)).filter(|s| s.key != session.key) {
        return Err(RpcError::new(
            ErrorKind::InvalidState,
            format!("review session {} of {task} is stale: a newer session ({}) reviews it", session.key, newer.key),
        )
        .with_hint({
            // Retrying the newer one is a way only while a reviewer of it gave no verdict.
            let unanswered = super::reviewers_of(daemon, &newer)
                .iter()
                .any(|r| matches!(r.answer, crate::domain::consensus::Answer::Failed(_)));
            match unanswered {
                true => format!("retry that one (`scafld review retry {}`) or {new_review}", newer.key),
                false => format!("`scafld status {task}` names the next step; or {new_review}"),
            }
        }));
    }
    if !session.tree.is_empty() {
        let now = crate::evidence::material_now(ws, &spec).await.map_err(RpcError::from)?;
        if now.digest != session.tree {
            return Err(RpcError::new(
                ErrorKind::InvalidState,
                format!(
                    "review session {} of {task} is stale: the files in its scope changed since its packet was made, so its reviewers would judge the old diff",
                    session.key
                ),
            )
            // The step `status` gives: a new review once the changed files' evidence is
            // current, the build that re-runs it first (a review now would be refused).
            .with_hint(next(daemon, ws, task).await));
        }
    }
    // The packet holds the spec's text as it was when the review began: a retry after an edit
    // of it would have the reviewers judge the old text, and its verdict would then speak for
    // the edited one (the guard's snapshot below takes the spec as it is now). The step is the
    // new review `status` names, with the same reviewers, as `evidence::again_as_before` says.
    let spec_path = guarded_spec(&session.snapshot, task, ws.spec_path(task));
    if let Some(reviewed) = reviewed_spec(&session.snapshot, &spec_path) {
        let (root, path) = (ws.root.clone(), spec_path.clone());
        let now = baseline::in_workspace(move || Ok::<_, String>(spec_fingerprint(&root, &path))).await?;
        if now != reviewed {
            return Err(RpcError::new(
                ErrorKind::InvalidState,
                format!(
                    "review session {} of {task} cannot be retried: the spec's text changed since its packet was made, so its reviewers would judge the old spec",
                    session.key
                ),
            )
            .with_hint(next(daemon, ws, task).await));
        }
    }
    // Its reviewers are handed the packet sealed when the review began, or none: an edited or
    // lost one is no packet to retry on.
    if let Err(why) = super::sealed_packet(ws, session) {
        return Err(RpcError::new(
            ErrorKind::InvalidState,
            format!("review session {} of {task} cannot be retried: {why}", session.key),
        )
        .with_hint(new_review));
    }
    let now = guard_snapshot(ws, &spec_path, &session.scope, false).await?;
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
        id: crate::domain::dossier::MUTATION_FINDING.into(),
        severity: "critical".into(),
        blocks_completion: true,
        status: Some("open".into()),
        category: Some("review_integrity".into()),
        confidence: Some("high".into()),
        location: Some(Location { path: mutated[0].clone(), line: None }),
        evidence: Some(format!("changed during review: {}", scafld_protocol::text::listed(mutated))),
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

/// Refuse while any criterion's evidence is stale, naming what changed.
pub(crate) fn refuse_stale(task: &str, fresh: &Freshness, what: &str) -> RpcResult<()> {
    if fresh.stale.is_empty() {
        return Ok(());
    }
    // The files cannot be read at all: the workspace's trouble (exit 6), not evidence to rebuild.
    if fresh
        .stale
        .values()
        .all(|why| matches!(why, evidence::Stale::Unverifiable | evidence::Stale::UnreadableName { .. }))
    {
        let why = scafld_protocol::text::listed(&fresh.changes);
        return Err(RpcError::new(
            ErrorKind::WorkspaceError,
            format!(
                "cannot {what} {task}: the files in its scope cannot be read ({why}), so its evidence cannot be checked"
            ),
        )
        .with_hint(
            fresh
                .material
                .as_ref()
                .err()
                .and_then(crate::baseline::GitFailure::hint)
                .unwrap_or_else(|| "repair the repository (see `git status`), then try again".into()),
        ));
    }
    let ids: Vec<String> = fresh.stale.iter().map(|(id, why)| format!("`{id}` ({})", why.describe())).collect();
    let changed = if fresh.changes.is_empty() {
        String::new()
    } else {
        format!("; changed: {}", scafld_protocol::text::listed(&fresh.changes))
    };
    let rewriting: Vec<String> = fresh
        .stale
        .iter()
        .filter(|(_, why)| matches!(why, evidence::Stale::RewritesOwnScope { .. }))
        .map(|(id, _)| id.clone())
        .collect();
    let hint = if rewriting.is_empty() {
        format!("run `scafld build {task}` to re-run it on the current files")
    } else {
        crate::domain::next::rewrite_reason(task, &rewriting, &scafld_protocol::text::listed(&fresh.changes))
    };
    Err(RpcError::new(
        ErrorKind::ReviewFailed,
        format!("cannot {what} {task}: stale evidence for {}{changed}", ids.join(", ")),
    )
    .with_hint(hint))
}

/// Refuse while criteria have no recorded result at all or a phase is not completed (in
/// review, only an amendment of the contract adds one: `build::unbuilt`): a reviewer would
/// judge work whose evidence does not exist yet.
pub(crate) fn refuse_never_run(task: &str, spec: &Spec, what: &str) -> RpcResult<()> {
    let never: Vec<String> =
        spec.criteria().filter(|c| crate::domain::build::never_ran(c)).map(|c| format!("`{}`", c.id)).collect();
    if !never.is_empty() {
        return Err(RpcError::new(
            ErrorKind::ReviewFailed,
            format!("cannot {what} {task}: {} never ran (the contract was amended since the build)", never.join(", ")),
        )
        .with_hint(format!("run `scafld build {task}` first: it runs them, then review")));
    }
    // A phase an amendment added with no criterion of its own: its build step comes first too.
    let open = crate::domain::build::open_phases(spec);
    if open.is_empty() {
        return Ok(());
    }
    Err(RpcError::new(
        ErrorKind::ReviewFailed,
        format!("cannot {what} {task}: not every phase is completed: {}", open.join(", ")),
    )
    .with_hint(format!("run `scafld build {task}` first: it completes them, then review")))
}

/// Refuse while the spec differs from its approved contract (a criterion changed, added or
/// removed, or the evidence scope changed), naming each change: `what` is the refused command.
/// The changes are in the error's details (`contract_changes`) for callers that branch on them.
pub(crate) fn refuse_contract_changes(
    task: &str,
    spec: &Spec,
    entries: &[LedgerEntry],
    what: &str,
    kind: ErrorKind,
) -> RpcResult<()> {
    let Some(contract) = crate::domain::ledger::replay(entries).contract else { return Ok(()) };
    let changes = evidence::contract_changes(spec, &contract);
    if changes.is_empty() {
        return Ok(());
    }
    let unprovable = evidence::unprovable_phases(spec);
    let hint = match unprovable.is_empty() {
        true => format!(
            "restore them, or re-approve the new ones (recorded, and shown to the reviewer): `scafld approve {task} --amend --reason \"why\"`"
        ),
        false => evidence::unprovable_repair(task, &unprovable),
    };
    Err(RpcError::new(
        kind,
        format!(
            "cannot {what} {task}: its acceptance criteria, phases or scope differ from the approved contract: {}",
            changes.join(", ")
        ),
    )
    .with_hint(hint)
    .with_details(serde_json::json!({ "contract_changes": changes })))
}

/// The gate's last word before a task completes: the spec is the approved contract, its
/// evidence is current and every criterion passed (there is at least one that runs), the review
/// judged the files as they are now, and a passing review from a trusted channel stands (the
/// completion authority walk). Returns the reviewing provider and the review's ledger entry.
/// `next` is the refusal's hint as `status` gives it (`tasks::read::refusal_hint`), awaited
/// only when the gate refuses for want of a trusted review; `review_command` reviews
/// the task (`templates::review_command`); `spec_now` is the spec file's authored text as the
/// guard takes it ([`spec_fingerprint`]), which the passing review must have judged;
/// `shown_now` the material digest of the files that review was shown, read now
/// ([`shown_now`]).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn completion(
    task: &str,
    spec: &Spec,
    entries: &[LedgerEntry],
    fresh: &Freshness,
    review_command: &str,
    spec_now: &str,
    shown_now: Option<&str>,
    next: impl Future<Output = String>,
) -> RpcResult<(String, String)> {
    refuse_contract_changes(task, spec, entries, "complete", ErrorKind::ReviewFailed)?;
    refuse_stale(task, fresh, "complete")?;
    if !spec.criteria().any(Criterion::is_executable) {
        return Err(RpcError::new(
            ErrorKind::ReviewFailed,
            format!("cannot complete {task}: it has no executable acceptance criterion, so nothing shows it done"),
        )
        .with_hint(format!(
            "add a criterion with a `- Command:` and re-approve: `scafld approve {task} --amend --reason \"why\"`, then build"
        )));
    }
    // Every phase done: a phase added after the review (with no criterion of its own, so no
    // contract change) is work nobody did or reviewed.
    let open = crate::domain::build::open_phases(spec);
    if !open.is_empty() {
        return Err(RpcError::new(
            ErrorKind::ReviewFailed,
            format!("cannot complete {task}: not every phase is completed: {}", open.join(", ")),
        )
        .with_hint(format!("run `scafld build {task}` until every phase is completed, then review again")));
    }
    let unproven = evidence::unproven(spec, entries);
    if !unproven.is_empty() {
        let ids: Vec<String> = unproven.iter().map(|id| format!("`{id}`")).collect();
        return Err(RpcError::new(
            ErrorKind::ReviewFailed,
            format!("cannot complete {task}: no passing evidence for {}", ids.join(", ")),
        )
        .with_hint(format!("run `scafld build {task}` until every criterion passes, then review again")));
    }
    // Files changed after a review only matter when that review passed: a failed one is
    // refused below for what it is (the latest review did not pass).
    let reviewed = entries.iter().rev().find_map(|e| match &e.event {
        LedgerEvent::Review(RecordedReview { tree, verdict, .. }) => Some((tree.as_str(), verdict.as_str())),
        _ => None,
    });
    let passed = reviewed.filter(|(tree, verdict)| !tree.is_empty() && *verdict == Verdict::Pass.as_str());
    if let (Some((reviewed, _)), Ok(now)) = (passed, &fresh.material)
        && reviewed != now.digest
    {
        return Err(RpcError::new(
            ErrorKind::ReviewFailed,
            format!("cannot complete {task}: the files in its scope changed after the review passed"),
        )
        .with_hint(format!("run `scafld build {task}` and `{review_command}` again")));
    }
    // Files the reviewer was shown beyond the task's scope (`--review-scope`) are what it judged
    // too: changed since, the pass no longer speaks for them.
    if let Some((_, then)) = crate::domain::ledger::shown_by_passing_review(entries)
        && shown_now != Some(then)
    {
        return Err(RpcError::new(
            ErrorKind::ReviewFailed,
            format!("cannot complete {task}: files the reviewer was shown (its review scope) changed after the review passed"),
        )
        .with_hint(format!(
            "restore them, or have them reviewed as they are: `{review_command}` (the review is shown them again)"
        )));
    }
    // The review judged the spec as the packet showed it: its authored text (Summary,
    // Objectives, phases...; never the lines scafld projects) edited since says what nobody
    // reviewed.
    if passed.is_some() && crate::domain::ledger::spec_changed_since_review(entries, Some(spec_now)) {
        return Err(RpcError::new(
            ErrorKind::ReviewFailed,
            format!("cannot complete {task}: the spec's text changed after the review passed, so the review does not speak for it"),
        )
        .with_hint(format!("restore the text the reviewer judged, or have it reviewed as it is: `{review_command}`")));
    }
    match review::completion_authority(entries) {
        Authority::Valid { provider, review_entry, .. } => Ok((provider, review_entry)),
        Authority::Invalid { reason } => {
            let next = next.await;
            Err(RpcError::new(ErrorKind::ReviewFailed, format!("cannot complete {task}: {reason}")).with_hint(format!(
                "a passing review from codex, claude, gemini, command, a lease-holding worker, a consensus with no `local` member, or an audited human override is needed; {next}"
            )))
        }
    }
}
