//! The one place that decides what a task needs next. `status`, `handoff`, `plan`, `build`,
//! `review` and the spec's `Allowed follow-up command` all ask [`next_action`], and following
//! it never leads straight to a refusal: blockers come first (a broken spec, a changed
//! contract, stale evidence, a manual criterion), then the lifecycle step.

use std::collections::BTreeMap;

use crate::domain::build;
use crate::domain::dossier::Dossier;
use crate::domain::evidence::{self, Stale};
use crate::domain::harden::PassGap;
use crate::domain::ledger::{LedgerEntry, Replay, spec_changed_since_review};
use crate::domain::lifecycle::{HardenStatus, Status};
use crate::domain::review::{Authority, completion_authority};
use crate::domain::spec::{RoundForm, Spec};
use scafld_protocol::cli::review_task;

pub use scafld_protocol::methods::{NextAction, NextRole as Role, NextStep as Action};

/// Show `action` in a spec's Current State: its word on `Next:` and its command (clipped, as
/// every value the runner writes into a spec) on `Allowed follow-up command:`.
pub fn show(action: &NextAction, state: &mut crate::domain::spec::CurrentState) {
    state.next = word(action.action).into();
    state.allowed_follow_up = crate::domain::spec::budget::clip(&action.command);
}

/// The word the spec's `Next:` line shows (the original tool's vocabulary where it has one).
pub fn word(action: Action) -> &'static str {
    match action {
        Action::FixSpec => "repair spec",
        Action::Harden | Action::FinishHarden => "harden",
        Action::Approve => "approve",
        Action::AmendContract => "amend contract",
        Action::Implement | Action::RerunStale => "build",
        Action::Repair => "repair",
        Action::RecordManualEvidence => "manual evidence",
        Action::Review | Action::WaitForReview | Action::RetryReview => "review",
        Action::DecideReview => "approve_review",
        Action::Complete => "complete",
        Action::Done => "done",
        Action::Inspect => "inspect failure",
        Action::FixConfig => "repair config",
    }
}

/// Whether the command of `action` reads the workspace's configuration (what a run may use and
/// how long, the providers, the harden prompt): with a configuration that does not read, it
/// refuses (`workspace_error`).
pub fn reads_config(action: Action) -> bool {
    matches!(
        action,
        Action::Harden
            | Action::Implement
            | Action::RerunStale
            | Action::Repair
            | Action::RecordManualEvidence
            | Action::Review
            | Action::RetryReview
    )
}

/// The step `then` held back by a configuration file that does not read (`problem`, naming
/// the file): fixing it comes first, as no command does.
pub fn fix_config(then: &NextAction, problem: &str) -> NextAction {
    next(
        Role::Agent,
        Action::FixConfig,
        "none",
        format!(
            "the workspace's configuration does not read ({problem}); `{}` reads it and is refused until it is fixed, so fix the file first, then run that ({})",
            then.command, then.reason
        ),
    )
}

/// Everything the decision looks at.
pub struct Facts<'a> {
    /// The spec as its ledger projects it.
    pub spec: &'a Spec,
    /// The task's ledger (empty for a spec without one), and its replay.
    pub entries: &'a [LedgerEntry],
    pub replay: &'a Replay,
    /// Structure errors of the spec on disk.
    pub spec_errors: usize,
    /// Stale evidence by criterion (empty when unknown, e.g. inside a projection write).
    pub stale: &'a BTreeMap<String, Stale>,
    /// The key of a review session of this task that has unfinished reviewers.
    pub running_review: Option<&'a str>,
    /// The digest of the draft's text as it is (`Parsed::draft_digest`), which a passed harden
    /// round must match; `None` where the text is not at hand (a projection from the ledger),
    /// which leaves the pass unchecked.
    pub draft_digest: Option<&'a str>,
    /// The mutation guard's fingerprint of the spec file's authored text as it is
    /// (`review::spec_guard_fingerprint`), which a failed review recorded of the spec it was
    /// shown: a fix there is reviewed again. `None` where the text is not at hand.
    pub spec_digest: Option<&'a str>,
    /// The files the latest passing review was shown (its `--review-scope`) changed since it
    /// passed, as read now (`evidence::seen_now`; `false` where nothing was read): `complete`
    /// refuses that review, so the step is a review of them as they are.
    pub shown_changed: bool,
    /// The spec file is gone while the ledger keeps the task (`spec` is then the ledger's
    /// projection onto an empty spec).
    pub missing: Option<&'a MissingSpec>,
    /// The spec file disagrees with the ledger in a way `reconcile` puts right.
    pub misfiled: Option<&'a Misfiled>,
    /// A user review template has the task's name (`templates::shadows`): `scafld review <id>`
    /// would run it, so the task's review is named with `--task`.
    pub shadowed: bool,
    /// The spec's task contract alone is over the review packet's required cap (`None` where
    /// the configuration is not at hand): every review of it is refused until that changes.
    pub oversize: Option<crate::domain::packet::Oversize>,
}

