//! Spec parser: text in, model + diagnostics + layout out. Never fails; everything that does
//! not parse becomes a [`Diagnostic`] with a line number.

use serde::Serialize;

use super::model::*;
use crate::domain::lifecycle::{HardenStatus, Status};
use crate::domain::task_id::TaskId;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Error,
    Warning,
}

/// A problem found in a spec. `line` is 1-based; 0 means the file as a whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    pub line: usize,
    pub severity: Severity,
    pub message: String,
    /// An unfilled `TODO:` of the plan template: the spec is not ready, but it is well formed
    /// and may be edited (hardened) by the runner.
    #[serde(skip)]
    pub placeholder: bool,
}

impl Diagnostic {
    fn error(line: usize, message: impl Into<String>) -> Diagnostic {
        Diagnostic { line, severity: Severity::Error, message: message.into(), placeholder: false }
    }

    fn warning(line: usize, message: impl Into<String>) -> Diagnostic {
        Diagnostic { line, severity: Severity::Warning, message: message.into(), placeholder: false }
    }
}

impl std::fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line > 0 { write!(f, "line {}: {}", self.line, self.message) } else { f.write_str(&self.message) }
    }
}

/// Which runner-owned section a `##` heading is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SectionKey {
    CurrentState,
    Acceptance,
    Phase(u32),
    Review,
    HardenRounds,
    /// Human prose: never rewritten by the runner.
    Other(String),
}

/// Where the parts of the file are, by 0-based line index (end exclusive).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layout {
    pub crlf: bool,
    /// Lines of the front matter including both `---` delimiters.
    pub front_matter: Option<(usize, usize)>,
    pub sections: Vec<(SectionKey, usize, usize)>,
    pub line_count: usize,
}

#[derive(Debug, Clone)]
pub struct Parsed {
    pub spec: Spec,
    pub diagnostics: Vec<Diagnostic>,
    pub layout: Layout,
}

impl Parsed {
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics.iter().filter(|d| d.severity == Severity::Error)
    }

    /// Errors that make the file unsafe to rewrite (everything but unfilled placeholders).
    pub fn structural_errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.errors().filter(|d| !d.placeholder)
    }

    pub fn is_valid(&self) -> bool {
        self.errors().next().is_none()
    }

    /// Also require the front matter `task_id` to match the file it was read from.
    pub fn check_file_name(&mut self, file_task_id: &str) {
        if !self.spec.front.task_id.is_empty() && self.spec.front.task_id != file_task_id {
            self.diagnostics.push(Diagnostic::error(
                self.front_line("task_id"),
                format!(
                    "front matter task_id {:?} does not match the file name {file_task_id}.md",
                    self.spec.front.task_id
                ),
            ));
        }
    }

    fn front_line(&self, _key: &str) -> usize {
        self.layout.front_matter.map(|(start, _)| start + 2).unwrap_or(1)
    }
}

pub fn parse(text: &str) -> Parsed {
    let lines: Vec<&str> = text.lines().collect();
    let mut p = Parser { lines: &lines, in_fence: vec![false; lines.len()], spec: Spec::default(), diags: Vec::new() };
    let mut layout = Layout { crlf: text.contains("\r\n"), line_count: lines.len(), ..Layout::default() };
    let body_start = p.front_matter(&mut layout);
    p.scan_body(body_start, &mut layout);
    p.validate();
    Parsed { spec: p.spec, diagnostics: p.diags, layout }
}

struct Parser<'a> {
    lines: &'a [&'a str],
    in_fence: Vec<bool>,
    spec: Spec,
    diags: Vec<Diagnostic>,
}

/// A value as written after `Key:`, with one layer of backticks or quotes removed.
pub(crate) fn unquote(raw: &str) -> String {
    let v = raw.trim();
    if v.len() >= 2 {
        if v.starts_with('`') && v.ends_with('`') && !v[1..v.len() - 1].contains('`') {
            return v[1..v.len() - 1].to_string();
        }
        if v.starts_with('"')
            && v.ends_with('"')
            && let Ok(s) = serde_json::from_str::<String>(v)
        {
            return s;
        }
        if v.starts_with('\'') && v.ends_with('\'') {
            return v[1..v.len() - 1].to_string();
        }
    }
    v.to_string()
}

