//! Reaching the daemon: connect, start it in the background when none answers (unless told
//! not to), and stop it.

use std::fs::{self, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use scafld_client::connection::{HelloCheck, Reconnect};
use scafld_client::{ClientError, Connection, Paths};
use scafld_protocol::ErrorKind;
use scafld_protocol::methods::{Executable, HelloResult, JobCounts, Serving};

use super::exit::workflow;
use super::output::CliError;

const START_DEADLINE: Duration = Duration::from_secs(10);
const STOP_DEADLINE: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(5);
/// How long a daemon whose socket file is gone takes at most to notice it and stop (it checks
/// each second), with room for a loaded machine.
const SOCKET_GONE_NOTICED: Duration = Duration::from_secs(3);

/// Connect to the daemon, starting one if `autostart` and nobody answers.
pub fn connect(paths: &Paths, autostart: bool) -> Result<Connection, CliError> {
    connect_with_timeout(paths, autostart, None)
}

/// [`connect`] with a bound on every read and write of the connection (see
/// [`Connection::connect_with_timeout`]).
pub fn connect_with_timeout(paths: &Paths, autostart: bool, timeout: Option<Duration>) -> Result<Connection, CliError> {
    connect_noting(paths, autostart, timeout, std::sync::Arc::new(|line: &str| super::output::note(line)))
}

/// Where a connection says what it did to the daemon (started it, replaced it): a command's
/// stderr, the language server's log.
pub type Note = std::sync::Arc<dyn Fn(&str) + Send + Sync>;

/// [`connect_with_timeout`], saying that it started (or replaced) the daemon with `note`.
/// A daemon of another build than the `scafldd` this client starts is replaced when it runs
/// no job (see [`build_check`]).
pub fn connect_noting(
    paths: &Paths,
    autostart: bool,
    timeout: Option<Duration>,
    note: Note,
) -> Result<Connection, CliError> {
    // The handshake's answer comes with the first call's (see `Connection::connect_pipelined`).
    match Connection::connect_pipelined(&paths.socket, timeout) {
        Ok(conn) => Ok(match own_daemon() {
            Some(own) => conn.checking_hello(build_check(paths.clone(), own, autostart, timeout, note)),
            // No scafldd to start: none to compare with either.
            None => conn,
        }),
        Err(ClientError::Unreachable { .. }) if autostart => {
            wait_for_stopping(paths);
            let pid = start(paths)?;
            note(&format!("scafld: started the daemon (pid {pid}) at {}", paths.socket.display()));
            Connection::connect_pipelined(&paths.socket, timeout).map_err(connect_error)
        }
        Err(ClientError::Unreachable { socket, .. }) => Err(unreachable(&socket).with_hint(start_hint(
            paths,
            "start it with `scafld daemon start`, or drop --no-autostart / SCAFLD_NO_AUTOSTART to let scafld start it",
        ))),
        Err(e) => Err(connect_error(e)),
    }
}

pub fn connect_error(error: ClientError) -> CliError {
    match error {
        ClientError::Unreachable { socket, .. } => unreachable(&socket),
        ClientError::ProtocolMismatch { .. } => {
            CliError::new("protocol_mismatch", error.to_string(), workflow::UNREACHABLE)
        }
        ClientError::Untrusted { .. } => CliError::new("daemon_untrusted", error.to_string(), workflow::UNREACHABLE)
            .with_hint("nothing was sent; remove that directory or point SCAFLD_SOCKET (or XDG_RUNTIME_DIR) at a directory only you can write"),
        ClientError::Refused { kind, message, hint } => {
            let error = CliError::new(&kind, message, workflow::UNREACHABLE);
            match hint {
                Some(hint) => error.with_hint(hint),
                None => error,
            }
        }
        other => rpc_error(other),
    }
}

/// How to reach a daemon when none answers at `paths.socket`: `start`, unless a daemon holds
/// the state directory already (started for another socket), which a second would be refused.
pub fn start_hint(paths: &Paths, start: &str) -> String {
    let state = paths.state_dir.display();
    match paths.state_holder() {
        Some((pid, Some(socket))) if socket != paths.socket => format!(
            "a daemon (pid {pid}) holds the state directory {state} and answers at {}: set SCAFLD_SOCKET={} (one daemon per state directory)",
            socket.display(),
            socket.display()
        ),
        Some((pid, _)) => format!(
            "a daemon (pid {pid}) holds the state directory {state}: set SCAFLD_SOCKET to its socket, or stop it (one daemon per state directory)"
        ),
        None => start.to_string(),
    }
}

fn unreachable(socket: &Path) -> CliError {
    CliError::new(
        "daemon_unreachable",
        format!("no scafld daemon is answering at {}", socket.display()),
        workflow::UNREACHABLE,
    )
}

/// A daemon that holds the state directory for this very socket but refused the connection is
/// stopping (it refuses new connections from its stop on and keeps the lock until it exits):
/// wait for it to go (bounded), so that the daemon started next is not refused the lock.
fn wait_for_stopping(paths: &Paths) {
    let started = Instant::now();
    while let Some((pid, Some(socket))) = paths.state_holder() {
        // Its socket file gone (removed by hand or by a cleaner), a daemon of this build notices
        // within a second and stops: waited for that long, not the whole stop deadline (one of
        // an older release, or one systemd's socket started, never notices).
        let deadline = match paths.socket.exists() {
            true => STOP_DEADLINE,
            false => SOCKET_GONE_NOTICED,
        };
        if socket != paths.socket || !process_alive(pid) || started.elapsed() > deadline {
            return;
        }
        std::thread::sleep(POLL);
    }
}

/// Map an error from a call to the workflow family's exit codes.
pub fn rpc_error(error: ClientError) -> CliError {
    match &error {
        ClientError::Rpc { data, .. } => {
            let (code, exit_code) = super::exit::for_error(data);
            let mut cli = CliError::new(code, data.message.clone(), exit_code);
            cli.hint = data.hint.clone();
            cli.details = data.details.clone();
            if data.message.contains(scafld_protocol::NOT_IN_A_REPOSITORY) {
                git_environment(&mut cli);
            }
            cli
        }
        ClientError::Unreachable { .. }
        | ClientError::ProtocolMismatch { .. }
        | ClientError::Untrusted { .. }
        | ClientError::Refused { .. } => connect_error(error),
        ClientError::TimedOut(waited) => match Paths::from_env() {
            Ok(paths) => unanswered(&paths, *waited),
            Err(e) => CliError::new("environment", e.message, workflow::USAGE).with_hint(e.hint),
        },
        ClientError::Io(_) | ClientError::Decode(_) => {
            CliError::new("daemon_connection", error.to_string(), workflow::UNREACHABLE)
                .with_hint("the daemon may have stopped; `scafld daemon status` shows whether it runs")
        }
    }
}

/// A workspace git finds only through `GIT_DIR`/`GIT_WORK_TREE`: the daemon, a process of its
/// own, never sees the caller's environment and looks for the repository from the workspace
/// folder, so `git init` (which would only reinitialise `GIT_DIR`) is no way out. A `.git` file
/// naming the git directory is, and git reads it too.
fn git_environment(cli: &mut CliError) {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let (dir, tree) = (var("GIT_DIR"), var("GIT_WORK_TREE"));
    if dir.is_none() && tree.is_none() {
        return;
    }
    let set: Vec<&str> = [("GIT_DIR", &dir), ("GIT_WORK_TREE", &tree)]
        .into_iter()
        .filter_map(|(name, value)| value.as_ref().map(|_| name))
        .collect();
    cli.message.push_str(&format!(
        "; {} in your environment, which scafld does not read (its daemon finds the repository from the workspace folder)",
        match set.as_slice() {
            [one] => format!("{one} is set"),
            _ => format!("{} are set", set.join(" and ")),
        }
    ));
    let absolute = |path: std::ffi::OsString| std::fs::canonicalize(&path).unwrap_or(path.into());
    cli.hint = Some(match dir {
        Some(dir) => {
            let dir = absolute(dir);
            let word = scafld_protocol::cli::shell_word(&dir.to_string_lossy()).into_owned();
            let top = tree.map(absolute).map_or_else(
                || "the work tree's top folder".to_string(),
                |tree| format!("the work tree's top folder ({})", tree.display()),
            );
            format!(
                "point the work tree at the git directory with a `.git` file, which git follows as well: `printf 'gitdir: %s\\n' {word} > .git` in {top}; a bare repository needs `git --git-dir {word} config core.bare false` too; then run the command again"
            )
        }
        None => {
            "unset GIT_WORK_TREE and run the command in a folder git finds a repository from (one with a `.git`)".into()
        }
    });
}

/// A daemon that took the connection but did not answer within `waited`: stopped (SIGSTOP,
/// Ctrl-Z) or stuck. `daemon stop` cannot reach it either, so the way out is named with the
/// pid its state directory's lock file gives (and said plainly when the process is stopped).
fn unanswered(paths: &Paths, waited: Duration) -> CliError {
    let message = format!(
        "the scafld daemon at {} took the connection but did not answer within {}s",
        paths.socket.display(),
        waited.as_secs_f64()
    );
    let hint = match paths.state_holder() {
        Some((pid, _)) if process_stopped(pid) => format!(
            "the daemon (pid {pid}) is stopped (SIGSTOP or Ctrl-Z): `kill -CONT {pid}` resumes it, or `kill -KILL {pid}` ends it; then run the command again"
        ),
        Some((pid, _)) => format!(
            "the daemon (pid {pid}) is hung: `kill {pid}` stops it (`kill -KILL {pid}` if it is still there after a few seconds); then run the command again, which starts a new one"
        ),
        None => format!(
            "the daemon is hung; no daemon holds {}, so the process answering at that socket is another's: find it with `fuser {}` and `kill` it",
            paths.lock_file().display(),
            paths.socket.display()
        ),
    };
    CliError::new("daemon_timeout", message, workflow::UNREACHABLE).with_hint(hint)
}

/// Whether process `pid` is stopped (SIGSTOP, Ctrl-Z).
fn process_stopped(pid: u32) -> bool {
    i32::try_from(pid).is_ok_and(|pid| scafld_local::reaper::process_state(pid) == Some('T'))
}

/// Start `scafldd` detached from this process and wait until its socket answers: the daemon
/// writes a line down a pipe once it is ready (or the pipe closes when it exits first), so the
/// wait ends the moment it can, with no polling.
pub fn start(paths: &Paths) -> Result<u32, CliError> {
    let daemon = daemon_binary();
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    // The daemon's files are its user's alone whatever this caller's umask: the folder and the
    // log it writes to from its first line (the daemon checks both again as it starts).
    fs::DirBuilder::new().recursive(true).mode(0o700).create(&paths.state_dir).map_err(|e| {
        CliError::new(
            "state_dir",
            format!("cannot create state directory {}: {e}", paths.state_dir.display()),
            workflow::RUNTIME,
        )
    })?;
    let log_path = paths.log_file();
    let log = OpenOptions::new().create(true).append(true).mode(0o600).open(&log_path).map_err(|e| {
        CliError::new("state_dir", format!("cannot open {}: {e}", log_path.display()), workflow::RUNTIME)
    })?;
    let log_start = log.metadata().map(|m| m.len()).unwrap_or(0);
    let start_error = |why: String| CliError::new("daemon_start", why, workflow::UNREACHABLE);
    let (ready, ready_writer) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| start_error(format!("cannot create a pipe: {e}")))?;
    let writer_fd = ready_writer.as_raw_fd();
    let mut command = Command::new(&daemon);
    command
        .arg("--socket")
        .arg(&paths.socket)
        .arg("--state-dir")
        .arg(&paths.state_dir)
        .arg("--ready-fd")
        .arg(writer_fd.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    // SAFETY: setsid, close_range and fcntl are async-signal-safe. setsid detaches the daemon
    // from our terminal and session so that Ctrl-C in the caller's shell does not reach it;
    // of our descriptors beyond 0-2 (our caller's too: a pipe whose reader waits for EOF) only
    // the ready pipe is left open across exec, in the child only.
    unsafe {
        command.pre_exec(move || {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            scafld_local::runner::close_on_exec_beyond_stdio();
            let fd = std::os::fd::BorrowedFd::borrow_raw(writer_fd);
            nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()))
                .map_err(std::io::Error::from)?;
            Ok(())
        });
    }
    let mut child = command.spawn().map_err(|e| {
        start_error(format!("cannot run {}: {e}", daemon.display()))
            .with_hint("install scafldd next to scafld or on PATH (see README)")
    })?;
    drop(ready_writer); // the daemon holds the only writer now: its exit closes the pipe
    let deadline = Instant::now() + START_DEADLINE;
    wait_ready(&ready, deadline);
    loop {
        if let Ok(mut conn) = Connection::connect(&paths.socket)
            && let Ok(daemon) = conn.daemon()
        {
            // The child is reaped by init once we exit; it runs on as the daemon.
            return Ok(daemon.pid);
        }
        if let Ok(Some(status)) = child.try_wait() {
            let tail = log_tail(&log_path, log_start);
            // Refused because a daemon holds the state directory (started for another
            // socket): where that one answers, as `--no-autostart` says it.
            let see_log = format!("see {}", log_path.display());
            let hint = match paths.state_holder() {
                Some(_) => format!("{}; {see_log}", start_hint(paths, "")),
                None => see_log,
            };
            return Err(CliError::new(
                "daemon_start",
                // Its lines (an error and its hint) joined into the one line of a message.
                format!(
                    "the daemon exited during start-up ({status}): {}",
                    tail.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("; ")
                ),
                workflow::UNREACHABLE,
            )
            .with_hint(hint));
        }
        if Instant::now() > deadline {
            return Err(CliError::new(
                "daemon_start",
                format!("the daemon did not answer at {} within {:?}", paths.socket.display(), START_DEADLINE),
                workflow::UNREACHABLE,
            )
            .with_hint(format!("see {}", log_path.display())));
        }
        std::thread::sleep(POLL);
    }
}

