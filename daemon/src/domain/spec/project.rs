//! The projection writer: put a changed model back into the spec text by editing only the
//! runner-owned lines whose value changed (front matter status fields, the Current State lines,
//! phase `Status:` lines, criterion checkboxes and their own `Status`/`Evidence`/`Source event`
//! details (never an item of that name nested under another detail), harden round states, and
//! the `## Review` section through its findings list: text someone wrote after those is theirs).
//! Every other byte stays where it was: a line is replaced in place or inserted next to its
//! siblings, never moved, and prose inside runner-owned sections is never re-rendered.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use super::dialect::Dialect;
use super::model::{Criterion, HardenRound, RoundForm, Spec};
use super::parse::{
    CriterionField, CriterionLayout, Layout, PythonResultField, RoundField, SectionKey, StateField, parse,
};
use super::render;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProjectionError {
    #[error("the phases on disk ({on_disk}) differ from the ones being written ({written}); run `scafld reconcile`")]
    PhaseShapeChanged { on_disk: String, written: String },
    #[error("the spec on disk has a duplicate `## {0}` section; fix it by hand first")]
    DuplicateSection(String),
}

/// What happens at one line of the file.
#[derive(Default)]
struct LineEdit {
    /// New text for the line (its line ending is kept).
    replace: Option<String>,
    /// Drop the line (only inside a range the runner owns whole).
    remove: bool,
    /// Lines to insert before it.
    before: Vec<String>,
    /// Lines to insert after it.
    after: Vec<String>,
}

/// Edits keyed by 0-based line; `usize::MAX` collects text appended at the end.
#[derive(Default)]
struct Edits(BTreeMap<usize, LineEdit>);

impl Edits {
    fn at(&mut self, line: usize) -> &mut LineEdit {
        self.0.entry(line).or_default()
    }

    fn replace(&mut self, line: usize, text: String) {
        self.at(line).replace = Some(text);
    }

    fn insert_after(&mut self, line: usize, lines: impl IntoIterator<Item = String>) {
        self.at(line).after.extend(lines);
    }

    fn append(&mut self, block: &str) {
        let end = self.at(usize::MAX);
        end.after.push(String::new());
        end.after.extend(block.lines().map(str::to_string));
    }
}

/// Whether `older` differs from `current` only in what the runner owns: projecting `current`'s
/// model onto `older` gives `current`'s bytes, so every line a person wrote in `older` is in
/// `current` too, and putting `older` away loses nothing of theirs (an interrupted move's
/// leftover). Any other difference (a line added, changed or removed outside the runner-owned
/// fields) is text someone wrote: `false`.
pub fn only_runner_parts_differ(older: &str, current: &str) -> bool {
    if older == current {
        return true;
    }
    let now = parse(current).spec;
    // A harden round's checks and questions are the author's answers (only the round's and
    // each check's state are the runner's), though the projection writes rounds whole.
    authored_rounds(&parse(older).spec) == authored_rounds(&now)
        && project(older, &now).is_ok_and(|text| text == current)
}

/// What begins a digest of the authored text ([`authored_digest`]). A `Spec digest:` without it
/// was written by a scafld that digested part of the parsed model instead.
pub const AUTHORED_DIGEST_PREFIX: &str = "sha256:";

/// Front matter keys the runner maintains; every other key is the author's.
const RUNNER_FRONT_KEYS: [&str; 3] = ["status", "updated", "harden_status"];

