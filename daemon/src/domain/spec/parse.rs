//! Spec parser: text in, model + diagnostics + layout out. It never fails and reads every form
//! the original tool (Go, and the Python 2.x releases) writes: lenient in what it accepts, exact
//! in what it reports. Anything it does not understand becomes a [`Diagnostic`] with its line;
//! nothing is dropped silently. The [`Layout`] says where each runner-owned line is, so the
//! projection writer can change those lines and keep every other byte.

use std::collections::HashMap;
use std::ops::Range;

use serde::Serialize;

use super::model::*;
use crate::domain::lifecycle::Status;
use crate::domain::task_id::TaskId;

pub use scafld_protocol::vocab::Severity;

/// Which rules a diagnostic belongs to, which decides its severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// The file cannot be read as a spec, or a part of it is ambiguous: always an error.
    Structure,
    /// Matters before approval (unfilled placeholders, a phase without executable criteria, a
    /// criterion without a command): an error for a draft, a warning once the task is approved,
    /// so a rule added later never turns finished work "invalid".
    Approval,
    /// Read leniently (a legacy or unusual form): always a warning.
    Reading,
}

/// A problem found in a spec. `line` is 1-based; 0 means the file as a whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    pub line: usize,
    pub severity: Severity,
    pub message: String,
    #[serde(skip)]
    pub rule: Rule,
}

impl Diagnostic {
    /// An error of the file as a whole (line 0): it cannot be read as a spec at all.
    pub fn of_file(message: String) -> Diagnostic {
        Diagnostic { line: 0, severity: Severity::Error, message, rule: Rule::Structure }
    }
}

impl std::fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line > 0 { write!(f, "line {}: {}", self.line, self.message) } else { f.write_str(&self.message) }
    }
}

/// Which runner-owned section a `##` heading is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SectionKey {
    CurrentState,
    Acceptance,
    Phase(u32),
    Review,
    HardenRounds,
    /// Human prose: never rewritten by the runner.
    Other(String),
}

/// The runner-owned lines of `## Current State`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateField {
    Status,
    CurrentPhase,
    Next,
    Reason,
    Blockers,
    AllowedFollowUp,
    LatestRunnerUpdate,
    ReviewGate,
}

impl StateField {
    pub const ALL: [StateField; 8] = [
        StateField::Status,
        StateField::CurrentPhase,
        StateField::Next,
        StateField::Reason,
        StateField::Blockers,
        StateField::AllowedFollowUp,
        StateField::LatestRunnerUpdate,
        StateField::ReviewGate,
    ];

    /// The label the original tool writes.
    pub fn label(self) -> &'static str {
        match self {
            StateField::Status => "Status",
            StateField::CurrentPhase => "Current phase",
            StateField::Next => "Next",
            StateField::Reason => "Reason",
            StateField::Blockers => "Blockers",
            StateField::AllowedFollowUp => "Allowed follow-up command",
            StateField::LatestRunnerUpdate => "Latest runner update",
            StateField::ReviewGate => "Review gate",
        }
    }

    fn from_key(key: &str) -> Option<StateField> {
        Some(match key {
            "status" => StateField::Status,
            "current phase" => StateField::CurrentPhase,
            "next" => StateField::Next,
            "reason" => StateField::Reason,
            "blockers" => StateField::Blockers,
            "allowed follow up" | "allowed follow up command" => StateField::AllowedFollowUp,
            "latest runner update" => StateField::LatestRunnerUpdate,
            "review gate" => StateField::ReviewGate,
            _ => return None,
        })
    }
}

/// The runner-owned detail lines of a criterion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CriterionField {
    Status,
    Evidence,
    SourceEvent,
}

impl CriterionField {
    pub const ALL: [CriterionField; 3] =
        [CriterionField::Status, CriterionField::Evidence, CriterionField::SourceEvent];

    pub fn label(self) -> &'static str {
        match self {
            CriterionField::Status => "Status",
            CriterionField::Evidence => "Evidence",
            CriterionField::SourceEvent => "Source event",
        }
    }
}

/// The runner-owned lines of a harden round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoundField {
    Status,
    Started,
    Ended,
    /// The draft a delegated round judged (absent on rounds written by hand).
    SpecDigest,
}

impl RoundField {
    pub const ALL: [RoundField; 4] =
        [RoundField::Status, RoundField::Started, RoundField::Ended, RoundField::SpecDigest];

    pub fn label(self) -> &'static str {
        match self {
            RoundField::Status => "Status",
            RoundField::Started => "Started",
            RoundField::Ended => "Ended",
            RoundField::SpecDigest => "Spec digest",
        }
    }

    /// The key of the field in a round of `form`: Python scafld's `- Round N` calls its state
    /// `Outcome` and its times `Started at`/`Ended at`.
    pub fn label_in(self, form: RoundForm) -> &'static str {
        match (form, self) {
            (RoundForm::Listed, RoundField::Status) => "Outcome",
            (RoundForm::Listed, RoundField::Started) => "Started at",
            (RoundForm::Listed, RoundField::Ended) => "Ended at",
            _ => self.label(),
        }
    }
}

/// The fields Python scafld 2.x's runner writes under `## Review` beside `Status:` and
/// `Verdict:` (as `label` reads their keys): its own, never the author's.
const PYTHON_REVIEW_FIELDS: [&str; 13] = [
    "timestamp",
    "review rounds",
    "reviewer mode",
    "reviewer session",
    "round status",
    "override applied",
    "override reason",
    "override confirmed at",
    "reviewed head",
    "reviewed dirty",
    "reviewed diff",
    "blocking count",
    "non blocking count",
];

/// The detail lines Python scafld 2.x's runner writes on a criterion beside `Status:` (its
/// dialect's record of the result), kept current with the criterion's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PythonResultField {
    /// `Result: pass|fail|none`.
    Result,
    /// `Checked at: <time>|none`.
    CheckedAt,
}

impl PythonResultField {
    fn of_key(key: &str) -> Option<PythonResultField> {
        match key {
            "result" => Some(PythonResultField::Result),
            "checked at" => Some(PythonResultField::CheckedAt),
            _ => None,
        }
    }
}

/// Where one criterion is: its line, the line after its details, and its runner-owned lines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CriterionLayout {
    pub id: String,
    pub head: usize,
    pub end: usize,
    pub fields: Vec<(CriterionField, usize)>,
    /// Python scafld's result lines (the first of each), runner-owned as well.
    pub python: Vec<(PythonResultField, usize)>,
    /// Indentation of its detail lines (`  ` when it has none).
    pub detail_indent: String,
}

/// Where one phase is: heading, end, and its `Status:` line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PhaseLayout {
    pub number: u32,
    pub heading: usize,
    pub status: Option<usize>,
}

/// Where one harden round is: its `### id` line, the line after it, and its runner-owned lines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoundLayout {
    pub id: String,
    pub heading: usize,
    pub end: usize,
    pub fields: Vec<(RoundField, usize)>,
}

/// Where the parts of the file are, by 0-based line index (ends exclusive).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layout {
    pub crlf: bool,
    pub line_count: usize,
    /// Lines of the front matter including both `---` delimiters.
    pub front_matter: Option<(usize, usize)>,
    /// Each front matter key and its line.
    pub front_fields: Vec<(String, usize)>,
    pub title: Option<usize>,
    /// Each `## ` section: its key, heading line and end (the next `## ` heading; for
    /// `## Review`, the end of the runner's part of it: `Parser::review_end`).
    pub sections: Vec<(SectionKey, usize, usize)>,
    pub state_fields: Vec<(StateField, usize)>,
    pub phases: Vec<PhaseLayout>,
    pub criteria: Vec<CriterionLayout>,
    pub rounds: Vec<RoundLayout>,
    /// Each line of the file: whether it belongs to a code fence (its delimiters included).
    pub fenced: Vec<bool>,
}

impl Layout {
    pub fn section(&self, key: &SectionKey) -> Option<(usize, usize)> {
        self.sections.iter().find(|(k, _, _)| k == key).map(|(_, start, end)| (*start, *end))
    }
}

#[derive(Debug, Clone)]
pub struct Parsed {
    pub spec: Spec,
    pub diagnostics: Vec<Diagnostic>,
    pub layout: Layout,
    /// The digest of what the author wrote ([`super::project::authored_digest`]), which a
    /// passed harden round must match: kept for a draft whose front matter says
    /// `harden_status: passed` (the only specs it is compared for: `status`, `approve`), `None`
    /// otherwise, so the other specs the index reads cost nothing more.
    pub draft_digest: Option<String>,
}

impl Parsed {
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics.iter().filter(|d| d.severity == Severity::Error)
    }

    /// Errors that make the file unsafe to rewrite (everything but the approval rules).
    pub fn structural_errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.errors().filter(|d| d.rule == Rule::Structure)
    }

    /// What approving this text would refuse, whatever its status: its errors, and the rules
    /// that matter at approval (a phase without an executable criterion, a criterion without a
    /// command, an unfilled placeholder), which read as warnings once a task is approved.
    /// `approve --amend` re-approves a contract, so it holds the spec to them too.
    pub fn approval_problems(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics.iter().filter(|d| d.severity == Severity::Error || d.rule == Rule::Approval)
    }

    pub fn is_valid(&self) -> bool {
        self.errors().next().is_none()
    }

    /// Also require the front matter `task_id` to match the file it was read from.
    pub fn check_file_name(&mut self, file_task_id: &str) {
        if !self.spec.front.task_id.is_empty() && self.spec.front.task_id != file_task_id {
            let line = self.layout.front_fields.iter().find(|(k, _)| k == "task_id").map(|(_, l)| l + 1).unwrap_or(1);
            self.diagnostics.push(Diagnostic {
                line,
                severity: Severity::Error,
                message: format!(
                    "front matter task_id {:?} does not match the file name {file_task_id}.md",
                    self.spec.front.task_id
                ),
                rule: Rule::Structure,
            });
        }
    }
}

/// `text` read as the spec of `task`, for a write into it: its parse when its front matter
/// names the task and nothing in it makes the file unsafe to rewrite, else the first
/// diagnostic that does. A projection writes only into such a file: an emptied file, broken
/// front matter or another task's id is the user's to put right, never overwritten, renamed
/// or moved.
///
/// The reason given is a line's, when there is one (a broken front matter also hides the
/// title, whose diagnostic has no line).
pub fn parse_as(text: &str, task: &str) -> Result<Parsed, Diagnostic> {
    if text.trim().is_empty() {
        return Err(Diagnostic {
            line: 0,
            severity: Severity::Error,
            message: "the file is empty".into(),
            rule: Rule::Structure,
        });
    }
    let mut parsed = parse(text);
    parsed.check_file_name(task);
    let first = parsed.structural_errors().min_by_key(|d| d.line == 0).cloned();
    first.map_or(Ok(parsed), Err)
}

