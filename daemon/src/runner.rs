//! The daemon's side of running a command (the runner itself is shared with `scafld worker`, in
//! `scafld_local::runner`): the process group put on record as the run starts, identified so
//! that recovery never kills a stranger, a diagnostics file for every run, and the commands a
//! call runs outside any job on record too ([`CallRuns`]).

use std::collections::HashSet;
use std::fmt::Write as _;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use scafld_protocol::ErrorKind;

pub use crate::domain::job::ProcessGroup;
pub use scafld_local::runner::{
    Capture, KillReason, RunOutcome, RunRequest, adopt_daemon_settings, inherited_umask, kill_carriers, terminate_group,
};
use scafld_local::runner::{boot_id, kill_group, start_ticks};
use tokio_util::sync::CancellationToken;

use crate::error::RpcError;

/// Where a run's diagnostics file goes, and what it should say about the environment.
pub struct Diagnostics {
    /// The directory of the file (created when missing).
    pub dir: PathBuf,
    /// Names of variables set on top of the caller's environment.
    pub env_overrides: Vec<String>,
}

/// Run the command with the shared runner; `on_spawn` gets its process group (with the leader's
/// identity) before the command may start, whenever a process was started. Returns the outcome and
/// the diagnostics file, written or not.
pub async fn run(
    request: RunRequest,
    diagnostics: Diagnostics,
    cancel: CancellationToken,
    on_spawn: impl FnOnce(ProcessGroup),
) -> (RunOutcome, Written) {
    let (outcome, file) = run_deferred(request, diagnostics, cancel, on_spawn).await;
    (outcome, file.written().await)
}

/// [`run`], returning as soon as the command ends, its diagnostics file not written yet (a
/// build step writes it while its next criterion's shell starts, and has all its files written
/// before it records evidence that names them).
pub async fn run_deferred(
    request: RunRequest,
    diagnostics: Diagnostics,
    cancel: CancellationToken,
    on_spawn: impl FnOnce(ProcessGroup),
) -> (RunOutcome, DiagnosticsFile) {
    let described = Described {
        command: request.command.clone(),
        cwd: request.cwd.clone(),
        idle_timeout: request.idle_timeout,
        absolute_timeout: request.absolute_timeout,
    };
    let outcome = scafld_local::runner::run(request, cancel, |spawned| {
        // Always called (a caller may have more to do before the go-ahead): a leader whose
        // start cannot be read gets a start no process has, so the group never reads as alive
        // and only the run's token (within this boot) finds what is left of it.
        let unknown = || ProcessGroup::unknown_leader(spawned.pgid, &spawned.token);
        on_spawn(ProcessGroup::led_by(spawned.pgid, &spawned.token).unwrap_or_else(unknown));
    })
    .await;
    let path = diagnostics.dir.join(format!("command-{}.txt", unix_nanos()));
    let text = diagnostics_text(&described, &diagnostics.env_overrides, &outcome);
    (outcome, DiagnosticsFile::new(path, diagnostics.dir, text))
}

/// What a command's diagnostics file records about how it was run.
pub struct Ran<'a> {
    pub command: &'a str,
    pub cwd: &'a Path,
    pub idle_timeout: Option<Duration>,
    pub absolute_timeout: Duration,
    /// Names of variables set on top of the caller's environment.
    pub env_overrides: &'a [String],
}

/// Write the diagnostics file of a run another process ran (a worker's provider), from its
/// outcome as reported: the same record, in the same place, as a run of the daemon's keeps.
pub async fn diagnostics_of(ran: &Ran<'_>, outcome: &RunOutcome, dir: PathBuf) -> Written {
    let described = Described {
        command: ran.command.to_string(),
        cwd: ran.cwd.to_path_buf(),
        idle_timeout: ran.idle_timeout,
        absolute_timeout: ran.absolute_timeout,
    };
    let path = dir.join(format!("command-{}.txt", unix_nanos()));
    let text = diagnostics_text(&described, ran.env_overrides, outcome);
    DiagnosticsFile::new(path, dir, text).written().await
}

