//! Write-side task methods: plan, harden, reconcile. Each holds the task's lock (the one lock
//! of a task's ledger and spec), re-reads the spec from disk, and projects the new model into it.

use std::path::Path;
use std::sync::Arc;

use scafld_protocol::ErrorKind;
use scafld_protocol::methods as m;

use super::{entry, require_valid, spec_file, target_for, task_id, wire, write_error, write_projection};
use crate::clock;
use crate::daemon::Daemon;
use crate::domain::harden::{self, Ground, Reach};
use crate::domain::lifecycle::{Folder, HardenStatus, Status};
use crate::domain::spec::project::project;
use crate::domain::spec::render::{PlanInput, new_spec, plan_input_problem};
use crate::domain::spec::{Spec, parse, parse_as};
use crate::error::{RpcError, RpcResult};
use crate::ledger::{Projected, SpecText, Unprojected};
use crate::workspace::Workspace;
use crate::workspace::specfile;

pub async fn plan(daemon: &Daemon, p: m::PlanParams) -> RpcResult<m::PlanResult> {
    let task = task_id(&p.task_id)?;
    let size = p.size.as_deref().unwrap_or("medium");
    let risk = p.risk.as_deref().unwrap_or("medium");
    if !["micro", "small", "medium", "large"].contains(&size) {
        return Err(RpcError::new(
            ErrorKind::InvalidInput,
            format!("size {size:?} is not micro, small, medium or large"),
        ));
    }
    if !["low", "medium", "high"].contains(&risk) {
        return Err(RpcError::new(ErrorKind::InvalidInput, format!("risk {risk:?} is not low, medium or high")));
    }
    let ws = daemon.workspace(&p.root).await?;
    // A taken id is refused at once, not once the lock a running build of the task holds is
    // let go (a plan called from inside that build's commands would wait for ever on itself).
    refuse_taken_id(daemon, &ws, task.as_str())?;
    let lock = daemon.jobs.task_lock(&ws, task.as_str());
    let _guard = lock.lock().await;
    // Again under the lock: another plan may have written it meanwhile.
    refuse_taken_id(daemon, &ws, task.as_str())?;
    let now = clock::now_rfc3339();
    let input = PlanInput {
        task_id: task.as_str(),
        title: p.title.as_deref(),
        summary: p.summary.as_deref(),
        size,
        risk,
        command: p.command.as_deref(),
        now: &now,
        shadowed: crate::templates::shadows(&ws.root, task.as_str()),
    };
    if let Some(problem) = plan_input_problem(&input) {
        return Err(RpcError::new(ErrorKind::InvalidInput, problem));
    }
    let text = new_spec(&input);
    let target = specfile::target_path(&ws.root, task.as_str(), Status::Draft, "");
    if target.exists() {
        return Err(RpcError::new(ErrorKind::AlreadyExists, format!("spec already exists: {}", ws.relative(&target))));
    }
    // What the answer needs that could fail is worked out before the draft is written: once it
    // is, the call succeeds (a plan that failed after writing would leave a draft that the next
    // plan refuses as existing).
    let parsed = parse(&text);
    let diagnostics = parsed.diagnostics.iter().map(wire).collect();
    let fallback = crate::domain::next::of_new_draft(&parsed, input.shadowed);
    let written = specfile::write_spec(None, &target, &text).map_err(write_error)?;
    crate::sync::write(&ws.index).record_write(&target, &text, None, &written);
    daemon.publish_task_changed(&ws, task.as_str(), "command:plan");
    // The one decision of what comes next, as `status` makes it for the draft just written;
    // should that read fail now, the lifecycle's own decision for a new draft stands in.
    let next_action = match super::read::status_next(daemon, &ws, task.as_str(), false).await {
        Ok(next) => next,
        Err(e) => {
            tracing::warn!(task = %task, "plan wrote the draft, but its next action does not read: {}", e.0.message);
            fallback
        }
    };
    Ok(m::PlanResult {
        task_id: task.to_string(),
        path: ws.relative(&target),
        status: Status::Draft,
        diagnostics,
        next_action,
    })
}

