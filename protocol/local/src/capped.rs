//! Reading a file someone else supplies (a spec, a receipt, a key, a template, anything a cloned
//! repository holds) whole: only a regular file (a symlink may lead to one), looked at before it
//! is opened (a device is never opened), opened without blocking (a FIFO swapped in meanwhile
//! never holds the reader) and checked again once open, and never more than a cap, so no such
//! file can exhaust the memory of the process reading it or hang it. The one such reader.

use std::fmt;
use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;

/// Why a file was not read.
#[derive(Debug)]
pub enum Refusal {
    /// It could not be opened or read (a missing file included: [`ReadError::is_not_found`]).
    Io(io::Error),
    /// It is not a regular file: what it is (`directory`, `FIFO`, `socket`, `device`).
    NotAFile(&'static str),
    /// It holds more than the cap: its length, `None` when it grew past the cap while it was
    /// read.
    TooLarge(Option<u64>),
    /// It is not UTF-8 ([`read_text`] only).
    NotText,
}

/// A file that was not read, with its path, what it was read as and the cap.
#[derive(Debug)]
pub struct ReadError {
    pub path: PathBuf,
    /// What the file was read as, for a person: `receipt`, `trusted keys file`, `template`.
    pub what: &'static str,
    pub limit: u64,
    pub refusal: Refusal,
}

impl ReadError {
    pub fn is_not_found(&self) -> bool {
        matches!(&self.refusal, Refusal::Io(e) if e.kind() == io::ErrorKind::NotFound)
    }

    /// What to do about it, for a hint.
    pub fn hint(&self) -> String {
        match &self.refusal {
            Refusal::Io(e) if e.kind() == io::ErrorKind::NotFound => "check the path".into(),
            Refusal::Io(_) => "check the path and its permissions".into(),
            Refusal::NotAFile(_) => format!("name a regular file; a {} is at most {}", self.what, size(self.limit)),
            Refusal::TooLarge(_) => {
                format!("name the right file, or make it smaller: a {} is at most {}", self.what, size(self.limit))
            }
            Refusal::NotText => format!("a {} is UTF-8 text", self.what),
        }
    }
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, path) = (self.what, self.path.display());
        match &self.refusal {
            Refusal::Io(e) => write!(f, "cannot read the {what} {path}: {e}"),
            Refusal::NotAFile(kind) => {
                write!(f, "the {what} {path} is a {kind}, not a regular file; it was not read: {}", self.hint())
            }
            Refusal::TooLarge(Some(len)) => write!(
                f,
                "the {what} {path} is {}, over the {} a {what} may have; it was not read: {}",
                size(*len),
                size(self.limit),
                self.hint()
            ),
            Refusal::TooLarge(None) => write!(
                f,
                "the {what} {path} grew past the {} a {what} may have while it was read; it was not read: {}",
                size(self.limit),
                self.hint()
            ),
            Refusal::NotText => write!(f, "the {what} {path} is not UTF-8 text; it was not read"),
        }
    }
}

impl std::error::Error for ReadError {}

/// The regular file at `path` (following symlinks), opened for reading when it holds at most
/// `limit` bytes; anything else is refused without reading it: see the module's comment. For a
/// caller that streams the file (hashes it, counts its lines); [`read`] reads it whole.
pub fn open(path: &Path, what: &'static str, limit: u64) -> Result<File, ReadError> {
    let refuse = |refusal| ReadError { path: path.to_path_buf(), what, limit, refusal };
    let check = |meta: &Metadata| -> Result<(), ReadError> {
        if let Some(kind) = not_a_file(meta) {
            return Err(refuse(Refusal::NotAFile(kind)));
        }
        if meta.len() > limit {
            return Err(refuse(Refusal::TooLarge(Some(meta.len()))));
        }
        Ok(())
    };
    // Looked at first: a device is never opened (opening one can act on it).
    check(&std::fs::metadata(path).map_err(|e| refuse(Refusal::Io(e)))?)?;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NONBLOCK | OFlag::O_NOCTTY).bits())
        .open(path)
        .map_err(|e| refuse(Refusal::Io(e)))?;
    // Then what was opened, not what the path named a moment before.
    check(&file.metadata().map_err(|e| refuse(Refusal::Io(e)))?)?;
    Ok(file)
}