/// Why `bytes`, a spec file, is not UTF-8: where its first invalid byte is, by line (the
/// diagnostic's own) and column (in bytes, in the message), so the author can find it. Such a
/// file is refused, never read: a projection would have to rewrite bytes it cannot represent.
pub fn not_utf8(bytes: &[u8], error: &std::str::Utf8Error) -> Diagnostic {
    let at = error.valid_up_to();
    let before = &bytes[..at];
    let line = before.iter().filter(|b| **b == b'\n').count() + 1;
    let column = at - before.iter().rposition(|b| *b == b'\n').map_or(0, |n| n + 1) + 1;
    let byte = bytes.get(at).copied().unwrap_or_default();
    let message = format!(
        "the spec file is not valid UTF-8: line {line}, column {column} holds byte 0x{byte:02X} (byte offset {at}); save the file as UTF-8"
    );
    Diagnostic { line, severity: Severity::Error, message, rule: Rule::Structure }
}

/// The value a field has when its text says "not set".
pub(crate) fn is_unset(value: &str) -> bool {
    let v = value.trim();
    v.is_empty() || v.eq_ignore_ascii_case("none") || v == "`none`"
}

pub fn parse(text: &str) -> Parsed {
    let body = text.strip_prefix('\u{feff}').unwrap_or(text);
    let lines: Vec<&str> = body.lines().collect();
    let mut p = Parser {
        lines: &lines,
        in_fence: vec![false; lines.len()],
        comments: Vec::new(),
        dependency_lines: Vec::new(),
        spec: Spec::default(),
        diags: Vec::new(),
        layout: Layout { crlf: body.contains("\r\n"), line_count: lines.len(), ..Layout::default() },
        criteria_met: 0,
        first_past_limit: 0,
    };
    let body_start = p.front_matter();
    p.scan_body(body_start);
    p.validate();
    p.criteria_limit();
    let Parser { spec, mut diags, mut layout, in_fence, .. } = p;
    layout.fenced = in_fence;
    let approving = spec.status().is_none_or(|s| s == Status::Draft);
    // `approve` refuses a draft this large (`tasks::exec::refuse_oversized`): said before it is
    // asked, by the same limit. An approved spec is past that check (an amendment checks only
    // the runner's room), so only a draft is held to it.
    let len = text.len() as u64;
    if approving && len > super::budget::MAX_APPROVED_BYTES {
        use scafld_local::capped::size;
        diags.push(Diagnostic {
            line: 0,
            severity: Severity::Error,
            message: format!(
                "the spec is {}, over the {} an approved spec may have, so approve refuses it; split the task into smaller ones, or move long notes out of the spec and link them",
                size(len),
                size(super::budget::MAX_APPROVED_BYTES)
            ),
            rule: Rule::Approval,
        });
    }
    for d in &mut diags {
        d.severity = match d.rule {
            Rule::Structure => Severity::Error,
            Rule::Approval if approving => Severity::Error,
            Rule::Approval | Rule::Reading => Severity::Warning,
        };
    }
    diags.sort_by_key(|d| d.line);
    let judged =
        spec.harden_status() == crate::domain::lifecycle::HardenStatus::Passed && spec.status() == Some(Status::Draft);
    let draft_digest = judged.then(|| super::project::authored_digest(text, &layout));
    Parsed { spec, diagnostics: diags, layout, draft_digest }
}

struct Parser<'a> {
    lines: &'a [&'a str],
    in_fence: Vec<bool>,
    /// The HTML comments of the body (`<!--` opening a line, up to the line holding `-->`), by
    /// 0-based line range: text in them is not part of the document, so never spec structure.
    comments: Vec<Range<usize>>,
    /// Each phase's `Dependencies:` line (0-based), by phase number.
    dependency_lines: Vec<(u32, usize)>,
    spec: Spec,
    diags: Vec<Diagnostic>,
    layout: Layout,
    /// Criteria met so far, and the line (1-based) of the first one past
    /// [`super::budget::MAX_CRITERIA`] (0 while none is): those are counted, never read.
    criteria_met: usize,
    first_past_limit: usize,
}

/// A value as written after `Key:`, with one layer of backticks or quotes removed.
pub(crate) fn unquote(raw: &str) -> String {
    let v = raw.trim();
    if v.len() >= 2 {
        if let Some(inner) = v.strip_prefix('`').and_then(|r| r.strip_suffix('`'))
            && !inner.contains('`')
        {
            return inner.to_string();
        }
        if v.starts_with('"')
            && v.ends_with('"')
            && let Ok(s) = serde_json::from_str::<String>(v)
        {
            return s;
        }
        if let Some(inner) = v.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')) {
            return inner.to_string();
        }
    }
    v.to_string()
}

/// `raw` without the HTML comments written in it (`<!-- ... -->`, opened and closed on the
/// line) outside its code spans: a comment is not part of the document, after a value as much
/// as around a block of lines, so ``- Command: `true` <!-- why -->`` is the command `true`
/// for every reader alike. A `<!--` inside backticks is the value's own text, and one never
/// closed on the line is left as written.
pub(crate) fn without_inline_comments(raw: &str) -> std::borrow::Cow<'_, str> {
    if !raw.contains("<!--") {
        return raw.into();
    }
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while !rest.is_empty() {
        if rest.starts_with('`') {
            // A code span: a run of backticks up to the next run exactly as long.
            let run = rest.len() - rest.trim_start_matches('`').len();
            let mut taken = run;
            let mut at = run;
            while let Some(found) = rest[at..].find('`') {
                let start = at + found;
                let len = rest[start..].len() - rest[start..].trim_start_matches('`').len();
                at = start + len;
                if len == run {
                    taken = at;
                    break;
                }
            }
            out.push_str(&rest[..taken]);
            rest = &rest[taken..];
        } else if rest.starts_with("<!--")
            && let Some(end) = rest[4..].find("-->")
        {
            rest = &rest[4 + end + 3..];
        } else {
            let next =
                rest.char_indices().skip(1).find(|(_, c)| *c == '`' || *c == '<').map_or(rest.len(), |(at, _)| at);
            out.push_str(&rest[..next]);
            rest = &rest[next..];
        }
    }
    out.into()
}

/// A front matter value as YAML reads it, and its end-of-line comment: `(value, comment)`,
/// the comment with the blanks before it (empty when there is none). A `#` starts a comment
/// only after a blank and outside quotes (`'a#b'`, `"x # y"` and `a#b` are values).
pub(crate) fn yaml_comment(raw: &str) -> (&str, &str) {
    let t = raw.trim_start();
    let lead = raw.len() - t.len();
    // Where the scalar ends: after its closing quote, or at the first ` #` of a plain one.
    let end = match t.chars().next() {
        Some(q @ ('\'' | '"')) => {
            let mut escaped = false;
            let close = t.char_indices().skip(1).find(|&(_, c)| {
                let found = c == q && !escaped;
                escaped = q == '"' && c == '\\' && !escaped;
                found
            });
            match close {
                Some((at, _)) => at + 1,
                None => return (raw, ""),
            }
        }
        _ => 0,
    };
    let search = &t[end..];
    let after_blank = |at: usize| if at == 0 { end == 0 && lead > 0 } else { search[..at].ends_with([' ', '\t']) };
    let hash = search.char_indices().find(|&(at, c)| c == '#' && after_blank(at)).map(|(at, _)| at);
    match hash {
        Some(at) if end > 0 && !search[..at].trim().is_empty() => (raw, ""),
        Some(at) => {
            let cut = raw[..lead + end + at].trim_end().len();
            (&raw[..cut], &raw[cut..])
        }
        None => (raw, ""),
    }
}

/// [`unquote`], with `none` read as unset.
fn optional(raw: &str) -> String {
    let v = unquote(raw);
    if is_unset(&v) { String::new() } else { v }
}

/// `Key: value` at the start of a line → normalized key (lowercase, `_`/`-`/spaces collapsed)
/// and the raw value.
fn label(line: &str) -> Option<(String, &str)> {
    if line.starts_with(char::is_whitespace) || line.starts_with('-') || line.starts_with('#') {
        return None;
    }
    let (key, value) = line.split_once(':')?;
    if key.is_empty() || key.len() > 40 || !key.chars().all(|c| c.is_alphanumeric() || " _-/".contains(c)) {
        return None;
    }
    Some((normalize_key(key), value))
}

/// `- Key: value` detail (any indentation) → raw key and raw value.
fn detail(line: &str) -> Option<(&str, &str)> {
    let (key, value) = line.trim_start().strip_prefix("- ")?.split_once(':')?;
    let plain =
        !key.trim().is_empty() && key.len() <= 40 && key.chars().all(|c| c.is_alphanumeric() || " _-/".contains(c));
    plain.then_some((key, value))
}

/// A detail scafld reads on a criterion (`Command`, `Expected kind`, ...) written with another
/// list marker than `- ` (`* Command: ...`, `+ Cwd: ...`): the marker and the key as written.
fn other_marker_detail(line: &str) -> Option<(char, &str)> {
    let t = line.trim_start();
    let marker = t.chars().next().filter(|c| matches!(c, '*' | '+'))?;
    let (key, _) = t[1..].strip_prefix([' ', '\t'])?.split_once(':')?;
    let key = key.trim();
    let read = DEFINING_KEYS.contains(&normalize_key(key).as_str())
        || CriterionField::ALL.iter().any(|f| f.label().eq_ignore_ascii_case(&normalize_key(key)));
    (read && key.len() <= 40).then_some((marker, key))
}

pub(crate) fn normalize_key(key: &str) -> String {
    key.replace(['_', '-'], " ").split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()
}

pub(crate) fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// The column `line`'s text starts at: its leading spaces, a tab reaching the next multiple of
/// four (as Markdown reads indentation).
fn column(line: &str) -> usize {
    let mut column = 0;
    for c in line.chars() {
        match c {
            ' ' => column += 1,
            '\t' => column += 4 - column % 4,
            _ => break,
        }
    }
    column
}

/// Whether `line` is nested under the list item above it: indented by two spaces or more, or
/// by a tab (as Markdown and the original tool read it).
fn nested(line: &str) -> bool {
    indent(line) >= 2 || line.starts_with('\t')
}

/// A top-level list item: `- text` at column 0.
fn item(line: &str) -> Option<&str> {
    line.strip_prefix("- ").or_else(|| (line.trim_end() == "-").then_some(""))
}

/// Characters that show as nothing: zero-width space, non-joiner and joiner, word joiner, and a
/// byte-order mark inside the text.
const INVISIBLE: [char; 5] = ['\u{200B}', '\u{200C}', '\u{200D}', '\u{2060}', '\u{FEFF}'];

/// Full-width brackets (an East Asian input method's), which look like `[` and `]`.
const WIDE_BRACKETS: [char; 2] = ['\u{FF3B}', '\u{FF3D}'];

/// A character that looks like a space, or like nothing, but is neither ` ` nor a tab: a
/// no-break space (Option+Space on a Mac), another Unicode space, an invisible character.
fn lookalike_space(c: char) -> bool {
    c != ' ' && c != '\t' && (c.is_whitespace() || INVISIBLE.contains(&c))
}