/// What only the files tell of a task whose review is current, for a projection of its
/// ledger ([`crate::domain::ledger::project_seen`]) to show the step `status` shows: the
/// fingerprint of the spec's authored text ([`Facts::spec_digest`]) and whether the files its
/// passing review was shown changed ([`Facts::shown_changed`]). The default knows neither.
#[derive(Debug, Default, Clone, Copy)]
pub struct Seen<'a> {
    pub spec_digest: Option<&'a str>,
    pub shown_changed: bool,
    /// The evidence staled by the files as they are now, where a review the task is in is
    /// current (what it judged changed since: `status` names the build); `None` where nothing
    /// was read, and the ledger's own (`evidence::stale_on_record`) is what a projection knows.
    pub stale: Option<&'a BTreeMap<String, Stale>>,
}

/// The task's spec file beside its ledger, where `reconcile` (the only command that moves a
/// spec file without a lifecycle step) is what puts it right.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Misfiled {
    /// A second copy that differs from the one the ledger places only in runner-owned lines: an
    /// interrupted move's leftover, which `reconcile` moves aside (both workspace-relative).
    Leftover { path: String, placed: String },
    /// The task's one file (workspace-relative `path`) says `file` (its front matter's status)
    /// or sits outside the folder of the ledger's status: a move the ledger recorded that did
    /// not happen (a daemon killed between the two). The next step only once the ledger has
    /// finished the task: an open task's next command writes the file anyway.
    ///
    /// `blocked`: why `reconcile` cannot move it there now and what puts that right (the
    /// folder it belongs in is a link or not a folder), in a sentence; the step is then that.
    Unmoved { path: String, file: String, blocked: Option<String> },
}

/// A task's spec file that is gone (removed, or moved out of `.scafld/specs`) while its ledger
/// keeps the task: where the file belongs and, when git still holds a copy, the command that
/// brings it back. The ledger keeps the runner's record, never the text someone wrote, so
/// nothing can rebuild the file; the task goes on once it is back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingSpec {
    /// Workspace-relative: the folder the ledger's status puts the task in.
    pub place: String,
    /// The copy git holds, at `place` or in another lifecycle folder (`reconcile` then puts it
    /// in its place), and how to bring it back.
    pub restore: Option<Restore>,
}

/// A way back to a missing spec file that git holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restore {
    /// `git checkout HEAD -- <path>` (or from the index, when only staged), or `git switch
    /// <branch>` when only another branch has it.
    pub command: String,
    /// What the command does, for a person, read after it ("brings back the copy git holds").
    pub source: String,
}

fn next(role: Role, action: Action, command: impl Into<String>, reason: impl Into<String>) -> NextAction {
    NextAction { role, action, command: command.into(), reason: reason.into() }
}

fn ids(ids: &[String]) -> String {
    ids.iter().map(|id| format!("`{id}`")).collect::<Vec<_>>().join(", ")
}

