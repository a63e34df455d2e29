//! How a control character is shown where it must be seen but never obeyed: the one notation
//! the client's terminal output and the daemon's spec projection share.

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

#[cfg(test)]
mod tests {
    use super::shown_control;

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
