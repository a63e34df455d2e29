//! Rendering results: human text on stdout, or with `--json` exactly one envelope
//! `{"ok", "command", "result", "error": {"code", "message", "exit_code", "hint"}}`.

use std::io::{IsTerminal, Write};

use serde::Serialize;
use serde_json::{Value, json};

pub use scafld_client::terminal::{one_line, terminal_safe};

use super::exit::workflow;

/// A failed command, ready to print: a snake_case code, a message, an optional hint, and the
/// exit code of its command family.
#[derive(Debug, Clone)]
pub struct CliError {
    pub code: String,
    pub message: String,
    pub hint: Option<String>,
    pub exit_code: u8,
    /// Structured detail for `--json` (validation diagnostics, ...).
    pub details: Option<Value>,
}

impl CliError {
    pub fn new(code: impl Into<String>, message: impl Into<String>, exit_code: u8) -> CliError {
        CliError { code: code.into(), message: message.into(), hint: None, exit_code, details: None }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> CliError {
        self.hint = Some(hint.into());
        self
    }

    pub fn usage(message: impl Into<String>) -> CliError {
        CliError::new("usage", message, workflow::USAGE)
    }

    /// The envelope's `error` object.
    fn to_json(&self) -> Value {
        let mut body = json!({
            "code": self.code,
            "message": self.message,
            "exit_code": self.exit_code,
            "hint": self.hint,
        });
        if let Some(details) = &self.details {
            body["details"] = details.clone();
        }
        body
    }
}

/// How this invocation prints.
#[derive(Debug, Clone)]
pub struct Output {
    pub json: bool,
    pub command: String,
    /// Whether [`Output::paint`] paints: when either stream is a terminal that takes colour.
    pub color: bool,
    /// Which streams keep the paint, each decided by its own descriptor: stdout redirected to
    /// a file while stderr is a terminal (or the other way round) gets plain text there.
    pub streams: Streams,
}

/// Whether stdout and stderr each take colour (a terminal, and no `NO_COLOR`).
#[derive(Debug, Clone, Copy)]
pub struct Streams {
    pub stdout: bool,
    pub stderr: bool,
}

impl Streams {
    pub fn current() -> Streams {
        let allowed = std::env::var_os("NO_COLOR").is_none();
        Streams {
            stdout: allowed && std::io::stdout().is_terminal(),
            stderr: allowed && std::io::stderr().is_terminal(),
        }
    }

    #[cfg(test)]
    pub fn both(color: bool) -> Streams {
        Streams { stdout: color, stderr: color }
    }
}

impl Output {
    pub fn new(json: bool, command: impl Into<String>) -> Output {
        Output::with_streams(json, command, Streams::current())
    }

    pub fn with_streams(json: bool, command: impl Into<String>, streams: Streams) -> Output {
        Output { json, command: command.into(), color: streams.stdout || streams.stderr, streams }
    }

