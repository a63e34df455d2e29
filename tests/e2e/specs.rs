//! Specs through the real binaries: plan, validate, status, list, harden, handoff, report,
//! reconcile, the live index and task-id validation.

use std::collections::BTreeMap;
use std::time::Instant;

use scafld_tests::{Run, TestEnv, tree};
use serde_json::{Value, json};

/// A valid two-phase spec with a fenced block that contains `##` headings.
pub fn spec_text(task_id: &str, status: &str) -> String {
    format!(
        "---
spec_version: '2.0'
task_id: {task_id}
created: '2026-05-15T09:00:00Z'
updated: '2026-05-15T09:00:00Z'
status: {status}
harden_status: not_run
size: small
risk_level: low
---

# Task {task_id} – ünïcödé

## Current State

Status: {status}
Current phase: none
Next: approve
Reason: written by hand
Blockers: none
Allowed follow-up command: `scafld approve {task_id}`
Latest runner update: none
Review gate: not_started

## Summary

Prose   with  odd spacing stays.

```sh
## not a heading
- [ ] `not-a-criterion` test - inside a fence
```

## Scope

- `src/lib.rs` - the code.

## Phase 1: First

Status: pending
Dependencies: none

Objective: Do the first thing.

Changes:
- `src/lib.rs` - add it.

Acceptance:
- [ ] `ac1_1` test - first works
  - Command: `true`
  - Expected kind: `exit_code_zero`

## Phase 2: Second

Status: pending
Dependencies: phase1

Objective: Do the second thing.

Changes:
- `README.md` - document it.

Acceptance:
- [ ] `ac2_1` test - second works
  - Command: `test -f README.md`
- [ ] `ac2_2` boundary - no debug prints
  - Command: `grep -rn DEBUG src || true`
  - Expected kind: `exit_code_zero`
"
    )
}

pub fn write_spec(env: &TestEnv, folder: &str, task_id: &str, text: &str) -> std::path::PathBuf {
    let path = env.work.join(".scafld/specs").join(folder).join(format!("{task_id}.md"));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    path
}

fn root(env: &TestEnv) -> String {
    env.work.canonicalize().unwrap().display().to_string()
}

#[test]
fn plan_creates_a_draft_that_validates_once_filled_and_never_overwrites() {
    let env = TestEnv::new();
    env.init();
    let run = env.scafld(&["plan", "greet", "--title", "Greeting", "--size", "small", "--risk", "low", "--json"]);
    run.assert_code(0);
    let result = &run.json()["result"];
    assert_eq!(result["path"], ".scafld/specs/drafts/greet.md");
    let path = env.work.join(".scafld/specs/drafts/greet.md");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("size: small") && text.contains("# Greeting"));

    let run = env.scafld(&["validate", "greet", "--json"]);
    run.assert_code(3);
    let envelope = run.json();
    assert_eq!(envelope["ok"], false);
    assert_eq!(envelope["error"]["code"], "validation_failed");
    // Errors are the placeholders; the placeholder paths in Scope and Changes also draw a
    // warning that nothing is there yet.
    let diagnostics: Vec<&serde_json::Value> =
        envelope["result"]["diagnostics"].as_array().unwrap().iter().filter(|d| d["severity"] == "error").collect();
    assert!(!diagnostics.is_empty());
    assert!(diagnostics.iter().all(|d| d["message"].as_str().unwrap().contains("placeholder")), "{diagnostics:?}");
    assert!(diagnostics.iter().all(|d| d["line"].as_u64().unwrap() > 0));

    // Fill every TODO: the spec validates.
    let filled: String = text
        .lines()
        .map(|l| l.replace("TODO: the command that proves this phase works", "true").replace("TODO: ", ""))
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&path, filled + "\n").unwrap();
    let run = env.scafld(&["validate", "greet", "--json"]);
    run.assert_code(0);
    let result = run.json()["result"].clone();
    assert_eq!(result["valid"], true);
    assert_eq!(result["phases"][0]["criteria"][0]["id"], "ac1");
    assert_eq!(result["phases"][0]["criteria"][0]["command"], "true");
    assert_eq!(result["phases"][0]["criteria"][0]["expected_kind"], "exit_code_zero");

    let before = std::fs::read(&path).unwrap();
    let run = env.scafld(&["plan", "greet"]);
    run.assert_code(3);
    assert!(run.stderr.contains("spec already exists: .scafld/specs/drafts/greet.md"), "{}", run.stderr);
    assert_eq!(std::fs::read(&path).unwrap(), before);

    // What would write sections of its own into the draft (a phase with its own command) is
    // refused, and nothing is written.
    let injected = "x\n## Phase 9: injected\n\n- [ ] `zz` test - injected\n  - Command: `touch pwned`\n";
    for args in [
        vec!["--title", injected],
        vec!["--command", "true\n## Phase 9: injected"],
        vec!["--command", "echo `id`"],
        vec!["--summary", injected],
    ] {
        let mut all = vec!["plan", "inject"];
        all.extend(args.iter().copied());
        let run = env.scafld(&all);
        run.assert_code(2);
        assert!(run.stderr.contains("error: the "), "{args:?}: {}", run.stderr);
        assert!(!env.work.join(".scafld/specs/drafts/inject.md").exists(), "{args:?}");
    }
    env.scafld(&["plan", "inject", "--summary", "Two lines\nof summary.", "--command", "cargo test"]).assert_code(0);
}

/// A blank `--command` would be written as the criterion's command, which `validate` then
/// calls missing: plan refuses it as usage (exit 2) and writes nothing. The draft plan writes
/// has as many errors as the TODO placeholders it tells you to fill, which `validate` counts.
#[test]
fn plan_refuses_a_blank_command_and_counts_the_errors_validate_gives() {
    let env = TestEnv::new();
    env.init();
    for blank in ["   ", ""] {
        let run = env.scafld(&["plan", "blank", "--command", blank, "--json"]);
        run.assert_code(2);
        let message = run.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(message.contains("the command is blank"), "{message}");
        assert!(!env.work.join(".scafld/specs/drafts/blank.md").exists(), "{blank:?}");
    }
    let run = env.scafld(&["plan", "blank"]);
    run.assert_code(0);
    let told: usize = run
        .stdout
        .split("fill its ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{}", run.stdout));
    let valid = env.scafld(&["validate", "blank", "--json"]);
    let errors =
        valid.json()["result"]["diagnostics"].as_array().unwrap().iter().filter(|d| d["severity"] == "error").count();
    assert_eq!(told, errors, "{}", run.stdout);
}

/// A summary that opens a code fence and never closes it would turn every section after it
/// (the phase and its command among them) into code: plan refuses it and writes nothing; a
/// summary whose fences close is planned, its sections intact.
#[test]
fn plan_refuses_a_summary_that_leaves_a_code_fence_open() {
    let env = TestEnv::new();
    env.init();
    let path = env.work.join(".scafld/specs/drafts/fence.md");
    for summary in ["Run this:\n```sh\nmake build", "Run this:\n~~~\nmake\n```\nstill code"] {
        let run = env.scafld(&["plan", "fence", "--summary", summary, "--command", "true", "--json"]);
        run.assert_code(2);
        let message = run.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(message.contains("opens a code fence on its line 2") && message.contains("never closes"), "{message}");
        assert!(!path.exists(), "{summary:?}");
    }
    let closed = "Run this:\n```sh\nmake build\n```\nThen look.";
    env.scafld(&["plan", "fence", "--summary", closed, "--command", "true"]).assert_code(0);
    let status = env.scafld(&["status", "fence", "--json"]).json()["result"].clone();
    assert_eq!(status["phases"][0]["id"], "phase1", "{status}");
    assert_eq!(status["criteria"][0]["command"], "true", "{status}");
}

/// A task id whose spec was deleted by hand: its ledger stays (ledgers are never pruned), so a
/// new draft under it would read as the old task (completed, or approved before it was
/// written); plan refuses it. A draft with no history is planned again at once, whatever the
/// watcher has seen yet.
#[test]
fn plan_refuses_an_id_whose_task_has_a_history_and_sees_a_spec_just_removed() {
    let env = TestEnv::new();
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    write_spec(&env, "drafts", "old", &spec_text("old", "draft"));
    env.scafld(&["approve", "old", "--reason", "t"]).assert_code(0);
    std::fs::remove_file(env.work.join(".scafld/specs/approved/old.md")).unwrap();
    let run = env.scafld(&["plan", "old", "--json"]);
    run.assert_code(3);
    let message = run.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(message.contains("has a history") && message.contains("approved"), "{message}");
    assert!(!env.work.join(".scafld/specs/drafts/old.md").exists());

    env.scafld(&["plan", "fresh"]).assert_code(0);
    for _ in 0..5 {
        std::fs::remove_file(env.work.join(".scafld/specs/drafts/fresh.md")).unwrap();
        env.scafld(&["plan", "fresh"]).assert_code(0);
    }
}

