//! The review gate (`task.review`) and completion (`task.complete`).
//!
//! Providers (see `providers.rs`): codex, claude and gemini CLIs, a `command` reviewer, the
//! `local` pass-through (never completes a task) and the audited `--human-reviewed` override.

use std::sync::Arc;

use scafld_protocol::ErrorKind;
use scafld_protocol::methods as m;
use sha2::{Digest, Sha256};

use super::exec::{projected_spec, record, refuse_while_running};
use super::{entry, require_valid};
use crate::baseline;
use crate::clock;
use crate::config::Config;
use crate::daemon::Daemon;
use crate::domain::dossier::{self, Attack, Dossier, Finding, Location, Request};
use crate::domain::job::{JobKind, JobState};
use crate::domain::ledger::{BaselinePath, LedgerEntry, LedgerEvent};
use crate::domain::lifecycle::Status;
use crate::domain::packet::{self, Section};
use crate::domain::review::{self, Authority};
use crate::domain::spec::Spec;
use crate::error::{RpcError, RpcResult};
use crate::providers::{self, Provider};
use crate::workspace::Workspace;
use scafld_protocol::Event;
use std::time::Duration;

/// Project files offered to the reviewer, before `review.context.files`.
const CONTEXT_FILES: [&str; 5] = ["AGENTS.md", "CLAUDE.md", ".claude/rules", "README.md", "docs/review.md"];

fn failed(message: impl Into<String>) -> RpcError {
    RpcError::new(ErrorKind::ReviewFailed, message)
}

/// Fingerprint of the reviewed material: every dirty path outside `.scafld/` (the runner's own
/// files change with every review).
fn tree_fingerprint(head: Option<&str>, paths: &[BaselinePath]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(head.unwrap_or("no-head"));
    for p in paths.iter().filter(|p| !p.path.starts_with(".scafld/")) {
        hasher.update(format!("{} {} {}\n", p.status, p.fingerprint, p.path));
    }
    format!("{:x}", hasher.finalize())
}

/// The latest accepted review in the ledger: (dossier, tree, verdict).
fn latest_review(entries: &[LedgerEntry]) -> Option<(Option<Dossier>, String, String)> {
    entries.iter().rev().find_map(|e| match &e.event {
        LedgerEvent::Review { verdict, dossier, tree, .. } => {
            Some((dossier.clone().and_then(|d| serde_json::from_value(d).ok()), tree.clone(), verdict.clone()))
        }
        _ => None,
    })
}

