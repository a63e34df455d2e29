//! `scafld worker`: a reviewer worker. The loop claims review jobs, runs the provider process
//! the daemon prepared (in its own process group, heartbeating the lease), and submits what it
//! left. The subcommands let an agent do the same by hand, one prompt call at a time.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use scafld_protocol::methods::{self as m, Claim};
use scafld_protocol::progress::ProgressWatch;

use super::exec::caller;
use super::tasks::call;
use crate::cli::exit::workflow;
use crate::cli::output::CliError;
use crate::cli::{Context, LeaseArgs, WorkerArgs, WorkerCommand};

/// The most provider output kept for the submission (the daemon caps lines anyway).
const OUTPUT_CAP: usize = 8 << 20;

pub fn run(ctx: &Context, args: &WorkerArgs) -> Result<u8, CliError> {
    match &args.command {
        None => serve(ctx, args),
        Some(WorkerCommand::Claim { timeout, lease_seconds, provider, id }) => {
            claim_once(ctx, *timeout, *lease_seconds, provider, id.clone())
        }
        Some(WorkerCommand::Heartbeat(lease)) => {
            let mut conn = ctx.connect()?;
            let r = call::<m::WorkerHeartbeat>(&mut conn, &lease_params(lease))?;
            ctx.out.success(&r, || format!("{}: lease renewed for {:.0}s", r.job_id, r.lease_expires_in_seconds));
            Ok(workflow::OK)
        }
        Some(WorkerCommand::Checkpoint { lease, file, findings, phase }) => {
            let findings = findings
                .iter()
                .map(|f| serde_json::from_str(f).map_err(|e| CliError::usage(format!("--finding is not JSON: {e}"))))
                .collect::<Result<Vec<_>, _>>()?;
            let mut conn = ctx.connect()?;
            let params = m::CheckpointParams {
                job_id: lease.job_id.clone(),
                lease_token: lease.lease.clone(),
                phase: phase.clone(),
                file: file.clone(),
                findings,
            };
            let r = call::<m::WorkerCheckpoint>(&mut conn, &params)?;
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
            let text = std::fs::read_to_string(dossier)
                .map_err(|e| CliError::usage(format!("cannot read --dossier {}: {e}", dossier.display())))?;
            let value: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| CliError::usage(format!("--dossier is not JSON: {e}")))?;
            let mut conn = ctx.connect()?;
            let params = m::WorkerSubmitParams {
                job_id: lease.job_id.clone(),
                lease_token: lease.lease.clone(),
                dossier: Some(value),
                run: None,
                model: None,
                caller: caller(),
            };
            let r = call::<m::WorkerSubmit>(&mut conn, &params)?;
            submitted(ctx, &r)
        }
        Some(WorkerCommand::Release(lease)) => {
            let mut conn = ctx.connect()?;
            let r = call::<m::WorkerRelease>(&mut conn, &lease_params(lease))?;
            ctx.out.success(&r, || format!("{}: released; it is queued again with its checkpoint", r.job_id));
            Ok(workflow::OK)
        }
    }
}

fn lease_params(lease: &LeaseArgs) -> m::LeaseParams {
    m::LeaseParams { job_id: lease.job_id.clone(), lease_token: lease.lease.clone() }
}

