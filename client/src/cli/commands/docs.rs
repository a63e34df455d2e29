//! `scafld completions` and `scafld man`: generated from the one CLI definition (clap), so they
//! can never describe a flag the binary does not have.

use std::path::Path;

use scafld_local::out_file;

use crate::cli::exit::workflow;
use crate::cli::output::{CliError, note, one_line};
use crate::cli::{Context, grammar};

/// The shell's registration script: at completion time the shell runs `scafld` again with
/// `SCAFLD_COMPLETE=<shell>` ([`crate::cli::COMPLETE_VAR`]), which completes commands and flags from the CLI definition and task ids
/// and session keys from the daemon (only one that already runs; nothing when none answers).
/// With `--json` the script is the `script` of one envelope.
pub fn completions(ctx: &Context, shell: clap_complete::Shell) -> Result<u8, CliError> {
    let name = shell.to_string();
    let shells = clap_complete::env::Shells::builtins();
    let completer = shells
        .completer(&name)
        .ok_or_else(|| CliError::new("usage", format!("no completion support for {name}"), workflow::USAGE))?;
    let mut script = Vec::new();
    completer
        .write_registration(crate::cli::COMPLETE_VAR, "scafld", "scafld", "scafld", &mut script)
        .map_err(|e| CliError::new("io", format!("cannot write the script: {e}"), workflow::RUNTIME))?;
    if ctx.out.json {
        let script = String::from_utf8_lossy(&script);
        ctx.out.success(&serde_json::json!({"shell": name, "script": script}), String::new);
        return Ok(workflow::OK);
    }
    crate::cli::output::write_stdout(&script);
    Ok(workflow::OK)
}

/// `scafld.1`, `scafld-<command>.1` for every command and subcommand, and `scafldd.1` (asked
/// of the scafldd beside this binary, else on PATH). Every page is rendered first and every
/// name checked as `session --export` checks its path (`scafld_local::out_file`): a symlink is
/// never written through, an existing file only replaced with `force`; one refusal writes
/// nothing.
pub fn man(ctx: &Context, out: &Path, force: bool) -> Result<u8, CliError> {
    let io = |e: std::io::Error| {
        CliError::new("io", format!("cannot write man pages to {}: {e}", out.display()), workflow::RUNTIME)
    };
    let mut pages = Vec::new();
    let mut command = grammar();
    // Built first: the global flags (`--json`, `--root`, `--no-autostart`) reach every
    // subcommand's page, as they reach its `--help`.
    command.build();
    render_pages(&command, "scafld", "scafld", &mut pages).map_err(io)?;
    let daemon = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("scafldd")))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| "scafldd".into());
    match std::process::Command::new(&daemon).arg("--man").output() {
        Ok(output) if output.status.success() => pages.push(("scafldd.1".to_string(), output.stdout)),
        _ => note(&format!(
            "scafld: warning: no scafldd answered `--man` ({}); its page was not written",
            daemon.display()
        )),
    }
    // The pages go into a folder: anything else there (a file, a FIFO) is a usage error.
    if std::fs::symlink_metadata(out).is_ok_and(|meta| !meta.is_dir()) {
        return Err(CliError::new(
            "usage",
            format!("man --out: {} is not a folder; no page was written", out.display()),
            workflow::USAGE,
        )
        .with_hint("name a folder (it is created when missing)"));
    }
    for (file, _) in &pages {
        out_file::check(&out.join(file), force).map_err(|why| {
            CliError::new("usage", format!("man --out: {why}; no page was written"), workflow::USAGE)
                .with_hint(why.hint())
        })?;
    }
    std::fs::create_dir_all(out).map_err(io)?;
    let mut written = Vec::new();
    for (file, page) in pages {
        out_file::write(&out.join(&file), &page, force).map_err(io)?;
        written.push(file);
    }
    ctx.out.success(&serde_json::json!({"out": out.display().to_string(), "pages": written}), || {
        format!(
            "wrote {} man page(s) to {} (read one with `man -l {}/scafld.1`)",
            written.len(),
            one_line(&out.display().to_string()),
            one_line(&out.display().to_string())
        )
    });
    Ok(workflow::OK)
}

/// One page per command: `stem.1`, titled `shown` (`scafld review wait`).
fn render_pages(
    command: &clap::Command,
    stem: &str,
    shown: &str,
    pages: &mut Vec<(String, Vec<u8>)>,
) -> std::io::Result<()> {
    let mut page = Vec::new();
    let page_command = command.clone().display_name(shown.to_string()).bin_name(shown.to_string());
    clap_mangen::Man::new(page_command).title(stem.to_string()).render(&mut page)?;
    pages.push((format!("{stem}.1"), page));
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = sub.get_name();
        render_pages(sub, &format!("{stem}-{name}"), &format!("{shown} {name}"), pages)?;
    }
    Ok(())
}
