//! The review gate (`task.review`) and completion (`task.complete`).
//!
//! Providers (see `providers.rs`): codex, claude and gemini CLIs, a `command` reviewer, the
//! `local` pass-through (never completes a task) and the audited `--human-reviewed` override.

use std::sync::Arc;

use scafld_protocol::ErrorKind;
use scafld_protocol::methods as m;
use scafld_protocol::vocab::{Approval, Decision, GateState, ReviewMode, Verdict};

use super::exec::{refuse_completion_while_running, refuse_while_running};
use super::{entry, require_valid};
use super::{projected_spec, record};
use crate::baseline;
use crate::config::Config;
use crate::daemon::Daemon;
use crate::domain::dossier::{Dossier, Request};
use crate::domain::job::{JobKind, Subject, TemplateJob};
use crate::domain::ledger::{BaselinePath, LedgerEntry, LedgerEvent, RecordedReview};
use crate::domain::lifecycle::Status;
use crate::domain::packet::{self, Section};
use crate::domain::review;
use crate::domain::spec::Spec;
use crate::error::{RpcError, RpcResult};
use crate::evidence::Freshness;
use crate::providers;
use crate::review::gate::{self, attempt_failed, guard_snapshot};
use crate::workspace::Workspace;

/// The largest project file shared as context (the packet's budget shares far less of it).
const MAX_CONTEXT_FILE_BYTES: u64 = 8 << 20;
/// Project files offered to the reviewer, before `review.context.files`.
const CONTEXT_FILES: [&str; 5] = ["AGENTS.md", "CLAUDE.md", ".claude/rules", "README.md", "docs/review.md"];

/// An accepted review: its dossier (if readable), the tree it judged, its verdict.
type PreviousReview = (Option<Dossier>, String, String);

/// The latest accepted review in the ledger.
fn latest_review(entries: &[LedgerEntry]) -> Option<PreviousReview> {
    entries.iter().rev().find_map(|e| match &e.event {
        LedgerEvent::Review(RecordedReview { verdict, dossier, tree, .. }) => {
            Some((dossier.clone().and_then(|d| serde_json::from_value(d).ok()), tree.clone(), verdict.clone()))
        }
        _ => None,
    })
}

/// The approval baseline: HEAD, the dirty paths and the nested repositories' HEADs then.
fn approval_baseline(entries: &[LedgerEntry]) -> crate::domain::ledger::ApprovalBaseline {
    crate::domain::ledger::approval_baseline(entries).unwrap_or_default()
}