/// Block until the daemon says it is ready or its end of the pipe closes (it exited), or the
/// deadline passes; what happened is then read off the socket and the child.
fn wait_ready(ready: &std::os::fd::OwnedFd, deadline: Instant) {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let mut fds = [PollFd::new(ready.as_fd(), PollFlags::POLLIN)];
    let left = deadline.saturating_duration_since(Instant::now());
    let timeout = PollTimeout::try_from(left.as_millis().min(i32::MAX as u128) as i32).unwrap_or(PollTimeout::MAX);
    // Interrupted or failed: the polling loop below still finds out, only less promptly.
    let _ = poll(&mut fds, timeout);
}

/// Ask the daemon to shut down and wait until its socket stops answering. `Ok(None)` when no
/// daemon was running.
pub fn stop(paths: &Paths) -> Result<Option<u32>, CliError> {
    stop_with(paths, false)
}

/// [`stop`], when `if_idle` only if the daemon runs no job and serves no call that is work
/// as it begins to stop (refused `busy` otherwise, saying with what in `details`). A daemon
/// of a release that cannot check that at its stop is stopped as [`stop`] does.
fn stop_with(paths: &Paths, if_idle: bool) -> Result<Option<u32>, CliError> {
    use scafld_protocol::methods::{DaemonShutdown, ShutdownParams};
    let pid = match Connection::connect(&paths.socket) {
        Ok(mut conn) => {
            let pid = conn.daemon().map_err(connect_error)?.pid;
            match conn.call::<DaemonShutdown>(&ShutdownParams { if_idle }) {
                Err(ClientError::Rpc { data, .. }) if if_idle && data.kind == ErrorKind::InvalidParams => {
                    conn.call::<DaemonShutdown>(&ShutdownParams::default()).map_err(rpc_error)?
                }
                shut => shut.map_err(rpc_error)?,
            };
            pid
        }
        // None answers here; one holding the state directory for another socket is still
        // running, which "no daemon was running" would hide.
        Err(ClientError::Unreachable { .. }) => {
            match paths.state_holder() {
                Some((pid, Some(socket))) if socket != paths.socket => {
                    return Err(CliError::new(
                    "daemon_stop",
                    format!(
                        "no daemon answers at {}, but daemon pid {pid} runs for the state directory {} at {}; it was not stopped",
                        paths.socket.display(),
                        paths.state_dir.display(),
                        socket.display()
                    ),
                    workflow::RUNTIME,
                )
                .with_hint(format!(
                    "stop it with `SCAFLD_SOCKET={} scafld daemon stop`",
                    scafld_protocol::cli::shell_word(&socket.display().to_string())
                )));
                }
                // The daemon of this very socket, whose socket file is gone: unreachable, it
                // still holds the state directory. Told by SIGTERM, as a service manager would.
                Some((pid, Some(_))) if is_scafldd(pid) => {
                    signal_stop(pid)?;
                    pid
                }
                // A lock that names no socket: `scafldd --recover` rebuilding the database (or
                // a daemon of an older release that did not record its socket), never cut short.
                Some((pid, None)) if is_scafldd(pid) => {
                    return Err(CliError::new(
                        "daemon_stop",
                        format!(
                            "no daemon answers at {}, but scafldd pid {pid} holds the state directory {} without serving a socket there (a `scafldd --recover` rebuilding the database, or a daemon of an older release); it was not stopped",
                            paths.socket.display(),
                            paths.state_dir.display()
                        ),
                        workflow::RUNTIME,
                    )
                    .with_hint(format!(
                        "let a recovery finish (it ends by itself); if it is an old daemon, end it with `kill {pid}`"
                    )));
                }
                Some((pid, _)) => {
                    return Err(CliError::new(
                    "daemon_stop",
                    format!(
                        "no daemon answers at {}, but process {pid} holds the state directory {}; it was not stopped",
                        paths.socket.display(),
                        paths.state_dir.display()
                    ),
                    workflow::RUNTIME,
                )
                .with_hint(format!("see what it is (`ps -p {pid}`), and end it with `kill {pid}` if it is a scafld daemon")));
                }
                None => return Ok(None),
            }
        }
        // A daemon of another release (the usual case right after an upgrade) cannot be asked
        // in our protocol: it is told the way a service manager would, by SIGTERM, which it
        // answers with the same orderly shutdown.
        Err(ClientError::ProtocolMismatch { pid, .. }) if is_scafldd(pid) => {
            signal_stop(pid)?;
            pid
        }
        Err(e) => return Err(connect_error(e)),
    };
    let deadline = Instant::now() + STOP_DEADLINE;
    // Done when the process is gone, or when it removed its socket (its last step; a zombie
    // child of the caller would otherwise look alive); one whose socket was gone already, when
    // it no longer holds the state directory.
    let stopped = || match paths.socket.exists() {
        true => !process_alive(pid),
        false => paths.state_holder().is_none_or(|(holder, _)| holder != pid) || !process_alive(pid),
    };
    while !stopped() {
        if Instant::now() > deadline {
            return Err(CliError::new(
                "daemon_stop",
                format!("the daemon (pid {pid}) did not stop within {STOP_DEADLINE:?}"),
                workflow::RUNTIME,
            ));
        }
        std::thread::sleep(POLL);
    }
    Ok(Some(pid))
}

