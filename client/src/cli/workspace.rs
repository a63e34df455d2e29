//! Finding the workspace a command applies to.

use std::path::{Path, PathBuf};

use scafld_local::workspace::enclosing;

use super::exit::workflow;
use super::output::{CliError, note};

/// `--root`, else `$SCAFLD_ROOT`, else the nearest directory at or above the current one that
/// holds `.scafld/`. Always absolute. Inside a workspace's own `.scafld/` folder that
/// workspace is the one (`scafld_local::workspace`): a `.scafld` nested in there (an older
/// `init` made one) is passed over with a warning, and an explicit root in there is refused.
pub fn find_root(flag: Option<&Path>) -> Result<PathBuf, CliError> {
    utf8(found_root(flag)?)
}

fn found_root(flag: Option<&Path>) -> Result<PathBuf, CliError> {
    let explicit = flag.map(Path::to_path_buf).or_else(|| std::env::var_os("SCAFLD_ROOT").map(PathBuf::from));
    if let Some(root) = explicit {
        let root = absolute(&root)?;
        if let Some(outer) = enclosing(&root) {
            return Err(CliError::new(
                "workspace_not_found",
                format!(
                    "{} is inside the .scafld/ folder of the workspace {}, not a workspace of its own",
                    root.display(),
                    outer.display()
                ),
                workflow::UNREACHABLE,
            )
            .with_hint(format!("pass --root {}", outer.display())));
        }
        if !root.join(".scafld").is_dir() {
            return Err(not_a_workspace(&root));
        }
        return Ok(root);
    }
    let cwd = current_dir()?;
    if let Some(outer) = enclosing(&cwd) {
        let nested = cwd.ancestors().take_while(|dir| *dir != outer).find(|dir| dir.join(".scafld").is_dir());
        if let Some(nested) = nested {
            note(&format!(
                "scafld: warning: ignoring {}, a workspace folder inside the workspace {}'s own .scafld/ (an older \
                 `scafld init` made it there); this command works on {}: move what you need out of it and remove it",
                nested.join(".scafld").display(),
                outer.display(),
                outer.display()
            ));
        }
        return Ok(outer);
    }
    let root = cwd.ancestors().find(|dir| dir.join(".scafld").is_dir()).map(Path::to_path_buf).ok_or_else(|| {
        CliError::new(
            "workspace_not_found",
            format!("no .scafld/ directory in {} or any parent", cwd.display()),
            workflow::UNREACHABLE,
        )
        .with_hint("run `scafld init` in the project root, or pass --root PATH")
    })?;
    match scafld_local::git::Link::nearest(&cwd) {
        Some(link) if link.is_worktree() && link.work_tree() != root && link.work_tree().starts_with(&root) => {
            Err(worktree_inside(&cwd, link.work_tree(), &root))
        }
        _ => Ok(root),
    }
}

/// A linked git worktree placed inside another checkout's workspace (`.worktrees/feat`) is a
/// work tree of its own: the workspace found above it would baseline and run its criteria in
/// the other checkout, never this one, so discovery stops there and says how to choose.
fn worktree_inside(cwd: &Path, worktree: &Path, root: &Path) -> CliError {
    let shown = |path: &Path| scafld_protocol::cli::shell_word(&path.to_string_lossy()).into_owned();
    CliError::new(
        "workspace_not_found",
        format!(
            "{} is in the git worktree {}, a work tree of its own inside the workspace {}: that workspace's commands would read {}'s files and run its criteria there, not this worktree's",
            cwd.display(),
            worktree.display(),
            root.display(),
            root.display()
        ),
        workflow::UNREACHABLE,
    )
    .with_hint(format!(
        "run `scafld init` in {} for a workspace of its own, or share {}'s tasks with `ln -s {}/.scafld {}/.scafld` (approvals then run there), or pass --root {} to work on that checkout",
        shown(worktree),
        shown(root),
        shown(root),
        shown(worktree),
        shown(root)
    ))
}

/// The root a range review (`review --diff`) runs in: the workspace, else the git repository
/// around the current directory, or around the folder `--root` (or `$SCAFLD_ROOT`) names (a
/// range needs no `scafld init`; the daemon keeps its data). A repository of its own inside
/// the workspace found (a submodule, an embedded repository) is the one around the current
/// directory: its range is the one asked for, never the workspace's repository's.
pub fn find_review_root(flag: Option<&Path>) -> Result<PathBuf, CliError> {
    let explicit = flag.map(Path::to_path_buf).or_else(|| std::env::var_os("SCAFLD_ROOT").map(PathBuf::from));
    let e = match find_root(flag) {
        Ok(root) if explicit.is_some() => return Ok(root),
        Ok(root) => {
            let cwd = current_dir()?;
            return match cwd.ancestors().find(|dir| dir.join(".git").exists()) {
                Some(repo) if repo != root && repo.starts_with(&root) && enclosing(repo).is_none() => {
                    utf8(repo.to_path_buf())
                }
                _ => Ok(root),
            };
        }
        Err(e) if e.code == "workspace_not_found" => e,
        Err(e) => return Err(e),
    };
    let start = match explicit {
        // Inside a workspace's `.scafld/` it stays refused: that folder is no repository of its own.
        Some(root) => match absolute(&root)? {
            root if enclosing(&root).is_some() => return Err(e),
            root => root,
        },
        None => current_dir()?,
    };
    match start.ancestors().find(|dir| dir.join(".git").exists()) {
        Some(repo) => utf8(repo.to_path_buf()),
        None => match scafld_local::git::store_holding(&start) {
            // A bare repository is a git repository, but one without a work tree.
            Some(store) => Err(CliError::new(
                "workspace_not_found",
                format!(
                    "{} is inside the bare git repository {}: scafld does not support bare repositories (a review runs in a work tree)",
                    start.display(),
                    store.display()
                ),
                workflow::UNREACHABLE,
            )
            .with_hint(format!(
                "clone it, `git clone {} <folder>`, and run the review in the clone",
                scafld_protocol::cli::shell_word(&store.to_string_lossy())
            ))),
            None => Err(e.with_hint("review --diff runs in a git repository (or a scafld workspace)".to_string())),
        },
    }
}