pub async fn review(daemon: &Arc<Daemon>, p: m::TaskReviewParams) -> RpcResult<m::TaskReviewResult> {
    // Printing the packet writes nothing, a never-initialised workspace's id and record
    // included (see `Daemon::workspace_to_read`).
    let found = match p.print_context {
        true => super::entry_to_read(daemon, &p.root, &p.task_id).await,
        false => entry(daemon, &p.root, &p.task_id).await,
    };
    let (ws, entry) = match found {
        // No such task, but a broken template of that name: the template was meant.
        Err(missing) if missing.kind() == ErrorKind::NotFound => {
            return Err(crate::templates::broken_named(std::path::Path::new(&p.root), &p.task_id).unwrap_or(missing));
        }
        found => found?,
    };
    let task = entry.task_id.clone();
    if p.print_context && p.human_reviewed {
        return Err(RpcError::new(
            ErrorKind::InvalidInput,
            "print_context and human_reviewed cannot be combined: printing the packet records nothing",
        )
        .with_hint("print the context alone, then record the override without print_context"));
    }
    // Printing the packet reads and writes nothing of the task's: it needs no lock and is
    // answered while a build or review of the task runs, as `status` is.
    let guard = match p.print_context {
        true => None,
        false => {
            refuse_while_running(daemon, &ws, &task)?;
            let guard = daemon.jobs.task_lock(&ws, &task).lock_owned().await;
            // Again under the task's lock: of two reviews started at once, the second is
            // refused here (the first's jobs exist before it lets the task go).
            gate::refuse_review_in_progress(daemon, &ws, &task)?;
            Some(guard)
        }
    };
    require_valid(daemon, &ws, &entry)?;
    let (spec, entries) = projected_spec(daemon, &ws, &task)?;
    require_review_status(daemon, &ws, &spec, &entries, &task, "review", ErrorKind::InvalidState).await?;
    if !p.print_context {
        // A reviewer judges the approved contract, never criteria or a scope edited since.
        gate::refuse_contract_changes(&task, &spec, &entries, "review", ErrorKind::ReviewFailed)?;
    }
    if p.human_reviewed {
        let reason = human_reason(p.reason.as_deref())?;
        // A person vouches for the work as its evidence stands: refused where a reviewer's
        // review would be (stale evidence, criteria an amendment added that never ran), as
        // complete would refuse it after.
        let fresh = crate::evidence::freshness(&ws, &spec, &entries).await;
        gate::refuse_stale(&task, &fresh, "review")?;
        gate::refuse_never_run(&task, &spec, "review")?;
        return human_override(daemon, &ws, &task, reason);
    }
    let config = ws.config()?;
    let previous = latest_review(&entries);
    let request = review_request(&p, &config, previous.as_ref())?;

    // What the reviewer judges: the evidence must be current, and the change is everything
    // since the approval baseline, committed or not, submodules included. The clock first: a
    // file in scope written after it, while the reviewers run, is a mutation even when it
    // holds the same content again at their end.
    let since = baseline::clock_ns();
    let fresh = crate::evidence::freshness(&ws, &spec, &entries).await;
    if !p.print_context {
        gate::refuse_stale(&task, &fresh, "review")?;
        gate::refuse_never_run(&task, &spec, "review")?;
    }
    let material = match &fresh.material {
        Ok(material) => material.clone(),
        Err(_) => crate::evidence::material_now(&ws, &spec).await.map_err(RpcError::from)?,
    };
    let tree = material.digest.clone();
    if !p.force && !p.print_context {
        let spec_now = gate::spec_fingerprint(&ws.root, &ws.spec_path(&task));
        let spec_changed = crate::domain::ledger::spec_changed_since_review(&entries, Some(&spec_now));
        refuse_unchanged(&task, previous.as_ref(), &tree, spec_changed)?;
    }
    if !p.review_scope.is_empty() {
        crate::evidence::require_review_scope(&ws, &spec, &p.review_scope).await?;
    }
    crate::evidence::require_context_files(&ws, &config.review.context.files).await?;
    // Files a passing review was shown that changed since: `complete` refuses until a review
    // sees them as they are, so this one is shown them beside what it was asked for.
    // Only a pass that was shown more than the task's own scope: a review of that scope alone
    // is shown it anyway.
    let own = crate::evidence::review_scope(&ws, &spec, &[]);
    let carried = crate::evidence::changed_shown(&ws, &entries)
        .await
        .filter(|shown| shown.iter().any(|path| !own.contains(path)))
        .unwrap_or_default();
    // Beside what was asked for: a review asked for nothing in particular is given the task's
    // own scope and the carried files, never the carried files instead of the task's changes.
    let requested = match p.review_scope.is_empty() {
        _ if carried.is_empty() => p.review_scope.clone(),
        true if own.is_empty() => Vec::new(),
        true => review::with_carried(&own, &carried),
        false => review::with_carried(&p.review_scope, &carried),
    };
    let change = TaskChange::since_approval(&ws, &spec, &entries, &requested, &material.ignored).await?;
    let known = (request.mode == ReviewMode::Verify).then(|| previous.and_then(|(d, _, _)| d)).flatten();
    // git2's diff blocks: it runs on a blocking thread, not the runtime's.
    // Files kept for their secrets are named among the changes, never diffed into the packet.
    // A folder git reports only as a whole is named, never handed to the diff.
    let shown = change
        .classes
        .task_changes
        .iter()
        .filter(|p| !crate::domain::review::secret(p) && !change.classes.opaque.contains(p))
        .cloned()
        .collect();
    let (root, head, nested, paths): (_, _, _, Vec<String>) =
        (ws.root.clone(), change.base_head.clone(), change.nested.clone(), shown);
    let diff = baseline::off_runtime(move || baseline::diff(&root, head.as_deref(), &nested, &paths)).await?;
    let shown_changes = task_changes(&change.classes.task_changes, &change.classes.opaque, &diff);
    let amendments = crate::domain::evidence::amendments(&entries);
    let facts = PacketFacts {
        base_head: change.base_head.as_deref(),
        diff: &diff,
        fresh: &fresh,
        known: known.as_ref(),
        amendments: &amendments,
    };
    let packet = build_packet(&ws, &spec, &request, &config, &change.scope, &change.classes, &facts)
        .map_err(|e| {
            let hint = match packet::Oversize::of(&spec, config.review.context.required_max_bytes) {
                Some(over) => over.advice(),
                None => format!(
                    "shorten the section it names, or raise review.context.required_max_bytes in .scafld/config.yaml, then `{}` again",
                    scafld_protocol::cli::review_task(&task, crate::templates::shadows(&ws.root, &task))
                ),
            };
            RpcError::new(ErrorKind::ValidationFailed, e).with_hint(hint)
        })?;
    if p.print_context {
        // The exact packet; no provider is chosen or needed.
        return Ok(m::TaskReviewResult {
            task_id: task,
            verdict: "not_run".into(),
            mode: request.mode,
            context: Some(packet),
            ..m::TaskReviewResult::default()
        });
    }

    let builders: Vec<String> = crate::ledger::implementers(&entries).map(str::to_string).collect();
    let (reviewers, provider_names) = reviewer_names(&p, &config, &builders)?;
    let approval = crate::review::approval_mode(p.approval, &config)?;
    // A gate pass naming a template that cannot be used refuses before anything is recorded;
    // so does one no reviewer here could run (a worker runs the dossier review only).
    let passes = gate_passes(&ws, &config, &task, &entries)?;
    if let Some(pass) = passes.first()
        && provider_names.iter().all(|r| r == "worker")
    {
        return Err(crate::review::pass_without_provider(&pass.name));
    }
    let running = format!(
        "review started ({}); baseline {} path(s), {} task change(s), {} ambient drift change(s)",
        reviewers.join(", "),
        change.baseline.len(),
        change.classes.task_changes.len(),
        change.classes.ambient_drift.len()
    );
    let mode = request.mode;
    let mut spawn = crate::review::Spawn {
        ws: ws.clone(),
        config: &config,
        caller: &p.caller,
        subject: Subject::Task(task.clone()),
        reviewers: provider_names,
        approval,
        packet: crate::review::Packet {
            text: packet,
            request,
            preflight: preflight(&fresh, &entries),
            files: change.classes.task_changes,
            task_changes: Some(shown_changes),
        },
        baseline: crate::review::Baseline::default(),
        overrides: crate::review::Overrides {
            model: p.model.clone(),
            reasoning: p.codex_reasoning.clone(),
            provider_command: p.provider_command.clone(),
        },
        context_digest: String::new(),
        templates: crate::review::Templates { standalone: None, passes },
        builders: builders.clone(),
    };
    // Whatever a start can refuse (no reviewer that can run, a packet that cannot be written,
    // as through a worktree's `.scafld` link) is refused before anything is recorded: a
    // review that never started leaves no attempt to supersede the last one.
    let prepared = crate::review::prepare(&spawn)?;
    if let Err(e) = record(
        daemon,
        &ws,
        &task,
        vec![LedgerEvent::ReviewAttempt { status: "running".into(), reason: running }],
        "command:review",
    ) {
        prepared.discard();
        return Err(e);
    }
    // The mutation guard compares against the tree after our own projection write, so only
    // changes made while the reviewers ran count. It watches the task's own scope whatever
    // `--review-scope` says (which may widen it, never narrow it).
    let guarded = review::guard_scope(&crate::evidence::review_scope(&ws, &spec, &[]), &change.scope);
    // From here a review that cannot start says so in the ledger: no attempt stays `running`.
    let not_started = |e: RpcError| match attempt_failed(daemon, &ws, &task, format!("the review could not start: {e}"))
    {
        Ok(()) => e,
        Err(unrecorded) => unrecorded,
    };
    let start = match guard_snapshot(&ws, &ws.spec_path(&task), &guarded, false).await {
        Ok(start) => start,
        Err(e) => {
            prepared.discard();
            return Err(not_started(e));
        }
    };
    spawn.baseline = crate::review::Baseline { scope: guarded, snapshot: start, tree, since: Some(since) };
    let spawned = crate::review::start(daemon, spawn, prepared);
    drop(guard);
    Ok(m::TaskReviewResult {
        task_id: task,
        job_id: spawned.job_ids.first().cloned(),
        mode,
        provider: spawned.reviewers_spawned.join(","),
        session: Some(spawned),
        ..m::TaskReviewResult::default()
    })
}

