//! Real-CLI review providers, played by fake `codex`, `claude` and `gemini` programs on the
//! caller's PATH that check their argv and answer through the same channel as the real ones
//! (codex: the output file; claude and gemini: the `submit_review` MCP tool); the submit tool's
//! own stdio server; a worker's provider dying with the worker; `scafld doctor`.

use std::process::Command;

use scafld_tests::{RawClient, Run, TestEnv, wait_until};
use serde_json::{Value, json};

pub(crate) const DOSSIER: &str = r#"{"verdict":"pass","mode":"discover","summary":"Checked the flag path.","findings":[],"attack_log":[{"target":"diff","attack":"trace the flag","result":"clean"}],"budget":{}}"#;

/// Fake codex: insists on the read-only, ephemeral invocation and answers in the output file.
const FAKE_CODEX: &str = include_str!("../fixtures/fake-codex.sh");

/// Fake claude/gemini: finds its MCP server config the way the real CLI does, starts the
/// server, and submits through `submit_review` (first an invalid dossier, then the real one,
/// then the same again, which counts once; `FAKE_MODE=retract`: an answer, then `FAKE_THEN`).
const FAKE_MCP_CLIENT: &str = include_str!("../fixtures/fake-mcp-client.py");

pub(crate) fn install_fakes(env: &TestEnv, which: &[&str]) -> String {
    let bin = env.path("fakebin");
    std::fs::create_dir_all(&bin).unwrap();
    for name in which {
        let body = if *name == "codex" { FAKE_CODEX } else { FAKE_MCP_CLIENT };
        let path = bin.join(name);
        std::fs::write(&path, body).unwrap();
        Command::new("chmod").arg("+x").arg(&path).status().unwrap();
    }
    format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default())
}

fn to_review(env: &TestEnv) {
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    let spec = "---\nspec_version: '2.0'\ntask_id: rev\nstatus: draft\n---\n\n# Review me\n\n## Phase 1: Do\n\nAcceptance:\n- [ ] `a1` test - ok\n  - Command: `true`\n";
    std::fs::write(env.work.join(".scafld/specs/drafts/rev.md"), spec).unwrap();
    env.scafld(&["approve", "rev", "--reason", "test"]).assert_code(0);
    env.scafld(&["build", "rev"]).assert_code(0);
    env.scafld(&["build", "rev"]).assert_code(0);
}

fn review(env: &TestEnv, path: &str, args: &[&str], extra_env: &[(&str, &str)]) -> scafld_tests::Run {
    let mut all = vec!["review", "rev", "--min-attack-angles", "1", "--json"];
    all.extend_from_slice(args);
    let mut command = env.scafld_command(&all);
    command.env("PATH", path).env("FAKE_DOSSIER", DOSSIER).env("OPENAI_API_KEY", "from-the-caller");
    for (k, v) in extra_env {
        command.env(k, v);
    }
    scafld_tests::Run::from(command.output().unwrap())
}

#[test]
fn auto_prefers_the_other_agent_and_codex_answers_in_its_output_file() {
    let env = TestEnv::new();
    // A daemon with an empty environment: PATH and auth come from the caller.
    let mut daemon = Command::new(scafld_tests::scafldd_bin());
    daemon.env_clear().arg("--socket").arg(&env.socket).arg("--state-dir").arg(&env.state_dir);
    let mut child = daemon.spawn().unwrap();
    wait_until("env -i daemon", || RawClient::connect(&env.socket).is_ok());
    to_review(&env);
    let path = install_fakes(&env, &["codex", "claude"]);
    let run = review(&env, &path, &[], &[("CLAUDECODE", "1")]);
    run.assert_code(0);
    let result = run.json()["result"].clone();
    assert_eq!(result["provider"], "codex", "a Claude host is reviewed by codex: {result}");
    assert_eq!(result["output_format"], "codex.output_file");
    env.scafld(&["complete", "rev"]).assert_code(0);
    RawClient::connect(&env.socket).unwrap().result("daemon.shutdown", json!({}));
    child.wait().unwrap();
}