pub async fn review(daemon: &Arc<Daemon>, p: m::ReviewParams) -> RpcResult<m::ReviewResult> {
    let (ws, entry) = entry(daemon, &p.root, &p.task_id).await?;
    let task = entry.task_id.clone();
    refuse_while_running(daemon, &ws, &task)?;
    let guard = daemon.jobs.task_lock(&ws, &task).lock_owned().await;
    require_valid(&ws, &entry)?;
    let (spec, entries) = projected_spec(daemon, &ws, &task)?;
    if spec.status() != Some(Status::Review) {
        return Err(RpcError::new(
            ErrorKind::InvalidState,
            format!("review requires task status review; {task} is {}", spec.front.status),
        )
        .with_hint(format!("run `scafld build {task}` until it reaches review")));
    }
    if p.human_reviewed {
        return human_override(daemon, &ws, &task, p.reason.as_deref());
    }
    let config = ws.config().map_err(|e| RpcError::new(ErrorKind::WorkspaceError, e.to_string()))?;
    let previous = latest_review(&entries);
    let mode = match p.mode.clone() {
        Some(mode) => mode,
        None => match config.review.dossier.rerun_policy.as_str() {
            "discover" => "discover".into(),
            "verify" => "verify".into(),
            _ => {
                let open = previous.as_ref().and_then(|(d, _, _)| d.as_ref()).is_some_and(|d| d.open_blockers() > 0);
                if open { "verify".into() } else { "discover".into() }
            }
        },
    };
    let depth = p.review_depth.clone().unwrap_or_else(|| config.review.dossier.review_depth.clone());
    if !matches!(mode.as_str(), "discover" | "verify") {
        return Err(RpcError::new(ErrorKind::InvalidInput, format!("mode {mode:?} is not discover or verify")));
    }
    if !matches!(depth.as_str(), "light" | "standard" | "deep") {
        return Err(RpcError::new(
            ErrorKind::InvalidInput,
            format!("review depth {depth:?} is not light, standard or deep"),
        ));
    }
    let request = Request {
        mode: mode.clone(),
        max_findings: p.max_findings.unwrap_or(config.review.dossier.max_findings),
        min_attack_angles: p.min_attack_angles.unwrap_or(config.review.dossier.min_attack_angles),
        depth,
    };
    let choice = providers::Choice {
        provider: p.provider.as_deref(),
        command: p.provider_command.as_deref(),
        model: p.model.as_deref(),
        reasoning: p.codex_reasoning.as_deref(),
    };
    let provider = providers::select(&choice, &config, &p.caller.env)?;

    let root = ws.root.clone();
    let before = tokio::task::spawn_blocking(move || baseline::snapshot(&root))
        .await
        .map_err(RpcError::internal)?
        .map_err(|e| RpcError::new(ErrorKind::WorkspaceError, e))?;
    let tree = tree_fingerprint(before.head.as_deref(), &before.paths);
    if let Some((_, previous_tree, verdict)) = &previous
        && verdict == "fail"
        && *previous_tree == tree
        && !p.force
        && !p.print_context
    {
        return Err(RpcError::new(
            ErrorKind::InvalidState,
            "nothing changed since the failed review; another run would only spend provider quota",
        )
        .with_hint(format!(
            "repair the findings (`scafld handoff {task}`), or pass --force to review the same tree again"
        )));
    }
    let baseline: Vec<BaselinePath> = entries
        .iter()
        .find_map(|e| match &e.event {
            LedgerEvent::WorkspaceBaseline { paths, .. } => Some(paths.clone()),
            _ => None,
        })
        .unwrap_or_default();
    let scope = review::scope(&spec, &p.review_scope);
    let classes = review::classify(&baseline, &before.paths, &scope);
    let packet = build_packet(&ws, &spec, &request, &config, &scope, &classes);
    if p.print_context {
        return Ok(m::ReviewResult {
            task_id: task,
            verdict: "not_run".into(),
            mode,
            provider: provider.name().into(),
            context: Some(packet),
            ..m::ReviewResult::default()
        });
    }

    let running = format!(
        "review provider running; baseline {} path(s), {} task change(s), {} ambient drift change(s)",
        baseline.len(),
        classes.task_changes.len(),
        classes.ambient_drift.len()
    );
    // From here the review is a job: it outlives this call (and the client), heartbeats, and
    // keeps the task locked until it ends.
    let (job, _) = daemon.jobs.create(daemon.store(), JobKind::Review, &ws, &task);
    let pending =
        Pending { ws, task: task.clone(), caller: p.caller, config, request, provider, packet, scope, tree, running };
    let (daemon, job_id) = (daemon.clone(), job.id.clone());
    tokio::spawn(async move {
        let _guard = guard;
        let set = |state: JobState, change: &dyn Fn(&mut crate::domain::job::JobRecord)| {
            daemon.jobs.update(daemon.store(), &job_id, true, |r| {
                r.state = state;
                change(r);
            });
            daemon.publish(Event::JobChanged {
                job_id: job_id.clone(),
                task_id: pending.task.clone(),
                state: state.as_str().into(),
            });
        };
        set(JobState::Running, &|r| {
            r.started_at = Some(clock::now_rfc3339());
            r.last_heartbeat = r.started_at.clone();
            r.activity = Some(format!("{} reviewing", pending.provider.name()));
        });
        let heartbeat = {
            let (daemon, id) = (daemon.clone(), job_id.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    daemon.jobs.update(daemon.store(), &id, true, |r| r.last_heartbeat = Some(clock::now_rfc3339()));
                }
            })
        };
        let result = finish(&daemon, &job_id, &pending).await;
        heartbeat.abort();
        match result {
            Ok(review) => {
                let outcome = serde_json::to_value(&review).ok();
                set(JobState::Succeeded, &|r| {
                    r.finished_at = Some(clock::now_rfc3339());
                    r.activity = None;
                    r.reason = Some(format!("review verdict {}", review.verdict));
                    r.outcome = outcome.clone();
                });
            }
            Err(e) => set(JobState::Failed, &|r| {
                r.finished_at = Some(clock::now_rfc3339());
                r.activity = None;
                r.reason = Some(e.0.message.clone());
                r.error_kind = Some(e.kind().as_str().to_string());
            }),
        }
    });
    Ok(m::ReviewResult { task_id: task, job_id: Some(job.id), mode, ..m::ReviewResult::default() })
}

