//! Canonical text of the runner-owned parts of a spec, and the full text of a new spec.
//! Every renderer ends its output with a newline and uses `\n`; the projection writer adapts
//! line endings to the file.

use std::fmt::Write as _;

use super::model::*;
use super::parse::{CriterionField, RoundField, StateField};

fn or<'a>(value: &'a str, default: &'a str) -> &'a str {
    if value.trim().is_empty() { default } else { value }
}

/// A value written on one line of the spec: a line break in it (never in a value read from a
/// spec, whose values are lines) would start a line, a section or a criterion of its own.
fn one_line(value: &str) -> std::borrow::Cow<'_, str> {
    if value.contains(['\n', '\r']) { value.replace(['\n', '\r'], " ").into() } else { value.into() }
}

/// A detail value in backticks, unless it contains one.
pub(crate) fn code(value: &str) -> String {
    if value.contains('`') { value.to_string() } else { format!("`{value}`") }
}

/// The plan template's placeholder values; `validate` reports each one still in a draft.
pub const PLACEHOLDERS: [&str; 7] = [
    "TODO: the command that proves this phase works",
    "TODO: what this phase delivers, in one line",
    "TODO: `path/to/file` - what changes there",
    "TODO: why this task exists and what done looks like.",
    "TODO: an observable outcome",
    "TODO: `path/or/package` - what is in scope",
    "TODO: how to undo this change",
];

/// A front matter line as the original tool writes it (timestamps and the version quoted).
pub fn front_matter_line(key: &str, value: &str) -> String {
    match key {
        "spec_version" | "created" | "updated" => format!("{key}: '{value}'"),
        _ => format!("{key}: {value}"),
    }
}

/// The value of a Current State line: unset reads `none`, a command is in backticks.
pub fn state_value(spec: &Spec, field: StateField) -> String {
    let cs = &spec.current_state;
    let value = match field {
        StateField::Status => or(&cs.status, &spec.front.status),
        StateField::CurrentPhase => cs.current_phase.as_str(),
        StateField::Next => cs.next.as_str(),
        StateField::Reason => cs.reason.as_str(),
        StateField::Blockers => cs.blockers.as_str(),
        StateField::AllowedFollowUp => cs.allowed_follow_up.as_str(),
        StateField::LatestRunnerUpdate => cs.latest_runner_update.as_str(),
        StateField::ReviewGate => return or(&cs.review_gate, "not_started").to_string(),
    };
    match or(value, "none") {
        "none" => "none".to_string(),
        command if field == StateField::AllowedFollowUp => code(&one_line(command)),
        other => one_line(other).into_owned(),
    }
}

/// The value of a criterion's runner-owned line: `pending`/`none` when unset.
pub fn criterion_value(c: &Criterion, field: CriterionField) -> String {
    let value = match field {
        CriterionField::Status => or(&c.status, "pending"),
        CriterionField::Evidence => or(&c.evidence, "none"),
        CriterionField::SourceEvent => or(&c.source_event, "none"),
    };
    one_line(value).into_owned()
}

/// The value of a harden round's runner-owned line.
pub fn round_value(round: &HardenRound, field: RoundField) -> String {
    let value = match field {
        RoundField::Status => or(&round.status, "in_progress"),
        RoundField::Started => or(&round.started, "none"),
        RoundField::Ended => or(&round.ended, "none"),
        RoundField::SpecDigest => &round.digest,
    };
    one_line(value).into_owned()
}

pub fn front_matter(fm: &FrontMatter) -> String {
    let mut out = String::from("---\n");
    let _ = writeln!(out, "spec_version: '{}'", or(&fm.spec_version, "2.0"));
    let _ = writeln!(out, "task_id: {}", fm.task_id);
    let _ = writeln!(out, "created: '{}'", fm.created);
    let _ = writeln!(out, "updated: '{}'", fm.updated);
    let _ = writeln!(out, "status: {}", fm.status);
    let _ = writeln!(out, "harden_status: {}", or(&fm.harden_status, "not_run"));
    let _ = writeln!(out, "size: {}", or(&fm.size, "medium"));
    let _ = writeln!(out, "risk_level: {}", or(&fm.risk_level, "medium"));
    for (key, value) in &fm.extra {
        let _ = writeln!(out, "{key}: {value}");
    }
    out.push_str("---\n");
    out
}

