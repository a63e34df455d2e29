//! Resolution of the daemon's socket and state directory from the environment, shared by the
//! client and the daemon so both always agree.

use std::env;
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// Longest socket path the kernel accepts in `sockaddr_un.sun_path` (108 bytes with the NUL).
pub const MAX_SOCKET_PATH_BYTES: usize = 107;

/// Where the daemon keeps its socket and its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    pub socket: PathBuf,
    pub state_dir: PathBuf,
}

impl Paths {
    /// Resolve from the process environment.
    pub fn from_env() -> Paths {
        Paths::resolve(|name| env::var_os(name))
    }

    /// Resolve with `lookup` standing in for the environment.
    ///
    /// State: `$SCAFLD_STATE_DIR`, else `$XDG_STATE_HOME/scafld`, else `$HOME/.local/state/scafld`.
    /// Socket: `$SCAFLD_SOCKET`, else `$XDG_RUNTIME_DIR/scafld/scafldd.sock`, else
    /// `<state dir>/run/scafldd.sock`.
    pub fn resolve(lookup: impl Fn(&str) -> Option<OsString>) -> Paths {
        let non_empty = |name: &str| lookup(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        let state_dir = non_empty("SCAFLD_STATE_DIR")
            .or_else(|| non_empty("XDG_STATE_HOME").map(|d| d.join("scafld")))
            .or_else(|| non_empty("HOME").map(|h| h.join(".local/state/scafld")))
            .unwrap_or_else(|| env::temp_dir().join(format!("scafld-{}", nix::unistd::getuid())));
        let socket = non_empty("SCAFLD_SOCKET")
            .or_else(|| non_empty("XDG_RUNTIME_DIR").map(|d| d.join("scafld/scafldd.sock")))
            .unwrap_or_else(|| state_dir.join("run/scafldd.sock"));
        Paths { socket, state_dir }
    }

    pub fn log_file(&self) -> PathBuf {
        self.state_dir.join("scafldd.log")
    }

    /// The state directory's lock file, which a daemon holds for its life.
    pub fn lock_file(&self) -> PathBuf {
        self.state_dir.join(LOCK_FILE)
    }

    /// The daemon holding the state directory, when one does: its pid and the socket it
    /// answers at (both written in the lock file), so that a client whose socket setting
    /// differs can name it rather than suggest starting a second daemon, which the lock would
    /// refuse.
    pub fn state_holder(&self) -> Option<(u32, Option<PathBuf>)> {
        use nix::fcntl::{Flock, FlockArg};
        let file = std::fs::File::open(self.lock_file()).ok()?;
        // Taken (and at once released): nobody holds it.
        if Flock::lock(file, FlockArg::LockSharedNonblock).is_ok() {
            return None;
        }
        let text = crate::capped::read_text(&self.lock_file(), "lock file", 64 << 10).ok()?;
        let mut lines = text.lines();
        let pid = lines.next()?.trim().parse().ok()?;
        Some((pid, lines.next().filter(|l| !l.is_empty()).map(PathBuf::from)))
    }
}

/// The state directory's lock file's name.
pub const LOCK_FILE: &str = "scafldd.lock";

/// Why `dir` cannot hold the daemon's socket or state safely, if it cannot: it must belong to
/// us (or to root, like `/run/user`), and if others may write it, it must be sticky so they
/// cannot replace what we put there. A directory another user created first (the `/tmp`
/// fallback can be squatted) fails this.
pub fn unsafe_dir(dir: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let uid = nix::unistd::getuid().as_raw();
    let meta = match std::fs::metadata(dir) {
        Ok(meta) => meta,
        Err(e) => return Some(format!("cannot inspect {}: {e}", dir.display())),
    };
    if meta.uid() != uid && meta.uid() != 0 {
        return Some(format!(
            "{} belongs to uid {}, not to you (uid {uid}); use a folder of your own",
            dir.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 && meta.mode() & 0o1000 == 0 {
        return Some(format!(
            "{} may be written by others (mode {:o}); make it yours alone (`chmod go-w {}`) or use another folder",
            dir.display(),
            meta.mode() & 0o7777,
            scafld_protocol::cli::shell_word(&dir.display().to_string())
        ));
    }
    None
}

/// Run `f` with an address for `socket` that fits in `sun_path`.
///
/// Paths over the kernel limit are reached through `/proc/self/fd/<dir fd>/<name>`, which names
/// the same directory entry with a short path; this works for `bind` and `connect` alike.
pub fn with_socket_address<T>(socket: &Path, f: impl FnOnce(&Path) -> io::Result<T>) -> io::Result<T> {
    if socket.as_os_str().len() <= MAX_SOCKET_PATH_BYTES {
        return f(socket);
    }
    let (Some(dir), Some(name)) = (socket.parent(), socket.file_name()) else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "socket path has no file name"));
    };
    let dir_handle = File::open(if dir.as_os_str().is_empty() { Path::new(".") } else { dir })?;
    let alias = PathBuf::from(format!("/proc/self/fd/{}", dir_handle.as_raw_fd())).join(name);
    if alias.as_os_str().len() > MAX_SOCKET_PATH_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("socket file name {:?} is too long for a Unix socket (limit {MAX_SOCKET_PATH_BYTES} bytes)", name),
        ));
    }
    let result = f(&alias);
    drop(dir_handle);
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn resolve(vars: &[(&str, &str)]) -> Paths {
        let map: HashMap<String, OsString> = vars.iter().map(|(k, v)| (k.to_string(), OsString::from(v))).collect();
        Paths::resolve(|name| map.get(name).cloned())
    }

    #[test]
    fn explicit_variables_win() {
        let p = resolve(&[("SCAFLD_SOCKET", "/s.sock"), ("SCAFLD_STATE_DIR", "/st"), ("XDG_RUNTIME_DIR", "/run/u")]);
        assert_eq!(p.socket, PathBuf::from("/s.sock"));
        assert_eq!(p.state_dir, PathBuf::from("/st"));
    }

    #[test]
    fn xdg_then_home_fallbacks() {
        let p = resolve(&[("XDG_RUNTIME_DIR", "/run/u"), ("XDG_STATE_HOME", "/xs")]);
        assert_eq!(p.socket, PathBuf::from("/run/u/scafld/scafldd.sock"));
        assert_eq!(p.state_dir, PathBuf::from("/xs/scafld"));
        let p = resolve(&[("HOME", "/home/a"), ("XDG_RUNTIME_DIR", "")]);
        assert_eq!(p.state_dir, PathBuf::from("/home/a/.local/state/scafld"));
        assert_eq!(p.socket, PathBuf::from("/home/a/.local/state/scafld/run/scafldd.sock"));
    }
}
