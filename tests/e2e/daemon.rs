//! Daemon lifecycle: socket placement and permissions, refusals, stale sockets, signals,
//! systemd activation, restart.

use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::process::Command;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use scafld_tests::{RawClient, Run, TestEnv, wait_until};
use serde_json::json;

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// `scafldd --help` names every fallback of its socket and state directory, as the README does.
#[test]
fn the_daemons_help_names_its_default_paths() {
    let help = Run::from(Command::new(scafld_tests::scafldd_bin()).arg("--help").output().unwrap());
    help.assert_code(0);
    for default in [
        "$SCAFLD_SOCKET, else $XDG_RUNTIME_DIR/scafld/scafldd.sock, else <state dir>/run/scafldd.sock",
        "$SCAFLD_STATE_DIR, else $XDG_STATE_HOME/scafld, else ~/.local/state/scafld",
    ] {
        assert!(
            help.stdout.split_whitespace().collect::<Vec<_>>().join(" ").contains(default),
            "{default}: {}",
            help.stdout
        );
    }
}

/// A setting's variable that is no number is a start-up refusal (exit 1) naming the variable
/// and its value, never a usage error about a flag nobody passed; a client that starts that
/// daemon says so.
#[test]
fn a_bad_setting_variable_is_a_refusal_naming_it() {
    let env = TestEnv::new();
    let daemon = output_of(env.daemon_command().env("SCAFLD_RETENTION_DAYS", "abc"));
    daemon.assert_code(1);
    assert!(daemon.stderr.contains("SCAFLD_RETENTION_DAYS=abc"), "{}", daemon.stderr);
    assert!(!daemon.stderr.contains("--retention-days"), "{}", daemon.stderr);
    let listed = Run::from(
        env.scafld_command(&["--json", "daemon", "start"]).env("SCAFLD_MAX_CONNECTIONS", "many").output().unwrap(),
    );
    let message = listed.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(message.contains("SCAFLD_MAX_CONNECTIONS=many"), "{message}");
}

fn output_of(command: &mut Command) -> Run {
    Run::from(command.output().unwrap())
}

#[test]
fn default_socket_lives_in_a_private_directory() {
    let env = TestEnv::new();
    let mut daemon = env.daemon_command();
    daemon.env_remove("SCAFLD_SOCKET");
    let mut child = daemon.spawn().unwrap();
    let socket = env.path("run/scafld/scafldd.sock");
    wait_until("default socket", || RawClient::connect(&socket).is_ok());
    // The socket is bound before the database opens; an answer means start-up has finished.
    RawClient::connect(&socket).unwrap().result("daemon.status", json!({}));
    assert_eq!(mode(&env.path("run/scafld")), 0o700);
    assert_eq!(mode(&socket), 0o600);
    assert_eq!(mode(&env.state_dir), 0o700);
    assert_eq!(mode(&env.state_dir.join("scafldd.log")), 0o600);
    assert_eq!(mode(&env.state_dir.join("db")), 0o700);
    for entry in std::fs::read_dir(env.state_dir.join("db")).unwrap() {
        let path = entry.unwrap().path();
        assert_eq!(mode(&path) & 0o077, 0, "{} is open to others", path.display());
    }
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    assert!(child.wait().unwrap().success());
    assert!(!socket.exists());
}

#[test]
fn commands_get_the_callers_umask_and_file_limit_not_the_daemons() {
    // The daemon keeps its own files private (umask 0077); what it runs for a call gets the
    // calling client's umask (0027 here), as from the user's own shell, not the one the daemon
    // was started with (0002), nor its own.
    let mut env = TestEnv::new();
    let mut daemon = env.daemon_command();
    daemon.env_remove("SCAFLD_SOCKET");
    env.socket = env.path("run/scafld/scafldd.sock");
    let wrapper = format!("umask 0002; ulimit -Sn 512; exec {}", scafld_tests::scafldd_bin().display());
    let mut command = Command::new("sh");
    env.apply_env(&mut command);
    let mut child = command.args(["-c", &wrapper]).spawn().unwrap();
    drop(daemon);
    let socket = env.socket.clone();
    wait_until("the daemon's socket", || RawClient::connect(&socket).is_ok());
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    let spec = "---\nspec_version: '2.0'\ntask_id: um\nstatus: draft\n---\n\n# Um\n\n## Phase 1: A\n\nAcceptance:\n- [ ] `um` test - umask\n  - Command: `umask > umask.txt && ulimit -Sn > nofile.txt && touch made`\n";
    std::fs::write(env.work.join(".scafld/specs/drafts/um.md"), spec).unwrap();
    env.scafld(&["approve", "um", "--reason", "t"]).assert_code(0);
    let build = || Run::from(scafld_under_umask(&env, "0027", &["build", "um"]).output().unwrap());
    build().assert_code(0); // starts the build
    build().assert_code(0); // runs phase 1
    assert_eq!(std::fs::read_to_string(env.work.join("umask.txt")).unwrap().trim(), "0027");
    assert_eq!(mode(&env.work.join("made")), 0o640);
    // What the daemon itself writes into the workspace is the user's too: created as under
    // the user's umask, and a file's own mode kept when the daemon rewrites it.
    assert_eq!(mode(&env.work.join(".scafld/config.yaml")), 0o664);
    assert_eq!(mode(&env.work.join(".scafld/specs")), 0o775);
    let spec_path = || {
        let specs = env.work.join(".scafld/specs");
        specs.join(scafld_tests::tree(&specs).into_keys().find(|k| k.ends_with("um.md")).unwrap())
    };
    // The draft was written here (0644): approving and building moved and rewrote it, mode kept.
    assert_eq!(mode(&spec_path()), 0o644);
    assert_eq!(mode(&env.work.join(".scafld/runs/um")), 0o775);
    let diagnostics = std::fs::read_dir(env.work.join(".scafld/runs/um/diagnostics")).unwrap().next().unwrap().unwrap();
    assert_eq!(mode(&diagnostics.path()), 0o600, "diagnostics are private");
    std::fs::set_permissions(spec_path(), std::fs::Permissions::from_mode(0o640)).unwrap();
    env.scafld(&["fail", "um", "--reason", "mode"]).assert_code(0);
    assert!(spec_path().to_string_lossy().contains("/archive/"), "{}", spec_path().display());
    assert_eq!(mode(&spec_path()), 0o640);
    // The daemon raised its own open-file limit; the command has the one it was started with.
    assert_eq!(std::fs::read_to_string(env.work.join("nofile.txt")).unwrap().trim(), "512");
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).unwrap();
    let open_files = limits.lines().find(|l| l.starts_with("Max open files")).unwrap();
    assert!(!open_files.contains(" 512 "), "the daemon kept the low limit: {open_files}");
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    assert!(child.wait().unwrap().success());
}

/// `scafld args...` in the work directory, run under `umask` (so is a daemon it autostarts).
fn scafld_under_umask(env: &TestEnv, umask: &str, args: &[&str]) -> Command {
    let script = format!("umask {umask}; exec \"$0\" \"$@\"");
    let mut command = Command::new("sh");
    env.apply_env(&mut command);
    command.arg("-c").arg(script).arg(scafld_tests::scafld_bin()).args(args).current_dir(&env.work);
    command.stdin(std::process::Stdio::null());
    command
}

/// What a criterion prints can hold a secret of the caller's environment: its diagnostics file
/// (and the folder scafld makes for them) and the ledger export are the owner's alone, however
/// open the umask the daemon and the client work under (the usual 0022 here).
#[test]
fn criterion_output_and_ledger_exports_are_private_whatever_the_umask() {
    let env = TestEnv::new();
    let run = |args: &[&str]| Run::from(scafld_under_umask(&env, "0022", args).output().unwrap());
    scafld_tests::git(&env.work, &["init", "-q"]);
    run(&["init"]).assert_code(0);
    let spec = "---\nspec_version: '2.0'\ntask_id: pv\nstatus: draft\n---\n\n# Pv\n\n## Phase 1: A\n\nAcceptance:\n- [ ] `pv` test - prints a token\n  - Command: `echo using token $API_TOKEN`\n";
    std::fs::write(env.work.join(".scafld/specs/drafts/pv.md"), spec).unwrap();
    run(&["approve", "pv", "--reason", "t"]).assert_code(0);
    for _ in 0..2 {
        let mut build = scafld_under_umask(&env, "0022", &["build", "pv"]);
        Run::from(build.env("API_TOKEN", "sk-test-PRIVATE").output().unwrap()).assert_code(0);
    }
    run(&["session", "pv", "--export"]).assert_code(0);
    let diagnostics = env.work.join(".scafld/runs/pv/diagnostics");
    assert_eq!(mode(&diagnostics), 0o700);
    let files: Vec<_> = std::fs::read_dir(&diagnostics).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(!files.is_empty());
    for file in &files {
        assert!(std::fs::read_to_string(file).unwrap().contains("sk-test-PRIVATE"), "{}", file.display());
        assert_eq!(mode(file), 0o600, "{}", file.display());
    }
    assert_eq!(mode(&env.work.join(".scafld/runs/pv/ledger.json")), 0o600);
    // A ledger exported over a file of the caller's is private too.
    let outside = env.path("ledger-copy.json");
    std::fs::write(&outside, "old").unwrap();
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o644)).unwrap();
    run(&["session", "pv", "--export", outside.to_str().unwrap(), "--force"]).assert_code(0);
    assert_eq!(mode(&outside), 0o600);
}

/// Every file in the state directory is the user's alone however the daemon was started: one
/// the client autostarts under umask 0022 makes its folder and log private from the first
/// line, the manifest is written 0600, and a log left 0644 by an older client is made 0600.
#[test]
fn the_state_directory_is_private_when_the_client_starts_the_daemon() {
    fn open_to_others(dir: &std::path::Path, found: &mut Vec<String>) {
        use std::os::unix::fs::FileTypeExt;
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let meta = entry.metadata().unwrap();
            if meta.file_type().is_socket() {
                continue;
            }
            if meta.permissions().mode() & 0o077 != 0 {
                found.push(format!("{:o} {}", meta.permissions().mode() & 0o777, entry.path().display()));
            }
            if meta.is_dir() {
                open_to_others(&entry.path(), found);
            }
        }
    }
    let env = TestEnv::new();
    scafld_tests::git(&env.work, &["init", "-q"]);
    let run = |args: &[&str]| Run::from(scafld_under_umask(&env, "0022", args).output().unwrap());
    run(&["init"]).assert_code(0);
    wait_until("the manifest", || env.state_dir.join("db.manifest.json").exists());
    let mut found = Vec::new();
    open_to_others(&env.state_dir, &mut found);
    assert!(found.is_empty(), "open to others: {found:?}");
    run(&["daemon", "stop"]).assert_code(0);
    std::fs::set_permissions(env.state_dir.join("scafldd.log"), std::fs::Permissions::from_mode(0o644)).unwrap();
    run(&["daemon", "start"]).assert_code(0);
    assert_eq!(mode(&env.state_dir.join("scafldd.log")), 0o600);
}

#[test]
fn stop_signals_shut_down_cleanly_and_user_signals_are_ignored() {
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP, Signal::SIGQUIT] {
        let mut env = TestEnv::new();
        let pid = env.start_daemon();
        let mut subscriber = env.client();
        subscriber.result("events.subscribe", json!({}));
        // A user signal ends nothing: the daemon still answers.
        kill(Pid::from_raw(pid as i32), Signal::SIGUSR1).unwrap();
        kill(Pid::from_raw(pid as i32), Signal::SIGUSR2).unwrap();
        env.client().result("daemon.status", json!({}));
        kill(Pid::from_raw(pid as i32), signal).unwrap();
        assert_eq!(subscriber.next_event()["kind"], "daemon_shutting_down");
        let status = env.take_daemon().wait().unwrap();
        assert!(status.success(), "{signal}: exit status {status}");
        assert!(!env.socket.exists(), "{signal}: socket left behind");
        let log = std::fs::read_to_string(env.state_dir.join("scafldd.log")).unwrap();
        assert!(log.contains(&format!("shutting down: {signal}")), "{log}");
    }
}

#[test]
fn shutdown_method_exits_zero_and_removes_the_socket() {
    let mut env = TestEnv::new();
    env.start_daemon();
    let reply = env.client().result("daemon.shutdown", json!({}));
    assert_eq!(reply["stopping"], true);
    let status = env.take_daemon().wait().unwrap();
    assert!(status.success());
    assert!(!env.socket.exists());
    // A new call now gets a connection error, not a hang.
    assert!(RawClient::connect(&env.socket).is_err());
}

/// Clients calling while the daemon stops each get an answer or a refused connection (which
/// the CLI calls unreachable), never a connection the daemon took into its queue and then
/// reset as it exited.
#[test]
fn calls_racing_a_stop_are_answered_or_refused_never_reset() {
    let mut env = TestEnv::new();
    env.start_daemon();
    let stopped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let callers: Vec<_> = (0..8)
        .map(|_| {
            let (stopped, answered, socket) = (stopped.clone(), answered.clone(), env.socket.clone());
            std::thread::spawn(move || {
                let mut resets = Vec::new();
                while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                    let Ok(mut client) = RawClient::connect(&socket) else { continue };
                    client.request("daemon.status", json!({}));
                    match client.try_read_wire() {
                        Ok(Some(_)) => _ = answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                        Ok(None) => resets.push("closed without an answer".to_string()),
                        Err(e) => resets.push(e.to_string()),
                    }
                }
                resets
            })
        })
        .collect();
    wait_until("calls answered", || answered.load(std::sync::atomic::Ordering::Relaxed) > 50);
    env.client().result("daemon.shutdown", json!({}));
    assert!(env.take_daemon().wait().unwrap().success());
    stopped.store(true, std::sync::atomic::Ordering::Relaxed);
    let resets: Vec<String> = callers.into_iter().flat_map(|c| c.join().unwrap()).collect();
    assert!(resets.is_empty(), "{} calls cut: {:?}", resets.len(), &resets[..resets.len().min(3)]);
}

#[test]
fn second_daemon_on_the_same_socket_is_refused() {
    let mut env = TestEnv::new();
    env.start_daemon();
    let output = env.daemon_command().output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("another scafld daemon is already running at {}", env.socket.display())),
        "{stderr}"
    );
    // The hint names both settings a second daemon needs: a socket alone is refused (one
    // daemon per state directory).
    assert!(stderr.contains("set SCAFLD_STATE_DIR and SCAFLD_SOCKET"), "{stderr}");
    // The first daemon is unharmed.
    env.client().result("daemon.status", json!({}));
    // Following the hint starts a second daemon.
    let (other_socket, other_state) = (env.path("run/second.sock"), env.path("second-state"));
    let mut second = env
        .daemon_command()
        .env("SCAFLD_SOCKET", &other_socket)
        .env("SCAFLD_STATE_DIR", &other_state)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the second daemon's socket", || RawClient::connect(&other_socket).is_ok());
    kill(Pid::from_raw(second.id() as i32), Signal::SIGTERM).unwrap();
    assert!(second.wait().unwrap().success());
    // A refusal whose message cannot be written (stderr on a full disk) still exits 1, not a
    // panic's 101.
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let output = env.daemon_command().stderr(full).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
}

/// Under a hard open-file limit too low to serve (`ulimit -n 16`), the daemon refuses to start,
/// exit 1, naming the limit and the minimum, instead of coming up "listening" and failing
/// every accept while it holds the state directory; a client that started it says so, and
/// once the limit is normal the next command starts a daemon that answers.
#[test]
fn a_daemon_refuses_to_start_under_too_low_an_open_file_limit() {
    let env = TestEnv::new();
    let limited = |command: &mut Command| {
        // SAFETY: setrlimit is async-signal-safe; it only lowers this child's limit.
        unsafe {
            command.pre_exec(|| {
                use nix::sys::resource::{Resource, setrlimit};
                setrlimit(Resource::RLIMIT_NOFILE, 16, 16).map_err(std::io::Error::from)
            });
        }
    };
    let mut daemon = env.daemon_command();
    limited(&mut daemon);
    let output = scafld_tests::output_within(&mut daemon, scafld_tests::DEADLINE);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("the open-file limit is 16 (hard limit 16)"), "{stderr}");
    assert!(stderr.contains("needs at least 64 open files"), "{stderr}");
    assert!(!stderr.contains("--recover"), "{stderr}");
    let mut client = env.scafld_command(&["daemon", "start"]);
    limited(&mut client);
    let run = Run::from(scafld_tests::output_within(&mut client, scafld_tests::DEADLINE));
    assert_ne!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("the open-file limit is 16"), "{}", run.stderr);
    // Nothing was left holding the state directory.
    env.scafld_within(&["daemon", "start"], scafld_tests::DEADLINE).assert_code(0);
    env.scafld_within(&["daemon", "status", "--json"], scafld_tests::DEADLINE).assert_code(0);
}