/// A spec file whose name is not UTF-8 names no task: it is never read as one, and never left
/// out unsaid either: `list` warns of it, `validate --all` names it and fails, `report` names
/// it, each showing the name lossily.
#[test]
fn a_spec_file_whose_name_is_not_utf8_is_named_by_list_validate_all_and_report() {
    use std::os::unix::ffi::OsStrExt;
    let env = TestEnv::new();
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    write_spec(&env, "drafts", "good", &spec_text("good", "draft"));
    let drafts = env.work.join(".scafld/specs/drafts");
    let odd = drafts.join(std::ffi::OsStr::from_bytes(b"bad\xffname.md"));
    std::fs::copy(drafts.join("good.md"), &odd).unwrap();
    let shown = ".scafld/specs/drafts/bad\u{FFFD}name.md: its name is not UTF-8";

    let list = env.scafld(&["list", "--json"]);
    list.assert_code(0);
    let result = list.json()["result"].clone();
    assert_eq!(result["tasks"].as_array().unwrap().len(), 1, "{result}");
    assert!(result["warnings"].to_string().contains(shown), "{result}");
    let human = env.scafld(&["list"]);
    assert!(human.stderr.contains(shown), "{}", human.stderr);
    let all = env.scafld(&["validate", "--all", "--json"]);
    all.assert_code(3);
    assert!(all.json()["result"]["unlisted"].to_string().contains(shown), "{}", all.stdout);
    let report = env.scafld(&["report", "--json"]);
    assert!(report.json()["result"]["unlisted"].to_string().contains(shown), "{}", report.stdout);

    std::fs::remove_file(&odd).unwrap();
    let all = env.scafld(&["validate", "--all", "--json"]).json();
    assert!(all["result"].get("unlisted").is_none(), "{all}");
    assert!(env.scafld(&["list", "--json"]).json()["result"].get("warnings").is_none());
}

/// A spec archived further down than the archive is read (more than 16 folders) is named by
/// `list`, `validate --all` and `report` (the deepest folder read, which holds more), and its
/// id stays in use: `plan` refuses it, naming the file.
#[test]
fn a_spec_archived_too_deep_is_named_and_its_id_never_reused() {
    let env = TestEnv::new();
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    let mut deep = env.work.join(".scafld/specs/archive");
    for level in 1..=18 {
        deep.push(format!("l{level}"));
    }
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(deep.join("old.md"), spec_text("old", "completed")).unwrap();
    let named = "/l16 holds folders more than 16 levels below .scafld/specs/archive";

    let list = env.scafld(&["list", "--json"]);
    list.assert_code(0);
    assert!(list.json()["result"]["warnings"].to_string().contains(named), "{}", list.stdout);
    let all = env.scafld(&["validate", "--all", "--json"]);
    all.assert_code(3);
    assert!(all.json()["result"]["unlisted"].to_string().contains(named), "{}", all.stdout);
    let report = env.scafld(&["report", "--json"]);
    assert!(report.json()["result"]["unlisted"].to_string().contains(named), "{}", report.stdout);
    let plan = env.scafld(&["plan", "old", "--json"]);
    plan.assert_code(3);
    let message = plan.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(
        message.contains("spec already exists: .scafld/specs/archive/l1/") && message.contains("/l18/old.md"),
        "{message}"
    );
    assert!(!env.work.join(".scafld/specs/drafts/old.md").exists());
}

#[test]
fn path_like_task_ids_are_refused_everywhere_and_change_nothing() {
    let mut env = TestEnv::new();
    env.start_daemon();
    env.init();
    write_spec(&env, "drafts", "good", &spec_text("good", "draft"));
    std::fs::write(env.path("victim.md"), spec_text("victim", "draft")).unwrap();
    let before = (tree(&env.work), std::fs::read(env.path("victim.md")).unwrap());
    let long = "a".repeat(200);
    let bad_ids = ["../x", "a/b", "/etc/passwd", "", "..", "sub/../../../victim", "A", long.as_str(), "x\ty", "ok\n"];
    for id in bad_ids {
        for command in ["plan", "validate", "status", "harden", "handoff", "reconcile"] {
            let run = env.scafld(&[command, "--task", id, "--json"]);
            assert_eq!(run.code, 2, "{command} {id:?}: {}", run.stdout);
            assert_eq!(run.json()["error"]["code"], "invalid_input", "{command} {id:?}");
        }
        let mut client = env.client();
        for method in ["task.plan", "task.validate", "task.status", "task.harden", "task.handoff", "task.reconcile"] {
            let reply = client.call(method, json!({"root": root(&env), "task_id": id}));
            assert_eq!(reply["error"]["data"]["kind"], "invalid_input", "{method} {id:?}: {reply}");
        }
    }
    let after = (tree(&env.work), std::fs::read(env.path("victim.md")).unwrap());
    assert_eq!(after, before, "a refused id changed files");
}

#[test]
fn status_reports_lifecycle_progress_and_next_command() {
    let env = TestEnv::new();
    env.init();
    let mut text = spec_text("two", "active");
    text = text.replace("Status: pending\nDependencies: none", "Status: completed\nDependencies: none");
    text =
        text.replace("  - Command: `true`\n", "  - Command: `true`\n  - Status: pass\n  - Evidence: exit code was 0\n");
    text = text.replace(
        "  - Command: `test -f README.md`\n",
        "  - Command: `test -f README.md`\n  - Status: fail\n  - Evidence: exit code was 1\n",
    );
    write_spec(&env, "active", "two", &text);
    let run = env.scafld(&["status", "two", "--json"]);
    run.assert_code(0);
    let s = run.json()["result"].clone();
    assert_eq!(s["status"], "active");
    // No ledger, no evidence: the phase and criterion states the file claims are not counted
    // (`exec::a_spec_without_a_ledger_counts_no_pass_it_did_not_record`).
    assert_eq!(s["current_phase"], "phase1");
    assert_eq!(s["next_command"], "scafld build two");
    assert_eq!(s["next_action"]["action"], "implement");
    assert_eq!(
        s["counts"],
        json!({"phases_total": 2, "phases_completed": 0, "criteria_total": 3, "criteria_passed": 0, "criteria_failed": 0, "criteria_pending": 3})
    );
    assert_eq!(s["phases"][0]["status"], "pending");
    assert_eq!(s["criteria"][1]["status"], "pending");
    assert_eq!(s["path"], ".scafld/specs/active/two.md");
    let human = env.scafld(&["status", "two"]);
    assert!(!human.stdout.contains("exit code was 1"), "{}", human.stdout);

    let run = env.scafld(&["status", "missing", "--json"]);
    run.assert_code(2);
    assert_eq!(run.json()["error"]["code"], "not_found");
}

/// `status --json` carries the spec file as read (`spec_source`: path, sha256, size and text,
/// as the original tool's), and `--no-context` leaves the text out, the digest standing for
/// it. Before, neither the field nor the flag existed (exit 2).
#[test]
fn status_carries_the_spec_source_and_no_context_leaves_its_text_out() {
    let env = TestEnv::new();
    env.init();
    let text = spec_text("two", "active");
    let file = write_spec(&env, "active", "two", &text);
    let on_disk = std::fs::read(&file).unwrap();
    let sha = std::process::Command::new("sha256sum").arg(&file).output().unwrap();
    let sha = String::from_utf8_lossy(&sha.stdout).split_whitespace().next().unwrap().to_string();
    let run = env.scafld(&["status", "two", "--json"]);
    run.assert_code(0);
    let source = run.json()["result"]["spec_source"].clone();
    assert_eq!(source["path"], ".scafld/specs/active/two.md", "{source}");
    assert_eq!(source["sha256"], sha.as_str(), "{source}");
    assert_eq!(source["bytes"], on_disk.len() as u64, "{source}");
    assert_eq!(source["markdown"], String::from_utf8(on_disk).unwrap().as_str(), "{source}");
    assert!(source.get("markdown_omitted").is_none(), "{source}");

    let run = env.scafld(&["status", "two", "--no-context", "--json"]);
    run.assert_code(0);
    let source = run.json()["result"]["spec_source"].clone();
    assert!(source.get("markdown").is_none(), "{source}");
    assert_eq!(source["markdown_omitted"], true, "{source}");
    assert_eq!(source["sha256"], sha.as_str(), "{source}");
    // Human output never printed the text; the flag changes nothing there.
    env.scafld(&["status", "two", "--no-context"]).assert_code(0);

    // The daemon reads the file again only for a caller that asks (`source`): the editor's and
    // the human status's calls leave it unread.
    let root = root(&env);
    let plain = env.client().result("task.status", json!({"root": root, "task_id": "two"}));
    assert!(plain.get("spec_source").is_none(), "{plain}");
    let digest = env.client().result("task.status", json!({"root": root, "task_id": "two", "source": "digest"}));
    assert_eq!(digest["spec_source"]["sha256"], sha.as_str(), "{digest}");
    assert!(digest["spec_source"].get("markdown").is_none(), "{digest}");
    let reply = env.client().call("task.status", json!({"root": root, "task_id": "two", "source": "all"}));
    assert_eq!(reply["error"]["data"]["kind"], "invalid_params", "{reply}");
}