/// `Key: value` → normalized key (lowercase, `_`/`-`/spaces collapsed) and raw value.
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

pub(crate) fn normalize_key(key: &str) -> String {
    key.replace(['_', '-'], " ").split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// A top-level list item: `- text` at column 0.
fn item(line: &str) -> Option<&str> {
    line.strip_prefix("- ").or_else(|| (line == "-").then_some(""))
}

fn is_fence(line: &str) -> Option<char> {
    let t = line.trim_start();
    if indent(line) > 3 {
        return None;
    }
    if t.starts_with("```") {
        Some('`')
    } else if t.starts_with("~~~") {
        Some('~')
    } else {
        None
    }
}

/// Parsed criterion start line.
struct CriterionHead {
    id: String,
    kind: String,
    title: String,
}

/// ``- [ ] `id` type - title``; `Err` explains what is wrong with a line that tries to be one.
fn criterion_head(line: &str) -> Result<CriterionHead, &'static str> {
    let rest = line.strip_prefix("- [").ok_or("expected `- [ ]`")?;
    let mut chars = rest.chars();
    let mark = chars.next().ok_or("expected `- [ ]`")?;
    if !matches!(mark, ' ' | 'x' | 'X') || !rest[mark.len_utf8()..].starts_with("] ") {
        return Err("the checkbox must be `[ ]` or `[x]` followed by a space");
    }
    let rest = rest[mark.len_utf8() + 2..].trim_start();
    let rest = rest.strip_prefix('`').ok_or("the criterion id must be in backticks: ``- [ ] `id` type - title``")?;
    let (id, rest) = rest.split_once('`').ok_or("the criterion id's closing backtick is missing")?;
    if id.trim().is_empty() {
        return Err("the criterion id is empty");
    }
    if !rest.starts_with(char::is_whitespace) {
        return Err("expected a space and a type after the id: ``- [ ] `id` type - title``");
    }
    let dash = rest.find('-').ok_or("missing ` - ` between the type and the title: ``- [ ] `id` type - title``")?;
    let kind = rest[..dash].trim();
    if kind.is_empty() {
        return Err("the criterion type is missing: ``- [ ] `id` type - title``");
    }
    if !rest[..dash].ends_with(char::is_whitespace) {
        return Err("the type may not contain `-`; separate it from the title with ` - `");
    }
    Ok(CriterionHead { id: id.trim().to_string(), kind: kind.to_string(), title: rest[dash + 1..].trim().to_string() })
}

impl<'a> Parser<'a> {
    fn front_matter(&mut self, layout: &mut Layout) -> usize {
        if self.lines.first().map(|l| l.trim_end()) != Some("---") {
            self.diags.push(Diagnostic::error(1, "front matter is required: the file must start with a `---` line"));
            return 0;
        }
        let Some(end) = (1..self.lines.len()).find(|&i| self.lines[i].trim_end() == "---") else {
            self.diags.push(Diagnostic::error(1, "front matter is not closed by a `---` line"));
            return self.lines.len();
        };
        layout.front_matter = Some((0, end + 1));
        for i in 1..end {
            let line = self.lines[i];
            if line.trim().is_empty() || line.trim_start().starts_with('#') {
                continue;
            }
            let Some((key, value)) = line.split_once(':') else {
                self.diags.push(Diagnostic::error(i + 1, format!("front matter line is not `key: value`: {line:?}")));
                continue;
            };
            let value = unquote(value);
            let fm = &mut self.spec.front;
            match key.trim() {
                "spec_version" => fm.spec_version = value,
                "task_id" => fm.task_id = value,
                "created" => fm.created = value,
                "updated" => fm.updated = value,
                "status" => fm.status = value,
                "harden_status" => fm.harden_status = value,
                "size" => fm.size = value,
                "risk_level" => fm.risk_level = value,
                other => fm.extra.push((other.to_string(), value)),
            }
        }
        end + 1
    }