/// Whether `shape`, a list marker as written, looks like the one scafld reads but is not: it
/// holds a lookalike space or full-width brackets. Neither Markdown nor scafld reads it as a
/// list item, yet on screen nothing tells it apart, so it is never passed over quietly.
fn lookalike(shape: &str) -> bool {
    shape.chars().any(|c| lookalike_space(c) || WIDE_BRACKETS.contains(&c))
}

/// What in `shape` ([`lookalike`]) is not what it looks like, said for a diagnostic.
fn lookalike_said(shape: &str) -> String {
    let mut said: Vec<String> = Vec::new();
    for c in shape.chars().filter(|c| lookalike_space(*c) || WIDE_BRACKETS.contains(c)) {
        let name = match c {
            '\u{A0}' => "a no-break space (U+00A0, Option+Space on a Mac)".to_string(),
            '\u{200B}' => "a zero-width space (U+200B)".to_string(),
            '\u{FEFF}' => "a byte-order mark (U+FEFF)".to_string(),
            '\u{3000}' => "an ideographic space (U+3000)".to_string(),
            '\u{FF3B}' | '\u{FF3D}' => "full-width brackets (U+FF3B, U+FF3D)".to_string(),
            c if c.is_whitespace() => format!("a Unicode space (U+{:04X})", u32::from(c)),
            c => format!("an invisible character (U+{:04X})", u32::from(c)),
        };
        if !said.contains(&name) {
            said.push(name);
        }
    }
    said.join(" and ")
}

/// `shape` with each lookalike space shown as its code point, so a diagnostic shows what the
/// screen does not.
fn lookalike_shown(shape: &str) -> String {
    shape
        .chars()
        .map(|c| if lookalike_space(c) { format!("<U+{:04X}>", u32::from(c)) } else { c.to_string() })
        .collect()
}

/// A line that shows as a top-level list item `- ` but is not one ([`item`]): invisible
/// characters before its `-`, or a lookalike space after it. Its marker as written.
fn lookalike_item(line: &str) -> Option<&str> {
    // `- <U+00A0>x` is an item: the text after `- ` is read trimmed, lookalike spaces and all.
    if item(line).is_some() {
        return None;
    }
    let lead = line.len() - line.trim_start_matches(INVISIBLE).len();
    let rest = line[lead..].strip_prefix('-')?;
    let gap = rest.len() - rest.trim_start_matches(|c: char| c == ' ' || c == '\t' || lookalike_space(c)).len();
    let shape = &line[..lead + 1 + gap];
    (gap > 0 && lookalike(shape)).then_some(shape)
}

/// A checklist item at column 0 written with another list marker than the one criteria use
/// (`* [ ]`, `+ [ ]`, `1. [ ]`, `2) [ ]`, `-  [ ]` with more than one space), or in a form that
/// only looks like `- [ ]` ([`lookalike`]: `-<U+00A0>[ ]`, a zero-width space before the `-`,
/// `- ［ ］`): the marker and box as written. Markdown shows the first ones as checklists;
/// scafld reads criteria only from `- [`.
fn other_checklist(line: &str) -> Option<&str> {
    let lead = line.len() - line.trim_start_matches(INVISIBLE).len();
    let body = &line[lead..];
    let marker = if body.starts_with(['*', '+', '-']) {
        1
    } else {
        let digits = body.bytes().take_while(u8::is_ascii_digit).count();
        if !(1..=9).contains(&digits) || !body[digits..].starts_with(['.', ')']) {
            return None;
        }
        digits + 1
    };
    let after = &body[marker..];
    let gap = after.len() - after.trim_start_matches(|c: char| c == ' ' || c == '\t' || lookalike_space(c)).len();
    let boxed = ["[ ]", "[x]", "[X]", "[]", "［ ］", "［　］", "［x］", "［X］", "［ｘ］", "［Ｘ］", "［］"]
        .into_iter()
        .find(|b| after[gap..].starts_with(b))?;
    let shape = &line[..lead + marker + gap + boxed.len()];
    // `- [` itself is a criterion's start, read as one.
    let criterion = body.starts_with('-') && &after[..gap] == " " && !lookalike(shape);
    (gap > 0 && !criterion).then_some(shape)
}

/// Where a criterion indented under another item would be read, said in its diagnostic.
const UNDER_ACCEPTANCE: &str = "under `Acceptance:`";

/// How a diagnostic names the checklist item on `line`: its criterion id, else its text.
fn checklist_what(line: &str) -> String {
    let item = line.trim_start();
    criterion_head(item).map_or_else(|| item.trim_end().to_string(), |head| head.id)
}

/// A heading at another level than `##` (`#`, `###` to `######`) whose text reads as a phase
/// heading would (`Phase 2: Deploy`, `Phase two:`): its level and text. Never a phase.
fn phase_at_other_level(line: &str) -> Option<(usize, &str)> {
    let level = line.bytes().take_while(|b| *b == b'#').count();
    let heading = line[level..].strip_prefix(' ')?.trim();
    let rest = heading.to_lowercase();
    let rest = rest.strip_prefix("phase ")?;
    let phase_like = rest.starts_with(|c: char| c.is_ascii_digit()) || rest.contains(':');
    ((1..=6).contains(&level) && level != 2 && phase_like).then_some((level, heading))
}

/// An open code fence: the line it opened on, its marker character and run length.
type OpenFence = (usize, char, usize);

/// Take line `i` into the fence state: whether it is inside a fence or one of its delimiters
/// (a closer repeats the opener's marker at least as long, and nothing else).
fn step_fence(open: &mut Option<OpenFence>, i: usize, line: &str) -> bool {
    if let Some((marker, run)) = fence(line) {
        match *open {
            Some((_, m, r)) if m == marker && run >= r && line.trim().chars().all(|c| c == marker) => *open = None,
            Some(_) => {}
            None => *open = Some((i, marker, run)),
        }
        return true;
    }
    open.is_some()
}

/// The 0-based line at which `lines` open a code fence they never close, if they do: put into
/// a spec, everything after it would be read as code.
pub(crate) fn unclosed_fence<'l>(lines: impl IntoIterator<Item = &'l str>) -> Option<usize> {
    let mut open = None;
    for (i, line) in lines.into_iter().enumerate() {
        step_fence(&mut open, i, line);
    }
    open.map(|(line, _, _)| line)
}

/// A fence opener or closer at any indentation: its marker character and run length.
fn fence(line: &str) -> Option<(char, usize)> {
    let t = line.trim_start();
    let marker = t.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let run = t.chars().take_while(|c| *c == marker).count();
    (run >= 3).then_some((marker, run))
}

/// One of the plan template's own placeholder lines, still unfilled. `TODO` in prose or in a
/// code span is prose: only the exact values the template writes count.
fn is_placeholder(line: &str) -> bool {
    let t = line.trim();
    let t = t.strip_prefix("- ").unwrap_or(t);
    let value = if super::render::PLACEHOLDERS.iter().any(|p| t.starts_with(p)) {
        t
    } else {
        match label(t).or_else(|| detail(line).map(|(k, v)| (normalize_key(k), v))) {
            Some((_, value)) => value,
            None => return false,
        }
    };
    let value = unquote(value);
    super::render::PLACEHOLDERS.contains(&value.as_str())
}

/// The start line of a criterion, read leniently.
struct CriterionHead {
    id: String,
    kind: String,
    title: String,
    /// What was unusual about the line, for a reading warning.
    note: Option<&'static str>,
}

/// ``- [ ] `id` type - title`` and the forms real specs use besides: no title
/// (``- [ ] `v1` compile``), a type with `-` (`focused-tests`), the docs' ``test: Title``, and a
/// title without a type. `None` when the line has no backticked id (a plain checklist item).
fn criterion_head(line: &str) -> Option<CriterionHead> {
    let rest = line.strip_prefix("- [")?;
    let mark = rest.chars().next()?;
    let rest = rest[mark.len_utf8()..].strip_prefix(']')?;
    if !matches!(mark, ' ' | 'x' | 'X') {
        return None;
    }
    let rest = rest.trim_start().strip_prefix('`')?;
    let (id, rest) = rest.split_once('`')?;
    let id = id.trim();
    if id.is_empty() {
        return None;
    }
    let rest = rest.trim();
    let head = |kind: &str, title: &str, note| CriterionHead {
        id: id.to_string(),
        kind: kind.trim().to_string(),
        title: title.trim().to_string(),
        note,
    };
    if let Some((kind, title)) = rest.split_once(" - ") {
        return Some(if kind.trim().is_empty() {
            head("", title, Some("has no type"))
        } else {
            head(kind, title, None)
        });
    }
    if let Some(kind) = rest.strip_suffix(" -").or(rest.strip_suffix('-').filter(|k| !k.contains(' '))) {
        return Some(head(kind, "", Some("has no title")));
    }
    if let Some(title) = rest.strip_prefix("- ").or((rest == "-").then_some("")) {
        return Some(head("", title, Some("has no type")));
    }
    Some(match rest.split_once(char::is_whitespace) {
        None if rest.is_empty() => head("", "", Some("has neither a type nor a title")),
        None => head(rest, "", Some("has no title")),
        Some((word, title)) if word.ends_with(':') => {
            head(word.trim_end_matches(':'), title, Some("separates type and title with `:` instead of ` - `"))
        }
        Some(_) => head("", rest, Some("has no type")),
    })
}

impl<'a> Parser<'a> {
    /// A spec with more criteria than [`super::budget::MAX_CRITERIA`] is refused (by `validate`,
    /// `check`, `approve`, `build` and every other command that reads it), at the first one
    /// past the limit.
    fn criteria_limit(&mut self) {
        if self.first_past_limit == 0 {
            return;
        }
        let message = format!(
            "the spec has {} acceptance criteria, over the {} one spec may have (the criteria from this line on are not read); split the task into smaller ones",
            self.criteria_met,
            super::budget::MAX_CRITERIA
        );
        self.diag(self.first_past_limit, Rule::Structure, message);
    }

    fn diag(&mut self, line: usize, rule: Rule, message: impl Into<String>) {
        self.diags.push(Diagnostic { line, severity: Severity::Error, message: message.into(), rule });
    }

