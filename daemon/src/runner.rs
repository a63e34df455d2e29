//! Running one command for the daemon: `sh -c` in its own process group, with a given
//! environment and working directory, stdin closed or fed, output captured with caps, absolute and
//! idle timeouts that kill the whole group (TERM, grace, KILL), and a diagnostics file.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{Signal, killpg};

pub use crate::domain::job::ProcessGroup;
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

/// Bytes kept in memory per stream (the tail is kept; earlier bytes are counted as dropped).
pub const CAPTURE_CAP: usize = 8 * 1024 * 1024;
/// Grace between SIGTERM and SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_millis(250);
/// How long pipes may stay open after the leader exited (background children holding them).
const PIPE_GRACE: Duration = Duration::from_millis(500);

/// The shell the command runs under first waits for one line on stdin: the daemon sends it only
/// after `on_spawn` has put the process group on record, so a daemon killed in between leaves no
/// command running that recovery could not find (the wrapper sees EOF and exits). The command
/// arrives as `$1` and is evaluated by the same shell (no second exec), with no positional
/// parameters left, as under a plain `sh -c`.
const GATED: &str = r#"IFS= read -r _ || exit 125; eval "shift; $1""#;
const GATED_NO_STDIN: &str = r#"IFS= read -r _ || exit 125; exec </dev/null; eval "shift; $1""#;

/// What the daemon changed about its own process at start, as it was before: every command
/// gets these back, so it runs exactly as it would from the user's shell.
#[derive(Debug, Clone, Copy)]
struct Inherited {
    umask: nix::sys::stat::Mode,
    /// The soft and hard open-file limits, when the daemon raised the soft one.
    open_files: Option<(u64, u64)>,
}

static INHERITED: std::sync::OnceLock<Inherited> = std::sync::OnceLock::new();

/// The umask the daemon was started with (what the user's own files are created under), or
/// the usual 0022 before [`adopt_daemon_settings`] ran.
pub fn inherited_umask() -> u32 {
    INHERITED.get().map(|i| i.umask.bits()).unwrap_or(0o022)
}

/// Set up the daemon's own process, remembering what it inherited for the commands it runs:
/// umask 0077 (its database, log and diagnostics are private), and the soft open-file limit
/// raised to the hard one (every client, job and reviewer holds descriptors; running out would
/// lock every client out).
pub fn adopt_daemon_settings() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let umask = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let open_files = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => Some((soft, hard)),
            Err(e) => {
                eprintln!("scafldd: warning: cannot raise the open-file limit from {soft} to {hard}: {e}");
                None
            }
        },
        _ => None,
    };
    let _ = INHERITED.set(Inherited { umask, open_files });
}

/// Sees each chunk of a command's stdout as it arrives.
pub type OutputObserver = Box<dyn FnMut(&[u8]) + Send>;

pub struct RunRequest {
    pub command: String,
    pub cwd: PathBuf,
    pub env: BTreeMap<String, String>,
    pub absolute_timeout: Duration,
    pub idle_timeout: Option<Duration>,
    /// Where to write the diagnostics file (its directory is created).
    pub diagnostics_dir: PathBuf,
    /// Names of variables set on top of the caller's environment, for the diagnostics file.
    pub env_overrides: Vec<String>,
    /// Bytes written to the command's stdin (then closed); `None` means stdin is /dev/null.
    pub stdin: Option<Vec<u8>>,
    /// Called with each chunk of stdout as it arrives (provider progress events).
    pub on_stdout: Option<OutputObserver>,
    /// Judge idleness on stdout alone: a program that prints structured events there and
    /// chatter on stderr (codex repeats "waiting for network") is idle when the events stop.
    pub idle_on_stdout: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillReason {
    AbsoluteTimeout,
    IdleTimeout,
    Cancelled,
}

impl KillReason {
    pub fn as_str(self) -> &'static str {
        match self {
            KillReason::AbsoluteTimeout => "absolute_timeout",
            KillReason::IdleTimeout => "idle_timeout",
            KillReason::Cancelled => "cancelled",
        }
    }
}

