//! The review family: the task gate (`review <task>`), a git range (`review --diff`), the
//! spawn/wait surface (`--detach`, `wait`, `retry`), `status`, and manual `accept`/`reject`.

use std::fmt::Write as _;
use std::time::Instant;

use scafld_client::Connection;
use scafld_protocol::methods::{self as m, SpawnResult, WaitResult};
use scafld_protocol::vocab::{Decision, GateState};

use super::exec::caller_for_reviewers;
use super::tasks::{call, findings_text, session as connect_workspace};
use super::template;
use crate::cli::exit::{spawn_wait, workflow};
use crate::cli::output::{CliError, Style, note};
use crate::cli::{Context, ReasonArgs, ReviewArgs, ReviewCommand, TaskArg, TemplateRunArgs};
use scafld_client::terminal::{one_line, quoted};

/// Seconds between the "running" lines a waiting review prints.
const HEARTBEAT_SECONDS: f64 = 15.0;
/// How often a waiting review looks for new provider events.
const POLL_SECONDS: f64 = 1.0;

pub fn review(ctx: &Context, args: &ReviewArgs) -> Result<u8, CliError> {
    match &args.command {
        Some(ReviewCommand::Wait { session_key, timeout }) => wait(ctx, session_key.clone(), *timeout),
        Some(ReviewCommand::Retry { session_key }) => retry(ctx, session_key),
        Some(ReviewCommand::Status { task, session_key }) => status(ctx, task, session_key.clone()),
        Some(ReviewCommand::Accept(reason)) => decide(ctx, reason, Decision::Accept),
        Some(ReviewCommand::Reject(reason)) => decide(ctx, reason, Decision::Reject),
        Some(ReviewCommand::List) => template::list(ctx),
        Some(ReviewCommand::History) => template::history(ctx),
        Some(ReviewCommand::Result { session_key, timeout, output, force }) => {
            template::result(ctx, session_key.clone(), *timeout, output, *force)
        }
        Some(ReviewCommand::Arch { input, against, run }) | Some(ReviewCommand::Tasks { input, against, run }) => {
            let name = if matches!(args.command, Some(ReviewCommand::Arch { .. })) { "arch" } else { "tasks" };
            let inputs = [("input".to_string(), input.clone()), ("against".to_string(), against.clone())].into();
            note_task_collision(ctx, name);
            template::run(ctx, name, inputs, run)
        }
        Some(ReviewCommand::Code { files, diff, run }) => {
            let mut inputs = std::collections::BTreeMap::new();
            if let Some(files) = files {
                inputs.insert("files".to_string(), files.clone());
            }
            if let Some(diff) = diff {
                inputs.insert("diff".to_string(), diff.clone());
            }
            note_task_collision(ctx, "code");
            template::run(ctx, "code", inputs, run)
        }
        Some(ReviewCommand::Run { template: name, run }) => template::run(ctx, name, Default::default(), run),
        None if args.diff.is_some() => diff(ctx, args),
        None => match user_template(ctx, args)? {
            Some(name) => {
                let run = TemplateRunArgs {
                    inputs: args.inputs.clone(),
                    provider: args.provider.clone(),
                    reviewers: args.reviewers.clone(),
                    provider_command: args.provider_command.clone(),
                    cwd: args.cwd.clone(),
                    detach: args.detach,
                    output: args.output.clone(),
                    force: args.force,
                };
                note_task_collision(ctx, &name);
                template::run(ctx, &name, Default::default(), &run)
            }
            None => task_review(ctx, args),
        },
    }
}

/// The positional word names a template (not a task) when it is one of the workspace's
/// templates; `--task` always means a task.
fn user_template(ctx: &Context, args: &ReviewArgs) -> Result<Option<String>, CliError> {
    let Some(word) = args.task.task_id.clone() else { return Ok(None) };
    if !args.inputs.is_empty() {
        return Ok(Some(word));
    }
    // Built-in templates are subcommands, so only a user template can match; without any user
    // template file there is nothing to ask the daemon.
    let Ok(root) = crate::cli::workspace::find_root(ctx.global.root.as_deref()) else { return Ok(None) };
    let has_user_templates = std::fs::read_dir(root.join(".scafld/templates"))
        .map(|dir| dir.flatten().any(|e| e.path().extension().is_some_and(|x| x == "yaml" || x == "yml")))
        .unwrap_or(false);
    if !has_user_templates {
        return Ok(None);
    }
    let Ok((root, mut conn)) = connect_workspace(ctx) else { return Ok(None) };
    let listed = call::<m::ReviewTemplates>(&mut conn, &m::WorkspaceRootParams { root });
    Ok(listed.ok().filter(|l| l.templates.iter().any(|t| t.name == word)).map(|_| word))
}

