//! `scafld worker`: a reviewer worker. The loop claims review jobs, runs the provider process
//! the daemon prepared (in its own process group, heartbeating the lease), and submits what it
//! left. The subcommands let an agent do the same by hand, one prompt call at a time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use scafld_local::runner::{self, KillReason, RunRequest};
use scafld_protocol::methods::{self as m, Claim, Executable};
use tokio_util::sync::CancellationToken;

use super::exec::caller;
use super::tasks::call;
use crate::cli::daemon_control;
use crate::cli::exit::workflow;
use crate::cli::output::{CliError, note};
use crate::cli::{Context, LeaseArgs, WorkerArgs, WorkerCommand};

pub fn run(ctx: &Context, args: &WorkerArgs) -> Result<u8, CliError> {
    match &args.command {
        None => serve(ctx, args),
        Some(WorkerCommand::Claim { timeout, lease_seconds, provider, id }) => {
            claim_once(ctx, *timeout, *lease_seconds, provider, id.clone())
        }
        Some(WorkerCommand::Heartbeat(lease)) => {
            let mut conn = ctx.connect()?;
            let r = call::<m::WorkerHeartbeat>(&mut conn, &lease_params(lease)).map_err(|e| for_job(ctx, e))?;
            ctx.out.success(&r, || format!("{}: lease renewed for {:.0}s", r.job_id, r.lease_expires_in_seconds));
            Ok(workflow::OK)
        }
        Some(WorkerCommand::Checkpoint { lease, file, findings, phase }) => {
            let findings = findings.iter().map(|f| strict_json("--finding", f)).collect::<Result<Vec<_>, _>>()?;
            let mut conn = ctx.connect()?.with_results(None); // shown for the job's workspace (`job_caller`)
            let params = m::CheckpointParams {
                job_id: lease.job_id.clone(),
                lease_token: lease.lease.clone(),
                phase: phase.clone(),
                file: file.clone(),
                findings,
            };
            let mut r = call::<m::WorkerCheckpoint>(&mut conn, &params).map_err(|e| for_job(ctx, e))?;
            if !r.root.is_empty() {
                r.report_path = job_caller(ctx, &r.root).path(std::path::Path::new(&r.root), &r.report_path);
            }
            ctx.out.success(&r, || {
                format!(
                    "{}: {} file(s) reviewed, {} finding(s) so far, {} remaining{}\nreport: {}",
                    r.job_id,
                    r.files_reviewed,
                    r.findings_so_far,
                    r.files_remaining.len(),
                    r.files_remaining.first().map(|f| format!("; next {f}")).unwrap_or_default(),
                    r.report_path
                )
            });
            Ok(workflow::OK)
        }
        Some(WorkerCommand::Submit { lease, dossier }) => {
            // A reviewer's answer is capped on every channel as compact JSON: the file may hold
            // more in whitespace (indentation), up to a hard read limit, and is measured once parsed.
            let text = crate::cli::input::read_text("--dossier", dossier, DOSSIER_FILE_BYTES)
                .map_err(|e| {
                    CliError::usage(e).with_hint("pass --dossier FILE naming a readable ReviewDossier JSON file of at most 8 MiB as compact JSON; the lease is still yours")
                })?;
            let value = strict_json("--dossier", &text)?;
            let length = scafld_protocol::json::encoded_len(&value);
            if length > scafld_protocol::MAX_ANSWER_BYTES {
                let mib = |bytes: usize| format!("{:.1} MiB ({bytes} bytes)", bytes as f64 / f64::from(1 << 20));
                return Err(CliError::usage(format!(
                    "--dossier is {} as compact JSON, over the {} of a reviewer's answer; nothing was sent",
                    mib(length),
                    mib(scafld_protocol::MAX_ANSWER_BYTES)
                ))
                .with_hint("shorten the dossier (its summary, findings and evidence) and submit again; the lease is still yours"));
            }
            let mut conn = ctx.connect()?.with_results(None); // shown for the job's workspace (`job_caller`)
            let params = m::WorkerSubmitParams {
                job_id: lease.job_id.clone(),
                lease_token: lease.lease.clone(),
                dossier: Some(value),
                run: None,
                model: None,
                caller: caller(),
            };
            let mut r = call::<m::WorkerSubmit>(&mut conn, &params).map_err(|e| for_job(ctx, e))?;
            if !r.root.is_empty() {
                r.next_command = job_caller(ctx, &r.root).command(&r.next_command);
            }
            submitted(ctx, &r)
        }
        Some(WorkerCommand::Release(lease)) => {
            let mut conn = ctx.connect()?;
            let r = call::<m::WorkerRelease>(&mut conn, &lease_params(lease)).map_err(|e| for_job(ctx, e))?;
            ctx.out.success(&r, || format!("{}: released; it is queued again with its checkpoint", r.job_id));
            Ok(workflow::OK)
        }
    }
}

