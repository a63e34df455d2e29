//! Files the caller names as input (`--context-file`, `--dossier`): read through the one capped
//! reader, never past the most the daemon would take of them, so `/dev/zero`, a FIFO or a folder
//! is a clear refusal instead of a client that reads (or waits) for ever.

use std::path::Path;

/// The text of the file `what` names at `path` (`--context-file`), at most `cap` bytes; why
/// not, otherwise (the caller's error to show in its family's usage code).
pub fn read_text(what: &'static str, path: &Path, cap: usize) -> Result<String, String> {
    scafld_local::capped::read_text(path, what, cap as u64).map_err(|e| e.to_string())
}