/// Say so when a template name is also a task of the workspace.
fn note_task_collision(ctx: &Context, name: &str) {
    let Ok((root, mut conn)) = connect_workspace(ctx) else { return };
    if call::<m::TaskStatus>(&mut conn, &m::StatusParams::plain(m::TaskParams { root, task_id: name.to_string() }))
        .is_ok()
    {
        note(&format!(
            "scafld: note: `{name}` is read as the review template; `scafld review --task {name}` reviews the task `{name}`"
        ));
    }
}

/// Errors of the spawn/wait family keep its exit table: usage 64; otherwise `otherwise`.
fn family(error: CliError, otherwise: u8) -> CliError {
    crate::cli::exit::in_family(error, crate::cli::exit::Family::SpawnWait { otherwise })
}

fn task_review(ctx: &Context, args: &ReviewArgs) -> Result<u8, CliError> {
    let task_id = args.task.resolve()?;
    let (root, mut conn) =
        connect_workspace(ctx).map_err(|e| if args.detach { family(e, spawn_wait::FAIL) } else { e })?;
    let params = m::TaskReviewParams {
        root: root.clone(),
        task_id,
        caller: caller_for_reviewers(),
        provider: args.provider.clone(),
        provider_command: crate::cli::input::provider_command(args.provider_command.as_deref()),
        model: args.model.clone(),
        codex_reasoning: args.codex_reasoning.clone(),
        human_reviewed: args.human_reviewed,
        reason: args.reason.clone(),
        review_depth: args.review_depth.clone(),
        max_findings: args.max_findings,
        min_attack_angles: args.min_attack_angles,
        // Relative to the folder it was typed in, sent relative to the workspace.
        review_scope: crate::cli::workspace::typed_paths(
            std::path::Path::new(&root),
            "--review-scope",
            &args.review_scope,
        )
        .map_err(|e| if args.detach { family(e, spawn_wait::FAIL) } else { e })?,
        mode: args.mode,
        print_context: args.print_context,
        force: args.force,
        reviewers: args.reviewers.clone(),
        approval: args.approval,
    };
    let task_id = params.task_id.clone();
    let r = call::<m::TaskReview>(&mut conn, &params)
        .map_err(|e| if args.detach { family(e, spawn_wait::FAIL) } else { e })?;
    if let Some(context) = &r.context {
        if ctx.out.json {
            ctx.out.success(&r, String::new);
        } else {
            print!("{context}");
        }
        return Ok(workflow::OK);
    }
    let Some(spawned) = r.session.clone() else { return gate_result(ctx, &r) };
    if args.detach {
        return Ok(spawn_output(ctx, &spawned));
    }
    let result = follow(ctx, &mut conn, &root, &task_id, &spawned)?;
    match result.review {
        Some(review) => gate_result(ctx, &review),
        None => {
            let message = if result.parse_errors.is_empty() {
                format!("{task_id}: the review gate has no verdict ({})", result.outcome)
            } else {
                format!("{task_id}: the review produced no verdict: {}", result.parse_errors.join("; "))
            };
            let unrecorded = result.gate == Some(GateState::Unrecorded);
            let message = if unrecorded {
                format!(
                    "{task_id}: the reviewers answered, but their verdict could not be recorded, so none is on record: {}",
                    result.parse_errors.join("; ")
                )
            } else {
                message
            };
            let hint = match wait_hint(&result) {
                Some(hint) if !unrecorded && result.outcome != m::Outcome::NoReviewers => {
                    format!("{hint}; diagnostics are under .scafld/runs/{task_id}/diagnostics/")
                }
                Some(hint) => hint,
                None => format!("see `scafld review status --session-key {}`", result.session_key),
            };
            let error = CliError::new("review_failed", message, workflow::REVIEW_GATE).with_hint(hint);
            ctx.out.failure(&error, serde_json::to_value(&result).ok());
            Ok(workflow::REVIEW_GATE)
        }
    }
}

