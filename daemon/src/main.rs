//! `scafldd` entry point: flags, logging, the listening socket and signals. See `lib.rs`.

use std::fs::{self, OpenOptions};
use std::io::IsTerminal;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use clap::Parser;
use scafld_daemon::rpc::transport::Limits;
use scafld_daemon::socket::{self, SocketError};
use scafld_daemon::store::lock::{self, StateLock};
use scafld_daemon::store::{RECOVERY_HINT, SledStore, StoreError};
use scafld_daemon::{BoxError, DaemonOptions};
use scafld_local::Paths;
use tokio::signal::unix::{SignalKind, signal};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::writer::MakeWriterExt;

/// The scafld daemon. Normally started by `scafld daemon start` or by systemd.
#[derive(Parser)]
#[command(name = "scafldd", version)]
struct Args {
    /// Socket to listen on [default: $SCAFLD_SOCKET, else $XDG_RUNTIME_DIR/scafld/scafldd.sock,
    /// else <state dir>/run/scafldd.sock]
    #[arg(long)]
    socket: Option<PathBuf>,
    /// State directory for the database and log [default: $SCAFLD_STATE_DIR, else
    /// $XDG_STATE_HOME/scafld, else ~/.local/state/scafld]
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Forget finished jobs and settled review sessions after this many days (task ledgers are
    /// never pruned; the newest review session of each task or range is kept) [env:
    /// SCAFLD_RETENTION_DAYS] [default: 30]
    #[arg(long, value_name = "DAYS")]
    retention_days: Option<u32>,
    /// Close a client connection that has sent nothing, and waits for nothing, this long [env:
    /// SCAFLD_IDLE_CONNECTION_SECONDS] [default: 600]
    #[arg(long, value_name = "SECONDS")]
    idle_connection_seconds: Option<u64>,
    /// Client connections served at once (past it the longest idle one is closed) [env:
    /// SCAFLD_MAX_CONNECTIONS] [default: 1024]
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,
    /// Rebuild a damaged state database, keeping the damaged copy, then exit (stop the daemon
    /// first)
    #[arg(long)]
    recover: bool,
    /// More log detail (-v debug, -vv trace); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Print this program's man page (roff) and exit (`scafld man` collects it).
    #[arg(long, hide = true)]
    man: bool,
    /// A pipe to write one line to once the socket is bound and the database open, then close
    /// (how `scafld` waits for a daemon it starts without polling; set by the client).
    #[arg(long, hide = true, value_parser = clap::value_parser!(i32).range(3..))]
    ready_fd: Option<i32>,
}

/// The fewest open files (`ulimit -n`, its hard limit: the soft one is raised to it) the
/// daemon starts with: an idle daemon holds about twenty, and each client connection and each
/// running command takes more.
const MIN_OPEN_FILES: u64 = 64;

/// Print a line to stdout or stderr; a line that cannot be written (output to a full disk, a
/// closed pipe) is lost, never a panic: the exit code still says how the run ended.
macro_rules! report_out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

macro_rules! report_err {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.man {
        use clap::CommandFactory;
        let mut page = Vec::new();
        return match clap_mangen::Man::new(Args::command()).render(&mut page) {
            Ok(()) => {
                use std::io::Write;
                let _ = std::io::stdout().write_all(&page);
                ExitCode::SUCCESS
            }
            Err(e) => {
                report_err!("scafldd: error: cannot render the man page: {e}");
                ExitCode::FAILURE
            }
        };
    }
    match start(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            report_err!("scafldd: error: {e}");
            if let Some(SocketError::AlreadyRunning(_)) = e.downcast_ref::<SocketError>() {
                report_err!(
                    "hint: stop it with `scafld daemon stop`; a second daemon needs a state directory of its own as well as a socket (set SCAFLD_STATE_DIR and SCAFLD_SOCKET): one daemon per state directory"
                );
            }
            if let Some(StoreError::Damaged { .. }) = e.downcast_ref::<StoreError>() {
                report_err!("hint: {RECOVERY_HINT}");
            }
            ExitCode::FAILURE
        }
    }
}