/// Refuse `plan` of an id that is taken: a spec under it (as the files are now), one archived
/// too deep to read, a ledger that outlived its spec, or a spec folder that cannot be looked in.
fn refuse_taken_id(daemon: &Daemon, ws: &Workspace, task: &str) -> RpcResult<()> {
    // As the files are now, not as the watcher last reported them (a spec just removed).
    let _ = crate::sync::write(&ws.index).sync_task(task);
    if let Some(existing) = ws.indexed(task) {
        return Err(RpcError::new(
            ErrorKind::AlreadyExists,
            format!("spec already exists: {}", ws.relative(&existing.path)),
        )
        .with_hint("pick another task id; plan never overwrites a spec"));
    }
    // A spec archived further down than anything reads still holds its id.
    if let Some(deep) = specfile::too_deep(&ws.root, &format!("{task}.md")) {
        return Err(RpcError::new(
            ErrorKind::AlreadyExists,
            format!(
                "spec already exists: {}, more than {} folders below .scafld/specs/archive, where no command reads it",
                ws.relative(&deep),
                specfile::ARCHIVE_DEPTH
            ),
        )
        .with_hint("pick another task id, or move that spec up into an archive folder nearer the top"));
    }
    // A ledger outlives its spec file (ledgers are never pruned): a new draft under the id
    // would read as that task, completed or approved before it was written.
    let history = daemon.store().ledger(&ws.id, task).map_err(RpcError::internal)?;
    if !history.is_empty() {
        let was = crate::domain::ledger::replay(&history).status.map(|s| format!(", last {s}")).unwrap_or_default();
        return Err(RpcError::new(
            ErrorKind::AlreadyExists,
            format!(
                "task id `{task}` has a history in this workspace ({} ledger entries{was}) though its spec is gone",
                history.len()
            ),
        )
        .with_hint(format!("pick another task id; `scafld session {task}` shows that history")));
    }
    // A spec folder that cannot be looked in may hold a spec with the id.
    super::refuse_hidden_id(ws, task)
}

