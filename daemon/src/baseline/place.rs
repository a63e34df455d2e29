//! Where a workspace sits in its git work tree: the one mapping between workspace-relative paths
//! (a scope, a change, a receipt's files) and the work-tree-relative paths git reads and
//! reports. A workspace may be any folder of the work tree (a package of a monorepo); git names
//! its `f.txt` `pkg/f.txt`, and what git reports outside the workspace is none of its business.

use std::path::{Path, PathBuf};

use git2::Repository;

/// A workspace root's place in the work tree of the repository holding it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The work tree's top folder, as the repository names it.
    pub top: PathBuf,
    /// The workspace root below `top`, `/`-separated, no slash at either end; empty at the top.
    prefix: String,
}

impl Place {
    /// The place of `root` in `repo`'s work tree; refused for a bare repository or a root the
    /// work tree does not hold (`core.worktree` set elsewhere).
    pub fn of(root: &Path, repo: &Repository) -> Result<Place, String> {
        let top = repo.workdir().ok_or("the git repository is bare")?.to_path_buf();
        let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        let below = canonical(root).strip_prefix(canonical(&top)).map(Path::to_path_buf).map_err(|_| {
            format!(
                "{} is not inside the work tree of its git repository ({}): scafld reads the workspace's files through git there",
                root.display(),
                top.display()
            )
        })?;
        let prefix = below.display().to_string().trim_matches('/').to_string();
        Ok(Place { top, prefix })
    }

    /// Whether the repository ignores the workspace's folder (a `vendor/` rule over a workspace
    /// in `vendor/tool`, or `.git/info/exclude`): git's status walks then report none of its
    /// files, so no edit or new file in it would ever show as a change. (A workspace at the
    /// work tree's top is never ignored.)
    pub fn ignored(&self, repo: &Repository) -> bool {
        !self.prefix.is_empty() && repo.is_path_ignored(Path::new(&self.prefix)).unwrap_or(false)
    }

    /// The workspace root's own path in the work tree (empty at the top).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The work-tree path of the workspace path `path`: the workspace itself (`""`, `.`) is its
    /// folder; an absolute path is kept as it is (outside, never read).
    pub fn git(&self, path: &str) -> String {
        if self.prefix.is_empty() || path.starts_with('/') {
            path.to_string()
        } else if path.is_empty() || path == "." {
            self.prefix.clone()
        } else {
            format!("{}/{path}", self.prefix)
        }
    }

    /// The work-tree paths of a workspace scope: the whole workspace (empty) is its folder, or
    /// still empty (the whole tree) at the top.
    pub fn scope(&self, scope: &[String]) -> Vec<String> {
        if scope.is_empty() && !self.prefix.is_empty() {
            return vec![self.prefix.clone()];
        }
        scope.iter().map(|path| self.git(path)).collect()
    }

    /// The workspace path of the work-tree path `path`, `None` outside the workspace; an
    /// absolute path is kept as it is.
    pub fn workspace<'a>(&self, path: &'a str) -> Option<&'a str> {
        if self.prefix.is_empty() || path.starts_with('/') {
            return Some(path);
        }
        if path == self.prefix {
            return Some("");
        }
        path.strip_prefix(self.prefix.as_str()).and_then(|rest| rest.strip_prefix('/'))
    }

    /// A diff label's path prefix for paths in the work tree (`a/<this>...`): what the
    /// workspace calls its folder (`pkg/` becomes empty).
    pub fn label(&self) -> String {
        if self.prefix.is_empty() { String::new() } else { format!("{}/", self.prefix) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(prefix: &str) -> Place {
        Place { top: PathBuf::from("/top"), prefix: prefix.into() }
    }

    #[test]
    fn workspace_paths_and_work_tree_paths_map_both_ways() {
        let top = place("");
        assert_eq!(top.git("f.txt"), "f.txt");
        assert_eq!(top.scope(&[]), Vec::<String>::new());
        assert_eq!(top.workspace("pkg/f.txt"), Some("pkg/f.txt"));
        let pkg = place("pkg/sub");
        assert_eq!(pkg.git("f.txt"), "pkg/sub/f.txt");
        assert_eq!(pkg.git("."), "pkg/sub");
        assert_eq!(pkg.git("../x"), "pkg/sub/../x");
        assert_eq!(pkg.git("/abs"), "/abs");
        assert_eq!(pkg.scope(&[]), vec!["pkg/sub".to_string()]);
        assert_eq!(pkg.workspace("pkg/sub/f.txt"), Some("f.txt"));
        assert_eq!(pkg.workspace("pkg/sub/../x"), Some("../x"));
        assert_eq!(pkg.workspace("pkg/sub"), Some(""));
        assert_eq!(pkg.workspace("pkg/subway/f.txt"), None);
        assert_eq!(pkg.workspace("r.txt"), None);
        assert_eq!(pkg.workspace("/abs"), Some("/abs"));
    }
}
