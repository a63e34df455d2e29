//! Workspace facts from git2, the IO side of the gate: snapshots (HEAD and every dirty path with
//! a content fingerprint, submodules included), the *material* of a scope (what evidence and
//! reviews are bound to: the content of the scoped files by the id git gives it, however git
//! holds them), the changes since an approval baseline (committed or not), and diffs.
//!
//! Files are hashed whole by streaming (bounded memory, whatever their size), symlinks are fingerprinted by their target text and
//! never read through (the material resolves one in scope to its target only inside the
//! workspace), special files by their type: nothing here reads a file whole into memory, and a
//! file too large to show (over 8 MiB) is named in a diff, never read for a patch.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use git2::{ObjectType, Oid, Repository, Status, StatusOptions, Tree};
use scafld_protocol::text::Notation;
use sha2::{Digest, Sha256};

use crate::domain::ledger::BaselinePath;
use crate::domain::material::GROUP;

/// The status of a file git ignores in a snapshot (`git status --porcelain --ignored`'s).
pub const IGNORED: &str = "!!";

/// Paths the runner writes, which never count as task content.
const RUNNER_DIRS: [&str; 3] = [".scafld/runs/", ".scafld/reviews/", ".scafld/specs/"];

pub struct Snapshot {
    pub head: Option<String>,
    /// As recorded: the dirt outside the scope grouped by folder when there is much of it.
    pub paths: Vec<BaselinePath>,
    /// How many dirty or untracked paths there were (those grouped included).
    pub dirty: usize,
    /// Each nested repository's HEAD commit (`None`: it has none yet), by folder: see
    /// [`nested_repository`]. Its dirty paths are among `paths`, below its folder.
    pub nested: BTreeMap<String, Option<String>>,
}

mod kept;
mod place;

pub use place::Place;

/// Why a git step failed: what the repository lacks for it (a precondition the user meets
/// there, with how), a revision the caller named that it does not have, or git unable to read
/// the workspace at all (only that is "unreachable").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GitFailure {
    /// The repository lacks what the step needs (no commit yet, a recorded commit gone).
    Unmet { message: String, hint: String },
    /// A revision the caller named does not resolve here.
    UnknownRevision(String),
    /// git cannot read the workspace.
    Unreadable(String),
    /// A file in scope (or at the workspace's top, for a whole scope) whose name is not UTF-8,
    /// which no path here can carry: its workspace-relative path as bytes. Never passed over in
    /// silence (evidence, the gate and a receipt would all miss its content); the user renames
    /// it or keeps it out of the scope.
    NameNotUtf8(Vec<u8>),
}

impl GitFailure {
    /// The name that is not UTF-8 as a person reads it: bytes shown by value, controls in
    /// caret notation.
    pub fn shown_name(&self) -> Option<String> {
        match self {
            GitFailure::NameNotUtf8(name) => {
                Some(scafld_protocol::text::one_line(&scafld_protocol::text::shown_bytes(name)).into_owned())
            }
            _ => None,
        }
    }

    /// What to do about it, where the user can act in the workspace.
    pub fn hint(&self) -> Option<String> {
        match self {
            GitFailure::Unmet { hint, .. } => Some(hint.clone()),
            GitFailure::NameNotUtf8(_) => Some(format!(
                "rename `{}` to a UTF-8 name, or keep it out of the task's scope (then `scafld approve <task> --amend`)",
                self.shown_name().unwrap_or_default()
            )),
            GitFailure::UnknownRevision(_) | GitFailure::Unreadable(_) => None,
        }
    }

    /// The same failure for a path below `prefix/` (a submodule's or nested repository's).
    fn under(self, prefix: &str) -> GitFailure {
        match self {
            GitFailure::NameNotUtf8(name) if !prefix.is_empty() => {
                GitFailure::NameNotUtf8([prefix.as_bytes(), b"/", &name].concat())
            }
            other => other,
        }
    }
}

impl std::fmt::Display for GitFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GitFailure::Unmet { message, .. }
            | GitFailure::UnknownRevision(message)
            | GitFailure::Unreadable(message) => f.write_str(message),
            GitFailure::NameNotUtf8(_) => write!(
                f,
                "`{}` has a name that is not UTF-8, which scafld cannot bind evidence to",
                self.shown_name().unwrap_or_default()
            ),
        }
    }
}

impl From<String> for GitFailure {
    fn from(message: String) -> GitFailure {
        GitFailure::Unreadable(message)
    }
}

impl From<&str> for GitFailure {
    fn from(message: &str) -> GitFailure {
        GitFailure::Unreadable(message.to_string())
    }
}

/// Where only a message is kept: the failure as it reads, with what to do about a name that
/// is not UTF-8.
impl From<GitFailure> for String {
    fn from(failure: GitFailure) -> String {
        match &failure {
            GitFailure::NameNotUtf8(_) => format!("{failure}: {}", failure.hint().unwrap_or_default()),
            _ => failure.to_string(),
        }
    }
}

/// An unmet precondition is a refusal (exit 1) with its hint, an unknown revision the
/// caller's mistake (exit 2); only an unreadable workspace is a workspace error.
impl From<GitFailure> for crate::error::RpcError {
    fn from(failure: GitFailure) -> crate::error::RpcError {
        use crate::error::RpcError;
        use scafld_protocol::ErrorKind;
        match failure {
            GitFailure::Unmet { message, hint } => RpcError::new(ErrorKind::InvalidState, message).with_hint(hint),
            GitFailure::UnknownRevision(message) => RpcError::new(ErrorKind::InvalidInput, message)
                .with_hint("name a commit this repository has (fetch it first if it lives elsewhere)"),
            GitFailure::Unreadable(message) => RpcError::new(ErrorKind::WorkspaceError, message),
            GitFailure::NameNotUtf8(_) => {
                let hint = failure.hint().unwrap_or_default();
                RpcError::new(ErrorKind::WorkspaceError, failure.to_string()).with_hint(hint)
            }
        }
    }
}

/// The work tree git gives the git directory `git_dir`: a `.git` folder's parent, a
/// submodule's git directory's `core.worktree` (`.git/modules/<name>` is worked on in the
/// submodule's folder), a linked worktree's folder; `None` for a bare repository, or one whose
/// work tree is not a folder there.
pub fn work_tree_of(git_dir: &Path) -> Option<PathBuf> {
    let repo = Repository::open(git_dir).ok()?;
    let tree = repo.workdir().filter(|_| !repo.is_bare())?;
    let tree: PathBuf = tree.components().collect();
    tree.is_dir().then_some(tree)
}

/// The repository `root` is in (kept open between calls, see [`kept`]).
fn open(root: &Path) -> Result<kept::Lease, String> {
    kept::lease(root).map_err(|e| {
        // A linked worktree whose main repository moved: its `.git` file names a git directory
        // that is gone. `git init` there would not help; repairing the link does.
        if let Some(link) = scafld_local::git::Link::nearest(root).filter(scafld_local::git::Link::dangling) {
            return dangling_link(root, &link);
        }
        format!(
            "{} {} ({}); scafld records a git baseline at approval, run `git init` first",
            root.display(),
            scafld_protocol::NOT_IN_A_REPOSITORY,
            e.message()
        )
    })
}

/// Why git cannot open the repository of `root`: the `.git` file of its work tree names a git
/// directory that is gone, and how to link it again.
fn dangling_link(root: &Path, link: &scafld_local::git::Link) -> String {
    let tree = scafld_protocol::cli::shell_word(&link.work_tree().to_string_lossy()).into_owned();
    let repair = match link.is_worktree() {
        true => format!(
            "this is a linked worktree whose main repository moved or was removed: run `git worktree repair {tree}` in the main repository at its new place"
        ),
        false => "point the file's `gitdir:` line at the git directory where it is now".to_string(),
    };
    format!(
        "the workspace {} cannot be read through git: {} names the git directory {}, which is gone; {repair} (or edit {} to name it), then run the command again",
        root.display(),
        link.file.display(),
        link.target.display(),
        link.file.display()
    )
}

/// The repository `root` is in and where `root` sits in its work tree: what git reads and
/// reports is mapped to workspace paths through the [`Place`] alone.
fn placed(root: &Path) -> Result<(kept::Lease, Place), String> {
    let repo = open(root)?;
    let place = Place::of(root, &repo)?;
    // Read through git, a workspace whose folder git ignores has no files and never a change:
    // refused, never read as unchanged.
    if place.ignored(&repo)
        && let GitFailure::Unmet { message, hint } = ignored_home(root, &place)
    {
        return Err(format!("{message}; {hint}"));
    }
    Ok((repo, place))
}

/// The refusal of a workspace whose folder its git repository ignores (see [`Place::ignored`]).
fn ignored_home(root: &Path, place: &Place) -> GitFailure {
    let folder = scafld_protocol::cli::shell_word(place.prefix()).into_owned();
    // libgit2 names the work tree with a slash at its end.
    let top: PathBuf = place.top.components().collect();
    GitFailure::Unmet {
        message: format!(
            "the workspace {} is in {}/, a folder its git repository ({}) ignores: git reports none of the files there, so scafld would never see a change in them",
            root.display(),
            place.prefix(),
            top.display()
        ),
        hint: format!(
            "`git -C {} check-ignore -v {folder}` names the rule: change it so it no longer covers the folder (git cannot take back a file below an ignored folder with `!`), or make the folder a repository of its own (`git init` there, and commit its files)",
            scafld_protocol::cli::shell_word(&top.to_string_lossy())
        ),
    }
}

/// The refusal of the workspace at `root` when its git repository ignores its folder: `init`
/// warns with it, `approve` is refused by it (`None`: not ignored, or not in a repository).
pub fn ignored_workspace(root: &Path) -> Option<GitFailure> {
    let repo = open(root).ok()?;
    let place = Place::of(root, &repo).ok()?;
    place.ignored(&repo).then(|| ignored_home(root, &place))
}

/// Whether `root` is inside a git repository: approval records a git baseline, so a workspace
/// outside one can be planned and validated but not approved (a precondition, not an
/// unreachable workspace).
pub fn require_git(root: &Path) -> crate::error::RpcResult<()> {
    open(root).map(|_| ()).map_err(|e| {
        let hint = match e.contains(scafld_protocol::NOT_IN_A_REPOSITORY) {
            true => "run `git init` (and commit what you have) in the workspace, then approve again",
            // A dangling worktree link: the message says how to repair it.
            false => "repair the git link as said, then approve again",
        };
        crate::error::RpcError::new(scafld_protocol::ErrorKind::InvalidState, e).with_hint(hint)
    })
}

fn head_commit(repo: &Repository) -> Option<git2::Commit<'_>> {
    repo.head().ok().and_then(|h| h.peel_to_commit().ok())
}

/// Why HEAD names no commit: a repository with none yet, or a branch with none yet (an orphan
/// branch, `git checkout --orphan`) in a repository whose other branches have commits; the
/// way on for each (for the latter, the switch back to the most recently committed branch).
fn no_head_commit(repo: &Repository) -> GitFailure {
    let on = repo.find_reference("HEAD").ok().and_then(|h| h.symbolic_target().ok().flatten().map(String::from));
    let on = on.as_deref().map(|r| r.strip_prefix("refs/heads/").unwrap_or(r).to_string());
    let newest = newest_branches(repo, |_| true).into_iter().find(|b| Some(b) != on.as_ref());
    match (on, newest) {
        (Some(on), Some(other)) => GitFailure::Unmet {
            message: format!(
                "HEAD is on branch {}, an orphan branch (as `git checkout --orphan` makes) with no commit of its own yet, while branch {} has commits: a receipt names the commit its files are checked at",
                scafld_protocol::cli::shell_word(&on),
                scafld_protocol::cli::shell_word(&other)
            ),
            hint: format!(
                "put this branch on the history of a branch with commits, the files kept as they are: `git reset --soft {other}` (the most recently committed; or `git switch {other}` to go back to it), then run the command again",
                other = scafld_protocol::cli::shell_word(&other)
            ),
        },
        _ => GitFailure::Unmet {
            message: "the repository has no commit yet: a receipt names the commit its files are checked at".into(),
            hint: "commit the work (`git add -A && git commit -m \"...\"`), then run the command again".into(),
        },
    }
}

/// The local branches whose tip commit passes `keep`, the most recently committed first.
fn newest_branches(repo: &Repository, keep: impl Fn(&git2::Commit<'_>) -> bool) -> Vec<String> {
    let mut found: Vec<(i64, String)> = Vec::new();
    for (branch, _) in repo.branches(Some(git2::BranchType::Local)).into_iter().flatten().flatten() {
        if let (Ok(Some(name)), Ok(commit)) = (branch.name(), branch.get().peel_to_commit())
            && keep(&commit)
        {
            found.push((commit.time().seconds(), name.to_string()));
        }
    }
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    found.into_iter().map(|(_, name)| name).collect()
}

/// Where HEAD's history meets the commit `id` (a full id, as a baseline records it): their
/// merge base, or `None` when they share no commit (an orphan branch's history); and the local
/// branches that hold `id`, the most recently committed first.
pub fn meeting(root: &Path, id: &str) -> Result<(Option<String>, Vec<String>), String> {
    let repo = open(root)?;
    let commit = Oid::from_str(id).map_err(|e| e.message().to_string())?;
    let base = head_commit(&repo).and_then(|head| repo.merge_base(head.id(), commit).ok()).map(|b| b.to_string());
    let holding =
        newest_branches(&repo, |tip| tip.id() == commit || repo.graph_descendant_of(tip.id(), commit).unwrap_or(false));
    Ok((base, holding))
}

fn status_options() -> StatusOptions {
    let mut options = StatusOptions::new();
    options.include_untracked(true).recurse_untracked_dirs(true).include_ignored(false).exclude_submodules(false);
    options
}

/// [`status_options`] whose walk is pruned to `paths` (each taken literally, with everything
/// below it): the work tree outside them is never read. Empty means the whole tree.
fn scoped_status_options(paths: &[String]) -> StatusOptions {
    let mut options = status_options();
    if !paths.is_empty() {
        for path in paths {
            options.pathspec(path);
        }
        options.disable_pathspec_match(true);
    }
    options
}

/// Snapshot the git repository containing `root`: HEAD and every dirty or untracked path with
/// its fingerprint, and (as `!!`, git's word for ignored) each file git ignores that the
/// material of `scope` reads all the same ([`Material::ignored`]): what was there at approval
/// is baseline dirt, not the task's change. The runner's folders (`.scafld/runs/`, `reviews/`,
/// `specs/`) are left out and never walked: the runner writes there, and what changed since a
/// baseline never counts them (a workspace of thousands of specs would otherwise weigh on
/// every ledger read).
pub fn snapshot(root: &Path, scope: &[String]) -> Result<Snapshot, GitFailure> {
    if let Some(refusal) = ignored_workspace(root) {
        return Err(refusal);
    }
    let ignored = material(root, scope)?.ignored;
    let (repo, place) = placed(root)?;
    let head = head_commit(&repo).map(|c| c.id().to_string());
    // A top-level name that is not UTF-8 is passed over here: what was dirty at approval is
    // context, and a task whose scope holds no such file must not be refused for it.
    let statuses = scoped_statuses(&repo, &outside_runner_dirs(&repo, &place).0)?;
    let (mut paths, mut nested) = (Vec::new(), BTreeMap::new());
    for (path, status) in &statuses {
        // What git reports outside the workspace (elsewhere in a monorepo) is not its dirt.
        let Some(path) = place.workspace(path.trim_end_matches('/')).filter(|p| !p.is_empty()) else { continue };
        if runner_path(root, path) {
            continue;
        }
        paths.push(BaselinePath {
            status: porcelain(*status),
            fingerprint: fingerprint(root, path),
            path: path.to_string(),
        });
        if let Some(inner) =
            status.contains(Status::WT_NEW).then(|| nested_repository(&repo, &place.git(path))).flatten()
        {
            snapshot_nested(&inner, path, root, &mut paths, &mut nested)?;
        } else if let Some(why) = status.contains(Status::WT_NEW).then(|| unopened(&repo, &place.git(path))).flatten() {
            // Recorded as a plain folder, its HEAD and dirt would go unread until it reads.
            return Err(unreadable_nested(path, &why, false));
        }
    }
    for path in ignored.into_iter().filter(|path| !runner_path(root, path)) {
        paths.push(BaselinePath { status: IGNORED.into(), fingerprint: fingerprint(root, &path), path });
    }
    let dirty = paths.len();
    let paths = recorded(paths, scope, &nested);
    Ok(Snapshot { head, paths, dirty, nested })
}

/// Whether a dirty `path` is kept apart from the grouped ambient dirt of an approval baseline
/// (see [`recorded`]): in `scope` (the evidence scope), or a nested repository's folder, below
/// one, or above one.
fn kept_apart(path: &str, scope: &[String], nested: &BTreeMap<String, Option<String>>) -> bool {
    let path = path.trim_end_matches('/');
    in_scope(path, scope)
        || nested.keys().any(|n| path == n || path.starts_with(&format!("{n}/")) || n.starts_with(&format!("{path}/")))
}

/// The snapshot's paths as the approval baseline records them: an entry for each path in
/// `scope` (the evidence scope), each file git ignores that the material reads and each
/// nested repository's path; the dirt outside the scope, which only tells a review's ambient
/// changes from what was there at approval, as [`stored`] keeps a material: an entry per path
/// up to [`STORED_BOUND`], else grouped by folder, each group's fingerprint covering its
/// members (their paths, statuses and fingerprints), so any change among them is seen
/// ([`changes_since`] reads a group again). An approval amid a hundred thousand untracked
/// files outside a one-file scope records a few hundred entries, and every later read of the
/// ledger (each `status`) costs what the scope costs.
fn recorded(
    paths: Vec<BaselinePath>,
    scope: &[String],
    nested: &BTreeMap<String, Option<String>>,
) -> Vec<BaselinePath> {
    let (mut kept, ambient): (Vec<_>, Vec<_>) =
        paths.into_iter().partition(|p| p.status == IGNORED || kept_apart(&p.path, scope, nested));
    kept.extend(stored(&ambient));
    kept.sort_by(|a, b| a.path.cmp(&b.path));
    kept
}

/// The dirt of the approval baseline's `groups` (see [`recorded`]) now: each group's dirty
/// paths (outside `scope`, the nested repositories and what the baseline records one by one,
/// `apart`), fingerprinted as the snapshot does and folded as the baseline folded them.
/// `members` holds them all; `changed` each group whose fingerprint differs from the one it
/// recorded, with its fingerprint now (`deleted` when none of it is dirty any more). Which of
/// a changed group's members changed cannot be told (only the group's fingerprint was kept),
/// so [`changes_since`] names the group's folder.
#[derive(Debug, Default)]
struct GroupDirt {
    members: BTreeSet<String>,
    changed: BTreeMap<String, String>,
}

fn group_dirt(
    repo: &Repository,
    place: &Place,
    root: &Path,
    groups: &[&BaselinePath],
    apart: impl Fn(&str) -> bool,
) -> Result<GroupDirt, GitFailure> {
    let mut dirt = GroupDirt::default();
    for group in groups {
        let walk = match group.path.as_str() {
            crate::domain::material::WHOLE => outside_runner_dirs(repo, place).0,
            folder => vec![place.git(folder.trim_end_matches('/'))],
        };
        let mut members = Vec::new();
        for (path, status) in scoped_statuses(repo, &walk)? {
            let Some(path) = place.workspace(path.trim_end_matches('/')).filter(|p| !p.is_empty()) else { continue };
            if runner_path(root, path) || apart(path) {
                continue;
            }
            members.push(BaselinePath {
                status: porcelain(status),
                fingerprint: fingerprint(root, path),
                path: path.to_string(),
            });
        }
        let now = crate::domain::material::like(&[(*group).clone()], &members);
        let now = now.into_iter().find(|e| e.status == GROUP && e.path == group.path).map(|e| e.fingerprint);
        if now.as_deref() != Some(group.fingerprint.as_str()) {
            dirt.changed.insert(group.path.clone(), now.unwrap_or_else(|| "deleted".into()));
        }
        dirt.members.extend(members.into_iter().map(|m| m.path));
    }
    Ok(dirt)
}

/// The repository of its own in `folder` of `repo`'s work tree (a clone or `git init` there,
/// not a submodule), which `repo`'s git reports only as the untracked folder, never looking
/// inside: its changes are read through its own git. `None` for anything else.
fn nested_repository(repo: &Repository, folder: &str) -> Option<Repository> {
    let folder = folder.trim_end_matches('/');
    if folder.is_empty() || !plain_relative(folder) {
        return None;
    }
    let full = repo.workdir()?.join(folder);
    if !std::fs::symlink_metadata(&full).is_ok_and(|m| m.is_dir()) {
        return None;
    }
    // A submodule is in the index (its changes are read against the commit it records).
    if repo.index().is_ok_and(|index| index.get_path(Path::new(folder), 0).is_some()) {
        return None;
    }
    let nested = Repository::open(&full).ok()?;
    // Its work tree is that folder (a bare repository has none).
    let same = |a: &Path, b: &Path| a.canonicalize().ok().is_some_and(|a| b.canonicalize().is_ok_and(|b| a == b));
    nested.workdir().is_some_and(|w| same(w, &full)).then_some(nested)
}

/// Why git cannot open the repository of its own that `folder` of `repo`'s work tree seems to
/// hold (a real folder, not a submodule, with a `.git` entry in it): its `.git` without
/// permission, a link loop, a HEAD or config git does not read. `None` when it opens, or when
/// the folder holds no repository of its own ([`nested_repository`]'s other cases).
fn unopened(repo: &Repository, folder: &str) -> Option<String> {
    let folder = folder.trim_end_matches('/');
    if folder.is_empty() || !plain_relative(folder) {
        return None;
    }
    let full = repo.workdir()?.join(folder);
    if !std::fs::symlink_metadata(&full).is_ok_and(|m| m.is_dir())
        || std::fs::symlink_metadata(full.join(".git")).is_err()
    {
        return None;
    }
    if repo.index().is_ok_and(|index| index.get_path(Path::new(folder), 0).is_some()) {
        return None;
    }
    Repository::open(&full).err().map(|e| e.message().to_string())
}

/// Why a nested repository that opens cannot be read: its HEAD names a commit it cannot read
/// (its objects without permission or damaged), so no commit of it, its HEAD at approval
/// included, can be told present or gone. `None` when HEAD's commit reads (or it has none).
fn head_unreadable(repo: &Repository) -> Option<String> {
    let id = repo.head().ok()?.target()?;
    repo.find_commit(id).err().map(|e| format!("its HEAD, commit {id}, cannot be read ({})", e.message()))
}

/// The refusal of a nested repository git cannot read (`why`): its changes would pass unseen
/// as one folder. The hint gives access back (or says to remove it) and, for a baseline
/// already recorded (`recorded`), names `approve --amend`, which records it again once the
/// repository reads or is gone.
fn unreadable_nested(folder: &str, why: &str, recorded: bool) -> GitFailure {
    let shown = scafld_protocol::cli::shell_word(folder);
    let amend = match recorded {
        true => {
            "; to record the approval baseline again once it reads or is gone: `scafld approve <task> --amend --reason \"why\"`"
        }
        false => "",
    };
    GitFailure::Unmet {
        message: format!(
            "the nested git repository `{folder}` cannot be read by git ({why}): what is in it cannot be recorded or shown to a reviewer"
        ),
        hint: format!(
            "make it readable to git again (`git -C {shown} status` shows what git finds; for a permission problem, `chmod -R u+rwX {shown}/.git`) or remove it, then run the command again{amend}"
        ),
    }
}

/// A nested repository's part of the approval snapshot: its HEAD, and its dirty and untracked
/// paths (below `folder`, fingerprinted as the outer ones are), those of the repositories
/// nested in it too.
fn snapshot_nested(
    repo: &Repository,
    folder: &str,
    top: &Path,
    paths: &mut Vec<BaselinePath>,
    heads: &mut BTreeMap<String, Option<String>>,
) -> Result<(), GitFailure> {
    // A HEAD that cannot be read is not "no commit yet": all in it would read as new.
    if let Some(why) = head_unreadable(repo) {
        return Err(unreadable_nested(folder, &why, false));
    }
    heads.insert(folder.to_string(), head_commit(repo).map(|c| c.id().to_string()));
    let statuses = repo.statuses(Some(&mut status_options())).map_err(|e| {
        GitFailure::from(format!("git status failed in the nested repository {folder}: {}", e.message()))
    })?;
    for entry in statuses.iter() {
        let Ok(local) = entry.path() else { continue };
        let local = local.trim_end_matches('/');
        let path = format!("{folder}/{local}");
        paths.push(BaselinePath { status: porcelain(entry.status()), fingerprint: fingerprint(top, &path), path });
        if entry.status().contains(Status::WT_NEW) {
            if let Some(inner) = nested_repository(repo, local) {
                snapshot_nested(&inner, &format!("{folder}/{local}"), top, paths, heads)?;
            } else if let Some(why) = unopened(repo, local) {
                return Err(unreadable_nested(&format!("{folder}/{local}"), &why, false));
            }
        }
    }
    Ok(())
}

/// The content fingerprint of `relative` under `root`, never following a symlink: sha256 of a
/// file's whole content (streamed, so memory stays bounded whatever its size), `deleted`, `symlink:<hash of the
/// target text>`, `special:<kind>`, a nested repository's (submodule's) HEAD and dirt, or
/// `unreadable:<error kind>`.
pub fn fingerprint(root: &Path, relative: &str) -> String {
    let path = root.join(relative);
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return "deleted".into(),
        Err(e) => return format!("unreadable:{:?}", e.kind()),
    };
    let kind = meta.file_type();
    if kind.is_symlink() {
        let target = std::fs::read_link(&path).map(|t| t.display().to_string()).unwrap_or_default();
        return format!("symlink:{:x}", Sha256::digest(target.as_bytes()));
    }
    if kind.is_dir() {
        return match Repository::open(&path) {
            Ok(nested) => format!("repo:{}", nested_digest(&nested)),
            Err(_) => "dir".into(),
        };
    }
    if kind.is_fifo() || kind.is_socket() || kind.is_block_device() || kind.is_char_device() {
        let what = if kind.is_fifo() {
            "fifo"
        } else if kind.is_socket() {
            "socket"
        } else {
            "device"
        };
        return format!("special:{what}");
    }
    match kept_hash(&path, &meta, HashKind::Sha256, || hash_file(&path).map_err(|e| format!("{:?}", e.kind()))) {
        Ok(hash) => hash,
        Err(e) => format!("unreadable:{e}"),
    }
}