/// The bytes of the regular file at `path` (following symlinks), at most `limit` of them;
/// anything else is refused without reading it: see the module's comment.
pub fn read(path: &Path, what: &'static str, limit: u64) -> Result<Vec<u8>, ReadError> {
    read_opened(open(path, what, limit)?, path, what, limit)
}

/// The bytes of `file`, which [`open`] gave for `path`, at most `limit` of them: for a caller
/// that checks what it opened before it reads it.
pub fn read_opened(file: File, path: &Path, what: &'static str, limit: u64) -> Result<Vec<u8>, ReadError> {
    let refuse = |refusal| ReadError { path: path.to_path_buf(), what, limit, refusal };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut bytes = Vec::with_capacity(len.min(limit) as usize);
    file.take(limit + 1).read_to_end(&mut bytes).map_err(|e| refuse(Refusal::Io(e)))?;
    if bytes.len() as u64 > limit {
        return Err(refuse(Refusal::TooLarge(None)));
    }
    Ok(bytes)
}

/// [`read`], as UTF-8 text.
pub fn read_text(path: &Path, what: &'static str, limit: u64) -> Result<String, ReadError> {
    let bytes = read(path, what, limit)?;
    String::from_utf8(bytes).map_err(|_| ReadError { path: path.to_path_buf(), what, limit, refusal: Refusal::NotText })
}

/// [`read_text`], with `None` for a file that does not exist.
pub fn read_text_if_there(path: &Path, what: &'static str, limit: u64) -> Result<Option<String>, ReadError> {
    match read_text(path, what, limit) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// What a file that is not a regular one is, for a person; `None` for a regular file.
fn not_a_file(meta: &Metadata) -> Option<&'static str> {
    let kind = meta.file_type();
    if kind.is_file() {
        None
    } else if kind.is_dir() {
        Some("directory")
    } else if kind.is_fifo() {
        Some("FIFO")
    } else if kind.is_socket() {
        Some("socket")
    } else {
        Some("device")
    }
}

/// A size for people: bytes, with mebibytes to one decimal once that says more.
pub fn size(bytes: u64) -> String {
    if bytes < 1 << 20 {
        return format!("{bytes} bytes");
    }
    format!("{:.1} MiB ({bytes} bytes)", bytes as f64 / f64::from(1 << 20))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_for_people() {
        assert_eq!(size(4_194_305), "4.0 MiB (4194305 bytes)");
        assert_eq!(size(1000), "1000 bytes");
    }

    #[test]
    fn only_a_regular_file_within_the_cap_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let small = dir.path().join("small.json");
        std::fs::write(&small, "{}").unwrap();
        assert_eq!(read_text(&small, "receipt", 16).unwrap(), "{}");
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&small, &link).unwrap();
        assert_eq!(read(&link, "receipt", 16).unwrap(), b"{}");

        let big = dir.path().join("big.json");
        std::fs::File::create(&big).unwrap().set_len(17).unwrap();
        let e = read(&big, "receipt", 16).unwrap_err();
        assert!(matches!(e.refusal, Refusal::TooLarge(Some(17))), "{e}");
        assert!(e.to_string().contains("is 17 bytes, over the 16 bytes a receipt may have"), "{e}");

        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let e = read(&fifo, "receipt", 16).unwrap_err();
        assert!(e.to_string().contains("is a FIFO, not a regular file"), "{e}");

        let zero = dir.path().join("zero.json");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let e = read(&zero, "template", 16).unwrap_err();
        assert!(e.to_string().contains("is a device, not a regular file"), "{e}");
        assert!(read(dir.path(), "template", 16).unwrap_err().to_string().contains("is a directory"));

        let missing = read_text_if_there(&dir.path().join("none"), "template", 16).unwrap();
        assert!(missing.is_none());
        std::fs::write(&small, [0xff, 0xfe]).unwrap();
        assert!(matches!(read_text(&small, "receipt", 16).unwrap_err().refusal, Refusal::NotText));
    }
}
