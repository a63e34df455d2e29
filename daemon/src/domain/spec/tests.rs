//! Parser and projection tests on a corpus of specs written here.

use super::project::{ProjectionError, project};
use super::*;

const BASIC: &str = "---
spec_version: '2.0'
task_id: add-greeting-flag
created: '2026-05-15T09:00:00Z'
updated: '2026-05-15T09:00:00Z'
status: draft
harden_status: not_run
size: small
risk_level: low
---

# Add a --greeting flag

## Current State

Status: draft
Current phase: none
Next: approve
Reason: draft created
Blockers: none
Allowed follow-up command: `scafld approve add-greeting-flag`
Latest runner update: none
Review gate: not_started

## Summary

Operators want to pick the greeting.   Spaces  and *emphasis* stay exactly as typed.

## Scope

- `cmd/hello/main.go` - flag parsing.

## Acceptance

Profile: standard

Definition of done:
- [ ] Docs updated

Validation:
- [ ] `final-vet` command - Static checks pass
  - Command: `go vet ./cmd/hello`
  - Expected kind: `exit_code_zero`

## Phase 1: Flag and output

Status: pending
Dependencies: none

Goal: Parse --greeting.

Changes:
- `cmd/hello/main.go` - add the flag.

Acceptance:
- [ ] `ac1_1` test - CLI unit tests pass
  - Command: `go test ./cmd/hello`
  - Expected kind: `exit_code_zero`
  - Timeout seconds: 60
  - Owner: team-a
- [ ] `ac1_2` boundary - No leftover debug prints
  - Command: `grep -n 'DEBUG' cmd/hello/main.go`
  - Expected kind: `no_matches`

## Rollback

- Revert.
";

fn fenced_many_phases() -> String {
    let mut text = String::from(
        "---\nspec_version: '2.0'\ntask_id: big\ncreated: ''\nupdated: ''\nstatus: active\nharden_status: passed\nsize: large\nrisk_level: high\n---\n\n# Größere Änderung – ünïcödé ✓\n\n## Context\n\n```markdown\n## Phase 99: not a phase\n- [ ] `fake` test - inside a fence\n```\n\n~~~\n## Review\n~~~\n",
    );
    for n in 1..=12 {
        text.push_str(&format!(
            "\n## Phase {n}: Step {n} — 日本語\n\nStatus: pending\nDependencies: none\n\nObjective: Do step {n}.\n\nChanges:\n- `src/{n}.rs` - part {n}\n  continued on a second line\n\nSome prose the author wrote.\n\nAcceptance:\n- [ ] `ac{n}` test - Step {n} works\n  - Command: `test -f src/{n}.rs`\n"
        ));
    }
    text
}

#[test]
fn parses_the_whole_spec() {
    let parsed = parse(BASIC);
    assert!(parsed.is_valid(), "{:?}", parsed.diagnostics);
    let spec = &parsed.spec;
    assert_eq!(spec.front.task_id, "add-greeting-flag");
    assert_eq!(spec.title, "Add a --greeting flag");
    assert_eq!(spec.current_state.allowed_follow_up, "scafld approve add-greeting-flag");
    assert_eq!(spec.scope, vec!["`cmd/hello/main.go` - flag parsing."]);
    assert_eq!(spec.acceptance.profile, "standard");
    assert_eq!(spec.acceptance.definition_of_done, vec!["- [ ] Docs updated"]);
    assert_eq!(spec.acceptance.criteria[0].id, "final-vet");
    let phase = &spec.phases[0];
    assert_eq!(
        (phase.id().as_str(), phase.name.as_str(), phase.objective.as_str()),
        ("phase1", "Flag and output", "Parse --greeting.")
    );
    assert_eq!(phase.criteria.len(), 2);
    let c = &phase.criteria[0];
    assert_eq!((c.id.as_str(), c.kind.as_str(), c.command.as_str()), ("ac1_1", "test", "go test ./cmd/hello"));
    assert_eq!(c.timeout_seconds, "60");
    assert_eq!(c.other, vec![("Owner".to_string(), "team-a".to_string())]);
    assert_eq!(phase.criteria[1].effective_kind(), "no_matches");
}

#[test]
fn fences_hide_headings_and_criteria() {
    let text = fenced_many_phases();
    let parsed = parse(&text);
    assert!(parsed.is_valid(), "{:?}", parsed.diagnostics);
    assert_eq!(parsed.spec.phases.len(), 12);
    assert!(parsed.spec.criteria().all(|c| c.id != "fake"));
    assert_eq!(parsed.spec.phases[0].changes, vec!["`src/1.rs` - part 1 continued on a second line"]);
    assert_eq!(parsed.spec.title, "Größere Änderung – ünïcödé ✓");
}

/// `text` with each criterion's checkbox as its status says (`[x]` exactly when it passed):
/// what projecting the model `text` parses to writes, the checkbox being the runner's.
pub(super) fn boxes_as_status(text: &str) -> String {
    let parsed = parse(text);
    let mut lines: Vec<String> = text.split_inclusive('\n').map(str::to_string).collect();
    for c in parsed.spec.criteria() {
        let Some(line) = c.line.checked_sub(1).and_then(|head| lines.get_mut(head)) else { continue };
        let Some(at) = line.find("- [").map(|at| at + 3) else { continue };
        if line[at..].starts_with(['x', 'X']) != c.passed() {
            line.replace_range(at..at + 1, if c.passed() { "x" } else { " " });
        }
    }
    lines.concat()
}

#[test]
fn unchanged_model_writes_identical_bytes() {
    let crlf = BASIC.replace('\n', "\r\n");
    let no_newline = BASIC.trim_end().to_string();
    let minimal = "---\nspec_version: '2.0'\ntask_id: tiny\nstatus: draft\n---\n# Tiny\n## Phase 1: Only\nAcceptance:\n- [ ] `a` test - t\n  - Command: true\n";
    for text in [BASIC.to_string(), fenced_many_phases(), crlf, no_newline, minimal.to_string()] {
        let parsed = parse(&text);
        assert_eq!(project(&text, &parsed.spec).unwrap(), text);
    }
}