/// The most a `--dossier` file is read: four times the answer cap, room for whitespace around
/// an answer within the cap (measured as compact JSON, as on every channel).
const DOSSIER_FILE_BYTES: usize = 4 * scafld_protocol::MAX_ANSWER_BYTES;

/// Where the caller is against the workspace of the job it works on (not the folder's own
/// workspace: a worker claims, checkpoints and submits from anywhere).
fn job_caller(ctx: &Context, root: &str) -> crate::cli::runnable::Caller {
    let named = ctx.global.root.is_some() || std::env::var_os("SCAFLD_ROOT").is_some();
    crate::cli::runnable::Caller::of_workspace(std::path::Path::new(root), named)
}

/// An error about a job whose workspace the daemon named (`details.root`: a finished job): its
/// hint's commands made to run where this worker is, which may be outside that workspace.
fn for_job(ctx: &Context, mut error: CliError) -> CliError {
    if let Some(root) = error.details.as_ref().and_then(|d| d["root"].as_str()).filter(|r| !r.is_empty()) {
        let caller = job_caller(ctx, root);
        error.hint = error.hint.map(|hint| caller.prose(&hint));
    }
    error
}

/// What the review recorded for an accepted submission: the job's verdict and, once it settled
/// the session, the review gate (with why, when the gate is not that verdict).
fn recorded(r: &m::WorkerSubmitResult) -> String {
    match r.gate {
        Some(gate) if gate.as_str().eq_ignore_ascii_case(&r.verdict) => {
            format!("verdict {}, review gate {gate}", r.verdict)
        }
        Some(gate) => {
            let why = if r.gate_reason.is_empty() { String::new() } else { format!(": {}", r.gate_reason) };
            format!("review gate {gate}{why} (this reviewer's verdict: {})", r.verdict)
        }
        None => format!("verdict {} (the review waits for its other reviewers)", r.verdict),
    }
}

/// A `--dossier` or `--finding` read as strictly as the daemon reads a reviewer's answer: a key
/// given twice (the last copy a milder verdict, or `blocks_completion: false`) makes it read two
/// ways, and once parsed here the daemon could no longer see it.
fn strict_json(flag: &str, text: &str) -> Result<serde_json::Value, CliError> {
    scafld_protocol::json::from_str(text).map_err(|e| {
        CliError::usage(if scafld_protocol::json::is_repeated_key(&e) {
            format!("{flag} reads two ways: {e}; give each key once")
        } else {
            format!("{flag} is not JSON: {e}")
        })
        // Nothing was sent: the lease is untouched, and the same command with the JSON fixed runs.
        .with_hint(format!("fix the JSON {flag} gives and run the command again; the lease is still yours"))
    })
}

fn lease_params(lease: &LeaseArgs) -> m::LeaseParams {
    m::LeaseParams { job_id: lease.job_id.clone(), lease_token: lease.lease.clone() }
}

fn submitted(ctx: &Context, r: &m::WorkerSubmitResult) -> Result<u8, CliError> {
    // The answer settled the session, but the review could not be recorded: no gate stands.
    if r.accepted && matches!(r.gate, Some(m::GateState::Unrecorded | m::GateState::Internal)) {
        let error = CliError::new(
            "internal_error",
            format!("{}: submitted, but the review was not recorded: {}", r.job_id, r.gate_reason),
            workflow::RUNTIME,
        )
        .with_hint("`scafld review status` shows the session; once the cause is fixed, `scafld review retry <session>` records it");
        ctx.out.failure(&error, serde_json::to_value(r).ok());
        return Ok(workflow::RUNTIME);
    }
    if r.accepted {
        let submitted = if r.already_recorded { "already submitted (this answer counts once)" } else { "submitted" };
        ctx.out.success(r, || match r.next_command.as_str() {
            "" => format!("{}: {submitted}, {}", r.job_id, recorded(r)),
            next => format!("{}: {submitted}, {}\nnext: {next}", r.job_id, recorded(r)),
        });
        return Ok(workflow::OK);
    }
    let error = CliError::new(
        "submission_refused",
        format!("{}: the submission did not count: {}", r.job_id, r.problems.join("; ")),
        workflow::VALIDATION,
    )
    .with_hint("fix the dossier and submit again while the lease is yours");
    ctx.out.failure(&error, serde_json::to_value(r).ok());
    Ok(workflow::VALIDATION)
}

