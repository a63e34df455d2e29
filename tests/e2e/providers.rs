//! Real-CLI review providers, played by fake `codex`, `claude` and `gemini` programs on the
//! caller's PATH that check their argv and answer through the same channel as the real ones
//! (codex: the output file; claude and gemini: the `submit_review` MCP tool).

use std::process::Command;

use scafld_tests::{RawClient, TestEnv, wait_until};
use serde_json::json;

const DOSSIER: &str = r#"{"verdict":"pass","mode":"discover","summary":"Checked the flag path.","findings":[],"attack_log":[{"target":"diff","attack":"trace the flag","result":"clean"}],"budget":{}}"#;

/// Fake codex: insists on the read-only, ephemeral invocation and answers in the output file.
const FAKE_CODEX: &str = include_str!("../fixtures/fake-codex.sh");

/// Fake claude/gemini: finds its MCP server config the way the real CLI does, starts the
/// server, and submits through `submit_review` (first an invalid dossier, then the real one,
/// then a duplicate that must be refused).
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