/// A digest of what the author wrote: the spec's text with the parts this writer owns set
/// aside (front matter `status`/`updated`/`harden_status`, the `## Current State` section and
/// `## Review` to the end of its findings list, phase `Status:` lines, each criterion's checkbox
/// and `Status`/`Evidence`/`Source event` details, each harden round's
/// `Status`/`Started`/`Ended`/`Spec digest`), the rest read line by line without line endings,
/// trailing blanks or blank lines (which the writer inserts beside its own lines). A projection never changes it; any other edit does (a prose section,
/// `risk_level`, a round's checks). `layout` is `text`'s own.
pub fn authored_digest(text: &str, layout: &Layout) -> String {
    use sha2::{Digest, Sha256};
    let body = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut runner = vec![false; layout.line_count];
    let mut own = |lines: std::ops::Range<usize>| {
        for line in lines {
            if let Some(slot) = runner.get_mut(line) {
                *slot = true;
            }
        }
    };
    for (key, line) in &layout.front_fields {
        if RUNNER_FRONT_KEYS.contains(&key.as_str()) {
            own(*line..line + 1);
        }
    }
    for (key, start, end) in &layout.sections {
        if matches!(key, SectionKey::CurrentState | SectionKey::Review) {
            own(*start..*end);
        }
    }
    for line in layout.phases.iter().filter_map(|p| p.status) {
        own(line..line + 1);
    }
    let criteria = layout
        .criteria
        .iter()
        .flat_map(|c| c.fields.iter().map(|(_, line)| *line).chain(c.python.iter().map(|(_, line)| *line)));
    for line in criteria.chain(layout.rounds.iter().flat_map(|r| r.fields.iter().map(|(_, line)| *line))) {
        own(line..line + 1);
    }
    let heads: std::collections::HashSet<usize> = layout.criteria.iter().map(|c| c.head).collect();
    let mut hasher = Sha256::new();
    for (n, line) in body.lines().enumerate() {
        if runner.get(n).copied().unwrap_or(false) {
            continue;
        }
        // Inside a code fence every byte may be the program a criterion runs (a trailing space
        // after a `\` changes what a shell reads): only the line ending is set aside there.
        if layout.fenced.get(n).copied().unwrap_or(false) {
            hasher.update(line.strip_suffix('\r').unwrap_or(line));
            hasher.update("\n");
            continue;
        }
        let line = line.trim_end();
        if line.is_empty() {
            continue;
        }
        // The checkbox is the runner's; what follows it is the author's.
        match line.strip_prefix("- [x]").or_else(|| line.strip_prefix("- [X]")) {
            Some(rest) if heads.contains(&n) => {
                hasher.update("- [ ]");
                hasher.update(rest);
            }
            _ => hasher.update(line),
        }
        hasher.update("\n");
    }
    format!("{AUTHORED_DIGEST_PREFIX}{:x}", hasher.finalize())
}

/// What the author wrote in the harden rounds: each check's name, grounding and evidence, and
/// each question with its answers.
fn authored_rounds(spec: &Spec) -> Vec<Vec<[&str; 5]>> {
    spec.harden_rounds
        .iter()
        .map(|round| {
            let checks = round.checks.iter().map(|c| [c.name.as_str(), &c.grounded_in, &c.evidence, "", ""]);
            let questions = round
                .questions
                .iter()
                .map(|q| [q.text.as_str(), &q.grounded_in, &q.recommended_answer, &q.if_unanswered, &q.answered_with]);
            checks.chain(questions).collect()
        })
        .collect()
}

/// Rewrite `text` (the spec as it is on disk) so that it shows `next`.
pub fn project(text: &str, next: &Spec) -> Result<String, ProjectionError> {
    let parsed = parse(text);
    let previous = &parsed.spec;
    let layout = &parsed.layout;
    let ids = |spec: &Spec| spec.phases.iter().map(|p| p.id()).collect::<Vec<_>>().join(",");
    if ids(previous) != ids(next) {
        return Err(ProjectionError::PhaseShapeChanged { on_disk: ids(previous), written: ids(next) });
    }
    let mut seen: Vec<&SectionKey> = Vec::new();
    for (key, _, _) in &layout.sections {
        if !matches!(key, SectionKey::Other(_)) {
            if seen.contains(&key) {
                return Err(ProjectionError::DuplicateSection(format!("{key:?}")));
            }
            seen.push(key);
        }
    }
    let next = &in_dialect_of(previous, next);
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let mut edits = Edits::default();
    front_matter(&mut edits, layout, &lines, previous, next);
    current_state(&mut edits, layout, &lines, previous, next);
    for phase in &next.phases {
        let Some(slot) = layout.phases.iter().find(|p| p.number == phase.number) else { continue };
        let before = previous.phase(&phase.id()).map(|p| p.status.as_str()).unwrap_or_default();
        if before != phase.status {
            let value = if phase.status.is_empty() { "pending" } else { phase.status.as_str() };
            match slot.status {
                Some(line) => edits.replace(line, relabel(lines[line], value)),
                None => edits.insert_after(slot.heading, [String::new(), format!("Status: {value}")]),
            }
        }
    }
    // `next` comes from this text, so its criteria line up with the ones on disk; fall back to
    // the id when they do not (a model built from an older read).
    let before: Vec<&Criterion> = previous.criteria().collect();
    let by_id: HashMap<&str, &Criterion> = before.iter().rev().map(|c| (c.id.as_str(), *c)).collect();
    let slots: HashMap<usize, &CriterionLayout> = layout.criteria.iter().map(|s| (s.head + 1, s)).collect();
    for (n, c) in next.criteria().enumerate() {
        let Some(before) = before.get(n).filter(|b| b.id == c.id).or_else(|| by_id.get(c.id.as_str())).copied() else {
            continue;
        };
        let Some(slot) = slots.get(&before.line) else { continue };
        criterion(&mut edits, slot, &lines, before, c);
        python_result(&mut edits, slot, &lines, before, c, &next.front.updated);
    }
    review(&mut edits, layout, &lines, previous, next);
    harden_rounds(&mut edits, layout, &lines, &previous.harden_rounds, &next.harden_rounds);
    Ok(apply(text, &lines, layout.crlf, edits))
}