#[derive(Debug)]
pub struct RunOutcome {
    /// `None` when killed or not started.
    pub exit_code: Option<i32>,
    pub kill_reason: Option<KillReason>,
    pub start_error: Option<String>,
    pub stdout: Capture,
    pub stderr: Capture,
    pub duration: Duration,
    pub diagnostic: PathBuf,
}

impl RunOutcome {
    /// A runner-level failure that decides the verdict whatever the matcher.
    pub fn runner_error(&self) -> Option<String> {
        if let Some(e) = &self.start_error {
            return Some(format!("could not start the command: {e}"));
        }
        self.kill_reason.map(|k| match k {
            KillReason::AbsoluteTimeout => "process timeout".to_string(),
            KillReason::IdleTimeout => "process idle timeout".to_string(),
            KillReason::Cancelled => "cancelled".to_string(),
        })
    }

    /// Up to `max` bytes from the end of the combined output, as text.
    pub fn tail(&self, max: usize) -> String {
        let mut text = self.stdout.text();
        let err = self.stderr.text();
        if !err.is_empty() {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&err);
        }
        if text.len() <= max {
            return text;
        }
        let mut start = text.len() - max;
        while !text.is_char_boundary(start) {
            start += 1;
        }
        format!("[... {start} earlier bytes]\n{}", &text[start..])
    }
}

/// The retained tail of one output stream.
#[derive(Debug, Default)]
pub struct Capture {
    pub bytes: Vec<u8>,
    pub dropped: u64,
}

impl Capture {
    fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
        if self.bytes.len() > CAPTURE_CAP {
            let excess = self.bytes.len() - CAPTURE_CAP;
            self.bytes.drain(..excess);
            self.dropped += excess as u64;
        }
    }

    pub fn total(&self) -> u64 {
        self.dropped + self.bytes.len() as u64
    }

    /// Lossy text: invalid UTF-8 becomes U+FFFD, so it never decides a verdict.
    pub fn text(&self) -> String {
        let mut text = String::from_utf8_lossy(&self.bytes).into_owned();
        if self.dropped > 0 {
            text.insert_str(0, &format!("[truncated {} earlier bytes]\n", self.dropped));
        }
        text
    }
}