pub async fn harden(daemon: &Arc<Daemon>, p: m::HardenParams) -> RpcResult<m::HardenResult> {
    let (ws, entry) = entry(daemon, &p.root, &p.task_id).await?;
    // A harden (or a build, a review) of the task running holds it, for as long as its provider
    // or commands run: refused at once, not waited out. Asked again once the task is held.
    super::exec::refuse_while_running(daemon, &ws, &entry.task_id)?;
    let lock = daemon.jobs.task_lock(&ws, &entry.task_id);
    let guard = lock.lock_owned().await;
    super::exec::refuse_while_running(daemon, &ws, &entry.task_id)?;
    // Delegated when asked, or by configuration (unless a hand-written round is being closed).
    let configured = match p.mark_passed {
        false => ws.config().ok().map(|c| c.harden.external.provider).filter(|p| !p.is_empty()),
        true => None,
    };
    let (file, spec) = read_fresh(&ws, &entry.task_id)?;
    // The ledger decides the status: a file still saying draft after an approval it could not
    // record in the file (a full disk) is no draft.
    let status = super::projected_spec(daemon, &ws, &entry.task_id)?.0.status();
    if spec.status() != Some(Status::Draft) || status != Some(Status::Draft) {
        let now = status.map_or_else(|| spec.status_word(), |s| s.to_string());
        return Err(RpcError::new(
            ErrorKind::InvalidState,
            format!("harden only operates on drafts; {} is {now}", entry.task_id),
        )
        .with_hint(super::read::refusal_hint(daemon, &ws, &entry.task_id).await));
    }
    if let Some(provider) = p.provider.clone().or(configured) {
        // A pass binds the draft as it is, and `approve` refuses a draft that does not
        // validate: no provider is asked to judge one (nothing is run or recorded).
        let again = super::delegated_harden::again(&entry.task_id, &p, &provider);
        refuse_invalid_draft(daemon, &ws, &entry.task_id, &[], Hardening::Delegated { again: &again }).await?;
        let draft = super::delegated_harden::Draft { file, spec };
        return super::delegated_harden::harden(daemon, &ws, &entry.task_id, draft, &p, &provider, guard).await;
    }
    let now = clock::now_rfc3339();
    let id = entry.task_id.clone();
    if p.mark_passed {
        let ground = WorkspaceGround { ws: &ws };
        let digest = harden::draft_digest(&file.text);
        let marked = harden::mark_passed(&spec, &digest, &ground, &now);
        // A pass binds the draft as it is, and `approve` refuses a draft that does not
        // validate: a round passed on one would be stale by the fix it needs.
        match &marked {
            Ok(_) => refuse_invalid_draft(daemon, &ws, &id, &[], Hardening::MarkPassed).await?,
            Err(harden::MarkRefused::Incomplete(problems)) => {
                refuse_invalid_draft(daemon, &ws, &id, problems, Hardening::MarkPassed).await?
            }
            Err(_) => {}
        }
        let next = marked.map_err(|refused| match refused {
            harden::MarkRefused::NoRound => RpcError::new(
                ErrorKind::InvalidState,
                format!("{id} has no harden round to mark passed"),
            )
            .with_hint(format!("open one with `scafld harden {id}`, answer its checks, then `scafld harden {id} --mark-passed`")),
            harden::MarkRefused::NotOurs { round } => RpcError::new(
                ErrorKind::ValidationFailed,
                format!("{round} is Python scafld's round (`- Round N`), which holds no checks of scafld's"),
            )
            .with_hint(format!("open a round of scafld's own on the draft: `scafld harden {id}` (or approve anyway with `scafld approve {id} --reason \"why\"`)")),
            harden::MarkRefused::Incomplete(problems) => RpcError::new(
                ErrorKind::ValidationFailed,
                format!("hardening evidence is incomplete ({} problem(s)): {}", problems.len(), problems[0]),
            )
            .with_hint(format!(
                "complete the round in {}, then run `scafld harden {id} --mark-passed` again",
                ws.relative(&file.path)
            ))
            .with_details(serde_json::json!({ "problems": problems })),
            harden::MarkRefused::PassedEarlier { round } => RpcError::new(
                ErrorKind::InvalidState,
                format!("{round} already passed, on an earlier draft of {id}; the draft changed since"),
            )
            .with_hint(format!("open a new round on the draft as it is: `scafld harden {id}`")),
            harden::MarkRefused::PassedUnbound { round } => RpcError::new(
                ErrorKind::InvalidState,
                format!(
                    "{round} already passed, as the original tool records a pass (no `Spec digest:`, so bound to no draft); it is not bound to this draft after the fact"
                ),
            )
            .with_hint(format!(
                "approve honours that pass for the draft as it is (the approval pins it): `scafld approve {id}`; or open a new round on the draft: `scafld harden {id}`"
            )),
        })?;
        let round_id = next.harden_rounds.last().map(|r| r.id.clone()).unwrap_or_default();
        let written = write_projection(daemon, &ws, &id, &file, &next, "command:harden")?;
        // The one decision of what comes next, asked of the draft as written.
        let next_command = match super::read::status_next(daemon, &ws, &id, false).await {
            Ok(next) => next.command,
            Err(_) => format!("scafld status {id}"),
        };
        return Ok(m::HardenResult {
            task_id: id.clone(),
            path: ws.relative(&written),
            harden_status: HardenStatus::Passed,
            round_id,
            marked_passed: true,
            next_command,
            prompt: String::new(),
            problems: Vec::new(),
            raised: Vec::new(),
        });
    }
    // Read before the round is written: a configuration or a project prompt that does not
    // read refuses the call with nothing written.
    let config = ws.config()?;
    let project_prompt = project_harden_prompt(&ws)?;
    // The open round, or a new one, bound to the draft as it is (with the round in it), so a
    // delegated run on the same draft fills this round. Never two rounds open at once.
    let next =
        harden::bind_latest_round(&file.text, harden::open_or_resume_round(&spec, &now)).map_err(projection_error)?;
    let round_id = next.harden_rounds.last().map(|r| r.id.clone()).unwrap_or_default();
    let written = write_projection(daemon, &ws, &id, &file, &next, "command:harden")?;
    let invariants: Vec<(String, String)> = config.invariants.canonical.into_iter().collect();
    let prompt = harden::prompt(
        project_prompt.as_deref(),
        &ws.relative(&written),
        &round_id,
        &id,
        config.harden.max_questions_per_round,
        &invariants,
    );
    Ok(m::HardenResult {
        task_id: id.clone(),
        path: ws.relative(&written),
        harden_status: HardenStatus::InProgress,
        round_id,
        marked_passed: false,
        next_command: format!("scafld harden {id} --mark-passed"),
        prompt,
        problems: Vec::new(),
        raised: Vec::new(),
    })
}

