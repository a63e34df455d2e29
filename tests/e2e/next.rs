//! Following the next action through the real binaries: every command `status` names is run
//! as printed, and none is refused, in the cases where one was: a task named like a `review`
//! subcommand or a user review template, a criterion edited while its build step runs, a
//! consensus with a `local` member, a consensus of `command` and a worker, a review a person
//! rejected, a pass through a channel that cannot complete, a person's evidence gone stale in
//! review, a `complete` whose move was interrupted, a spec its own criterion moves mid-build,
//! an amendment that drops a criterion or changes one (and the spec's next with it), a bare
//! name added to the scope, and a review with no verdict (its retry, then a new review with the
//! same reviewer after a spec edit); and a refused command's hint is `status`'s next action
//! (`refused_with_next`); and the printed commands run from a subfolder, and from outside with
//! `--root`.

use scafld_tests::{TestEnv, git, wait_until};
use serde_json::Value;

use crate::review::{pass, reviewer};

/// A git repository with a scafld workspace whose reviews need one attack angle.
fn workspace(env: &TestEnv) {
    git(&env.work, &["init", "-q"]);
    std::fs::write(env.work.join("README.md"), "# project\n").unwrap();
    git(&env.work, &["add", "-A"]);
    git(&env.work, &["commit", "-qm", "initial"]);
    env.init();
    std::fs::write(env.work.join(".scafld/config.local.yaml"), "review:\n  dossier:\n    min_attack_angles: 1\n")
        .unwrap();
}

/// Task `id` approved: one phase on `greet.txt` whose criterion is `command`.
fn approved(env: &TestEnv, id: &str, command: &str) {
    approved_with(env, id, &format!("- [ ] `a1` test - says hello\n  - Command: `{command}`\n"));
}

/// Task `id` approved: one phase on `greet.txt` with these acceptance lines.
fn approved_with(env: &TestEnv, id: &str, acceptance: &str) {
    let spec = format!(
        "---\nspec_version: '2.0'\ntask_id: {id}\nstatus: draft\nharden_status: not_run\n---\n\n# Greet\n\n## Summary\n\nA greeting.\n\n## Scope\n\n- `greet.txt` - the greeting.\n\n## Phase 1: Write\n\nObjective: write it.\n\nAcceptance:\n{acceptance}"
    );
    std::fs::write(env.work.join(format!(".scafld/specs/drafts/{id}.md")), spec).unwrap();
    env.scafld(&["approve", "--task", id, "--reason", "next tests"]).assert_code(0);
}

/// A [`workspace`] whose task `greet` is built: `greet.txt` says hello and the phase that
/// checks it passed, so the task is ready for review.
fn built_greet(env: &TestEnv) {
    workspace(env);
    std::fs::write(env.work.join("greet.txt"), "hello, world\n").unwrap();
    approved(env, "greet", "grep -q 'hello' greet.txt");
    env.scafld(&["build", "greet"]).assert_code(0);
    env.scafld(&["build", "greet"]).assert_code(0);
}

fn status(env: &TestEnv, task: &str) -> Value {
    env.scafld(&["status", "--task", task, "--json"]).json()["result"].clone()
}

/// Run `status`'s next action for `task` exactly as printed, by `sh` (only `--json` added, for
/// its answer), and return the command and its answer: it must not be refused. A review step
/// that names no reviewer runs the one the workspace configures, which is set to `script` (a
/// `command` reviewer) first; a step that names one (a retry, a review as an earlier one ran)
/// runs with what it names.
fn follow(env: &TestEnv, task: &str, script: &str) -> (String, Value) {
    let next = status(env, task)["next_action"].clone();
    let command = next["command"].as_str().unwrap().to_string();
    assert!(command.starts_with("scafld "), "{next}");
    if matches!(next["action"].as_str(), Some("review" | "retry_review")) {
        let config = format!(
            "review:\n  dossier:\n    min_attack_angles: 1\n  external:\n    provider: command\n    command: \"{script}\"\n"
        );
        std::fs::write(env.work.join(".scafld/config.local.yaml"), config).unwrap();
    }
    let run = shell(env, &env.work, &format!("{command} --json"));
    // A build step that ends waiting for a person's evidence did what it was asked (exit 3 says
    // the task is blocked on them, not that the command was refused).
    let waits = run.code == 3 && run.json()["error"]["code"] == "awaiting_manual_evidence";
    assert!(
        run.code == 0 || waits,
        "following `{command}` ({}) was refused:\n{}{}",
        next["reason"],
        run.stdout,
        run.stderr
    );
    (command, run.json()["result"].clone())
}

/// Follow the next action until the task is done; the commands followed.
fn follow_to_done(env: &TestEnv, task: &str, script: &str) -> Vec<String> {
    let mut followed = Vec::new();
    while status(env, task)["next_action"]["action"] != "done" {
        assert!(followed.len() < 8, "no end in sight: {followed:?}");
        followed.push(follow(env, task, script).0);
    }
    followed
}

/// A review some reviewer of which gave no verdict is followed by the step `status` prints, run
/// as printed: the session's retry (which runs its reviewers as they ran, and takes no provider
/// flags), and, once the spec's text changed since its packet, a new review that names the same
/// reviewer; then `complete`. Before, `follow` added provider flags to every review step, which
/// `review retry` refuses, and no test followed a retry.
#[test]
fn a_review_with_no_verdict_is_followed_as_printed() {
    let env = TestEnv::new();
    built_greet(&env);
    let toggle = env.path("answer-now");
    let script =
        reviewer(&env, "toggle", &pass(), &format!("[ -f '{}' ] || {{ echo garbage; exit 0; }}", toggle.display()));
    let first = env.scafld(&["review", "greet", "--provider", "command", "--provider-command", &script]);
    assert_ne!(first.code, 0, "{}", first.stdout);
    let key = env.scafld(&["review", "wait", "--json"]).json()["session_key"].as_str().unwrap().to_string();

    let (command, retried) = follow(&env, "greet", &script);
    assert_eq!(command, format!("scafld review retry {key}"));
    assert_eq!(retried["reviewers_spawned"], serde_json::json!(["command"]), "{retried}");
    env.scafld(&["review", "wait", "--session-key", &key, "--timeout", "30"]).assert_code(2);

    let path = env.work.join(".scafld/specs/active/greet.md");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("A greeting.", "A greeting, said warmly.")).unwrap();
    std::fs::write(&toggle, "").unwrap();
    let followed = follow_to_done(&env, "greet", &script);
    assert_eq!(
        followed,
        [format!("scafld review greet --provider command --provider-command {script}"), "scafld complete greet".into()]
    );
}