/// Files at least this large keep their hashes for the daemon's run ([`kept_hash`]).
const KEPT_FROM: u64 = 8 << 20;

/// Which hash of a file's content: git's blob id or sha256.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum HashKind {
    Blob,
    Sha256,
}

/// What a kept hash holds for: the file (device, inode) and each stat field a write moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// A kept hash's key: the file's device and inode, and which hash.
type KeptKey = (u64, u64, HashKind);

/// The hashes of large files, by device, inode and kind, with the stamp each was read under.
static KEPT_HASHES: std::sync::Mutex<BTreeMap<KeptKey, (Stamp, String)>> = std::sync::Mutex::new(BTreeMap::new());

/// At most this many hashes are kept (past it, they are all forgotten).
const KEPT_HASHES_BOUND: usize = 4096;

/// The hashes of large files read during one call ([`one_call`]), by path, stamp and kind,
/// whether or not the stamp has settled; `None` outside a call.
type CallHashes = BTreeMap<(PathBuf, Stamp, HashKind), String>;

thread_local! {
    static CALL_HASHES: std::cell::RefCell<Option<CallHashes>> = const { std::cell::RefCell::new(None) };
}

/// Run `step` as one call: a large file [`kept_hash`] reads in it is read once whatever its
/// change time, each later read of it in the call (the same path, the same stamp, the same
/// hash) answered from what the first one read. What a call read is dropped at its end: a
/// stamp that has not settled is never trusted across calls. A call within a call is part of
/// it.
pub fn one_call<T>(step: impl FnOnce() -> T) -> T {
    let outer = CALL_HASHES.with(|hashes| {
        let mut hashes = hashes.borrow_mut();
        let outer = hashes.is_some();
        hashes.get_or_insert_with(BTreeMap::new);
        outer
    });
    /// Ends the call when `step` returns or unwinds.
    struct End(bool);
    impl Drop for End {
        fn drop(&mut self) {
            if !self.0 {
                CALL_HASHES.with(|hashes| hashes.borrow_mut().take());
            }
        }
    }
    let _end = End(outer);
    step()
}

/// `hash` of the file at `path` (a regular file, `meta` its stat), whole; for one of
/// [`KEPT_FROM`] or more, the hash read last time while its stamp is unchanged. A hash is kept
/// only when the file's change time, which every write moves and no one can set back, was over
/// a second before the read began (a write within the same clock tick as the last change could
/// leave it as it was) and the stamp did not move while it was read. So a large file in scope
/// is read once per change, not at every `status`, and any write to it is read again. Within
/// one call ([`one_call`]) a large file is read once under a stamp even before it settles.
fn kept_hash(
    path: &Path,
    meta: &std::fs::Metadata,
    kind: HashKind,
    hash: impl FnOnce() -> Result<String, String>,
) -> Result<String, String> {
    if meta.len() < KEPT_FROM {
        return hash();
    }
    let stamp = Stamp::of(meta);
    let key = (stamp.dev, stamp.ino, kind);
    let kept = KEPT_HASHES.lock().ok().and_then(|kept| kept.get(&key).cloned());
    if let Some((at, value)) = kept
        && at == stamp
    {
        return Ok(value);
    }
    let in_call = (path.to_path_buf(), stamp, kind);
    let read = CALL_HASHES.with(|hashes| hashes.borrow().as_ref().and_then(|read| read.get(&in_call).cloned()));
    if let Some(value) = read {
        return Ok(value);
    }
    let began = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let value = hash()?;
    let settled = i64::try_from(began).is_ok_and(|began| stamp.ctime.0 + 1 < began);
    let unmoved = std::fs::symlink_metadata(path).is_ok_and(|after| Stamp::of(&after) == stamp);
    if unmoved {
        CALL_HASHES.with(|hashes| {
            if let Some(read) = hashes.borrow_mut().as_mut() {
                read.insert(in_call, value.clone());
            }
        });
    }
    if settled
        && unmoved
        && let Ok(mut kept) = KEPT_HASHES.lock()
    {
        if kept.len() >= KEPT_HASHES_BOUND {
            kept.clear();
        }
        kept.insert(key, (stamp, value.clone()));
    }
    Ok(value)
}

/// sha256 of a regular file's whole content, streamed through a fixed buffer.
fn hash_file(path: &Path) -> std::io::Result<String> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            return Ok(format!("{:x}", hasher.finalize()));
        }
        hasher.update(&buffer[..n]);
    }
}

/// A nested repository's HEAD and the fingerprints of its dirty paths.
fn nested_digest(repo: &Repository) -> String {
    let mut hasher = Sha256::new();
    hasher.update(head_commit(repo).map(|c| c.id().to_string()).unwrap_or_else(|| "no-head".into()));
    if let (Some(workdir), Ok(statuses)) = (repo.workdir(), repo.statuses(Some(&mut status_options()))) {
        for entry in statuses.iter() {
            // A workspace's runner writes in it (its own, `scafld init` there) are not its change.
            if let Ok(path) = entry.path().map(|p| p.trim_end_matches('/'))
                && !workspace_runner_path(workdir, path)
            {
                hasher.update(format!("\n{path} {}", fingerprint(workdir, path)));
            }
        }
    }
    format!("{:x}", hasher.finalize())
}

/// The two-letter `git status --porcelain` code.
fn porcelain(s: Status) -> String {
    if s.contains(Status::WT_NEW) && !s.intersects(Status::INDEX_NEW) {
        return "??".into();
    }
    let index = if s.contains(Status::INDEX_NEW) {
        'A'
    } else if s.contains(Status::INDEX_MODIFIED) {
        'M'
    } else if s.contains(Status::INDEX_DELETED) {
        'D'
    } else if s.contains(Status::INDEX_RENAMED) {
        'R'
    } else if s.contains(Status::INDEX_TYPECHANGE) {
        'T'
    } else {
        ' '
    };
    let worktree = if s.contains(Status::WT_MODIFIED) {
        'M'
    } else if s.contains(Status::WT_DELETED) {
        'D'
    } else if s.contains(Status::WT_RENAMED) {
        'R'
    } else if s.contains(Status::WT_TYPECHANGE) {
        'T'
    } else if s.contains(Status::WT_NEW) {
        '?'
    } else {
        ' '
    };
    format!("{index}{worktree}")
}

/// What evidence and reviews are bound to: the content of the files in a scope as the working
/// tree holds them, whether committed, staged or neither (equal content, equal digest), and
/// submodule content. Each entry is a [`BaselinePath`] whose `status` holds its kind:
///
/// - `file`: a file or symlink, fingerprinted `<mode>:<git blob id>` (the id git gives the
///   content: a clean tracked file's comes from the index, any other is hashed from the disk,
///   whole whatever its size, streamed; `special:`/`dir`/`repo:` for what is not a file);
/// - `absent`: a path the scope names with nothing on the disk (a task may create it: its
///   appearance changes the material);
/// - `target`: what a symlink in scope resolves to (`inside:<path>`, whose content is then
///   material too, `outside the workspace`, never read, or `missing`);
/// - `submodule`: whether a submodule is checked out (its files are entries of their own).
///
/// A file git ignores is material when the scope names it (or a symlink in scope points at
/// it); below a folder the scope names, git's ignore rules apply (build outputs stay out).
/// `digest` covers every entry; `ignored` names the files read although git ignores them (a
/// git diff passes them over: the review's task changes add them, see [`changes_since`]).
///
/// `entries` is what the digest is computed from; what is kept of it (a ledger `material`
/// event, a review session's guard snapshot) is [`Material::stored`], grouped by folder when
/// large (see [`crate::domain::material`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Material {
    pub digest: String,
    pub entries: Vec<BaselinePath>,
    pub ignored: Vec<String>,
}

impl Material {
    /// The entries as they are kept: every one up to [`STORED_BOUND`], else grouped by folder.
    pub fn stored(&self) -> Vec<BaselinePath> {
        stored(&self.entries)
    }
}

pub use crate::domain::material::{STORED_BOUND, stored};

/// Whether `path` (relative to the workspace at `root`) is in a runner's folder: this
/// workspace's (`.scafld/specs/...`) or another workspace's nested in it
/// (`pkg/inner/.scafld/specs/...`, a monorepo's package with a workspace of its own: its id
/// file is there). What another workspace's runner writes there (its specs moving between
/// folders, its runs and reviews) is its own record, never a change of this workspace's task,
/// as this workspace's own runner folders are not. A folder of that name where no workspace is
/// (a test fixture's copy of one) is files like any other.
fn runner_path(root: &Path, path: &str) -> bool {
    RUNNER_DIRS.iter().any(|dir| path.starts_with(dir)) || workspace_runner_path(root, path)
}

/// Whether `path` (relative to `root`) is in the runner's folders of a workspace at or below
/// `root`, known by its id file: what [`runner_path`] passes over in a nested workspace, for a
/// repository of its own (a submodule, an embedded repository) whose workspace `root` is.
fn workspace_runner_path(root: &Path, path: &str) -> bool {
    let rooted = format!("/{path}");
    RUNNER_DIRS.iter().any(|dir| {
        rooted.match_indices(&format!("/{dir}")).any(|(at, _)| {
            let folder = if at == 0 { "" } else { &path[..at - 1] };
            root.join(folder).join(crate::workspace::layout::ID_FILE).is_file()
        })
    })
}

fn in_scope(path: &str, scope: &[String]) -> bool {
    // `src/` names the same folder as `src`.
    let name = |s: &String| if s.len() > 1 { s.trim_end_matches('/').to_string() } else { s.clone() };
    scope.is_empty()
        || scope
            .iter()
            .map(name)
            .any(|s| path == s || path.starts_with(&format!("{s}/")) || s.starts_with(&format!("{path}/")))
}

/// The material of `scope` (workspace-relative paths; empty means the whole tree but the
/// runner's folders) in the repository containing `root`.
pub fn material(root: &Path, scope: &[String]) -> Result<Material, GitFailure> {
    material_walked(root, scope, true)
}

/// How many rounds of symlinks leading to folders with further symlinks are followed.
const LINK_ROUNDS: usize = 8;

/// [`material`], with the status walk pruned to the scope or (for tests to compare against)
/// over the whole work tree.
fn material_walked(root: &Path, scope: &[String], prune: bool) -> Result<Material, GitFailure> {
    let (repo, place) = placed(root)?;
    let (mut entries, mut ignored) = (Vec::new(), Vec::new());
    collect_material(&repo, &place, "", &place.scope(scope), prune, &mut entries, &mut ignored)?;
    // Symlinks in scope: what they point at inside the workspace is material too (never read
    // outside it). Targets are named paths: their content counts even where git ignores it.
    let inside = root.canonicalize().ok();
    let mut followed = BTreeSet::new();
    let mut checked = BTreeSet::new();
    for _ in 0..LINK_ROUNDS {
        let links: Vec<String> = entries
            .iter()
            .filter(|e| e.status == "file" && e.fingerprint.starts_with(LINK_MODE) && checked.insert(e.path.clone()))
            .map(|e| e.path.clone())
            .collect();
        let mut targets = Vec::new();
        for link in links {
            let target = match link_target(&place.top, inside.as_deref(), &link) {
                Ok(relative) => {
                    if !relative.is_empty() && followed.insert(relative.clone()) {
                        targets.push(place.git(&relative));
                    }
                    format!("inside:{relative}")
                }
                Err(why) => why,
            };
            entries.push(BaselinePath { status: "target".into(), fingerprint: target, path: link });
        }
        if targets.is_empty() {
            break;
        }
        collect_material(&repo, &place, "", &targets, prune, &mut entries, &mut ignored)?;
    }
    // Walked in the work tree, named in the workspace.
    let named = |path: &mut String| match place.workspace(path) {
        Some(inside) => {
            *path = inside.to_string();
            true
        }
        None => false,
    };
    entries.retain_mut(|e| named(&mut e.path));
    ignored.retain_mut(named);
    ignored.sort();
    ignored.dedup();
    entries.sort_by(|a, b| a.path.cmp(&b.path).then_with(|| a.status.cmp(&b.status)));
    entries.dedup();
    let mut hasher = Sha256::new();
    for e in &entries {
        hasher.update(format!("{}\t{}\t{}\n", e.path, e.status, e.fingerprint));
    }
    Ok(Material { digest: format!("{:x}", hasher.finalize()), entries, ignored })
}

/// Where the symlink `link` (relative to `base`) points, relative to `inside` (the workspace,
/// canonically) when it is inside it; else why not.
fn link_target(base: &Path, inside: Option<&Path>, link: &str) -> Result<String, String> {
    match (std::fs::canonicalize(base.join(link)), inside) {
        (Ok(t), Some(inside)) if t.starts_with(inside) => {
            Ok(t.strip_prefix(inside).map(|r| r.display().to_string()).unwrap_or_default())
        }
        (Err(e), ..) if e.kind() == std::io::ErrorKind::NotFound => Err("missing".into()),
        (Err(e), ..) => Err(format!("unreadable:{:?}", e.kind())),
        _ => Err("outside the workspace".into()),
    }
}

/// [`tree_files`] of the working tree for `scope` widened with what its symlinks point at
/// inside the workspace, as the material follows them (so a receipt signs what the evidence
/// was bound to, not a link's text); returns the widened scope with the files.
pub fn tree_files_through_links(root: &Path, mut scope: Vec<String>) -> Result<(Vec<String>, TreeFiles), GitFailure> {
    let inside = root.canonicalize().ok();
    // An entry whose path passes through a link (`self/greet.txt`, `self -> .`) names where
    // that leads as well: signing the link alone would let the file change under the receipt.
    let resolved: Vec<String> = scope
        .iter()
        .filter_map(|entry| link_target(root, inside.as_deref(), entry).ok())
        .map(|target| if target.is_empty() { ".".to_string() } else { target })
        .filter(|target| !scope.contains(target))
        .collect();
    scope.extend(resolved);
    // The whole workspace holds whatever its links point at inside it already.
    if whole_tree(&scope) {
        return Ok((vec![".".into()], tree_files(root, &[], None)?));
    }
    for _ in 0..LINK_ROUNDS {
        let tree = tree_files(root, &scope, None)?;
        let targets: BTreeSet<String> = tree
            .files
            .keys()
            .filter(|file| std::fs::symlink_metadata(root.join(file)).is_ok_and(|m| m.file_type().is_symlink()))
            .filter_map(|file| link_target(root, inside.as_deref(), file).ok())
            .filter(|target| !target.is_empty() && !in_scope(target, &scope))
            .collect();
        if targets.is_empty() {
            return Ok((scope, tree));
        }
        scope.extend(targets);
    }
    let tree = tree_files(root, &scope, None)?;
    Ok((scope, tree))
}

/// Whether git may convert content between the working tree and the index here (`core.autocrlf`
/// or `core.eol` set, or any `.gitattributes`: text, eol, filters such as LFS): then a clean
/// file's index id is of the converted content, and the material reads every file's bytes.
fn content_filters(repo: &Repository, index: &git2::Index) -> bool {
    let config = repo.config().ok();
    let set = |name: &str| config.as_ref().and_then(|c| c.get_string(name).ok()).is_some_and(|v| v != "false");
    // git's attributes from outside the repository: the configured file, else the user's
    // default one, and the system's.
    let home_attributes = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".config")))
        .map(|config| config.join("git/attributes"));
    set("core.autocrlf")
        || set("core.eol")
        || set("core.attributesFile")
        || home_attributes.is_some_and(|file| file.is_file())
        || Path::new("/etc/gitattributes").is_file()
        || repo.path().join("info/attributes").is_file()
        || index.iter().any(|entry| entry.path.ends_with(b".gitattributes"))
}

/// Index entry flags (git's `CE_VALID`, set by `update-index --assume-unchanged`) and extended
/// flags (`CE_SKIP_WORKTREE`, `--skip-worktree`): git's status walk trusts such an entry
/// without looking at the file.
const ASSUME_VALID: u16 = 0x8000;
const SKIP_WORKTREE: u16 = 0x4000;

/// The mode a symlink's material fingerprint starts with (git's mode for one).
const LINK_MODE: &str = "120000:";

/// The material fingerprint of `relative` under `workdir` as the disk holds it: `<mode>:<git
/// blob id>` of a file or symlink (never followed; the whole content, streamed by libgit2 in
/// bounded memory, so a change anywhere in a file of any size is seen), as git would record it; `None` when nothing is there; [`fingerprint`]'s words for a folder
/// (a nested repository), a special file or an unreadable one.
fn content_on_disk(workdir: &Path, relative: &str) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let path = workdir.join(relative);
    let meta = match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => return Some(format!("unreadable:{:?}", e.kind())),
        Ok(meta) => meta,
    };
    if meta.file_type().is_symlink() {
        return Some(match std::fs::read_link(&path) {
            Ok(target) => match Oid::hash_object(ObjectType::Blob, target.as_os_str().as_encoded_bytes()) {
                Ok(id) => format!("{LINK_MODE}{id}"),
                Err(e) => format!("unreadable:{}", e.message()),
            },
            Err(e) => format!("unreadable:{:?}", e.kind()),
        });
    }
    if !meta.is_file() {
        return Some(fingerprint(workdir, relative));
    }
    let mode = file_mode(meta.permissions().mode());
    Some(match blob_id(&path, &meta) {
        Ok(id) => format!("{mode}:{id}"),
        Err(e) => format!("unreadable:{e}"),
    })
}

/// The blob id git would give the regular file at `path` (`meta` its stat), streamed, through
/// [`kept_hash`]: the fingerprints and the packet's changes ask it of one large file in one
/// call, and it is read once for them all.
fn blob_id(path: &Path, meta: &std::fs::Metadata) -> Result<String, String> {
    kept_hash(path, meta, HashKind::Blob, || {
        Oid::hash_file(ObjectType::Blob, path).map(|id| id.to_string()).map_err(|e| e.message().to_string())
    })
}

/// [`blob_id`] of the regular file at `path` as an [`Oid`]; `None` when it is not one or
/// cannot be read.
fn blob_oid(path: &Path) -> Option<Oid> {
    let meta = std::fs::symlink_metadata(path).ok().filter(|m| m.is_file())?;
    blob_id(path, &meta).ok().and_then(|id| Oid::from_str(&id).ok())
}

/// The fingerprint an index entry gives a clean file: the same as [`content_on_disk`] gives
/// the same content.
fn content_in_index(entry: &git2::IndexEntry) -> String {
    format!("{}:{}", file_mode(entry.mode), entry.id)
}

/// git's mode for a file of the unix `mode` (the index's or the disk's): a symlink, an
/// executable or a plain file.
fn file_mode(mode: u32) -> &'static str {
    match mode {
        mode if mode & 0o170000 == 0o120000 => "120000",
        mode if mode & 0o111 != 0 => "100755",
        _ => "100644",
    }
}

/// What libgit2's status walk leaves unchecked of a tracked file where the repository's
/// settings say so (libgit2 takes a value it cannot read as off too): the inode change time
/// with `core.trustctime` off, the executable bit with `core.fileMode` off. A file rewritten in
/// place with its modification time set back keeps its size, inode and mtime; only its change
/// time, which no one can set back, tells. The walk checks every other stat field, and hashes
/// a racily clean file (changed in the tick the index was written); git's `core.checkStat`
/// libgit2 does not read.
#[derive(Debug, Clone, Copy, Default)]
struct Unchecked {
    ctime: bool,
    mode: bool,
}

impl Unchecked {
    fn of(repo: &Repository) -> Unchecked {
        let config = repo.config().ok();
        let off = |name: &str| match config.as_ref().map(|c| c.get_bool(name)) {
            Some(Ok(on)) => !on,
            Some(Err(e)) => e.code() != git2::ErrorCode::NotFound,
            None => true,
        };
        Unchecked { ctime: off("core.trustctime"), mode: off("core.filemode") }
    }

    /// The fingerprint of the tracked file `path` the status walk calls clean, from its index
    /// `entry`: `None` where the entry cannot vouch for the content on the disk, which is then
    /// read like a changed file's. It cannot when git was told not to look at the file
    /// (`--assume-unchanged`, `--skip-worktree`), nor when a field the walk left unchecked
    /// differs from the entry's (the file is looked at only then: with git's defaults this
    /// costs nothing). An executable bit the walk did not check is taken from the disk.
    fn clean(self, workdir: &Path, path: &str, entry: &git2::IndexEntry) -> Option<String> {
        use std::os::unix::fs::MetadataExt;
        if sparse_absent(workdir, path, entry) {
            return Some(content_in_index(entry));
        }
        if entry.flags & ASSUME_VALID != 0 || entry.flags_extended & SKIP_WORKTREE != 0 {
            return None;
        }
        if !self.ctime && !self.mode {
            return Some(content_in_index(entry));
        }
        let meta = std::fs::symlink_metadata(workdir.join(path)).ok()?;
        // As git stores them: seconds and nanoseconds, 32 bits each.
        let changed = (meta.ctime() as i32, meta.ctime_nsec() as u32);
        if self.ctime && changed != (entry.ctime.seconds(), entry.ctime.nanoseconds()) {
            return None;
        }
        let mode =
            if self.mode && meta.is_file() && entry.mode & 0o170000 != 0o120000 { meta.mode() } else { entry.mode };
        Some(format!("{}:{}", file_mode(mode), entry.id))
    }
}

/// Whether the index `entry` of `path` is one a sparse checkout left out of the work tree:
/// flagged skip-worktree with nothing on the disk. git reads such a file as its index entry
/// holds it, unchanged (`git status` is clean), never as deleted; a skip-worktree file that is
/// on the disk is read from there (see [`Unchecked::clean`]).
fn sparse_absent(workdir: &Path, path: &str, entry: &git2::IndexEntry) -> bool {
    entry.flags_extended & SKIP_WORKTREE != 0 && std::fs::symlink_metadata(workdir.join(path)).is_err()
}

/// The stage-0 index entry of `path` in `repo` when a sparse checkout left it out of the work
/// tree ([`sparse_absent`]).
fn sparse_entry(repo: &Repository, index: &git2::Index, path: &str) -> Option<git2::IndexEntry> {
    let workdir = repo.workdir()?;
    index.get_path(Path::new(path), 0).filter(|entry| sparse_absent(workdir, path, entry))
}

/// Whether `path` is a relative path going down only (no `/` first, no `.` or `..`, no NUL).
fn plain_relative(path: &str) -> bool {
    !path.is_empty()
        && !path.contains('\0')
        && Path::new(path).components().all(|c| matches!(c, std::path::Component::Normal(_)))
}

