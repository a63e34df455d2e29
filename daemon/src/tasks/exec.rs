//! Execution: approve, build (the acceptance job), fail, cancel, the session ledger, and the
//! one path every ledger-backed mutation takes: append events (flushed), then project.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt, Shared};
use scafld_protocol::methods::{self as m, BuildOutcome, CriterionResult};
use scafld_protocol::{ErrorKind, Event};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{entry, require_valid};
use crate::baseline;
use crate::clock;
use crate::config::Config;
use crate::daemon::{Daemon, Home};
use crate::domain::acceptance::{self, RunFacts};
use crate::domain::build::{self, Step, Target};
use crate::domain::evidence;
use crate::domain::harden;
use crate::domain::job::{JobKind, JobState};
use crate::domain::ledger::{self, LedgerEntry, LedgerEvent, StepChange};
use crate::domain::lifecycle::{HardenStatus, Status};
use crate::domain::spec::{Criterion, Spec};
use crate::error::{RpcError, RpcResult};
use crate::evidence::StepMaterial;
use crate::ledger::{Projected, Unprojected, implementer, projected_spec, projected_spec_or, record, record_ending};
pub(crate) use crate::review::gate::{busy, refuse_while_running};
use crate::runner::{self, Diagnostics, RunOutcome, RunRequest};
use crate::workspace::Workspace;
use crate::workspace::specfile::{self, InPlace};
use scafld_protocol::vocab::CriterionStatus;

/// Bytes of output kept in a ledger entry (the whole output is in the diagnostics file).
const SNIPPET_BYTES: usize = 1000;
/// How often a running job records that it is alive.
const HEARTBEAT: Duration = Duration::from_secs(2);

fn internal(e: impl std::fmt::Display) -> RpcError {
    RpcError::internal(e)
}

/// `complete` and `finalize` while a job of the task runs: a refusal of the gate
/// (`review_failed`, exit 4, as their other refusals), not `busy`. No passing review can be
/// current then: a running review has given no verdict yet, and a build re-runs evidence, which
/// supersedes the review.
pub(crate) fn refuse_completion_while_running(
    daemon: &Daemon,
    ws: &Workspace,
    task: &str,
    what: &str,
) -> RpcResult<()> {
    refuse_while_running(daemon, ws, task).map_err(|RpcError(mut data)| {
        data.kind = ErrorKind::ReviewFailed;
        data.message = format!("{what} refused: {}", data.message);
        RpcError(data)
    })
}

pub async fn approve(daemon: &Daemon, p: m::ApproveParams) -> RpcResult<m::ApproveResult> {
    let (ws, entry) = entry(daemon, &p.root, &p.task_id).await?;
    let task = entry.task_id.clone();
    refuse_linked_approval(&ws, &task, p.amend)?;
    // An approval never waits out a running harden, build or review of the task (which holds
    // it): it is refused at once, as any other change of a busy task is.
    refuse_while_running(daemon, &ws, &task)?;
    let lock = daemon.jobs.task_lock(&ws, &task);
    let _guard = lock.lock().await;
    if p.amend {
        refuse_while_running(daemon, &ws, &task)?;
    }
    // Decide on the state as it is now that this call holds the task: another approval may
    // have finished while it waited.
    let entry = super::fresh_entry(daemon, &ws, &task)?;
    require_valid(daemon, &ws, &entry)?;
    refuse_oversized(&task, &entry.path, &entry.parsed.spec, p.amend)?;
    if p.amend {
        return amend(daemon, &ws, &task, &entry.parsed, p.reason.as_deref()).await;
    }
    let (projected, _) = projected_spec(daemon, &ws, &task)?;
    if projected.status() != Some(Status::Draft) {
        return Err(RpcError::new(
            ErrorKind::InvalidState,
            format!("approve only operates on drafts; {task} is {}", projected.status_word()),
        )
        .with_hint(super::read::refusal_hint(daemon, &ws, &task).await));
    }
    let spec = &entry.parsed.spec;
    let reason = p.reason.as_deref().map(str::trim).filter(|r| !r.is_empty());
    // A pass counts only for the draft it judged: an edit since makes it stale. (The parse
    // keeps the digest of a draft whose front matter says passed; none reads as an edit.)
    let stale = match spec.harden_status() {
        HardenStatus::Passed => harden::stale_pass(spec, entry.parsed.draft_digest.as_deref().unwrap_or_default()),
        _ => None,
    };
    let harden_override = match (spec.harden_status(), stale, reason) {
        (HardenStatus::Passed, None, _) => None,
        (HardenStatus::Passed, Some(why), Some(reason)) => {
            Some(format!("approved with harden_status passed, though {why}: {reason}"))
        }
        (HardenStatus::Passed, Some(why), None) => {
            let hint = match why {
                harden::PassGap::OlderBinding { .. } => format!(
                    "bind the round to the draft as it is: `{}` (its checks are checked again), or harden again with `scafld harden {task}`, or approve anyway with `scafld approve {task} --reason \"why\"`",
                    why.command(&task)
                ),
                _ => format!(
                    "harden it again: `scafld harden {task}` (a new round on this draft), or approve anyway with `scafld approve {task} --reason \"why\"`"
                ),
            };
            return Err(RpcError::new(
                ErrorKind::InvalidState,
                format!("{task}'s hardening does not speak for the draft as it is: {why}"),
            )
            .with_hint(hint));
        }
        (status, _, Some(reason)) => Some(format!("approved with harden_status {}: {reason}", status.as_str())),
        (status, _, None) => {
            return Err(RpcError::new(ErrorKind::InvalidState, format!("{task} has not passed hardening (harden_status: {})", status.as_str()))
                .with_hint(format!("run `scafld harden {task}` and `scafld harden {task} --mark-passed`, or approve anyway with `scafld approve {task} --reason \"why\"`")));
        }
    };
    // A pass the original tool recorded binds no draft: this approval pins it to this one.
    let honoured = match (&harden_override, spec.harden_status()) {
        (None, HardenStatus::Passed) => harden::unbound_pass(spec).map(|round| {
            format!(
                "{} passed as the original tool records a pass, bound to no draft: honoured for this draft, {}, which this approval pins",
                round.id,
                entry.parsed.draft_digest.as_deref().unwrap_or_default()
            )
        }),
        _ => None,
    };
    baseline::require_git(&ws.root)?;
    // What validate says of the draft beyond its text: its errors refuse, its warnings are said.
    let (errors, scope_warnings): (Vec<_>, Vec<_>) = super::read::workspace_diagnostics(&ws, spec, true)
        .await
        .into_iter()
        .partition(|d| d.severity == m::Severity::Error);
    if let Some(first) = errors.first() {
        return Err(RpcError::new(
            ErrorKind::ValidationFailed,
            format!("cannot approve {task}: {}", super::at_line(first)),
        )
        .with_hint(format!("fix the spec's Scope, then `scafld approve {task}` again")));
    }
    let scope_warnings: Vec<String> = scope_warnings.into_iter().map(|d| d.message).collect();
    let (root, scope) = (ws.root.clone(), crate::evidence::evidence_scope(&ws, spec));
    let snapshot = baseline::in_workspace(move || baseline::snapshot(&root, &scope)).await?;
    let count = snapshot.dirty;
    let head = snapshot.head.clone();
    let contract = evidence::contract(spec);
    let events = vec![
        LedgerEvent::WorkspaceBaseline {
            head: snapshot.head,
            paths: snapshot.paths,
            reason: format!("workspace baseline captured before approval: {count} changed path(s)"),
            nested: snapshot.nested,
        },
        LedgerEvent::Approval {
            reason: match (reason.unwrap_or("spec approved"), honoured) {
                (reason, Some(honoured)) => format!("{reason}; {honoured}"),
                (reason, None) => reason.to_string(),
            },
            harden_override: harden_override.clone(),
            criteria: contract.criteria,
            scope: contract.scope,
            also_bound: contract.also_bound,
            phases: contract.phases,
            phase_ids: contract.phase_ids,
        },
    ];
    let note = record(daemon, &ws, &task, events, "command:approve")?.note();
    let path = ws.spec_path(&task);
    Ok(m::ApproveResult {
        task_id: task.clone(),
        status: Status::Approved,
        path,
        head,
        baseline_paths: count,
        harden_override: harden_override.is_some(),
        next_command: format!("scafld build {task}"),
        scope_warnings,
        note,
    })
}

/// An approval in a checkout whose `.scafld` is a link to another checkout's (a git worktree
/// sharing the main checkout's) is refused before anything is recorded: its spec cannot be
/// written through the link, and the baseline it would record is this checkout's HEAD (often
/// another branch), which the main checkout's build and review would then diff against. The
/// hint names the same approval run from the checkout the link leads to.
fn refuse_linked_approval(ws: &Workspace, task: &str, amend: bool) -> RpcResult<()> {
    let Some(main) = ws.writes_from() else { return Ok(()) };
    let command = if amend {
        format!("scafld approve {} --amend --reason \"why\"", scafld_protocol::cli::shell_word(task))
    } else {
        format!("scafld approve {}", scafld_protocol::cli::shell_word(task))
    };
    Err(RpcError::new(
        ErrorKind::InvalidState,
        format!(
            "approve refused in {}: its .scafld is a link to the workspace at {}, and an approval there records this checkout's git HEAD as the baseline the other checkout's build and review would compare against; scafld writes under .scafld only through the real folder",
            ws.root.display(),
            main.display()
        ),
    )
    .with_hint(format!("run `{}` (approve where the workspace's .scafld is a real folder)", ws.runnable(&command))))
}

/// An approved spec keeps room for the runner's own records: one larger than an approval
/// takes, or one whose criteria could grow it past what can be read, is refused. (An amended
/// spec holds some of those records already: only the room is checked.)
fn refuse_oversized(task: &str, path: &Path, spec: &Spec, amending: bool) -> RpcResult<()> {
    use crate::domain::spec::budget::{MAX_APPROVED_BYTES, MAX_SPEC_BYTES, runner_growth};
    use scafld_local::capped::size;
    let len = std::fs::metadata(path).map_or(0, |m| m.len());
    let growth = runner_growth(spec);
    let why = if len > MAX_APPROVED_BYTES && !amending {
        format!("the spec is {}, over the {} an approved spec may have", size(len), size(MAX_APPROVED_BYTES))
    } else if len + growth > MAX_SPEC_BYTES {
        format!(
            "the spec is {} and the runner's records for its {} criteria may add {}, past the {} a spec may have",
            size(len),
            spec.criteria().count(),
            size(growth),
            size(MAX_SPEC_BYTES)
        )
    } else {
        return Ok(());
    };
    Err(RpcError::new(ErrorKind::ValidationFailed, format!("cannot approve {task}: {why}"))
        .with_hint("split the task into smaller ones, or move long notes out of the spec and link them"))
}