/// Reviewed from a plain shell (no host markers), `auto` still never picks the agent that built
/// the task while another is installed: the ledger says who wrote the work.
#[test]
fn auto_passes_over_the_agent_that_built_the_task() {
    let env = TestEnv::new();
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    let spec = "---\nspec_version: '2.0'\ntask_id: rev\nstatus: draft\n---\n\n# Review me\n\n## Phase 1: Do\n\nAcceptance:\n- [ ] `a1` test - ok\n  - Command: `true`\n";
    std::fs::write(env.work.join(".scafld/specs/drafts/rev.md"), spec).unwrap();
    env.scafld(&["approve", "rev", "--reason", "test"]).assert_code(0);
    for _ in 0..2 {
        Run::from(env.scafld_command(&["build", "rev"]).env("CODEX_THREAD_ID", "t1").output().unwrap()).assert_code(0);
    }
    let path = install_fakes(&env, &["codex", "claude"]);
    let run = review(&env, &path, &[], &[]);
    run.assert_code(0);
    assert_eq!(run.json()["result"]["provider"], "claude", "codex built it: {}", run.stdout);
    // Among several reviewers too: `auto` beside claude is claude again, never codex (and so
    // refused as claude named twice).
    let run = review(&env, &path, &["--reviewers", "auto,claude", "--force"], &[]);
    let message = run.json()["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains(r#""auto" resolves to "claude""#), "codex built it: {}", run.stdout);
}

#[test]
fn claude_and_gemini_answer_only_through_submit_review() {
    for provider in ["claude", "gemini"] {
        let env = TestEnv::new();
        to_review(&env);
        let path = install_fakes(&env, &[provider]);
        let run = review(&env, &path, &["--provider", provider], &[]);
        run.assert_code(0);
        let result = run.json()["result"].clone();
        assert_eq!(result["provider"], provider);
        assert_eq!(result["output_format"], format!("{provider}.mcp_submit_review"));

        // Prose on stdout without a tool call does not count.
        let run = review(&env, &path, &["--provider", provider, "--force"], &[("FAKE_MODE", "prose")]);
        run.assert_code(4);
        assert!(run.json()["error"]["message"].as_str().unwrap().contains("produced no submission"), "{}", run.stdout);
    }
}

/// A reviewer that submits a pass and then a different answer (a fail with a blocker) gave no
/// verdict: neither submission is its answer, as two different dossiers in a command
/// reviewer's output are none. The review asks for a retry and `complete` refuses.
#[test]
fn a_second_different_submission_leaves_the_review_with_no_verdict() {
    let blocking = r#"{"verdict":"fail","mode":"discover","summary":"Correction: one blocker.","findings":[{"id":"f1","severity":"high","blocks_completion":true,"summary":"the flag is never read","location":{"path":"src/lib.rs","line":1},"evidence":"no reader","impact":"dead flag","validation":"grep -rn flag src"}],"attack_log":[{"target":"diff","attack":"trace the flag","result":"clean"}],"budget":{}}"#;
    for provider in ["claude", "gemini"] {
        let env = TestEnv::new();
        to_review(&env);
        let path = install_fakes(&env, &[provider]);
        let run = review(&env, &path, &["--provider", provider], &[("FAKE_MODE", "retract"), ("FAKE_THEN", blocking)]);
        run.assert_code(4);
        let out = run.json();
        let message = out["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("no verdict") && message.contains("two different answers"), "{provider}: {out}");
        assert!(out["error"]["hint"].as_str().unwrap_or_default().contains("scafld review retry"), "{provider}: {out}");
        assert_eq!(out["result"]["gate"], "retry", "{provider}: {out}");
        env.scafld(&["complete", "rev"]).assert_code(4);
    }
}

/// An answer over the 8 MiB read of a reviewer's answer is refused through `submit_review` as
/// it is in codex's answer file or on a command's stdout: never a pass.
#[test]
fn a_submission_over_the_answer_limit_is_refused() {
    let env = TestEnv::new();
    to_review(&env);
    let path = install_fakes(&env, &["claude"]);
    let run = review(&env, &path, &["--provider", "claude"], &[("FAKE_MODE", "big")]);
    run.assert_code(4);
    let out = run.json();
    let message = out["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("the reviewer's submit_review answer is 9.0 MiB") && message.contains("over the 8.0 MiB"),
        "{out}"
    );
    env.scafld(&["complete", "rev"]).assert_code(4);
}

/// The files below `dir` whose bytes hold `secret`.
fn holding(dir: &std::path::Path, secret: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => found.extend(holding(&path, secret)),
            Ok(t)
                if t.is_file() && std::fs::read(&path).is_ok_and(|b| String::from_utf8_lossy(&b).contains(secret)) =>
            {
                found.push(path);
            }
            _ => {}
        }
    }
    found
}

