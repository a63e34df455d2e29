//! Execution commands: approve, build (waiting on its job with progress), fail, cancel,
//! session, complete, and the job family.

use std::fmt::Write as _;
use std::time::Instant;

use std::os::unix::ffi::OsStringExt as _;

use scafld_protocol::methods::{self as m, BuildOutcome, CallerContext, EnvBytes, JobInfo};

use super::tasks::{call, session as connect_workspace};
use crate::cli::exit::{wait, workflow};
use crate::cli::output::{CliError, Style, note, padded};
use crate::cli::{ApproveArgs, ArchiveArgs, BuildArgs, Context, SessionArgs, TaskArg};

/// How long one `job.wait` call blocks before the client prints a heartbeat line.
const HEARTBEAT_SECONDS: f64 = 3.0;
/// How long the `build` call itself waits for its step before the heartbeat waits begin.
const FIRST_WAIT_SECONDS: f64 = 1.0;

/// The caller's working directory and environment, sent with every command that runs processes:
/// the variables that are text in `env`, those whose name or value is not UTF-8 as their bytes
/// in `env_bytes`, so the commands scafld runs see every one exactly as it is here.
pub(super) fn caller() -> CallerContext {
    let (env, bytes) = scafld_local::runner::own_environment();
    CallerContext {
        cwd: std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default(),
        env,
        client_exe: std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_default(),
        identity: caller_identity(),
        env_bytes: bytes
            .into_iter()
            .map(|(name, value)| EnvBytes { name: name.into_vec(), value: value.into_vec() })
            .collect(),
        umask: Some(own_umask()),
    }
}

/// This process's umask. Read by setting it and putting it back at once: the client runs
/// nothing meanwhile that creates a file.
fn own_umask() -> u32 {
    use nix::sys::stat::{Mode, umask};
    let mask = umask(Mode::from_bits_truncate(0o077));
    umask(mask);
    mask.bits() & 0o777
}

/// [`caller`] for a call that starts reviewers: they get the environment as text only (a
/// session keeps it as text for a restart), so each variable that is not UTF-8 is named on
/// stderr rather than left out unsaid.
pub(super) fn caller_for_reviewers() -> CallerContext {
    caller_for_providers("reviewers")
}

/// [`caller`] for a call that may start providers (reviewers, a delegated harden's), `to`
/// naming them: a provider gets the environment as text only, so each variable that is not
/// UTF-8 is named on stderr, the one place that says so.
pub(super) fn caller_for_providers(to: &str) -> CallerContext {
    let caller = caller();
    warn_unpassed(&caller, to);
    caller
}

/// Name on stderr each variable of `caller` that is not passed to `to` (a provider gets the
/// environment as text): its name or value is not UTF-8.
pub(super) fn warn_unpassed(caller: &CallerContext, to: &str) {
    for var in &caller.env_bytes {
        let part = if std::str::from_utf8(&var.name).is_err() { "name" } else { "value" };
        note(&format!(
            "warning: {} is not passed to {to}: its {part} is not UTF-8 (the commands a build runs get it byte for byte)",
            String::from_utf8_lossy(&var.name)
        ));
    }
}

/// Who is calling, as stable across this caller's commands as can be told: `SCAFLD_CALLER_ID`
/// when set, else the host agent's own session id (every command an agent runs carries it),
/// else the terminal, else the process session. Two agents in one repository thus get
/// different identities, and one agent keeps its own across commands.
pub(super) fn caller_identity() -> String {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    if let Some(id) = var("SCAFLD_CALLER_ID") {
        return format!("id:{id}");
    }
    for (host, name) in
        [("claude", "CLAUDE_CODE_SESSION_ID"), ("codex", "CODEX_THREAD_ID"), ("codex", "CODEX_SESSION_ID")]
    {
        if let Some(id) = var(name) {
            return format!("{host}:{id}");
        }
    }
    for fd in 0..3 {
        if let Ok(target) = std::fs::read_link(format!("/proc/self/fd/{fd}"))
            && (target.starts_with("/dev/pts/") || target.starts_with("/dev/tty"))
        {
            return format!("tty:{}", target.display());
        }
    }
    nix::unistd::getsid(None).map(|sid| format!("sid:{sid}")).unwrap_or_default()
}

