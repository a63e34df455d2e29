//! How a control character is shown where it must be seen but never obeyed: the one notation
//! the client's terminal output and the daemon's spec projection share; `one_line`, the one
//! way a path (or any value set inside a line) is shown in human text, spec lines and packets;
//! and `shown_bytes`, the one way bytes that are not UTF-8 are shown as text.

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

/// Bytes shown as text with nothing lost to sight: UTF-8 as it is, each byte that is no part
/// of UTF-8 as `\xE9` (two upper-case hex digits). A Latin-1 line whose `é` became `è`
/// shows `caf\xE9` and `caf\xE8`, never two U+FFFD alike. Review packets show file content
/// and file names through it.
pub fn shown_bytes(bytes: &[u8]) -> Cow<'_, str> {
    if let Ok(text) = std::str::from_utf8(bytes) {
        return Cow::Borrowed(text);
    }
    let mut text = String::with_capacity(bytes.len() + 8);
    for chunk in bytes.utf8_chunks() {
        text.push_str(chunk.valid());
        for byte in chunk.invalid() {
            text.push_str(&format!("\\x{byte:02X}"));
        }
    }
    Cow::Owned(text)
}

/// Paths listed in one line, each through [`one_line`], joined by `, `.
pub fn listed<S: AsRef<str>>(paths: &[S]) -> String {
    paths.iter().map(|p| one_line(p.as_ref())).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::{Cow, listed, one_line, shown_bytes, shown_control};

    #[test]
    fn bytes_that_are_not_utf8_are_shown_each_by_its_value() {
        assert_eq!(shown_bytes(b"caf\xe9\n"), "caf\\xE9\n");
        assert_ne!(shown_bytes(b"caf\xe9"), shown_bytes(b"caf\xe8"));
        // A sequence cut short is its bytes, the UTF-8 around it kept.
        assert_eq!(shown_bytes("é\u{65e5}".as_bytes().split_at(4).0), "é\\xE6\\x97");
        assert!(matches!(shown_bytes("日本 é".as_bytes()), Cow::Borrowed("日本 é")));
        // Source text is shown as written: a reviewer must never see `\\x1b` for `\x1b`.
        assert!(matches!(shown_bytes(br#"println!("\x1b[31m{}\x1b[0m", b"\x00");"#), Cow::Borrowed(_)));
    }

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
