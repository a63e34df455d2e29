//! How a control character is shown where it must be seen but never obeyed: the one notation
//! the client's terminal output and the daemon's spec projection share; `one_line`, the one
//! way a path (or any value set inside a line) is shown in human text, spec lines and packets;
//! and `shown_bytes` (with `Notation`, for a whole text such as a file's diff), the one way
//! bytes that are not UTF-8 are shown as text.

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
/// shows `caf\xE9` and `caf\xE8`, never two U+FFFD alike. The text `\xE9` shows alike: a
/// file's diff in a review packet is shown through [`Notation`], which tells them apart.
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

/// How the bytes of one text (a file's diff in a review packet) are shown, chosen for the
/// text as a whole: a reader must be able to tell a byte shown by value from the same
/// characters written, yet see written source (`"\x1b[0m"`) exactly as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notation {
    /// Every byte is UTF-8: shown exactly as written (there is no byte shown by value, so
    /// nothing a literal `\xE9` could be taken for).
    AsWritten,
    /// Some byte is not UTF-8: each such byte is shown by its value, `\xE9`, and every
    /// backslash written as `\\`, so the text `\xE9` (`\\xE9`) never reads as the byte.
    Escaped,
}

impl Notation {
    /// The notation a text made of `parts` needs: [`Notation::Escaped`] as soon as one part
    /// is not UTF-8 (each part is judged whole, so pass whole lines, never cut ones).
    pub fn of<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> Notation {
        match parts.into_iter().all(|part| std::str::from_utf8(part).is_ok()) {
            true => Notation::AsWritten,
            false => Notation::Escaped,
        }
    }

    /// `bytes` shown in this notation: [`shown_bytes`] as written, or escaped.
    pub fn show(self, bytes: &[u8]) -> Cow<'_, str> {
        match self {
            Notation::AsWritten => shown_bytes(bytes),
            Notation::Escaped => {
                let mut text = String::with_capacity(bytes.len() + 8);
                for chunk in bytes.utf8_chunks() {
                    text.push_str(&chunk.valid().replace('\\', "\\\\"));
                    for byte in chunk.invalid() {
                        text.push_str(&format!("\\x{byte:02X}"));
                    }
                }
                Cow::Owned(text)
            }
        }
    }
}

/// Paths listed in one line, each through [`one_line`], joined by `, `.
pub fn listed<S: AsRef<str>>(paths: &[S]) -> String {
    paths.iter().map(|p| one_line(p.as_ref())).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::{Cow, Notation, listed, one_line, shown_bytes, shown_control};

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

    /// A text with a byte that is not UTF-8 doubles its backslashes, so its literal `\xE9`
    /// never reads as the byte 0xE9 shown by value; a text all UTF-8 is shown as written,
    /// `\x1b` and all.
    #[test]
    fn a_text_not_utf8_doubles_its_backslashes_and_one_in_utf8_keeps_them() {
        let latin1: [&[u8]; 2] = [b"caf\xe9\n", br"caf\xE9 \n"];
        let notation = Notation::of(latin1);
        assert_eq!(notation, Notation::Escaped);
        assert_eq!(notation.show(latin1[0]), "caf\\xE9\n");
        assert_eq!(notation.show(latin1[1]), r"caf\\xE9 \\n");
        assert_ne!(notation.show(latin1[0]), notation.show(latin1[1]));
        // A byte beside a literal backslash, and a sequence cut short, are each their bytes.
        assert_eq!(notation.show(b"a\\\xe9"), r"a\\\xE9");
        assert_eq!(notation.show("é\u{65e5}".as_bytes().split_at(4).0), "é\\xE6\\x97");
        let source: [&[u8]; 2] = [br#"println!("\x1b[0m");"#, "日本 é\n".as_bytes()];
        assert_eq!(Notation::of(source), Notation::AsWritten);
        assert!(matches!(Notation::AsWritten.show(source[0]), Cow::Borrowed(r#"println!("\x1b[0m");"#)));
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