fn worker_id(explicit: Option<String>) -> String {
    explicit.or_else(|| std::env::var("SCAFLD_WORKER_ID").ok().filter(|v| !v.is_empty())).unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        format!("{}:{}", host.trim(), std::process::id())
    })
}

fn root_of(ctx: &Context, workspace: Option<&std::path::Path>) -> Result<Option<String>, CliError> {
    let explicit = workspace.or(ctx.global.root.as_deref());
    match explicit {
        Some(path) => Ok(Some(crate::cli::workspace::find_root(Some(path))?.display().to_string())),
        None => Ok(None),
    }
}

/// `worker claim`: one claim, printed with its briefing and packet.
fn claim_once(
    ctx: &Context,
    timeout: f64,
    lease_seconds: Option<u64>,
    provider: &str,
    id: Option<String>,
) -> Result<u8, CliError> {
    if !(timeout.is_finite() && timeout >= 0.0) {
        return Err(CliError::usage("--timeout must be a non-negative number of seconds"));
    }
    let root = root_of(ctx, None)?;
    let mut conn = ctx.connect()?;
    let params = m::ClaimParams {
        worker_id: worker_id(id),
        provider: provider.to_string(),
        provider_command: None,
        root,
        timeout_seconds: timeout,
        lease_seconds,
        caller: caller(),
    };
    let claim = call::<m::WorkerClaim>(&mut conn, &params)?;
    ctx.out.success(&claim, || match &claim {
        None => "no review job is queued".into(),
        Some(c) => format!("{}\n\n{}", briefing(c), c.packet),
    });
    Ok(workflow::OK)
}

/// What a claimer needs to know, in the shape of seed 003's resume briefing.
fn briefing(c: &Claim) -> String {
    let target = if c.task_id.is_empty() { format!("session {}", c.session_key) } else { c.task_id.clone() };
    let mut text = format!(
        "claimed {} ({target}), attempt {}\nlease token: {} ({} s; renew with `{}`)\n\
         answer: write a ReviewDossier JSON to FILE, then `{}` (or give the job back: `{}`)\npreflight: {}\n",
        c.job_id,
        c.attempt,
        c.lease_token,
        c.lease_seconds,
        c.commands.heartbeat,
        c.commands.next_command,
        c.commands.release,
        c.preflight
    );
    match &c.resume {
        Some(b) => {
            let findings: usize = b.reviewed.iter().map(|r| r.findings).sum();
            text.push_str(&format!(
                "Resuming review: phase {}\n  Progress: {}/{} files reviewed, {findings} findings so far\n  Files already reviewed:\n",
                b.phase,
                b.reviewed.len(),
                b.files_total
            ));
            for r in &b.reviewed {
                text.push_str(&format!("    {} ({} findings)\n", r.path, r.findings));
            }
            text.push_str("  Files remaining:\n");
            for f in &b.remaining {
                text.push_str(&format!("    {f}\n"));
            }
            text.push_str(&format!(
                "  Next: continue reviewing from {}\n",
                b.next_file.as_deref().unwrap_or("the report (every file is reviewed)")
            ));
        }
        None => {
            text.push_str(&format!("files to review ({}):\n", c.files.len()));
            for f in &c.files {
                text.push_str(&format!("  {f}\n"));
            }
        }
    }
    text.trim_end().to_string()
}