/// What the reviewer is asked for: the mode (given, else by `rerun_policy`, else verify while
/// the last review left open blockers), the depth and the budgets.
fn review_request(p: &m::TaskReviewParams, config: &Config, previous: Option<&PreviousReview>) -> RpcResult<Request> {
    let dossier = &config.review.dossier;
    let mode = match p.mode {
        Some(mode) => mode,
        None => match dossier.rerun_policy.parse::<ReviewMode>() {
            Ok(mode) => mode,
            Err(_) => {
                // A review voided by the mutation guard left no finding of the reviewer's to verify.
                let open = previous
                    .and_then(|(d, _, _)| d.as_ref())
                    .is_some_and(|d| d.open_blockers() > 0 && !d.voided_by_mutation());
                if open { ReviewMode::Verify } else { ReviewMode::Discover }
            }
        },
    };
    let depth = p.review_depth.clone().unwrap_or_else(|| dossier.review_depth.clone());
    if !matches!(depth.as_str(), "light" | "standard" | "deep") {
        return Err(RpcError::new(
            ErrorKind::InvalidInput,
            format!("review depth {depth:?} is not light, standard or deep"),
        ));
    }
    Ok(Request {
        mode,
        max_findings: p.max_findings.unwrap_or(dossier.max_findings),
        min_attack_angles: p.min_attack_angles.unwrap_or(dossier.min_attack_angles),
        depth,
    })
}

/// A failed review of this very tree and spec text would only be repeated: refuse (unless
/// forced). `spec_changed`: the spec's authored text differs from what that review was shown.
fn refuse_unchanged(task: &str, previous: Option<&PreviousReview>, tree: &str, spec_changed: bool) -> RpcResult<()> {
    match previous {
        // Voided because the workspace moved under the reviewer: the same tree is due again.
        Some((Some(dossier), ..)) if dossier.voided_by_mutation() => Ok(()),
        Some((_, previous_tree, verdict)) if verdict == "fail" && previous_tree == tree && !spec_changed => Err(RpcError::new(
            ErrorKind::InvalidState,
            "neither the task's scope nor its spec's text changed since the failed review; another run would only spend provider quota",
        )
        .with_hint(format!(
            "repair the findings (`scafld handoff {task}`), or pass --force to review the same work again (a fix in a file outside the scope)"
        ))),
        _ => Ok(()),
    }
}