/// The next action of a draft as written, before it has a ledger, a review or evidence: what
/// `plan` writes into the draft (its `Next:` and follow-up lines) and answers should reading it
/// back fail.
pub fn of_new_draft(parsed: &crate::domain::spec::Parsed, shadowed: bool) -> NextAction {
    next_action(&Facts {
        spec: &parsed.spec,
        entries: &[],
        replay: &Default::default(),
        spec_errors: parsed.errors().count(),
        stale: &Default::default(),
        running_review: None,
        draft_digest: parsed.draft_digest.as_deref(),
        spec_digest: None,
        shown_changed: false,
        missing: None,
        misfiled: None,
        shadowed,
        oversize: None,
    })
}

pub fn next_action(f: &Facts<'_>) -> NextAction {
    let id = f.spec.front.task_id.as_str();
    if let Some(missing) = f.missing
        && !f.spec.status().is_some_and(Status::is_terminal)
    {
        return restore(id, missing);
    }
    // Every other command refuses a task in two files; this second one `reconcile` moves aside.
    if let Some(leftover @ Misfiled::Leftover { .. }) = f.misfiled {
        return reconcile(id, leftover);
    }
    if f.spec_errors > 0 {
        return next(
            Role::Agent,
            Action::FixSpec,
            format!("scafld validate {id}"),
            format!("the spec has {} error(s); fix them first", f.spec_errors),
        );
    }
    let Some(status) = f.spec.status() else {
        return next(Role::Agent, Action::FixSpec, format!("scafld validate {id}"), "the spec has no valid status");
    };
    // Nothing but `reconcile` writes a finished task's file (an open task's next step does).
    if status.is_terminal()
        && let Some(unmoved @ Misfiled::Unmoved { .. }) = f.misfiled
    {
        return reconcile(id, unmoved);
    }
    match status {
        Status::Draft => draft(id, f.spec, f.draft_digest),
        Status::Approved | Status::Active | Status::Blocked | Status::Review => {
            // Set past draft by hand (or by another tool) with nothing on record here: the
            // first build adopts it (a baseline, the contract pinned) before anything counts.
            if let Some(why) = f.replay.adoption_pending() {
                return next(
                    Role::Agent,
                    Action::Implement,
                    format!("scafld build {id}"),
                    format!("{}: build adopts it first", why.why(status)),
                );
            }
            if let Some(contract) = &f.replay.contract {
                let changes = evidence::contract_changes(f.spec, contract);
                let unprovable = evidence::unprovable_phases(f.spec);
                if !changes.is_empty() && !unprovable.is_empty() {
                    return next(
                        Role::Agent,
                        Action::FixSpec,
                        format!("scafld validate {id}"),
                        format!(
                            "the spec differs from the approved contract ({}); {}",
                            changes.join(", "),
                            evidence::unprovable_repair(id, &unprovable)
                        ),
                    );
                }
                if !changes.is_empty() {
                    return next(
                        Role::Human,
                        Action::AmendContract,
                        format!("scafld approve {id} --amend --reason \"why\""),
                        format!(
                            "acceptance criteria, phases or scope differ from the approved contract ({}); restore them, or re-approve",
                            changes.join(", ")
                        ),
                    );
                }
            }
            if status == Status::Approved {
                return next(
                    Role::Agent,
                    Action::Implement,
                    format!("scafld build {id}"),
                    "approved: open the first phase",
                );
            }
            if status == Status::Review {
                let then = review(id, f);
                // A review would be refused before any reviewer ran: what makes it fit first.
                if let (Action::Review | Action::RetryReview, Some(over)) = (then.action, f.oversize) {
                    return next(
                        Role::Agent,
                        Action::FixSpec,
                        "none",
                        format!("{}; then `{}`", over.advice(), then.command),
                    );
                }
                return then;
            }
            building(id, status, f)
        }
        Status::Completed | Status::Cancelled => next(Role::None, Action::Done, "none", "the task is archived"),
        Status::Failed => next(Role::Human, Action::Inspect, "none", "the task failed; create a new task to continue"),
    }
}

/// Put the spec file back: nothing else works on an open task until it is there (a finished
/// task's ledger is its whole record, and it needs nothing).
fn restore(id: &str, missing: &MissingSpec) -> NextAction {
    let (command, from) = match &missing.restore {
        Some(restore) => (restore.command.clone(), format!("the command {}", restore.source)),
        None => ("none".to_string(), "git holds no copy: from a backup or your editor".to_string()),
    };
    next(
        Role::Agent,
        Action::FixSpec,
        command,
        format!(
            "the spec file is missing: put it back at {} ({from}), then run `scafld reconcile {id}`; to close the task without it, `scafld cancel {id} --reason \"why\"`",
            missing.place
        ),
    )
}