/// `next` in the words of the file it is written over (`previous`, its [`Dialect`]): a spec the
/// original tool wrote keeps words that tool reads (Python's `in_progress` for an active task;
/// its `harden_status` where this tool's word, `overridden`, is not one of them).
fn in_dialect_of<'n>(previous: &Spec, next: &'n Spec) -> Cow<'n, Spec> {
    let dialect = Dialect::of(previous);
    if dialect == Dialect::Scafld {
        return Cow::Borrowed(next);
    }
    let mut spoken = next.clone();
    spoken.front.status = dialect.status_over(&previous.front.status, &next.front.status);
    spoken.front.harden_status = dialect.harden_over(&previous.front.harden_status, &next.front.harden_status);
    let written =
        if previous.current_state.status.is_empty() { &previous.front.status } else { &previous.current_state.status };
    spoken.current_state.status = dialect.status_over(written, &next.current_state.status);
    Cow::Owned(spoken)
}

/// `Key: old` → `Key: value`, keeping the key, its indentation and list marker as written.
fn relabel(line: &str, value: &str) -> String {
    let content = line.trim_end_matches(['\n', '\r']);
    match content.split_once(':') {
        Some((key, _)) => format!("{key}: {value}"),
        None => value.to_string(),
    }
}

fn front_matter(edits: &mut Edits, layout: &Layout, lines: &[&str], previous: &Spec, next: &Spec) {
    let fields = [
        ("status", &previous.front.status, &next.front.status),
        ("updated", &previous.front.updated, &next.front.updated),
        ("harden_status", &previous.front.harden_status, &next.front.harden_status),
    ];
    let Some((_, end)) = layout.front_matter else {
        if previous.front != next.front {
            edits.at(0).before.extend(render::front_matter(&next.front).lines().map(str::to_string));
            edits.at(0).before.push(String::new());
        }
        return;
    };
    for (key, before, after) in fields {
        if before == after || after.is_empty() {
            continue;
        }
        let rendered = render::front_matter_line(key, after);
        match layout.front_fields.iter().find(|(k, _)| k == key) {
            Some((_, line)) => {
                // The author's end-of-line comment stays, after the new value.
                let comment = lines[*line].split_once(':').map_or("", |(_, value)| super::parse::yaml_comment(value).1);
                let kept = format!("{rendered}{}", comment.trim_end());
                if lines[*line].trim_end() != kept {
                    edits.replace(*line, kept);
                }
            }
            None => edits.at(end - 1).before.push(rendered),
        }
    }
}

fn current_state(edits: &mut Edits, layout: &Layout, lines: &[&str], previous: &Spec, next: &Spec) {
    let Some((heading, _)) = layout.section(&SectionKey::CurrentState) else {
        if render::current_state(previous) != render::current_state(next) {
            // A spec without the section gets it before its first section (where the original
            // tool writes it, right under the title), or at the end when it has none.
            let block: Vec<String> = render::current_state(next).lines().map(str::to_string).collect();
            match layout.sections.first() {
                Some((_, first, _)) => {
                    let at = edits.at(*first);
                    at.before.extend(block);
                    at.before.push(String::new());
                }
                None => edits.append(&render::current_state(next)),
            }
        }
        return;
    };
    let mut missing = Vec::new();
    for field in StateField::ALL {
        let wanted = render::state_value(next, field);
        match layout.state_fields.iter().find(|(f, _)| *f == field) {
            Some((_, line)) if render::state_value(previous, field) != wanted => {
                edits.replace(*line, relabel(lines[*line], &wanted))
            }
            Some(_) => {}
            None => missing.push(format!("{}: {wanted}", field.label())),
        }
    }
    if missing.is_empty() || render::current_state(previous) == render::current_state(next) {
        return;
    }
    match layout.state_fields.iter().map(|(_, l)| *l).max() {
        Some(last) => edits.insert_after(last, missing),
        None => {
            missing.insert(0, String::new());
            edits.insert_after(heading, missing);
        }
    }
}