    /// Human text for one stream: the paint kept only where that stream takes colour, then
    /// made safe for a terminal ([`terminal_safe`]).
    fn for_stream<'a>(&self, text: &'a str, color: bool) -> std::borrow::Cow<'a, str> {
        match color {
            true => terminal_safe(text, true),
            false => match scafld_client::terminal::unpainted(text) {
                std::borrow::Cow::Borrowed(text) => terminal_safe(text, false),
                std::borrow::Cow::Owned(text) => std::borrow::Cow::Owned(terminal_safe(&text, false).into_owned()),
            },
        }
    }

    /// Print a successful result: the envelope with `--json`, else `human` (if non-empty).
    pub fn success<T: Serialize>(&self, result: &T, human: impl FnOnce() -> String) {
        if self.json {
            // Written straight from the result: no intermediate JSON tree of it. The fields in
            // the order every other envelope has (sorted).
            #[derive(Serialize)]
            struct Envelope<'a, T> {
                command: &'a str,
                error: Option<()>,
                ok: bool,
                result: &'a T,
            }
            let envelope = Envelope { command: &self.command, error: None, ok: true, result };
            match serde_json::to_vec(&envelope) {
                Ok(text) => print_stdout_parts(&[&text]),
                Err(_) => self.envelope(true, Value::Null, Value::Null),
            }
        } else {
            let text = human();
            if !text.is_empty() {
                self.print_human(&text);
            }
        }
    }

    /// Print human text on stdout, made safe for a terminal ([`terminal_safe`]).
    pub fn print_human(&self, text: &str) {
        print_stdout(&self.for_stream(text, self.streams.stdout));
    }

    /// Print human text on stderr, made safe for a terminal ([`terminal_safe`]).
    pub fn eprint_human(&self, text: &str) {
        let mut text = self.for_stream(text, self.streams.stderr).into_owned();
        if !text.ends_with('\n') {
            text.push('\n');
        }
        let _ = std::io::stderr().write_all(text.as_bytes());
    }

    /// [`Output::success`] with `--json`, for a result kept as the daemon wrote it: the
    /// envelope is written around it, so a `list` of a quarter megabyte is never copied into
    /// another buffer (each copy cost fresh pages, a third of the client's time).
    pub fn success_verbatim(&self, result: &serde_json::value::RawValue) {
        let command = serde_json::to_string(&self.command).unwrap_or_else(|_| "\"\"".into());
        let head = format!("{{\"command\":{command},\"error\":null,\"ok\":true,\"result\":");
        print_stdout_parts(&[head.as_bytes(), result.get().as_bytes(), b"}"]);
    }

    /// Print a failure: the envelope on stdout with `--json`, else `error:`/`hint:` on stderr.
    /// The message and the hint are one line each: whatever they quote (a path, a file name
    /// holding a newline, a value) is shown with every control character in caret notation,
    /// newlines too ([`one_line`]), so nothing in them can pass for a line of scafld's own such
    /// as `next:`.
    pub fn failure(&self, error: &CliError, result: Option<Value>) {
        if self.json {
            self.envelope(false, result.unwrap_or(Value::Null), error.to_json());
        } else {
            let mut text = format!("error: {}\n", one_line(&error.message));
            if let Some(hint) = &error.hint {
                text.push_str(&format!("hint: {}\n", one_line(hint)));
            }
            self.eprint_human(&text);
        }
    }

    /// Print a seed-004 document (`review --detach`, `review wait`) or another result that
    /// can say no (`finalize`, `verify`): with `--json`, the envelope with the document's
    /// fields also at the top level, where orchestrators that speak the seed's contract read
    /// them. `failure` is what a "no" means (`ok: false` with its `error`, whose exit code is
    /// the command's), so the envelope never says `ok` when the exit code does not.
    pub fn document<T: Serialize>(&self, document: &T, failure: Option<CliError>, human: impl FnOnce() -> String) {
        if !self.json {
            self.print_human(&human());
            return;
        }
        let result = serde_json::to_value(document).unwrap_or(Value::Null);
        let error = failure.as_ref().map_or(Value::Null, CliError::to_json);
        let ok = failure.is_none();
        let mut envelope = json!({"ok": ok, "command": self.command, "result": result.clone(), "error": error});
        if let (Some(top), Value::Object(fields)) = (envelope.as_object_mut(), result) {
            for (key, value) in fields {
                top.entry(key).or_insert(value);
            }
        }
        print_stdout(&envelope.to_string());
    }

    fn envelope(&self, ok: bool, result: Value, error: Value) {
        let envelope = json!({"ok": ok, "command": self.command, "result": result, "error": error});
        print_stdout(&envelope.to_string());
    }

    /// `text` in `style` when printing to a terminal.
    pub fn paint(&self, text: &str, style: Style) -> String {
        if !self.color {
            return text.to_string();
        }
        let code = match style {
            Style::Good => "32",
            Style::Bad => "31",
            Style::Warn => "33",
            Style::Bold => "1",
        };
        format!("\x1b[{code}m{text}\x1b[0m")
    }

    /// A table cell: `text` padded to `width` visible columns, then painted, so escape codes
    /// never count as width and coloured columns line up with plain ones.
    pub fn cell(&self, text: &str, style: Style, width: usize) -> String {
        self.paint(&padded(text, width), style)
    }
}

/// How many terminal columns `text` takes: a CJK character or an emoji takes two, which
/// `{:<N}` (counting chars) does not know, so tables pad with [`padded`] instead.
pub fn columns(text: &str) -> usize {
    unicode_width::UnicodeWidthStr::width(text)
}

/// `text` padded with spaces to `width` terminal columns (never cut).
pub fn padded(text: &str, width: usize) -> String {
    format!("{text}{}", " ".repeat(width.saturating_sub(columns(text))))
}

#[derive(Debug, Clone, Copy)]
pub enum Style {
    Good,
    Bad,
    Warn,
    Bold,
}

/// A note on stderr (what the client did, progress, a warning), made safe for a terminal like
/// all human text: notes quote paths, task ids and the daemon's words. Ended by a newline.
pub fn note(text: &str) {
    let mut text = terminal_safe(text, false).into_owned();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    let _ = std::io::stderr().write_all(text.as_bytes());
}

/// A line of human text on stdout for a command that prints as it goes (`scafld demo`),
/// made safe for a terminal.
pub fn say(text: &str) {
    print_stdout(&terminal_safe(text, false));
}

fn print_stdout(text: &str) {
    print_stdout_parts(&[text.as_bytes()]);
}