/// Diagnostics text up to this size is written by whoever holds the file, when it suits it (a
/// build step: while its next command's shell starts up, a few syscalls with no thread
/// hand-off); anything bigger (up to twice the capture cap) at once on a blocking thread.
const WRITTEN_INLINE: usize = 64 * 1024;

/// A run's diagnostics file, still to be written or being written. A file that cannot be written
/// fails no run, but it is never cited as the record: [`DiagnosticsFile::written`] says why.
pub struct DiagnosticsFile {
    pub path: PathBuf,
    write: Write,
}

enum Write {
    Pending { dir: PathBuf, text: Vec<u8> },
    Started(tokio::task::JoinHandle<Result<(), String>>),
    Done(Result<(), String>),
}

/// A run's diagnostics file once its write ended: the file holding the whole record, or why it
/// could not be written (the OS's words; nothing is left at `path` then).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub path: PathBuf,
    pub error: Option<String>,
}

impl Written {
    /// How a message cites the record: its path, or that there is none and why.
    pub fn cited(&self) -> String {
        match &self.error {
            None => self.path.display().to_string(),
            Some(why) => format!("none, {} could not be written: {why}", self.path.display()),
        }
    }
}

impl DiagnosticsFile {
    fn new(path: PathBuf, dir: PathBuf, text: Vec<u8>) -> DiagnosticsFile {
        if text.len() <= WRITTEN_INLINE {
            return DiagnosticsFile { path, write: Write::Pending { dir, text } };
        }
        let file = path.clone();
        let write = tokio::task::spawn_blocking(move || write_diagnostics(&dir, &file, &text));
        DiagnosticsFile { path, write: Write::Started(write) }
    }

    /// Write a small file now; a big one is being written already.
    pub fn write_small(&mut self) {
        if let Write::Pending { dir, text } = &self.write {
            self.write = Write::Done(write_diagnostics(dir, &self.path, text));
        }
    }

    /// Wait until the file is written (or failed to be).
    pub async fn written(mut self) -> Written {
        self.write_small();
        let result = match self.write {
            Write::Started(write) => write.await.unwrap_or_else(|e| Err(format!("the write did not finish: {e}"))),
            Write::Done(result) => result,
            Write::Pending { .. } => unreachable!("written just above"),
        };
        Written { path: self.path, error: result.err() }
    }
}

/// Write the file whole, or leave none: a file cut short by a full disk would read as the
/// whole record. Private (0600, its folder 0700 when made here): what a command printed may
/// hold a secret of the caller's environment.
fn write_diagnostics(dir: &Path, file: &Path, text: &[u8]) -> Result<(), String> {
    crate::workspace::layout::create_private_dir(dir).map_err(|e| format!("its folder cannot be made: {e}"))?;
    crate::workspace::layout::write_private_file(file, text).map_err(|e| {
        let _ = std::fs::remove_file(file);
        e.to_string()
    })
}

/// What the diagnostics file says about the request (the request itself moves into the run).
struct Described {
    command: String,
    cwd: PathBuf,
    idle_timeout: Option<Duration>,
    absolute_timeout: Duration,
}

impl ProcessGroup {
    /// The group `pid` leads, with the leader's identity read from `/proc`, and the run's token.
    pub fn led_by(pid: i32, token: &str) -> Option<ProcessGroup> {
        Some(ProcessGroup { pgid: pid, start_ticks: start_ticks(pid)?, boot_id: boot_id()?, token: token.to_string() })
    }