/// A task whose id is a `review` subcommand word (`status` would run `review status`, `code` a
/// template review of the tree) is named with `--task` wherever its review is the next step.
#[test]
fn a_task_named_like_a_review_subcommand_is_reviewed_by_its_next_action() {
    let env = TestEnv::new();
    workspace(&env);
    std::fs::write(env.work.join("greet.txt"), "hello, world\n").unwrap();
    let script = reviewer(&env, "pass", &pass(), "");
    for id in ["code", "status", "wait"] {
        approved(&env, id, "grep -q 'hello, world' greet.txt");
        let followed = follow_to_done(&env, id, &script);
        let review = format!("scafld review --task {id}");
        assert_eq!(
            followed,
            [
                format!("scafld build {id}"),
                format!("scafld build {id}"),
                review.clone(),
                format!("scafld complete {id}")
            ]
        );
    }
    // Every surface spells it so: the build's answer, the handoff, the spec's follow-up.
    approved(&env, "list", "grep -q 'hello, world' greet.txt");
    env.scafld(&["build", "--task", "list"]).assert_code(0);
    let built = env.scafld(&["build", "--task", "list", "--json"]).json()["result"].clone();
    assert_eq!(built["next_command"], "scafld review --task list", "{built}");
    let handoff = env.scafld(&["handoff", "--task", "list"]).stdout;
    assert!(handoff.contains("Next: `scafld review --task list`"), "{handoff}");
    let spec = std::fs::read_to_string(env.work.join(".scafld/specs/active/list.md")).unwrap();
    assert!(spec.contains("Allowed follow-up command: `scafld review --task list`"), "{spec}");
}

/// A task whose id is a user review template's name (`.scafld/templates/greet.yaml`) is named
/// with `--task` too: positional, `scafld review greet` runs the template (here refused for want
/// of its input), never the task's review.
#[test]
fn a_task_named_like_a_user_template_is_reviewed_by_its_next_action() {
    let env = TestEnv::new();
    workspace(&env);
    let templates = env.work.join(".scafld/templates");
    std::fs::create_dir_all(&templates).unwrap();
    std::fs::write(
        templates.join("greet.yaml"),
        "name: greet\ndescription: Greeting review\nsystem_prompt: You review greetings.\nallowed_tools: [Read]\npermission_mode: plan\ninputs:\n  required:\n    - name: text\n      description: the text\nprompt_template: 'Review {text}'\n",
    )
    .unwrap();
    std::fs::write(env.work.join("greet.txt"), "hello, world\n").unwrap();
    approved(&env, "greet", "grep -q 'hello, world' greet.txt");
    env.scafld(&["build", "greet"]).assert_code(0);
    let built = env.scafld(&["build", "greet", "--json"]).json()["result"].clone();
    assert_eq!(built["next_command"], "scafld review --task greet", "{built}");
    let handoff = env.scafld(&["handoff", "greet"]).stdout;
    assert!(handoff.contains("Next: `scafld review --task greet`"), "{handoff}");
    let spec = std::fs::read_to_string(env.work.join(".scafld/specs/active/greet.md")).unwrap();
    assert!(spec.contains("Allowed follow-up command: `scafld review --task greet`"), "{spec}");
    let script = reviewer(&env, "pass", &pass(), "");
    assert_eq!(follow_to_done(&env, "greet", &script), ["scafld review --task greet", "scafld complete greet"]);
}

/// A criterion edited while its step runs: the step's answer names the changed contract (not
/// commands that changed files), as its next action and `status` do, and following it works.
#[test]
fn a_criterion_edited_during_its_build_step_is_named_as_the_contract_change() {
    let env = TestEnv::new();
    workspace(&env);
    std::fs::write(env.work.join("greet.txt"), "hello, world\n").unwrap();
    let (started, go) = (env.path("started"), env.path("go"));
    let command = format!(
        "grep -q 'hello, world' greet.txt && touch {} && i=0 && while [ ! -f {} ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done",
        started.display(),
        go.display()
    );
    approved(&env, "greet", &command);
    env.scafld(&["build", "greet"]).assert_code(0);
    let step = env.scafld_command(&["build", "greet", "--json"]).stdout(std::process::Stdio::piped()).spawn().unwrap();
    wait_until("the criterion to run", || started.exists());
    let path = env.work.join(".scafld/specs/active/greet.md");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("i=$((i+1)); done`", "i=$((i+1)); done && true`")).unwrap();
    std::fs::write(&go, "").unwrap();
    let output = step.wait_with_output().unwrap();
    let built = scafld_tests::Run::from(output);
    built.assert_code(0);
    let result = built.json()["result"].clone();
    let message = result["message"].as_str().unwrap();
    assert!(message.contains("the spec changed while it ran") && message.contains("`a1` changed"), "{result}");
    assert!(!message.contains("its commands changed files"), "{result}");
    let s = status(&env, "greet");
    assert_eq!(s["next_action"]["action"], "amend_contract", "{s}");
    assert_eq!(result["next_command"], s["next_action"]["command"], "{result}\n{s}");

    let script = reviewer(&env, "pass", &pass(), "");
    let followed = follow_to_done(&env, "greet", &script);
    assert_eq!(
        followed,
        [
            "scafld approve greet --amend --reason \"why\"",
            "scafld build greet",
            "scafld review greet",
            "scafld complete greet"
        ]
    );
}

/// `approve --amend` that only removes a criterion after a completed build answers with the
/// next `status` gives (a review: the evidence left covers the contract), not a build that
/// would be refused as the task is ready for review; following it works.
#[test]
fn an_amendment_dropping_a_criterion_answers_with_the_next_status_gives() {
    let env = TestEnv::new();
    workspace(&env);
    std::fs::write(env.work.join("greet.txt"), "hello, world\n").unwrap();
    let acceptance = "- [ ] `a1` test - says hello\n  - Command: `grep -q 'hello, world' greet.txt`\n- [ ] `a2` test - second\n  - Command: `true`\n";
    approved_with(&env, "greet", acceptance);
    env.scafld(&["build", "greet"]).assert_code(0);
    env.scafld(&["build", "greet"]).assert_code(0);
    assert_eq!(status(&env, "greet")["next_action"]["action"], "review");
    let path = env.work.join(".scafld/specs/active/greet.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let kept: Vec<&str> = text.lines().filter(|l| !l.contains("`a2` test") && *l != "  - Command: `true`").collect();
    std::fs::write(&path, kept.join("\n") + "\n").unwrap();
    let amended = env.scafld(&["approve", "greet", "--amend", "--reason", "a2 was redundant", "--json"]);
    amended.assert_code(0);
    let answer = amended.json()["result"].clone();
    let s = status(&env, "greet");
    assert_eq!(answer["next_command"], s["next_action"]["command"], "{answer}\n{s}");
    assert_eq!(answer["next_command"], "scafld review greet", "{answer}");
    let script = reviewer(&env, "pass", &pass(), "");
    assert_eq!(follow_to_done(&env, "greet", &script), ["scafld review greet", "scafld complete greet"]);
}

/// `approve --amend` of a criterion whose evidence then goes stale writes into the spec the
/// next `status` gives (the build that re-runs it), not the review that would be refused; a
/// `reconcile` keeps it so.
#[test]
fn an_amended_criterion_s_spec_names_the_build_status_names() {
    let env = TestEnv::new();
    built_greet(&env);
    let path = env.work.join(".scafld/specs/active/greet.md");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("grep -q 'hello' greet.txt", "grep -q 'hello,' greet.txt")).unwrap();
    env.scafld(&["approve", "greet", "--amend", "--reason", "stricter"]).assert_code(0);
    let s = status(&env, "greet");
    assert_eq!(s["next_action"]["command"], "scafld build greet", "{s}");
    for _ in 0..2 {
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("Next: build\n") && text.contains("Allowed follow-up command: `scafld build greet`"),
            "{text}"
        );
        env.scafld(&["reconcile", "greet"]).assert_code(0);
    }
}

