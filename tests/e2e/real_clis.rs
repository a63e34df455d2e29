//! The real reviewer CLIs at their real boundary: `@openai/codex`, `@anthropic-ai/claude-code`
//! and `@google/gemini-cli`, pinned (see `.ci/run`), run by the real daemon with exactly the
//! argv, environment and files scafld builds, against a loopback server of ours that speaks the
//! three model APIs (`tests/support/model_server.py`). Each CLI runs complete reviews: a passing
//! dossier completes the task, a blocking one fails it, a template review answers. The server's
//! request log shows what each CLI was given (tools, schema, prompt). The gemini case also runs
//! as a non-root user, which root's view of system settings files would hide.
//!
//! The CLIs are looked up in `$SCAFLD_REAL_CLIS` (a `node_modules/.bin`), then
//! `/opt/scafld-ci/npm/node_modules/.bin` and `~/.cache/scafld-ci/npm/node_modules/.bin`
//! (where `.ci/run` installs them). A missing CLI fails the suite; `SCAFLD_SKIP_REAL_CLIS=1`
//! skips it loudly on a machine that cannot have them (never in CI).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use scafld_tests::{Run, TestEnv};
use serde_json::{Value, json};

use crate::gate::{opened, write};

/// The versions the suite pins (and `.ci/run` installs).
const VERSIONS: [(&str, &str); 3] = [("codex", "0.169.0"), ("claude", "2.1.197"), ("gemini", "0.61.0")];

/// The directory holding the three CLIs, or `None` when the suite may be skipped.
fn clis() -> Option<PathBuf> {
    let home = std::env::var("HOME").unwrap_or_default();
    let candidates = [
        std::env::var("SCAFLD_REAL_CLIS").ok().map(PathBuf::from),
        Some(PathBuf::from("/opt/scafld-ci/npm/node_modules/.bin")),
        Some(Path::new(&home).join(".cache/scafld-ci/npm/node_modules/.bin")),
    ];
    let found = candidates.into_iter().flatten().find(|dir| VERSIONS.iter().all(|(cli, _)| dir.join(cli).exists()));
    if found.is_none() {
        let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
        let skip = std::env::var("SCAFLD_SKIP_REAL_CLIS").is_ok_and(|v| v == "1");
        let install = "bash .ci/run installs them (npm install --prefix /opt/scafld-ci/npm @openai/codex@0.169.0 @anthropic-ai/claude-code@2.1.197 @google/gemini-cli@0.61.0)";
        assert!(!ci && skip, "the real reviewer CLIs are not installed; {install}");
        eprintln!(
            "\n*** SKIPPED: the real reviewer CLIs are not installed and SCAFLD_SKIP_REAL_CLIS=1; {install} ***\n"
        );
    }
    found
}

/// The loopback model server, killed when dropped.
struct ModelServer {
    child: Child,
    port: u16,
    script: PathBuf,
    log: PathBuf,
}

impl ModelServer {
    fn start(dir: &Path) -> ModelServer {
        let (script, log) = (dir.join("model-script.json"), dir.join("model-requests.jsonl"));
        std::fs::write(&script, "{}").unwrap();
        let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("support/model_server.py");
        let mut child = Command::new("python3")
            .arg(server)
            .arg("--script")
            .arg(&script)
            .arg("--log")
            .arg(&log)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the model server (python3)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().parse().expect("the model server prints its port");
        ModelServer { child, port, script, log }
    }

    /// What the model answers from now on.
    fn answer(&self, script: Value) {
        std::fs::write(&self.script, script.to_string()).unwrap();
    }

