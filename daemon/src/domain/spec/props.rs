//! Property tests of the parser and the projection writer over generated specs (phases,
//! criteria in every real form, fences, HTML comments, unicode, CRLF, a BOM, long lines, YAML front matter
//! with anchors) and mutated ones (character flips, truncation, duplicated and deleted lines).
//! A bounded run is part of `cargo test`; `tests/fuzz-specs.sh` runs many more cases and times
//! the parser on growing pathological inputs.
//!
//! Properties: nothing panics; projecting the model a text parses to gives the text back (but
//! for a criterion's checkbox, set from its status); a projection of runner-owned changes keeps
//! every other non-blank line, in order, and the authored digest a harden round is bound to;
//! and a second projection of the same model changes nothing.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::parse::{Layout, SectionKey};
use super::project::{authored_digest, project};
use super::*;

const PROSE: &[&str] = &[
    "Plain prose with  two spaces and *emphasis*.",
    "Größere Änderung – ünïcödé ✓ 日本語 🚀",
    "No `TODO` markers; `TODO: replace with...` is prose.",
    "- a bullet",
    "  continued bullet line",
    "Status: a prose label that is not runner-owned here",
    "| table | row |",
    "> quote: with a colon",
    "<!-- a note: with a colon -->",
    "",
];

const DETAILS: &[&str] = &[
    "  - Command: `cargo test`",
    "  - Command: none",
    "  - Command: true",
    "  - Expected kind: `exit_code_zero`",
    "  - Expected kind: none",
    "  - Expected kind: `no_matches`",
    "  - Timeout seconds: none",
    "  - Timeout seconds: 30",
    "  - Cwd: none",
    "  - Result: none",
    "  - Last attempt: none",
    "  - Status: pass",
    "  - Status: none",
    "  - Evidence: exit code was 0",
    "  - Source event: entry-3",
    "  - Expected: prose about the outcome",
    "  free prose under the criterion",
];

const NOISE: &[&str] = &[
    "---",
    "```",
    "~~~",
    "## Phase 7: Injected",
    "## Review",
    "## Current State",
    "## Harden Rounds",
    "### round-9",
    "- [ ] `x` t - y",
    "- [ ] `dup` test - duplicate",
    "  - Status: pass",
    "  - Command: `unclosed",
    "\r",
    "\u{feff}",
    "TODO: the command that proves this phase works",
    "- [",
    "<!--",
    "  <!-- commented detail",
    "-->",
];

fn pick(options: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop::sample::select(options).prop_map(str::to_string)
}

fn criterion_line() -> impl Strategy<Value = String> {
    (0..1000u32, prop::sample::select(&["test", "command", "focused-tests", "manual", "boundary", ""][..]), 0..5u8)
        .prop_map(|(n, kind, form)| match form {
            0 => format!("- [ ] `c{n}` {kind} - Title {n}"),
            1 => format!("- [x] `c{n}` {kind}"),
            2 => format!("- [ ] `c{n}` {kind}: docs form"),
            3 => format!("- [X] `c{n}` - no type"),
            _ => format!("- [ ] `c{n}` {kind} - Ünïcode title – {}", "long ".repeat(n as usize % 40)),
        })
}

fn criterion() -> impl Strategy<Value = Vec<String>> {
    (criterion_line(), prop::collection::vec(pick(DETAILS), 0..5), any::<bool>()).prop_map(|(head, details, fenced)| {
        let mut lines = vec![head];
        if fenced {
            lines.extend(
                ["  - Command:", "    ```sh", "    make build &&", "      make test", "    ```"].map(String::from),
            );
        }
        lines.extend(details);
        lines
    })
}