/// What a started review carries into its job.
struct Pending {
    ws: Arc<Workspace>,
    task: String,
    caller: m::CallerContext,
    config: Config,
    request: Request,
    provider: Provider,
    packet: String,
    scope: Vec<String>,
    tree: String,
    running: String,
}

/// Run the provider and accept (or refuse) its dossier.
async fn finish(daemon: &Arc<Daemon>, job_id: &str, pending: &Pending) -> RpcResult<m::ReviewResult> {
    let Pending { ws, task, caller, config, request, provider, packet, scope, tree, running } = pending;
    let (ws, task, tree, mode) = (ws.as_ref(), task.clone(), tree.clone(), request.mode.clone());
    record(
        daemon,
        ws,
        &task,
        vec![LedgerEvent::ReviewAttempt { status: "running".into(), reason: running.clone() }],
        "command:review",
    )?;
    // The guard compares against the tree after our own projection write, so only changes made
    // while the provider ran count.
    let root = ws.root.clone();
    let before = tokio::task::spawn_blocking(move || baseline::snapshot(&root))
        .await
        .map_err(RpcError::internal)?
        .map_err(|e| RpcError::new(ErrorKind::WorkspaceError, e))?;
    let review_run = ReviewRun { daemon, job_id: job_id.to_string(), ws, task: &task, caller, config, request };
    let answer = run_provider(&review_run, provider, packet).await;

    let root = ws.root.clone();
    let after = tokio::task::spawn_blocking(move || baseline::snapshot(&root)).await.map_err(RpcError::internal)?;
    let spec_path = ws.index.read().expect("index").get(&task).map(|e| ws.relative(&e.path)).unwrap_or_default();
    let mutations = match &after {
        Ok(after) => mutations(&before.paths, &after.paths, scope, &spec_path),
        Err(e) => return attempt_failed(daemon, ws, &task, format!("review workspace snapshot failed: {e}")),
    };
    let mut dossier = match answer {
        Ok(dossier) => dossier,
        // A crashed provider that also changed the workspace is still recorded as a failing review.
        Err(why) if mutations.is_empty() => return attempt_failed(daemon, ws, &task, why),
        Err(_) => Dossier {
            verdict: "fail".into(),
            mode: request.mode.clone(),
            summary: "The provider failed.".into(),
            findings: Vec::new(),
            attack_log: Vec::new(),
            budget: Default::default(),
            provider: Some("scafld".into()),
            model: None,
            session_id: None,
            output_format: None,
            normalizations: Vec::new(),
            event_summary: None,
        },
    };
    if !mutations.is_empty() {
        guard(&mut dossier, &mutations);
    }
    let dossier = dossier::normalize(dossier, request);
    let problems = dossier::validate(&dossier, request);
    if !problems.is_empty() && mutations.is_empty() {
        return attempt_failed(daemon, ws, &task, format!("review dossier invalid: {}", problems.join("; ")));
    }

    let provider_name = if mutations.is_empty() { provider.name().to_string() } else { "scafld".to_string() };
    let verdict = dossier.verdict.clone();
    let reason = if verdict == "pass" {
        "review gate pass".to_string()
    } else {
        format!(
            "review gate fail: {} finding(s), {} completion blocker(s)",
            dossier.findings.len(),
            dossier.open_blockers()
        )
    };
    let event = LedgerEvent::Review {
        verdict: verdict.clone(),
        provider: provider_name.clone(),
        reason,
        dossier: serde_json::to_value(&dossier).ok(),
        tree,
    };
    record(daemon, ws, &task, vec![event], "command:review")?;
    Ok(m::ReviewResult {
        task_id: task.clone(),
        job_id: None,
        verdict: verdict.clone(),
        mode,
        provider: provider_name,
        summary: dossier.summary.clone(),
        output_format: dossier.output_format.clone().unwrap_or_default(),
        open_blockers: dossier.open_blockers(),
        findings: dossier.findings.iter().filter_map(|f| serde_json::to_value(f).ok()).collect(),
        next_command: if verdict == "pass" {
            format!("scafld complete {task}")
        } else {
            format!("scafld handoff {task}")
        },
        context: None,
    })
}

