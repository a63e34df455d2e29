//! How a provider's JSON event stream on stdout shows it is alive: the rule shared by the
//! daemon's runner and `scafld worker` for invocations with `idle_on_stdout`.
//!
//! Offline, codex 0.169 with `--json` prints `{"type":"error","message":"Reconnecting..."}`
//! forever (the gap growing to about a minute), so bytes alone would keep a dead review alive
//! until its absolute timeout. Gemini 0.61, while the model API answers only errors, prints
//! `Attempt N failed... Retrying` on stderr, which is not judged at all. Only a complete event
//! line on stdout that is not an error counts.

/// Longest partial line kept while waiting for its newline; a longer line counts as progress
/// when it ends (nothing that large is a reconnect notice).
const PARTIAL_CAP: usize = 64 * 1024;

/// Watches one stdout stream, chunk by chunk.
#[derive(Debug, Default)]
pub struct ProgressWatch {
    partial: Vec<u8>,
    overflowed: bool,
}

impl ProgressWatch {
    /// Feed the next chunk; true when a line completed in it shows progress.
    pub fn feed(&mut self, chunk: &[u8]) -> bool {
        let mut progress = false;
        for piece in chunk.split_inclusive(|&b| b == b'\n') {
            let room = PARTIAL_CAP.saturating_sub(self.partial.len());
            self.overflowed |= piece.len() > room;
            self.partial.extend_from_slice(&piece[..piece.len().min(room)]);
            if piece.ends_with(b"\n") {
                progress |= self.overflowed || shows_progress(&self.partial);
                self.partial.clear();
                self.overflowed = false;
            }
        }
        progress
    }
}

/// Whether one event line shows progress: any JSON event but an `error` one; a non-empty line
/// that is not JSON counts too (the stream is not what we expected, so do not judge it idle).
pub fn shows_progress(line: &[u8]) -> bool {
    let trimmed = line.trim_ascii();
    if trimmed.is_empty() {
        return false;
    }
    match serde_json::from_slice::<serde_json::Value>(trimmed) {
        Ok(event) => event.get("type").and_then(|t| t.as_str()) != Some("error"),
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_complete_non_error_events_count() {
        let mut watch = ProgressWatch::default();
        assert!(!watch.feed(b"{\"type\":\"error\",\"message\":\"Reconnecting... 1/5\"}\n"));
        assert!(!watch.feed(b"\n"));
        // Split across chunks: nothing until the newline arrives.
        assert!(!watch.feed(b"{\"type\":\"turn.sta"));
        assert!(watch.feed(b"rted\"}\n"));
        assert!(watch.feed(b"{\"type\":\"error\"}\n{\"type\":\"item.completed\"}\n"));
        assert!(watch.feed(b"plain text\n"));
        let mut long = vec![b'x'; PARTIAL_CAP * 2];
        long.push(b'\n');
        assert!(watch.feed(&long));
        assert!(!watch.feed(b"{\"type\":\"error\"}\n"), "the overflow does not leak into the next line");
    }
}