#[test]
fn list_survives_a_broken_spec_and_shows_its_error() {
    let env = TestEnv::new();
    env.init();
    for (i, status) in ["draft", "approved", "active", "review"].iter().enumerate() {
        let folder = match *status {
            "draft" => "drafts",
            "approved" => "approved",
            _ => "active",
        };
        write_spec(&env, folder, &format!("task-{i}"), &spec_text(&format!("task-{i}"), status));
    }
    write_spec(&env, "archive/2026-05", "old", &spec_text("old", "completed"));
    write_spec(
        &env,
        "drafts",
        "broken",
        "---\nspec_version: '2.0'\ntask_id: broken\nstatus: draft\n---\n# B\n## Phase 1: A\n- [ ] `x` test: wrong\n",
    );
    write_spec(&env, "drafts", "misnamed", &spec_text("other-name", "draft"));

    let run = env.scafld(&["list", "--json", "--counts"]);
    run.assert_code(0);
    let tasks = run.json()["result"]["tasks"].as_array().unwrap().clone();
    let by_id: BTreeMap<String, Value> =
        tasks.iter().map(|t| (t["task_id"].as_str().unwrap().to_string(), t.clone())).collect();
    assert_eq!(by_id.len(), 7, "{tasks:?}");
    // Without --counts, the lean shape: the same tasks, no counts.
    let lean = env.scafld(&["list", "--json"]).json()["result"]["tasks"].as_array().unwrap().clone();
    assert_eq!(lean.len(), 7);
    assert!(lean.iter().all(|t| t.get("counts").is_none() && t["path"].is_string()), "{lean:?}");
    assert_eq!(by_id["task-2"]["status"], "active");
    assert_eq!(by_id["task-2"]["counts"]["criteria_total"], 3);
    assert_eq!(by_id["old"]["status"], "completed");
    assert!(by_id["task-0"].get("error").is_none());
    assert!(
        by_id["broken"]["error"].as_str().unwrap().starts_with("line 8: criterion `x` has no Command"),
        "{}",
        by_id["broken"]
    );
    let validate = env.scafld(&["validate", "broken", "--json"]).json();
    let messages = validate["result"]["diagnostics"].to_string();
    assert!(messages.contains("separates type and title with `:` instead of ` - `"), "{messages}");
    assert!(by_id["misnamed"]["error"].as_str().unwrap().contains("does not match the file name misnamed.md"));

    let run = env.scafld(&["list", "--status", "draft", "--json"]);
    let ids: Vec<&str> = run.json()["result"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["task_id"].as_str().unwrap())
        .collect::<Vec<_>>()
        .into_iter()
        .map(|s| Box::leak(s.to_string().into_boxed_str()) as &str)
        .collect();
    assert!(ids.contains(&"task-0") && !ids.contains(&"task-2"), "{ids:?}");
    env.scafld(&["status", "task-1"]).assert_code(0);
    let broken = env.scafld(&["status", "broken", "--json"]);
    broken.assert_code(3);
    assert_eq!(broken.json()["result"]["valid"], false);
    let human = env.scafld(&["list"]);
    assert!(human.stdout.contains("invalid"), "{}", human.stdout);
    assert!(human.stdout.lines().any(|l| l.starts_with("task-2") && l.contains(" 0/3 ")), "{}", human.stdout);
    env.scafld(&["list", "--status", "finished"]).assert_code(2);
}

