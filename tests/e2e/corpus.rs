//! The spec corpus (`tests/fixtures/specs/`, one file per form real workspaces hold) through
//! the real binaries: every spec lists, validates, shows its status and handoff; a build of a
//! real-form spec changes only runner-owned lines and runs a fenced multi-line command whole.

use std::path::PathBuf;

use scafld_tests::{TestEnv, git};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/specs")
}

/// `(fixture file, task id, folder under .scafld/specs)`.
const CORPUS: [(&str, &str, &str); 4] = [
    ("go-full.md", "error-envelope", "active"),
    ("python-era.md", "legacy-importer", "active"),
    ("runtime-rigor-1.7.1.md", "runtime-rigor-1.7.1", "archive/2026-03"),
    ("fenced-command.md", "fenced-command", "drafts"),
];

fn workspace() -> TestEnv {
    let env = TestEnv::new();
    git(&env.work, &["init", "-q"]);
    env.init();
    for (file, task, folder) in CORPUS {
        let dir = env.work.join(".scafld/specs").join(folder);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(fixtures().join(file), dir.join(format!("{task}.md"))).unwrap();
    }
    // The original tool's ledger of the active Go-era task, as it writes it.
    let runs = env.work.join(".scafld/runs/error-envelope");
    std::fs::create_dir_all(&runs).unwrap();
    std::fs::copy(fixtures().join("go-full.session.json"), runs.join("session.json")).unwrap();
    env
}

/// Lines of `after` that are not in `before` (multiset difference), criterion checkboxes
/// (runner-owned) read as unchecked.
fn added_lines(before: &str, after: &str) -> Vec<String> {
    let unchecked = |text: &str| text.replace("\n- [x] `", "\n- [ ] `");
    let (before, after) = (unchecked(before), unchecked(after));
    let mut pool: Vec<&str> = before.lines().collect();
    after
        .lines()
        .filter(|line| match pool.iter().position(|l| l == line) {
            Some(i) => {
                pool.swap_remove(i);
                false
            }
            None => true,
        })
        .map(str::to_string)
        .collect()
}

fn is_runner_line(line: &str) -> bool {
    let t = line.trim_start().trim_start_matches("- ");
    let keys = [
        "status:",
        "harden_status:",
        "updated:",
        "Status:",
        "Reason:",
        "Blockers:",
        "Evidence:",
        "Source event:",
        "Current phase:",
        "Next:",
        "Allowed follow-up command:",
        "Latest runner update:",
        "Review gate:",
        "## Current State",
    ];
    line.trim().is_empty() || keys.iter().any(|k| t.starts_with(k)) || line.starts_with("- [x] `")
}

#[test]
fn every_spec_of_a_real_workspace_reads() {
    let env = workspace();
    let all = env.scafld(&["validate", "--all", "--json"]);
    all.assert_code(0);
    let specs = all.json()["result"]["specs"].as_array().unwrap().clone();
    assert_eq!(specs.len(), CORPUS.len(), "{specs:?}");
    for spec in &specs {
        assert_eq!(spec["valid"], true, "{spec}");
    }
    let legacy = specs.iter().find(|s| s["task_id"] == "legacy-importer").unwrap();
    assert_eq!(legacy["status"], "active");
    let warnings = legacy["diagnostics"].to_string();
    for expected in ["Python scafld name", "criterion `v1` has no title", "`Expected kind: none`", "nested YAML"] {
        assert!(warnings.contains(expected), "{expected}: {warnings}");
    }
    let human = env.scafld(&["validate", "--all"]);
    human.assert_code(0);
    assert!(human.stdout.contains("4 spec(s), 0 invalid"), "{}", human.stdout);

    let list = env.scafld(&["list", "--json"]).json();
    let tasks = list["result"]["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), CORPUS.len());
    assert!(tasks.iter().all(|t| t.get("error").is_none()), "{tasks:?}");
    // Listed by lifecycle status, then by id.
    let rank = |t: &serde_json::Value| {
        scafld_protocol::vocab::Status::ALL.iter().position(|s| t["status"] == s.as_str()).unwrap()
    };
    let order: Vec<_> = tasks.iter().map(|t| (rank(t), t["task_id"].as_str().unwrap())).collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted);
    assert_eq!(order.iter().map(|(_, id)| *id).collect::<Vec<_>>()[..2], ["fenced-command", "error-envelope"]);
    for (_, task, _) in CORPUS {
        env.scafld(&["status", task, "--json"]).assert_code(0);
        let handoff = env.scafld(&["handoff", task]);
        handoff.assert_code(0);
        assert!(handoff.stdout.starts_with("# Handoff:"), "{task}: {}", handoff.stdout);
    }
    let status = env.scafld(&["status", "runtime-rigor-1.7.1", "--json"]).json();
    assert_eq!(status["result"]["status"], "completed");
}