/// The requested reviewers, and the names to spawn: a single named reviewer is resolved now,
/// so a missing CLI is an error at once, as it always was.
fn reviewer_names(
    p: &m::TaskReviewParams,
    config: &Config,
    builders: &[String],
) -> RpcResult<(Vec<String>, Vec<String>)> {
    let reviewers = crate::review::requested_reviewers(&p.reviewers, p.provider.as_deref(), config)?;
    let names = match reviewers.as_slice() {
        [only] if only != "worker" => {
            let choice = providers::Choice {
                provider: Some(only),
                command: p.provider_command.as_deref(),
                model: p.model.as_deref(),
                reasoning: p.codex_reasoning.as_deref(),
                builders,
            };
            vec![providers::select(&choice, config, &p.caller.env)?.name().to_string()]
        }
        _ => reviewers.clone(),
    };
    Ok((reviewers, names))
}

/// What changed since approval, classified against the review scope.
struct TaskChange {
    base_head: Option<String>,
    baseline: Vec<BaselinePath>,
    /// The nested repositories whose changes were read through their own git.
    nested: Vec<baseline::NestedRepo>,
    scope: Vec<String>,
    classes: review::Classification,
}

impl TaskChange {
    async fn since_approval(
        ws: &Workspace,
        spec: &Spec,
        entries: &[LedgerEntry],
        requested_scope: &[String],
        ignored: &[String],
    ) -> RpcResult<TaskChange> {
        let crate::domain::ledger::ApprovalBaseline { head: base_head, paths: baseline, nested } =
            approval_baseline(entries);
        let (root, head, base, ignored) = (ws.root.clone(), base_head.clone(), baseline.clone(), ignored.to_vec());
        let task = spec.front.task_id.clone();
        // The approval snapshot kept the dirt outside this scope grouped (`baseline::snapshot`).
        let bound = crate::evidence::evidence_scope(ws, spec);
        let grouped_apart = bound.clone();
        let since = baseline::in_workspace(move || {
            baseline::changes_since(&root, head.as_deref(), &base, &nested, &ignored, &bound)
        })
        .await
        .map_err(|RpcError(mut data)| {
            // A baseline commit is gone (the workspace's, or a nested repository's HEAD
            // then): name this task in the way out.
            if data.kind == ErrorKind::InvalidState {
                data.hint = data.hint.map(|hint| hint.replace("<task>", &task));
            }
            RpcError(data)
        })?;
        let changed: Vec<String> = since.changes.into_iter().map(|c| c.path).collect();
        let scope = crate::evidence::review_scope(ws, spec, requested_scope);
        // A nested repository read through its own git is its files, its dirt then among them.
        let kept: Vec<BaselinePath> =
            baseline.iter().filter(|p| !since.nested.iter().any(|n| n.folder == p.path)).cloned().collect();
        let classes = review::classify(&changed, &kept, &scope, &grouped_apart);
        Ok(TaskChange { base_head, baseline, nested: since.nested, scope, classes })
    }
}

/// The template passes `review.templates` adds to the gate, with the inputs the gate fills:
/// `diff` (the approval baseline's HEAD, compared with the working tree), `spec`, `task`, `cwd`.
fn gate_passes(ws: &Workspace, config: &Config, task: &str, entries: &[LedgerEntry]) -> RpcResult<Vec<TemplateJob>> {
    let head = approval_baseline(entries).head;
    let spec = ws.spec_path(task);
    let mut passes = Vec::new();
    for name in &config.review.templates {
        let template = crate::templates::find(&ws.root, name)?;
        let mut given = std::collections::BTreeMap::new();
        let declared: Vec<&str> = template.required.iter().chain(&template.optional).map(|i| i.name.as_str()).collect();
        for (key, value) in [
            ("diff", head.clone()),
            ("spec", Some(spec.clone())),
            ("task", Some(task.to_string())),
            ("cwd", Some(".".into())),
        ] {
            if let Some(value) = value.filter(|_| declared.contains(&key)) {
                given.insert(key.to_string(), value);
            }
        }
        let inputs = template.resolve_inputs(&given).map_err(|e| {
            RpcError::new(ErrorKind::InvalidInput, format!("review.templates: {e}")).with_hint(format!(
                "a gate pass can only use templates whose required inputs the gate fills ({})",
                crate::domain::template::GATE_INPUTS.join(", ")
            ))
        })?;
        passes.push(TemplateJob {
            name: template.name.clone(),
            inputs,
            cwd: ws.root.display().to_string(),
            provider: String::new(),
        });
    }
    Ok(passes)
}

/// Whether the acceptance evidence is current for the reviewed files: every criterion passed
/// and bound to the files as they are.
fn preflight(fresh: &Freshness, entries: &[LedgerEntry]) -> String {
    let replay = crate::domain::ledger::replay(entries);
    let failing: Vec<&String> = replay.criteria.iter().filter(|(_, m)| m.status != "pass").map(|(id, _)| id).collect();
    if !failing.is_empty() {
        return format!(
            "FAILED - acceptance evidence is not passing for {}",
            failing.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", ")
        );
    }
    if replay.criteria.is_empty() {
        return "FAILED - no acceptance evidence has been recorded".into();
    }
    if fresh.stale.is_empty() {
        format!("passed - {} criteria passed on the current files", replay.criteria.len())
    } else {
        format!(
            "STALE - evidence no longer matches the files for {}",
            fresh.stale.keys().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", ")
        )
    }
}