fn criterion(edits: &mut Edits, slot: &CriterionLayout, lines: &[&str], before: &Criterion, next: &Criterion) {
    // The checkbox is the runner's: `[x]` exactly when the criterion passed, whatever the mark
    // on disk says (ticked by hand, or left ticked by another tool), so a failed criterion
    // never shows as done.
    let line = lines[slot.head].trim_end_matches(['\n', '\r']);
    let (bom, head) = line.strip_prefix('\u{feff}').map_or(("", line), |head| ("\u{feff}", head));
    let ticked = head.starts_with("- [x]") || head.starts_with("- [X]");
    if ticked != next.passed() {
        let mark = if next.passed() { 'x' } else { ' ' };
        edits.replace(slot.head, format!("{bom}- [{mark}{}", head.get(4..).unwrap_or("] ")));
    }
    let unchanged = |field| render::criterion_value(before, field) == render::criterion_value(next, field);
    if CriterionField::ALL.into_iter().all(unchanged) {
        return;
    }
    let mut missing = Vec::new();
    for field in CriterionField::ALL {
        let value = render::criterion_value(next, field);
        match slot.fields.iter().find(|(f, _)| *f == field) {
            Some((_, line)) if !unchanged(field) => edits.replace(*line, relabel(lines[*line], &value)),
            Some(_) => {}
            // Only evidence adds lines; an unset field without a line stays absent.
            None if !next.status.is_empty() => {
                missing.push(format!("{}- {}: {value}", slot.detail_indent, field.label()))
            }
            None => {}
        }
    }
    if !missing.is_empty() {
        edits.insert_after(slot.end - 1, missing);
    }
}

/// When a criterion's state changes, Python scafld's `Result:` line says what `Status:` does
/// (`pass`, `fail`, or `none` before a result), so the file never states two outcomes, and
/// `Checked at:` is the time of this write (`none` without a result).
fn python_result(
    edits: &mut Edits,
    slot: &CriterionLayout,
    lines: &[&str],
    before: &Criterion,
    next: &Criterion,
    now: &str,
) {
    if before.state() == next.state() {
        return;
    }
    let Some(&(_, line)) = slot.python.iter().find(|(f, _)| *f == PythonResultField::Result) else { return };
    let result = match next.state() {
        "pass" => "pass",
        "fail" | "invalid" => "fail",
        _ => "none",
    };
    let written = lines[line].trim_end_matches(['\n', '\r']).split_once(':').map_or("", |(_, v)| v.trim());
    if written == result {
        return;
    }
    edits.replace(line, relabel(lines[line], result));
    if let Some(&(_, at)) = slot.python.iter().find(|(f, _)| *f == PythonResultField::CheckedAt) {
        let checked = if result == "none" || now.is_empty() { "none" } else { now };
        edits.replace(at, relabel(lines[at], checked));
    }
}

fn review(edits: &mut Edits, layout: &Layout, lines: &[&str], previous: &Spec, next: &Spec) {
    let rendered = render::review(&next.review);
    if render::review(&previous.review) == rendered {
        return;
    }
    let Some((start, end)) = layout.section(&SectionKey::Review) else {
        edits.append(&rendered);
        return;
    };
    // The runner owns the section through its findings list (the parser's extent): replace
    // those lines, and keep the blank lines that separate them from what follows.
    let mut body_end = end;
    while body_end > start + 1 && lines[body_end - 1].trim().is_empty() {
        body_end -= 1;
    }
    let mut new_lines = rendered.lines().map(str::to_string);
    edits.replace(start, new_lines.next().unwrap_or_default());
    for line in start + 1..body_end {
        edits.at(line).remove = true;
    }
    let mut new_lines: Vec<String> = new_lines.collect();
    // What follows the section's own lines (someone's text after its findings, the next
    // section) stays where it is, a blank line apart.
    if body_end == end && lines.get(end).is_some_and(|line| !line.trim().is_empty()) {
        new_lines.push(String::new());
    }
    edits.insert_after(body_end - 1, new_lines);
}

/// What a round says beyond its fields, without where it sits.
fn round_content(round: &HardenRound) -> (Vec<[&str; 4]>, Vec<[&str; 4]>) {
    let checks = round.checks.iter().map(|c| [c.name.as_str(), &c.grounded_in, &c.result, &c.evidence]).collect();
    let questions = round
        .questions
        .iter()
        .map(|q| [q.text.as_str(), &q.grounded_in, &q.recommended_answer, &q.answered_with])
        .collect();
    (checks, questions)
}

