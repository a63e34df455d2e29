//! What the caller names as input: files (`--context-file`, `--dossier`), read through the one
//! capped reader, never past the most the daemon would take of them, so `/dev/zero`, a FIFO or
//! a folder is a clear refusal instead of a client that reads (or waits) for ever; and the
//! relative paths a `--provider-command` names (its program, a file it is given), taken from
//! the caller's folder.

use std::path::{Component, Path, PathBuf};

/// The text of the file `what` names at `path` (`--context-file`), at most `cap` bytes; why
/// not, otherwise (the caller's error to show in its family's usage code).
pub fn read_text(what: &'static str, path: &Path, cap: usize) -> Result<String, String> {
    scafld_local::capped::read_text(path, what, cap as u64).map_err(|e| e.to_string())
}

/// `--provider-command` as the daemon must run it: a relative path in it names a file from the
/// folder the caller typed it in, as every other relative path scafld is given does, while the
/// daemon (and a worker) runs reviewers from the workspace root; so each such word becomes the
/// absolute path (quoted as one shell word when it needs to be): the program when it is a
/// relative path (`./reviewer`, `tools/reviewer`, `../bin/reviewer`), and an argument that
/// names a file or folder there (`python3 ./rev.py`, `sh rev.sh`; a bare name only when it is
/// a file there, never one starting with `-`). A program found on `PATH` (no `/`) and an
/// absolute path are sent as written, and so is everything from the first word the shell
/// would read as more than a plain word (quotes, a variable, an assignment, an operator such
/// as `;` or `&&`) or the first new line on: `sh -c '...'` runs exactly as typed.
pub fn provider_command_from(command: Option<&str>, cwd: &Path) -> Option<String> {
    let command = command?;
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-.,:/@%+".contains(c);
    let (mut out, mut rest, mut changed) = (String::with_capacity(command.len()), command, false);
    let mut program = true;
    loop {
        let space = rest.len() - rest.trim_start().len();
        let (gap, after) = rest.split_at(space);
        if after.is_empty() || (!program && gap.contains('\n')) {
            out.push_str(rest);
            break;
        }
        out.push_str(gap);
        let end = after.find(char::is_whitespace).unwrap_or(after.len());
        let (word, tail) = after.split_at(end);
        if !word.chars().all(plain) {
            out.push_str(after);
            break;
        }
        match from_callers_folder(word, program, cwd) {
            Some(path) => {
                out.push_str(&scafld_protocol::cli::shell_word(&path.to_string_lossy()));
                changed = true;
            }
            None => out.push_str(word),
        }
        (rest, program) = (tail, false);
    }
    Some(if changed { out.trim_start().to_string() } else { command.to_string() })
}

/// The absolute path a plain word of a provider command names from `cwd`, when it is one to
/// rewrite (see [`provider_command_from`]).
fn from_callers_folder(word: &str, program: bool, cwd: &Path) -> Option<PathBuf> {
    if word.starts_with('/') || word.starts_with('-') || word.is_empty() {
        return None;
    }
    let path = lexically_joined(cwd, Path::new(word));
    let names_one = match (program, word.contains('/')) {
        (true, slash) => slash,
        (false, true) => path.exists(),
        (false, false) => path.is_file(),
    };
    names_one.then_some(path)
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
        for kept in ["reviewer", "/abs/rev", "python3 ./rev.py", "\"./my rev\"", "X=1 ./rev", "$HOME/rev", "", "  "] {
            assert_eq!(from(kept), kept);
        }
        let spaced = provider_command_from(Some("./rev"), Path::new("/my work")).unwrap();
        assert_eq!(spaced, "'/my work/rev'");
        assert_eq!(provider_command_from(None, cwd), None);
    }

    /// An argument naming a file in the caller's folder is sent as its absolute path; one that
    /// names nothing there, a flag, and anything from a quote or an operator on are not.
    #[test]
    fn an_argument_naming_a_file_in_the_callers_folder_is_made_absolute() {
        let dir = std::env::temp_dir().join(format!("scafld-input-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("rev.py"), "").unwrap();
        std::fs::write(dir.join("sub/rev.sh"), "").unwrap();
        let from = |c: &str| provider_command_from(Some(c), &dir).unwrap();
        let d = dir.display();
        assert_eq!(from("python3 ./rev.py --strict"), format!("python3 {d}/rev.py --strict"));
        assert_eq!(from("python3 rev.py"), format!("python3 {d}/rev.py"));
        assert_eq!(from("sh sub/rev.sh x"), format!("sh {d}/sub/rev.sh x"));
        assert_eq!(from("./run ./rev.py"), format!("{d}/run {d}/rev.py"));
        for kept in [
            "python3 ./missing.py",
            "python3 sub",
            "python3 -rev.py",
            "sh -c 'python3 ./rev.py'",
            "cd sub && sh ./rev.sh",
            "X=1 python3 ./rev.py",
            "python3 \"./rev.py\"",
            "true\npython3 ./rev.py",
        ] {
            assert_eq!(from(kept), kept);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
