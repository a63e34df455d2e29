//! Where a file the caller named may be written: never through a symlink, never over anything
//! but a regular file (a folder, a FIFO, a device), and over an existing file only when the
//! caller asked to replace it (`--force`). The one rule `session --export` (in the daemon),
//! `man --out` and `review --output file` (in the client) all follow.

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
    /// The name is something else that is no regular file (a FIFO, a device, a socket): never
    /// opened, so a FIFO cannot block the writer and a device is never replaced, `--force` or not.
    NotAFile(PathBuf, &'static str),
    /// A file is there and the caller did not ask to replace it.
    Exists(PathBuf),
}

impl Refusal {
    /// What the caller can do about it.
    pub fn hint(&self) -> &'static str {
        match self {
            Refusal::Symlink(_) => "remove the link or choose another path; scafld never writes through a symlink",
            Refusal::Directory(_) => "choose a file's path, not a folder's",
            Refusal::NotAFile(..) => "choose a regular file's path; scafld writes only regular files",
            Refusal::Exists(_) => "pass --force to replace it, or choose another path",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Symlink(path) => write!(f, "{} is a symlink; it is not written through", path.display()),
            Refusal::Directory(path) => write!(f, "{} is a directory", path.display()),
            Refusal::NotAFile(path, kind) => write!(f, "{} is a {kind}, not a regular file", path.display()),
            Refusal::Exists(path) => write!(f, "{} already exists", path.display()),
        }
    }
}

/// What a file type that is neither a link, a folder nor a regular file is called.
fn kind(file_type: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_fifo() {
        "FIFO"
    } else if file_type.is_char_device() {
        "character device"
    } else if file_type.is_block_device() {
        "block device"
    } else if file_type.is_socket() {
        "socket"
    } else {
        "special file"
    }
}

/// May `path` (its last component as named, never resolved) be written? Nothing there, or,
/// with `force`, a regular file; never a link, a folder, a FIFO, a device or a socket.
pub fn check(path: &Path, force: bool) -> Result<(), Refusal> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(Refusal::Symlink(path.to_path_buf())),
        Ok(meta) if meta.is_dir() => Err(Refusal::Directory(path.to_path_buf())),
        Ok(meta) if !meta.is_file() => Err(Refusal::NotAFile(path.to_path_buf(), kind(meta.file_type()))),
        Ok(_) if !force => Err(Refusal::Exists(path.to_path_buf())),
        _ => Ok(()),
    }
}

/// Write `bytes` to `path` as [`check`] allows, in the open itself: `O_NOFOLLOW`, `O_NONBLOCK`
/// (a FIFO that appears after the check cannot block), and `O_EXCL` unless `force`, so a link
/// or a file that appears after the check is refused too (`AlreadyExists`, or the `ELOOP` of a
/// link); what was opened is checked to be a regular file before a byte is written.
pub fn write(path: &Path, bytes: &[u8], force: bool) -> io::Result<()> {
    use nix::fcntl::OFlag;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK).bits());
    if force {
        // Not `truncate`: a device that appeared meanwhile is refused below, untouched.
        options.create(true);
    } else {
        options.create_new(true);
    }
    let mut file = options.open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        let why = Refusal::NotAFile(path.to_path_buf(), kind(meta.file_type()));
        return Err(io::Error::new(io::ErrorKind::InvalidInput, why.to_string()));
    }
    file.set_len(0)?;
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

    #[test]
    fn a_fifo_is_refused_and_never_blocks_a_write() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        for force in [false, true] {
            assert_eq!(check(&fifo, force), Err(Refusal::NotAFile(fifo.clone(), "FIFO")));
            // No reader: the non-blocking open fails (ENXIO) rather than waiting for one.
            assert!(write(&fifo, b"theirs", force).is_err());
        }
    }
}