    fn scan_body(&mut self, start: usize, layout: &mut Layout) {
        let mut fence: Option<(usize, char)> = None;
        let mut headings: Vec<(usize, String)> = Vec::new();
        for i in start..self.lines.len() {
            let line = self.lines[i];
            if let Some(marker) = is_fence(line) {
                match fence {
                    Some((_, open)) if open == marker => fence = None,
                    Some(_) => {}
                    None => fence = Some((i, marker)),
                }
                self.in_fence[i] = true;
                continue;
            }
            if fence.is_some() {
                self.in_fence[i] = true;
                continue;
            }
            if let Some(heading) = line.strip_prefix("## ") {
                headings.push((i, heading.trim().to_string()));
            } else if let Some(title) = line.strip_prefix("# ")
                && self.spec.title.is_empty()
            {
                self.spec.title = title.trim().to_string();
            }
        }
        if let Some((line, _)) = fence {
            self.diags.push(Diagnostic::error(line + 1, "code fence is never closed"));
        }
        let mut seen: Vec<SectionKey> = Vec::new();
        for (n, (heading_line, heading)) in headings.iter().enumerate() {
            let end = headings.get(n + 1).map(|(l, _)| *l).unwrap_or(self.lines.len());
            let body = heading_line + 1..end;
            let key = self.section(*heading_line, heading, body);
            if !matches!(key, SectionKey::Other(_)) && seen.contains(&key) {
                let message = match &key {
                    SectionKey::Phase(n) => format!("duplicate phase heading: phase{n} is declared twice"),
                    _ => format!("duplicate section `## {heading}`"),
                };
                self.diags.push(Diagnostic::error(heading_line + 1, message));
            }
            seen.push(key.clone());
            layout.sections.push((key, *heading_line, end));
        }
    }