/// What a reviewer CLI is given of the user's own auth (claude's `env` and `apiKeyHelper`,
/// gemini's login credentials) is never written into the workspace, which the reviewer reads:
/// it is in the daemon's private state (folders 0700, files 0600) while the run lasts, and
/// goes when the run ends or, after the daemon was killed, as it starts again.
#[test]
fn provider_credentials_stay_out_of_the_workspace_and_go_with_the_run() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    for (provider, secret) in [("claude", "sk-test-CLAUDE-KEY"), ("gemini", "ya29.test-GEMINI-TOKEN")] {
        let mut env = TestEnv::new();
        env.start_daemon();
        to_review(&env);
        let home = env.path("home");
        std::fs::create_dir_all(home.join(".claude")).unwrap();
        std::fs::create_dir_all(home.join(".gemini")).unwrap();
        let claude = json!({"env": {"ANTHROPIC_API_KEY": secret}, "apiKeyHelper": format!("echo {secret}")});
        std::fs::write(home.join(".claude/settings.json"), claude.to_string()).unwrap();
        let gemini = json!({"security": {"auth": {"selectedType": "oauth-personal"}}});
        std::fs::write(home.join(".gemini/settings.json"), gemini.to_string()).unwrap();
        std::fs::write(home.join(".gemini/oauth_creds.json"), json!({"access_token": secret}).to_string()).unwrap();
        let path = install_fakes(&env, &[provider]);
        let gate = env.path("gate");
        let mut command = env.scafld_command(&["review", "rev", "--provider", provider, "--min-attack-angles", "1"]);
        command.env("PATH", &path).env("FAKE_DOSSIER", DOSSIER).env("FAKE_GATE", &gate);
        let mut client =
            command.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
        let scratch = env.state_dir.join("reviewer-runs");
        wait_until("the reviewer's credentials", || !holding(&scratch, secret).is_empty());
        assert_eq!(holding(&env.work, secret), Vec::<std::path::PathBuf>::new(), "{provider}: in the workspace");
        for file in holding(&scratch, secret) {
            assert_eq!(mode(&file), 0o600, "{}", file.display());
            let mut dir = file.parent().unwrap();
            while dir != env.state_dir {
                assert_eq!(mode(dir), 0o700, "{}", dir.display());
                dir = dir.parent().unwrap();
            }
        }
        // Killed with the run under way, the daemon leaves them; its next start removes them
        // before the reviewer is resumed (which is given its own again).
        let run_dir = std::fs::read_dir(&scratch).unwrap().next().unwrap().unwrap().path();
        std::fs::write(run_dir.join("left-by-the-killed-daemon"), "").unwrap();
        let mut daemon = env.take_daemon();
        daemon.kill().unwrap();
        daemon.wait().unwrap();
        client.kill().unwrap();
        client.wait().unwrap();
        env.start_daemon();
        assert!(!run_dir.join("left-by-the-killed-daemon").exists(), "{provider}: kept across the restart");
        std::fs::write(&gate, "").unwrap();
        wait_until("the resumed review to end", || {
            let status = env.scafld(&["review", "status", "rev", "--json"]).json();
            let state = status["result"]["reviewers"][0]["state"].clone();
            state != "running" && state != "queued"
        });
        wait_until("the run's scratch to go", || std::fs::read_dir(&scratch).is_ok_and(|mut d| d.next().is_none()));
        assert_eq!(holding(&env.work, secret), Vec::<std::path::PathBuf>::new());
    }
}

#[test]
fn auto_with_no_provider_installed_fails_closed() {
    let env = TestEnv::new();
    to_review(&env);
    let run = review(&env, "/usr/bin:/bin", &[], &[]);
    run.assert_code(4);
    let error = run.json()["error"].clone();
    assert!(error["message"].as_str().unwrap().contains("no external review provider found"), "{error}");
    env.scafld(&["complete", "rev"]).assert_code(4);
    let run = review(&env, "/usr/bin:/bin", &["--provider", "codex"], &[]);
    run.assert_code(4);
}

#[test]
fn provider_events_show_while_the_review_runs() {
    let env = TestEnv::new();
    to_review(&env);
    let path = install_fakes(&env, &["claude"]);
    let gate = env.path("gate");
    let log = env.path("review-stderr.txt");
    let mut command = env.scafld_command(&["review", "rev", "--provider", "claude", "--min-attack-angles", "1"]);
    command
        .env("PATH", &path)
        .env("FAKE_DOSSIER", DOSSIER)
        .env("FAKE_GATE", &gate)
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap());
    let child = command.spawn().unwrap();
    // The reviewer waits at the gate after its init event; the client must show the event.
    wait_until("the client to print the provider event", || {
        std::fs::read_to_string(&log).is_ok_and(|text| text.contains("claude event system.init"))
    });
    let jobs = env.scafld(&["job", "list", "--json"]).json()["result"]["jobs"].clone();
    assert!(jobs[0]["activity"].as_str().unwrap_or_default().contains("system.init"), "{jobs}");
    std::fs::write(&gate, "").unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("started session") && stderr.contains("claude event system.init"), "{stderr}");
}