/// `reconcile`: what puts a misfiled spec file right.
fn reconcile(id: &str, misfiled: &Misfiled) -> NextAction {
    let reason = match misfiled {
        Misfiled::Leftover { path, placed } => format!(
            "{path} is an interrupted move's leftover (it differs from {placed} only in runner-owned lines): reconcile moves it aside to .scafld/runs/{id}/superseded/"
        ),
        Misfiled::Unmoved { path, file, blocked: Some(blocked) } => {
            return next(
                Role::Human,
                Action::FixSpec,
                "none",
                format!(
                    "{path} still says {file} where the ledger finished the task, and reconcile cannot move it to its folder: {blocked}; then run `scafld reconcile {id}`"
                ),
            );
        }
        Misfiled::Unmoved { path, file, blocked: None } => format!(
            "{path} still says {file} where the ledger finished the task (a move that was interrupted): reconcile writes the ledger's state and moves the file to its folder"
        ),
    };
    next(Role::Agent, Action::FixSpec, format!("scafld reconcile {id}"), reason)
}

/// The next step of a draft as a round just judged it (its digest is the one the round is
/// bound to, so no pass is stale): what `status` then says, for the round's own answer and the
/// spec's Current State.
pub fn of_draft(id: &str, spec: &Spec) -> NextAction {
    draft(id, spec, None)
}

fn draft(id: &str, spec: &Spec, digest: Option<&str>) -> NextAction {
    let harden = spec.harden_status();
    if harden == HardenStatus::Passed
        && let Some(digest) = digest
        && let Some(gap) = crate::domain::harden::stale_pass(spec, digest)
    {
        return next(
            Role::Agent,
            Action::Harden,
            gap.command(id),
            match gap {
                PassGap::OlderBinding { .. } => format!(
                    "{gap}: bind it to the draft as it is, its checks checked again (or harden again, or approve with `--reason`)"
                ),
                _ => format!("{gap}: harden the draft as it is (or approve with `--reason`)"),
            },
        );
    }
    match harden {
        // `--mark-passed` checks the latest round: with none, or with Python scafld's (which
        // holds no checks of this tool's), it is refused, so the step is a round of our own.
        HardenStatus::InProgress => match spec.harden_rounds.last() {
            Some(round) if round.form == RoundForm::Heading => next(
                Role::Agent,
                Action::FinishHarden,
                format!("scafld harden {id} --mark-passed"),
                "a harden round is open: answer its checks, then close it",
            ),
            Some(round) => next(
                Role::Agent,
                Action::Harden,
                format!("scafld harden {id}"),
                format!(
                    "the open {} is Python scafld's round, which holds no checks of scafld's: harden opens a round of scafld's own and closes that one as superseded (or approve with `--reason`)",
                    round.id
                ),
            ),
            None => next(
                Role::Agent,
                Action::Harden,
                format!("scafld harden {id}"),
                "harden_status says in_progress but the spec has no harden round: harden opens one (or approve with `--reason`)",
            ),
        },
        HardenStatus::Passed | HardenStatus::Overridden => {
            next(Role::Human, Action::Approve, format!("scafld approve {id}"), "hardening passed: approve the contract")
        }
        _ => next(
            Role::Agent,
            Action::Harden,
            format!("scafld harden {id}"),
            "harden the draft before approval (or approve with `--reason`)",
        ),
    }
}