/// A setting given by its flag, else by its environment variable, else its default. The
/// variable is read here rather than by the flag's parser, so a bad value is a start-up
/// refusal (exit 1) naming the variable and its value, never a usage error about a flag the
/// caller did not pass.
fn setting<T: std::str::FromStr>(flag: Option<T>, var: &str, default: T, expected: &str) -> Result<T, BoxError> {
    if let Some(value) = flag {
        return Ok(value);
    }
    let Some(raw) = std::env::var_os(var) else { return Ok(default) };
    let text = raw.to_string_lossy();
    text.trim().parse().map_err(|_| {
        format!(
            "{var}={} is not {expected}; set it to one, or unset it for the default",
            scafld_protocol::text::one_line(&text)
        )
        .into()
    })
}

fn start(args: Args) -> Result<(), BoxError> {
    let retention_days = setting(args.retention_days, "SCAFLD_RETENTION_DAYS", 30u32, "a whole number of days")?;
    let idle_connection_seconds =
        setting(args.idle_connection_seconds, "SCAFLD_IDLE_CONNECTION_SECONDS", 600u64, "a whole number of seconds")?;
    let max_connections = setting(args.max_connections, "SCAFLD_MAX_CONNECTIONS", 1024usize, "a whole number")?;
    // The file we were started from, as it is now (before anything could replace it): the
    // handshake says it, so a client of another build knows this daemon is not its own.
    let executable = scafld_local::executable::this_process()
        .map_err(|e| eprintln!("scafldd: warning: cannot read which file this daemon runs from ({e}); clients will take it for another build"))
        .ok();
    // Whoever started us (by hand, a service manager) may have left descriptors open beyond
    // 0-2: no command we run inherits them (the activation socket and the ready pipe stay
    // open, for us alone).
    scafld_local::runner::close_on_exec_beyond_stdio();
    scafld_daemon::runner::adopt_daemon_settings();
    // Below this many descriptors the daemon would come up and then fail every accept (its
    // database, log, locks and watches take a score of them): refused now, naming the limit.
    if let Ok((soft, hard)) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        && soft < MIN_OPEN_FILES
    {
        return Err(format!(
            "the open-file limit is {soft} (hard limit {hard}); scafldd needs at least {MIN_OPEN_FILES} open files (its database, log, socket and watches, and one or more for each client and command); raise it (`ulimit -n 1024` in the shell that starts it, LimitNOFILE= in a systemd unit) and start it again"
        )
        .into());
    }
    // What a command orphans (a new session and a cleared environment: no group, no token
    // finds it) comes back to us, to be killed with its run and reaped (`reaper`).
    if let Err(e) = scafld_local::reaper::become_subreaper() {
        eprintln!(
            "scafldd: warning: cannot become a child subreaper ({e}); a command's process that leaves its group with a cleared environment may outlive its run"
        );
    }
    // The threads it needs (the runtime's workers, sled's, the blocking pool's first) started
    // and held at once, now: under a tight `ulimit -u` the runtime would panic building, or
    // sled would be left without threads and the daemon "listening" yet never answering.
    room_for_threads(runtime_workers() + SPARE_THREADS)?;
    // Paths made absolute, then the daemon works from `/`: nothing it does may depend on the
    // folder it was started in (a relative path would read that folder's files, another
    // workspace's spec say), and it keeps no mount busy. The environment is asked only for
    // what the command line does not give.
    let (socket_arg, state_arg) = (args.socket.clone(), args.state_dir.clone());
    let (socket_path, state_dir) = match (socket_arg, state_arg) {
        (Some(socket), Some(state)) => (socket, state),
        (socket, state) => {
            let env_paths = Paths::from_env()?;
            (socket.unwrap_or(env_paths.socket), state.unwrap_or(env_paths.state_dir))
        }
    };
    let socket_path = std::path::absolute(socket_path)?;
    let state_dir = std::path::absolute(state_dir)?;
    let state_lock_file = state_dir.join(scafld_local::paths::LOCK_FILE);
    if socket_path == state_lock_file || scafld_local::paths::socket_lock_file(&socket_path) == state_lock_file {
        return Err(format!(
            "the socket {} would share its lock file with the state directory's {}; name the socket otherwise (the default, or one ending in .sock)",
            socket_path.display(),
            state_lock_file.display()
        )
        .into());
    }
    std::env::set_current_dir("/").map_err(|e| format!("cannot work from /: {e}"))?;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&state_dir)
        .map_err(|e| format!("cannot create state directory {}: {e}", state_dir.display()))?;
    if let Some(why) = scafld_local::paths::unsafe_dir(&state_dir) {
        return Err(format!("refusing the state directory: {why}").into());
    }
    // Earlier versions created it 0755; what is in it (ledgers, logs) is the user's alone.
    fs::set_permissions(&state_dir, fs::Permissions::from_mode(0o700))
        .map_err(|e| format!("cannot make {} private: {e}", state_dir.display()))?;
    let log_file = state_dir.join("scafldd.log");
    init_logging(&log_file, args.verbose)?;
    let ready_fd = args.ready_fd;
    if args.recover {
        return recover(&socket_path, &state_dir);
    }

    // Held until the process ends: no other daemon, and no recovery, uses this state directory
    // meanwhile, whatever socket it was started for.
    let mut state_lock: Option<StateLock> = None;
    // Building the runtime panics when a worker thread cannot be started (threads ran out
    // since the check above): said as a refusal, exit 1, at once (unwinding would wait on
    // the workers already started).
    let previous_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|info| {
        report_err!("scafldd: error: cannot start the daemon's threads ({}); {THREADS_ADVICE}", panic_text(info));
        std::process::exit(1);
    }));
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(runtime_workers()).enable_all().build()?;
    std::panic::set_hook(previous_hook);
    let result = runtime.block_on(async {
        // Handlers go in before the socket exists: a client may signal us as soon as it connects.
        let shutdown = shutdown_signal()?;
        let listener = match socket::from_systemd(&socket_path)? {
            Some(listener) => listener,
            None => socket::bind(&socket_path)?,
        };
        state_lock = Some(
            StateLock::acquire(&state_dir, Some(&socket_path))
                .map_err(|e| -> BoxError { format!("{e}; {}", e.advice()).into() })?,
        );
        let db_dir = state_dir.join("db");
        // Still held past this, sled's refusal below says so.
        let _ = lock::database_free_within(&db_dir, DATABASE_LET_GO);
        let store = SledStore::open(&db_dir).map_err(|e| -> BoxError {
            match e {
                // The state lock is held: no other daemon has it open.
                StoreError::Backend(sled::Error::Io(ref io)) if io.kind() == std::io::ErrorKind::StorageFull => {
                    format!("{e} (database {}): the disk is full; free space there, then start the daemon again", db_dir.display())
                        .into()
                }
                // Out of descriptors is no damage: recovery would not help.
                StoreError::Backend(sled::Error::Io(ref io))
                    if matches!(io.raw_os_error(), Some(nix::libc::EMFILE | nix::libc::ENFILE)) =>
                {
                    format!(
                        "{e} (database {}): too many open files; raise the open-file limit (`ulimit -n`) and start the daemon again",
                        db_dir.display()
                    )
                    .into()
                }
                StoreError::Backend(_) => format!(
                    "{e} (database {}); if it is damaged, `scafldd --recover` moves it aside and rebuilds it from the workspaces' exports",
                    db_dir.display()
                )
                .into(),
                other => {
                    tracing::error!("{other}");
                    other.into()
                }
            }
        })?;
        let options = DaemonOptions {
            socket_path: listener.path.clone(),
            socket_activated: listener.activated,
            state_dir: state_dir.clone(),
            log_file,
            retention: std::time::Duration::from_secs(u64::from(retention_days) * 86_400),
            limits: Limits {
                idle_timeout: std::time::Duration::from_secs(idle_connection_seconds.max(1)),
                max_connections: max_connections.max(1),
                ..Limits::default()
            },
            executable,
        };
        listener.listener.set_nonblocking(true)?;
        let tokio_listener = tokio::net::UnixListener::from_std(listener.listener.try_clone()?)?;
        if let Some(fd) = ready_fd {
            signal_ready(fd);
        }
        let result = scafld_daemon::run(tokio_listener, options, Arc::new(store), shutdown).await;
        drop(listener); // removes the socket file we created
        result
    });
    // What is left is background reading (a workspace's index warm-up): the store is flushed
    // and no caller waits for it, so the process ends now instead of after it.
    runtime.shutdown_background();
    drop(state_lock);
    result
}