/// `review accept|reject`: a human decides on the verdict that awaits approval.
pub async fn decide(daemon: &Daemon, p: m::DecideParams) -> RpcResult<m::DecideResult> {
    let (ws, entry) = entry(daemon, &p.root, &p.task_id).await?;
    let task = entry.task_id.clone();
    let reason = p.reason.trim().to_string();
    if reason.is_empty() {
        return Err(
            RpcError::new(ErrorKind::InvalidInput, "a decision needs --reason").with_hint("say who decided and why")
        );
    }
    // A harden or a build holds the task while its job runs: `busy` at once, not a wait (a
    // decision called from inside the build's own commands would wait for ever on itself).
    if let Some(job) = daemon.jobs.active_for(&ws, &task).filter(|j| j.kind != JobKind::Review) {
        return Err(gate::busy(&job, &task));
    }
    let lock = daemon.jobs.task_lock(&ws, &task);
    let _guard = lock.lock().await;
    let (spec, entries) = projected_spec(daemon, &ws, &task)?;
    // A proposal left open when the task was failed or cancelled is history with it.
    super::refuse_archived(&task, spec.status().unwrap_or(Status::Draft))?;
    let proposal = entries.iter().enumerate().rev().find_map(|(i, e)| match &e.event {
        LedgerEvent::Review(_) => Some(None),
        LedgerEvent::ReviewProposed(proposed) => Some(Some((i, proposed.clone()))),
        _ => None,
    });
    let Some(Some((at, proposed))) = proposal else {
        // The task's own next step: after a decision, a fresh review would undo it.
        let mut hint = super::read::refusal_hint(daemon, &ws, &task).await;
        // A review run under manual approval that came to no verdict yet (its reviewers still
        // running, or one gave none) proposes nothing until its reviewers answer.
        let manual = daemon.sessions.latest(&ws, Some(&task)).is_some_and(|s| {
            s.approval == Approval::Manual
                && s.result
                    .as_ref()
                    .is_none_or(|r| matches!(r.gate, None | Some(GateState::Retry | GateState::Pending)))
        });
        match (proposal.is_none(), manual) {
            (_, true) => hint.push_str(
                "; the last review, run with `--approval manual`, has no verdict to decide on yet: its verdict awaits a decision once its reviewers answer",
            ),
            (true, false) => hint.push_str("; a review awaits a decision only when run with `--approval manual`"),
            (false, false) => {}
        }
        return Err(
            RpcError::new(ErrorKind::InvalidState, format!("no review of {task} awaits approval")).with_hint(hint)
        );
    };
    refuse_superseded_proposal(daemon, &ws, &spec, &entries, at, &proposed, p.decision).await?;
    // Accepting keeps the proposed verdict (anything but a pass fails); rejecting fails.
    let verdict = match p.decision {
        Decision::Accept if proposed.verdict == Verdict::Pass.as_str() => Verdict::Pass,
        _ => Verdict::Fail,
    };
    let reason_text = format!(
        "human {} of the proposed {} verdict: {reason}",
        match p.decision {
            Decision::Accept => "acceptance",
            Decision::Reject => "rejection",
        },
        proposed.verdict
    );
    let events = vec![
        LedgerEvent::ReviewDecision { decision: p.decision.to_string(), reason: reason.clone() },
        LedgerEvent::Review(RecordedReview { verdict: verdict.to_string(), reason: reason_text, ..proposed }),
    ];
    record(daemon, &ws, &task, events, "command:review")?;
    if let Some(session) = daemon.sessions.latest(&ws, Some(&task)) {
        let detail = format!("human {}: the gate is {verdict}", p.decision);
        crate::review::publish(daemon, &session, "", "decided", &detail);
    }
    Ok(m::DecideResult {
        task_id: task.clone(),
        decision: p.decision,
        next_command: match verdict {
            Verdict::Pass => crate::review::gate::after_pass(daemon, &ws, &task)?,
            Verdict::Fail => format!("scafld handoff {task}"),
        },
        verdict,
    })
}

