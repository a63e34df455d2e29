//! Where a file the caller named may be written: never through a symlink, never over a
//! folder, and over an existing file only when the caller asked to replace it (`--force`). The
//! one rule `session --export` (in the daemon) and `man --out` (in the client) both follow.

use std::fmt;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Why a file may not be written where the caller named it. Every one is the caller's to
/// change (another path, or `--force`): a usage error, whatever the command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The name is a symlink: what it points at (anywhere) is never written through it.
    Symlink(PathBuf),
    /// The name is a folder.
    Directory(PathBuf),
    /// A file is there and the caller did not ask to replace it.
    Exists(PathBuf),
}

impl Refusal {
    /// What the caller can do about it.
    pub fn hint(&self) -> &'static str {
        match self {
            Refusal::Symlink(_) => "remove the link or choose another path; scafld never writes through a symlink",
            Refusal::Directory(_) => "choose a file's path, not a folder's",
            Refusal::Exists(_) => "pass --force to replace it, or choose another path",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Symlink(path) => write!(f, "{} is a symlink; it is not written through", path.display()),
            Refusal::Directory(path) => write!(f, "{} is a directory", path.display()),
            Refusal::Exists(path) => write!(f, "{} already exists", path.display()),
        }
    }
}

/// May `path` (its last component as named, never resolved) be written? Nothing there, or,
/// with `force`, a regular file (or anything else that is neither a link nor a folder).
pub fn check(path: &Path, force: bool) -> Result<(), Refusal> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(Refusal::Symlink(path.to_path_buf())),
        Ok(meta) if meta.is_dir() => Err(Refusal::Directory(path.to_path_buf())),
        Ok(_) if !force => Err(Refusal::Exists(path.to_path_buf())),
        _ => Ok(()),
    }
}

/// Write `bytes` to `path` as [`check`] allows, in the open itself: `O_NOFOLLOW`, and
/// `O_EXCL` unless `force`, so a link or a file that appears after the check is refused too
/// (`AlreadyExists`, or the `ELOOP` of a link).
pub fn write(path: &Path, bytes: &[u8], force: bool) -> io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits());
    if force {
        options.create(true).truncate(true);
    } else {
        options.create_new(true);
    }
    let mut file = options.open(path)?;
    file.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::{Refusal, check, write};

    #[test]
    fn links_folders_and_unforced_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (file, link, sub, new) =
            (dir.path().join("file"), dir.path().join("link"), dir.path().join("sub"), dir.path().join("new"));
        std::fs::write(&file, "mine").unwrap();
        std::os::unix::fs::symlink(&file, &link).unwrap();
        std::fs::create_dir(&sub).unwrap();
        assert_eq!(check(&file, false), Err(Refusal::Exists(file.clone())));
        assert_eq!(check(&file, true), Ok(()));
        for force in [false, true] {
            assert_eq!(check(&link, force), Err(Refusal::Symlink(link.clone())));
            assert_eq!(check(&sub, force), Err(Refusal::Directory(sub.clone())));
            assert!(write(&link, b"theirs", force).is_err());
        }
        assert_eq!(check(&new, false), Ok(()));
        assert!(write(&file, b"theirs", false).is_err());
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
        write(&file, b"theirs", true).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "theirs");
    }
}
