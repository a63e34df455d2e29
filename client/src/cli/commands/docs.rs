//! `scafld completions` and `scafld man`: generated from the one CLI definition (clap), so they
//! can never describe a flag the binary does not have.

use std::path::Path;

use clap::CommandFactory;

use crate::cli::exit::workflow;
use crate::cli::output::{CliError, note};
use crate::cli::{Cli, Context};

/// The shell's registration script: at completion time the shell runs `scafld` again with
/// `COMPLETE=<shell>`, which completes commands and flags from the CLI definition and task ids
/// and session keys from the daemon (only one that already runs; nothing when none answers).
pub fn completions(shell: clap_complete::Shell) -> Result<u8, CliError> {
    let name = shell.to_string();
    let shells = clap_complete::env::Shells::builtins();
    let completer = shells
        .completer(&name)
        .ok_or_else(|| CliError::new("usage", format!("no completion support for {name}"), workflow::USAGE))?;
    let mut script = Vec::new();
    completer
        .write_registration("COMPLETE", "scafld", "scafld", "scafld", &mut script)
        .map_err(|e| CliError::new("io", format!("cannot write the script: {e}"), workflow::RUNTIME))?;
    use std::io::Write as _;
    let _ = std::io::stdout().write_all(&script);
    Ok(workflow::OK)
}

/// `scafld.1`, `scafld-<command>.1` for every command and subcommand, and `scafldd.1` (asked
/// of the scafldd beside this binary, else on PATH).
pub fn man(ctx: &Context, out: &Path) -> Result<u8, CliError> {
    let io = |e: std::io::Error| {
        CliError::new("io", format!("cannot write man pages to {}: {e}", out.display()), workflow::RUNTIME)
    };
    std::fs::create_dir_all(out).map_err(io)?;
    let mut written = Vec::new();
    let command = Cli::command();
    write_pages(&command, "scafld", "scafld", out, &mut written).map_err(io)?;
    let daemon = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("scafldd")))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| "scafldd".into());
    match std::process::Command::new(&daemon).arg("--man").output() {
        Ok(output) if output.status.success() => {
            std::fs::write(out.join("scafldd.1"), output.stdout).map_err(io)?;
            written.push("scafldd.1".to_string());
        }
        _ => note(&format!(
            "scafld: warning: no scafldd answered `--man` ({}); its page was not written",
            daemon.display()
        )),
    }
    ctx.out.success(&serde_json::json!({"out": out.display().to_string(), "pages": written}), || {
        format!(
            "wrote {} man page(s) to {} (read one with `man -l {}/scafld.1`)",
            written.len(),
            out.display(),
            out.display()
        )
    });
    Ok(workflow::OK)
}

/// One page per command: `stem.1`, titled `shown` (`scafld review wait`).
fn write_pages(
    command: &clap::Command,
    stem: &str,
    shown: &str,
    out: &Path,
    written: &mut Vec<String>,
) -> std::io::Result<()> {
    let file = format!("{stem}.1");
    let mut page = Vec::new();
    let page_command = command.clone().display_name(shown.to_string()).bin_name(shown.to_string());
    clap_mangen::Man::new(page_command).title(stem.to_string()).render(&mut page)?;
    std::fs::write(out.join(&file), page)?;
    written.push(file);
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = sub.get_name();
        write_pages(sub, &format!("{stem}-{name}"), &format!("{shown} {name}"), out, written)?;
    }
    Ok(())
}