pub fn current_state(spec: &Spec) -> String {
    let mut out = String::from("## Current State\n\n");
    for field in StateField::ALL {
        let _ = writeln!(out, "{}: {}", field.label(), state_value(spec, field));
    }
    out
}

fn criterion(out: &mut String, c: &Criterion) {
    let mark = if c.passed() { "x" } else { " " };
    let _ = writeln!(out, "- [{mark}] `{}` {} - {}", c.id, c.kind, c.title);
    if c.command.contains('\n') {
        out.push_str("  - Command:\n    ```sh\n");
        for line in c.command.lines() {
            let _ = writeln!(out, "    {line}");
        }
        out.push_str("    ```\n");
    } else if !c.command.is_empty() {
        let _ = writeln!(out, "  - Command: {}", code(&c.command));
    }
    let mut detail = |key: &str, value: &str| {
        if !value.is_empty() {
            let _ = writeln!(out, "  - {key}: {value}");
        }
    };
    detail("Expected kind", &if c.expected_kind.is_empty() { String::new() } else { code(&c.expected_kind) });
    detail("Cwd", &if c.cwd.is_empty() { String::new() } else { code(&c.cwd) });
    detail("Timeout seconds", &c.timeout_seconds);
    if !c.status.is_empty() {
        for field in CriterionField::ALL {
            detail(field.label(), &criterion_value(c, field));
        }
    }
    for (key, value) in &c.other {
        if key.is_empty() {
            let _ = writeln!(out, "  {value}");
        } else {
            let _ = writeln!(out, "  - {key}: {value}");
        }
    }
}

pub fn acceptance(a: &Acceptance) -> String {
    let mut out = String::from("## Acceptance\n\n");
    if !a.profile.is_empty() {
        let _ = writeln!(out, "Profile: {}\n", a.profile);
    }
    if !a.definition_of_done.is_empty() {
        out.push_str("Definition of done:\n");
        for line in &a.definition_of_done {
            let _ = writeln!(out, "{line}");
        }
        out.push('\n');
    }
    out.push_str("Validation:\n");
    if a.criteria.is_empty() {
        out.push_str("- none\n");
    }
    for c in &a.criteria {
        criterion(&mut out, c);
    }
    out
}

pub fn phase(p: &Phase) -> String {
    let mut out = format!("## Phase {}: {}\n\n", p.number, p.name);
    let _ = writeln!(out, "Status: {}", or(&p.status, "pending"));
    let _ = writeln!(out, "Dependencies: {}\n", or(&p.dependencies, "none"));
    let _ = writeln!(out, "Objective: {}\n", or(&p.objective, "Complete this phase."));
    out.push_str("Changes:\n");
    if p.changes.is_empty() {
        out.push_str("- none\n");
    }
    for change in &p.changes {
        let _ = writeln!(out, "- {change}");
    }
    out.push_str("\nAcceptance:\n");
    for c in &p.criteria {
        criterion(&mut out, c);
    }
    out
}

pub fn review(r: &ReviewProjection) -> String {
    let mut out = String::from("## Review\n\n");
    if r.body.is_empty() {
        let _ = writeln!(
            out,
            "Status: {}\nVerdict: {}\n\nFindings:\n- none",
            or(&r.status, "not_started"),
            or(&r.verdict, "none")
        );
    } else {
        for line in &r.body {
            let _ = writeln!(out, "{line}");
        }
    }
    out
}

pub fn harden_rounds(rounds: &[HardenRound]) -> String {
    let mut out = String::from("## Harden Rounds\n\n");
    if rounds.is_empty() {
        out.push_str("- none\n");
    }
    for (n, round) in rounds.iter().enumerate() {
        if n > 0 {
            out.push('\n');
        }
        out.push_str(&harden_round(round));
    }
    out
}

