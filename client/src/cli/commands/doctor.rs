//! `scafld doctor`: checks what a user needs (git, the daemon and its directories, the
//! workspace's configuration as the daemon reads it, the reviewer CLIs and their versions,
//! the systemd units) and says what to fix. Each check is one
//! row; adding one means adding a function to [`checks`]. It never starts the daemon.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use scafld_client::Connection;
use scafld_protocol::TESTED_REVIEWER_CLIS;
use serde::Serialize;

use crate::cli::Context;
use crate::cli::exit::workflow;
use crate::cli::output::{CliError, Style};

/// How long a CLI may take to print its version.
const VERSION_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    Ok,
    /// Works, but not as tested or not as safe as it should be.
    Warn,
    /// Something a user needs is missing or broken.
    Fail,
}

#[derive(Debug, Serialize)]
pub struct Check {
    pub name: String,
    pub health: Health,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

fn check(name: &str, health: Health, detail: impl Into<String>, fix: Option<String>) -> Check {
    Check { name: name.into(), health, detail: detail.into(), fix }
}

#[derive(Serialize)]
struct Report {
    checks: Vec<Check>,
    healthy: bool,
}

pub fn run(ctx: &Context) -> Result<u8, CliError> {
    let checks = checks(ctx);
    let healthy = checks.iter().all(|c| c.health != Health::Fail);
    let report = Report { checks, healthy };
    let human = || {
        let width = report.checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
        let mut lines: Vec<String> = report
            .checks
            .iter()
            .map(|c| {
                let (label, style) = match c.health {
                    Health::Ok => ("ok  ", Style::Good),
                    Health::Warn => ("warn", Style::Warn),
                    Health::Fail => ("FAIL", Style::Bad),
                };
                let mut line = format!("{} {:<width$}  {}", ctx.out.paint(label, style), c.name, c.detail);
                if let Some(fix) = &c.fix {
                    line.push_str(&format!("\n     {:<width$}  fix: {fix}", ""));
                }
                line
            })
            .collect();
        lines.push(if report.healthy { "nothing blocks scafld here".into() } else { "fix the FAIL rows first".into() });
        lines.join("\n")
    };
    if report.healthy {
        ctx.out.success(&report, human);
        Ok(workflow::OK)
    } else {
        let error = CliError::new("doctor", "some checks failed", workflow::RUNTIME);
        if ctx.out.json {
            ctx.out.failure(&error, serde_json::to_value(&report).ok());
        } else {
            ctx.out.print_human(&human());
        }
        Ok(workflow::RUNTIME)
    }
}

fn checks(ctx: &Context) -> Vec<Check> {
    let mut out = vec![git()];
    match &ctx.paths {
        Ok(paths) => {
            out.push(private_dir("state directory", &paths.state_dir));
            if let Some(dir) = paths.socket.parent() {
                out.push(private_dir("socket directory", dir));
            }
            out.push(daemon(paths));
            out.extend(config(ctx, paths));
        }
        // Nothing can reach or start a daemon: said as a failed check, the others still made.
        Err(e) => out.push(check("state directory", Health::Fail, e.message.clone(), Some(e.hint.clone()))),
    }
    out.extend(declared_host());
    out.extend(TESTED_REVIEWER_CLIS.iter().map(|(cli, package, version)| reviewer(cli, package, version)));
    out.push(systemd_units());
    out
}

/// The first line a program prints for `--version`, bounded in time. It runs in a process group
/// of its own, killed whole once it has answered or run out of time: nothing it started stays
/// behind, and nothing left holding its output keeps the read waiting.
fn version_of(program: &Path) -> Result<String, String> {
    use std::os::unix::process::CommandExt;
    let mut child = Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| e.to_string())?;
    let group = nix::unistd::Pid::from_raw(child.id() as i32);
    let kill_group = || {
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    };
    let started = Instant::now();
    loop {
        if child.try_wait().map_err(|e| e.to_string())?.is_some() {
            break;
        }
        if started.elapsed() > VERSION_TIMEOUT {
            kill_group();
            let _ = child.wait();
            return Err(format!("`--version` did not answer within {} s", VERSION_TIMEOUT.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    kill_group();
    let output = child.wait_with_output().map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .next()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .ok_or_else(|| "printed no version".into())
}

/// An executable on this process's PATH.
fn on_path(name: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(name))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// Why `dir`, which does not exist, could not be created: its nearest existing ancestor is
/// no directory (HOME a regular file), or one this user cannot create entries in (read-only
/// file system, no write or search permission). `None` when it could.
fn uncreatable(dir: &Path) -> Option<String> {
    use nix::unistd::{AccessFlags, access};
    let ancestor = dir.ancestors().skip(1).find(|a| !a.as_os_str().is_empty() && a.symlink_metadata().is_ok())?;
    match std::fs::metadata(ancestor) {
        Ok(meta) if !meta.is_dir() => Some(format!("{} is not a directory", ancestor.display())),
        Ok(_) => access(ancestor, AccessFlags::W_OK | AccessFlags::X_OK)
            .err()
            .map(|e| format!("nothing can be created in {}: {}", ancestor.display(), std::io::Error::from(e))),
        Err(e) => Some(format!("{} cannot be read: {e}", ancestor.display())),
    }
}

fn git() -> Check {
    match on_path("git").map(|p| version_of(&p)) {
        Some(Ok(version)) => check("git", Health::Ok, version, None),
        Some(Err(e)) => check("git", Health::Fail, format!("git does not run: {e}"), Some("reinstall git".into())),
        None => check(
            "git",
            Health::Fail,
            "not on PATH; approval records a git baseline",
            Some("install git (Debian/Ubuntu: sudo apt-get install git)".into()),
        ),
    }
}

/// A directory only its owner may enter (it holds the socket or the database).
fn private_dir(name: &str, dir: &Path) -> Check {
    let Ok(meta) = std::fs::metadata(dir) else {
        return match uncreatable(dir) {
            None => check(name, Health::Ok, format!("{} (created by the daemon when it starts)", dir.display()), None),
            Some(why) => check(
                name,
                Health::Fail,
                format!("{} does not exist and cannot be created: {why}", dir.display()),
                Some(
                    "point scafld at a directory you can create (SCAFLD_STATE_DIR / SCAFLD_SOCKET, or fix HOME)".into(),
                ),
            ),
        };
    };
    let uid = nix::unistd::getuid().as_raw();
    if meta.uid() != uid {
        return check(
            name,
            Health::Fail,
            format!("{} belongs to uid {}, not you (uid {uid})", dir.display(), meta.uid()),
            Some("remove it or point scafld elsewhere (SCAFLD_STATE_DIR / SCAFLD_SOCKET)".into()),
        );
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        return check(
            name,
            Health::Warn,
            format!("{} is mode {mode:o}; others can read it", dir.display()),
            Some(format!("chmod 700 {}", dir.display())),
        );
    }
    check(name, Health::Ok, format!("{} (mode {mode:o})", dir.display()), None)
}

fn daemon(paths: &scafld_client::Paths) -> Check {
    use scafld_client::ClientError;
    const RESTART: &str = "scafld daemon stop, then scafld daemon start";
    let mut conn = match Connection::connect(&paths.socket) {
        Ok(conn) => conn,
        Err(e @ ClientError::Unreachable { .. }) => {
            return check("daemon", Health::Ok, format!("not running ({e}); any command starts it"), None);
        }
        // Every command is refused by it (exit 6), and none starts another while it answers.
        Err(e @ ClientError::ProtocolMismatch { .. }) => {
            return check("daemon", Health::Fail, e.to_string(), Some(RESTART.into()));
        }
        // Untrusted, hung: what to do is the hint any command would give.
        Err(e) => {
            let detail = e.to_string();
            return check("daemon", Health::Fail, detail, crate::cli::daemon_control::connect_error(e).hint);
        }
    };
    let Ok(hello) = conn.daemon().cloned() else {
        return check("daemon", Health::Fail, "the daemon answered the handshake, then no more", Some(RESTART.into()));
    };
    let (daemon, client) = (hello.daemon_version.clone(), env!("CARGO_PKG_VERSION"));
    if daemon != client {
        return check(
            "daemon",
            Health::Warn,
            format!("scafldd {daemon} answers, but this client is {client}"),
            Some(RESTART.into()),
        );
    }
    let own = crate::cli::daemon_control::own_daemon();
    match own {
        Some(own) if !crate::cli::daemon_control::same_build(&hello, &own) => {
            let other = crate::cli::daemon_control::other_build(&hello, &own);
            let busy = conn
                .call::<scafld_protocol::methods::DaemonStatus>(&Default::default())
                .map(|s| crate::cli::daemon_control::busy_with(&s.jobs, &s.serving));
            match busy {
                Ok(None) => check(
                    "daemon",
                    Health::Warn,
                    format!(
                        "{other}; it runs no job and serves no call, so the next command restarts it with this client's"
                    ),
                    Some(format!("run any command, or {RESTART}")),
                ),
                Ok(Some(busy)) => check(
                    "daemon",
                    Health::Fail,
                    format!("{other}, and {busy}: commands are refused (exit 6) until it is restarted"),
                    Some(format!(
                        "wait for it to finish (`scafld daemon status`), or {}",
                        crate::cli::daemon_control::STOP_ENDS_JOBS
                    )),
                ),
                Err(e) => check(
                    "daemon",
                    Health::Fail,
                    format!("{other}; its status cannot be read: {e}"),
                    Some(RESTART.into()),
                ),
            }
        }
        _ => check("daemon", Health::Ok, format!("scafldd {daemon} (pid {}) answers", hello.pid), None),
    }
}

/// The workspace's configuration files as its daemon reads them (the one reader of them): a
/// WARN row per key no setting reads, naming its file, line and key, as `status`, `list`,
/// `validate` and `build` warn; a FAIL row for a file that does not read. Asked of a daemon
/// that answers (doctor starts none); outside a workspace there is nothing to check.
fn config(ctx: &Context, paths: &scafld_client::Paths) -> Vec<Check> {
    const NAME: &str = "config";
    let Ok(root) = crate::cli::workspace::find_root(ctx.global.root.as_deref()) else { return Vec::new() };
    let mut conn = match Connection::connect(&paths.socket) {
        Ok(conn) => conn,
        Err(scafld_client::ClientError::Unreachable { .. }) => {
            let detail = "not checked: no daemon answers (doctor starts none; any command that reads the configuration names its unknown keys)";
            return vec![check(NAME, Health::Ok, detail, None)];
        }
        // Said by the daemon row already.
        Err(e) => return vec![check(NAME, Health::Warn, format!("not checked: {e}"), None)],
    };
    let params = scafld_protocol::methods::WorkspaceRootParams { root: root.display().to_string() };
    match conn.call::<scafld_protocol::methods::WorkspaceConfig>(&params) {
        Ok(read) => match read.error {
            Some(problem) => {
                vec![check(NAME, Health::Fail, format!("{}: {}", problem.file, problem.message), Some(problem.hint))]
            }
            None if read.unknown_keys.is_empty() => {
                vec![check(NAME, Health::Ok, format!("{}: every key is read", root.join(".scafld").display()), None)]
            }
            None => read
                .unknown_keys
                .into_iter()
                .map(|warning| {
                    let fix = "correct the key's name or remove it (a misspelt key sets nothing)";
                    check(NAME, Health::Warn, warning, Some(fix.into()))
                })
                .collect(),
        },
        Err(e) => vec![check(NAME, Health::Warn, format!("not checked: the daemon did not say ({e})"), None)],
    }
}

/// A reviewer CLI: found, its version read, and whether it is the version scafld is tested with.
fn reviewer(cli: &str, package: &str, tested: &str) -> Check {
    let name = format!("reviewer {cli}");
    let install = format!("npm install -g {package}@{tested}");
    let Some(path) = on_path(cli) else {
        return check(&name, Health::Warn, "not on PATH; reviews cannot use it", Some(install));
    };
    match version_of(&path) {
        Ok(version) if version.contains(tested) => {
            check(&name, Health::Ok, format!("{version} at {} (tested)", path.display()), None)
        }
        Ok(version) => check(
            &name,
            Health::Warn,
            format!("{version} at {}; scafld is tested with {tested}", path.display()),
            Some(install),
        ),
        Err(e) => check(&name, Health::Fail, format!("{} does not run: {e}", path.display()), Some(install)),
    }
}

/// The self-declared host agent, when one is set: a value naming no agent scafld knows is
/// ignored by the daemon, so reviews cannot tell which agent the caller runs inside.
fn declared_host() -> Option<Check> {
    use scafld_protocol::hosts::{HOST_AGENT_VAR, HOST_AGENTS, declared};
    let value = std::env::var(HOST_AGENT_VAR).ok()?;
    let name = "host agent";
    Some(match declared(&value) {
        Some(host) => check(name, Health::Ok, format!("{HOST_AGENT_VAR}={value:?} declares {host}"), None),
        None => check(
            name,
            Health::Warn,
            format!(
                "{HOST_AGENT_VAR}={value:?} names no agent scafld knows ({}): it is ignored, and only the agents' own markers tell which one hosts you",
                HOST_AGENTS.join(", ")
            ),
            Some(format!("set {HOST_AGENT_VAR} to codex, claude or gemini, or unset it")),
        ),
    })
}

fn systemd_units() -> Check {
    let dir = std::env::var_os("XDG_CONFIG_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".config")))
        .map(|c| c.join("systemd/user"));
    let installed: Vec<&str> = ["scafldd.service", "scafldd.socket"]
        .into_iter()
        .filter(|unit| dir.as_ref().is_some_and(|d| d.join(unit).is_file()))
        .collect();
    match installed.len() {
        0 => check("systemd units", Health::Ok, "not installed (optional; the client starts the daemon)", None),
        2 => check("systemd units", Health::Ok, "scafldd.service and scafldd.socket installed", None),
        _ => check(
            "systemd units",
            Health::Warn,
            format!("only {} installed", installed.join(", ")),
            Some("copy both files from systemd/ (README, \"Running under systemd\")".into()),
        ),
    }
}
