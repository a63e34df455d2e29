//! One function per command; each returns its exit code or a [`CliError`].

mod daemon;
mod init;

use super::output::CliError;
use super::{Command, Context, DaemonCommand};

pub fn run(ctx: &Context, command: Command) -> Result<u8, CliError> {
    match command {
        Command::Init => init::run(ctx),
        Command::Daemon(DaemonCommand::Start) => daemon::start(ctx),
        Command::Daemon(DaemonCommand::Stop) => daemon::stop(ctx),
        Command::Daemon(DaemonCommand::Status) => daemon::status(ctx),
    }
}