/// Refuse a decision on the proposal at `entries[at]` once it no longer stands: something newer
/// superseded it in the ledger (a build step, evidence, an amendment: the notion `status` shows
/// as a review's `superseded_by`), so no review awaits approval; or, for an acceptance, the
/// spec differs from the approved contract or the files changed since the reviewer judged
/// them, so a pass would stand for what nobody reviewed. Nothing is recorded; the hint is the
/// next action as `status` gives it.
async fn refuse_superseded_proposal(
    daemon: &Daemon,
    ws: &Workspace,
    spec: &Spec,
    entries: &[LedgerEntry],
    at: usize,
    proposed: &RecordedReview,
    decision: Decision,
) -> RpcResult<()> {
    let task = spec.front.task_id.as_str();
    let proposal = entries[at].id();
    let fresh = crate::evidence::freshness(ws, spec, entries).await;
    let refuse = async |why: String| -> RpcError {
        let refused = RpcError::new(
            ErrorKind::InvalidState,
            format!("cannot {decision} the review of {task} proposed at {proposal}: {why}"),
        );
        refused.with_hint(format!("review it again; {}", super::read::refusal_hint(daemon, ws, task).await))
    };
    if let Some(later) = crate::domain::ledger::superseding(&entries[at + 1..]) {
        // Named with its ledger type (`contract_amended`, `build`, ...), as `scafld session` shows it.
        let kind = serde_json::to_value(&later.event).ok().and_then(|v| v["type"].as_str().map(str::to_string));
        let kind = kind.map(|k| format!(" ({k})")).unwrap_or_default();
        return Err(refuse(format!("{}{kind} superseded it (no review awaits approval any more)", later.id())).await);
    }
    if decision == Decision::Reject {
        // A rejection records a failed review: it never stands for work nobody judged.
        return Ok(());
    }
    gate::refuse_contract_changes(task, spec, entries, "accept the review of", ErrorKind::InvalidState)?;
    let moved = match &fresh.material {
        Ok(now) => !proposed.tree.is_empty() && proposed.tree != now.digest,
        Err(_) => false,
    };
    if moved || !fresh.stale.is_empty() {
        let changed = if fresh.changes.is_empty() {
            String::new()
        } else {
            format!(": {}", scafld_protocol::text::listed(&fresh.changes))
        };
        return Err(refuse(format!("the files in its scope changed since the reviewer judged them{changed}")).await);
    }
    Ok(())
}

/// The reason `--human-reviewed` requires, trimmed.
fn human_reason(reason: Option<&str>) -> RpcResult<&str> {
    reason.map(str::trim).filter(|r| !r.is_empty()).ok_or_else(|| {
        RpcError::new(ErrorKind::InvalidInput, "--human-reviewed requires --reason")
            .with_hint("say who reviewed what, e.g. --reason \"reviewed PR 123\"")
    })
}

fn human_override(daemon: &Daemon, ws: &Workspace, task: &str, reason: &str) -> RpcResult<m::TaskReviewResult> {
    let events = vec![
        LedgerEvent::ReviewOverride { reason: reason.to_string() },
        LedgerEvent::Review(RecordedReview {
            verdict: "pass".into(),
            provider: "human".into(),
            reason: format!("human-reviewed override: {reason}"),
            dossier: None,
            tree: String::new(),
            reviewers: Vec::new(),
            spec_digest: None,
            shown: Vec::new(),
            shown_material: String::new(),
        }),
    ];
    record(daemon, ws, task, events, "command:review")?;
    Ok(m::TaskReviewResult {
        task_id: task.to_string(),
        verdict: "pass".into(),
        mode: ReviewMode::Verify,
        provider: "human".into(),
        summary: format!("Human-reviewed override accepted: {reason}"),
        next_command: format!("scafld complete {task}"),
        ..m::TaskReviewResult::default()
    })
}

/// The passes a review works through, and the project's invariants.
fn agenda(config: &Config) -> String {
    let mut text = String::from(
        "- automated: Spec Compliance - every objective, scope item and acceptance criterion is met by the change\n\
         - automated: Ambient Drift - changes outside the declared scope are context, unless they touch it\n\
         - adversarial: Regression Hunt - trace callers and data paths the change affects\n\
         - adversarial: Convention Check - the project's own rules and agent guidance\n\
         - adversarial: Dark Patterns - silent fallbacks, swallowed errors, tests that cannot fail\n\nConfigured invariants:\n",
    );
    for (id, rule) in &config.invariants.canonical {
        text.push_str(&format!("- `{id}`: {rule}\n"));
    }
    text
}

/// What the packet states besides the spec: the approval baseline's HEAD (the diff starts
/// there), the evidence's freshness, in verify mode the previous review's findings, and the
/// contract's amendments since approval.
struct PacketFacts<'a> {
    base_head: Option<&'a str>,
    /// The task's changes from the approval baseline's HEAD.
    diff: &'a Result<String, String>,
    fresh: &'a Freshness,
    known: Option<&'a Dossier>,
    /// The approved contract's amendments since approval.
    amendments: &'a [crate::domain::evidence::Amendment],
}

/// The changed paths, then their diff from the approval baseline.
fn task_changes(paths: &[String], opaque: &[String], diff: &Result<String, String>) -> String {
    let mut body = packet::list(paths);
    if !opaque.is_empty() {
        let names =
            opaque.iter().map(|p| format!("`{}`", scafld_protocol::text::one_line(p))).collect::<Vec<_>>().join(", ");
        body.push_str(&format!(
            "\n\nNot shown: {names} changed as a whole folder holding scoped paths, so the changes to the scoped files in it could not be diffed here; read those files directly."
        ));
    }
    match diff {
        Ok(diff) if !diff.is_empty() => body.push_str(&format!("\n\n{}", packet::fenced("diff", diff.trim_end()))),
        Ok(_) => {}
        Err(e) => body.push_str(&format!("\n\n(diff unavailable: {e})")),
    }
    body
}

