//! The `scafld` command line: argument grammar, command dispatch and output.

pub mod daemon_control;
pub mod exit;
pub mod output;
pub mod workspace;

mod commands;

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use scafld_client::Paths;

use output::{CliError, Output};

/// scafld: a spec-driven workflow for AI coding agents, served by the scafldd daemon.
#[derive(Parser, Debug)]
#[command(name = "scafld", version, propagate_version = true, disable_help_subcommand = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Args, Debug, Clone)]
pub struct GlobalArgs {
    /// Print one JSON envelope instead of human output.
    #[arg(long, global = true)]
    pub json: bool,
    /// Workspace root (default: $SCAFLD_ROOT, else the nearest parent holding .scafld/).
    #[arg(long, global = true, value_name = "PATH")]
    pub root: Option<PathBuf>,
    /// Fail instead of starting the daemon when none answers (also SCAFLD_NO_AUTOSTART=1).
    #[arg(long, global = true)]
    pub no_autostart: bool,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create .scafld/ in the workspace root (default: the current directory) and register it.
    Init,
    /// Start, stop or inspect the daemon.
    #[command(subcommand)]
    Daemon(DaemonCommand),
}

#[derive(Subcommand, Debug)]
pub enum DaemonCommand {
    /// Start the daemon in the background; returns once its socket answers.
    Start,
    /// Ask the daemon to shut down and wait until it has.
    Stop,
    /// Show version, pid, uptime, socket, state directory, workspaces and jobs.
    Status,
}

impl Command {
    /// Name used in the JSON envelope's `command` field.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Init => "init",
            Command::Daemon(DaemonCommand::Start) => "daemon start",
            Command::Daemon(DaemonCommand::Stop) => "daemon stop",
            Command::Daemon(DaemonCommand::Status) => "daemon status",
        }
    }
}

/// Everything a command needs besides its own arguments.
pub struct Context {
    pub global: GlobalArgs,
    pub paths: Paths,
    pub out: Output,
}

impl Context {
    pub fn autostart(&self) -> bool {
        let env_off = std::env::var("SCAFLD_NO_AUTOSTART").is_ok_and(|v| !v.is_empty() && v != "0");
        !(self.global.no_autostart || env_off)
    }

    pub fn connect(&self) -> Result<scafld_client::Connection, CliError> {
        daemon_control::connect(&self.paths, self.autostart())
    }
}

/// Parse `args`, run the command, print its output and return the process exit code.
pub fn main(args: Vec<OsString>) -> u8 {
    let wants_json = args.iter().any(|a| a == "--json");
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => return usage_error(e, wants_json),
    };
    let out = Output::new(cli.global.json, cli.command.name());
    let ctx = Context { global: cli.global, paths: Paths::from_env(), out };
    match commands::run(&ctx, cli.command) {
        Ok(code) => code,
        Err(error) => {
            ctx.out.failure(&error, None);
            error.exit_code
        }
    }
}

fn usage_error(error: clap::Error, json: bool) -> u8 {
    use clap::error::ErrorKind;
    if matches!(error.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = error.print();
        return exit::workflow::OK;
    }
    let code = exit::workflow::USAGE;
    if json {
        let message = error.kind().as_str().map(str::to_string).unwrap_or_else(|| "invalid command line".into());
        let detail = error.render().to_string();
        let cli_error = CliError::usage(format!("{message}: {}", detail.lines().next().unwrap_or_default()))
            .with_hint("run `scafld --help` for usage");
        Output::new(true, "").failure(&cli_error, None);
    } else {
        let _ = error.print();
    }
    code
}
