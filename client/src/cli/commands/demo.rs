//! `scafld demo`: the whole gate, end to end, in a throwaway git repository under the system's
//! temp folder, through a private daemon of its own. Every step is a real `scafld` command
//! (printed as a person would type it, with a one-line result); the reviewer is a scripted
//! stand-in run as a `command` provider, so the completion rules apply to it as to any other.
//! Nothing outside the temp folder is touched (the receipt key included), and the daemon is
//! stopped at the end unless `--keep`. With `--json` the steps are the `steps` of the one
//! envelope printed at the end, not lines of their own.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::cli::Context;
use crate::cli::exit::workflow;
use crate::cli::output::{CliError, say};

const SPEC: &str = "---\nspec_version: '2.0'\ntask_id: greet\nstatus: draft\nharden_status: not_run\nsize: small\nrisk_level: low\n---\n\n# Greet the user\n\n## Summary\n\nWrite a greeting the acceptance check can find.\n\n## Scope\n\n- `greet.txt` - the greeting.\n\n## Phase 1: Write the greeting\n\nObjective: greet.txt greets the world.\n\nAcceptance:\n- [ ] `a1` test - greet.txt says hello\n  - Command: `grep -q hello greet.txt`\n\n## Harden Rounds\n\n- none\n";

/// The six checks a harden round needs, grounded in the spec or the code.
const CHECKS: &str = "Checks:\n- Path audit\n  - Grounded in: code:greet.txt:1\n  - Result: passed\n  - Evidence: greet.txt is the only file the task writes\n- Command audit\n  - Grounded in: spec_gap:the acceptance command is one grep\n  - Result: passed\n  - Evidence: grep -q hello greet.txt runs anywhere\n- Scope/migration audit\n  - Grounded in: spec_gap:one new file, nothing to migrate\n  - Result: not_applicable\n  - Evidence: no existing data\n- Acceptance timing audit\n  - Grounded in: spec_gap:the check runs after the file is written\n  - Result: passed\n  - Evidence: phase 1 writes, then checks\n- Rollback/repair audit\n  - Grounded in: spec_gap:deleting greet.txt undoes the task\n  - Result: passed\n  - Evidence: no other state\n- Design challenge\n  - Grounded in: spec_gap:a file is the simplest greeting\n  - Result: passed\n  - Evidence: nothing simpler would do\n";

/// The scripted reviewer: it blocks while the greeting has no comma, and passes once it does.
const REVIEWER: &str = r#"#!/bin/sh
# scafld demo's scripted stand-in for a reviewer model: reads the packet, answers one dossier.
cat > /dev/null
attacks='[{"target":"diff","attack":"regression scan","result":"clean"},{"target":"spec","attack":"contract check","result":"clean"}]'
if grep -q 'hello, world' greet.txt; then
  echo "{\"verdict\":\"pass\",\"mode\":\"discover\",\"summary\":\"The greeting reads well.\",\"findings\":[],\"attack_log\":$attacks,\"budget\":{}}"
else
  echo "{\"verdict\":\"fail\",\"mode\":\"discover\",\"summary\":\"The greeting is curt.\",\"findings\":[{\"id\":\"curt\",\"severity\":\"high\",\"blocks_completion\":true,\"summary\":\"greet.txt says hello to no one\",\"location\":{\"path\":\"greet.txt\",\"line\":1},\"evidence\":\"the line is a bare hello\",\"impact\":\"nobody is greeted\",\"validation\":\"grep -q 'hello, world' greet.txt\"}],\"attack_log\":$attacks,\"budget\":{}}"
fi
"#;

struct Demo {
    exe: PathBuf,
    root: PathBuf,
    repo: PathBuf,
    /// `--json`: the lines are kept for the envelope instead of printed.
    json: bool,
    steps: std::cell::RefCell<Vec<String>>,
}

impl Demo {
    /// One line of the walk: printed, or kept for the envelope.
    fn say(&self, text: &str) {
        match self.json {
            true => self.steps.borrow_mut().push(text.to_string()),
            false => say(text),
        }
    }

    /// The command that stops the demo's daemon (left running by `--keep`).
    fn stop_command(&self) -> String {
        format!(
            "SCAFLD_SOCKET={} SCAFLD_STATE_DIR={} scafld daemon stop",
            scafld_protocol::cli::shell_word(&self.root.join("scafldd.sock").display().to_string()),
            scafld_protocol::cli::shell_word(&self.root.join("state").display().to_string()),
        )
    }

    fn command(&self, program: &Path, args: &[&str]) -> Command {
        let mut command = Command::new(program);
        command
            .args(args)
            .current_dir(&self.repo)
            .env("SCAFLD_SOCKET", self.root.join("scafldd.sock"))
            .env("SCAFLD_STATE_DIR", self.root.join("state"))
            .env("SCAFLD_CONFIG_HOME", self.root.join("config"))
            .env("NO_COLOR", "1")
            .env_remove("SCAFLD_ROOT");
        command
    }