fn build_packet(
    ws: &Workspace,
    spec: &Spec,
    request: &Request,
    config: &Config,
    scope: &[String],
    classes: &review::Classification,
    facts: &PacketFacts<'_>,
) -> Result<String, String> {
    let task = &spec.front.task_id;
    let spec_source = format!("{}#task_contract", ws.spec_path(task));
    let mut sections = vec![
        Section::derived("task_contract", "Task Contract", &spec_source, packet::task_contract(spec), true),
        packet::request_section(request, &format!("Rerun policy: {}", config.review.dossier.rerun_policy)),
    ];
    if let Some(known) = facts.known {
        sections.push(packet::known_findings(&known.findings));
    }
    if !facts.amendments.is_empty() {
        sections.push(packet::amendments(facts.amendments, spec));
    }
    sections.extend([
        Section::derived("task_scope", "Task Scope", &spec_source, packet::list(scope), false),
        Section::derived(
            "workspace_classification",
            "Workspace Classification",
            &format!("{task}#workspace_classification"),
            format!(
                "Task changes since approval: {}\nAmbient drift outside scope: {}\nUnchanged baseline dirt: {}\nApproval baseline HEAD: {}\n\nTask changes are everything that differs from the approval baseline inside the task's scope, committed or not (submodule and nested repository content included); they are the review target. Ambient drift and baseline dirt are context, not findings by themselves.",
                classes.task_changes.len(),
                classes.ambient_drift.len(),
                classes.baseline_dirty.len(),
                facts.base_head.unwrap_or("none (no commit at approval)")
            ),
            false,
        ),
        Section::derived(
            "task_changes",
            "Task Changes Since Approval Baseline",
            &format!("{task}#task_changes"),
            task_changes(&classes.task_changes, &classes.opaque, facts.diff),
            false,
        ),
        Section::derived(
            "ambient_drift",
            "Ambient Workspace Drift Outside Task Scope",
            &format!("{task}#ambient_drift"),
            packet::list(&classes.ambient_drift),
            false,
        ),
        Section::derived(
            "workspace_baseline",
            "Workspace Baseline Before Review",
            &format!("{task}#workspace_baseline"),
            format!(
                "Dirty at approval and unchanged since (context, not findings):\n{}",
                packet::list(&classes.baseline_dirty)
            ),
            false,
        ),
        Section::derived("review_agenda", "Review Agenda", ".scafld/config.yaml#review", agenda(config), false),
        Section::derived(
            "acceptance_evidence",
            "Acceptance Criteria",
            &format!("{task}#acceptance_evidence"),
            spec.criteria()
                .map(|c| {
                    let freshness = match facts.fresh.stale.get(&c.id) {
                        Some(why) => format!("stale ({})", why.describe()),
                        None if c.status.is_empty() => "none recorded".into(),
                        None => "current (bound to this definition and these files)".into(),
                    };
                    format!(
                        "- `{}` ({}): {}\n  - Status: {}\n  - Evidence: {}\n  - Freshness: {freshness}",
                        c.id,
                        c.effective_kind(),
                        c.command,
                        c.state(),
                        c.evidence
                    )
                })
                .collect::<Vec<_>>()
                .join("\n"),
            false,
        ),
    ]);
    sections.extend(packet::answer_sections(request));
    for path in CONTEXT_FILES.iter().map(|s| s.to_string()).chain(config.review.context.files.iter().cloned()) {
        for (file, content) in context_file(&ws.root, &path) {
            sections.push(Section::file(&file, &content));
        }
    }
    packet::render(
        &packet::Header { task_id: task, title: &spec.title, status: &spec.status_word() },
        &sections,
        config.review.context.budget(),
    )
}

/// A project file (or every .md/.mdc/.txt file of a directory) named as review context, when it
/// is safe to share: the one reader of such files. Never one outside the workspace, git's store
/// or a file kept from reviewers for its secrets ([`review::context_path`]), never a symlink
/// itself, and never one a symlink on its way (a linked folder above it) takes outside the
/// workspace or to a secret there: it counts by its own text only. Each file is checked again
/// once open, so a link swapped in meanwhile shares nothing.
fn context_file(root: &std::path::Path, written: &str) -> Vec<(String, String)> {
    let Ok(relative) = review::context_path(written) else { return Vec::new() };
    let Some(reached) = context_reach(root, &relative) else { return Vec::new() };
    if reached.is_dir() {
        let mut names: Vec<String> = std::fs::read_dir(&reached)
            .map(|rd| rd.flatten().filter_map(|e| e.file_name().into_string().ok()).collect())
            .unwrap_or_default();
        names.sort();
        return names
            .into_iter()
            .filter(|n| std::path::Path::new(n).extension().is_some_and(|e| e == "md" || e == "mdc" || e == "txt"))
            .filter_map(|name| {
                let file = if relative.is_empty() { name } else { format!("{relative}/{name}") };
                context_file(root, &file).into_iter().next()
            })
            .collect();
    }
    // Past the cap (or no regular file) it is left out, as an unreadable one is.
    let full = root.join(&relative);
    let Ok(file) = scafld_local::capped::open(&full, "context file", MAX_CONTEXT_FILE_BYTES) else { return Vec::new() };
    let same = |opened: &std::fs::Metadata, now: &std::fs::Metadata| {
        use std::os::unix::fs::MetadataExt;
        (opened.dev(), opened.ino()) == (now.dev(), now.ino())
    };
    let opened_inside = match (file.metadata(), context_reach(root, &relative).map(std::fs::metadata)) {
        (Ok(opened), Some(Ok(now))) => same(&opened, &now),
        _ => false,
    };
    if !opened_inside {
        return Vec::new();
    }
    scafld_local::capped::read_opened(file, &full, "context file", MAX_CONTEXT_FILE_BYTES)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .map(|text| vec![(relative, text)])
        .unwrap_or_default()
}

