//! Task ids: the one validation rule every entry point (CLI and RPC) goes through.

use std::fmt;

/// Longest accepted task id, in bytes.
pub const MAX_TASK_ID_LEN: usize = 96;

/// A task id that is safe to use as a file name: `^[a-z0-9][a-z0-9._-]*$` without `..`, at
/// most [`MAX_TASK_ID_LEN`] bytes. Dots inside an id are harmless (`runtime-rigor-1.7.1`, as
/// real workspaces have); path-like ids (`../x`, `a/b`, `/abs`, `.hidden`), empty ids and
/// control characters can never be constructed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskIdError {
    #[error("task id is empty")]
    Empty,
    #[error("task id {0:?} is longer than {MAX_TASK_ID_LEN} bytes")]
    TooLong(String),
    #[error("task id {0:?} looks like a path; task ids name a spec file and may not contain `/`, `\\` or `..`")]
    PathLike(String),
    #[error("task id {0:?} contains a control character")]
    Control(String),
    #[error("task id {0:?} must start with a lowercase letter or a digit and use only a-z, 0-9, `-`, `_` and `.`")]
    Charset(String),
    #[error("task id {0:?} ends with `.`; its spec file would be named `<id>..md`")]
    TrailingDot(String),
}

impl TaskId {
    pub fn parse(raw: &str) -> Result<TaskId, TaskIdError> {
        let shown = || raw.chars().take(MAX_TASK_ID_LEN).collect::<String>();
        if raw.is_empty() {
            return Err(TaskIdError::Empty);
        }
        if raw.chars().any(char::is_control) {
            // Shown escaped once, by the message's `{:?}`.
            return Err(TaskIdError::Control(shown()));
        }
        if raw.contains('/') || raw.contains('\\') || raw.contains("..") || raw.starts_with('.') {
            return Err(TaskIdError::PathLike(shown()));
        }
        if raw.len() > MAX_TASK_ID_LEN {
            return Err(TaskIdError::TooLong(shown()));
        }
        let mut bytes = raw.bytes();
        // A trailing dot would make `<id>.md` read as `<id>..md`.
        if raw.ends_with('.') {
            return Err(TaskIdError::TrailingDot(shown()));
        }
        let first_ok = bytes.next().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        let allowed = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.');
        if !first_ok || !bytes.all(allowed) {
            return Err(TaskIdError::Charset(shown()));
        }
        Ok(TaskId(raw.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_kebab_and_snake_ids() {
        for ok in ["a", "add-greeting-flag", "x_1", "list", "t9", "runtime-rigor-1.7.1", "2026-q1", "v1.0"] {
            assert!(TaskId::parse(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn refuses_path_like_and_odd_ids() {
        let long = "a".repeat(MAX_TASK_ID_LEN + 1);
        type Expect = fn(&TaskIdError) -> bool;
        let cases: &[(&str, Expect)] = &[
            ("", |e| matches!(e, TaskIdError::Empty)),
            ("../x", |e| matches!(e, TaskIdError::PathLike(_))),
            ("a/b", |e| matches!(e, TaskIdError::PathLike(_))),
            ("/etc/passwd", |e| matches!(e, TaskIdError::PathLike(_))),
            ("a\\b", |e| matches!(e, TaskIdError::PathLike(_))),
            ("a..b", |e| matches!(e, TaskIdError::PathLike(_))),
            ("a\nb", |e| matches!(e, TaskIdError::Control(_))),
            ("a\0", |e| matches!(e, TaskIdError::Control(_))),
            (&long, |e| matches!(e, TaskIdError::TooLong(_))),
            ("Bad", |e| matches!(e, TaskIdError::Charset(_))),
            (".hidden", |e| matches!(e, TaskIdError::PathLike(_))),
            (".", |e| matches!(e, TaskIdError::PathLike(_))),
            ("a.", |e| matches!(e, TaskIdError::TrailingDot(_))),
            ("a b", |e| matches!(e, TaskIdError::Charset(_))),
            ("-a", |e| matches!(e, TaskIdError::Charset(_))),
        ];
        for (raw, expected) in cases {
            let error = TaskId::parse(raw).unwrap_err();
            assert!(expected(&error), "{raw:?} gave {error:?}");
        }
        assert_eq!(TaskId::parse("a\tb").unwrap_err().to_string(), "task id \"a\\tb\" contains a control character");
    }
}