/// The automated loop: claim, run, submit; with --once, a single round.
fn serve(ctx: &Context, args: &WorkerArgs) -> Result<u8, CliError> {
    if args.provider == "agent" {
        return Err(CliError::usage(
            "the worker loop runs a provider (auto, codex, claude, gemini or command); an agent uses `scafld worker claim`",
        ));
    }
    if !(args.timeout.is_finite() && args.timeout >= 0.0) {
        return Err(CliError::usage("--timeout must be a non-negative number of seconds"));
    }
    // Refused before the loop starts (it would say it serves, then fail at its first job).
    if args.provider == "command" && args.provider_command.as_deref().is_none_or(|c| c.trim().is_empty()) {
        let why = "--provider command needs --provider-command CMD (packet on stdin, dossier on stdout)";
        let hint = "pass --provider-command CMD, or use --provider auto, which runs a workspace's configured \
                    review.external.command";
        return Err(CliError::usage(why).with_hint(hint));
    }
    let root = root_of(ctx, args.workspace.as_deref())?;
    let id = worker_id(args.id.clone());
    // The build this worker is: the `scafldd` beside it now, which it starts or replaces a
    // daemon of another build with; a daemon it reconnects to later must be that build.
    let own = crate::cli::daemon_control::own_daemon();
    let mut conn = ctx.connect()?.reconnecting(Some(daemon_control::worker_reconnect(ctx.paths()?, own.as_ref())));
    // What a provider orphans (a new session and a cleared environment) comes back to us, to
    // be killed with its run (`scafld_local::reaper`); without it, only its group and token.
    if let Err(e) = scafld_local::reaper::become_subreaper() {
        note(&format!(
            "scafld worker {id}: cannot become a child subreaper ({e}); a provider's process that leaves its group with a cleared environment may outlive its run"
        ));
    }
    if !ctx.out.json {
        note(&format!("scafld worker {id}: serving review jobs with {}", args.provider));
    }
    let mut served = Vec::new();
    let mut withheld_said: Option<String> = None;
    loop {
        let params = m::ClaimParams {
            worker_id: id.clone(),
            provider: args.provider.clone(),
            provider_command: crate::cli::input::provider_command(args.provider_command.as_deref()),
            root: root.clone(),
            timeout_seconds: args.timeout,
            lease_seconds: args.lease_seconds,
            caller: caller(),
        };
        let claimed = match call::<m::WorkerClaim>(&mut conn, &params) {
            Ok(claimed) => claimed,
            // A job queued but withheld from this worker (its agent built the task): as though
            // nothing were queued, once said why.
            Err(e) if e.details.as_ref().is_some_and(|d| d.get("withheld").is_some()) => {
                if !ctx.out.json && withheld_said.as_ref() != Some(&e.message) {
                    note(&format!("scafld worker {id}: {}", e.message));
                    withheld_said = Some(e.message);
                }
                None
            }
            // The daemon went away (a restart): keep serving once it is back, unless it came
            // back as another build, which waiting does not change.
            Err(e)
                if !args.once
                    && (e.exit_code == workflow::UNREACHABLE || e.code == "shutting_down")
                    && !daemon_control::is_other_build(&e) =>
            {
                note(&format!("scafld worker {id}: {}; reconnecting", e.message));
                std::thread::sleep(Duration::from_secs(1));
                if let Ok(again) = daemon_control::reconnect_worker(ctx.paths()?, own.as_ref()) {
                    conn = again;
                }
                continue;
            }
            Err(e) if daemon_control::is_other_build(&e) && e.hint.is_none() => {
                return Err(e.with_hint(
                    "restart the worker from the install whose daemon answers (run `scafld worker` again with the same flags)",
                ));
            }
            Err(e) => return Err(e),
        };
        let claimed_nothing = claimed.is_none();
        if let Some(claim) = claimed {
            if !ctx.out.json {
                note(&format!("scafld worker {id}: {}", briefing(&claim).lines().next().unwrap_or_default()));
            }
            let run = match execute(ctx, &claim, own.as_ref())? {
                Ran::Done(run) => run,
                Ran::Stopped(why) => {
                    if !ctx.out.json {
                        note(&format!(
                            "scafld worker {id}: {} not submitted: {why}; its provider was stopped",
                            claim.job_id
                        ));
                    }
                    if args.once {
                        break;
                    }
                    continue;
                }
            };
            let params = within_one_request(m::WorkerSubmitParams {
                job_id: claim.job_id.clone(),
                lease_token: claim.lease_token.clone(),
                dossier: None,
                run: Some(run),
                model: None,
                caller: caller(),
            });
            let mut submitted = call::<m::WorkerSubmit>(&mut conn, &params);
            if submitted.as_ref().is_err_and(|e| e.exit_code == workflow::UNREACHABLE)
                && let Ok(again) = daemon_control::reconnect_worker(ctx.paths()?, own.as_ref())
            {
                // The daemon restarted while the provider ran; the lease survived it.
                conn = again;
                submitted = call::<m::WorkerSubmit>(&mut conn, &params);
            }
            match submitted {
                Ok(r) => {
                    if !ctx.out.json {
                        let how = if r.accepted { recorded(&r) } else { r.problems.join("; ") };
                        note(&format!("scafld worker {id}: {} done: {how}", r.job_id));
                    }
                    served.push(r);
                }
                // The daemon is of another build now (replaced while the provider ran): it
                // takes nothing from this worker, release included, so the worker stops with
                // that error, said once (its hint names the restart and the job's lease).
                Err(e) if daemon_control::is_other_build(&e) => {
                    let message = format!("{} not submitted: {}", claim.job_id, e.message);
                    let hint = e.hint.clone().unwrap_or_else(|| {
                        "restart the worker from the install whose daemon answers (run `scafld worker` again with the same flags)".into()
                    });
                    return Err(CliError { message, hint: Some(hint), ..e });
                }
                Err(e) => {
                    note(&format!("scafld worker {id}: {} not submitted: {}", claim.job_id, e.message));
                    // Given back (while the lease still holds), for a worker that may finish it.
                    let lease = m::LeaseParams { job_id: claim.job_id.clone(), lease_token: claim.lease_token.clone() };
                    let _ = call::<m::WorkerRelease>(&mut conn, &lease);
                }
            }
        }
        // `--timeout 0` waits for nothing: the loop serves what is claimable now and stops at
        // the first claim that finds nothing (claiming again at once would spin).
        if args.once || (claimed_nothing && args.timeout == 0.0) {
            break;
        }
    }
    ctx.out.success(&served, || format!("served {} job(s)", served.len()));
    Ok(workflow::OK)
}