fn building(id: &str, status: Status, f: &Facts<'_>) -> NextAction {
    let stale: Vec<String> = f.stale.keys().cloned().collect();
    let target = build::current(f.spec);
    let blockers = build::blockers(f.spec, &target);
    let completed_stale: Vec<String> = stale.iter().filter(|c| build::in_completed_phase(f.spec, c)).cloned().collect();
    if !completed_stale.is_empty() {
        if let Some(unreadable) = unreadable_scope(id, f.stale) {
            return unreadable;
        }
        if let Some(rewrites) = rewrites_own_scope(id, f.stale) {
            return rewrites;
        }
        return next(
            Role::Agent,
            Action::RerunStale,
            format!("scafld build {id}"),
            format!("evidence of {} is stale: build re-runs it{}", ids(&completed_stale), changed_by_own_runs(f.stale)),
        );
    }
    if status == Status::Blocked {
        // A manual criterion a person judged `fail` is not re-run by a build either: once what
        // they found is repaired, they judge it again.
        let (judged_failing, mut failing): (Vec<String>, Vec<String>) =
            blockers.iter().filter(|b| !b.manual).map(|b| b.id.clone()).partition(|c| is_manual(f.spec, c));
        // One without a result (a step cancelled before it finished) has nothing to repair.
        failing.retain(|c| has_failed(f.spec, c));
        // A person's evidence gone stale blocks the step as well, though it still says pass:
        // only a person records it again (a build never runs a manual criterion).
        let mut manual: Vec<String> = blockers.iter().filter(|b| b.manual).map(|b| b.id.clone()).collect();
        let stale_manual: Vec<String> =
            stale.iter().filter(|c| is_manual(f.spec, c) && !manual.contains(c)).cloned().collect();
        manual.extend(stale_manual);
        if failing.is_empty()
            && let Some(first) = manual.first()
        {
            return record_manual(id, first, &manual);
        }
        if failing.is_empty()
            && let Some(first) = judged_failing.first()
        {
            return next(
                Role::Human,
                Action::RecordManualEvidence,
                scafld_protocol::cli::manual_evidence(id, first),
                format!(
                    "a person judged {} failing: once that is repaired (see `scafld handoff {id}`), they record it again",
                    ids(&judged_failing)
                ),
            );
        }
        let reason = match failing.is_empty() {
            true => format!("re-run the evidence of {} (see `scafld handoff {id}`)", target.label()),
            false => format!("repair {} (see `scafld handoff {id}`), then re-run the evidence", ids(&failing)),
        };
        return next(Role::Agent, Action::Repair, format!("scafld build {id}"), reason);
    }
    next(
        Role::Agent,
        Action::Implement,
        format!("scafld build {id}"),
        format!("implement {} (see `scafld handoff {id}`), then record its evidence", target.label()),
    )
}

/// Evidence that cannot be checked because the files in scope cannot be read (git cannot read
/// the repository): nothing is known to have changed, and a build could read no more than
/// `status` did, so the next step is the repository, not a build.
fn unreadable_scope(id: &str, stale: &BTreeMap<String, Stale>) -> Option<NextAction> {
    if let Some(Stale::UnreadableName { name }) = stale.values().next()
        && stale.values().all(|why| matches!(why, Stale::UnreadableName { .. }))
    {
        return Some(next(
            Role::Agent,
            Action::Repair,
            format!("scafld build {id}"),
            format!(
                "`{name}` in {id}'s scope has a name that is not UTF-8, which scafld cannot bind evidence to: rename it to a UTF-8 name, or keep it out of the task's scope (then `scafld approve {id} --amend --reason \"why\"`), then re-run the evidence"
            ),
        ));
    }
    if stale.is_empty() || !stale.values().all(|why| matches!(why, Stale::Unverifiable)) {
        return None;
    }
    Some(next(
        Role::Human,
        Action::Inspect,
        "git status",
        format!(
            "the files in {id}'s scope cannot be read (see `git status`): whether its evidence is current cannot be told until the repository reads again, then `scafld status {id}`"
        ),
    ))
}

/// Criteria whose own commands rewrite the task's scope on every build: building again would
/// only run them and leave them stale again, so the next step is a change to the criterion
/// (or to what it writes), not a build. The build is not refused: once the command leaves the
/// files as it found them, a build records current evidence.
fn rewrites_own_scope(id: &str, stale: &BTreeMap<String, Stale>) -> Option<NextAction> {
    let mut criteria = Vec::new();
    let mut changed = std::collections::BTreeSet::new();
    for (criterion, why) in stale {
        if let Stale::RewritesOwnScope { changed: files, .. } = why {
            criteria.push(criterion.clone());
            changed.extend(files.iter().cloned());
        }
    }
    if criteria.is_empty() {
        return None;
    }
    let files = if changed.is_empty() {
        "the files in scope".to_string()
    } else {
        scafld_protocol::text::listed(&changed.into_iter().collect::<Vec<_>>())
    };
    Some(next(Role::Agent, Action::Repair, "none", rewrite_reason(id, &criteria, &files)))
}

