//! What `validate` says of lines a spec's author meant as structure but scafld does not read
//! as such (a criterion in another list style or outside an acceptance list, a dependency on
//! no earlier phase, YAML comments in the front matter, a byte that is not UTF-8): each is
//! named with its line, never dropped without a word; and the evidence of a spec that does not
//! read, unjudged until it reads again.

use scafld_tests::TestEnv;
use serde_json::Value;

/// A draft with front matter, a title and a scope, then `body`.
fn draft(task: &str, body: &str) -> String {
    format!(
        "---\nspec_version: '2.0'\ntask_id: {task}\nstatus: draft\nharden_status: not_run\n---\n\n# {task}\n\n## Scope\n\n- `greet.txt` - the greeting.\n\n{body}"
    )
}

fn env() -> TestEnv {
    let env = TestEnv::new();
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    std::fs::write(env.work.join("greet.txt"), "hello\n").unwrap();
    env
}

/// `validate --json`'s diagnostics, as (line, severity, message).
fn diagnostics(env: &TestEnv, task: &str) -> Vec<(u64, String, String)> {
    let run = env.scafld(&["validate", task, "--json"]);
    let json = run.json();
    let result = if json["result"].is_null() { &json["error"]["details"] } else { &json["result"] };
    result["diagnostics"]
        .as_array()
        .unwrap_or_else(|| panic!("no diagnostics: {json}"))
        .iter()
        .map(|d: &Value| {
            (
                d["line"].as_u64().unwrap(),
                d["severity"].as_str().unwrap().to_string(),
                d["message"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Criteria written with `*`, `+`, `1.` or `-` and two spaces under `Acceptance:` are warned of
/// with their lines (Markdown shows them as checklists; scafld reads criteria from `- [ ]`
/// only). Before, they were dropped without a word and the phase passed on the one it read.
#[test]
fn a_criterion_in_another_list_style_is_warned_of_with_its_line() {
    let env = env();
    let body = "## Phase 1: One\n\nObjective: x\n\nAcceptance:\n- [ ] `a1` test - exists\n  - Command: `true`\n* [ ] `a4` test - star\n  - Command: `false`\n1. [ ] `a5` test - numbered\n  - Command: `false`\n+ [ ] `a6` test - plus\n  - Command: `false`\n-  [ ] `a7` test - two spaces\n  - Command: `false`\n\n## Acceptance\n\n* [x] `t1` test - task level\n  - Command: `false`\n\n## Notes\n\n1. [link](https://example.com) is prose, and so is\n* [ ] a checklist for people\n";
    std::fs::write(env.work.join(".scafld/specs/drafts/b.md"), draft("b", body)).unwrap();
    let found = diagnostics(&env, "b");
    let warned: Vec<(u64, &str)> = found
        .iter()
        .filter(|(_, _, m)| m.contains("is not a criterion and never runs: criteria are read only from `- [ ]`"))
        .map(|(line, severity, m)| {
            assert_eq!(severity, "warning", "{m}");
            (*line, m.split('`').nth(1).unwrap())
        })
        .collect();
    assert_eq!(warned, [(21, "* [ ]"), (23, "1. [ ]"), (25, "+ [ ]"), (27, "-  [ ]"), (32, "* [x]")], "{found:#?}");
    assert_eq!(found.len(), warned.len(), "nothing else is said: {found:#?}");
}

/// A criterion with a Command under a section scafld reads no criteria from (`## Verification`)
/// is warned of with its line; one above a phase's `Acceptance:` label stays an error until it
/// moves. Before, the first was silently never run.
#[test]
fn a_criterion_with_a_command_outside_an_acceptance_list_is_warned_of() {
    let env = env();
    let body = "## Phase 1: One\n\nObjective: x\n\nAcceptance:\n- [ ] `a1` test - exists\n  - Command: `true`\n\n## Verification\n\n- [ ] `v1` test - says bye\n  - Command: `grep -q bye greet.txt`\n- [ ] `v2` manual - a person looks\n";
    std::fs::write(env.work.join(".scafld/specs/drafts/v.md"), draft("v", body)).unwrap();
    let found = diagnostics(&env, "v");
    assert_eq!(found.len(), 1, "{found:#?}");
    let (line, severity, message) = &found[0];
    assert_eq!((*line, severity.as_str()), (24, "warning"), "{message}");
    assert!(
        message
            .starts_with("`v1` has a Command but stands under `## Verification`, which scafld reads no criteria from"),
        "{message}"
    );
}

/// A criterion with a Command indented under another item (in a section, in a phase above or
/// under its `Acceptance:` label, under a criterion) or written before the first `##` heading
/// is named on its line, as a stray criterion at the start of a line under a section is; a
/// nested checklist item without a Command is prose. Before, both were silently never run.
#[test]
fn a_criterion_nested_under_an_item_or_before_the_first_section_is_named_on_its_line() {
    let env = env();
    let preamble = "- [ ] `p1` test - before any section\n  - Command: `false`\n- a note\n  - [ ] `p2` test - nested in the preamble\n    - Command: `false`\n\n";
    let body = "## Notes\n\n- a list\n  - [ ] `o1` test - nested under a note\n    - Command: `false`\n  - [ ] a checklist for people\n\n## Phase 1: One\n\nObjective: x\n\nChanges:\n- `greet.txt` - the greeting\n  - [ ] `c1` test - nested under a change\n    - Command: `false`\n\nAcceptance:\n- [ ] `a1` test - exists\n  - Command: `true`\n  - [ ] `a2` test - nested under a criterion\n    - Command: `false`\n";
    let text = draft("n", body).replacen("\n## Scope", &format!("\n{preamble}## Scope"), 1);
    std::fs::write(env.work.join(".scafld/specs/drafts/n.md"), &text).unwrap();
    let line_of = |needle: &str| text.lines().position(|l| l.contains(needle)).unwrap() as u64 + 1;
    let found = diagnostics(&env, "n");
    let said = |id: &str| {
        found
            .iter()
            .find(|(_, _, m)| m.starts_with(&format!("`{id}` has a Command but ")))
            .unwrap_or_else(|| panic!("nothing said of {id}: {found:#?}"))
            .clone()
    };
    for (id, severity, place) in [
        ("p1", "warning", "stands before the first `##` heading, where scafld reads no criteria"),
        ("p2", "warning", "stands before the first `##` heading, where scafld reads no criteria"),
        ("o1", "warning", "stands under `## Notes`, which scafld reads no criteria from"),
        ("c1", "error", "is indented under another item above the phase's `Acceptance:` label"),
        ("a2", "warning", "is indented under criterion `a1`"),
    ] {
        let (line, said_severity, message) = said(id);
        assert_eq!((line, said_severity.as_str()), (line_of(&format!("`{id}`")), severity), "{message}");
        assert!(message.contains(place) && message.contains("never runs"), "{message}");
    }
    // The nested Command is read as a1's second one (refused), and nothing else is said.
    let last_command =
        text.lines().collect::<Vec<_>>().iter().rposition(|l| l.contains("Command: `false`")).unwrap() + 1;
    let second = format!("criterion `a1` has a second `Command` line (line {last_command})");
    assert!(found.iter().any(|(_, _, m)| m.contains(&second)), "{second}: {found:#?}");
    assert_eq!(found.len(), 6, "{found:#?}");
    // Nothing of the user's text moved or went.
    assert_eq!(std::fs::read_to_string(env.work.join(".scafld/specs/drafts/n.md")).unwrap(), text);
}

/// A checklist item whose Command is a fenced block under `- Command:` is named on its own line
/// where it is not read as a criterion, as one with the Command on its line is: a warning under
/// a section scafld reads no criteria from, an error above a phase's `Acceptance:` label, which
/// `approve` refuses. Before, neither was named, and the draft approved with a command that
/// never runs.
#[test]
fn a_stray_item_with_a_fenced_command_is_named_on_its_line() {
    let env = env();
    let fenced = |indent: &str, command: &str| {
        format!("{indent}- Command:\n{indent}  ```sh\n{indent}  {command}\n{indent}  ```\n")
    };
    let body = format!(
        "## Verification\n\n- [ ] `v1` test - says bye\n{}- a note\n  - [ ] `o1` test - nested\n{}\n## Phase 1: One\n\nObjective: x\n\nSteps:\n- [ ] `s1` test - a step\n{}\nAcceptance:\n- [ ] `a1` test - exists\n{}",
        fenced("  ", "grep -q bye greet.txt"),
        fenced("    ", "false"),
        fenced("  ", "make"),
        fenced("  ", "true"),
    );
    let text = draft("fc", &body);
    std::fs::write(env.work.join(".scafld/specs/drafts/fc.md"), &text).unwrap();
    let line_of = |needle: &str| text.lines().position(|l| l.contains(needle)).unwrap() as u64 + 1;
    let found = diagnostics(&env, "fc");
    let said: Vec<(u64, &str, &str)> = found
        .iter()
        .map(|(line, severity, m)| (*line, severity.as_str(), m.split(" has a Command but ").next().unwrap()))
        .collect();
    assert_eq!(
        said,
        [
            (line_of("`v1`"), "warning", "`v1`"),
            (line_of("`o1`"), "warning", "`o1`"),
            (line_of("`s1`"), "error", "`s1`")
        ],
        "{found:#?}"
    );
    assert!(found[0].2.contains("stands under `## Verification`") && found[0].2.contains("never runs"), "{found:#?}");
    assert!(found[2].2.contains("above the phase's `Acceptance:` label"), "{found:#?}");
    env.scafld(&["validate", "fc"]).assert_code(3);
    let approve = env.scafld(&["approve", "fc", "--reason", "t"]);
    approve.assert_code(3);
    assert!(approve.stderr.contains("`s1` has a Command but stands above"), "{}", approve.stderr);
    // Nothing of the user's text moved or went.
    assert_eq!(std::fs::read_to_string(env.work.join(".scafld/specs/drafts/fc.md")).unwrap(), text);
}

/// A checklist item with a Command nested under a definition-of-done item is named on its own
/// line by `validate`, and the item above it is not made a criterion of the nested Command:
/// approving writes nothing into the definition of done. Before, the nested item under a bullet
/// was dropped without a word and the one under `d2` ran as `d2`.
#[test]
fn a_criterion_nested_in_a_definition_of_done_is_named_on_its_line() {
    let env = env();
    let dod = "Definition of done:\n- [ ] `d2` - release notes\n  - [ ] `d3` test - nested under an item\n    - Command: `false`\n- a plain bullet\n  - [ ] `d4` test - nested under a bullet\n    - Command: `false`\n";
    let body = format!(
        "## Acceptance\n\n{dod}\nValidation:\n- [ ] `t1` test - task level\n  - Command: `true`\n\n## Phase 1: One\n\nObjective: x\n\nAcceptance:\n- [ ] `a1` test - exists\n  - Command: `true`\n"
    );
    let text = draft("dd", &body);
    std::fs::write(env.work.join(".scafld/specs/drafts/dd.md"), &text).unwrap();
    let line_of = |needle: &str| text.lines().position(|l| l.contains(needle)).unwrap() as u64 + 1;
    let found = diagnostics(&env, "dd");
    let said: Vec<(u64, &str)> = found.iter().map(|(line, severity, _)| (*line, severity.as_str())).collect();
    assert_eq!(said, [(line_of("`d3`"), "warning"), (line_of("`d4`"), "warning")], "{found:#?}");
    for ((_, _, message), id) in found.iter().zip(["d3", "d4"]) {
        let expected = format!("`{id}` has a Command but is indented under a definition-of-done item");
        assert!(message.starts_with(&expected) && message.ends_with("under `Validation:`"), "{message}");
    }
    let validate = env.scafld(&["validate", "dd", "--json"]).json();
    let criteria: Vec<&str> =
        validate["result"]["criteria"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(criteria, ["t1"], "d2 is no criterion: {validate}");
    env.scafld(&["approve", "dd", "--reason", "t"]).assert_code(0);
    let approved = std::fs::read_to_string(env.work.join(".scafld/specs/approved/dd.md")).unwrap();
    assert!(approved.contains(&format!("\n{dod}\nValidation:\n")), "{approved}");
}

/// `Dependencies:` naming a phase the spec lacks, a later phase or no phase at all is warned of
/// on its line (phases are built in the order written); an earlier one and `none` are fine.
/// Before, all of them passed validate without a word.
#[test]
fn a_dependency_on_a_missing_or_later_phase_is_warned_of() {
    let env = env();
    let phase = |n: u32, deps: &str| {
        format!(
            "## Phase {n}: P{n}\n\nDependencies: {deps}\n\nObjective: x\n\nAcceptance:\n- [ ] `a{n}` test - t\n  - Command: `true`\n\n"
        )
    };
    let body = [phase(1, "phase2, phase9"), phase(2, "Phase 1"), phase(3, "none"), phase(4, "the api")].concat();
    std::fs::write(env.work.join(".scafld/specs/drafts/d.md"), draft("d", &body)).unwrap();
    let found: Vec<(u64, String)> =
        diagnostics(&env, "d").into_iter().map(|(line, severity, m)| (line, format!("{severity}: {m}"))).collect();
    let expected = [
        (
            16,
            "warning: phase1 depends on phase2, which is not before it: phases are built in the order they are written, so move phase2 above phase1 or drop the dependency",
        ),
        (16, "warning: phase1 depends on phase9, which the spec does not have"),
        (
            46,
            "warning: phase4 depends on `the api`, which names no phase (write phase ids, `phase1, phase2`, or `none`)",
        ),
    ];
    let expected: Vec<(u64, String)> = expected.iter().map(|(l, m)| (*l, m.to_string())).collect();
    assert_eq!(found, expected);
}

/// A draft over the size `approve` takes is invalid in `validate` (an approval rule: approve
/// would refuse it), saying the limit approve holds it to. Before, it validated clean and
/// only approve refused it.
#[test]
fn a_draft_too_large_to_approve_is_refused_by_validate_first() {
    let env = env();
    let notes: String = (0..150_000).map(|i| format!("Line {i} of a long design note.\n")).collect();
    let body = format!(
        "## Summary\n\n{notes}\n## Phase 1: One\n\nObjective: x\n\nAcceptance:\n- [ ] `a1` test - t\n  - Command: `true`\n"
    );
    std::fs::write(env.work.join(".scafld/specs/drafts/big.md"), draft("big", &body)).unwrap();
    let validate = env.scafld(&["validate", "big"]);
    validate.assert_code(3);
    let over = "over the 4.0 MiB (4194304 bytes) an approved spec may have";
    assert!(validate.stdout.contains(over) || validate.stderr.contains(over), "{validate:?}");
    let approve = env.scafld(&["approve", "big", "--reason", "t"]);
    approve.assert_code(3);
    assert!(approve.stderr.contains(over), "{}", approve.stderr);
}

/// Front matter end-of-line comments are YAML comments: `status: draft  # note` is a draft,
/// `"2.0"  # grammar` is 2.0, and the runner's write of a status keeps the comment. Before, the
/// comment was read as part of the value and the status refused.
#[test]
fn front_matter_comments_are_comments_and_a_write_keeps_them() {
    let env = env();
    let text = draft("y", "## Phase 1: One\n\nObjective: x\n\nAcceptance:\n- [ ] `a1` test - t\n  - Command: `true`\n")
        .replace("spec_version: '2.0'\n", "spec_version: \"2.0\"  # the grammar\n")
        .replace("status: draft\n", "status: draft        # still being written\n")
        .replace("harden_status: not_run\n", "harden_status: not_run # nobody yet\nowner: 'a # b'\n");
    std::fs::write(env.work.join(".scafld/specs/drafts/y.md"), &text).unwrap();
    assert_eq!(diagnostics(&env, "y"), []);
    let status = env.scafld(&["status", "y", "--json"]).json()["result"].clone();
    assert_eq!((status["status"].as_str(), status["harden_status"].as_str()), (Some("draft"), Some("not_run")));
    env.scafld(&["approve", "y", "--reason", "t"]).assert_code(0);
    let written = std::fs::read_to_string(env.work.join(".scafld/specs/approved/y.md")).unwrap();
    assert!(written.contains("\nstatus: approved        # still being written\n"), "{written}");
    assert!(written.contains("\nspec_version: \"2.0\"  # the grammar\n") && written.contains("\nowner: 'a # b'\n"));
}

/// A spec with one byte that is not UTF-8 is refused naming the line and column of that byte
/// (the structured diagnostic carries that line too, not 0, the file as a whole), and `status`
/// says the file cannot be read rather than print an empty status and title.
#[test]
fn a_byte_that_is_not_utf8_is_refused_with_its_line() {
    let env = env();
    let mut bytes = draft("l", "## Summary\n\nThe op").into_bytes();
    bytes.extend_from_slice(b"\xe9rator.\n");
    std::fs::write(env.work.join(".scafld/specs/drafts/l.md"), bytes).unwrap();
    let found = diagnostics(&env, "l");
    let expected =
        "the spec file is not valid UTF-8: line 16, column 7 holds byte 0xE9 (byte offset 141); save the file as UTF-8";
    assert!(found.iter().any(|(line, _, m)| m == expected && *line == 16), "{found:#?}");
    let status = env.scafld(&["status", "l"]);
    status.assert_code(3);
    assert!(status.stdout.starts_with("l: unreadable - the spec file cannot be read"), "{}", status.stdout);
}

/// A spec damaged between runs (one byte that is not UTF-8) leaves `status` the ledger's sketch,
/// with no scope: its recorded evidence is said to be unjudged until the file reads again, and
/// no file is named as changed. Before, the empty scope was read as the whole tree, and the
/// passed criterion was stale because README.md and `.scafld`'s own files were "added".
#[test]
fn evidence_of_a_spec_that_does_not_read_is_unjudged_never_stale_by_the_whole_tree() {
    let env = env();
    std::fs::write(env.work.join("README.md"), "base\n").unwrap();
    scafld_tests::git(&env.work, &["add", "README.md"]);
    scafld_tests::git(&env.work, &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"]);
    let body = "## Phase 1: Write\n\nObjective: x\n\nAcceptance:\n- [ ] `d1a` test - has hello\n  - Command: `grep -q hello greet.txt`\n";
    std::fs::write(env.work.join(".scafld/specs/drafts/d.md"), draft("d", body)).unwrap();
    env.scafld(&["approve", "d", "--reason", "t"]).assert_code(0);
    env.scafld(&["build", "d"]).assert_code(0); // opens the phase
    env.scafld(&["build", "d"]).assert_code(0); // runs its criterion
    let path = env.work.join(".scafld/specs/active/d.md");
    let before = env.scafld(&["status", "d", "--json"]).json()["result"].clone();
    assert_eq!(before["criteria"][0]["status"], "pass", "{before}");
    assert!(before["stale_changes"].as_array().is_none_or(Vec::is_empty), "{before}");

    let mut bytes = b"\xce".to_vec();
    bytes.extend(std::fs::read(&path).unwrap());
    std::fs::write(&path, bytes).unwrap();
    let status = env.scafld(&["status", "d", "--json"]);
    status.assert_code(3);
    let s = status.json()["result"].clone();
    assert_eq!(s["next_command"], "scafld validate d", "{s}");
    assert!(s["stale_changes"].as_array().is_none_or(Vec::is_empty), "nothing in scope changed: {s}");
    let d1a = s["criteria"].as_array().unwrap().iter().find(|c| c["id"] == "d1a").unwrap().clone();
    let reason = d1a["stale_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("the spec file does not read") && reason.contains("until it reads again"), "{d1a}");
    let text = env.scafld(&["status", "d"]).stdout;
    assert!(!text.contains("(added)") && !text.contains("README.md"), "{text}");
}

/// A spec damaged after approval (one byte that is not UTF-8) shows in `status` what its
/// approved contract pins: both phases in order and every criterion in its place, one that
/// never ran by its id alone (no command, no kind: the approval pins it by digest), the
/// title left empty (no ledger entry holds it), the file's error said. Before, only what the
/// ledger ran was shown: a single phase of 0/0 criteria, the second phase and every criterion
/// gone. `handoff` says a criterion known by its id alone is not known, never a manual one.
#[test]
fn status_of_a_spec_that_does_not_read_shows_the_phases_and_criteria_its_approval_pins() {
    let env = env();
    let body = "## Phase 1: Write\n\nObjective: x\n\nAcceptance:\n- [ ] `a1` test - one\n  - Command: `true`\n\n\
                ## Phase 2: Check\n\nObjective: y\n\nAcceptance:\n- [ ] `b1` test - two\n  - Command: `true`\n\
                - [ ] `b2` test - three\n  - Command: `true`\n";
    std::fs::write(env.work.join(".scafld/specs/drafts/p.md"), draft("p", body)).unwrap();
    env.scafld(&["approve", "p", "--reason", "t"]).assert_code(0);
    env.scafld(&["build", "p"]).assert_code(0); // opens phase 1
    let path = env.work.join(".scafld/specs/active/p.md");
    let mut bytes = b"\xce".to_vec();
    bytes.extend(std::fs::read(&path).unwrap());
    std::fs::write(&path, bytes).unwrap();

    let status = env.scafld(&["status", "p", "--json"]);
    status.assert_code(3);
    let s = status.json()["result"].clone();
    let phases: Vec<_> = s["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap().to_string(), p["criteria_total"].as_u64().unwrap()))
        .collect();
    assert_eq!(phases, [("phase1".to_string(), 1), ("phase2".to_string(), 2)], "{s}");
    let criteria: Vec<_> = s["criteria"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["id"].as_str().unwrap(),
                c["phase_id"].as_str().unwrap(),
                c["command"].as_str().unwrap(),
                c["expected_kind"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(criteria, [("a1", "phase1", "", ""), ("b1", "phase2", "", ""), ("b2", "phase2", "", "")], "{s}");
    assert_eq!((s["title"].as_str(), s["counts"]["phases_total"].as_u64()), (Some(""), Some(2)), "{s}");
    let said =
        s["errors"].as_array().unwrap().iter().any(|e| e["message"].as_str().unwrap().contains("not valid UTF-8"));
    assert!(said, "{s}");
    let handoff = env.scafld(&["handoff", "p"]).stdout;
    assert!(
        handoff.contains("- `a1`\n  - Not known: the spec file does not read") && !handoff.contains("`manual`"),
        "{handoff}"
    );
}

/// A spec may have at most 10 000 acceptance criteria (real ones have a few hundred): an 8 MiB
/// one with 190 000 one-line criteria took the daemon past 370 MB on `validate` and `approve`.
/// One more is a structural error at the first criterion past the limit, naming the limit and
/// the count, which `validate` reports and `approve` refuses alike; the criteria past it are
/// counted, never read.
#[test]
fn a_spec_with_more_criteria_than_the_limit_is_refused_naming_the_limit_and_the_count() {
    let env = env();
    let criteria =
        |n: usize| -> String { (0..n).map(|i| format!("- [ ] `c{i}` test - c\n  - Command: `true`\n")).collect() };
    let body = |n: usize| format!("## Phase 1: One\n\nObjective: x\n\nAcceptance:\n{}", criteria(n));
    let over_limit = |found: &[(u64, String, String)]| {
        found.iter().filter(|(_, _, m)| m.contains("acceptance criteria, over the")).cloned().collect::<Vec<_>>()
    };
    std::fs::write(env.work.join(".scafld/specs/drafts/most.md"), draft("most", &body(10_000))).unwrap();
    assert_eq!(over_limit(&diagnostics(&env, "most")), [], "10 000 criteria are within the limit");

    std::fs::write(env.work.join(".scafld/specs/drafts/many.md"), draft("many", &body(10_002))).unwrap();
    let expected = "the spec has 10002 acceptance criteria, over the 10000 one spec may have (the criteria from this line on are not read); split the task into smaller ones";
    // The body's first criterion is on line 19, two lines each: the 10 001st is on line 20 019.
    assert_eq!(over_limit(&diagnostics(&env, "many")), [(20_019, "error".to_string(), expected.to_string())]);
    let approve = env.scafld(&["approve", "many", "--reason", "r"]);
    assert_ne!(approve.code, 0, "{approve:?}");
    assert!(approve.stderr.contains("10002 acceptance criteria, over the 10000"), "{}", approve.stderr);
}

/// The one diagnostic `found` has on `line`, as (severity, message).
fn on_line(found: &[(u64, String, String)], line: u64) -> (&str, &str) {
    let at: Vec<_> = found.iter().filter(|(l, _, _)| *l == line).collect();
    assert_eq!(at.len(), 1, "one diagnostic on line {line}: {found:#?}");
    (at[0].1.as_str(), at[0].2.as_str())
}

/// A phase heading one level too deep (`### Phase 2: Deploy`) is not a phase, as the original
/// reads it: it is warned of on its line, saying whose its criteria are and how to write it.
/// Before, validate said the spec was valid and folded the criterion into phase 1 unsaid.
#[test]
fn a_phase_heading_at_another_level_is_warned_of_with_its_line() {
    let env = env();
    let body = "## Phase 1: Build\n\nAcceptance:\n- [ ] `a1` test - builds\n  - Command: `true`\n\n### Phase 2: Deploy\n\nAcceptance:\n- [ ] `d1` test - deployed\n  - Command: `true`\n\n## Harden Rounds\n\n### Phase 1: not a phase either, a round\n";
    std::fs::write(env.work.join(".scafld/specs/drafts/h.md"), draft("h", body)).unwrap();
    let found = diagnostics(&env, "h");
    assert_eq!(found.len(), 1, "{found:#?}");
    let (severity, message) = on_line(&found, 20);
    assert_eq!(severity, "warning", "{message}");
    assert!(
        message.starts_with("`### Phase 2: Deploy` is a level-3 heading, so it is not a phase")
            && message.contains("read as phase1's, as are its criteria")
            && message.ends_with("write it `## Phase 2: Deploy` to make it a phase"),
        "{message}"
    );
}

/// A phase's second `Status:` line is warned of on its line, as a criterion's is. Before, it
/// went unsaid, and after a build the phase read `completed` and `pending` at once.
#[test]
fn a_phase_status_written_twice_is_warned_of() {
    let env = env();
    let body = "## Phase 1: One\n\nStatus: pending\nStatus: pending\n\nAcceptance:\n- [ ] `a1` test - ok\n  - Command: `true`\n";
    std::fs::write(env.work.join(".scafld/specs/drafts/s.md"), draft("s", body)).unwrap();
    let found = diagnostics(&env, "s");
    assert_eq!(found.len(), 1, "{found:#?}");
    let (severity, message) = on_line(&found, 17);
    assert_eq!(severity, "warning", "{message}");
    assert!(message.starts_with("phase1 has a second `Status:` line (the first is on line 16)"), "{message}");
}

/// A criterion's detail written with another list marker (`* Command:`) is named on its line
/// with the form to write. Before, validate said only that the criterion had no Command.
#[test]
fn a_detail_written_with_a_star_is_named_with_its_line() {
    let env = env();
    let body = "## Phase 1: One\n\nAcceptance:\n- [ ] `a1` test - exists\n  * Command: `test -f greet.txt`\n  + Cwd: sub\n  * a note for people\n";
    std::fs::write(env.work.join(".scafld/specs/drafts/c.md"), draft("c", body)).unwrap();
    let found = diagnostics(&env, "c");
    let (severity, message) = on_line(&found, 18);
    assert_eq!(severity, "warning", "{message}");
    assert!(
        message.starts_with("`* Command:` is not read as a detail of criterion `a1`")
            && message.ends_with("write it `- Command:`"),
        "{message}"
    );
    assert!(on_line(&found, 19).1.starts_with("`+ Cwd:` is not read"), "{found:#?}");
    assert!(found.iter().all(|(line, _, _)| *line != 20), "a plain note is prose: {found:#?}");
    assert!(found.iter().any(|(line, _, m)| *line == 17 && m.contains("has no Command")), "{found:#?}");
}

/// A duplicate phase heading names the first one's line and what to do; a fence never closed
/// says how to close it; and `approve` quotes its first error with the line at fault (a
/// duplicate criterion id's, not the first copy's its message names).
#[test]
fn duplicate_and_unclosed_structure_is_said_with_both_lines_and_the_fix() {
    let env = env();
    let phase =
        |n: &str, id: &str| format!("## Phase {n}\n\nAcceptance:\n- [ ] `{id}` test - ok\n  - Command: `true`\n\n");
    let body = format!("{}{}", phase("1: One", "a1"), phase("1: Again", "a2"));
    std::fs::write(env.work.join(".scafld/specs/drafts/d.md"), draft("d", &body)).unwrap();
    let found = diagnostics(&env, "d");
    let (severity, message) = on_line(&found, 20);
    assert_eq!(severity, "error", "{message}");
    assert!(
        message.starts_with(
            "duplicate phase heading: phase1 is declared twice, first on line 14; give this phase another number"
        ),
        "{message}"
    );

    let body = format!("{}Notes:\n\n~~~~sh\necho open\n", phase("1: One", "a1"));
    std::fs::write(env.work.join(".scafld/specs/drafts/f.md"), draft("f", &body)).unwrap();
    let found = diagnostics(&env, "f");
    let (_, message) = on_line(&found, 22);
    assert!(
        message.starts_with("code fence is never closed")
            && message.contains("close it with a line of ~~~~ where the code ends"),
        "{message}"
    );

    let body = format!("{}{}", phase("1: One", "a1"), phase("2: Two", "a1"));
    std::fs::write(env.work.join(".scafld/specs/drafts/i.md"), draft("i", &body)).unwrap();
    let found = diagnostics(&env, "i");
    let (_, message) = on_line(&found, 23);
    assert!(message.starts_with("criterion id `a1` is already used on line 17"), "{message}");
    let approve = env.scafld(&["approve", "i", "--reason", "t"]);
    approve.assert_code(3);
    assert!(
        approve.stderr.contains("first: line 23: criterion id `a1` is already used on line 17"),
        "{}",
        approve.stderr
    );
}

/// A scope entry approval refuses (outside the workspace, git's own store) is said on the line
/// that declares it. Before, it had no line.
#[test]
fn a_scope_entry_error_names_its_line() {
    let env = env();
    let body = "## Touchpoints\n\n- `../outside.txt` - outside the workspace\n- `.git/config` - git's own file\n\n## Phase 1: One\n\nAcceptance:\n- [ ] `a1` test - ok\n  - Command: `true`\n";
    std::fs::write(env.work.join(".scafld/specs/drafts/o.md"), draft("o", body)).unwrap();
    let found = diagnostics(&env, "o");
    assert_eq!(found.len(), 2, "{found:#?}");
    let (severity, message) = on_line(&found, 16);
    assert!(severity == "error" && message.starts_with("scope entry `../outside.txt` is outside"), "{message}");
    let (severity, message) = on_line(&found, 17);
    assert!(severity == "error" && message.starts_with("scope entry `.git/config` names git's own store"), "{message}");
    let approve = env.scafld(&["approve", "o", "--reason", "t"]);
    approve.assert_code(3);
    assert!(approve.stderr.contains("cannot approve o: line 16: scope entry"), "{}", approve.stderr);
}

/// A hand edit that gives an active spec a duplicate criterion id: `status` says the spec
/// cannot be projected because of that error, by its line, and counts the errors as
/// `validate` does. Before, it said the file did not read as the task's spec and counted that
/// note as a second error.
#[test]
fn status_names_the_error_that_stops_a_projection_and_counts_as_validate() {
    let env = env();
    let body = "## Phase 1: One\n\nAcceptance:\n- [ ] `a1` test - ok\n  - Command: `true`\n- [ ] `a2` test - ok\n  - Command: `true`\n";
    std::fs::write(env.work.join(".scafld/specs/drafts/p.md"), draft("p", body)).unwrap();
    env.scafld(&["approve", "p", "--reason", "t"]).assert_code(0);
    env.scafld(&["build", "p"]).assert_code(0);
    let path = env.work.join(".scafld/specs/active/p.md");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("`a2`", "`a1`")).unwrap();

    let validate = env.scafld(&["validate", "p"]);
    validate.assert_code(3);
    assert!(validate.stderr.contains("the spec has 1 error(s)"), "{validate:?}");
    let status = env.scafld(&["status", "p"]);
    status.assert_code(3);
    assert!(status.stderr.contains("the spec has 1 error(s)") && !status.stdout.contains("2 error(s)"), "{status:?}");
    let status = env.scafld(&["status", "p", "--json"]).json();
    let diagnostics = status["error"]["details"]["diagnostics"].as_array().unwrap().clone();
    let errors = diagnostics.iter().filter(|d| d["severity"] == "error").count();
    assert_eq!(errors, 1, "{status}");
    let note = diagnostics[0]["message"].as_str().unwrap_or_default();
    assert_eq!(diagnostics[0]["severity"], "warning", "{status}");
    assert!(
        note.starts_with("the spec cannot be projected: line ")
            && note.contains(": criterion id `a1` is already used on line")
            && note.contains("scafld reconcile p")
            && !note.contains("does not read as the spec"),
        "{note}"
    );
}