/// The socket's folder (or the socket file alone) removed under a running daemon: before, the
/// daemon ran on unreachable, holding the state directory, every command was refused (another
/// daemon runs) and `daemon stop` said no daemon was running. Now `daemon stop` finds it by
/// the state directory's lock and stops it, and a daemon left alone notices and stops, so the
/// next command starts one that answers.
#[test]
fn a_daemon_whose_socket_is_removed_is_stopped_not_orphaned() {
    let env = TestEnv::new();
    env.init();
    let holder = || {
        let text = std::fs::read_to_string(env.state_dir.join("scafldd.lock")).unwrap_or_default();
        text.lines().next().and_then(|line| line.trim().parse::<i32>().ok())
    };
    let running = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
    };
    let first = holder().expect("the daemon's pid in the lock file");
    std::fs::remove_dir_all(env.socket.parent().unwrap()).unwrap();
    let run = env.scafld_within(&["daemon", "stop"], scafld_tests::DEADLINE);
    run.assert_code(0);
    assert!(run.stdout.contains(&format!("stopped the daemon (pid {first})")), "{}", run.stdout);
    wait_until("the first daemon to end", || !running(first));

    env.scafld_within(&["list"], scafld_tests::DEADLINE).assert_code(0);
    let second = holder().expect("a new daemon's pid");
    assert_ne!(second, first);
    std::fs::remove_file(&env.socket).unwrap();
    wait_until("the second daemon to notice and end", || !running(second));
    let run = env.scafld_within(&["list"], scafld_tests::DEADLINE);
    run.assert_code(0);
    assert!(run.stderr.contains("started the daemon"), "{}", run.stderr);
}

/// `daemon stop` never signals a `scafldd` that holds the state directory without serving a
/// socket there: `scafldd --recover` rebuilding the database takes the lock naming no socket,
/// and cutting it short would leave the rebuild half done. It is refused, exit 1, named.
#[test]
fn daemon_stop_never_signals_a_recovery() {
    let env = TestEnv::new();
    std::fs::create_dir_all(&env.state_dir).unwrap();
    // A process named `scafldd` holding the lock the way a recovery does: its pid, no socket.
    let recovery = env.path("bin/scafldd");
    std::fs::create_dir_all(recovery.parent().unwrap()).unwrap();
    std::fs::copy("/usr/bin/sleep", &recovery).unwrap();
    let lock = env.state_dir.join("scafldd.lock");
    // The daemon's lock is a POSIX record lock, kept across the exec while its descriptor is.
    let take = "import fcntl,os,sys; fd=os.open(sys.argv[1], os.O_WRONLY|os.O_CREAT|os.O_TRUNC, 0o600); os.set_inheritable(fd, True); fcntl.lockf(fd, fcntl.LOCK_EX); os.write(fd, b'%d\\n' % os.getpid()); os.execv(sys.argv[2], [sys.argv[2], '600'])";
    let mut holder = Command::new("python3").args(["-c", take]).arg(&lock).arg(&recovery).spawn().unwrap();
    let pid = holder.id();
    wait_until("the stand-in recovery to hold the lock", || {
        std::fs::read_to_string(&lock).is_ok_and(|text| text.trim() == pid.to_string())
            && std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|comm| comm.trim() == "scafldd")
    });
    let run = env.scafld_within(&["daemon", "stop"], scafld_tests::DEADLINE);
    let alive = holder.try_wait().unwrap().is_none();
    let _ = holder.kill();
    let _ = holder.wait();
    run.assert_code(1);
    assert!(run.stderr.contains(&format!("scafldd pid {pid}")), "{}", run.stderr);
    assert!(run.stderr.contains("without serving a socket"), "{}", run.stderr);
    assert!(alive, "the recovery was signalled: {}", run.stderr);
}

/// Under a process limit (`ulimit -u`) that leaves no room for its threads, the daemon refuses
/// to start, exit 1, naming the limit: before, building its runtime panicked ("OS can't spawn
/// worker thread"), or sled was left without threads and the daemon listened without ever
/// answering, holding the state directory. Root ignores the limit, so as root the daemon runs
/// as `nobody` (through `setpriv`); skipped where neither can be done.
#[test]
fn a_daemon_refuses_to_start_without_room_for_its_threads() {
    let root = nix::unistd::Uid::effective().is_root();
    let nobody = nix::unistd::User::from_name("nobody").ok().flatten();
    let works = Command::new("setpriv").arg("--help").output().is_ok_and(|out| out.status.success());
    if root && (nobody.is_none() || !works) {
        eprintln!("skipped: running as root without `nobody` or setpriv");
        return;
    }
    // A folder `nobody` may use, so that only the limit stands in the daemon's way.
    let dir = tempfile::Builder::new().prefix("scafld-nproc").tempdir().unwrap();
    if let Some(nobody) = &nobody
        && root
    {
        nix::unistd::chown(dir.path(), Some(nobody.uid), Some(nobody.gid)).unwrap();
    }
    let mut command = match (root, &nobody) {
        (true, Some(nobody)) => {
            let mut command = Command::new("setpriv");
            command
                .arg(format!("--reuid={}", nobody.uid))
                .arg(format!("--regid={}", nobody.gid))
                .arg("--clear-groups")
                .arg(scafld_tests::scafldd_bin());
            command
        }
        _ => Command::new(scafld_tests::scafldd_bin()),
    };
    command
        .env_clear()
        .arg("--socket")
        .arg(dir.path().join("run/scafldd.sock"))
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .stdin(std::process::Stdio::null());
    // SAFETY: setrlimit is async-signal-safe; it only lowers this child's limit (inherited
    // across `setpriv`'s change of user).
    unsafe {
        command.pre_exec(|| {
            use nix::sys::resource::{Resource, setrlimit};
            setrlimit(Resource::RLIMIT_NPROC, 1, 1).map_err(std::io::Error::from)
        });
    }
    let output = scafld_tests::output_within(&mut command, scafld_tests::DEADLINE);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot start the threads the daemon needs"), "{stderr}");
    assert!(stderr.contains("`ulimit -u` is 1"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn stale_socket_file_is_replaced() {
    let mut env = TestEnv::new();
    drop(UnixListener::bind(&env.socket).unwrap()); // leaves the file with nobody listening
    assert!(env.socket.exists());
    env.start_daemon();
    env.client().result("daemon.status", json!({}));
}

#[test]
fn a_regular_file_at_the_socket_path_is_not_clobbered() {
    let env = TestEnv::new();
    std::fs::write(&env.socket, "precious").unwrap();
    let output = env.daemon_command().output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("is not a socket"));
    assert_eq!(std::fs::read_to_string(&env.socket).unwrap(), "precious");
}

#[test]
fn socket_paths_over_the_kernel_limit_work() {
    let mut env = TestEnv::new();
    let deep = env.path(&"d".repeat(60)).join("e".repeat(60));
    std::fs::create_dir_all(&deep).unwrap();
    env.socket = deep.join("scafldd.sock");
    assert!(env.socket.as_os_str().len() > 107);
    env.start_daemon();
    let run = env.scafld(&["daemon", "status", "--json"]);
    run.assert_code(0);
    assert_eq!(run.json()["result"]["socket_path"], env.socket.display().to_string());
}

#[test]
fn peers_with_another_uid_are_refused() {
    if !nix::unistd::getuid().is_root() {
        eprintln!("skipped: needs root to run a client as another uid");
        return;
    }
    let mut env = TestEnv::new();
    env.start_daemon();
    let as_nobody = |env: &TestEnv| {
        let mut command = env.scafld_command(&["daemon", "status", "--json"]);
        command.current_dir("/").uid(65534).gid(65534);
        command.output().unwrap()
    };
    // With the default modes the socket directory keeps other users out entirely.
    let output = as_nobody(&env);
    assert_eq!(output.status.code(), Some(6), "{output:?}");

    // With the modes opened up, the daemon itself refuses the peer by its credentials.
    for dir in [env.dir.path(), &env.path("run")] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(&env.socket, std::fs::Permissions::from_mode(0o777)).unwrap();
    // The client refuses first: the process listening is not its own user's.
    let output = as_nobody(&env);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(6), "{stdout}");
    assert!(stdout.contains("runs as uid 0, not as you (uid 65534)"), "{stdout}");
    // A raw client that skips that check meets the daemon's own refusal.
    let raw = Command::new("python3")
        .args(["-c", RAW_STATUS, env.socket.to_str().unwrap()])
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let reply = String::from_utf8_lossy(&raw.stdout);
    assert!(reply.contains("peer uid 65534 is not the daemon's uid 0"), "{reply} {raw:?}");
}

/// Send one `daemon.status` request over the socket named by argv[1] and print the reply line.
const RAW_STATUS: &str = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"daemon.status","params":{}}\n')
print(s.makefile().readline())
"#;

/// Listen on argv[1] as whoever runs this, accept one connection and print how many bytes its
/// first read carried (0: the peer closed without sending), then close it, so a client that
/// did send is not left waiting for an answer.
const SQUATTER: &str = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(1)
print("ready", flush=True)
c, _ = s.accept()
print(len(c.recv(65536)), flush=True)
c.close()
"#;

#[test]
fn a_socket_directory_others_may_write_is_refused_by_client_and_daemon() {
    let env = TestEnv::new();
    let run = env.path("run");
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o777)).unwrap();
    // The daemon will not put its socket where others could swap it.
    let output = env.daemon_command().output().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("refusing the socket directory") && stderr.contains("may be written by others"),
        "{stderr}"
    );
    // ...and says what to do about it.
    assert!(stderr.contains(&format!("(`chmod go-w {}`)", run.display())), "{stderr}");
    assert!(!env.socket.exists());
    // Nor will a daemon the client starts: the client passes the refusal on.
    let started = env.scafld(&["daemon", "start"]);
    assert_ne!(started.code, 0, "{started:?}");
    assert!(format!("{}{}", started.stdout, started.stderr).contains("may be written by others"), "{started:?}");
    // A sticky directory (like /tmp) is fine: others cannot replace what we create there.
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o1777)).unwrap();
    env.scafld(&["daemon", "start"]).assert_code(0);
    env.scafld(&["daemon", "status"]).assert_code(0);
    env.scafld(&["daemon", "stop"]).assert_code(0);
}

#[test]
fn a_squatted_socket_directory_receives_nothing() {
    if !nix::unistd::getuid().is_root() {
        eprintln!("skipped: needs root to squat as another uid");
        return;
    }
    // Another user got there first: the directory and the socket in it are theirs.
    let env = TestEnv::new();
    let run = env.path("run");
    std::fs::set_permissions(env.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o777)).unwrap();
    let squatted = run.join("squat");
    std::fs::create_dir(&squatted).unwrap();
    std::fs::set_permissions(&squatted, std::fs::Permissions::from_mode(0o777)).unwrap();
    nix::unistd::chown(&squatted, Some(nix::unistd::Uid::from_raw(65534)), Some(nix::unistd::Gid::from_raw(65534)))
        .unwrap();
    let socket = squatted.join("scafldd.sock");
    let mut squatter = Command::new("python3")
        .args(["-c", SQUATTER, socket.to_str().unwrap()])
        .uid(65534)
        .gid(65534)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(squatter.stdout.take().unwrap()));
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    let output = env.scafld_command(&["daemon", "status", "--json"]).env("SCAFLD_SOCKET", &socket).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(6), "{stdout}");
    assert!(stdout.contains("daemon_untrusted") && stdout.contains("belongs to uid 65534"), "{stdout}");
    // The squatter saw a connection and not one byte: no request, no environment.
    assert_eq!(lines.next().unwrap().unwrap(), "0");
    squatter.wait().unwrap();
}

#[test]
fn systemd_socket_activation_is_accepted() {
    let env = TestEnv::new();
    let listener = UnixListener::bind(&env.socket).unwrap();
    let fd = listener.as_raw_fd();
    let mut command = Command::new("sh");
    env.apply_env(&mut command);
    command
        .args(["-c", "LISTEN_PID=$$ LISTEN_FDS=1 exec \"$0\"", &scafld_tests::scafldd_bin().display().to_string()])
        .stdin(std::process::Stdio::null());
    // SAFETY: dup2 and fcntl are async-signal-safe; they place the listening socket at fd 3
    // in the child, without close-on-exec, as systemd does.
    unsafe {
        command.pre_exec(move || {
            let placed = if fd == 3 { nix::libc::fcntl(3, nix::libc::F_SETFD, 0) } else { nix::libc::dup2(fd, 3) };
            if placed < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
        });
    }
    let mut child = command.spawn().unwrap();
    drop(listener);
    wait_until("activated daemon", || RawClient::connect(&env.socket).is_ok());
    let status = RawClient::connect(&env.socket).unwrap().result("daemon.status", json!({}));
    assert_eq!(status["socket_activated"], true);
    assert_eq!(status["socket_path"], env.socket.display().to_string());
    // The listening socket is close-on-exec: an acceptance command holds no socket at all (it
    // could otherwise accept other clients' requests, environments included).
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    let spec = "---\nspec_version: '2.0'\ntask_id: fds\nstatus: draft\n---\n\n# Fds\n\n## Phase 1: A\n\nAcceptance:\n- [ ] `no-socket` test - inherits no socket\n  - Command: `for f in /proc/$$/fd/*; do case $(readlink $f) in socket:*) exit 1;; esac; done`\n";
    std::fs::write(env.work.join(".scafld/specs/drafts/fds.md"), spec).unwrap();
    env.scafld(&["approve", "fds", "--reason", "t"]).assert_code(0);
    env.scafld(&["build", "fds"]).assert_code(0);
    let run = env.scafld(&["build", "fds", "--json"]);
    assert_eq!(run.json()["result"]["criteria"][0]["status"], "pass", "{}", run.stdout);
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    assert!(child.wait().unwrap().success());
    // The socket belongs to systemd: the daemon leaves it in place.
    assert!(env.socket.exists());
}

#[test]
fn restart_remembers_workspaces() {
    let mut env = TestEnv::new();
    env.start_daemon();
    let init = env.init();
    let id = init["result"]["workspace"]["workspace_id"].as_str().unwrap().to_string();
    env.client().result("daemon.shutdown", json!({}));
    env.take_daemon().wait().unwrap();

    env.start_daemon();
    let list = env.client().result("workspace.list", json!({}));
    assert_eq!(list["workspaces"][0]["workspace_id"], id);
    // Reopened (watched, indexed) in the background once the daemon serves.
    scafld_tests::wait_until("the workspace to be reopened", || {
        env.client().result("workspace.list", json!({}))["workspaces"][0]["open"] == true
    });
}

#[test]
fn moved_workspace_keeps_its_id_and_a_copy_gets_a_new_one() {
    let mut env = TestEnv::new();
    env.start_daemon();
    let id = env.init()["result"]["workspace"]["workspace_id"].as_str().unwrap().to_string();
    let moved = env.path("moved");
    std::fs::rename(&env.work, &moved).unwrap();
    let info = env.client().result("workspace.open", json!({"root": moved.display().to_string()}));
    assert_eq!(info["workspace_id"], id.as_str());

    let copy = env.path("copy");
    let status = Command::new("cp").arg("-a").arg(&moved).arg(&copy).status().unwrap();
    assert!(status.success());
    let info = env.client().result("workspace.open", json!({"root": copy.display().to_string()}));
    assert_ne!(info["workspace_id"], id.as_str());
    let list = env.client().result("workspace.list", json!({}));
    assert_eq!(list["workspaces"].as_array().unwrap().len(), 2, "{list}");
}

/// After a crash, recovery kills a recorded process group only while its recorded leader
/// still owns the id: a process that reused the id is left alone, the real orphan dies.
#[test]
fn recovery_kills_only_the_group_its_record_names() {
    use scafld_daemon::domain::job::{JobKind, JobRecord, JobState};
    use scafld_daemon::runner::ProcessGroup;
    use scafld_daemon::store::{SledStore, Store};

    let env = TestEnv::new();
    let spawn =
        |marker: &str| std::process::Command::new("sleep").arg(marker).process_group(0).spawn().expect("spawn sleep");
    let (mut orphan, mut stranger) = (spawn("3131.5"), spawn("3131.25"));
    let orphan_group = ProcessGroup::led_by(orphan.id() as i32, "").unwrap();
    // The stranger holds a recorded id, but the record's leader started at another time.
    let mut reused = ProcessGroup::led_by(stranger.id() as i32, "").unwrap();
    reused.start_ticks += 1;
    {
        let store = SledStore::open(&env.state_dir.join("db")).unwrap();
        for (id, group) in [("job-1-aaaaaa", orphan_group), ("job-2-bbbbbb", reused)] {
            let mut job = JobRecord::queued(
                id.into(),
                JobKind::Acceptance,
                "w".into(),
                "/nowhere".into(),
                "t".into(),
                "now".into(),
            );
            job.state = JobState::Running;
            job.group = Some(group);
            store.save_job(&job).unwrap();
        }
    }
    let mut env = env;
    env.start_daemon();
    scafld_tests::wait_until("the orphan to be killed", || orphan.try_wait().unwrap().is_some());
    assert!(stranger.try_wait().unwrap().is_none(), "a process that reused a recorded id was killed");
    let stale = env.client().result("job.status", json!({"job_id": "job-2-bbbbbb"}));
    assert!(stale["reason"].as_str().unwrap().contains("had already ended"), "{stale}");
    stranger.kill().unwrap();
    stranger.wait().unwrap();
}