#[test]
fn a_killed_worker_takes_its_providers_whole_process_group_with_it() {
    let env = TestEnv::new();
    crate::sessions::ready(&env, 1);
    crate::sessions::detach(&env, "worker", "/usr/bin:/bin", &[]);
    // The provider starts a child of its own, as real CLIs do (node and its helpers).
    let provider = "sleep 4321.25 & sleep 4321.5; wait";
    let mut worker = env
        .scafld_command(&["worker", "--provider", "command", "--provider-command", provider, "--once"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    scafld_tests::wait_until("the provider to run", || {
        crate::exec::running("sleep 4321.5") && crate::exec::running("sleep 4321.25")
    });
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(worker.id() as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    worker.wait().unwrap();
    scafld_tests::wait_until("the provider group to die with the worker", || {
        !crate::exec::running("sleep 4321.5") && !crate::exec::running("sleep 4321.25")
    });
}

/// `scafld job cancel` of a job a worker loop holds reaches the worker: its provider's whole
/// group is stopped at once (as the daemon stops its own runs), not left to run to its end
/// and have its answer refused, and the worker says so and submits nothing.
#[test]
fn cancelling_a_workers_job_stops_its_providers_process_group() {
    let env = TestEnv::new();
    crate::sessions::ready(&env, 1);
    // Long enough that only the cancel can end the run within the test's deadline.
    std::fs::write(
        env.work.join(".scafld/config.local.yaml"),
        "review:\n  dossier:\n    min_attack_angles: 1\n  external:\n    absolute_max_seconds: 600\n    idle_timeout_seconds: 0\n",
    )
    .unwrap();
    let spawned = crate::sessions::detach(&env, "worker", "/usr/bin:/bin", &[]);
    let job = spawned["job_ids"][0].as_str().unwrap().to_string();
    let provider = "sleep 4322.25 & sleep 4322.5; wait";
    let log = env.path("worker-stderr.txt");
    let mut worker = env
        .scafld_command(&["worker", "--provider", "command", "--provider-command", provider, "--once"])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    // A failed check leaves no worker (nor, with it, its provider's group) running.
    let kill_worker = scopeguard(worker.id());
    scafld_tests::wait_until("the provider to run", || {
        crate::exec::running("sleep 4322.5") && crate::exec::running("sleep 4322.25")
    });
    env.scafld(&["job", "cancel", &job]).assert_code(0);
    scafld_tests::wait_until("the cancel to stop the provider's group", || {
        !crate::exec::running("sleep 4322.5") && !crate::exec::running("sleep 4322.25")
    });
    let status = scafld_tests::wait_for_exit(&mut worker, scafld_tests::DEADLINE);
    if status.is_some() {
        std::mem::forget(kill_worker); // reaped: its pid may be another process's now
    }
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(status.is_some_and(|s| s.success()), "{status:?}: {stderr}");
    assert!(stderr.contains(&format!("{job} not submitted: the job was cancelled")), "{stderr}");
    assert!(stderr.contains("its provider was stopped"), "{stderr}");
    let shown = env.scafld(&["job", "status", &job, "--json"]).json();
    assert_eq!(shown["result"]["state"], "cancelled", "{shown}");
}

/// A `scafld worker` (provider auto) with no reviewer CLI on its PATH says so, naming the three
/// CLIs and their npm installs, exits as a missing provider does (4, `review_failed`), and
/// leaves the job queued (given back, not failed) for a worker that can review it.
#[test]
fn a_worker_with_no_reviewer_cli_gives_the_job_back_and_names_the_installs() {
    let env = TestEnv::new();
    crate::sessions::ready(&env, 1);
    let spawned = crate::sessions::detach(&env, "worker", "/usr/bin:/bin", &[]);
    let job = spawned["job_ids"][0].as_str().unwrap().to_string();
    let mut bare = env.scafld_command(&["worker", "--once", "--timeout", "5", "--json"]);
    bare.env("PATH", "/usr/bin:/bin");
    let run = Run::from(scafld_tests::output_within(&mut bare, scafld_tests::DEADLINE));
    run.assert_code(4);
    let error = run.json()["error"].clone();
    assert_eq!(error["code"], "review_failed", "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("codex, claude or gemini"), "{error}");
    assert!(message.contains(&format!("{job} was given back to the queue, not failed")), "{error}");
    for install in [
        "npm install -g @openai/codex",
        "npm install -g @anthropic-ai/claude-code",
        "npm install -g @google/gemini-cli",
    ] {
        assert!(error["hint"].as_str().unwrap().contains(install), "{install}: {error}");
    }
    let shown = env.scafld(&["job", "status", &job, "--json"]).json()["result"].clone();
    assert_eq!(shown["state"], "queued", "{shown}");
    assert!(shown["activity"].as_str().unwrap().contains("could not take it"), "{shown}");
    // A worker that has a reviewer takes it and its answer counts.
    let answer = env.path("answer.json");
    std::fs::write(&answer, DOSSIER).unwrap();
    let provider = format!("cat >/dev/null; cat {}", answer.display());
    let run = env.scafld(&[
        "worker",
        "--provider",
        "command",
        "--provider-command",
        &provider,
        "--once",
        "--timeout",
        "5",
        "--json",
    ]);
    run.assert_code(0);
    assert_eq!(run.json()["result"][0]["accepted"], true, "{}", run.stdout);
}

/// A worker's provider run keeps the diagnostics file a daemon-run reviewer keeps (the
/// command, its exit, what it printed; private), in the task's runs folder, and a failure
/// names it, not only the worker.
#[test]
fn a_workers_failed_provider_run_keeps_its_diagnostics_file() {
    let env = TestEnv::new();
    crate::sessions::ready(&env, 1);
    let spawned = crate::sessions::detach(&env, "worker", "/usr/bin:/bin", &[]);
    let job = spawned["job_ids"][0].as_str().unwrap().to_string();
    let provider = "echo the-reviewer-broke >&2; exit 3";
    let run =
        env.scafld(&["worker", "--provider", "command", "--provider-command", provider, "--once", "--timeout", "5"]);
    run.assert_code(0);
    let shown = env.scafld(&["job", "status", &job, "--json"]).json()["result"].clone();
    assert_eq!(shown["state"], "failed", "{shown}");
    let reason = shown["reason"].as_str().unwrap().to_string();
    let cited = reason
        .split("(diagnostic: ")
        .nth(1)
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("no diagnostic cited: {reason}"));
    assert!(cited.starts_with(".scafld/runs/rev/diagnostics/command-"), "{reason}");
    let file = env.work.join(cited);
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    for line in [format!("command: {provider}"), "exit_code: 3".into(), "the-reviewer-broke".into()] {
        assert!(text.contains(&line), "{line} missing from {text}");
    }
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
}

/// Kills the process `pid` when dropped (a test that fails part-way included).
pub(crate) fn scopeguard(pid: u32) -> impl Drop {
    struct Kill(i32);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.0), nix::sys::signal::Signal::SIGKILL);
        }
    }
    Kill(pid as i32)
}