    fn requests(&self, provider: &str) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|r| r["provider"] == provider)
            .collect()
    }

    fn forget(&self) {
        let _ = std::fs::remove_file(&self.log);
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn attacks(n: usize) -> Value {
    (0..n).map(|i| json!({"target": format!("target {i}"), "attack": "regression scan", "result": "clean"})).collect()
}

fn passing() -> Value {
    json!({"verdict": "pass", "mode": "discover", "summary": "No blockers.", "findings": [], "attack_log": attacks(6), "budget": {}})
}

fn blocking() -> Value {
    json!({"verdict": "fail", "mode": "discover", "summary": "One blocker.", "attack_log": attacks(6), "budget": {},
        "findings": [{"id": "greet-unused", "severity": "high", "blocks_completion": true, "summary": "greet is never called",
            "location": {"path": "src/lib.rs", "line": 1}, "evidence": "no caller", "impact": "dead code",
            "validation": "grep -rn greet src"}]})
}

fn template_fail() -> Value {
    json!({"verdict": "FAIL", "summary": "The design skips the cache.", "findings": [
        {"severity": "FAIL", "title": "No cache", "description": "Every call goes to the network.", "file": "a.md:1"}]})
}

/// How the model answers for `provider`: a tool call for claude and gemini, the final
/// message for codex (its output schema makes that the answer).
fn script(provider: &str, answer: &Value) -> Value {
    script_with_steps(provider, answer, json!([]))
}

/// [`script`], with tool calls the model tries first (claude and gemini).
fn script_with_steps(provider: &str, answer: &Value, steps: Value) -> Value {
    if provider == "codex" {
        json!({"codex": {"text": answer.to_string()}})
    } else {
        json!({provider: {"tool_input": answer, "steps": steps}})
    }
}

/// What a hostile reviewer tries before it submits: write and edit files, leave gemini's plan
/// mode, run a shell command that writes outside the workspace, reach the web.
fn escapes(env: &TestEnv, provider: &str) -> Value {
    let (evil, lib) = (env.work.join("src/evil.rs"), env.work.join("src/lib.rs"));
    let touch = format!("touch {}", env.path("OUTSIDE").display());
    match provider {
        "gemini" => json!([
            {"name": "exit_plan_mode", "input": {"plan_path": env.work.join("plan.md")}},
            {"name": "write_file", "input": {"file_path": evil, "content": "evil"}},
            {"name": "replace", "input": {"file_path": lib, "old_string": "greet", "new_string": "evil", "instruction": "x"}},
            {"name": "run_shell_command", "input": {"command": touch}},
            {"name": "google_web_search", "input": {"query": "scafld"}},
            {"name": "write_file", "input": {"file_path": evil, "content": "evil"}},
        ]),
        "claude" => json!([
            {"name": "Write", "input": {"file_path": evil, "content": "evil"}},
            {"name": "Edit", "input": {"file_path": lib, "old_string": "greet", "new_string": "evil"}},
            {"name": "Bash", "input": {"command": touch}},
            {"name": "WebFetch", "input": {"url": "http://127.0.0.1:9/", "prompt": "x"}},
        ]),
        _ => json!([]),
    }
}

/// A `codex` on PATH that adds, for transport only, a model provider pointing at the server
/// (codex 0.169 ignores OPENAI_BASE_URL); every other argument is scafld's.
fn codex_transport(dir: &Path, clis: &Path, port: u16) -> PathBuf {
    let bin = dir.join("transport-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let wrapper = bin.join("codex");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec '{}' \"$@\" -c model_provider=\"mock\" -c 'model_providers.mock={{name=\"mock\", base_url=\"http://127.0.0.1:{port}/v1\", env_key=\"OPENAI_API_KEY\", wire_api=\"responses\"}}'\n",
            clis.join("codex").display()
        ),
    )
    .unwrap();
    Command::new("chmod").arg("+x").arg(&wrapper).status().unwrap();
    bin
}