/// Ask daemon `pid` to stop the way a service manager does: SIGTERM, answered with the same
/// orderly shutdown as `daemon.shutdown`.
fn signal_stop(pid: u32) -> Result<(), CliError> {
    let signalled = i32::try_from(pid)
        .map_err(|_| nix::errno::Errno::ESRCH)
        .and_then(|raw| nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), nix::sys::signal::Signal::SIGTERM));
    signalled.map_err(|e| {
        CliError::new("daemon_stop", format!("cannot signal the daemon (pid {pid}): {e}"), workflow::RUNTIME)
    })
}

/// Whether `pid` runs `scafldd` (the name the kernel keeps for it), so that a pid a daemon of
/// another release claims is never signalled unless it is one.
fn is_scafldd(pid: u32) -> bool {
    pid > 1 && std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|name| name.trim_end() == "scafldd")
}

fn process_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else { return false };
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}

/// `scafldd` beside this executable, else the one on PATH.
fn daemon_binary() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("scafldd")))
        .filter(|candidate| candidate.is_file())
        .unwrap_or_else(|| PathBuf::from("scafldd"))
}

/// The `scafldd` this client starts ([`daemon_binary`], looked up on PATH as `exec` would),
/// as it is now; `None` when there is none.
pub fn own_daemon() -> Option<Executable> {
    let binary = daemon_binary();
    let path = match binary.is_absolute() {
        true => binary,
        false => std::env::var_os("PATH")?
            .to_str()?
            .split(':')
            .filter(|dir| !dir.is_empty())
            .map(|dir| Path::new(dir).join(&binary))
            .find(|candidate| candidate.is_file())?,
    };
    scafld_local::executable::identify(&path).ok()
}