/// Wait for a session with short bounded waits, printing reviewer activity and a running
/// line every 15 s on stderr.
pub(super) fn follow(
    ctx: &Context,
    conn: &mut Connection,
    root: &str,
    label: &str,
    spawned: &SpawnResult,
) -> Result<WaitResult, CliError> {
    let t0 = Instant::now();
    let mut last_line = Instant::now();
    let mut last_activity: Vec<Option<String>> = vec![None; spawned.job_ids.len()];
    if !ctx.out.json {
        note(&format!(
            "scafld review {label}: started session {} ({})",
            spawned.session_key,
            if spawned.reviewers_spawned.is_empty() {
                "no reviewers".into()
            } else {
                spawned.reviewers_spawned.join(", ")
            }
        ));
    }
    loop {
        let params = m::ReviewWaitParams {
            root: root.to_string(),
            session_key: Some(spawned.session_key.clone()),
            timeout_seconds: POLL_SECONDS,
            caller_identity: String::new(),
        };
        let result = call::<m::ReviewWait>(conn, &params)?;
        if result.outcome != m::Outcome::Pending {
            return Ok(result);
        }
        if ctx.out.json {
            continue;
        }
        let mut changed = false;
        for (i, job_id) in spawned.job_ids.iter().enumerate() {
            let Ok(info) = call::<m::JobStatus>(conn, &m::JobParams { job_id: job_id.clone(), root: None }) else {
                continue;
            };
            if info.activity.is_some() && info.activity != last_activity[i] {
                note(&format!(
                    "scafld review {label}: {} elapsed={}s",
                    info.activity.as_deref().unwrap_or_default(),
                    t0.elapsed().as_secs()
                ));
                changed = true;
            }
            last_activity[i] = info.activity;
        }
        if changed {
            last_line = Instant::now();
        } else if last_line.elapsed().as_secs_f64() >= HEARTBEAT_SECONDS {
            note(&format!("scafld review {label}: running elapsed={}s", t0.elapsed().as_secs()));
            last_line = Instant::now();
        }
    }
}

/// The task gate's verdict with workflow exit codes (0 pass or awaiting approval, 4 fail).
fn gate_result(ctx: &Context, r: &m::TaskReviewResult) -> Result<u8, CliError> {
    let human = || {
        let mut text = format!("review {}: {} ({}, {} mode)\n", r.task_id, r.verdict, r.provider, r.mode);
        // The reviewer's words, indented: none of its lines passes for one of ours.
        if !r.summary.is_empty() {
            let _ = writeln!(text, "  {}", quoted(&r.summary, "  "));
        }
        if r.gate == Some(GateState::AwaitingApproval) {
            let _ = writeln!(text, "proposed verdict {} awaits human approval", r.verdict);
        }
        text.push_str(&findings_text(&r.findings));
        let _ = write!(text, "next: {}", r.next_command);
        text
    };
    if r.verdict != "pass" && r.gate != Some(GateState::AwaitingApproval) {
        let error = CliError::new(
            "review_failed",
            format!("{}: the review gate failed with {} open blocker(s)", r.task_id, r.open_blockers),
            workflow::REVIEW_GATE,
        )
        .with_hint(format!(
            "repair the findings, rerun acceptance with `scafld build {}`, then review again",
            r.task_id
        ));
        if ctx.out.json {
            ctx.out.failure(&error, serde_json::to_value(r).ok());
        } else {
            ctx.out.print_human(&human());
        }
        return Ok(workflow::REVIEW_GATE);
    }
    ctx.out.success(r, human);
    Ok(workflow::OK)
}

fn diff(ctx: &Context, args: &ReviewArgs) -> Result<u8, CliError> {
    let range = args.diff.clone().unwrap_or_default();
    if range.split_once("..").is_none_or(|(b, h)| b.is_empty() || h.is_empty() || h.starts_with('.')) {
        return Err(CliError::new("usage", format!("--diff {range:?} is not a BASE..HEAD range"), spawn_wait::USAGE));
    }
    let context = match &args.context_file {
        Some(path) => Some(
            crate::cli::input::read_text("--context-file", path, m::MAX_CONTEXT_BYTES).map_err(|why| {
                CliError::new("usage", why, spawn_wait::USAGE).with_hint(
                    "name a readable text file with what the reviewers should know about the range, or leave --context-file out",
                )
            })?,
        ),
        None => None,
    };
    let root = crate::cli::workspace::find_review_root(ctx.global.root.as_deref())
        .map_err(|e| family(e, spawn_wait::FAIL))?
        .display()
        .to_string();
    let mut conn = ctx.connect().map_err(|e| family(e, spawn_wait::FAIL))?;
    let params = m::DiffReviewParams {
        root: root.clone(),
        range: range.clone(),
        context,
        reviewers: args.reviewers.clone(),
        provider: args.provider.clone(),
        provider_command: crate::cli::input::provider_command(args.provider_command.as_deref()),
        model: args.model.clone(),
        codex_reasoning: args.codex_reasoning.clone(),
        caller: caller_for_reviewers(),
    };
    let spawned = call::<m::ReviewDiff>(&mut conn, &params).map_err(|e| family(e, spawn_wait::FAIL))?;
    if let Some(kept_in) = &spawned.kept_in {
        note(&format!("scafld: {root} has no .scafld/; this range review's packet and report are kept in {kept_in}"));
    }
    if args.detach {
        return Ok(spawn_output(ctx, &spawned));
    }
    let result = follow(ctx, &mut conn, &root, &range, &spawned).map_err(|e| family(e, spawn_wait::INTERNAL))?;
    Ok(wait_output(ctx, &result))
}