/// How long a database lock left by a killed daemon (in a child it was starting a command in)
/// is waited for at start.
const DATABASE_LET_GO: std::time::Duration = std::time::Duration::from_secs(5);

/// Threads beyond the runtime's workers that must be startable at once: sled's seven, the
/// main and signal threads, and room for the blocking pool and the commands the daemon runs.
const SPARE_THREADS: usize = 16;

const THREADS_ADVICE: &str = "the limit on this user's processes and threads (`ulimit -u`, RLIMIT_NPROC) leaves too little room; raise it, or end some of this user's processes, and start the daemon again";

/// The runtime's worker threads: one per CPU.
fn runtime_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Start `count` threads that wait, all at once, then let them end: whether this process may
/// have that many now. A refusal names the process limit.
fn room_for_threads(count: usize) -> Result<(), BoxError> {
    let mut held = Vec::new();
    let mut failure = None;
    for started in 0..count {
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let spawned = std::thread::Builder::new().stack_size(64 * 1024).spawn(move || {
            let _ = wait.recv();
        });
        match spawned {
            Ok(thread) => held.push((release, thread)),
            Err(e) => {
                failure = Some((started, e));
                break;
            }
        }
    }
    for (release, thread) in held {
        drop(release);
        let _ = thread.join();
    }
    let Some((started, e)) = failure else { return Ok(()) };
    let limit = match nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NPROC) {
        Ok((soft, _)) if soft != nix::sys::resource::RLIM_INFINITY => format!(" (`ulimit -u` is {soft})"),
        _ => String::new(),
    };
    Err(format!(
        "cannot start the threads the daemon needs: {started} of {count} started, then {e}{limit}; {THREADS_ADVICE}"
    )
    .into())
}