/// Whether the daemon that answered `hello` is of the build `own` (the `scafldd` this client
/// starts): an older daemon, which names no file, is not.
pub fn same_build(hello: &HelloResult, own: &Executable) -> bool {
    hello.executable.as_ref().is_some_and(|daemon| daemon.same_build(own))
}

/// What is known of a daemon of another build: one sentence naming it, and the file it runs.
pub fn other_build(hello: &HelloResult, own: &Executable) -> String {
    let from = match &hello.executable {
        Some(daemon) if daemon.path == own.path => format!("started from {} before it was replaced", daemon.path),
        Some(daemon) => format!("started from {}", daemon.path),
        None => "of an older build that does not say which file it runs".to_string(),
    };
    format!("the daemon (pid {}, {from}) is another build of scafldd than this client's {}", hello.pid, own.path)
}

/// What a daemon is busy with that stopping it would cut, in words (`None`: nothing): its
/// jobs not finished, then the calls it serves that are work (`daemon.status`'s `serving`:
/// a `finalize` running criteria, an `approve`; never a read or a wait).
pub fn busy_with(jobs: &JobCounts, serving: &[Serving]) -> Option<String> {
    let jobs = jobs.running + jobs.queued;
    let mut busy = Vec::new();
    if jobs > 0 {
        busy.push(format!(
            "{jobs} job{} of it {} not finished",
            if jobs == 1 { "" } else { "s" },
            if jobs == 1 { "is" } else { "are" }
        ));
    }
    if !serving.is_empty() {
        busy.push(format!("it is serving {}", calls_served(serving)));
    }
    (!busy.is_empty()).then(|| busy.join(" and "))
}