/// The index entries (stage 0) of the paths in `scope` (the whole index when `whole`): each
/// scope path's range, found by its prefix (names are compared without case where the index
/// sorts them so).
fn index_entries(index: &git2::Index, scope: &[String], whole: bool) -> BTreeMap<String, git2::IndexEntry> {
    let mut found = BTreeMap::new();
    let mut take = |entry: git2::IndexEntry| {
        let stage = (entry.flags >> 12) & 0x3;
        if stage == 0 {
            found.insert(String::from_utf8_lossy(&entry.path).into_owned(), entry);
        }
    };
    if whole {
        index.iter().for_each(&mut take);
        return found;
    }
    for path in scope {
        let path = path.trim_end_matches('/');
        if !plain_relative(path) {
            continue;
        }
        let Ok(start) = index.find_prefix(path) else { continue };
        let mut at = start;
        while let Some(entry) = index.get(at) {
            let name = entry.path.as_slice();
            if name.len() < path.len() || !name[..path.len()].eq_ignore_ascii_case(path.as_bytes()) {
                break;
            }
            // The path itself, or a file below it (no allocation per index entry).
            if name.starts_with(path.as_bytes()) && matches!(name.get(path.len()), None | Some(b'/')) {
                take(entry);
            }
            at += 1;
        }
    }
    found
}

/// `prefix` is the outer path of `repo`'s top (a submodule's), empty for the workspace's own
/// repository, whose paths stay work-tree paths here (`place` names the workspace's folder).
fn collect_material(
    repo: &Repository,
    place: &Place,
    prefix: &str,
    scope: &[String],
    prune: bool,
    out: &mut Vec<BaselinePath>,
    ignored: &mut Vec<String>,
) -> Result<(), GitFailure> {
    let workdir = repo.workdir().ok_or("the git repository is bare")?.to_path_buf();
    let entry =
        |path: String, status: &str, fingerprint: String| BaselinePath { status: status.into(), fingerprint, path };
    let full = |path: &str| if prefix.is_empty() { path.to_string() } else { format!("{prefix}/{path}") };
    let local_scope: Vec<String> = scope
        .iter()
        .filter_map(|s| {
            if prefix.is_empty() { Some(s.clone()) } else { s.strip_prefix(&format!("{prefix}/")).map(str::to_string) }
        })
        .collect();
    // The whole of the workspace's folder (the work tree's top, or its folder in a monorepo),
    // or of a submodule.
    let home = if prefix.is_empty() { place.prefix() } else { prefix };
    let whole = scope.is_empty() || scope.iter().any(|s| s == home);
    let scope_here: Vec<String> = match (whole, prefix.is_empty()) {
        (true, true) => place.scope(&[]),
        (true, false) => Vec::new(),
        (false, _) => local_scope.clone(),
    };
    let home_root = place.top.join(place.prefix());
    // In a submodule too: a workspace of its own there keeps its runner writes (`full` path).
    let runner = |path: &str| place.workspace(&full(path)).is_some_and(|p| runner_path(&home_root, p));
    let counts = |path: &str| !runner(path) && in_scope(path, &scope_here);
    // Every dirty or untracked path in scope is read from the disk. The walk is pruned to the
    // scope (a large repository costs what its scope costs); `in_scope` still decides.
    let head_tree = head_commit(repo).and_then(|c| c.tree().ok());
    // A submodule's whole tree is walked whole (`counts` passes over a workspace's runner
    // folders in it).
    let walk = if prune && (prefix.is_empty() || !whole) {
        pruned_walk(repo, place, head_tree.as_ref(), &workdir, &scope_here, whole).map_err(|e| e.under(prefix))?
    } else {
        Vec::new()
    };
    let statuses = scoped_statuses(repo, &walk).map_err(|e| e.under(prefix))?;
    let submodules: BTreeSet<String> =
        repo.submodules().map(|subs| subs.iter().map(|s| s.path().display().to_string()).collect()).unwrap_or_default();
    // Paths read from the disk (a deleted one has no entry), then those with an entry.
    let (mut reported, mut present) = (BTreeSet::new(), BTreeSet::new());
    for (path, _) in &statuses {
        let path = path.trim_end_matches('/');
        if !counts(path) || submodules.contains(path) {
            continue;
        }
        reported.insert(path.to_string());
        // A folder where git knew a file holds files of its own, reported one by one.
        if let Some(content) = content_on_disk(&workdir, path).filter(|c| c != "dir") {
            present.insert(path.to_string());
            out.push(entry(full(path), "file", content));
        }
    }
    // Every clean tracked file in scope: the index holds the id of its content.
    let index = repo.index().map_err(|e| format!("cannot read the git index: {}", e.message()))?;
    let filtered = content_filters(repo, &index);
    let unchecked = Unchecked::of(repo);
    for (path, item) in index_entries(&index, &scope_here, whole) {
        if item.mode == 0o160000 || reported.contains(&path) || !counts(&path) {
            continue;
        }
        // A file whose index entry cannot vouch for its content (see [`Unchecked::clean`]) is
        // read from the disk like a changed one. So is every file where git converts content
        // on its way in (line endings, filters): the index holds the converted content, which
        // a file with other bytes may share.
        let clean = if filtered { None } else { unchecked.clean(&workdir, &path, &item) };
        let content = match clean {
            Some(content) => Some(content),
            None => content_on_disk(&workdir, &path).filter(|c| c != "dir"),
        };
        if let Some(content) = content {
            present.insert(path.clone());
            out.push(entry(full(&path), "file", content));
        }
    }
    // A path the scope names, untracked and unreported (git ignores it): read from the disk
    // all the same; one with nothing on the disk is material by its absence.
    for path in &scope_here {
        let path = path.trim_end_matches('/');
        if path.is_empty() || present.contains(path) || submodules.contains(path) {
            continue;
        }
        // Absolute, or climbing out with `..`: outside the workspace, never read.
        if !plain_relative(path) {
            out.push(entry(full(path), "outside", String::new()));
            continue;
        }
        match content_on_disk(&workdir, path) {
            None => out.push(entry(full(path), "absent", String::new())),
            Some(content) if content != "dir" && !content.starts_with("repo:") => {
                // (Or a nested repository's, which its folder's entry stands for.)
                if repo.is_path_ignored(path).unwrap_or(false) {
                    ignored.push(full(path));
                }
                out.push(entry(full(path), "file", content));
            }
            Some(_) => {}
        }
    }
    // Submodules in scope: checked out or not, and their content, recursively.
    for sub in &submodules {
        if !in_scope(sub, &scope_here) {
            continue;
        }
        let Ok(nested) = Repository::open(workdir.join(sub)) else {
            out.push(entry(full(sub), "submodule", "not checked out".into()));
            continue;
        };
        out.push(entry(full(sub), "submodule", "checked out".into()));
        let nested_prefix = full(sub);
        let nested_scope: Vec<String> = if whole || scope.iter().any(|s| s == &nested_prefix) {
            vec![nested_prefix.clone()]
        } else {
            scope.to_vec()
        };
        collect_material(&nested, place, &nested_prefix, &nested_scope, prune, out, ignored)?;
    }
    Ok(())
}

/// What a status walk pruned to `scope` must visit to report what the whole walk reports in
/// it: the scope's paths, and any folder above one of them that git may report whole: a
/// nested repository (reported as `dir/`, never looked inside), or a name that is not a plain
/// folder on disk or that the index or HEAD holds as a file, a link or a submodule (a folder
/// replaced by a file or a symlink, a file replaced by a folder: reported by its own name).
/// Empty (the whole walk) when a path's name would not be taken literally (see
/// [`literal_walk`]).
fn walk_paths(repo: &Repository, head_tree: Option<&git2::Tree>, workdir: &Path, scope: &[String]) -> Vec<String> {
    // Read only when a scope path has a folder above it.
    let index = std::cell::OnceCell::new();
    let reported_whole = |dir: &Path| {
        let plain_folder = std::fs::symlink_metadata(workdir.join(dir)).is_ok_and(|m| m.is_dir());
        !plain_folder
            || std::fs::symlink_metadata(workdir.join(dir).join(".git")).is_ok()
            // git2 panics on a path the index cannot hold (absolute, `./`, `../`): it holds none.
            || dir.components().all(|c| matches!(c, std::path::Component::Normal(_)))
                && index
                .get_or_init(|| repo.index().ok())
                .as_ref()
                .is_some_and(|index| (0..=3).any(|stage| index.get_path(dir, stage).is_some()))
            || head_tree.is_some_and(|tree| tree.get_path(dir).is_ok_and(|e| e.kind() != Some(ObjectType::Tree)))
    };
    // A scope path's name without its trailing slash: `in_scope` counts a file `conf` in the
    // scope `conf/`, which libgit2 takes for a folder only.
    let mut paths: Vec<String> = scope
        .iter()
        .map(|p| if p.trim_end_matches('/').is_empty() { p } else { p.trim_end_matches('/') }.to_string())
        .collect();
    for path in scope {
        let mut above = Path::new(path).parent();
        while let Some(dir) = above.filter(|d| !d.as_os_str().is_empty()) {
            if reported_whole(dir) {
                paths.push(dir.display().to_string());
            }
            above = dir.parent();
        }
    }
    paths.sort();
    paths.dedup();
    literal_walk(workdir, paths)
}

/// `paths` as the paths of a pruned walk, or empty (the whole walk) when one of them is a
/// folder (a nested repository, a submodule) whose name libgit2 would not match literally:
/// with `disable_pathspec_match` files are matched by name, but a folder git reports whole is
/// matched against the pathspec parsed as a pattern, which drops a name starting with `#`
/// (a comment) or ending in a space and never matches one with glob characters.
fn literal_walk(workdir: &Path, paths: Vec<String>) -> Vec<String> {
    let special = |p: &str| {
        p.starts_with(['#', '!'])
            || p.contains(['*', '?', '[', ']', '\\'])
            || p.starts_with(char::is_whitespace)
            || p.ends_with(char::is_whitespace)
            || p.contains(char::is_control)
    };
    let file = |p: &str| std::fs::symlink_metadata(workdir.join(p)).is_ok_and(|m| m.is_file() || m.is_symlink());
    if paths.iter().any(|p| special(p) && !file(p)) { Vec::new() } else { paths }
}

/// The status of every path a walk of `paths` finds (the whole work tree when empty). A list
/// holding a name and a longer one that extends it with a character sorting before `/` (`src`
/// and `src.rs`, `src-x/f`) is walked in groups that never hold both: libgit2's walk of the
/// index and of a commit tree along such a list loses `src` once it passes the longer name
/// (its pathlist walk steps past the wrong entry), so tracked files below `src/` would go
/// unreported (a deletion lost, an unchanged file reported untracked). Names are compared
/// without case, as a repository that ignores case sorts them.
fn scoped_statuses(repo: &Repository, paths: &[String]) -> Result<Vec<(String, Status)>, GitFailure> {
    let key = |p: &String| p.strip_suffix('/').unwrap_or(p).to_ascii_lowercase();
    let extends = |short: &str, long: &str| {
        long.len() > short.len() && long.starts_with(short) && long.as_bytes()[short.len()] < b'/'
    };
    let mut groups: Vec<Vec<&String>> = Vec::new();
    let mut sorted: Vec<&String> = paths.iter().collect();
    sorted.sort_by_key(|p| key(p));
    for path in sorted {
        let name = key(path);
        let free = groups.iter_mut().find(|group| {
            group.iter().all(|other| {
                let other = key(other);
                !extends(&other, &name) && !extends(&name, &other)
            })
        });
        match free {
            Some(group) => group.push(path),
            None => groups.push(vec![path]),
        }
    }
    if groups.is_empty() {
        groups.push(Vec::new());
    }
    let mut found = BTreeMap::new();
    for group in groups {
        let group: Vec<String> = group.into_iter().cloned().collect();
        let statuses = repo
            .statuses(Some(&mut scoped_status_options(&group)))
            .map_err(|e| format!("git status failed: {}", e.message()))?;
        for entry in statuses.iter() {
            // A name that is not UTF-8 cannot be carried as a path here: never left out in
            // silence (evidence, the gate and a receipt would pass over its content).
            let path = entry.path().map_err(|_| GitFailure::NameNotUtf8(entry.path_bytes().to_vec()))?;
            found.insert(path.to_string(), entry.status());
        }
    }
    // libgit2 reports a file a sparse checkout left out as deleted from the work tree; git
    // calls it unchanged, as its index entry holds it.
    if found.values().any(|status| status.contains(Status::WT_DELETED)) {
        let index = repo.index().map_err(|e| format!("cannot read the git index: {}", e.message()))?;
        found.retain(|path, status| {
            if status.contains(Status::WT_DELETED) && sparse_entry(repo, &index, path).is_some() {
                status.remove(Status::WT_DELETED);
            }
            !status.is_empty()
        });
    }
    Ok(found.into_iter().collect())
}

/// The paths a status walk of `scope` is pruned to: the whole tree but the runner's folders
/// when `whole`, else the scope's own paths (see [`walk_paths`]); empty means the whole walk.
/// `whole` is the workspace's whole folder (never a submodule's, which is walked whole).
fn pruned_walk(
    repo: &Repository,
    place: &Place,
    head_tree: Option<&Tree>,
    workdir: &Path,
    scope: &[String],
    whole: bool,
) -> Result<Vec<String>, GitFailure> {
    if !whole {
        return Ok(walk_paths(repo, head_tree, workdir, scope));
    }
    // Refused as the status walk refuses one further down: a name passed over here would be
    // content no evidence, gate or receipt reads.
    match outside_runner_dirs(repo, place) {
        (_, Some(unnamed)) => Err(GitFailure::NameNotUtf8(unnamed)),
        (walk, None) => Ok(walk),
    }
}

/// The whole workspace but the runner's folders, as the (work-tree) paths of a pruned walk:
/// every name at the workspace's top and in its `.scafld/` that the disk, the index or HEAD
/// has, but `.git` and the runner's folders (whose thousands of specs and run logs never count
/// as task content). Also the first name found there that is not UTF-8 (its bytes), which
/// the paths cannot hold.
fn outside_runner_dirs(repo: &Repository, place: &Place) -> (Vec<String>, Option<Vec<u8>>) {
    let home = place.top.join(place.prefix());
    // A symlink named `.scafld` is reported by its own name, never walked through.
    let scafld_is_dir = std::fs::symlink_metadata(home.join(".scafld")).is_ok_and(|m| m.is_dir());
    let (mut names, mut unnamed) = (BTreeSet::new(), None);
    let mut add = |path: &str| {
        let mut parts = path.split('/');
        match (parts.next(), parts.next()) {
            (None | Some("" | ".git"), _) => {}
            (Some(".scafld"), None) if scafld_is_dir => {}
            (Some(".scafld"), Some(name)) if !name.is_empty() => {
                let path = format!(".scafld/{name}");
                if !runner_path(&home, &format!("{path}/")) {
                    names.insert(path);
                }
            }
            (Some(first), _) => {
                names.insert(first.to_string());
            }
        }
    };
    for (dir, prefix) in [(home.clone(), ""), (home.join(".scafld"), ".scafld/")] {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            match entry.file_name().to_str() {
                Some(name) => add(&format!("{prefix}{name}")),
                // One git ignores is not read by the status walk either.
                None if repo.is_path_ignored(work_tree_path(place, prefix, &entry.file_name())).unwrap_or(false) => {}
                None => unnamed = unnamed.or(Some([prefix.as_bytes(), entry.file_name().as_bytes()].concat())),
            }
        }
    }
    if let Ok(index) = repo.index() {
        for entry in index.iter() {
            if let Some(path) = place.workspace(&String::from_utf8_lossy(&entry.path)) {
                add(path);
            }
        }
    }
    let tree = head_commit(repo).and_then(|c| c.tree().ok());
    if let Some(tree) = tree.and_then(|tree| subtree(repo, tree, place.prefix())) {
        for item in tree.iter() {
            let name = item.name().unwrap_or_default();
            add(name);
            if name == ".scafld"
                && let Ok(sub) = item.to_object(repo).and_then(|o| o.peel_to_tree())
            {
                for child in sub.iter() {
                    add(&format!(".scafld/{}", child.name().unwrap_or_default()));
                }
            }
        }
    }
    let names = literal_walk(&home, names.into_iter().collect());
    (names.iter().map(|name| place.git(name)).collect(), unnamed)
}

/// The work-tree path of `name` in the workspace folder `prefix` (`""` or `.scafld/`), for a
/// name that may not be UTF-8.
fn work_tree_path(place: &Place, prefix: &str, name: &std::ffi::OsStr) -> PathBuf {
    let mut path = PathBuf::from(place.prefix());
    if !prefix.is_empty() {
        path.push(prefix.trim_end_matches('/'));
    }
    path.push(name);
    path
}

/// The tree of the folder `path` in `tree` (`tree` itself for the empty path); `None` when
/// `tree` holds no such folder.
fn subtree<'r>(repo: &'r Repository, tree: Tree<'r>, path: &str) -> Option<Tree<'r>> {
    if path.is_empty() {
        return Some(tree);
    }
    tree.get_path(Path::new(path)).ok()?.to_object(repo).ok()?.into_tree().ok()
}

/// The files of a scope and the sha256 of each one's content: what a receipt signs and what
/// `verify` recomputes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeFiles {
    /// The commit the files were read at (the working tree's HEAD for the working tree).
    pub commit: String,
    pub files: BTreeMap<String, String>,
}

/// Whether `scope` names the whole tree: empty, or holding the top itself (`.` or the empty
/// path, as a receipt's scope may).
fn whole_tree(scope: &[String]) -> bool {
    scope.is_empty() || scope.iter().any(|s| s.is_empty() || s == ".")
}

/// The files of `scope` (workspace-relative paths; the whole tree but `.scafld/` when empty or
/// when it holds `.`):
/// at the commit `at` names, or in the working tree (HEAD's files with every changed and
/// untracked, not ignored, file on top; deleted ones left out). A symlink counts as its target
/// text, as git stores it, so both readings agree on the same content.
pub fn tree_files(root: &Path, scope: &[String], at: Option<&str>) -> Result<TreeFiles, GitFailure> {
    tree_files_walked(root, scope, at, true)
}

/// [`tree_files`], with the tree walk and the status walk pruned to the scope (and never into
/// `.scafld/`), or (for tests to compare against) over the whole tree.
fn tree_files_walked(root: &Path, scope: &[String], at: Option<&str>, prune: bool) -> Result<TreeFiles, GitFailure> {
    let scope = if whole_tree(scope) { &[] } else { scope };
    let (repo, place) = placed(root)?;
    let commit = match at {
        Some(rev) => repo
            .revparse_single(rev)
            .and_then(|o| o.peel_to_commit())
            .map_err(|e| GitFailure::UnknownRevision(unresolved(&repo, rev, &e)))?,
        None => head_commit(&repo).ok_or_else(|| no_head_commit(&repo))?,
    };
    let keep = |path: &str| !path.starts_with(".scafld/") && in_scope(path, scope);
    let mut files = BTreeMap::new();
    let tree = commit.tree().map_err(|e| format!("cannot read the commit's tree: {}", e.message()))?;
    let mut failure = None;
    // The workspace's folder of the commit (none: the commit holds no file of it).
    let files_tree = subtree(&repo, tree.clone(), place.prefix());
    files_tree
        .iter()
        .try_for_each(|files_tree| {
            files_tree.walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
                let path = format!("{dir}{}", entry.name().unwrap_or_default());
                if prune && entry.kind() == Some(ObjectType::Tree) && (path == ".scafld" || !in_scope(&path, scope)) {
                    return git2::TreeWalkResult::Skip;
                }
                if entry.kind() == Some(ObjectType::Blob) && keep(&path) {
                    match repo.find_blob(entry.id()) {
                        Ok(blob) => {
                            files.insert(path, format!("{:x}", Sha256::digest(blob.content())));
                        }
                        Err(e) => failure = Some(format!("cannot read {path}: {}", e.message())),
                    }
                }
                git2::TreeWalkResult::Ok
            })
        })
        .map_err(|e| format!("cannot walk the commit's tree: {}", e.message()))?;
    if let Some(failure) = failure {
        return Err(failure.into());
    }
    if at.is_none() {
        let workdir = place.top.clone();
        // Where git converts content on its way in, a file is signed as git would store it, as
        // a commit holds it: the same content at `verify --target` (see [`Cleaner`]).
        let cleaner = match repo.index() {
            Ok(index) if content_filters(&repo, &index) => Some(Cleaner::open(&workdir)?),
            _ => None,
        };
        // The same pruned walk as the material's (`keep` still decides).
        let whole = scope.is_empty();
        let walked = place.scope(scope);
        let walk = if prune { pruned_walk(&repo, &place, Some(&tree), &workdir, &walked, whole)? } else { Vec::new() };
        let reported: Vec<String> = scoped_statuses(&repo, &walk)?.into_iter().map(|(path, _)| path).collect();
        // And the files the walk calls clean whose index entry cannot vouch for the content
        // on the disk, as the material reads them (see [`Unchecked::clean`]).
        let index = repo.index().map_err(|e| format!("cannot read the git index: {}", e.message()))?;
        let unchecked = Unchecked::of(&repo);
        let reported_set: BTreeSet<&str> = reported.iter().map(String::as_str).collect();
        let unvouched: Vec<String> = index_entries(&index, &walked, whole)
            .into_iter()
            .filter(|(path, entry)| {
                entry.mode != 0o160000
                    && !reported_set.contains(path.as_str())
                    && place.workspace(path).is_some_and(keep)
                    && unchecked.clean(&workdir, path, entry).is_none()
            })
            .map(|(path, _)| path)
            .collect();
        for walked in reported.iter().chain(&unvouched) {
            // Signed by its workspace path (read where git walked it).
            let Some(path) = place.workspace(walked).filter(|path| keep(path)) else { continue };
            let full = workdir.join(walked);
            let content = match std::fs::symlink_metadata(&full) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(format!("cannot read {path}: {e}").into()),
                Ok(meta) if meta.file_type().is_symlink() => Some(
                    std::fs::read_link(&full)
                        .map_err(|e| format!("cannot read {path}: {e}"))?
                        .into_os_string()
                        .into_encoded_bytes(),
                ),
                Ok(meta) if meta.is_file() => {
                    // As git stores it where git converts content (line endings, filters);
                    // else streamed (a signed file may be of any size), and only a regular file.
                    let digest = match &cleaner {
                        Some(cleaner) => {
                            let stored = cleaner.stored(&full).map_err(|e| format!("cannot read {path}: {e}"))?;
                            format!("{:x}", Sha256::digest(&stored))
                        }
                        None => {
                            let mut hasher = Sha256::new();
                            scafld_local::capped::open(&full, "file", u64::MAX).map_err(|e| e.to_string()).and_then(
                                |mut file| {
                                    std::io::copy(&mut file, &mut hasher)
                                        .map_err(|e| format!("cannot read {path}: {e}"))
                                },
                            )?;
                            format!("{:x}", hasher.finalize())
                        }
                    };
                    files.insert(path.to_string(), digest);
                    continue;
                }
                Ok(_) => None,
            };
            match content {
                Some(bytes) => files.insert(path.to_string(), format!("{:x}", Sha256::digest(&bytes))),
                None => files.remove(path),
            };
        }
    }
    Ok(TreeFiles { commit: commit.id().to_string(), files })
}

/// The content git would store for a working-tree file: its bytes through the filters git
/// applies on the way in (`core.autocrlf`, `core.eol`, `.gitattributes` `text`/`eol`/`ident`;
/// libgit2 runs no external filter drivers such as LFS, so those files stay as on disk). A
/// repository of its own, whose object writes go to memory (a mempack backend first in line),
/// so reading never writes into `.git`.
struct Cleaner {
    repo: Repository,
    workdir: PathBuf,
}

/// The repository at `workdir`, opened afresh with its object writes going to memory (a
/// mempack backend first in line): what it stores never reaches `.git`.
fn in_memory(workdir: &Path) -> Result<Repository, String> {
    let fail = |e: git2::Error| format!("cannot read the repository at {}: {}", workdir.display(), e.message());
    let repo = Repository::open(workdir).map_err(fail)?;
    repo.odb().and_then(|odb| odb.add_new_mempack_backend(1000).map(|_| ())).map_err(fail)?;
    Ok(repo)
}

impl Cleaner {
    fn open(workdir: &Path) -> Result<Cleaner, String> {
        let repo = in_memory(workdir)?;
        // libgit2 names files by their real path: the filters are chosen by the path inside it.
        let workdir = repo.workdir().ok_or("the git repository is bare")?.to_path_buf();
        Ok(Cleaner { repo, workdir })
    }