#[test]
fn a_broken_spec_is_reported_beside_the_others() {
    let env = workspace();
    std::fs::write(
        env.work.join(".scafld/specs/drafts/cut-command.md"),
        "---\nspec_version: '2.0'\ntask_id: cut-command\nstatus: draft\n---\n# Cut\n## Phase 1: A\nAcceptance:\n- [ ] `a` test - x\n  - Command: `make build &&\n    make test`\n",
    )
    .unwrap();
    let all = env.scafld(&["validate", "--all", "--json"]);
    all.assert_code(3);
    let doc = all.json();
    assert_eq!(doc["error"]["message"], "1 of 5 spec(s) have errors: cut-command");
    let cut =
        doc["result"]["specs"].as_array().unwrap().iter().find(|s| s["task_id"] == "cut-command").unwrap().clone();
    assert_eq!(cut["diagnostics"][0]["line"], 10, "{cut}");
    assert!(cut["diagnostics"][0]["message"].as_str().unwrap().contains("opens a backtick it never closes"));
}

#[test]
fn a_build_changes_only_runner_lines_and_runs_fenced_commands_whole() {
    let env = workspace();
    let original = std::fs::read_to_string(fixtures().join("fenced-command.md")).unwrap();
    env.scafld(&["approve", "fenced-command", "--reason", "corpus test"]).assert_code(0);
    env.scafld(&["build", "fenced-command"]).assert_code(0);
    env.scafld(&["build", "fenced-command"]).assert_code(0);
    let status = env.scafld(&["status", "fenced-command", "--json"]).json();
    assert_eq!(status["result"]["status"], "review", "{status}");
    let ac1 = &status["result"]["criteria"][0];
    assert_eq!(ac1["status"], "pass", "{ac1}");
    assert_eq!(ac1["command"], "test -d . &&\n  printf 'line one\\n'\necho \"two\"");
    assert!(ac1["output_excerpt"].as_str().unwrap().contains("line one\ntwo"), "{ac1}");

    let written = std::fs::read_to_string(env.work.join(".scafld/specs/active/fenced-command.md")).unwrap();
    for line in added_lines(&original, &written) {
        assert!(is_runner_line(&line), "a non-runner line changed: {line:?}\n{written}");
    }
    for line in added_lines(&written, &original) {
        assert!(is_runner_line(&line) || line.starts_with("- [ ] `"), "a line was lost: {line:?}\n{written}");
    }
    assert!(written.contains("    ```sh\n    test -d . &&\n      printf 'line one\\n'\n    echo \"two\"\n    ```\n"));
}

#[test]
fn a_build_of_the_originals_full_layout_keeps_its_prose_in_place() {
    let env = workspace();
    let original = std::fs::read_to_string(fixtures().join("go-full.md")).unwrap();
    // The imported evidence of phase 1 was never bound to content, so it runs again; its
    // commands do not exist here: the step blocks, which writes evidence.
    let run = env.scafld(&["build", "error-envelope", "--json"]);
    assert_eq!(run.code, 3, "{}{}", run.stdout, run.stderr);
    let written = std::fs::read_to_string(env.work.join(".scafld/specs/active/error-envelope.md")).unwrap();
    for line in added_lines(&original, &written) {
        assert!(is_runner_line(&line), "a non-runner line changed: {line:?}\n{written}");
    }
    let kept = |text: &str| {
        text.replace("\n- [x] `", "\n- [ ] `")
            .lines()
            .filter(|l| !is_runner_line(l))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(kept(&original), kept(&written), "prose moved or vanished:\n{written}");
    // The author's note still follows phase 1's last criterion, where it was written.
    let lines: Vec<&str> = written.lines().collect();
    let note = lines.iter().position(|l| l.starts_with("A note the author left")).expect("the note stays");
    assert!(lines[note - 2].starts_with("  - Source event: entry-"), "{written}");
    assert!(
        lines[..note].iter().any(|l| l.starts_with("## Phase 1"))
            && !lines[..note].iter().any(|l| l.starts_with("## Phase 2"))
    );
}
