//! The commands scafld prints, made to run where its caller is: the daemon writes them as they
//! run at the workspace root (`git checkout HEAD -- .scafld/specs/approved/t.md`, `scafld build
//! t`); a caller in a subfolder, or one who named the workspace with `--root` from outside it,
//! gets them with `cd <root> && ` in front of a command that is not all scafld (scafld finds
//! its root from any folder inside; git and other tools read paths from where they run), and
//! with `--root <root>` in each scafld command when the call was given `--root`. One place:
//! every daemon result (`next_command`, `next_action`'s command and reason, every `hint` and
//! `message`) and every error hint the client prints goes through [`Caller`].

use std::path::{Path, PathBuf};

use scafld_protocol::cli::shell_word;
use serde_json::Value;

/// Where the caller is against the workspace it works on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    /// `--root <root>`, as one shell word, when the call was given it.
    root_flag: Option<String>,
    /// The root as one shell word, when the caller is not at it.
    elsewhere: Option<String>,
}

impl Caller {
    /// The caller in `cwd`, working on `root` (None: no workspace found), `--root` given or not.
    pub fn new(cwd: &Path, root: Option<&Path>, root_given: bool) -> Caller {
        let Some(root) = root else { return Caller::default() };
        let word = shell_word(&root.display().to_string()).into_owned();
        let same = |a: &Path, b: &Path| canonical(a) == canonical(b);
        Caller { root_flag: root_given.then(|| word.clone()), elsewhere: (!same(cwd, root)).then_some(word) }
    }

    /// This process's caller: its current folder, and the workspace it names (`--root`,
    /// `$SCAFLD_ROOT`) or is in.
    pub fn current(flag: Option<&Path>) -> Caller {
        let Ok(cwd) = std::env::current_dir() else { return Caller::default() };
        let named = flag.map(Path::to_path_buf).or_else(|| std::env::var_os("SCAFLD_ROOT").map(PathBuf::from));
        let root = match named {
            Some(root) => Some(cwd.join(root)),
            None => scafld_local::workspace::enclosing(&cwd)
                .or_else(|| cwd.ancestors().find(|dir| dir.join(".scafld").is_dir()).map(Path::to_path_buf)),
        };
        Caller::new(&cwd, root.as_deref(), flag.is_some())
    }

    /// The caller of a command about a job of the workspace at `root` (a worker claims and
    /// submits from any folder): `--root <root>` in each scafld command unless the caller is
    /// inside that workspace and names no root of its own (`named`: `--root`, `$SCAFLD_ROOT`).
    pub fn of_workspace(root: &Path, named: bool) -> Caller {
        let Ok(cwd) = std::env::current_dir() else { return Caller::default() };
        let inside = canonical(&cwd).starts_with(canonical(root));
        Caller::new(&cwd, Some(root), named || !inside)
    }

    /// A path relative to the workspace root, as it resolves where the caller is: absolute
    /// unless the caller is at the root.
    pub fn path(&self, root: &Path, relative: &str) -> String {
        match &self.elsewhere {
            Some(_) => root.join(relative).display().to_string(),
            None => relative.to_string(),
        }
    }

    /// Whether anything is rewritten at all (the caller at the root, no `--root`: nothing).
    pub fn rewrites(&self) -> bool {
        self.root_flag.is_some() || self.elsewhere.is_some()
    }

    /// A whole command line (`a && b && c`), made runnable here.
    pub fn command(&self, line: &str) -> String {
        if !self.rewrites() {
            return line.to_string();
        }
        let parts = split_and(line);
        let is_scafld = |part: &str| {
            let part = part.trim_start();
            part == "scafld" || part.starts_with("scafld ")
        };
        let all_scafld = parts.iter().all(|p| is_scafld(p));
        let known = parts.iter().all(|p| is_scafld(p) || is_program(p));
        // A command after a `cd` (the daemon's `cd <main checkout> && scafld ...` in a git
        // worktree) runs where that names: `--root` would send it back here.
        let first_cd = parts.iter().position(|p| p.trim_start().starts_with("cd ")).unwrap_or(parts.len());
        let mut out = parts
            .iter()
            .enumerate()
            .map(|(i, part)| match (&self.root_flag, is_scafld(part) && i < first_cd) {
                (Some(root), true) if !part.contains(" --root") => {
                    let at = part.find("scafld").unwrap_or(0) + "scafld".len();
                    format!("{} --root {root}{}", &part[..at], &part[at..])
                }
                _ => part.to_string(),
            })
            .collect::<Vec<_>>()
            .join("&&");
        if let (Some(root), false, true) = (&self.elsewhere, all_scafld, known) {
            out = format!("cd {root} && {out}");
        }
        out
    }

    /// Prose with commands in backticks (a hint): each backticked command made runnable here.
    pub fn prose(&self, text: &str) -> String {
        if !self.rewrites() || !text.contains('`') {
            return text.to_string();
        }
        let pieces: Vec<&str> = text.split('`').collect();
        let closed = pieces.len() - usize::from(pieces.len().is_multiple_of(2));
        pieces
            .iter()
            .enumerate()
            .map(|(i, piece)| match i % 2 == 1 && i < closed && looks_like_command(piece) {
                true => self.command(piece),
                false => piece.to_string(),
            })
            .collect::<Vec<_>>()
            .join("`")
    }

    /// A daemon result: its `next_command`s, `next_action`'s `command` and `reason`, and its
    /// `hint`s and `message`s, wherever they are but in a spec's diagnostics (which quote the
    /// spec's own text).
    pub fn result(&self, value: &mut Value) {
        if self.rewrites() {
            self.walk(value, false);
        }
    }

