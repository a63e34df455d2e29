//! Running one command: `sh -c` in its own process group, with a given environment and working
//! directory, stdin closed or fed, output captured with caps, absolute and idle timeouts that
//! kill the whole group (TERM, grace, KILL), and nothing of it left behind. The one runner of
//! both the daemon (acceptance criteria, reviewers) and `scafld worker` (a leased reviewer).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

/// Bytes kept in memory per stream (the tail is kept; earlier bytes are counted as dropped):
/// the reviewer answer cap, so a provider's whole answer on stdout is kept or known to be over.
pub const CAPTURE_CAP: usize = scafld_protocol::MAX_ANSWER_BYTES;
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
/// The same for a run that dies with its parent: the shell stays to receive the parent-death
/// TERM (a foreground command would delay the trap until it ends) and kills its whole group.
const GUARDED: &str =
    r#"trap 'kill -KILL 0' TERM HUP; IFS= read -r _ || exit 125; exec 3<&0; eval "shift; $1" 0<&3 3<&- & wait $!"#;
const GUARDED_NO_STDIN: &str = r#"trap 'kill -KILL 0' TERM HUP; IFS= read -r _ || exit 125; exec 3</dev/null; eval "shift; $1" 0<&3 3<&- & wait $!"#;

fn wrapper(stdin: bool, die_with_parent: bool) -> &'static str {
    match (stdin, die_with_parent) {
        (true, false) => GATED,
        (false, false) => GATED_NO_STDIN,
        (true, true) => GUARDED,
        (false, true) => GUARDED_NO_STDIN,
    }
}

/// What the daemon changed about its own process at start, as it was before: every command
/// gets these back, so it runs exactly as it would from the user's shell.
#[derive(Debug, Clone, Copy)]
struct Inherited {
    umask: nix::sys::stat::Mode,
    /// The soft and hard open-file limits, when the daemon raised the soft one.
    open_files: Option<(u64, u64)>,
}

static INHERITED: std::sync::OnceLock<Inherited> = std::sync::OnceLock::new();

impl Inherited {
    /// Shell builtins that give a command these back. Set by the wrapper rather than between
    /// fork and exec: without a `pre_exec` hook the child is started with `posix_spawn`, which
    /// does not copy the daemon's page tables (about a millisecond per run, measured).
    /// `umask`: the caller's, which the command gets instead of the daemon's inherited one.
    fn restore_script(&self, umask: Option<u32>) -> String {
        let mut script = format!("umask {:04o}; ", umask.unwrap_or(self.umask.bits()) & 0o777);
        if let Some((soft, _)) = self.open_files {
            script.push_str(&format!("ulimit -S -n {soft}; "));
        }
        script
    }
}

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

/// Mark every descriptor above stderr close-on-exec, so that no program this process runs
/// inherits one: what its own starter left open beyond 0-2 (a caller's pipe, a jobserver, a
/// harness's descriptors) is nobody else's. The daemon calls it as it starts, so commands get
/// their stdio alone; the client in the `pre_exec` of the daemon it starts, so the daemon
/// holds none of its caller's pipes open (a `scafld list 7>&1 | cat` would never end).
/// Async-signal-safe: one `close_range(CLOSE_RANGE_CLOEXEC)`, or on a kernel without it
/// (before 5.11) `fcntl` on each descriptor below the open-file limit; nothing allocates.
pub fn close_on_exec_beyond_stdio() {
    use nix::libc;
    // SAFETY: system calls on descriptor numbers only: nothing is closed, read or allocated.
    unsafe {
        if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC) == 0 {
            return;
        }
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        let end = match libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) {
            0 => limit.rlim_cur.min(1 << 20) as libc::c_int,
            _ => 1024,
        };
        for fd in 3..end {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
}

/// Sees each chunk of a command's stdout as it arrives.
pub type OutputObserver = Box<dyn FnMut(&[u8]) + Send>;

/// What a started command waits for before its go-ahead (see [`RunRequest::gate`]).
pub type Gate = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send>>;