    /// Run `scafld args --json`, print it as typed and `summary` of its result; stop the demo on
    /// an exit code other than `expect`.
    fn step(&self, args: &[&str], expect: u8, summary: impl FnOnce(&Value) -> String) -> Result<Value, CliError> {
        self.say(&format!("$ scafld {}", args.join(" ")));
        let mut all = args.to_vec();
        all.push("--json");
        let output = self
            .command(&self.exe, &all)
            .output()
            .map_err(|e| CliError::new("demo", format!("cannot run scafld: {e}"), workflow::RUNTIME))?;
        let envelope: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
        let code = output.status.code().unwrap_or(-1);
        if code != i32::from(expect) {
            let message = envelope["error"]["message"].as_str().unwrap_or_default().to_string();
            return Err(CliError::new(
                "demo",
                format!("`scafld {}` exited {code}, expected {expect}: {message}", args.join(" ")),
                workflow::RUNTIME,
            ));
        }
        let result = if envelope["result"].is_null() { envelope["error"].clone() } else { envelope["result"].clone() };
        self.say(&format!("  {}", summary(&result)));
        Ok(result)
    }

    fn write(&self, path: &str, text: &str) -> Result<(), CliError> {
        std::fs::write(self.repo.join(path), text)
            .map_err(|e| CliError::new("demo", format!("cannot write {path}: {e}"), workflow::RUNTIME))
    }

    fn git(&self, args: &[&str]) -> Result<(), CliError> {
        let status = Command::new("git")
            .args(["-c", "user.name=scafld demo", "-c", "user.email=demo@scafld.invalid"])
            .args(args)
            .current_dir(&self.repo)
            .output()
            .map_err(|e| CliError::new("demo", format!("the demo needs git: {e}"), workflow::RUNTIME))?;
        if !status.status.success() {
            return Err(CliError::new(
                "demo",
                format!("git {}: {}", args.join(" "), String::from_utf8_lossy(&status.stderr).trim()),
                workflow::RUNTIME,
            ));
        }
        Ok(())
    }

    /// `scafld args --json`'s envelope, shown nowhere (Null when it prints none).
    fn quiet(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        let output = self.command(&self.exe, &all).output();
        output.ok().and_then(|o| serde_json::from_slice(&o.stdout).ok()).unwrap_or(Value::Null)
    }

    fn stop_daemon(&self) {
        let _ = self.command(&self.exe, &["daemon", "stop"]).output();
    }
}

pub fn run(ctx: &Context, keep: bool) -> Result<u8, CliError> {
    let exe = std::env::current_exe()
        .map_err(|e| CliError::new("demo", format!("cannot find this scafld binary: {e}"), workflow::RUNTIME))?;
    let id = scafld_local::new_id().map_err(|e| CliError::new("demo", e.to_string(), workflow::RUNTIME))?;
    let root = scafld_local::temp_dir().join(format!("scafld-demo-{}", &id[..8]));
    let repo = root.join("repo");
    std::fs::create_dir_all(&repo)
        .map_err(|e| CliError::new("demo", format!("cannot create {}: {e}", repo.display()), workflow::RUNTIME))?;
    let json = ctx.out.json;
    let demo = Demo { exe, root, repo, json, steps: Default::default() };
    let outcome = walk(&demo);
    if !keep {
        demo.stop_daemon();
    }
    let spec = outcome?;
    let ledger = "scafld session greet";
    let stop = demo.stop_command();
    if !json {
        say("\nDone: greet went from a plan to a signed receipt, through a failing criterion and a blocking review.");
        say(&format!("  the repository:   {}", demo.repo.display()));
        say(&format!("  the spec:         {}", spec.display()));
        say(&format!("  the receipt:      {}", demo.repo.join(".scafld/receipts/greet.json").display()));
        say(&format!(
            "  the ledger:       `{ledger}` with SCAFLD_SOCKET={} SCAFLD_STATE_DIR={}{}",
            demo.root.join("scafldd.sock").display(),
            demo.root.join("state").display(),
            if keep { " (the daemon is still running: --keep)" } else { " (start its daemon again to read it)" }
        ));
        if keep {
            say(&format!("  stop its daemon:  `{stop}`"));
        }
        say("Try it on a repository of your own: `cd your-repo && scafld init && scafld plan <task>`; review with a");
        say("real model through `scafld review <task> --provider codex|claude|gemini` (see `scafld doctor`).");
    } else {
        ctx.out.success(
            &serde_json::json!({
                "repo": demo.repo.display().to_string(),
                "root": demo.root.display().to_string(),
                "spec": spec.display().to_string(),
                "receipt": demo.repo.join(".scafld/receipts/greet.json").display().to_string(),
                "kept": keep,
                "stop_command": keep.then_some(stop),
                "steps": demo.steps.take(),
            }),
            String::new,
        );
    }
    Ok(workflow::OK)
}