/// What a panic said.
fn panic_text(info: &std::panic::PanicHookInfo<'_>) -> String {
    let payload = info.payload();
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

/// Tell the process that started us that calls will be answered: one line down the pipe it
/// gave us, then close it. A starter that is gone already changes nothing.
fn signal_ready(fd: i32) {
    use std::io::Write;
    use std::os::fd::FromRawFd;
    // SAFETY: the fd was inherited for this purpose alone (`--ready-fd`, checked above 2) and
    // nothing else in this process uses it; the file takes ownership and closes it.
    let mut pipe = unsafe { fs::File::from_raw_fd(fd) };
    if let Err(e) = pipe.write_all(b"ready\n") {
        tracing::debug!("the ready pipe is gone ({e})");
    }
}

/// `scafldd --recover`: refuse while a daemon holds the state directory (its lock, or sled's on
/// the database) or answers at the socket, else rebuild, holding the lock, and say what was
/// restored and what was lost.
fn recover(socket: &std::path::Path, state_dir: &std::path::Path) -> Result<(), BoxError> {
    let db_dir = state_dir.join("db");
    let refused = |why: String, advice: &str| -> BoxError {
        format!("not recovering: {why}; {advice}; nothing was changed").into()
    };
    let _state_lock = StateLock::acquire(state_dir, None).map_err(|e| refused(e.to_string(), e.advice()))?;
    lock::database_in_use(&db_dir).map_err(|e| refused(e.to_string(), e.advice()))?;
    if scafld_local::probe(socket).is_ok() {
        let stop = "stop it first (`scafld daemon stop` with its socket)";
        return Err(refused(format!("a daemon is answering at {}", socket.display()), stop));
    }
    if scafld_daemon::store::recover::healthy(&db_dir) {
        report_out!(
            "the database at {} opens and holds everything its manifest records: nothing to recover; nothing was changed",
            db_dir.display()
        );
        return Ok(());
    }
    let report = scafld_daemon::store::recover::recover(&db_dir)?;
    match &report.kept {
        Some(kept) => report_out!("kept the damaged database at {}", kept.display()),
        None if report.had_manifest => {
            report_out!("there was no database at {}; rebuilt it from its manifest", db_dir.display())
        }
        None if report.unreadable_manifest.is_some() => {
            report_out!("there was no database at {}, and its manifest does not read", db_dir.display())
        }
        None => report_out!("there was no database at {} and no manifest beside it", db_dir.display()),
    }
    report_out!("restored {} workspace(s) and {} task ledger(s)", report.workspaces, report.restored.len());
    for restored in &report.restored {
        report_out!("  {}: {} entries {}", restored.key, restored.entries, restored.source());
    }
    if !report.refused.is_empty() {
        report_out!(
            "refused exported ledgers (an export only fills what the database lost, agreeing with it and the manifest; nothing was taken from these):"
        );
        for (task, path, why) in &report.refused {
            report_out!("  {task}: {}: {why}", path.display());
        }
    }
    if let Some(why) = &report.unreadable_manifest {
        report_out!(
            "the manifest could not be read ({why}; kept beside the damaged database): what was lost cannot be told, and what the workspaces it names export was taken unchecked"
        );
    } else if !report.had_manifest {
        report_out!(
            "no manifest was read: what was lost cannot be told, and only workspaces a database copy named were searched for exported ledgers"
        );
    } else if report.lost.is_empty() {
        report_out!("nothing the manifest recorded was lost");
    } else {
        report_out!("lost (export ledgers with `scafld session <task> --export` to guard against this):");
        for line in &report.lost {
            report_out!("  {line}");
        }
    }
    report_out!("jobs and review sessions are not rebuilt: run the reviews again");
    tracing::warn!(
        restored = report.restored.len(),
        refused = report.refused.len(),
        lost = report.lost.len(),
        "rebuilt the state database"
    );
    Ok(())
}

/// A future that resolves with a reason on SIGTERM or SIGINT. The handlers are installed now.
/// The signals that stop the daemon in order (a hangup or quit included: their default would
/// end it mid-write, like a crash); the user signals, whose default is to end it too, are
/// logged and otherwise ignored.
fn shutdown_signal() -> Result<impl std::future::Future<Output = String>, BoxError> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    let mut quit = signal(SignalKind::quit())?;
    let mut usr1 = signal(SignalKind::user_defined1())?;
    let mut usr2 = signal(SignalKind::user_defined2())?;
    Ok(async move {
        loop {
            tokio::select! {
                _ = term.recv() => return "SIGTERM".to_string(),
                _ = int.recv() => return "SIGINT".to_string(),
                _ = hup.recv() => return "SIGHUP".to_string(),
                _ = quit.recv() => return "SIGQUIT".to_string(),
                _ = usr1.recv() => tracing::info!("SIGUSR1 ignored (SIGTERM stops the daemon)"),
                _ = usr2.recv() => tracing::info!("SIGUSR2 ignored (SIGTERM stops the daemon)"),
            }
        }
    })
}