/// `list --status` takes every status word a spec can say: this tool's (the Go original's) and
/// Python scafld's, whose `in_progress` is an active, blocked or review task and `under_review`
/// a draft; an unknown word is refused naming them all. Before, `in_progress` was refused.
#[test]
fn list_filters_by_every_status_word_a_spec_can_say() {
    let env = TestEnv::new();
    env.init();
    for (id, folder, status) in [
        ("a-draft", "drafts", "draft"),
        ("b-active", "active", "active"),
        ("c-blocked", "active", "blocked"),
        ("d-review", "active", "review"),
        ("e-python", "active", "in_progress"),
        ("f-done", "archive/2026-05", "completed"),
    ] {
        write_spec(&env, folder, id, &spec_text(id, status));
    }
    let listed = |word: &str| -> Vec<String> {
        let run = env.scafld(&["list", "--status", word, "--json"]);
        run.assert_code(0);
        run.json()["result"]["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["task_id"].as_str().unwrap().into())
            .collect()
    };
    let mut in_progress = listed("in_progress");
    in_progress.sort();
    assert_eq!(in_progress, ["b-active", "c-blocked", "d-review", "e-python"]);
    assert_eq!(listed("under_review"), ["a-draft"]);
    assert_eq!(listed("active"), ["b-active", "e-python"]);
    assert_eq!(listed("completed"), ["f-done"]);
    for word in ["approved", "failed", "cancelled"] {
        assert_eq!(listed(word), Vec::<String>::new(), "{word}");
    }
    let unknown = env.scafld(&["list", "--status", "done"]);
    unknown.assert_code(2);
    assert!(
        unknown.stderr.contains(
            "(expected one of draft, approved, active, blocked, review, completed, failed, cancelled, in_progress, under_review)"
        ),
        "{}",
        unknown.stderr
    );
}

/// `list` and `report` answer from the index while the daemon's change queue is quiet; every
/// hand change to the spec folders must still show in the very next call, with no wait.
#[test]
fn whole_workspace_reads_see_each_hand_change_at_once() {
    let mut env = TestEnv::new();
    env.start_daemon();
    env.init();
    let path = write_spec(&env, "drafts", "kept", &spec_text("kept", "draft"));
    let list = |env: &TestEnv| -> BTreeMap<String, (String, String)> {
        let run = env.scafld(&["list", "--json"]);
        run.assert_code(0);
        // The envelope written around the daemon's own result: one line, like every other.
        let envelope = run.json();
        assert_eq!(
            (&envelope["command"], &envelope["ok"], &envelope["error"]),
            (&json!("list"), &json!(true), &json!(null))
        );
        assert_eq!(run.stdout.lines().count(), 1);
        assert!(run.stdout.starts_with("{\"command\":\"list\",\"error\":null,\"ok\":true,\"result\":{"));
        let tasks = envelope["result"]["tasks"].as_array().unwrap().clone();
        tasks
            .iter()
            .map(|t| {
                let field = |name: &str| t[name].as_str().unwrap_or_default().to_string();
                (field("task_id"), (field("status"), field("path")))
            })
            .collect()
    };
    assert_eq!(list(&env)["kept"].0, "draft");
    assert_eq!(list(&env).len(), 1, "a quiet second call answers the same");

    std::fs::write(&path, spec_text("kept", "draft").replace("status: draft", "status: approved")).unwrap();
    assert_eq!(list(&env)["kept"].0, "approved", "an edit in place");
    write_spec(&env, "drafts", "added", &spec_text("added", "draft"));
    assert!(list(&env).contains_key("added"), "a new spec");
    let moved = env.work.join(".scafld/specs/approved/added.md");
    std::fs::rename(env.work.join(".scafld/specs/drafts/added.md"), &moved).unwrap();
    assert_eq!(list(&env)["added"].1, ".scafld/specs/approved/added.md", "a move between folders");
    std::fs::remove_file(&moved).unwrap();
    assert!(!list(&env).contains_key("added"), "a removal");
    write_spec(&env, "archive/2026-11", "old", &spec_text("old", "completed"));
    assert_eq!(list(&env)["old"].0, "completed", "a spec in a new archive month");
    let report = env.scafld(&["report", "--json"]).json();
    assert_eq!(report["result"]["total"], 2, "{report}");
}

/// A finished spec anywhere in the archive (directly in it, in a month, two folders deep), as
/// the original's walk of the archive finds it, is a task: `list`, `status`, `validate --all`
/// and `report` see it and `plan` refuses its id; one that comes later, in a new folder two
/// deep or in a folder moved in whole, is seen by the next call and published.
#[test]
fn specs_at_any_depth_of_the_archive_are_tasks() {
    let mut env = TestEnv::new();
    env.start_daemon();
    env.init();
    write_spec(&env, "archive", "flat", &spec_text("flat", "completed"));
    write_spec(&env, "archive/legacy/2025-01", "deep", &spec_text("deep", "completed"));
    let listed = |env: &TestEnv| -> BTreeMap<String, (String, String)> {
        let run = env.scafld(&["list", "--json"]);
        run.assert_code(0);
        let field = |t: &Value, name: &str| t[name].as_str().unwrap_or_default().to_string();
        let tasks = run.json()["result"]["tasks"].as_array().unwrap().clone();
        tasks.iter().map(|t| (field(t, "task_id"), (field(t, "status"), field(t, "path")))).collect()
    };
    let at = |status: &str, path: &str| (status.to_string(), format!(".scafld/specs/archive/{path}"));
    let tasks = listed(&env);
    assert_eq!(tasks.len(), 2, "{tasks:?}");
    assert_eq!(tasks["flat"], at("completed", "flat.md"));
    assert_eq!(tasks["deep"], at("completed", "legacy/2025-01/deep.md"));
    for (task, path) in [("flat", "flat.md"), ("deep", "legacy/2025-01/deep.md")] {
        let status = env.scafld(&["status", task, "--json"]);
        status.assert_code(0);
        assert_eq!(status.json()["result"]["status"], "completed", "{}", status.stdout);
        let again = env.scafld(&["plan", task, "--title", "again", "--json"]);
        again.assert_code(3);
        let message = again.json()["error"]["message"].as_str().unwrap_or_default().to_string();
        assert_eq!(message, format!("spec already exists: .scafld/specs/archive/{path}"));
    }
    assert!(!env.work.join(".scafld/specs/drafts/flat.md").exists(), "no second task under the id");
    let validated = env.scafld(&["validate", "--all", "--json"]).json();
    let mut ids: Vec<&str> =
        validated["result"]["specs"].as_array().unwrap().iter().filter_map(|s| s["task_id"].as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["deep", "flat"], "{validated}");
    assert_eq!(env.scafld(&["report", "--json"]).json()["result"]["total"], 2);

    // Later arrivals, with every spec loaded and the change queue armed.
    write_spec(&env, "archive/legacy/2024-12", "late", &spec_text("late", "completed"));
    assert_eq!(listed(&env)["late"], at("completed", "legacy/2024-12/late.md"), "a new folder two deep");
    let deep = env.work.join(".scafld/specs/archive/legacy/2025-01/deep.md");
    std::fs::write(&deep, spec_text("deep", "cancelled")).unwrap();
    assert_eq!(listed(&env)["deep"], at("cancelled", "legacy/2025-01/deep.md"), "an edit two deep");
    let mut subscriber = env.client();
    subscriber.result("events.subscribe", json!({}));
    let staged = env.path("staged/older/2024-06");
    std::fs::create_dir_all(&staged).unwrap();
    std::fs::write(staged.join("moved-in.md"), spec_text("moved-in", "completed")).unwrap();
    std::fs::rename(env.path("staged/older"), env.work.join(".scafld/specs/archive/legacy/older")).unwrap();
    let event = next_task_change(&mut subscriber);
    assert_eq!((event["task_id"].as_str(), event["status"].as_str()), (Some("moved-in"), Some("completed")), "{event}");
    assert_eq!(listed(&env)["moved-in"], at("completed", "legacy/older/2024-06/moved-in.md"));
}

/// The next `task_changed` event a subscriber gets.
fn next_task_change(subscriber: &mut scafld_tests::RawClient) -> Value {
    loop {
        let event = subscriber.next_event();
        if event["kind"] == "task_changed" {
            return event;
        }
    }
}

/// The `task_changed` events up to and including the first that `last` accepts. A write in
/// place (truncate, then write) can be read between the two: that moment's state (an empty
/// spec, no status) is published first, and the finished write after it.
fn task_changes_until(subscriber: &mut scafld_tests::RawClient, last: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut events = Vec::new();
    loop {
        let event = next_task_change(subscriber);
        let done = last(&event);
        events.push(event);
        if done {
            return events;
        }
    }
}

/// A workspace inside another's folder: a hand edit to the inner one's spec is the inner
/// one's (the event names its workspace, and its index has the edit), whichever was opened
/// first.
#[test]
fn a_hand_edit_in_a_nested_workspace_is_that_workspaces() {
    let mut env = TestEnv::new();
    env.start_daemon();
    env.init();
    let inner = env.work.join("sub");
    std::fs::create_dir_all(&inner).unwrap();
    let scafld_in = |args: &[&str]| Run::from(env.scafld_command(args).current_dir(&inner).output().unwrap());
    scafld_in(&["init"]).assert_code(0);
    write_spec(&env, "drafts", "outer", &spec_text("outer", "draft"));
    let path = inner.join(".scafld/specs/drafts/inner.md");
    std::fs::write(&path, spec_text("inner", "draft")).unwrap();
    env.scafld(&["status", "outer"]).assert_code(0);
    let inner_id = scafld_in(&["status", "inner", "--json"]).json()["result"]["task_id"].clone();
    assert_eq!(inner_id, "inner");
    let mut subscriber = env.client();
    subscriber.result("events.subscribe", json!({}));
    for round in 0..5 {
        let edited = spec_text("inner", "draft").replace("# ", &format!("# round {round} "));
        std::fs::write(&path, edited).unwrap();
        let event = next_task_change(&mut subscriber);
        assert_eq!((event["task_id"].as_str(), event["cause"].as_str()), (Some("inner"), Some("hand_edit")), "{event}");
        assert_eq!(event["root"], inner.canonicalize().unwrap().display().to_string(), "{event}");
    }
}

/// `status --json` and `list --json` name the workspace's folder (`root`) their paths are
/// relative to: asked from the outer workspace for an inner one (`--root sub`), the path
/// resolved against the caller's folder would be the outer workspace's spec of the same id.
#[test]
fn json_paths_come_with_the_root_they_are_relative_to() {
    let env = TestEnv::new();
    env.init();
    let inner = env.work.join("sub");
    std::fs::create_dir_all(&inner).unwrap();
    Run::from(env.scafld_command(&["init"]).current_dir(&inner).output().unwrap()).assert_code(0);
    write_spec(&env, "drafts", "same", &spec_text("same", "draft").replace("# ", "# OUTER "));
    let inner_spec = inner.join(".scafld/specs/drafts/same.md");
    std::fs::write(&inner_spec, spec_text("same", "draft").replace("# ", "# INNER ")).unwrap();
    let inner_root = inner.canonicalize().unwrap().display().to_string();

    let status = env.scafld(&["--root", "sub", "status", "same", "--json"]).json()["result"].clone();
    assert_eq!(status["root"], inner_root.as_str(), "{status}");
    let named = std::path::Path::new(status["root"].as_str().unwrap()).join(status["path"].as_str().unwrap());
    assert!(std::fs::read_to_string(&named).unwrap().contains("INNER"), "{}", named.display());

    let list = env.scafld(&["--root", "sub", "list", "--json"]).json()["result"].clone();
    assert_eq!(list["root"], inner_root.as_str(), "{list}");
    let outer = env.scafld(&["list", "--json"]).json()["result"].clone();
    assert_eq!(outer["root"], root(&env), "{outer}");
}

/// A workspace initialised again in place (a new id) replaces the old one: its hand edits are
/// published under the new id, and one workspace is open at that folder.
#[test]
fn a_workspace_initialised_again_in_place_takes_its_hand_edits() {
    let mut env = TestEnv::new();
    env.start_daemon();
    env.init();
    write_spec(&env, "drafts", "before", &spec_text("before", "draft"));
    env.scafld(&["status", "before"]).assert_code(0);
    std::fs::remove_dir_all(env.work.join(".scafld")).unwrap();
    env.init();
    let id = std::fs::read_to_string(env.work.join(".scafld/workspace_id")).unwrap().trim().to_string();
    let mut subscriber = env.client();
    subscriber.result("events.subscribe", json!({}));
    for round in 0..4 {
        write_spec(&env, "drafts", "after", &spec_text("after", "draft").replace("# ", &format!("# {round} ")));
        let event = next_task_change(&mut subscriber);
        assert_eq!(
            (event["task_id"].as_str(), event["workspace_id"].as_str()),
            (Some("after"), Some(id.as_str())),
            "{event}"
        );
    }
    let listed = env.scafld(&["daemon", "status", "--json"]).json()["result"]["workspaces"].clone();
    let open_here: Vec<&Value> =
        listed.as_array().unwrap().iter().filter(|w| w["root"] == root(&env) && w["open"] == true).collect();
    assert_eq!(open_here.len(), 1, "{listed}");
    assert_eq!(open_here[0]["workspace_id"], id.as_str());
}

/// Specs that arrive inside a folder (a backup copied back, an archive month moved in whole)
/// were never written one by one in a watched folder: they are published all the same.
#[test]
fn specs_that_arrive_inside_a_folder_are_published() {
    let mut env = TestEnv::new();
    env.start_daemon();
    env.init();
    write_spec(&env, "drafts", "kept", &spec_text("kept", "draft"));
    env.scafld(&["status", "kept"]).assert_code(0);
    let mut subscriber = env.client();
    subscriber.result("events.subscribe", json!({}));
    let staged = env.path("staged/2026-10");
    std::fs::create_dir_all(&staged).unwrap();
    std::fs::write(staged.join("moved-in.md"), spec_text("moved-in", "completed")).unwrap();
    std::fs::create_dir_all(env.work.join(".scafld/specs/archive")).unwrap();
    std::fs::rename(&staged, env.work.join(".scafld/specs/archive/2026-10")).unwrap();
    let event = next_task_change(&mut subscriber);
    assert_eq!((event["task_id"].as_str(), event["status"].as_str()), (Some("moved-in"), Some("completed")), "{event}");
}

#[test]
fn a_hand_edit_is_published_to_subscribers() {
    let mut env = TestEnv::new();
    env.start_daemon();
    env.init();
    let path = write_spec(&env, "drafts", "watched", &spec_text("watched", "draft"));
    env.scafld(&["status", "watched"]).assert_code(0);
    let mut subscriber = env.client();
    subscriber.result("events.subscribe", json!({}));

    let edited = std::fs::read_to_string(&path).unwrap().replace("status: draft", "status: approved");
    let started = Instant::now();
    std::fs::write(&path, edited).unwrap();
    let events = task_changes_until(&mut subscriber, |event| event["status"] == "approved");
    eprintln!("hand edit seen after {:?}", started.elapsed());
    for event in &events {
        assert_eq!(
            (event["task_id"].as_str(), event["cause"].as_str()),
            (Some("watched"), Some("hand_edit")),
            "{event}"
        );
    }

    // The index already has it: list shows the new status.
    let list = env.client().result("task.list", json!({"root": root(&env)}));
    assert_eq!(list["tasks"][0]["status"], "approved");

    // A command's own write is published once, with the command as its cause.
    env.scafld(&["plan", "fresh"]).assert_code(0);
    let event = next_task_change(&mut subscriber);
    assert_eq!((event["task_id"].as_str(), event["cause"].as_str()), (Some("fresh"), Some("command:plan")), "{event}");
}

#[test]
fn harden_opens_a_round_and_checks_grounded_evidence() {
    let env = TestEnv::new();
    env.init();
    std::fs::create_dir_all(env.work.join("src")).unwrap();
    std::fs::write(env.work.join("src/lib.rs"), "line one\nline two\nline three\n").unwrap();
    let original = spec_text("hard", "draft");
    let path = write_spec(&env, "drafts", "hard", &original);

    let run = env.scafld(&["harden", "hard"]);
    run.assert_code(0);
    assert!(run.stdout.contains("Path audit") && run.stdout.contains("max_questions_per_round: 8"), "{}", run.stdout);
    assert!(run.stdout.contains("round: round-1"));
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("harden_status: in_progress"));
    assert!(text.contains("### round-1"));
    // Prose, fences and phases are byte-identical; the new section is appended after them.
    let prose = &original[original.find("## Summary").unwrap()..];
    assert!(text.contains(prose), "prose changed:\n{text}");

    let run = env.scafld(&["harden", "hard", "--mark-passed", "--json"]);
    run.assert_code(3);
    let problems = run.json()["error"]["details"]["problems"].as_array().unwrap().clone();
    assert!(problems.iter().any(|p| p.as_str().unwrap().contains("`Path audit` is missing")), "{problems:?}");

    let checks = [
        ("Path audit", "code:src/lib.rs:3"),
        ("Command audit", "spec_gap:Acceptance"),
        ("Scope/migration audit", "spec_gap:Scope"),
        ("Acceptance timing audit", "spec_gap:Phases"),
        ("Rollback/repair audit", "spec_gap:Rollback"),
        ("Design challenge", "code:src/lib.rs:9"),
    ];
    let mut round = String::from("Checks:\n");
    for (name, grounded) in checks {
        round.push_str(&format!(
            "- {name}\n  - Grounded in: {grounded}\n  - Result: passed\n  - Evidence: looked at it\n"
        ));
    }
    let text = std::fs::read_to_string(&path).unwrap().replace("Checks:\n- none\n", &round);
    std::fs::write(&path, &text).unwrap();
    let run = env.scafld(&["harden", "hard", "--mark-passed", "--json"]);
    run.assert_code(3);
    let problems = run.json()["error"]["details"]["problems"].clone();
    assert_eq!(problems.as_array().unwrap().len(), 1, "{problems}");
    assert!(problems[0].as_str().unwrap().contains("src/lib.rs has only 3 lines"), "{problems}");

    std::fs::write(&path, text.replace("code:src/lib.rs:9", "code:src/lib.rs:2")).unwrap();
    let run = env.scafld(&["harden", "hard", "--mark-passed", "--json"]);
    run.assert_code(0);
    assert_eq!(run.json()["result"]["next_command"], "scafld approve hard");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("harden_status: passed") && text.contains("Status: passed"), "{text}");
    assert!(text.contains("Allowed follow-up command: `scafld approve hard`"));

    write_spec(&env, "active", "busy", &spec_text("busy", "active"));
    env.scafld(&["harden", "busy"]).assert_code(1);
}