fn human_override(daemon: &Daemon, ws: &Workspace, task: &str, reason: Option<&str>) -> RpcResult<m::ReviewResult> {
    let reason = reason.map(str::trim).filter(|r| !r.is_empty()).ok_or_else(|| {
        RpcError::new(ErrorKind::InvalidInput, "--human-reviewed requires --reason")
            .with_hint("say who reviewed what, e.g. --reason \"reviewed PR 123\"")
    })?;
    let events = vec![
        LedgerEvent::ReviewOverride { reason: reason.to_string() },
        LedgerEvent::Review {
            verdict: "pass".into(),
            provider: "human".into(),
            reason: format!("human-reviewed override: {reason}"),
            dossier: None,
            tree: String::new(),
        },
    ];
    record(daemon, ws, task, events, "command:review")?;
    Ok(m::ReviewResult {
        task_id: task.to_string(),
        verdict: "pass".into(),
        mode: "verify".into(),
        provider: "human".into(),
        summary: format!("Human-reviewed override accepted: {reason}"),
        next_command: format!("scafld complete {task}"),
        ..m::ReviewResult::default()
    })
}

fn attempt_failed(daemon: &Daemon, ws: &Workspace, task: &str, reason: String) -> RpcResult<m::ReviewResult> {
    record(
        daemon,
        ws,
        task,
        vec![LedgerEvent::ReviewAttempt { status: "failed".into(), reason: reason.clone() }],
        "command:review",
    )?;
    Err(failed(reason).with_hint(format!(
        "diagnostics are under .scafld/runs/{task}/diagnostics/; fix the reviewer and run `scafld review {task}` again"
    )))
}

/// One review run's fixed inputs.
struct ReviewRun<'a> {
    daemon: &'a Arc<Daemon>,
    job_id: String,
    ws: &'a Workspace,
    task: &'a str,
    caller: &'a m::CallerContext,
    config: &'a Config,
    request: &'a Request,
}

async fn run_provider(r: &ReviewRun<'_>, provider: &Provider, packet: &str) -> Result<Dossier, String> {
    let ReviewRun { daemon, ws, task, caller, config, request, .. } = r;
    if let Provider::Local = provider {
        return Ok(Dossier {
            verdict: "pass".into(),
            mode: request.mode.clone(),
            summary: "Local provider smoke review passed.".into(),
            findings: Vec::new(),
            attack_log: vec![Attack {
                target: "local provider".into(),
                attack: "development pass-through".into(),
                result: "clean".into(),
                notes: Some("not an adversarial review; cannot complete a task".into()),
            }],
            budget: dossier::Budget { depth: "local".into(), ..Default::default() },
            provider: None,
            model: None,
            session_id: None,
            output_format: Some("local".into()),
            normalizations: Vec::new(),
            event_summary: None,
        });
    }
    let runs = ws.root.join(".scafld/runs").join(task);
    // A directory of its own per run, so parallel reviews never share temp files.
    let scratch = runs.join(format!("review-{}", crate::workspace::layout::new_id().unwrap_or_default()));
    let client_exe = if caller.client_exe.is_empty() { "scafld" } else { caller.client_exe.as_str() };
    let invocation = providers::invocation(
        provider,
        &scratch,
        &ws.root,
        client_exe,
        &daemon.options.socket_path,
        &daemon.submissions,
        request,
    )
    .map_err(|e| format!("cannot prepare the {} run: {e}", provider.name()))?;
    let job_id = r.job_id.clone();
    let on_spawn = Box::new(move |pgid: i32| {
        daemon.jobs.update(daemon.store(), &job_id, true, |record| record.pgid = Some(pgid));
    });
    let (events_daemon, events_job) = (Arc::clone(daemon), r.job_id.clone());
    let provider_label = provider.name();
    let on_event = Box::new(move |event: String| {
        let activity = format!("{provider_label} event {event}");
        events_daemon.jobs.update(events_daemon.store(), &events_job, false, |record| record.activity = Some(activity));
    });
    let run = providers::Run {
        on_spawn,
        on_event,
        task,
        cwd: &ws.root,
        caller_env: &caller.env,
        packet,
        diagnostics_dir: runs.join("diagnostics"),
    };
    let result = providers::run(invocation, run, config, &daemon.submissions).await;
    let _ = std::fs::remove_dir_all(&scratch);
    result.map_err(|e| e.replace(&format!("{}/", ws.root.display()), ""))
}