/// The most a project's harden prompt may hold.
const MAX_PROMPT_BYTES: u64 = 1 << 20;

/// The project's own harden prompt, the first of [`harden::PROMPT_OVERRIDES`] there is, as the
/// original tool looks it up; `None` leaves the built-in one. One that is there but cannot be
/// read (a directory, not UTF-8, too large, no permission) is an error, never skipped unsaid.
fn project_harden_prompt(ws: &Workspace) -> RpcResult<Option<String>> {
    for relative in harden::PROMPT_OVERRIDES {
        let path = ws.root.join(relative);
        match scafld_local::capped::read_text_if_there(&path, "harden prompt", MAX_PROMPT_BYTES) {
            Ok(Some(text)) => return Ok(Some(text)),
            Ok(None) => continue,
            Err(e) => {
                return Err(RpcError::new(ErrorKind::WorkspaceError, e.to_string())
                    .with_hint(format!("{}; or remove {relative} to use the built-in prompt", e.hint())));
            }
        }
    }
    Ok(None)
}

/// Which harden is refused over a draft that does not validate.
enum Hardening<'a> {
    /// `--mark-passed` on a hand-answered round.
    MarkPassed,
    /// A provider's judgement, `again` the command that asks it once the draft is fixed.
    Delegated { again: &'a str },
}

/// Refuse a harden that could pass a draft that does not validate (its own errors, and its
/// scope's that `approve` refuses), naming them: `--mark-passed`, and a delegated harden
/// before its provider runs. The round's own evidence problems, if any, ride along.
async fn refuse_invalid_draft(
    daemon: &Daemon,
    ws: &Workspace,
    id: &str,
    problems: &[String],
    hardening: Hardening<'_>,
) -> RpcResult<()> {
    let entry = super::fresh_entry(daemon, ws, id)?;
    let (mut errors, _) = super::explained_errors(daemon, ws, &entry)?;
    let scope = crate::evidence::scope_notes(ws, &entry.parsed.spec).await.into_iter();
    errors.extend(scope.filter(|(error, ..)| *error).map(|(_, line, message)| m::Diagnostic {
        line,
        severity: m::Severity::Error,
        message,
    }));
    let Some(first) = errors.first() else { return Ok(()) };
    let at = if first.line > 0 { format!("line {}: ", first.line) } else { String::new() };
    let (refused, then) = match hardening {
        Hardening::MarkPassed => {
            (format!("cannot mark {id}'s harden round passed"), format!("scafld harden {id} --mark-passed"))
        }
        Hardening::Delegated { again } => {
            (format!("cannot harden {id}: no provider judges a draft that does not validate"), again.to_string())
        }
    };
    Err(RpcError::new(
        ErrorKind::ValidationFailed,
        format!("{refused}: {} has {} error(s); first: {at}{}", ws.relative(&entry.path), errors.len(), first.message),
    )
    .with_hint(format!(
        "`scafld validate {id}` lists every one; fix them, then `{then}` (a pass binds the draft as it is)"
    ))
    .with_details(serde_json::json!({ "diagnostics": errors, "problems": problems })))
}