    /// The stored form of the file at `path` (absolute, inside the working tree).
    fn stored(&self, path: &Path) -> Result<Vec<u8>, String> {
        let real = path.canonicalize().map_err(|e| e.to_string())?;
        if !real.starts_with(&self.workdir) {
            // Reached through a link out of the working tree: git would not filter it.
            return std::fs::read(path).map_err(|e| e.to_string());
        }
        let id = self.repo.blob_path(&real).map_err(|e| e.message().to_string())?;
        let blob = self.repo.find_blob(id).map_err(|e| e.message().to_string())?;
        Ok(blob.content().to_vec())
    }
}

/// Workspace files as the commit `rev` names holds them, never the working tree: `verify`'s
/// trust anchor and policy come from the protected commit, not from the change it checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilesAt {
    /// The commit `rev` resolved to.
    pub commit: String,
    /// Each asked-for file's bytes, `None` when the commit has no such file.
    pub files: Vec<Option<Vec<u8>>>,
}

/// The largest file [`files_at`] reads (a keys file or a configuration: kilobytes).
pub const MAX_FILE_AT_BYTES: u64 = 8 << 20;

/// Read `files` (workspace-relative) from the tree of the commit `rev` names, for the workspace
/// at `root` (which may sit below the repository's top folder).
pub fn files_at(root: &Path, rev: &str, files: &[&str]) -> Result<FilesAt, String> {
    let repo = open(root)?;
    unambiguous(&repo, rev)?;
    let commit = repo.revparse_single(rev).and_then(|o| o.peel_to_commit()).map_err(|e| unresolved(&repo, rev, &e))?;
    let tree = commit.tree().map_err(|e| format!("cannot read the tree of {rev}: {}", e.message()))?;
    let place = Place::of(root, &repo)?;
    let mut read = Vec::with_capacity(files.len());
    for file in files {
        let path = PathBuf::from(place.git(file));
        let entry = match tree.get_path(&path) {
            Ok(entry) => entry,
            Err(e) if e.code() == git2::ErrorCode::NotFound => {
                read.push(None);
                continue;
            }
            Err(e) => return Err(format!("cannot read {file} at {rev}: {}", e.message())),
        };
        // Its size first: a commit is anyone's, and a blob is loaded whole.
        let size = repo.odb().and_then(|odb| odb.read_header(entry.id())).map(|(size, _)| size as u64);
        if let Ok(size) = size
            && size > MAX_FILE_AT_BYTES
        {
            return Err(format!(
                "{file} at {rev} is {}, over the {} it may have; it was not read",
                scafld_local::capped::size(size),
                scafld_local::capped::size(MAX_FILE_AT_BYTES)
            ));
        }
        let blob = entry
            .to_object(&repo)
            .and_then(|o| o.peel_to_blob())
            .map_err(|e| format!("{file} at {rev} is not a file: {}", e.message()))?;
        read.push(Some(blob.content().to_vec()));
    }
    Ok(FilesAt { commit: commit.id().to_string(), files: read })
}

/// Where git keeps a copy of a file the working tree lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeptIn {
    /// The HEAD commit's tree (`git checkout HEAD -- <path>` brings it back).
    Head,
    /// Only the index: staged, never committed (`git checkout -- <path>`).
    Index,
    /// Neither, but the tip of another local branch, this one (a switch to a branch made
    /// before the task: `git switch <branch>` goes back to the one that has it).
    Branch(String),
}

impl KeptIn {
    /// The git command that brings `path` (relative to the workspace root, where it runs)
    /// back from here: for a branch, the switch back to it (the task's work is there too).
    pub fn restore_command(&self, path: &str) -> String {
        match self {
            KeptIn::Head => format!("git checkout HEAD -- {path}"),
            KeptIn::Index => format!("git checkout -- {path}"),
            KeptIn::Branch(branch) => format!("git switch {}", scafld_protocol::cli::shell_word(branch)),
        }
    }

    /// What [`KeptIn::restore_command`] does, for a person, read after it ("`cmd` brings
    /// back ..."); for a branch, the way to take the file alone too.
    pub fn source(&self, path: &str) -> String {
        match self {
            KeptIn::Head | KeptIn::Index => "brings back the copy git holds".into(),
            KeptIn::Branch(branch) => {
                let branch = scafld_protocol::cli::shell_word(branch);
                format!(
                    "switches back to branch {branch}, which holds it, as the branch checked out does not; `git checkout {branch} -- {path}` brings the file alone here"
                )
            }
        }
    }
}

/// The first of `paths` (workspace-relative) that git keeps a copy of, HEAD's tree before the
/// index, and where; with neither holding one, the local branch whose tip holds one (the most
/// recently committed such tip). `None` outside a repository, or when git holds none of them.
pub fn kept_copy(root: &Path, paths: &[String]) -> Option<(String, KeptIn)> {
    let (repo, place) = placed(root).ok()?;
    let holds = |tree: &Tree, path: &str| tree.get_path(Path::new(&place.git(path))).is_ok();
    let head = repo.head().ok().and_then(|h| h.peel_to_tree().ok());
    if let Some(path) = paths.iter().find(|p| head.as_ref().is_some_and(|tree| holds(tree, p))) {
        return Some((path.clone(), KeptIn::Head));
    }
    let index = repo.index().ok();
    if let Some(staged) =
        paths.iter().find(|p| index.as_ref().is_some_and(|i| i.get_path(Path::new(&place.git(p)), 0).is_some()))
    {
        return Some((staged.clone(), KeptIn::Index));
    }
    let mut found: Option<(i64, String, String)> = None;
    for (branch, _) in repo.branches(Some(git2::BranchType::Local)).ok()?.flatten() {
        let (Ok(Some(name)), Ok(commit)) = (branch.name(), branch.get().peel_to_commit()) else { continue };
        let Ok(tree) = commit.tree() else { continue };
        let Some(path) = paths.iter().find(|p| holds(&tree, p)) else { continue };
        let when = commit.time().seconds();
        if found.as_ref().is_none_or(|(newest, _, _)| when > *newest) {
            found = Some((when, name.to_string(), path.clone()));
        }
    }
    found.map(|(_, branch, path)| (path, KeptIn::Branch(branch)))
}

/// Refuse a short ref name that names different commits in more than one place git looks
/// (`refs/<rev>`, `refs/tags/<rev>`, `refs/heads/<rev>`, `refs/remotes/<rev>`): git takes a tag
/// before a remote branch, so whoever may push a tag called `origin/main` would choose what
/// a trust anchor read from `origin/main` says.
fn unambiguous(repo: &Repository, rev: &str) -> Result<(), String> {
    if rev.starts_with("refs/") {
        return Ok(());
    }
    let mut found: Vec<(String, Oid)> = Vec::new();
    for place in ["refs/", "refs/tags/", "refs/heads/", "refs/remotes/"] {
        let name = format!("{place}{rev}");
        if let Ok(commit) = repo.revparse_single(&name).and_then(|o| o.peel_to_commit()) {
            found.push((name, commit.id()));
        }
    }
    // An abbreviated commit id that a ref also names: git takes the ref (with a warning).
    let abbreviated = (4..40).contains(&rev.len()) && rev.bytes().all(|b| b.is_ascii_hexdigit());
    if abbreviated
        && let Ok(object) = repo.find_object_by_prefix(rev, None)
        && let Some((name, id)) = found.iter().find(|(_, id)| *id != object.id())
    {
        return Err(format!(
            "{rev:?} is ambiguous: it abbreviates commit {} and names {name} ({id}); pass the full commit id or ref name",
            object.id()
        ));
    }
    if found.windows(2).any(|pair| pair[0].1 != pair[1].1) {
        let names: Vec<&str> = found.iter().map(|(name, _)| name.as_str()).collect();
        return Err(format!(
            "{rev:?} is ambiguous: it names different commits as {}; pass the full ref name (e.g. refs/remotes/{rev})",
            names.join(" and ")
        ));
    }
    Ok(())
}

/// Whether the commit `id` (a full id, as a baseline records it) is gone from the repository
/// at `root`: history rewritten and pruned since it was recorded. `false` when it is there or
/// git cannot tell (the step that needs it then says why).
pub fn commit_gone(root: &Path, id: &str) -> bool {
    let Ok(oid) = Oid::from_str(id) else { return false };
    open(root).is_ok_and(|repo| repo.find_commit(oid).is_err_and(|e| e.code() == git2::ErrorCode::NotFound))
}

/// What steers scafld and git in the workspace at `root` beside its tracked tree, which the
/// material leaves out (the spec folders, files git ignores, git's own folder): every file under
/// `.scafld/` but the runner's run and review records and the receipts scafld mints, and the
/// state of the repository's git directory (wherever it is) and of each submodule's git folder under it (HEAD, refs, config, hooks,
/// info, alternates, an operation under way: git reads them all), this work tree's own only:
/// what another work tree of the repository owns (its HEAD and operations, the branch it has
/// checked out) moves with work done there. Path → content digest (a
/// link by its target), for a guard comparing before and after. A spec counts by its author's
/// text and is keyed by its file name, whatever folder holds it: scafld moving a spec between
/// lifecycle folders, or rewriting its runner-owned lines, is no change.
pub fn control_files(root: &Path) -> BTreeMap<String, String> {
    use std::os::unix::fs::PermissionsExt;
    /// `path`, and what is under it but the `skip`ped folders, into `out`.
    fn add(root: &Path, path: &Path, skip: &[&str], out: &mut BTreeMap<String, String>) {
        let relative = path.strip_prefix(root).unwrap_or(path).display().to_string();
        if skip.contains(&relative.as_str()) {
            return;
        }
        let Ok(meta) = std::fs::symlink_metadata(path) else { return };
        if meta.is_dir() {
            // A folder counts by itself too (an empty `.git/rebase-merge` is an operation),
            // but the spec folders' (scafld makes an archive month when it archives a task).
            if !relative.starts_with(".scafld/specs") {
                out.insert(relative, "dir".into());
            }
            for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
                add(root, &entry.path(), skip, out);
            }
        } else {
            // A spec by its author's text, anything else as the material fingerprints a file
            // (a link by its target), with its mode (a hook made executable is a change).
            let spec = relative.starts_with(".scafld/specs/") && relative.ends_with(".md") && meta.is_file();
            let text = spec
                .then(|| {
                    scafld_local::capped::read_text(path, "spec", crate::domain::spec::budget::MAX_SPEC_BYTES).ok()
                })
                .flatten();
            let (key, digest) = match text {
                Some(text) => {
                    let name = path.file_name().unwrap_or_default().to_string_lossy();
                    (format!(".scafld/specs/**/{name}"), crate::domain::review::spec_guard_fingerprint(&text))
                }
                None => {
                    let digest = fingerprint(root, &relative);
                    (relative, digest)
                }
            };
            let entry = format!("{:o}:{digest}", meta.permissions().mode() & 0o777);
            // Two copies of one spec (a leftover beside it) count together.
            out.entry(key).and_modify(|both: &mut String| *both = format!("{both}+{entry}")).or_insert(entry);
        }
    }
    /// A git folder's state but its object store and index (which git refreshes itself): its
    /// files (HEAD, config, MERGE_HEAD, ...), refs, hooks, info, object alternates and any
    /// operation under way; and each of its submodules' the same way. `others` are what other
    /// work trees of the repository own in it: the folder's own files of the main work tree
    /// (its HEAD, COMMIT_EDITMSG, an operation under way) when this is a linked work tree's
    /// common folder, and the branches other work trees have checked out.
    fn add_git(root: &Path, git: &Path, others: &Others, out: &mut BTreeMap<String, String>) {
        const SHARED: [&str; 4] = ["config", "packed-refs", "shallow", "commondir"];
        for entry in std::fs::read_dir(git).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let file = entry.file_type().is_ok_and(|t| !t.is_dir());
            let own = !others.main_tree_files || SHARED.contains(&name.as_str());
            if file && name != "index" && !name.ends_with(".lock") && own {
                add(root, &entry.path(), &[], out);
            } else if name == "refs" {
                let skip: Vec<PathBuf> = others.branches.iter().map(|b| entry.path().join(b)).collect();
                add_except(root, &entry.path(), &skip, out);
            } else if ["hooks", "info"].contains(&name.as_str())
                || (own && ["rebase-merge", "rebase-apply", "sequencer"].contains(&name.as_str()))
            {
                add(root, &entry.path(), &[], out);
            }
        }
        add(root, &git.join("objects/info"), &[], out);
        for module in std::fs::read_dir(git.join("modules")).into_iter().flatten().flatten() {
            add_git(root, &module.path(), &Others::default(), out);
        }
    }
    /// `path` into `out` as [`add`] does, but the files `skip` names (another work tree's branch).
    fn add_except(root: &Path, path: &Path, skip: &[PathBuf], out: &mut BTreeMap<String, String>) {
        if skip.iter().any(|s| s == path) {
            return;
        }
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.is_dir() => {
                let relative = path.strip_prefix(root).unwrap_or(path).display().to_string();
                out.insert(relative, "dir".into());
                for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
                    add_except(root, &entry.path(), skip, out);
                }
            }
            _ => add(root, path, &[], out),
        }
    }
    /// What other work trees of one repository own in its git folders.
    #[derive(Default)]
    struct Others {
        main_tree_files: bool,
        /// Below `refs/`: `heads/main`.
        branches: Vec<String>,
    }
    /// The branches checked out by the repository's other work trees (below `refs/`).
    fn other_branches(repo: &Repository) -> Vec<String> {
        let head_of = |dir: &Path| -> Option<String> {
            let text = std::fs::read_to_string(dir.join("HEAD")).ok()?;
            text.trim().strip_prefix("ref: ").map(str::to_string)
        };
        let own = head_of(repo.path());
        let mut heads: Vec<String> = Vec::new();
        if repo.is_worktree() {
            heads.extend(head_of(repo.commondir()));
        }
        if let Ok(names) = repo.worktrees() {
            for name in (0..names.len()).filter_map(|i| names.get(i).ok().flatten()) {
                heads.extend(head_of(&repo.commondir().join("worktrees").join(name)));
            }
        }
        heads
            .into_iter()
            .filter(|h| Some(h) != own.as_ref())
            .filter_map(|h| h.strip_prefix("refs/").map(str::to_string))
            .collect()
    }
    let mut out = BTreeMap::new();
    add(root, &root.join(".scafld"), &[".scafld/runs", ".scafld/reviews", ".scafld/receipts"], &mut out);
    // The repository's own git directory, wherever it is (a monorepo package's is at the work
    // tree's top, `--separate-git-dir` puts it elsewhere), and a worktree's common one too.
    // Only this work tree's own git state counts: another work tree's HEAD, its operations
    // and the branch it has checked out move with work done there, none of this workspace's.
    let dirs = match open(root) {
        Ok(repo) => {
            let branches = other_branches(&repo);
            let linked = repo.is_worktree();
            vec![
                (repo.path().to_path_buf(), Others { main_tree_files: false, branches: branches.clone() }),
                (repo.commondir().to_path_buf(), Others { main_tree_files: linked, branches }),
            ]
        }
        Err(_) => vec![(root.join(".git"), Others::default())],
    };
    let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let mut seen = BTreeSet::new();
    for (dir, others) in dirs.iter().filter(|(dir, _)| seen.insert(canonical(dir))) {
        add_git(root, dir, others, &mut out);
    }
    out
}

/// The submodules (workspace-relative paths) of the repository at `root` that `scope` reaches:
/// those an entry names or reaches into (`sub`, `sub/file`), and those it holds whole (an
/// entry above one, or the whole tree). A receipt signs the repository's own files only.
pub fn scoped_submodules(root: &Path, scope: &[String]) -> Result<(Vec<String>, Vec<String>), String> {
    let (repo, place) = placed(root)?;
    let subs: Vec<String> = repo
        .submodules()
        .map(|subs| {
            let paths = subs.iter().map(|s| s.path().display().to_string());
            paths.filter_map(|path| place.workspace(&path).map(str::to_string)).collect()
        })
        .unwrap_or_default();
    let entries: Vec<&str> = scope.iter().map(|s| s.trim_end_matches('/')).collect();
    let whole = whole_tree(scope);
    let (mut named, mut held) = (Vec::new(), Vec::new());
    for sub in subs {
        if entries.iter().any(|e| *e == sub || e.starts_with(&format!("{sub}/"))) {
            named.push(sub);
        } else if whole || entries.iter().any(|e| sub.starts_with(&format!("{e}/"))) {
            held.push(sub);
        }
    }
    Ok((named, held))
}

/// Why `rev` names no commit here; in a shallow clone the commit is most likely beyond its
/// history, and fetching that is the way out.
fn unresolved(repo: &Repository, rev: &str, e: &git2::Error) -> String {
    let shallow = if repo.is_shallow() {
        " (this is a shallow clone, whose history may not reach it: `git fetch --unshallow` fetches the rest)"
    } else {
        ""
    };
    format!("cannot resolve {rev:?} to a commit: {}{shallow}", e.message())
}

/// Whether `ancestor` is `descendant` or one of its ancestors.
pub fn is_ancestor(root: &Path, ancestor: &str, descendant: &str) -> Result<bool, String> {
    let repo = open(root)?;
    let resolve = |rev: &str| {
        unambiguous(&repo, rev)?;
        repo.revparse_single(rev)
            .and_then(|o| o.peel_to_commit())
            .map(|c| c.id())
            .map_err(|e| unresolved(&repo, rev, &e))
    };
    let (a, d) = (resolve(ancestor)?, resolve(descendant)?);
    Ok(a == d || repo.graph_descendant_of(d, a).map_err(|e| e.message().to_string())?)
}

/// How a folder falls short of a clean checkout of a commit (see [`exact_checkout`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unlike {
    /// The commit named does not resolve in the workspace's repository, or that repository
    /// cannot be read.
    Unresolved(String),
    /// The folder is not in a git work tree (or git cannot read it).
    NoCheckout(String),
    /// Its HEAD is another commit (`None`: it has none): the commit wanted, and the one found.
    OtherCommit { wanted: String, found: Option<String> },
    /// The folder is not where the workspace's folder is in that checkout (a folder within it,
    /// or its top folder for a workspace in a subfolder of its repository): that place.
    NotTheWorkspace { expected: std::path::PathBuf },
    /// What differs from that commit's tree: changed, untracked and ignored paths alike (a
    /// command may read any of them), and entries git was told not to look at.
    Differs(Vec<String>),
}

/// Check that `checkout` is a clean checkout of the commit `rev` names in the repository of the
/// workspace at `root`: in a git work tree whose HEAD is that commit, with nothing git would
/// report beside it, untracked and ignored files included, and no index entry flagged
/// `--assume-unchanged` or `--skip-worktree` (git would not look at those files). Returns the
/// commit id.
pub fn exact_checkout(root: &Path, rev: &str, checkout: &Path) -> Result<String, Unlike> {
    let canonical = |path: &Path| std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let (wanted, offset) = {
        let repo = open(root).map_err(Unlike::Unresolved)?;
        unambiguous(&repo, rev).map_err(Unlike::Unresolved)?;
        let commit = repo.revparse_single(rev).and_then(|o| o.peel_to_commit());
        let wanted = commit.map(|c| c.id()).map_err(|e| Unlike::Unresolved(unresolved(&repo, rev, &e)))?;
        // Where the workspace sits in its repository's work tree: the same place in the
        // checkout is where its commands run.
        let top = repo.workdir().map(canonical).unwrap_or_default();
        (wanted, canonical(root).strip_prefix(&top).map(Path::to_path_buf).unwrap_or_default())
    };
    // Opened afresh: the checkout is not a workspace, and its state is read as it is now.
    let repo = Repository::discover(checkout).map_err(|e| Unlike::NoCheckout(e.message().to_string()))?;
    let Some(top) = repo.workdir().filter(|_| !repo.is_bare()) else {
        return Err(Unlike::NoCheckout("its git repository is bare".into()));
    };
    let expected = canonical(top).join(&offset);
    if canonical(checkout) != expected {
        return Err(Unlike::NotTheWorkspace { expected });
    }
    let found = head_commit(&repo).map(|c| c.id());
    if found != Some(wanted) {
        return Err(Unlike::OtherCommit { wanted: wanted.to_string(), found: found.map(|id| id.to_string()) });
    }
    let mut differs = Vec::new();
    let index = repo.index().map_err(|e| Unlike::NoCheckout(e.message().to_string()))?;
    for entry in index.iter() {
        if entry.flags & ASSUME_VALID != 0 || entry.flags_extended & SKIP_WORKTREE != 0 {
            differs.push(format!("{} (flagged for git not to look at)", String::from_utf8_lossy(&entry.path)));
        }
    }
    let mut options = StatusOptions::new();
    options
        .include_untracked(true)
        .recurse_untracked_dirs(false)
        .include_ignored(true)
        .recurse_ignored_dirs(false)
        .exclude_submodules(false);
    let statuses = repo.statuses(Some(&mut options)).map_err(|e| Unlike::NoCheckout(e.message().to_string()))?;
    for entry in statuses.iter().filter(|e| e.status() != Status::CURRENT) {
        let path = String::from_utf8_lossy(entry.path_bytes()).into_owned();
        let how = match entry.status() {
            s if s.contains(Status::IGNORED) => "ignored",
            s if s.contains(Status::WT_NEW) => "untracked",
            _ => "changed",
        };
        differs.push(format!("{path} ({how})"));
    }
    if differs.is_empty() { Ok(wanted.to_string()) } else { Err(Unlike::Differs(differs)) }
}

/// Where the workspace-relative `path` under `root` leads when a symlink on its way (the entry
/// itself, or a folder above it) takes it outside the workspace: the place it reaches there
/// (for a broken link, where its text points). `None` when it stays inside or nothing is there.
/// The material never reads outside the workspace, so such an entry binds a link's text only.
pub fn leads_outside(root: &Path, path: &str) -> Option<PathBuf> {
    if !plain_relative(path) {
        return None;
    }
    let inside = root.canonicalize().ok()?;
    let full = root.join(path);
    let meta = std::fs::symlink_metadata(&full).ok()?;
    let reached = match full.canonicalize() {
        Ok(reached) => reached,
        // A broken link: where its text points, from the folder it is in.
        Err(_) if meta.file_type().is_symlink() => {
            let mut reached = full.parent()?.canonicalize().ok()?;
            for part in std::fs::read_link(&full).ok()?.components() {
                match part {
                    std::path::Component::ParentDir => {
                        reached.pop();
                    }
                    std::path::Component::CurDir => {}
                    part => reached.push(part),
                }
            }
            reached
        }
        Err(_) => return None,
    };
    (!reached.starts_with(&inside)).then_some(reached)
}

/// Whether nothing is at the workspace-relative `path` under `root` (a symlink counts, even a
/// broken one); if so, `Some` of a path there that differs from it only in case, if any.
pub fn missing_path(root: &Path, path: &str) -> Option<Option<String>> {
    if !plain_relative(path) || std::fs::symlink_metadata(root.join(path)).is_ok() {
        return None;
    }
    let mut found = PathBuf::new();
    for part in path.split('/') {
        // Unicode case, not ASCII's alone: `ÉTÉ.txt` for `été.txt` is the same typo.
        let part = part.to_lowercase();
        let names = std::fs::read_dir(root.join(&found)).into_iter().flatten().flatten();
        let same = names.filter_map(|e| e.file_name().into_string().ok()).find(|n| n.to_lowercase() == part);
        match same {
            Some(name) => found.push(name),
            None => return Some(None),
        }
    }
    Some(Some(found.display().to_string()))
}

/// What the mutation guard compares before and after a review: the material of `scope` (the
/// whole tree when empty; committed, working-tree and submodule content) and the fingerprints
/// of `files` (the task's own spec, which the material leaves out), an entry per file. A
/// session keeps it as [`stored`]; `domain::review::mutations` folds the one read after into
/// the stored one's groups.
pub fn guard_snapshot(root: &Path, scope: &[String], files: &[String]) -> Result<Vec<BaselinePath>, String> {
    let mut entries = material(root, scope)?.entries;
    for file in files.iter().filter(|f| !f.is_empty()) {
        entries.push(BaselinePath { status: "file".into(), fingerprint: fingerprint(root, file), path: file.clone() });
    }
    Ok(entries)
}

/// The wall clock now in nanoseconds since the epoch, the clock a file's change time is kept
/// in: taken before a material is read, it is the `since` of [`rewritten_since`].
pub fn clock_ns() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(now.as_nanos()).unwrap_or(i64::MAX)
}