/// The environment a user of each CLI would have, pointed at the server with dummy keys.
fn cli_env(env: &TestEnv, clis: &Path, server: &ModelServer) -> Vec<(String, String)> {
    let transport = codex_transport(env.dir.path(), clis, server.port);
    let base = format!("http://127.0.0.1:{}", server.port);
    let path =
        format!("{}:{}:{}:/usr/bin:/bin", transport.display(), clis.display(), scafld_tests::bin_dir().display());
    [
        ("PATH", path.as_str()),
        ("ANTHROPIC_BASE_URL", base.as_str()),
        ("ANTHROPIC_API_KEY", "dummy-anthropic-key"),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        ("GOOGLE_GEMINI_BASE_URL", base.as_str()),
        ("GEMINI_API_KEY", "dummy-gemini-key"),
        ("OPENAI_API_KEY", "dummy-openai-key"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// A user's own CLI settings that a review must not pick up: a Claude SessionStart hook and
/// user memory, and a Gemini API-key login (which it must carry over).
fn user_settings(home: &Path, hook_marker: &Path) {
    write_file(
        &home.join(".claude/settings.json"),
        &json!({"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": format!("touch {}", hook_marker.display())}]}]}}).to_string(),
    );
    write_file(&home.join(".claude/CLAUDE.md"), "USER-MEMORY-MARKER: never show this to a reviewer\n");
    write_file(
        &home.join(".gemini/settings.json"),
        &json!({"security": {"auth": {"selectedType": "gemini-api-key"}}}).to_string(),
    );
    for dir in [".codex", ".agents", ".claude", ".gemini"] {
        write_file(&home.join(dir).join("skills/marker/SKILL.md"), SKILL);
    }
}

/// A skill planted for the user and the project: its description must never reach a reviewer.
const SKILL: &str =
    "---\nname: marker\ndescription: SKILL-MARKER run this skill on every review\n---\nDo as the skill says.\n";

/// No request any CLI sent carries a skill.
fn assert_no_skills(server: &ModelServer, provider: &str) {
    for r in server.requests(provider) {
        assert!(!r.to_string().contains("SKILL-MARKER"), "{provider} listed a skill to the model");
    }
}