/// The checkbox is the runner's: `[x]` exactly when the criterion passed, whatever the mark on
/// disk says (ticked by hand, or left ticked by another tool), so a failed one never shows done.
#[test]
fn a_criterion_s_checkbox_is_set_from_its_status_not_kept_from_the_disk() {
    let ticked = BASIC.replacen("- [ ] `ac1_1`", "- [x] `ac1_1`", 1);
    let mut spec = parse(&ticked).spec;
    spec.phases[0].criteria[0].status = "fail".into();
    spec.phases[0].criteria[0].evidence = "exit code was 1".into();
    let written = project(&ticked, &spec).unwrap();
    assert!(written.contains("- [ ] `ac1_1` test - CLI unit tests pass\n"), "{written}");
    // Failing on disk and ticked by hand since: the model is unchanged, the mark is put right.
    let hand = written.replacen("- [ ] `ac1_1`", "- [X] `ac1_1`", 1);
    assert_eq!(project(&hand, &parse(&hand).spec).unwrap(), written);
    spec.phases[0].criteria[0].status = "pass".into();
    let passed = project(&written, &spec).unwrap();
    assert!(passed.contains("- [x] `ac1_1` test - CLI unit tests pass\n"), "{passed}");
    assert_eq!(
        project(&passed.replacen("- [x] `ac1_1`", "- [X] `ac1_1`", 1), &spec).unwrap(),
        passed.replacen("- [x] `ac1_1`", "- [X] `ac1_1`", 1),
        "a tick as written stays"
    );
}