fn submitted(ctx: &Context, r: &m::WorkerSubmitResult) -> Result<u8, CliError> {
    if r.accepted {
        ctx.out.success(r, || format!("{}: submitted, verdict {}", r.job_id, r.verdict));
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
        "claimed {} ({target}), attempt {}\nlease token: {} ({} s; renew with `scafld worker heartbeat {} --lease <token>`)\npreflight: {}\n",
        c.job_id, c.attempt, c.lease_token, c.lease_seconds, c.job_id, c.preflight
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
    let root = root_of(ctx, args.workspace.as_deref())?;
    let id = worker_id(args.id.clone());
    let mut conn = ctx.connect()?;
    if !ctx.out.json {
        eprintln!("scafld worker {id}: serving review jobs with {}", args.provider);
    }
    let mut served = Vec::new();
    loop {
        let params = m::ClaimParams {
            worker_id: id.clone(),
            provider: args.provider.clone(),
            provider_command: args.provider_command.clone(),
            root: root.clone(),
            timeout_seconds: args.timeout,
            lease_seconds: args.lease_seconds,
            caller: caller(),
        };
        let claimed = match call::<m::WorkerClaim>(&mut conn, &params) {
            Ok(claimed) => claimed,
            // The daemon went away (a restart): keep serving once it is back.
            Err(e) if !args.once && e.exit_code == workflow::UNREACHABLE => {
                eprintln!("scafld worker {id}: {}; reconnecting", e.message);
                std::thread::sleep(Duration::from_secs(1));
                if let Ok(again) = crate::cli::daemon_control::connect(&ctx.paths, false) {
                    conn = again;
                }
                continue;
            }
            Err(e) => return Err(e),
        };
        if let Some(claim) = claimed {
            if !ctx.out.json {
                eprintln!("scafld worker {id}: {}", briefing(&claim).lines().next().unwrap_or_default());
            }
            let run = execute(ctx, &claim)?;
            let params = m::WorkerSubmitParams {
                job_id: claim.job_id.clone(),
                lease_token: claim.lease_token.clone(),
                dossier: None,
                run: Some(run),
                model: None,
                caller: caller(),
            };
            let mut submitted = call::<m::WorkerSubmit>(&mut conn, &params);
            if submitted.as_ref().is_err_and(|e| e.exit_code == workflow::UNREACHABLE)
                && let Ok(again) = crate::cli::daemon_control::connect(&ctx.paths, false)
            {
                // The daemon restarted while the provider ran; the lease survived it.
                conn = again;
                submitted = call::<m::WorkerSubmit>(&mut conn, &params);
            }
            match submitted {
                Ok(r) => {
                    if !ctx.out.json {
                        let how = if r.accepted { format!("verdict {}", r.verdict) } else { r.problems.join("; ") };
                        eprintln!("scafld worker {id}: {} done: {how}", r.job_id);
                    }
                    served.push(r);
                }
                Err(e) => eprintln!("scafld worker {id}: {} not submitted: {}", claim.job_id, e.message),
            }
        }
        if args.once {
            break;
        }
    }
    ctx.out.success(&served, || format!("served {} job(s)", served.len()));
    Ok(workflow::OK)
}

/// The provider's leader: keep stdin for the command (a background job would get /dev/null),
/// run it, and on TERM or HUP (the worker's death) kill the whole process group.
const GROUP_GUARD: &str = r#"trap 'kill -KILL 0' TERM HUP; exec 3<&0; eval "$1" 0<&3 3<&- & wait $!"#;

/// Run the provider invocation the daemon prepared: packet on stdin, own process group,
/// lease heartbeats from a second connection, absolute and idle timeouts.
fn execute(ctx: &Context, claim: &Claim) -> Result<m::WorkerRun, CliError> {
    let invocation = claim.invocation.clone().ok_or_else(|| CliError::usage("the claim carries no provider to run"))?;
    // The provider runs under a shell that leads its own process group and dies with the
    // worker: the parent-death signal reaches it however the worker ends (even `kill -9`), and
    // its trap kills the whole group, so no provider outlives the worker that ran it.
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(GROUP_GUARD)
        .arg("sh")
        .arg(&invocation.command)
        .current_dir(&invocation.cwd)
        .envs(&invocation.env)
        .env("SCAFLD_TASK_ID", &claim.task_id)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // A worker that died before the signal was armed would never send it, so the child also
    // checks that its parent is still this worker.
    let parent = nix::unistd::getpid();
    // SAFETY: the closure only calls prctl(2) and getppid(2), which are async-signal-safe, and
    // allocates nothing (the error is a raw errno).
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGTERM).map_err(std::io::Error::from)?;
            if nix::unistd::getppid() != parent {
                return Err(std::io::Error::from(nix::errno::Errno::ESRCH));
            }
            Ok(())
        });
    }
    let mut child = command
        .spawn()
        .map_err(|e| CliError::new("worker", format!("cannot start the provider: {e}"), workflow::RUNTIME))?;
    let group = Pid::from_raw(child.id() as i32);
    let activity = Arc::new(Mutex::new(Instant::now()));
    let mut stdin = child.stdin.take().expect("piped");
    let packet = claim.packet.clone();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(packet.as_bytes());
    });
    // `counts`: which of this stream's bytes show the provider is alive: all of them, none
    // (codex's stderr chatter) or only progress events (codex's stdout, see `ProgressWatch`).
    #[derive(Clone, Copy)]
    enum Counts {
        All,
        Nothing,
        Progress,
    }
    let reader = |mut stream: Box<dyn Read + Send>, activity: Arc<Mutex<Instant>>, counts: Counts| {
        std::thread::spawn(move || {
            let mut kept = Vec::new();
            let mut buf = [0u8; 16 * 1024];
            let mut watch = ProgressWatch::default();
            while let Ok(n) = stream.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let alive = match counts {
                    Counts::All => true,
                    Counts::Nothing => false,
                    Counts::Progress => watch.feed(&buf[..n]),
                };
                if alive {
                    *activity.lock().expect("activity") = Instant::now();
                }
                if kept.len() < OUTPUT_CAP {
                    kept.extend_from_slice(&buf[..n.min(OUTPUT_CAP - kept.len())]);
                }
            }
            kept
        })
    };
    let (out_counts, err_counts) =
        if invocation.idle_on_stdout { (Counts::Progress, Counts::Nothing) } else { (Counts::All, Counts::All) };
    let stdout = reader(Box::new(child.stdout.take().expect("piped")), activity.clone(), out_counts);
    let stderr = reader(Box::new(child.stderr.take().expect("piped")), activity.clone(), err_counts);
    let done = Arc::new(AtomicBool::new(false));
    let heartbeat = {
        let (done, paths, lease) = (done.clone(), ctx.paths.clone(), claim.lease_token.clone());
        let (job_id, every) = (claim.job_id.clone(), Duration::from_secs((claim.lease_seconds / 3).max(1)));
        std::thread::spawn(move || {
            let mut conn = crate::cli::daemon_control::connect(&paths, false).ok();
            let mut last = Instant::now();
            while !done.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(100));
                if last.elapsed() >= every {
                    let params = m::LeaseParams { job_id: job_id.clone(), lease_token: lease.clone() };
                    // A failed heartbeat (the daemon restarting) reconnects on the next beat.
                    if conn.as_mut().is_none_or(|c| c.call::<m::WorkerHeartbeat>(&params).is_err()) {
                        conn = crate::cli::daemon_control::connect(&paths, false).ok();
                    }
                    last = Instant::now();
                }
            }
        })
    };
    let started = Instant::now();
    let absolute = Duration::from_secs(invocation.timeout_seconds.max(1));
    let idle = (invocation.idle_timeout_seconds > 0).then(|| Duration::from_secs(invocation.idle_timeout_seconds));
    let mut timed_out = false;
    let status = loop {
        if let Some(status) = child.try_wait().ok().flatten() {
            break Some(status);
        }
        let silent = activity.lock().expect("activity").elapsed();
        if started.elapsed() >= absolute || idle.is_some_and(|idle| silent >= idle) {
            timed_out = true;
            let _ = killpg(group, Signal::SIGTERM);
            std::thread::sleep(Duration::from_millis(500));
            let _ = killpg(group, Signal::SIGKILL);
            break child.wait().ok();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // Nothing the provider started outlives its run.
    let _ = killpg(group, Signal::SIGKILL);
    done.store(true, Ordering::SeqCst);
    let _ = (feeder.join(), heartbeat.join());
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    let tail_start = stderr.len().saturating_sub(1200);
    Ok(m::WorkerRun {
        exit_code: status.and_then(|s| s.code()),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        answer_file: invocation.answer_file.clone(),
        timed_out,
        stderr_tail: String::from_utf8_lossy(&stderr[tail_start..]).into_owned(),
    })
}