/// One round as the original tool writes it.
pub fn harden_round(round: &HardenRound) -> String {
    let mut out = format!("### {}\n\n", round.id);
    for field in RoundField::ALL {
        let value = round_value(round, field);
        // A round written by hand has no digest line, and gets none.
        if field == RoundField::SpecDigest && value.is_empty() {
            continue;
        }
        let _ = writeln!(out, "{}: {value}", field.label());
    }
    out.push_str("\nChecks:\n");
    if round.checks.is_empty() {
        out.push_str("- none\n");
    }
    for check in &round.checks {
        let _ = writeln!(out, "- {}", one_line(&check.name));
        let _ = writeln!(out, "  - Grounded in: {}", one_line(&check.grounded_in));
        let _ = writeln!(out, "  - Result: {}", one_line(&check.result));
        let _ = writeln!(out, "  - Evidence: {}", one_line(&check.evidence));
    }
    out.push_str("Questions:\n");
    if round.questions.is_empty() {
        out.push_str("- none\n");
    }
    for q in &round.questions {
        let _ = writeln!(out, "- {}", one_line(&q.text));
        let _ = writeln!(out, "  - Grounded in: {}", one_line(&q.grounded_in));
        let _ = writeln!(out, "  - Recommended answer: {}", one_line(&q.recommended_answer));
        let _ = writeln!(out, "  - If unanswered: {}", one_line(&q.if_unanswered));
        let _ = writeln!(out, "  - Answered with: {}", one_line(&q.answered_with));
    }
    out
}

/// Inputs of `scafld plan`.
pub struct PlanInput<'a> {
    pub task_id: &'a str,
    pub title: Option<&'a str>,
    pub summary: Option<&'a str>,
    pub size: &'a str,
    pub risk: &'a str,
    pub command: Option<&'a str>,
    pub now: &'a str,
    /// A user review template has the task's name (the review is then named with `--task`).
    pub shadowed: bool,
}

/// Why `input` cannot be written into a draft as given, if it cannot: a title or command is one
/// line (a newline would start another section, a phase with its own command say), a command
/// is not blank (validate would call it missing) and holds no backtick (it is written inside one), no line of the summary is a heading, and the
/// summary closes every code fence it opens (an open one would turn the sections after it into
/// code). Last, the draft must read with no structural error.
pub fn plan_input_problem(input: &PlanInput<'_>) -> Option<String> {
    let problem = field_problem(input).or_else(|| {
        let summary = input.summary?;
        let line = super::parse::unclosed_fence(summary.lines())?;
        Some(format!(
            "the summary opens a code fence on its line {} ({:?}) and never closes it: the spec's sections after it would be read as code",
            line + 1,
            summary.lines().nth(line).unwrap_or_default().trim()
        ))
    });
    if problem.is_some() {
        return problem;
    }
    // Whatever else would break the draft's structure, it is refused before it is written.
    let parsed = super::parse::parse(&new_spec(input));
    parsed.structural_errors().next().map(|d| format!("the draft would not read as a spec: {d}"))
}

fn field_problem(input: &PlanInput<'_>) -> Option<String> {
    let one_line = |field: &str, value: Option<&str>| {
        value
            .filter(|v| v.chars().any(char::is_control))
            .map(|_| format!("the {field} must be one line without control characters"))
    };
    let heading = input.summary.and_then(|summary| summary.lines().find(|line| line.trim_start().starts_with('#')));
    one_line("title", input.title)
        .or_else(|| one_line("command", input.command))
        .or_else(|| {
            input.command.filter(|c| c.trim().is_empty()).map(|_| {
                "the command is blank: give the command that proves the phase works, or leave --command out to get a TODO placeholder"
                    .to_string()
            })
        })
        .or_else(|| input.command.filter(|c| c.contains('`')).map(|_| "the command cannot hold a backtick (it is written inside backticks); put it in a script".to_string()))
        .or_else(|| input.summary.filter(|s| s.chars().any(|c| c.is_control() && c != '\n' && c != '\t')).map(|_| "the summary holds control characters".to_string()))
        .or_else(|| heading.map(|line| format!("the summary's line {line:?} would be read as a section heading; write the spec's sections in the file")))
}

