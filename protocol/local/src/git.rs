//! What the folders around a path say of git, read from the disk alone (no git library): git's
//! own store (a `.git` folder, or a bare repository: `HEAD`, `objects/` and `refs/` with no work
//! tree), and a `.git` file, the link from a work tree to its git directory elsewhere (a linked
//! worktree's, a submodule's): the client's discovery and the daemon's refusals share them.

use std::io::Read;
use std::path::{Path, PathBuf};

/// The most of a `.git` file read (it holds one `gitdir: <path>` line).
const MAX_LINK_BYTES: u64 = 4 << 10;

/// The git store (git directory) at or above `path`, when `path` is inside one: the nearest
/// folder named `.git`, or a folder laid out as a git directory (a bare repository, `git init
/// --bare`, or a git directory kept apart). Such a folder holds git's files, never a project's:
/// it has no work tree. `path` is taken as given: pass it absolute and resolved.
pub fn store_holding(path: &Path) -> Option<PathBuf> {
    path.ancestors()
        .find(|dir| dir.file_name().is_some_and(|name| name == ".git") || is_git_dir(dir))
        .map(Path::to_path_buf)
}

/// Whether `dir` is laid out as a git directory: a `HEAD` file and `objects/` and `refs/` folders.
pub fn is_git_dir(dir: &Path) -> bool {
    dir.join("HEAD").is_file() && dir.join("objects").is_dir() && dir.join("refs").is_dir()
}

/// A `.git` file: a work tree's link to its git directory elsewhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// The `.git` file itself.
    pub file: PathBuf,
    /// The git directory it names (made absolute against the file's folder).
    pub target: PathBuf,
}

impl Link {
    /// The link `dir/.git` holds, when it is a regular file of the `gitdir: <path>` form.
    pub fn in_folder(dir: &Path) -> Option<Link> {
        let file = dir.join(".git");
        if !std::fs::symlink_metadata(&file).ok()?.is_file() {
            return None;
        }
        let mut text = String::new();
        std::fs::File::open(&file).ok()?.take(MAX_LINK_BYTES).read_to_string(&mut text).ok()?;
        let named = text.lines().next()?.strip_prefix("gitdir:")?.trim();
        if named.is_empty() {
            return None;
        }
        Some(Link { target: dir.join(named), file })
    }

    /// The nearest link at or above `path` (`None` when the nearest `.git` there is a folder or
    /// there is none): the `.git` git finds first from `path`.
    pub fn nearest(path: &Path) -> Option<Link> {
        let dir = path.ancestors().find(|dir| std::fs::symlink_metadata(dir.join(".git")).is_ok())?;
        Link::in_folder(dir)
    }

    /// The work tree the link belongs to (the folder holding the `.git` file).
    pub fn work_tree(&self) -> &Path {
        self.file.parent().unwrap_or(&self.file)
    }

    /// Whether it is a linked worktree's (`git worktree add`): its git directory is one of the
    /// main repository's `worktrees/<name>` folders.
    pub fn is_worktree(&self) -> bool {
        self.target.parent().and_then(Path::file_name).is_some_and(|name| name == "worktrees")
    }

    /// Whether the git directory it names is gone (the main repository moved or was removed).
    pub fn dangling(&self) -> bool {
        !self.target.is_dir()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_and_links_are_told_from_the_disk() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let bare = root.join("r.git");
        for sub in ["objects/pack", "refs/heads"] {
            std::fs::create_dir_all(bare.join(sub)).unwrap();
        }
        std::fs::write(bare.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        assert_eq!(store_holding(&bare), Some(bare.clone()));
        assert_eq!(store_holding(&bare.join("objects/pack")), Some(bare.clone()));
        std::fs::create_dir_all(root.join("tree/.git/objects")).unwrap();
        assert_eq!(store_holding(&root.join("tree/.git/objects")), Some(root.join("tree/.git")));
        assert_eq!(store_holding(&root.join("tree")), None);

        let wt = root.join("wt/sub");
        std::fs::create_dir_all(&wt).unwrap();
        std::fs::write(root.join("wt/.git"), "gitdir: ../main/.git/worktrees/wt\n").unwrap();
        let link = Link::nearest(&wt).unwrap();
        assert_eq!(link.work_tree(), root.join("wt"));
        assert!(link.is_worktree());
        assert!(link.dangling());
        std::fs::create_dir_all(root.join("main/.git/worktrees/wt")).unwrap();
        assert!(!Link::nearest(&wt).unwrap().dangling());
        // A submodule's link is no worktree's; a `.git` folder is no link.
        std::fs::write(root.join("wt/.git"), "gitdir: ../main/.git/modules/wt\n").unwrap();
        assert!(!Link::nearest(&wt).unwrap().is_worktree());
        assert_eq!(Link::nearest(&root.join("tree")), None);
    }
}