/// The spawn document; exit 0 when a reviewer was spawned (or an empty diff passed), 1 when not.
pub(super) fn spawn_output(ctx: &Context, spawned: &SpawnResult) -> u8 {
    let ok = !spawned.reviewers_spawned.is_empty() || spawned.resolved.is_some();
    let none = (!ok).then(|| CliError::new("no_reviewers", "no reviewer was spawned", spawn_wait::FAIL));
    ctx.out.document(spawned, none, || {
        let mut text = format!("session_key: {}\n", spawned.session_key);
        match &spawned.resolved {
            Some(verdict) => {
                let _ = writeln!(text, "resolved without reviewers: {verdict} (empty diff)");
            }
            None => {
                let _ = writeln!(text, "reviewers spawned: {}", or_none(&spawned.reviewers_spawned));
            }
        }
        let _ = write!(text, "reviewers missing: {}", or_none(&spawned.reviewers_missing));
        if ok {
            let _ = write!(text, "\nnext: scafld review wait --session-key {}", spawned.session_key);
        }
        text
    });
    if ok { spawn_wait::PASS } else { spawn_wait::FAIL }
}

fn or_none(items: &[String]) -> String {
    if items.is_empty() { "none".into() } else { items.join(", ") }
}

/// The root and a connection for the session commands, which work where range reviews run
/// (a workspace, or a plain git repository).
fn review_session(ctx: &Context) -> Result<(String, scafld_client::Connection), CliError> {
    let root = crate::cli::workspace::find_review_root(ctx.global.root.as_deref())?;
    Ok((root.display().to_string(), ctx.connect()?))
}

fn wait(ctx: &Context, session_key: Option<String>, timeout: f64) -> Result<u8, CliError> {
    if !(timeout.is_finite() && timeout >= 0.0) {
        return Err(CliError::new("usage", "--timeout must be a non-negative number of seconds", spawn_wait::USAGE));
    }
    let (root, mut conn) = review_session(ctx).map_err(|e| family(e, spawn_wait::INTERNAL))?;
    let given = session_key.is_some();
    let params = m::ReviewWaitParams {
        root,
        session_key,
        timeout_seconds: timeout,
        caller_identity: super::exec::caller_identity(),
    };
    let result = call::<m::ReviewWait>(&mut conn, &params).map_err(|e| family(e, spawn_wait::INTERNAL))?;
    if !given {
        note(&format!(
            "scafld: waiting on review session {} ({}; pass --session-key to choose)",
            result.session_key, result.chosen
        ));
    }
    Ok(wait_output(ctx, &result))
}