/// `approve --amend --reason R`: re-pin the contract (criteria and evidence scope) of an approved
/// task whose spec changed, with the reason and the changes in the ledger; and record the
/// approval baseline again at HEAD when its commit is gone from the repository (history
/// rewritten and pruned), so what changed since can be read again, or without the nested
/// repositories whose HEAD then is not on record or gone (all in them then new).
async fn amend(
    daemon: &Daemon,
    ws: &Workspace,
    task: &str,
    parsed: &crate::domain::spec::Parsed,
    reason: Option<&str>,
) -> RpcResult<m::ApproveResult> {
    let reason = reason.map(str::trim).filter(|r| !r.is_empty()).ok_or_else(|| {
        RpcError::new(ErrorKind::InvalidInput, "--amend needs --reason")
            .with_hint("say who approved the new criteria and why")
    })?;
    let (spec, entries) = projected_spec(daemon, ws, task)?;
    let status = spec.status().unwrap_or(Status::Draft);
    if !matches!(status, Status::Approved | Status::Active | Status::Blocked | Status::Review) {
        return Err(RpcError::new(
            ErrorKind::InvalidState,
            format!("only an approved task in progress can amend its contract; {task} is {status}"),
        )
        .with_hint(if status == Status::Draft {
            format!("approve it with `scafld approve {task}`")
        } else {
            "archived tasks are immutable".into()
        }));
    }
    // Nothing pinned yet: the first build adopts the spec as it is then, and adoption's rules
    // (a harden override unless hardening passed) live there alone; an amendment pinning the
    // contract first would skip them.
    let replay = ledger::replay(&entries);
    if let Some(why) = replay.adoption_pending() {
        return Err(RpcError::new(
            ErrorKind::InvalidState,
            format!("{task} has no approved contract to amend: {}", why.why(status)),
        )
        .with_hint(format!(
            "run `scafld build {task}`: it adopts the spec's criteria and scope as they are (recorded as a harden override unless hardening passed); amend after that if they change"
        )));
    }
    let pinned = replay.contract.unwrap_or_default();
    let changed = evidence::contract_changes(&spec, &pinned);
    let gone = crate::evidence::lost_baseline(ws, &entries).await;
    // Nested repositories whose HEAD at approval is not on record or gone (recorded again
    // below when the workspace's commit is not: a new snapshot records them anyway).
    let lost = match gone {
        None => crate::evidence::lost_nested(ws, &entries).await,
        Some(_) => Vec::new(),
    };
    // One git cannot read now is not dropped from the baseline: a new one could not read it
    // either, and its changes would pass unseen. Access given back (or it removed) comes first.
    if let Some(unread) = lost.iter().find(|l| matches!(l.loss, baseline::NestedLoss::Unreadable(_))) {
        let shown = scafld_protocol::cli::shell_word(&unread.folder);
        return Err(RpcError::new(
            ErrorKind::InvalidState,
            format!("{unread}: the approval baseline cannot be recorded again while git cannot read it"),
        )
        .with_hint(format!(
            "make it readable to git again (`git -C {shown} status` shows what git finds; for a permission problem, `chmod -R u+rwX {shown}/.git`) or remove it, then run `scafld approve {task} --amend --reason \"why\"` again (or go on: once it reads, nothing needs recording again)"
        )));
    }
    if changed.is_empty() && gone.is_none() && lost.is_empty() {
        return Err(RpcError::new(
            ErrorKind::InvalidState,
            format!("the acceptance criteria and scope of {task} match the approved contract; nothing to amend"),
        )
        .with_hint(super::read::refusal_hint(daemon, ws, task).await));
    }
    let mut events = Vec::new();
    let mut new_head = None;
    if let Some(gone) = &gone {
        // The new baseline: HEAD now, with the dirt outside the task's scope (ambient, as it
        // was at approval); the task's own uncommitted files stay changes for the reviewer.
        let (root, bound) = (ws.root.clone(), crate::evidence::evidence_scope(ws, &spec));
        let snapshot = baseline::in_workspace(move || baseline::snapshot(&root, &bound)).await?;
        let scope = crate::evidence::review_scope(ws, &spec, &[]);
        let paths: Vec<_> =
            snapshot.paths.into_iter().filter(|p| !crate::domain::review::in_scope(&p.path, &scope)).collect();
        new_head = Some(snapshot.head.clone().unwrap_or_default());
        events.push(LedgerEvent::WorkspaceBaseline {
            head: snapshot.head,
            reason: format!(
                "approval baseline recorded again: its commit {gone} is gone from the repository ({reason}); {} changed path(s) outside the scope",
                paths.len()
            ),
            paths,
            nested: snapshot.nested,
        });
    } else if !lost.is_empty() {
        // The baseline as it was but for those repositories, no longer on it: everything in
        // them reads as new since approval, so none of the task's changes there is lost.
        let base = crate::domain::ledger::approval_baseline(&entries).unwrap_or_default();
        let below = |path: &str| {
            let path = path.trim_end_matches('/');
            lost.iter().any(|l| path == l.folder || path.starts_with(&format!("{}/", l.folder)))
        };
        new_head = Some(base.head.clone().unwrap_or_default());
        let named: Vec<String> = lost.iter().map(|l| l.to_string()).collect();
        events.push(LedgerEvent::WorkspaceBaseline {
            head: base.head,
            reason: format!(
                "approval baseline recorded again: {} ({reason}); everything in it is read as new since approval",
                named.join("; ")
            ),
            paths: base.paths.into_iter().filter(|p| !below(&p.path)).collect(),
            nested: base.nested.into_iter().filter(|(folder, _)| !below(folder)).collect(),
        });
    }
    if changed.is_empty() {
        let note = record(daemon, ws, task, events, "command:approve")?.note();
        // Only the baseline moved: the evidence stands, so next is what it was (a review).
        return amended(daemon, ws, task, status, new_head, note).await;
    }
    // The amended contract is approved anew: what approval refuses, amending refuses (a
    // contract with nothing that runs would complete on no evidence).
    let problems: Vec<m::Diagnostic> = parsed.approval_problems().map(super::wire).collect();
    if let Some(first) = problems.first() {
        let at = if first.line > 0 { format!("line {}: ", first.line) } else { String::new() };
        return Err(RpcError::new(
            ErrorKind::ValidationFailed,
            format!(
                "cannot amend {task}'s contract: approval would refuse it ({} problem(s)); first: {at}{}",
                problems.len(),
                first.message
            ),
        )
        .with_hint(format!("fix the spec (`scafld validate {task}` lists what approval checks), then amend again"))
        .with_details(serde_json::json!({ "diagnostics": problems })));
    }
    let now = evidence::contract(&spec);
    events.push(LedgerEvent::ContractAmended {
        reason: reason.to_string(),
        criteria: now.criteria,
        scope: now.scope,
        also_bound: now.also_bound,
        phases: now.phases,
        phase_ids: now.phase_ids,
        changed,
    });
    let note = record(daemon, ws, task, events, "command:approve")?.note();
    amended(daemon, ws, task, status, new_head, note).await
}

/// The answer to an amendment just recorded. Next is the one decision status makes: a build
/// when evidence is missing or stale, a review when the amendment only moved the baseline or
/// removed what the evidence covered.
async fn amended(
    daemon: &Daemon,
    ws: &Workspace,
    task: &str,
    status: Status,
    head: Option<String>,
    note: Option<String>,
) -> RpcResult<m::ApproveResult> {
    let (spec, entries) = projected_spec(daemon, ws, task)?;
    let fresh = crate::evidence::freshness(ws, &spec, &entries).await;
    let next = crate::evidence::next_for(daemon, ws, &spec, &entries, &fresh.stale, Default::default());
    Ok(m::ApproveResult {
        task_id: task.to_string(),
        status: spec.status().unwrap_or(status),
        path: ws.spec_path(task),
        head,
        baseline_paths: 0,
        harden_override: false,
        next_command: next.command,
        scope_warnings: Vec::new(),
        note,
    })
}

/// A task that reached `approved` outside this ledger (moved by hand, or written by another
/// tool without its session.json), or whose approval on record pins no contract (the original
/// tool's, imported): record a baseline if there is none and adopt its current criteria and
/// scope as the approved contract, so it never builds without either.
async fn adopt(
    daemon: &Daemon,
    ws: &Workspace,
    task: &str,
    path: &Path,
    spec: &Spec,
    entries: &[LedgerEntry],
) -> RpcResult<bool> {
    let has_baseline = entries.iter().any(|e| matches!(e.event, LedgerEvent::WorkspaceBaseline { .. }));
    let replay = ledger::replay(entries);
    if has_baseline && replay.contract_pinned() {
        return Ok(false);
    }
    baseline::require_git(&ws.root)?;
    // The approval this adoption stands for, when one is on record that pinned nothing.
    let unpinned = entries.iter().rev().find(|e| matches!(e.event, LedgerEvent::Approval { .. }));
    let why = match unpinned {
        Some(approval) => format!(
            "{task}'s approval ({}) pinned no criteria or scope (the original tool's, or an older scafld's, records \
             none): they are pinned as of this build",
            approval.id()
        ),
        None => format!("{task} was {} without an approval in this ledger", spec.status_word()),
    };
    if !replay.contract_pinned() {
        // Adopting approves: what approve refuses (a scope entry outside the workspace or a
        // case typo, a spec whose records would not fit), adopting refuses.
        let (errors, _): (Vec<_>, Vec<_>) =
            crate::evidence::scope_notes(ws, spec).await.into_iter().partition(|(error, ..)| *error);
        if let Some((_, line, message)) = errors.first() {
            let first =
                super::at_line(&m::Diagnostic { line: *line, severity: m::Severity::Error, message: message.clone() });
            return Err(RpcError::new(ErrorKind::ValidationFailed, format!("cannot adopt {task} ({why}): {first}"))
                .with_hint(format!("fix the spec's Scope, then `scafld build {task}` again")));
        }
        refuse_oversized(task, path, spec, true)?;
    }
    let mut events = Vec::new();
    if !has_baseline {
        let (root, scope) = (ws.root.clone(), crate::evidence::evidence_scope(ws, spec));
        let snapshot = baseline::in_workspace(move || baseline::snapshot(&root, &scope)).await?;
        let count = snapshot.dirty;
        events.push(LedgerEvent::WorkspaceBaseline {
            head: snapshot.head,
            paths: snapshot.paths,
            reason: format!("workspace baseline captured before build: {count} changed path(s)"),
            nested: snapshot.nested,
        });
    }
    if !replay.contract_pinned() {
        let contract = evidence::contract(spec);
        // Approved elsewhere (the original tool approves without a harden pass) or set by hand:
        // without a pass on record it is an override, and the spec and the packet say so.
        let harden_override = (spec.harden_status() != HardenStatus::Passed)
            .then(|| format!("adopted at build with harden_status {}: {why}", spec.harden_status().as_str()));
        events.push(LedgerEvent::Approval {
            reason: format!("adopted at build: {why}"),
            harden_override,
            criteria: contract.criteria,
            scope: contract.scope,
            also_bound: contract.also_bound,
            phases: contract.phases,
            phase_ids: contract.phase_ids,
        });
    }
    record(daemon, ws, task, events, "command:build")?;
    Ok(true)
}