    /// The group `pid` leads when its leader's start cannot be read: a start no process has, so
    /// it never reads as alive and only the run's token (within this boot) finds its processes.
    fn unknown_leader(pid: i32, token: &str) -> ProcessGroup {
        ProcessGroup { pgid: pid, start_ticks: 0, boot_id: boot_id().unwrap_or_default(), token: token.to_string() }
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

/// The commands a call runs itself, outside any job: finalize's and verify's criteria (a
/// delegated harden's provider is a job's, as a reviewer's). As with a build job, every process of one call carries one run
/// token, on disk (`<state dir>/call-runs/<token>`) before any of them may start, so the next
/// daemon kills what a crash left running ([`CallRuns::recover`]); and each is cancelled when
/// the daemon stops, its call then recording nothing ([`CallRun::cut_short`]).
pub struct CallRuns {
    dir: PathBuf,
    stop: CancellationToken,
    /// The tokens of the calls running commands now (killed at the stop, in case a call was
    /// dropped before its runner killed what it ran).
    live: Mutex<HashSet<String>>,
}

impl CallRuns {
    pub fn new(state_dir: &Path, stop: CancellationToken) -> CallRuns {
        CallRuns { dir: state_dir.join("call-runs"), stop, live: Mutex::default() }
    }

    /// Put a call's run token on record (synced) before it runs anything; refused once the
    /// daemon stops. `what` names the call in the log and in the stop's error.
    pub async fn begin(&self, what: &str) -> crate::error::RpcResult<CallRun<'_>> {
        let run = CallRun { runs: self, token: scafld_local::new_id().map_err(RpcError::internal)?, what: what.into() };
        if self.stop.is_cancelled() {
            return Err(run.stopping());
        }
        let (dir, file, text) = (self.dir.clone(), run.file(), what.to_string());
        let written = tokio::task::spawn_blocking(move || {
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
            crate::workspace::specfile::write_atomic_mode(&file, text.as_bytes(), 0o600)
        })
        .await
        .map_err(RpcError::internal)?;
        written.map_err(|e| {
            RpcError::new(
                ErrorKind::Internal,
                format!("cannot put the commands of {what} on record in {}: {e}; nothing was run", self.dir.display()),
            )
            .with_hint("free space in the daemon's state directory (or make it writable), then run it again")
        })?;
        crate::sync::lock(&self.live).insert(run.token.clone());
        Ok(run)
    }

    /// At start, before any call: kill what the calls of a daemon that died left running (every
    /// process carrying one of their tokens, with the groups they lead), and forget them.
    pub fn recover(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return };
        for entry in entries.flatten() {
            let token = entry.file_name().to_string_lossy().into_owned();
            if !is_token(&token) {
                continue; // an interrupted write's temporary file, or nothing of ours
            }
            let what = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let killed = kill_carriers(&token);
            if killed > 0 {
                tracing::info!(run = %token, "killed {killed} process(es) left running by {what} when the daemon stopped");
            }
            let _ = std::fs::remove_file(entry.path());
        }
    }

    /// At the stop: kill whatever a call still running left (its runner was cancelled and
    /// kills its own; this is for a call dropped before it could).
    pub fn kill_all(&self) {
        for token in crate::sync::lock(&self.live).iter() {
            kill_carriers(token);
        }
    }
}

/// Whether a file name in the record folder is a run token ([`scafld_local::new_id`]: hex).
fn is_token(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.bytes().all(|b| b.is_ascii_hexdigit())
}

/// One call's commands, on record while it lives (see [`CallRuns`]).
pub struct CallRun<'a> {
    runs: &'a CallRuns,
    token: String,
    what: String,
}

impl CallRun<'_> {
    /// The token every process of this call carries (`RunRequest::token`).
    pub fn token(&self) -> String {
        self.token.clone()
    }

    /// What cancels the call's commands: the daemon's stop.
    pub fn cancel(&self) -> CancellationToken {
        self.runs.stop.clone()
    }

    /// The stop's error when `outcome` is a run the stop cut short: no evidence either way,
    /// and the call records nothing.
    pub fn cut_short(&self, outcome: &RunOutcome) -> crate::error::RpcResult<()> {
        match outcome.kill_reason {
            Some(KillReason::Cancelled) => Err(self.stopping()),
            _ => Ok(()),
        }
    }

    /// The daemon is stopping: the call ran (or runs) nothing more and records nothing.
    pub fn stopping(&self) -> RpcError {
        RpcError::new(
            ErrorKind::ShuttingDown,
            format!("the daemon is stopping: {} was cut short and recorded nothing", self.what),
        )
        .with_hint("run it again: the next scafld command starts the daemon")
    }

    fn file(&self) -> PathBuf {
        self.runs.dir.join(&self.token)
    }
}