/// The refusal to replace the daemon of another build (`other` says which) that is busy.
fn busy_refusal(other: &str, jobs: &JobCounts, serving: &[Serving]) -> ClientError {
    let busy = busy_with(jobs, serving).unwrap_or_else(|| "it became busy as it was asked to stop".into());
    ClientError::Refused {
        kind: "daemon_other_build".into(),
        message: format!("{other}, and it was not restarted: {busy}"),
        hint: Some(format!(
            "run the command again once it is done (`scafld daemon status` says what it runs; the command restarts it then), or {STOP_ENDS_JOBS}"
        )),
    }
}

/// The calls a daemon serves, counted and named: `2 calls (task.finalize, task.approve)`.
pub fn calls_served(serving: &[Serving]) -> String {
    let calls: u64 = serving.iter().map(|s| s.calls).sum();
    let named: Vec<String> = serving
        .iter()
        .map(|s| match s.calls {
            1 => s.method.clone(),
            n => format!("{} ×{n}", s.method),
        })
        .collect();
    format!("{calls} call{} ({})", if calls == 1 { "" } else { "s" }, named.join(", "))
}

/// How to get rid of a daemon of another build that runs jobs or serves calls: what `daemon
/// stop` does to them.
pub const STOP_ENDS_JOBS: &str = "`scafld daemon stop` stops it now, killing the commands of its running jobs and calls (the next daemon reports those jobs abandoned; run them again)";