/// `build`: start (or join) the step, and with `wait_seconds` answer with its outcome when its
/// job finishes within them.
pub async fn build(daemon: &Arc<Daemon>, p: m::BuildParams) -> RpcResult<m::BuildResult> {
    let wait = p.wait_seconds.and_then(|s| Duration::try_from_secs_f64(s.clamp(0.0, 3600.0)).ok());
    let root = p.root.clone();
    let (mut started, material) = start_build(daemon, p).await?;
    started.warnings = daemon.warnings_for(std::path::Path::new(&root));
    if let (Some(wait), Some(job_id), None) = (wait, &started.job_id, &started.outcome) {
        let waited = daemon.jobs.wait(daemon.store(), job_id, wait, daemon.shutdown_token()).await;
        if let Some(running) = waited.as_ref().filter(|r| !r.state.is_finished())
            && daemon.shutdown_token().is_cancelled()
        {
            return Err(super::job::stopped_before_end(running));
        }
        let finished = waited.filter(|r| r.state.is_finished());
        if let (Some(failed), Some(material)) = (&finished, &material)
            && failed.outcome.is_none()
        {
            // A workspace whose files cannot be read ran nothing: its error is the call's, as
            // when it was read before the job existed.
            material.get().await?;
        }
        started.outcome = finished.and_then(|r| super::job::outcome(daemon, &r));
    }
    Ok(started)
}

/// Start the call's step: its result, and for a step that runs commands the material it is
/// reading (whose failure is the call's error, see [`build`]).
async fn start_build(daemon: &Arc<Daemon>, p: m::BuildParams) -> RpcResult<(m::BuildResult, Option<StepMaterial>)> {
    let (ws, entry) = entry(daemon, &p.root, &p.task_id).await?;
    let task = entry.task_id.clone();
    if let Some(job) = daemon.jobs.active_for(&ws, &task) {
        return join_or_busy(job, task, p.manual.as_ref(), &p.caller).map(|joined| (joined, None));
    }
    let lock = daemon.jobs.task_lock(&ws, &task);
    let guard = lock.clone().lock_owned().await;
    // A build that started while we waited for the lock: join it.
    if let Some(job) = daemon.jobs.active_for(&ws, &task) {
        return join_or_busy(job, task, p.manual.as_ref(), &p.caller).map(|joined| (joined, None));
    }
    let entry = super::fresh_entry(daemon, &ws, &task)?;
    require_valid(daemon, &ws, &entry)?;
    let config = ws.config()?;
    let (mut spec, mut entries) = projected_spec(daemon, &ws, &task)?;
    if let Some(manual) = p.manual {
        return Ok((manual_evidence(daemon, &ws, &task, manual, &p.caller.env).await?, None));
    }
    if spec.status() != Some(Status::Draft)
        && !spec.status().is_some_and(Status::is_terminal)
        && adopt(daemon, &ws, &task, &entry.path, &spec, &entries).await?
    {
        (spec, entries) = projected_spec(daemon, &ws, &task)?;
    }
    crate::review::gate::refuse_contract_changes(&task, &spec, &entries, "build", ErrorKind::InvalidState)?;
    record_implementer(daemon, &ws, &task, &entries, &p.caller.env)?;
    // Before the files are first read: a file rewritten after this while git moved HEAD (a
    // branch switched and back, a stash and its pop), its content the same again when the
    // commands are done, did not hold that content all the while they ran.
    let since = crate::baseline::clock_ns();
    let head = {
        let root = ws.root.clone();
        tokio::task::spawn_blocking(move || crate::baseline::head_stamp(&root)).await.ok().flatten()
    };
    let fresh = crate::evidence::freshness(&ws, &spec, &entries).await;
    let step = match build::plan(&spec, &fresh.stale, crate::templates::shadows(&ws.root, &task)) {
        Ok(step) => step,
        Err(why) => {
            let hint = super::read::refusal_hint(daemon, &ws, &task).await;
            return Err(RpcError::new(ErrorKind::InvalidState, why).with_hint(hint));
        }
    };
    match step {
        Step::Open(target) => {
            let projected = record(daemon, &ws, &task, build::open_events(&target), "command:build")?;
            let (spec, entries) = projected_spec(daemon, &ws, &task)?;
            let next = crate::evidence::next_for(daemon, &ws, &spec, &entries, &Default::default(), Default::default());
            let message =
                format!("{} opened; implement it, then run `scafld build {task}` to record evidence", target.label());
            let outcome = BuildOutcome {
                task_id: task.clone(),
                root: ws.shown_root(),
                status: "active".into(),
                phase: target.label(),
                next_command: next.command,
                message: with_note(message, &projected),
                ..BuildOutcome::default()
            };
            Ok((
                m::BuildResult {
                    task_id: task,
                    job_id: None,
                    attached: false,
                    outcome: Some(outcome),
                    warnings: Vec::new(),
                },
                None,
            ))
        }
        Step::Run { target, criteria, recheck } => {
            // Read while the first command's shell starts up (and before the command runs).
            let material = match fresh.material {
                Ok(material) => StepMaterial::ready(material),
                Err(_) => StepMaterial::read(&ws, &spec),
            };
            let (job, cancel) = daemon.jobs.create(daemon.store(), JobKind::Acceptance, &ws, &task, None, false);
            let ready = ready_to_run(daemon, &job.id, material.clone());
            daemon.publish(Event::JobChanged {
                job_id: job.id.clone(),
                task_id: task.clone(),
                state: JobState::Queued,
            });
            let run = BuildRun {
                daemon: daemon.clone(),
                ws: ws.clone(),
                task: task.clone(),
                base: spec,
                job_id: job.id.clone(),
                run_token: job.run_token.clone(),
                commands: CommandSetup::new(&ws, &config, &p.caller),
                cancel,
                material,
                since: (since, head),
                ready,
            };
            let reading = run.material.clone();
            let (daemon, job_id, task_id) = (run.daemon.clone(), run.job_id.clone(), run.task.clone());
            let place = ws.line_up_for_slot();
            tokio::spawn(async move {
                let _guard = guard; // the task stays locked until the job ends
                let ran = AssertUnwindSafe(run.execute(place, target, criteria, recheck)).catch_unwind().await;
                // A bug must end the job, not leave it running for ever with its task locked
                // (its commands died with the dropped run).
                if ran.is_err() {
                    tracing::error!(job = %job_id, "a build job hit a bug");
                    let ended = daemon.jobs.update_if(daemon.store(), &job_id, true, |r| !r.state.is_finished(), |r| {
                        r.state = JobState::Failed;
                        r.finished_at = Some(clock::now_rfc3339());
                        r.activity = None;
                        r.group = None;
                        r.reason = Some("the daemon hit a bug running this step; nothing of it was recorded (the daemon's log has the details; please report it)".into());
                    });
                    if ended.is_some() {
                        daemon.publish(Event::JobChanged { job_id, task_id, state: JobState::Failed });
                    }
                }
            });
            Ok((
                m::BuildResult {
                    task_id: task,
                    job_id: Some(job.id),
                    attached: false,
                    outcome: None,
                    warnings: Vec::new(),
                },
                Some(reading),
            ))
        }
    }
}

/// A build call that finds a job of its task running. A plain build asks for the step that
/// job runs, so it joins it; anything else is `busy`, naming the job. A person's evidence
/// (`build --criterion`) is never taken for a wish to watch the build (their disposition would
/// be dropped unrecorded) nor held until the build ends (a criterion whose own command records
/// evidence would wait on itself): they record it again once the job has ended. A call made
/// from inside the job's own commands is refused outright (see [`refuse_reentrant`]).
fn join_or_busy(
    job: crate::domain::job::JobRecord,
    task: String,
    manual: Option<&m::ManualEvidence>,
    caller: &m::CallerContext,
) -> RpcResult<m::BuildResult> {
    refuse_reentrant(&job, &task, caller)?;
    if job.kind != JobKind::Acceptance {
        return Err(busy(&job, &task));
    }
    if let Some(manual) = manual {
        let flag = scafld_protocol::cli::criterion_flag(&manual.criterion_id);
        return Err(RpcError::new(
            ErrorKind::Busy,
            format!(
                "a build job ({}) is running for {task}: nothing was recorded for `{}`; a person's evidence is taken once it ends",
                job.id, manual.criterion_id
            ),
        )
        .with_hint(format!(
            "wait for it with `scafld job wait {}`, then run `scafld build {task} {flag} --disposition {} --reason ...` again",
            job.id, manual.disposition
        )));
    }
    Ok(m::BuildResult { task_id: task, job_id: Some(job.id), attached: true, outcome: None, warnings: Vec::new() })
}

/// Refuse a build of `task` called from inside `job`'s own commands (the caller carries the
/// job's run token, which every process of its run inherits): joining would have the command
/// wait for the job that waits for it, until the criterion's timeout.
fn refuse_reentrant(job: &crate::domain::job::JobRecord, task: &str, caller: &m::CallerContext) -> RpcResult<()> {
    let inside = !job.run_token.is_empty()
        && caller.env.get(scafld_local::runner::RUN_TOKEN).is_some_and(|token| *token == job.run_token);
    if !inside {
        return Ok(());
    }
    let running = job.activity.as_deref().map(|a| format!(" ({a})")).unwrap_or_default();
    Err(RpcError::new(
        ErrorKind::InvalidState,
        format!(
            "`scafld build {task}` was called from inside build job {} of {task}{running}: it would wait for the job it runs in, which waits for it",
            job.id
        ),
    )
    .with_hint(format!(
        "a criterion's command must not build its own task; have it run the check itself (the tests, the linter), and run `scafld build {task}` from outside"
    )))
}