pub struct RunRequest {
    pub command: String,
    pub cwd: PathBuf,
    pub env: BTreeMap<String, String>,
    /// Variables set byte for byte (a name or value that is not UTF-8, as the caller had it),
    /// before `env`: a name in both takes `env`'s value.
    pub env_bytes: Vec<(OsString, OsString)>,
    pub absolute_timeout: Duration,
    pub idle_timeout: Option<Duration>,
    /// Bytes written to the command's stdin (then closed); `None` means stdin is /dev/null.
    pub stdin: Option<Vec<u8>>,
    /// Called with each chunk of stdout as it arrives (provider progress events).
    pub on_stdout: Option<OutputObserver>,
    /// Judge idleness on stdout alone: a program that prints structured events there and
    /// chatter on stderr (codex repeats "waiting for network") is idle when the events stop.
    pub idle_on_stdout: bool,
    /// Stdout is the answer, read whole: stop the run once it outgrows what is kept of it
    /// (its start dropped, it could no longer be read), rather than at its timeout.
    pub stop_past_capture: bool,
    /// Kill the whole run when the process that started it dies, however it dies (a worker
    /// killed with `kill -9` must not leave its provider running). The parent-death signal
    /// belongs to the spawning thread: call [`run`] from a runtime on the thread that lives as
    /// long as the process (a current-thread runtime's `block_on`).
    pub die_with_parent: bool,
    /// The token every process of the run carries (see [`RUN_TOKEN`]): a job's own, so that a
    /// restarted daemon finds all its runs by the one token on record; a fresh one when `None`.
    pub token: Option<String>,
    /// Awaited once the shell has started (after `on_spawn`), before the go-ahead, so that
    /// the shell's start-up overlaps whatever the caller still has to do first. On `Err` the
    /// command never runs: the shell gets EOF and exits, and the outcome's `start_error` says
    /// why. A cancel meanwhile ends the run the same way.
    pub gate: Option<Gate>,
    /// The umask the command runs under (the calling client's); `None`: the one the process
    /// inherited before [`adopt_daemon_settings`] (or its own).
    pub umask: Option<u32>,
}

/// This process's environment as a run takes it: the variables that are text, and apart
/// those whose name or value is not UTF-8, byte for byte (for [`RunRequest::env_bytes`]).
pub fn own_environment() -> (BTreeMap<String, String>, Vec<(OsString, OsString)>) {
    let (mut text, mut bytes) = (BTreeMap::new(), Vec::new());
    for (name, value) in std::env::vars_os() {
        match (name.to_str(), value.to_str()) {
            (Some(name), Some(value)) => {
                text.insert(name.to_string(), value.to_string());
            }
            _ => bytes.push((name, value)),
        }
    }
    (text, bytes)
}

impl RunRequest {
    /// `command` run in `cwd` with `env`, bounded by `absolute_timeout` alone: stdin from
    /// /dev/null, no observer, a fresh token, no gate (callers set the rest by field).
    pub fn new(command: String, cwd: PathBuf, env: BTreeMap<String, String>, absolute_timeout: Duration) -> RunRequest {
        RunRequest {
            command,
            cwd,
            env,
            env_bytes: Vec::new(),
            absolute_timeout,
            idle_timeout: None,
            stdin: None,
            on_stdout: None,
            idle_on_stdout: false,
            stop_past_capture: false,
            die_with_parent: false,
            token: None,
            gate: None,
            umask: None,
        }
    }
}

/// The run as it started: its process group and the token its processes carry.
#[derive(Debug, Clone)]
pub struct Spawned {
    pub pgid: i32,
    pub token: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillReason {
    AbsoluteTimeout,
    IdleTimeout,
    Cancelled,
    /// Stdout outgrew what is kept of it (`RunRequest::stop_past_capture`).
    OutputLimit,
}

impl KillReason {
    /// The reason [`KillReason::as_str`] names (a worker reports its run's so).
    pub fn parse(name: &str) -> Option<KillReason> {
        [KillReason::AbsoluteTimeout, KillReason::IdleTimeout, KillReason::Cancelled, KillReason::OutputLimit]
            .into_iter()
            .find(|k| k.as_str() == name)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            KillReason::AbsoluteTimeout => "absolute_timeout",
            KillReason::IdleTimeout => "idle_timeout",
            KillReason::Cancelled => "cancelled",
            KillReason::OutputLimit => "output_limit",
        }
    }
}

#[derive(Debug)]
pub struct RunOutcome {
    /// `None` when killed or not started.
    pub exit_code: Option<i32>,
    /// The signal that ended the command of itself (a crash, a `kill -9` of its own), not one of
    /// the runner's kills: its `exit_code` is `None` too (recorded -1, as the original does).
    pub signal: Option<i32>,
    pub kill_reason: Option<KillReason>,
    pub start_error: Option<String>,
    pub stdout: Capture,
    pub stderr: Capture,
    pub duration: Duration,
    /// How long the command had been silent (by the idleness rule) when the run ended.
    pub silent_for: Duration,
}

impl RunOutcome {
    /// How a command a signal ended ended, for every place that describes its exit:
    /// `killed by signal 11 (SIGSEGV)`.
    pub fn signal_death(&self) -> Option<String> {
        self.signal.map(|n| format!("killed by signal {}", signal_name(n)))
    }

    /// A runner-level failure that decides the verdict whatever the matcher.
    pub fn runner_error(&self) -> Option<String> {
        if let Some(e) = &self.start_error {
            return Some(format!("could not start the command: {e}"));
        }
        self.kill_reason.map(|k| match k {
            KillReason::AbsoluteTimeout => "process timeout".to_string(),
            KillReason::IdleTimeout => "process idle timeout".to_string(),
            KillReason::Cancelled => "cancelled".to_string(),
            KillReason::OutputLimit => format!(
                "stopped: its output passed the {} MiB kept of it, so it could not be read as an answer",
                CAPTURE_CAP >> 20
            ),
        })
    }