pub async fn reconcile(daemon: &Daemon, p: m::TaskParams) -> RpcResult<m::ReconcileResult> {
    let (ws, entry) = match entry(daemon, &p.root, &p.task_id).await {
        Ok(found) => found,
        Err(missing) => {
            return Err(match super::Gone::find(daemon, &p.root, &p.task_id).await? {
                Some((ws, gone)) => cannot_rebuild(&ws, &gone).await,
                None => missing,
            });
        }
    };
    let command = format!("scafld reconcile {}", entry.task_id);
    reconcile_entry(daemon, &ws, entry).await.map_err(|e| from_the_link(&ws, e, &command))
}

/// A write refused in a checkout whose `.scafld` is a link (a git worktree sharing the main
/// checkout's: scafld writes only through the real folder) names the same `command` run from
/// the checkout the link leads to, where it works, unless the error already names a way out.
fn from_the_link(ws: &Workspace, mut e: RpcError, command: &str) -> RpcError {
    if e.0.hint.is_none() && ws.writes_from().is_some() {
        e.0.hint =
            Some(format!("run `{}`: scafld writes under .scafld only through the real folder", ws.runnable(command)));
    }
    e
}

async fn reconcile_entry(
    daemon: &Daemon,
    ws: &Workspace,
    entry: crate::workspace::index::LoadedSpec,
) -> RpcResult<m::ReconcileResult> {
    // A running build or review owns the task: a rewrite of its spec now would be a change
    // the review's mutation guard sees (and a build's next record rewrites it anyway). Asked
    // before waiting for the task (a build holds it while it runs) and again once held.
    super::exec::refuse_while_running(daemon, ws, &entry.task_id)?;
    let lock = daemon.jobs.task_lock(ws, &entry.task_id);
    let _guard = lock.lock().await;
    super::exec::refuse_while_running(daemon, ws, &entry.task_id)?;
    // With the task held no move is in progress: a second copy that differs from the placed
    // one only in runner-owned lines is an interrupted move's leftover, put aside and reported.
    let moved_aside = super::tidy_leftover(daemon, ws, &entry.task_id)?.map(|(from, to)| m::MovedAside { from, to });
    let entry = super::fresh_entry(daemon, ws, &entry.task_id)?;
    require_valid(daemon, ws, &entry)?;
    let (file, spec) = read_fresh(ws, &entry.task_id)?;
    let has_ledger = !daemon.store().ledger(&ws.id, &entry.task_id).map_err(RpcError::internal)?.is_empty();
    if has_ledger {
        // The ledger is the authority: rebuild every runner-owned section from it.
        let target = match crate::ledger::project_from_ledger(daemon, ws, &entry.task_id, "command:reconcile")? {
            Projected::Current(target) => target,
            Projected::Deferred { note, why: Unprojected::Broken } => {
                return Err(RpcError::new(ErrorKind::ValidationFailed, note)
                    .with_hint(format!("run `scafld validate {}` for every diagnostic", entry.task_id)));
            }
            Projected::Deferred { note, why: Unprojected::Unwritten } => {
                return Err(RpcError::new(ErrorKind::Busy, note).with_hint("run it again once the file is saved"));
            }
            Projected::Deferred { note, why: Unprojected::Away } => {
                return Err(RpcError::new(ErrorKind::WorkspaceError, note)
                    .with_hint(format!("run `scafld reconcile {}` in the workspace's folder", entry.task_id)));
            }
            // Removed since it was read: said as for a file missing from the start.
            Projected::Deferred { why: Unprojected::Missing, .. } => {
                return Err(match super::Gone::of(daemon, ws, &entry.task_id)? {
                    Some(gone) => cannot_rebuild(ws, &gone).await,
                    None => RpcError::new(ErrorKind::Busy, format!("{} moved while it was reconciled", entry.task_id))
                        .with_hint("run it again"),
                });
            }
        };
        let changed =
            crate::workspace::index::read_spec(&ws.root, &target).map(|t| t != file.text.as_bytes()).unwrap_or(true)
                || target != file.path;
        return Ok(m::ReconcileResult {
            task_id: entry.task_id.clone(),
            path: ws.relative(&target),
            changed,
            moved: target != file.path,
            moved_aside,
        });
    }
    let status = spec.status().ok_or_else(|| RpcError::internal("valid spec without a status"))?;
    // No ledger, no evidence: a criterion or phase the file marks done is written pending;
    // but a finished task's file (the original tool's record of its run) keeps its marks.
    let finished = crate::domain::lifecycle::Folder::of(status) == crate::domain::lifecycle::Folder::Archive;
    let spec = if finished { spec } else { crate::domain::ledger::unrecorded(&spec) };
    let mut next = spec.clone();
    let action = crate::domain::next::next_action(&crate::domain::next::Facts {
        spec: &spec,
        entries: &[],
        replay: &Default::default(),
        spec_errors: 0,
        stale: &Default::default(),
        running_review: None,
        draft_digest: Some(&harden::draft_digest(&file.text)),
        spec_digest: None,
        shown_changed: false,
        missing: None,
        misfiled: None,
        shadowed: crate::templates::shadows(&ws.root, &entry.task_id),
        oversize: None,
    });
    crate::domain::next::show(&action, &mut next.current_state);
    next.current_state.status = status.as_str().into();
    next.front.status = status.as_str().into();
    if next.current_state.current_phase.is_empty() {
        next.current_state.current_phase = "none".into();
    }
    let changed_text = project(&file.text, &next).map_err(projection_error)?;
    let target = target_for(ws, &entry.task_id, &next, &file.path);
    let moved = target != file.path;
    let changed = changed_text != file.text || moved;
    if changed {
        write_projection(daemon, ws, &entry.task_id, &file, &next, "command:reconcile")?;
    }
    Ok(m::ReconcileResult { task_id: entry.task_id.clone(), path: ws.relative(&target), changed, moved, moved_aside })
}