/// A bare-name Scope entry (`Makefile`: no `/` or `.`) binds evidence as a path does, so adding
/// one after approval, or removing it, is a contract change: `build` refuses naming it, `status`
/// asks for the amendment, and following the next actions amends, builds, reviews, completes.
#[test]
fn a_bare_name_added_to_or_removed_from_the_scope_needs_an_amendment() {
    let env = TestEnv::new();
    workspace(&env);
    std::fs::write(env.work.join("Makefile"), "all:\n").unwrap();
    std::fs::write(env.work.join(".env.local"), "TOKEN=x\n").unwrap();
    git(&env.work, &["add", "-A"]);
    git(&env.work, &["commit", "-qm", "make"]);
    std::fs::write(env.work.join("greet.txt"), "hello, world\n").unwrap();
    approved(&env, "greet", "grep -q 'hello, world' greet.txt");
    env.scafld(&["build", "greet"]).assert_code(0);
    env.scafld(&["build", "greet"]).assert_code(0);
    let path = env.work.join(".scafld/specs/active/greet.md");
    let script = reviewer(&env, "pass", &pass(), "");
    // A file kept from reviewers for its secrets binds evidence as a bare name does: pinned too.
    for (from, to, name, change) in [
        (
            "- `greet.txt` - the greeting.\n",
            "- `greet.txt` - the greeting.\n- `Makefile` - build rules.\n",
            "Makefile",
            "added",
        ),
        ("- `Makefile` - build rules.\n", "", "Makefile", "removed"),
        (
            "- `greet.txt` - the greeting.\n",
            "- `greet.txt` - the greeting.\n- `.env.local` - settings.\n",
            ".env.local",
            "added",
        ),
        ("- `.env.local` - settings.\n", "", ".env.local", "removed"),
    ] {
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(from), "{text}");
        std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
        let words = format!("scope `{name}` {change}");
        let s = status(&env, "greet");
        assert_eq!(s["next_action"]["action"], "amend_contract", "{s}");
        assert!(s["next_action"]["reason"].as_str().unwrap().contains(&words), "{s}");
        let refused = env.scafld(&["build", "greet", "--json"]);
        assert_ne!(refused.code, 0, "{}", refused.stdout);
        assert!(refused.json()["error"]["message"].as_str().unwrap().contains(&words), "{}", refused.stdout);
        let (command, _) = follow(&env, "greet", &script);
        assert_eq!(command, "scafld approve greet --amend --reason \"why\"");
        let amendment = env.scafld(&["session", "greet", "--json"]).json()["result"]["entries"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .find(|e| e["type"] == "contract_amended")
            .cloned()
            .unwrap();
        assert!(amendment.to_string().contains(&words), "{amendment}");
    }
    let followed = follow_to_done(&env, "greet", &script);
    assert_eq!(followed.last().map(String::as_str), Some("scafld complete greet"), "{followed:?}");
}

/// A consensus with a `local` member passes but cannot complete the task: its own next action
/// is another review, as `status` says, never the `complete` that would refuse it.
#[test]
fn a_passing_consensus_with_a_local_member_asks_for_another_review() {
    let env = TestEnv::new();
    workspace(&env);
    std::fs::write(env.work.join("greet.txt"), "hello, world\n").unwrap();
    approved(&env, "greet", "grep -q 'hello, world' greet.txt");
    env.scafld(&["build", "greet"]).assert_code(0);
    env.scafld(&["build", "greet"]).assert_code(0);
    let script = reviewer(&env, "pass", &pass(), "");
    let args = ["review", "greet", "--reviewers", "command,local", "--provider-command", &script, "--json"];
    let review = env.scafld(&args);
    review.assert_code(0);
    let result = review.json()["result"].clone();
    let own = result.get("review").unwrap_or(&result)["next_command"].clone();
    assert_eq!(own, "scafld review greet", "{result}");
    assert_eq!(status(&env, "greet")["next_action"]["command"], own);
    let followed = follow_to_done(&env, "greet", &script);
    assert_eq!(followed, ["scafld review greet", "scafld complete greet"]);
}

/// A unanimous pass of `command` and a worker is what `complete` accepts, so it is what the
/// next action says.
#[test]
fn a_passing_consensus_of_command_and_a_worker_completes() {
    let env = TestEnv::new();
    workspace(&env);
    std::fs::write(env.work.join("greet.txt"), "hello, world\n").unwrap();
    approved(&env, "greet", "grep -q 'hello, world' greet.txt");
    env.scafld(&["build", "greet"]).assert_code(0);
    env.scafld(&["build", "greet"]).assert_code(0);
    let script = reviewer(&env, "pass", &pass(), "");
    let args =
        ["review", "greet", "--reviewers", "command,worker", "--provider-command", &script, "--detach", "--json"];
    let spawned = env.scafld(&args);
    spawned.assert_code(0);
    let key = spawned.json()["result"]["session_key"].as_str().unwrap().to_string();
    let worker = ["worker", "--provider", "command", "--provider-command", &script, "--once", "--timeout", "30"];
    env.scafld(&worker).assert_code(0);
    env.scafld(&["review", "wait", "--session-key", &key, "--timeout", "30"]).assert_code(0);
    let s = status(&env, "greet");
    assert_eq!(s["review"]["provider"], "consensus", "{s}");
    assert_eq!(follow_to_done(&env, "greet", &script), ["scafld complete greet"]);
}

/// A person rejects a passing review (manual approval): their reason is what `status` and the
/// handoff show to act on, and the next action never sends a build that has nothing to re-run.
#[test]
fn a_rejected_review_shows_the_reason_and_its_next_action_works() {
    let env = TestEnv::new();
    built_greet(&env);
    let script = reviewer(&env, "pass", &pass(), "");
    let args = ["review", "greet", "--approval", "manual", "--provider", "command", "--provider-command", &script];
    env.scafld(&args).assert_code(0);
    let why = "the greeting must be in French";
    let rejected = env.scafld(&["review", "reject", "greet", "--reason", why, "--json"]);
    rejected.assert_code(0);
    let s = status(&env, "greet");
    assert_eq!(rejected.json()["result"]["next_command"], s["next_action"]["command"], "{s}");
    assert_eq!(s["next_action"]["command"], "scafld handoff greet", "{s}");
    assert!(s["next_action"]["reason"].as_str().unwrap().contains(why), "{s}");
    assert_eq!((&s["review"]["verdict"], &s["review"]["rejected"]), (&Value::from("fail"), &Value::from(why)), "{s}");
    let text = env.scafld(&["status", "greet"]).stdout;
    assert!(text.contains(&format!("review: fail, rejected by a person: {why}")), "{text}");
    let (_, handoff) = follow(&env, "greet", &script);
    let handoff = handoff["markdown"].as_str().unwrap();
    assert!(handoff.contains(&format!("A person rejected the latest review: {why}")), "{handoff}");
    let spec = std::fs::read_to_string(env.work.join(".scafld/specs/active/greet.md")).unwrap();
    assert!(spec.contains(&format!("Decision: a person rejected the proposed pass verdict: {why}")), "{spec}");

    // The work changes to answer it: its evidence re-runs, a review judges it, it completes.
    std::fs::write(env.work.join("greet.txt"), "hello, world\nbonjour, le monde\n").unwrap();
    let followed = follow_to_done(&env, "greet", &script);
    assert_eq!(followed, ["scafld build greet", "scafld review greet", "scafld complete greet"]);
}