/// Paths changed during the review that matter: the task's own spec, or anything in scope that
/// is not runner or spec state.
fn mutations(before: &[BaselinePath], after: &[BaselinePath], scope: &[String], spec_path: &str) -> Vec<String> {
    let key = |p: &BaselinePath| (p.path.clone(), (p.status.clone(), p.fingerprint.clone()));
    let before: std::collections::BTreeMap<_, _> = before.iter().map(key).collect();
    let after: std::collections::BTreeMap<_, _> = after.iter().map(key).collect();
    let mut changed: Vec<String> = before
        .keys()
        .chain(after.keys())
        .filter(|path| before.get(*path) != after.get(*path))
        .filter(|path| {
            *path == spec_path
                || (!path.starts_with(".scafld/runs/")
                    && !path.starts_with(".scafld/specs/")
                    && review::in_scope(path, scope))
        })
        .cloned()
        .collect();
    changed.sort();
    changed.dedup();
    changed
}

/// Turn workspace changes made during the review into a blocking finding.
fn guard(dossier: &mut Dossier, mutated: &[String]) {
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

/// The changed paths, then their diff against HEAD.
fn task_changes(ws: &Workspace, paths: &[String]) -> String {
    let mut body = list(paths);
    match baseline::diff(&ws.root, paths) {
        Ok(diff) if !diff.is_empty() => body.push_str(&format!("\n\n```diff\n{}\n```", diff.trim_end())),
        Ok(_) => {}
        Err(e) => body.push_str(&format!("\n\n(diff unavailable: {e})")),
    }
    body
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "- none".into()
    } else {
        items.iter().map(|i| format!("- `{i}`")).collect::<Vec<_>>().join("\n")
    }
}