/// Run the provider invocation the daemon prepared with the shared runner: packet on stdin, own
/// process group that dies with this worker, lease heartbeats from a second connection, absolute
/// and idle timeouts.
fn execute(ctx: &Context, claim: &Claim, own: Option<&Executable>) -> Result<Ran, CliError> {
    let invocation = claim.invocation.clone().ok_or_else(|| CliError::usage("the claim carries no provider to run"))?;
    // Its own environment, a variable that is not UTF-8 included as it is.
    let (mut env, env_bytes) = scafld_local::runner::own_environment();
    env.extend(invocation.env.clone());
    env.insert("SCAFLD_TASK_ID".into(), claim.task_id.clone());
    let request = RunRequest {
        command: invocation.command.clone(),
        cwd: invocation.cwd.clone().into(),
        env,
        env_bytes,
        absolute_timeout: Duration::from_secs(invocation.timeout_seconds.max(1)),
        idle_timeout: (invocation.idle_timeout_seconds > 0)
            .then(|| Duration::from_secs(invocation.idle_timeout_seconds)),
        stdin: Some(claim.packet.clone().into_bytes()),
        on_stdout: None,
        idle_on_stdout: invocation.idle_on_stdout,
        stop_past_capture: invocation.stop_past_capture,
        // However this worker ends (even `kill -9`), its provider ends with it.
        die_with_parent: true,
        token: None,
        gate: None,
        umask: None,
    };
    let done = Arc::new(AtomicBool::new(false));
    let cancel = CancellationToken::new();
    let stopped: Arc<Mutex<Option<String>>> = Arc::default();
    // Not joined: it notices `done` within one wait and ends with its connection, and the
    // submission need not wait for that.
    std::thread::spawn({
        let (done, cancel, stopped) = (done.clone(), cancel.clone(), stopped.clone());
        let (paths, lease, own) = (ctx.paths()?.clone(), claim.lease_token.clone(), own.cloned());
        let (job_id, every) = (claim.job_id.clone(), Duration::from_secs((claim.lease_seconds / 3).max(1)));
        move || watch_lease(&paths, own.as_ref(), &job_id, &lease, every, &done, &cancel, &stopped)
    });
    // A current-thread runtime: the provider is spawned from this thread, which lives as long as
    // the worker, so the parent-death signal fires exactly when the worker dies.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::new("worker", format!("cannot start the runner: {e}"), workflow::RUNTIME))?;
    let outcome = runtime.block_on(runner::run(request, cancel, |_| {}));
    done.store(true, Ordering::SeqCst);
    if let Some(error) = outcome.start_error {
        return Err(CliError::new("worker", format!("cannot start the provider: {error}"), workflow::RUNTIME));
    }
    if outcome.kill_reason == Some(KillReason::Cancelled) {
        let why = stopped.lock().unwrap_or_else(|e| e.into_inner()).take().unwrap_or_else(|| "its lease ended".into());
        return Ok(Ran::Stopped(why));
    }
    let stderr = &outcome.stderr.bytes;
    let tail_start = stderr.len().saturating_sub(1200);
    // The end of stderr for the run's diagnostics file, within what one request may carry
    // beside stdout (the whole answer).
    let kept_start = stderr.len().saturating_sub(STDERR_SENT);
    Ok(Ran::Done(m::WorkerRun {
        exit_code: outcome.exit_code,
        stdout: String::from_utf8_lossy(&outcome.stdout.bytes).into_owned(),
        stdout_dropped: outcome.stdout.dropped,
        answer_file: invocation.answer_file.clone(),
        timed_out: matches!(outcome.kill_reason, Some(KillReason::AbsoluteTimeout | KillReason::IdleTimeout)),
        stderr_tail: String::from_utf8_lossy(&stderr[tail_start..]).into_owned(),
        stderr: String::from_utf8_lossy(&stderr[kept_start..]).into_owned(),
        stderr_dropped: outcome.stderr.dropped + kept_start as u64,
        kill_reason: outcome.kill_reason.map(|k| k.as_str().to_string()),
        duration_ms: u64::try_from(outcome.duration.as_millis()).unwrap_or(u64::MAX),
        silent_for_ms: u64::try_from(outcome.silent_for.as_millis()).unwrap_or(u64::MAX),
    }))
}