/// What the last runs of stale criteria did to the files themselves, when they changed them
/// without (yet) making a loop: said after the reason of the build that runs them again, so
/// that a formatter's second pass reads as one. Empty when none did.
fn changed_by_own_runs(stale: &BTreeMap<String, Stale>) -> String {
    let mut criteria = Vec::new();
    let mut changed = std::collections::BTreeSet::new();
    let mut most = 0;
    for (criterion, why) in stale {
        if let Stale::ChangedByOwnRuns { changed: files, runs, .. } = why {
            criteria.push(criterion.clone());
            changed.extend(files.iter().cloned());
            most = most.max(*runs);
        }
    }
    let who = match criteria.as_slice() {
        [] => return String::new(),
        [one] => format!("criterion `{one}`"),
        many => format!("criteria {}", ids(many)),
    };
    let runs = match most {
        1 => "its last run".to_string(),
        n => format!("each of its last {n} runs"),
    };
    let files = match changed.is_empty() {
        true => "the files in scope".to_string(),
        false => scafld_protocol::text::listed(&changed.into_iter().collect::<Vec<_>>()),
    };
    let loop_runs = evidence::LOOP_RUNS;
    format!(
        "; {who} changed the files in scope itself on {runs} ({files}): a build runs it again on what it left, as a \
         formatter's next pass (changing them on {loop_runs} builds in a row, or back to an earlier state, would make it a loop)"
    )
}

/// Why building again cannot help a criterion that rewrites its own scope, and what does.
pub fn rewrite_reason(id: &str, criteria: &[String], files: &str) -> String {
    let (who, its) = match criteria {
        [one] => (format!("criterion `{one}`"), "its command"),
        many => (format!("one of criteria {}", ids(many)), "the command"),
    };
    format!(
        "{who} rewrites its own scope each time it runs (changed by it: {files}); its evidence is stale as soon as it is recorded, \
         so building again cannot make it current; make {its} leave the files as it found them, or have it write \
         outside the task's Scope (edit the spec, then `scafld approve {id} --amend --reason \"why\"`), then run \
         `scafld build {id}`"
    )
}

/// Whether criterion `criterion_id` of `spec` takes a person's evidence.
/// Whether criterion `criterion_id`'s latest result failed (or it cannot run as written).
fn has_failed(spec: &Spec, criterion_id: &str) -> bool {
    spec.criteria().any(|c| c.id == criterion_id && matches!(c.status.as_str(), "fail" | "invalid"))
}

fn is_manual(spec: &Spec, criterion_id: &str) -> bool {
    spec.criteria().any(|c| c.id == criterion_id && c.effective_kind() == "manual")
}

/// A person records the evidence of `manual` (`first` among them).
fn record_manual(id: &str, first: &str, manual: &[String]) -> NextAction {
    next(
        Role::Human,
        Action::RecordManualEvidence,
        scafld_protocol::cli::manual_evidence(id, first),
        format!("{} need(s) a person's evidence (pass or fail)", ids(manual)),
    )
}

