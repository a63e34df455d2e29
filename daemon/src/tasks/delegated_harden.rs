//! `harden <task> --provider P`: a read-only provider judges the draft and answers one
//! HardenDossier; scafld grounds its anchors, derives `passed` or `needs_revision` (or `error`
//! when the answer cannot be used), and writes the round bound to the draft's digest. An open
//! round on the same draft is reused; a `needs_revision` round blocks another pass until the
//! draft changes.

use std::path::PathBuf;

use scafld_protocol::ErrorKind;
use scafld_protocol::methods as m;
use scafld_protocol::vocab::HardenStatus;
use tokio_util::sync::CancellationToken;

use super::write::{WorkspaceGround, read_fresh};
use super::write_projection;
use crate::clock;
use crate::daemon::Daemon;
use crate::domain::harden::{self, HardenDossier, Judgement};
use crate::domain::lifecycle::Status;
use crate::error::{RpcError, RpcResult};
use crate::runner::{self, Diagnostics, RunRequest};
use crate::workspace::Workspace;

pub async fn harden(
    daemon: &Daemon,
    ws: &Workspace,
    task: &str,
    p: &m::HardenParams,
    provider: &str,
) -> RpcResult<m::HardenResult> {
    let (path, text, spec) = read_fresh(ws, task)?;
    if spec.status() != Some(Status::Draft) {
        return Err(RpcError::new(
            ErrorKind::InvalidState,
            format!("harden only operates on drafts; {task} is {}", spec.front.status),
        ));
    }
    let digest = harden::draft_digest(&spec);
    if let Some(last) = spec.harden_rounds.last()
        && last.digest == digest
        && last.status == HardenStatus::NeedsRevision.as_str()
    {
        return Err(RpcError::new(
            ErrorKind::InvalidState,
            format!("{} asked for revision of this very draft; another pass would say the same", last.id),
        )
        .with_hint(format!("edit {} as the round says, then harden again", ws.relative(&path))));
    }
    let config = ws.config()?;
    let caller_env = p.caller.as_ref().map(|c| c.env.clone()).unwrap_or_default();
    let (dossier, judgement) =
        match ask(ws, &config, task, &text, provider, p.provider_command.as_deref(), &caller_env).await? {
            Ok(dossier) => {
                let ground = WorkspaceGround { ws };
                let judgement = harden::judge(&dossier, &ground, config.harden.max_issues_per_round as usize);
                (Some(dossier), judgement)
            }
            Err(problem) => (None, Judgement { status: HardenStatus::Error, problems: vec![problem] }),
        };
    let now = clock::now_rfc3339();
    let next = harden::delegated_round(&spec, &digest, provider, dossier.as_ref(), &judgement, &now);
    let round_id = next.harden_rounds.last().map(|r| r.id.clone()).unwrap_or_default();
    let written = write_projection(daemon, ws, &path, &text, &next, "command:harden")?;
    let next_command = match judgement.status {
        HardenStatus::Passed => format!("scafld approve {task}"),
        HardenStatus::NeedsRevision => format!("edit the draft, then `scafld harden {task} --provider {provider}`"),
        _ => format!("scafld harden {task} --provider {provider}"),
    };
    Ok(m::HardenResult {
        task_id: task.to_string(),
        path: ws.relative(&written),
        harden_status: judgement.status,
        round_id,
        marked_passed: judgement.status == HardenStatus::Passed,
        next_command,
        prompt: String::new(),
        problems: judgement.problems,
    })
}

/// The provider's answer, or why there is none (a transport problem is the round's `error`).
/// Only a refused request (an unknown or unavailable provider) is an error of the call.
async fn ask(
    ws: &Workspace,
    config: &crate::config::Config,
    task: &str,
    spec_text: &str,
    provider: &str,
    command: Option<&str>,
    caller_env: &std::collections::BTreeMap<String, String>,
) -> RpcResult<Result<HardenDossier, String>> {
    match provider {
        "local" => Ok(Ok(local_answer())),
        "command" => {
            let command = command.map(str::to_string).ok_or_else(|| {
                RpcError::new(ErrorKind::InvalidInput, "--provider command needs --provider-command CMD")
                    .with_hint("the command gets the packet on stdin and prints one HardenDossier JSON on stdout")
            })?;
            let packet = packet(task, spec_text, config.harden.context_max_bytes, config.harden.max_issues_per_round);
            Ok(run_command(ws, task, &command, &packet, caller_env).await.and_then(|stdout| {
                let value = last_json(&stdout).ok_or("the provider printed no JSON object")?;
                harden::parse_dossier(value)
            }))
        }
        "codex" | "claude" | "gemini" | "auto" => Err(RpcError::new(
            ErrorKind::InvalidInput,
            format!("delegated hardening with {provider} is not available in this release"),
        )
        .with_hint("use --provider command --provider-command CMD (a reviewer you wrap), or harden by hand")),
        other => Err(RpcError::new(ErrorKind::InvalidInput, format!("unknown harden provider {other:?}"))
            .with_hint("one of command, local (codex, claude and gemini are not wired for hardening yet)")),
    }
}