/// Write `parts` to stdout one after the other, as they are (no copy into one buffer), ended
/// by a newline unless the last one has it.
fn print_stdout_parts(parts: &[&[u8]]) {
    let mut out = std::io::stdout().lock();
    let newline: &[u8] = if parts.last().is_some_and(|last| last.ends_with(b"\n")) { b"" } else { b"\n" };
    let parts = parts.iter().copied().chain([newline]);
    // A short text goes out in one write; a long one (a large `list`) is not copied for it.
    let len: usize = parts.clone().map(<[u8]>::len).sum();
    let written = if len <= 64 * 1024 {
        out.write_all(&parts.collect::<Vec<_>>().concat())
    } else {
        parts.into_iter().try_for_each(|part| out.write_all(part))
    };
    stdout_written(written.and_then(|()| out.flush()));
}

/// Write `bytes` to stdout as they are (a completion script), a failure kept like
/// [`print_stdout_parts`]'s.
pub fn write_stdout(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    stdout_written(out.write_all(bytes).and_then(|()| out.flush()));
}

/// The first failure to write stdout, said once the command is done ([`report_lost_output`]).
static STDOUT_FAILED: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Whether descriptor 1 was closed when the process started (`scafld list >&-`). Rust's
/// runtime opens /dev/null in its place before `main`, so a write would "succeed" into it:
/// this is read earlier, by a constructor the loader runs before the runtime's start-up.
static STDOUT_CLOSED_AT_START: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[used]
#[unsafe(link_section = ".init_array")]
static NOTE_CLOSED_STDOUT: extern "C" fn() = {
    extern "C" fn note_closed_stdout() {
        // SAFETY: F_GETFD on a descriptor number reads its flags and changes nothing.
        let closed = unsafe { nix::libc::fcntl(1, nix::libc::F_GETFD) } == -1;
        STDOUT_CLOSED_AT_START.store(closed, std::sync::atomic::Ordering::Relaxed);
    }
    note_closed_stdout
};

/// Keep the first real failure of a write to stdout. A closed pipe (`scafld list | head -1`)
/// is no failure: its reader took what it wanted.
fn stdout_written(result: std::io::Result<()>) {
    let failure = match result {
        _ if STDOUT_CLOSED_AT_START.load(std::sync::atomic::Ordering::Relaxed) => {
            Some(std::io::Error::from_raw_os_error(nix::libc::EBADF))
        }
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Some(e),
        _ => None,
    };
    if let Some(e) = failure {
        let _ = STDOUT_FAILED.set(format!("cannot write the output to stdout: {e}"));
    }
}

/// Whether what the command printed on stdout was lost (a full disk, a closed descriptor; not
/// a closed pipe): said on stderr now, once the command is done (its exit code is then
/// `exit::output_lost`'s).
pub fn report_lost_output() -> bool {
    let Some(failure) = STDOUT_FAILED.get() else { return false };
    note(&format!("error: {failure}"));
    true
}

#[cfg(test)]
mod tests {
    use super::{Output, Streams, Style, padded, terminal_safe};

    /// A cell is padded to terminal columns: a CJK character takes two, an emoji two.
    #[test]
    fn cells_pad_to_terminal_columns() {
        assert_eq!(padded("検証", 6), "検証  ");
        assert_eq!(padded("a🦀", 4), "a🦀 ");
        assert_eq!(padded("abcdefgh", 4), "abcdefgh", "never cut");
    }

    /// What a command printed never reaches the terminal as control sequences; the client's
    /// own colours do, when it paints.
    #[test]
    fn human_text_shows_control_characters_instead_of_sending_them() {
        let hostile = "\x1b]0;PWNED\x07\x1b[2Jred\x1b[31m!\rhidden\r\nline\ttab\u{9b}31m\u{7f}";
        assert_eq!(terminal_safe(hostile, false), "^[]0;PWNED^G^[[2Jred^[[31m!^Mhidden\r\nline\ttab<U+009B>31m^?");
        let painted = Output::with_streams(false, "build", Streams::both(true)).paint("pass", Style::Good);
        assert_eq!(terminal_safe(&format!("{painted} \x1b[2J"), true), format!("{painted} ^[[2J"));
        assert!(matches!(terminal_safe("plain text\n", true), std::borrow::Cow::Borrowed(_)));
    }

    /// Padding counts what a terminal shows: a painted cell is as wide as a plain one.
    #[test]
    fn painted_cells_line_up_with_plain_ones() {
        let visible = |s: &str| {
            let mut out = String::new();
            let mut chars = s.chars();
            while let Some(c) = chars.next() {
                if c == '\x1b' {
                    chars.by_ref().find(|c| *c == 'm');
                } else {
                    out.push(c);
                }
            }
            out
        };
        let coloured = Output::with_streams(false, "", Streams::both(true));
        let plain = Output::with_streams(false, "", Streams::both(false));
        let painted = coloured.cell("fail", Style::Bad, 9);
        assert!(painted.contains('\x1b'));
        assert_eq!(visible(&painted), plain.cell("fail", Style::Bad, 9));
        assert_eq!(visible(&format!("{painted}|")), "fail     |");
    }
}