/// Run the command; `on_spawn` gets its process group (with the leader's identity) as soon as
/// it exists, before the command may start.
pub async fn run(
    mut request: RunRequest,
    cancel: CancellationToken,
    on_spawn: impl FnOnce(ProcessGroup),
) -> RunOutcome {
    let started = Instant::now();
    let mut outcome = RunOutcome {
        exit_code: None,
        kill_reason: None,
        start_error: None,
        stdout: Capture::default(),
        stderr: Capture::default(),
        duration: Duration::ZERO,
        diagnostic: request.diagnostics_dir.join(format!("command-{}.txt", unix_nanos())),
    };
    // Every descendant inherits it (unless it clears its environment): found by it, a process
    // that left the group with setsid is killed with the group.
    let token =
        crate::workspace::layout::new_id().unwrap_or_else(|_| format!("{}-{}", std::process::id(), unix_nanos()));
    let mut command = Command::new("sh");
    if let Some(&inherited) = INHERITED.get() {
        // SAFETY: umask(2) and setrlimit(2) are async-signal-safe, touch only this child, and
        // nothing here allocates.
        unsafe {
            command.pre_exec(move || {
                nix::sys::stat::umask(inherited.umask);
                if let Some((soft, hard)) = inherited.open_files {
                    let _ = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, soft, hard);
                }
                Ok(())
            });
        }
    }
    let spawned = command
        .arg("-c")
        .arg(if request.stdin.is_some() { GATED } else { GATED_NO_STDIN })
        .arg("sh")
        .arg(&request.command)
        .current_dir(&request.cwd)
        .env_clear()
        .envs(&request.env)
        .env(RUN_TOKEN, &token)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            outcome.start_error = Some(e.to_string());
            let text = diagnostics_text(&request, &outcome, None);
            write_diagnostics(request.diagnostics_dir.clone(), outcome.diagnostic.clone(), text).await;
            return outcome;
        }
    };
    let pgid = child.id().map(|id| id as i32).unwrap_or(0);
    if let Some(group) = ProcessGroup::led_by(pgid, &token) {
        on_spawn(group);
    }
    if let Some(mut pipe) = child.stdin.take() {
        let mut input = b"\n".to_vec();
        input.extend_from_slice(request.stdin.as_deref().unwrap_or_default());
        // Fed from its own task so a reader that does not drain stdin cannot stall the run.
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            let _ = pipe.write_all(&input).await;
        });
    }
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let (mut out_open, mut err_open) = (true, true);
    let mut out_buf = vec![0u8; 64 * 1024];
    let mut err_buf = vec![0u8; 64 * 1024];
    let deadline = tokio::time::Instant::now() + request.absolute_timeout;
    let far = Duration::from_secs(365 * 24 * 3600);
    let idle_sleep = tokio::time::sleep(request.idle_timeout.unwrap_or(far));
    tokio::pin!(idle_sleep);
    let mut last_byte = Instant::now();
    // With `idle_on_stdout`, only stdout events that show progress count (not codex's
    // endless reconnect errors).
    let mut progress = scafld_protocol::progress::ProgressWatch::default();
    let mut status = None;
    let mut exited_at: Option<tokio::time::Instant> = None;

    loop {
        if status.is_some() && !out_open && !err_open {
            break;
        }
        let pipe_deadline = exited_at.map(|t| t + PIPE_GRACE).unwrap_or(deadline);
        tokio::select! {
            read = read_chunk(&mut stdout, &mut out_buf), if out_open => match read {
                Some(n) => {
                    outcome.stdout.push(&out_buf[..n]);
                    if let Some(observe) = request.on_stdout.as_mut() { observe(&out_buf[..n]); }
                    if !request.idle_on_stdout || progress.feed(&out_buf[..n]) {
                        last_byte = Instant::now();
                        if let Some(idle) = request.idle_timeout { idle_sleep.as_mut().reset(tokio::time::Instant::now() + idle); }
                    }
                }
                None => out_open = false,
            },
            read = read_chunk(&mut stderr, &mut err_buf), if err_open => match read {
                Some(n) => {
                    outcome.stderr.push(&err_buf[..n]);
                    if !request.idle_on_stdout {
                        last_byte = Instant::now();
                        if let Some(idle) = request.idle_timeout { idle_sleep.as_mut().reset(tokio::time::Instant::now() + idle); }
                    }
                }
                None => err_open = false,
            },
            exit = child.wait(), if status.is_none() => {
                status = Some(exit);
                exited_at = Some(tokio::time::Instant::now());
            },
            _ = tokio::time::sleep_until(pipe_deadline), if exited_at.is_some() => {
                // The leader is gone but something in its group still holds the pipes.
                break;
            },
            _ = tokio::time::sleep_until(deadline), if status.is_none() => {
                outcome.kill_reason = Some(KillReason::AbsoluteTimeout);
                break;
            },
            _ = &mut idle_sleep, if status.is_none() && request.idle_timeout.is_some() => {
                outcome.kill_reason = Some(KillReason::IdleTimeout);
                break;
            },
            _ = cancel.cancelled(), if status.is_none() => {
                outcome.kill_reason = Some(KillReason::Cancelled);
                break;
            },
        }
    }
    if outcome.kill_reason.is_some() {
        terminate_group(pgid).await;
    }
    // Nothing of the run outlives it, whatever the leader did: not its group, and not what
    // left the group.
    kill_group(pgid);
    kill_carriers(&token);
    let status = match status {
        Some(status) => status.ok(),
        None => child.wait().await.ok(),
    };
    outcome.exit_code = if outcome.kill_reason.is_some() { None } else { status.and_then(|s| s.code()) };
    outcome.duration = started.elapsed();
    let text = diagnostics_text(&request, &outcome, Some(last_byte.elapsed()));
    write_diagnostics(request.diagnostics_dir.clone(), outcome.diagnostic.clone(), text).await;
    outcome
}

async fn read_chunk(stream: &mut (impl AsyncRead + Unpin), buf: &mut [u8]) -> Option<usize> {
    match stream.read(buf).await {
        Ok(0) | Err(_) => None,
        Ok(n) => Some(n),
    }
}