impl Drop for CallRun<'_> {
    /// The runner killed what the call ran before it returned: the record goes.
    fn drop(&mut self) {
        crate::sync::lock(&self.runs.live).remove(&self.token);
        let _ = std::fs::remove_file(self.file());
    }
}

fn unix_nanos() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

/// The diagnostics file's bytes: a text header, then what the command printed on each stream
/// as it printed it (never made UTF-8: the bytes a user debugs with, and as many as
/// `stdout_bytes` counts).
fn diagnostics_text(request: &Described, env_overrides: &[String], outcome: &RunOutcome) -> Vec<u8> {
    let mut text = String::new();
    let _ = writeln!(text, "command: {}", request.command);
    let _ = writeln!(text, "cwd: {}", request.cwd.display());
    let _ = writeln!(text, "env_overrides: {}", env_overrides.join(","));
    let _ = writeln!(text, "exit_code: {}", outcome.exit_code.map(|c| c.to_string()).unwrap_or_else(|| "-1".into()));
    let _ = writeln!(text, "kill_reason: {}", outcome.kill_reason.map(KillReason::as_str).unwrap_or(""));
    // A signal the command died of (exit_code says -1): which one, for the one debugging it.
    if let Some(signal) = outcome.signal {
        let _ = writeln!(text, "signal: {}", scafld_local::runner::signal_name(signal));
    }
    if let Some(e) = &outcome.start_error {
        let _ = writeln!(text, "start_error: {e}");
    }
    let _ = writeln!(text, "wall_elapsed: {:.3}s", outcome.duration.as_secs_f64());
    let _ = writeln!(text, "time_since_last_byte: {:.3}s", outcome.silent_for.as_secs_f64());
    let _ = writeln!(
        text,
        "idle_timeout: {}",
        request.idle_timeout.map(|d| format!("{}s", d.as_secs())).unwrap_or("0".into())
    );
    let _ = writeln!(text, "absolute_timeout: {}s", request.absolute_timeout.as_secs());
    let _ = writeln!(text, "stdout_bytes: {} (dropped {})", outcome.stdout.total(), outcome.stdout.dropped);
    let _ = writeln!(text, "stderr_bytes: {} (dropped {})", outcome.stderr.total(), outcome.stderr.dropped);
    let mut bytes = text.into_bytes();
    for (name, capture) in [("stdout", &outcome.stdout), ("stderr", &outcome.stderr)] {
        bytes.extend_from_slice(format!("{name}:\n").as_bytes());
        bytes.extend_from_slice(&capture.kept());
        bytes.push(b'\n');
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A group recorded without its leader's start is never taken for alive, and recovery still
    /// finds its processes by the run's token.
    #[test]
    fn a_group_whose_leader_was_unknown_is_found_by_its_token() {
        let token = format!("unknown-leader-{}", std::process::id());
        let mut child =
            std::process::Command::new("sleep").arg("30").env(scafld_local::runner::RUN_TOKEN, &token).spawn().unwrap();
        // Carrying the token once its environment reads so (a loaded machine may show the
        // parent's for a moment after the spawn).
        let needle = format!("{}={token}", scafld_local::runner::RUN_TOKEN);
        let carries = || {
            std::fs::read(format!("/proc/{}/environ", child.id()))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|var| var == needle.as_bytes()))
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !carries() {
            assert!(std::time::Instant::now() < deadline, "the child never showed its token");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let group = ProcessGroup::unknown_leader(child.id() as i32, &token);
        assert!(!group.is_alive());
        assert!(group.kill_if_ours(), "the token's carrier is killed");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(child.wait().unwrap().signal(), Some(9));
    }
}