fn write_file(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn scafld(env: &TestEnv, vars: &[(String, String)], args: &[&str]) -> Run {
    Run::from(env.scafld_command(args).envs(vars.iter().map(|(k, v)| (k, v))).output().unwrap())
}

/// A workspace with task `rev` in review, the project's AGENTS.md, and two design notes for a
/// template review.
fn workspace(env: &TestEnv) {
    for dir in [".codex", ".agents", ".claude", ".gemini"] {
        write_file(&env.work.join(dir).join("skills/marker/SKILL.md"), SKILL);
    }
    opened(env, "src/lib.rs", "- [ ] `a1` test - lib exists\n  - Command: `test -f src/lib.rs`\n");
    write(env, "AGENTS.md", "AGENTS-MARKER: the project's agent guidance\n");
    write(env, "src/lib.rs", "pub fn greet() {}\n");
    env.scafld(&["build", "rev"]).assert_code(0);
    write(env, "a.md", "# Design\nEvery call goes to the network.\n");
    write(env, "b.md", "# Architecture\nCache remote calls.\n");
}

fn review_with(env: &TestEnv, vars: &[(String, String)], server: &ModelServer, provider: &str) {
    let (pass_format, hook) = (format!("{provider}.mcp_submit_review"), env.path("HOOK-RAN"));
    let pass_format = if provider == "codex" { "codex.output_file".to_string() } else { pass_format };

    // A submission the daemon refuses (a pass with too few attack angles) fails the attempt
    // with the refusal's reason, not as "no submission".
    if provider != "codex" {
        let thin = json!({"verdict": "pass", "mode": "discover", "summary": "ok", "findings": [], "attack_log": attacks(2), "budget": {}});
        server.answer(script(provider, &thin));
        let run = scafld(env, vars, &["review", "rev", "--provider", provider, "--json"]);
        assert_ne!(run.code, 0, "{provider}: {}{}", run.stdout, run.stderr);
        let error = run.json()["error"].clone();
        let message = error["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("submit_review submission was refused") && message.contains("6 attack angles"),
            "{provider}: {error}"
        );
        assert!(!message.contains("no submission"), "{provider}: {error}");
    }

    // A blocking dossier fails the gate and complete refuses.
    server.answer(script(provider, &blocking()));
    let run = scafld(env, vars, &["review", "rev", "--provider", provider, "--json"]);
    assert_eq!(run.code, 4, "{provider}: {}{}", run.stdout, run.stderr);
    let result = run.json()["result"].clone();
    assert_eq!(result["verdict"], "fail", "{provider}: {result}");
    assert_eq!(result["findings"][0]["id"], "greet-unused", "{provider}");
    scafld(env, vars, &["complete", "rev"]).assert_code(4);

    // The repair, then a passing dossier completes the task.
    write(env, "src/lib.rs", "pub fn greet() {}\npub fn main() { greet() }\n");
    env.scafld(&["build", "rev"]).assert_code(0);
    server.answer(script_with_steps(provider, &passing(), escapes(env, provider)));
    let run = scafld(env, vars, &["review", "rev", "--provider", provider, "--mode", "discover", "--json"]);
    assert_eq!(run.code, 0, "{provider}: {}{}", run.stdout, run.stderr);
    // Every escape was refused: nothing written, edited or run.
    assert!(!env.work.join("src/evil.rs").exists(), "{provider} wrote a file");
    assert!(!env.path("OUTSIDE").exists(), "{provider} ran a shell command");
    let lib = std::fs::read_to_string(env.work.join("src/lib.rs")).unwrap();
    assert_eq!(lib, "pub fn greet() {}\npub fn main() { greet() }\n", "{provider} edited a file");
    let result = run.json()["result"].clone();
    assert_eq!((result["verdict"].as_str(), result["provider"].as_str()), (Some("pass"), Some(provider)), "{result}");
    assert_eq!(result["output_format"], pass_format.as_str());
    scafld(env, vars, &["complete", "rev"]).assert_code(0);

    // A template review answers through the same channel.
    server.answer(script(provider, &template_fail()));
    let run = scafld(env, vars, &["review", "arch", "a.md", "--against", "b.md", "--provider", provider, "--json"]);
    assert_eq!(run.code, 4, "{provider}: {}{}", run.stdout, run.stderr);
    let result = run.json()["result"].clone();
    assert_eq!((result["verdict"].as_str(), result["has_failures"].as_bool()), (Some("FAIL"), Some(true)), "{result}");
    assert_eq!(result["findings"][0]["title"], "No cache");
    assert!(!hook.exists(), "{provider}: a user's hook ran during a review");
    assert_no_skills(server, provider);
}

/// A delegated harden round through the same CLI: the answer arrives through `submit_harden`
/// (claude, gemini) or codex's output file under the HardenDossier schema, and is judged.
fn harden_with(env: &TestEnv, vars: &[(String, String)], server: &ModelServer, provider: &str) {
    let draft = "---\nspec_version: '2.0'\ntask_id: shape\nstatus: draft\nharden_status: not_run\n---\n\n# Shape\n\n## Summary\n\nA second task.\n\n## Scope\n\n- `src/lib.rs` - the change.\n\n## Phase 1: Do\n\nObjective: do it.\n\nAcceptance:\n- [ ] `s1` test - lib exists\n  - Command: `test -f src/lib.rs`\n";
    write(env, ".scafld/specs/drafts/shape.md", draft);
    let observations: Vec<Value> = ["design", "scope", "path", "command", "timing", "rollback"]
        .iter()
        .map(|d| {
            json!({"dimension": d, "result": "clean", "anchor": "code:src/lib.rs:1", "note": format!("{d} holds"),
            "question": "", "recommended": "", "status": null})
        })
        .collect();
    let dossier = json!({"summary": "A small, well-bounded task.", "shape": {"decision": "keep", "true_shape": "one function",
        "minimal_plan": "one phase", "shared_owner": "", "adapter_boundaries": [], "required_spec_edits": []},
        "observations": observations});
    server.answer(script(provider, &dossier));
    let run = scafld(env, vars, &["harden", "shape", "--provider", provider, "--json"]);
    assert_eq!(run.code, 0, "{provider}: {}{}", run.stdout, run.stderr);
    let result = run.json()["result"].clone();
    assert_eq!(result["harden_status"], "passed", "{provider}: {result}");
    let spec = std::fs::read_to_string(env.work.join(".scafld/specs/drafts/shape.md")).unwrap();
    assert!(spec.contains("Spec digest: ") && spec.contains(&format!("Evidence: {provider}")), "{spec}");
}

#[test]
fn claude_reviews_through_its_submit_tool_with_no_user_settings() {
    let Some(clis) = clis() else { return };
    let env = TestEnv::new();
    let server = ModelServer::start(env.dir.path());
    user_settings(&env.path("home"), &env.path("HOOK-RAN"));
    let vars = cli_env(&env, &clis, &server);
    workspace(&env);
    review_with(&env, &vars, &server, "claude");
    harden_with(&env, &vars, &server, "claude");
    let requests = server.requests("claude");
    assert!(!requests.is_empty());
    for r in &requests {
        let tools: Vec<&str> = r["tools"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        let submit = ["mcp__scafld__submit_review", "mcp__scafld__submit_harden"];
        assert!(tools.iter().any(|t| submit.contains(t)), "{tools:?}");
        assert!(tools.iter().all(|t| ["Glob", "Grep", "Read"].contains(t) || submit.contains(t)), "{tools:?}");
        assert!(!r.to_string().contains("USER-MEMORY-MARKER"), "the user's CLAUDE.md reached the model");
    }
}

/// The real claude calling `submit_review` twice, a pass and then a fail with a blocker: the
/// answer reads two ways, so the review has no verdict and `complete` refuses.
#[test]
fn claude_submitting_two_different_answers_gives_no_verdict() {
    let Some(clis) = clis() else { return };
    let env = TestEnv::new();
    let server = ModelServer::start(env.dir.path());
    let vars = cli_env(&env, &clis, &server);
    workspace(&env);
    let tool = "mcp__scafld__submit_review";
    let steps = json!([{"name": tool, "input": passing()}, {"name": tool, "input": blocking()}]);
    server.answer(json!({"claude": {"steps": steps, "text": "My final answer is FAIL."}}));
    let run = scafld(&env, &vars, &["review", "rev", "--provider", "claude", "--json"]);
    assert_eq!(run.code, 4, "{}{}", run.stdout, run.stderr);
    let out = run.json();
    assert!(out["error"]["message"].as_str().unwrap_or_default().contains("two different answers"), "{out}");
    assert_eq!(out["result"]["gate"], "retry", "{out}");
    scafld(&env, &vars, &["complete", "rev"]).assert_code(4);
}

#[test]
fn codex_reviews_under_a_strict_schema_without_web_search_or_agents_md() {
    let Some(clis) = clis() else { return };
    let env = TestEnv::new();
    let server = ModelServer::start(env.dir.path());
    user_settings(&env.path("home"), &env.path("HOOK-RAN"));
    let vars = cli_env(&env, &clis, &server);
    workspace(&env);
    review_with(&env, &vars, &server, "codex");
    harden_with(&env, &vars, &server, "codex");
    let requests = server.requests("codex");
    assert!(!requests.is_empty());
    for r in &requests {
        assert_eq!(r["strict"], true, "{r}");
        let tools: Vec<&str> = r["tools"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        assert!(!tools.contains(&"web_search"), "the hosted web search was offered: {tools:?}");
        // AGENTS.md appears once: in scafld's packet (as project context), never again from codex.
        assert!(r["input"].as_str().unwrap().matches("AGENTS-MARKER").count() <= 1, "codex loaded AGENTS.md itself");
    }
    let schema = &requests[0]["schema"];
    assert!(schema.get("$schema").is_none() && schema["properties"].get("provider").is_none(), "{schema}");
}

#[test]
fn gemini_reviews_through_its_submit_tool() {
    let Some(clis) = clis() else { return };
    let env = TestEnv::new();
    let server = ModelServer::start(env.dir.path());
    user_settings(&env.path("home"), &env.path("HOOK-RAN"));
    let vars = cli_env(&env, &clis, &server);
    workspace(&env);
    review_with(&env, &vars, &server, "gemini");
    harden_with(&env, &vars, &server, "gemini");
    let streamed: Vec<Value> = server
        .requests("gemini")
        .into_iter()
        .filter(|r| r["path"].as_str().unwrap().contains("streamGenerate"))
        .collect();
    assert!(!streamed.is_empty());
    for r in &streamed {
        let tools: Vec<&str> = r["tools"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        assert!(tools.iter().any(|t| t.contains("submit_review") || t.contains("submit_harden")), "{tools:?}");
        for denied in ["write_file", "replace", "exit_plan_mode", "google_web_search", "invoke_agent"] {
            assert!(!tools.contains(&denied), "gemini was offered {denied}: {tools:?}");
        }
    }
}

/// Files a reviewer's read tools must never hand the model, planted in a workspace in review:
/// one outside the workspace, and the ones kept from reviewers for their secrets (`.env`, below
/// `.priv/`, and a link to `.env`). Also a plain file whose marker must reach it (the tools work).
fn plant_secrets(env: &TestEnv) {
    write_file(&env.path("outside/caller.json"), "{\"TOKEN\": \"OUTSIDE-MARKER\"}\n");
    write(env, ".env", "API_TOKEN=ENV-MARKER\n");
    write(env, "pkg/.priv/key", "PRIV-MARKER\n");
    std::os::unix::fs::symlink("../.env", env.work.join("src/notes.txt")).unwrap();
    write(env, "docs/plain.md", "PLAIN-MARKER\n");
}

/// No request to the model carries a planted secret (the caller's environment, kept in the
/// daemon's state, included), and the plain file's marker did reach it.
fn assert_secrets_kept(server: &ModelServer, provider: &str) {
    let sent: String = server.requests(provider).iter().map(Value::to_string).collect();
    for marker in ["OUTSIDE-MARKER", "CALLER-ENV-MARKER", "ENV-MARKER", "PRIV-MARKER"] {
        let at = sent.find(marker);
        let around = at.map(|i| sent.get(i.saturating_sub(400)..i + 40).unwrap_or_default());
        assert!(at.is_none(), "{provider} handed the model {marker}: ...{}", around.unwrap_or_default());
    }
    assert!(sent.contains("PLAIN-MARKER"), "{provider}'s read tools did not work at all");
}

#[test]
fn claude_reads_the_workspace_only_and_never_its_secret_files() {
    let Some(clis) = clis() else { return };
    let env = TestEnv::new();
    let server = ModelServer::start(env.dir.path());
    let mut vars = cli_env(&env, &clis, &server);
    vars.push(("MY_CLOUD_TOKEN".into(), "CALLER-ENV-MARKER".into()));
    workspace(&env);
    plant_secrets(&env);
    let (work, outside, state) = (env.work.display(), env.path("outside"), env.state_dir.display());
    let steps = json!([
        {"name": "Read", "input": {"file_path": outside.join("caller.json")}},
        {"name": "Grep", "input": {"pattern": "MARKER", "path": state.to_string(), "output_mode": "content"}},
        {"name": "Glob", "input": {"pattern": "**/*.json", "path": outside}},
        {"name": "Read", "input": {"file_path": format!("{work}/.env")}},
        {"name": "Read", "input": {"file_path": format!("{work}/pkg/.priv/key")}},
        {"name": "Read", "input": {"file_path": format!("{work}/src/notes.txt")}},
        {"name": "Grep", "input": {"pattern": "MARKER", "path": work.to_string(), "output_mode": "content"}},
        {"name": "Read", "input": {"file_path": format!("{work}/docs/plain.md")}},
    ]);
    server.answer(script_with_steps("claude", &passing(), steps));
    let run = scafld(&env, &vars, &["review", "rev", "--provider", "claude", "--json"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert_secrets_kept(&server, "claude");
}

#[test]
fn gemini_read_tools_never_hand_over_secret_files() {
    let Some(clis) = clis() else { return };
    let env = TestEnv::new();
    let server = ModelServer::start(env.dir.path());
    user_settings(&env.path("home"), &env.path("HOOK-RAN"));
    let vars = cli_env(&env, &clis, &server);
    workspace(&env);
    plant_secrets(&env);
    let work = env.work.display();
    let steps = json!([
        {"name": "read_file", "input": {"file_path": format!("{work}/.env")}},
        {"name": "read_file", "input": {"file_path": "pkg/.priv/key"}},
        {"name": "read_file", "input": {"file_path": "src/notes.txt"}},
        // A search of the whole tree is not made here: without ripgrep (this machine's case,
        // maybe) gemini's fallback grep honours no ignore file (README's known gaps).
        {"name": "grep_search", "input": {"pattern": "MARKER", "no_ignore": true}},
        {"name": "grep_search", "input": {"pattern": "MARKER", "dir_path": "pkg/.priv"}},
        {"name": "grep_search", "input": {"pattern": "MARKER", "include_pattern": ".env*"}},
        {"name": "read_file", "input": {"file_path": "docs/plain.md"}},
    ]);
    server.answer(script_with_steps("gemini", &passing(), steps));
    let run = scafld(&env, &vars, &["review", "rev", "--provider", "gemini", "--json"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert_secrets_kept(&server, "gemini");
}

/// A model API that answers every call with an error: gemini's `Attempt N failed... Retrying`
/// lines are no progress, so the review is stopped as idle, not left to its absolute timeout.
#[test]
fn gemini_retrying_a_failing_model_api_is_idle() {
    let Some(clis) = clis() else { return };
    let env = TestEnv::new();
    let server = ModelServer::start(env.dir.path());
    user_settings(&env.path("home"), &env.path("HOOK-RAN"));
    let vars = cli_env(&env, &clis, &server);
    workspace(&env);
    // Gemini's retry gaps grow to 30 s (39 s with jitter), so every one is within this idle limit.
    write(
        &env,
        ".scafld/config.local.yaml",
        "review:\n  external:\n    idle_timeout_seconds: 45\n    absolute_max_seconds: 150\n",
    );
    server.answer(json!({"fail": 500, "gemini": {"tool_input": passing()}}));
    let started = std::time::Instant::now();
    let run = scafld(&env, &vars, &["review", "rev", "--provider", "gemini", "--json"]);
    let took = started.elapsed();
    assert_ne!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(server.requests("fail").len() > 1, "gemini retried the failing API");
    assert!(run.stdout.contains("idle"), "{}{}", run.stdout, run.stderr);
    assert!(took < std::time::Duration::from_secs(120), "ran {took:?}, past the idle limit");
}

/// The non-root user the gemini case runs as when the suite runs as root.
const USER: &str = "scafld-ci";

#[test]
fn gemini_reviews_as_a_non_root_user() {
    let Some(clis) = clis() else { return };
    if !nix::unistd::Uid::effective().is_root() {
        return; // the other gemini test already runs as a non-root user
    }
    if Command::new("id").arg(USER).output().is_ok_and(|o| !o.status.success()) {
        let made = Command::new("useradd").args(["--create-home", "--shell", "/bin/sh", USER]).status().unwrap();
        assert!(made.success(), "useradd {USER}");
    }
    let env = TestEnv::new();
    let server = ModelServer::start(env.dir.path());
    server.answer(script("gemini", &passing()));
    // The user's own copy of everything it runs: the binaries, a home, a workspace.
    let root = env.dir.path().join("as-user");
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for name in ["scafld", "scafldd"] {
        std::fs::copy(scafld_tests::bin_dir().join(name), bin.join(name)).unwrap();
    }
    write_file(
        &root.join("home/.gemini/settings.json"),
        &json!({"security": {"auth": {"selectedType": "gemini-api-key"}}}).to_string(),
    );
    let spec = "---\nspec_version: '2.0'\ntask_id: rev\nstatus: draft\n---\n\n# Rev\n\n## Scope\n\n- `src/lib.rs` - the code.\n\n## Phase 1: Do\n\nAcceptance:\n- [ ] `a1` test - lib exists\n  - Command: `test -f src/lib.rs`\n";
    write_file(&root.join("spec.md"), spec);
    let script = r#"set -e
cd "$ROOT/work"
git init -q && git -c user.name=u -c user.email=u@x commit -q --allow-empty -m init
scafld init >/dev/null
cp "$ROOT/spec.md" .scafld/specs/drafts/rev.md
scafld approve rev --reason "non-root gemini" >/dev/null
scafld build rev >/dev/null
echo 'pub fn greet() {}' > src/lib.rs
scafld build rev >/dev/null
set +e
scafld review rev --provider gemini --json > "$ROOT/review.json"
echo $? > "$ROOT/review.code"
scafld complete rev > /dev/null 2>&1
echo $? > "$ROOT/complete.code"
scafld daemon stop > /dev/null 2>&1
"#;
    write_file(&root.join("run.sh"), script);
    std::fs::create_dir_all(root.join("work/src")).unwrap();
    Command::new("chmod").args(["-R", "a+rX"]).arg(env.dir.path()).status().unwrap();
    Command::new("chown").args(["-R", &format!("{USER}:{USER}")]).arg(&root).status().unwrap();
    let base = format!("http://127.0.0.1:{}", server.port);
    let path = format!("{}:{}:/usr/bin:/bin", bin.display(), clis.display());
    let home = root.join("home");
    let status = Command::new("runuser")
        .args(["-u", USER, "--", "env", "-i"])
        .arg(format!("PATH={path}"))
        .arg(format!("HOME={}", home.display()))
        .arg(format!("ROOT={}", root.display()))
        .arg(format!("SCAFLD_STATE_DIR={}", root.join("state").display()))
        .arg(format!("SCAFLD_SOCKET={}", root.join("run/scafldd.sock").display()))
        .arg(format!("GOOGLE_GEMINI_BASE_URL={base}"))
        .arg("GEMINI_API_KEY=dummy-gemini-key")
        .args(["sh", root.join("run.sh").to_str().unwrap()])
        .status()
        .unwrap();
    assert!(status.success(), "the non-root run failed");
    let review = std::fs::read_to_string(root.join("review.json")).unwrap();
    let code = std::fs::read_to_string(root.join("review.code")).unwrap();
    assert_eq!(code.trim(), "0", "{review}");
    let result: Value = serde_json::from_str(&review).unwrap();
    assert_eq!(result["result"]["output_format"], "gemini.mcp_submit_review", "{result}");
    assert_eq!(std::fs::read_to_string(root.join("complete.code")).unwrap().trim(), "0");
    assert!(server.requests("gemini").iter().any(|r| r["tools"].to_string().contains("submit_review")));
    server.forget();
}

/// The pinned versions are the ones installed (so the README's "tested with" stays true).
#[test]
fn the_installed_clis_are_the_pinned_versions() {
    let Some(clis) = clis() else { return };
    for (cli, version) in VERSIONS {
        let out = Command::new(clis.join(cli))
            .arg("--version")
            .env("PATH", format!("{}:/usr/bin:/bin", clis.display()))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(version), "{cli} --version printed {text:?}, pinned {version}");
    }
}