fn phase() -> impl Strategy<Value = Vec<String>> {
    (
        1..9u32,
        pick(&["Status: pending", "Status: active", "Status: none", "Status: completed", ""]),
        pick(&["Objective: Do it.", "Goal: The Python label.", ""]),
        prop::collection::vec(pick(PROSE), 0..3),
        prop::collection::vec(criterion(), 0..4),
    )
        .prop_map(|(n, status, objective, prose, criteria)| {
            let mut lines = vec![format!("## Phase {n}: Step {n}"), String::new(), status, objective, String::new()];
            lines.extend(["Changes:".to_string(), "- `src/lib.rs` - a change".to_string()]);
            lines.extend(prose);
            lines.extend(["".to_string(), "Acceptance:".to_string()]);
            lines.extend(criteria.into_iter().flatten());
            lines
        })
}

fn front_matter() -> impl Strategy<Value = Vec<String>> {
    (pick(&["draft", "approved", "active", "in_progress", "review", "completed"]), any::<bool>()).prop_map(
        |(status, yaml)| {
            let mut lines: Vec<String> = [
                "---",
                "spec_version: '2.0'",
                "task_id: generated-1.0",
                "created: '2026-01-01T00:00:00Z'",
                "updated: '2026-01-01T00:00:00Z'",
            ]
            .map(String::from)
            .to_vec();
            lines.push(format!("status: {status}"));
            if yaml {
                lines.extend(
                    ["owners:", "  - &lead alice", "reviewers:", "  - *lead", "tags: [a, b]"].map(String::from),
                );
            }
            lines.push("---".into());
            lines
        },
    )
}

fn spec_text() -> impl Strategy<Value = String> {
    (
        front_matter(),
        prop::collection::vec(pick(PROSE), 0..4),
        any::<bool>(),
        prop::collection::vec(phase(), 0..4),
        prop::collection::vec(criterion(), 0..3),
        any::<bool>(),
        (any::<bool>(), any::<bool>()),
        prop::option::of(prop::collection::vec(pick(PROSE), 0..3)),
    )
        .prop_map(|(front, prose, state, phases, task_level, rounds, (crlf, bom), review)| {
            let mut lines = front;
            lines.extend(["".into(), "# Generated spec".into(), "".into()]);
            if state {
                lines.extend(
                    ["## Current State", "", "Status: draft", "Current phase: none", "Next: none", "Reason: none"]
                        .map(String::from),
                );
            }
            lines.extend(["".into(), "## Summary".into(), "".into()]);
            lines.extend(prose);
            lines.extend(["```markdown".into(), "## Phase 99: inside a fence".into(), "```".into()]);
            lines.extend(["".into(), "## Acceptance".into(), "".into(), "Validation:".into()]);
            lines.extend(task_level.into_iter().flatten());
            for phase in phases {
                lines.push(String::new());
                lines.extend(phase);
            }
            // A reviewed spec whose author wrote on after the review's findings.
            if let Some(appendix) = review {
                lines.extend(
                    [
                        "",
                        "## Review",
                        "",
                        "Status: completed",
                        "Verdict: pass",
                        "",
                        "Findings:",
                        "- none",
                        "",
                        "# Appendix",
                    ]
                    .map(String::from),
                );
                lines.extend(appendix);
            }
            if rounds {
                lines.extend(
                    [
                        "",
                        "## Harden Rounds",
                        "",
                        "### round-1",
                        "",
                        "Status: in_progress",
                        "Started: none",
                        "Checks:",
                        "- Path audit",
                    ]
                    .map(String::from),
                );
            }
            lines.extend(["".into(), "## Rollback".into(), "".into(), "- Revert.".into()]);
            let text = lines.join("\n") + "\n";
            let text = if crlf { text.replace('\n', "\r\n") } else { text };
            if bom { format!("\u{feff}{text}") } else { text }
        })
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, char),
    Truncate(usize),
    Duplicate(usize),
    Delete(usize),
    Insert(usize, String),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<char>()).prop_map(|(at, c)| Mutation::Flip(at, c)),
        any::<usize>().prop_map(Mutation::Truncate),
        any::<usize>().prop_map(Mutation::Duplicate),
        any::<usize>().prop_map(Mutation::Delete),
        (any::<usize>(), pick(NOISE)).prop_map(|(at, line)| Mutation::Insert(at, line)),
    ]
}