/// The walk through the gate; the archived spec's path at its end.
fn walk(d: &Demo) -> Result<PathBuf, CliError> {
    d.say(&format!("scafld demo: a throwaway repository in {}\n\n", d.repo.display()));
    d.git(&["init", "-q"])?;
    d.write("README.md", "# demo\n")?;
    d.git(&["add", "-A"])?;
    d.git(&["commit", "-qm", "initial"])?;
    d.step(&["init"], 0, |r| {
        format!("workspace {} created (and this demo's own receipt key)", r["workspace"]["workspace_id"])
    })?;
    d.step(&["plan", "greet"], 0, |r| {
        format!("draft {} (filled in next by the demo)", r["path"].as_str().unwrap_or_default())
    })?;
    d.write(".scafld/specs/drafts/greet.md", SPEC)?;
    d.step(&["validate", "greet"], 0, |r| format!("valid: {}", r["valid"]))?;
    d.step(&["harden", "greet"], 0, |r| {
        format!("{} opened; the demo writes its six checks", r["round_id"].as_str().unwrap_or_default())
    })?;
    let spec_path = d.repo.join(".scafld/specs/drafts/greet.md");
    let text = std::fs::read_to_string(&spec_path).unwrap_or_default();
    d.write("greet.txt", "hello\n")?;
    d.write(".scafld/specs/drafts/greet.md", &text.replacen("Checks:\n- none\n", CHECKS, 1))?;
    d.step(&["harden", "greet", "--mark-passed"], 0, |r| {
        format!("harden {}", r["harden_status"].as_str().unwrap_or_default())
    })?;
    d.step(&["approve", "greet"], 0, |r| format!("{}; baseline recorded", r["status"].as_str().unwrap_or_default()))?;
    std::fs::remove_file(d.repo.join("greet.txt")).ok();
    d.step(&["build", "greet"], 0, |r| format!("{} opened", r["phase"].as_str().unwrap_or("phase1")))?;
    d.write("greet.txt", "hi\n")?;
    d.say("  (the agent writes greet.txt: \"hi\")");
    d.step(&["build", "greet"], 3, failing)?;
    d.write("greet.txt", "hello\n")?;
    d.say("  (the agent repairs it: \"hello\")");
    d.step(&["build", "greet"], 0, |r| {
        let status = r["status"].as_str().or(r["outcome"]["status"].as_str()).unwrap_or("review");
        format!("a1 passes; status {status}")
    })?;
    let reviewer = d.root.join("demo-reviewer.sh");
    std::fs::write(&reviewer, REVIEWER)
        .and_then(|_| std::fs::set_permissions(&reviewer, std::os::unix::fs::PermissionsExt::from_mode(0o755)))
        .map_err(|e| CliError::new("demo", format!("cannot write the demo reviewer: {e}"), workflow::RUNTIME))?;
    d.say("  (the reviewer below is demo-reviewer.sh, a scripted stand-in for a model, run as a `command` provider)");
    let script = reviewer.display().to_string();
    // Discover mode both times: the scripted reviewer answers in one mode only.
    let review = [
        "review",
        "greet",
        "--provider",
        "command",
        "--provider-command",
        &script,
        "--mode",
        "discover",
        "--min-attack-angles",
        "2",
    ];
    d.step(&review, 4, |r| {
        let said = r["summary"].as_str().or(r["message"].as_str()).unwrap_or("the review failed");
        format!("blocked by the reviewer: {said}")
    })?;
    d.step(&["complete", "greet"], 4, |_| "refused: no passing review".into())?;
    d.write("greet.txt", "hello, world\n")?;
    d.say("  (the agent repairs the finding: \"hello, world\")");
    d.step(&["build", "greet"], 0, |_| "the changed file's evidence runs again: a1 passes".into())?;
    d.step(&review, 0, |r| format!("pass ({})", r["provider"].as_str().unwrap_or("command")))?;
    d.step(&["finalize", "greet"], 0, |r| {
        format!("completed with receipt {}", r["receipt_path"].as_str().unwrap_or_default())
    })?;
    d.git(&["add", "-A"])?;
    d.git(&["commit", "-qm", "greet the world"])?;
    d.say("  (the work is committed)");
    d.step(&["verify", "--target", "HEAD"], 0, |r| {
        let checks = r["checks"].as_array().map(|c| c.len()).unwrap_or(0);
        format!("verified: {checks} checks pass (signature, files, base, acceptance, ...)")
    })?;
    let status = d.quiet(&["status", "greet"]);
    let spec = status["result"]["path"].as_str().filter(|p| !p.is_empty()).map(|p| d.repo.join(p));
    Ok(spec.unwrap_or_else(|| d.repo.join(".scafld/specs/archive")))
}

fn failing(result: &Value) -> String {
    let criteria = result["criteria"].as_array().cloned().unwrap_or_default();
    match criteria.iter().find(|c| c["status"] != "pass") {
        Some(c) => format!(
            "blocked: {} failed ({})",
            c["criterion_id"].as_str().unwrap_or("a1"),
            c["reason"].as_str().unwrap_or_default()
        ),
        None => "blocked".into(),
    }
}