    fn front_matter(&mut self) -> usize {
        if self.lines.first().map(|l| l.trim_end()) != Some("---") {
            self.diag(1, Rule::Structure, "front matter is required: the file must start with a `---` line");
            return 0;
        }
        let Some(end) = (1..self.lines.len()).find(|&i| self.lines[i].trim_end() == "---") else {
            self.diag(1, Rule::Structure, "front matter is not closed by a `---` line");
            return self.lines.len();
        };
        self.layout.front_matter = Some((0, end + 1));
        let mut nested_under: Option<String> = None;
        for i in 1..end {
            let line = self.lines[i];
            if line.trim().is_empty() || line.trim_start().starts_with('#') {
                continue;
            }
            // YAML the original's Python releases wrote: nested values, lists, anchors. They are
            // kept as written (the projection never touches them) and not interpreted.
            if line.starts_with(char::is_whitespace) || line.starts_with("- ") {
                if let Some(key) = nested_under.take() {
                    self.diag(
                        i + 1,
                        Rule::Reading,
                        format!("front matter `{key}` holds nested YAML; it is kept but not read"),
                    );
                }
                continue;
            }
            let Some((key, value)) = line.split_once(':') else {
                self.diag(
                    i + 1,
                    Rule::Reading,
                    format!("front matter line is not `key: value`; kept as written: {line:?}"),
                );
                continue;
            };
            let key = key.trim();
            let (value, _) = yaml_comment(value);
            nested_under = value.trim().is_empty().then(|| key.to_string());
            // YAML allows a key once; the original read the last and wrote the first, so the
            // file could say one status while every write changed the other.
            if let Some((_, first)) = self.layout.front_fields.iter().find(|(k, _)| k == key) {
                let message = format!(
                    "front matter key `{key}` is set twice, on lines {} and {}: a key may appear once; delete the line you do not mean",
                    first + 1,
                    i + 1
                );
                self.diag(i + 1, Rule::Structure, message);
            }
            self.layout.front_fields.push((key.to_string(), i));
            let value = unquote(value);
            let fm = &mut self.spec.front;
            match key {
                "spec_version" => fm.spec_version = value,
                "task_id" => fm.task_id = value,
                "created" => fm.created = value,
                "updated" => fm.updated = value,
                "status" => fm.status = value,
                "harden_status" => fm.harden_status = if is_unset(&value) { String::new() } else { value },
                "size" => fm.size = value,
                "risk_level" => fm.risk_level = value,
                other => fm.extra.push((other.to_string(), value)),
            }
        }
        end + 1
    }

    fn scan_body(&mut self, start: usize) {
        let mut open: Option<OpenFence> = None;
        let mut comment: Option<usize> = None;
        let mut headings: Vec<(usize, String)> = Vec::new();
        // Phase headings written at another level than `##` (`### Phase 2: Deploy`).
        let mut misleveled: Vec<usize> = Vec::new();
        for i in start..self.lines.len() {
            let line = self.lines[i];
            // An HTML block (CommonMark type 2): from a line opening with `<!--` to the first
            // line holding `-->`, that one included. Inside it nothing opens a fence.
            if comment.is_none() && open.is_none() && line.trim_start().starts_with("<!--") {
                comment = Some(i);
            }
            if let Some(from) = comment {
                if line.contains("-->") {
                    self.comments.push(from..i + 1);
                    comment = None;
                }
                continue;
            }
            if step_fence(&mut open, i, line) {
                self.in_fence[i] = true;
                continue;
            }
            if let Some(heading) = line.strip_prefix("## ") {
                headings.push((i, heading.trim().to_string()));
            } else if let Some(title) = line.strip_prefix("# ")
                && self.spec.title.is_empty()
            {
                self.spec.title = title.trim().to_string();
                self.layout.title = Some(i);
            } else if phase_at_other_level(line).is_some() {
                misleveled.push(i);
            }
        }
        if let Some((line, marker, run)) = open {
            let closer: String = std::iter::repeat_n(marker, run).collect();
            self.diag(
                line + 1,
                Rule::Structure,
                format!(
                    "code fence is never closed: everything after this line is read as code; close it with a line of {closer} where the code ends"
                ),
            );
        }
        if let Some(from) = comment {
            self.comments.push(from..self.lines.len());
            self.diag(
                from + 1,
                Rule::Structure,
                "HTML comment is never closed: everything after this `<!--` would be hidden from the spec; close it with `-->`",
            );
        }
        self.comments_hiding_structure();
        // Before the first `##` heading (the title's part) scafld reads no criteria either.
        let first = headings.first().map_or(self.lines.len(), |(l, _)| *l);
        self.stray_criteria(None, start..first);
        let mut seen: HashMap<SectionKey, usize> = HashMap::new();
        for (n, (heading_line, heading)) in headings.iter().enumerate() {
            let mut end = headings.get(n + 1).map(|(l, _)| *l).unwrap_or(self.lines.len());
            if heading.to_lowercase() == "review" {
                end = self.review_end(heading_line + 1..end);
            }
            let key = self.section(*heading_line, heading, heading_line + 1..end);
            if !matches!(key, SectionKey::Phase(_) | SectionKey::Acceptance) {
                let next = headings.get(n + 1).map(|(l, _)| *l).unwrap_or(self.lines.len());
                self.stray_criteria(Some(heading), heading_line + 1..next);
            }
            if !matches!(key, SectionKey::Other(_)) {
                match seen.get(&key) {
                    Some(first) => {
                        let first = first + 1;
                        let message = match &key {
                            SectionKey::Phase(n) => format!(
                                "duplicate phase heading: phase{n} is declared twice, first on line {first}; give this phase another number, or move its criteria into the first and delete this heading"
                            ),
                            _ => format!(
                                "duplicate section `## {heading}`, first on line {first}; merge the two into one"
                            ),
                        };
                        self.diag(heading_line + 1, Rule::Structure, message);
                    }
                    None => {
                        seen.insert(key.clone(), *heading_line);
                    }
                }
            }
            self.layout.sections.push((key, *heading_line, end));
        }
        self.misleveled_phases(&misleveled);
    }

    /// Say where a phase heading is written at another level than `##` (`### Phase 2: Deploy`):
    /// only a `##` heading starts a phase (as the original reads it), so what follows it stays
    /// in the section above, its criteria that section's. Not in `## Harden Rounds`, whose
    /// `###` headings name rounds.
    fn misleveled_phases(&mut self, lines: &[usize]) {
        for &i in lines {
            let section = self.layout.sections.iter().rev().find(|(_, start, _)| *start < i).map(|(key, ..)| key);
            let within = match section {
                Some(SectionKey::HardenRounds) => continue,
                Some(SectionKey::Phase(n)) => format!("phase{n}'s, as are its criteria"),
                Some(SectionKey::Acceptance) => "the task-level `## Acceptance`'s, as are its criteria".to_string(),
                Some(SectionKey::Other(heading)) => format!("`## {heading}`'s"),
                Some(_) => "the section above's".to_string(),
                None => "the text before the first `##` heading, where scafld reads no criteria".to_string(),
            };
            let Some((level, heading)) = phase_at_other_level(self.lines[i]) else { continue };
            let message = format!(
                "`{} {heading}` is a level-{level} heading, so it is not a phase: only `## Phase N: Name` starts one, and what follows it is read as {within}; write it `## {heading}` to make it a phase",
                "#".repeat(level)
            );
            self.diag(i + 1, Rule::Reading, message);
        }
    }

    /// Whether line `i` is in an HTML comment.
    fn commented(&self, i: usize) -> bool {
        self.comment_at(i).is_some()
    }

    /// The HTML comment holding line `i`, if one does.
    fn comment_at(&self, i: usize) -> Option<Range<usize>> {
        let n = self.comments.partition_point(|c| c.end <= i);
        self.comments.get(n).filter(|c| c.start <= i).cloned()
    }

    /// Whether line `i` is code or commented out: never spec structure.
    fn hidden(&self, i: usize) -> bool {
        self.in_fence[i] || self.commented(i)
    }

    /// Say so where an HTML comment holds what would otherwise be read as the spec (a heading,
    /// a criterion, a command): it is not read and never runs, which the author may not expect
    /// (the Go original read it; the Python one refused the file).
    fn comments_hiding_structure(&mut self) {
        let mut found = Vec::new();
        for c in &self.comments {
            let structure = c.clone().find_map(|i| {
                let text = self.lines[i].trim_start().trim_start_matches("<!--").trim();
                let command = detail(text).is_some_and(|(key, _)| normalize_key(key) == "command");
                (text.starts_with('#') || criterion_head(text).is_some() || command).then_some(text)
            });
            if let Some(text) = structure {
                found.push((c.clone(), text.to_string()));
            }
        }
        for (c, text) in found {
            let lines =
                if c.len() == 1 { format!("line {}", c.start + 1) } else { format!("lines {}-{}", c.start + 1, c.end) };
            self.diag(
                c.start + 1,
                Rule::Reading,
                format!(
                    "the HTML comment on {lines} holds `{text}`: text in a comment is not part of the spec, so it is not read and never runs (take it out of the comment to make it count)"
                ),
            );
        }
    }

    /// Parse one `##` section and say which it is.
    fn section(&mut self, heading_line: usize, heading: &str, body: Range<usize>) -> SectionKey {
        let name = heading.to_lowercase();
        // `## Phase 1: Name`; `## Phase one: Name` is a broken phase, `## Phased rollout` is prose.
        if let Some(rest) = name.strip_prefix("phase ")
            && (rest.starts_with(|c: char| c.is_ascii_digit()) || rest.contains(':'))
        {
            return match parse_phase_heading(heading) {
                Some((number, title)) => {
                    let phase = self.phase(number, title, heading_line, body);
                    self.spec.phases.push(phase);
                    SectionKey::Phase(number)
                }
                None => {
                    self.diag(
                        heading_line + 1,
                        Rule::Structure,
                        format!("malformed phase heading `## {heading}`; expected `## Phase N: Name`"),
                    );
                    SectionKey::Other(heading.to_string())
                }
            };
        }
        match name.as_str() {
            "current state" => {
                self.current_state(body);
                SectionKey::CurrentState
            }
            "acceptance" => {
                self.acceptance(body);
                SectionKey::Acceptance
            }
            "review" => {
                self.review(body);
                SectionKey::Review
            }
            "harden rounds" => {
                self.harden_rounds(body.clone());
                self.listed_rounds(body);
                SectionKey::HardenRounds
            }
            "summary" => {
                let text: Vec<&str> = body
                    .filter(|&i| !self.lines[i].trim().is_empty() && !self.hidden(i))
                    .map(|i| self.lines[i].trim())
                    .collect();
                // A section written twice is read whole, as the original reads it: each adds
                // to what the ones above said.
                if !self.spec.summary.is_empty() && !text.is_empty() {
                    self.spec.summary.push('\n');
                }
                self.spec.summary.push_str(&text.join("\n"));
                SectionKey::Other(heading.to_string())
            }
            "objectives" => {
                let items = self.list(body);
                self.spec.objectives.extend(items.into_iter().map(|(item, _)| item));
                SectionKey::Other(heading.to_string())
            }
            "scope" => {
                self.lookalike_entries(body.clone(), "a scope entry");
                let items = self.list(body);
                self.spec.scope.extend(items.iter().map(|(item, _)| item.clone()));
                self.spec.declared_at.extend(items);
                SectionKey::Other(heading.to_string())
            }
            "touchpoints" => {
                self.lookalike_entries(body.clone(), "a touchpoint");
                let items = self.list(body);
                self.spec.touchpoints.extend(items.iter().map(|(item, _)| item.clone()));
                self.spec.declared_at.extend(items);
                SectionKey::Other(heading.to_string())
            }
            "context" => {
                self.context(body);
                SectionKey::Other(heading.to_string())
            }
            _ => SectionKey::Other(heading.to_string()),
        }
    }

