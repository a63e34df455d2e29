//! The daemon's side of running a command (the runner itself is shared with `scafld worker`, in
//! `scafld_local::runner`): the process group put on record as the run starts, identified so
//! that recovery never kills a stranger, and a diagnostics file for every run.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use crate::domain::job::ProcessGroup;
pub use scafld_local::runner::{
    Capture, KillReason, RunOutcome, RunRequest, adopt_daemon_settings, inherited_umask, kill_carriers, terminate_group,
};
use scafld_local::runner::{boot_id, kill_group, start_ticks};
use tokio_util::sync::CancellationToken;

/// Where a run's diagnostics file goes, and what it should say about the environment.
pub struct Diagnostics {
    /// The directory of the file (created when missing).
    pub dir: PathBuf,
    /// Names of variables set on top of the caller's environment.
    pub env_overrides: Vec<String>,
}

/// Run the command with the shared runner; `on_spawn` gets its process group (with the leader's
/// identity) before the command may start, whenever a process was started. Returns the outcome and the diagnostics file written.
pub async fn run(
    request: RunRequest,
    diagnostics: Diagnostics,
    cancel: CancellationToken,
    on_spawn: impl FnOnce(ProcessGroup),
) -> (RunOutcome, PathBuf) {
    let (outcome, file) = run_deferred(request, diagnostics, cancel, on_spawn).await;
    (outcome, file.written().await)
}

/// [`run`], returning as soon as the command ends: its diagnostics file is still being written
/// (a build step starts its next criterion meanwhile, and waits for its files before it records
/// evidence that names them).
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
    let (dir, file) = (diagnostics.dir, path.clone());
    // Up to twice the capture cap: written on a blocking thread.
    let write = tokio::task::spawn_blocking(move || {
        if crate::workspace::layout::create_real_dir(&dir).is_ok() {
            let _ = crate::workspace::layout::write_user_file(&file, text.as_bytes());
        }
    });
    (outcome, DiagnosticsFile { path, write })
}

/// A run's diagnostics file, possibly still being written.
pub struct DiagnosticsFile {
    pub path: PathBuf,
    write: tokio::task::JoinHandle<()>,
}

impl DiagnosticsFile {
    /// Wait until the file is written (or failed to be: a diagnostics file is best effort).
    pub async fn written(self) -> PathBuf {
        let _ = self.write.await;
        self.path
    }
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

fn unix_nanos() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

fn diagnostics_text(request: &Described, env_overrides: &[String], outcome: &RunOutcome) -> String {
    let mut text = String::new();
    let _ = writeln!(text, "command: {}", request.command);
    let _ = writeln!(text, "cwd: {}", request.cwd.display());
    let _ = writeln!(text, "env_overrides: {}", env_overrides.join(","));
    let _ = writeln!(text, "exit_code: {}", outcome.exit_code.map(|c| c.to_string()).unwrap_or_else(|| "-1".into()));
    let _ = writeln!(text, "kill_reason: {}", outcome.kill_reason.map(KillReason::as_str).unwrap_or(""));
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
    let _ = write!(text, "stdout:\n{}\nstderr:\n{}\n", outcome.stdout.text(), outcome.stderr.text());
    text
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
        // `spawn` returns while the child may still be in its `exec`, before the kernel shows
        // its new environment: the token is looked for once it is there (as after a crash).
        let (environ, carried) =
            (format!("/proc/{}/environ", child.id()), format!("{}={token}", scafld_local::runner::RUN_TOKEN));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !std::fs::read(&environ).unwrap_or_default().split(|b| *b == 0).any(|v| v == carried.as_bytes()) {
            assert!(std::time::Instant::now() < deadline, "the child never showed its environment");
            std::thread::yield_now();
        }
        let group = ProcessGroup::unknown_leader(child.id() as i32, &token);
        assert!(!group.is_alive());
        assert!(group.kill_if_ours(), "the token's carrier is killed");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(child.wait().unwrap().signal(), Some(9));
    }
}