fn harden_rounds(edits: &mut Edits, layout: &Layout, lines: &[&str], previous: &[HardenRound], next: &[HardenRound]) {
    if previous == next {
        return;
    }
    let Some((heading, end)) = layout.section(&SectionKey::HardenRounds) else {
        edits.append(&render::harden_rounds(next));
        return;
    };
    // Rounds line up with the ones on disk by position (ids may repeat in a hand-edited file);
    // the rest are new.
    for (n, round) in next.iter().enumerate().take(previous.len()) {
        let (Some(slot), before) = (layout.rounds.get(n), &previous[n]) else { continue };
        if before.id != round.id {
            continue;
        }
        // New checks or questions (a delegated run filling an open round): the round's block is
        // written whole, its trailing blank lines kept.
        if round_content(before) != round_content(round) {
            let last = (slot.heading..slot.end).rev().find(|&i| !lines[i].trim().is_empty()).unwrap_or(slot.heading);
            for i in slot.heading..=last {
                edits.at(i).remove = true;
            }
            edits.insert_after(slot.heading, render::harden_round(round).lines().map(str::to_string));
            continue;
        }
        let mut missing = Vec::new();
        for field in RoundField::ALL {
            let value = render::round_value(round, field);
            if render::round_value(before, field) == value {
                continue;
            }
            match slot.fields.iter().find(|(f, _)| *f == field) {
                Some((_, line)) => edits.replace(*line, relabel(lines[*line], &value)),
                // A `- Round N` round's fields are items nested under it, as its others are.
                None => missing.push(match round.form {
                    RoundForm::Listed => {
                        let indent = slot.fields.first().map_or("  ", |(_, l)| {
                            let line = lines[*l];
                            &line[..line.len() - line.trim_start().len()]
                        });
                        format!("{indent}- {}: {value}", field.label_in(round.form))
                    }
                    RoundForm::Heading => format!("{}: {value}", field.label()),
                }),
            }
        }
        if !missing.is_empty() {
            let after = slot.fields.iter().map(|(_, l)| *l).max().unwrap_or(slot.heading);
            edits.insert_after(after, missing);
        }
    }
    let added = next.get(previous.len()..).unwrap_or_default();
    if added.is_empty() {
        return;
    }
    let mut block = Vec::new();
    for round in added {
        block.push(String::new());
        block.extend(render::harden_round(round).lines().map(str::to_string));
    }
    // After the section's last non-blank line; a lone `- none` placeholder gives way.
    let content: Vec<usize> = (heading + 1..end).filter(|&i| !lines[i].trim().is_empty()).collect();
    match content.as_slice() {
        [only] if super::parse::is_unset(lines[*only].trim().trim_start_matches('-')) => {
            edits.at(*only).remove = true;
            block.remove(0);
            edits.insert_after(*only, block);
        }
        [.., last] => edits.insert_after(*last, block),
        [] => edits.insert_after(heading, block),
    }
}

/// Write the edited text. Replaced lines keep their own line ending; inserted lines take the
/// file's.
fn apply(text: &str, lines: &[&str], crlf: bool, edits: Edits) -> String {
    let eol = if crlf { "\r\n" } else { "\n" };
    let mut out = String::with_capacity(text.len() + 256);
    let push_line = |out: &mut String, line: &str| {
        out.push_str(line);
        out.push_str(eol);
    };
    let mut edits = edits.0;
    let tail = edits.remove(&usize::MAX);
    for (i, line) in lines.iter().enumerate() {
        let Some(edit) = edits.remove(&i) else {
            out.push_str(line);
            continue;
        };
        for extra in &edit.before {
            push_line(&mut out, extra);
        }
        if !edit.remove {
            let content = line.trim_end_matches(['\n', '\r']);
            let ending = &line[content.len()..];
            out.push_str(edit.replace.as_deref().unwrap_or(content));
            // The last line may have no ending (or a bare `\r`); lines added after it need one.
            out.push_str(if ending.ends_with('\n') || edit.after.is_empty() { ending } else { eol });
        }
        for extra in &edit.after {
            push_line(&mut out, extra);
        }
    }
    // Edits past the last line (an empty file) and appended sections.
    for (_, edit) in edits {
        for extra in edit.before.iter().chain(&edit.after) {
            push_line(&mut out, extra);
        }
    }
    if let Some(tail) = tail {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push_str(eol);
        }
        for extra in &tail.after {
            push_line(&mut out, extra);
        }
    }
    out
}