/// The root `init` works on: `--root` or the current directory (never walks up).
pub fn init_root(flag: Option<&Path>) -> Result<PathBuf, CliError> {
    utf8(match flag {
        Some(root) => absolute(root)?,
        None => current_dir()?,
    })
}

fn absolute(path: &Path) -> Result<PathBuf, CliError> {
    let joined = if path.is_absolute() { path.to_path_buf() } else { current_dir()?.join(path) };
    let hint = "check the path --root (or $SCAFLD_ROOT) names: it must be an existing folder";
    let root = joined.canonicalize().map_err(|e| {
        CliError::new("workspace_not_found", format!("cannot use {}: {e}", joined.display()), workflow::UNREACHABLE)
            .with_hint(hint)
    })?;
    // A file there is no workspace and cannot become one: `init` there would be refused too.
    if !root.is_dir() {
        return Err(CliError::new(
            "workspace_not_found",
            format!("cannot use {}: it is not a folder", joined.display()),
            workflow::UNREACHABLE,
        )
        .with_hint(hint));
    }
    Ok(root)
}

fn current_dir() -> Result<PathBuf, CliError> {
    std::env::current_dir().map_err(|e| {
        CliError::new("workspace_not_found", format!("cannot read the current directory: {e}"), workflow::UNREACHABLE)
    })
}

/// Paths go to the daemon as JSON text: one that is not UTF-8 would arrive as another path,
/// one that does not exist, so it is refused here by name.
fn utf8(path: PathBuf) -> Result<PathBuf, CliError> {
    if path.to_str().is_some() {
        return Ok(path);
    }
    Err(CliError::new(
        "workspace_not_found",
        format!("{} is not valid UTF-8, and scafld works only in folders whose paths are UTF-8 text", path.display()),
        workflow::UNREACHABLE,
    )
    .with_hint("rename the folder (or the one above it) so its name is UTF-8 text"))
}

fn not_a_workspace(root: &Path) -> CliError {
    CliError::new(
        "workspace_not_found",
        format!("{} is not a scafld workspace (no .scafld/ directory)", root.display()),
        workflow::UNREACHABLE,
    )
    .with_hint("run `scafld init` there first")
}

/// Paths typed on the command line (`--review-scope`, `--scope-hint`) as the workspace reads
/// them: a relative one is relative to the folder it was typed in, as every other relative path
/// is (`session --export`, `--provider-command`), so from a subfolder it is sent with that
/// folder in front (`src/a.rs` typed in `pkg/` is `pkg/src/a.rs`, `../b` is `b`), resolved as
/// written (`.` and `..` by name, never through links). An absolute one, a blank one and every
/// one typed at the root itself go as they are: the daemon reads them, and refuses what names
/// nothing in the workspace. One that `..` takes above the workspace is refused here, naming
/// the folder it was typed in. Typed outside the workspace (`--root` elsewhere), a relative
/// path is sent absolute, for the daemon to read as any absolute one.
pub fn typed_paths(root: &Path, flag: &str, typed: &[String]) -> Result<Vec<String>, CliError> {
    let cwd = current_dir()?;
    let Ok(here) = cwd.strip_prefix(root) else {
        return Ok(typed
            .iter()
            .map(|p| match p.trim().is_empty() || Path::new(p).is_absolute() {
                true => p.clone(),
                false => cwd.join(p).to_string_lossy().into_owned(),
            })
            .collect());
    };
    let here: Vec<String> = here.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    if here.is_empty() {
        return Ok(typed.to_vec());
    }
    typed
        .iter()
        .map(|p| {
            if p.trim().is_empty() || Path::new(p).is_absolute() {
                return Ok(p.clone());
            }
            let mut parts = here.clone();
            for part in p.split(['/', '\\']) {
                match part {
                    "" | "." => {}
                    ".." if parts.pop().is_some() => {}
                    ".." => {
                        return Err(CliError::new(
                            "invalid_input",
                            format!(
                                "{flag} `{p}` (typed in {}) is outside the workspace {}: a relative path is read from the folder it is typed in",
                                cwd.display(),
                                root.display()
                            ),
                            workflow::USAGE,
                        )
                        .with_hint("name files or folders inside the workspace, relative to the current folder or absolute"));
                    }
                    part => parts.push(part.to_string()),
                }
            }
            Ok(if parts.is_empty() { ".".to_string() } else { parts.join("/") })
        })
        .collect()
}