/// `build --criterion ID --disposition pass|fail --reason R`: a person's evidence for a manual
/// criterion, bound like any evidence to its definition and the files in scope; the step is
/// concluded in the same call when that was all it waited for.
async fn manual_evidence(
    daemon: &Daemon,
    ws: &Workspace,
    task: &str,
    manual: m::ManualEvidence,
    env: &std::collections::BTreeMap<String, String>,
) -> RpcResult<m::BuildResult> {
    let (spec, entries) = projected_spec(daemon, ws, task)?;
    let status = spec.status().unwrap_or(Status::Draft);
    if !matches!(status, Status::Active | Status::Blocked) {
        return Err(RpcError::new(
            ErrorKind::InvalidState,
            format!("manual evidence is recorded while a task builds; {task} is {status}"),
        ));
    }
    let found = spec
        .phases
        .iter()
        .flat_map(|p| p.criteria.iter().map(move |c| (p.id(), c)))
        .chain(spec.acceptance.criteria.iter().map(|c| (String::new(), c)))
        .find(|(_, c)| c.id == manual.criterion_id);
    let Some((phase_id, criterion)) = found else {
        return Err(RpcError::new(ErrorKind::NotFound, format!("{task} has no criterion `{}`", manual.criterion_id))
            .with_hint(format!("`scafld status {task}` lists its criteria")));
    };
    if criterion.effective_kind() != "manual" {
        return Err(RpcError::new(
            ErrorKind::InvalidInput,
            format!("`{}` runs `{}`; only manual criteria take a person's evidence", criterion.id, criterion.command),
        )
        .with_hint(format!("run `scafld build {task}` to record its evidence")));
    }
    let reason = manual.reason.trim().to_string();
    if reason.is_empty() {
        return Err(RpcError::new(ErrorKind::InvalidInput, "manual evidence needs --reason")
            .with_hint("say what was checked and how"));
    }
    let digest = manual.evidence_digest.unwrap_or_default().trim().to_ascii_lowercase();
    let sha256 = digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit());
    if !digest.is_empty() && !sha256 {
        return Err(RpcError::new(
            ErrorKind::InvalidInput,
            format!("--evidence-digest {digest:?} is not a sha256 in hex"),
        ));
    }
    let actor = manual
        .actor
        .filter(|a| !a.trim().is_empty())
        .or_else(|| env.get("USER").or_else(|| env.get("LOGNAME")).cloned())
        .unwrap_or_else(|| "unknown".into());
    let material = crate::evidence::material_now(ws, &spec).await.map_err(RpcError::from)?;
    let definition = evidence::definition_digest(criterion);
    let disposition = manual.disposition.as_str().to_string();
    // A repeat records nothing; another digest or actor is new evidence (the receipt signs the
    // latest), as another disposition or reason is.
    let repeat = entries.iter().rev().find_map(|e| match &e.event {
        LedgerEvent::ManualEvidence {
            criterion_id,
            disposition: d,
            reason: r,
            evidence_digest: dig,
            actor: who,
            definition: def,
            material: mat,
            ..
        } if *criterion_id == criterion.id => Some(
            *d == disposition
                && *r == reason
                && *dig == digest
                && *who == actor
                && *def == definition
                && *mat == material.digest,
        ),
        _ => None,
    });
    let mut projected = Projected::Current(PathBuf::new());
    if repeat != Some(true) {
        let mut events = material_event(&entries, &material);
        events.push(LedgerEvent::ManualEvidence {
            criterion_id: criterion.id.clone(),
            phase_id: phase_id.clone(),
            disposition: disposition.clone(),
            reason,
            evidence_digest: digest,
            actor,
            definition,
            material: material.digest.clone(),
        });
        projected = record(daemon, ws, task, events, "command:build")?;
    }
    // Re-evaluate the current step: conclude it when every criterion now passes on current
    // evidence (final acceptance, if it comes next, runs at the next `build`).
    let (spec, entries) = projected_spec(daemon, ws, task)?;
    let target = build::current(&spec);
    let stale = evidence::stale(&spec, &entries, Some(&material.digest));
    let criteria = build::criteria_of(&spec, &target);
    let all_passed = criteria.iter().all(|c| c.passed() && !stale.contains_key(&c.id));
    if all_passed && !criteria.is_empty() {
        let conclusion = build::conclude(&spec, &target, build::StepOutcome::Passed, None);
        projected = record(daemon, ws, task, conclusion.events, "command:build")?;
    }
    let (spec, entries) = projected_spec(daemon, ws, task)?;
    let next = crate::evidence::next_for(daemon, ws, &spec, &entries, &Default::default(), Default::default());
    // The step's other manual criteria still waiting for a person: shown as pending (as the
    // build that reached them shows them), so a phase held up only by them reads as waiting,
    // never as failed.
    let waiting = match spec.status() {
        Some(Status::Blocked) => build::blockers(&spec, &build::current(&spec))
            .into_iter()
            .filter(|b| b.manual && b.id != manual.criterion_id)
            .map(|b| CriterionResult {
                criterion_id: b.id,
                phase_id: phase_id.clone(),
                status: CriterionStatus::Pending,
                reason: b.reason,
                ..CriterionResult::default()
            })
            .collect(),
        _ => Vec::new(),
    };
    let outcome = BuildOutcome {
        task_id: task.to_string(),
        root: ws.shown_root(),
        status: spec.status_word(),
        phase: target.label(),
        passed: usize::from(disposition == "pass"),
        failed: usize::from(disposition == "fail"),
        criteria: waiting,
        next_command: next.command,
        message: with_note(
            format!("recorded manual evidence for `{}`: {disposition}", manual.criterion_id),
            &projected,
        ),
    };
    Ok(m::BuildResult {
        task_id: task.to_string(),
        job_id: None,
        attached: false,
        outcome: Some(outcome),
        warnings: Vec::new(),
    })
}

/// `message`, and when the spec file was left as it was, why (the answer says so).
fn with_note(message: String, projected: &Projected) -> String {
    match projected {
        Projected::Deferred { note, .. } => format!("{message}; {note}"),
        Projected::Current(_) => message,
    }
}

/// A `Material` event for `material` (its entries as stored: grouped by folder when large),
/// unless one with its digest is recorded.
fn material_event(entries: &[LedgerEntry], material: &baseline::Material) -> Vec<LedgerEvent> {
    if evidence::recorded_material(entries, &material.digest).is_some() {
        return Vec::new();
    }
    vec![LedgerEvent::Material { digest: material.digest.clone(), entries: material.stored(), after_step: None }]
}

/// Remember the host agent that drives the builds, once per change, so that reviews from the
/// same host can be refused (DESIGN section 7, independence).
fn record_implementer(
    daemon: &Daemon,
    ws: &Workspace,
    task: &str,
    entries: &[crate::domain::ledger::LedgerEntry],
    env: &std::collections::BTreeMap<String, String>,
) -> RpcResult<()> {
    let Some(host) = crate::providers::host_agent(env) else { return Ok(()) };
    if implementer(entries).as_deref() == Some(host) {
        return Ok(());
    }
    let event = LedgerEvent::Implementer { host_agent: host.to_string(), reason: format!("builds driven from {host}") };
    record(daemon, ws, task, vec![event], "command:build").map(drop)
}

/// The host agent recorded for the task's builds, if any.
/// One acceptance job: run a step's criteria, record evidence, conclude.
struct BuildRun {
    daemon: Arc<Daemon>,
    ws: Arc<Workspace>,
    task: String,
    /// The spec the step was planned from: what it concludes on should the file stop reading
    /// as the task's spec while it runs (`ledger::projected_spec_or`).
    base: Spec,
    job_id: String,
    /// Carried by every process the job starts (see `JobRecord::run_token`).
    run_token: String,
    /// How its commands run (the caller's environment as configured).
    commands: CommandSetup,
    cancel: CancellationToken,
    /// The scoped files as the step starts: every result it records is bound to them.
    material: StepMaterial,
    /// The clock before `material` was read (`baseline::clock_ns`) and git's HEAD then
    /// (`baseline::head_stamp`): a file in scope rewritten since then while HEAD moved, its
    /// content the same at the end, is recorded as such (see `record_end`). A command that
    /// rewrites its own files unchanged (`sed -i`, a generator) moves no HEAD: no loop.
    since: (i64, Option<String>),
    /// What each of its commands waits for before it may run.
    ready: Ready,
}

/// What every command of a build job waits for (its run's gate): the job on disk, so that its
/// run token finds the command after a crash, and the step's material read, so that the
/// command runs on the files its evidence is bound to. Both begin with the job and proceed
/// while the first command's shell starts up.
type Ready = Shared<BoxFuture<'static, RpcResult<()>>>;

fn ready_to_run(daemon: &Arc<Daemon>, job_id: &str, material: StepMaterial) -> Ready {
    // Put now, in order with the job's later saves; synced on a blocking thread.
    let saving = daemon.jobs.write_unsynced(daemon.store(), job_id).map(|()| {
        let (daemon, id) = (daemon.clone(), job_id.to_string());
        tokio::task::spawn_blocking(move || daemon.store().sync_job(&id))
    });
    async move {
        let saved = match saving {
            Ok(sync) => sync.await.map_err(internal)?,
            Err(e) => Err(e),
        };
        saved.map_err(|e| internal(format!("cannot save the build job: {e}")))?;
        material.get().await.map(drop)
    }
    .boxed()
    .shared()
}

impl BuildRun {
    /// A build job's state change; only a finished state need reach the disk before it is
    /// reported (a restart abandons a queued build job and a running one alike).
    fn set_state(&self, state: JobState, change: impl FnOnce(&mut crate::domain::job::JobRecord)) {
        let store = self.daemon.store();
        self.daemon.jobs.update(store, &self.job_id, state.is_finished(), |r| {
            r.state = state;
            change(r);
        });
        self.daemon.publish(Event::JobChanged { job_id: self.job_id.clone(), task_id: self.task.clone(), state });
    }