/// A workspace with two tasks that have ledgers; `keep`'s is exported. Returns how many
/// ledger entries `keep` has. The daemon is stopped.
fn workspace_with_ledgers(env: &mut TestEnv) -> usize {
    env.start_daemon();
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    for task in ["keep", "gone"] {
        let spec = format!(
            "---\nspec_version: '2.0'\ntask_id: {task}\nstatus: draft\n---\n\n# T\n\n## Phase 1: A\n\nAcceptance:\n- [ ] `a` test - ok\n  - Command: `true`\n"
        );
        std::fs::write(env.work.join(format!(".scafld/specs/drafts/{task}.md")), spec).unwrap();
        env.scafld(&["approve", task, "--reason", "t"]).assert_code(0);
    }
    env.scafld(&["build", "keep"]).assert_code(0);
    env.scafld(&["build", "keep"]).assert_code(0);
    env.scafld(&["session", "keep", "--export"]).assert_code(0);
    let entries = ledger_len(env, "keep");
    env.scafld(&["daemon", "stop"]).assert_code(0);
    entries
}

/// An orderly stop closes the database and marks it closed; the next start trusts that mark
/// (using it up) and opens the database without copying it first. A killed daemon leaves no
/// mark, so the start after it copies first, as the damage test below needs.
#[test]
fn only_a_database_an_orderly_stop_closed_is_opened_without_a_copy() {
    let mut env = TestEnv::new();
    let entries = workspace_with_ledgers(&mut env);
    let (mark, log) = (env.state_dir.join("db.closed"), env.state_dir.join("scafldd.log"));
    let uncopied = || std::fs::read_to_string(&log).unwrap().matches("opened with no copy made first").count();
    assert!(mark.exists(), "the orderly stop left no mark");
    assert_eq!(uncopied(), 0);

    let pid = env.start_daemon();
    assert!(!mark.exists(), "the start did not use the mark up");
    assert_eq!(uncopied(), 1);
    assert_eq!(ledger_len(&env, "keep"), entries);

    kill(Pid::from_raw(pid as i32), Signal::SIGKILL).unwrap();
    env.take_daemon().wait().unwrap();
    env.start_daemon();
    assert_eq!(uncopied(), 1, "the start after a kill did not copy the database first");
    env.scafld(&["daemon", "stop"]).assert_code(0);
    assert!(mark.exists());
}

/// The database gone (the manifest beside it kept), then `scafldd --recover`: its report.
fn lose_the_database_and_recover(env: &TestEnv) -> String {
    std::fs::remove_dir_all(env.state_dir.join("db")).unwrap();
    recover(env)
}

/// How many entries the task's ledger holds, as `session` shows it.
fn ledger_len(env: &TestEnv, task: &str) -> usize {
    env.scafld(&["session", task, "--json"]).json()["result"]["entries"].as_array().unwrap().len()
}

/// [`ledger_len`] with the daemon stopped: started for the question, stopped after it.
fn ledger_len_stopped(env: &mut TestEnv, task: &str) -> usize {
    env.start_daemon();
    let entries = ledger_len(env, task);
    env.scafld(&["daemon", "stop"]).assert_code(0);
    entries
}

fn refused_to_start(env: &TestEnv) -> String {
    // Bounded: a daemon that takes the database serves on, and the test says so.
    let mut daemon = env.daemon_command().stdout(std::process::Stdio::null()).spawn().unwrap();
    let status = scafld_tests::wait_for_exit(&mut daemon, scafld_tests::DEADLINE);
    if status.is_none() {
        let _ = daemon.kill();
    }
    let output = daemon.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(status.and_then(|s| s.code()), Some(1), "the damaged database was served: {stderr}");
    assert!(stderr.contains("is damaged or incomplete") && stderr.contains("scafldd --recover"), "{stderr}");
    stderr
}

/// `scafldd --recover` after a start that refused the database kept a copy of it aside (here:
/// a copy of the healthy one), so the recovery runs and reads the workspaces' exports.
fn recover_after_a_refused_start(env: &TestEnv) -> String {
    let kept = env.state_dir.join("db.damaged-earlier");
    std::fs::create_dir(&kept).unwrap();
    for file in std::fs::read_dir(env.state_dir.join("db")).unwrap().flatten() {
        if file.path().is_file() {
            std::fs::copy(file.path(), kept.join(file.file_name())).unwrap();
        }
    }
    recover(env)
}

fn recover(env: &TestEnv) -> String {
    let output = env.daemon_command().arg("--recover").output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    stdout
}

#[test]
fn a_truncated_or_bit_flipped_database_is_refused_kept_and_rebuilt() {
    let mut env = TestEnv::new();
    let entries = workspace_with_ledgers(&mut env);
    assert!(entries >= 3);
    let db_file = env.state_dir.join("db/db");
    let original = std::fs::read(&db_file).unwrap();
    for damage in ["truncate 50%", "truncate 10%", "truncate 90%", "flip bits"] {
        let mut bytes = original.clone();
        match damage {
            "truncate 50%" => bytes.truncate(bytes.len() / 2),
            "truncate 10%" => bytes.truncate(bytes.len() / 10),
            "truncate 90%" => bytes.truncate(bytes.len() * 9 / 10),
            _ => {
                let n = bytes.len();
                for i in (n / 4..n).step_by(97) {
                    bytes[i] ^= 0x5a;
                }
            }
        }
        std::fs::write(&db_file, &bytes).unwrap();
        // The database as it was before the refused start is kept, byte for byte.
        let kept_bytes = std::fs::read(kept_copy(&refused_to_start(&env)).join("db")).unwrap();
        assert!(kept_bytes == bytes, "{damage}: the kept copy differs from the damaged database");
    }
    // The rebuild keeps the damaged copy and restores what the export holds.
    let report = recover(&env);
    assert!(report.contains("kept the damaged database at"), "{report}");
    assert!(report.contains(&format!("/keep: {entries} entries from the")), "{report}");
    let kept = damaged_copies(&env);
    assert_eq!(kept.len(), 5, "one copy per refused start and the one moved aside: {kept:?}");
    assert!(!env.state_dir.join("db.opening").exists());
    env.start_daemon();
    assert_eq!(ledger_len(&env, "keep"), entries);
}

/// The copies of the database that refused starts and recoveries kept aside, by name.
fn damaged_copies(env: &TestEnv) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(&env.state_dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| n.starts_with("db.damaged-") && !n.ends_with(".json"))
        .collect();
    names.sort();
    names
}

/// Where a refused start says it kept the database as it was.
fn kept_copy(stderr: &str) -> std::path::PathBuf {
    let kept = stderr.split("is kept at ").nth(1).and_then(|rest| rest.split([')', '\n', ';']).next());
    std::path::PathBuf::from(kept.unwrap_or_else(|| panic!("no copy kept: {stderr}")).trim())
}

/// Every client command retried while the database is refused tries a start, and each used to
/// keep another whole copy of it (up to 512 MiB each) until the disk filled. A copy is kept per
/// state of the damage: the first start keeps the database as it was, the second may keep what
/// sled's repair of the first open left, and the retries after them keep nothing more, each
/// naming the copy that holds what it refused.
#[test]
fn retried_refused_starts_keep_one_copy_per_state_of_the_damage() {
    let mut env = TestEnv::new();
    workspace_with_ledgers(&mut env);
    let db_file = env.state_dir.join("db/db");
    let bytes = std::fs::read(&db_file).unwrap();
    let damaged = bytes[..bytes.len() / 2].to_vec();
    std::fs::write(&db_file, &damaged).unwrap();
    let first = kept_copy(&refused_to_start(&env));
    assert_eq!(std::fs::read(first.join("db")).unwrap(), damaged, "the first copy is the database as it was");
    let mut last = first.clone();
    for _ in 0..4 {
        last = kept_copy(&refused_to_start(&env));
    }
    let copies = damaged_copies(&env);
    assert!(copies.len() <= 2, "five refused starts kept {} copies: {copies:?}", copies.len());
    assert!(last.is_dir() && first.is_dir(), "{copies:?}");
    assert_eq!(std::fs::read(first.join("db")).unwrap(), damaged, "the first copy is never replaced");
}

#[test]
fn a_deleted_database_is_refused_and_rebuilt_from_manifest_and_exports() {
    let mut env = TestEnv::new();
    let entries = workspace_with_ledgers(&mut env);
    std::fs::remove_dir_all(env.state_dir.join("db")).unwrap();
    let stderr = refused_to_start(&env);
    assert!(stderr.contains("is gone"), "{stderr}");
    let report = recover(&env);
    assert!(report.contains("restored 1 workspace(s)"), "{report}");
    assert!(report.contains(&format!("/keep: {entries} entries from the export")), "{report}");
    // `gone` had no export: its loss is reported, not hidden.
    assert!(report.contains("/gone: 0 of"), "{report}");
    env.start_daemon();
    assert_eq!(ledger_len(&env, "keep"), entries);
    // A recovery while a daemon runs is refused.
    let output = env.daemon_command().arg("--recover").output().unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("stop it first"));
}

/// A recovery of a database that opens and holds all its manifest records has nothing to do:
/// it says so and changes nothing (no copy moved aside as "damaged").
#[test]
fn a_recovery_of_a_healthy_database_changes_nothing() {
    let mut env = TestEnv::new();
    let entries = workspace_with_ledgers(&mut env);
    let report = recover(&env);
    assert!(report.contains("nothing to recover; nothing was changed"), "{report}");
    let aside: Vec<_> = std::fs::read_dir(&env.state_dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| n.starts_with("db.") && n != "db.manifest.json")
        .collect();
    assert!(aside.is_empty(), "{aside:?}");
    // Once a recovery has read the copies kept aside, the database it leaves is healthy too:
    // a recovery again changes nothing, however many copies the first one left.
    let report = recover_after_a_refused_start(&env);
    assert!(report.contains("kept the damaged database at"), "{report}");
    let copies = |env: &TestEnv| {
        std::fs::read_dir(&env.state_dir)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("db.damaged-"))
            .count()
    };
    let kept = copies(&env);
    let report = recover(&env);
    assert!(report.contains("nothing to recover; nothing was changed"), "{report}");
    assert_eq!(copies(&env), kept);
    env.start_daemon();
    assert_eq!(ledger_len(&env, "keep"), entries);
}

/// `cp -a from to`: a folder copied whole, as it is.
fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    assert!(Command::new("cp").arg("-a").arg(from).arg(to).status().unwrap().success());
}

/// `scafldd --recover` killed at any of its steps (before each of its renames, the steps that
/// change what a start finds, under `strace`'s fault injection) leaves either the database as it
/// was or a state the next start refuses, naming `scafldd --recover`, which then rebuilds every
/// ledger. Before, it moved the database and its manifest aside first and built the new one in
/// their place: a kill meanwhile left an empty database that the next start served as brand new.
#[test]
fn a_recovery_killed_at_any_step_never_leaves_an_empty_database_served() {
    let strace = which("strace")
        .ok()
        .filter(|s| Command::new(s).args(["-qq", "-o", "/dev/null", "true"]).status().is_ok_and(|s| s.success()));
    let Some(strace) = strace else {
        assert!(std::env::var_os("CI").is_none(), "CI installs strace (.ci/run)");
        eprintln!("skipped: strace is not installed or cannot trace here");
        return;
    };
    let mut env = TestEnv::new();
    let keep = workspace_with_ledgers(&mut env);
    let gone = ledger_len_stopped(&mut env, "gone");
    // A manifest that does not read: the start is refused, the way out is `--recover`.
    std::fs::write(env.state_dir.join("db.manifest.json"), "garbage").unwrap();
    let damaged = env.path("damaged-state");
    copy_tree(&env.state_dir, &damaged);
    let mut step = 1;
    loop {
        std::fs::remove_dir_all(&env.state_dir).unwrap();
        copy_tree(&damaged, &env.state_dir);
        let mut recovery = Command::new(&strace);
        env.apply_env(&mut recovery);
        // Killed as it enters its `step`th rename (counted per thread: the recovery's are
        // on its main thread).
        let inject = format!("inject=/^rename:signal=KILL:when={step}");
        recovery.args(["-f", "-qq", "-o", "/dev/null", "-e", &inject]).arg(scafld_tests::scafldd_bin());
        let finished = recovery.arg("--recover").output().unwrap().status.success();
        let after = format!("after a recovery killed before its rename {step}");
        let start = env.scafld(&["daemon", "start"]);
        if start.code != 0 {
            // Refused: the message names the way out, which restores every ledger.
            assert!(start.stderr.contains("scafldd --recover") && !finished, "{after}: {}", start.stderr);
            recover(&env);
            env.scafld(&["daemon", "start"]).assert_code(0);
        }
        // Served: only in full.
        assert_eq!((ledger_len(&env, "keep"), ledger_len(&env, "gone")), (keep, gone), "{after}");
        env.scafld(&["daemon", "stop"]).assert_code(0);
        if finished {
            break;
        }
        step += 1;
        assert!(step < 64, "the recovery never finished under strace");
    }
    assert!(step > 4, "the recovery was killed at {} steps only", step - 1);
}

/// The snapshot sled last finished in the database folder `db`: its path and log position.
fn finished_snapshot(db: &std::path::Path) -> (std::path::PathBuf, u64) {
    let snapshot = std::fs::read_dir(db)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().unwrap().to_string_lossy().strip_prefix("snap.").is_some_and(|n| !n.contains('.')))
        .expect("sled wrote a snapshot");
    let lsn = snapshot.file_name().unwrap().to_string_lossy()["snap.".len()..].to_string();
    (snapshot, u64::from_str_radix(&lsn, 16).unwrap())
}

/// What sled leaves when its snapshot write at open is cut short (a full disk: nothing
/// written; a kill mid-write: part of it), named as sled names it, after the finished one.
fn leave_unfinished_snapshots(db: &std::path::Path) -> (std::path::PathBuf, Vec<u8>) {
    let (snapshot, lsn) = finished_snapshot(db);
    std::fs::write(db.join(format!("snap.{:016X}.generating", lsn + 1)), b"").unwrap();
    let bytes = std::fs::read(snapshot).unwrap();
    let partial = bytes[..bytes.len() / 2].to_vec();
    let name = format!("snap.{:016X}.generating", lsn + 2);
    std::fs::write(db.join(&name), &partial).unwrap();
    (db.join(name), partial)
}

/// sled reads whichever `snap.*` file sorts last, one it had not finished writing included: a
/// daemon killed while sled wrote its start-up snapshot, or a disk that filled up under it,
/// left the database refused as damaged and a recovery restoring nothing from it. The next
/// start sets the unfinished snapshots aside (the empty one removed, the partial one moved
/// beside the database and logged) and serves every entry.
#[test]
fn an_unfinished_snapshot_is_set_aside_and_the_database_opens_whole() {
    let mut env = TestEnv::new();
    let entries = workspace_with_ledgers(&mut env);
    let gone = ledger_len_stopped(&mut env, "gone");
    let db = env.state_dir.join("db");
    let (partial, bytes) = leave_unfinished_snapshots(&db);
    env.scafld(&["daemon", "start"]).assert_code(0);
    assert_eq!(ledger_len(&env, "keep"), entries);
    assert_eq!(ledger_len(&env, "gone"), gone);
    let names = |dir: &std::path::Path| -> Vec<String> {
        let listing = std::fs::read_dir(dir).unwrap().flatten();
        listing.map(|e| e.file_name().to_string_lossy().into_owned()).collect()
    };
    assert!(!names(&db).iter().any(|n| n.ends_with(".generating")), "{:?}", names(&db));
    let name = partial.file_name().unwrap().to_string_lossy().into_owned();
    let moved: Vec<String> =
        names(&env.state_dir).into_iter().filter(|n| n.starts_with(&format!("db.{name}.unfinished-"))).collect();
    assert_eq!(moved.len(), 1, "the partial snapshot is moved aside, not deleted: {:?}", names(&env.state_dir));
    assert_eq!(std::fs::read(env.state_dir.join(&moved[0])).unwrap(), bytes);
    let log = std::fs::read_to_string(env.state_dir.join("scafldd.log")).unwrap();
    assert!(log.contains(&format!("moved {name}")) && log.contains(&moved[0]), "{log}");
    env.scafld(&["daemon", "stop"]).assert_code(0);
}