pub fn approve(ctx: &Context, args: &ApproveArgs) -> Result<u8, CliError> {
    let task_id = args.task.resolve()?;
    let (root, mut conn) = connect_workspace(ctx)?;
    let params = m::ApproveParams { root, task_id, reason: args.reason.clone(), amend: args.amend };
    let r = call::<m::TaskApprove>(&mut conn, &params)?;
    ctx.out.success(&r, || {
        let note = r.note.as_ref().map(|note| format!("\nnote: {note}")).unwrap_or_default();
        if args.amend {
            // A head only when the baseline was recorded again (its commit was gone).
            let what = match &r.head {
                Some(head) => {
                    format!("recorded a new approval baseline for {} at {}", r.task_id, head.get(..12).unwrap_or(head))
                }
                None => format!("amended the approved contract of {}", r.task_id),
            };
            return format!("{what} (reason recorded)\nnext: {}{note}", r.next_command);
        }
        let mut text = format!("approved {} ({})\n", r.task_id, r.path);
        let head = r.head.as_deref().map(|h| &h[..h.len().min(12)]).unwrap_or("no commits yet");
        let _ = writeln!(text, "baseline: HEAD {head}, {} dirty or untracked path(s)", r.baseline_paths);
        if r.harden_override {
            let _ = writeln!(
                text,
                "{}: approved without a passed harden round (reason recorded)",
                ctx.out.paint("override", Style::Bad)
            );
        }
        for warning in &r.scope_warnings {
            let _ = writeln!(text, "{}: {warning}", ctx.out.paint("warning", Style::Bad));
        }
        let _ = write!(text, "next: {}{note}", r.next_command);
        text
    });
    Ok(workflow::OK)
}

pub fn build(ctx: &Context, args: &BuildArgs) -> Result<u8, CliError> {
    let task_id = args.task.resolve()?;
    let (root, mut conn) = connect_workspace(ctx)?;
    let manual = match (&args.criterion, args.disposition, &args.reason) {
        (Some(criterion_id), Some(disposition), Some(reason)) => Some(m::ManualEvidence {
            criterion_id: criterion_id.clone(),
            disposition,
            reason: reason.clone(),
            evidence_digest: args.evidence_digest.clone(),
            actor: args.actor.clone(),
        }),
        _ => None,
    };
    // Most steps end within the first wait, answered by the build call itself.
    let wait_seconds = (!args.detach).then_some(FIRST_WAIT_SECONDS);
    let params = m::BuildParams { root, task_id: task_id.clone(), caller: caller(), manual, wait_seconds };
    // The heartbeat's elapsed time counts the build call's own wait.
    let t0 = Instant::now();
    let started = call::<m::TaskBuild>(&mut conn, &params)?;
    super::tasks::say_warnings(ctx, &started.warnings);
    if started.attached
        && let Some(job_id) = &started.job_id
    {
        note(&format!("scafld: a build of {task_id} is already running; attached to job {job_id}"));
    }
    if let Some(outcome) = started.outcome {
        return Ok(print_outcome(ctx, &outcome));
    }
    let job_id = started.job_id.ok_or_else(|| {
        CliError::new("internal", "the daemon returned neither a job nor an outcome", workflow::RUNTIME)
    })?;
    if args.detach {
        ctx.out
            .success(&serde_json::json!({"task_id": task_id, "job_id": job_id, "attached": started.attached}), || {
                format!(
                    "{job_id}\nfollow it: scafld job wait {job_id} (bounded, repeatable), scafld job status {job_id}, or scafld job cancel {job_id}"
                )
            });
        return Ok(workflow::OK);
    }
    loop {
        let info = call::<m::JobWait>(
            &mut conn,
            &m::JobWaitParams { job_id: job_id.clone(), timeout_seconds: HEARTBEAT_SECONDS },
        )?;
        if !info.finished {
            if !ctx.out.json {
                let activity = info.activity.as_deref().unwrap_or(info.state.as_str());
                ctx.out
                    .eprint_human(&format!("scafld build {task_id}: {activity} (elapsed {}s)", t0.elapsed().as_secs()));
            }
            continue;
        }
        return match &info.outcome {
            Some(outcome) => Ok(print_outcome(ctx, outcome)),
            None => {
                let code = if info.state == m::JobState::Cancelled { workflow::CANCELLED } else { workflow::RUNTIME };
                let reason = info.reason.clone().unwrap_or_else(|| info.state.to_string());
                Err(CliError::new(
                    info.state.as_str(),
                    format!("build job {} ended {}: {reason}", info.job_id, info.state),
                    code,
                ))
            }
        };
    }
}

