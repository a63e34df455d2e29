//! What the caller names as input: files (`--context-file`, `--dossier`), read through the one
//! capped reader, never past the most the daemon would take of them, so `/dev/zero`, a FIFO or
//! a folder is a clear refusal instead of a client that reads (or waits) for ever; and the
//! program a `--provider-command` starts, whose relative path is taken from the caller's folder.

use std::path::{Component, Path, PathBuf};

/// The text of the file `what` names at `path` (`--context-file`), at most `cap` bytes; why
/// not, otherwise (the caller's error to show in its family's usage code).
pub fn read_text(what: &'static str, path: &Path, cap: usize) -> Result<String, String> {
    scafld_local::capped::read_text(path, what, cap as u64).map_err(|e| e.to_string())
}

/// `--provider-command` as the daemon must run it: a command line whose program is a relative
/// path (`./reviewer`, `tools/reviewer`, `../bin/reviewer`) names it from the folder the caller
/// typed it in, as every other relative path scafld is given does, while the daemon (and a
/// worker) runs reviewers from the workspace root; so that word becomes the absolute path
/// (quoted as one shell word when it needs to be). A program found on `PATH` (no `/`), an
/// absolute one, or a first word the shell would read as more than a plain path (quotes,
/// variables, an assignment) is sent as written.
pub fn provider_command_from(command: Option<&str>, cwd: &Path) -> Option<String> {
    let command = command?;
    let rest = command.trim_start();
    let word_end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    let (word, tail) = rest.split_at(word_end);
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-.,:/@%+".contains(c);
    if word.is_empty() || !word.contains('/') || word.starts_with('/') || !word.chars().all(plain) {
        return Some(command.to_string());
    }
    let program = lexically_joined(cwd, Path::new(word));
    Some(format!("{}{tail}", scafld_protocol::cli::shell_word(&program.to_string_lossy())))
}

/// [`provider_command_from`] the caller's current folder (as written, when it cannot be read).
pub fn provider_command(command: Option<&str>) -> Option<String> {
    match std::env::current_dir() {
        Ok(cwd) => provider_command_from(command, &cwd),
        Err(_) => command.map(str::to_string),
    }
}

/// `base` joined with the relative `path`, `.` and `..` resolved as written.
fn lexically_joined(base: &Path, path: &Path) -> PathBuf {
    let mut out = base.to_path_buf();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::provider_command_from;
    use std::path::Path;

    #[test]
    fn a_relative_program_is_taken_from_the_callers_folder() {
        let cwd = Path::new("/w/tools");
        let from = |c: &str| provider_command_from(Some(c), cwd).unwrap();
        assert_eq!(from("./reviewer"), "/w/tools/reviewer");
        assert_eq!(from("  ./reviewer --strict 'a b'"), "/w/tools/reviewer --strict 'a b'");
        assert_eq!(from("../bin/rev"), "/w/bin/rev");
        assert_eq!(from("sub/rev x"), "/w/tools/sub/rev x");
        for kept in ["reviewer", "/abs/rev", "python3 ./rev.py", "\"./my rev\"", "X=1 ./rev", "$HOME/rev", ""] {
            assert_eq!(from(kept), kept);
        }
        let spaced = provider_command_from(Some("./rev"), Path::new("/my work")).unwrap();
        assert_eq!(spaced, "'/my work/rev'");
        assert_eq!(provider_command_from(None, cwd), None);
    }
}
