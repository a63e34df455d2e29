//! Files the caller names as input (`--context-file`, `--dossier`): read only when they are
//! regular files, and never past the most the daemon would take of them, so `/dev/zero`, a
//! FIFO or a folder is a clear refusal instead of a client that reads (or waits) for ever.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The text of the file `flag` names at `path`, at most `cap` bytes; why not, otherwise (the
/// caller's error to show in its family's usage code).
pub fn read_text(flag: &str, path: &Path, cap: usize) -> Result<String, String> {
    let cannot = |e: std::io::Error| format!("cannot read {flag} {}: {e}", path.display());
    // Non-blocking, so that opening a FIFO with no writer returns at once (then is refused).
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)
        .map_err(cannot)?;
    if !file.metadata().map_err(cannot)?.is_file() {
        return Err(format!("{flag} {} is not a regular file", path.display()));
    }
    let mut bytes = Vec::new();
    file.take(cap as u64 + 1).read_to_end(&mut bytes).map_err(cannot)?;
    if bytes.len() > cap {
        return Err(format!("{flag} {} is more than {cap} bytes; at most {cap} are accepted", path.display()));
    }
    String::from_utf8(bytes).map_err(|_| format!("{flag} {} is not UTF-8 text", path.display()))
}