pub(super) fn projection_error(e: crate::domain::spec::project::ProjectionError) -> RpcError {
    RpcError::new(ErrorKind::ValidationFailed, e.to_string())
}

/// `reconcile` of a task whose spec file is gone: it rebuilds runner-owned lines, and the
/// ledger keeps nothing else (no title, no prose, no criterion it never ran), so it says so,
/// and how to put the file back (the command when git holds a copy) or close the task.
async fn cannot_rebuild(ws: &Workspace, gone: &super::Gone) -> RpcError {
    let task = &gone.task;
    let missing = crate::ledger::missing_spec(ws, task, &gone.entries).await;
    let restore = match &missing.restore {
        Some(restore) => format!(" (`{}` {})", restore.command, restore.source),
        None => String::new(),
    };
    let mut error = gone.error(ws);
    error.0.message = format!(
        "cannot reconcile `{task}`: its spec file is missing (removed or moved out of .scafld/specs), and the ledger keeps only the runner's record of it ({} entries, last {}), not the spec's text, so there is nothing to write it from",
        gone.entries.len(),
        gone.status
    );
    error.0.hint = Some(format!(
        "put the file back at {}{restore}, then run `{}` again; to close the task without it: `scafld cancel {task} --reason \"why\"`",
        missing.place,
        ws.runnable(&format!("scafld reconcile {task}"))
    ));
    error
}

