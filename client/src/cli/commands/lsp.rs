//! `scafld lsp`: the command line's side of the language server (the library's `lsp`
//! module): how it reaches the daemon, with which environment, and its exit code.

use std::sync::Arc;

use scafld_client::lsp::{Connector, Dial, LinkError, Options};

use crate::cli::Context;
use crate::cli::daemon_control;
use crate::cli::exit::workflow;
use crate::cli::output::{CliError, note};
use crate::cli::workspace::find_root;

pub fn run(ctx: &Context) -> Result<u8, CliError> {
    let paths = ctx.paths()?.clone();
    let allowed = ctx.autostart();
    // "started the daemon" goes to the editor's log, not to stderr (an error there).
    let (notes_tx, notes) = crossbeam_channel::unbounded::<String>();
    // The event thread asks without autostart (a stopped daemon stays stopped until a request
    // needs one); requests start it unless --no-autostart / SCAFLD_NO_AUTOSTART forbid it.
    let connect: Connector = Arc::new(move |dial: Dial| {
        let notes = notes_tx.clone();
        let note: daemon_control::Note = Arc::new(move |line: &str| {
            let _ = notes.send(line.to_string());
        });
        daemon_control::connect_noting(&paths, dial.autostart && allowed, dial.timeout, note).map_err(|e| {
            match e.code.as_str() {
                "daemon_timeout" => LinkError::TimedOut(e.message),
                _ => LinkError::Unavailable(e.message),
            }
        })
    });
    let root = ctx.global.root.clone().or_else(|| find_root(None).ok());
    match scafld_client::lsp::run(Options { connect, caller: super::exec::caller(), root, notes }) {
        Ok(exit) => Ok(exit.code()),
        // stdout belongs to the protocol: the failure goes to stderr only.
        Err(e) => {
            note(&format!("scafld lsp: {e}"));
            Ok(workflow::RUNTIME)
        }
    }
}