#[test]
fn a_copy_differing_only_in_runner_lines_is_told_apart_from_a_person_s_edit() {
    use super::project::only_runner_parts_differ;
    let mut spec = parse(BASIC).spec;
    spec.front.status = "approved".into();
    spec.front.updated = "2026-05-16T00:00:00Z".into();
    spec.current_state.next = "build".into();
    let moved = project(BASIC, &spec).unwrap();
    assert!(only_runner_parts_differ(BASIC, BASIC));
    assert!(only_runner_parts_differ(BASIC, &moved), "the copy left behind by a move");
    let edited = BASIC.replacen("## Summary\n", "## Summary\n\nA line a person added.\n", 1);
    assert_ne!(edited, BASIC);
    assert!(!only_runner_parts_differ(&edited, &moved), "a person's line is not the runner's");
    let removed = BASIC.replacen("Goal: Parse --greeting.", "", 1);
    assert!(!only_runner_parts_differ(&removed, &moved), "nor is a line a person removed");

    // A harden round: its state is the runner's, its checks' evidence the author's answer.
    let round = |evidence: &str, status: &str| {
        let mut with_round = spec.clone();
        with_round.harden_rounds.push(crate::domain::spec::HardenRound {
            id: "round-1".into(),
            status: status.into(),
            checks: vec![crate::domain::spec::HardenCheck {
                name: "Command audit".into(),
                grounded_in: "spec_gap:phase1".into(),
                result: "pass".into(),
                evidence: evidence.into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        project(&moved, &with_round).unwrap()
    };
    let (answered, closed) = (round("the author's answer", "in_progress"), round("the author's answer", "passed"));
    assert!(only_runner_parts_differ(&answered, &closed), "a round's state is the runner's");
    let reworded = round("a different answer", "passed");
    assert!(!only_runner_parts_differ(&reworded, &closed), "a check's evidence is the author's");
}

#[test]
fn a_status_change_rewrites_only_runner_sections() {
    for text in [BASIC.to_string(), BASIC.replace('\n', "\r\n")] {
        let mut spec = parse(&text).spec;
        spec.front.status = "approved".into();
        spec.front.updated = "2026-05-16T00:00:00Z".into();
        spec.current_state.next = "build".into();
        spec.phases[0].criteria[0].status = "pass".into();
        spec.phases[0].criteria[0].evidence = "exit code was 0".into();
        let written = project(&text, &spec).unwrap();
        let reparsed = parse(&written);
        assert_eq!(reparsed.spec.status(), Some(crate::domain::lifecycle::Status::Approved));
        assert_eq!(reparsed.spec.phases[0].criteria[0].status, "pass");
        assert_eq!(reparsed.spec.phases[0].criteria[0].other, vec![("Owner".to_string(), "team-a".to_string())]);
        assert!(written.contains("Goal: Parse --greeting."), "the phase's Goal line stays as written");
        // Prose sections are byte-identical, including odd spacing.
        let eol = if text.contains("\r\n") { "\r\n" } else { "\n" };
        let summary = format!(
            "## Summary{eol}{eol}Operators want to pick the greeting.   Spaces  and *emphasis* stay exactly as typed.{eol}"
        );
        assert!(written.contains(&summary));
        assert!(written.ends_with(&format!("## Rollback{eol}{eol}- Revert.{eol}")));
        assert!(!text.contains("\r\n") || !written.replace("\r\n", "").contains('\n'), "mixed line endings");
        // Projecting the same model again changes nothing.
        assert_eq!(project(&written, &spec).unwrap(), written);
    }
}

#[test]
fn missing_runner_sections_are_added_when_needed() {
    let text = "---\nspec_version: '2.0'\ntask_id: t\nstatus: draft\n---\n\n# T\n\n## Phase 1: A\n\nAcceptance:\n- [ ] `a` test - t\n  - Command: `true`\n";
    let mut spec = parse(text).spec;
    assert_eq!(project(text, &spec).unwrap(), text);
    spec.current_state.next = "approve".into();
    let written = project(text, &spec).unwrap();
    assert!(written.contains("# T\n\n## Current State\n\nStatus: draft\n"), "{written}");
    assert_eq!(written.replace(&render::current_state(&spec), "").replace("\n\n\n", "\n\n"), text);
}

#[test]
fn changed_phase_shape_is_refused() {
    let mut spec = parse(BASIC).spec;
    spec.phases.push(Phase { number: 2, name: "More".into(), ..Phase::default() });
    assert!(matches!(project(BASIC, &spec), Err(ProjectionError::PhaseShapeChanged { .. })));
}

fn errors(text: &str) -> Vec<String> {
    parse(text).errors().map(ToString::to_string).collect()
}

fn warnings(text: &str) -> Vec<String> {
    parse(text).diagnostics.iter().filter(|d| d.severity == Severity::Warning).map(ToString::to_string).collect()
}

/// The Python grammar's result conditions are problems only when they ask for more than the
/// kind already checks.
#[test]
fn a_python_condition_that_asks_nothing_more_is_no_problem() {
    let spec = |detail: &str| {
        format!(
            "---\nspec_version: '2.0'\ntask_id: t\nstatus: draft\n---\n# T\n## Phase 1: A\n- [ ] `a` test - x\n  - Command: true\n{detail}"
        )
    };
    for quiet in ["  - Expected exit code: 0\n", "  - Evidence required: false\n", "  - Expected exit code: none\n"] {
        assert_eq!(errors(&spec(quiet)), Vec::<String>::new(), "{quiet}");
    }
    assert_eq!(errors(&spec("  - Expected exit code: `3`\n")).len(), 1);
}

#[test]
fn malformed_specs_get_line_numbered_diagnostics() {
    let body = |extra: &str| format!("---\nspec_version: '2.0'\ntask_id: t\nstatus: draft\n---\n# T\n{extra}");
    let cases: Vec<(String, &str)> = vec![
        ("# T\n".into(), "line 1: front matter is required"),
        ("---\nstatus: draft\n# T\n".into(), "front matter is not closed"),
        (
            body("## Phase 1: A\nAcceptance:\n- [ ] `a` manual - by hand\n"),
            "line 7: phase1 has only manual acceptance criteria: it would wait for a person alone, who records each \
             with `scafld build t --criterion=a --disposition pass --reason \"what was checked\"`",
        ),
        (
            body("## Phase 1: A\nObjective: x\n"),
            "line 7: phase1 has no executable acceptance criteria; it would pass without evidence",
        ),
        (
            body(
                "## Phase 1: A\n- [ ] `a` test - x\n  - Command: true\n## Phase 1: B\n- [ ] `b` test - y\n  - Command: true\n",
            ),
            "line 10: duplicate phase heading: phase1",
        ),
        (body("## Phase one: A\n"), "line 7: malformed phase heading"),
        (body("```\n## Phase 1: A\n"), "line 7: code fence is never closed"),
        (
            body("## Phase 1: A\n- [ ] `a` test - x\n  - Command: true\n- [ ] `a` test - y\n  - Command: true\n"),
            "line 10: criterion id `a` is already used on line 8",
        ),
        (
            body("## Phase 1: A\n- [ ] `a` test - x\n  - Command: true\n  - Expected kind: `exit_code_one`\n"),
            "unknown expected kind",
        ),
        (body("## Phase 1: A\n- [ ] `a` test - x\n"), "criterion `a` has no Command"),
        (
            body(&format!("## Phase 1: A\n- [ ] `a` test - x\n  - Command: `true {}`\n", "x".repeat(128 * 1024))),
            "line 8: criterion `a`: its Command is 131077 bytes, and Linux starts no command line",
        ),
        (
            body(
                "## Phase 1: A\n- [ ] `a` test - x\n  - Command: `exit 1`\n  - Expected kind: `exit_code_nonzero`\n  - Expected exit code: 2\n",
            ),
            "line 8: criterion `a`: `Expected exit code: 2` (the Python scafld 2.x grammar's) is a condition scafld does not check",
        ),
        (
            body("## Phase 1: A\n- [ ] `a` test - x\n  - Command: true\n  - evidence_required: true\n"),
            "line 8: criterion `a`: `evidence_required: true` (the Python scafld 2.x grammar's) is a condition",
        ),
        (
            body("## Phase 1: A\n- [ ] `a` test - x\n  - Command: `TODO: the command that proves this phase works`\n"),
            "line 9: unfilled template placeholder",
        ),
        (
            body("## Phase 1: A\n- [ ] `a` test - x\n  - Command: `cargo build &&\n    cargo test`\n"),
            "line 9: the Command of `a` opens a backtick it never closes",
        ),
        (
            body("## Phase 1: A\n- [ ] `a` test - x\n  - Command: cargo build \\\n    --release\n"),
            "line 10: the Command of `a` continues on this line",
        ),
        ("---\nspec_version: '2.0'\ntask_id: t\nstatus: finished\n---\n# T\n".into(), "unknown status \"finished\""),
        ("---\nspec_version: '2.0'\ntask_id: ../t\nstatus: draft\n---\n# T\n".into(), "looks like a path"),
        (
            "---\nspec_version: '2.0'\ntask_id: t\nstatus: draft\n---\n## Phase 1: A\n".into(),
            "a `# Title` line is required",
        ),
    ];
    for (text, expected) in cases {
        let found = errors(&text);
        assert!(found.iter().any(|e| e.contains(expected)), "expected {expected:?} in {found:?} for\n{text}");
    }
}

#[test]
fn unusual_forms_read_with_a_warning_not_an_error() {
    let body = |extra: &str| format!("---\nspec_version: '2.0'\ntask_id: t\nstatus: draft\n---\n# T\n{extra}");
    let cases: Vec<(String, &str)> = vec![
        (body("## Phase 1: A\n- [ ] `a` test: colon instead of dash\n  - Command: true\n"), "instead of ` - `"),
        (body("## Phase 1: A\n- [ ] `a` compile\n  - Command: true\n"), "criterion `a` has no title"),
        (
            body("## Phase 1: A\n- [ ] a test - no backticks\n- [ ] `b` test - y\n  - Command: true\n"),
            "line 8: checklist item without a backticked id",
        ),
        (
            body("## Phase 1: A\n- [ ] `a` test - x\n  - Command: true\n  - Expected kind: none\n"),
            "`Expected kind: none`; read as not set",
        ),
        (
            // With a phase that runs something: a draft without one is an error of its own.
            body("## Phase 1: A\n- [ ] `a` test - x\n  - Command: true\n").replace("'2.0'", "'1.0'"),
            "spec_version \"1.0\" is not '2.0'",
        ),
        (
            "---\nspec_version: '2.0'\ntask_id: t\nstatus: in_progress\n---\n# T\n".into(),
            "a Python scafld name; read as `active`",
        ),
    ];
    for (text, expected) in cases {
        assert!(
            errors(&text)
                .iter()
                .all(|e| !e.contains("criterion") && !e.contains("spec_version") && !e.contains("status")),
            "{:?}",
            errors(&text)
        );
        let found = warnings(&text);
        assert!(found.iter().any(|e| e.contains(expected)), "expected {expected:?} in {found:?} for\n{text}");
    }
}

#[test]
fn a_draft_with_nothing_to_run_cannot_be_approved() {
    let spec = |status: &str, rest: &str| {
        format!("---\nspec_version: '2.0'\ntask_id: t\nstatus: {status}\n---\n# T\n\n## Summary\n\nS.\n{rest}")
    };
    let nothing = "the spec has no `## Phase N: Name` sections and no executable acceptance criterion";
    assert!(errors(&spec("draft", "")).iter().any(|e| e.contains(nothing)), "{:?}", errors(&spec("draft", "")));
    let manual_only = "\n## Acceptance\n\n- [ ] `m` manual - a person looks\n";
    assert!(errors(&spec("draft", manual_only)).iter().any(|e| e.contains(nothing)));
    // Global criteria alone run as final acceptance, as in the original tool: a warning only.
    let global = "\n## Acceptance\n\n- [ ] `g` test - runs\n  - Command: `true`\n";
    assert!(errors(&spec("draft", global)).is_empty(), "{:?}", errors(&spec("draft", global)));
    assert!(warnings(&spec("draft", global)).iter().any(|w| w.contains("no `## Phase N: Name` sections")));
    // An approved spec keeps reading: the rule is a warning there.
    assert!(errors(&spec("active", "")).is_empty());
    assert!(warnings(&spec("active", "")).iter().any(|w| w.contains(nothing)));
}

#[test]
fn approval_rules_are_warnings_once_approved() {
    let spec = |status: &str| {
        format!(
            "---\nspec_version: '2.0'\ntask_id: t\nstatus: {status}\n---\n# T\n## Phase 1: A\nAcceptance:\n- [ ] `a` manual - by hand\n## Phase 2: B\nAcceptance:\n- [ ] `b` test - no command\n"
        )
    };
    let draft = parse(&spec("draft"));
    assert_eq!(draft.errors().count(), 2, "{:?}", draft.diagnostics);
    assert_eq!(draft.structural_errors().count(), 0, "approval rules never block a rewrite");
    for status in ["approved", "active", "review", "completed"] {
        let parsed = parse(&spec(status));
        assert!(parsed.is_valid(), "{status}: {:?}", parsed.diagnostics);
        assert_eq!(parsed.diagnostics.iter().filter(|d| d.severity == Severity::Warning).count(), 2);
    }
}

#[test]
fn todo_in_prose_or_code_is_not_a_placeholder() {
    let text = "---\nspec_version: '2.0'\ntask_id: t\nstatus: draft\n---\n# T\n## Summary\n\nNo `TODO` markers remain.\n- `TODO: replace with...` placeholders are old.\nTODO: decide the name later.\n## Phase 1: A\n- [ ] `a` test - x\n  - Command: `grep -rn TODO src || true`\n";
    assert!(errors(text).is_empty(), "{:?}", errors(text));
}

#[test]
fn fenced_commands_are_read_whole() {
    let text = "---\nspec_version: '2.0'\ntask_id: t\nstatus: draft\n---\n# T\n## Phase 1: A\nAcceptance:\n- [ ] `a` test - x\n  - Command:\n    ```sh\n    make build &&\n      make test\n    ```\n  - Expected kind: `exit_code_zero`\n- [ ] `b` test - y\n  - Command: true\n";
    let parsed = parse(text);
    assert!(parsed.is_valid(), "{:?}", parsed.diagnostics);
    let c = &parsed.spec.phases[0].criteria;
    assert_eq!(c[0].command, "make build &&\n  make test");
    assert_eq!(c[0].expected_kind, "exit_code_zero");
    assert_eq!(c[1].command, "true");
    let mut next = parsed.spec.clone();
    next.phases[0].criteria[0].status = "pass".into();
    next.phases[0].criteria[0].evidence = "exit code was 0".into();
    let written = project(text, &next).unwrap();
    assert!(written.contains("      make test\n    ```\n  - Expected kind: `exit_code_zero`\n  - Status: pass\n  - Evidence: exit code was 0\n  - Source event: none\n- [ ] `b`"), "{written}");
    assert_eq!(parse(&written).spec.phases[0].criteria[0].command, "make build &&\n  make test");
}

/// A criterion's details indented by a tab are its details (the original tool reads them so):
/// its command runs, and what the runner writes under it keeps the tab.
#[test]
fn details_indented_by_a_tab_belong_to_their_criterion() {
    let text = "---\nspec_version: '2.0'\ntask_id: t\nstatus: draft\n---\n# T\n## Phase 1: A\nChanges:\n- `src/a.rs` - the\n\tchange\nAcceptance:\n- [ ] `a` test - x\n\t- Command: `make test`\n\n\t- Expected kind: `exit_code_zero`\n- [ ] `b` test - y\n\t- Command: true\n";
    let parsed = parse(text);
    assert!(parsed.is_valid(), "{:?}", parsed.diagnostics);
    let phase = &parsed.spec.phases[0];
    assert_eq!(phase.changes, ["`src/a.rs` - the change"]);
    assert_eq!(
        (phase.criteria[0].command.as_str(), phase.criteria[0].expected_kind.as_str()),
        ("make test", "exit_code_zero")
    );
    assert_eq!(phase.criteria[1].command, "true");
    let mut next = parsed.spec.clone();
    next.phases[0].criteria[0].status = "pass".into();
    let written = project(text, &next).unwrap();
    assert!(written.contains("\t- Expected kind: `exit_code_zero`\n\t- Status: pass\n"), "{written}");
    assert_eq!(parse(&written).spec.phases[0].criteria[0].status, "pass");
}

#[test]
fn task_id_must_match_the_file_name() {
    let mut parsed = parse(BASIC);
    parsed.check_file_name("other-name");
    assert!(parsed.errors().any(|e| e.message.contains("does not match the file name other-name.md")));
}

/// A projection writes only into a file that reads as the task's own spec: emptied, its front
/// matter broken or naming another task (or none), it is refused, with the line that says why.
#[test]
fn only_the_tasks_own_readable_spec_takes_a_write() {
    let task = "add-greeting-flag";
    assert_eq!(parse_as(BASIC, task).unwrap().spec.front.task_id, task);
    let without_first_line = BASIC.split_once('\n').unwrap().1;
    let cases = [
        ("emptied", String::new(), "the file is empty"),
        ("blanked", "\n \n".to_string(), "the file is empty"),
        ("front matter's first line dropped", without_first_line.to_string(), "front matter is required"),
        (
            "another task's id",
            BASIC.replace("task_id: add-greeting-flag", "task_id: other"),
            "does not match the file name",
        ),
        ("no task id", BASIC.replace("task_id: add-greeting-flag", "task_id: ''"), "task_id is required"),
        ("front matter never closed", BASIC.replacen("---\n\n# Add", "\n# Add", 1), "not closed"),
    ];
    for (what, text, why) in cases {
        let refused = parse_as(&text, task).err().unwrap_or_else(|| panic!("{what}: taken as the spec of {task}"));
        assert!(refused.message.contains(why), "{what}: {refused}");
    }
}

#[test]
fn plan_template_validates_once_filled() {
    let input = render::PlanInput {
        task_id: "new-task",
        title: Some("New task"),
        summary: None,
        size: "small",
        risk: "low",
        command: None,
        now: "2026-01-01T00:00:00Z",
        shadowed: false,
    };
    let text = render::new_spec(&input);
    let parsed = parse(&text);
    let placeholders = parsed.errors().filter(|d| d.message.contains("placeholder")).count();
    assert!(placeholders >= 4, "{:?}", parsed.diagnostics);
    assert!(parsed.errors().all(|d| d.message.contains("placeholder")), "{:?}", parsed.diagnostics);
    let filled = text
        .replace(render::PLACEHOLDERS[0], "cargo test")
        .replace(render::PLACEHOLDERS[1], "Ship it.")
        .lines()
        .map(|l| if l.contains("TODO:") { l.replace("TODO: ", "") } else { l.to_string() })
        .collect::<Vec<_>>()
        .join("\n");
    let parsed = parse(&filled);
    assert!(parsed.is_valid(), "{:?}", parsed.diagnostics);
    assert_eq!(project(&filled, &parsed.spec).unwrap(), filled);
}

/// `## Review` is the runner's: before any review, text there beyond the template's lines is
/// someone's, and the first review would replace it, so it is pointed out; the template alone
/// and a recorded review are not.
#[test]
fn text_under_review_before_any_review_is_pointed_out() {
    let with = |review: &str| format!("{BASIC}\n## Review\n\n{review}");
    let warned = |review: &str| {
        warnings(&with(review))
            .into_iter()
            .filter(|w| w.contains("`## Review` is written by scafld"))
            .collect::<Vec<_>>()
    };
    let note = warned("Reviewer: please check the tone against docs/style.md\n");
    assert_eq!(note.len(), 1, "{note:?}");
    assert!(note[0].starts_with(&format!("line {}:", with("").lines().count() + 1)), "{note:?}");
    assert_eq!(warned("Status: not_started\nVerdict: none\n\nNotes for whoever reviews.\n").len(), 1);
    assert!(warned("Status: not_started\nVerdict: none\n\nFindings:\n- none\n").is_empty());
    assert!(warned("").is_empty());
    assert!(warned("Status: completed\nVerdict: pass\nSummary: fine.\n\nFindings:\n- none\n").is_empty());
}

/// The runner owns `## Review` through its findings list: a heading or a note someone wrote
/// after it (the end of the file, where the first review appends the section) is theirs, kept
/// byte for byte by every later review, read as neither the review's nor a warning, and part
/// of the authored digest.
#[test]
fn text_after_the_review_s_findings_is_the_author_s_and_stays() {
    use super::project::authored_digest;
    let review = |verdict: &str| crate::domain::review::projection(verdict, "command", None, None);
    let mut spec = parse(BASIC).spec;
    spec.review = review("pass");
    let reviewed = project(BASIC, &spec).unwrap();
    assert!(
        reviewed.ends_with(
            "## Review\n\nStatus: completed\nVerdict: pass\nMode: verify\nProvider: command\n\nFindings:\n- none\n"
        ),
        "{reviewed}"
    );
    for appendix in [
        "\n# Appendix\n\nFollow-up idea: rename greet.txt later.\n",
        "\nA note after the review.\n\n- a bullet of mine\nStatus: mine too\n",
        "Right under the findings.\n",
        "\n### Notes\n\n- one\n",
    ] {
        let text = format!("{reviewed}{appendix}");
        let parsed = parse(&text);
        assert_eq!(parsed.spec.review, spec.review, "{appendix:?} is not the review's");
        assert!(warnings(&text).iter().all(|w| !w.contains("## Review")), "{appendix:?}");
        assert_eq!(project(&text, &parsed.spec).unwrap(), text);
        let mut again = parsed.spec.clone();
        again.review = review("fail");
        let written = project(&text, &again).unwrap();
        let expected = reviewed.replace("Verdict: pass", "Verdict: fail");
        let apart = if appendix.starts_with('\n') { "" } else { "\n" };
        assert_eq!(written, format!("{expected}{apart}{appendix}"), "{appendix:?}");
        assert_eq!(project(&written, &again).unwrap(), written, "a second projection changes nothing");
        assert_eq!(authored_digest(&text, &parsed.layout), authored_digest(&written, &parse(&written).layout));
        let edited = text.replace(appendix.trim(), "Another text.");
        assert_ne!(authored_digest(&text, &parsed.layout), authored_digest(&edited, &parse(&edited).layout));
    }
    // Before the first review, a note after the template's findings stays too, unwarned.
    let template =
        format!("{BASIC}\n## Review\n\nStatus: not_started\nVerdict: none\n\nFindings:\n- none\n\nMy note.\n");
    assert!(warnings(&template).iter().all(|w| !w.contains("## Review")));
    let written = project(&template, &spec).unwrap();
    assert!(
        written.ends_with("Verdict: pass\nMode: verify\nProvider: command\n\nFindings:\n- none\n\nMy note.\n"),
        "{written}"
    );
}

/// The status outputs say is the one `Spec::status` reads: a Python scafld name is said as the
/// status it means; a word that means none is said as written.
#[test]
fn the_status_word_is_the_status_the_front_matter_means() {
    let word = |status: &str| parse(&BASIC.replace("status: draft", &format!("status: {status}"))).spec.status_word();
    assert_eq!(word("in_progress"), "active");
    assert_eq!(word("under_review"), "draft");
    assert_eq!(word("review"), "review");
    assert_eq!(word("sideways"), "sideways");
}

/// A spec with `extra` after a front matter and a title.
fn with_body(extra: &str) -> String {
    format!("---\nspec_version: '2.0'\ntask_id: t\nstatus: draft\n---\n# T\n{extra}")
}

/// A section the model reads, written twice, is read whole, as the original reads it: the
/// files the first Scope names stay in the scope, the second adds to it.
#[test]
fn a_section_written_twice_is_read_whole() {
    let text = with_body(
        "## Summary\n\nFirst part.\n## Scope\n\n- `app.conf` - the config.\n## Objectives\n\n- one\n## Touchpoints\n\n- `a.rs`\n\
         ## Phase 1: A\nAcceptance:\n- [ ] `a` test - x\n  - Command: true\n\
         ## Scope\n\n- `notes.md` - notes.\n## Summary\n\nSecond part.\n## Objectives\n\n- two\n## Touchpoints\n\n- `b.rs`\n",
    );
    let parsed = parse(&text);
    assert!(parsed.is_valid(), "{:?}", parsed.diagnostics);
    let spec = &parsed.spec;
    assert_eq!(spec.scope, ["`app.conf` - the config.", "`notes.md` - notes."]);
    assert_eq!(spec.summary, "First part.\nSecond part.");
    assert_eq!(spec.objectives, ["one", "two"]);
    assert_eq!(spec.touchpoints, ["`a.rs`", "`b.rs`"]);
    // The sections the runner writes stay one each.
    let twice = with_body("## Current State\n\nStatus: draft\n## Current State\n\nStatus: draft\n");
    assert!(errors(&twice).iter().any(|e| e.contains("duplicate section `## Current State`")), "{:?}", errors(&twice));
}

/// A field that defines a criterion's check, written twice, is a problem naming the second
/// line: the first is read, and `build` records the criterion invalid rather than guess.
#[test]
fn a_criterion_field_written_twice_is_a_problem_naming_its_line() {
    for (second, label) in [
        ("  - Command: `true`\n", "Command"),
        ("  - expected_kind: `exit_code_nonzero`\n", "expected_kind"),
        ("  - Cwd: sub\n", "Cwd"),
        ("  - Timeout seconds: 5\n", "Timeout seconds"),
    ] {
        let text = with_body(&format!(
            "## Phase 1: A\nAcceptance:\n- [ ] `a1` test - says hello\n  - Command: `grep -q hello greet.txt`\n  - Expected kind: `exit_code_zero`\n  - Cwd: none\n  - Timeout seconds: 60\n{second}"
        ));
        let parsed = parse(&text);
        let c = &parsed.spec.phases[0].criteria[0];
        assert_eq!(
            (c.command.as_str(), c.expected_kind.as_str(), c.cwd.as_str(), c.timeout_seconds.as_str()),
            ("grep -q hello greet.txt", "exit_code_zero", "", "60"),
            "{label}: the first one is read"
        );
        let expected = format!("line 9: criterion `a1` has a second `{label}` line (line 14)");
        assert!(errors(&text).iter().any(|e| e.starts_with(&expected)), "{label}: {:?}", errors(&text));
        assert_eq!(criterion_problems(c).len(), 1, "{label}");
    }
    // The runner's own lines keep their reading: a second Status is read past with a warning.
    let status = with_body(
        "## Phase 1: A\nAcceptance:\n- [ ] `a1` test - x\n  - Command: true\n  - Status: pass\n  - Status: fail\n",
    );
    assert!(parse(&status).is_valid(), "{:?}", errors(&status));
    assert!(warnings(&status).iter().any(|w| w.contains("second `Status` line")));
}

/// Text in an HTML comment is not part of the document: a phase, a criterion or a command
/// commented out is neither read nor run (with a warning saying so), a fence inside a comment
/// opens nothing, an unclosed comment is an error, and a projection keeps the comment's bytes.
#[test]
fn html_comments_are_not_spec_structure() {
    let phase1 = "## Phase 1: A\nAcceptance:\n- [ ] `a1` test - x\n  - Command: `true`\n";
    let text = with_body(&format!(
        "{phase1}  <!-- old check:\n  - Command: `rm -rf build`\n  -->\n\n<!-- disabled until the migration lands:\n## Phase 2: Migrate\n\nAcceptance:\n- [ ] `m1` test - migrate prod\n  - Command: `touch MIGRATED`\n```\n-->\n\n## Notes\n\n<!-- a note --> still the comment's line\n"
    ));
    let parsed = parse(&text);
    assert!(parsed.is_valid(), "{:?}", parsed.diagnostics);
    assert_eq!(parsed.spec.phases.len(), 1);
    assert_eq!(parsed.spec.criteria().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["a1"]);
    let c = &parsed.spec.phases[0].criteria[0];
    assert_eq!((c.command.as_str(), c.other.len(), c.repeated.len()), ("true", 0, 0), "{c:?}");
    let said = warnings(&text);
    assert!(
        said.iter().any(|w| w.starts_with("line 11: the HTML comment on lines 11-13 holds `- Command:")),
        "{said:?}"
    );
    assert!(said.iter().any(|w| w.contains("lines 15-22 holds `## Phase 2: Migrate`")), "{said:?}");
    assert_eq!(said.iter().filter(|w| w.contains("HTML comment")).count(), 2, "a plain note is no news: {said:?}");
    // A criterion's end is past a comment among its details: a Status the runner inserts
    // there lands outside it, and every byte of the comments stays.
    assert_eq!(parsed.layout.criteria[0].end, 13);
    let mut spec = parsed.spec.clone();
    spec.phases[0].criteria[0].status = "pass".into();
    spec.phases[0].criteria[0].evidence = "exit code was 0".into();
    let written = project(&text, &spec).unwrap();
    assert!(written.contains("  -->\n  - Status: pass\n"), "{written}");
    for line in text.lines().filter(|l| l.contains("<!--") || l.contains("-->") || l.contains("MIGRATED")) {
        assert!(written.contains(line), "{line:?} kept in {written}");
    }
    assert_eq!(parse(&written).spec.phases[0].criteria[0].status, "pass");
    // `<!--` inside a fence is code; a comment never closed hides the rest, which is an error.
    let fenced = with_body(&format!("## Notes\n\n```\n<!--\n```\n{phase1}"));
    assert!(parse(&fenced).is_valid() && parse(&fenced).spec.phases.len() == 1, "{:?}", errors(&fenced));
    let open = with_body(&format!("<!-- unfinished\n{phase1}"));
    assert!(
        parse(&open).structural_errors().any(|d| d.line == 7 && d.message.starts_with("HTML comment is never closed")),
        "{:?}",
        errors(&open)
    );
}

/// An HTML comment written after a criterion's value on its line is no part of the value, as
/// one around whole lines is not: the command is what the backticks hold, for validate and build
/// alike. A `<!--` inside the code span is the command's own text; one never closed is kept.
#[test]
fn an_inline_html_comment_after_a_value_is_not_part_of_it() {
    let text = with_body(
        "## Phase 1: A\nAcceptance:\n- [ ] `a1` test - x\n  - Command: `true` <!-- why -->\n  - Expected kind: `exit_code_zero` <!-- the default -->\n- [ ] `a2` test - y\n  - Command: test -d src <!-- the layout --> && true\n- [ ] `a3` test - z\n  - Command: `grep -q '<!-- x -->' notes.md`\n- [ ] `a4` test - w\n  - Command: `echo` <!-- never closed\n",
    );
    let parsed = parse(&text);
    let commands: Vec<_> = parsed.spec.criteria().map(|c| (c.command.as_str(), c.expected_kind.as_str())).collect();
    assert_eq!(
        commands,
        [
            ("true", "exit_code_zero"),
            ("test -d src  && true", ""),
            ("grep -q '<!-- x -->' notes.md", ""),
            ("`echo` <!-- never closed", "")
        ],
        "{:?}",
        parsed.diagnostics
    );
}

/// A front matter key set twice is an error naming both lines (YAML allows a key once): the
/// original read the last and wrote the first, so nothing writes into such a file.
#[test]
fn a_front_matter_key_set_twice_is_an_error_naming_both_lines() {
    let text = BASIC.replace("status: draft\n", "status: cancelled\nstatus: draft\n");
    let expected = "line 7: front matter key `status` is set twice, on lines 6 and 7";
    assert!(errors(&text).iter().any(|e| e.starts_with(expected)), "{:?}", errors(&text));
    let refused = parse_as(&text, "add-greeting-flag").unwrap_err();
    assert!(refused.message.contains("set twice"), "{refused:?}");
    let extra = BASIC.replace("size: small\n", "size: small\nowner: a\nowner: b\n");
    assert!(errors(&extra).iter().any(|e| e.contains("`owner` is set twice")), "{:?}", errors(&extra));
}

/// In a phase with an `Acceptance:` label, only the checklist after it is criteria (as the
/// original reads it): steps above it are the author's, items under `Changes:` are changes, and
/// one carrying a command is an approval error, since it would never run. A phase without the
/// label has its checklist read as criteria, with a warning.
#[test]
fn a_phase_s_criteria_are_the_checklist_after_its_acceptance_label() {
    let text = with_body(
        "## Phase 1: A\nObjective: o\n\nSteps:\n- [ ] `greet.txt` create the file\n- [x] `README` mention it\n\nChanges:\n- [ ] `src/a.rs` - edit\n\nAcceptance:\n- [ ] `a1` test - x\n  - Command: true\n",
    );
    let parsed = parse(&text);
    assert!(parsed.is_valid(), "{:?}", parsed.diagnostics);
    assert_eq!(parsed.spec.criteria().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["a1"]);
    assert_eq!(parsed.spec.phases[0].changes, ["[ ] `src/a.rs` - edit"]);
    assert!(parsed.diagnostics.is_empty(), "{:?}", parsed.diagnostics);
    let runs = with_body(
        "## Phase 1: A\nSteps:\n- [ ] `s1` test - a step\n  - Command: `make`\nAcceptance:\n- [ ] `a1` test - x\n  - Command: true\n",
    );
    let expected = "line 9: `s1` has a Command but stands above the phase's `Acceptance:` label";
    assert!(errors(&runs).iter().any(|e| e.starts_with(expected)), "{:?}", errors(&runs));
    assert_eq!(parse(&runs).spec.criteria().count(), 1);
    let unlabelled = with_body("## Phase 1: A\n- [ ] `a1` test - x\n  - Command: true\n");
    assert_eq!(parse(&unlabelled).spec.criteria().count(), 1);
    assert!(warnings(&unlabelled).iter().any(|w| w.starts_with("line 7: phase1 has no `Acceptance:` label")));
}

#[test]
fn front_matter_comments_are_read_as_yaml_reads_them() {
    use super::parse::yaml_comment;
    assert_eq!(yaml_comment(" draft        # note"), (" draft", "        # note"));
    assert_eq!(yaml_comment(" \"2.0\"  # grammar"), (" \"2.0\"", "  # grammar"));
    assert_eq!(yaml_comment(" 'a # b'"), (" 'a # b'", ""));
    assert_eq!(yaml_comment(" \"a \\\" # b\" # c"), (" \"a \\\" # b\"", " # c"));
    assert_eq!(yaml_comment(" a#b"), (" a#b", ""));
    assert_eq!(yaml_comment(" # only a comment"), ("", " # only a comment"));
    assert_eq!(yaml_comment(" 'x'#y"), (" 'x'#y", ""));
}

/// A checklist item whose Command is a fenced block under `- Command:` (the form a criterion
/// reads a long command in) carries a Command as one written on its line does: where it is not
/// read as a criterion (before the first `##`, under another section, nested under a note,
/// above a phase's `Acceptance:` label) it is named on its own line, and in a definition of done
/// it is a criterion. A fence holding `- Command:` text is code, and an empty one gives no
/// command. Before, such items were never named and a definition-of-done one never ran.
#[test]
fn a_stray_item_with_a_fenced_command_is_named_on_its_line() {
    let text = with_body(concat!(
        "- [ ] `p1` test - before any section\n  - Command:\n    ```sh\n    false\n    ```\n",
        "## Verification\n",
        "- [ ] `v1` test - fenced\n  - Command:\n\n    ```sh\n    grep -q bye greet.txt\n    ```\n",
        "- a note\n  - [ ] `o1` test - nested\n    - Command:\n      ```\nfalse\n      ```\n",
        "- [ ] a checklist for people\n  ```\n  - Command: `rm -rf /`\n  ```\n",
        "- [ ] `e1` test - an empty fence runs nothing\n  - Command:\n    ```\n    ```\n",
        "## Acceptance\nDefinition of done:\n- [ ] `d1` test - checked by a command\n  - Command:\n    ```\n    make check\n    ```\n",
        "## Phase 1: A\nSteps:\n- [ ] `s1` test - a step\n  - Command:\n    ```\n    make\n    ```\n",
        "Acceptance:\n- [ ] `a1` test - x\n  - Command:\n    ```\n    true\n    ```\n",
    ));
    let parsed = parse(&text);
    let line_of = |needle: &str| text.lines().position(|l| l.contains(needle)).unwrap() + 1;
    let mut said: Vec<(usize, Severity, String)> = parsed
        .diagnostics
        .iter()
        .map(|d| (d.line, d.severity, d.message.split(" has a Command but ").next().unwrap().to_string()))
        .collect();
    said.sort_by_key(|(line, _, _)| *line);
    let expected: Vec<(usize, Severity, String)> = [("p1", Severity::Warning), ("v1", Severity::Warning)]
        .into_iter()
        .chain([("o1", Severity::Warning), ("s1", Severity::Error)])
        .map(|(id, severity)| (line_of(&format!("`{id}`")), severity, format!("`{id}`")))
        .collect();
    assert_eq!(said, expected, "{:#?}", parsed.diagnostics);
    let read: Vec<(&str, &str)> = parsed.spec.criteria().map(|c| (c.id.as_str(), c.command.as_str())).collect();
    assert_eq!(read, [("a1", "true"), ("d1", "make check")]);
    assert!(parsed.spec.acceptance.definition_of_done.is_empty(), "{:?}", parsed.spec.acceptance);
}

/// A checklist item with a Command nested under a definition-of-done item (a checklist one, one
/// with a backticked id, a plain bullet) is named on its own line as never running, and the
/// item above it stays a checklist line kept as written: the nested Command is not the item's.
/// Before, the first two made their item a criterion (one running the nested command as its
/// own) and the third was dropped without a word.
#[test]
fn a_criterion_nested_in_a_definition_of_done_is_named_on_its_line() {
    let dod = concat!(
        "- [ ] Docs updated\n  - [ ] `d1` test - nested under a plain item\n    - Command: `false`\n",
        "- [ ] `d2` - release notes\n  - [ ] `d3` test - nested under an item with an id\n    - Command:\n      ```\n      false\n      ```\n",
        "- a plain bullet\n  - [ ] `d4` test - nested under a bullet\n    - Command: `false`\n",
        "- [ ] People check\n  - [ ] a sub-check for people\n",
    );
    let text = with_body(&format!(
        "## Acceptance\nDefinition of done:\n{dod}\nValidation:\n- [ ] `t1` test - task level\n  - Command: `true`\n## Phase 1: A\nAcceptance:\n- [ ] `a1` test - x\n  - Command: `true`\n"
    ));
    let parsed = parse(&text);
    let line_of = |needle: &str| text.lines().position(|l| l.contains(needle)).unwrap() + 1;
    let said: Vec<(usize, Severity, &str)> =
        parsed.diagnostics.iter().map(|d| (d.line, d.severity, d.message.as_str())).collect();
    let expected: Vec<(usize, Severity, String)> = ["d1", "d3", "d4"]
        .into_iter()
        .map(|id| {
            (
                line_of(&format!("`{id}`")),
                Severity::Warning,
                format!(
                    "`{id}` has a Command but is indented under a definition-of-done item, so it is not a criterion and never runs: scafld reads criteria only from `- [ ]` at the start of a line; move it to the start of a line under `Validation:`"
                ),
            )
        })
        .collect();
    let expected: Vec<(usize, Severity, &str)> = expected.iter().map(|(l, s, m)| (*l, *s, m.as_str())).collect();
    assert_eq!(said, expected);
    assert_eq!(parsed.spec.criteria().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["a1", "t1"]);
    assert_eq!(parsed.spec.acceptance.definition_of_done.concat(), dod.lines().collect::<Vec<_>>().concat());
}

/// A criterion or a scope entry that only looks like `- ` (a no-break space after the dash, an
/// invisible character before it, full-width brackets) is an error naming its line before
/// approval, never an item that silently is not there.
#[test]
fn an_item_that_only_looks_like_one_is_an_error_on_its_line() {
    let spec = |scope: &str, criterion: &str| {
        format!(
            "---\nspec_version: '2.0'\ntask_id: t\nstatus: draft\n---\n# T\n## Scope\n\n- `a.txt` - a\n{scope}\n## Phase 1: A\nChanges:\n{scope}\nAcceptance:\n- [ ] `a` test - x\n  - Command: true\n{criterion}  - Command: false\n"
        )
    };
    for start in ["-\u{a0}[ ]", "\u{200b}- [ ]", "- ［ ］", "-\u{3000}[x]", "\u{feff}-\u{a0}［］"] {
        let text = spec("", &format!("{start} `b` test - y\n"));
        let found = errors(&text);
        assert!(
            found
                .iter()
                .any(|e| e.starts_with("line 17: checklist item written") && e.contains("only looks like `- [ ]`")),
            "{start:?}: {found:?}"
        );
    }
    for start in ["-\u{a0}", "\u{200b}- ", "-\u{2007}"] {
        let text = spec(&format!("{start}`b.txt` - b"), "");
        let found = errors(&text);
        assert!(
            found.iter().any(|e| e.starts_with("line 10: line written") && e.contains("a scope entry")),
            "{found:?}"
        );
        assert!(found.iter().any(|e| e.starts_with("line 13: line written") && e.contains("a change")), "{found:?}");
    }
    // Plain forms are read as they were (a lookalike space after `- ` too: the entry is read
    // trimmed), and an approved spec keeps reading with a warning.
    assert!(errors(&spec("- `b.txt` - b", "- [ ] `b` test - y\n")).is_empty());
    assert!(errors(&spec("- \u{a0}`b.txt` - b", "- [ ] `b` test - y\n")).is_empty());
    let approved = spec("-\u{a0}`b.txt` - b", "").replace("status: draft", "status: active");
    assert!(errors(&approved).is_empty());
    assert_eq!(warnings(&approved).iter().filter(|w| w.contains("only looks like")).count(), 2);
}