/// SIGTERM to the group, a grace period, then SIGKILL.
pub async fn terminate_group(pgid: i32) {
    if pgid <= 0 {
        return;
    }
    let _ = killpg(Pid::from_raw(pgid), Signal::SIGTERM);
    tokio::time::sleep(KILL_GRACE).await;
    kill_group(pgid);
}

/// SIGKILL to the group (harmless if it is already gone).
fn kill_group(pgid: i32) {
    if pgid > 0 {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
}

/// The variable that marks every process of one run.
pub const RUN_TOKEN: &str = "SCAFLD_RUN_TOKEN";

/// SIGKILL every process of ours whose environment carries `token` (see [`RUN_TOKEN`]); returns
/// how many. Only our own processes' environments are readable, and a random token cannot
/// name anything else.
fn kill_carriers(token: &str) -> usize {
    if token.is_empty() {
        return 0;
    }
    let needle = format!("{RUN_TOKEN}={token}");
    let own = std::process::id().to_string();
    let mut killed = 0;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().filter(|n| n.bytes().all(|b| b.is_ascii_digit()) && *n != own) else {
            continue;
        };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else { continue };
        if environ.split(|b| *b == 0).any(|var| var == needle.as_bytes())
            && let Ok(pid) = pid.parse::<i32>()
            && nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok()
        {
            killed += 1;
        }
    }
    killed
}

impl ProcessGroup {
    /// The group `pid` leads, with the leader's identity read from `/proc`, and the run's token.
    pub fn led_by(pid: i32, token: &str) -> Option<ProcessGroup> {
        Some(ProcessGroup { pgid: pid, start_ticks: start_ticks(pid)?, boot_id: boot_id()?, token: token.to_string() })
    }

    /// Whether the recorded leader still runs (same pid, same start, same boot): only then does
    /// the group id still name the group that was recorded.
    pub fn is_alive(&self) -> bool {
        self.pgid > 0
            && boot_id().as_deref() == Some(self.boot_id.as_str())
            && start_ticks(self.pgid) == Some(self.start_ticks)
    }

    /// Kill a recorded group, but only while its recorded leader still owns the id; a process
    /// that reused the id after a crash is left alone. Returns whether it killed.
    pub fn kill_if_ours(&self) -> bool {
        // Processes carrying the run's token are ours whatever became of the leader.
        let carriers = self.boot_id == boot_id().unwrap_or_default() && kill_carriers(&self.token) > 0;
        if !self.is_alive() {
            return carriers;
        }
        kill_group(self.pgid);
        true
    }
}

/// Field 22 of `/proc/PID/stat`: the start time in clock ticks since boot. The command name
/// (field 2) may hold spaces and parentheses, so fields are counted after its last `)`.
fn start_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok().map(|s| s.trim().to_string())
}

fn unix_nanos() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

fn diagnostics_text(request: &RunRequest, outcome: &RunOutcome, since_last_byte: Option<Duration>) -> String {
    let mut text = String::new();
    let _ = writeln!(text, "command: {}", request.command);
    let _ = writeln!(text, "cwd: {}", request.cwd.display());
    let _ = writeln!(text, "env_overrides: {}", request.env_overrides.join(","));
    let _ = writeln!(text, "exit_code: {}", outcome.exit_code.map(|c| c.to_string()).unwrap_or_else(|| "-1".into()));
    let _ = writeln!(text, "kill_reason: {}", outcome.kill_reason.map(KillReason::as_str).unwrap_or(""));
    if let Some(e) = &outcome.start_error {
        let _ = writeln!(text, "start_error: {e}");
    }
    let _ = writeln!(text, "wall_elapsed: {:.3}s", outcome.duration.as_secs_f64());
    let _ = writeln!(text, "time_since_last_byte: {:.3}s", since_last_byte.unwrap_or_default().as_secs_f64());
    let _ = writeln!(
        text,
        "idle_timeout: {}",
        request.idle_timeout.map(|d| format!("{}s", d.as_secs())).unwrap_or("0".into())
    );
    let _ = writeln!(text, "absolute_timeout: {}s", request.absolute_timeout.as_secs());
    let _ = writeln!(text, "stdout_bytes: {} (dropped {})", outcome.stdout.total(), outcome.stdout.dropped);
    let _ = writeln!(text, "stderr_bytes: {} (dropped {})", outcome.stderr.total(), outcome.stderr.dropped);
    let _ = write!(text, "stdout:\n{}\nstderr:\n{}\n", outcome.stdout.text(), outcome.stderr.text());
    text
}