fn build_packet(
    ws: &Workspace,
    spec: &Spec,
    request: &Request,
    config: &Config,
    scope: &[String],
    classes: &review::Classification,
) -> String {
    let task = &spec.front.task_id;
    let spec_source = format!(
        "{}#task_contract",
        ws.index.read().expect("index").get(task).map(|e| ws.relative(&e.path)).unwrap_or_default()
    );
    let objectives = spec.objectives.iter().map(|o| format!("- {o}")).collect::<Vec<_>>().join("\n");
    let mut sections = vec![
        Section::derived(
            "task_contract",
            "Task Contract",
            &spec_source,
            format!(
                "Title: {}\nStatus: {}\n\nSummary:\n{}\n\nObjectives:\n{}",
                spec.title,
                spec.front.status,
                spec.summary,
                if objectives.is_empty() { "- none".into() } else { objectives }
            ),
            true,
        ),
        Section::derived(
            "review_request",
            "Review Request",
            "review#review_request",
            format!(
                "Mode: {}\nMax findings: {}\nMinimum attack angles: {}\nReview depth: {}\nRerun policy: {}",
                request.mode,
                request.max_findings,
                request.min_attack_angles,
                request.depth,
                config.review.dossier.rerun_policy
            ),
            true,
        ),
        Section::derived("task_scope", "Task Scope", &spec_source, list(scope), false),
        Section::derived(
            "workspace_classification",
            "Workspace Classification",
            &format!("{task}#workspace_classification"),
            format!(
                "Task changes since approval: {}\nAmbient drift outside scope: {}\nUnchanged baseline dirt: {}\n\nTask changes are the review target. Ambient drift and baseline dirt are context, not findings by themselves.",
                classes.task_changes.len(),
                classes.ambient_drift.len(),
                classes.baseline_dirty.len()
            ),
            false,
        ),
        Section::derived(
            "task_changes",
            "Task Changes Since Approval Baseline",
            &format!("{task}#task_changes"),
            task_changes(ws, &classes.task_changes),
            false,
        ),
        Section::derived(
            "ambient_drift",
            "Ambient Workspace Drift Outside Task Scope",
            &format!("{task}#ambient_drift"),
            list(&classes.ambient_drift),
            false,
        ),
        Section::derived(
            "workspace_baseline",
            "Workspace Baseline Before Review",
            &format!("{task}#workspace_baseline"),
            format!(
                "Dirty at approval and unchanged since (context, not findings):\n{}",
                list(&classes.baseline_dirty)
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
                    format!(
                        "- `{}` ({}): {}\n  - Status: {}\n  - Evidence: {}",
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
        Section::derived(
            "provider_instruction",
            "Provider Instruction",
            "scafld#provider_instruction",
            packet::instructions(&request.mode, &request.depth, request.max_findings, request.min_attack_angles),
            true,
        ),
    ];
    sections.push(Section::derived(
        "schema_context",
        "Schema Context: ReviewDossier",
        "schemas/review_dossier.schema.json",
        format!("```json\n{}\n```", serde_json::to_string_pretty(&providers::schema()).unwrap_or_default()),
        false,
    ));
    for path in CONTEXT_FILES.iter().map(|s| s.to_string()).chain(config.review.context.files.iter().cloned()) {
        for (file, content) in context_file(&ws.root, &path) {
            sections.push(Section::file(&file, &content));
        }
    }
    packet::render(
        &packet::Header { task_id: task, title: &spec.title, status: &spec.front.status },
        &sections,
        config.review.context.max_bytes,
    )
}

/// A project file (or every .md/.mdc/.txt file of a directory), when it is safe to share:
/// relative, inside the workspace, not a secret, not a symlink.
fn context_file(root: &std::path::Path, relative: &str) -> Vec<(String, String)> {
    let rel = std::path::Path::new(relative);
    let unsafe_path = rel.is_absolute()
        || rel.components().any(|c| matches!(c, std::path::Component::ParentDir))
        || relative.starts_with(".git")
        || relative.split('/').any(|s| s.starts_with(".env"))
        || relative == ".scafld/config.local.yaml";
    let full = root.join(rel);
    if unsafe_path || std::fs::symlink_metadata(&full).map(|m| m.file_type().is_symlink()).unwrap_or(true) {
        return Vec::new();
    }
    if full.is_dir() {
        let mut files: Vec<_> =
            std::fs::read_dir(&full).map(|rd| rd.flatten().map(|e| e.path()).collect()).unwrap_or_default();
        files.sort();
        return files
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "md" || e == "mdc" || e == "txt"))
            .filter_map(|p| {
                let name = p.strip_prefix(root).ok()?.display().to_string();
                context_file(root, &name).into_iter().next()
            })
            .collect();
    }
    std::fs::read_to_string(&full).map(|text| vec![(relative.to_string(), text)]).unwrap_or_default()
}

pub async fn complete(daemon: &Daemon, p: m::TaskParams) -> RpcResult<m::CompleteResult> {
    let (ws, entry) = entry(daemon, &p.root, &p.task_id).await?;
    let task = entry.task_id.clone();
    refuse_while_running(daemon, &ws, &task)?;
    let lock = daemon.jobs.task_lock(&ws, &task);
    let _guard = lock.lock().await;
    let (spec, entries) = projected_spec(daemon, &ws, &task)?;
    if spec.status() != Some(Status::Review) {
        return Err(RpcError::new(
            ErrorKind::InvalidState,
            format!("complete requires task status review; {task} is {}", spec.front.status),
        ));
    }
    match review::completion_authority(&entries) {
        Authority::Valid { provider, review_entry, .. } => {
            record(daemon, &ws, &task, vec![LedgerEvent::Complete { reason: "task completed".into() }], "command:complete")?;
            let path = ws.index.read().expect("index").get(&task).map(|e| ws.relative(&e.path)).unwrap_or_default();
            Ok(m::CompleteResult { task_id: task, status: "completed".into(), path, provider, review_entry })
        }
        Authority::Invalid { reason } => Err(RpcError::new(ErrorKind::InvalidState, format!("cannot complete {task}: {reason}"))
            .with_hint(format!("a passing review from codex, claude, gemini, command or an audited human override is needed: `scafld review {task}`"))),
    }
}