/// Where the workspace-relative `relative` under `root` leads, every symlink on its way
/// followed, when that is inside the workspace and shareable: `None` when it is a symlink
/// itself, nothing is there, or it reaches outside the workspace or a file kept from reviewers.
fn context_reach(root: &std::path::Path, relative: &str) -> Option<std::path::PathBuf> {
    let full = root.join(relative);
    if std::fs::symlink_metadata(&full).ok()?.file_type().is_symlink() {
        return None;
    }
    let (root, reached) = (root.canonicalize().ok()?, full.canonicalize().ok()?);
    let inside = reached.strip_prefix(&root).ok()?.to_str()?;
    (!review::secret(inside)).then_some(reached)
}

/// Review, complete and finalize act only on a task in review; anything else is refused with
/// the step the task needs next (a closed task as `invalid_state`; an open one with `kind`).
pub(super) async fn require_review_status(
    daemon: &Daemon,
    ws: &Workspace,
    spec: &Spec,
    entries: &[LedgerEntry],
    task: &str,
    what: &str,
    kind: ErrorKind,
) -> RpcResult<()> {
    // A file that says `review` without an approval on record here (set by hand), or with one
    // that pinned no contract (the original tool's), has had no pinned contract and no build of
    // ours: nothing a review could judge.
    let replay = crate::domain::ledger::replay(entries);
    if spec.status() == Some(Status::Review) && replay.contract_pinned() {
        return Ok(());
    }
    let why = match spec.status() {
        Some(Status::Review) if replay.approved => {
            format!("{task} says review, but its approval on record pins no criteria or scope")
        }
        Some(Status::Review) => format!("{task} says review, but has no approval on record here"),
        _ => format!("{task} is {}", spec.status_word()),
    };
    // A closed task (completed, failed, cancelled) is past the gate, not refused by it: as
    // `approve` and `build` answer it, an unmet precondition (exit 1), whatever `kind` says.
    let kind = if spec.status().is_some_and(Status::is_terminal) { ErrorKind::InvalidState } else { kind };
    // As `status` says it: an imported completion whose file is still in active/ is reconciled.
    let hint = super::read::refusal_hint(daemon, ws, task).await;
    Err(RpcError::new(kind, format!("{what} requires task status review; {why}")).with_hint(hint))
}

/// The completion gate of `complete` and `finalize`: the evidence and the review must speak for
/// the files and the spec as they are now. Accepted: the review's provider and ledger entry.
/// Refused: the spec written before the change may still say `complete`, so it says the step
/// the refusal names from now on (nothing is recorded), and the refusal is returned.
pub(crate) async fn completion_gate(
    daemon: &Daemon,
    ws: &Workspace,
    task: &str,
    spec: &Spec,
    entries: &[LedgerEntry],
    fresh: &crate::evidence::Freshness,
    cause: &str,
) -> RpcResult<(String, String)> {
    let next = super::read::refusal_hint(daemon, ws, task);
    let review = crate::templates::review_command(&ws.root, task);
    let spec_now = gate::spec_fingerprint(&ws.root, &ws.spec_path(task));
    let shown_now = gate::shown_now(ws, entries).await;
    let completion = gate::completion(task, spec, entries, fresh, &review, &spec_now, shown_now.as_deref(), next).await;
    if completion.is_err()
        && let Err(e) = crate::ledger::reshow_next(daemon, ws, task, cause)
    {
        tracing::warn!("cannot write the next step of {task} again: {e}");
    }
    completion
}

pub async fn complete(daemon: &Daemon, p: m::TaskParams) -> RpcResult<m::CompleteResult> {
    let (ws, entry) = entry(daemon, &p.root, &p.task_id).await?;
    let task = entry.task_id.clone();
    refuse_completion_while_running(daemon, &ws, &task, "complete")?;
    let lock = daemon.jobs.task_lock(&ws, &task);
    let _guard = lock.lock().await;
    // A spec with errors does not say what was done (a phase hidden by a duplicate id, an
    // unclosed fence): as build and review, complete refuses it, as it is now.
    require_valid(daemon, &ws, &super::fresh_entry(daemon, &ws, &task)?.entry)?;
    let (spec, entries) = projected_spec(daemon, &ws, &task)?;
    require_review_status(daemon, &ws, &spec, &entries, &task, "complete", ErrorKind::ReviewFailed).await?;
    // The evidence and the review must speak for the files as they are now.
    let fresh = crate::evidence::freshness(&ws, &spec, &entries).await;
    let (provider, review_entry) =
        completion_gate(daemon, &ws, &task, &spec, &entries, &fresh, "command:complete").await?;
    let completed = LedgerEvent::Complete { reason: "task completed".into() };
    let note = record(daemon, &ws, &task, vec![completed], "command:complete")?.note();
    let path = ws.spec_path(&task);
    Ok(m::CompleteResult { task_id: task, status: Status::Completed, path, provider, review_entry, note })
}