/// The draft `plan` writes: every section of a spec, with `TODO:` placeholders that `validate`
/// reports until they are filled.
pub fn new_spec(input: &PlanInput<'_>) -> String {
    let state = CurrentState {
        status: "draft".into(),
        current_phase: "none".into(),
        next: "harden".into(),
        reason: "draft created".into(),
        blockers: "none".into(),
        allowed_follow_up: format!("scafld harden {}", input.task_id),
        latest_runner_update: "none".into(),
        review_gate: "not_started".into(),
    };
    // The draft's own `Next:` and follow-up are the one decision `status` makes of the draft
    // as written (its placeholders are errors, so `validate` first), never a step of their own.
    let written = draft_text(input, state.clone());
    let parsed = super::parse::parse(&written);
    let action = crate::domain::next::of_new_draft(&parsed, input.shadowed);
    let mut decided = state;
    crate::domain::next::show(&action, &mut decided);
    draft_text(input, decided)
}

fn draft_text(input: &PlanInput<'_>, state: CurrentState) -> String {
    let id = input.task_id;
    let front = FrontMatter {
        spec_version: "2.0".into(),
        task_id: id.into(),
        created: input.now.into(),
        updated: input.now.into(),
        status: "draft".into(),
        harden_status: "not_run".into(),
        size: input.size.into(),
        risk_level: input.risk.into(),
        extra: Vec::new(),
    };
    let spec = Spec { front, current_state: state, ..Spec::default() };
    let command = input.command.map(str::to_string).unwrap_or_else(|| PLACEHOLDERS[0].into());
    let phase1 = Phase {
        number: 1,
        name: "Implementation".into(),
        status: "pending".into(),
        dependencies: "none".into(),
        objective: PLACEHOLDERS[1].into(),
        changes: vec![PLACEHOLDERS[2].into()],
        criteria: vec![Criterion {
            id: "ac1".into(),
            kind: "command".into(),
            title: "Primary validation command".into(),
            command,
            expected_kind: "exit_code_zero".into(),
            ..Criterion::default()
        }],
        ..Phase::default()
    };
    let title = input.title.unwrap_or(id);
    let summary = input.summary.map(str::to_string).unwrap_or_else(|| PLACEHOLDERS[3].into());
    let mut out = front_matter(&spec.front);
    let _ = write!(out, "\n# {title}\n\n");
    out.push_str(&current_state(&spec));
    let _ = write!(out, "\n## Summary\n\n{summary}\n");
    let prose = [
        ("Objectives", format!("- {}", PLACEHOLDERS[4])),
        ("Scope", format!("- {}", PLACEHOLDERS[5])),
        ("Dependencies", "- none".to_string()),
        ("Assumptions", "- none".to_string()),
        ("Touchpoints", "- none".to_string()),
        ("Risks", "- none".to_string()),
    ];
    for (heading, body) in prose {
        let _ = write!(out, "\n## {heading}\n\n{body}\n");
    }
    out.push('\n');
    out.push_str(&acceptance(&Acceptance { profile: "standard".into(), ..Acceptance::default() }));
    out.push('\n');
    out.push_str(&phase(&phase1));
    let _ = write!(out, "\n## Rollback\n\n- {}\n\n", PLACEHOLDERS[6]);
    out.push_str(&review(&ReviewProjection::default()));
    for heading in ["Self Eval", "Deviations"] {
        let _ = write!(out, "\n## {heading}\n\n- none\n");
    }
    let _ = write!(out, "\n## Metadata\n\n- created_by: scafld\n\n## Origin\n\nCreated by: scafld\nSource: plan\n\n");
    out.push_str(&harden_rounds(&[]));
    out.push_str("\n## Planning Log\n\n- none\n");
    out
}
