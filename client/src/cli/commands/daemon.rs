//! `scafld daemon start|stop|status|forget`.

use scafld_client::{ClientError, Connection};
use scafld_protocol::methods::{DaemonStatus, DaemonStatusResult, WorkspaceForget, WorkspaceForgetParams};
use serde_json::json;

use scafld_client::terminal::one_line;

use crate::cli::Context;
use crate::cli::daemon_control::{self, connect_error, rpc_error, start_hint};
use crate::cli::exit::workflow;
use crate::cli::output::CliError;

pub fn start(ctx: &Context) -> Result<u8, CliError> {
    let paths = ctx.paths()?;
    let (pid, already) = match Connection::connect_pipelined(&paths.socket, None) {
        // A daemon of another build is replaced (when it runs no job), as by any command.
        Ok(conn) => {
            use std::sync::atomic::{AtomicBool, Ordering};
            let replaced = std::sync::Arc::new(AtomicBool::new(false));
            let said = replaced.clone();
            let note = std::sync::Arc::new(move |line: &str| {
                said.store(true, Ordering::SeqCst);
                crate::cli::output::note(line);
            });
            let mut conn = match daemon_control::own_daemon() {
                Some(own) => conn.checking_hello(daemon_control::build_check(paths.clone(), own, true, None, note)),
                None => conn,
            };
            let pid = conn.daemon().map_err(connect_error)?.pid;
            (pid, !replaced.load(Ordering::SeqCst))
        }
        Err(ClientError::Unreachable { .. }) => (daemon_control::start(paths)?, false),
        Err(e) => return Err(connect_error(e)),
    };
    let socket = paths.socket.display().to_string();
    ctx.out.success(&json!({"pid": pid, "socket_path": socket, "already_running": already}), || {
        let shown = one_line(&socket);
        if already {
            format!("the daemon is already running (pid {pid}) at {shown}")
        } else {
            format!("started the daemon (pid {pid}) at {shown}")
        }
    });
    Ok(workflow::OK)
}

pub fn stop(ctx: &Context) -> Result<u8, CliError> {
    let paths = ctx.paths()?;
    let stopped = daemon_control::stop(paths)?;
    let socket = paths.socket.display().to_string();
    ctx.out.success(&json!({"stopped": stopped.is_some(), "pid": stopped, "socket_path": socket}), || match stopped {
        Some(pid) => format!("stopped the daemon (pid {pid})"),
        None => format!("no daemon was running at {}", one_line(&socket)),
    });
    Ok(workflow::OK)
}

pub fn status(ctx: &Context) -> Result<u8, CliError> {
    let paths = ctx.paths()?;
    let mut conn = Connection::connect(&paths.socket).map_err(|e| match e {
        ClientError::Unreachable { .. } => {
            connect_error(e).with_hint(start_hint(paths, "start it with `scafld daemon start`"))
        }
        other => connect_error(other),
    })?;
    let status = conn.call::<DaemonStatus>(&Default::default()).map_err(rpc_error)?;
    let hello = conn.daemon().map_err(connect_error)?.clone();
    // Whether this daemon is of the build this client starts (every build says the same version
    // and protocol): a daemon of another build is replaced by the next command that may start
    // one, unless it runs jobs.
    let own = daemon_control::own_daemon();
    let build = own.as_ref().map(|own| match daemon_control::same_build(&hello, own) {
        true => (true, format!("this client's ({})", own.path)),
        false => (
            false,
            format!(
                "{}; the next command restarts it with this client's when it runs no job, or stop it with `scafld daemon stop`",
                daemon_control::other_build(&hello, own)
            ),
        ),
    });
    let mut shown = serde_json::to_value(&status).unwrap_or_default();
    if let (Some(object), Some((same, detail))) = (shown.as_object_mut(), &build) {
        object.insert(
            "build".into(),
            json!({"current": same, "detail": detail, "executable": hello.executable, "client_daemon": own.as_ref().map(|o| &o.path)}),
        );
    }
    ctx.out.success(&shown, || {
        let mut text = render(&status);
        if let Some((same, detail)) = &build {
            text.push_str(&format!("\nbuild:      {}{}", if *same { "" } else { "ANOTHER BUILD: " }, one_line(detail)));
        }
        text
    });
    Ok(workflow::OK)
}

/// `scafld daemon forget <id|path>`: forget a workspace whose folder is gone. A relative
/// folder (one with a `/`) is the caller's; the daemon is started if none runs.
pub fn forget(ctx: &Context, workspace: &str) -> Result<u8, CliError> {
    let named = match std::path::Path::new(workspace) {
        path if workspace.contains('/') && !path.is_absolute() => {
            std::env::current_dir().map(|d| d.join(path).display().to_string()).unwrap_or_else(|_| workspace.into())
        }
        _ => workspace.to_string(),
    };
    let mut conn = ctx.connect()?;
    let forgotten = conn.call::<WorkspaceForget>(&WorkspaceForgetParams { workspace: named }).map_err(rpc_error)?;
    ctx.out.success(&forgotten, || {
        format!(
            "forgot workspace {} ({}); its ledgers stay, and its folder restored is recorded again by the next command there",
            forgotten.workspace_id,
            one_line(forgotten.gone.as_deref().unwrap_or(&forgotten.root))
        )
    });
    Ok(workflow::OK)
}

/// The status for a person; every path in it is a value kept to its line (`one_line`): a
/// folder's name may hold a newline.
fn render(s: &DaemonStatusResult) -> String {
    let open = s.workspaces.iter().filter(|w| w.open).count();
    let mut text = format!(
        "scafldd {} (protocol {}), pid {}, up {}\nsocket:     {}{}\nstate:      {}\nlog:        {}\nworkspaces: {} ({} open)\n",
        s.daemon_version,
        s.protocol_version,
        s.pid,
        human_duration(s.uptime_seconds),
        one_line(&s.socket_path),
        if s.socket_activated { " (systemd)" } else { "" },
        one_line(&s.state_dir),
        one_line(&s.log_file),
        s.workspaces.len(),
        open,
    );
    for w in &s.workspaces {
        text.push_str(&format!(
            "  {}  {}{}\n",
            one_line(w.workspace_id.get(..8).unwrap_or(&w.workspace_id)),
            one_line(&w.root),
            match (&w.gone, w.open) {
                (Some(gone), _) => format!(" (gone: {})", one_line(gone)),
                (None, true) => String::new(),
                (None, false) => " (closed)".into(),
            }
        ));
    }
    text.push_str(&format!(
        "jobs:       {} queued, {} running, {} finished",
        s.jobs.queued, s.jobs.running, s.jobs.finished
    ));
    if !s.serving.is_empty() {
        text.push_str(&format!("\nserving:    {}", crate::cli::daemon_control::calls_served(&s.serving)));
    }
    text
}

fn human_duration(seconds: f64) -> String {
    let total = seconds as u64;
    match total {
        0..60 => format!("{seconds:.1}s"),
        60..3600 => format!("{}m{}s", total / 60, total % 60),
        _ => format!("{}h{}m", total / 3600, (total % 3600) / 60),
    }
}