/// Read the task's spec from disk (not the index: the write must start from the file's bytes).
/// Unfilled placeholders are allowed; anything that makes the file unsafe to rewrite is not.
pub(super) fn read_fresh(ws: &Workspace, task: &str) -> RpcResult<(SpecText, Spec)> {
    let file = spec_file(ws, task)?;
    match parse_as(&file.text, task) {
        Ok(parsed) => Ok((file, parsed.spec)),
        Err(first) => Err(RpcError::new(ErrorKind::ValidationFailed, format!("{}: {first}", ws.relative(&file.path)))
            .with_hint(format!("run `scafld validate {task}` for every diagnostic"))),
    }
}

/// How much of a cited file is read looking for the cited line.
const CITED_READ_LIMIT: u64 = 256 << 20;

/// [`WorkspaceGround`] holding its workspace: a delegated harden's submission slot grounds the
/// answer's anchors as it arrives (`providers::HardenCheck`).
pub(super) struct HeldGround(pub(super) std::sync::Arc<Workspace>);

impl Ground for HeldGround {
    fn reach(&self, path: &str, line: usize) -> Option<Reach> {
        WorkspaceGround { ws: &self.0 }.reach(path, line)
    }

    fn archived(&self, task_id: &str) -> bool {
        WorkspaceGround { ws: &self.0 }.archived(task_id)
    }
}

/// Answers citation checks from the workspace's files and archive.
pub(super) struct WorkspaceGround<'a> {
    pub(super) ws: &'a Workspace,
}

impl Ground for WorkspaceGround<'_> {
    fn reach(&self, path: &str, line: usize) -> Option<Reach> {
        let relative = Path::new(path);
        if relative.is_absolute() || relative.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
            return None;
        }
        let full = self.ws.root.join(relative).canonicalize().ok()?;
        if !full.starts_with(&self.ws.root) {
            return None;
        }
        // Streamed: a cited file may be of any size; only a regular one is opened, and it is
        // read only as far as the cited line (and never past CITED_READ_LIMIT).
        let file = scafld_local::capped::open(&full, "cited file", u64::MAX).ok()?;
        let mut reader = std::io::BufReader::with_capacity(64 << 10, file);
        let (mut newlines, mut last, mut read) = (0, None, 0u64);
        loop {
            if newlines >= line {
                return Some(Reach::Within);
            }
            if read >= CITED_READ_LIMIT {
                return Some(Reach::Unread(format!(
                    "line {line} is not within the first {} MiB of {path}, which is as far as a citation is looked for",
                    CITED_READ_LIMIT >> 20
                )));
            }
            let chunk = std::io::BufRead::fill_buf(&mut reader).ok()?;
            if chunk.is_empty() {
                break;
            }
            newlines += chunk.iter().filter(|b| **b == b'\n').count();
            last = chunk.last().copied();
            let n = chunk.len();
            read += n as u64;
            std::io::BufRead::consume(&mut reader, n);
        }
        let count = if last.is_some_and(|b| b != b'\n') { newlines + 1 } else { newlines };
        Some(if line <= count { Reach::Within } else { Reach::Past(count) })
    }

    fn archived(&self, task_id: &str) -> bool {
        self.ws.indexed(task_id).is_some_and(|e| e.folder == Folder::Archive)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `plan` answers should `status`'s read fail once the draft is written: the same
    /// step `status` gives a new draft (its placeholders to fill, `validate` listing them), from
    /// the text alone.
    #[test]
    fn a_new_drafts_next_action_is_worked_out_from_its_text_alone() {
        let input = PlanInput {
            task_id: "t",
            title: Some("A task"),
            summary: None,
            size: "small",
            risk: "low",
            command: Some("cargo test"),
            now: "2026-01-01T00:00:00Z",
            shadowed: false,
        };
        let next = crate::domain::next::of_new_draft(&parse(&new_spec(&input)), false);
        assert_eq!(next.command, "scafld validate t", "{next:?}");
        assert_eq!(next.action, m::NextStep::FixSpec, "{next:?}");
    }
}