fn review(id: &str, f: &Facts<'_>) -> NextAction {
    let r = f.replay;
    if let Some(key) = f.running_review {
        return next(
            Role::Reviewer,
            Action::WaitForReview,
            format!("scafld review wait --session-key {key}"),
            "a review of this task is running",
        );
    }
    // A proposal on files that changed since is not offered for a decision (`review accept`
    // refuses it): the build that re-runs the stale evidence comes first, and supersedes it.
    if r.awaiting_approval.is_some() && f.stale.is_empty() {
        return next(
            Role::Human,
            Action::DecideReview,
            format!("scafld review accept {id} --reason \"why\""),
            "the review's verdict awaits a person's decision (or `scafld review reject`)",
        );
    }
    if !f.stale.is_empty() {
        let stale: Vec<String> = f.stale.keys().cloned().collect();
        if let Some(unreadable) = unreadable_scope(id, f.stale) {
            return unreadable;
        }
        if let Some(rewrites) = rewrites_own_scope(id, f.stale) {
            return rewrites;
        }
        // A person's evidence is recorded while the task builds, never in review: the build
        // re-runs the rest and records each stale manual criterion as a wait (blocking the
        // task), and then the person's evidence is what `next` asks for.
        let manual: Vec<String> = stale.iter().filter(|c| is_manual(f.spec, c)).cloned().collect();
        let then = match manual.is_empty() {
            true => String::new(),
            false => format!("; then a person records the evidence of {} again", ids(&manual)),
        };
        return next(
            Role::Agent,
            Action::RerunStale,
            format!("scafld build {id}"),
            format!(
                "evidence of {} is stale: build re-runs it before any review or completion{then}{}",
                ids(&stale),
                changed_by_own_runs(f.stale)
            ),
        );
    }
    if let Some(target) = build::unbuilt(f.spec) {
        return next(
            Role::Agent,
            Action::Implement,
            format!("scafld build {id}"),
            format!(
                "{} has criteria that never ran or is not completed (the contract was amended): build runs it",
                target.label()
            ),
        );
    }
    match r.review.as_ref().filter(|_| r.review_current) {
        // A review run again since the pass that gave no verdict leaves no current review:
        // `complete` refuses until one does. Otherwise the pass completes the task exactly when
        // `complete`'s own rule says it does (a `local` member, an untrusted channel: not).
        // The spec's authored text edited after the pass says what no reviewer saw: `complete`
        // refuses it, and the way on is a review of the text as it is.
        Some((verdict, _, _))
            if verdict == "pass"
                && r.failed_attempt.is_none()
                && spec_changed_since_review(f.entries, f.spec_digest) =>
        {
            next(
                Role::Reviewer,
                Action::Review,
                review_task(id, f.shadowed),
                "the spec's text changed after the review passed: an independent reviewer judges it as it is",
            )
        }
        Some((verdict, _, _)) if verdict == "pass" && r.failed_attempt.is_none() => {
            match completion_authority(f.entries) {
                // The review is shown them again without being asked (`tasks::review` carries
                // them): naming them would be refused for a file deleted since.
                Authority::Valid { .. } if f.shown_changed => next(
                    Role::Reviewer,
                    Action::Review,
                    review_task(id, f.shadowed),
                    "files the reviewer was shown (its review scope) changed after the review passed: an independent reviewer judges them as they are",
                ),
                Authority::Valid { .. } => {
                    next(Role::Human, Action::Complete, format!("scafld complete {id}"), "the review passed")
                }
                Authority::Invalid { reason } => next(
                    Role::Reviewer,
                    Action::Review,
                    review_task(id, f.shadowed),
                    format!("{reason}; run an independent reviewer"),
                ),
            }
        }
        Some(_) if r.failed_attempt.is_some() => next(
            Role::Reviewer,
            Action::RetryReview,
            review_task(id, f.shadowed),
            format!(
                "the last review gave no verdict ({}); run it again",
                brief(r.failed_attempt.as_deref().unwrap_or_default())
            ),
        ),
        Some((_, _, Some(dossier)))
            if serde_json::from_value::<Dossier>(dossier.clone()).is_ok_and(|d| d.voided_by_mutation()) =>
        {
            next(
                Role::Reviewer,
                Action::RetryReview,
                review_task(id, f.shadowed),
                "the workspace changed during the last review, which voids its verdict: review the unchanged tree again",
            )
        }
        // A fix in the spec's own text (what the reviewer is shown of it) stales no evidence:
        // the review judges it again, as `review` allows.
        Some(_) if spec_changed_since_review(f.entries, f.spec_digest) => next(
            Role::Reviewer,
            Action::Review,
            review_task(id, f.shadowed),
            "the spec's text changed since the failed review: an independent reviewer judges it again",
        ),
        // A failed review is repaired first: nothing is stale yet (that came first), so a build
        // now would have nothing to re-run. The handoff shows what to repair; once the work
        // changes, its evidence is stale and the next action is the build that re-runs it.
        Some(_) => {
            let what = match &r.review_rejected {
                Some(why) => format!("a person rejected the review: \"{}\"; change the work to answer it", brief(why)),
                None => "the review failed: fix its blocking findings (the handoff lists them)".to_string(),
            };
            // A fix in a file outside the scope leaves the evidence current and the spec as it
            // was: nothing for a build to re-run, so the way on is named too.
            next(
                Role::Agent,
                Action::Repair,
                format!("scafld handoff {id}"),
                format!(
                    "{what}, then `scafld build {id}` re-runs the evidence (a fix in a file outside the scope: `{} --force`)",
                    review_task(id, f.shadowed)
                ),
            )
        }
        None => match &r.failed_attempt {
            Some(why) => next(
                Role::Reviewer,
                Action::RetryReview,
                review_task(id, f.shadowed),
                format!("the last review gave no verdict ({}); run it again", brief(why)),
            ),
            None => next(
                Role::Reviewer,
                Action::Review,
                review_task(id, f.shadowed),
                "the build finished: an independent reviewer judges it",
            ),
        },
    }
}

