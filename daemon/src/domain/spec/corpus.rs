//! The spec corpus (`tests/fixtures/specs/`): one file per form real workspaces hold (the Go
//! tool's full layout, Python 2.x forms, dotted ids, fenced commands), each read, validated
//! and projected here; the end-to-end tests run the same files through the binaries.

use super::project::project;
use super::*;

macro_rules! fixture {
    ($name:literal) => {
        ($name, include_str!(concat!("../../../../tests/fixtures/specs/", $name)))
    };
}

pub(super) const CORPUS: [(&str, &str); 4] = [
    fixture!("go-full.md"),
    fixture!("python-era.md"),
    fixture!("runtime-rigor-1.7.1.md"),
    fixture!("fenced-command.md"),
];

fn text(name: &str) -> &'static str {
    CORPUS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t).expect("fixture")
}

/// Phase ids with their criterion ids.
type PhaseShape = Vec<(String, Vec<String>)>;

/// Phase ids with their criterion ids, then the task-level criterion ids.
fn shape(spec: &Spec) -> (PhaseShape, Vec<String>) {
    let ids = |cs: &[Criterion]| cs.iter().map(|c| c.id.clone()).collect::<Vec<_>>();
    (spec.phases.iter().map(|p| (p.id(), ids(&p.criteria))).collect(), ids(&spec.acceptance.criteria))
}

fn owned(v: &[(&str, &[&str])]) -> PhaseShape {
    v.iter().map(|(p, cs)| (p.to_string(), cs.iter().map(|c| c.to_string()).collect())).collect()
}

#[test]
fn every_form_reads_to_the_phases_and_criteria_a_person_sees() {
    let cases: [(&str, PhaseShape, Vec<&str>); 4] = [
        (
            "go-full.md",
            owned(&[("phase1", &["ac1_1", "ac1_2"]), ("phase2", &["ac2_1", "ac2_2"])]),
            vec!["final-typecheck"],
        ),
        ("python-era.md", owned(&[("phase1", &["v1", "v2", "v3"]), ("phase2", &["v4"])]), vec![]),
        ("runtime-rigor-1.7.1.md", owned(&[("phase1", &["p1"])]), vec!["dod2", "final"]),
        ("fenced-command.md", owned(&[("phase1", &["ac1", "ac2"])]), vec![]),
    ];
    for (name, phases, task_level) in cases {
        let parsed = parse(text(name));
        assert!(parsed.is_valid(), "{name}: {:#?}", parsed.diagnostics);
        let (found_phases, found_task) = shape(&parsed.spec);
        assert_eq!(found_phases, phases, "{name}");
        assert_eq!(found_task, task_level, "{name}");
    }
}

#[test]
fn none_means_unset_everywhere() {
    let spec = parse(text("python-era.md")).spec;
    assert_eq!(spec.status(), Some(crate::domain::lifecycle::Status::Active));
    let v1 = &spec.phases[0].criteria[0];
    assert_eq!((v1.kind.as_str(), v1.title.as_str(), v1.display_title()), ("compile", "", "compile"));
    assert_eq!((v1.timeout_seconds.as_str(), v1.cwd.as_str()), ("", ""));
    let v2 = &spec.phases[0].criteria[1];
    assert_eq!(
        (v2.kind.as_str(), v2.expected_kind.as_str(), v2.effective_kind()),
        ("focused-tests", "", "exit_code_zero")
    );
    assert_eq!(v2.timeout_seconds, "120");
    let v3 = &spec.phases[0].criteria[2];
    assert_eq!((v3.command.as_str(), v3.effective_kind()), ("", "manual"));
    let v4 = &spec.phases[1].criteria[0];
    assert_eq!((v4.kind.as_str(), v4.title.as_str()), ("test", "Loader tests pass"));
    assert_eq!(spec.current_state.next, "none");
    assert_eq!(spec.phases[0].objective, "Parse the CSV dialect the old exporter wrote.");
    // Keys the runner does not interpret are kept with the criterion, in order.
    let keys: Vec<&str> = v1.other.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["Result", "Last attempt", "Checked at"]);
}

