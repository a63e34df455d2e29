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

/// Why the environment names no socket or state directory scafld can use: said, with what to
/// set, rather than guessed (a relative path names another folder from each folder it is used
/// in, so another daemon with another ledger).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathsError {
    pub message: String,
    pub hint: String,
}

impl std::fmt::Display for PathsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}; {}", self.message, self.hint)
    }
}

impl std::error::Error for PathsError {}

impl Paths {
    /// Resolve from the process environment.
    pub fn from_env() -> Result<Paths, PathsError> {
        Paths::resolve(|name| env::var_os(name))
    }

    /// Resolve with `lookup` standing in for the environment.
    ///
    /// State: `$SCAFLD_STATE_DIR`, else `$XDG_STATE_HOME/scafld`, else `$HOME/.local/state/scafld`.
    /// Socket: `$SCAFLD_SOCKET`, else `$XDG_RUNTIME_DIR/scafld/scafldd.sock`, else
    /// `<state dir>/run/scafldd.sock`.
    ///
    /// A relative `SCAFLD_STATE_DIR` or `SCAFLD_SOCKET` is refused; a relative `XDG_*` or
    /// `HOME` is ignored, as the XDG base directory specification says; with none of them
    /// usable for the state directory it is refused (no hidden fallback elsewhere).
    pub fn resolve(lookup: impl Fn(&str) -> Option<OsString>) -> Result<Paths, PathsError> {
        let non_empty = |name: &str| lookup(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        let absolute = |name: &str| non_empty(name).filter(|p| p.is_absolute());
        let explicit = |name: &str| match non_empty(name) {
            Some(p) if p.is_relative() => Err(relative(name, &p)),
            other => Ok(other),
        };
        let state_dir = match explicit("SCAFLD_STATE_DIR")? {
            Some(dir) => dir,
            None => absolute("XDG_STATE_HOME")
                .map(|d| d.join("scafld"))
                .or_else(|| absolute("HOME").map(|h| h.join(".local/state/scafld")))
                .ok_or_else(|| PathsError {
                    message: "no state directory: none of SCAFLD_STATE_DIR, XDG_STATE_HOME or HOME is set to an absolute path".into(),
                    hint: "set HOME or XDG_STATE_HOME to an absolute path, or SCAFLD_STATE_DIR to the absolute path of the state directory to use (`scafld daemon status` run where it is set names it)".into(),
                })?,
        };
        let socket = match explicit("SCAFLD_SOCKET")? {
            Some(socket) => socket,
            None => absolute("XDG_RUNTIME_DIR")
                .map(|d| d.join("scafld/scafldd.sock"))
                .unwrap_or_else(|| state_dir.join("run/scafldd.sock")),
        };
        Ok(Paths { socket, state_dir })
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
        let file = std::fs::File::open(self.lock_file()).ok()?;
        // An earlier release's daemon held it with an `flock` (its pid is in the file too).
        let holder =
            crate::lock::holder(&file).or_else(|| crate::lock::held_by_an_earlier_release(&file).then_some(0))?;
        let text = crate::capped::read_text(&self.lock_file(), "lock file", 64 << 10).ok()?;
        let mut lines = text.lines();
        let pid = lines.next().and_then(|l| l.trim().parse().ok()).unwrap_or(holder);
        Some((pid, lines.next().filter(|l| !l.is_empty()).map(PathBuf::from)))
    }
}

/// The lock a daemon takes beside its socket, `<socket>.lock` (the whole name kept, so a socket
/// named `scafldd.sock` in the state directory does not share the state's `scafldd.lock`).
pub fn socket_lock_file(socket: &Path) -> PathBuf {
    let mut name = socket.as_os_str().to_os_string();
    name.push(".lock");
    PathBuf::from(name)
}

/// A relative `name` refused, with the absolute path it means from here to set instead.
fn relative(name: &str, path: &Path) -> PathsError {
    let here = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    PathsError {
        message: format!(
            "{name} is a relative path ({}): it would name another place from every folder scafld is run in, each with a daemon and ledger of its own",
            path.display()
        ),
        hint: format!(
            "set it to an absolute path, e.g. `export {name}={}`",
            scafld_protocol::cli::shell_word(&here.display().to_string())
        ),
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
        Paths::resolve(|name| map.get(name).cloned()).unwrap()
    }

    fn refused(vars: &[(&str, &str)]) -> PathsError {
        let map: HashMap<String, OsString> = vars.iter().map(|(k, v)| (k.to_string(), OsString::from(v))).collect();
        Paths::resolve(|name| map.get(name).cloned()).unwrap_err()
    }

    #[test]
    fn relative_explicit_paths_are_refused_and_relative_xdg_ignored() {
        assert!(refused(&[("SCAFLD_STATE_DIR", "rel"), ("HOME", "/h")]).message.contains("SCAFLD_STATE_DIR"));
        assert!(refused(&[("SCAFLD_SOCKET", "rel.sock"), ("HOME", "/h")]).message.contains("SCAFLD_SOCKET"));
        let p = resolve(&[("HOME", "/h"), ("XDG_RUNTIME_DIR", "run"), ("XDG_STATE_HOME", "st")]);
        assert_eq!(p.state_dir, PathBuf::from("/h/.local/state/scafld"));
        assert_eq!(p.socket, PathBuf::from("/h/.local/state/scafld/run/scafldd.sock"));
    }

    #[test]
    fn no_home_is_refused_not_guessed() {
        assert!(refused(&[]).message.contains("HOME"));
        assert!(refused(&[("HOME", "rel")]).message.contains("HOME"));
    }

    #[test]
    fn the_socket_lock_keeps_the_whole_name() {
        assert_eq!(socket_lock_file(Path::new("/st/scafldd.sock")), PathBuf::from("/st/scafldd.sock.lock"));
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