/// A copy a refused start kept aside (before the fix, one holding an unfinished snapshot) is
/// read by a recovery: every ledger comes back from the database, none is reported lost.
#[test]
fn a_recovery_reads_a_database_beside_an_unfinished_snapshot() {
    let mut env = TestEnv::new();
    workspace_with_ledgers(&mut env);
    let gone = ledger_len_stopped(&mut env, "gone");
    let db = env.state_dir.join("db");
    leave_unfinished_snapshots(&db);
    let report = recover_after_a_refused_start(&env);
    assert!(report.contains(&format!("/gone: {gone} entries from the database")), "{report}");
    assert!(report.contains("nothing the manifest recorded was lost"), "{report}");
    let generating = std::fs::read_dir(env.state_dir.join("db.damaged-earlier")).unwrap().flatten();
    assert_eq!(generating.filter(|e| e.file_name().to_string_lossy().ends_with(".generating")).count(), 2);
    env.start_daemon();
    assert_eq!(ledger_len(&env, "gone"), gone);
}

/// An export edited after it was written (a recorded result turned) is refused when it would
/// fill what the database lost: the manifest's chain digest of the ledger does not match, so
/// nothing is invented; the genuine export restores.
#[test]
fn an_edited_export_is_refused_by_the_manifests_digest() {
    let mut env = TestEnv::new();
    let entries = workspace_with_ledgers(&mut env);
    let export = env.work.join(".scafld/runs/keep/ledger.json");
    let genuine = std::fs::read_to_string(&export).unwrap();
    assert!(genuine.contains("exit code was 0"), "{genuine}");
    std::fs::write(&export, genuine.replace("exit code was 0", "exit code was 0, and more")).unwrap();
    let report = lose_the_database_and_recover(&env);
    assert!(report.contains("do not match what the database recorded"), "{report}");
    assert!(report.contains(&format!("/keep: 0 of {entries}")), "{report}");

    // The genuine export, from the same manifest (kept aside with the database), restores.
    std::fs::write(&export, &genuine).unwrap();
    let kept: Vec<std::path::PathBuf> = std::fs::read_dir(&env.state_dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".manifest.json") && p.to_string_lossy().contains("damaged"))
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    std::fs::copy(&kept[0], env.state_dir.join("db.manifest.json")).unwrap();
    let report = lose_the_database_and_recover(&env);
    assert!(report.contains(&format!("/keep: {entries} entries from the export")), "{report}");
}

/// A manifest that does not read (cut short, a field of another type) is said to be so, never
/// taken for none: the workspaces it still names are searched, and their exports restored
/// unchecked.
#[test]
fn an_unreadable_manifest_is_named_and_its_workspaces_still_searched() {
    let mut env = TestEnv::new();
    let entries = workspace_with_ledgers(&mut env);
    let manifest = env.state_dir.join("db.manifest.json");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let broken = text.replacen("\"heads\":{", "\"heads\":{\"x/y\":-1,", 1);
    assert_ne!(broken, text);
    std::fs::write(&manifest, broken).unwrap();
    let report = lose_the_database_and_recover(&env);
    assert!(report.contains("the manifest could not be read"), "{report}");
    assert!(report.contains(&format!("/keep: {entries} entries from the export, unchecked")), "{report}");
}

/// An export taken before later appends (the usual case: export, keep working, lose the
/// database) restores what it holds, held to the digest recorded where it ends, and the
/// entries after it are reported lost; it is never called edited.
#[test]
fn an_export_taken_before_later_appends_restores_what_it_holds() {
    let mut env = TestEnv::new();
    let exported = workspace_with_ledgers(&mut env);
    env.start_daemon();
    env.scafld(&["cancel", "keep", "--reason", "later work"]).assert_code(0);
    let total = ledger_len(&env, "keep");
    assert!(total > exported);
    env.scafld(&["daemon", "stop"]).assert_code(0);
    let report = lose_the_database_and_recover(&env);
    assert!(!report.contains("do not match"), "{report}");
    assert!(report.contains(&format!("/keep: {exported} entries from the export")), "{report}");
    assert!(report.contains(&format!("/keep: {exported} of {total} ledger entries restored")), "{report}");
}

/// A ledger a recovery could not rebuild (its workspace moved away meanwhile) stays on record:
/// the report says the folder is not there, and once it is back a later recovery restores the
/// ledger from its export, still held to the digest recorded before the loss.
#[test]
fn a_ledger_a_recovery_lost_is_restored_by_a_later_one_once_its_export_is_back() {
    let mut env = TestEnv::new();
    let entries = workspace_with_ledgers(&mut env);
    let away = env.path("away");
    std::fs::rename(&env.work, &away).unwrap();
    let report = lose_the_database_and_recover(&env);
    assert!(report.contains(&format!("/keep: 0 of {entries}")), "{report}");
    assert!(report.contains("is not there (moved?)"), "{report}");
    // Its folder back, the database again lost (the one rebuilt holds nothing of it).
    std::fs::rename(&away, &env.work).unwrap();
    let report = lose_the_database_and_recover(&env);
    assert!(report.contains(&format!("/keep: {entries} entries from the export")), "{report}");
    env.start_daemon();
    assert_eq!(ledger_len(&env, "keep"), entries);
}

/// A recovery is refused while any daemon holds the state directory, whatever socket the daemon
/// or the recovery was started for: the database (and its manifest) stays as it is and the
/// daemon keeps working, and after it stops the next start opens the database unharmed.
#[test]
fn a_recovery_from_another_socket_is_refused_while_a_daemon_holds_the_state_directory() {
    let mut env = TestEnv::new();
    let entries = workspace_with_ledgers(&mut env);
    let pid = env.start_daemon();
    let listing = |dir: &std::path::Path| {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect();
        names.sort();
        names
    };
    let before = listing(&env.state_dir);
    let db_before = listing(&env.state_dir.join("db"));
    // The repro: a shell whose socket setting differs (cron, `sudo -u`, ssh without logind).
    let output =
        env.daemon_command().arg("--recover").env("SCAFLD_SOCKET", env.path("run/elsewhere.sock")).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("not recovering")
            && stderr.contains(&format!("process {pid} (scafldd) holds"))
            && stderr.contains("stop it first"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "{}", String::from_utf8_lossy(&output.stdout));
    assert_eq!(listing(&env.state_dir), before, "nothing was moved aside");
    assert_eq!(listing(&env.state_dir.join("db")), db_before);
    // The daemon is unharmed and still writes to its database.
    env.scafld(&["fail", "keep", "--reason", "written after the refused recovery"]).assert_code(0);
    let now = ledger_len(&env, "keep");
    assert!(now > entries, "{now} <= {entries}");
    env.scafld(&["daemon", "stop"]).assert_code(0);
    env.start_daemon();
    let session = env.scafld(&["session", "keep", "--json"]);
    assert_eq!(session.json()["result"]["entries"].as_array().unwrap().len(), now, "{}", session.stdout);
}

/// A client whose socket setting differs from the daemon holding the state directory is told
/// which daemon that is and where it answers, not to start one (which the lock would refuse);
/// one that may start a daemon is told so too when the one it started is refused.
#[test]
fn a_client_on_another_socket_is_pointed_at_the_daemon_holding_the_state_directory() {
    let mut env = TestEnv::new();
    let pid = env.start_daemon();
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    let elsewhere = env.path("run/elsewhere.sock");
    for args in [&["daemon", "status", "--json"][..], &["--no-autostart", "list", "--json"], &["list", "--json"]] {
        let run = Run::from(env.scafld_command(args).env("SCAFLD_SOCKET", &elsewhere).output().unwrap());
        run.assert_code(6);
        let hint = run.json()["error"]["hint"].as_str().unwrap_or_default().to_string();
        assert!(
            hint.contains(&format!("a daemon (pid {pid}) holds the state directory"))
                && hint.contains(&format!("SCAFLD_SOCKET={}", env.socket.display())),
            "{args:?}: {hint}"
        );
    }
}

/// The state directory's lock file is never written through a symlink (the pid would land in
/// whatever it points at), and a lock file that cannot be used is named as such, with no word of
/// another daemon to stop.
#[test]
fn the_state_lock_is_never_taken_through_a_symlink() {
    let env = TestEnv::new();
    std::fs::create_dir_all(&env.state_dir).unwrap();
    let precious = env.path("precious");
    std::fs::write(&precious, "precious\n").unwrap();
    std::os::unix::fs::symlink(&precious, env.state_dir.join("scafldd.lock")).unwrap();
    for recover in [true, false] {
        let mut command = env.daemon_command();
        if recover {
            command.arg("--recover");
        }
        let output = scafld_tests::output_within(&mut command, std::time::Duration::from_secs(30));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("symbolic link") && !stderr.contains("stop it first"), "{stderr}");
        assert_eq!(std::fs::read_to_string(&precious).unwrap(), "precious\n");
    }
}

/// An export anyone who can write the workspace can edit never overrides the database: one
/// that contradicts the intact database (an entry changed) and runs past the manifest's head
/// (an entry added) is refused and reported, and the database's entries are kept; with the
/// database gone, an export that runs past the head is refused too, and the loss reported.
#[test]
fn recovery_keeps_the_database_over_an_edited_export_and_says_so() {
    let mut env = TestEnv::new();
    let entries = workspace_with_ledgers(&mut env);
    let export = env.work.join(".scafld/runs/keep/ledger.json");
    let genuine = std::fs::read_to_string(&export).unwrap();
    let edit = |change_first: bool| {
        let mut document: serde_json::Value = serde_json::from_str(&genuine).unwrap();
        let list = document["entries"].as_array_mut().unwrap();
        if change_first {
            list[0]["recorded_at"] = "2000-01-01T00:00:00Z".into();
        }
        let mut pad = list.last().unwrap().clone();
        pad["seq"] = (entries as u64 + 1).into();
        list.push(pad);
        std::fs::write(&export, serde_json::to_string(&document).unwrap()).unwrap();
    };
    edit(true);
    let report = recover_after_a_refused_start(&env);
    assert!(report.contains(&format!("/keep: {entries} entries from the database\n")), "{report}");
    assert!(report.contains("refused exported ledgers"), "{report}");
    let refused = report.lines().find(|l| l.contains("keep/ledger.json:")).unwrap_or_else(|| panic!("{report}"));
    assert!(refused.contains("entry 1 differs from the database's"), "{report}");
    assert!(refused.contains(&format!("entry {} runs past the manifest's recorded head ({entries})", entries + 1)));
    assert!(report.contains("nothing the manifest recorded was lost"), "{report}");
    env.start_daemon();
    let session = env.scafld(&["session", "keep", "--json"]).json()["result"]["entries"].clone();
    assert_eq!(session.as_array().unwrap().len(), entries, "{session}");
    assert_ne!(session[0]["recorded_at"], "2000-01-01T00:00:00Z", "{session}");
    env.scafld(&["daemon", "stop"]).assert_code(0);

    // The database gone (and the copy the first recovery kept): an export padded past the
    // head fills nothing.
    edit(false);
    for entry in std::fs::read_dir(&env.state_dir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "db" || name.starts_with("db.damaged-") && entry.path().is_dir() {
            std::fs::remove_dir_all(entry.path()).unwrap();
        }
    }
    let report = recover(&env);
    assert!(report.contains(&format!("entry {} runs past the manifest's recorded head", entries + 1)), "{report}");
    assert!(!report.contains(" entries from the"), "{report}");
    assert!(report.contains(&format!("/keep: 0 of {entries} ledger entries restored")), "{report}");
}