/// The wait document and its exit code.
fn wait_output(ctx: &Context, r: &WaitResult) -> u8 {
    let code = crate::cli::exit::for_outcome(r.outcome);
    let hint = wait_hint(r);
    let not_passed = (code != spawn_wait::PASS).then(|| {
        let message = match r.outcome {
            m::Outcome::Pending => format!("the review of {} is still running (the wait ended first)", r.session_key),
            outcome => format!("the review of {} ended {}", r.session_key, outcome.as_str()),
        };
        let error = CliError::new(format!("review_{}", r.outcome.as_str()), message, code);
        match &hint {
            Some(hint) => error.with_hint(hint.clone()),
            None => error,
        }
    });
    ctx.out.document(r, not_passed, || {
        let verdict = session_word(r);
        let painted = ctx.out.paint(verdict, if verdict == "PASS" { Style::Good } else { Style::Bad });
        let mut text = format!(
            "review session {} (iteration {}): {painted} [{}]\n",
            r.session_key, r.consensus.iteration, r.status
        );
        let unrecorded = r.gate == Some(GateState::Unrecorded);
        for (name, reviewer) in &r.reviewers {
            let state = match (&reviewer.verdict, &reviewer.error) {
                (Some(v), _) if unrecorded => {
                    format!("answered {v}, not recorded - {}", quoted(&reviewer.summary, "    "))
                }
                (Some(v), _) => format!("{v} - {}", quoted(&reviewer.summary, "    ")),
                // Stopped before it answered: no verdict, and no failure of the work either.
                (None, _) if reviewer.state == m::JobState::Cancelled => "cancelled (no verdict)".into(),
                (None, Some(e)) => format!("error: {}", quoted(e, "    ")),
                // Nothing runs a queued worker job but `scafld worker`; say so.
                (None, None) if name == "worker" && reviewer.state == m::JobState::Queued => {
                    "queued, waiting for `scafld worker` (or an agent's `scafld worker claim`) to take it".into()
                }
                (None, None) => reviewer.state.to_string(),
            };
            let _ = writeln!(text, "  {name}: {state}");
        }
        for issue in &r.issues {
            let priority = issue.priority.map(|p| format!("P{p}")).unwrap_or_else(|| "P?".into());
            let _ = writeln!(
                text,
                "  [{priority}] {}:{} {} ({})",
                one_line(&issue.file),
                issue.line_start,
                quoted(&issue.title, "    "),
                issue.reviewer
            );
        }
        if r.outcome == m::Outcome::Pending {
            let _ = writeln!(text, "still running");
        }
        if unrecorded {
            let _ = writeln!(text, "nothing is on record");
        }
        if let Some(hint) = &hint {
            let _ = writeln!(text, "next: {hint}");
        }
        text.trim_end().to_string()
    });
    code
}

/// What to do after a wait, where there is one thing to do: wait again for a review still
/// running, no reviewer could run (install
/// one, or name one that exists), a reviewer gave no verdict (for a task, the next step the
/// daemon gives, which alone decides between this session's retry and a new review once the
/// spec changed; for a range, its retry), or a task review came to a verdict (the task's next
/// step).
fn wait_hint(r: &WaitResult) -> Option<String> {
    if r.gate == Some(GateState::Unrecorded) {
        return Some(format!(
            "once the daemon can record again (a full disk: free space where it keeps its state; a moved workspace: put it back), `scafld review retry {}` records the answers",
            r.session_key
        ));
    }
    match r.outcome {
        m::Outcome::Pending => Some(format!("wait again: `scafld review wait --session-key {}`", r.session_key)),
        m::Outcome::NoReviewers => Some(
            "no reviewer could run: install codex, claude or gemini (`scafld doctor` checks them), or name reviewers \
             that exist with --reviewers, then start the review again"
                .to_string(),
        ),
        m::Outcome::ParseError | m::Outcome::Timeout | m::Outcome::Internal => match &r.next_action {
            Some(next) => Some(format!("`{}` ({})", next.command, next.reason)),
            None => Some(format!("retry the reviewers that gave no verdict: `scafld review retry {}`", r.session_key)),
        },
        // A task review's verdict: the task's next step, as `status` gives it.
        _ => r.review.as_ref().map(|review| review.next_command.clone()).filter(|c| !c.is_empty()),
    }
}

/// The session's word for a person. A session that came to no verdict (a reviewer cancelled,
/// timed out, crashed or answered garbage: retry the review) is said to have none, though the
/// wire's `consensus.verdict` keeps the seed-004 document's FAIL for it: nothing judged the work.
fn session_word(r: &WaitResult) -> &'static str {
    let cancelled = r.reviewers.values().any(|v| v.verdict.is_none() && v.state == m::JobState::Cancelled);
    if r.gate == Some(GateState::Unrecorded) {
        return "NOT RECORDED";
    }
    match r.outcome {
        m::Outcome::Pending => "PENDING",
        m::Outcome::ParseError | m::Outcome::Timeout | m::Outcome::Internal if cancelled => "CANCELLED (no verdict)",
        m::Outcome::ParseError | m::Outcome::Timeout | m::Outcome::Internal => "NO VERDICT",
        _ => r.consensus.verdict.map(|v| v.as_str()).unwrap_or("PENDING"),
    }
}