    /// Say so of each line in `body` that only looks like an item of its list, `what`.
    fn lookalike_entries(&mut self, body: Range<usize>, what: &str) {
        for i in body {
            if !self.hidden(i) {
                self.lookalike_entry_diag(i, what);
            }
        }
    }

    /// Bullet items with two-space continuation lines, each with the line it starts on
    /// (1-based); `- none` and empty items dropped.
    fn list(&self, body: Range<usize>) -> Vec<(String, usize)> {
        let mut items: Vec<(String, usize)> = Vec::new();
        for i in body {
            let line = self.lines[i];
            if self.hidden(i) {
                continue;
            }
            if let Some(text) = item(line) {
                items.push((text.trim().to_string(), i + 1));
            } else if nested(line)
                && !line.trim_start().starts_with("- ")
                && let Some((last, _)) = items.last_mut()
            {
                last.push(' ');
                last.push_str(line.trim());
            }
        }
        items.retain(|(i, _)| !is_unset(i));
        items
    }

    fn current_state(&mut self, body: Range<usize>) {
        for i in body {
            if self.hidden(i) {
                continue;
            }
            let Some((key, value)) = label(self.lines[i]) else { continue };
            let Some(field) = StateField::from_key(&key) else { continue };
            if self.layout.state_fields.iter().any(|(f, _)| *f == field) {
                continue;
            }
            self.layout.state_fields.push((field, i));
            let value = unquote(value);
            let cs = &mut self.spec.current_state;
            let slot = match field {
                StateField::Status => &mut cs.status,
                StateField::CurrentPhase => &mut cs.current_phase,
                StateField::Next => &mut cs.next,
                StateField::Reason => &mut cs.reason,
                StateField::Blockers => &mut cs.blockers,
                StateField::AllowedFollowUp => &mut cs.allowed_follow_up,
                StateField::LatestRunnerUpdate => &mut cs.latest_runner_update,
                StateField::ReviewGate => &mut cs.review_gate,
            };
            *slot = value;
        }
    }

    fn context(&mut self, body: Range<usize>) {
        let mut target: Option<&str> = None;
        for i in body {
            let line = self.lines[i];
            if self.hidden(i) {
                continue;
            }
            if let Some((key, value)) = label(line) {
                target = match key.as_str() {
                    "packages" => Some("packages"),
                    "files impacted" => Some("files"),
                    _ => None,
                };
                let value = value.trim();
                if !value.is_empty() {
                    self.push_context(target, i + 1, value.split(',').map(unquote));
                }
            } else if let Some(text) = item(line) {
                self.push_context(target, i + 1, std::iter::once(unquote(text)));
            }
        }
    }

    fn push_context(&mut self, target: Option<&str>, line: usize, values: impl Iterator<Item = String>) {
        let list = match target {
            Some("packages") => &mut self.spec.context.packages,
            Some("files") => &mut self.spec.context.files_impacted,
            _ => return,
        };
        for value in values.filter(|v| !is_unset(v)) {
            self.spec.declared_at.push((value.clone(), line));
            list.push(value);
        }
    }

    fn phase(&mut self, number: u32, name: String, heading_line: usize, body: Range<usize>) -> Phase {
        #[derive(PartialEq)]
        enum Mode {
            Start,
            Changes,
            Acceptance,
        }
        let mut phase = Phase { number, name, line: heading_line + 1, ..Phase::default() };
        let mut layout = PhaseLayout { number, heading: heading_line, status: None };
        let mut mode = Mode::Start;
        // The original reads a phase's criteria only after its `Acceptance:` label; a checklist
        // above it is the author's (steps, notes) or, under `Changes:`, changes. A phase without
        // the label at all has its checklist read as criteria, with a warning, rather than pass
        // on no evidence.
        let labelled =
            body.clone().any(|i| !self.hidden(i) && label(self.lines[i]).is_some_and(|(key, _)| key == "acceptance"));
        let mut i = body.start;
        while i < body.end {
            let line = self.lines[i];
            if self.hidden(i) || line.trim().is_empty() {
                i += 1;
                continue;
            }
            if self.nested_checklist(i).is_some() && self.nested_command(i, body.end) {
                // Above the label, as a top-level item there: never run, an approval error.
                let (rule, under) = if labelled && mode != Mode::Acceptance {
                    (Rule::Approval, "another item above the phase's `Acceptance:` label")
                } else {
                    (Rule::Reading, "another item")
                };
                self.nested_criterion_diag(i, rule, under, UNDER_ACCEPTANCE);
            }
            if let Some(shape) = other_checklist(line) {
                let reading = if labelled { mode == Mode::Acceptance } else { mode != Mode::Changes };
                if reading || self.has_command(i, body.end) {
                    self.other_checklist_diag(i, shape);
                }
            }
            if line.starts_with("- [") {
                let head = criterion_head(line);
                let criterion =
                    if labelled { mode == Mode::Acceptance } else { mode != Mode::Changes || head.is_some() };
                if criterion {
                    i = self.criterion(i, body.end, &mut phase.criteria);
                    continue;
                }
                if let Some(head) = head.filter(|_| self.has_command(i, body.end)) {
                    self.diag(
                        i + 1,
                        Rule::Approval,
                        format!(
                            "`{}` has a Command but stands above the phase's `Acceptance:` label, so it is not a criterion and never runs; move it under `Acceptance:`",
                            head.id
                        ),
                    );
                }
            }
            if let Some((key, value)) = label(line) {
                match key.as_str() {
                    "objective" | "goal" => phase.objective = optional(value),
                    "status" => match layout.status {
                        None => {
                            phase.status = optional(value);
                            layout.status = Some(i);
                        }
                        // As for a criterion's: the first is the one read and kept current.
                        Some(first) => self.diag(
                            i + 1,
                            Rule::Reading,
                            format!(
                                "{} has a second `Status:` line (the first is on line {}); the first one is read and kept current, this one is left as written: delete it",
                                phase.id(),
                                first + 1
                            ),
                        ),
                    },
                    "dependencies" => {
                        phase.dependencies = optional(value);
                        self.dependency_lines.push((number, i));
                    }
                    "changes" => mode = Mode::Changes,
                    "acceptance" => mode = Mode::Acceptance,
                    _ => {}
                }
            } else if let Some(text) = item(line).filter(|_| mode == Mode::Changes) {
                if !is_unset(text) {
                    phase.changes.push(text.trim().to_string());
                    self.spec.declared_at.push((text.trim().to_string(), i + 1));
                }
            } else if mode == Mode::Changes
                && nested(line)
                && let Some(last) = phase.changes.last_mut()
            {
                last.push(' ');
                last.push_str(line.trim());
            } else if mode == Mode::Changes {
                self.lookalike_entry_diag(i, "a change");
            }
            i += 1;
        }
        if !labelled && !phase.criteria.is_empty() {
            self.diag(
                phase.line,
                Rule::Reading,
                format!(
                    "{} has no `Acceptance:` label; its checklist is read as its criteria (the original tool reads criteria only after that label: add it)",
                    phase.id()
                ),
            );
        }
        self.layout.phases.push(layout);
        phase
    }

    /// Parse the criterion starting at line `start`; push it (or a diagnostic) and return the
    /// index of the first line after its details.
    fn criterion(&mut self, start: usize, end: usize, into: &mut Vec<Criterion>) -> usize {
        let next = self.details_end(start + 1, end);
        let Some(head) = criterion_head(self.lines[start]) else {
            self.diag(
                start + 1,
                Rule::Reading,
                format!(
                    "checklist item without a backticked id is not a criterion and never runs: {}",
                    self.lines[start].trim()
                ),
            );
            for i in start + 1..next {
                if self.nested_checklist(i).is_some() && self.nested_command(i, next) {
                    self.nested_criterion_diag(i, Rule::Reading, "another item", UNDER_ACCEPTANCE);
                }
            }
            return next;
        };
        // Past the limit a criterion is counted, never read (what it would cost is the reason
        // for the limit): the spec is refused, saying how many it has.
        self.criteria_met += 1;
        if self.criteria_met > super::budget::MAX_CRITERIA {
            if self.first_past_limit == 0 {
                self.first_past_limit = start + 1;
            }
            return next;
        }
        if let Some(note) = head.note {
            self.diag(
                start + 1,
                Rule::Reading,
                format!("criterion `{}` {note}; read as type {:?}, title {:?}", head.id, head.kind, head.title),
            );
        }
        let mut c =
            Criterion { id: head.id, kind: head.kind, title: head.title, line: start + 1, ..Criterion::default() };
        let mut layout = CriterionLayout { id: c.id.clone(), head: start, end: next, ..CriterionLayout::default() };
        let mut last_key = String::new();
        let mut defined: Vec<String> = Vec::new();
        let mut i = start + 1;
        while i < next {
            let line = self.lines[i];
            if line.trim().is_empty() {
                i += 1;
                continue;
            }
            if let Some(comment) = self.comment_at(i) {
                // Commented out: not a detail of the criterion, nor its prose.
                i = comment.end.min(next);
                continue;
            }
            if layout.detail_indent.is_empty() {
                layout.detail_indent = line[..indent(line)].to_string();
            }
            if self.nested_checklist(i).is_some() && self.nested_command(i, next) {
                // Its details are read as this criterion's (a second Command is refused there).
                let under = format!("criterion `{}` (its details are read as that criterion's)", c.id);
                self.nested_criterion_diag(i, Rule::Reading, &under, UNDER_ACCEPTANCE);
                // Said as what it is, not as the Command above continuing.
                last_key.clear();
            }
            if self.in_fence[i] {
                // A fence right under `- Command:` is the command; any other is kept as prose.
                let fence_end = self.fence_end(i, next);
                if last_key == "command" && c.command.is_empty() {
                    c.command = self.fence_body(i, fence_end);
                } else {
                    c.other.push((String::new(), line.trim().to_string()));
                }
                last_key.clear();
                i = fence_end;
                continue;
            }
            if let Some((marker, key)) = other_marker_detail(line) {
                // `* Command:`: Markdown shows it as the detail it means, scafld reads details
                // only from `- Key:` lines, so it is the criterion's prose. Said, not guessed.
                self.diag(
                    i + 1,
                    Rule::Reading,
                    format!(
                        "`{marker} {key}:` is not read as a detail of criterion `{}`: details are read only from `- Key: value` lines (a dash and one space); write it `- {key}:`",
                        c.id
                    ),
                );
                c.other.push((String::new(), line.trim().to_string()));
                last_key.clear();
                i += 1;
                continue;
            }
            let Some((raw_key, raw_value)) = detail(line) else {
                if last_key == "command" {
                    self.diag(
                        i + 1,
                        Rule::Structure,
                        format!(
                            "the Command of `{}` continues on this line; write it on one line, or as a fenced block under `- Command:`",
                            c.id
                        ),
                    );
                }
                c.other.push((String::new(), line.trim().to_string()));
                i += 1;
                continue;
            };
            let key = normalize_key(raw_key);
            let raw_value = &*without_inline_comments(raw_value);
            let value = optional(raw_value);
            // Only the criterion's own details are runner-owned: an item nested under one of
            // them (a `- Status:` in the author's `- Notes:` list) is the author's text, kept
            // as written, never taken for the criterion's Status or Evidence.
            let own = column(line) < column(&layout.detail_indent) + 2;
            // A field that defines the check, written twice: which one was meant is not for
            // the runner to guess (the original silently ran the last), so the first is read
            // and the criterion is not run until one is left.
            if DEFINING_KEYS.contains(&key.as_str()) {
                if defined.contains(&key) {
                    c.repeated.push((raw_key.trim().to_string(), i + 1));
                    c.other.push((raw_key.trim().to_string(), unquote(raw_value)));
                    last_key.clear();
                    i += 1;
                    continue;
                }
                defined.push(key.clone());
            }
            match key.as_str() {
                "command" => {
                    let raw = raw_value.trim();
                    if raw.starts_with('`') && (raw.len() == 1 || !raw[1..].contains('`')) {
                        self.diag(
                            i + 1,
                            Rule::Structure,
                            format!(
                                "the Command of `{}` opens a backtick it never closes on this line; write it on one line, or as a fenced block under `- Command:`",
                                c.id
                            ),
                        );
                    }
                    c.command = value;
                }
                "expected kind" => {
                    if is_unset(raw_value) && !raw_value.trim().is_empty() {
                        self.diag(
                            i + 1,
                            Rule::Reading,
                            format!(
                                "criterion `{}` has `Expected kind: none`; read as not set (kinds: {}), so it is {}",
                                c.id,
                                EXPECTED_KINDS.join(", "),
                                c.effective_kind()
                            ),
                        );
                    }
                    c.expected_kind = value;
                }
                "cwd" => c.cwd = value,
                "timeout seconds" => c.timeout_seconds = value,
                "status" | "evidence" | "source event" if own => {
                    let (field, slot) = match key.as_str() {
                        "status" => (CriterionField::Status, &mut c.status),
                        "evidence" => (CriterionField::Evidence, &mut c.evidence),
                        _ => (CriterionField::SourceEvent, &mut c.source_event),
                    };
                    if layout.fields.iter().any(|(f, _)| *f == field) {
                        let message = format!(
                            "criterion `{}` has a second `{}` line; the first one is read and kept current",
                            c.id,
                            field.label()
                        );
                        c.other.push((raw_key.trim().to_string(), unquote(raw_value)));
                        self.diag(i + 1, Rule::Reading, message);
                    } else {
                        *slot = value;
                        layout.fields.push((field, i));
                    }
                }
                _ => {
                    if let Some(field) = PythonResultField::of_key(&key)
                        && own
                        && !layout.python.iter().any(|(f, _)| *f == field)
                    {
                        layout.python.push((field, i));
                    }
                    c.other.push((raw_key.trim().to_string(), unquote(raw_value)))
                }
            }
            last_key = key;
            i += 1;
        }
        if layout.detail_indent.is_empty() {
            layout.detail_indent = "  ".into();
        }
        self.layout.criteria.push(layout);
        into.push(c);
        next
    }