/// `scafld worker --timeout 0` waits for nothing: it serves what is claimable now and exits
/// once a claim finds nothing, rather than claiming again at once for ever (a busy spin).
#[test]
fn a_worker_with_timeout_zero_serves_what_is_queued_and_exits() {
    let env = TestEnv::new();
    crate::sessions::ready(&env, 1);
    crate::sessions::detach(&env, "worker", "/usr/bin:/bin", &[]);
    let answer = env.path("answer.json");
    std::fs::write(&answer, DOSSIER).unwrap();
    let provider = format!("cat >/dev/null; cat {}", answer.display());
    let args = ["worker", "--provider", "command", "--provider-command", &provider, "--timeout", "0", "--json"];
    let mut worker = env
        .scafld_command(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // How much CPU it used, read once it has exited (a zombie, not yet reaped): a loop that
    // claimed again at once would not exit, and would burn CPU while it did not.
    let stat = format!("/proc/{}/stat", worker.id());
    let fields = || -> Vec<String> {
        let text = std::fs::read_to_string(&stat).unwrap_or_default();
        let after = text.rsplit_once(") ").map(|(_, rest)| rest.to_string()).unwrap_or_default();
        after.split_whitespace().map(str::to_string).collect()
    };
    let deadline = std::time::Instant::now() + scafld_tests::DEADLINE;
    while fields().first().is_none_or(|s| s != "Z") {
        if std::time::Instant::now() >= deadline {
            let _ = worker.kill();
            panic!("the worker did not exit once nothing was claimable");
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let ticks: u64 = fields()[11..13].iter().map(|f| f.parse::<u64>().unwrap()).sum();
    let output = worker.wait_with_output().unwrap();
    assert!(output.status.success(), "{:?}", output.status);
    let served: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(served["result"].as_array().map(Vec::len), Some(1), "it served the queued job: {served}");
    assert_eq!(served["result"][0]["accepted"], true, "{served}");
    // A generous bound on CPU (not wall) time: far below what a spin uses in the deadline.
    assert!(ticks < 500, "the worker used {ticks} clock ticks of CPU");
    // Nothing queued: the same worker exits at once with nothing served.
    let run = Run::from(scafld_tests::output_within(&mut env.scafld_command(&args), scafld_tests::DEADLINE));
    run.assert_code(0);
    assert_eq!(run.json()["result"], json!([]), "{}", run.stdout);
}

/// `scafld mcp submit-review` as a reviewer CLI starts it: lines in, lines out.
fn mcp_exchange(env: &TestEnv, lines: &[&[u8]]) -> Vec<Value> {
    use std::io::Write as _;
    let mut child = env
        .scafld_command(&["mcp", "submit-review", "--token", "t0", "--answer", "dossier"])
        .env("SCAFLD_SOCKET", env.path("nobody-here.sock"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for line in lines {
        stdin.write_all(line).unwrap();
        stdin.write_all(b"\n").unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the MCP server exits cleanly when its stdin closes");
    String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn the_submit_tool_answers_without_a_daemon_and_says_why_it_cannot_record() {
    let env = TestEnv::new();
    let replies = mcp_exchange(
        &env,
        &[
            br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t"}}}"#,
            br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            br#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#,
            br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"submit_review","arguments":{"verdict":"pass"}}}"#,
            br#"[{"jsonrpc":"2.0","id":4,"method":"ping"}]"#,
            br#"7"#,
            // Not UTF-8, then JSON that is not JSON-RPC's: each refused, and the server goes on.
            b"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"ping\",\"params\":{\"note\":\"caf\xe9\"}}",
            b"{oops",
            br#"{"jsonrpc":"2.0","id":6,"method":"ping"}"#,
            // A dossier giving its verdict twice reads two ways: refused, never its last copy.
            br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"submit_review","arguments":{"verdict":"fail","verdict":"pass"}}}"#,
        ],
    );
    assert_eq!(replies.len(), 9, "{replies:?}");
    assert_eq!((&replies[8]["id"], &replies[8]["result"]["isError"]), (&json!(7), &json!(true)), "{}", replies[8]);
    let refusal = replies[8]["result"]["content"][0]["text"].as_str().unwrap();
    assert!(refusal.contains("reads two ways") && refusal.contains("verdict"), "{refusal}");
    assert_eq!(
        (replies[5]["error"]["code"].as_i64(), replies[6]["error"]["code"].as_i64()),
        (Some(-32700), Some(-32700)),
        "{replies:?}"
    );
    assert!(replies[5]["error"]["message"].as_str().unwrap().contains("UTF-8"), "{}", replies[5]);
    assert_eq!(replies[7]["id"], 6, "the request after them is answered: {}", replies[7]);
    assert_eq!(replies[0]["result"]["serverInfo"]["name"], "scafld-review-submit");
    let schema = &replies[1]["result"]["tools"][0]["inputSchema"];
    assert!(schema.get("$schema").is_none() && schema.get("$id").is_none(), "{schema}");
    let props: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
    assert_eq!(
        props,
        ["attack_log", "budget", "findings", "mode", "summary", "verdict"],
        "only what a reviewer answers"
    );
    assert_eq!(replies[2]["result"]["isError"], true);
    assert!(
        replies[2]["result"]["content"][0]["text"].as_str().unwrap().contains("no scafld daemon answers"),
        "{}",
        replies[2]
    );
    assert_eq!(
        (replies[3]["error"]["code"].as_i64(), replies[4]["error"]["code"].as_i64()),
        (Some(-32600), Some(-32600))
    );
}

/// JSON-RPC as MCP reads it: a response is never answered, a request that is not valid JSON-RPC
/// is refused -32600, nothing but ping before `initialize`, and the client's version negotiated.
#[test]
fn the_submit_tool_ignores_responses_refuses_invalid_requests_and_negotiates_the_version() {
    let env = TestEnv::new();
    let replies = mcp_exchange(
        &env,
        &[
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"submit_review","arguments":{}}}"#,
            br#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#,
            br#"{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"t"}}}"#,
            br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            br#"{"jsonrpc":"2.0","id":4,"result":{}}"#,
            br#"{"jsonrpc":"2.0","id":5,"error":{"code":-1,"message":"no"}}"#,
            br#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#,
            br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            br#"{"id":8,"method":"ping"}"#,
            br#"{"jsonrpc":"2.0","id":9}"#,
            br#"{"jsonrpc":"2.0","id":10,"method":"ping"}"#,
        ],
    );
    let ids: Vec<&Value> = replies.iter().map(|r| &r["id"]).collect();
    assert_eq!(ids, [&json!(1), &json!(2), &json!(3), &Value::Null, &Value::Null, &json!(8), &json!(9), &json!(10)]);
    let codes: Vec<Option<i64>> = replies.iter().map(|r| r["error"]["code"].as_i64()).collect();
    assert_eq!(codes, [Some(-32600), None, None, Some(-32600), Some(-32600), Some(-32600), Some(-32600), None]);
    assert!(replies[0]["error"]["message"].as_str().unwrap().contains("initialize"), "{}", replies[0]);
    assert_eq!(replies[2]["result"]["protocolVersion"], "2024-11-05", "the client's version, which is spoken");
    let newer = mcp_exchange(
        &env,
        &[br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2099-01-01","capabilities":{}}}"#],
    );
    assert_eq!(newer[0]["result"]["protocolVersion"], "2025-06-18", "an unknown version gets the newest");
}

#[test]
fn doctor_reports_the_reviewer_clis_and_their_versions() {
    let env = TestEnv::new();
    let bin = env.path("doctor-bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("codex"), "#!/bin/sh\necho codex-cli 0.1.0\n").unwrap();
    std::fs::write(bin.join("gemini"), "#!/bin/sh\nexit 3\n").unwrap();
    Command::new("chmod").arg("+x").arg(bin.join("codex")).arg(bin.join("gemini")).status().unwrap();
    let run = Run::from(
        env.scafld_command(&["doctor", "--json"])
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .output()
            .unwrap(),
    );
    let doc = run.json();
    let checks = doc["result"]["checks"].as_array().unwrap().clone();
    let row =
        |name: &str| checks.iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("{name}: {checks:?}")).clone();
    assert_eq!(row("reviewer codex")["health"], "warn");
    assert!(
        row("reviewer codex")["detail"].as_str().unwrap().contains("tested with 0.169.0"),
        "{}",
        row("reviewer codex")
    );
    assert_eq!(row("reviewer claude")["health"], "warn");
    assert!(row("reviewer claude")["fix"].as_str().unwrap().contains("@anthropic-ai/claude-code@2.1.197"));
    assert_eq!(row("reviewer gemini")["health"], "fail", "a CLI that does not run is a failure");
    assert_eq!(row("git")["health"], "ok");
    assert!(checks.iter().all(|c| c["name"] != "host agent"), "no row without SCAFLD_HOST_AGENT");
    assert_eq!(run.code, 1, "a FAIL row makes doctor exit 1: {}", run.stdout);
    // A declared host agent scafld does not know is said to be ignored; a known one is named.
    for (value, health, says) in
        [("cursor", "warn", "names no agent scafld knows"), ("Claude-Code", "ok", "declares claude")]
    {
        let run =
            Run::from(env.scafld_command(&["doctor", "--json"]).env("SCAFLD_HOST_AGENT", value).output().unwrap());
        let checks = run.json()["result"]["checks"].as_array().unwrap().clone();
        let row = checks.iter().find(|c| c["name"] == "host agent").unwrap_or_else(|| panic!("{checks:?}"));
        assert_eq!(row["health"], health, "{row}");
        assert!(row["detail"].as_str().unwrap().contains(says), "{row}");
    }
    assert_eq!(doc["ok"], false);
}

#[test]
fn doctor_leaves_nothing_a_version_check_started_running() {
    let env = TestEnv::new();
    let bin = env.path("doctor-bin");
    std::fs::create_dir_all(&bin).unwrap();
    // Answers, and leaves a child behind that holds its output open.
    let pid_file = env.path("left.pid");
    std::fs::write(
        bin.join("claude"),
        format!(
            "#!/bin/sh
sleep 300 &
echo $! > {}
echo '2.1.197 (Claude Code)'
",
            pid_file.display()
        ),
    )
    .unwrap();
    Command::new("chmod").arg("+x").arg(bin.join("claude")).status().unwrap();
    let mut doctor = env
        .scafld_command(&["doctor", "--json"])
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let exited = scafld_tests::wait_for_exit(&mut doctor, std::time::Duration::from_secs(30));
    if exited.is_none() {
        let _ = doctor.kill();
    }
    let left: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    let running = || {
        std::path::Path::new(&format!("/proc/{left}")).exists()
            && !std::fs::read_to_string(format!("/proc/{left}/stat")).unwrap_or_default().contains(") Z ")
    };
    // The kill doctor sent takes effect when the child is next scheduled (on a busy machine,
    // a moment after doctor has exited): polled for, with a deadline.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while running() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let alive = running();
    if alive {
        let _ = Command::new("kill").arg("-9").arg(left.to_string()).status();
    }
    assert!(exited.is_some(), "doctor waited on the output a left-behind child holds");
    assert!(!alive, "doctor left the version check's child running");
    let mut out = String::new();
    std::io::Read::read_to_string(&mut doctor.stdout.take().unwrap(), &mut out).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    let claude =
        doc["result"]["checks"].as_array().unwrap().iter().find(|c| c["name"] == "reviewer claude").unwrap().clone();
    assert_eq!(claude["health"], "ok", "{claude}");
}

/// Fake claude for a delegated harden: starts the `submit_harden` server from its MCP config,
/// submits `FAKE_FIRST` then `FAKE_THEN`, and writes the two tool results to `FAKE_REPLIES`.
const FAKE_HARDEN_CLAUDE: &str = r#"#!/usr/bin/env python3
import json, os, subprocess, sys
args = sys.argv[1:]
if args == ["--version"]:
    print("2.1.0 (Claude Code)"); sys.exit(0)
config = json.load(open(args[args.index("--mcp-config") + 1]))
sys.stdin.read()
server = config["mcpServers"]["scafld"]
env = dict(os.environ); env.update(server.get("env", {}))
proc = subprocess.Popen([server["command"]] + server["args"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
def call(i, method, params):
    proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}) + "\n"); proc.stdin.flush()
    return json.loads(proc.stdout.readline())
call(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "claude"}})
replies = [call(i, "tools/call", {"name": "submit_harden", "arguments": json.loads(os.environ[var])})["result"]
           for i, var in [(2, "FAKE_FIRST"), (3, "FAKE_THEN")]]