/// The files among `entries` (a material's, an entry per file) that were written, replaced or
/// had their mode changed at or after `since` ([`clock_ns`]): their change time (which no
/// command can set back) says so even when their content is the same again (a branch switched
/// and back, a stash and its pop). A change time is kept by the kernel's coarse clock, never
/// later than the change: a file written before `since` is never named. Paths are relative to
/// the workspace, as a material's are; one gone now is not named (its absence shows in the
/// material).
pub fn rewritten_since(root: &Path, entries: &[BaselinePath], since: i64) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let changed = |path: &str| match std::fs::symlink_metadata(root.join(path)) {
        Ok(meta) => meta.ctime().saturating_mul(1_000_000_000).saturating_add(meta.ctime_nsec()) >= since,
        Err(_) => false,
    };
    let mut out: Vec<String> =
        entries.iter().filter(|e| e.status == "file" && changed(&e.path)).map(|e| e.path.clone()).collect();
    out.sort();
    out.dedup();
    out
}

/// Where git's HEAD stands and what its reflog holds, as one stamp: the target HEAD names and
/// the size, modification time and inode of its reflog. Two equal stamps say no checkout,
/// switch, reset, stash, commit or rebase happened between them (each writes the reflog),
/// even one that left HEAD where it was. `None` outside a repository.
pub fn head_stamp(root: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let repo = open(root).ok()?;
    let target = match repo.find_reference("HEAD") {
        Ok(head) => format!("{:?}{:?}", head.symbolic_target(), head.target()),
        Err(e) => format!("unreadable:{:?}", e.code()),
    };
    let log = match std::fs::metadata(repo.path().join("logs/HEAD")) {
        Ok(meta) => format!("{}:{}:{}:{}", meta.len(), meta.mtime(), meta.mtime_nsec(), meta.ino()),
        Err(e) => format!("{:?}", e.kind()),
    };
    Some(format!("{target} {log}"))
}

/// Paths whose material differs between a record (`before`, as stored: see
/// [`Material::stored`]) and the material read now (`after`, an entry per file, folded into
/// `before`'s groups first): what changed (`<path> (changed|added|removed|link target|submodule)`,
/// a group as `<folder>/`). The digests decide whether anything changed; this only explains it.
/// Each path is exact, as JSON carries it (a name may hold a newline): text for a person shows
/// the list through [`scafld_protocol::text::listed`].
pub fn material_changes(before: &[BaselinePath], after: &[BaselinePath]) -> Vec<String> {
    // Material recorded by an earlier scafld held committed content by tree and blob ids.
    if before.iter().any(|e| matches!(e.status.as_str(), "tree" | "blob" | "commit" | "object")) {
        return vec![
            "files in scope (the evidence was recorded by an earlier scafld, which read them otherwise)".into(),
        ];
    }
    let after = crate::domain::material::like(before, after);
    let key = |e: &BaselinePath| (e.path.clone(), e.status.clone());
    let before_map: BTreeMap<_, _> = before.iter().map(|e| (key(e), e.fingerprint.as_str())).collect();
    let after_map: BTreeMap<_, _> = after.iter().map(|e| (key(e), e.fingerprint.as_str())).collect();
    let mut changed = BTreeSet::new();
    for k in before_map.keys().chain(after_map.keys()) {
        let (old, new) = (before_map.get(k).copied(), after_map.get(k).copied());
        let (path, kind) = k;
        // A named path's absence shows as its file added or removed.
        if old == new || kind == "absent" {
            continue;
        }
        let what = match (kind.as_str(), old, new) {
            ("file" | GROUP, Some(_), Some(_)) => "changed",
            ("file" | GROUP, None, _) => "added",
            ("file" | GROUP, _, None) => "removed",
            ("target", ..) => "link target",
            _ => "submodule",
        };
        changed.insert(format!("{} ({what})", if path.is_empty() { "." } else { path }));
    }
    changed.into_iter().collect()
}

/// A path that changed since the approval baseline, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub path: String,
    /// Its fingerprint now (`deleted` when gone).
    pub fingerprint: String,
}

/// A nested repository (see [`nested_repository`]) whose changes were read through its own
/// git: its folder, and the commit they are read from (its HEAD at approval; `None` when it
/// had none or was not there, so everything in it is new).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NestedRepo {
    pub folder: String,
    pub base: Option<String>,
}

/// Why the changes of a nested repository that was there at approval cannot be read through
/// its own git: there is no commit to read them from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NestedLoss {
    /// The baseline names its folder but not its HEAD then (it was no repository then, or an
    /// older scafld recorded the baseline).
    NotOnRecord,
    /// Its HEAD then, a commit it no longer has (its history rewritten and pruned).
    Gone(String),
    /// Git cannot read it now (why): its `.git` without permission, damaged, its objects
    /// unreadable. Giving access back, or removing it, is the way on, not a new baseline:
    /// one recorded meanwhile could not read it either.
    Unreadable(String),
}

/// A nested repository of the approval baseline whose changes since cannot be read
/// ([`lost_nested`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostNested {
    pub folder: String,
    pub loss: NestedLoss,
}

impl std::fmt::Display for LostNested {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.loss {
            NestedLoss::NotOnRecord => write!(
                f,
                "the nested git repository `{}`'s HEAD at approval is not on record (it was no repository then, or the baseline was recorded by an older scafld)",
                self.folder
            ),
            NestedLoss::Gone(id) => write!(
                f,
                "the nested git repository `{}`'s HEAD at approval, commit {id}, is not in it any more (history rewritten and pruned?)",
                self.folder
            ),
            NestedLoss::Unreadable(why) => {
                write!(f, "the nested git repository `{}` cannot be read by git ({why})", self.folder)
            }
        }
    }
}

/// The nested repositories of the approval baseline (`baseline`'s paths that hold one now,
/// with their HEADs then, `heads`) whose changes since approval cannot be read: the baseline
/// does not say their HEAD then, or they no longer have it. Their changes would otherwise pass
/// unseen as one changed folder, so [`changes_since`] refuses while there is any.
pub fn lost_nested(
    root: &Path,
    baseline: &[BaselinePath],
    heads: &BTreeMap<String, Option<String>>,
) -> Result<Vec<LostNested>, String> {
    let (repo, place) = placed(root)?;
    Ok(lost_in(&repo, &place, baseline, heads))
}

fn lost_in(
    repo: &Repository,
    place: &Place,
    baseline: &[BaselinePath],
    heads: &BTreeMap<String, Option<String>>,
) -> Vec<LostNested> {
    let folders: BTreeSet<&str> = baseline.iter().map(|p| p.path.trim_end_matches('/')).collect();
    let mut lost: Vec<LostNested> = Vec::new();
    for folder in folders {
        // One inside a repository already lost is read with it (as new, once amended).
        if lost.iter().any(|l| folder.starts_with(&format!("{}/", l.folder))) {
            continue;
        }
        let Some(inner) = nested_repository(repo, &place.git(folder)) else {
            if let Some(why) = unopened(repo, &place.git(folder)) {
                lost.push(LostNested { folder: folder.to_string(), loss: NestedLoss::Unreadable(why) });
            }
            continue;
        };
        if let Some(why) = head_unreadable(&inner) {
            lost.push(LostNested { folder: folder.to_string(), loss: NestedLoss::Unreadable(why) });
            continue;
        }
        let loss = match heads.get(folder) {
            None => NestedLoss::NotOnRecord,
            Some(None) => continue,
            Some(Some(id)) => {
                let gone = Oid::from_str(id)
                    .is_ok_and(|oid| inner.find_commit(oid).is_err_and(|e| e.code() == git2::ErrorCode::NotFound));
                if !gone {
                    continue;
                }
                NestedLoss::Gone(id.clone())
            }
        };
        lost.push(LostNested { folder: folder.to_string(), loss });
    }
    lost
}

/// What differs from the approval baseline ([`changes_since`]).
#[derive(Debug, Default)]
pub struct Since {
    pub changes: Vec<Change>,
    /// The nested repositories whose changed files are among `changes`, one by one.
    pub nested: Vec<NestedRepo>,
}

/// Every path that differs from the approval baseline: the diff from the baseline HEAD's tree
/// to the working tree (committed or not, inside submodules too, and inside each nested
/// repository from its HEAD at approval, `nested`), and the files git ignores that the
/// material reads (`ignored`, [`Material::ignored`]), without the baseline's own dirt when it
/// is unchanged, plus baseline dirt that changed since (even back to HEAD).
pub fn changes_since(
    root: &Path,
    base_head: Option<&str>,
    baseline: &[BaselinePath],
    nested: &BTreeMap<String, Option<String>>,
    ignored: &[String],
    scope: &[String],
) -> Result<Since, GitFailure> {
    let (repo, place) = placed(root)?;
    let base_tree = base_tree(&repo, base_head)?;
    if let Some(lost) = lost_in(&repo, &place, baseline, nested).first() {
        if let NestedLoss::Unreadable(why) = &lost.loss {
            return Err(unreadable_nested(&lost.folder, why, true));
        }
        return Err(GitFailure::Unmet {
            message: format!(
                "{lost}: what changed in it since approval cannot be read, so it cannot be shown to a reviewer"
            ),
            hint: format!(
                "record a new baseline: `scafld approve <task> --amend --reason \"why\"` (everything in `{}` is then read as new since approval), or bring the commit back into it (`git -C {} fetch` it from a remote that has it)",
                lost.folder,
                scafld_protocol::cli::shell_word(&lost.folder)
            ),
        });
    }
    let mut walked = BTreeSet::new();
    diff_paths(&repo, base_tree.as_ref(), "", &mut walked)?;
    // Named in the workspace; a change elsewhere in the work tree is not the workspace's.
    let mut paths: BTreeSet<String> =
        walked.iter().filter_map(|path| place.workspace(path).filter(|p| !p.is_empty()).map(str::to_string)).collect();
    let read = nested_changes(&repo, &place, baseline, nested, &mut paths)?;
    paths.extend(ignored.iter().cloned());
    let (groups, base_dirt): (Vec<&BaselinePath>, Vec<&BaselinePath>) =
        baseline.iter().partition(|p| p.status == GROUP);
    let base_dirt: BTreeMap<&str, &str> = base_dirt.iter().map(|p| (p.path.as_str(), p.fingerprint.as_str())).collect();
    paths.extend(base_dirt.keys().map(|p| p.to_string()));
    // Ambient dirt recorded grouped: a group whose members are as they were is dirt then, all
    // of it; a changed one is named by its folder (which of its members changed is not known:
    // listing them would show untouched dirt as changes and miss a member gone since). A path
    // that is no dirty member of a group (a change committed there) is read as any other.
    let apart = |path: &str| base_dirt.contains_key(path) || kept_apart(path, scope, nested);
    let dirt = group_dirt(&repo, &place, root, &groups, apart)?;
    let mut changes = Vec::new();
    for path in paths {
        // A nested repository read through its own git is its changed files, not its folder.
        if runner_path(root, &path) || read.iter().any(|n| n.folder == path.trim_end_matches('/')) {
            continue;
        }
        if dirt.members.contains(path.trim_end_matches('/')) {
            continue; // grouped dirt: its group says whether it changed
        }
        let now = fingerprint(root, &path);
        if base_dirt.get(path.as_str()).is_some_and(|before| *before == now) {
            continue; // dirty at approval and untouched since
        }
        changes.push(Change { path, fingerprint: now });
    }
    changes.extend(dirt.changed.into_iter().map(|(path, fingerprint)| Change { path, fingerprint }));
    changes.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Since { changes, nested: read })
}

/// Replace each folder among `paths` that holds a nested repository by what differs in it
/// since approval: the diff from its HEAD then (`heads`, recorded with the baseline) to its
/// working tree, staged, unstaged and untracked, the repositories nested in it too. One there
/// at approval whose HEAD then is not known (a baseline recorded before they were) or gone
/// from it, or one git cannot read, is refused, never left a whole folder whose changes pass
/// unseen ([`lost_nested`] names the first kind beforehand). Returns the repositories read.
fn nested_changes(
    repo: &Repository,
    place: &Place,
    baseline: &[BaselinePath],
    heads: &BTreeMap<String, Option<String>>,
    paths: &mut BTreeSet<String>,
) -> Result<Vec<NestedRepo>, GitFailure> {
    let mut read: Vec<NestedRepo> = Vec::new();
    // `paths` are workspace paths: each is looked up in the work tree through the place.
    let folder_at = |p: &str| {
        p.ends_with('/')
            || repo.workdir().is_some_and(|w| std::fs::symlink_metadata(w.join(place.git(p))).is_ok_and(|m| m.is_dir()))
    };
    let mut pending: Vec<String> = paths.iter().filter(|p| folder_at(p)).cloned().collect();
    while let Some(reported) = pending.pop() {
        let folder = reported.trim_end_matches('/').to_string();
        let Some(inner) = nested_at(repo, place, &read, &folder) else {
            // One git cannot open (made after approval, or below one read) is refused too.
            if let Some(why) = unopened_at(repo, place, &read, &folder) {
                return Err(unreadable_nested(&folder, &why, true));
            }
            continue;
        };
        let unread = |why: String| {
            GitFailure::Unreadable(format!(
                "the changes in the nested git repository `{folder}` since approval cannot be read: {why}"
            ))
        };
        let base = match heads.get(&folder) {
            Some(head) => head.clone(),
            // Not there at approval: all of it is new.
            None if !baseline.iter().any(|p| p.path == folder) => None,
            None => return Err(unread("its HEAD at approval is not on record".into())),
        };
        let tree = match &base {
            Some(id) => Some(
                Oid::from_str(id)
                    .and_then(|oid| inner.find_commit(oid))
                    .and_then(|c| c.tree())
                    .map_err(|e| unread(format!("its commit {id}: {}", e.message())))?,
            ),
            None => None,
        };
        let mut found = BTreeSet::new();
        diff_paths(&inner, tree.as_ref(), &folder, &mut found).map_err(unread)?;
        paths.remove(&reported);
        pending.extend(found.iter().filter(|p| folder_at(p)).cloned());
        paths.extend(found);
        read.push(NestedRepo { folder, base });
    }
    read.sort_by(|a, b| a.folder.cmp(&b.folder));
    Ok(read)
}

/// The nested repository in the workspace folder `folder` (of the workspace's repository
/// `top`, where the workspace sits at `place`), found below the nested repositories already
/// `read` when it is in one of them.
fn nested_at(top: &Repository, place: &Place, read: &[NestedRepo], folder: &str) -> Option<Repository> {
    let holder = read.iter().filter(|n| folder.starts_with(&format!("{}/", n.folder))).max_by_key(|n| n.folder.len());
    match holder {
        None => nested_repository(top, &place.git(folder)),
        Some(n) => {
            let outer = Repository::open(top.workdir()?.join(place.git(&n.folder))).ok()?;
            nested_repository(&outer, &folder[n.folder.len() + 1..])
        }
    }
}

/// [`unopened`] for the workspace folder `folder`, below the nested repositories already `read`
/// as [`nested_at`] looks.
fn unopened_at(top: &Repository, place: &Place, read: &[NestedRepo], folder: &str) -> Option<String> {
    let holder = read.iter().filter(|n| folder.starts_with(&format!("{}/", n.folder))).max_by_key(|n| n.folder.len());
    match holder {
        None => unopened(top, &place.git(folder)),
        Some(n) => {
            let outer = Repository::open(top.workdir()?.join(place.git(&n.folder))).ok()?;
            unopened(&outer, &folder[n.folder.len() + 1..])
        }
    }
}

fn base_tree<'r>(repo: &'r Repository, base_head: Option<&str>) -> Result<Option<Tree<'r>>, GitFailure> {
    match base_head {
        Some(id) => {
            let oid = Oid::from_str(id).map_err(|e| format!("baseline HEAD {id}: {}", e.message()))?;
            let commit = repo.find_commit(oid).map_err(|e| match e.code() {
                git2::ErrorCode::NotFound => GitFailure::Unmet {
                    message: format!(
                        "the approval baseline's commit {id} is not in the repository any more (history rewritten and pruned?): what changed since approval cannot be read"
                    ),
                    hint: "record a new baseline at HEAD: `scafld approve <task> --amend --reason \"why\"` (or bring the commit back: `git fetch` it from a remote that has it)".into(),
                },
                _ => GitFailure::Unreadable(format!("cannot read the approval baseline's commit {id}: {}", e.message())),
            })?;
            Ok(Some(commit.tree().map_err(|e| e.message().to_string())?))
        }
        None => Ok(None),
    }
}

fn diff_options() -> git2::DiffOptions {
    let mut options = git2::DiffOptions::new();
    options.include_untracked(true).recurse_untracked_dirs(true).show_untracked_content(true).ignore_submodules(false);
    options
}

/// Paths that differ between `tree` and the working tree of `repo`, recursing into submodules
/// (against the commit the tree records for them).
fn diff_paths(
    repo: &Repository,
    tree: Option<&Tree<'_>>,
    prefix: &str,
    out: &mut BTreeSet<String>,
) -> Result<(), String> {
    let diff = repo
        .diff_tree_to_workdir_with_index(tree, Some(&mut diff_options()))
        .map_err(|e| format!("git diff failed: {}", e.message()))?;
    let workdir = repo.workdir().map(Path::to_path_buf);
    let join = |p: &str| if prefix.is_empty() { p.to_string() } else { format!("{prefix}/{p}") };
    let index = repo.index().map_err(|e| format!("cannot read the git index: {}", e.message()))?;
    for delta in diff.deltas() {
        let Some(path) = delta.new_file().path().or_else(|| delta.old_file().path()) else { continue };
        let path = path.display().to_string();
        // A file a sparse checkout left out is its index entry: a change only when that
        // differs from the tree.
        if delta.status() == git2::Delta::Deleted
            && sparse_entry(repo, &index, &path).is_some_and(|entry| entry.id == delta.old_file().id())
        {
            continue;
        }
        let submodule =
            delta.new_file().mode() == git2::FileMode::Commit || delta.old_file().mode() == git2::FileMode::Commit;
        if let (true, Some(workdir)) = (submodule, &workdir)
            && let Ok(nested) = Repository::open(workdir.join(&path))
        {
            let recorded = delta.old_file().id();
            let nested_tree =
                if recorded.is_zero() { None } else { nested.find_commit(recorded).ok().and_then(|c| c.tree().ok()) };
            diff_paths(&nested, nested_tree.as_ref(), &join(&path), out)?;
            continue;
        }
        out.insert(join(&path));
    }
    // A submodule whose gitlink did not move may still have changed content.
    if let (Ok(subs), Some(workdir)) = (repo.submodules(), &workdir) {
        for sub in subs.iter() {
            let path = sub.path().display().to_string();
            if out.iter().any(|p| p.starts_with(&format!("{}/", join(&path)))) {
                continue;
            }
            if let Ok(nested) = Repository::open(workdir.join(&path)) {
                let recorded = tree.and_then(|t| t.get_path(Path::new(&path)).ok()).map(|e| e.id());
                let nested_tree = recorded.and_then(|id| nested.find_commit(id).ok()).and_then(|c| c.tree().ok());
                let before = out.len();
                diff_paths(&nested, nested_tree.as_ref(), &join(&path), out)?;
                if out.len() > before {
                    out.remove(&join(&path));
                }
            }
        }
    }
    Ok(())
}

/// A unified diff of `paths` between the baseline HEAD (or HEAD) and the working tree,
/// submodule content included, and the content of the `nested` repositories [`changes_since`]
/// read, each from its own base; untracked files are shown whole. Empty when there is nothing.
pub fn diff(root: &Path, base_head: Option<&str>, nested: &[NestedRepo], paths: &[String]) -> Result<String, String> {
    if paths.is_empty() {
        return Ok(String::new());
    }
    let (repo, place) = placed(root)?;
    let tree = match base_head {
        Some(_) => base_tree(&repo, base_head).map_err(|e| e.to_string())?,
        None => repo.head().ok().and_then(|h| h.peel_to_tree().ok()),
    };
    // Each path belongs to the innermost nested repository holding it, if any.
    let holder = |path: &str| {
        nested.iter().filter(|n| path.starts_with(&format!("{}/", n.folder))).max_by_key(|n| n.folder.len())
    };
    let own: Vec<String> = paths.iter().filter(|p| holder(p).is_none()).map(|path| place.git(path)).collect();
    let mut text = if own.is_empty() { String::new() } else { patch_of(&repo, &place, tree.as_ref(), "", &own)? };
    for n in nested {
        let its: Vec<String> = paths.iter().filter(|p| holder(p) == Some(n)).map(|path| place.git(path)).collect();
        if its.is_empty() {
            continue;
        }
        let inner = Repository::open(root.join(&n.folder))
            .map_err(|e| format!("cannot open the nested repository {}: {}", n.folder, e.message()))?;
        let tree = match &n.base {
            Some(id) => Some(
                Oid::from_str(id)
                    .and_then(|oid| inner.find_commit(oid))
                    .and_then(|c| c.tree())
                    .map_err(|e| format!("the nested repository {}: commit {id}: {}", n.folder, e.message()))?,
            ),
            None => None,
        };
        text.push_str(&patch_of(&inner, &place, tree.as_ref(), &place.git(&n.folder), &its)?);
    }
    Ok(text)
}

/// How a patch of `repo` (whose top is at the work-tree path `prefix`, empty for the
/// workspace's own repository) names its files: (what its labels start with, what the
/// workspace calls that).
fn labels(place: &Place, prefix: &str) -> (String, String) {
    match place.workspace(prefix) {
        _ if prefix.is_empty() => (place.label(), String::new()),
        Some("") | None => (String::new(), String::new()),
        Some(inside) => (String::new(), format!("{inside}/")),
    }
}

/// The patch of `paths` (work-tree paths) in `repo`, whose top is at `prefix`.
fn patch_of(
    repo: &Repository,
    place: &Place,
    tree: Option<&Tree<'_>>,
    prefix: &str,
    paths: &[String],
) -> Result<String, String> {
    let (from, to) = labels(place, prefix);
    let local: Vec<&str> = paths
        .iter()
        .filter_map(|p| if prefix.is_empty() { Some(p.as_str()) } else { p.strip_prefix(&format!("{prefix}/")) })
        .collect();
    // libgit2 prints no patch for a file git ignores: those (named by the scope, see
    // [`Material::ignored`]) are shown apart, as added files.
    let (ignored, local): (Vec<&str>, Vec<&str>) =
        local.into_iter().partition(|path| ignored_file(repo, Path::new(path)));
    // A file a sparse checkout left out is as its index entry holds it, never deleted: its
    // change is the one from the tree to the index, whatever its size or content.
    let index = repo.index().map_err(|e| format!("cannot read the git index: {}", e.message()))?;
    let (mut large_text, mut sparse, mut rest) = (String::new(), Vec::new(), Vec::new());
    for path in local {
        match sparse_entry(repo, &index, path) {
            Some(entry) => {
                let sides = Sides { before: tree_side(repo, tree, path), after: index_side(repo, &entry) };
                match sides.over(MAX_SHOWN) {
                    true => large_text.push_str(&large_change(repo, tree, path, &sides, Some(entry.id), &from, &to)),
                    false => sparse.push(path),
                }
            }
            None => rest.push(path),
        }
    }
    // A file over [`MAX_SHOWN`] on either side is named with its sizes, never read for a
    // patch: libgit2 would hold both sides whole in memory to diff them (and past its
    // big-file threshold names a new one `/dev/null` on both sides).
    let mut small = Vec::new();
    for path in rest {
        match sides(repo, tree, path) {
            sides if sides.over(MAX_SHOWN) => {
                // Read whole (streamed) only to hash it when both sides have the same size.
                let same_size = sides.before.zip(sides.after).is_some_and(|((old, _), (new, _))| old == new);
                let now = match same_size {
                    true => repo.workdir().and_then(|w| blob_oid(&w.join(path))),
                    false => None,
                };
                large_text.push_str(&large_change(repo, tree, path, &sides, now, &from, &to))
            }
            _ => small.push(path),
        }
    }
    let local = small;
    // A text file `.gitattributes` marks `-diff` (a lock file) is shown as text all the same:
    // the reviewer must see the change, and libgit2 would not read it to name its new side.
    let (as_text, local): (Vec<&str>, Vec<&str>) =
        local.into_iter().partition(|path| marked_binary(repo, path) && text_both_sides(repo, tree, path));
    // One that really is binary is a binary change of its path: libgit2 never reads it, and
    // would name its new side `/dev/null`, as if it were deleted.
    let (binary, local): (Vec<&str>, Vec<&str>) = local.into_iter().partition(|path| marked_binary(repo, path));
    let mut text: String = binary.iter().map(|path| binary_change(repo, tree, path, &from, &to)).collect();
    text.push_str(&large_text);
    if !sparse.is_empty() {
        let mut options = diff_options();
        options.disable_pathspec_match(true);
        for path in &sparse {
            options.pathspec(path);
        }
        let diff = repo
            .diff_tree_to_index(tree, Some(&index), Some(&mut options))
            .map_err(|e| format!("git diff failed: {}", e.message()))?;
        text.push_str(&patch(&diff, &from, &to)?);
    }
    for (paths, force_text) in [(local, false), (as_text, true)] {
        if paths.is_empty() {
            continue;
        }
        let mut options = diff_options();
        options.disable_pathspec_match(true).force_text(force_text);
        for path in &paths {
            options.pathspec(path);
        }
        let diff = repo
            .diff_tree_to_workdir_with_index(tree, Some(&mut options))
            .map_err(|e| format!("git diff failed: {}", e.message()))?;
        text.push_str(&patch(&diff, &from, &to)?);
    }
    if !ignored.is_empty() {
        text.push_str(&ignored_patch(repo, tree, &to, &ignored, &from)?);
    }
    // Paths inside submodules: their own diff, against the commit the tree records.
    if let (Ok(subs), Some(workdir)) = (repo.submodules(), repo.workdir()) {
        for sub in subs.iter() {
            let path = sub.path().display().to_string();
            let full = if prefix.is_empty() { path.clone() } else { format!("{prefix}/{path}") };
            if !paths.iter().any(|p| p.starts_with(&format!("{full}/"))) {
                continue;
            }
            let Ok(nested) = Repository::open(workdir.join(&path)) else { continue };
            let recorded = tree.and_then(|t| t.get_path(Path::new(&path)).ok()).map(|e| e.id());
            let nested_tree = recorded.and_then(|id| nested.find_commit(id).ok()).and_then(|c| c.tree().ok());
            text.push_str(&patch_of(&nested, place, nested_tree.as_ref(), &full, paths)?);
        }
    }
    Ok(text)
}