    async fn execute(
        self,
        place: crate::workspace::slots::Place,
        target: Target,
        criteria: Vec<Criterion>,
        recheck: Vec<(String, Criterion)>,
    ) {
        let _permit = self.ws.job_slot(place).await;
        if self.cancel.is_cancelled() {
            return;
        }
        // Running only while still queued: a cancel that ended the job meanwhile stands.
        let queued = |r: &crate::domain::job::JobRecord| r.state == JobState::Queued;
        let started = self.daemon.jobs.update_if(self.daemon.store(), &self.job_id, false, queued, |r| {
            r.state = JobState::Running;
            r.started_at = Some(clock::now_rfc3339());
            r.last_heartbeat = r.started_at.clone();
        });
        if started.is_none() {
            return;
        }
        let running =
            Event::JobChanged { job_id: self.job_id.clone(), task_id: self.task.clone(), state: JobState::Running };
        self.daemon.publish(running);
        let heartbeat = {
            let (daemon, id) = (self.daemon.clone(), self.job_id.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(HEARTBEAT).await;
                    daemon.jobs.update(daemon.store(), &id, true, |r| r.last_heartbeat = Some(clock::now_rfc3339()));
                }
            })
        };
        let result = self.steps(target, criteria, recheck).await;
        heartbeat.abort();
        // No heartbeat's save of the running job may land after its end.
        let _ = heartbeat.await;
        let ended = match result {
            Ok(end) => self.record_end(end).await,
            Err(e) => Err(e),
        };
        match ended {
            Ok((record, in_place, saved)) => {
                // On disk already (after the step's events): only the table and the clients
                // are told now, once the spec says so too. A record the disk refused after the
                // events is saved by the table (now, or again once the database takes writes):
                // the events stand, so the job ended as they say.
                let state = record.state;
                self.daemon.jobs.update(self.daemon.store(), &self.job_id, !saved, |r| *r = record);
                if saved {
                    self.daemon.jobs.ended_in_store(&self.job_id);
                }
                self.daemon.publish(Event::JobChanged {
                    job_id: self.job_id.clone(),
                    task_id: self.task.clone(),
                    state,
                });
                // While the answer goes out; the task stays locked until the rename is durable.
                let synced = tokio::task::spawn_blocking(move || in_place.sync()).await;
                if let Err(e) = synced.map_err(std::io::Error::other).and_then(|synced| synced) {
                    warn!(job = %self.job_id, "cannot sync the spec's folder: {e}");
                }
            }
            // Left `running` for the next start to report abandoned (see `Jobs::halt`).
            Err(_) if self.daemon.jobs.halted() => {}
            Err(e) => {
                warn!(job = %self.job_id, "build job failed: {e}");
                let state = if self.cancel.is_cancelled() { JobState::Cancelled } else { JobState::Failed };
                self.set_state(state, |r| {
                    r.finished_at = Some(clock::now_rfc3339());
                    r.activity = None;
                    r.group = None;
                    r.reason = Some(e.to_string());
                });
            }
        }
    }

    /// Record the last step with the job's end (saved after the step's events), and the job's final
    /// record: its outcome read off the spec and ledger as the step leaves them.
    async fn record_end(&self, end: StepEnd) -> RpcResult<(crate::domain::job::JobRecord, InPlace, bool)> {
        let job =
            self.daemon.jobs.get(self.daemon.store(), &self.job_id).ok_or_else(|| internal("the build job is gone"))?;
        let StepEnd { events, target, results, timed_out, material_after } = end;
        let material = self.material.get().await?;
        let ran = results.iter().filter(|r| r.exit_code.is_some() || r.duration_ms > 0);
        let ran: Vec<String> = ran.map(|r| r.criterion_id.clone()).collect();
        // Where the files were read again (`steps`): the workspace's folder now.
        let home_root = match self.daemon.home_of(&self.ws) {
            Home::Moved(home) => home.root.clone(),
            _ => self.ws.root.clone(),
        };
        // The files as the commands left them, still being read while the step is projected.
        let after = async {
            let now = match material_after {
                Some(after) => after.get().await.ok(),
                None => None,
            };
            // What its commands left is recorded, with the criteria that ran and what changed,
            // so that a criterion rewriting its own scope on every build is told apart from one
            // that changed the files once (a formatter's first run).
            let changed = match &now {
                Some(now) if now.digest != material.digest => {
                    Some(baseline::material_changes(&material.stored(), &now.entries))
                }
                // The same content at the end, yet files were written while the commands ran and
                // git moved HEAD (a branch switched and back, a stash and its pop): what passed
                // may have run on other content, so the step's results are recorded as not
                // speaking for these files (`evidence::rewritten_while_running`).
                Some(now) => {
                    let (root, entries, (since, head)) = (home_root.clone(), now.entries.clone(), self.since.clone());
                    let rewritten = tokio::task::spawn_blocking(move || match baseline::head_stamp(&root) == head {
                        true => Vec::new(),
                        false => baseline::rewritten_since(&root, &entries, since),
                    })
                    .await
                    .unwrap_or_default();
                    (!rewritten.is_empty()).then(|| rewritten.iter().map(|p| format!("{p} (rewritten)")).collect())
                }
                None => None,
            };
            let changed = changed.zip(now.as_ref()).map(|(changed, now)| LedgerEvent::Material {
                digest: now.digest.clone(),
                entries: now.stored(),
                after_step: Some(StepChange { from: material.digest.clone(), criteria: ran, changed }),
            });
            (Vec::from_iter(changed), now.map_or_else(|| material.digest.clone(), |now| now.digest.clone()))
        };
        let base = &self.base;
        // What follows reads the workspace where it is now (see `ledger::record_ending`).
        let (home, away) = match self.daemon.home_of(&self.ws) {
            Home::Moved(home) => (home, false),
            Home::Here => (self.ws.clone(), false),
            Home::Gone(_) => (self.ws.clone(), true),
        };
        let (mut record, in_place, saved) =
            record_ending(&self.daemon, &self.ws, &self.task, events, after, base, |spec, entries, digest_now| {
                // What the step recorded is stale at once when its commands changed the files: the
                // next step is then another build, not a review that would refuse it.
                let status = spec.status().unwrap_or(Status::Active);
                let stale = evidence::stale(spec, entries, Some(&digest_now));
                let next = crate::evidence::next_for(&self.daemon, &home, spec, entries, &stale, Default::default());
                let passed = results.iter().filter(|r| r.status == CriterionStatus::Pass).count();
                // A manual criterion waiting for a person is pending, not failed.
                let pending = results.iter().filter(|r| r.status == CriterionStatus::Pending).count();
                let failed = results.len() - passed - pending;
                let rewriting: Vec<String> = stale
                    .iter()
                    .filter(|(_, why)| matches!(why, evidence::Stale::RewritesOwnScope { .. }))
                    .map(|(id, _)| id.clone())
                    .collect();
                let mut rewritten: Vec<String> = stale
                    .values()
                    .filter_map(|why| match why {
                        evidence::Stale::RewrittenWhileRunning { changed } => Some(changed.iter().cloned()),
                        _ => None,
                    })
                    .flatten()
                    .map(|file| file.trim_end_matches(" (rewritten)").to_string())
                    .collect();
                rewritten.sort();
                rewritten.dedup();
                let message = match status {
                    // The spec left its approved contract while the step ran (a criterion edited):
                    // that, not the commands, is why its evidence does not stand, as the next says.
                    Status::Review if next.action == crate::domain::next::Action::AmendContract => {
                        format!("build completed, but the spec changed while it ran: {}", next.reason)
                    }
                    _ if !rewriting.is_empty() => {
                        let changed = stale.values().find_map(|why| match why {
                            evidence::Stale::RewritesOwnScope { changed, .. } if !changed.is_empty() => {
                                Some(scafld_protocol::text::listed(changed))
                            }
                            _ => None,
                        });
                        let files = changed.unwrap_or_else(|| "the files in scope".into());
                        format!(
                            "build completed, but {}",
                            crate::domain::next::rewrite_reason(&self.task, &rewriting, &files)
                        )
                    }
                    Status::Review if !rewritten.is_empty() => format!(
                        "build completed, but {} rewritten while its commands ran and git moved HEAD (a branch \
                         switched and back, a stash and its pop): the same content again at the end, yet its results \
                         may speak for other content; build again, leaving the files as they are while it runs",
                        match rewritten.as_slice() {
                            [one] => format!("{} was", scafld_protocol::text::one_line(one)),
                            many => format!("{} were", scafld_protocol::text::listed(many)),
                        }
                    ),
                    Status::Review if !stale.is_empty() => {
                        "build completed, but its commands changed files in the task's scope since they ran: \
                     build again to record evidence of the files as they are now"
                            .into()
                    }
                    Status::Review => "build completed; ready for review".into(),
                    _ => spec.current_state.reason.clone(),
                };
                let state = match (status, timed_out) {
                    (Status::Blocked, true) => JobState::TimedOut,
                    (Status::Blocked, false) => JobState::Failed,
                    _ => JobState::Succeeded,
                };
                let outcome = BuildOutcome {
                    task_id: self.task.clone(),
                    root: self.ws.shown_root(),
                    status: status.to_string(),
                    phase: target.label(),
                    passed,
                    failed,
                    criteria: results,
                    next_command: next.command,
                    message: message.clone(),
                };
                crate::domain::job::JobRecord {
                    state,
                    finished_at: Some(clock::now_rfc3339()),
                    activity: None,
                    group: None,
                    reason: Some(message),
                    outcome: Some(outcome),
                    ..job
                }
            })
            .await?;
        // The spec stopped being one file that reads while the step ran (an editor saved it at
        // its old place, a criterion copied it): the answer's next is the one `status` gives,
        // which names that (the ledger alone would say review, which refuses).
        let unread = |e: &crate::workspace::index::LoadedSpec| {
            !e.duplicates.is_empty() || e.read_error.is_some() || e.parsed.structural_errors().next().is_some()
        };
        if !away
            && super::fresh_entry(&self.daemon, &home, &self.task).map_or(true, |e| unread(&e))
            && let Ok(next) = super::read::status_next(&self.daemon, &home, &self.task, true).await
            && let Some(outcome) = record.outcome.as_mut()
        {
            outcome.next_command = next.command;
            outcome.message = format!("{}; but {}", outcome.message, next.reason);
            record.reason = Some(outcome.message.clone());
        }
        Ok((record, in_place, saved))
    }

    async fn steps(
        &self,
        mut target: Target,
        mut criteria: Vec<Criterion>,
        recheck: Vec<(String, Criterion)>,
    ) -> RpcResult<StepEnd> {
        let entries = self.daemon.store().ledger(&self.ws.id, &self.task).map_err(internal)?;
        let mut evidence = StepEvidence::new(&entries);
        // The material goes first, once known (it is still being read as the step starts).
        let mut material_first = true;
        let mut results = Vec::new();
        let mut timed_out = false;
        // Completed phases whose evidence went stale run again first; the first one that fails
        // is blocked again.
        let mut recheck_failed: Option<build::Recheck> = None;
        if !recheck.is_empty() {
            let reason = format!(
                "re-running stale evidence of {}",
                recheck.iter().map(|(_, c)| format!("`{}`", c.id)).collect::<Vec<_>>().join(", ")
            );
            evidence.push(LedgerEvent::Build { status: "active".into(), reason });
            for (phase, criterion) in &recheck {
                if self.cancel.is_cancelled() {
                    break;
                }
                self.still_home(criterion)?;
                let result = self.run_criterion(phase, criterion, &mut evidence).await?;
                timed_out |= result.reason.contains("timeout");
                // Only a manual criterion waits (pending); anything else that did not pass failed.
                let waits = result.status == CriterionStatus::Pending;
                match &mut recheck_failed {
                    _ if result.status == CriterionStatus::Pass => {}
                    None => recheck_failed = Some(build::Recheck { phase: phase.clone(), awaits_person: waits }),
                    Some(first) if first.phase == *phase => first.awaits_person &= waits,
                    Some(_) => {}
                }
                results.push(result);
            }
        }
        loop {
            let mut outcome = build::StepOutcome::Passed;
            if recheck_failed.is_none() {
                evidence.push(build::running_event(&target));
                for criterion in &criteria {
                    if self.cancel.is_cancelled() {
                        break;
                    }
                    self.still_home(criterion)?;
                    let result = self.run_criterion(&target.phase_id(), criterion, &mut evidence).await?;
                    timed_out |= result.reason.contains("timeout");
                    outcome = outcome.with(result.status);
                    results.push(result);
                }
            }
            // A command may change the files it checks (a formatter, a snapshot update): the
            // files are read again once the commands are done, while the step concludes (only
            // when a command ran).
            let ran = results.iter().any(|r: &CriterionResult| r.exit_code.is_some() || r.duration_ms > 0);
            // Read where the workspace is now (its folder may have been renamed meanwhile),
            // never in a folder that holds another workspace since.
            let material_after = match self.daemon.home_of(&self.ws) {
                Home::Here => ran.then(|| StepMaterial::read(&self.ws, &self.base)),
                Home::Moved(home) => ran.then(|| StepMaterial::read(&home, &self.base)),
                Home::Gone(_) => None,
            };
            // The step (its opening, its evidence) is recorded with its conclusion: one append,
            // one flush and one projection of the spec.
            let mut events = evidence.take();
            if std::mem::take(&mut material_first) {
                let material = self.material.get().await?;
                events.splice(0..0, material_event(&entries, &material));
            }
            if self.cancel.is_cancelled() {
                events.extend([
                    LedgerEvent::Job {
                        job_id: self.job_id.clone(),
                        state: JobState::Cancelled.to_string(),
                        reason: "cancelled by a client".into(),
                    },
                    LedgerEvent::Build {
                        status: "blocked".into(),
                        reason: format!("{} evidence cancelled", target.label()),
                    },
                ]);
                evidence.written(&self.ws, &mut events, &mut results).await;
                record(&self.daemon, &self.ws, &self.task, events, "command:build")?;
                return Err(RpcError::new(ErrorKind::InvalidState, "the build was cancelled"));
            }
            // The conclusion reads phase states only, which evidence does not change.
            let spec = projected_spec_or(&self.daemon, &self.ws, &self.task, &self.base)?;
            let conclusion = build::conclude(&spec, &target, outcome, recheck_failed.as_ref());
            events.extend(conclusion.events);
            // Every diagnostics file the events name is on disk before they are recorded (the
            // last one was written while the conclusion was worked out); one that could not be
            // written is cited by none, each result naming it says why instead.
            evidence.written(&self.ws, &mut events, &mut results).await;
            if conclusion.run_final_next {
                record(&self.daemon, &self.ws, &self.task, events, "command:build")?;
                target = Target::Final;
                criteria = spec.acceptance.criteria.clone();
                continue;
            }
            // A stale phase that blocked again is what the step shows, not the target it held up.
            if let Some(recheck) = &recheck_failed {
                target = Target::Phase(recheck.phase.clone());
            }
            return Ok(StepEnd { events, target, results, timed_out, material_after });
        }
    }

    /// Refuse to run `next` when the folder the job runs in no longer holds its workspace
    /// (renamed or removed, another workspace in its place): its command would run in
    /// whatever the folder holds now. The step stops, recording nothing, and says where to
    /// build again.
    fn still_home(&self, next: &Criterion) -> RpcResult<()> {
        let (why, hint) = match self.daemon.home_of(&self.ws) {
            Home::Here => return Ok(()),
            Home::Moved(home) => (
                format!(
                    "workspace {} moved from {} to {} while the build ran",
                    self.ws.id,
                    self.ws.root.display(),
                    home.root.display()
                ),
                format!("run `scafld build {}` again in {}", self.task, home.root.display()),
            ),
            Home::Gone(why) => (why, format!("run `scafld build {}` again in the workspace's folder", self.task)),
        };
        Err(RpcError::new(
            ErrorKind::WorkspaceError,
            format!("{why}; the step stopped before `{}` ran and recorded nothing ({hint})", next.id),
        )
        .with_hint(hint))
    }

    /// Run one criterion and record its evidence, bound to its definition and the step's
    /// material. A criterion that cannot run is recorded `invalid` without running, one whose
    /// folder is not inside the workspace (a symlink leading out) `fail` without running; a manual
    /// one is never run: it passes on a person's current evidence and waits otherwise (a wait
    /// that replaces a stale result is recorded, bound like any result).
    async fn run_criterion(
        &self,
        phase_id: &str,
        criterion: &Criterion,
        evidence: &mut StepEvidence,
    ) -> RpcResult<CriterionResult> {
        let kind = criterion.effective_kind().to_string();
        let result = |status: CriterionStatus, reason: String| CriterionResult {
            criterion_id: criterion.id.clone(),
            phase_id: phase_id.to_string(),
            command: criterion.command.clone(),
            status,
            reason,
            ..CriterionResult::default()
        };
        if kind == "manual" {
            let material = self.material.get().await?;
            let entries = self.daemon.store().ledger(&self.ws.id, &self.task).map_err(internal)?;
            let (status, reason) = match evidence::manual_result(&entries, criterion, &material.digest) {
                // Recorded dispositions are pass or fail; anything else never reads as a pass.
                evidence::ManualResult::Current(status) => {
                    (status.parse().unwrap_or(CriterionStatus::Fail), format!("manual evidence recorded: {status}"))
                }
                evidence::ManualResult::Waiting { superseded } => {
                    let reason = format!(
                        "needs a person's evidence: `scafld build {} {} --disposition pass|fail --reason R`",
                        self.task,
                        scafld_protocol::cli::criterion_flag(&criterion.id)
                    );
                    if superseded {
                        let waiting = Observed {
                            status: CriterionStatus::Pending,
                            reason: reason.clone(),
                            ..Observed::default()
                        };
                        evidence.push(self.evidence_event(phase_id, criterion, &kind, waiting, &material.digest));
                    }
                    (CriterionStatus::Pending, reason)
                }
            };
            return Ok(result(status, reason));
        }
        let problems = crate::domain::spec::criterion_problems(criterion);
        if !problems.is_empty() {
            let reason = format!("not run: {}", problems.join("; "));
            let observed = Observed { status: CriterionStatus::Invalid, reason: reason.clone(), ..Observed::default() };
            let material = self.material.get().await?;
            evidence.push(self.evidence_event(phase_id, criterion, &kind, observed, &material.digest));
            return Ok(result(CriterionStatus::Invalid, reason));
        }
        self.daemon
            .jobs
            .note(&self.job_id, |r| r.activity = Some(format!("running `{}`: {}", criterion.id, criterion.command)));
        let halted =
            || RpcError::new(ErrorKind::Busy, "the daemon is stopping; this step runs again on the next build");
        if self.daemon.jobs.halted() {
            return Err(halted());
        }
        let (mut request, diagnostics) = match self.commands.request(&self.task, criterion) {
            Ok(run) => run,
            Err(why) => {
                // Recorded as a run that could not start: a failure, bound like any result.
                let reason = format!("not run: {why}");
                let observed =
                    Observed { status: CriterionStatus::Fail, reason: reason.clone(), ..Observed::default() };
                let material = self.material.get().await?;
                evidence.push(self.evidence_event(phase_id, criterion, &kind, observed, &material.digest));
                return Ok(result(CriterionStatus::Fail, reason));
            }
        };
        request.token = Some(self.run_token.clone());
        request.gate = Some(Box::pin(self.ready.clone().map(|ready| ready.map_err(|e| e.to_string()))));
        // The group is noted, not saved: the job's run token, on disk before the command may
        // run, finds this run's processes after a crash; the group only sharpens what a
        // restart reports.
        let pending = &mut evidence.files;
        let (o, file) = runner::run_deferred(request, diagnostics, self.cancel.clone(), |group| {
            self.daemon.jobs.note(&self.job_id, |r| r.group = Some(group));
            // While this shell starts up on another core.
            pending.iter_mut().for_each(runner::DiagnosticsFile::write_small);
        })
        .await;
        // Cut short by the stop (or ended just as it came): not this criterion's evidence.
        if self.daemon.jobs.halted() {
            return Err(halted());
        }
        // Killed by a client's cancel: it never finished, so it is no evidence either way (the
        // step records the cancel; the next build runs it again).
        if o.kill_reason == Some(runner::KillReason::Cancelled) {
            evidence.files.push(file);
            return Ok(result(CriterionStatus::Pending, "cancelled before it finished".into()));
        }
        // The command ran only once the job was saved and the material read (or never).
        self.ready.clone().await?;
        let material = self.material.get().await?;
        let observed = Observed { diagnostic: self.ws.relative(&file.path), ..judge(&kind, criterion, &o) };
        evidence.files.push(file);
        let (status, reason) = (observed.status, observed.reason.clone());
        let (exit_code, duration_ms) = (observed.exit_code, observed.duration_ms);
        let (excerpt, diagnostic) = (tail_text(&observed.output, 400), observed.diagnostic.clone());
        evidence.push(self.evidence_event(phase_id, criterion, &kind, observed, &material.digest));
        // Not flushed: a restart that still finds the finished group on record sees its leader
        // gone and leaves it alone, so this need not cost a flush per criterion.
        self.daemon.jobs.note(&self.job_id, |r| r.group = None);
        Ok(CriterionResult { exit_code, duration_ms, output_excerpt: excerpt, diagnostic, ..result(status, reason) })
    }

    /// One criterion result as a ledger event, bound to its definition and the step's material
    /// (its attempt number is set when the step takes it).
    fn evidence_event(
        &self,
        phase_id: &str,
        criterion: &Criterion,
        kind: &str,
        observed: Observed,
        material: &str,
    ) -> LedgerEvent {
        LedgerEvent::Criterion {
            criterion_id: criterion.id.clone(),
            phase_id: phase_id.to_string(),
            command: criterion.command.clone(),
            exit_code: observed.exit_code,
            matcher: kind.to_string(),
            status: observed.status.to_string(),
            reason: observed.reason,
            output: observed.output,
            diagnostic: observed.diagnostic,
            diagnostic_error: String::new(),
            duration_ms: observed.duration_ms,
            attempt: 0,
            definition: evidence::definition_digest(criterion),
            material: material.to_string(),
            redacted: observed.redacted,
        }
    }
}