json.dump(replies, open(os.environ["FAKE_REPLIES"], "w"))
proc.stdin.close(); proc.wait()
"#;

/// A `submit_harden` answer whose `code:` anchor names no file is refused as it is submitted (a
/// tool error naming the anchor, which the provider may fix), never acknowledged and then
/// recorded as the round's `error`; the fixed answer is acknowledged with what the round comes to.
#[test]
fn submit_harden_grounds_anchors_as_they_are_submitted() {
    let env = TestEnv::new();
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    std::fs::create_dir_all(env.work.join("src")).unwrap();
    std::fs::write(env.work.join("src/a.rs"), "fn a() {}\n").unwrap();
    let draft = "---\nspec_version: '2.0'\ntask_id: shape\nstatus: draft\nharden_status: not_run\n---\n\n# Shape\n\n## Summary\n\nA change.\n\n## Scope\n\n- `src/a.rs` - the change.\n\n## Phase 1: Do\n\nObjective: do it.\n\nAcceptance:\n- [ ] `a1` test - it builds\n  - Command: `true`\n";
    std::fs::write(env.work.join(".scafld/specs/drafts/shape.md"), draft).unwrap();
    let bin = env.path("fakebin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("claude"), FAKE_HARDEN_CLAUDE).unwrap();
    Command::new("chmod").arg("+x").arg(bin.join("claude")).status().unwrap();
    let answer = |anchor: &str| {
        let observations: Vec<Value> = ["design", "scope", "path", "command", "timing", "rollback"]
            .iter()
            .map(|d| json!({"dimension": d, "result": "clean", "anchor": if *d == "path" { anchor.to_string() } else { format!("spec_gap:nothing open for {d}") }, "note": ""}))
            .collect();
        json!({"summary": "judged", "shape": {"decision": "keep", "true_shape": "small", "minimal_plan": "one phase"}, "observations": observations}).to_string()
    };
    let replies = env.path("replies.json");
    let run = Run::from(
        env.scafld_command(&["harden", "shape", "--provider", "claude", "--json"])
            .env("PATH", format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default()))
            .env("FAKE_FIRST", answer("code:does/not/exist.rs:5"))
            .env("FAKE_THEN", answer("code:src/a.rs:1"))
            .env("FAKE_REPLIES", &replies)
            .output()
            .unwrap(),
    );
    let replies: Value = serde_json::from_str(&std::fs::read_to_string(&replies).unwrap()).unwrap();
    let (refused, accepted) = (&replies[0], &replies[1]);
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(refused["content"][0]["text"].as_str().unwrap().contains("does/not/exist.rs does not exist"), "{refused}");
    assert_eq!(accepted["structuredContent"]["ok"], true, "{accepted}");
    let said = accepted["content"][0]["text"].as_str().unwrap();
    assert!(said.contains("harden answer submitted") && said.contains("passed"), "{said}");
    assert!(!said.contains("verdict harden dossier"), "{said}");
    run.assert_code(0);
    assert_eq!(run.json()["result"]["harden_status"], "passed", "{}", run.stdout);
}