    fn walk(&self, value: &mut Value, in_next_action: bool) {
        match value {
            Value::Object(fields) => {
                for (key, child) in fields.iter_mut() {
                    match (key.as_str(), child) {
                        ("next_command", Value::String(text)) => *text = self.command(text),
                        ("command", Value::String(text)) if in_next_action => *text = self.command(text),
                        ("reason", Value::String(text)) if in_next_action => *text = self.prose(text),
                        ("hint" | "message", Value::String(text)) => *text = self.prose(text),
                        // A spec's diagnostics quote what its author wrote (a criterion's own
                        // `git ...` command): never rewritten.
                        ("diagnostics" | "errors" | "warnings", _) => {}
                        (key, child) => self.walk(child, key == "next_action"),
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|item| self.walk(item, false)),
            _ => {}
        }
    }
}

fn canonical(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}

/// A backticked span that is a command this module rewrites (not `--root PATH` or a file name).
fn looks_like_command(span: &str) -> bool {
    let first = span.trim_start();
    first.starts_with("scafld ") || is_program(first)
}

/// A command of a program whose paths are read from where it runs (the daemon names git's).
fn is_program(part: &str) -> bool {
    part.trim_start().starts_with("git ")
}

/// `line` cut at each `&&` outside quotes, each piece keeping its own spaces.
fn split_and(line: &str) -> Vec<&str> {
    let (mut parts, mut start, mut quote, mut escaped) = (Vec::new(), 0, None, false);
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        match (quote, c) {
            _ if escaped => escaped = false,
            (Some(b'\''), b'\'') | (Some(b'"'), b'"') => quote = None,
            (Some(b'"'), b'\\') | (None, b'\\') => escaped = true,
            (None, b'\'' | b'"') => quote = Some(c),
            (None, b'&') if bytes.get(i + 1) == Some(&b'&') => {
                parts.push(&line[start..i]);
                start = i + 2;
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    parts.push(&line[start..]);
    parts
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::json;

    use super::Caller;

    fn caller(root_given: bool, elsewhere: bool) -> Caller {
        let root = std::env::temp_dir();
        let cwd = if elsewhere { root.join("no-such-subfolder") } else { root.clone() };
        let mut caller = Caller::new(&cwd, Some(&root), root_given);
        // A fixed root word, so the expectations read plainly.
        caller.root_flag = caller.root_flag.map(|_| "/ws".to_string());
        caller.elsewhere = caller.elsewhere.map(|_| "/ws".to_string());
        caller
    }

    #[test]
    fn at_the_root_without_root_nothing_changes() {
        let at_root = caller(false, false);
        assert!(!at_root.rewrites());
        assert_eq!(at_root.command("git add -A -- a && scafld verify x"), "git add -A -- a && scafld verify x");
        assert_eq!(Caller::new(Path::new("/x"), None, true), Caller::default());
    }

    #[test]
    fn a_command_with_git_runs_at_the_root_from_a_subfolder() {
        let sub = caller(false, true);
        let line =
            "git add -A -- sd/f1.txt && git commit -m \"sd: a && b\" -- sd/f1.txt && scafld verify r --target HEAD";
        assert_eq!(sub.command(line), format!("cd /ws && {line}"));
        assert_eq!(sub.command("scafld build t"), "scafld build t");
        assert_eq!(sub.command("none"), "none");
        assert_eq!(
            sub.prose("put it back (`git checkout HEAD -- .scafld/specs/approved/t.md`), then `scafld status t`"),
            "put it back (`cd /ws && git checkout HEAD -- .scafld/specs/approved/t.md`), then `scafld status t`"
        );
    }

    #[test]
    fn root_is_carried_into_every_scafld_command() {
        let outside = caller(true, true);
        assert_eq!(outside.command("scafld build t"), "scafld --root /ws build t");
        assert_eq!(
            outside.command("git commit -m 'x && y' -- a && scafld verify r"),
            "cd /ws && git commit -m 'x && y' -- a && scafld --root /ws verify r"
        );
        assert_eq!(
            outside.prose("run `scafld approve t --amend` (a `--root` flag)"),
            "run `scafld --root /ws approve t --amend` (a `--root` flag)"
        );
        assert_eq!(outside.prose("odd ` scafld x"), "odd ` scafld x");
        assert_eq!(outside.command("cd /main && scafld review t"), "cd /main && scafld review t");
        assert_eq!(outside.prose("run `cd /main && scafld reconcile t`"), "run `cd /main && scafld reconcile t`");
        let mut result = json!({
            "next_action": {"command": "scafld build t", "reason": "see `scafld status t`", "role": "agent"},
            "next_command": "scafld build t",
            "criteria": [{"command": "test -f a", "hint": "`scafld build t`"}],
        });
        outside.result(&mut result);
        assert_eq!(result["next_action"]["command"], "scafld --root /ws build t");
        assert_eq!(result["next_action"]["reason"], "see `scafld --root /ws status t`");
        assert_eq!(result["next_command"], "scafld --root /ws build t");
        assert_eq!(result["criteria"][0]["command"], "test -f a");
        assert_eq!(result["criteria"][0]["hint"], "`scafld --root /ws build t`");
    }

    #[test]
    fn a_spec_s_diagnostics_keep_the_commands_they_quote() {
        let outside = caller(true, true);
        let quoted = "criterion `c1`: its command `git diff --quiet` names no file";
        let mut result = json!({"diagnostics": [{"line": 3, "severity": "warning", "message": quoted}]});
        outside.result(&mut result);
        assert_eq!(result["diagnostics"][0]["message"], quoted);
    }
}