/// How a build job's last step ended, still to be recorded with the job's end.
struct StepEnd {
    events: Vec<LedgerEvent>,
    target: Target,
    results: Vec<CriterionResult>,
    timed_out: bool,
    /// The material read again after the last command, when a command ran.
    material_after: Option<StepMaterial>,
}

/// The ledger events of one build step (its material, its opening, each criterion's result),
/// held until the step concludes and recorded with its conclusion in one append. A daemon that
/// dies mid-step loses them with the step (its job is then abandoned and the step runs again),
/// never a result without the rest of its step. While the step runs, the job says so.
struct StepEvidence {
    /// How many results each criterion has on record, this step's included.
    attempts: BTreeMap<String, u32>,
    events: Vec<LedgerEvent>,
    /// The diagnostics files the events name, written while the next criterion's shell
    /// starts up.
    files: Vec<runner::DiagnosticsFile>,
}

impl StepEvidence {
    fn new(entries: &[LedgerEntry]) -> StepEvidence {
        let mut attempts = BTreeMap::new();
        for entry in entries {
            if let LedgerEvent::Criterion { criterion_id, .. } = &entry.event {
                *attempts.entry(criterion_id.clone()).or_default() += 1;
            }
        }
        StepEvidence { attempts, events: Vec::new(), files: Vec::new() }
    }

