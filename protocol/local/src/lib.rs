//! What the client and the daemon both need to agree on about this machine: where the daemon's
//! socket and state live ([`paths`]) and how it locks them ([`lock`]), whether a directory is safe to hold them, and how to reach
//! the socket, how to run a command ([`runner`]) and end what it orphans ([`reaper`]), what `/proc` says of a
//! process ([`proc`]), which build an executable file is ([`executable`]), how to read a file someone else supplies ([`capped`]), where a file the caller named may be written ([`out_file`]) and which folders
//! can never be a workspace's root ([`workspace`]), what the folders around a path say of git ([`git`]), and how a boolean environment variable reads
//! ([`env_flag`]). A separate small crate so that the daemon
//! does not depend on the client.

pub mod capped;
pub mod executable;
pub mod git;
pub mod lock;
pub mod out_file;
pub mod paths;
pub mod proc;
pub mod reaper;
pub mod runner;
pub mod workspace;

pub use paths::Paths;

use std::os::unix::net::UnixStream;
use std::path::Path;

/// Connect to `socket` without speaking to whatever listens there (paths longer than the
/// kernel's limit included): used to find out whether a daemon answers.
pub fn probe(socket: &Path) -> std::io::Result<UnixStream> {
    paths::with_socket_address(socket, |address| UnixStream::connect(address))
}

/// The folder for throwaway files: `$TMPDIR` when it names an absolute path, else `/tmp`. The
/// standard library takes an empty or relative `TMPDIR` as it is, which puts the files in
/// whatever folder the caller stands in.
pub fn temp_dir() -> std::path::PathBuf {
    std::env::var_os("TMPDIR")
        .map(std::path::PathBuf::from)
        .filter(|dir| dir.is_absolute())
        .unwrap_or_else(|| std::path::PathBuf::from("/tmp"))
}

/// A fresh random id: 32 hex digits from the kernel's random source.
pub fn new_id() -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// How a boolean environment variable (`SCAFLD_NO_AUTOSTART`, `CI`) reads, one way for every
/// one: unset, empty, `0`, `false`, `no` or `off` (in any case, spaces around ignored) is off;
/// any other value is on.
pub fn env_flag(value: Option<&str>) -> bool {
    value.is_some_and(|value| flag_word(value) != Some(false))
}

/// The words that say on or off, in any case, spaces around ignored: `1`, `true`, `yes`, `on`
/// and `0`, `false`, `no`, `off` or nothing. Anything else is neither (`None`).
pub fn flag_word(value: &str) -> Option<bool> {
    let value = value.trim();
    let is = |words: &[&str]| words.iter().any(|word| value.eq_ignore_ascii_case(word));
    match value.is_empty() || is(&FLAG_OFF) {
        true => Some(false),
        false => is(&FLAG_ON).then_some(true),
    }
}

/// [`flag_word`]'s words for on, and for off.
pub const FLAG_ON: [&str; 4] = ["1", "true", "yes", "on"];
pub const FLAG_OFF: [&str; 4] = ["0", "false", "no", "off"];

#[cfg(test)]
mod tests {
    use super::{env_flag, flag_word};

    #[test]
    fn a_flag_is_off_only_when_unset_or_saying_so() {
        for off in [None, Some(""), Some(" "), Some("0"), Some("false"), Some("FALSE"), Some("No"), Some(" off ")] {
            assert!(!env_flag(off), "{off:?}");
        }
        for on in ["1", "true", "TRUE", "yes", "on", "anything"] {
            assert!(env_flag(Some(on)), "{on}");
        }
    }

    #[test]
    fn a_flag_word_is_on_off_or_neither() {
        for on in ["1", "true", "TRUE", " yes ", "On"] {
            assert_eq!(flag_word(on), Some(true), "{on}");
        }
        for off in ["", " ", "0", "false", "No", "OFF"] {
            assert_eq!(flag_word(off), Some(false), "{off}");
        }
        for neither in ["2", "y", "anything"] {
            assert_eq!(flag_word(neither), None, "{neither}");
        }
    }
}