fn retry(ctx: &Context, session_key: &str) -> Result<u8, CliError> {
    let (root, mut conn) = review_session(ctx).map_err(|e| family(e, spawn_wait::FAIL))?;
    let params = m::ReviewRetryParams {
        root: root.clone(),
        session_key: session_key.to_string(),
        caller: caller_for_reviewers(),
    };
    let spawned = call::<m::ReviewRetry>(&mut conn, &params).map_err(|e| family(e, spawn_wait::FAIL))?;
    if spawned.reviewers_spawned.is_empty() && spawned.resolved.is_some() {
        // The answers a session already had were recorded now: show the settled session.
        let params = m::ReviewWaitParams {
            root,
            session_key: Some(spawned.session_key.clone()),
            timeout_seconds: 0.0,
            caller_identity: super::exec::caller_identity(),
        };
        let result = call::<m::ReviewWait>(&mut conn, &params).map_err(|e| family(e, spawn_wait::INTERNAL))?;
        return Ok(wait_output(ctx, &result));
    }
    Ok(spawn_output(ctx, &spawned))
}

fn status(ctx: &Context, task: &TaskArg, session_key: Option<String>) -> Result<u8, CliError> {
    let task_id =
        if session_key.is_some() { task.task_id.clone().or(task.task.clone()) } else { Some(task.resolve()?) };
    // A task's review is its workspace's, wherever below it (a nested repository too) one asks.
    let (root, mut conn) = match session_key {
        Some(_) => review_session(ctx)?,
        None => connect_workspace(ctx)?,
    };
    let r = call::<m::ReviewStatus>(&mut conn, &m::ReviewStatusParams { root, task_id, session_key })?;
    ctx.out.success(&r, || {
        let target = if r.task_id.is_empty() { r.range.clone() } else { r.task_id.clone() };
        let mut text = format!(
            "review of {target}: {} (session {}, iteration {}, approval {}), {} file(s)\n",
            r.state, r.session_key, r.iteration, r.approval, r.files_total
        );
        for p in &r.reviewers {
            let live = if p.liveness.is_empty() {
                String::new()
            } else {
                format!(" {} ({:.0}s since heartbeat)", p.liveness, p.heartbeat_age_seconds.unwrap_or_default())
            };
            let _ = writeln!(
                text,
                "  {} [{}] {} attempt {}{live}{}",
                p.reviewer,
                p.job_id,
                p.state,
                p.attempt,
                p.worker_id.as_deref().map(|w| format!(" worker {w}")).unwrap_or_default()
            );
            let _ = writeln!(
                text,
                "    phase {}: {}/{} files reviewed, {} finding(s) so far",
                p.phase, p.files_reviewed, r.files_total, p.findings_so_far
            );
            // The file it reads next, while it still reads: an ended reviewer reads nothing more.
            if let Some(next) = p.files_remaining.first().filter(|_| p.verdict.is_none() && !p.state.is_finished()) {
                let _ = writeln!(text, "    next: {next}");
            }
            if let Some(preflight) = &p.preflight {
                let _ = writeln!(text, "    preflight: {preflight}");
            }
            match (&p.verdict, &p.error) {
                (Some(v), _) if r.state == m::SessionState::Unrecorded => {
                    let _ = writeln!(text, "    answered {v}, not recorded");
                }
                (Some(v), _) => {
                    let _ = writeln!(text, "    verdict: {v}");
                }
                (None, Some(e)) => {
                    let _ = writeln!(text, "    error: {e}");
                }
                _ => {}
            }
        }
        if r.state == m::SessionState::Unrecorded {
            let _ = writeln!(
                text,
                "nothing is on record; once the daemon can write again, `scafld review retry {}` records the answers",
                r.session_key
            );
        }
        let _ = write!(text, "report: {}", r.report_path);
        text
    });
    Ok(workflow::OK)
}

fn decide(ctx: &Context, args: &ReasonArgs, decision: Decision) -> Result<u8, CliError> {
    let task_id = args.task.resolve()?;
    let (root, mut conn) = connect_workspace(ctx)?;
    let params = m::DecideParams { root, task_id, decision, reason: args.reason.clone() };
    let r = call::<m::ReviewDecide>(&mut conn, &params)?;
    ctx.out.success(&r, || {
        format!("{} {}: the review gate is {}\nnext: {}", r.decision, r.task_id, r.verdict, r.next_command)
    });
    Ok(workflow::OK)
}