    /// Take the step's next event; a criterion's result is numbered as its next attempt.
    fn push(&mut self, mut event: LedgerEvent) {
        if let LedgerEvent::Criterion { criterion_id, attempt, .. } = &mut event {
            let count = self.attempts.entry(criterion_id.clone()).or_default();
            *count += 1;
            *attempt = *count;
        }
        self.events.push(event);
    }

    /// The step's events so far; see [`StepEvidence::written`].
    fn take(&mut self) -> Vec<LedgerEvent> {
        std::mem::take(&mut self.events)
    }

    /// Wait until every diagnostics file the events taken name is written; the events and
    /// results that name one that could not be written name none, and say why.
    async fn written(&mut self, ws: &Workspace, events: &mut [LedgerEvent], results: &mut [CriterionResult]) {
        for file in self.files.drain(..) {
            let written = file.written().await;
            let Some(why) = written.error else { continue };
            let (path, why) = (ws.relative(&written.path), ws.unanchored(&why));
            warn!(%path, %why, "a criterion's diagnostics file could not be written");
            events.iter_mut().for_each(|e| e.record_unwritten(&path, &why));
            for result in results.iter_mut().filter(|r| r.diagnostic == path) {
                result.diagnostic_error = ledger::unwritten_record(&path, &why);
                result.diagnostic.clear();
            }
        }
    }
}

/// How criteria's commands run, worked out once for a set of runs (a build job, a receipt's
/// rerun, a verify): the caller's environment with the configured PATH and variables (toolchain
/// shims found by a few dozen stats, which a real repository's top-level folders multiply),
/// the configured timeouts, diagnostics under the task's runs.
pub(crate) struct CommandSetup {
    env: BTreeMap<String, String>,
    /// The caller's variables the wire carried as bytes (not UTF-8), set exactly so.
    env_bytes: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    env_overrides: Vec<String>,
    absolute_timeout_seconds: u64,
    idle_timeout: Option<Duration>,
    /// The caller's umask, which its commands run under (`None`: an older client's call).
    umask: Option<u32>,
    root: PathBuf,
    /// Where diagnostics files are written: under the task's runs in the workspace's folder
    /// wherever it is when they are ([`Workspace::anchored`]), or a folder of the caller's.
    diagnostics: DiagnosticsHome,
}

/// Where a [`CommandSetup`]'s runs write their diagnostics files.
enum DiagnosticsHome {
    /// `<workspace>/.scafld/runs/<task>/diagnostics/`, reached through the folder held for
    /// as long as the runs are (this setup is kept until the step's files are written).
    Runs(crate::workspace::Anchored),
    /// This folder, whatever the task (`verify`'s throwaway one: it writes nothing into the
    /// checkout it checks).
    Folder(PathBuf),
}

impl CommandSetup {
    pub(crate) fn new(ws: &Workspace, config: &Config, caller: &m::CallerContext) -> CommandSetup {
        use std::os::unix::ffi::OsStringExt;
        let caller_env = &caller.env;
        let execution = &config.execution;
        let found = ws.toolchain_files();
        let found: Vec<&str> = found.iter().map(String::as_str).collect();
        let mut env_overrides: Vec<String> = execution.env.keys().cloned().collect();
        env_overrides.push("PATH".into());
        let mut env = acceptance::environment(caller_env, &execution.path_prepend, &found, &execution.env);
        let mut env_bytes: Vec<(std::ffi::OsString, std::ffi::OsString)> = caller
            .env_bytes
            .iter()
            .map(|var| {
                (std::ffi::OsString::from_vec(var.name.clone()), std::ffi::OsString::from_vec(var.value.clone()))
            })
            .collect();
        // A caller's PATH that is not text is still what the prepends go before (unless the
        // configuration sets PATH itself): it is put together as bytes.
        if !execution.env.contains_key("PATH")
            && let Some(at) = env_bytes.iter().position(|(name, _)| name == "PATH")
        {
            let (name, caller_path) = env_bytes.remove(at);
            let mut path = std::ffi::OsString::new();
            if let Some(prepended) = env.remove("PATH").filter(|p| !p.is_empty()) {
                path.push(prepended);
                path.push(":");
            }
            path.push(caller_path);
            env_bytes.push((name, path));
        }
        CommandSetup {
            env,
            env_bytes,
            env_overrides,
            absolute_timeout_seconds: execution.absolute_timeout_seconds.max(1),
            idle_timeout: (execution.idle_timeout_seconds > 0)
                .then(|| Duration::from_secs(execution.idle_timeout_seconds)),
            umask: caller.umask,
            root: ws.root.clone(),
            diagnostics: DiagnosticsHome::Runs(ws.anchored()),
        }
    }

    /// The same runs in `checkout`, a clean checkout of the commit a receipt's files were read
    /// at (`verify --material-ref`), with the environment of
    /// [`acceptance::clean_checkout_environment`]: `home` and `tmp` as HOME and TMPDIR, none
    /// of the caller's credentials.
    pub(crate) fn in_clean_checkout(
        self,
        ws: &Workspace,
        config: &Config,
        caller: &m::CallerContext,
        checkout: PathBuf,
        home: &Path,
        tmp: &Path,
    ) -> CommandSetup {
        let execution = &config.execution;
        let found = ws.toolchain_files();
        let found: Vec<&str> = found.iter().map(String::as_str).collect();
        let env = acceptance::clean_checkout_environment(
            &caller.env,
            &execution.path_prepend,
            &found,
            &execution.env,
            &home.display().to_string(),
            &tmp.display().to_string(),
        );
        let mut env_overrides = self.env_overrides;
        env_overrides.extend(["HOME", "TMPDIR", "CI", "SCAFLD_VERIFY"].map(String::from));
        // The caller's variables that are not text are its own too: none is passed.
        CommandSetup { env, env_bytes: Vec::new(), env_overrides, root: checkout, ..self }
    }

    /// The same runs, their diagnostics files written into `dir` instead of the workspace.
    pub(crate) fn diagnostics_in(self, dir: PathBuf) -> CommandSetup {
        CommandSetup { diagnostics: DiagnosticsHome::Folder(dir), ..self }
    }

    /// One criterion's run: its own timeout and working directory when it names them. `Err`
    /// says why it must not run: its folder (see [`CommandSetup::folder`]) is not one inside
    /// the workspace.
    pub(crate) fn request(&self, task: &str, criterion: &Criterion) -> Result<(RunRequest, Diagnostics), String> {
        let timeout = criterion.own_timeout_seconds().unwrap_or(self.absolute_timeout_seconds);
        let cwd = self.folder(criterion)?;
        let request = RunRequest {
            idle_timeout: self.idle_timeout,
            env_bytes: self.env_bytes.clone(),
            umask: self.umask,
            ..RunRequest::new(criterion.command.clone(), cwd, self.env.clone(), Duration::from_secs(timeout))
        };
        let diagnostics = Diagnostics {
            dir: match &self.diagnostics {
                DiagnosticsHome::Runs(root) => root.join(".scafld/runs").join(task).join("diagnostics"),
                DiagnosticsHome::Folder(dir) => dir.clone(),
            },
            env_overrides: self.env_overrides.clone(),
        };
        Ok((request, diagnostics))
    }

    /// The folder a criterion runs in: the workspace's root, or its `Cwd` resolved through
    /// symlinks, which must still be inside the workspace. The text of a `Cwd` is checked where
    /// it is read (a spec, a receipt), but a folder of that name may be a symlink leading out
    /// (a later commit can make it one), so the resolved folder is what runs, and the check.
    fn folder(&self, criterion: &Criterion) -> Result<PathBuf, String> {
        let cwd = &criterion.cwd;
        if cwd.is_empty() {
            return Ok(self.root.clone());
        }
        if !crate::domain::spec::cwd_inside(cwd) {
            return Err(format!("criterion `{}` names cwd `{cwd}`, outside the workspace", criterion.id));
        }
        let root = self.root.canonicalize().unwrap_or_else(|_| self.root.clone());
        let folder = root.join(cwd).canonicalize().map_err(|e| {
            format!("criterion `{}` names cwd `{cwd}`, which is not a folder in the workspace: {e}", criterion.id)
        })?;
        if !folder.starts_with(&root) {
            return Err(format!(
                "criterion `{}` names cwd `{cwd}`, which leads outside the workspace ({}) through a symlink, to {}",
                criterion.id,
                root.display(),
                folder.display()
            ));
        }
        if !folder.is_dir() {
            return Err(format!("criterion `{}` names cwd `{cwd}`, which is not a folder", criterion.id));
        }
        Ok(folder)
    }
}

/// What one criterion run showed, as its evidence records it.
#[derive(Default)]
pub(crate) struct Observed {
    pub status: CriterionStatus,
    pub reason: String,
    pub exit_code: Option<i32>,
    /// The output kept as evidence (browser evidence redacted).
    pub output: String,
    pub diagnostic: String,
    pub duration_ms: u64,
    /// What was redacted before recording.
    pub redacted: Vec<String>,
}

/// Judge a finished run by the criterion's matcher; browser evidence is redacted before it is
/// kept, and the reason says so.
pub(crate) fn judge(kind: &str, criterion: &Criterion, o: &RunOutcome) -> Observed {
    let combined = o.tail(64 * 1024);
    let facts = RunFacts {
        exit_code: o.exit_code,
        stdout: &o.stdout.bytes,
        output_empty: o.stdout.total() == 0 && o.stderr.total() == 0,
        runner_error: o.runner_error(),
        signal_death: o.signal_death(),
        command: &criterion.command,
        combined_text: &combined,
    };
    let (status, mut reason) = acceptance::evaluate(kind, &facts);
    let (output, redacted) = if kind == "browser_evidence" && !o.stdout.bytes.is_empty() {
        let (clean, mut redacted) = acceptance::redact_browser_evidence(&o.stdout.text());
        let (clean_reason, in_reason) = acceptance::redact_text(&reason);
        reason = clean_reason;
        redacted.extend(in_reason.into_iter().map(|r| format!("reason: {r}")));
        (tail_text(&clean, SNIPPET_BYTES), redacted)
    } else {
        (o.tail(SNIPPET_BYTES), Vec::new())
    };
    if !redacted.is_empty() {
        reason = format!("{reason} (redacted before recording: {})", redacted.join(", "));
    }
    Observed {
        status,
        reason,
        exit_code: o.exit_code.or(Some(-1)),
        output,
        diagnostic: String::new(),
        duration_ms: o.duration.as_millis() as u64,
        redacted,
    }
}

fn tail_text(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].to_string()
}