#[test]
fn every_unusual_form_is_reported_with_its_line() {
    let parsed = parse(text("python-era.md"));
    let warned = |line: usize, needle: &str| {
        parsed
            .diagnostics
            .iter()
            .any(|d| d.line == line && d.severity == Severity::Warning && d.message.contains(needle))
    };
    assert!(warned(6, "status `in_progress` is a Python scafld name"), "{:#?}", parsed.diagnostics);
    assert!(warned(10, "nested YAML"), "{:#?}", parsed.diagnostics);
    assert!(warned(46, "criterion `v1` has no title"), "{:#?}", parsed.diagnostics);
    assert!(warned(56, "`Expected kind: none`"), "{:#?}", parsed.diagnostics);
    assert!(warned(75, "instead of ` - `"), "{:#?}", parsed.diagnostics);
}

#[test]
fn archived_and_dotted_specs_are_never_invalid_for_rules_added_later() {
    let parsed = parse(text("runtime-rigor-1.7.1.md"));
    assert!(parsed.is_valid(), "{:#?}", parsed.diagnostics);
    assert!(parsed.diagnostics.iter().any(|d| d.message.contains("phase1 has only manual acceptance criteria")));
    assert_eq!(parsed.spec.front.task_id, "runtime-rigor-1.7.1");
    assert_eq!(parsed.spec.acceptance.definition_of_done, ["- [x] `dod1` Release notes published"]);
}

#[test]
fn projections_of_the_corpus_touch_only_runner_lines() {
    for (name, original) in CORPUS {
        for text in [original.to_string(), original.replace('\n', "\r\n"), format!("\u{feff}{original}")] {
            let parsed = parse(&text);
            let boxed = super::tests::boxes_as_status(&text);
            assert_eq!(
                project(&text, &parsed.spec).unwrap(),
                boxed,
                "{name}: an unchanged model rewrites nothing but checkboxes"
            );
            let mut next = parsed.spec.clone();
            next.front.status = "blocked".into();
            next.current_state.status = "blocked".into();
            next.front.updated = "2026-11-24T00:00:00Z".into();
            next.current_state.reason = "phase phase1 acceptance failed".into();
            next.current_state.blockers = "`x` failed".into();
            for phase in &mut next.phases {
                phase.status = "blocked".into();
                for c in &mut phase.criteria {
                    c.status = "fail".into();
                    c.evidence = "exit code was 1".into();
                    c.source_event = "entry-42".into();
                }
            }
            let written = project(&text, &next).unwrap();
            let reread = parse(&written);
            assert_eq!(shape(&reread.spec), shape(&parsed.spec), "{name}");
            assert!(reread.spec.phases.iter().all(|p| p.status == "blocked"), "{name}");
            assert!(
                reread
                    .spec
                    .phases
                    .iter()
                    .flat_map(|p| &p.criteria)
                    .all(|c| c.status == "fail" && c.source_event == "entry-42"),
                "{name}"
            );
            assert_eq!(project(&written, &next).unwrap(), written, "{name}: a second projection changes nothing");
            let changed = changed_lines(&text, &written);
            for line in &changed {
                assert!(is_runner_line(line), "{name}: a non-runner line changed: {line:?}\n{written}");
            }
        }
    }
}

/// Lines of `after` that are not in `before` (a multiset difference, order ignored).
fn changed_lines(before: &str, after: &str) -> Vec<String> {
    let mut pool: Vec<&str> = before.lines().collect();
    let mut out = Vec::new();
    for line in after.lines() {
        match pool.iter().position(|l| *l == line) {
            Some(i) => {
                pool.swap_remove(i);
            }
            None => out.push(line.to_string()),
        }
    }
    out
}

fn is_runner_line(line: &str) -> bool {
    let t = line.trim_start().trim_start_matches("- ");
    let runner_keys = [
        "status:",
        "updated:",
        "Status:",
        "Reason:",
        "Blockers:",
        "Evidence:",
        "Source event:",
        "Result:",
        "Checked at:",
        "Current phase:",
        "Next:",
        "Allowed follow-up command:",
        "Latest runner update:",
        "Review gate:",
        "## Current State",
    ];
    line.trim().is_empty() || runner_keys.iter().any(|k| t.starts_with(k)) || line.starts_with("- [ ] `")
}