#[test]
fn crlf_specs_work_and_keep_their_line_endings() {
    let env = TestEnv::new();
    env.init();
    let original = spec_text("windows", "draft").replace('\n', "\r\n");
    let path = write_spec(&env, "drafts", "windows", &original);
    env.scafld(&["validate", "windows"]).assert_code(0);
    env.scafld(&["harden", "windows"]).assert_code(0);
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.matches('\n').count(), text.matches("\r\n").count(), "mixed line endings after a write");
    assert!(text.contains("### round-1\r\n"));
}

#[test]
fn reconcile_moves_a_misfiled_spec_and_rewrites_current_state() {
    let env = TestEnv::new();
    env.init();
    let text = spec_text("lost", "approved").replace("Next: approve", "Next: something stale");
    let misfiled = write_spec(&env, "drafts", "lost", &text);
    let run = env.scafld(&["reconcile", "lost", "--json"]);
    run.assert_code(0);
    let result = run.json()["result"].clone();
    assert_eq!(
        result,
        json!({"task_id": "lost", "path": ".scafld/specs/approved/lost.md", "changed": true, "moved": true})
    );
    assert!(!misfiled.exists());
    let text = std::fs::read_to_string(env.work.join(".scafld/specs/approved/lost.md")).unwrap();
    assert!(text.contains("Next: build") && text.contains("Allowed follow-up command: `scafld build lost`"), "{text}");
    let again = env.scafld(&["reconcile", "lost", "--json"]).json();
    assert_eq!(again["result"]["changed"], false);
    env.scafld(&["status", "lost"]).assert_code(0);
}

#[test]
fn handoff_and_report() {
    let env = TestEnv::new();
    env.init();
    write_spec(
        &env,
        "active",
        "doing",
        &spec_text("doing", "active").replace("Current phase: none", "Current phase: phase1"),
    );
    write_spec(&env, "drafts", "idea", &spec_text("idea", "draft"));
    let run = env.scafld(&["handoff", "doing"]);
    run.assert_code(0);
    for needle in [
        "# Handoff: Task doing",
        "Current phase: phase1 - First",
        "Objective: Do the first thing.",
        "`ac1_1` test - first works",
        "run `scafld build doing`",
    ] {
        assert!(run.stdout.contains(needle), "{needle:?} missing from\n{}", run.stdout);
    }
    let report = env.scafld(&["report", "--json"]).json()["result"].clone();
    assert_eq!(report["total"], 2);
    assert_eq!(report["by_status"]["active"], 1);
    assert_eq!(report["by_status"]["draft"], 1);
    assert_eq!(report["criteria_total"], 6);
}

#[test]
fn a_task_named_like_a_subcommand_is_reachable_with_the_task_flag() {
    let env = TestEnv::new();
    env.init();
    write_spec(&env, "drafts", "list", &spec_text("list", "draft"));
    env.scafld(&["status", "--task", "list"]).assert_code(0);
    let positional = env.scafld(&["status", "list"]);
    positional.assert_code(0);
    assert!(positional.stderr.contains("`list` is also a scafld command"), "{}", positional.stderr);
    let run = env.scafld(&["status", "list", "--task", "list"]);
    run.assert_code(2);
}