/// A failure's first line, at most 160 characters: a reason, not a log (the whole text is in
/// the ledger and the diagnostics file).
fn brief(text: &str) -> String {
    const MAX: usize = 160;
    let first = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or_default();
    let shown = match first.char_indices().nth(MAX) {
        // Cut after the word the limit falls in, so a path (a diagnostic file) stays whole
        // (a word longer than a path can be is cut where the limit is).
        Some((cut, _)) => {
            let end = first[cut..].find(char::is_whitespace).unwrap_or(first.len() - cut);
            match end <= 4096 {
                true if cut + end == first.len() => first.to_string(),
                true => format!("{}…", &first[..cut + end]),
                false => format!("{}…", &first[..cut]),
            }
        }
        None if text.trim().lines().count() > 1 => format!("{first} …"),
        None => return first.to_string(),
    };
    // What the cut left open is closed, so the reason's own parenthesis reads as its end.
    let mut open = Vec::new();
    for c in shown.chars() {
        match c {
            '(' | '[' | '{' => open.push(c),
            ')' | ']' | '}' => {
                open.pop();
            }
            _ => {}
        }
    }
    let closers: String = open
        .iter()
        .rev()
        .map(|c| match c {
            '(' => ')',
            '[' => ']',
            _ => '}',
        })
        .collect();
    format!("{shown}{closers}")
}

#[cfg(test)]
mod tests {
    use super::brief;

    #[test]
    fn a_failure_reads_as_one_short_line() {
        assert_eq!(brief("codex: exit code 9"), "codex: exit code 9");
        assert_eq!(
            brief("codex: exit code 9 ({\"type\":\"x\"}\nauth missing)"),
            "codex: exit code 9 ({\"type\":\"x\"} …)"
        );
        let long = "é".repeat(300);
        assert_eq!(brief(&long), long);
        let huge = "é".repeat(5000);
        assert_eq!(brief(&huge).chars().count(), 161);
        let spaced = "é ".repeat(300);
        assert_eq!(brief(&spaced).chars().count(), 162);
    }

    /// A diagnostic file's path the limit falls in is kept whole, and the bracket it opened
    /// is closed.
    #[test]
    fn a_path_at_the_limit_stays_whole() {
        let path = ".scafld/runs/t/diagnostics/review-job-0123456789abcdef-1-stdout.txt";
        let text = format!("{} (the reviewer's output is kept in [{path}] for a look) and more words", "x".repeat(120));
        let shown = brief(&text);
        assert!(shown.contains(path), "{shown}");
        assert!(shown.ends_with("…])") || shown.ends_with("…)"), "{shown}");
        assert_eq!(shown.matches('(').count(), shown.matches(')').count(), "{shown}");
        assert_eq!(shown.matches('[').count(), shown.matches(']').count(), "{shown}");
    }
}
