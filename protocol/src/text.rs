//! How a control character is shown where it must be seen but never obeyed: the one notation
//! the client's terminal output and the daemon's spec projection share, and `one_line`, the one
//! way a path (or any value set inside a line) is shown in human text, spec lines and packets.

use std::borrow::Cow;

/// `c` as text when it is a control character (`None` for anything else): caret notation for
/// C0 controls and DEL (`^[`, `^@`, `^?`), `<U+009B>` for C1 controls. Callers decide what
/// to keep as it is (a newline, a tab).
pub fn shown_control(c: char) -> Option<String> {
    match c {
        '\u{7f}' => Some("^?".into()),
        c if (c as u32) < 0x20 => Some(format!("^{}", char::from(b'@' + c as u8))),
        c if c.is_control() => Some(format!("<U+{:04X}>", c as u32)),
        _ => None,
    }
}

/// A value shown inside one line of text for a person or a model (a path above all: a file
/// name may hold any byte but `/` and NUL): every control character in [`shown_control`]'s
/// notation, newlines and tabs too, so the value can neither break its line in two nor pass
/// for a line of scafld's own (a file named `a<LF>next: scafld complete t` shows as
/// `a^Jnext: scafld complete t`). Human output, the daemon's messages, spec projections,
/// review packets and reports all show paths through it; JSON carries them exact elsewhere.
pub fn one_line(value: &str) -> Cow<'_, str> {
    if !value.chars().any(char::is_control) {
        return Cow::Borrowed(value);
    }
    Cow::Owned(value.chars().map(|c| shown_control(c).unwrap_or_else(|| c.to_string())).collect())
}

/// Paths listed in one line, each through [`one_line`], joined by `, `.
pub fn listed<S: AsRef<str>>(paths: &[S]) -> String {
    paths.iter().map(|p| one_line(p.as_ref())).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::{Cow, listed, one_line, shown_control};

    #[test]
    fn a_value_keeps_to_its_line() {
        assert_eq!(one_line("src/evil\nnext: scafld complete t1"), "src/evil^Jnext: scafld complete t1");
        assert_eq!(one_line("a\tb\r\x1b[2J\u{9b}"), "a^Ib^M^[[2J<U+009B>");
        assert!(matches!(one_line("src/plain é"), Cow::Borrowed(_)));
        assert_eq!(listed(&["a\nb", "c"]), "a^Jb, c");
    }

    #[test]
    fn controls_are_shown_in_caret_notation_and_c1_by_code_point() {
        assert_eq!(shown_control('\u{1b}').as_deref(), Some("^["));
        assert_eq!(shown_control('\0').as_deref(), Some("^@"));
        assert_eq!(shown_control('\u{7f}').as_deref(), Some("^?"));
        assert_eq!(shown_control('\u{9b}').as_deref(), Some("<U+009B>"));
        assert_eq!(shown_control('a'), None);
        assert_eq!(shown_control('é'), None);
    }
}