/// A proposed verdict (manual approval) stands only for what the reviewer judged: once the files
/// change, `review accept` refuses it and `status` no longer offers it (the build re-runs the
/// stale evidence); once something newer is recorded (that build, an amendment), no proposal
/// awaits a decision any more. Each refusal records nothing and names the next action, which
/// runs, and a review of what is there now completes the task.
#[test]
fn review_accept_refuses_a_proposal_something_newer_superseded() {
    let env = TestEnv::new();
    workspace(&env);
    std::fs::write(env.work.join("greet.txt"), "hello, world\n").unwrap();
    approved(&env, "greet", "grep -q hello greet.txt");
    env.scafld(&["build", "greet"]).assert_code(0);
    env.scafld(&["build", "greet"]).assert_code(0);
    let script = reviewer(&env, "pass", &pass(), "");
    let propose = ["review", "greet", "--approval", "manual", "--provider", "command", "--provider-command", &script];
    env.scafld(&propose).assert_code(0);
    let ledger_len =
        || env.scafld(&["session", "greet", "--json"]).json()["result"]["entries"].as_array().unwrap().len();
    let accept = || env.scafld(&["review", "accept", "greet", "--reason", "ok", "--json"]);

    // The files changed since the reviewer judged them.
    std::fs::write(env.work.join("greet.txt"), "hello, unreviewed world\n").unwrap();
    assert_eq!(status(&env, "greet")["next_action"]["command"], "scafld build greet");
    let before = ledger_len();
    let refused = accept();
    refused.assert_code(1);
    let error = refused.json()["error"].clone();
    assert!(error["message"].as_str().unwrap().contains("changed since the reviewer judged them"), "{error}");
    assert!(error["hint"].as_str().unwrap().contains("`scafld build greet`"), "{error}");
    assert_eq!(ledger_len(), before, "a refused accept recorded something");

    // The build supersedes the proposal: nothing awaits a decision, the next is a review.
    let (command, _) = follow(&env, "greet", &script);
    assert_eq!(command, "scafld build greet");
    let refused = accept();
    refused.assert_code(1);
    let error = refused.json()["error"].clone();
    assert!(error["message"].as_str().unwrap().contains("superseded it"), "{error}");
    assert!(error["hint"].as_str().unwrap().contains("`scafld review greet`"), "{error}");
    env.scafld(&["complete", "greet"]).assert_code(4);

    // A new proposal, then the contract amended under it: refused the same way.
    env.scafld(&propose).assert_code(0);
    let path = env.work.join(".scafld/specs/active/greet.md");
    let spec = std::fs::read_to_string(&path).unwrap().replace("grep -q hello greet.txt", "true");
    std::fs::write(&path, spec).unwrap();
    env.scafld(&["approve", "greet", "--amend", "--reason", "weaker"]).assert_code(0);
    let refused = accept();
    refused.assert_code(1);
    let message = refused.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(message.contains("(contract_amended) superseded it"), "{message}");
    env.scafld(&["complete", "greet"]).assert_code(4);
    let followed = follow_to_done(&env, "greet", &script);
    assert_eq!(followed.last().map(String::as_str), Some("scafld complete greet"), "{followed:?}");
}

/// A criterion moved unchanged to another phase after approval is a contract change: build
/// refuses it until `approve --amend`. Amended, a failing criterion moved into a completed phase
/// is run again with that phase (blocking it), never taken as done: the next action is never a
/// command that refuses, and once the work passes the task completes.
#[test]
fn a_criterion_moved_to_another_phase_needs_an_amendment_and_never_loops() {
    let env = TestEnv::new();
    workspace(&env);
    let spec = "---\nspec_version: '2.0'\ntask_id: m\nstatus: draft\nharden_status: not_run\n---\n\n# Move\n\n## Summary\n\nTwo phases.\n\n## Scope\n\n- `greet.txt` - the greeting.\n\n## Phase 1: One\n\nObjective: one.\n\nAcceptance:\n- [ ] `a1` test - ok\n  - Command: `true`\n\n## Phase 2: Two\n\nObjective: two.\n\nAcceptance:\n- [ ] `a2` test - hello\n  - Command: `grep -q hello greet.txt`\n- [ ] `a3` test - still there\n  - Command: `true`\n";
    std::fs::write(env.work.join(".scafld/specs/drafts/m.md"), spec).unwrap();
    env.scafld(&["approve", "m", "--reason", "next tests"]).assert_code(0);
    env.scafld(&["build", "m"]).assert_code(0);
    env.scafld(&["build", "m"]).assert_code(0);
    env.scafld(&["build", "m"]).assert_code(3);
    assert_eq!(status(&env, "m")["status"], "blocked");

    // `a2`, failing, moved into the completed phase 1.
    let path = env.work.join(".scafld/specs/active/m.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let start = text[..text.find("] `a2`").unwrap()].rfind("\n- ").unwrap() + 1;
    let end = start + text[start..].find("\n- [").unwrap() + 1;
    let block = text[start..end].to_string();
    let mut moved = format!("{}{}", &text[..start], &text[end..]);
    let at = moved.find("\n## Phase 2").unwrap();
    moved.insert_str(at, &block);
    std::fs::write(&path, &moved).unwrap();
    let refused = env.scafld(&["build", "m", "--json"]);
    refused.assert_code(1);
    let message = refused.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(message.contains("`a2` moved from phase2 to phase1"), "{message}");
    let s = status(&env, "m");
    assert_eq!(s["next_action"]["command"], "scafld approve m --amend --reason \"why\"", "{s}");
    let (_, amended) = follow(&env, "m", "unused");
    assert_eq!(amended["next_command"], "scafld build m", "{amended}");

    // The build runs `a2` again with phase 1, which it blocks; nothing calls it done.
    let build = env.scafld(&["build", "m", "--json"]);
    build.assert_code(3);
    let s = status(&env, "m");
    assert_eq!(s["status"], "blocked", "{s}");
    assert_eq!(s["next_action"]["command"], "scafld build m", "{s}");
    env.scafld(&["build", "m"]).assert_code(3);

    std::fs::write(env.work.join("greet.txt"), "hello\n").unwrap();
    let script = reviewer(&env, "pass", &pass(), "");
    let followed = follow_to_done(&env, "m", &script);
    assert_eq!(followed.last().map(String::as_str), Some("scafld complete m"), "{followed:?}");
}