fn mutate(text: &str, mutations: &[Mutation]) -> String {
    let mut text = text.to_string();
    for m in mutations {
        match m {
            Mutation::Flip(at, c) => {
                let chars: Vec<char> = text.chars().collect();
                if !chars.is_empty() {
                    let i = at % chars.len();
                    text = chars[..i].iter().chain(std::iter::once(c)).chain(&chars[i + 1..]).collect();
                }
            }
            Mutation::Truncate(at) => {
                let cut = (0..=at % (text.len() + 1)).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
                text.truncate(cut);
            }
            Mutation::Duplicate(at) | Mutation::Delete(at) => {
                let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
                if !lines.is_empty() {
                    let i = at % lines.len();
                    if matches!(m, Mutation::Duplicate(_)) {
                        lines.insert(i, lines[i]);
                    } else {
                        lines.remove(i);
                    }
                }
                text = lines.concat();
            }
            Mutation::Insert(at, line) => {
                let mut lines: Vec<String> = text.split_inclusive('\n').map(str::to_string).collect();
                let i = at % (lines.len() + 1);
                lines.insert(i, format!("{line}\n"));
                text = lines.concat();
            }
        }
    }
    text
}

/// Runner-owned changes to apply to a parsed model.
#[derive(Debug, Clone)]
struct RunnerChange {
    status: &'static str,
    reason: &'static str,
    phase_status: &'static str,
    criterion_status: &'static str,
    evidence: &'static str,
    review: bool,
    round: bool,
}

fn runner_change() -> impl Strategy<Value = RunnerChange> {
    (
        prop::sample::select(&["active", "blocked", "review", "completed"][..]),
        prop::sample::select(&["none", "phase phase1 opened", "a reason: with a colon"][..]),
        prop::sample::select(&["", "active", "blocked", "completed"][..]),
        prop::sample::select(&["", "pass", "fail"][..]),
        prop::sample::select(&["", "exit code was 0", "exit code was 1"][..]),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(status, reason, phase_status, criterion_status, evidence, review, round)| RunnerChange {
            status,
            reason,
            phase_status,
            criterion_status,
            evidence,
            review,
            round,
        })
}

fn apply_change(spec: &Spec, change: &RunnerChange) -> Spec {
    let mut next = spec.clone();
    next.front.status = change.status.into();
    next.front.updated = "2026-11-24T12:00:00Z".into();
    next.current_state.status = change.status.into();
    next.current_state.reason = change.reason.into();
    for phase in &mut next.phases {
        phase.status = change.phase_status.into();
        for c in &mut phase.criteria {
            c.status = change.criterion_status.into();
            c.evidence = change.evidence.into();
            c.source_event = if change.criterion_status.is_empty() { String::new() } else { "entry-7".into() };
        }
    }
    if change.review {
        next.review = crate::domain::review::projection("pass", "command", None, None);
    }
    if change.round {
        next.harden_rounds.push(HardenRound {
            id: "round-new".into(),
            status: "in_progress".into(),
            ..Default::default()
        });
        if let Some(first) = next.harden_rounds.first_mut() {
            first.status = "passed".into();
            first.ended = "2026-11-24T12:00:00Z".into();
        }
    }
    next
}

/// The lines the runner owns in a text: the ones a projection may change or add.
fn runner_lines(layout: &Layout, lines: &[&str]) -> Vec<bool> {
    let mut owned = vec![false; lines.len()];
    let mut mark = |i: usize| {
        if let Some(slot) = owned.get_mut(i) {
            *slot = true;
        }
    };
    for (key, line) in &layout.front_fields {
        if ["status", "updated", "harden_status"].contains(&key.as_str()) {
            mark(*line);
        }
    }
    layout.state_fields.iter().for_each(|(_, l)| mark(*l));
    layout.phases.iter().filter_map(|p| p.status).for_each(&mut mark);
    for c in &layout.criteria {
        c.fields.iter().for_each(|(_, l)| mark(*l));
        c.python.iter().for_each(|(_, l)| mark(*l));
    }
    for r in &layout.rounds {
        r.fields.iter().for_each(|(_, l)| mark(*l));
        if r.id == "round-new" {
            (r.heading..r.end).for_each(&mut mark);
        }
    }
    for (key, start, end) in &layout.sections {
        match key {
            SectionKey::Review => (*start..*end).for_each(&mut mark),
            SectionKey::CurrentState => mark(*start),
            SectionKey::HardenRounds => {
                let first_round = layout.rounds.first().map(|r| r.heading).unwrap_or(*end);
                (*start..first_round).filter(|&i| lines[i].trim() == "- none").for_each(&mut mark);
                mark(*start);
            }
            _ => {}
        }
    }
    owned
}

