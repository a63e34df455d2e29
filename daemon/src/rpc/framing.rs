//! Newline framing for the socket: one message per line, with a hard cap on line length.
//!
//! Unlike `LinesCodec`, an oversized or non-UTF-8 line is an item rather than a stream error,
//! so the connection survives it: the rest of an oversized line is discarded as it arrives and
//! memory stays bounded by the cap.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::time::Instant;

use tokio_util::bytes::BytesMut;
use tokio_util::codec::Decoder;
use tokio_util::sync::CancellationToken;

#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    Line(String),
    /// A line longer than the cap; reported once, as soon as the cap is passed.
    Oversized,
    NotUtf8,
    /// The connections together hold more unfinished lines than their budget, and this one's
    /// large unfinished line is the one begun longest ago (or it was dropped for a newer
    /// one); the connection should be closed.
    OverBudget,
}

/// The unfinished request lines of every connection, against one budget. When they pass it,
/// the large line (over [`SMALL_PARTIAL`]) begun longest ago is dropped: a line left
/// unfinished (a stalled or hostile client) loses to a fresh request that needs the room.
pub struct PartialLines {
    budget: usize,
    state: std::sync::Mutex<PartialState>,
}

#[derive(Default)]
struct PartialState {
    total: usize,
    next: u64,
    holders: HashMap<u64, Holder>,
}

struct Holder {
    held: usize,
    /// When its unfinished line passed [`SMALL_PARTIAL`].
    large_since: Option<Instant>,
    /// Cancelled when its line is dropped to make room for another's.
    dropped: CancellationToken,
}

impl PartialLines {
    pub fn new(budget: usize) -> Arc<PartialLines> {
        Arc::new(PartialLines { budget, state: std::sync::Mutex::new(PartialState::default()) })
    }

    fn join(&self, dropped: CancellationToken) -> u64 {
        let mut state = crate::sync::lock(&self.state);
        state.next += 1;
        let key = state.next;
        state.holders.insert(key, Holder { held: 0, large_since: None, dropped });
        key
    }

    fn leave(&self, key: u64) {
        let mut state = crate::sync::lock(&self.state);
        if let Some(holder) = state.holders.remove(&key) {
            state.total -= holder.held;
        }
    }

    /// Count `buffered` bytes for `key`; true when its line is to be dropped (it is the
    /// oldest large one while over the budget, or was already dropped for another).
    fn account(&self, key: u64, buffered: usize) -> bool {
        let mut state = crate::sync::lock(&self.state);
        let Some(holder) = state.holders.get_mut(&key) else { return true };
        let before = std::mem::replace(&mut holder.held, buffered);
        holder.large_since = if buffered > SMALL_PARTIAL { holder.large_since.or(Some(Instant::now())) } else { None };
        state.total = state.total - before + buffered;
        while buffered > SMALL_PARTIAL && state.total > self.budget {
            let oldest = state
                .holders
                .iter()
                .filter_map(|(key, holder)| holder.large_since.map(|since| (since, *key)))
                .min()
                .map(|(_, key)| key);
            match oldest {
                Some(oldest) if oldest != key => {
                    if let Some(dropped) = state.holders.remove(&oldest) {
                        state.total -= dropped.held;
                        dropped.dropped.cancel();
                    }
                }
                _ => return true,
            }
        }
        false
    }
}

/// An unfinished line this short never counts against a connection when the budget is spent:
/// ordinary requests keep working while a few connections hold huge partial lines.
pub const SMALL_PARTIAL: usize = 1024 * 1024;

pub struct LineDecoder {
    max_len: usize,
    /// Bytes of the buffer already searched for a newline.
    scanned: usize,
    /// Inside an oversized line: drop bytes until the next newline.
    discarding: bool,
    /// Unfinished lines of every connection, and this one's key among them.
    shared: Option<(Arc<PartialLines>, u64)>,
}

impl LineDecoder {
    pub fn new(max_len: usize) -> LineDecoder {
        LineDecoder { max_len, scanned: 0, discarding: false, shared: None }
    }

    /// Count this decoder's buffered bytes in `lines`, shared by every connection, and report
    /// [`Frame::OverBudget`] when its line is the one to drop; `dropped` is cancelled when it
    /// is dropped for another connection's line (the connection should then close too).
    pub fn with_shared_budget(mut self, lines: Arc<PartialLines>, dropped: CancellationToken) -> LineDecoder {
        let key = lines.join(dropped);
        self.shared = Some((lines, key));
        self
    }

    /// Bring the shared count up to date with the buffer; true when this line is dropped.
    fn account(&mut self, buffered: usize) -> bool {
        let Some((lines, key)) = &self.shared else { return false };
        lines.account(*key, buffered)
    }
}

impl Drop for LineDecoder {
    fn drop(&mut self) {
        if let Some((lines, key)) = &self.shared {
            lines.leave(*key);
        }
    }
}

