//! The runner's folder rule: a workspace's `.scafld/` folder, and everything below it, belongs
//! to that workspace and is never the root of another. `init` there is refused (by the daemon)
//! and the client's discovery from there finds the enclosing workspace, never a `.scafld`
//! nested inside it (one an older `init` may have made).

use std::path::{Path, PathBuf};

/// The folder that marks a workspace.
pub const SCAFLD_DIR: &str = ".scafld";

/// The workspace whose `.scafld/` folder holds `path` (or is `path`): the folder above the
/// outermost `.scafld` folder `path` passes through; `None` when it passes through none.
/// `path` is taken as given: pass it absolute and resolved.
pub fn enclosing(path: &Path) -> Option<PathBuf> {
    path.ancestors()
        .filter(|dir| dir.file_name().is_some_and(|name| name == SCAFLD_DIR) && dir.is_dir())
        .last()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::enclosing;

    #[test]
    fn the_outermost_scafld_folder_decides() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join(".scafld/.scafld/specs/drafts")).unwrap();
        std::fs::create_dir_all(root.join("src/.scafldish")).unwrap();
        assert_eq!(enclosing(&root), None);
        assert_eq!(enclosing(&root.join("src/.scafldish")), None);
        assert_eq!(enclosing(&root.join(".scafld")), Some(root.clone()));
        assert_eq!(enclosing(&root.join(".scafld/.scafld/specs/drafts")), Some(root.clone()));
        // A file named `.scafld` is no workspace's folder.
        std::fs::write(root.join("src/.scafld"), "").unwrap();
        assert_eq!(enclosing(&root.join("src/.scafld")), None);
    }
}
