//! Newline framing for the socket: one message per line, with a hard cap on line length.
//!
//! Unlike `LinesCodec`, an oversized or non-UTF-8 line is an item rather than a stream error,
//! so the connection survives it: the rest of an oversized line is discarded as it arrives and
//! memory stays bounded by the cap.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio_util::bytes::BytesMut;
use tokio_util::codec::Decoder;

#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    Line(String),
    /// A line longer than the cap; reported once, as soon as the cap is passed.
    Oversized,
    NotUtf8,
    /// The connections together hold more unfinished lines than their budget, and this one
    /// holds more than [`SMALL_PARTIAL`] of them; the connection should be closed.
    OverBudget,
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
    /// Partial-line bytes of every connection, and what this one has counted in it.
    shared: Option<(Arc<AtomicUsize>, usize)>,
    held: usize,
}

impl LineDecoder {
    pub fn new(max_len: usize) -> LineDecoder {
        LineDecoder { max_len, scanned: 0, discarding: false, shared: None, held: 0 }
    }

    /// Count this decoder's buffered bytes in `total`, shared by every connection, and report
    /// [`Frame::OverBudget`] when `total` passes `budget` while this one holds a large part.
    pub fn with_shared_budget(mut self, total: Arc<AtomicUsize>, budget: usize) -> LineDecoder {
        self.shared = Some((total, budget));
        self
    }

    /// Bring the shared count up to date with the buffer; true when over the budget.
    fn account(&mut self, buffered: usize) -> bool {
        let Some((total, budget)) = &self.shared else { return false };
        if buffered >= self.held {
            total.fetch_add(buffered - self.held, Ordering::Relaxed);
        } else {
            total.fetch_sub(self.held - buffered, Ordering::Relaxed);
        }
        self.held = buffered;
        buffered > SMALL_PARTIAL && total.load(Ordering::Relaxed) > *budget
    }
}

impl Drop for LineDecoder {
    fn drop(&mut self) {
        self.account(0);
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
    fn connections_share_a_budget_for_unfinished_lines() {
        let total = Arc::new(AtomicUsize::new(0));
        let budget = SMALL_PARTIAL * 3;
        let big = |n| {
            let mut d = LineDecoder::new(usize::MAX).with_shared_budget(total.clone(), budget);
            let mut buf = BytesMut::from(&vec![b'x'; n][..]);
            let frame = d.decode(&mut buf).unwrap();
            (d, buf, frame)
        };
        let (a, _, first) = big(SMALL_PARTIAL * 2);
        assert_eq!(first, None);
        // The second large partial line passes the budget: that connection is told so.
        let (_b, buf, second) = big(SMALL_PARTIAL * 2);
        assert_eq!((second, buf.len()), (Some(Frame::OverBudget), 0));
        // A small one still gets through while the budget is spent.
        let mut small = LineDecoder::new(usize::MAX).with_shared_budget(total.clone(), budget);
        let mut buf = BytesMut::from(&b"{}"[..]);
        assert_eq!(small.decode(&mut buf).unwrap(), None);
        drop(small);
        drop(a);
        assert_eq!(total.load(Ordering::Relaxed), 0, "closed connections give their bytes back");
    }

    #[test]
    fn invalid_utf8_is_a_frame_not_an_error() {
        let mut d = LineDecoder::new(64);
        assert_eq!(frames(&mut d, &[b"\xff\xfe\n"]), vec![Frame::NotUtf8]);
    }
}