impl Decoder for LineDecoder {
    type Item = Frame;
    type Error = io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> io::Result<Option<Frame>> {
        let frame = self.split(buf)?;
        // A complete line goes out first; the budget is judged again on the next call.
        if self.account(buf.len()) && frame.is_none() {
            buf.clear();
            self.scanned = 0;
            self.discarding = true;
            self.account(0);
            return Ok(Some(Frame::OverBudget));
        }
        Ok(frame)
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> io::Result<Option<Frame>> {
        match self.decode(buf)? {
            Some(frame) => Ok(Some(frame)),
            // A final line without a newline still counts.
            None if !buf.is_empty() && !self.discarding => {
                buf.extend_from_slice(b"\n");
                self.decode(buf)
            }
            None => {
                buf.clear();
                self.account(0);
                Ok(None)
            }
        }
    }
}

impl LineDecoder {
    fn split(&mut self, buf: &mut BytesMut) -> io::Result<Option<Frame>> {
        loop {
            let newline = buf[self.scanned..].iter().position(|b| *b == b'\n').map(|i| self.scanned + i);
            match newline {
                Some(end) => {
                    let line = buf.split_to(end + 1);
                    self.scanned = 0;
                    if std::mem::take(&mut self.discarding) {
                        continue; // the tail of a line already reported as oversized
                    }
                    if end > self.max_len {
                        // The whole over-long line arrived in one read.
                        return Ok(Some(Frame::Oversized));
                    }
                    let text = line[..end].strip_suffix(b"\r").unwrap_or(&line[..end]);
                    return Ok(Some(match std::str::from_utf8(text) {
                        Ok(text) => Frame::Line(text.to_string()),
                        Err(_) => Frame::NotUtf8,
                    }));
                }
                None if self.discarding => {
                    buf.clear();
                    self.scanned = 0;
                    return Ok(None);
                }
                None if buf.len() > self.max_len => {
                    buf.clear();
                    self.scanned = 0;
                    self.discarding = true;
                    return Ok(Some(Frame::Oversized));
                }
                None => {
                    self.scanned = buf.len();
                    return Ok(None);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(decoder: &mut LineDecoder, chunks: &[&[u8]]) -> Vec<Frame> {
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for chunk in chunks {
            buf.extend_from_slice(chunk);
            while let Some(frame) = decoder.decode(&mut buf).unwrap() {
                out.push(frame);
            }
        }
        out
    }

    #[test]
    fn splits_lines_across_chunks_and_strips_cr() {
        let mut d = LineDecoder::new(64);
        let out = frames(&mut d, &[b"ab", b"c\r\nde", b"f\n"]);
        assert_eq!(out, vec![Frame::Line("abc".into()), Frame::Line("def".into())]);
    }

    #[test]
    fn oversized_line_is_reported_once_and_the_next_line_survives() {
        let mut d = LineDecoder::new(4);
        let out = frames(&mut d, &[b"0123456", b"789", b"abc\nok\n"]);
        assert_eq!(out, vec![Frame::Oversized, Frame::Line("ok".into())]);
    }

    #[test]
    fn oversized_line_arriving_in_one_chunk_is_refused() {
        let mut d = LineDecoder::new(4);
        assert_eq!(frames(&mut d, &[b"0123456789\nok\n"]), vec![Frame::Oversized, Frame::Line("ok".into())]);
    }

    #[test]
    fn connections_share_a_budget_and_the_line_unfinished_longest_is_dropped() {
        let lines = PartialLines::new(SMALL_PARTIAL * 3);
        let big = |n| {
            let dropped = CancellationToken::new();
            let mut d = LineDecoder::new(usize::MAX).with_shared_budget(lines.clone(), dropped.clone());
            let mut buf = BytesMut::from(&vec![b'x'; n][..]);
            let frame = d.decode(&mut buf).unwrap();
            (d, buf, dropped, frame)
        };
        let (mut a, mut a_buf, a_dropped, first) = big(SMALL_PARTIAL * 2);
        assert_eq!(first, None);
        // A second large line passes the budget: the older one is dropped for it.
        let (b, _, b_dropped, second) = big(SMALL_PARTIAL * 2);
        assert_eq!(second, None);
        assert!(a_dropped.is_cancelled() && !b_dropped.is_cancelled());
        a_buf.extend_from_slice(b"x");
        assert_eq!(a.decode(&mut a_buf).unwrap(), Some(Frame::OverBudget));
        // A small one still gets through while the budget is spent.
        let mut small = LineDecoder::new(usize::MAX).with_shared_budget(lines.clone(), CancellationToken::new());
        let mut buf = BytesMut::from(&b"{}"[..]);
        assert_eq!(small.decode(&mut buf).unwrap(), None);
        drop((small, a, b));
        assert_eq!(crate::sync::lock(&lines.state).total, 0, "closed connections give their bytes back");
    }

    #[test]
    fn invalid_utf8_is_a_frame_not_an_error() {
        let mut d = LineDecoder::new(64);
        assert_eq!(frames(&mut d, &[b"\xff\xfe\n"]), vec![Frame::NotUtf8]);
    }
}