/// The check a connection makes of the daemon's handshake (see [`HelloCheck`]): a daemon of
/// another build (every build says the same version and protocol, so only the file it runs
/// tells) is stopped and this client's started in its place, said on `note`, when it runs no
/// job, serves no call that is work (`busy_with`) and `autostart` allows starting one;
/// otherwise refused, exit 6, naming what it is busy with and how to restart it.
pub fn build_check(
    paths: Paths,
    own: Executable,
    autostart: bool,
    timeout: Option<Duration>,
    note: Note,
) -> HelloCheck {
    Box::new(move |hello: &HelloResult| {
        if same_build(hello, &own) {
            return Ok(None);
        }
        let other = other_build(hello, &own);
        let refused = |message: String, hint: String| ClientError::Refused {
            kind: "daemon_other_build".into(),
            message,
            hint: Some(hint),
        };
        if !autostart {
            return Err(refused(
                format!("{other}; it was left running (no autostart)"),
                "restart it with `scafld daemon stop` then `scafld daemon start`, or drop --no-autostart / SCAFLD_NO_AUTOSTART to let scafld restart it".into(),
            ));
        }
        let status = Connection::connect_with_timeout(&paths.socket, timeout)
            .and_then(|mut conn| conn.call::<scafld_protocol::methods::DaemonStatus>(&Default::default()));
        match status {
            Ok(status) if status.socket_activated => {
                return Err(refused(
                    format!("{other}; systemd started it, so scafld leaves it to systemd"),
                    "restart it with `systemctl --user restart scafldd.service` (after pointing the unit's ExecStart at this client's scafldd, if it names another)".into(),
                ));
            }
            Ok(status) if busy_with(&status.jobs, &status.serving).is_some() => {
                return Err(busy_refusal(&other, &status.jobs, &status.serving));
            }
            Ok(_) => {}
            Err(e) => {
                return Err(refused(
                    format!("{other}, and it was not restarted: cannot tell whether it runs jobs ({e})"),
                    format!("{STOP_ENDS_JOBS}; then run the command again"),
                ));
            }
        }
        let failed = |step: &str, e: CliError| {
            refused(
                format!("{other}; {step}: {}", e.message),
                e.hint.unwrap_or_else(|| format!("see {}", paths.log_file().display())),
            )
        };
        // Checked again as the stop begins: a job or a call may have started since.
        match stop_with(&paths, true) {
            Err(e) if e.code == ErrorKind::Busy.as_str() => {
                let busy: Option<(JobCounts, Vec<Serving>)> = e.details.as_ref().and_then(|d| {
                    let jobs = serde_json::from_value(d.get("jobs")?.clone()).ok()?;
                    Some((jobs, serde_json::from_value(d.get("serving")?.clone()).ok()?))
                });
                let (jobs, serving) = busy.unwrap_or_default();
                return Err(busy_refusal(&other, &jobs, &serving));
            }
            stopped => stopped.map_err(|e| failed("stopping it failed", e))?,
        };
        wait_for_stopping(&paths);
        let pid = start(&paths).map_err(|e| failed("it was stopped, but starting this build's failed", e))?;
        note(&format!("scafld: {other}: stopped it and started this build's (pid {pid})"));
        Connection::connect_with_timeout(&paths.socket, timeout).map(Some)
    })
}