/// A reviewer declares an `output_format` that is no provider's channel: the pass is recorded,
/// but `complete` refuses it, so the next action is another review (never `complete`), and an
/// honest reviewer's pass then completes.
#[test]
fn a_pass_through_a_declared_non_provider_channel_asks_for_another_review() {
    let env = TestEnv::new();
    workspace(&env);
    std::fs::write(env.work.join("greet.txt"), "hello, world\n").unwrap();
    approved(&env, "greet", "grep -q 'hello, world' greet.txt");
    env.scafld(&["build", "greet"]).assert_code(0);
    env.scafld(&["build", "greet"]).assert_code(0);
    let declared = pass().replacen('{', r#"{"output_format":"garbage text","#, 1);
    let garbage = reviewer(&env, "garbage", &declared, "");
    let review = env.scafld(&["review", "greet", "--provider", "command", "--provider-command", &garbage, "--json"]);
    review.assert_code(0);
    let s = status(&env, "greet");
    assert_eq!(s["review"]["verdict"], "pass", "{s}");
    assert_eq!(s["next_action"]["command"], "scafld review greet", "{s}");
    assert!(s["next_action"]["reason"].as_str().unwrap().contains("`garbage text`, not a provider channel"), "{s}");
    let refused = env.scafld(&["complete", "greet", "--json"]);
    refused.assert_code(4);
    assert!(refused.stdout.contains("not a provider channel"), "{}", refused.stdout);
    let honest = reviewer(&env, "pass", &pass(), "");
    assert_eq!(follow_to_done(&env, "greet", &honest), ["scafld review greet", "scafld complete greet"]);
}

/// A person recorded a manual criterion's pass, the build went to review, then the file in
/// scope changed: every result is stale, the person's included. A person's evidence is taken
/// while the task builds, so the next action is the build (it re-runs `a1` and records `m1` as
/// waiting), then the person's evidence, a review and `complete`: none of them refused.
#[test]
fn a_persons_evidence_gone_stale_in_review_is_built_again_before_they_record_it() {
    let env = TestEnv::new();
    workspace(&env);
    let spec = "---\nspec_version: '2.0'\ntask_id: greet\nstatus: draft\nharden_status: not_run\n---\n\n# Greet\n\n## Summary\n\nA greeting.\n\n## Scope\n\n- `greet.txt` - the greeting.\n\n## Phase 1: Write\n\nObjective: write it.\n\nAcceptance:\n- [ ] `a1` test - says hello\n  - Command: `grep -q hello greet.txt`\n- [ ] `m1` manual - a person reads it\n  - Expected kind: manual\n";
    std::fs::write(env.work.join(".scafld/specs/drafts/greet.md"), spec).unwrap();
    env.scafld(&["approve", "greet", "--reason", "next tests"]).assert_code(0);
    std::fs::write(env.work.join("greet.txt"), "hello\n").unwrap();
    env.scafld(&["build", "greet"]).assert_code(0);
    env.scafld(&["build", "greet"]).assert_code(3);
    let recorded = ["build", "greet", "--criterion", "m1", "--disposition", "pass", "--reason", "read it"];
    env.scafld(&recorded).assert_code(0);
    assert_eq!(status(&env, "greet")["status"], "review");

    std::fs::write(env.work.join("greet.txt"), "hello, world\n").unwrap();
    let s = status(&env, "greet");
    assert_eq!((&s["status"], &s["next_action"]["command"]), (&"review".into(), &"scafld build greet".into()), "{s}");
    assert!(s["next_action"]["reason"].as_str().unwrap().contains("a person records the evidence of `m1`"), "{s}");
    let script = reviewer(&env, "pass", &pass(), "");
    let followed = follow_to_done(&env, "greet", &script);
    assert_eq!(
        followed,
        [
            "scafld build greet",
            "scafld build greet --criterion=m1 --disposition pass --reason \"what was checked\"",
            "scafld review greet",
            "scafld complete greet"
        ]
    );
}

/// `greet` built and passed review, its spec's text then, and the path of its active file.
fn reviewed(env: &TestEnv) -> (String, std::path::PathBuf) {
    workspace(env);
    std::fs::write(env.work.join("greet.txt"), "hello, world\n").unwrap();
    approved(env, "greet", "grep -q 'hello, world' greet.txt");
    env.scafld(&["build", "greet"]).assert_code(0);
    env.scafld(&["build", "greet"]).assert_code(0);
    let script = reviewer(env, "pass", &pass(), "");
    env.scafld(&["review", "greet", "--provider", "command", "--provider-command", &script]).assert_code(0);
    let active = env.work.join(".scafld/specs/active/greet.md");
    (std::fs::read_to_string(&active).unwrap(), active)
}

/// The archived spec of `greet` (one month folder).
fn archived(env: &TestEnv) -> Vec<std::path::PathBuf> {
    let archive = env.work.join(".scafld/specs/archive");
    let months = std::fs::read_dir(archive).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_else(|_| vec![]);
    months.iter().map(|m| m.join("greet.md")).filter(|p| p.exists()).collect()
}

/// A daemon killed inside `complete`, after the archived spec was written and before the
/// active one was removed, leaves the old file beside it: an interrupted move's leftover.
/// `status`, `handoff` and `list` all name `reconcile` (not the `validate` that only repeats the
/// error), and following it puts the leftover aside and leaves nothing to do.
#[test]
fn a_leftover_of_an_interrupted_complete_is_reconciled_by_following_next() {
    let env = TestEnv::new();
    let (before, active) = reviewed(&env);
    env.scafld(&["complete", "greet"]).assert_code(0);
    assert_eq!(archived(&env).len(), 1);
    std::fs::write(&active, &before).unwrap(); // what the interrupted move leaves behind

    let s = status(&env, "greet");
    assert_eq!(s["next_action"]["command"], "scafld reconcile greet", "{s}");
    assert!(s["next_action"]["reason"].as_str().unwrap().contains("interrupted move's leftover"), "{s}");
    let text = env.scafld(&["status", "greet"]);
    assert!(text.stderr.contains("hint: scafld reconcile greet"), "{}", text.stderr);
    let handoff = env.scafld(&["handoff", "greet"]).stdout;
    assert!(handoff.contains("Next: `scafld reconcile greet`"), "{handoff}");
    let listed = env.scafld(&["list", "--json"]).json()["result"]["tasks"][0].clone();
    assert!(listed["error"].as_str().unwrap().contains("`scafld reconcile greet` moves it aside"), "{listed}");

    let script = reviewer(&env, "pass", &pass(), "");
    assert_eq!(follow_to_done(&env, "greet", &script), ["scafld reconcile greet"]);
    assert!(!active.exists() && archived(&env).len() == 1, "the leftover is set aside, the archive kept");
    assert_eq!(status(&env, "greet")["valid"], true);
}

/// A daemon killed inside `complete` after the ledger's entry and before any file moved: the
/// ledger says completed while the only file, in active/, still says review. `list` says to
/// reconcile; so do `status` and `handoff` (not "nothing left to do"), and following it
/// archives the file.
#[test]
fn a_complete_killed_before_its_move_is_reconciled_by_following_next() {
    let env = TestEnv::new();
    let (before, active) = reviewed(&env);
    env.scafld(&["complete", "greet"]).assert_code(0);
    for file in archived(&env) {
        std::fs::remove_file(file).unwrap();
    }
    std::fs::write(&active, &before).unwrap();

    let listed = env.scafld(&["list", "--json"]).json()["result"]["tasks"][0].clone();
    assert_eq!((&listed["status"], &listed["file_status"]), (&"completed".into(), &"review".into()), "{listed}");
    let s = status(&env, "greet");
    assert_eq!(s["next_action"]["command"], "scafld reconcile greet", "{s}");
    let handoff = env.scafld(&["handoff", "greet"]).stdout;
    assert!(handoff.contains("Next: `scafld reconcile greet`"), "{handoff}");

    let script = reviewer(&env, "pass", &pass(), "");
    assert_eq!(follow_to_done(&env, "greet", &script), ["scafld reconcile greet"]);
    assert!(!active.exists() && archived(&env).len() == 1, "the spec is archived");
    let listed = env.scafld(&["list", "--json"]).json()["result"]["tasks"][0].clone();
    assert_eq!(listed["file_status"], Value::Null, "{listed}");
}

/// A criterion that moves its own spec into the archive while its build step runs: the build's
/// write follows the file to where it is now and puts it back in its folder (before, it read
/// the place the index last knew, found nothing, and deferred the write as "cannot read the
/// spec", naming `validate`; `status` and `handoff` then said review and `list` flagged the
/// file for `reconcile`). The build, `status`, `handoff` and `list` agree on one next step,
/// and following it completes the task.
#[test]
fn a_spec_its_criterion_moves_mid_build_gets_one_next_step_everywhere() {
    let env = TestEnv::new();
    workspace(&env);
    let moved = ".scafld/specs/archive/2026-11";
    approved(&env, "mv", &format!("mkdir -p {moved} && mv .scafld/specs/active/mv.md {moved}/"));
    env.scafld(&["build", "mv"]).assert_code(0);
    let built = env.scafld(&["build", "mv", "--json"]);
    built.assert_code(0);
    let built = built.json()["result"].clone();

    let s = status(&env, "mv");
    let next = s["next_action"]["command"].as_str().unwrap().to_string();
    assert_eq!(next, "scafld review mv", "{s}");
    assert_eq!(built["next_command"], next.as_str(), "{built}");
    assert!(!built["message"].as_str().unwrap().contains("not updated"), "{built}");
    let handoff = env.scafld(&["handoff", "mv"]).stdout;
    assert!(handoff.contains(&format!("Next: `{next}`")), "{handoff}");
    let listed = env.scafld(&["list", "--json"]).json()["result"]["tasks"][0].clone();
    assert_eq!(
        (&listed["error"], &listed["file_status"], &listed["file_counts"]),
        (&Value::Null, &Value::Null, &Value::Null),
        "{listed}"
    );
    assert_eq!(s["path"], ".scafld/specs/active/mv.md", "written back where its status puts it: {s}");

    let script = reviewer(&env, "pass", &pass(), "");
    assert_eq!(follow_to_done(&env, "mv", &script), [next, "scafld complete mv".into()]);
}

/// The hint of `command` refused on `task`, which must be `status`'s next action.
fn refused_with_next(env: &TestEnv, task: &str, command: &[&str]) -> String {
    let next = status(env, task)["next_action"].clone();
    let mut args = command.to_vec();
    args.push("--json");
    let refused = env.scafld(&args);
    assert_ne!(refused.code, 0, "{command:?} was not refused: {}", refused.stdout);
    let hint = refused.json()["error"]["hint"].as_str().unwrap_or_default().to_string();
    let named = format!("next: `{}` ({})", next["command"].as_str().unwrap(), next["reason"].as_str().unwrap());
    assert!(hint.contains(&named), "{command:?}: hint {hint:?}, status says {named}");
    next["command"].as_str().unwrap().to_string()
}

/// `build` on a draft nobody hardened names the step `status` names (harden), never an
/// `approve` without a reason, which refuses the unhardened draft.
#[test]
fn a_build_of_an_unhardened_draft_names_harden_as_status_does() {
    let env = TestEnv::new();
    workspace(&env);
    let spec = "---\nspec_version: '2.0'\ntask_id: g\nstatus: draft\nharden_status: not_run\n---\n\n# Greet\n\n## Summary\n\nA greeting.\n\n## Scope\n\n- `greet.txt` - the greeting.\n\n## Phase 1: Write\n\nObjective: write it.\n\nAcceptance:\n- [ ] `a1` test - says hello\n  - Command: `true`\n";
    std::fs::write(env.work.join(".scafld/specs/drafts/g.md"), spec).unwrap();
    assert_eq!(refused_with_next(&env, "g", &["build", "g"]), "scafld harden g");
}

/// After a failed review whose fix lies in a file outside the scope, nothing is stale and the
/// spec is as the reviewer saw it: `status`'s repair step and `build`'s refusal name the way on
/// (`review --force`), build never names itself, and following that the task completes.
#[test]
fn a_fix_outside_the_scope_after_a_failed_review_names_the_way_on() {
    let env = TestEnv::new();
    built_greet(&env);
    let script = reviewer(&env, "pass", &pass(), "");
    let args = ["review", "greet", "--approval", "manual", "--provider", "command", "--provider-command", &script];
    env.scafld(&args).assert_code(0);
    env.scafld(&["review", "reject", "greet", "--reason", "say what the greeting is for"]).assert_code(0);
    std::fs::write(env.work.join("NOTES.md"), "what the greeting is for\n").unwrap();

    let way_on = "`scafld review greet --force`";
    let next = status(&env, "greet")["next_action"].clone();
    assert!(next["reason"].as_str().unwrap().contains(way_on), "{next}");
    assert_eq!(refused_with_next(&env, "greet", &["build", "greet"]), "scafld handoff greet");
    let build = env.scafld(&["build", "greet", "--json"]).json()["error"].clone();
    assert!(build["message"].as_str().unwrap().contains(way_on), "{build}");
    let review = env.scafld(&["review", "greet", "--provider", "command", "--provider-command", &script, "--json"]);
    review.assert_code(1);
    assert!(review.json()["error"]["hint"].as_str().unwrap().contains("--force"), "{}", review.stdout);
    let forced = ["review", "greet", "--force", "--provider", "command", "--provider-command", &script];
    env.scafld(&forced).assert_code(0);
    assert_eq!(follow_to_done(&env, "greet", &script), ["scafld complete greet"]);
}

/// `approve` and `harden` on a task past draft, and an amendment with nothing to amend, name
/// the next action `status` gives (a review of the finished build), not nothing.
#[test]
fn refusals_of_approve_harden_and_an_empty_amendment_name_the_next_action() {
    let env = TestEnv::new();
    built_greet(&env);
    for command in [
        &["approve", "greet", "--reason", "x"][..],
        &["harden", "greet"],
        &["approve", "greet", "--amend", "--reason", "x"],
    ] {
        assert_eq!(refused_with_next(&env, "greet", command), "scafld review greet", "{command:?}");
    }
}

/// `plan` names the next step `status` names for the draft it writes (its TODO placeholders
/// are errors: `scafld validate`), not a step of its own, and so does the draft's own
/// `Allowed follow-up command`.
#[test]
fn plan_names_the_next_step_status_names() {
    let env = TestEnv::new();
    workspace(&env);
    let planned = env.scafld(&["plan", "fresh", "--title", "Fresh", "--json"]);
    planned.assert_code(0);
    let next = planned.json()["result"]["next_action"].clone();
    assert_eq!(next, status(&env, "fresh")["next_action"], "{next}");
    assert_eq!(next["command"], "scafld validate fresh", "{next}");
    // The draft's own follow-up line is that decision too, from the moment it is written.
    let draft = std::fs::read_to_string(env.work.join(".scafld/specs/drafts/fresh.md")).unwrap();
    assert!(draft.contains("Allowed follow-up command: `scafld validate fresh`"), "{draft}");
    let human = env.scafld(&["plan", "other", "--title", "Other"]);
    assert!(human.stdout.trim_end().ends_with("next: scafld validate other"), "{}", human.stdout);
}

/// A configuration file that does not read: `status` says so (the file, why, what to do),
/// exits as the commands that read it do (`workspace_error`, 1), and names fixing it as the
/// next step rather than the build that would be refused; once fixed, the build is next again.
#[test]
fn a_configuration_that_does_not_read_is_status_s_error_and_its_next_step() {
    let env = TestEnv::new();
    workspace(&env);
    approved(&env, "greet", "grep -q hello greet.txt");
    let local = env.work.join(".scafld/config.local.yaml");
    let kept = std::fs::read_to_string(&local).unwrap();
    std::fs::write(&local, "execution: [unclosed\n").unwrap();
    let run = env.scafld(&["status", "greet", "--json"]);
    run.assert_code(1);
    let envelope = run.json();
    assert_eq!(envelope["error"]["code"], "workspace_error", "{envelope}");
    assert!(envelope["error"]["hint"].as_str().unwrap().contains("fix .scafld/config.local.yaml"), "{envelope}");
    let result = &envelope["result"];
    assert_eq!(result["config_error"]["file"], ".scafld/config.local.yaml", "{result}");
    assert_eq!(result["next_action"]["action"], "fix_config", "{result}");
    assert_eq!(result["next_action"]["command"], "none", "{result}");
    assert!(result["next_action"]["reason"].as_str().unwrap().contains("`scafld build greet`"), "{result}");
    // The build it holds back is indeed refused.
    env.scafld(&["build", "greet"]).assert_code(1);
    let human = env.scafld(&["status", "greet"]);
    human.assert_code(1);
    assert!(human.stdout.contains("config error: .scafld/config.local.yaml:"), "{}", human.stdout);

    // A value of the wrong type is named by the file that has it, its line and its key.
    std::fs::write(&local, &kept).unwrap();
    let base = env.work.join(".scafld/config.yaml");
    let committed = std::fs::read_to_string(&base).unwrap();
    let line = 1 + committed.lines().position(|l| l.starts_with("  absolute_timeout_seconds:")).unwrap();
    let wrong: Vec<&str> = committed
        .lines()
        .map(|l| if l.starts_with("  absolute_timeout_seconds:") { "  absolute_timeout_seconds: abc" } else { l })
        .collect();
    std::fs::write(&base, wrong.join("\n")).unwrap();
    let result = env.scafld(&["status", "greet", "--json"]).json()["result"].clone();
    assert_eq!(result["config_error"]["file"], ".scafld/config.yaml", "{result}");
    let message = result["config_error"]["message"].as_str().unwrap();
    let expected = format!("line {line}: `execution.absolute_timeout_seconds`: invalid type: string \"abc\"");
    assert!(message.starts_with(&expected), "{message}");
    std::fs::write(&base, committed).unwrap();

    std::fs::write(&local, kept).unwrap();
    let fixed = env.scafld(&["status", "greet", "--json"]);
    fixed.assert_code(0);
    assert_eq!(fixed.json()["result"]["next_action"]["command"], "scafld build greet");
    assert!(fixed.json()["result"].get("config_error").is_none());
}

/// `scafld doctor` in a workspace names each configuration key no setting reads as a `warn`
/// row, file, line and key, as `status` warns of it (before, doctor said nothing of them),
/// and says every key is read once they are gone.
#[test]
fn doctor_warns_of_each_unknown_configuration_key() {
    let env = TestEnv::new();
    workspace(&env);
    let rows = |run: &scafld_tests::Run| -> Vec<Value> {
        let report = run.json();
        let checks = report["result"]["checks"].as_array().or_else(|| report["error"]["details"]["checks"].as_array());
        let checks = checks.unwrap_or_else(|| panic!("{report}"));
        checks.iter().filter(|c| c["name"] == "config").cloned().collect()
    };
    let clean = env.scafld(&["doctor", "--json"]);
    let config = rows(&clean);
    assert_eq!(config.len(), 1, "{config:?}");
    assert_eq!(config[0]["health"], "ok", "{config:?}");
    let base = env.work.join(".scafld/config.yaml");
    let text = format!("{}\nreveiw:\n  aproval: manual\n", std::fs::read_to_string(&base).unwrap());
    let line = text.lines().position(|l| l == "reveiw:").unwrap() + 1;
    std::fs::write(&base, text).unwrap();
    std::fs::write(env.work.join(".scafld/config.local.yaml"), "verify:\n  min_independance: cross_vendor\n").unwrap();
    let warned = env.scafld(&["doctor", "--json"]);
    let details: Vec<(String, String)> = rows(&warned)
        .iter()
        .map(|c| (c["health"].as_str().unwrap().to_string(), c["detail"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(
        details,
        vec![
            ("warn".to_string(), format!(".scafld/config.yaml: line {line}: unknown key `reveiw` is ignored (did you mean `review`?)")),
            ("warn".to_string(), ".scafld/config.local.yaml: line 2: unknown key `verify.min_independance` is ignored (did you mean `verify.min_independence`?)".to_string()),
        ],
    );
    let human = env.scafld(&["doctor"]);
    assert!(human.stdout.contains("unknown key `reveiw` is ignored"), "{}", human.stdout);
}

/// A misspelt configuration key sets nothing: `status` warns of it on every call, naming the
/// file, the line, the key and the known key nearest it; the keys `scafld init` writes and
/// the original tool's own keys draw no warning. `validate`, `list` and `build` warn of it
/// too, once each, on stderr: before, only `status` did.
#[test]
fn a_misspelt_configuration_key_is_warned_of_by_status() {
    let env = TestEnv::new();
    workspace(&env);
    approved(&env, "greet", "grep -q hello greet.txt");
    let quiet = env.scafld(&["status", "greet", "--json"]);
    quiet.assert_code(0);
    assert!(quiet.json()["result"].get("warnings").is_none(), "{}", quiet.stdout);
    let base = env.work.join(".scafld/config.yaml");
    let committed = std::fs::read_to_string(&base).unwrap();
    let text = format!("{committed}\nllm:\n  model_profile: default\nreveiw:\n  aproval: manual\n");
    let line = text.lines().position(|l| l == "reveiw:").unwrap() + 1;
    std::fs::write(&base, text).unwrap();
    std::fs::write(env.work.join(".scafld/config.local.yaml"), "verify:\n  min_independance: cross_vendor\n").unwrap();
    for _ in 0..2 {
        let run = env.scafld(&["status", "greet", "--json"]);
        run.assert_code(0);
        let warnings = run.json()["result"]["warnings"].clone();
        let expected = serde_json::json!([
            format!(".scafld/config.yaml: line {line}: unknown key `reveiw` is ignored (did you mean `review`?)"),
            ".scafld/config.local.yaml: line 2: unknown key `verify.min_independance` is ignored (did you mean `verify.min_independence`?)",
        ]);
        assert_eq!(warnings, expected, "{}", run.stdout);
    }
    let human = env.scafld(&["status", "greet"]);
    assert!(human.stderr.contains("unknown key `reveiw`"), "{}", human.stderr);
    for args in [
        &["validate", "greet"][..],
        &["validate", "greet", "--json"],
        &["validate", "--all"],
        &["list", "--json"],
        &["build", "greet", "--json"],
    ] {
        let run = env.scafld(args);
        for key in ["`reveiw`", "`verify.min_independance`"] {
            assert_eq!(run.stderr.matches(key).count(), 1, "{args:?}: {key}: {}", run.stderr);
        }
        // With --json, stdout is the envelope alone.
        match args.contains(&"--json") {
            true => assert_eq!(run.json()["ok"], true, "{}", run.stdout),
            false => assert!(!run.stdout.contains("reveiw"), "{args:?}: {}", run.stdout),
        }
    }
}

/// A switch to a branch made before the task leaves its committed spec on the branch left:
/// status names that branch and the switch back (and the checkout of the file alone), not a
/// copy git lacks; the switch as printed brings the task back.
#[test]
fn a_spec_committed_on_the_branch_left_is_restored_by_switching_back() {
    let env = TestEnv::new();
    workspace(&env);
    scafld_tests::commit_all(&env.work, "scafld init");
    let branch = git(&env.work, &["rev-parse", "--abbrev-ref", "HEAD"]);
    git(&env.work, &["branch", "before"]);
    std::fs::write(env.work.join("greet.txt"), "hello, world\n").unwrap();
    approved(&env, "greet", "grep -q 'hello' greet.txt");
    env.scafld(&["build", "greet"]).assert_code(0);
    scafld_tests::commit_all(&env.work, "the work and its spec");
    git(&env.work, &["switch", "-q", "before"]);

    let missing = status(&env, "greet")["next_action"].clone();
    let spec = ".scafld/specs/active/greet.md";
    assert_eq!(missing["command"], format!("git switch {branch}"), "{missing}");
    let reason = missing["reason"].as_str().unwrap();
    assert!(reason.contains(&format!("`git checkout {branch} -- {spec}`")), "{reason}");
    assert!(!reason.contains("git holds no copy"), "{reason}");
    shell(&env, &env.work, missing["command"].as_str().unwrap()).assert_code(0);
    assert!(env.work.join(spec).is_file());
    let back = status(&env, "greet")["next_action"].clone();
    assert!(back["command"].as_str().unwrap().starts_with("scafld build"), "{back}");
}

/// `cmd` run by `sh` in `dir`, with the test's environment and the built binaries on PATH.
fn shell(env: &TestEnv, dir: &std::path::Path, cmd: &str) -> scafld_tests::Run {
    let mut sh = std::process::Command::new("sh");
    env.apply_env(&mut sh);
    let path = format!("{}:{}", scafld_tests::bin_dir().display(), std::env::var("PATH").unwrap_or_default());
    // A commit needs a name, as the test's own `git` gives one.
    for (key, value) in [("GIT_AUTHOR_NAME", "scafld-tests"), ("GIT_COMMITTER_NAME", "scafld-tests")] {
        sh.env(key, value);
    }
    for key in ["GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"] {
        sh.env(key, "tests@scafld.invalid");
    }
    sh.env("PATH", path).arg("-c").arg(cmd).current_dir(dir).stdin(std::process::Stdio::null());
    scafld_tests::Run::from(sh.output().unwrap())
}

/// `scafld args...` run in `dir` (a subfolder of the workspace, or a folder outside it).
fn scafld_in(env: &TestEnv, dir: &std::path::Path, args: &[&str]) -> scafld_tests::Run {
    scafld_tests::Run::from(env.scafld_command(args).current_dir(dir).output().unwrap())
}

/// The commands scafld prints run as printed from where it was called: from a subfolder, a
/// git command with the root's paths (the restore of a missing spec, finalize's commit of the
/// signed work) goes to the root first; from outside, a call given `--root` prints scafld
/// commands that carry it. At the root they are as the daemon wrote them.
#[test]
fn printed_commands_run_from_a_subfolder_and_with_root_from_outside() {
    let env = TestEnv::new();
    built_greet(&env);
    let sub = env.work.join("sub/deep");
    std::fs::create_dir_all(&sub).unwrap();
    let outside = env.path("home");
    let root = env.work.display().to_string();

    // A missing spec git holds: its restore, from the subfolder.
    approved(&env, "other", "true");
    let spec = ".scafld/specs/approved/other.md";
    git(&env.work, &["add", spec]);
    git(&env.work, &["commit", "-qm", "spec"]);
    std::fs::remove_file(env.work.join(spec)).unwrap();
    let at_root = status(&env, "other");
    assert_eq!(at_root["next_action"]["command"], format!("git checkout HEAD -- {spec}"), "{at_root}");
    let here = scafld_in(&env, &sub, &["status", "other", "--json"]).json()["result"].clone();
    let restore = here["next_action"]["command"].as_str().unwrap();
    assert_eq!(here["next_command"], restore);
    shell(&env, &sub, restore).assert_code(0);
    assert!(env.work.join(spec).is_file(), "{restore} did not bring the spec back");

    // With --root from outside: every scafld command printed carries it, and runs there.
    let there = scafld_in(&env, &outside, &["--root", &root, "status", "other", "--json"]);
    let next = there.json()["result"]["next_action"]["command"].as_str().unwrap().to_string();
    assert_eq!(next, format!("scafld --root {root} build other"));
    shell(&env, &outside, &next).assert_code(0);
    let human = scafld_in(&env, &outside, &["--root", &root, "status", "other"]);
    assert!(human.stdout.contains(&format!("next: scafld --root {root} build other")), "{}", human.stdout);

    // Finalize from the subfolder: its commit of the signed work, then verify, as printed.
    let script = reviewer(&env, "pass", &pass(), "");
    let review = ["review", "greet", "--provider", "command", "--provider-command", &script];
    scafld_in(&env, &sub, &review).assert_code(0);
    let finalized = scafld_in(&env, &sub, &["finalize", "greet", "--json"]).json()["result"].clone();
    let next = finalized["next_command"].as_str().unwrap();
    assert!(next.starts_with(&format!("cd {root} && git add -A -- greet.txt && git commit")), "{next}");
    let run = shell(&env, &sub, next);
    assert_eq!(run.code, 0, "`{next}` failed from the subfolder:\n{}{}", run.stdout, run.stderr);
}