    /// Parse one `##` section and say which it is.
    fn section(&mut self, heading_line: usize, heading: &str, body: std::ops::Range<usize>) -> SectionKey {
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
                    self.diags.push(Diagnostic::error(
                        heading_line + 1,
                        format!("malformed phase heading `## {heading}`; expected `## Phase N: Name`"),
                    ));
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
                self.harden_rounds(body);
                SectionKey::HardenRounds
            }
            "summary" => {
                let text: Vec<&str> =
                    body.filter(|&i| !self.lines[i].trim().is_empty()).map(|i| self.lines[i].trim()).collect();
                self.spec.summary = text.join("\n");
                SectionKey::Other(heading.to_string())
            }
            "objectives" => {
                self.spec.objectives = self.list(body);
                SectionKey::Other(heading.to_string())
            }
            "scope" => {
                self.spec.scope = self.list(body);
                SectionKey::Other(heading.to_string())
            }
            "touchpoints" => {
                self.spec.touchpoints = self.list(body);
                SectionKey::Other(heading.to_string())
            }
            "context" => {
                self.context(body);
                SectionKey::Other(heading.to_string())
            }
            _ => SectionKey::Other(heading.to_string()),
        }
    }

    /// Bullet items with two-space continuation lines; `- none` and empty items dropped.
    fn list(&self, body: std::ops::Range<usize>) -> Vec<String> {
        let mut items: Vec<String> = Vec::new();
        for i in body {
            let line = self.lines[i];
            if self.in_fence[i] {
                continue;
            }
            if let Some(text) = item(line) {
                items.push(text.trim().to_string());
            } else if indent(line) >= 2
                && !line.trim_start().starts_with("- ")
                && let Some(last) = items.last_mut()
            {
                last.push(' ');
                last.push_str(line.trim());
            }
        }
        items.retain(|i| !i.is_empty() && !i.eq_ignore_ascii_case("none"));
        items
    }

    fn current_state(&mut self, body: std::ops::Range<usize>) {
        for i in body {
            let Some((key, value)) = label(self.lines[i]) else { continue };
            let value = unquote(value);
            let cs = &mut self.spec.current_state;
            match key.as_str() {
                "current phase" => cs.current_phase = value,
                "next" => cs.next = value,
                "reason" => cs.reason = value,
                "blockers" => cs.blockers = value,
                "allowed follow up" | "allowed follow up command" => cs.allowed_follow_up = value,
                "latest runner update" => cs.latest_runner_update = value,
                "review gate" => cs.review_gate = value,
                _ => {}
            }
        }
    }

    fn context(&mut self, body: std::ops::Range<usize>) {
        let mut target: Option<&str> = None;
        for i in body {
            let line = self.lines[i];
            if let Some((key, value)) = label(line) {
                target = match key.as_str() {
                    "packages" => Some("packages"),
                    "files impacted" => Some("files"),
                    _ => None,
                };
                let value = value.trim();
                if !value.is_empty() {
                    self.push_context(target, value.split(',').map(unquote));
                }
            } else if let Some(text) = item(line) {
                self.push_context(target, std::iter::once(unquote(text)));
            }
        }
    }

    fn push_context(&mut self, target: Option<&str>, values: impl Iterator<Item = String>) {
        let list = match target {
            Some("packages") => &mut self.spec.context.packages,
            Some("files") => &mut self.spec.context.files_impacted,
            _ => return,
        };
        list.extend(values.filter(|v| !v.is_empty() && !v.eq_ignore_ascii_case("none")));
    }

    fn phase(&mut self, number: u32, name: String, heading_line: usize, body: std::ops::Range<usize>) -> Phase {
        #[derive(PartialEq)]
        enum Mode {
            Start,
            Changes,
            Acceptance,
        }
        let mut phase = Phase { number, name, line: heading_line + 1, ..Phase::default() };
        let mut mode = Mode::Start;
        let mut i = body.start;
        while i < body.end {
            let line = self.lines[i];
            if self.in_fence[i] {
                phase.notes.push(line.to_string());
                i += 1;
                continue;
            }
            if line.trim().is_empty() {
                i += 1;
                continue;
            }
            if line.starts_with("- [") {
                i = self.criterion(i, body.end, &mut phase.criteria);
                continue;
            }
            if let Some((key, value)) = label(line) {
                match key.as_str() {
                    "objective" | "goal" => {
                        phase.objective = unquote(value);
                        phase.objective_label = line.split(':').next().unwrap_or("Objective").trim().to_string();
                    }
                    "status" => phase.status = unquote(value),
                    "dependencies" => phase.dependencies = unquote(value),
                    "changes" => mode = Mode::Changes,
                    "acceptance" => mode = Mode::Acceptance,
                    _ => phase.notes.push(line.to_string()),
                }
            } else if let Some(text) = item(line).filter(|_| mode == Mode::Changes) {
                if !text.trim().eq_ignore_ascii_case("none") {
                    phase.changes.push(text.trim().to_string());
                }
            } else if mode == Mode::Changes && indent(line) >= 2 && !phase.changes.is_empty() {
                let last = phase.changes.last_mut().expect("non-empty");
                last.push(' ');
                last.push_str(line.trim());
            } else {
                phase.notes.push(line.to_string());
            }
            i += 1;
        }
        phase
    }

    /// Parse the criterion starting at line `start`; push it (or a diagnostic) and return the
    /// index of the first line after its details.
    fn criterion(&mut self, start: usize, end: usize, into: &mut Vec<Criterion>) -> usize {
        let head = match criterion_head(self.lines[start]) {
            Ok(head) => head,
            Err(why) => {
                self.diags.push(Diagnostic::error(
                    start + 1,
                    format!("criterion line does not parse ({why}): {}", self.lines[start].trim()),
                ));
                return self.skip_details(start + 1, end);
            }
        };
        let mut c =
            Criterion { id: head.id, kind: head.kind, title: head.title, line: start + 1, ..Criterion::default() };
        let next = self.skip_details(start + 1, end);
        for i in start + 1..next {
            let line = self.lines[i];
            if line.trim().is_empty() {
                continue;
            }
            let detail = line.trim_start().strip_prefix("- ").and_then(|d| d.split_once(':'));
            let Some((raw_key, value)) = detail else {
                c.other.push((String::new(), line.trim().to_string()));
                continue;
            };
            let value = unquote(value);
            match normalize_key(raw_key).as_str() {
                "command" => c.command = value,
                "expected kind" => c.expected_kind = value,
                "cwd" => c.cwd = value,
                "timeout seconds" => c.timeout_seconds = value,
                "status" => c.status = value,
                "evidence" => c.evidence = value,
                "source event" => c.source_event = value,
                _ => c.other.push((raw_key.trim().to_string(), value)),
            }
        }
        into.push(c);
        next
    }

    /// First line at or after `from` that is not an indented detail (or a blank line followed
    /// by more details).
    fn skip_details(&self, from: usize, end: usize) -> usize {
        let mut i = from;
        while i < end {
            let line = self.lines[i];
            let detail = !self.in_fence[i] && indent(line) >= 2 && !line.trim().is_empty();
            let gap_before_detail =
                line.trim().is_empty() && i + 1 < end && indent(self.lines[i + 1]) >= 2 && !self.in_fence[i + 1];
            if !(detail || gap_before_detail) {
                break;
            }
            i += 1;
        }
        i
    }

    fn acceptance(&mut self, body: std::ops::Range<usize>) {
        let mut in_dod = false;
        let mut criteria = Vec::new();
        let mut i = body.start;
        while i < body.end {
            let line = self.lines[i];
            if self.in_fence[i] || line.trim().is_empty() {
                if in_dod && !line.trim().is_empty() {
                    self.spec.acceptance.definition_of_done.push(line.to_string());
                }
                i += 1;
                continue;
            }
            if let Some((key, value)) = label(line) {
                match key.as_str() {
                    "profile" => self.spec.acceptance.profile = unquote(value),
                    "definition of done" => in_dod = true,
                    "validation" => in_dod = false,
                    _ => {}
                }
                i += 1;
            } else if in_dod {
                self.spec.acceptance.definition_of_done.push(line.to_string());
                i += 1;
            } else if line.starts_with("- [") {
                i = self.criterion(i, body.end, &mut criteria);
            } else {
                i += 1;
            }
        }
        self.spec.acceptance.criteria = criteria;
    }

    fn review(&mut self, body: std::ops::Range<usize>) {
        for i in body.clone() {
            if let Some((key, value)) = label(self.lines[i]) {
                match key.as_str() {
                    "status" if self.spec.review.status.is_empty() => self.spec.review.status = unquote(value),
                    "verdict" if self.spec.review.verdict.is_empty() => self.spec.review.verdict = unquote(value),
                    _ => {}
                }
            }
        }
        let mut lines: Vec<String> = body.map(|i| self.lines[i].to_string()).collect();
        while lines.last().is_some_and(|l| l.trim().is_empty()) {
            lines.pop();
        }
        while lines.first().is_some_and(|l| l.trim().is_empty()) {
            lines.remove(0);
        }
        self.spec.review.body = lines;
    }

    fn harden_rounds(&mut self, body: std::ops::Range<usize>) {
        #[derive(PartialEq)]
        enum Mode {
            Round,
            Checks,
            Questions,
        }
        let mut rounds: Vec<HardenRound> = Vec::new();
        let mut mode = Mode::Round;
        for i in body {
            let line = self.lines[i];
            if self.in_fence[i] || line.trim().is_empty() {
                continue;
            }
            if let Some(id) = line.strip_prefix("### ") {
                rounds.push(HardenRound { id: id.trim().to_string(), line: i + 1, ..HardenRound::default() });
                mode = Mode::Round;
                continue;
            }
            let Some(round) = rounds.last_mut() else { continue };
            if let Some((key, value)) = label(line) {
                let value = unquote(value);
                match key.as_str() {
                    "status" => round.status = value,
                    "started" => round.started = value,
                    "ended" => round.ended = value,
                    "checks" => mode = Mode::Checks,
                    "questions" => mode = Mode::Questions,
                    _ => {}
                }
            } else if let Some(text) = item(line) {
                let text = text.trim();
                if text.eq_ignore_ascii_case("none") {
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
            } else if let Some((key, value)) = line.trim_start().strip_prefix("- ").and_then(|d| d.split_once(':')) {
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
    }

    fn validate(&mut self) {
        let fm = self.spec.front.clone();
        let fm_line = 2;
        if self.lines.first().map(|l| l.trim_end()) == Some("---") {
            if fm.spec_version != "2.0" {
                self.diags.push(Diagnostic::error(
                    fm_line,
                    format!("spec_version must be '2.0' (found {:?})", fm.spec_version),
                ));
            }
            if fm.task_id.is_empty() {
                self.diags.push(Diagnostic::error(fm_line, "front matter task_id is required"));
            } else if let Err(e) = TaskId::parse(&fm.task_id) {
                self.diags.push(Diagnostic::error(fm_line, format!("front matter {e}")));
            }
            if fm.status.is_empty() {
                self.diags.push(Diagnostic::error(fm_line, "front matter status is required"));
            } else if let Err(e) = fm.status.parse::<Status>() {
                self.diags.push(Diagnostic::error(fm_line, format!("front matter {e}")));
            }
            if let Err(e) = fm.harden_status.parse::<HardenStatus>() {
                self.diags.push(Diagnostic::error(fm_line, format!("front matter {e}")));
            }
            if !fm.size.is_empty() && !["micro", "small", "medium", "large"].contains(&fm.size.as_str()) {
                self.diags.push(Diagnostic::error(
                    fm_line,
                    format!("size {:?} is not one of micro, small, medium, large", fm.size),
                ));
            }
            if !fm.risk_level.is_empty() && !["low", "medium", "high"].contains(&fm.risk_level.as_str()) {
                self.diags.push(Diagnostic::error(
                    fm_line,
                    format!("risk_level {:?} is not one of low, medium, high", fm.risk_level),
                ));
            }
        }
        if self.spec.title.is_empty() {
            self.diags.push(Diagnostic::error(0, "a `# Title` line is required"));
        }
        if self.spec.phases.is_empty() {
            self.diags.push(Diagnostic::warning(0, "the spec has no `## Phase N: Name` sections"));
        }
        let mut seen: Vec<(String, usize)> = Vec::new();
        let criteria: Vec<Criterion> = self.spec.criteria().cloned().collect();
        for c in &criteria {
            if let Some((_, first)) = seen.iter().find(|(id, _)| *id == c.id) {
                self.diags.push(Diagnostic::error(
                    c.line,
                    format!("criterion id `{}` is already used on line {first}; ids must be unique in the spec", c.id),
                ));
            }
            seen.push((c.id.clone(), c.line));
            let kind = c.effective_kind();
            if !EXPECTED_KINDS.contains(&kind) {
                self.diags.push(Diagnostic::error(
                    c.line,
                    format!(
                        "criterion `{}` has unknown expected kind {kind:?} (expected one of {})",
                        c.id,
                        EXPECTED_KINDS.join(", ")
                    ),
                ));
            }
            if c.command.trim().is_empty() && kind != "manual" {
                self.diags.push(Diagnostic::error(c.line, format!("criterion `{}` has no Command", c.id)));
            }
            if (c.kind == "browser") != (kind == "browser_evidence") {
                self.diags.push(Diagnostic::error(
                    c.line,
                    format!("criterion `{}`: type `browser` and kind `browser_evidence` go together", c.id),
                ));
            }
            if !c.timeout_seconds.is_empty() && c.timeout_seconds.parse::<u64>().map_or(true, |t| t == 0) {
                self.diags.push(Diagnostic::error(
                    c.line,
                    format!("criterion `{}`: Timeout seconds must be a positive whole number", c.id),
                ));
            }
            if c.cwd.starts_with('/') || c.cwd.split('/').any(|part| part == "..") {
                self.diags.push(Diagnostic::error(
                    c.line,
                    format!("criterion `{}`: Cwd must be a relative path inside the workspace", c.id),
                ));
            }
        }
        let phases = self.spec.phases.clone();
        for phase in &phases {
            if phase.name.trim().is_empty() {
                self.diags.push(Diagnostic::error(phase.line, format!("{} has no name", phase.id())));
            }
            if !phase.criteria.iter().any(Criterion::is_executable) {
                self.diags.push(Diagnostic::error(
                    phase.line,
                    format!("{} has no executable acceptance criteria; it would pass without evidence", phase.id()),
                ));
            }
        }
        for (i, line) in self.lines.iter().enumerate() {
            if self.in_fence[i] {
                continue;
            }
            let text = line.trim_start().trim_start_matches("- ").trim_start();
            let placeholder = text.starts_with("TODO") || line.contains("`TODO");
            if placeholder {
                let mut d = Diagnostic::error(i + 1, format!("unfilled template placeholder: {}", line.trim()));
                d.placeholder = true;
                self.diags.push(d);
            }
        }
        self.diags.sort_by_key(|d| d.line);
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