/// Write the diagnostics file (up to twice the capture cap) on a blocking thread.
async fn write_diagnostics(dir: PathBuf, path: PathBuf, text: String) {
    let _ = tokio::task::spawn_blocking(move || {
        if crate::workspace::layout::create_real_dir(&dir).is_ok() {
            let _ = crate::workspace::layout::write_user_file(&path, text.as_bytes());
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::process::{Command, Output, Stdio};

    use super::{GATED, GATED_NO_STDIN};

    fn gated(wrapper: &str, command: &str, stdin: &[u8]) -> Output {
        let mut child = Command::new("sh")
            .args(["-c", wrapper, "sh", command])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        // The wrapper may already have exited (EPIPE); what it read is what matters.
        let _ = child.stdin.take().unwrap().write_all(stdin);
        child.wait_with_output().unwrap()
    }

    #[test]
    fn the_gate_holds_the_command_until_the_go_ahead_line() {
        // EOF first: the daemon died before recording the process group, so nothing runs.
        let out = gated(GATED, "echo ran", b"");
        assert_eq!((out.status.code(), out.stdout.as_slice()), (Some(125), &b""[..]));

        // The go-ahead line, then the command's own input; quoting survives the hand-over.
        let out = gated(GATED, r#"printf '%s|' "a b" 'c' "$#"; cat"#, b"\nline one\nline two\n");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "a b|c|0|line one\nline two\n");
        assert_eq!(out.status.code(), Some(0));

        // Without input the command reads /dev/null, not what follows the line.
        let out = gated(GATED_NO_STDIN, "cat; echo done; exit 7", b"\nleft over\n");
        assert_eq!((out.status.code(), String::from_utf8_lossy(&out.stdout).as_ref()), (Some(7), "done\n"));
    }

    /// A program that chatters on stderr but prints no events is idle when stdout alone
    /// counts (codex's "waiting for network" line never stops), and alive when both count.
    #[tokio::test]
    async fn idleness_can_be_judged_on_stdout_alone() {
        let dir = tempfile::tempdir().unwrap();
        let chatter = "i=0; while [ $i -lt 25 ]; do echo waiting >&2; sleep 0.1; i=$((i+1)); done";
        let request = |idle_on_stdout| super::RunRequest {
            command: chatter.into(),
            cwd: dir.path().to_path_buf(),
            env: std::env::vars().collect(),
            absolute_timeout: std::time::Duration::from_secs(20),
            idle_timeout: Some(std::time::Duration::from_millis(1500)),
            diagnostics_dir: dir.path().join("diagnostics"),
            env_overrides: Vec::new(),
            stdin: None,
            on_stdout: None,
            idle_on_stdout,
        };
        let cancel = tokio_util::sync::CancellationToken::new;
        let events_only = super::run(request(true), cancel(), |_| {}).await;
        assert_eq!(events_only.kill_reason, Some(super::KillReason::IdleTimeout));
        let any_output = super::run(request(false), cancel(), |_| {}).await;
        assert_eq!((any_output.kill_reason, any_output.exit_code), (None, Some(0)));

        // Offline, codex repeats an error event on stdout itself: that is no progress either,
        // while real events are.
        let offline = r#"i=0; while [ $i -lt 25 ]; do echo '{"type":"error","message":"Reconnecting..."}'; sleep 0.1; i=$((i+1)); done"#;
        let working = offline.replace("\"error\"", "\"item.updated\"");
        let with = |command: &str| super::RunRequest { command: command.into(), ..request(true) };
        let stalled = super::run(with(offline), cancel(), |_| {}).await;
        assert_eq!(stalled.kill_reason, Some(super::KillReason::IdleTimeout));
        let alive = super::run(with(&working), cancel(), |_| {}).await;
        assert_eq!((alive.kill_reason, alive.exit_code), (None, Some(0)));
    }
}