/// `fail` and `cancel`: the end recorded in the ledger, then projected (the spec archived). A
/// task whose spec file is gone is closed in its ledger alone: nothing is written where the
/// file was (the ledger keeps no text to write), and the answer says so; a file put back later
/// is archived by `reconcile`.
pub async fn archive(daemon: &Daemon, p: m::ReasonParams, status: Status) -> RpcResult<m::ArchiveResult> {
    let (ws, task) = match entry(daemon, &p.root, &p.task_id).await {
        Ok((ws, entry)) => (ws, entry.task_id.clone()),
        Err(missing) => match super::Gone::find_to_close(daemon, &p.root, &p.task_id).await? {
            Some((ws, gone)) => (ws, gone.task),
            None => return Err(missing),
        },
    };
    let reason = p.reason.trim().to_string();
    if reason.is_empty() {
        return Err(RpcError::new(ErrorKind::InvalidInput, "a reason is required").with_hint("pass --reason \"why\""));
    }
    refuse_while_running(daemon, &ws, &task)?;
    let lock = daemon.jobs.task_lock(&ws, &task);
    let _guard = lock.lock().await;
    refuse_while_running(daemon, &ws, &task)?;
    // As the files are now that this call holds the task.
    let gone = super::Gone::of_to_close(daemon, &ws, &task)?;
    let (now, file) = match &gone {
        Some(gone) => (gone.status, None),
        None => {
            let entry = super::fresh_entry(daemon, &ws, &task)?;
            (projected_spec(daemon, &ws, &task)?.0.status().unwrap_or(Status::Draft), Some(entry))
        }
    };
    super::refuse_archived(&task, now)?;
    // A task in two files (writing would archive one of them and leave the other where it is)
    // is refused with the way out. A spec a hand edit left in error is no reason to keep a
    // task open: it is closed in its ledger and its file archived as written, never rewritten
    // (`ledger::archive_as_written`); nor is a draft's unfilled placeholders.
    if let Some(entry) = file.as_ref().filter(|entry| !entry.duplicates.is_empty()) {
        require_valid(daemon, &ws, entry)?;
    }
    let event = if status == Status::Failed { LedgerEvent::Fail { reason } } else { LedgerEvent::Cancel { reason } };
    let cause = if status == Status::Failed { "command:fail" } else { "command:cancel" };
    let note = match record(daemon, &ws, &task, vec![event], cause)? {
        Projected::Deferred { note, why: Unprojected::Broken } => {
            match crate::ledger::archive_as_written(daemon, &ws, &task, cause) {
                Ok(moved) => Some(moved.map_or(note.clone(), |moved| format!("{note}; {moved}"))),
                // The ledger records the end already: the answer is that, with the move that
                // failed and the way to make it, never an error that reads as nothing done.
                Err(e) => Some(format!(
                    "the task is {status} in its ledger, but its spec file was not archived ({e}); {}",
                    e.0.hint.clone().unwrap_or_else(|| format!(
                        "once that is mended, `{}` archives it",
                        ws.runnable(&format!("scafld reconcile {task}"))
                    ))
                )),
            }
        }
        projected => projected.note(),
    };
    if gone.is_some() {
        // No file was written to announce it: the ledger's change is the news.
        daemon.publish_task_changed(&ws, &task, cause);
    }
    let path = ws.spec_path(&task);
    Ok(m::ArchiveResult { task_id: task, status, path, note, spec_missing: gone.is_some() })
}

pub async fn session(daemon: &Daemon, p: m::SessionParams) -> RpcResult<m::SessionResult> {
    // The ledger outlives its spec file: a task whose file is gone still shows its history.
    // Showing it only reads (a never-initialised workspace is left unwritten and unregistered);
    // an export writes a file, and settles the workspace as any write does.
    let to_read = p.export.is_none();
    let found = match to_read {
        true => super::entry_to_read(daemon, &p.root, &p.task_id).await,
        false => entry(daemon, &p.root, &p.task_id).await,
    };
    let (ws, task) = match found {
        Ok((ws, entry)) => (ws, entry.task_id.clone()),
        Err(missing) => {
            let gone = match to_read {
                true => super::Gone::find_to_read(daemon, &p.root, &p.task_id).await?,
                false => super::Gone::find(daemon, &p.root, &p.task_id).await?,
            };
            let Some((ws, gone)) = gone else { return Err(missing) };
            (ws, gone.task)
        }
    };
    let entries = daemon.store().ledger(&ws.id, &task).map_err(internal)?;
    let exported = match p.export {
        None => {
            let values = entries.iter().map(|e| serde_json::to_value(e).unwrap_or_default()).collect();
            return Ok(m::SessionResult {
                task_id: task,
                entries: Some(values),
                exported: None,
                exported_entries: None,
            });
        }
        Some(path) => {
            let full = export_path(daemon, &ws, &task, &path, p.force)?;
            let document = Export {
                schema_version: 1,
                task_id: &task,
                workspace_id: &ws.id,
                exported_at: clock::now_rfc3339(),
                entries: &entries,
            };
            let text = serde_json::to_string_pretty(&document).map_err(internal)? + "\n";
            // Private whatever the umask: the results it carries may quote a command's output.
            specfile::write_atomic_mode(&full, text.as_bytes(), 0o600).map_err(|e| {
                let message = format!("cannot write {}: {e}", full.display());
                // A path of the caller's that names no writable file is theirs to change (a
                // usage error); the default path failing, or any path failing for want of
                // room or a device error, is a runtime failure.
                if !path.is_empty() && names_no_writable_file(&e) {
                    RpcError::new(ErrorKind::InvalidInput, message).with_hint("choose a file you can write")
                } else if e.kind() == std::io::ErrorKind::StorageFull {
                    RpcError::new(ErrorKind::WorkspaceError, message)
                        .with_hint("free space on that file system, then export again (nothing was written)")
                } else {
                    RpcError::new(ErrorKind::WorkspaceError, message)
                }
            })?;
            // The export recovery reads (the default place) is held to where it ends.
            if let (true, Some(last)) = (path.is_empty(), entries.last()) {
                let digest = crate::domain::ledger::chain_digest(entries.iter());
                daemon.store().note_export(&ws.id, &task, last.seq, digest).map_err(internal)?;
            }
            full.display().to_string()
        }
    };
    // The file holds the entries: the reply stays small however long the ledger is.
    let count = Some(entries.len());
    Ok(m::SessionResult { task_id: task, entries: None, exported: Some(exported), exported_entries: count })
}

/// The file `session --export` writes (what `session --import` reads back), serialised
/// straight from the ledger.
#[derive(serde::Serialize)]
struct Export<'a> {
    schema_version: u32,
    task_id: &'a str,
    workspace_id: &'a str,
    exported_at: String,
    entries: &'a [LedgerEntry],
}

/// Whether a failed write says the path itself is wrong (missing folder, no permission, not a
/// file), rather than the file system failing under a good path (full, read-only, a device error).
fn names_no_writable_file(e: &std::io::Error) -> bool {
    use std::io::ErrorKind as Io;
    matches!(e.kind(), Io::NotFound | Io::PermissionDenied | Io::IsADirectory | Io::NotADirectory | Io::AlreadyExists)
}

/// Where `session --export` may write: the default under the task's runs folder, or an
/// absolute path the client resolved from its own directory; never scafld's own files (the
/// workspace id, specs, configuration, templates, the daemon's state), never through a
/// symlink, and never over an existing file without `force`.
fn export_path(daemon: &Daemon, ws: &Workspace, task: &str, path: &str, force: bool) -> RpcResult<PathBuf> {
    let refuse = |why: String| RpcError::new(ErrorKind::InvalidInput, why);
    let full = if path.is_empty() {
        ws.root.join(".scafld/runs").join(task).join("ledger.json")
    } else if Path::new(path).is_absolute() {
        PathBuf::from(path)
    } else {
        return Err(refuse(format!("--export {path:?} must be absolute (the client resolves it from its directory)")));
    };
    let parent = full.parent().ok_or_else(|| refuse(format!("--export {path:?} names no file")))?;
    // The default path is written as named (the write refuses symlinks inside .scafld); a
    // path of the caller's is resolved, to see whether it lands on scafld's own files.
    let dir = if path.is_empty() {
        parent.to_path_buf()
    } else {
        parent.canonicalize().unwrap_or_else(|_| parent.to_path_buf())
    };
    let name = full.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let resolved = dir.join(&name);
    let scafld = ws.root.join(".scafld");
    let own = resolved.starts_with(daemon.options.state_dir.canonicalize().unwrap_or(daemon.options.state_dir.clone()))
        || (resolved.starts_with(&scafld) && !resolved.starts_with(scafld.join("runs")));
    if own || name.is_empty() {
        return Err(refuse(format!("refusing to write the ledger over scafld's own files ({})", resolved.display()))
            .with_hint("export under .scafld/runs/ (the default) or anywhere outside .scafld/"));
    }
    // A folder of the caller's is never made for them (a typo would scatter files anywhere).
    if !path.is_empty() && !parent.is_dir() {
        return Err(refuse(format!("--export {path:?}: there is no folder {}", parent.display()))
            .with_hint("create the folder first, or export elsewhere"));
    }
    // The one rule `man --out` follows too; the default path is scafld's own file, replaced
    // each time. Every refusal is the caller's to change: a usage error.
    scafld_local::out_file::check(&resolved, force || path.is_empty())
        .map_err(|why| refuse(format!("--export: {why}")).with_hint(why.hint()))?;
    Ok(resolved)
}

/// At start-up: abandon jobs that lost their runner and record it in their tasks' ledgers (a
/// harden's only in its record: a harden round is the spec's, and a draft has no ledger).
pub async fn recover_jobs(daemon: &Arc<Daemon>) {
    for job in daemon.jobs.recover(daemon.store()).into_iter().filter(|j| j.kind == JobKind::Acceptance) {
        let event = LedgerEvent::Job {
            job_id: job.id.clone(),
            state: JobState::Abandoned.to_string(),
            reason: job.reason.clone().unwrap_or_default(),
        };
        // The job's workspace where it is now, never whatever holds its folder since (a copy
        // left where it was moved from, another workspace): those get nothing written.
        let ws = match daemon.workspace_of(&job.root, &job.workspace_id).await {
            Ok(ws) if ws.id == job.workspace_id => ws,
            found => {
                let why = match found {
                    Ok(other) => format!("{} holds workspace {} now", other.root.display(), other.id),
                    Err(e) => e.0.message,
                };
                // Its ledger alone, which the workspace finds by its id wherever it is opened
                // next; its spec shows it with the task's next write (`reconcile`).
                if let Err(e) = crate::ledger::record_unopened(daemon, &job.workspace_id, &job.task_id, vec![event]) {
                    warn!(job = %job.id, "cannot record the abandoned job: {e}");
                }
                info!(job = %job.id, "the abandoned job is recorded in its workspace's ledger only: {why}");
                continue;
            }
        };
        let lock = daemon.jobs.task_lock(&ws, &job.task_id);
        let _guard = lock.lock().await;
        // The workspace may still be indexing in the background: have the index read this
        // task's spec first, so the projection finds it.
        let _ = super::fresh_entry(daemon, &ws, &job.task_id);
        if let Err(e) = record(daemon, &ws, &job.task_id, vec![event], "recovery") {
            warn!(job = %job.id, "cannot record the abandoned job: {e}");
        }
    }
}
