//! Where scafld's lines fall in the editor's. scafld numbers lines by `\n` (a `\r\n` ends one
//! too); LSP also ends a line at a lone `\r` (3.17 "Text Documents": `\n`, `\r\n` and `\r`), so
//! in a text holding a stray CR every later line is further down in the editor than scafld
//! says. Every position published is built here, held within LSP's `uinteger`.

use std::path::Path;

use lsp_types::{Position, Range};

/// The largest line (or character) a position may carry: LSP's `uinteger` is 0 to 2^31-1, and
/// a client refuses a position past it (Neovim 0.7 will not draw it). A line past the file's
/// end is fine: the client shows it at the end.
pub const MAX_POSITION: u32 = i32::MAX as u32;

/// How much of a file is read to place lines in it (a spec is checked up to the same size).
const MAX_READ_BYTES: u64 = scafld_protocol::methods::MAX_CHECK_TEXT_BYTES as u64;

/// The editor's line of each of scafld's lines in one text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LineMap {
    /// `(line, shift)`: from scafld's 0-based `line` on (up to the next entry's), the editor's
    /// line is `shift` further down (the lone CRs before it). Only where the shift grows; none
    /// for a text without a lone CR, whose lines are the editor's.
    shifts: Vec<(u32, u32)>,
}

impl LineMap {
    pub fn of(text: &[u8]) -> LineMap {
        let mut shifts: Vec<(u32, u32)> = Vec::new();
        let (mut line, mut shift) = (0u32, 0u32);
        let mut note = |line: u32, shift: u32| {
            if shift > shifts.last().map_or(0, |&(_, s)| s) {
                shifts.push((line, shift));
            }
        };
        for (at, &byte) in text.iter().enumerate() {
            match byte {
                b'\n' => {
                    line = line.saturating_add(1);
                    note(line, shift);
                }
                b'\r' if text.get(at + 1) != Some(&b'\n') => shift = shift.saturating_add(1),
                _ => {}
            }
        }
        // A lone CR on the last line moves the line after the text (where a range ends).
        note(line.saturating_add(1), shift);
        LineMap { shifts }
    }

    /// The map of a file as it is on disk; none (scafld's lines as they are) when it cannot be
    /// read or is larger than a spec may be.
    pub fn of_file(path: &Path) -> LineMap {
        scafld_local::capped::read(path, "file", MAX_READ_BYTES).map(|bytes| LineMap::of(&bytes)).unwrap_or_default()
    }

    /// The shift of scafld's 0-based `line`.
    fn shift(&self, line: u32) -> u32 {
        let after = self.shifts.partition_point(|&(from, _)| from <= line);
        after.checked_sub(1).map_or(0, |at| self.shifts[at].1)
    }

    /// The editor's line (0-based) that scafld's 0-based `line` starts on.
    pub fn start(&self, line: u32) -> u32 {
        line.saturating_add(self.shift(line))
    }

    /// scafld's 0-based line that holds the editor's `line`.
    pub fn scafld_line(&self, line: u32) -> u32 {
        // The last scafld line starting at or before it (`start` only grows).
        let after = self.shifts.partition_point(|&(from, shift)| from.saturating_add(shift) <= line);
        let (from, shift) = after.checked_sub(1).map_or((0, 0), |at| self.shifts[at]);
        let until = self.shifts.get(after).map_or(u32::MAX, |&(next, _)| next - 1);
        line.saturating_sub(shift).clamp(from, until)
    }

    /// scafld's 0-based lines `first` to `last` whole: from the start of the first to the start
    /// of the line after the last, which every client reads as the line's end (a character past
    /// it, such as `u32::MAX`, is beyond the protocol's 2^31-1 and Neovim 0.7 refuses to draw
    /// it). A line past [`MAX_POSITION`] (a reviewer may cite any number) is held at it.
    pub fn whole_lines(&self, first: u32, last: u32) -> Range {
        Range::new(line_start(self.start(first)), line_start(self.start(last.saturating_add(1))))
    }

    /// One of scafld's 0-based lines whole, as [`LineMap::whole_lines`].
    pub fn line_range(&self, line: u32) -> Range {
        self.whole_lines(line, line)
    }
}

/// scafld's lines are 1-based with 0 for the whole file; the 0-based line it means.
pub fn zero_based(scafld_line: usize) -> u32 {
    u32::try_from(scafld_line.saturating_sub(1)).unwrap_or(u32::MAX)
}

/// A position at the start of the editor's `line`, held within [`MAX_POSITION`].
fn line_start(line: u32) -> Position {
    Position::new(line.min(MAX_POSITION), 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The editor's lines of a text, split as LSP splits them.
    fn lsp_lines(text: &str) -> Vec<&str> {
        let mut lines = Vec::new();
        let mut rest = text;
        while let Some(at) = rest.find(['\r', '\n']) {
            lines.push(&rest[..at]);
            let skip = if rest[at..].starts_with("\r\n") { 2 } else { 1 };
            rest = &rest[at + skip..];
        }
        lines.push(rest);
        lines
    }

    /// Every scafld line starts where the editor shows its text, and every editor line maps
    /// back to the scafld line holding it; `\r\n` is one line end as in both.
    #[test]
    fn scafld_lines_land_on_the_editors_lines_past_lone_crs() {
        let text = "a\r\nb\rc\n\rd\r\r\ne\nf\r";
        let map = LineMap::of(text.as_bytes());
        let (scafld, lsp): (Vec<&str>, Vec<&str>) = (text.lines().collect(), lsp_lines(text));
        assert_eq!(lsp, ["a", "b", "c", "", "d", "", "e", "f", ""]);
        for (n, line) in scafld.iter().enumerate() {
            let head = line.split('\r').next().unwrap();
            assert_eq!(lsp[map.start(n as u32) as usize], head, "scafld line {n} {line:?}");
        }
        let back: Vec<u32> = (0..lsp.len() as u32).map(|l| map.scafld_line(l)).collect();
        assert_eq!(back, [0, 1, 1, 2, 2, 2, 3, 4, 4]);
        // A range ends at the start of the next line: scafld's line 1 covers the editor's 1 and 2.
        assert_eq!(map.line_range(1), Range::new(Position::new(1, 0), Position::new(3, 0)));
        assert_eq!(map.start(5), 9, "the line after the text follows its last lone CR");
        assert_eq!(map.scafld_line(20), 16, "past the text, lines run on");
    }

    #[test]
    fn a_text_without_lone_crs_keeps_scafld_lines_and_every_position_stays_in_range() {
        let map = LineMap::of(b"a\r\nb\nc");
        assert_eq!(map, LineMap::default());
        assert_eq!((map.start(7), map.scafld_line(7)), (7, 7));
        let far = map.line_range(zero_based(3_000_000_000));
        assert_eq!((far.start.line, far.end.line), (MAX_POSITION, MAX_POSITION));
        assert_eq!(map.line_range(u32::MAX).end, Position::new(MAX_POSITION, 0));
        assert_eq!(zero_based(0), 0);
        assert_eq!(zero_based(1), 0);
    }
}