/// The non-blank lines the runner does not own, with criterion checkboxes normalised.
fn kept_lines(text: &str) -> Vec<String> {
    let parsed = parse(text);
    let body = text.strip_prefix('\u{feff}').unwrap_or(text);
    let lines: Vec<&str> = body.lines().collect();
    let owned = runner_lines(&parsed.layout, &lines);
    let heads: Vec<usize> = parsed.layout.criteria.iter().map(|c| c.head).collect();
    lines
        .iter()
        .enumerate()
        .filter(|(i, l)| !owned[*i] && !l.trim().is_empty())
        .map(|(i, l)| {
            // A bare `\r` at the end of the file becomes a full line ending when lines follow it.
            let l = l.trim_end_matches('\r');
            if heads.contains(&i) { format!("- [ ]{}", &l[5.min(l.len())..]) } else { l.to_string() }
        })
        .collect()
}

fn check(text: &str, change: &RunnerChange) -> Result<(), TestCaseError> {
    let parsed = parse(text);
    match project(text, &parsed.spec) {
        Ok(same) => prop_assert_eq!(
            same,
            super::tests::boxes_as_status(text),
            "projecting the unchanged model changed more than the checkboxes its statuses contradict"
        ),
        Err(_) => return Ok(()), // a shape the writer refuses (duplicate sections); callers report it
    }
    if parsed.structural_errors().next().is_some() {
        return Ok(()); // the daemon never writes over a structurally broken spec
    }
    let next = apply_change(&parsed.spec, change);
    let written = match project(text, &next) {
        Ok(written) => written,
        Err(_) => return Ok(()),
    };
    prop_assert_eq!(
        kept_lines(text),
        kept_lines(&written),
        "a non-runner line moved, changed or vanished:\n{}",
        written
    );
    prop_assert_eq!(project(&written, &next).ok(), Some(written.clone()), "a second projection changed the text");
    if !change.round {
        // A new round is the author's to answer; every other runner change leaves a pass bound.
        prop_assert_eq!(
            authored_digest(text, &parsed.layout),
            authored_digest(&written, &parse(&written).layout),
            "a projection changed the authored digest:\n{}",
            written
        );
    }
    let reread = parse(&written).spec;
    prop_assert_eq!(reread.phases.len(), next.phases.len());
    for (a, b) in reread.criteria().zip(next.criteria()) {
        prop_assert_eq!((&a.id, a.state()), (&b.id, b.state()));
    }
    Ok(())
}

/// Run the properties for `cases` generated specs; returns (cases tried, failures).
pub fn run(cases: u32) -> (u32, Vec<String>) {
    let mut runner = TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    let mut failures = Vec::new();
    let strategy = (spec_text(), prop::collection::vec(mutation(), 0..4), runner_change());
    let result = runner.run(&strategy, |(text, mutations, change)| {
        let mutated = mutate(&text, &mutations);
        check(&text, &change)?;
        check(&mutated, &change)
    });
    if let Err(e) = result {
        failures.push(e.to_string());
    }
    (cases, failures)
}

#[test]
fn generated_and_mutated_specs_keep_every_non_runner_byte() {
    let cases = std::env::var("SCAFLD_PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(256);
    let (tried, failures) = run(cases);
    eprintln!("spec properties: {tried} cases tried, {} failures found", failures.len());
    assert!(failures.is_empty(), "{tried} cases, failures:\n{}", failures.join("\n"));
}