    /// Up to `max` bytes from the end of the combined output (stdout's, then stderr's), as
    /// text, after a line counting every byte the command printed before them: what the
    /// windows dropped included, so the count is the command's, not the window's. `max` is
    /// far below [`CAPTURE_CAP`], so a cut output always starts inside its last stream's window.
    pub fn tail(&self, max: usize) -> String {
        let (out, err) = (&self.stdout.bytes, &self.stderr.bytes);
        // A new line between the streams when stdout's does not end one (not printed: never counted).
        let joint = !out.is_empty() && !err.is_empty() && !out.ends_with(b"\n");
        let mut combined = Vec::with_capacity(out.len() + err.len() + 1);
        combined.extend_from_slice(out);
        if joint {
            combined.push(b'\n');
        }
        combined.extend_from_slice(err);
        let printed = self.stdout.total() + self.stderr.total();
        if self.stdout.dropped == 0 && self.stderr.dropped == 0 && combined.len() <= max {
            return String::from_utf8_lossy(&combined).into_owned();
        }
        let mut start = combined.len().saturating_sub(max);
        // Not inside a character: skip its continuation bytes.
        while start < combined.len() && combined[start] & 0xC0 == 0x80 {
            start += 1;
        }
        let shown = &combined[start..];
        let joint_shown = joint && start <= out.len();
        let earlier = printed - (shown.len() - usize::from(joint_shown)) as u64;
        format!("[... {earlier} earlier bytes]\n{}", String::from_utf8_lossy(shown))
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

    /// The retained bytes exactly as the command printed them, after a line naming what was
    /// dropped before them: what a diagnostics file keeps (lossless on disk).
    pub fn kept(&self) -> Vec<u8> {
        let mut kept = match self.dropped {
            0 => Vec::new(),
            dropped => format!("[truncated {dropped} earlier bytes]\n").into_bytes(),
        };
        kept.extend_from_slice(&self.bytes);
        kept
    }

    /// [`Capture::kept`] as lossy text: invalid UTF-8 becomes U+FFFD, so it never decides a verdict.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.kept()).into_owned()
    }
}