/// The header of a binary file's change between `tree` and the work tree (empty when it did
/// not change), as git names it: `/dev/null` only for a side where it is not there. Labels
/// starting `from` start `to` instead, as [`patch`] makes them.
fn binary_change(repo: &Repository, tree: Option<&Tree<'_>>, path: &str, from: &str, to: &str) -> String {
    let before = tree.and_then(|t| t.get_path(Path::new(path)).ok()).map(|e| e.id());
    let full = repo.workdir().map(|w| w.join(path));
    let after = full.and_then(|f| blob_oid(&f));
    if before == after {
        return String::new();
    }
    let named = format!("{to}{}", path.strip_prefix(from).unwrap_or(path));
    let side = |id: Option<Oid>, label: &str| match id {
        Some(_) => format!("{label}/{named}"),
        None => "/dev/null".to_string(),
    };
    let short = |id: Option<Oid>| id.map_or_else(|| "0000000".to_string(), |id| id.to_string()[..7].to_string());
    format!(
        "diff --git a/{named} b/{named}\nindex {}..{}\nBinary files {} and {} differ\n",
        short(before),
        short(after),
        side(before, "a"),
        side(after, "b")
    )
}

/// The sizes of a file's two sides in a diff: in the tree (a blob's size, read from its
/// header, never the blob) and in the work tree (a regular file's length); `None` where it is
/// not there (or is not a file: a symlink or a submodule is never large).
#[derive(Debug, Clone, Copy)]
struct Sides {
    before: Option<(u64, i32)>,
    after: Option<(u64, u32)>,
}

impl Sides {
    fn over(&self, cap: u64) -> bool {
        self.before.is_some_and(|(len, _)| len > cap) || self.after.is_some_and(|(len, _)| len > cap)
    }
}

/// The tree's side of `path` (a blob's size, read from its header, and its mode).
fn tree_side(repo: &Repository, tree: Option<&Tree<'_>>, path: &str) -> Option<(u64, i32)> {
    tree.and_then(|t| t.get_path(Path::new(path)).ok()).filter(|entry| entry.kind() == Some(ObjectType::Blob)).and_then(
        |entry| {
            let (len, _) = repo.odb().ok()?.read_header(entry.id()).ok()?;
            Some((len as u64, entry.filemode()))
        },
    )
}

/// The index's side of a file a sparse checkout left out (its blob's size and its mode):
/// what the file is, though it is not on disk.
fn index_side(repo: &Repository, entry: &git2::IndexEntry) -> Option<(u64, u32)> {
    let (len, _) = repo.odb().ok()?.read_header(entry.id).ok()?;
    Some((len as u64, entry.mode))
}

/// [`Sides`] of `path` between `tree` and `repo`'s work tree.
fn sides(repo: &Repository, tree: Option<&Tree<'_>>, path: &str) -> Sides {
    let before = tree_side(repo, tree, path);
    let after =
        repo.workdir().and_then(|w| std::fs::symlink_metadata(w.join(path)).ok()).filter(|m| m.is_file()).map(|meta| {
            use std::os::unix::fs::PermissionsExt;
            (meta.len(), meta.permissions().mode())
        });
    Sides { before, after }
}

/// The change of a file too large to show (`sides` over [`MAX_SHOWN`]), as an added, deleted
/// or modified file of its path with its sizes, and its mode changed as git says it (`old
/// mode`/`new mode`; empty when neither changed). `now` is its blob id now where both sides
/// have the same size (the caller hashes the work tree's file, streamed, never held in
/// memory; a sparse entry's is its index entry's): the same id and mode is no change. Labels
/// starting `from` start `to` instead, as [`patch`] makes them.
fn large_change(
    repo: &Repository,
    tree: Option<&Tree<'_>>,
    path: &str,
    sides: &Sides,
    now: Option<Oid>,
    from: &str,
    to: &str,
) -> String {
    let named = format!("{to}{}", path.strip_prefix(from).unwrap_or(path));
    let size = scafld_local::capped::size;
    let shown = size(MAX_SHOWN);
    let (head, what) = match (sides.before, sides.after) {
        (None, None) => return String::new(),
        (None, Some((len, mode))) => {
            (format!("new file mode {}\n", file_mode(mode)), format!("a new file of {}", size(len)))
        }
        (Some((len, mode)), None) => {
            (format!("deleted file mode {}\n", file_mode(mode as u32)), format!("a deleted file of {}", size(len)))
        }
        (Some((old, was)), Some((new, is))) => {
            // Where the repository leaves the executable bit unchecked (`core.fileMode` off),
            // git sees no mode change, and neither does the packet.
            let (was, is) = (file_mode(was as u32), file_mode(is));
            let modes = match was != is && !Unchecked::of(repo).mode {
                true => format!("old mode {was}\nnew mode {is}\n"),
                false => String::new(),
            };
            let before = tree.and_then(|t| t.get_path(Path::new(path)).ok()).map(|e| e.id());
            if old == new && before.is_some() && before == now {
                return match modes.is_empty() {
                    true => String::new(),
                    false => format!("diff --git a/{named} b/{named}\n{modes}"),
                };
            }
            (modes, format!("a file of {} (was {})", size(new), size(old)))
        }
    };
    format!("diff --git a/{named} b/{named}\n{head}({what}: over the {shown} a diff shows, not shown)\n")
}

/// Whether `.gitattributes` tells git not to diff `path` as text (`-diff`, `binary`).
fn marked_binary(repo: &Repository, path: &str) -> bool {
    let value = repo.get_attr(Path::new(path), "diff", git2::AttrCheckFlags::FILE_THEN_INDEX).ok().flatten();
    git2::AttrValue::from_string(value) == git2::AttrValue::False
}

/// How many bytes git reads of a file to tell text from binary (a NUL among them is binary).
const BINARY_SNIFF: usize = 8000;

/// Whether `path` is text (no NUL among its first [`BINARY_SNIFF`] bytes, as git tells) both
/// in `tree` and in the work tree, where either side may be missing; a symlink is never
/// shown as text.
fn text_both_sides(repo: &Repository, tree: Option<&Tree<'_>>, path: &str) -> bool {
    let text = |bytes: &[u8]| !bytes[..bytes.len().min(BINARY_SNIFF)].contains(&0);
    let before = match tree.and_then(|t| t.get_path(Path::new(path)).ok()) {
        None => true,
        Some(entry) if entry.filemode() == i32::from(git2::FileMode::Link) => false,
        Some(entry) => repo.find_blob(entry.id()).is_ok_and(|blob| text(blob.content())),
    };
    let Some(workdir) = repo.workdir() else { return false };
    let full = workdir.join(path);
    let after = match std::fs::symlink_metadata(&full) {
        Err(_) => true,
        Ok(meta) if !meta.is_file() => false,
        Ok(_) => File::open(&full).is_ok_and(|file| {
            let mut head = Vec::with_capacity(BINARY_SNIFF);
            file.take(BINARY_SNIFF as u64).read_to_end(&mut head).is_ok() && text(&head)
        }),
    };
    before && after
}

/// Whether `path` (relative to `repo`'s work tree) is a file or symlink there that git ignores
/// and does not track.
fn ignored_file(repo: &Repository, path: &Path) -> bool {
    let on_disk = repo
        .workdir()
        .and_then(|workdir| std::fs::symlink_metadata(workdir.join(path)).ok())
        .is_some_and(|meta| meta.is_file() || meta.is_symlink());
    on_disk
        && repo.is_path_ignored(path).unwrap_or(false)
        && repo.index().map_or(true, |index| index.get_path(path, 0).is_none())
}

/// Those of `paths` (workspace-relative) that are a file or symlink there that git ignores and
/// does not track: content a commit never holds, so a receipt, checked at a commit, cannot
/// sign it.
pub fn ignored_files(root: &Path, paths: &[String]) -> Result<Vec<String>, String> {
    let (repo, place) = placed(root)?;
    Ok(paths
        .iter()
        .filter(|path| plain_relative(path) && ignored_file(&repo, Path::new(&place.git(path))))
        .cloned()
        .collect())
}

/// The largest file a diff shows (either side, tracked, untracked or ignored); a larger one
/// is named with its size, not shown.
const MAX_SHOWN: u64 = 8 << 20;

/// The patch of `paths`, files git ignores in `repo`'s work tree, as added since `tree`:
/// staged in memory on top of the index (by a repository whose object writes stay in memory,
/// never written to `.git`) and diffed from `tree` to that index, as git would show them
/// added.
/// `named` is what the patch calls the repository's top (`from`, what its labels start with,
/// replaced).
fn ignored_patch(
    repo: &Repository,
    tree: Option<&Tree<'_>>,
    named: &str,
    paths: &[&str],
    from: &str,
) -> Result<String, String> {
    use std::os::unix::fs::PermissionsExt;
    let workdir = repo.workdir().ok_or("the git repository is bare")?;
    let memory = in_memory(workdir)?;
    let fail = |e: git2::Error| format!("git diff failed: {}", e.message());
    let mut index = memory.index().map_err(fail)?;
    let (mut text, mut shown) = (String::new(), Vec::new());
    for path in paths {
        let full = workdir.join(path);
        let Ok(meta) = std::fs::symlink_metadata(&full) else { continue };
        let (mode, content) = if meta.is_symlink() {
            let target = std::fs::read_link(&full).map_err(|e| format!("cannot read {path}: {e}"))?;
            (0o120000, target.into_os_string().into_encoded_bytes())
        } else if meta.len() > MAX_SHOWN {
            let named = format!("{named}{}", path.strip_prefix(from).unwrap_or(path));
            text.push_str(&format!(
                "diff --git a/{named} b/{named}\n(a file git ignores, {}: over the {} shown)\n",
                scafld_local::capped::size(meta.len()),
                scafld_local::capped::size(MAX_SHOWN)
            ));
            continue;
        } else {
            let content = scafld_local::capped::read(&full, "file", MAX_SHOWN).map_err(|e| e.to_string())?;
            (if meta.permissions().mode() & 0o111 != 0 { 0o100755 } else { 0o100644 }, content)
        };
        let entry = git2::IndexEntry {
            ctime: git2::IndexTime::new(0, 0),
            mtime: git2::IndexTime::new(0, 0),
            dev: 0,
            ino: 0,
            mode,
            uid: 0,
            gid: 0,
            file_size: 0,
            id: Oid::ZERO_SHA1,
            flags: 0,
            flags_extended: 0,
            path: path.as_bytes().to_vec(),
        };
        index.add_frombuffer(&entry, &content).map_err(fail)?;
        shown.push(*path);
    }
    if !shown.is_empty() {
        let tree = tree.map(|t| memory.find_tree(t.id())).transpose().map_err(fail)?;
        let mut options = diff_options();
        options.disable_pathspec_match(true);
        for path in &shown {
            options.pathspec(path);
        }
        let diff = memory.diff_tree_to_index(tree.as_ref(), Some(&index), Some(&mut options)).map_err(fail)?;
        text.insert_str(0, &patch(&diff, from, named)?);
    }
    Ok(text)
}

/// The changed paths and patch of a commit range `BASE..HEAD` (the head's tree against the
/// base's). Either side may be any revision git understands. In a workspace that is a folder
/// of the work tree (a monorepo package) both name the workspace's files as it does, and
/// changes elsewhere in the work tree are not its own (left out, as the task review does).
pub fn range_diff(root: &Path, range: &str) -> Result<(Vec<String>, String), String> {
    let (base, head) = range
        .split_once("..")
        .filter(|(b, h)| !b.is_empty() && !h.is_empty() && !h.starts_with('.'))
        .ok_or_else(|| format!("{range:?} is not a BASE..HEAD range"))?;
    let repo = kept::lease(root).map_err(|e| e.message().to_string())?;
    let (base_tree, head_tree) = (revision_tree(&repo, base)?, revision_tree(&repo, head)?);
    // A bare repository (a range review's) has no work tree: its paths are the repository's.
    let place = Place::of(root, &repo).ok().filter(|place| !place.prefix().is_empty());
    let mut options = git2::DiffOptions::new();
    if let Some(place) = &place {
        options.pathspec(place.prefix()).disable_pathspec_match(true);
    }
    let diff = repo
        .diff_tree_to_tree(Some(&base_tree), Some(&head_tree), Some(&mut options))
        .map_err(|e| format!("git diff failed: {}", e.message()))?;
    let mut paths: Vec<String> = diff
        .deltas()
        .filter_map(|d| d.new_file().path().or_else(|| d.old_file().path()).map(|p| p.display().to_string()))
        .filter_map(|path| match &place {
            Some(place) => place.workspace(&path).filter(|p| !p.is_empty()).map(str::to_string),
            None => Some(path),
        })
        .collect();
    paths.dedup();
    let from = place.as_ref().map(Place::label).unwrap_or_default();
    // A file kept from reviewers for its secrets is named among the paths, never diffed: the
    // rule a task review's diff follows (`domain::review::secret`, on the workspace's path).
    let shown = |path: &Path| {
        let path = path.to_string_lossy();
        let inside = match &place {
            Some(place) => place.workspace(&path).map(str::to_string),
            None => Some(path.into_owned()),
        };
        inside.is_some_and(|path| !crate::domain::review::secret(&path))
    };
    Ok((paths, patch_where(&diff, &from, "", shown)?))
}

/// Check that `rev` names a revision git knows in the repository at `root`, as [`range_diff`]
/// checks each side of a range.
pub fn known_revision(root: &Path, rev: &str) -> Result<(), String> {
    let repo = kept::lease(root).map_err(|e| e.message().to_string())?;
    revision_tree(&repo, rev).map(drop)
}

/// The tree `rev` names (a commit's, a tag's, or a tree itself).
fn revision_tree<'r>(repo: &'r Repository, rev: &str) -> Result<Tree<'r>, String> {
    repo.revparse_single(rev)
        .and_then(|o| o.peel_to_tree())
        .map_err(|e| format!("unknown revision {rev:?}: {}", e.message()))
}

/// A diff as unified patch text, its labels' paths starting `from` made to start `to` instead:
/// paths inside a submodule or nested repository get its path as a prefix, work-tree paths
/// lose the workspace's folder. Bytes that are not UTF-8, in content or names, are shown by
/// value, file by file in the [`Notation`] the file's diff needs: a changed Latin-1 byte is
/// never two lines alike, a literal `\xE9` beside it never reads as one, and a file whose
/// diff is all UTF-8 is shown exactly as written.
fn patch(diff: &git2::Diff<'_>, from: &str, to: &str) -> Result<String, String> {
    patch_where(diff, from, to, |_| true)
}

/// The line a file's diff shown [`Notation::Escaped`] has in its header, right after its
/// `diff --git` line: the reviewer is told why its backslashes are doubled.
const NOT_UTF8_NOTE: &str =
    "(this file's diff is not UTF-8: bytes outside it are shown as \\xNN, a backslash as \\\\)\n";

/// [`patch`] of the files `shown` keeps (by the delta's repository path), the others left out
/// whole: header, hunks and all.
fn patch_where(diff: &git2::Diff<'_>, from: &str, to: &str, shown: impl Fn(&Path) -> bool) -> Result<String, String> {
    let mut text = String::new();
    // One file's lines, held until the file is whole: how each is shown depends on all of
    // them (and on its names), as libgit2 prints them (each file starts with its header).
    let mut file = FileLines::default();
    diff.print(git2::DiffFormat::Patch, |delta, _, line| {
        if !delta.new_file().path().or_else(|| delta.old_file().path()).is_none_or(&shown) {
            return true;
        }
        if line.origin() == 'F' {
            text.push_str(&file.shown(from, to));
            let names = [delta.old_file().path_bytes(), delta.new_file().path_bytes()];
            file = FileLines { names: names.into_iter().flatten().map(<[u8]>::to_vec).collect(), lines: Vec::new() };
        }
        file.lines.push((line.origin(), line.content().to_vec()));
        true
    })
    .map_err(|e| format!("git diff failed: {}", e.message()))?;
    text.push_str(&file.shown(from, to));
    Ok(text)
}

/// The lines libgit2 printed for one file's diff (each with its origin, `F` the header), and
/// the bytes of the names it carries.
#[derive(Default)]
struct FileLines {
    names: Vec<Vec<u8>>,
    lines: Vec<(char, Vec<u8>)>,
}

impl FileLines {
    /// The file's diff as text, every part of it in the one [`Notation`] its bytes need;
    /// escaped, its header says so.
    fn shown(&self, from: &str, to: &str) -> String {
        let parts = self.names.iter().chain(self.lines.iter().map(|(_, bytes)| bytes));
        let notation = Notation::of(parts.map(Vec::as_slice));
        let mut text = String::new();
        for (origin, bytes) in &self.lines {
            match origin {
                '+' | '-' | ' ' => {
                    text.push(*origin);
                    text.push_str(&notation.show(bytes));
                }
                // The file's header and a binary file's line name its paths.
                'F' | 'B' => {
                    let header = relabelled(bytes, from, to, notation);
                    match (notation, header.split_once('\n')) {
                        (Notation::Escaped, Some((first, rest))) => {
                            text.push_str(&format!("{first}\n{NOT_UTF8_NOTE}{rest}"))
                        }
                        _ => text.push_str(&header),
                    }
                }
                // git's own marker (`\ No newline at end of file`), never the file's text.
                '=' | '>' | '<' => text.push_str(&scafld_protocol::text::shown_bytes(bytes)),
                // A hunk's header, which may quote the file's text after its `@@`.
                _ => text.push_str(&notation.show(bytes)),
            }
        }
        text
    }
}

/// A patch header's lines with each path label (` a/…`, ` b/…`, after a space) starting `from`
/// made to start `to`. libgit2 C-quotes a name with any byte past ASCII or a control in it
/// (`"a/\346\227\245.txt"`, whatever `core.quotePath` says): such a label is read back to
/// its bytes and shown as the file list names it (`a/nested/日本.txt`), through
/// [`one_line`](scafld_protocol::text::one_line) so a control in a name cannot break the line.
/// Its bytes are shown in the file's `notation`, each once.
fn relabelled(header: &[u8], from: &str, to: &str, notation: Notation) -> String {
    let mut shown = String::with_capacity(header.len());
    let mut raw = Vec::new();
    let mut at = 0;
    while at < header.len() {
        let rest = &header[at..];
        let labels = at > 0 && header[at - 1] == b' ';
        if labels && let Some((mut name, used)) = c_unquoted(rest) {
            if let Some(path) = name.strip_prefix(b"a/").or_else(|| name.strip_prefix(b"b/"))
                && let Some(inside) = path.strip_prefix(from.as_bytes())
            {
                name = [&name[..2], to.as_bytes(), inside].concat();
            }
            shown.push_str(&notation.show(&std::mem::take(&mut raw)));
            shown.push_str(&scafld_protocol::text::one_line(&notation.show(&name)));
            at += used;
        } else if labels
            && (rest.starts_with(b"a/") || rest.starts_with(b"b/"))
            && rest[2..].starts_with(from.as_bytes())
        {
            raw.extend_from_slice(&rest[..2]);
            raw.extend_from_slice(to.as_bytes());
            at += 2 + from.len();
        } else {
            raw.push(header[at]);
            at += 1;
        }
    }
    shown.push_str(&notation.show(&raw));
    shown
}

/// The bytes a C-quoted string at the start of `text` stands for (git's quoting: `\t`-style
/// escapes, `\"`, `\\`, and three octal digits for any other byte), with the length it took;
/// `None` when `text` does not start with one closed on its line.
fn c_unquoted(text: &[u8]) -> Option<(Vec<u8>, usize)> {
    let mut bytes = Vec::new();
    let mut at = 1;
    if text.first() != Some(&b'"') {
        return None;
    }
    loop {
        match *text.get(at)? {
            b'"' => return Some((bytes, at + 1)),
            b'\n' => return None,
            b'\\' => {
                let escaped = *text.get(at + 1)?;
                at += 2;
                bytes.push(match escaped {
                    b'a' => 0x07,
                    b'b' => 0x08,
                    b't' => b'\t',
                    b'n' => b'\n',
                    b'v' => 0x0b,
                    b'f' => 0x0c,
                    b'r' => b'\r',
                    b'0'..=b'7' => {
                        let digits = std::str::from_utf8(text.get(at - 1..at + 2)?).ok()?;
                        at += 2;
                        u8::from_str_radix(digits, 8).ok()?
                    }
                    other => other,
                });
            }
            byte => {
                bytes.push(byte);
                at += 1;
            }
        }
    }
}