/// The most of a provider's stderr a worker sends for its diagnostics file: a request carries
/// stdout (up to the answer cap) too, and one request line is at most 10 MiB.
const STDERR_SENT: usize = 1 << 20;

/// What is left of one request line for the envelope around its params.
const ENVELOPE_ROOM: usize = 64 << 10;

/// `params` cut to fit one request line as JSON, where an escaped byte takes up to six: the
/// start of the run's stderr goes first (halved until it fits, what went counted as dropped),
/// never stdout, which holds the answer. A submission over the line limit would be refused
/// whole, the job given back, and the next worker's run fail the same way.
fn within_one_request(mut params: m::WorkerSubmitParams) -> m::WorkerSubmitParams {
    let budget = scafld_protocol::MAX_REQUEST_LINE_BYTES - ENVELOPE_ROOM;
    while scafld_protocol::json::encoded_len(&params) > budget
        && let Some(run) = params.run.as_mut().filter(|run| !run.stderr.is_empty())
    {
        let mut cut = (run.stderr.len() / 2).max(1);
        while !run.stderr.is_char_boundary(cut) {
            cut += 1;
        }
        run.stderr.drain(..cut);
        run.stderr_dropped += cut as u64;
    }
    params
}

/// How a provider run the worker started ended.
enum Ran {
    /// It ran to its end: what it left, for the submission.
    Done(m::WorkerRun),
    /// The worker stopped it: the job's lease ended under it (why), so nothing is submitted.
    Stopped(String),
}