/// Specs the index never reads: one over the size limit, a FIFO, a symlink out of the
/// workspace (or to a device). Each is reported with its file; the others read on.
#[test]
fn oversized_special_and_escaping_specs_are_refused_by_name() {
    let env = TestEnv::new();
    env.init();
    write_spec(&env, "drafts", "fine", &spec_text("fine", "draft"));
    let drafts = env.work.join(".scafld/specs/drafts");
    let big = std::fs::File::create(drafts.join("huge.md")).unwrap();
    big.set_len(9 << 20).unwrap(); // sparse: 9 MiB that cost nothing
    nix::unistd::mkfifo(&drafts.join("pipe.md"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    std::os::unix::fs::symlink("/dev/zero", drafts.join("zero.md")).unwrap();
    let outside = env.path("outside.md");
    std::fs::write(&outside, spec_text("escape", "draft")).unwrap();
    std::os::unix::fs::symlink(&outside, drafts.join("escape.md")).unwrap();
    let run = env.scafld(&["list", "--json"]);
    run.assert_code(0);
    let tasks = run.json()["result"]["tasks"].as_array().unwrap().clone();
    let error = |id: &str| {
        tasks.iter().find(|t| t["task_id"] == id).and_then(|t| t["error"].as_str()).unwrap_or_default().to_string()
    };
    assert!(
        error("huge").contains("the spec is 9.0 MiB (9437184 bytes), over the 8.0 MiB (8388608 bytes) a spec may have"),
        "{tasks:?}"
    );
    assert!(error("pipe").contains("not a regular file"), "{tasks:?}");
    assert!(error("zero").contains("outside the workspace"), "{tasks:?}");
    assert!(error("escape").contains("outside the workspace"), "{tasks:?}");
    assert!(error("fine").is_empty(), "{tasks:?}");
    env.client().result("daemon.status", json!({}));
}

#[test]
fn symlinked_folders_inside_scafld_are_never_written_through() {
    let mut env = TestEnv::new();
    env.start_daemon();
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    let spec = "---\nspec_version: '2.0'\ntask_id: link\nstatus: draft\n---\n\n# Link\n\n## Phase 1: A\n\nAcceptance:\n- [ ] `a` test - ok\n  - Command: `true`\n";
    write_spec(&env, "drafts", "link", spec);
    // `.scafld/runs` and `.scafld/specs/approved` point somewhere else.
    let elsewhere = env.path("elsewhere");
    for name in ["runs/link", "approved"] {
        std::fs::create_dir_all(elsewhere.join(name)).unwrap();
    }
    std::fs::remove_dir_all(env.work.join(".scafld/specs/approved")).unwrap();
    std::os::unix::fs::symlink(elsewhere.join("approved"), env.work.join(".scafld/specs/approved")).unwrap();
    let _ = std::fs::remove_dir_all(env.work.join(".scafld/runs"));
    std::os::unix::fs::symlink(elsewhere.join("runs"), env.work.join(".scafld/runs")).unwrap();

    // The approval is recorded (the ledger is in the store); the spec is not moved through the
    // link, and the answer says so.
    let run = env.scafld(&["approve", "link", "--reason", "t"]);
    run.assert_code(0);
    assert!(run.stdout.contains("the spec was not updated") && run.stdout.contains("is a symlink"), "{run:?}");
    assert!(env.work.join(".scafld/specs/drafts/link.md").is_file(), "the draft stays where it was");
    let export = env.scafld(&["session", "link", "--export"]);
    assert_ne!(export.code, 0, "{export:?}");
    assert!(format!("{}{}", export.stdout, export.stderr).contains("symlink"), "{export:?}");
    let written: Vec<String> = tree(&elsewhere).into_keys().filter(|k| !k.ends_with('/')).collect();
    assert!(written.is_empty(), "written through a link: {written:?}");
}

#[test]
fn after_a_restart_specs_are_known_before_the_index_is_built_and_none_is_reported_changed() {
    let mut env = TestEnv::new();
    env.init();
    for i in 0..40 {
        write_spec(&env, "drafts", &format!("task-{i}"), &spec_text(&format!("task-{i}"), "draft"));
    }
    write_spec(&env, "active", "running", &spec_text("running", "in_progress"));
    env.scafld(&["list", "--json"]).assert_code(0);
    env.scafld(&["daemon", "stop"]).assert_code(0);

    env.start_daemon();
    let mut subscriber = env.client();
    subscriber.result("events.subscribe", json!({}));
    // A spec the new daemon has not indexed yet still exists: plan refuses a second copy.
    let run = env.scafld(&["plan", "running"]);
    run.assert_code(3);
    assert!(run.stderr.contains("spec already exists: .scafld/specs/active/running.md"), "{}", run.stderr);
    assert!(!env.work.join(".scafld/specs/drafts/running.md").exists());
    let status = env.scafld(&["status", "task-31", "--json"]);
    status.assert_code(0);
    assert_eq!(status.json()["result"]["task_id"], "task-31");
    let list = env.scafld(&["list", "--json"]);
    list.assert_code(0);
    assert_eq!(list.json()["result"]["tasks"].as_array().unwrap().len(), 41);

    // Loading specs for the first time is not a change: the first event is the real edit.
    let path = env.work.join(".scafld/specs/drafts/task-3.md");
    std::fs::write(&path, spec_text("task-3", "draft").replace("# Task task-3", "# Task task-3, edited")).unwrap();
    let event = loop {
        let event = subscriber.next_event();
        if event["kind"] == "task_changed" {
            break event;
        }
    };
    assert_eq!(event["task_id"], "task-3", "{event}");
}

/// `list --json` and `status <task> --json` (exit code and envelope) run in `cwd` by `env`'s
/// client, asking `env`'s daemon.
fn list_and_status(env: &TestEnv, cwd: &std::path::Path, task: &str) -> Vec<(i32, Value)> {
    let run = |args: &[&str]| Run::from(env.scafld_command(args).current_dir(cwd).output().unwrap());
    [run(&["list", "--json"]), run(&["status", task, "--json"])].into_iter().map(|r| (r.code, r.json())).collect()
}

/// What a daemon started now, with a database of its own, answers over `live`'s workspace:
/// it scans the spec folders on start, never having watched a file arrive.
fn fresh_answers(live: &TestEnv, task: &str) -> Vec<(i32, Value)> {
    let mut fresh = TestEnv::new();
    fresh.start_daemon();
    list_and_status(&fresh, &live.work, task)
}

/// A task whose second file arrives while the daemon runs, in a folder before the first one's
/// in lookup order: the live daemon, which saw the files come one by one through its watch,
/// answers `list` and `status` as a daemon started afresh over the same files does (the
/// first in lookup order owns the task, the duplicate is an error naming the other); and
/// again once the owning file is removed, when the other takes the task over.
#[test]
fn a_task_in_two_folders_reads_the_same_in_a_live_daemon_and_a_fresh_one() {
    let mut env = TestEnv::new();
    env.start_daemon();
    env.init();
    let active = write_spec(
        &env,
        "active",
        "twice",
        &spec_text("twice", "in_progress").replace("# Task twice", "# Active copy"),
    );
    env.scafld(&["status", "twice"]).assert_code(0);
    env.scafld(&["list"]).assert_code(0);
    let mut subscriber = env.client();
    subscriber.result("events.subscribe", json!({}));

    let drafts =
        write_spec(&env, "drafts", "twice", &spec_text("twice", "draft").replace("# Task twice", "# Draft copy"));
    let event = next_task_change(&mut subscriber);
    assert_eq!((event["task_id"].as_str(), event["cause"].as_str()), (Some("twice"), Some("hand_edit")), "{event}");
    let live = list_and_status(&env, &env.work, "twice");
    assert_eq!(live, fresh_answers(&env, "twice"), "a live daemon and a fresh one disagree");
    let task = &live[0].1["result"]["tasks"][0];
    assert_eq!(task["path"], ".scafld/specs/drafts/twice.md", "{task}");
    assert!(task["title"].as_str().unwrap().starts_with("Draft copy"), "{task}");
    let error = task["error"].as_str().unwrap_or_default();
    assert!(error.contains(".scafld/specs/active/twice.md"), "the duplicate names the other file: {task}");
    assert!(active.exists());

    std::fs::remove_file(&drafts).unwrap();
    let event = next_task_change(&mut subscriber);
    assert_eq!(event["task_id"], "twice", "{event}");
    let live = list_and_status(&env, &env.work, "twice");
    assert_eq!(live, fresh_answers(&env, "twice"), "after the removal, a live daemon and a fresh one disagree");
    let task = &live[0].1["result"]["tasks"][0];
    assert_eq!((&task["path"], &task["error"]), (&json!(".scafld/specs/active/twice.md"), &json!(null)), "{task}");
    assert!(active.is_file(), "the remaining copy is left where it is");
}

/// A task in three folders (drafts and two archive months): every command names all three
/// files, never two of them, and following the advice clears the error: with one of the other
/// two removed the error names the two left, and with both removed the task is in one file.
#[test]
fn a_task_in_three_folders_names_every_file_and_keeping_one_clears_the_error() {
    let mut env = TestEnv::new();
    env.start_daemon();
    env.init();
    let drafts = write_spec(&env, "drafts", "thrice", &spec_text("thrice", "draft"));
    let january = write_spec(&env, "archive/2025-01", "thrice", &spec_text("thrice", "completed"));
    let february = write_spec(&env, "archive/2025-02", "thrice", &spec_text("thrice", "cancelled"));
    let files = [
        ".scafld/specs/drafts/thrice.md",
        ".scafld/specs/archive/2025-01/thrice.md",
        ".scafld/specs/archive/2025-02/thrice.md",
    ];
    let errors = |env: &TestEnv| {
        let validated = env.scafld(&["validate", "thrice"]);
        let status = env.scafld(&["status", "thrice", "--json"]).json();
        let listed = env.scafld(&["list", "--json"]).json();
        let refused = env.scafld(&["approve", "thrice", "--json"]);
        refused.assert_code(3);
        let refusal = &refused.json()["error"];
        [
            validated.stdout + &validated.stderr,
            status["result"]["errors"][0]["message"].as_str().unwrap_or_default().to_string(),
            listed["result"]["tasks"][0]["error"].as_str().unwrap_or_default().to_string(),
            format!("{} {}", refusal["message"], refusal["hint"]),
        ]
    };
    for said in errors(&env) {
        assert!(said.contains("the task is in three files"), "{said}");
        for file in files {
            assert!(said.contains(file), "every file is named: {file} in {said}");
        }
    }
    assert!(drafts.exists() && january.exists() && february.exists(), "reads and refusals move nothing");

    std::fs::remove_file(&january).unwrap();
    for said in errors(&env) {
        assert!(said.contains("the task is in two files"), "{said}");
        assert!(said.contains(files[0]) && said.contains(files[2]) && !said.contains(files[1]), "{said}");
    }

    std::fs::remove_file(&february).unwrap();
    let validated = env.scafld(&["validate", "thrice", "--json"]);
    let result = &validated.json()["result"];
    assert!(!result.to_string().contains("files:"), "one file left, the task is in one file: {result}");
    let listed = env.scafld(&["list", "--json"]).json();
    assert_eq!(listed["result"]["tasks"][0]["error"], json!(null), "{listed}");
}

/// A Python scafld spec saying `status: in_progress` is an active task, and every command says
/// so in the one vocabulary: `status` (text and JSON), `validate`, `handoff` and `approve`'s
/// refusal say `active`, as `list` and `report` do; the file keeps its word (reads write
/// nothing).
#[test]
fn a_python_status_name_reads_as_its_status_in_every_command() {
    let mut env = TestEnv::new();
    env.start_daemon();
    env.init();
    let path = write_spec(&env, "active", "pyt", &spec_text("pyt", "in_progress"));
    let text = std::fs::read_to_string(&path).unwrap();
    let result = |args: &[&str]| env.scafld(args).json()["result"].clone();
    assert_eq!(result(&["list", "--json"])["tasks"][0]["status"], "active");
    assert_eq!(result(&["status", "pyt", "--json"])["status"], "active");
    assert_eq!(result(&["validate", "pyt", "--json"])["status"], "active");
    let status = env.scafld(&["status", "pyt"]);
    assert!(status.stdout.contains("pyt: active") && !status.stdout.contains("in_progress"), "{}", status.stdout);
    let handoff = result(&["handoff", "pyt", "--json"]);
    assert!(handoff["markdown"].as_str().unwrap().contains("\nStatus: active\n"), "{handoff}");
    let refused = env.scafld(&["approve", "pyt", "--json"]);
    let message = refused.json()["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(message.ends_with("pyt is active"), "{message}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text, "reads leave the file's word as it is");
}

/// A spec with two `## Scope` sections binds its evidence to the files of both (the original
/// reads every Scope section into one list): a file the first names, changed after the review,
/// makes the evidence stale and `complete` refuses. Before, only the last section counted and
/// the task completed on a criterion that now fails.
#[test]
fn a_file_named_in_a_first_scope_section_binds_the_evidence_too() {
    let env = TestEnv::new();
    let phase = "- [ ] `a1` test - greet is defined\n  - Command: `grep -q greet src/lib.rs`\n\n## Scope\n\n- `notes.md` - notes.\n";
    crate::gate::opened(&env, "src/lib.rs", phase);
    crate::gate::write(&env, "src/lib.rs", "pub fn greet() {}\n");
    crate::gate::write(&env, "notes.md", "notes\n");
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    let pass = crate::review::reviewer(&env, "pass", &crate::review::pass(), "");
    crate::review::command_review(&env, &pass, &["--min-attack-angles", "2", "--json"]).assert_code(0);
    crate::gate::write(&env, "src/lib.rs", "pub fn hello() {}\n");
    let status = env.scafld(&["status", "rev", "--json"]).json()["result"].clone();
    assert_eq!(status["criteria"][0]["freshness"], "stale", "{status}");
    assert_eq!(status["stale_changes"], json!(["src/lib.rs (changed)"]), "{status}");
    env.scafld(&["complete", "rev"]).assert_code(4);
}

/// A front matter key set twice (`status: cancelled` then `status: draft`) is an error naming
/// both lines, and every command that would write the file refuses with it, changing nothing:
/// before, the file was read from the last line and written to the first, so after `approve`
/// it still read `draft` and `reconcile` could never put it right.
#[test]
fn a_front_matter_key_set_twice_is_refused_naming_both_lines() {
    let env = TestEnv::new();
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    let draft = env.work.join(".scafld/specs/drafts/dk.md");
    let text = spec_text("dk", "draft").replace("status: draft\n", "status: cancelled\nstatus: draft\n");
    std::fs::write(&draft, &text).unwrap();
    let said = |run: &Run| format!("{}{}", run.stdout, run.stderr);
    let validate = env.scafld(&["validate", "dk"]);
    validate.assert_code(3);
    assert!(
        said(&validate).contains("front matter key `status` is set twice, on lines 6 and 7"),
        "{}",
        said(&validate)
    );
    let approve = env.scafld(&["approve", "dk", "--reason", "t"]);
    approve.assert_code(3);
    assert!(
        said(&approve).contains("set twice") && said(&approve).contains("scafld validate dk"),
        "{}",
        said(&approve)
    );
    assert_eq!(std::fs::read_to_string(&draft).unwrap(), text, "a refused command changes nothing");
    // Keeping one line, the task approves and the file says so.
    std::fs::write(&draft, text.replace("status: cancelled\n", "")).unwrap();
    env.scafld(&["approve", "dk", "--reason", "t"]).assert_code(0);
    let approved = env.work.join(".scafld/specs/approved/dk.md");
    assert!(std::fs::read_to_string(&approved).unwrap().contains("\nstatus: approved\n"));
    // Set twice after approval: reconcile refuses and leaves the file as it is; cancel closes
    // the task in its ledger and archives the file as written, never rewriting it.
    let broken =
        std::fs::read_to_string(&approved).unwrap().replace("status: approved\n", "status: approved\nstatus: draft\n");
    std::fs::write(&approved, &broken).unwrap();
    let run = env.scafld(&["reconcile", "dk"]);
    assert_ne!(run.code, 0, "{}", said(&run));
    assert!(said(&run).contains("set twice"), "{}", said(&run));
    assert_eq!(std::fs::read_to_string(&approved).unwrap(), broken);
    let cancel = env.scafld(&["cancel", "dk", "--reason", "t"]);
    cancel.assert_code(0);
    assert!(said(&cancel).contains("archived as written"), "{}", said(&cancel));
    let archived = scafld_tests::tree(&env.work.join(".scafld/specs/archive"));
    let kept = archived.iter().find(|(path, _)| path.ends_with("/dk.md")).map(|(_, bytes)| bytes.as_slice());
    assert_eq!(kept, Some(broken.as_bytes()), "{:?}", archived.keys());
}

/// A phase disabled by wrapping it in an HTML comment is not part of the spec: `validate`
/// says so, the build never runs its command, and the comment's bytes stay as written while
/// the runner writes the phase it did run. Before, the commented-out phase was parsed and run.
#[test]
fn a_phase_in_an_html_comment_is_neither_read_nor_run() {
    let env = TestEnv::new();
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    let comment = "<!-- disabled until the migration lands:\n## Phase 2: Migrate\n\nObjective: migrate.\n\nAcceptance:\n- [ ] `m1` test - migrate prod\n  - Command: `touch MIGRATED`\n-->\n";
    let text = format!(
        "---\nspec_version: '2.0'\ntask_id: h\nstatus: draft\nharden_status: not_run\n---\n\n# H\n\n## Scope\n\n- `greet.txt` - the greeting.\n\n## Phase 1: Write\n\nObjective: write it.\n\nAcceptance:\n- [ ] `a1` test - says hello\n  - Command: `grep -q 'hello, world' greet.txt`\n\n{comment}"
    );
    std::fs::write(env.work.join(".scafld/specs/drafts/h.md"), &text).unwrap();
    let validate = env.scafld(&["validate", "h", "--json"]);
    validate.assert_code(0);
    let result = &validate.json()["result"];
    assert_eq!(result["phases"].as_array().map(Vec::len), Some(1), "{result}");
    assert!(result.to_string().contains("the HTML comment on lines 22-30 holds `## Phase 2: Migrate`"), "{result}");
    env.scafld(&["approve", "h", "--reason", "t"]).assert_code(0);
    std::fs::write(env.work.join("greet.txt"), "hello, world\n").unwrap();
    env.scafld(&["build", "h"]).assert_code(0);
    env.scafld(&["build", "h"]).assert_code(0);
    // Nothing is left to build: no phase 2 is opened.
    let third = env.scafld(&["build", "h"]);
    assert!(third.stderr.contains("nothing is left to build"), "{}", third.stderr);
    assert!(!env.work.join("MIGRATED").exists(), "the commented-out command ran");
    let status = env.scafld(&["status", "h", "--json"]).json()["result"].clone();
    assert_eq!(status["status"], "review", "{status}");
    let written = std::fs::read_to_string(env.work.join(".scafld/specs/active/h.md")).unwrap();
    assert!(written.contains("  - Status: pass\n  - Evidence: ") && written.ends_with(comment), "{written}");
}

/// A spec Python scafld 2.x built records a criterion's outcome on its own `Result:` and
/// `Checked at:` lines too. When this tool records the criterion failing, those lines say so
/// (`Result: fail`, the time of the write): the file never says pass and fail at once.
#[test]
fn a_python_criterion_recorded_failing_says_fail_on_its_result_line_too() {
    let env = TestEnv::new();
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    std::fs::write(env.work.join("greet.txt"), "bye\n").unwrap();
    let text = [
        "---",
        "spec_version: '2.0'",
        "task_id: py-task",
        "created: '2026-11-22T11:19:55Z'",
        "updated: '2026-11-22T11:20:31Z'",
        "status: in_progress",
        "harden_status: passed",
        "---",
        "",
        "# Python task",
        "",
        "## Summary",
        "",
        "Greet.",
        "",
        "## Scope",
        "",
        "- `greet.txt` - the greeting.",
        "",
        "## Phase 1: Write greeting",
        "",
        "Goal: Create greet.txt.",
        "",
        "Status: completed",
        "Dependencies: none",
        "",
        "Acceptance:",
        "- [x] `ac1_1` test - greet.txt says hello.",
        "  - Command: `grep -q hello greet.txt`",
        "  - Expected kind: `exit_code_zero`",
        "  - Timeout seconds: none",
        "  - Result: pass",
        "  - Status: pass",
        "  - Evidence: none",
        "  - Source event: none",
        "  - Last attempt: none",
        "  - Checked at: 2026-11-22T11:20:31Z",
        "",
    ]
    .join("\n");
    let path = write_spec(&env, "active", "py-task", &text);
    scafld_tests::git(&env.work, &["add", "-A"]);
    scafld_tests::git(&env.work, &["commit", "-qm", "initial"]);
    for _ in 0..2 {
        let run = env.scafld(&["build", "py-task"]);
        assert!(run.code == 0 || run.code == 3, "{}{}", run.stdout, run.stderr);
    }
    let written = std::fs::read_to_string(&path).unwrap();
    assert!(written.contains("\n  - Status: fail\n"), "{written}");
    assert!(written.contains("\n  - Result: fail\n"), "{written}");
    assert!(!written.contains("Checked at: 2026-11-22T11:20:31Z"), "{written}");
    assert!(written.contains("\n  - Last attempt: none\n"), "Python's other lines stay: {written}");
    // Once it passes again, the line says so.
    std::fs::write(env.work.join("greet.txt"), "hello\n").unwrap();
    env.scafld(&["build", "py-task"]).assert_code(0);
    let written = std::fs::read_to_string(&path).unwrap();
    assert!(written.contains("\n  - Result: pass\n  - Status: pass\n"), "{written}");
}

/// The runner fields Python scafld 2.x writes under `## Review` of every spec it plans are its
/// own, not the author's: validate does not ask the author to move them.
#[test]
fn python_s_review_fields_are_not_taken_for_the_author_s_text() {
    let env = TestEnv::new();
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    let fields = "Status: not_started\nVerdict: none\nTimestamp: none\nReview rounds: none\nReviewer mode: none\n\
Reviewer session: none\nRound status: none\nOverride applied: none\nOverride reason: none\nOverride confirmed at: none\n\
Reviewed head: none\nReviewed dirty: none\nReviewed diff: none\nBlocking count: none\nNon-blocking count: none\n\n\
Findings:\n- none\n\nPasses:\n- none\n";
    let criterion = [
        "- [ ] `ac1_1` test - greet.txt says hello.",
        "  - Command: `grep -q hello greet.txt`",
        "  - Expected kind: `exit_code_zero`",
        "  - Timeout seconds: none",
        "  - Result: none",
        "  - Status: pending",
        "  - Evidence: none",
        "  - Source event: none",
        "  - Last attempt: none",
        "  - Checked at: none",
    ]
    .join("\n");
    let text = |review: &str| {
        format!(
            "---\nspec_version: '2.0'\ntask_id: py-review\nstatus: draft\nharden_status: not_run\nsize: small\nrisk_level: low\n---\n\n\
# Python review block\n\n## Summary\n\nGreet.\n\n## Scope\n\n- `greet.txt` - the greeting.\n\n## Phase 1: Write greeting\n\n\
Goal: Create greet.txt.\n\nStatus: pending\nDependencies: none\n\nAcceptance:\n{criterion}\n\n## Review\n\n{review}"
        )
    };
    write_spec(&env, "drafts", "py-review", &text(fields));
    let run = env.scafld(&["validate", "py-review"]);
    run.assert_code(0);
    assert!(!run.stdout.contains("## Review") && !run.stderr.contains("## Review"), "{}{}", run.stdout, run.stderr);
    // A line of the author's among them is still named.
    write_spec(
        &env,
        "drafts",
        "py-review",
        &text(&fields.replace("Timestamp: none\n", "Timestamp: none\nMy note: x\n")),
    );
    let run = env.scafld(&["validate", "py-review"]);
    let said = format!("{}{}", run.stdout, run.stderr);
    assert!(said.contains("line 44: warning: `## Review` is written by scafld"), "{said}");
}

/// While `approve` moves a spec from drafts to approved (the new file renamed in before the old
/// one is taken away), readers racing it see one file or the other, never the task "in two
/// files" as an interrupted move's leftover: no move of the daemon's own was interrupted.
#[test]
fn a_spec_being_moved_is_never_read_as_in_two_files() {
    let env = TestEnv::new();
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    let root = root(&env);
    let tasks: Vec<String> = (0..40).map(|k| format!("mv{k}")).collect();
    for task in &tasks {
        write_spec(&env, "drafts", task, &spec_text(task, "draft"));
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let current = std::sync::Arc::new(std::sync::Mutex::new(tasks[0].clone()));
    let readers: Vec<_> = (0..2)
        .map(|reader| {
            let (stop, current, root, mut client) = (stop.clone(), current.clone(), root.clone(), env.client());
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let task = current.lock().unwrap().clone();
                    let reply = match reader {
                        0 => client.call("task.status", json!({"root": root, "task_id": task})),
                        _ => client.call("task.list", json!({"root": root})),
                    };
                    if reply.to_string().contains("two files") {
                        seen.push(reply.to_string());
                    }
                }
                seen
            })
        })
        .collect();
    for task in &tasks {
        *current.lock().unwrap() = task.clone();
        env.scafld(&["approve", task, "--reason", "t"]).assert_code(0);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let seen: Vec<String> = readers.into_iter().flat_map(|r| r.join().unwrap()).collect();
    assert!(seen.is_empty(), "{} replies saw a task in two files, first: {}", seen.len(), seen[0]);
    assert!(env.work.join(".scafld/specs/approved/mv39.md").exists());
}