fn print_outcome(ctx: &Context, outcome: &BuildOutcome) -> u8 {
    let human = || {
        if outcome.criteria.is_empty() {
            // A step that ran nothing: a phase opened, or manual evidence recorded.
            return format!("build {}: {}\nnext: {}", outcome.task_id, outcome.message, outcome.next_command);
        }
        // A manual criterion waiting for a person is pending, not failed.
        let pending = outcome.criteria.iter().filter(|c| c.status == m::CriterionStatus::Pending).count();
        let mut text = format!(
            "build {}: {} - {} passed, {} failed{}\n",
            outcome.task_id,
            outcome.phase,
            outcome.passed,
            outcome.failed,
            if pending > 0 { format!(", {pending} pending") } else { String::new() }
        );
        for c in &outcome.criteria {
            let style = if c.status == m::CriterionStatus::Pass { Style::Good } else { Style::Bad };
            let mark = ctx.out.cell(c.status.as_str(), style, 4);
            let id = padded(&c.criterion_id, 12);
            let _ = writeln!(text, "  {mark} {id} {} ({}, {} ms)", c.command, c.reason, c.duration_ms);
            if c.status != "pass" {
                if !c.output_excerpt.trim().is_empty() {
                    for line in c.output_excerpt.trim_end().lines().rev().take(5).collect::<Vec<_>>().into_iter().rev()
                    {
                        let _ = writeln!(text, "       | {line}");
                    }
                }
                if !c.diagnostic.is_empty() {
                    let _ = writeln!(text, "       diagnostics: {}", c.diagnostic);
                }
            }
            // A record that could not be written is said whatever the result: a pass's too.
            if !c.diagnostic_error.is_empty() {
                let _ = writeln!(text, "       diagnostics not written: {}", c.diagnostic_error);
            }
        }
        let _ = writeln!(text, "status: {} ({})", outcome.status, outcome.message);
        let _ = write!(text, "next: {}", outcome.next_command);
        text
    };
    if outcome.status == "blocked" {
        let waiting: Vec<&str> = outcome
            .criteria
            .iter()
            .filter(|c| c.status == m::CriterionStatus::Pending)
            .map(|c| c.criterion_id.as_str())
            .collect();
        // Held up only by manual criteria: nothing failed, a person's evidence is due.
        let error = if outcome.failed == 0 && !waiting.is_empty() {
            CliError::new(
                "awaiting_manual_evidence",
                format!(
                    "{}: {} waits for a person's evidence of {}",
                    outcome.task_id,
                    outcome.phase,
                    waiting.join(", ")
                ),
                workflow::VALIDATION,
            )
            .with_hint(format!("once checked: `{}`", outcome.next_command))
        } else {
            CliError::new(
                "acceptance_failed",
                format!("{}: {} acceptance failed", outcome.task_id, outcome.phase),
                workflow::VALIDATION,
            )
            .with_hint(format!(
                "repair it (`scafld handoff {}`), then run `scafld build {}` again",
                outcome.task_id, outcome.task_id
            ))
        };
        if ctx.out.json {
            ctx.out.failure(&error, serde_json::to_value(outcome).ok());
        } else {
            ctx.out.print_human(&human());
        }
        return workflow::VALIDATION;
    }
    ctx.out.success(outcome, human);
    workflow::OK
}