/// An export recovery cannot use is refused in the report with why, never passed over: a
/// directory at the export path, one behind a run folder linked to itself, a file it may not
/// read (not as root, whom permissions do not stop), one over 64 MiB, one not UTF-8, one not JSON, one exported for another task; the
/// readable export and the database's entries are still taken.
#[test]
fn recovery_reports_an_export_it_cannot_read_with_why() {
    let mut env = TestEnv::new();
    let entries = workspace_with_ledgers(&mut env);
    let runs = env.work.join(".scafld/runs");
    let genuine = std::fs::read(runs.join("keep/ledger.json")).unwrap();
    let put = |task: &str, bytes: &[u8]| {
        std::fs::create_dir_all(runs.join(task)).unwrap();
        std::fs::write(runs.join(task).join("ledger.json"), bytes).unwrap();
        runs.join(task).join("ledger.json")
    };
    std::fs::create_dir_all(runs.join("folder/ledger.json")).unwrap();
    put("binary", b"{\"task_id\": \"binary\xff\"}");
    put("prose", b"the ledger, in words");
    put("huge", b"").metadata().unwrap(); // made sparse below: nothing is read past its size
    std::fs::OpenOptions::new()
        .write(true)
        .open(runs.join("huge/ledger.json"))
        .unwrap()
        .set_len((64 << 20) + 1)
        .unwrap();
    put("stranger", &genuine);
    // A run folder that is a link to itself: reading through it fails, for root too.
    std::os::unix::fs::symlink("loop", runs.join("loop")).unwrap();
    let root = nix::unistd::Uid::effective().is_root();
    if root {
        eprintln!("skipped the unreadable file: running as root, whom a mode of 000 does not stop");
    } else {
        use std::os::unix::fs::PermissionsExt;
        let locked = put("locked", &genuine);
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    }

    let report = recover_after_a_refused_start(&env);
    let refused = |folder: &str| {
        let needle = format!("/{folder}/ledger.json: ");
        let line = report.lines().find(|l| l.contains(&needle));
        line.unwrap_or_else(|| panic!("no refusal of {folder}: {report}")).to_string()
    };
    assert!(refused("folder").contains("not a regular file but a directory"), "{report}");
    assert!(refused("binary").contains("not UTF-8 (byte 19 is not)"), "{report}");
    assert!(refused("prose").contains("not JSON"), "{report}");
    assert!(refused("huge").contains("67108865 bytes, over the 67108864 an export may hold"), "{report}");
    assert!(refused("stranger").contains(r#"its task_id is "keep", not the folder's name"#), "{report}");
    let looped = refused("loop");
    assert!(looped.contains("cannot be read: Too many levels of symbolic links"), "{report}");
    if !root {
        let locked = refused("locked");
        assert!(locked.contains("cannot be read") && locked.contains("ermission denied"), "{report}");
    }
    assert!(report.contains("refused exported ledgers"), "{report}");
    assert!(report.contains(&format!("/keep: {entries} entries from the database\n")), "{report}");
    assert!(report.contains("nothing the manifest recorded was lost"), "{report}");
    env.start_daemon();
    let session = env.scafld(&["session", "keep", "--json"]).json()["result"]["entries"].clone();
    assert_eq!(session.as_array().unwrap().len(), entries, "{session}");
}

#[test]
fn the_systemd_units_verify_cleanly() {
    let Ok(analyze) = which("systemd-analyze") else {
        assert!(std::env::var_os("CI").is_none(), "CI installs systemd-analyze (.ci/run)");
        eprintln!("skipped: systemd-analyze is not installed");
        return;
    };
    let env = TestEnv::new();
    let units = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../systemd");
    let dir = env.path("units");
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["scafldd.service", "scafldd.socket"] {
        let text = std::fs::read_to_string(units.join(name)).unwrap();
        // Verification checks that ExecStart exists: point it at the binary under test.
        let text = text.replace(
            "ExecStart=%h/.cargo/bin/scafldd",
            &format!("ExecStart={}", scafld_tests::scafldd_bin().display()),
        );
        std::fs::write(dir.join(name), text).unwrap();
    }
    let output = Command::new(analyze)
        .arg("verify")
        .args(["scafldd.socket", "scafldd.service"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Warnings (an unknown key, a bad value) come with exit status 0: any output is a failure.
    assert!(output.status.success() && stderr.trim().is_empty(), "{stderr}");
    let service = std::fs::read_to_string(units.join("scafldd.service")).unwrap();
    for setting in ["PrivateTmp", "NoNewPrivileges", "RestrictNamespaces", "ProtectSystem", "RestrictSUIDSGID"] {
        assert!(!service.lines().any(|l| l.starts_with(&format!("{setting}="))), "{setting} changes what commands see");
    }
    assert!(service.contains("UMask=") && !service.contains("Documentation=file://"));
}

fn which(name: &str) -> Result<std::path::PathBuf, ()> {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or(())
}

/// Processes (not zombies) whose command line is `sleep <marker>`.
fn sleepers(marker: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            (cmdline == format!("sleep\0{marker}\0").as_bytes()).then(|| e.file_name().to_string_lossy().into_owned())
        })
        .collect()
}

#[test]
fn a_process_that_left_the_group_dies_with_its_run() {
    let mut env = TestEnv::new();
    env.start_daemon();
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    // setsid puts the sleeper in a session and group of its own: killing the run's group
    // alone would leave it running.
    let spec = "---\nspec_version: '2.0'\ntask_id: esc\nstatus: draft\n---\n\n# Esc\n\n## Phase 1: A\n\nAcceptance:\n- [ ] `a` test - escapes\n  - Command: `setsid sleep 3131 </dev/null >/dev/null 2>&1 & sleep 0.1; true`\n";
    std::fs::write(env.work.join(".scafld/specs/drafts/esc.md"), spec).unwrap();
    env.scafld(&["approve", "esc", "--reason", "t"]).assert_code(0);
    env.scafld(&["build", "esc"]).assert_code(0);
    env.scafld(&["build", "esc"]).assert_code(0);
    wait_until("the escaped sleeper to be killed", || sleepers("3131").is_empty());
}

/// A process that left the group and cleared its environment too (`env -i setsid`, as sudo's
/// env_reset or a daemonizer does; a double fork under `env -i`) carries no run token: before,
/// it outlived the step that passed. Orphaned onto the daemon, a child subreaper, it is found
/// by parentage and dies with its run, and the daemon reaps it (no zombie is left), while the
/// command's own exit status still reaches the step.
#[test]
fn a_process_that_left_the_group_with_a_cleared_environment_dies_with_its_run() {
    let mut env = TestEnv::new();
    let pid = env.start_daemon();
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    let command = "env -i setsid sleep 3232 </dev/null >/dev/null 2>&1 & env -i sh -c '(setsid sleep 3233 </dev/null >/dev/null 2>&1 &)'; sleep 0.2; true";
    let spec = format!(
        "---\nspec_version: '2.0'\ntask_id: esc\nstatus: draft\n---\n\n# Esc\n\n## Phase 1: A\n\nAcceptance:\n- [ ] `a` test - escapes\n  - Command: `{command}`\n"
    );
    std::fs::write(env.work.join(".scafld/specs/drafts/esc.md"), spec).unwrap();
    env.scafld(&["approve", "esc", "--reason", "t"]).assert_code(0);
    env.scafld(&["build", "esc"]).assert_code(0);
    let run = env.scafld(&["build", "esc", "--json"]);
    let criterion = &run.json()["result"]["criteria"][0];
    assert_eq!((&criterion["status"], &criterion["exit_code"]), (&json!("pass"), &json!(0)), "{}", run.stdout);
    wait_until("the escaped sleepers to be killed", || sleepers("3232").is_empty() && sleepers("3233").is_empty());
    let zombies = || {
        let children = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten().flat_map(|task| {
            let list = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            list.split_whitespace().map(str::to_string).collect::<Vec<_>>()
        });
        children
            .filter(|child| std::fs::read_to_string(format!("/proc/{child}/stat")).is_ok_and(|s| s.contains(") Z ")))
            .collect::<Vec<_>>()
    };
    wait_until("the daemon to reap what it killed", || zombies().is_empty());
}

/// While another task's run is still going, the sweep of orphans leaves alone what started
/// after that run began (it cannot tell whose it is); a process that left its run's group but
/// kept the run's token is found by the token when its own run ends, through a parent that
/// left the group too (`setsid sh -c 'sleep & wait'`). The token is looked for only in this
/// daemon's descendants, taken in pid order.
#[test]
fn a_process_that_left_the_group_dies_with_its_run_while_another_run_goes_on() {
    let mut env = TestEnv::new();
    env.start_daemon();
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    let gate = env.path("release-long");
    let long = format!("while [ ! -f {} ]; do sleep 0.05; done; true", gate.display());
    // And through a parent named in Latin-1, whose /proc stat is not UTF-8.
    let latin1 = env.path("latin1");
    std::fs::create_dir_all(&latin1).unwrap();
    std::os::unix::fs::symlink("/bin/sh", latin1.join(std::ffi::OsStr::from_bytes(b"sh\xe9"))).unwrap();
    let escapes = format!(
        "setsid sh -c 'sleep 4343 & wait' </dev/null >/dev/null 2>&1 & setsid sleep 4242 </dev/null >/dev/null 2>&1 & setsid \"{}/$(printf 'sh\\351')\" -c 'sleep 4444 & wait' </dev/null >/dev/null 2>&1 & sleep 0.1; true",
        latin1.display()
    );
    for (task, command) in [("long", long.as_str()), ("esc", escapes.as_str())] {
        let spec = format!(
            "---\nspec_version: '2.0'\ntask_id: {task}\nstatus: draft\n---\n\n# {task}\n\n## Phase 1: A\n\nAcceptance:\n- [ ] `a` test - runs\n  - Command: `{command}`\n"
        );
        std::fs::write(env.work.join(format!(".scafld/specs/drafts/{task}.md")), spec).unwrap();
        env.scafld(&["approve", task, "--reason", "t"]).assert_code(0);
        env.scafld(&["build", task]).assert_code(0);
    }
    env.scafld(&["build", "long", "--detach"]).assert_code(0);
    wait_until("the long run to start", || {
        let jobs = env.scafld(&["job", "list", "--json"]).json()["result"]["jobs"].clone();
        jobs.as_array().unwrap().iter().any(|j| j["task_id"] == "long" && j["state"] == "running")
    });
    env.scafld(&["build", "esc"]).assert_code(0);
    wait_until("the escaped sleepers to be killed", || {
        sleepers("4242").is_empty() && sleepers("4343").is_empty() && sleepers("4444").is_empty()
    });
    let jobs = env.scafld(&["job", "list", "--json"]).json()["result"]["jobs"].clone();
    assert!(
        jobs.as_array().unwrap().iter().any(|j| j["task_id"] == "long" && j["state"] == "running"),
        "the other run must still be going for this to test the token: {jobs}"
    );
    std::fs::write(&gate, "").unwrap();
}

/// A small tmpfs, unmounted when dropped.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    /// Mount one of `size` at `path` for `test`; `None`, said loudly, where this process cannot
    /// mount (not root, or a container without CAP_SYS_ADMIN): the test is then skipped rather
    /// than failing CI.
    fn mount(path: std::path::PathBuf, size: &str, test: &str) -> Option<Tmpfs> {
        if !nix::unistd::getuid().is_root() {
            eprintln!("SKIPPED {test}: needs root to mount a small tmpfs");
            return None;
        }
        std::fs::create_dir_all(&path).unwrap();
        let status =
            Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"]).arg(&path).status();
        let mounted = status.is_ok_and(|s| s.success()).then_some(Tmpfs(path));
        if mounted.is_none() {
            eprintln!("SKIPPED {test}: cannot mount a tmpfs here (needs CAP_SYS_ADMIN)");
        }
        mounted
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// `scafld args` under `timeout`, so a daemon that hangs fails the test instead of stalling it.
fn bounded(env: &TestEnv, args: &[&str]) -> scafld_tests::Run {
    let mut command = Command::new("timeout");
    env.apply_env(&mut command);
    command.arg("30").arg(scafld_tests::scafld_bin()).args(args).current_dir(&env.work);
    scafld_tests::Run::from(command.output().unwrap())
}

#[test]
fn a_full_disk_fails_calls_cleanly_and_the_daemon_recovers_when_space_returns() {
    let mut env = TestEnv::new();
    let Some(disk) = Tmpfs::mount(
        env.path("tiny"),
        "8M",
        "a_full_disk_fails_calls_cleanly_and_the_daemon_recovers_when_space_returns",
    ) else {
        return;
    };
    // The database and the log live on the small disk; the workspace does not. Started as
    // users start it, so the daemon's stderr goes to its log on that disk too.
    env.state_dir = disk.0.join("state");
    env.scafld(&["daemon", "start"]).assert_code(0);
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    for i in 1..=4 {
        let spec = format!(
            "---\nspec_version: '2.0'\ntask_id: t{i}\nstatus: draft\n---\n\n# T\n\n## Phase 1: A\n\nAcceptance:\n- [ ] `a` test - ok\n  - Command: `head -c 3000 /dev/urandom | base64`\n"
        );
        std::fs::write(env.work.join(format!(".scafld/specs/drafts/t{i}.md")), spec).unwrap();
    }
    // Fill the disk to the last byte.
    let filler = disk.0.join("filler");
    let mut file = std::fs::File::create(&filler).unwrap();
    let block = vec![0u8; 1 << 20];
    while std::io::Write::write_all(&mut file, &block).is_ok() {}
    drop(file);
    // Calls may still fit in space sled set aside, or fail; none may hang.
    let mut failed = 0;
    for task in ["t1", "t2"] {
        for args in [&["approve", task, "--reason", "full"][..], &["build", task], &["build", task], &["status", task]]
        {
            let run = bounded(&env, args);
            assert_ne!(run.code, 124, "`{args:?}` hung on a full disk");
            failed += usize::from(run.code != 0);
        }
    }
    assert!(failed > 0, "the disk never filled up for the daemon");
    assert_ne!(bounded(&env, &["daemon", "status"]).code, 124);
    // Space comes back: the very next calls work, without a restart.
    std::fs::remove_file(&filler).unwrap();
    for task in ["t3", "t4"] {
        let run = bounded(&env, &["approve", task, "--reason", "space again"]);
        assert_eq!(run.code, 0, "{run:?}");
    }
    let session = bounded(&env, &["session", "t3", "--json"]);
    assert!(session.stdout.contains("\"approval\""), "{}", session.stdout);
    env.scafld(&["daemon", "stop"]).assert_code(0);
}

/// An export that fails for want of room is a runtime failure (exit 1) wherever it was to go;
/// only a path that names no writable file is the caller's usage error (exit 2).
#[test]
fn an_export_to_a_full_disk_is_a_runtime_failure_at_any_path() {
    let env = TestEnv::new();
    let Some(disk) = Tmpfs::mount(env.path("tiny"), "1M", "an_export_to_a_full_disk_is_a_runtime_failure_at_any_path")
    else {
        return;
    };
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    let spec = "---\nspec_version: '2.0'\ntask_id: t1\nstatus: draft\n---\n\n# T\n\n## Phase 1: A\n\nAcceptance:\n- [ ] `a` test - ok\n  - Command: `true`\n";
    std::fs::write(env.work.join(".scafld/specs/drafts/t1.md"), spec).unwrap();
    env.scafld(&["approve", "t1", "--reason", "r"]).assert_code(0);
    let mut file = std::fs::File::create(disk.0.join("filler")).unwrap();
    while std::io::Write::write_all(&mut file, &[0u8; 4096]).is_ok() {}
    drop(file);
    let target = disk.0.join("ledger.json");
    let run = env.scafld(&["session", "t1", "--export", target.to_str().unwrap(), "--force", "--json"]);
    run.assert_code(1);
    let error = &run.json()["error"];
    assert!(error["message"].as_str().unwrap().contains("No space left"), "{error}");
    assert!(error["hint"].as_str().unwrap().contains("free space"), "{error}");
    assert!(!target.exists(), "a partial export was left at {}", target.display());
}

/// `session --export P --force` renamed its file over a FIFO or a device at P (as root, over
/// /dev/null): anything at P that is not a regular file is refused, naming it, and left as it is.
#[test]
fn an_export_never_replaces_a_fifo() {
    let env = TestEnv::new();
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    env.scafld(&["plan", "t1", "--title", "T"]).assert_code(0);
    let fifo = env.path("ledger.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    for force in [false, true] {
        let mut args = vec!["session", "t1", "--export", fifo.to_str().unwrap(), "--json"];
        if force {
            args.push("--force");
        }
        let run = env.scafld(&args);
        run.assert_code(2);
        let error = &run.json()["error"];
        assert!(error["message"].as_str().unwrap().contains("is a FIFO, not a regular file"), "{error}");
        use std::os::unix::fs::FileTypeExt;
        assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo(), "the FIFO was replaced");
    }
}

/// Once the state database failed on a full disk and could not be reopened, every call said
/// only "the state database could not be reopened". It now carries the cause (no space left,
/// which database) and the full-disk hint, and the next call after space returns works.
#[test]
fn a_state_database_that_cannot_be_reopened_says_why() {
    let mut env = TestEnv::new();
    let Some(disk) = Tmpfs::mount(env.path("tiny"), "2M", "a_state_database_that_cannot_be_reopened_says_why") else {
        return;
    };
    env.state_dir = disk.0.join("state");
    env.scafld(&["daemon", "start"]).assert_code(0);
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    let spec = "---\nspec_version: '2.0'\ntask_id: t\nstatus: draft\n---\n\n# T\n\n## Phase 1: A\n\nAcceptance:\n- [ ] `a` test - fails\n  - Command: `head -c 900 /dev/urandom | base64 -w0; exit 1`\n";
    std::fs::write(env.work.join(".scafld/specs/drafts/t.md"), spec).unwrap();
    env.scafld(&["approve", "t", "--reason", "full"]).assert_code(0);
    env.scafld(&["build", "t"]).assert_code(0); // opens the phase
    let filler = disk.0.join("filler");
    let mut file = std::fs::File::create(&filler).unwrap();
    while std::io::Write::write_all(&mut file, &[0u8; 4096]).is_ok() {}
    drop(file);
    // Each failing build records its output, until the database cannot take it.
    let full = (0..600).map(|_| bounded(&env, &["build", "t"])).find(|run| run.code != 3);
    let full = full.expect("the disk never filled up for the daemon");
    assert_ne!(full.code, 124, "{full:?}");
    let status = bounded(&env, &["status", "t"]);
    assert!(full.stderr.contains("No space left on device"), "{full:?}");
    assert_ne!(status.code, 0, "{status:?}");
    assert!(status.stderr.contains("could not be reopened"), "{status:?}");
    assert!(status.stderr.contains("No space left on device"), "{status:?}");
    assert!(status.stderr.contains("hint: a disk is full"), "{status:?}");
    std::fs::remove_file(&filler).unwrap();
    let again = bounded(&env, &["status", "t"]);
    assert_eq!(again.code, 0, "{again:?}");
    env.scafld(&["daemon", "stop"]).assert_code(0);
}

/// Fill the disk that holds `filler` to its last byte with that file.
fn fill(filler: &std::path::Path) {
    let mut file = std::fs::File::create(filler).unwrap();
    while std::io::Write::write_all(&mut file, &[0u8; 4096]).is_ok() {}
}

/// Fill the disk that holds `filler` again, then free `room` bytes of it.
fn fill_leaving(filler: &std::path::Path, room: u64) {
    let mut file = std::fs::OpenOptions::new().append(true).open(filler).unwrap();
    while std::io::Write::write_all(&mut file, &[0u8; 4096]).is_ok() {}
    let len = file.metadata().unwrap().len();
    file.set_len(len.saturating_sub(room)).unwrap();
}

/// Approve and open task `task` whose one criterion fails after printing 900 random bytes,
/// so each of its builds grows the state database.
fn failing_task(env: &TestEnv, task: &str) {
    let spec = format!(
        "---\nspec_version: '2.0'\ntask_id: {task}\nstatus: draft\n---\n\n# T\n\n## Phase 1: A\n\nAcceptance:\n- [ ] `a` test - fails\n  - Command: `head -c 900 /dev/urandom | base64 -w0; exit 1`\n"
    );
    std::fs::write(env.work.join(format!(".scafld/specs/drafts/{task}.md")), spec).unwrap();
    env.scafld(&["approve", task, "--reason", "full"]).assert_code(0);
    env.scafld(&["build", task]).assert_code(0); // opens the phase
}

/// Build `task` until the state database cannot take its output (the disk is full); that
/// build's run.
fn build_until_full(env: &TestEnv, task: &str) -> Run {
    let full = (0..600).map(|_| bounded(env, &["build", task])).find(|run| run.code != 3);
    let full = full.expect("the disk never filled up for the daemon");
    assert_ne!(full.code, 124, "{full:?}");
    assert!(full.stderr.contains("No space left on device"), "{full:?}");
    full
}

/// A build job that failed on a full state disk could not save its end, so the database kept
/// it `running`; after space came back and the daemon stopped in order, the next start called
/// it "abandoned: the daemon stopped before the job finished" and wrote that into the task's
/// ledger. The end a save could not write is now saved again (by the next save that works, and
/// by the stop): the job stays failed, with its reason, and the ledger says nothing false.
#[test]
fn a_job_that_failed_on_a_full_disk_is_not_recorded_abandoned_after_a_restart() {
    let mut env = TestEnv::new();
    let test = "a_job_that_failed_on_a_full_disk_is_not_recorded_abandoned_after_a_restart";
    let Some(disk) = Tmpfs::mount(env.path("tiny"), "2M", test) else {
        return;
    };
    env.state_dir = disk.0.join("state");
    env.scafld(&["daemon", "start"]).assert_code(0);
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    failing_task(&env, "t");
    let filler = disk.0.join("filler");
    fill(&filler);
    build_until_full(&env, "t");
    std::fs::remove_file(&filler).unwrap();
    let failed = |env: &TestEnv| {
        let jobs = env.scafld(&["job", "list", "--json"]).json()["result"]["jobs"].clone();
        let job = jobs.as_array().unwrap().iter().find(|j| j["state"] != "succeeded").cloned();
        job.unwrap_or_else(|| panic!("no job that ended otherwise: {jobs}"))
    };
    let before = failed(&env);
    assert_eq!(before["state"], "failed", "{before}");
    assert!(before["reason"].as_str().unwrap().contains("No space left"), "{before}");
    env.scafld(&["status", "t"]).assert_code(0);
    env.scafld(&["daemon", "stop"]).assert_code(0);
    // The next call starts the daemon again.
    let after = failed(&env);
    assert_eq!(
        (&after["job_id"], &after["state"], &after["reason"]),
        (&before["job_id"], &before["state"], &before["reason"])
    );
    let entries = env.scafld(&["session", "t", "--json"]).json()["result"]["entries"].clone();
    assert!(!entries.to_string().contains("abandoned"), "{entries}");
    env.scafld(&["daemon", "stop"]).assert_code(0);
}

/// With the state disk full, a build whose step reached the ledger (sled wrote its entries)
/// but whose job record did not answered "ended failed: state database error" and left the job
/// `failed`, while the ledger kept the criterion's pass, the phase completed and the task in
/// review, and the spec still named the build. The step's events are now flushed before the
/// job's record is saved: the job ends as they say (its record saved again once there is room),
/// and a flush that failed is read back, so the answer, the job, the ledger and the spec agree.
#[test]
fn a_build_on_a_full_state_disk_answers_what_its_ledger_recorded() {
    let mut env = TestEnv::new();
    let test = "a_build_on_a_full_state_disk_answers_what_its_ledger_recorded";
    let Some(disk) = Tmpfs::mount(env.path("tiny"), "4M", test) else {
        return;
    };
    env.state_dir = disk.0.join("state");
    env.scafld(&["daemon", "start"]).assert_code(0);
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    // A spec with every section, so the step's entries are as large as a real task's.
    let sections = ["Current State", "Summary", "Objectives", "Scope", "Dependencies", "Assumptions", "Touchpoints"];
    let mut spec =
        "---\nspec_version: '2.0'\ntask_id: t\nstatus: draft\nsize: small\nrisk_level: low\n---\n\n# T\n".to_string();
    for section in sections.into_iter().chain(["Risks"]) {
        spec += &format!("\n## {section}\n\n- `greet.txt` - the greeting, {section}\n");
    }
    spec += "\n## Acceptance\n\nProfile: standard\n\nValidation:\n- none\n\n## Phase 1: Implementation\n\nStatus: pending\nDependencies: none\n\nObjective: greet\n\nChanges:\n- `greet.txt` - write hello\n\nAcceptance:\n- [ ] `ac1` command - Primary validation command\n  - Command: `grep -q hello greet.txt`\n  - Expected kind: `exit_code_zero`\n";
    for section in ["Rollback", "Self Eval", "Deviations", "Metadata", "Planning Log"] {
        spec += &format!("\n## {section}\n\n- none\n");
    }
    std::fs::write(env.work.join(".scafld/specs/drafts/t.md"), spec).unwrap();
    env.scafld(&["approve", "t", "--reason", "full"]).assert_code(0);
    env.scafld(&["build", "t"]).assert_code(0); // opens the phase
    std::fs::write(env.work.join("greet.txt"), "hello\n").unwrap();
    let filler = disk.0.join("filler");
    std::fs::write(&filler, "").unwrap();
    fill_leaving(&filler, 0);
    // Room comes back a block at a time until a build records its step: at some size the
    // step's entries fit and the job's record after them does not.
    let ledger = || env.scafld(&["session", "t", "--json"]).json()["result"]["entries"].clone();
    let passed = |entries: &serde_json::Value| {
        entries.as_array().unwrap().iter().any(|e| e["type"] == "criterion" && e["status"] == "pass")
    };
    let mut built = None;
    for free in 1..512 {
        let run = bounded(&env, &["build", "t"]);
        assert_ne!(run.code, 124, "{run:?}");
        // What this build left is read with room for the reads (a reopen writes).
        let file = std::fs::OpenOptions::new().write(true).open(&filler).unwrap();
        file.set_len(file.metadata().unwrap().len().saturating_sub(1 << 20)).unwrap();
        let entries = ledger();
        if run.code == 0 || passed(&entries) {
            built = Some((run, entries));
            break;
        }
        fill_leaving(&filler, free * 4096);
    }
    let (built, entries) = built.expect("no build recorded its step");
    std::fs::remove_file(&filler).unwrap();
    let passed = passed(&entries);
    let jobs = env.scafld(&["job", "list", "--json"]).json()["result"]["jobs"].clone();
    // The last build's job: the highest number (`job-<n>-...`).
    let number = |j: &serde_json::Value| j["job_id"].as_str().and_then(|id| id.split('-').nth(1)?.parse::<u64>().ok());
    let job = jobs.as_array().unwrap().iter().filter(|j| j["task_id"] == "t").max_by_key(|j| number(j)).cloned();
    let job = job.unwrap_or_else(|| panic!("no build job: {jobs}"));
    // The answer, the job and the ledger say the same.
    assert_eq!(built.code == 0, passed, "answered {built:?} with the ledger {entries}");
    assert_eq!(job["state"] == "succeeded", passed, "the job {job} with the ledger {entries}");
    let status = env.scafld(&["status", "t", "--json"]).json()["result"].clone();
    assert_eq!(status["status"] == "review", passed, "{status}");
    // Once there is room, the spec names the step status names.
    let next = status["next_action"]["command"].as_str().unwrap_or_else(|| panic!("{status}")).to_string();
    let mut named = None;
    for folder in ["drafts", "approved", "active"] {
        if let Ok(text) = std::fs::read_to_string(env.work.join(format!(".scafld/specs/{folder}/t.md"))) {
            named = text.lines().find(|l| l.starts_with("Allowed follow-up command:")).map(str::to_string);
        }
    }
    if named.as_deref() != Some(&format!("Allowed follow-up command: `{next}`")) {
        env.scafld(&["reconcile", "t"]).assert_code(0);
    }
    let mut named = None;
    for folder in ["drafts", "approved", "active"] {
        if let Ok(text) = std::fs::read_to_string(env.work.join(format!(".scafld/specs/{folder}/t.md"))) {
            named = text.lines().find(|l| l.starts_with("Allowed follow-up command:")).map(str::to_string);
        }
    }
    assert_eq!(named, Some(format!("Allowed follow-up command: `{next}`")), "{status}");
    // The record the disk refused is saved once there is room, as the job ended.
    env.scafld(&["daemon", "stop"]).assert_code(0);
    let again = env.scafld(&["job", "list", "--json"]).json()["result"]["jobs"].clone();
    let again = again.as_array().unwrap().iter().find(|j| j["job_id"] == job["job_id"]).cloned().unwrap();
    assert_eq!(again["state"], job["state"], "{again}");
    env.scafld(&["daemon", "stop"]).assert_code(0);
}

/// The state disk filled while a review ran, so its verdict could not be recorded: the session
/// then read as resolved with verdict PASS though the ledger held no review, and the error's
/// hint, `scafld review retry`, refused ("nothing to retry"). Such a session is `unrecorded`
/// now, no PASS on it anywhere, and `review retry` records its reviewers' answers once there
/// is room again.
#[test]
fn a_review_verdict_a_full_disk_kept_out_of_the_ledger_is_recorded_by_retry() {
    let mut env = TestEnv::new();
    let test = "a_review_verdict_a_full_disk_kept_out_of_the_ledger_is_recorded_by_retry";
    let Some(disk) = Tmpfs::mount(env.path("tiny"), "2M", test) else {
        return;
    };
    env.state_dir = disk.0.join("state");
    env.scafld(&["daemon", "start"]).assert_code(0);
    crate::review::to_review(&env);
    failing_task(&env, "filler");
    // The reviewer answers PASS once told to, after the disk filled up.
    let (started, go) = (env.path("started"), env.path("go"));
    let hold = format!("touch '{}'; while [ ! -f '{}' ]; do sleep 0.05; done", started.display(), go.display());
    let reviewer = crate::review::reviewer(&env, "held", &crate::review::pass(), &hold);
    let args = [
        "review",
        "rev",
        "--provider",
        "command",
        "--provider-command",
        &reviewer,
        "--min-attack-angles",
        "2",
        "--detach",
    ];
    let spawned = env.scafld(&[&args[..], &["--json"]].concat());
    spawned.assert_code(0);
    let key = spawned.json()["result"]["session_key"].as_str().unwrap().to_string();
    wait_until("the reviewer to start", || started.exists());
    let filler = disk.0.join("filler");
    fill(&filler);
    build_until_full(&env, "filler");
    std::fs::write(&go, "").unwrap();
    let wait = bounded(&env, &["review", "wait", "--session-key", &key, "--timeout", "20", "--json"]);
    let result = &wait.json()["result"];
    assert_eq!(result["gate"], "unrecorded", "{}", wait.stdout);
    assert_eq!(result["consensus"]["verdict"], serde_json::Value::Null, "{}", wait.stdout);
    assert_ne!(wait.code, 0, "{wait:?}");
    std::fs::remove_file(&filler).unwrap();
    let said = env.scafld(&["review", "wait", "--session-key", &key, "--timeout", "0"]);
    assert!(said.stdout.contains("NOT RECORDED") && !said.stdout.contains(": PASS"), "{}", said.stdout);
    assert!(said.stdout.contains(&format!("`scafld review retry {key}` records")), "{}", said.stdout);
    let status = env.scafld(&["review", "status", "rev", "--json"]);
    assert_eq!(status.json()["result"]["state"], "unrecorded", "{}", status.stdout);
    let shown = env.scafld(&["review", "status", "rev"]).stdout;
    assert!(!shown.contains("resolved") && !shown.contains("verdict: PASS"), "{shown}");
    let ledger = || env.scafld(&["session", "rev", "--json"]).json()["result"]["entries"].clone();
    let reviews = |entries: &serde_json::Value| {
        entries.as_array().unwrap().iter().filter(|e| e["type"] == "review").cloned().collect::<Vec<_>>()
    };
    assert!(reviews(&ledger()).is_empty(), "{}", ledger());
    // `status` and the spec (projected once there is room) name that retry too, never a new
    // review that runs the reviewers again: they said `scafld review rev`.
    let retry = format!("scafld review retry {key}");
    let status = env.scafld(&["status", "rev", "--json"]);
    assert_eq!(status.json()["result"]["next_action"]["command"], retry.as_str(), "{}", status.stdout);
    // Without `reconcile`: the projection the full disk refused is written once there is room.
    let named = || -> Vec<String> {
        ["drafts", "approved", "active", "review"]
            .iter()
            .filter_map(|folder| std::fs::read_to_string(env.work.join(format!(".scafld/specs/{folder}/rev.md"))).ok())
            .flat_map(|text| {
                text.lines()
                    .filter(|l| l.starts_with("Allowed follow-up command:"))
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let line = [format!("Allowed follow-up command: `{retry}`")];
    wait_until("the spec to name the retry", || named() == line);
    assert_eq!(named(), line, "{}", status.stdout);

    // The hint works: the answers are recorded, and the session is settled with them.
    let retried = env.scafld(&["review", "retry", &key]);
    retried.assert_code(0);
    assert!(retried.stdout.contains("PASS [resolved]"), "{retried:?}");
    let recorded = reviews(&ledger());
    assert_eq!(recorded.len(), 1, "{}", ledger());
    assert!(recorded[0].to_string().contains("review gate pass"), "{recorded:?}");
    assert_eq!(env.scafld(&["review", "status", "rev", "--json"]).json()["result"]["state"], "resolved");
    env.scafld(&["daemon", "stop"]).assert_code(0);
}

/// `init` on a full workspace disk wrote `.scafld/workspace_id` in place and left it empty,
/// after which every command refused the folder until the file was deleted by hand. The id is
/// now written atomically (nothing is left but what was there), and an empty id file an older
/// scafld left is taken as no id file, so `init` and `list` work once there is room.
#[test]
fn a_full_disk_never_leaves_an_empty_workspace_id_that_blocks_the_folder() {
    let mut env = TestEnv::new();
    let Some(disk) =
        Tmpfs::mount(env.path("wsdisk"), "2M", "a_full_disk_never_leaves_an_empty_workspace_id_that_blocks_the_folder")
    else {
        return;
    };
    env.work = disk.0.clone();
    scafld_tests::git(&env.work, &["init", "-q"]);
    std::fs::write(env.work.join(".git/info/exclude"), "filler\n").unwrap();
    let filler = env.work.join("filler");
    let fill = || {
        let mut file = std::fs::File::create(&filler).unwrap();
        while std::io::Write::write_all(&mut file, &[0u8; 4096]).is_ok() {}
    };
    fill();
    let full = bounded(&env, &["init"]);
    assert_ne!(full.code, 0, "{full:?}");
    let id_file = env.work.join(".scafld/workspace_id");
    assert!(std::fs::metadata(&id_file).map_or(true, |m| m.len() > 0), "an empty id file was left");
    std::fs::remove_file(&filler).unwrap();
    bounded(&env, &["init"]).assert_code(0);
    let id = std::fs::read_to_string(&id_file).unwrap();
    assert_eq!(id.trim().len(), 32, "{id:?}");

    // An empty id file as an older scafld left it: no id, so the folder keeps its workspace.
    std::fs::write(&id_file, "").unwrap();
    bounded(&env, &["list"]).assert_code(0);
    bounded(&env, &["init"]).assert_code(0);
    assert_eq!(std::fs::read_to_string(&id_file).unwrap(), id, "the recorded id is written back");
    env.scafld(&["daemon", "stop"]).assert_code(0);
}

/// `init` on a full workspace disk said only "workspace files: No space left on device", with no
/// file and no hint, and left an empty `.scafld/` that later commands took for a workspace. The
/// error now names the file and says to free space and run init again, and nothing init made
/// in that call is left.
#[test]
fn init_on_a_full_disk_names_the_file_and_leaves_nothing() {
    let mut env = TestEnv::new();
    let Some(disk) = Tmpfs::mount(env.path("wsdisk"), "1M", "init_on_a_full_disk_names_the_file_and_leaves_nothing")
    else {
        return;
    };
    env.work = disk.0.join("ws");
    std::fs::create_dir(&env.work).unwrap();
    scafld_tests::git(&env.work, &["init", "-q"]);
    let filler = disk.0.join("filler");
    fill(&filler);
    let full = bounded(&env, &["init", "--json"]);
    assert_eq!(full.code, 1, "{full:?}");
    let error = full.json()["error"].clone();
    assert!(error["message"].as_str().unwrap().contains(".scafld/"), "{error}");
    assert!(error["hint"].as_str().is_some_and(|h| h.contains("free space") && h.contains("init")), "{error}");
    assert!(!env.work.join(".scafld").exists(), "init left .scafld/ behind");
    assert_eq!(bounded(&env, &["list"]).code, 6, "a folder init failed in is no workspace");
    std::fs::remove_file(&filler).unwrap();
    bounded(&env, &["init"]).assert_code(0);
    env.scafld(&["daemon", "stop"]).assert_code(0);
}

/// A build step on a full workspace disk left each criterion's diagnostics file empty while the
/// answer and the ledger cited it as the full record, saying nothing of the failed write. A
/// record that cannot be written is now cited by nothing (the empty file is removed), the answer
/// and the ledger say why, and the criterion's own result and output are recorded as ever.
#[test]
fn a_diagnostics_file_the_full_disk_refused_is_cited_by_nothing_and_said_to_be_missing() {
    let mut env = TestEnv::new();
    let test = "a_diagnostics_file_the_full_disk_refused_is_cited_by_nothing_and_said_to_be_missing";
    let Some(disk) = Tmpfs::mount(env.path("wsdisk"), "2M", test) else {
        return;
    };
    env.work = disk.0.clone();
    scafld_tests::git(&env.work, &["init", "-q"]);
    std::fs::write(env.work.join(".git/info/exclude"), "filler\n").unwrap();
    std::fs::write(env.work.join("README.md"), "r\n").unwrap();
    scafld_tests::commit_all(&env.work, "init");
    bounded(&env, &["init"]).assert_code(0);
    let spec = "---\nspec_version: '2.0'\ntask_id: t1\nstatus: draft\nharden_status: not_run\nsize: small\n\
                risk_level: low\n---\n\n# Task t1\n\n## Summary\n\nDo it.\n\n## Phase 1: Step 1\n\n\
                Objective: step 1.\n\nAcceptance:\n- [ ] `a1` test - check 1\n  \
                - Command: `seq 1 5000; echo compile error on line 42 >&2; exit 1`\n";
    std::fs::write(env.work.join(".scafld/specs/drafts/t1.md"), spec).unwrap();
    bounded(&env, &["approve", "t1", "--reason", "r"]).assert_code(0);
    bounded(&env, &["build", "t1"]).assert_code(0);
    let filler = env.work.join("filler");
    let mut file = std::fs::File::create(&filler).unwrap();
    while std::io::Write::write_all(&mut file, &[0u8; 4096]).is_ok() {}
    drop(file);

    let run = bounded(&env, &["build", "t1", "--json"]);
    let criterion = run.json()["result"]["criteria"][0].clone();
    assert_eq!(criterion["status"], "fail", "{run:?}");
    assert!(criterion["output_excerpt"].as_str().unwrap().contains("compile error on line 42"), "{criterion}");
    assert_eq!(criterion["diagnostic"], "", "a record never written is cited: {criterion}");
    let why = criterion["diagnostic_error"].as_str().unwrap_or_default();
    assert!(why.contains("could not be written") && why.contains("No space left on device"), "{criterion}");
    let folder = env.work.join(".scafld/runs/t1/diagnostics");
    let empty = std::fs::read_dir(&folder)
        .map(|files| files.flatten().filter(|f| f.metadata().is_ok_and(|m| m.len() == 0)).count())
        .unwrap_or(0);
    assert_eq!(empty, 0, "an empty diagnostics file is left in {}", folder.display());

    std::fs::remove_file(&filler).unwrap();
    let entries = bounded(&env, &["session", "t1", "--json"]).json()["result"]["entries"].as_array().unwrap().clone();
    let recorded = entries.iter().rev().find(|e| e["criterion_id"] == "a1").unwrap();
    assert_eq!(recorded["status"], "fail", "{recorded}");
    assert_eq!(recorded["diagnostic"], "", "the ledger cites a record never written: {recorded}");
    assert!(recorded["diagnostic_error"].as_str().is_some_and(|w| w.contains("No space left on device")), "{recorded}");
    env.scafld(&["daemon", "stop"]).assert_code(0);
}

#[test]
fn an_autostarted_daemon_says_when_it_is_ready_and_keeps_no_pipe_open() {
    let env = TestEnv::new();
    env.init();
    let pid = env.client().result("daemon.status", json!({}))["pid"].as_u64().unwrap();
    let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap().replace('\0', " ");
    let fd = cmdline
        .split(" --ready-fd ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("the client waits on a ready pipe, not by polling: {cmdline}"));
    // Written once and closed (the number may serve something else since).
    let link = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).map(|l| l.display().to_string());
    assert!(!link.as_deref().is_ok_and(|l| l.starts_with("pipe:")), "the ready pipe is still open: {link:?}");
}

/// Whether process `pid` holds `path` open.
fn holds(pid: u64, path: &std::path::Path) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l == path))
}

/// A build of task `task` whose criterion lists its own descriptors (`ls -l /proc/self/fd`,
/// its own listing's folder aside); returns those beyond 0-2.
fn criterion_descriptors(env: &TestEnv, task: &str) -> Vec<String> {
    let spec = format!(
        "---\nspec_version: '2.0'\ntask_id: {task}\nstatus: draft\n---\n\n# Fds\n\n## Phase 1: A\n\nAcceptance:\n- [ ] `fds` test - lists its descriptors\n  - Command: `ls -l /proc/self/fd > {task}.txt; true`\n"
    );
    std::fs::write(env.work.join(format!(".scafld/specs/drafts/{task}.md")), spec).unwrap();
    env.scafld(&["approve", task, "--reason", "t"]).assert_code(0);
    env.scafld(&["build", task]).assert_code(0);
    env.scafld(&["build", task]).assert_code(0);
    let listing = std::fs::read_to_string(env.work.join(format!("{task}.txt"))).unwrap();
    listing
        .lines()
        .filter_map(|line| line.split_once(" -> ").map(|(left, target)| (left.rsplit(' ').next().unwrap(), target)))
        .filter(|(fd, target)| !["0", "1", "2"].contains(fd) && !target.starts_with("/proc/"))
        .map(|(fd, target)| format!("{fd} -> {target}"))
        .collect()
}

/// A daemon a command starts keeps none of that command's caller's descriptors beyond 0-2 (a
/// caller's pipe whose reader waits for EOF: `scafld list 7>&1 | cat` would not end while the
/// daemon lives), and the commands a daemon runs get their stdio alone, however it was started.
#[test]
fn neither_the_daemon_nor_its_commands_keep_a_starters_descriptors() {
    let env = TestEnv::new();
    let held = env.path("held");
    std::fs::write(&held, "").unwrap();
    scafld_tests::git(&env.work, &["init", "-q"]);
    // Open as fd 7, not close-on-exec, as a shell's redirection leaves it.
    let with_held = |program: std::path::PathBuf, args: &str| {
        let mut command = Command::new("sh");
        env.apply_env(&mut command);
        let script = format!("exec \"$0\" {args} 7>>\"$1\"");
        command.args(["-c", &script, &program.display().to_string(), &held.display().to_string()]);
        command.current_dir(&env.work).stdin(std::process::Stdio::null());
        command
    };
    let started = with_held(scafld_tests::scafld_bin(), "init").output().unwrap();
    assert!(started.status.success(), "{started:?}");
    let pid = env.client().result("daemon.status", json!({}))["pid"].as_u64().unwrap();
    assert!(!holds(pid, &held), "the autostarted daemon holds its caller's descriptor");
    assert_eq!(criterion_descriptors(&env, "auto"), Vec::<String>::new());

    env.scafld(&["daemon", "stop"]).assert_code(0);
    let mut daemon = with_held(scafld_tests::scafldd_bin(), "").spawn().unwrap();
    let socket = env.socket.clone();
    wait_until("the daemon's socket", || RawClient::connect(&socket).is_ok());
    // Started by hand with it open, the daemon keeps it (for nothing); what it runs does not.
    assert!(holds(daemon.id().into(), &held));
    assert_eq!(criterion_descriptors(&env, "manual"), Vec::<String>::new());
    kill(Pid::from_raw(daemon.id() as i32), Signal::SIGTERM).unwrap();
    assert!(daemon.wait().unwrap().success());
}

/// A daemon killed between writing a spec's new bytes and renaming them into place leaves a
/// hidden temporary file; the next daemon removes it once it is clearly nobody's: its writer
/// (the pid in its name) is gone, or it is a minute old.
#[test]
fn an_interrupted_writes_temporary_file_is_removed_by_the_next_daemon() {
    let env = TestEnv::new();
    env.init();
    let folder = env.work.join(".scafld/specs/active");
    std::fs::create_dir_all(&folder).unwrap();
    // Old, of a live writer (this test); fresh, of a writer gone; fresh, of a live writer.
    let alive = std::process::id();
    let mut exited = Command::new("true").spawn().unwrap();
    let gone = exited.id();
    exited.wait().unwrap();
    let left = folder.join(format!(".t.md.tmp-{alive}-0"));
    let crashed = folder.join(format!(".u.md.tmp-{gone}-0"));
    let fresh = folder.join(format!(".t.md.tmp-{alive}-1"));
    for path in [&left, &crashed, &fresh] {
        std::fs::write(path, "half a spec").unwrap();
    }
    scafld_tests::set_modified(&left, std::time::SystemTime::now() - std::time::Duration::from_secs(3600));
    env.scafld(&["daemon", "stop"]).assert_code(0);
    env.scafld(&["daemon", "start"]).assert_code(0);
    wait_until("the leftovers to go", || !left.exists() && !crashed.exists());
    assert!(fresh.exists(), "a temporary file that may still be written is left alone");
    env.scafld(&["daemon", "stop"]).assert_code(0);
}

/// A socket set inside the state directory (`$SCAFLD_STATE_DIR/scafldd.sock`) starts the daemon:
/// the socket's lock (`<socket>.lock`) is not the state directory's `scafldd.lock`, which the
/// daemon would otherwise lock twice and blame on "another process".
#[test]
fn a_socket_in_the_state_directory_starts_the_daemon() {
    let env = TestEnv::new();
    scafld_tests::git(&env.work, &["init", "-q"]);
    let socket = env.state_dir.join("scafldd.sock");
    let run = |args: &[&str]| Run::from(env.scafld_command(args).env("SCAFLD_SOCKET", &socket).output().unwrap());
    run(&["init", "--json"]).assert_code(0);
    assert!(env.state_dir.join("scafldd.sock.lock").exists());
    run(&["daemon", "stop", "--json"]).assert_code(0);
}

/// Where state and socket live is never guessed: a relative SCAFLD_STATE_DIR or SCAFLD_SOCKET
/// (another place from every folder) and an unset HOME with nothing else set are refused before
/// anything is written, saying what to set; a relative XDG_RUNTIME_DIR is ignored, as the XDG
/// specification says, for the state directory's `run/`.
#[test]
fn relative_or_missing_state_and_socket_settings_are_refused_or_ignored() {
    let env = TestEnv::new();
    scafld_tests::git(&env.work, &["init", "-q"]);
    for (set, unset, names) in [
        (&[("SCAFLD_STATE_DIR", "relstate")][..], &[][..], "SCAFLD_STATE_DIR"),
        (&[("SCAFLD_SOCKET", "rel.sock")], &[], "SCAFLD_SOCKET"),
        (&[], &["HOME", "SCAFLD_STATE_DIR", "XDG_STATE_HOME"][..], "HOME"),
    ] {
        let mut command = env.scafld_command(&["init", "--json"]);
        command.envs(set.iter().copied());
        for name in unset {
            command.env_remove(name);
        }
        let run = Run::from(command.output().unwrap());
        run.assert_code(2);
        let error = &run.json()["error"];
        assert!(error["message"].as_str().unwrap().contains(names), "{set:?} {unset:?}: {error}");
        assert!(!error["hint"].as_str().unwrap_or_default().is_empty(), "{error}");
    }
    let left: Vec<_> = std::fs::read_dir(&env.work).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, vec![std::ffi::OsString::from(".git")], "nothing is written in the work tree");

    let run = |args: &[&str]| {
        let mut command = env.scafld_command(args);
        command.env_remove("SCAFLD_SOCKET").env("XDG_RUNTIME_DIR", "relative/dir");
        Run::from(command.output().unwrap())
    };
    run(&["init", "--json"]).assert_code(0);
    assert!(!env.work.join("relative").exists());
    assert!(env.state_dir.join("run/scafldd.sock").exists());
    run(&["daemon", "stop", "--json"]).assert_code(0);
}

/// With no state directory the environment names (HOME, XDG_STATE_HOME and SCAFLD_STATE_DIR
/// all unset), what needs no daemon still runs: `--help`, `--version`, `completions`, `man`;
/// `doctor` reports it as a failed check with the variables to set; a command that needs the
/// daemon is refused, exit 2, naming the three. Before, every command was refused.
#[test]
fn with_no_state_directory_what_needs_no_daemon_still_runs() {
    let env = TestEnv::new();
    let homeless = |args: &[&str]| {
        let mut command = env.scafld_command(args);
        for name in ["HOME", "XDG_STATE_HOME", "SCAFLD_STATE_DIR"] {
            command.env_remove(name);
        }
        Run::from(command.output().unwrap())
    };
    for args in [&["--help"][..], &["--version"], &["completions", "bash"]] {
        let run = homeless(args);
        run.assert_code(0);
        assert!(!run.stdout.is_empty(), "{args:?}: {}", run.stderr);
    }
    let pages = env.path("pages");
    homeless(&["man", "--out", pages.to_str().unwrap()]).assert_code(0);
    assert!(pages.join("scafld.1").exists());

    let doctor = homeless(&["doctor", "--json"]);
    let checks = doctor.json()["result"]["checks"].clone();
    let state = checks.as_array().and_then(|c| c.iter().find(|c| c["name"] == "state directory")).cloned();
    let state = state.unwrap_or_else(|| panic!("{}", doctor.stdout));
    assert_eq!(state["health"], "fail", "{state}");
    assert!(state["fix"].as_str().unwrap().contains("SCAFLD_STATE_DIR"), "{state}");

    // A workspace's folder, so that `status` gets as far as reaching the daemon.
    std::fs::create_dir_all(env.work.join(".scafld")).unwrap();
    for args in [&["status", "x", "--json"][..], &["daemon", "status", "--json"]] {
        let run = homeless(args);
        run.assert_code(2);
        let error = &run.json()["error"];
        let said = format!("{} {}", error["message"], error["hint"]);
        for name in ["HOME", "XDG_STATE_HOME", "SCAFLD_STATE_DIR"] {
            assert!(said.contains(name), "{args:?}: {name}: {said}");
        }
    }
    assert!(!env.state_dir.exists() && !env.path("home/.local").exists(), "nothing was started");
}

/// A state directory (or socket directory) that does not exist and cannot be created (HOME a
/// regular file, a folder nothing may be created in) is a FAIL row of `doctor` naming it and
/// why, not "created by the daemon when it starts" with nothing blocking, while `init` fails.
#[test]
fn doctor_fails_a_state_directory_that_cannot_be_created() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new();
    let state_row = |vars: &[(&str, &std::path::Path)]| {
        let mut command = env.scafld_command(&["doctor", "--json"]);
        command.env_remove("SCAFLD_STATE_DIR").env_remove("XDG_STATE_HOME");
        command.envs(vars.iter().copied());
        let run = Run::from(command.output().unwrap());
        let checks = run.json()["result"]["checks"].clone();
        let row = checks.as_array().and_then(|c| c.iter().find(|c| c["name"] == "state directory")).cloned();
        (run.code, row.unwrap_or_else(|| panic!("{}", run.stdout)))
    };
    let home_file = env.path("home-file");
    std::fs::write(&home_file, "").unwrap();
    let (code, row) = state_row(&[("HOME", &home_file)]);
    assert_eq!(code, 1, "{row}");
    assert_eq!(row["health"], "fail", "{row}");
    let detail = row["detail"].as_str().unwrap();
    assert!(detail.contains(&format!("{}/.local/state/scafld", home_file.display())), "{detail}");
    assert!(detail.contains(&format!("{} is not a directory", home_file.display())), "{detail}");
    // A read-only folder (on a read-only file system alike; root writes past modes, so the
    // mode case is checked only for others).
    let locked = env.path("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o500)).unwrap();
    if !nix::unistd::Uid::effective().is_root() {
        let (code, row) = state_row(&[("SCAFLD_STATE_DIR", &locked.join("state"))]);
        assert_eq!((code, row["health"].as_str()), (1, Some("fail")), "{row}");
        assert!(row["detail"].as_str().unwrap().contains("nothing can be created in"), "{row}");
    }
    // One that can be created is still fine before the daemon makes it.
    let (_, row) = state_row(&[("SCAFLD_STATE_DIR", &env.path("fresh/state"))]);
    assert_eq!(row["health"], "ok", "{row}");
    assert!(row["detail"].as_str().unwrap().contains("created by the daemon when it starts"), "{row}");
}

/// `daemon stop` with a socket setting that differs from the daemon holding the state directory
/// does not say "no daemon was running": it fails, naming that daemon and how to stop it.
#[test]
fn daemon_stop_on_another_socket_names_the_daemon_holding_the_state_directory() {
    let mut env = TestEnv::new();
    let pid = env.start_daemon();
    let run = Run::from(
        env.scafld_command(&["daemon", "stop", "--json"])
            .env("SCAFLD_SOCKET", env.path("run/other.sock"))
            .output()
            .unwrap(),
    );
    run.assert_code(1);
    let error = &run.json()["error"];
    assert!(error["message"].as_str().unwrap().contains(&format!("pid {pid}")), "{error}");
    assert!(error["hint"].as_str().unwrap().contains(&format!("SCAFLD_SOCKET={}", env.socket.display())), "{error}");
    env.client().result("daemon.status", serde_json::json!({}));
}

/// Every build says the same version and protocol, so a daemon left running by another build
/// (an upgrade, a rebuild) is told by the file it was started from. A client whose `scafldd`
/// (the one beside it) was replaced since stops that daemon and starts its own, saying so in
/// one line, when it runs no job; while it runs one the command is refused (exit 6) with what
/// `scafld daemon stop` would do to it.
#[test]
fn a_daemon_of_another_build_is_replaced_when_idle_and_refused_while_it_runs_a_job() {
    let env = TestEnv::new();
    let bin = env.path("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(scafld_tests::scafld_bin(), bin.join("scafld")).unwrap();
    // A new build put in place as installers do: written beside it, renamed over it.
    let install = || {
        std::fs::copy(scafld_tests::scafldd_bin(), bin.join("scafldd.new")).unwrap();
        std::fs::rename(bin.join("scafldd.new"), bin.join("scafldd")).unwrap();
    };
    install();
    let command = |args: &[&str]| {
        let mut command = Command::new(bin.join("scafld"));
        env.apply_env(&mut command);
        command.args(args).current_dir(&env.work).stdin(std::process::Stdio::null());
        command
    };
    let scafld = |args: &[&str]| Run::from(command(args).output().unwrap());
    let status = || scafld(&["daemon", "status", "--json"]).json()["result"].clone();
    scafld_tests::git(&env.work, &["init", "-q"]);
    scafld(&["init"]).assert_code(0);
    let first = status();
    assert_eq!(first["build"]["current"], true, "{first}");
    let same = scafld(&["list", "--json"]);
    same.assert_code(0);
    assert_eq!(same.stderr, "", "the same build serves without a word");

    install();
    let stale = status();
    assert_eq!(
        (stale["pid"].clone(), stale["build"]["current"].clone()),
        (first["pid"].clone(), json!(false)),
        "{stale}"
    );
    let listed = scafld(&["list", "--json"]);
    listed.assert_code(0);
    assert_eq!(listed.stderr.lines().count(), 1, "{}", listed.stderr);
    assert!(
        listed.stderr.contains("is another build of scafldd") && listed.stderr.contains("stopped it and started"),
        "{}",
        listed.stderr
    );
    let second = status();
    assert_ne!(second["pid"], first["pid"]);
    assert_eq!(second["build"]["current"], true, "{second}");

    // A build step that runs until the daemon stops.
    let spec = "---\nspec_version: '2.0'\ntask_id: slow\nstatus: draft\nharden_status: not_run\n---\n\n# Slow\n\n## Summary\n\nA slow step.\n\n## Phase 1: Wait\n\nObjective: wait.\n\nAcceptance:\n- [ ] `a1` test - waits\n  - Command: `sleep 41.5`\n";
    std::fs::write(env.work.join(".scafld/specs/drafts/slow.md"), spec).unwrap();
    scafld(&["approve", "slow", "--reason", "tests skip hardening"]).assert_code(0);
    scafld(&["build", "slow"]).assert_code(0);
    let mut building = command(&["build", "slow"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut client = env.client();
    wait_until("the slow step's job", || client.result("daemon.status", json!({}))["jobs"]["running"] == 1);
    install();
    let refused = scafld(&["list", "--json"]);
    refused.assert_code(6);
    let error = &refused.json()["error"];
    assert_eq!(error["code"], "daemon_other_build", "{error}");
    assert!(error["message"].as_str().unwrap().contains("1 job of it is not finished"), "{error}");
    assert!(
        error["hint"]
            .as_str()
            .unwrap()
            .contains("`scafld daemon stop` stops it now, killing the commands of its running jobs"),
        "{error}"
    );
    assert_eq!(status()["pid"], second["pid"], "the busy daemon was left running");
    building.kill().unwrap();
    building.wait().unwrap();
}

/// "Idle" is more than "no job": a daemon of another build in the middle of a call that is
/// work (here a `finalize` running its criteria again for another client) is busy too. It is
/// left running, the command refused naming the call, and `daemon status` counts it (never
/// the status call itself); once the call is answered the daemon is replaced as before.
#[test]
fn a_daemon_of_another_build_serving_a_call_is_not_replaced_under_it() {
    let env = TestEnv::new();
    let (finalizing, mut client, daemon) = finalize_being_served(&env);
    let human = env.scafld(&["daemon", "status"]);
    assert!(human.stdout.contains("serving:    1 call (task.finalize)"), "{}", human.stdout);

    // A client of another build: its own copies of both binaries.
    let bin = env.path("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(scafld_tests::scafld_bin(), bin.join("scafld")).unwrap();
    std::fs::copy(scafld_tests::scafldd_bin(), bin.join("scafldd")).unwrap();
    let other = |args: &[&str]| {
        let mut command = Command::new(bin.join("scafld"));
        env.apply_env(&mut command);
        Run::from(command.args(args).current_dir(&env.work).stdin(std::process::Stdio::null()).output().unwrap())
    };
    let refused = other(&["list", "--json"]);
    refused.assert_code(6);
    let error = &refused.json()["error"];
    assert_eq!(error["code"], "daemon_other_build", "{error}");
    assert!(
        error["message"].as_str().unwrap().contains("it was not restarted: it is serving 1 call (task.finalize)"),
        "{error}"
    );
    assert_eq!(client.result("daemon.status", json!({}))["pid"], daemon["pid"], "the busy daemon was left running");

    // The call was not cut: finalize minted its receipt.
    let finalized = Run::from(finalizing.wait_with_output().unwrap());
    finalized.assert_code(0);
    assert_eq!(finalized.json()["result"]["task_id"], "rev", "{}", finalized.stdout);
    let replaced = other(&["list", "--json"]);
    replaced.assert_code(0);
    assert!(replaced.stderr.contains("stopped it and started"), "{}", replaced.stderr);
}

/// A reviewed task whose `finalize` (running its criterion again for 4 s) is being served, a
/// raw client, and the daemon's status from before the call.
fn finalize_being_served(env: &TestEnv) -> (std::process::Child, scafld_tests::RawClient, serde_json::Value) {
    // Finalize runs the criterion again, slowly when its caller asks.
    let slow =
        "- [ ] `a1` test - greet is defined\n  - Command: `grep -q greet src/lib.rs && sleep ${FINALIZE_SLEEP:-0}`\n";
    crate::gate::opened(env, "src/lib.rs", slow);
    crate::gate::write(env, "src/lib.rs", "pub fn greet() {}\n");
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    let script = crate::review::reviewer(env, "pass", &crate::review::pass(), "");
    crate::review::command_review(env, &script, &["--min-attack-angles", "2", "--json"]).assert_code(0);
    let mut client = env.client();
    let daemon = client.result("daemon.status", json!({}));
    assert_eq!(daemon["serving"], json!([]), "the status call is not counted: {daemon}");
    let mut finalizing = env.scafld_command(&["finalize", "rev", "--json"]);
    finalizing.env("FINALIZE_SLEEP", "4").stdout(std::process::Stdio::piped());
    let finalizing = finalizing.spawn().unwrap();
    wait_until("finalize served", || {
        client.result("daemon.status", json!({}))["serving"] == json!([{"method": "task.finalize", "calls": 1}])
    });
    (finalizing, client, daemon)
}

/// A stop asked only if the daemon is idle (how a client replaces another build's daemon) is
/// checked as the stop begins, so no call or job can start between a status check and the
/// stop: refused `busy` naming what runs while a call that is work is served, nothing cut;
/// once the call is answered, the daemon stops.
#[test]
fn a_stop_asked_only_if_idle_is_refused_while_work_is_served() {
    let env = TestEnv::new();
    let (finalizing, mut client, daemon) = finalize_being_served(&env);
    let refused = client.call("daemon.shutdown", json!({"if_idle": true}));
    assert_eq!(refused["error"]["data"]["kind"], "busy", "{refused}");
    let served = &refused["error"]["data"]["details"]["serving"];
    assert_eq!(served, &json!([{"method": "task.finalize", "calls": 1}]), "{refused}");
    assert_eq!(client.result("daemon.status", json!({}))["pid"], daemon["pid"], "left running");
    let finalized = Run::from(finalizing.wait_with_output().unwrap());
    finalized.assert_code(0);
    assert_eq!(client.result("daemon.shutdown", json!({"if_idle": true}))["stopping"], true);
    wait_until("the daemon's socket to go", || !env.socket.exists());
}

/// A worker whose daemon was replaced by another build while its provider ran said so twice:
/// as its job's "not submitted" note, then as the error it stopped with. Said once now, as the
/// error naming the job, and the worker exits 6.
#[test]
fn a_worker_whose_daemon_is_replaced_mid_review_says_so_once() {
    let env = TestEnv::new();
    crate::review::to_review(&env);
    let (started, go) = (env.path("started"), env.path("go"));
    let hold = format!("touch '{}'; while [ ! -f '{}' ]; do sleep 0.05; done", started.display(), go.display());
    let script = crate::review::reviewer(&env, "held", &crate::review::pass(), &hold);
    let mut worker = Worker::spawn(&env, &script);
    wait_until("the worker serving", || worker.said().contains("serving review jobs"));
    let review = env.scafld(&["review", "rev", "--reviewers", "worker", "--min-attack-angles", "2", "--detach"]);
    review.assert_code(0);
    wait_until("the worker's provider to start", || started.exists());
    // While the provider runs, the daemon is stopped and one of another build (its own copies
    // of both binaries) is started.
    env.scafld(&["daemon", "stop"]).assert_code(0);
    let bin = env.path("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(scafld_tests::scafld_bin(), bin.join("scafld")).unwrap();
    std::fs::copy(scafld_tests::scafldd_bin(), bin.join("scafldd")).unwrap();
    let mut other = Command::new(bin.join("scafld"));
    env.apply_env(&mut other);
    Run::from(other.args(["daemon", "start"]).current_dir(&env.work).output().unwrap()).assert_code(0);
    std::fs::write(&go, "").unwrap();
    let status = worker.exit_within(std::time::Duration::from_secs(30));
    let said = worker.said();
    assert_eq!(status.and_then(|s| s.code()), Some(6), "{said}");
    assert_eq!(said.matches("another build of scafldd than this worker's").count(), 1, "{said}");
    assert!(said.contains("not submitted"), "{said}");
    assert!(said.contains("restart the worker from the new install"), "{said}");
}

/// A worker's daemon restarted from the same file is its own build: the worker reconnects and
/// serves the next review. One replaced by another build (an upgrade) is said once, and the
/// worker exits 6 naming the restart to do, instead of retrying every second for ever.
#[test]
fn a_worker_reconnects_to_its_own_build_and_stops_at_another() {
    let env = TestEnv::new();
    crate::review::to_review(&env);
    let script = crate::review::reviewer(&env, "pass", &crate::review::pass(), "");
    let mut worker = Worker::spawn(&env, &script);
    wait_until("the worker serving", || worker.said().contains("serving review jobs"));
    let first = env.client().result("daemon.status", json!({}))["pid"].clone();
    env.scafld(&["daemon", "stop"]).assert_code(0);
    wait_until("the worker reconnecting", || worker.said().contains("reconnecting"));
    env.scafld(&["daemon", "start"]).assert_code(0);
    let review = env.scafld(&["review", "rev", "--reviewers", "worker", "--min-attack-angles", "2", "--json"]);
    review.assert_code(0);
    assert!(worker.runs(), "the worker serves its own build again: {}", worker.said());

    // A client of another build (its own copies of both binaries) replaces the daemon, whose
    // only call is the worker's claim, a wait.
    let bin = env.path("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(scafld_tests::scafld_bin(), bin.join("scafld")).unwrap();
    std::fs::copy(scafld_tests::scafldd_bin(), bin.join("scafldd")).unwrap();
    let mut other = Command::new(bin.join("scafld"));
    env.apply_env(&mut other);
    let replaced = Run::from(other.args(["list", "--json"]).current_dir(&env.work).output().unwrap());
    replaced.assert_code(0);
    assert!(replaced.stderr.contains("stopped it and started"), "{}", replaced.stderr);
    let status = worker.exit_within(std::time::Duration::from_secs(30));
    let said = worker.said();
    assert_eq!(status.and_then(|s| s.code()), Some(6), "{said}");
    assert_eq!(said.matches("another build of scafldd than this worker's").count(), 1, "{said}");
    assert!(said.contains("restart the worker from the new install"), "{said}");
    assert_ne!(env.client().result("daemon.status", json!({}))["pid"], first);
}

/// A call read once a stop began is refused before anything of it runs, and the refusal says
/// so (`details.not_started`): a client may send it again to the next daemon.
#[test]
fn a_call_a_stopping_daemon_never_started_is_marked_unstarted() {
    let mut env = TestEnv::new();
    env.start_daemon();
    let mut client = env.client();
    client.result("daemon.shutdown", json!({}));
    // The stop begins once the shutdown's reply is on its way: a call sent before that is
    // served; each keeps the connection read while it drains.
    let mut reply = client.call("daemon.status", json!({}));
    let deadline = std::time::Instant::now() + scafld_tests::DEADLINE;
    while reply.get("error").is_none() && std::time::Instant::now() < deadline {
        reply = client.call("daemon.status", json!({}));
    }
    assert_eq!(reply["error"]["data"]["kind"], "shutting_down", "{reply}");
    assert_eq!(reply["error"]["data"]["details"]["not_started"], true, "{reply}");
}

/// The line a stopping daemon answers request `id` with once its stop began: refused, nothing
/// of it started (`details.not_started`).
fn unstarted_refusal(id: &serde_json::Value) -> String {
    let message = "the daemon is shutting down and takes no new calls";
    let data = json!({"kind": "shutting_down", "message": message, "details": {"not_started": true}});
    let reply = json!({"jsonrpc": "2.0", "id": id, "error": {"code": 1009, "message": message, "data": data}});
    format!("{reply}\n")
}

/// A `scafld worker` running `script` as its provider, what it says kept in a file; killed if
/// it still runs when the test ends (passed or not).
struct Worker {
    child: std::process::Child,
    log: std::path::PathBuf,
}

impl Worker {
    fn spawn(env: &TestEnv, script: &str) -> Worker {
        let log = env.path("worker.err");
        let child = env
            .scafld_command(&["worker", "--provider", "command", "--provider-command", script])
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Worker { child, log }
    }

    fn said(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn runs(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    fn exit_within(&mut self, within: std::time::Duration) -> Option<std::process::ExitStatus> {
        scafld_tests::wait_for_exit(&mut self.child, within)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A command whose call a stopping daemon refused unstarted is not failed: the client sends
/// it again to the next daemon, starting one (here the stopping daemon is a stand-in that
/// refuses the handshake and the call, as a real one does once its stop began, then goes).
#[test]
fn a_call_refused_unstarted_by_a_stopping_daemon_goes_to_the_next_one() {
    use std::io::{BufRead, BufReader, Write};
    let env = TestEnv::new();
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    env.scafld(&["daemon", "stop"]).assert_code(0);
    wait_until("the daemon's socket to go", || !env.socket.exists());
    let listener = UnixListener::bind(&env.socket).unwrap();
    let socket = env.socket.clone();
    let stopping = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        // The handshake and the read-only call pipelined behind it.
        let mut ids = Vec::new();
        stream.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
        while ids.len() < 2 {
            let mut line = String::new();
            if !matches!(reader.read_line(&mut line), Ok(1..)) {
                break;
            }
            ids.push(serde_json::from_str::<serde_json::Value>(&line).unwrap()["id"].clone());
        }
        // Gone before it answers, as a stopped daemon is once its calls are answered.
        drop(listener);
        std::fs::remove_file(&socket).unwrap();
        let mut writer = stream;
        for id in &ids {
            writer.write_all(unstarted_refusal(id).as_bytes()).unwrap();
        }
        ids.len()
    });
    let run = env.scafld(&["list", "--json"]);
    assert_eq!(stopping.join().unwrap(), 2);
    run.assert_code(0);
    assert!(run.json().get("result").is_some(), "{}", run.stdout);
    // The command's call was served by the daemon it started.
    env.scafld(&["daemon", "status"]).assert_code(0);
}

/// A worker waits for its daemon; it never starts one. Its claim refused unstarted by a
/// stopping daemon (a stand-in, as above) goes to no daemon the worker would start: the
/// worker says it is reconnecting, and serves once a daemon is started.
#[test]
fn a_workers_claim_refused_unstarted_waits_for_a_daemon_and_starts_none() {
    use std::io::{BufRead, BufReader, Write};
    let env = TestEnv::new();
    crate::review::to_review(&env);
    env.scafld(&["daemon", "stop"]).assert_code(0);
    wait_until("the daemon's socket to go", || !env.socket.exists());
    let listener = UnixListener::bind(&env.socket).unwrap();
    let socket = env.socket.clone();
    // The claim waits for the handshake's answer: the stand-in refuses that, and is gone.
    let stopping = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        stream.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
        let mut line = String::new();
        BufReader::new(stream.try_clone().unwrap()).read_line(&mut line).unwrap();
        let request = serde_json::from_str::<serde_json::Value>(&line).unwrap();
        drop(listener);
        std::fs::remove_file(&socket).unwrap();
        stream.write_all(unstarted_refusal(&request["id"]).as_bytes()).unwrap();
        request["method"].as_str().unwrap_or_default().to_string()
    });
    let script = crate::review::reviewer(&env, "pass", &crate::review::pass(), "");
    let mut worker = Worker::spawn(&env, &script);
    assert_eq!(stopping.join().unwrap(), "daemon.hello");
    wait_until("the worker reconnecting", || worker.said().contains("reconnecting"));
    assert!(!env.socket.exists(), "the worker started no daemon: {}", worker.said());
    env.scafld(&["daemon", "start"]).assert_code(0);
    env.scafld(&["review", "rev", "--reviewers", "worker", "--min-attack-angles", "2", "--json"]).assert_code(0);
    assert!(worker.runs(), "the worker serves on: {}", worker.said());
}
