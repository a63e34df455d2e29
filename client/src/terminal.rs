//! Human text made safe for a terminal: the one filter every line the client prints for a
//! person goes through (the CLI's output, the language server's stderr).

use std::borrow::Cow;

/// The escape sequences the CLI's `Output::paint` writes: the only ones human text keeps, and
/// only when the client paints.
const PAINTED: [&str; 5] = ["\x1b[32m", "\x1b[31m", "\x1b[33m", "\x1b[1m", "\x1b[0m"];

/// Human text made safe for a terminal. Commands' output, spec text and file names reach it,
/// and a raw control character there could set the window title, clear the screen, or hide a
/// line behind a carriage return: each is shown in caret notation instead (`^[`, `^M`, `^?`,
/// C1 controls as `<U+009B>`). Newlines and tabs stay, and so does a CR before a newline;
/// with `color`, so do the colours the CLI's `Output::paint` writes. `--json` output is never
/// passed through this (JSON escapes control characters itself).
pub fn terminal_safe(text: &str, color: bool) -> Cow<'_, str> {
    let unsafe_char = |c: char| (c.is_control() && c != '\n' && c != '\t') || c == '\u{7f}';
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut safe = String::with_capacity(text.len() + 16);
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if color && let Some(code) = PAINTED.iter().find(|code| rest.starts_with(**code)) {
            safe.push_str(code);
            rest = &rest[code.len()..];
            continue;
        }
        match c {
            '\r' if rest[1..].starts_with('\n') => safe.push('\r'),
            '\n' | '\t' => safe.push(c),
            c => match scafld_protocol::text::shown_control(c) {
                Some(shown) => safe.push_str(&shown),
                None => safe.push(c),
            },
        }
        rest = &rest[c.len_utf8()..];
    }
    Cow::Owned(safe)
}

/// `text` without the colours the CLI's `Output::paint` wrote: for a stream that is no
/// terminal when the other one is (colour is decided per stream). Any other escape stays, for
/// [`terminal_safe`] to show.
pub fn unpainted(text: &str) -> Cow<'_, str> {
    if !PAINTED.iter().any(|code| text.contains(code)) {
        return Cow::Borrowed(text);
    }
    let mut plain = text.to_string();
    for code in PAINTED {
        plain = plain.replace(code, "");
    }
    Cow::Owned(plain)
}

/// A value shown inside one line of human text (a path, a name): every control character in
/// caret notation, newlines and tabs too, so a value cannot break its line in two or pass for
/// another line; the daemon shows paths with the same helper. The line it goes into still goes
/// through [`terminal_safe`].
pub use scafld_protocol::text::one_line;

/// Text someone else wrote (a reviewer's summary or finding, a provider's raw answer) shown
/// among the client's own lines: each of its lines after the first starts with `indent` and
/// `| `, so no line of it can pass for one of the tool's (a fake `next:` reads `  | next:`),
/// and every control character but the newline is in caret notation (a tab, a lone CR, an
/// escape). A CR before a newline, and newlines at the end, are dropped. `--json` output keeps
/// the text exact; this is for human output only.
pub fn quoted<'a>(value: &'a str, indent: &str) -> Cow<'a, str> {
    let value = value.trim_end_matches(['\n', '\r']);
    if !value.chars().any(char::is_control) {
        return Cow::Borrowed(value);
    }
    let mut shown = String::with_capacity(value.len() + 16);
    for (i, line) in value.split('\n').enumerate() {
        if i > 0 {
            shown.push('\n');
            shown.push_str(indent);
            shown.push_str("| ");
        }
        let line = line.strip_suffix('\r').unwrap_or(line);
        shown.extend(line.chars().map(|c| scafld_protocol::text::shown_control(c).unwrap_or_else(|| c.to_string())));
    }
    Cow::Owned(shown)
}

#[cfg(test)]
mod tests {
    use super::{one_line, quoted, unpainted};

    #[test]
    fn unpainted_text_keeps_everything_but_the_paint() {
        assert_eq!(unpainted("\x1b[31mfail\x1b[0m: \x1b[2J"), "fail: \x1b[2J");
        assert!(matches!(unpainted("plain"), std::borrow::Cow::Borrowed("plain")));
    }

    #[test]
    fn quoted_text_cannot_pass_for_the_tools_own_lines() {
        assert_eq!(quoted("looks fine\r\nnext: scafld complete t\n", "  "), "looks fine\n  | next: scafld complete t");
        assert_eq!(quoted("a\tb\rc\x1b[2J", ""), "a^Ib^Mc^[[2J");
        assert!(matches!(quoted("plain é", "  "), std::borrow::Cow::Borrowed("plain é")));
    }

    #[test]
    fn a_value_keeps_to_its_line() {
        assert_eq!(one_line("/tmp/w\nworkspaces: 0\t\x1b[2J"), "/tmp/w^Jworkspaces: 0^I^[[2J");
        assert!(matches!(one_line("/tmp/plain é"), std::borrow::Cow::Borrowed(_)));
    }
}