/// Run the command; `on_spawn` gets its process group as soon as it exists, before the command
/// may start.
pub async fn run(mut request: RunRequest, cancel: CancellationToken, on_spawn: impl FnOnce(&Spawned)) -> RunOutcome {
    let started = Instant::now();
    let mut outcome = RunOutcome {
        exit_code: None,
        signal: None,
        kill_reason: None,
        start_error: None,
        stdout: Capture::default(),
        stderr: Capture::default(),
        duration: Duration::ZERO,
        silent_for: Duration::ZERO,
    };
    // Every descendant inherits it (unless it clears its environment): found by it, a process
    // that left the group with setsid is killed with the group (one that cleared it too is
    // found by parentage under a subreaper: `reaper`).
    let token = request
        .token
        .take()
        .unwrap_or_else(|| crate::new_id().unwrap_or_else(|_| format!("{}-{}", std::process::id(), unix_nanos())));
    // By path: a PATH lookup tries (and fails) every earlier directory first, for each run.
    let mut command = Command::new("/bin/sh");
    if request.die_with_parent {
        let parent = nix::unistd::getpid();
        // SAFETY: prctl(2) and getppid(2) are async-signal-safe, touch only this child, and
        // nothing here allocates (an error is a raw errno).
        unsafe {
            command.pre_exec(move || {
                nix::sys::prctl::set_pdeathsig(Signal::SIGTERM).map_err(std::io::Error::from)?;
                // A parent that died before the signal was armed would never send it.
                if nix::unistd::getppid() != parent {
                    return Err(std::io::Error::from(nix::errno::Errno::ESRCH));
                }
                Ok(())
            });
        }
    }
    let mut script = match INHERITED.get() {
        Some(inherited) => inherited.restore_script(request.umask),
        None => request.umask.map(|umask| format!("umask {:04o}; ", umask & 0o777)).unwrap_or_default(),
    };
    script.push_str(wrapper(request.stdin.is_some(), request.die_with_parent));
    let (spawned, tracked) = crate::reaper::spawn_tracked(
        || {
            command
                .arg("-c")
                .arg(script)
                .arg("sh")
                .arg(&request.command)
                .current_dir(&request.cwd)
                .env_clear()
                .envs(request.env_bytes.iter().map(|(name, value)| (name, value)))
                .envs(&request.env)
                .env(RUN_TOKEN, &token)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .process_group(0)
                .kill_on_drop(true)
                .spawn()
        },
        |child| child.id(),
    );
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            outcome.start_error = Some(e.to_string());
            return outcome;
        }
    };
    let pgid = child.id().map(|id| id as i32).unwrap_or(0);
    on_spawn(&Spawned { pgid, token: token.clone() });
    let held = match request.gate.take() {
        Some(gate) => tokio::select! {
            opened = gate => opened.err(),
            _ = cancel.cancelled() => {
                outcome.kill_reason = Some(KillReason::Cancelled);
                Some("cancelled before it started".to_string())
            }
        },
        None => None,
    };
    if held.is_some() {
        // No go-ahead: the wrapper reads EOF and exits without running the command.
        drop(child.stdin.take());
    }
    if let Some(mut pipe) = child.stdin.take() {
        use tokio::io::AsyncWriteExt;
        match request.stdin.take() {
            // Input is fed from its own task, so a reader that does not drain stdin cannot
            // stall the run.
            Some(stdin) => {
                let mut input = b"\n".to_vec();
                input.extend_from_slice(&stdin);
                tokio::spawn(async move {
                    let _ = pipe.write_all(&input).await;
                });
            }
            // The go-ahead line alone always fits in an empty pipe; the wrapper then reads
            // its input from /dev/null.
            None => {
                let _ = pipe.write_all(b"\n").await;
            }
        }
    }
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let (mut out_open, mut err_open) = (true, true);
    let (mut out_buf, mut err_buf) = (PipeBuf::default(), PipeBuf::default());
    let deadline = after(request.absolute_timeout);
    let idle_sleep = tokio::time::sleep_until(request.idle_timeout.map_or_else(far_future, after));
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
            read = out_buf.read(&mut stdout), if out_open => match read {
                Some(n) => {
                    let chunk = &out_buf.0[..n];
                    outcome.stdout.push(chunk);
                    if let Some(observe) = request.on_stdout.as_mut() { observe(chunk); }
                    if request.stop_past_capture && outcome.stdout.dropped > 0 {
                        outcome.kill_reason = Some(KillReason::OutputLimit);
                        break;
                    }
                    if !request.idle_on_stdout || progress.feed(chunk) {
                        last_byte = Instant::now();
                        if let Some(idle) = request.idle_timeout { idle_sleep.as_mut().reset(after(idle)); }
                    }
                }
                None => out_open = false,
            },
            read = err_buf.read(&mut stderr), if err_open => match read {
                Some(n) => {
                    outcome.stderr.push(&err_buf.0[..n]);
                    if !request.idle_on_stdout {
                        last_byte = Instant::now();
                        if let Some(idle) = request.idle_timeout { idle_sleep.as_mut().reset(after(idle)); }
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
    kill_carriers_in(&token, PidRange::of_run(pgid, started.elapsed()));
    let status = match status {
        Some(status) => status.ok(),
        None => child.wait().await.ok(),
    };
    // And what it orphaned onto a subreaper (no group, no token: `env -i setsid ...`).
    if let Some(tracked) = tracked {
        tracked.finish(pgid).await;
    }
    let ended = status.filter(|_| outcome.kill_reason.is_none() && held.is_none());
    outcome.exit_code = ended.and_then(|s| s.code());
    outcome.signal = ended.and_then(|s| std::os::unix::process::ExitStatusExt::signal(&s));
    outcome.start_error = outcome.start_error.or(held);
    outcome.duration = started.elapsed();
    outcome.silent_for = last_byte.elapsed();
    outcome
}

/// A signal by its number and name: `11 (SIGSEGV)` (the number alone for one unknown here).
pub fn signal_name(n: i32) -> String {
    match Signal::try_from(n) {
        Ok(signal) => format!("{n} ({})", signal.as_str()),
        Err(_) => n.to_string(),
    }
}

/// A pipe's read buffer: small while the command prints little (most criteria print nothing,
/// and zeroing and freeing two 64 KiB buffers per run showed in the build step's profile),
/// doubled each time a read fills it, up to a pipe's default capacity.
struct PipeBuf(Vec<u8>);

impl Default for PipeBuf {
    fn default() -> PipeBuf {
        PipeBuf(vec![0; 4 * 1024])
    }
}

impl PipeBuf {
    const LARGEST: usize = 64 * 1024;

    /// The next chunk, in `self.0[..n]`; `None` once the pipe is closed or fails.
    async fn read(&mut self, stream: &mut (impl AsyncRead + Unpin)) -> Option<usize> {
        let n = match stream.read(&mut self.0).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => n,
        };
        if n == self.0.len() && n < Self::LARGEST {
            // The chunk read stays in the first half; the caller reads it before the next read.
            self.0.resize(n * 2, 0);
        }
        Some(n)
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
pub fn kill_group(pgid: i32) {
    if pgid > 0 {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
}

/// The variable that marks every process of one run.
pub const RUN_TOKEN: &str = "SCAFLD_RUN_TOKEN";

/// SIGKILL every process of ours whose environment carries `token` (see [`RUN_TOKEN`]), and the
/// whole group of each that leads one (what it started with a cleared environment goes too);
/// returns how many carriers. Only our own processes' environments are readable, and a random
/// token cannot name anything else.
pub fn kill_carriers(token: &str) -> usize {
    kill_carriers_in(token, PidRange::All)
}

/// The pids [`kill_carriers_in`] reads the environment of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PidRange {
    All,
    /// From a run's leader through the latest pid handed out, wrapping at `pid_max`.
    Since {
        leader: i32,
        last: i32,
    },
}

impl PidRange {
    /// The pids a run that started with `leader` and `lasted` this long can have given its
    /// processes. Linux hands pids out in increasing order, wrapping at `pid_max`, so they lie
    /// from the leader's through the latest (`ns_last_pid`), unless the whole pid space went
    /// round meanwhile: that is only ruled out for a run shorter than a second on a system
    /// with at least 32768 pids. Otherwise, or when either file cannot be read, all of them.
    /// (Reading every process's environment costs about 0.35 ms a run; this is most of it.)
    pub fn of_run(leader: i32, lasted: Duration) -> PidRange {
        let read = |file: &str| crate::proc::read_small(file, &mut [0; 32])?.trim().parse::<i32>().ok();
        // Read once: it is only held against a floor (lowered below it later, unnoticed).
        static PID_MAX: std::sync::OnceLock<Option<i32>> = std::sync::OnceLock::new();
        let pid_max = *PID_MAX.get_or_init(|| read("/proc/sys/kernel/pid_max"));
        match (pid_max, read("/proc/sys/kernel/ns_last_pid")) {
            (Some(max), Some(last)) if leader > 0 && max >= 32_768 && lasted < Duration::from_secs(1) => {
                PidRange::Since { leader, last }
            }
            _ => PidRange::All,
        }
    }

    pub fn contains(self, pid: i32) -> bool {
        match self {
            PidRange::All => true,
            PidRange::Since { leader, last } if leader <= last => (leader..=last).contains(&pid),
            PidRange::Since { leader, last } => pid >= leader || pid <= last,
        }
    }

    /// The pids to look at, in the order they were handed out: a short unwrapped range is
    /// counted out (a quick run's handful of pids, without listing every process in `/proc`);
    /// anything else is the live processes in the range.
    fn candidates(self) -> Vec<i32> {
        const COUNTED: i32 = 1024;
        match self {
            PidRange::Since { leader, last } if leader <= last && last - leader < COUNTED => (leader..=last).collect(),
            _ => {
                let mut pids: Vec<i32> = std::fs::read_dir("/proc")
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
                    .filter(|pid| *pid > 0 && self.contains(*pid))
                    .collect();
                self.in_order_handed_out(&mut pids);
                pids
            }
        }
    }

    /// Sort `pids` in the order the range handed them out: a wrapped range its top first.
    fn in_order_handed_out(self, pids: &mut [i32]) {
        let wrapped_from = match self {
            PidRange::Since { leader, last } if leader > last => leader,
            _ => 0,
        };
        pids.sort_unstable_by_key(|pid| (*pid < wrapped_from, *pid));
    }
}

/// Which processes of a run's pid range descend from this one. A subreaper's runs leave
/// nothing that does not (what they orphan is re-parented to it), and within a range that did
/// not wrap round, every process's parent was handed its pid first: so, taking the pids in
/// order, a process is ours when its parent is this process or one found ours before. Only
/// ours have their environment read: under load the range is full of other programs'
/// processes, and reading one's environment takes its memory map's lock.
struct Lineage {
    ours: Vec<i32>,
    /// Off where this is no subreaper (what a run orphans goes elsewhere) and for
    /// [`PidRange::All`] (no order to go by).
    checked: bool,
}

impl Lineage {
    fn of(range: PidRange) -> Lineage {
        let checked = matches!(range, PidRange::Since { .. }) && crate::reaper::is_subreaper();
        Lineage { ours: vec![std::process::id() as i32], checked }
    }

    fn admits(&mut self, pid: i32) -> bool {
        self.admits_by(pid, |pid| crate::proc::stat(pid).map(|stat| stat.parent))
    }

    /// [`Lineage::admits`] with `parent_of` telling a live process's parent (`None`: gone).
    fn admits_by(&mut self, pid: i32, parent_of: impl Fn(i32) -> Option<i32>) -> bool {
        if !self.checked {
            return true;
        }
        let ours = parent_of(pid).is_some_and(|parent| self.ours.contains(&parent));
        if ours {
            self.ours.push(pid);
        }
        ours
    }
}

/// [`kill_carriers`] among the pids in `range`.
pub fn kill_carriers_in(token: &str, range: PidRange) -> usize {
    if token.is_empty() {
        return 0;
    }
    let needle = format!("{RUN_TOKEN}={token}");
    let own = std::process::id() as i32;
    let mut lineage = Lineage::of(range);
    let mut killed = 0;
    for pid in range.candidates().into_iter().filter(|pid| *pid != own) {
        if !lineage.admits(pid) {
            continue;
        }
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else { continue };
        if environ.split(|b| *b == 0).any(|var| var == needle.as_bytes()) {
            let pid = Pid::from_raw(pid);
            if nix::unistd::getpgid(Some(pid)) == Ok(pid) {
                let _ = killpg(pid, Signal::SIGKILL);
            }
            if nix::sys::signal::kill(pid, Signal::SIGKILL).is_ok() {
                killed += 1;
            }
        }
    }
    killed
}

/// A process's start in clock ticks since boot (with the boot id, what tells a process
/// group apart from a later one given the same id).
pub fn start_ticks(pid: i32) -> Option<u64> {
    crate::proc::stat(pid).map(|stat| stat.start_ticks)
}

/// This boot's id: a process group id only names the same group within one boot. Kept once
/// read (a process lives within one boot); a failed read is tried again next time.
pub fn boot_id() -> Option<String> {
    static BOOT_ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    if let Some(id) = BOOT_ID.get() {
        return Some(id.clone());
    }
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?.trim().to_string();
    Some(BOOT_ID.get_or_init(|| id).clone())
}

/// A year from now: what stands for "never" in a timer.
fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(365 * 24 * 3600)
}

/// `timeout` from now; a timeout too long for the clock (a spec may say 18446744073709551615
/// seconds) is as good as none.
fn after(timeout: Duration) -> tokio::time::Instant {
    tokio::time::Instant::now().checked_add(timeout).unwrap_or_else(far_future)
}

fn unix_nanos() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Output, Stdio};

    use super::{GATED, GATED_NO_STDIN, GUARDED, GUARDED_NO_STDIN};

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
    fn a_runs_pid_range_runs_from_its_leader_to_the_latest_pid_and_wraps() {
        use super::PidRange;
        let range = PidRange::Since { leader: 100, last: 200 };
        assert!(range.contains(100) && range.contains(150) && range.contains(200));
        assert!(!range.contains(99) && !range.contains(201));
        let wrapped = PidRange::Since { leader: 32_000, last: 50 };
        assert!(wrapped.contains(32_000) && wrapped.contains(32_767) && wrapped.contains(2) && wrapped.contains(50));
        assert!(!wrapped.contains(51) && !wrapped.contains(31_999));
        assert!(PidRange::All.contains(1));
        // A short range is counted out; a long or wrapped one (and All) lists /proc.
        assert_eq!(PidRange::Since { leader: 100, last: 103 }.candidates(), vec![100, 101, 102, 103]);
        let own = std::process::id() as i32;
        let listed = PidRange::Since { leader: own - 5000, last: own }.candidates();
        assert!(listed.contains(&own) && listed.iter().all(|p| (own - 5000..=own).contains(p)), "{listed:?}");
        assert!(PidRange::All.candidates().contains(&own));
        // A long run may have seen the pid space go round: everything is read.
        assert_eq!(PidRange::of_run(100, std::time::Duration::from_secs(5)), PidRange::All);
        // A process started now has a pid inside the range of a short run that began before it.
        let before = std::fs::read_to_string("/proc/sys/kernel/ns_last_pid").ok().and_then(|s| s.trim().parse().ok());
        let mut child = std::process::Command::new("true").spawn().unwrap();
        if let Some(before) = before {
            let range = PidRange::of_run(before, std::time::Duration::from_millis(1));
            assert!(range.contains(child.id() as i32), "{range:?} misses {}", child.id());
        }
        child.wait().unwrap();
    }

    #[test]
    fn a_runs_descendants_are_found_in_the_order_their_pids_were_handed_out() {
        use super::{Lineage, PidRange};
        // Parents in a range that wrapped at 32768: the run's leader 32760 under us (100),
        // its child 32765, whose child 3 got a pid after the wrap; 32762 and its child 4 are
        // another program's; 5 is an orphan re-parented to us; 6 is gone.
        let parents = [(32760, 100), (32762, 999), (32765, 32760), (3, 32765), (4, 32762), (5, 100)];
        let parent_of = |pid: i32| parents.iter().find(|(p, _)| *p == pid).map(|(_, parent)| *parent);
        let range = PidRange::Since { leader: 32760, last: 6 };
        let mut pids = vec![6, 5, 4, 3, 32765, 32762, 32760];
        range.in_order_handed_out(&mut pids);
        assert_eq!(pids, [32760, 32762, 32765, 3, 4, 5, 6]);
        let mut lineage = Lineage { ours: vec![100], checked: true };
        let admitted: Vec<i32> = pids.into_iter().filter(|pid| lineage.admits_by(*pid, parent_of)).collect();
        assert_eq!(admitted, [32760, 32765, 3, 5]);
        // Unchecked (not a subreaper, or every process): every pid is read.
        let mut unchecked = Lineage { ours: vec![100], checked: false };
        assert!(unchecked.admits_by(4, parent_of));
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

    #[test]
    fn the_guarded_gate_hands_over_input_arguments_and_exit_status_alike() {
        let out = gated(GUARDED, "echo ran", b"");
        assert_eq!((out.status.code(), out.stdout.as_slice()), (Some(125), &b""[..]));
        let out = gated(GUARDED, r#"printf '%s|' "a b" 'c' "$#"; cat; exit 3"#, b"\nline one\n");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "a b|c|0|line one\n");
        assert_eq!(out.status.code(), Some(3));
        let out = gated(GUARDED_NO_STDIN, "cat; echo done", b"\nleft over\n");
        assert_eq!((out.status.code(), String::from_utf8_lossy(&out.stdout).as_ref()), (Some(0), "done\n"));
    }

    /// TERM to the guarded shell (what the parent's death sends) kills the whole group at once,
    /// not after the foreground command ends.
    #[test]
    fn the_guarded_shell_kills_its_group_on_term() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("survived");
        let command = format!("sleep 3 & sleep 3; touch {}", marker.display());
        let mut child = Command::new("sh")
            .args(["-c", GUARDED, "sh", &command])
            .stdin(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(b"\n").unwrap();
        let group = nix::unistd::Pid::from_raw(child.id() as i32);
        // Wait until the command's sleeps run in the group, then send what a dying parent sends.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while members(child.id()) < 3 {
            assert!(std::time::Instant::now() < deadline, "the command never started");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGTERM).unwrap();
        let started = std::time::Instant::now();
        let _ = child.wait().unwrap();
        while members(child.id()) > 0 {
            assert!(started.elapsed() < std::time::Duration::from_secs(2), "the group outlived the TERM");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(!marker.exists());
    }

    /// Live processes in process group `pgid`.
    fn members(pgid: u32) -> usize {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
            .filter(|stat| {
                let after = &stat[stat.rfind(')').unwrap() + 1..];
                let fields: Vec<&str> = after.split_whitespace().collect();
                fields.first() != Some(&"Z") && fields.get(2) == Some(&pgid.to_string().as_str())
            })
            .count()
    }

    /// A program that chatters on stderr but prints no events is idle when stdout alone
    /// counts (codex's "waiting for network" line never stops), and alive when both count.
    #[tokio::test]
    async fn idleness_can_be_judged_on_stdout_alone() {
        let dir = tempfile::tempdir().unwrap();
        let chatter = "i=0; while [ $i -lt 25 ]; do echo waiting >&2; sleep 0.1; i=$((i+1)); done";
        let request = |idle_on_stdout| super::RunRequest {
            idle_timeout: Some(std::time::Duration::from_millis(1500)),
            idle_on_stdout,
            ..plain(chatter, dir.path())
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

    /// The note before a cut output counts every byte printed before what is shown, the bytes
    /// the 8 MiB windows dropped included (it once counted only the window's); the new line
    /// put between the streams is never counted, and a cut never splits a character.
    #[test]
    fn a_cut_outputs_note_counts_what_the_command_printed_before_it() {
        let outcome = |out: &[u8], err: &[u8]| {
            let mut o = super::RunOutcome {
                exit_code: Some(0),
                signal: None,
                kill_reason: None,
                start_error: None,
                stdout: super::Capture::default(),
                stderr: super::Capture::default(),
                duration: std::time::Duration::ZERO,
                silent_for: std::time::Duration::ZERO,
            };
            // In pipe-sized chunks, as the runner pushes them.
            out.chunks(64 * 1024).for_each(|c| o.stdout.push(c));
            err.chunks(64 * 1024).for_each(|c| o.stderr.push(c));
            o
        };
        let note = |text: &str| -> u64 {
            let line = text.lines().next().unwrap();
            line.strip_prefix("[... ").and_then(|l| l.strip_suffix(" earlier bytes]")).unwrap().parse().unwrap()
        };
        let big = vec![b'x'; 3 * super::CAPTURE_CAP];
        let cut = outcome(&big, b"");
        assert!(cut.stdout.dropped > 0);
        let tail = cut.tail(1000);
        assert_eq!(note(&tail), big.len() as u64 - 1000, "{}", &tail[..40]);
        assert_eq!(tail.split_once('\n').unwrap().1, "x".repeat(1000));

        // stderr after a dropped stdout: stdout's last bytes, the joint line, all of stderr.
        let both = outcome(&big, b"err\n");
        let tail = both.tail(1000);
        assert_eq!(note(&tail), big.len() as u64 - (1000 - 1 - 4), "{}", &tail[..40]);
        assert!(tail.ends_with("x\nerr\n"));
        // Cut inside stderr alone: stdout is all earlier, the joint never counted.
        let tail = outcome(b"out", &big).tail(10);
        assert_eq!(note(&tail), 3 + big.len() as u64 - 10);

        // A cut that would split a character starts after it.
        let tail = outcome("é".repeat(600).as_bytes(), b"").tail(1001);
        assert_eq!((note(&tail), tail.split_once('\n').unwrap().1), (200, "é".repeat(500).as_str()));
        // Within `max`, nothing is cut and there is no note.
        assert_eq!(outcome(b"out", b"err").tail(100), "out\nerr");
    }

    /// `command` in `dir` with the test's environment, a 20 s timeout and nothing else.
    fn plain(command: &str, dir: &std::path::Path) -> super::RunRequest {
        let timeout = std::time::Duration::from_secs(20);
        super::RunRequest::new(command.into(), dir.to_path_buf(), std::env::vars().collect(), timeout)
    }

    /// A run whose stdout is its answer stops once that outgrows what is kept of it, instead
    /// of streaming to its timeout; any other run keeps the end of its output.
    #[tokio::test]
    async fn a_run_whose_stdout_is_its_answer_stops_past_the_capture() {
        let dir = tempfile::tempdir().unwrap();
        let endless = |stop_past_capture| super::RunRequest {
            stop_past_capture,
            ..plain("echo start; exec yes 0123456789abcdef", dir.path())
        };
        let cancel = tokio_util::sync::CancellationToken::new;
        let stopped = super::run(endless(true), cancel(), |_| {}).await;
        assert_eq!(stopped.kill_reason, Some(super::KillReason::OutputLimit));
        assert!(stopped.runner_error().unwrap().contains("passed the 8 MiB kept of it"));
        assert!(stopped.stdout.dropped > 0 && stopped.duration < std::time::Duration::from_secs(20));
        let bounded = super::RunRequest { absolute_timeout: std::time::Duration::from_secs(1), ..endless(false) };
        let timed_out = super::run(bounded, cancel(), |_| {}).await;
        assert_eq!(timed_out.kill_reason, Some(super::KillReason::AbsoluteTimeout));
    }

    /// Output arrives whole and in order on both pipes, from a few bytes to many times a read
    /// buffer, as the buffers grow from their small start.
    #[tokio::test]
    async fn output_of_any_size_is_captured_whole() {
        let dir = tempfile::tempdir().unwrap();
        for lines in [1, 900, 40_000] {
            let command = format!("seq 1 {lines}; seq 1 {lines} >&2");
            let outcome =
                super::run(plain(&command, dir.path()), tokio_util::sync::CancellationToken::new(), |_| {}).await;
            let expected: String = (1..=lines).map(|n| format!("{n}\n")).collect();
            assert_eq!(outcome.exit_code, Some(0));
            assert_eq!((outcome.stdout.dropped, outcome.stderr.dropped), (0, 0));
            assert!(outcome.stdout.bytes == expected.as_bytes(), "stdout of {lines} lines differs");
            assert!(outcome.stderr.bytes == expected.as_bytes(), "stderr of {lines} lines differs");
        }
    }

    /// Timeouts too long for the clock (a spec may say `Timeout seconds: 18446744073709551615`)
    /// mean no timeout, not a panic that leaves the job running for ever.
    #[tokio::test]
    async fn a_timeout_too_long_for_the_clock_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let request = super::RunRequest {
            absolute_timeout: std::time::Duration::from_secs(u64::MAX),
            idle_timeout: Some(std::time::Duration::MAX),
            ..plain("printf ok", dir.path())
        };
        let outcome = super::run(request, tokio_util::sync::CancellationToken::new(), |_| {}).await;
        assert_eq!((outcome.kill_reason, outcome.exit_code), (None, Some(0)));
    }

    /// A gated run's command waits for its gate and runs only when it opens; a gate that fails
    /// or a cancel while it waits leaves the command unrun, saying why.
    #[tokio::test]
    async fn a_gated_command_runs_only_once_its_gate_opens() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let request = |gate: super::Gate| super::RunRequest { gate: Some(gate), ..plain("touch ran", dir.path()) };
        let cancel = tokio_util::sync::CancellationToken::new;

        let refused = super::run(request(Box::pin(async { Err("no material".to_string()) })), cancel(), |_| {}).await;
        assert_eq!((refused.exit_code, refused.start_error.as_deref()), (None, Some("no material")));
        assert!(!marker.exists(), "the command ran although its gate failed");

        let stopped = cancel();
        let (stop, pending) = (stopped.clone(), Box::pin(std::future::pending()));
        let cancelled = tokio::spawn(super::run(request(pending), stopped, move |_| stop.cancel()));
        let cancelled = cancelled.await.unwrap();
        assert_eq!(cancelled.kill_reason, Some(super::KillReason::Cancelled));
        assert!(cancelled.start_error.is_some() && !marker.exists(), "{:?}", cancelled.start_error);

        // Opened only once the shell is up and waiting: the command runs then.
        let (open, opened) = tokio::sync::oneshot::channel::<()>();
        let gate = Box::pin(async move { opened.await.map_err(|e| e.to_string()) });
        let ran = super::run(request(gate), cancel(), move |_| {
            let _ = open.send(());
        })
        .await;
        assert_eq!((ran.exit_code, ran.start_error), (Some(0), None));
        assert!(marker.exists());
    }
}