pub fn archive(ctx: &Context, args: &ArchiveArgs, failed: bool) -> Result<u8, CliError> {
    let task_id = args.task.resolve()?;
    let (root, mut conn) = connect_workspace(ctx)?;
    // The original tool's default: the command's name. A reason given blank is still refused
    // by the daemon (a typo, not a choice).
    let reason = args.reason.clone().unwrap_or_else(|| if failed { "fail" } else { "cancel" }.to_string());
    let params = m::ReasonParams { root, task_id, reason };
    let r = if failed { call::<m::TaskFail>(&mut conn, &params)? } else { call::<m::TaskCancel>(&mut conn, &params)? };
    ctx.out.success(&r, || {
        let note = r.note.as_ref().map(|note| format!("\nnote: {note}")).unwrap_or_default();
        match r.spec_missing {
            true => format!(
                "{}: {} (recorded in the ledger; the spec file is missing, so nothing was written to .scafld/specs: a file put back later is archived by `scafld reconcile {}`){note}",
                r.task_id, r.status, r.task_id
            ),
            false => format!("{}: {} ({}){note}", r.task_id, r.status, r.path),
        }
    });
    Ok(workflow::OK)
}

pub fn session(ctx: &Context, args: &SessionArgs) -> Result<u8, CliError> {
    let task_id = args.task.resolve()?;
    let (root, mut conn) = connect_workspace(ctx)?;
    // The flag alone asks for the default path, which the wire spells as an empty string.
    let export = args.export.as_ref().map(|path| match path {
        None => String::new(),
        Some(p) if std::path::Path::new(p).is_absolute() => p.clone(),
        Some(p) => std::env::current_dir().map(|d| d.join(p).display().to_string()).unwrap_or_else(|_| p.clone()),
    });
    let params = m::SessionParams { root, task_id: task_id.clone(), export, force: args.force };
    let r = conn.call::<m::TaskSession>(&params).map_err(|mut e| {
        // The whole ledger is one reply (an export's reply holds none of it): past the cap it
        // cannot be shown.
        if let (true, scafld_client::ClientError::Rpc { data, .. }) = (scafld_client::connection::is_oversized_response(&e), &mut e) {
            data.message = format!("the ledger of {task_id} is too large to show: {}", data.message);
            data.hint = Some(format!(
                "read it from a file: `scafld session {task_id} --export PATH` writes it there (the default is .scafld/runs/{task_id}/ledger.json)"
            ));
        }
        crate::cli::daemon_control::rpc_error(e)
    })?;
    ctx.out.success(&r, || {
        let mut text = String::new();
        for e in r.entries.iter().flatten() {
            let kind = e["type"].as_str().unwrap_or("?");
            let detail = [e.get("phase_id"), e.get("criterion_id"), e.get("status"), e.get("state")]
                .iter()
                .flatten()
                .filter_map(|v| v.as_str())
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(" ");
            let reason = e["reason"].as_str().unwrap_or("");
            // The number itself: a JSON value's Display ignores the width.
            let seq = padded(&e["seq"].as_u64().map_or_else(|| e["seq"].to_string(), |n| n.to_string()), 4);
            let (kind, detail) = (padded(kind, 18), padded(&detail, 24));
            let _ = writeln!(text, "entry-{seq} {}  {kind} {detail} {reason}", e["recorded_at"].as_str().unwrap_or(""));
        }
        match (&r.exported, r.exported_entries) {
            (Some(path), Some(1)) => text.push_str(&format!("exported 1 entry to {path}")),
            (Some(path), Some(count)) => text.push_str(&format!("exported {count} entries to {path}")),
            // A daemon that does not say how many it wrote (an older one): no count is made up.
            (Some(path), None) => {
                text.push_str(&format!("exported the ledger to {path} (the daemon did not say how many entries)"))
            }
            (None, _) if r.entries.as_ref().is_none_or(Vec::is_empty) => text.push_str("no ledger entries yet"),
            (None, _) => {}
        }
        text.trim_end().to_string()
    });
    Ok(workflow::OK)
}

fn job_line(j: &JobInfo) -> String {
    format!(
        "{}  {:<10} {:<10} {}  {}",
        j.job_id,
        j.state,
        j.kind,
        j.task_id,
        j.activity.as_deref().or(j.reason.as_deref()).unwrap_or("")
    )
}

pub fn job_list(ctx: &Context) -> Result<u8, CliError> {
    let (root, mut conn) = connect_workspace(ctx)?;
    let r = call::<m::JobList>(&mut conn, &m::JobListParams { root: Some(root) })?;
    ctx.out.success(&r, || {
        if r.jobs.is_empty() { "no jobs".into() } else { r.jobs.iter().map(job_line).collect::<Vec<_>>().join("\n") }
    });
    Ok(workflow::OK)
}