/// The local provider reviews nothing: every dimension `clean`, grounded in what it is.
fn local_answer() -> HardenDossier {
    use harden::{Dimension, Observation, ObservationResult, Shape, ShapeDecision};
    HardenDossier {
        summary: "local provider: no model read this draft".into(),
        shape: Shape {
            decision: ShapeDecision::Keep,
            true_shape: "as written".into(),
            minimal_plan: "as written".into(),
            shared_owner: String::new(),
            adapter_boundaries: Vec::new(),
            required_spec_edits: Vec::new(),
        },
        observations: Dimension::ALL
            .iter()
            .map(|d| Observation {
                dimension: *d,
                result: ObservationResult::Clean,
                anchor: "spec_gap:the local provider does not review".into(),
                note: "local provider smoke pass".into(),
                question: String::new(),
                recommended: String::new(),
                status: None,
            })
            .collect(),
    }
}

/// What the provider reads: the draft (capped) and the answer it must give.
fn packet(task: &str, spec_text: &str, max_bytes: usize, max_issues: u32) -> String {
    let mut spec = spec_text.to_string();
    if spec.len() > max_bytes {
        let mut cut = max_bytes;
        while !spec.is_char_boundary(cut) {
            cut -= 1;
        }
        spec.truncate(cut);
        spec.push_str("\n[... the draft is longer; read the file for the rest]\n");
    }
    format!(
        "# Harden the draft `{task}`\n\nYou are hardening a task spec before it is approved: read it (and the code it names) and judge it. Do not modify any file.\n\n\
         Answer with exactly one JSON object, a HardenDossier:\n\
         {{\"summary\": \"...\", \"shape\": {{\"decision\": \"keep|shrink|reframe|reject\", \"true_shape\": \"...\", \"minimal_plan\": \"...\", \"shared_owner\": \"...\", \"adapter_boundaries\": [], \"required_spec_edits\": []}}, \
         \"observations\": [{{\"dimension\": \"design|scope|path|command|timing|rollback\", \"result\": \"clean|advisory|blocks|n/a\", \"anchor\": \"spec_gap:<what the spec leaves open> | code:<path>:<line> | archive:<task-id>\", \"note\": \"...\", \"question\": \"...\", \"recommended\": \"...\", \"status\": \"open|fixed|accepted_risk|superseded\"}}]}}\n\n\
         Cover all six dimensions. A `code:` anchor must name a real line of a real file. At most {max_issues} observations may be advisory or blocking.\n\n\
         ## The draft\n\n{spec}"
    )
}

/// Run the provider command with the packet on stdin, as the daemon runs any command.
async fn run_command(
    ws: &Workspace,
    task: &str,
    command: &str,
    packet: &str,
    caller_env: &std::collections::BTreeMap<String, String>,
) -> Result<String, String> {
    let mut env = caller_env.clone();
    if env.is_empty() {
        env.insert("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into());
    }
    env.insert("SCAFLD_TASK_ID".into(), task.to_string());
    let request = RunRequest {
        command: command.to_string(),
        cwd: ws.root.clone(),
        env,
        absolute_timeout: std::time::Duration::from_secs(600),
        idle_timeout: None,
        stdin: Some(packet.as_bytes().to_vec()),
        on_stdout: None,
        idle_on_stdout: false,
        die_with_parent: false,
    };
    let diagnostics = Diagnostics { dir: runs_dir(ws, task), env_overrides: vec!["SCAFLD_TASK_ID".into()] };
    let (outcome, diagnostic) = runner::run(request, diagnostics, CancellationToken::new(), |_| {}).await;
    if let Some(error) = outcome.runner_error() {
        return Err(format!("the harden provider failed: {error} (diagnostic: {})", ws.relative(&diagnostic)));
    }
    if outcome.exit_code != Some(0) {
        return Err(format!(
            "the harden provider exited {} (diagnostic: {})",
            outcome.exit_code.map(|c| c.to_string()).unwrap_or_else(|| "abnormally".into()),
            ws.relative(&diagnostic)
        ));
    }
    Ok(outcome.stdout.text())
}

fn runs_dir(ws: &Workspace, task: &str) -> PathBuf {
    ws.data.join("runs").join(task).join("harden")
}

/// The last line of `text` that is a JSON object, or the whole text when it is one.
fn last_json(text: &str) -> Option<serde_json::Value> {
    let whole = text.trim();
    if let Ok(value @ serde_json::Value::Object(_)) = serde_json::from_str(whole) {
        return Some(value);
    }
    text.lines().rev().find_map(|line| match serde_json::from_str(line.trim()) {
        Ok(value @ serde_json::Value::Object(_)) => Some(value),
        _ => None,
    })
}