/// Connect a `scafld worker` again (its daemon went away), never starting one: the daemon
/// must be of `own`, the build the worker started with (the `scafldd` beside it then, which
/// an upgrade may have replaced since), or the connection is refused by [`worker_check`].
pub fn reconnect_worker(paths: &Paths, own: Option<&Executable>) -> Result<Connection, CliError> {
    worker_connection(paths, own).map_err(connect_error)
}

/// A worker's connection to the daemon at `paths` (see [`reconnect_worker`]). A call a
/// stopping daemon refused unstarted goes again the same way, never to a daemon the worker
/// started or to another build's: a worker waits for its daemon; it does not start one.
fn worker_connection(paths: &Paths, own: Option<&Executable>) -> Result<Connection, ClientError> {
    let conn = Connection::connect_pipelined(&paths.socket, None)?;
    let conn = match own {
        Some(own) => conn.checking_hello(worker_check(own.clone())),
        None => conn,
    };
    Ok(conn.reconnecting(Some(worker_reconnect(paths, own))))
}

/// How a worker's calls refused unstarted by a stopping daemon reach the next one.
pub fn worker_reconnect(paths: &Paths, own: Option<&Executable>) -> Reconnect {
    let (paths, own) = (paths.clone(), own.cloned());
    std::sync::Arc::new(move || worker_connection(&paths, own.as_ref()))
}

/// Whether `error` says the daemon is of another build or protocol than the worker's: it
/// will not change by waiting, so the worker stops (see [`reconnect_worker`]).
pub fn is_other_build(error: &CliError) -> bool {
    matches!(error.code.as_str(), "daemon_other_build" | "protocol_mismatch")
}

/// What a worker says when its daemon is of another build: the worker runs the code it was
/// started from, so it is the one to restart.
fn worker_check(own: Executable) -> HelloCheck {
    Box::new(move |hello: &HelloResult| {
        if same_build(hello, &own) {
            return Ok(None);
        }
        let runs = match &hello.executable {
            Some(daemon) => format!("runs {}", daemon.path),
            None => "is of an older build that does not say which file it runs".to_string(),
        };
        let replaced = match own_daemon() {
            Some(now) if !now.same_build(&own) => ", replaced since",
            _ => "",
        };
        Err(ClientError::Refused {
            kind: "daemon_other_build".into(),
            message: format!(
                "the daemon (pid {}) {runs}, another build of scafldd than this worker's (the {} it started with{replaced}); a worker serves only the daemon of its own build, so it stops",
                hello.pid, own.path
            ),
            hint: Some(
                "restart the worker from the new install (run `scafld worker` again with the same flags); a job it held goes back to the queue when its lease lapses".into(),
            ),
        })
    })
}

fn log_tail(path: &Path, from: u64) -> String {
    let mut text = String::new();
    if let Ok(mut file) = fs::File::open(path) {
        let _ = file.seek(SeekFrom::Start(from));
        let _ = file.take(4096).read_to_string(&mut text);
    }
    text
}