/// Run a git or hashing step on a blocking thread (they block: git2, file hashing) as one call
/// ([`one_call`]: a large file it hashes is read once). The step's own failure is returned as
/// it is; the thread failing (a panic) is an internal error.
pub async fn off_runtime<T: Send + 'static, E: Send + 'static>(
    step: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> crate::error::RpcResult<Result<T, E>> {
    tokio::task::spawn_blocking(|| one_call(step)).await.map_err(crate::error::RpcError::internal)
}

/// [`off_runtime`], with the step's failure reported as its [`GitFailure`] says: a workspace
/// error only when git cannot read the workspace (a plain message says that), else a refusal
/// with its hint.
pub async fn in_workspace<T: Send + 'static, E: Into<GitFailure> + Send + 'static>(
    step: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> crate::error::RpcResult<T> {
    off_runtime(step).await?.map_err(|e| e.into().into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t", "-c", "protocol.file.allow=always"])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// A fresh repository in a temporary folder (kept alive by the first value).
    fn new_repo() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("repo");
        std::fs::create_dir_all(&root).unwrap();
        git(&root, &["init", "-q"]);
        (dir, root)
    }

    fn write(dir: &Path, path: &str, text: &str) {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// A workspace of its own in a repository of its own below the workspace (a submodule, an
    /// embedded repository): what its runner writes in its `.scafld/specs|runs|reviews` is no
    /// change of a scope holding the folder, a file of it is. Before, the submodule's walk and
    /// the embedded repository's digest counted the inner runner's writes, so an outer task's
    /// evidence went stale when the inner workspace planned a task.
    #[test]
    fn an_inner_workspaces_runner_writes_in_a_nested_repository_are_no_change() {
        let (dir, root) = new_repo();
        let other = dir.path().join("other");
        std::fs::create_dir_all(&other).unwrap();
        git(&other, &["init", "-q"]);
        write(&other, "f.txt", "f");
        git(&other, &["add", "."]);
        git(&other, &["commit", "-qm", "sub"]);
        write(&root, "top.txt", "t");
        git(&root, &["add", "."]);
        git(&root, &["submodule", "add", "-q", other.to_str().unwrap(), "sub"]);
        git(&root, &["commit", "-qm", "base"]);
        let emb = root.join("emb");
        std::fs::create_dir_all(&emb).unwrap();
        git(&emb, &["init", "-q"]);
        write(&emb, "x.txt", "x");
        git(&emb, &["add", "."]);
        git(&emb, &["commit", "-qm", "emb"]);
        for inner in ["sub", "emb"] {
            write(&root, &format!("{inner}/{}", crate::workspace::layout::ID_FILE), "id");
            write(&root, &format!("{inner}/.scafld/config.yaml"), "c");
            let scope = [inner.to_string()];
            let before = material(&root, &scope).unwrap().digest;
            for runner in [".scafld/specs/drafts/in.md", ".scafld/runs/t/out.log", ".scafld/reviews/k/packet.md"] {
                write(&root, &format!("{inner}/{runner}"), "the inner runner's");
            }
            assert_eq!(material(&root, &scope).unwrap().digest, before, "{inner}: runner writes changed it");
            write(&root, &format!("{inner}/.scafld/config.yaml"), "edited");
            assert_ne!(material(&root, &scope).unwrap().digest, before, "{inner}: a real change is none");
        }
    }

    /// The harden guard's view of what steers scafld and git: a spec moved between lifecycle
    /// folders or with runner-owned lines rewritten (scafld's own writes) is unchanged; its
    /// author's text, an ignored config, a hook, or a submodule's git config is a change.
    #[test]
    fn control_files_see_authored_text_config_and_git_folders_not_scafld_s_own_writes() {
        let (_dir, root) = new_repo();
        let spec = "---\nspec_version: '2.0'\ntask_id: other\nstatus: approved\n---\n\n# Other\n\n## Summary\n\nAs written.\n\n## Phase 1: A\n\nAcceptance:\n- [ ] `a` test - ok\n  - Command: `true`\n";
        write(&root, ".scafld/specs/approved/other.md", spec);
        write(&root, ".scafld/runs/other/diagnostics/x.txt", "runner");
        write(&root, ".git/modules/sub/config", "[core]\n");
        let before = control_files(&root);
        assert!(before.contains_key(".scafld/specs/**/other.md") && before.contains_key(".git/modules/sub/config"));
        assert!(!before.keys().any(|k| k.starts_with(".scafld/runs")), "{before:?}");
        // scafld moves the spec into `active/` and projects its state: no change.
        std::fs::remove_file(root.join(".scafld/specs/approved/other.md")).unwrap();
        let projected = spec
            .replace("status: approved", "status: active")
            .replace("  - Command: `true`\n", "  - Command: `true`\n  - Status: pass\n");
        write(&root, ".scafld/specs/active/other.md", &projected);
        write(&root, ".scafld/runs/other/diagnostics/y.txt", "runner again");
        assert_eq!(control_files(&root), before);
        // The author's text, a submodule's git config: changes.
        write(&root, ".scafld/specs/active/other.md", &projected.replace("As written.", "Rewritten."));
        let after = control_files(&root);
        assert_ne!(after[".scafld/specs/**/other.md"], before[".scafld/specs/**/other.md"]);
        write(&root, ".git/modules/sub/config", "[core]\n\tfsmonitor = touch PWNED\n");
        assert_ne!(control_files(&root)[".git/modules/sub/config"], before[".git/modules/sub/config"]);
        // git's state: HEAD moved, a merge under way, alternates; not the receipts scafld mints.
        let now = control_files(&root);
        write(&root, ".git/HEAD", "ref: refs/heads/other\n");
        write(&root, ".git/MERGE_HEAD", "0000\n");
        write(&root, ".git/objects/info/alternates", "/tmp\n");
        write(&root, ".scafld/receipts/t.json", "{}");
        let moved = control_files(&root);
        let changed: Vec<&String> = moved.keys().filter(|k| now.get(*k) != moved.get(*k)).collect();
        assert_eq!(changed, [".git/HEAD", ".git/MERGE_HEAD", ".git/objects/info/alternates"]);
    }

    /// A baseline an older scafld recorded names a nested repository's folder but not its
    /// HEAD: its changes since cannot be read, and what changed since is refused, not passed
    /// over as one changed folder.
    #[test]
    fn a_nested_repository_whose_head_at_approval_is_not_on_record_is_refused() {
        let (_dir, root) = new_repo();
        write(&root, "README.md", "x");
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-qm", "i"]);
        write(&root, "lib/x.txt", "hello");
        git(&root.join("lib"), &["init", "-q"]);
        git(&root.join("lib"), &["add", "-A"]);
        git(&root.join("lib"), &["commit", "-qm", "i"]);
        let snapshot = snapshot(&root, &[]).unwrap();
        assert!(lost_nested(&root, &snapshot.paths, &snapshot.nested).unwrap().is_empty());
        let older = BTreeMap::new();
        let lost = lost_nested(&root, &snapshot.paths, &older).unwrap();
        assert_eq!(lost, vec![LostNested { folder: "lib".into(), loss: NestedLoss::NotOnRecord }]);
        write(&root, "lib/x.txt", "changed");
        let refused = changes_since(&root, snapshot.head.as_deref(), &snapshot.paths, &older, &[], &[]).unwrap_err();
        assert!(
            matches!(&refused, GitFailure::Unmet { message, .. } if message.contains("not on record")),
            "{refused}"
        );
    }

    /// The git state the read-only check watches is the repository's real git directory: a
    /// monorepo package's at the work tree's top, a `--separate-git-dir` one elsewhere. Before,
    /// only `<root>/.git` was read, nothing there, so a HEAD moved was no change.
    #[test]
    fn control_files_watch_the_repositorys_own_git_directory() {
        let (dir, top) = new_repo();
        write(&top, "pkg/f.txt", "x");
        git(&top, &["add", "-A"]);
        git(&top, &["commit", "-qm", "i"]);
        let separate = dir.path().join("sep");
        std::fs::create_dir_all(&separate).unwrap();
        git(&separate, &["init", "-q", "--separate-git-dir", &dir.path().join("sep.git").display().to_string(), "."]);
        for (root, git_dir) in [(top.join("pkg"), top.join(".git")), (separate.clone(), dir.path().join("sep.git"))] {
            let before = control_files(&root);
            std::fs::write(git_dir.join("HEAD"), "ref: refs/heads/elsewhere\n").unwrap();
            assert_ne!(control_files(&root), before, "{}", root.display());
        }
    }

    /// A range in a monorepo package workspace is named as the workspace names its files, and
    /// a change elsewhere in the work tree is not its own. Before, its paths were the work
    /// tree's (`pkg/f.txt`), unlike the rest of the review, and the other package's were listed.
    #[test]
    fn a_range_in_a_monorepo_package_names_the_workspaces_files() {
        let (_dir, top) = new_repo();
        write(&top, "pkg/f.txt", "hi\n");
        write(&top, "r.txt", "root\n");
        git(&top, &["add", "-A"]);
        git(&top, &["commit", "-qm", "i"]);
        write(&top, "pkg/f.txt", "hello\n");
        write(&top, "r.txt", "another package\n");
        git(&top, &["commit", "-qam", "work"]);
        let (paths, patch) = range_diff(&top.join("pkg"), "HEAD~1..HEAD").unwrap();
        assert_eq!(paths, ["f.txt"]);
        assert!(patch.contains("diff --git a/f.txt b/f.txt") && patch.contains("+++ b/f.txt"), "{patch}");
        assert!(!patch.contains("r.txt") && !patch.contains("pkg/"), "{patch}");
        let (whole, _) = range_diff(&top, "HEAD~1..HEAD").unwrap();
        assert_eq!(whole, ["pkg/f.txt", "r.txt"]);
    }

    /// A file too large to show, of the same size as at the base, is hashed for the packet's
    /// changes through the call's kept hashes: read once in a call that fingerprinted it
    /// already. Here the call holds the base's blob id for it, so a diff that reads it again
    /// (as it did, with `Oid::hash_file`) shows the change and one that does not shows none.
    #[test]
    fn a_large_files_blob_id_is_read_once_per_call_for_the_packet_too() {
        use std::os::unix::fs::FileExt;
        let (_dir, root) = new_repo();
        let path = root.join("big.bin");
        let big = File::create(&path).unwrap();
        big.set_len(MAX_SHOWN.max(KEPT_FROM) + 1).unwrap();
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-qm", "i"]);
        let base = Oid::hash_file(ObjectType::Blob, &path).unwrap().to_string();
        big.write_at(b"X", 4 << 20).unwrap();
        let (read_again, kept) = one_call(|| {
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let held = kept_hash(&path, &meta, HashKind::Blob, || Ok(base.clone())).unwrap();
            (diff(&root, None, &[], &["big.bin".to_string()]).unwrap(), held)
        });
        assert_eq!(kept, base);
        assert_eq!(read_again, "", "the file was read again for the diff");
        // Outside that call it is read, and the change shown.
        let shown = diff(&root, None, &[], &["big.bin".to_string()]).unwrap();
        assert!(shown.contains("diff --git a/big.bin b/big.bin\n(a file of "), "{shown}");
    }

    /// A changed byte of a file that is not UTF-8 (Latin-1 `é` to `è`) is shown by its value.
    /// Before, both lines read `caf` and U+FFFD: a reviewer saw two lines alike.
    #[test]
    fn a_changed_latin1_byte_is_shown_by_its_value() {
        let (_dir, root) = new_repo();
        std::fs::write(root.join("legacy.txt"), b"caf\xe9\n").unwrap();
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-qm", "i"]);
        std::fs::write(root.join("legacy.txt"), b"caf\xe8\n").unwrap();
        let text = diff(&root, None, &[], &["legacy.txt".to_string()]).unwrap();
        assert!(text.contains("\n-caf\\xE9\n+caf\\xE8\n"), "{text}");
    }

    /// A name past ASCII in a nested repository is labelled with the nested folder, as the file
    /// list names it, and as UTF-8 (libgit2 C-quotes it: `"a/\346\227\245..."`). Before, its
    /// quoted labels were left as they were, naming a file at the workspace's top.
    #[test]
    fn a_non_ascii_name_in_a_nested_repository_is_labelled_with_its_folder() {
        let (_dir, root) = new_repo();
        write(&root, "日本.txt", "top\n");
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-qm", "i"]);
        let inner = root.join("nested");
        write(&inner, "日本.txt", "a\n");
        write(&inner, "tab\tname.txt", "a\n");
        git(&inner, &["init", "-q"]);
        git(&inner, &["add", "-A"]);
        git(&inner, &["commit", "-qm", "i"]);
        let head = Repository::open(&inner).unwrap().head().unwrap().target().unwrap().to_string();
        write(&inner, "日本.txt", "a\nchanged\n");
        write(&inner, "tab\tname.txt", "a\nchanged\n");
        write(&root, "日本.txt", "top\nchanged\n");
        let nested = [NestedRepo { folder: "nested".into(), base: Some(head) }];
        let paths: Vec<String> = ["日本.txt", "nested/日本.txt", "nested/tab\tname.txt"].map(String::from).into();
        let text = diff(&root, None, &nested, &paths).unwrap();
        for header in [
            "diff --git a/日本.txt b/日本.txt\n",
            "--- a/nested/日本.txt\n+++ b/nested/日本.txt\n",
            "diff --git a/nested/日本.txt b/nested/日本.txt\n",
            "diff --git a/nested/tab^Iname.txt b/nested/tab^Iname.txt\n",
        ] {
            assert!(text.contains(header), "{header:?} in {text}");
        }
        assert!(!text.contains('"') && !text.contains("\\346"), "{text}");
    }

    /// A binary file `.gitattributes` marks `-diff` is shown as a binary change of its path,
    /// never as `/dev/null` (which reads as the file deleted).
    #[test]
    fn a_binary_file_marked_minus_diff_is_a_binary_change_of_its_path() {
        let (_dir, root) = new_repo();
        write(&root, ".gitattributes", "*.bin -diff\n");
        std::fs::write(root.join("a.bin"), b"one\0two").unwrap();
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-qm", "i"]);
        std::fs::write(root.join("a.bin"), b"one\0three").unwrap();
        let text = diff(&root, None, &[], &["a.bin".to_string()]).unwrap();
        assert!(text.contains("diff --git a/a.bin b/a.bin"), "{text}");
        assert!(!text.contains("/dev/null"), "{text}");
        assert!(text.contains("Binary files a/a.bin and b/a.bin differ"), "{text}");
    }

    /// A commit beyond a shallow clone's history is named as such, with the way to fetch it.
    #[test]
    fn a_commit_beyond_a_shallow_clones_history_says_so() {
        let (dir, root) = new_repo();
        write(&root, "a.txt", "1");
        git(&root, &["add", "."]);
        git(&root, &["commit", "-qm", "one"]);
        let first = files_at(&root, "HEAD", &[]).unwrap().commit;
        write(&root, "a.txt", "2");
        git(&root, &["commit", "-qam", "two"]);
        let url = format!("file://{}", root.display());
        git(dir.path(), &["clone", "-q", "--depth", "1", &url, "shallow"]);
        let shallow = dir.path().join("shallow");
        let why = files_at(&shallow, &first, &[]).unwrap_err();
        assert!(why.contains("shallow clone") && why.contains("git fetch --unshallow"), "{why}");
        assert!(!files_at(&root, "nowhere", &[]).unwrap_err().contains("shallow"));
    }

    /// `files_at` reads the commit's files, never the working tree's, for a workspace at the
    /// repository's top or in a folder below it; a file the commit lacks is `None`.
    #[test]
    fn files_at_reads_the_commit_not_the_working_tree() {
        let (_dir, root) = new_repo();
        write(&root, ".scafld/trusted-keys.json", "top committed");
        write(&root, "sub/.scafld/trusted-keys.json", "sub committed");
        git(&root, &["add", "."]);
        git(&root, &["commit", "-qm", "base"]);
        write(&root, ".scafld/trusted-keys.json", "top edited");
        write(&root, "sub/.scafld/trusted-keys.json", "sub edited");
        let want = [".scafld/trusted-keys.json", ".scafld/config.yaml"];
        let top = files_at(&root, "HEAD", &want).unwrap();
        assert_eq!(top.files, vec![Some(b"top committed".to_vec()), None]);
        let sub = files_at(&root.join("sub"), "HEAD", &want).unwrap();
        assert_eq!(sub.files[0].as_deref(), Some(&b"sub committed"[..]));
        assert_eq!(sub.commit, top.commit);
        assert!(files_at(&root, "nowhere", &want).unwrap_err().contains("cannot resolve \"nowhere\""));

        // A tag named like the remote branch, on another commit: the short name is refused.
        let base = top.commit.clone();
        git(&root, &["update-ref", "refs/remotes/origin/main", &base]);
        assert!(files_at(&root, "origin/main", &want).is_ok(), "one place, one commit");
        git(&root, &["add", "."]);
        git(&root, &["commit", "-qm", "the change"]);
        git(&root, &["tag", "origin/main", "HEAD"]);
        assert!(files_at(&root, "origin/main", &want).unwrap_err().contains("ambiguous"));
        let full = files_at(&root, "refs/remotes/origin/main", &want).unwrap();
        assert_eq!(full.commit, base);
        // A tag named like the base commit's abbreviated id, on the change.
        git(&root, &["tag", &base[..10], "HEAD"]);
        assert!(files_at(&root, &base[..10], &want).unwrap_err().contains("ambiguous"));
        assert_eq!(files_at(&root, &base, &want).unwrap().commit, base, "the full id is the commit");
    }

    /// The walk pruned to the scope finds exactly what the whole-tree walk finds in it: every
    /// kind of change git reports, in files, folders, untracked folders, a nested repository,
    /// a submodule, names with glob characters and spaces, and scopes that do not exist.
    #[test]
    fn the_material_walk_pruned_to_the_scope_matches_the_whole_walk() {
        let dir = tempfile::tempdir().unwrap();
        let (root, other) = (dir.path().join("repo"), dir.path().join("other"));
        for repo in [&root, &other] {
            std::fs::create_dir_all(repo).unwrap();
            git(repo, &["init", "-q"]);
        }
        write(&other, "f.txt", "sub");
        git(&other, &["add", "."]);
        git(&other, &["commit", "-qm", "sub"]);
        for (path, text) in [
            ("src/a.rs", "a"),
            ("src/b.rs", "b"),
            ("src/deep/c.rs", "c"),
            ("src/deep/gone.rs", "deleted below"),
            ("src/deep.rs", "a name that extends the folder's"),
            ("src/deep.txt", "another"),
            ("docs/x.md", "x"),
            ("docs/y.md", "y"),
            ("glob[1]*.txt", "g"),
            ("sp ace/f.txt", "s"),
            ("lib.rs", "l"),
            (".scafld/config.yaml", "committed config"),
            (".scafld/specs/drafts/committed.md", "committed spec"),
            ("conf", "a file, replaced by a folder below"),
        ] {
            write(&root, path, text);
        }
        git(&root, &["add", "."]);
        git(&root, &["submodule", "add", "-q", other.to_str().unwrap(), "sub"]);
        git(&root, &["commit", "-qm", "base"]);
        write(&root, "src/a.rs", "a changed");
        write(&root, "docs/x.md", "x staged");
        git(&root, &["add", "docs/x.md"]);
        std::fs::remove_file(root.join("src/b.rs")).unwrap();
        std::fs::remove_file(root.join("src/deep/gone.rs")).unwrap();
        git(&root, &["rm", "-q", "lib.rs"]);
        git(&root, &["mv", "docs/y.md", "docs/z.md"]);
        // Staged, then removed from the disk: only the index knows the name.
        write(&root, "staged/only.txt", "s");
        git(&root, &["add", "staged/only.txt"]);
        std::fs::remove_dir_all(root.join("staged")).unwrap();
        write(&root, ".scafld/specs/drafts/committed.md", "edited spec");
        // Names git reports whole above a scope path: a tracked file now a folder, an
        // untracked file (and the symlink `link` below) where a scope expects a folder.
        std::fs::remove_file(root.join("conf")).unwrap();
        write(&root, "conf/new.yaml", "n");
        write(&root, "plain", "untracked file");
        for (path, text) in [
            ("src/new.rs", "n"),
            ("src/deep/new.rs", "n"),
            ("newdir/inner/f.txt", "f"),
            ("glob1x.txt", "matches the glob, not the name"),
            (".scafld/runs/t/out.log", "runner"),
            (".scafld/specs/drafts/t.md", "spec"),
            (".scafld/config.yaml", "config"),
            ("sub/f.txt", "sub changed"),
            ("sub/untracked.txt", "u"),
        ] {
            write(&root, path, text);
        }
        std::fs::create_dir_all(root.join("nested")).unwrap();
        git(&root.join("nested"), &["init", "-q"]);
        write(&root, "nested/file", "nested");
        std::os::unix::fs::symlink("src/a.rs", root.join("link")).unwrap();
        write(&root, ".gitignore", "*.log\n");
        write(&root, "ignored.log", "ignored");
        let scopes: &[&[&str]] = &[
            &[],
            &["src"],
            &["src/a.rs"],
            &["src/b.rs"],
            &["lib.rs"],
            &["src/deep"],
            &["src", "docs"],
            &["docs/y.md", "docs/z.md"],
            &["newdir"],
            &["newdir/inner/f.txt"],
            &["nested"],
            &["nested/file"],
            &["nested/deeper/x"],
            &["sp ace/f.txt"],
            &["ignored.log", "src"],
            &["sub"],
            &["sub/f.txt"],
            &["glob[1]*.txt"],
            &["glob1x.txt"],
            &["sp ace"],
            &["missing/path"],
            &["src/"],
            &[".scafld"],
            &["link"],
            &["conf/new.yaml"],
            &["plain/x"],
            &["link/x"],
            // A folder beside a name that extends its own with a character sorting before `/`:
            // libgit2's walk of the index and of the tree would skip the folder.
            &["src/deep", "src/deep.rs"],
            // A trailing slash on a file's name (`conf` was a file at HEAD).
            &["conf/"],
            // Paths git2 will not look up (absolute, `./`, `../`): the walk must not panic.
            &["../other/f.txt"],
            &["/abs/x"],
            &["./src/a.rs"],
        ];
        for scope in scopes {
            let scope: Vec<String> = scope.iter().map(|s| s.to_string()).collect();
            let pruned = material_walked(&root, &scope, true).unwrap();
            let whole = material_walked(&root, &scope, false).unwrap();
            assert_eq!(pruned, whole, "scope {scope:?}");
            // What a receipt signs: the same files whether its walks are pruned or not.
            for at in [None, Some("HEAD")] {
                let pruned = tree_files_walked(&root, &scope, at, true).unwrap();
                assert_eq!(pruned, tree_files_walked(&root, &scope, at, false).unwrap(), "scope {scope:?} at {at:?}");
            }
        }
        assert_eq!(tree_files(&root, &["src/".to_string()], None), tree_files(&root, &["src".to_string()], None));
        let files = tree_files(&root, &["src".to_string()], None).unwrap().files;
        assert!(
            files.contains_key("src/new.rs") && files.contains_key("src/deep/c.rs") && !files.contains_key("src/b.rs")
        );
        assert!(!tree_files(&root, &[], None).unwrap().files.keys().any(|f| f.starts_with(".scafld/")));
        // The comparison is not vacuous: scoped walks see working-tree changes.
        let src = material(&root, &["src".to_string()]).unwrap();
        assert!(src.entries.iter().any(|e| e.path == "src/new.rs" && e.status == "file"));
        // Content as the disk holds it: a deleted file has no entry, an unchanged one its id.
        assert!(!src.entries.iter().any(|e| e.path == "src/b.rs"), "{src:?}");
        assert!(src.entries.iter().any(|e| e.path == "src/deep/c.rs" && e.status == "file"));
        let all = material(&root, &[]).unwrap();
        assert!(all.entries.iter().any(|e| e.path == ".scafld/config.yaml" && e.status == "file"));
        assert!(!all.entries.iter().any(|e| e.path == "lib.rs" || e.path == "staged/only.txt"), "{all:?}");
        assert!(
            all.entries.iter().any(|e| e.path == "docs/z.md") && !all.entries.iter().any(|e| e.path == "docs/y.md")
        );
        // The approval snapshot walks the same way: every dirty path but the runner's.
        let snap: Vec<String> = snapshot(&root, &[]).unwrap().paths.into_iter().map(|p| p.path).collect();
        for dirty in ["src/a.rs", "src/b.rs", "lib.rs", "staged/only.txt", "newdir/inner/f.txt", "nested", "sub"] {
            assert!(snap.iter().any(|p| p == dirty), "{dirty} missing from {snap:?}");
        }
        assert!(snap.iter().any(|p| p == ".scafld/config.yaml"));
        assert!(!snap.iter().any(|p| runner_path(&root, p)), "{snap:?}");
        assert!(!all.entries.iter().any(|e| e.path.starts_with(".scafld/specs/")));
        let conf = material(&root, &["conf/new.yaml".to_string()]).unwrap();
        assert!(conf.entries.iter().any(|e| e.path == "conf/new.yaml" && e.status == "file"), "{conf:?}");
        assert!(!conf.entries.iter().any(|e| e.path == "conf"), "{conf:?}");
    }

    /// Folders git reports whole whose names libgit2 would not match literally (a comment
    /// `#`, glob characters, a trailing space), and a `.scafld` that is a symlink: the pruned
    /// walk still finds what the whole walk finds.
    #[test]
    fn the_pruned_walk_matches_the_whole_walk_for_names_a_pathspec_would_not_take_literally() {
        let (_dir, root) = new_repo();
        write(&root, "a/b.txt", "b");
        write(&root, "elsewhere/config.yaml", "c");
        git(&root, &["add", "."]);
        git(&root, &["commit", "-qm", "base"]);
        write(&root, "a/b.txt", "changed");
        for name in ["#nest", "x*y", "q?", "trail "] {
            std::fs::create_dir_all(root.join(name)).unwrap();
            git(&root.join(name), &["init", "-q"]);
            write(&root, &format!("{name}/f"), "n");
        }
        let scopes: &[&[&str]] = &[&[], &["x*y/f"], &["#nest/f", "a"], &["trail /f"], &["q?", "a"]];
        for scope in scopes {
            let scope: Vec<String> = scope.iter().map(|s| s.to_string()).collect();
            let pruned = material_walked(&root, &scope, true).unwrap();
            assert_eq!(pruned, material_walked(&root, &scope, false).unwrap(), "scope {scope:?}");
            assert!(pruned.entries.iter().any(|e| e.status == "file"), "scope {scope:?}: {pruned:?}");
            assert_eq!(tree_files(&root, &scope, None), tree_files_walked(&root, &scope, None, false), "{scope:?}");
        }
        std::os::unix::fs::symlink("elsewhere", root.join(".scafld")).unwrap();
        let pruned = material_walked(&root, &[], true).unwrap();
        assert_eq!(pruned, material_walked(&root, &[], false).unwrap());
        assert!(pruned.entries.iter().any(|e| e.path == ".scafld"), "{pruned:?}");
        let snap = snapshot(&root, &[]).unwrap();
        for name in [".scafld", "#nest", "x*y", "q?", "trail "] {
            assert!(snap.paths.iter().any(|p| p.path == name), "{name} missing from the snapshot");
        }
    }

    /// Top-level names that extend a folder's name with a character sorting before `/`
    /// (`config` beside `config.yaml` and `config.example.yaml`): libgit2's pathlist walk of
    /// the index and of HEAD would skip the folder, losing a deletion below it and reporting
    /// its unchanged files as untracked. The whole-tree walks (the approval snapshot, the
    /// material and the files a receipt signs) still match the whole walk.
    #[test]
    fn the_whole_tree_walk_matches_beside_names_that_extend_a_folder_name() {
        let (_dir, root) = new_repo();
        for path in ["config/gone", "config/kept", "config.example.yaml", "config.yaml"] {
            write(&root, path, path);
        }
        git(&root, &["add", "."]);
        git(&root, &["commit", "-qm", "base"]);
        std::fs::remove_file(root.join("config/gone")).unwrap();
        assert_eq!(material_walked(&root, &[], true).unwrap(), material_walked(&root, &[], false).unwrap());
        for at in [None, Some("HEAD")] {
            assert_eq!(
                tree_files_walked(&root, &[], at, true).unwrap(),
                tree_files_walked(&root, &[], at, false).unwrap()
            );
        }
        assert!(!tree_files(&root, &[], None).unwrap().files.contains_key("config/gone"));
        let snap: Vec<(String, String)> =
            snapshot(&root, &[]).unwrap().paths.into_iter().map(|p| (p.path, p.status)).collect();
        assert_eq!(snap, [("config/gone".to_string(), " D".to_string())]);
    }

    /// A file whose name is not UTF-8 is refused by name wherever a whole-tree scope would
    /// read it, at the top as below it (it was passed over at the top: evidence and receipts
    /// left its content out); the approval snapshot, context for every scope, passes over it.
    #[test]
    fn a_whole_scope_refuses_a_top_level_name_that_is_not_utf8() {
        use std::os::unix::ffi::OsStrExt;
        let (_dir, root) = new_repo();
        write(&root, "src/a.txt", "one\n");
        git(&root, &["add", "."]);
        git(&root, &["commit", "-qm", "base"]);
        std::fs::write(root.join(std::ffi::OsStr::from_bytes(b"bad\xff.txt")), "v1\n").unwrap();
        for walked in [true, false] {
            let refused = material_walked(&root, &[], walked).unwrap_err();
            assert_eq!(refused, GitFailure::NameNotUtf8(b"bad\xff.txt".to_vec()));
            assert!(refused.to_string().contains("`bad\\xFF.txt` has a name that is not UTF-8"), "{refused}");
        }
        assert!(material(&root, &["src".to_string()]).is_ok());
        assert!(snapshot(&root, &["src".to_string()]).unwrap().paths.is_empty());
    }

    fn digest(root: &Path, scope: &[&str]) -> String {
        let scope: Vec<String> = scope.iter().map(|s| s.to_string()).collect();
        let pruned = material_walked(root, &scope, true).unwrap();
        assert_eq!(pruned, material_walked(root, &scope, false).unwrap(), "scope {scope:?}");
        pruned.digest
    }

    /// The material is the content: staging, committing, unstaging or a kept repository's
    /// cached index never change it, a content or mode change always does, and content put
    /// back is the same material again.
    #[test]
    fn the_material_is_the_content_however_git_holds_it() {
        let (_dir, root) = new_repo();
        write(&root, "src/a.txt", "one\n");
        write(&root, "src/gone.txt", "g\n");
        write(&root, "b.txt", "b\n");
        git(&root, &["add", "."]);
        git(&root, &["commit", "-qm", "base"]);
        let scopes: &[&[&str]] = &[&["src"], &["src/a.txt"], &[], &["src", "b.txt"]];
        let digests = |root: &Path| scopes.iter().map(|s| digest(root, s)).collect::<Vec<_>>();
        let base = digests(&root);
        write(&root, "src/a.txt", "two\n");
        std::fs::remove_file(root.join("src/gone.txt")).unwrap();
        write(&root, "src/new.txt", "n\n");
        let edited = digests(&root);
        for (before, after) in base.iter().zip(&edited) {
            assert_ne!(before, after);
        }
        assert_eq!(digests(&root), edited, "read again through the kept repository");
        git(&root, &["add", "-A"]);
        assert_eq!(digests(&root), edited, "staged");
        git(&root, &["commit", "-qm", "the work"]);
        assert_eq!(digests(&root), edited, "committed");
        git(&root, &["rm", "-q", "--cached", "src/a.txt"]);
        assert_eq!(digests(&root), edited, "untracked again");
        git(&root, &["add", "src/a.txt"]);
        std::fs::set_permissions(root.join("src/a.txt"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        assert_ne!(digests(&root)[1], edited[1], "the mode is material (a script may become runnable)");
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-qm", "mode"]);
        let runnable = digests(&root);
        std::fs::set_permissions(root.join("src/a.txt"), std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
        assert_eq!(digests(&root), edited, "the mode put back");
        std::fs::set_permissions(root.join("src/a.txt"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        assert_eq!(digests(&root), runnable);
        // Back to the first content, uncommitted: the first material again.
        write(&root, "src/a.txt", "one\n");
        std::fs::set_permissions(root.join("src/a.txt"), std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
        write(&root, "src/gone.txt", "g\n");
        std::fs::remove_file(root.join("src/new.txt")).unwrap();
        assert_eq!(digests(&root), base);

        // Where git converts line endings, the bytes on the disk are the material: a file
        // rewritten with other line endings changes it, and committing the same bytes does not.
        {
            let (_dir, root) = new_repo();
            git(&root, &["config", "core.autocrlf", "true"]);
            write(&root, "run.sh", "echo one\r\n");
            git(&root, &["add", "."]);
            git(&root, &["commit", "-qm", "base"]);
            let crlf = digest(&root, &[]);
            write(&root, "run.sh", "echo one\n");
            let lf = digest(&root, &[]);
            assert_ne!(lf, crlf, "new bytes, though git stores the same content");
            git(&root, &["add", "-A"]);
            assert_eq!(digest(&root, &[]), lf, "staged (git sees nothing to commit): the same bytes");
        }

        // The same with line endings set in an attributes file outside the repository.
        {
            let (_dir, root) = new_repo();
            let attributes = root.parent().unwrap().join("attributes");
            std::fs::write(&attributes, "*.sh text eol=crlf\n").unwrap();
            git(&root, &["config", "core.attributesFile", attributes.to_str().unwrap()]);
            write(&root, "run.sh", "echo one\r\n");
            git(&root, &["add", "."]);
            git(&root, &["commit", "-qm", "base"]);
            let crlf = digest(&root, &[]);
            write(&root, "run.sh", "echo one\n");
            assert_ne!(digest(&root, &[]), crlf, "core.attributesFile");
        }

        // Files git was told not to look at are read all the same.
        for flag in ["--assume-unchanged", "--skip-worktree"] {
            let (_dir, root) = new_repo();
            write(&root, "src/a.txt", "one\n");
            git(&root, &["add", "."]);
            git(&root, &["commit", "-qm", "base"]);
            git(&root, &["update-index", flag, "src/a.txt"]);
            let before = digest(&root, &["src"]);
            write(&root, "src/a.txt", "changed behind git's back\n");
            assert_ne!(digest(&root, &["src"]), before, "{flag}");
        }
    }

    /// A file rewritten in place with the same size and its modification time set back is
    /// clean to git's stat check wherever a setting weakens it: the material, and the files a
    /// receipt signs, still read the new content. `core.trustctime` off (libgit2 then skips
    /// the change time, the one field nobody can set back), `core.checkStat=minimal` (which
    /// libgit2 does not read), and a racily clean entry (written in the index's own tick); with
    /// `core.fileMode` off a file made executable still changes the material.
    #[test]
    fn content_rewritten_under_an_unchanged_stat_is_read_whatever_git_trusts() {
        let settings: &[(&str, &[(&str, &str)])] = &[
            ("trustctime", &[("core.trustctime", "false")]),
            ("checkStat", &[("core.checkStat", "minimal")]),
            ("both", &[("core.trustctime", "false"), ("core.checkStat", "minimal")]),
            ("unreadable", &[("core.trustctime", "sometimes")]),
        ];
        // Set back to a fixed time (or, racily, a time past the index's own): size, inode
        // and modification time all as the index recorded them.
        let an_hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        let in_an_hour = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
        for (racy, (name, config)) in [false, true].into_iter().flat_map(|r| settings.iter().map(move |s| (r, s))) {
            let (_dir, root) = new_repo();
            let at = if racy { in_an_hour } else { an_hour_ago };
            let set_back = |root: &Path| {
                std::fs::File::options().append(true).open(root.join("a.txt")).unwrap().set_modified(at).unwrap();
            };
            write(&root, "a.txt", "hello, world\n");
            set_back(&root);
            git(&root, &["add", "."]);
            git(&root, &["commit", "-qm", "base"]);
            for (key, value) in config.iter() {
                git(&root, &["config", key, value]);
            }
            let scope = ["a.txt".to_string()];
            let before = (digest(&root, &["a.txt"]), tree_files(&root, &scope, None).unwrap());
            // In place: the same inode and size.
            let mut file = std::fs::File::options().write(true).open(root.join("a.txt")).unwrap();
            std::io::Write::write_all(&mut file, b"HELLO, WORLD\n").unwrap();
            drop(file);
            set_back(&root);
            let case = format!("{name}, racy: {racy}");
            assert_ne!(digest(&root, &["a.txt"]), before.0, "{case}");
            let signed = tree_files(&root, &scope, None).unwrap();
            assert_eq!(signed.files["a.txt"], format!("{:x}", Sha256::digest(b"HELLO, WORLD\n")), "{case}");
            assert_ne!(signed, before.1, "{case}");
            assert_eq!(tree_files_walked(&root, &scope, None, false).unwrap(), signed, "{case}");
        }

        // The executable bit git does not look at with `core.fileMode` off.
        let (_dir, root) = new_repo();
        write(&root, "run.sh", "echo hi\n");
        git(&root, &["add", "."]);
        git(&root, &["commit", "-qm", "base"]);
        git(&root, &["config", "core.fileMode", "false"]);
        let plain = digest(&root, &[]);
        std::fs::set_permissions(root.join("run.sh"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let runnable = digest(&root, &[]);
        assert_ne!(runnable, plain, "made executable");
        write(&root, "run.sh", "echo ho\n");
        write(&root, "run.sh", "echo hi\n");
        assert_eq!(digest(&root, &[]), runnable, "the same content and mode again");
    }

    /// A path that differs from one there only in case, in any script, is found as that one.
    #[test]
    fn a_missing_path_finds_a_name_differing_only_in_unicode_case() {
        let (_dir, root) = new_repo();
        write(&root, "docs/été.txt", "a\n");
        write(&root, "Über/x.md", "b\n");
        assert_eq!(missing_path(&root, "docs/ÉTÉ.txt"), Some(Some("docs/été.txt".to_string())));
        assert_eq!(missing_path(&root, "über/X.md"), Some(Some("Über/x.md".to_string())));
        assert_eq!(missing_path(&root, "docs/ete.txt"), Some(None), "an accent is not case");
        assert_eq!(missing_path(&root, "docs/été.txt"), None);
    }

    /// A file the scope names is material though git ignores it; ignored files below a named
    /// folder are not (build outputs). A path named but not there yet is material by its
    /// absence. A symlink in scope brings what it points at inside the workspace (a file or a
    /// folder, ignored or not); outside the workspace, only the link's own text counts.
    #[test]
    fn named_ignored_files_missing_paths_and_link_targets_are_material() {
        let (dir, root) = new_repo();
        write(&root, ".gitignore", "y.cfg\n*.o\nbuilt/\n");
        write(&root, "src/a.txt", "a\n");
        write(&root, "shared/s.txt", "s\n");
        write(&root, "target.txt", "good\n");
        std::os::unix::fs::symlink("target.txt", root.join("link.txt")).unwrap();
        std::os::unix::fs::symlink("shared", root.join("dirlink")).unwrap();
        std::os::unix::fs::symlink("built/out.bin", root.join("tobuilt")).unwrap();
        std::os::unix::fs::symlink("nowhere.txt", root.join("broken")).unwrap();
        write(dir.path(), "outside.txt", "o\n");
        std::os::unix::fs::symlink(dir.path().join("outside.txt"), root.join("out")).unwrap();
        git(&root, &["add", "."]);
        git(&root, &["commit", "-qm", "base"]);
        write(&root, "y.cfg", "good\n");
        write(&root, "src/x.o", "object\n");
        write(&root, "built/out.bin", "v1\n");
        let changes = |scope: &[&str], change: &dyn Fn()| {
            let before = digest(&root, scope);
            change();
            before != digest(&root, scope)
        };
        assert!(changes(&["y.cfg"], &|| write(&root, "y.cfg", "BAD\n")), "a named ignored file");
        assert!(!changes(&["src"], &|| write(&root, "src/x.o", "other\n")), "an ignored file below a folder");
        assert!(changes(&["src"], &|| write(&root, "src/a.txt", "b\n")));
        assert!(changes(&["link.txt"], &|| write(&root, "target.txt", "BAD\n")), "a link's target");
        assert!(changes(&["dirlink"], &|| write(&root, "shared/s.txt", "t\n")), "a file in a linked folder");
        assert!(changes(&["dirlink"], &|| write(&root, "shared/new.txt", "n\n")), "a new file in a linked folder");
        assert!(changes(&["tobuilt"], &|| write(&root, "built/out.bin", "v2\n")), "an ignored target");
        assert!(changes(&["broken"], &|| write(&root, "nowhere.txt", "here\n")), "a target appearing");
        assert!(changes(&["later/new.txt"], &|| write(&root, "later/new.txt", "n\n")), "a named path appearing");
        assert!(!changes(&["out"], &|| write(dir.path(), "outside.txt", "p\n")), "read outside the workspace");
        let out = material(&root, &["out".to_string()]).unwrap();
        assert!(
            out.entries.iter().any(|e| e.status == "target" && e.fingerprint == "outside the workspace"),
            "{out:?}"
        );
        assert!(changes(&["out"], &|| {
            std::fs::remove_file(root.join("out")).unwrap();
            std::os::unix::fs::symlink(dir.path().join("elsewhere.txt"), root.join("out")).unwrap();
        }));
        // A scope path leading out of the workspace is never read.
        for outside in ["../outside.txt", &dir.path().join("outside.txt").display().to_string()] {
            assert!(!changes(&[outside], &|| write(dir.path(), "outside.txt", &format!("{outside}\n"))), "{outside}");
            let read = material(&root, &[outside.to_string()]).unwrap();
            assert_eq!(read.entries.iter().map(|e| e.status.as_str()).collect::<Vec<_>>(), ["outside"], "{outside}");
        }
        // Which of them git ignores: what a review's task changes add to git's diff.
        let ignored = |scope: &[&str]| {
            let scope: Vec<String> = scope.iter().map(|s| s.to_string()).collect();
            material(&root, &scope).unwrap().ignored
        };
        assert_eq!(ignored(&["y.cfg", "src", "link.txt"]), ["y.cfg"]);
        assert_eq!(ignored(&["tobuilt"]), ["built/out.bin"]);
        let named = material(&root, &["missing.txt".to_string()]).unwrap();
        assert_eq!(named.entries.iter().map(|e| e.status.as_str()).collect::<Vec<_>>(), ["absent"]);
    }

    #[test]
    fn symlinks_devices_and_big_files_are_fingerprinted_by_their_whole_content_streamed() {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("zero")).unwrap();
        assert!(fingerprint(dir.path(), "zero").starts_with("symlink:"));
        // A file is hashed whole, streamed: a byte changed in its middle, size unchanged, is seen.
        let big = File::create(dir.path().join("big")).unwrap();
        big.set_len(40 << 20).unwrap();
        let before = fingerprint(dir.path(), "big");
        std::os::unix::fs::FileExt::write_at(&big, b"X", 20 << 20).unwrap();
        assert_ne!(fingerprint(dir.path(), "big"), before);
        nix::unistd::mkfifo(&dir.path().join("pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert_eq!(fingerprint(dir.path(), "pipe"), "special:fifo");
        assert_eq!(fingerprint(dir.path(), "missing"), "deleted");
        std::fs::write(dir.path().join("small"), b"abc").unwrap();
        assert_eq!(fingerprint(dir.path(), "small"), format!("{:x}", Sha256::digest(b"abc")));
    }

    /// A large file's hash is kept once its change time is over a second old, and a write to
    /// it (its size and modification time kept) is read again all the same.
    #[test]
    fn a_large_files_kept_hash_is_read_again_once_it_is_written() {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().unwrap();
        let big = File::create(dir.path().join("big")).unwrap();
        big.set_len(KEPT_FROM + 1).unwrap();
        let first = fingerprint(dir.path(), "big");
        let stamp = || Stamp::of(&std::fs::symlink_metadata(dir.path().join("big")).unwrap());
        let kept = || {
            let key = (stamp().dev, stamp().ino, HashKind::Sha256);
            KEPT_HASHES.lock().unwrap().get(&key).is_some_and(|(at, _)| *at == stamp())
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !kept() {
            assert!(std::time::Instant::now() < deadline, "never kept");
            assert_eq!(fingerprint(dir.path(), "big"), first);
        }
        let modified = std::fs::metadata(dir.path().join("big")).unwrap().modified().unwrap();
        big.write_at(b"X", 4 << 20).unwrap();
        big.set_modified(modified).unwrap();
        assert_ne!(fingerprint(dir.path(), "big"), first);
    }

    /// Within one call a large file is read once under a stamp, though its change time is
    /// too recent for the hash to be kept across calls; a write to it (a new stamp) is read
    /// again, and the next call reads it again.
    #[test]
    fn a_large_file_is_read_once_per_call_whatever_its_change_time() {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        let big = File::create(&path).unwrap();
        big.set_len(KEPT_FROM + 1).unwrap();
        let reads = std::cell::Cell::new(0);
        let hash = |kind| {
            let meta = std::fs::symlink_metadata(&path).unwrap();
            kept_hash(&path, &meta, kind, || {
                reads.set(reads.get() + 1);
                hash_file(&path).map_err(|e| e.to_string())
            })
            .unwrap()
        };
        let first = one_call(|| {
            let first = hash(HashKind::Sha256);
            assert_eq!(hash(HashKind::Sha256), first);
            assert_eq!(reads.get(), 1, "read again within the call");
            hash(HashKind::Blob);
            assert_eq!(reads.get(), 2, "another hash is another read");
            // A call within the call is part of it.
            assert_eq!(one_call(|| hash(HashKind::Sha256)), first);
            assert_eq!(reads.get(), 2);
            big.write_at(b"X", 4 << 20).unwrap();
            assert_ne!(hash(HashKind::Sha256), first, "a write is read");
            assert_eq!(reads.get(), 3);
            first
        });
        // Written just now: its stamp has not settled (unless this machine took over a second
        // since, and kept it), so the next call reads it again.
        let stamp = Stamp::of(&std::fs::symlink_metadata(&path).unwrap());
        let kept = KEPT_HASHES
            .lock()
            .unwrap()
            .get(&(stamp.dev, stamp.ino, HashKind::Sha256))
            .is_some_and(|(at, _)| *at == stamp);
        let written = one_call(|| hash(HashKind::Sha256));
        assert_ne!(written, first);
        assert_eq!(reads.get(), if kept { 3 } else { 4 }, "an unsettled stamp trusted across calls");
        assert!(CALL_HASHES.with(|hashes| hashes.borrow().is_none()), "the call's hashes outlive it");
    }

    /// A material past the bound is stored grouped by folder, the same way every time: the
    /// grouped record against a fresh read names the changed folder, a file added beside it by
    /// itself, and the digest (over every file) is what tells the change. A small material
    /// stays an entry per file.
    #[test]
    fn a_large_material_is_stored_grouped_and_compared_like_with_like() {
        let (_dir, root) = new_repo();
        for i in 0..300 {
            write(&root, &format!("big/f{i:03}.txt"), &format!("{i}\n"));
        }
        write(&root, "big/deep/x.txt", "x");
        write(&root, "small/a.txt", "a");
        write(&root, "top.txt", "t");
        git(&root, &["add", "."]);
        git(&root, &["commit", "-qm", "c"]);
        let before = material(&root, &[]).unwrap();
        assert_eq!(before.entries.len(), 303, "one entry per file is what the digest covers");
        let stored = before.stored();
        assert_eq!(stored, before.stored(), "deterministic");
        let mut shuffled = before.entries.clone();
        shuffled.reverse();
        shuffled.sort_by(|a, b| a.path.cmp(&b.path).then_with(|| a.status.cmp(&b.status)));
        assert_eq!(super::stored(&shuffled), stored);
        assert!(stored.len() <= STORED_BOUND, "{}", stored.len());
        let paths: Vec<(&str, &str)> = stored.iter().map(|e| (e.path.as_str(), e.status.as_str())).collect();
        assert_eq!(paths, [("big/", "files"), ("small/a.txt", "file"), ("top.txt", "file")]);
        assert_eq!(super::stored(&stored), stored, "a stored form stays as it is");
        assert!(material_changes(&stored, &before.entries).is_empty(), "unchanged content, nothing listed");

        write(&root, "big/f007.txt", "changed\n");
        write(&root, "small/b.txt", "new");
        let after = material(&root, &[]).unwrap();
        assert_ne!(after.digest, before.digest);
        assert_eq!(material_changes(&stored, &after.entries), ["big/ (changed)", "small/b.txt (added)"]);
        // Deeper in the group, and the group gone.
        git(&root, &["checkout", "-q", "--", "big"]);
        std::fs::remove_file(root.join("small/b.txt")).unwrap();
        write(&root, "big/deep/x.txt", "y");
        assert_eq!(material_changes(&stored, &material(&root, &[]).unwrap().entries), ["big/ (changed)"]);
        std::fs::remove_dir_all(root.join("big")).unwrap();
        assert_eq!(material_changes(&stored, &material(&root, &[]).unwrap().entries), ["big/ (removed)"]);

        // The guard's snapshot: the task's spec (a runner path) is compared by itself.
        write(&root, ".scafld/specs/active/t.md", "spec");
        git(&root, &["checkout", "-q", "--", "big"]);
        let spec = ".scafld/specs/active/t.md".to_string();
        let kept = stored_guard(&root, &spec);
        write(&root, ".scafld/specs/active/t.md", "edited");
        let now = guard_snapshot(&root, &[], std::slice::from_ref(&spec)).unwrap();
        assert_eq!(crate::domain::review::mutations(&kept, &now, &[], &spec), std::slice::from_ref(&spec));
        write(&root, "big/f001.txt", "reviewer wrote here");
        let now = guard_snapshot(&root, &[], std::slice::from_ref(&spec)).unwrap();
        assert_eq!(crate::domain::review::mutations(&kept, &now, &[], &spec), [spec.clone(), "big/".to_string()]);
        // A scope below the group: the group's change is in it.
        let scope = vec!["big/f001.txt".to_string()];
        assert_eq!(crate::domain::review::mutations(&kept, &now, &scope, &spec), [spec, "big/".to_string()]);
    }

    fn stored_guard(root: &Path, spec: &String) -> Vec<BaselinePath> {
        let full = guard_snapshot(root, &[], std::slice::from_ref(spec)).unwrap();
        let kept = super::stored(&full);
        assert!(kept.iter().any(|e| &e.path == spec && e.status == "file"), "{kept:?}");
        assert!(kept.iter().any(|e| e.path == "big/" && e.status == "files"), "{kept:?}");
        kept
    }

    #[test]
    fn a_small_material_is_stored_an_entry_per_file() {
        let (_dir, root) = new_repo();
        for i in 0..20 {
            write(&root, &format!("src/f{i}.rs"), "x");
        }
        git(&root, &["add", "."]);
        git(&root, &["commit", "-qm", "c"]);
        let before = material(&root, &[]).unwrap();
        assert_eq!(before.stored(), before.entries);
        write(&root, "src/f3.rs", "y");
        let after = material(&root, &[]).unwrap();
        assert_eq!(material_changes(&before.stored(), &after.entries), ["src/f3.rs (changed)"]);
    }
}