/// While a provider runs: renew the lease every `every`, and in between wait on the job, so
/// that a job that finishes under the lease (`scafld job cancel`) stops the run (`cancel`,
/// which kills its process group) at once, as the daemon stops its own runs, and a lease that
/// was lost stops it at the next renewal, rather than letting it run on to an answer that
/// would be refused. A daemon reached anew (it restarted) is asked to renew at once: whether
/// it still honours the lease is not known until then.
#[allow(clippy::too_many_arguments)]
fn watch_lease(
    paths: &scafld_client::Paths,
    own: Option<&Executable>,
    job_id: &str,
    lease: &str,
    every: Duration,
    done: &AtomicBool,
    cancel: &CancellationToken,
    stopped: &Mutex<Option<String>>,
) {
    let stop = |why: String| {
        *stopped.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
        cancel.cancel();
    };
    let mut conn = daemon_control::reconnect_worker(paths, own).ok();
    let mut last = Instant::now();
    // Whether the daemon may have changed since the lease was last renewed (the claim's), and
    // the connection's moves to another daemon counted then.
    let (mut reconnected, mut moves) = (false, conn.as_ref().map_or(0, |c| c.moves()));
    while !done.load(Ordering::SeqCst) {
        // A short wait: `done` is seen within it, and the job's end at once.
        let wait = m::JobWaitParams { job_id: job_id.to_string(), timeout_seconds: 0.5 };
        match conn.as_mut().map(|c| c.call::<m::JobWait>(&wait)) {
            Some(Ok(job)) if job.state.is_finished() => {
                let reason = job.reason.filter(|r| !r.is_empty()).map(|r| format!(" ({r})")).unwrap_or_default();
                return stop(format!("the job was {}{reason} while its provider ran", job.state));
            }
            Some(Ok(_)) => {}
            // The daemon restarting: try again (a new connection) on the next round.
            Some(Err(_)) | None => {
                std::thread::sleep(Duration::from_millis(500));
                conn = daemon_control::reconnect_worker(paths, own).ok();
                reconnected = true;
            }
        }
        // A stopping daemon's refusal moves the connection to the next one by itself.
        let moved = conn.as_ref().is_some_and(|c| c.moves() != moves);
        if reconnected || moved || last.elapsed() >= every {
            let params = m::LeaseParams { job_id: job_id.to_string(), lease_token: lease.to_string() };
            match conn.as_mut().map(|c| c.call::<m::WorkerHeartbeat>(&params)) {
                Some(Ok(_)) => {
                    reconnected = false;
                    moves = conn.as_ref().map_or(0, |c| c.moves());
                }
                // Expired (re-queued for another worker), released or finished: the run serves nobody.
                Some(Err(e)) if e.kind() == Some(scafld_protocol::ErrorKind::InvalidState) => {
                    return stop(format!("its lease ended while its provider ran: {e}"));
                }
                // A failed heartbeat (the daemon restarting) reconnects on the next round.
                Some(Err(_)) | None => conn = None,
            }
            last = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use scafld_protocol::methods::{self as m, Claim, ClaimCommands};

    /// A run whose answer and stderr escape to more than a request line holds (quotes and
    /// control characters take two to six bytes in JSON) is cut to fit from the start of its
    /// stderr, its answer whole; a run that fits is sent as it is.
    #[test]
    fn a_submission_is_cut_to_one_request_line_from_its_stderr_never_its_answer() {
        let answer = "\"".repeat(3 << 20);
        let run = m::WorkerRun {
            stdout: answer.clone(),
            stderr: format!("{}the end", "\u{1}".repeat(1 << 20)),
            ..Default::default()
        };
        let params = m::WorkerSubmitParams { run: Some(run), ..Default::default() };
        assert!(scafld_protocol::json::encoded_len(&params) > scafld_protocol::MAX_REQUEST_LINE_BYTES);
        let fitted = super::within_one_request(params);
        assert!(
            scafld_protocol::json::encoded_len(&fitted)
                <= scafld_protocol::MAX_REQUEST_LINE_BYTES - super::ENVELOPE_ROOM
        );
        let run = fitted.run.unwrap();
        assert_eq!(run.stdout, answer, "the answer is never cut");
        assert!(run.stderr.ends_with("the end") && run.stderr_dropped > 0, "{}", run.stderr_dropped);
        assert_eq!(run.stderr.len() as u64 + run.stderr_dropped, (1 << 20) + 7);

        let small = m::WorkerSubmitParams {
            run: Some(m::WorkerRun { stdout: "ok".into(), stderr: "warn".into(), ..Default::default() }),
            ..Default::default()
        };
        assert_eq!(super::within_one_request(small.clone()), small);
    }

    /// A reviewer that claimed by hand is told how to hand in its answer and give the job
    /// back, not only how to keep its lease.
    #[test]
    fn the_briefing_names_submit_and_release() {
        let claim = Claim {
            job_id: "job-1".into(),
            lease_token: "abc".into(),
            lease_seconds: 300,
            session_key: "s".into(),
            task_id: "t".into(),
            root: "/w".into(),
            attempt: 1,
            packet: String::new(),
            files: vec!["a.rs".into()],
            preflight: "passed".into(),
            resume: None,
            invocation: None,
            commands: ClaimCommands::new("job-1", "abc"),
        };
        let text = super::briefing(&claim);
        for needle in [
            "`scafld worker heartbeat job-1 --lease abc`",
            "`scafld worker submit job-1 --lease abc --dossier FILE`",
            "`scafld worker release job-1 --lease abc`",
        ] {
            assert!(text.contains(needle), "{needle} missing from {text}");
        }
    }
}