    /// The line after the fence that opens at `open` (bounded by `end`).
    fn fence_end(&self, open: usize, end: usize) -> usize {
        let Some((marker, run)) = fence(self.lines[open]) else { return open + 1 };
        (open + 1..end)
            .find(|&i| {
                fence(self.lines[i])
                    .is_some_and(|(m, r)| m == marker && r >= run && self.lines[i].trim().chars().all(|c| c == marker))
            })
            .map(|i| i + 1)
            .unwrap_or(end)
    }

    /// The lines between a fence's delimiters, without the fence's own indentation.
    fn fence_body(&self, open: usize, after: usize) -> String {
        let strip = indent(self.lines[open]);
        let last = if after > open + 1 && fence(self.lines[after - 1]).is_some() { after - 1 } else { after };
        (open + 1..last)
            .map(|i| {
                let line = self.lines[i];
                let cut = indent(line).min(strip);
                &line[cut..]
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// First line at or after `from` that is not an indented detail of the criterion above
    /// (blank lines followed by more details, and fences opened inside the details, belong to
    /// it; trailing blank lines do not).
    fn details_end(&self, from: usize, end: usize) -> usize {
        let mut i = from;
        while i < end {
            let line = self.lines[i];
            if nested(line) && !line.trim().is_empty() {
                // A fence or a comment opened among the details belongs to them whole (a
                // line the runner inserts at their end must not land inside either).
                i = match self.comment_at(i) {
                    Some(comment) => comment.end.min(end),
                    None if self.in_fence[i] => self.fence_end(i, end),
                    None => i + 1,
                };
                continue;
            }
            if !line.trim().is_empty() {
                break;
            }
            // Blank lines belong to the criterion only when more of its details follow them.
            let next = (i..end).find(|&j| !self.lines[j].trim().is_empty()).unwrap_or(end);
            let more = next < end && nested(self.lines[next]) && !self.lines[next].trim_start().starts_with("- [");
            if !more {
                break;
            }
            i = next;
        }
        i
    }

    fn acceptance(&mut self, body: Range<usize>) {
        let mut in_dod = false;
        let mut criteria = Vec::new();
        let mut i = body.start;
        while i < body.end {
            let line = self.lines[i];
            if self.hidden(i) || line.trim().is_empty() {
                if in_dod && !line.trim().is_empty() {
                    self.spec.acceptance.definition_of_done.push(line.to_string());
                }
                i += 1;
                continue;
            }
            if let Some((key, value)) = label(line) {
                match key.as_str() {
                    "profile" => self.spec.acceptance.profile = optional(value),
                    "definition of done" => in_dod = true,
                    _ => in_dod = false,
                }
                i += 1;
            } else if line.starts_with("- [") && (!in_dod || self.has_command(i, body.end)) {
                i = self.criterion(i, body.end, &mut criteria);
            } else if let Some(shape) = other_checklist(line).filter(|_| !in_dod || self.has_command(i, body.end)) {
                self.other_checklist_diag(i, shape);
                i += 1;
            } else if in_dod {
                // Definition-of-done items are a checklist for people, not commands to run; one
                // nested under an item with a Command of its own is kept as written, and named.
                let end = if line.starts_with("- [") { self.details_end(i + 1, body.end) } else { i + 1 };
                for j in i..end {
                    if self.nested_checklist(j).is_some() && self.nested_command(j, body.end) {
                        self.nested_criterion_diag(
                            j,
                            Rule::Reading,
                            "a definition-of-done item",
                            "under `Validation:`",
                        );
                    }
                    self.spec.acceptance.definition_of_done.push(self.lines[j].to_string());
                }
                i = end;
            } else {
                if self.nested_checklist(i).is_some() && self.nested_command(i, body.end) {
                    self.nested_criterion_diag(i, Rule::Reading, "another item", UNDER_ACCEPTANCE);
                }
                i += 1;
            }
        }
        self.spec.acceptance.criteria = criteria;
    }

    /// Say that the checklist item on line `i`, written `shape` ([`other_checklist`]) where a
    /// criterion could stand, is not read as one.
    /// One that only looks like `- [ ]` ([`lookalike`]) is an error before approval: its
    /// author meant a criterion and cannot see why it is not one.
    fn other_checklist_diag(&mut self, i: usize, shape: &str) {
        if lookalike(shape) {
            let message = format!(
                "checklist item written `{}` only looks like `- [ ]`: it holds {}, so it is not a criterion and never runs (nor are the details under it read); retype its start as `- [ ]` (a dash, one plain space, ASCII brackets)",
                lookalike_shown(shape),
                lookalike_said(shape)
            );
            return self.diag(i + 1, Rule::Approval, message);
        }
        let message = format!(
            "checklist item written `{shape}` is not a criterion and never runs: criteria are read only from `- [ ]` (a dash and one space); rewrite it in that form: {}",
            self.lines[i].trim()
        );
        self.diag(i + 1, Rule::Reading, message);
    }

    /// Say where a list that names paths (`## Scope`, `## Touchpoints`, a phase's `Changes:`)
    /// holds a line that only looks like one of its items ([`lookalike_item`]): the path it
    /// names would not be bound to the evidence, while the spec shows it as if it were.
    fn lookalike_entry_diag(&mut self, i: usize, what: &str) {
        let Some(shape) = lookalike_item(self.lines[i]).filter(|_| other_checklist(self.lines[i]).is_none()) else {
            return;
        };
        let message = format!(
            "line written `{}` only looks like {what}: it holds {}, so it is not a list item and what it names is not read (nor bound to the evidence); retype its start as `- ` (a dash and one plain space)",
            lookalike_shown(shape),
            lookalike_said(shape)
        );
        self.diag(i + 1, Rule::Approval, message);
    }

    /// Say where a section scafld reads no criteria from (any but a phase and `## Acceptance`,
    /// `None` for the text before the first `##` heading) holds a checklist item with a
    /// `Command:`, at the start of a line or nested under another item: it looks like a
    /// criterion, but never runs.
    fn stray_criteria(&mut self, heading: Option<&str>, body: Range<usize>) {
        for i in body.clone() {
            let line = self.lines[i];
            if self.hidden(i) {
                continue;
            }
            let stray = if line.starts_with("- [") || other_checklist(line).is_some() {
                self.has_command(i, body.end)
            } else {
                self.nested_checklist(i).is_some() && self.nested_command(i, body.end)
            };
            if stray {
                let what = checklist_what(line);
                let place = match heading {
                    Some(heading) => format!("under `## {heading}`, which scafld reads no criteria from"),
                    None => "before the first `##` heading, where scafld reads no criteria".to_string(),
                };
                let message = format!(
                    "`{what}` has a Command but stands {place}, so it is not a criterion and never runs; move it under a phase's `Acceptance:` label"
                );
                self.diag(i + 1, Rule::Reading, message);
            }
        }
    }

    /// Line `i` as a checklist item indented under another item (`  - [ ]`, or another list
    /// marker): the item without its indentation. scafld reads criteria only from items at the
    /// start of a line (as the original does), so such an item is never one.
    fn nested_checklist(&self, i: usize) -> Option<&'a str> {
        let line = self.lines[i];
        let item = line.trim_start();
        let boxed = ["- [ ]", "- [x]", "- [X]"].iter().any(|b| item.starts_with(b)) || other_checklist(item).is_some();
        (indent(line) > 0 && boxed && !self.hidden(i)).then_some(item)
    }

    /// Whether the nested item at `start` carries a `Command:` detail giving a command
    /// ([`Parser::gives_command`]), among the lines indented deeper than it (up to a checklist
    /// item of its own).
    fn nested_command(&self, start: usize, end: usize) -> bool {
        let end = self.nested_end(start, end);
        let mut i = start + 1;
        while i < end {
            if self.nested_checklist(i).is_some() {
                return false;
            }
            if self.in_fence[i] {
                // Code: nothing in it is a detail (a fence under `- Command:` is seen from there).
                i = self.fence_end(i, end);
                continue;
            }
            if !self.commented(i) && self.gives_command(i, end) {
                return true;
            }
            i += 1;
        }
        false
    }

    /// The line after the nested item at `start` and the lines indented deeper than it (blank
    /// and commented lines among them, and a fence opened among them whole, its lines indented
    /// as they may be), bounded by `end`.
    fn nested_end(&self, start: usize, end: usize) -> usize {
        let base = indent(self.lines[start]);
        let (mut i, mut after) = (start + 1, start + 1);
        while i < end {
            let line = self.lines[i];
            if line.trim().is_empty() || self.commented(i) {
                i += 1;
                continue;
            }
            if indent(line) <= base {
                break;
            }
            i = if self.in_fence[i] { self.fence_end(i, end) } else { i + 1 };
            after = i;
        }
        after
    }

    /// Whether line `i` (outside code and comments) is a `- Command:` detail that gives a
    /// command, as [`Parser::criterion`] reads one: a value on its line, or a fenced block with
    /// something in it right under it (blank and commented lines between), before `end`.
    fn gives_command(&self, i: usize, end: usize) -> bool {
        let Some((_, value)) = detail(self.lines[i]).filter(|(key, _)| normalize_key(key) == "command") else {
            return false;
        };
        if !is_unset(&unquote(&without_inline_comments(value))) {
            return true;
        }
        let Some(open) = (i + 1..end).find(|&j| !self.lines[j].trim().is_empty() && !self.commented(j)) else {
            return false;
        };
        self.in_fence[open] && !self.fence_body(open, self.fence_end(open, end)).trim().is_empty()
    }

    /// Say that the nested checklist item on line `i` (under `under`) has a Command but is not
    /// a criterion, and where (`to`) it would be one.
    fn nested_criterion_diag(&mut self, i: usize, rule: Rule, under: &str, to: &str) {
        let what = checklist_what(self.lines[i]);
        let message = format!(
            "`{what}` has a Command but is indented under {under}, so it is not a criterion and never runs: scafld reads criteria only from `- [ ]` at the start of a line; move it to the start of a line {to}"
        );
        self.diag(i + 1, rule, message);
    }

    /// Whether the checklist item at `start` carries a `Command:` detail giving a command
    /// ([`Parser::gives_command`]: on its line or as a fenced block under it).
    /// One in a checklist item nested under it is that item's own, named as such, never this
    /// one's.
    fn has_command(&self, start: usize, end: usize) -> bool {
        let end = self.details_end(start + 1, end);
        let mut i = start + 1;
        while i < end {
            if self.nested_checklist(i).is_some() {
                i = self.nested_end(i, end);
                continue;
            }
            if !self.hidden(i) && self.gives_command(i, end) {
                return true;
            }
            i += 1;
        }
        false
    }

    /// Where the runner's part of a `## Review` section ends, `body` running to the next `## `
    /// heading: after its findings list (`Findings:` and the items under it), the last thing a
    /// review writes, or at a heading (it writes none), whichever comes first. What follows (an
    /// appendix, a note) is someone's text: no review replaces it.
    fn review_end(&self, body: Range<usize>) -> usize {
        // Inside the findings list: whether an item has been seen yet.
        let mut findings: Option<bool> = None;
        for i in body.clone() {
            let line = self.lines[i];
            if !self.in_fence[i] && line.starts_with('#') {
                return i;
            }
            match findings {
                Some(items) => {
                    let item = line.starts_with("- ") || line.trim_end() == "-";
                    let more = items && line.starts_with(char::is_whitespace) && !line.trim().is_empty();
                    if item || more {
                        findings = Some(true);
                    } else if items || !line.trim().is_empty() {
                        return i;
                    }
                }
                None if !self.in_fence[i] && label(line).is_some_and(|(key, _)| key == "findings") => {
                    findings = Some(false)
                }
                None => {}
            }
        }
        body.end
    }

    fn review(&mut self, body: Range<usize>) {
        for i in body.clone() {
            if self.hidden(i) {
                continue;
            }
            if let Some((key, value)) = label(self.lines[i]) {
                match key.as_str() {
                    "status" if self.spec.review.status.is_empty() => self.spec.review.status = unquote(value),
                    "verdict" if self.spec.review.verdict.is_empty() => self.spec.review.verdict = unquote(value),
                    _ => {}
                }
            }
        }
        // Until a review is recorded the section holds only the template's lines (this tool's,
        // or the runner fields Python scafld 2.x writes there): anything else there is
        // someone's text, which the first review replaces with its own.
        if matches!(self.spec.review.status.as_str(), "" | "not_started") {
            let template = |line: &str| {
                matches!(line.trim(), "" | "Findings:" | "- none")
                    || label(line).is_some_and(|(key, _)| {
                        matches!(key.as_str(), "status" | "verdict") || PYTHON_REVIEW_FIELDS.contains(&key.as_str())
                    })
            };
            if let Some(i) = body.clone().find(|&i| !template(self.lines[i])) {
                self.diag(
                    i + 1,
                    Rule::Reading,
                    "`## Review` is written by scafld: the text under it is replaced at the first review; \
                     move it to another section (a note for the reviewer belongs in `## Context`)",
                );
            }
        }
        let mut lines: Vec<String> = body.map(|i| self.lines[i].to_string()).collect();
        while lines.last().is_some_and(|l| l.trim().is_empty()) {
            lines.pop();
        }
        let leading = lines.iter().take_while(|l| l.trim().is_empty()).count();
        lines.drain(..leading);
        self.spec.review.body = lines;
    }

    fn harden_rounds(&mut self, body: Range<usize>) {
        #[derive(PartialEq)]
        enum Mode {
            Round,
            Checks,
            Questions,
        }
        let mut rounds: Vec<HardenRound> = Vec::new();
        let mut layouts: Vec<RoundLayout> = Vec::new();
        let mut mode = Mode::Round;
        for i in body.clone() {
            let line = self.lines[i];
            if self.hidden(i) || line.trim().is_empty() {
                continue;
            }
            if let Some(id) = line.strip_prefix("### ") {
                if let Some(previous) = layouts.last_mut() {
                    previous.end = i;
                }
                rounds.push(HardenRound { id: id.trim().to_string(), line: i + 1, ..HardenRound::default() });
                layouts.push(RoundLayout { id: id.trim().to_string(), heading: i, end: body.end, fields: Vec::new() });
                mode = Mode::Round;
                continue;
            }
            let (Some(round), Some(layout)) = (rounds.last_mut(), layouts.last_mut()) else { continue };
            if let Some((key, value)) = label(line) {
                let value = unquote(value);
                let field = match key.as_str() {
                    "status" => Some((RoundField::Status, &mut round.status)),
                    "started" => Some((RoundField::Started, &mut round.started)),
                    "ended" => Some((RoundField::Ended, &mut round.ended)),
                    "spec digest" => Some((RoundField::SpecDigest, &mut round.digest)),
                    "checks" => {
                        mode = Mode::Checks;
                        None
                    }
                    "questions" => {
                        mode = Mode::Questions;
                        None
                    }
                    _ => None,
                };
                if let Some((field, slot)) = field
                    && !layout.fields.iter().any(|(f, _)| *f == field)
                {
                    *slot = value;
                    layout.fields.push((field, i));
                }
            } else if let Some(text) = item(line) {
                let text = text.trim();
                if is_unset(text) {
                    continue;
                }
                match mode {
                    Mode::Checks => round.checks.push(HardenCheck {
                        name: strip_label(text, "check").to_string(),
                        line: i + 1,
                        ..HardenCheck::default()
                    }),
                    Mode::Questions => round.questions.push(HardenQuestion {
                        text: strip_label(text, "question").to_string(),
                        line: i + 1,
                        ..HardenQuestion::default()
                    }),
                    Mode::Round => {}
                }
            } else if let Some((key, value)) = detail(line) {
                let value = unquote(value);
                let key = normalize_key(key);
                match mode {
                    Mode::Checks => {
                        if let Some(check) = round.checks.last_mut() {
                            match key.as_str() {
                                "grounded in" => check.grounded_in = value,
                                "result" => check.result = value,
                                "evidence" => check.evidence = value,
                                _ => {}
                            }
                        }
                    }
                    Mode::Questions => {
                        if let Some(q) = round.questions.last_mut() {
                            match key.as_str() {
                                "grounded in" => q.grounded_in = value,
                                "recommended answer" => q.recommended_answer = value,
                                "if unanswered" => q.if_unanswered = value,
                                "answered with" | "resolution" => q.answered_with = value,
                                _ => {}
                            }
                        }
                    }
                    Mode::Round => {}
                }
            }
        }
        self.spec.harden_rounds = rounds;
        self.layout.rounds = layouts;
    }

    /// Python scafld 2.x's rounds: `- Round N` items with `- Started at:`, `- Ended at:`,
    /// `- Outcome:` (the round's status) and `- Questions:` nested under them, read as rounds
    /// `round-N` before the `### ` rounds this tool may have added after them.
    fn listed_rounds(&mut self, body: Range<usize>) {
        let mut rounds: Vec<HardenRound> = Vec::new();
        let mut layouts: Vec<RoundLayout> = Vec::new();
        let end = body.clone().find(|&i| !self.in_fence[i] && self.lines[i].starts_with("### ")).unwrap_or(body.end);
        for i in body.start..end {
            let line = self.lines[i];
            if self.in_fence[i] || line.trim().is_empty() {
                continue;
            }
            let number =
                item(line).and_then(|t| t.trim().strip_prefix("Round ")).and_then(|n| n.trim().parse::<u32>().ok());
            if let Some(number) = number {
                if let Some(previous) = layouts.last_mut() {
                    previous.end = i;
                }
                let id = format!("round-{number}");
                rounds.push(HardenRound {
                    id: id.clone(),
                    line: i + 1,
                    form: RoundForm::Listed,
                    ..HardenRound::default()
                });
                layouts.push(RoundLayout { id, heading: i, end, fields: Vec::new() });
                continue;
            }
            let (Some(round), Some(layout)) = (rounds.last_mut(), layouts.last_mut()) else { continue };
            let Some((key, value)) = detail(line).filter(|_| nested(line)) else { continue };
            let value = unquote(value);
            let question = round.questions.last_mut();
            let (field, slot) = match (normalize_key(key).as_str(), question) {
                ("started at", _) => (Some(RoundField::Started), &mut round.started),
                ("ended at", _) => (Some(RoundField::Ended), &mut round.ended),
                ("outcome", _) => (Some(RoundField::Status), &mut round.status),
                ("question", _) => {
                    round.questions.push(HardenQuestion { text: value, line: i + 1, ..HardenQuestion::default() });
                    continue;
                }
                ("grounded in", Some(q)) => (None, &mut q.grounded_in),
                ("recommended answer", Some(q)) => (None, &mut q.recommended_answer),
                ("if unanswered", Some(q)) => (None, &mut q.if_unanswered),
                ("answered with", Some(q)) => (None, &mut q.answered_with),
                _ => continue,
            };
            let Some(field) = field else {
                *slot = value;
                continue;
            };
            if !layout.fields.iter().any(|(f, _)| *f == field) {
                *slot = value;
                layout.fields.push((field, i));
            }
        }
        if !rounds.is_empty() {
            rounds.append(&mut self.spec.harden_rounds);
            layouts.append(&mut self.layout.rounds);
            self.spec.harden_rounds = rounds;
            self.layout.rounds = layouts;
        }
    }

    fn validate(&mut self) {
        let fm = self.spec.front.clone();
        let line_of =
            |key: &str| self.layout.front_fields.iter().find(|(k, _)| k == key).map(|(_, l)| l + 1).unwrap_or(1);
        let (version_line, id_line, status_line, harden_line, size_line, risk_line) = (
            line_of("spec_version"),
            line_of("task_id"),
            line_of("status"),
            line_of("harden_status"),
            line_of("size"),
            line_of("risk_level"),
        );
        if self.layout.front_matter.is_some() {
            if fm.spec_version.is_empty() {
                self.diag(version_line, Rule::Reading, "front matter has no spec_version; read as '2.0'");
            } else if fm.spec_version != "2.0" {
                self.diag(
                    version_line,
                    Rule::Reading,
                    format!("spec_version {:?} is not '2.0'; read with the 2.0 grammar", fm.spec_version),
                );
            }
            if fm.task_id.is_empty() {
                self.diag(id_line, Rule::Structure, "front matter task_id is required");
            } else if let Err(e) = TaskId::parse(&fm.task_id) {
                self.diag(id_line, Rule::Structure, format!("front matter {e}"));
            }
            if fm.status.is_empty() {
                self.diag(status_line, Rule::Structure, "front matter status is required");
            } else if let Err(e) = fm.status.parse::<Status>() {
                match crate::domain::lifecycle::read_status(&fm.status) {
                    Some(read) => self.diag(
                        status_line,
                        Rule::Reading,
                        format!("status `{}` is a Python scafld name; read as `{read}`", fm.status),
                    ),
                    None => self.diag(status_line, Rule::Structure, format!("front matter {e}")),
                }
            }
            if let Err(e) = crate::domain::lifecycle::read_harden_status(&fm.harden_status) {
                self.diag(harden_line, Rule::Reading, format!("front matter {e}; read as not_run"));
            }
            if !is_unset(&fm.size) && !["micro", "small", "medium", "large"].contains(&fm.size.as_str()) {
                self.diag(
                    size_line,
                    Rule::Reading,
                    format!("size {:?} is not one of micro, small, medium, large", fm.size),
                );
            }
            if !is_unset(&fm.risk_level) && !["low", "medium", "high"].contains(&fm.risk_level.as_str()) {
                self.diag(
                    risk_line,
                    Rule::Reading,
                    format!("risk_level {:?} is not one of low, medium, high", fm.risk_level),
                );
            }
        }
        if self.spec.title.is_empty() {
            self.diag(0, Rule::Structure, "a `# Title` line is required");
        }
        if self.spec.phases.is_empty() {
            if self.spec.acceptance.criteria.iter().any(Criterion::is_executable) {
                self.diag(0, Rule::Reading, "the spec has no `## Phase N: Name` sections");
            } else {
                // Nothing would run: the task would be approved, built and completed on no
                // evidence at all (a phase without one is refused below for the same reason).
                self.diag(
                    0,
                    Rule::Approval,
                    "the spec has no `## Phase N: Name` sections and no executable acceptance criterion; it would complete without evidence (add a phase whose criterion has a `- Command:`)",
                );
            }
        }
        let mut first_line: HashMap<String, usize> = HashMap::new();
        let criteria: Vec<Criterion> = self.spec.criteria().cloned().collect();
        for c in &criteria {
            if let Some(first) = first_line.get(&c.id) {
                self.diag(
                    c.line,
                    Rule::Structure,
                    format!("criterion id `{}` is already used on line {first}; ids must be unique in the spec", c.id),
                );
            } else {
                first_line.insert(c.id.clone(), c.line);
            }
            for problem in criterion_problems(c) {
                self.diag(c.line, Rule::Approval, problem);
            }
            if !c.timeout_seconds.is_empty() && c.timeout_seconds.parse::<u64>().map_or(true, |t| t == 0) {
                self.diag(
                    c.line,
                    Rule::Structure,
                    format!("criterion `{}`: Timeout seconds must be a positive whole number or `none`", c.id),
                );
            }
            if !super::model::cwd_inside(&c.cwd) {
                self.diag(
                    c.line,
                    Rule::Structure,
                    format!("criterion `{}`: Cwd must be a relative path inside the workspace", c.id),
                );
            }
        }
        let phases = self.spec.phases.clone();
        for phase in &phases {
            if phase.name.trim().is_empty() {
                self.diag(phase.line, Rule::Structure, format!("{} has no name", phase.id()));
            }
            if !phase.criteria.iter().any(Criterion::is_executable) {
                let message = match phase.criteria.first() {
                    // Only manual criteria: nothing would run, a person's word alone would pass it.
                    Some(manual) => format!(
                        "{} has only manual acceptance criteria: it would wait for a person alone, who records each \
                         with `{}`; approval needs at least one executable criterion (a `Command:`) per phase: add \
                         one, or move the manual check into a phase that has one",
                        phase.id(),
                        scafld_protocol::cli::manual_evidence(&self.spec.front.task_id, &manual.id)
                    ),
                    None => {
                        format!("{} has no executable acceptance criteria; it would pass without evidence", phase.id())
                    }
                };
                self.diag(phase.line, Rule::Approval, message);
            }
        }
        self.dependencies();
        for i in 0..self.lines.len() {
            if !self.hidden(i) && is_placeholder(self.lines[i]) {
                let message = format!("unfilled template placeholder: {}", self.lines[i].trim());
                self.diag(i + 1, Rule::Approval, message);
            }
        }
    }
}

impl Parser<'_> {
    /// Phases are built in document order; `Dependencies:` are not enforced (nor were they by
    /// the original). Say where one names a phase the spec does not have, or one that is not
    /// built before the phase that needs it.
    fn dependencies(&mut self) {
        let order: Vec<u32> = self.spec.phases.iter().map(|p| p.number).collect();
        for (number, line) in self.dependency_lines.clone() {
            let Some(at) = order.iter().position(|n| *n == number) else { continue };
            let dependencies = self.spec.phases[at].dependencies.clone();
            for named in dependencies.split(',').map(unquote).filter(|d| !is_unset(d)) {
                let id = normalize_key(&named).replace(' ', "");
                let wanted = id.strip_prefix("phase").unwrap_or(&id).parse::<u32>().ok();
                let message = match wanted.map(|n| (n, order.iter().position(|m| *m == n))) {
                    None => format!(
                        "phase{number} depends on `{named}`, which names no phase (write phase ids, `phase1, phase2`, or `none`)"
                    ),
                    Some((n, None)) => format!("phase{number} depends on phase{n}, which the spec does not have"),
                    Some((n, Some(dep))) if dep >= at => format!(
                        "phase{number} depends on phase{n}, which is not before it: phases are built in the order they are written, so move phase{n} above phase{number} or drop the dependency"
                    ),
                    Some(_) => continue,
                };
                self.diag(line + 1, Rule::Reading, message);
            }
        }
    }
}

/// The detail keys (normalized) that define what a criterion checks: each may be written once.
const DEFINING_KEYS: [&str; 4] = ["command", "expected kind", "cwd", "timeout seconds"];

/// What makes a criterion unfit to run: every item is a reason `build` records it `invalid`
/// instead of running it, and `validate` reports it.
/// The kernel's limit on one argument string, its closing NUL included (`MAX_ARG_STRLEN`, 32
/// pages): a criterion's command is the one argument `sh -c` runs.
const MAX_COMMAND_BYTES: usize = 128 * 1024;

pub fn criterion_problems(c: &Criterion) -> Vec<String> {
    let mut problems = Vec::new();
    for (label, line) in &c.repeated {
        problems.push(format!(
            "criterion `{}` has a second `{label}` line (line {line}); it may have one: delete the one you do not mean",
            c.id
        ));
    }
    let kind = c.effective_kind();
    if !EXPECTED_KINDS.contains(&kind) {
        problems.push(format!(
            "criterion `{}` has unknown expected kind {kind:?} (expected one of {})",
            c.id,
            EXPECTED_KINDS.join(", ")
        ));
    }
    if c.command.trim().is_empty() && kind != "manual" {
        problems.push(format!("criterion `{}` has no Command", c.id));
    }
    if c.command.len() >= MAX_COMMAND_BYTES {
        problems.push(format!(
            "criterion `{}`: its Command is {} bytes, and Linux starts no command line of {MAX_COMMAND_BYTES} bytes or \
             more (it is one argument of `sh -c`): it could never run; put it in a script and run the script",
            c.id,
            c.command.len()
        ));
    }
    if c.kind == "browser" && kind != "browser_evidence" || kind == "browser_evidence" && c.kind != "browser" {
        problems.push(format!("criterion `{}`: type `browser` and kind `browser_evidence` go together", c.id));
    }
    for (key, value) in &c.other {
        if let Some(instead) = unchecked_condition(&normalize_key(key), value, kind) {
            problems.push(format!(
                "criterion `{}`: `{}: {value}` (the Python scafld 2.x grammar's) is a condition scafld does not check, \
                 so the criterion would pass on a weaker check than it states; {instead}, or remove the line",
                c.id,
                key.trim()
            ));
        }
    }
    problems
}

/// For a detail key of the Python scafld 2.x grammar that puts a condition on the result
/// (scafld-protocol.md section 13: an exact nonzero exit code, non-empty output), which neither
/// this tool nor the Go original checks: how to state it in the command instead. `None` for any
/// other key, and for a value that asks nothing beyond the kind (`false`, `none`, exit code 0 of
/// `exit_code_zero`).
fn unchecked_condition(key: &str, value: &str, kind: &str) -> Option<&'static str> {
    let value = value.trim().trim_matches('`').trim();
    match key {
        "expected exit code" if !(is_unset(value) || value == "0" && kind == "exit_code_zero") => {
            Some("check the code in the Command (`your-command; test $? -eq 2`, kind exit_code_zero)")
        }
        "evidence required" if !is_unset(value) && !["false", "no"].contains(&value.to_lowercase().as_str()) => {
            Some("require output in the Command (`your-command | grep .`)")
        }
        _ => None,
    }
}

fn strip_label<'s>(text: &'s str, label: &str) -> &'s str {
    match text.split_once(':') {
        Some((key, rest)) if key.trim().eq_ignore_ascii_case(label) => rest.trim(),
        _ => text,
    }
}

fn parse_phase_heading(heading: &str) -> Option<(u32, String)> {
    let rest = heading.get(6..)?; // after "Phase "
    let (number, name) = rest.split_once(':')?;
    let number = number.trim().parse().ok()?;
    let name = name.trim();
    (!name.is_empty()).then(|| (number, name.to_string()))
}