fn init_logging(log_file: &std::path::Path, verbose: u8) -> Result<(), BoxError> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(log_file)
        .map_err(|e| format!("cannot open log file {}: {e}", log_file.display()))?;
    // One made under a looser umask (an older client's autostart) is made private too.
    file.set_permissions(fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("cannot make log file {} private: {e}", log_file.display()))?;
    let level = match verbose {
        0 => "info",
        1 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    // A log write that fails (a full disk) loses the line and nothing else: no report on
    // stderr (which is often the same file, and `eprintln!` panics when it cannot write).
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_ansi(false).log_internal_errors(false);
    if std::io::stderr().is_terminal() {
        builder.with_writer(LogFile(Mutex::new(file)).and(std::io::stderr)).init();
    } else {
        builder.with_writer(LogFile(Mutex::new(file))).init();
    }
    Ok(())
}

/// The log file as a tracing writer that never panics, not even after a panic elsewhere
/// poisoned its lock (the stock `Mutex<File>` writer does, and then every later log line
/// would panic the task that logs it).
struct LogFile(Mutex<fs::File>);

struct LogLine<'a>(std::sync::MutexGuard<'a, fs::File>);

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogFile {
    type Writer = LogLine<'a>;

    fn make_writer(&'a self) -> LogLine<'a> {
        LogLine(self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl std::io::Write for LogLine<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}