pub fn job_status(ctx: &Context, job_id: &str) -> Result<u8, CliError> {
    let mut conn = ctx.connect()?;
    let j = call::<m::JobStatus>(&mut conn, &m::JobParams { job_id: job_id.into(), root: None })?;
    ctx.out.success(&j, || job_line(&j));
    Ok(workflow::OK)
}

pub fn job_wait(ctx: &Context, job_id: &str, timeout: f64) -> Result<u8, CliError> {
    if !(timeout.is_finite() && timeout >= 0.0) {
        return Err(CliError::usage("--timeout must be a non-negative number of seconds"));
    }
    let mut conn = ctx.connect()?;
    let j = call::<m::JobWait>(&mut conn, &m::JobWaitParams { job_id: job_id.into(), timeout_seconds: timeout })?;
    let not_ok = match (j.finished, j.state.as_str()) {
        (false, _) => Some(
            CliError::new("still_running", format!("{} is still {}", j.job_id, j.state), wait::STILL_RUNNING)
                .with_hint(format!("wait again: `scafld job wait {}`", j.job_id)),
        ),
        (true, "succeeded") => None,
        (true, state) => {
            let why = j.reason.as_deref().map(|reason| format!(": {reason}")).unwrap_or_default();
            // Where to go on from: the review's outcome, else the task's next step.
            let hint = match (&j.session_key, j.task_id.as_str()) {
                (Some(key), _) => format!("`scafld review wait --session-key {key}` shows the review's outcome"),
                (None, "") => format!("`scafld job status {}` shows how it ended", j.job_id),
                (None, task) => {
                    format!("`scafld status {}` says what to do next", scafld_protocol::cli::shell_word(task))
                }
            };
            // Cancelled is no failure of the work; this family's exit code is still "not ok".
            let code = if j.state == m::JobState::Cancelled { "job_cancelled" } else { "job_failed" };
            Some(CliError::new(code, format!("{} ended {state}{why}", j.job_id), wait::FINISHED_FAILED).with_hint(hint))
        }
    };
    match &not_ok {
        // The envelope says `ok` only when the exit code does.
        Some(error) if ctx.out.json => ctx.out.failure(error, serde_json::to_value(&j).ok()),
        Some(CliError { hint: Some(hint), .. }) => ctx.out.success(&j, || format!("{}\nnext: {hint}", job_line(&j))),
        _ => ctx.out.success(&j, || job_line(&j)),
    }
    Ok(not_ok.map_or(wait::FINISHED_OK, |e| e.exit_code))
}

pub fn job_cancel(ctx: &Context, job_id: &str) -> Result<u8, CliError> {
    // Only a job of the workspace it is run in (the daemon names another's, and where to
    // cancel it); outside any workspace, any job.
    let root = match crate::cli::workspace::find_root(ctx.global.root.as_deref()) {
        Ok(root) => Some(root.display().to_string()),
        Err(e) if ctx.global.root.is_some() => return Err(e),
        Err(_) => None,
    };
    let mut conn = ctx.connect()?;
    let j = call::<m::JobCancel>(&mut conn, &m::JobParams { job_id: job_id.into(), root })?;
    // A job that had finished before the call is the daemon's refusal (exit 1); one that ended
    // while the call was on its way is said as it ended.
    ctx.out.success(&j, || match (j.finished, j.state) {
        (false, state) => format!("cancelling {} ({state})", j.job_id),
        (true, m::JobState::Cancelled) => format!("cancelled {}", j.job_id),
        (true, state) => format!("{} finished ({state}) before the cancel reached it", j.job_id),
    });
    Ok(workflow::OK)
}

pub fn complete(ctx: &Context, task: &TaskArg) -> Result<u8, CliError> {
    let task_id = task.resolve()?;
    let (root, mut conn) = connect_workspace(ctx)?;
    let r = call::<m::TaskComplete>(&mut conn, &m::TaskParams { root, task_id })?;
    ctx.out.success(&r, || {
        let note = r.note.as_ref().map(|note| format!("\nnote: {note}")).unwrap_or_default();
        format!("completed {} ({}); authority: review {} by {}{note}", r.task_id, r.path, r.review_entry, r.provider)
    });
    Ok(workflow::OK)
}
