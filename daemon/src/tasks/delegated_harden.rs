//! `harden <task> --provider P`: a read-only provider judges the draft and answers one
//! HardenDossier; scafld grounds its anchors, derives `passed` or `needs_revision` (or `error`
//! when the answer cannot be used), and writes the round bound to the draft's digest. An open
//! round on the same draft is reused; a `needs_revision` round blocks another pass until the
//! draft changes.

use scafld_protocol::ErrorKind;
use scafld_protocol::methods as m;
use scafld_protocol::vocab::HardenStatus;

use super::write::WorkspaceGround;
use super::write_projection;
use crate::clock;
use crate::daemon::Daemon;
use crate::domain::harden::{self, HardenDossier, Judgement};
use crate::domain::job::FailureClass;
use crate::domain::spec::Spec;
use crate::error::{RpcError, RpcResult};
use crate::ledger::SpecText;
use crate::providers::{self, Provider};
use crate::workspace::Workspace;

/// The draft as read under the task lock: its file (with its text) and what it parses to.
pub struct Draft {
    pub file: SpecText,
    pub spec: Spec,
}

pub async fn harden(
    daemon: &Daemon,
    ws: &Workspace,
    task: &str,
    draft: Draft,
    p: &m::HardenParams,
    provider: &str,
) -> RpcResult<m::HardenResult> {
    let Draft { file, spec } = draft;
    let digest = harden::draft_digest(&file.text);
    if let Some(last) = spec.harden_rounds.last()
        && last.digest == digest
        && last.status == HardenStatus::NeedsRevision.as_str()
    {
        return Err(RpcError::new(
            ErrorKind::InvalidState,
            format!("{} asked for revision of this very draft; another pass would say the same", last.id),
        )
        .with_hint(format!("edit {} as the round says, then harden again", ws.relative(&file.path))));
    }
    let config = ws.config()?;
    // The provider is read-only: the workspace is compared before and after it runs (the draft
    // by its bytes, as the material leaves the spec folders out).
    let before = Guarded::read(ws).await?;
    let answer = ask(daemon, ws, &config, task, &file.text, p, provider).await?;
    refuse_a_changed_draft(ws, &file)?;
    let changed = Guarded::read(ws).await?.changed_since(&before);
    let answer = match changed.is_empty() {
        true => answer,
        false => Err(format!(
            "the harden provider changed the workspace while judging the draft ({}); a harden provider must not modify files, so its answer does not count",
            changed.join(", ")
        )),
    };
    let (dossier, judgement) = match answer {
        Ok(dossier) => {
            let ground = WorkspaceGround { ws };
            let judgement = harden::judge(&dossier, &ground, config.harden.max_issues_per_round as usize);
            (Some(dossier), judgement)
        }
        Err(problem) => (None, Judgement { status: HardenStatus::Error, problems: vec![problem] }),
    };
    let now = clock::now_rfc3339();
    let next = harden::delegated_round(&spec, &digest, provider, dossier.as_ref(), &judgement, &now);
    // Bound to the draft as written with the round's checks in it: an edit to them counts too.
    let next = harden::bind_latest_round(&file.text, next).map_err(super::write::projection_error)?;
    let round_id = next.harden_rounds.last().map(|r| r.id.clone()).unwrap_or_default();
    let written = write_projection(daemon, ws, task, &file, &next, "command:harden")?;
    // Again as it was asked for: a configured provider needs no flag, a command its command.
    let again = match (p.provider.as_deref(), p.provider_command.as_deref()) {
        (None, _) => format!("scafld harden {task}"),
        (Some("command"), Some(command)) => format!(
            "scafld harden {task} --provider command --provider-command {}",
            scafld_protocol::cli::shell_word(command)
        ),
        (Some(_), _) => format!("scafld harden {task} --provider {provider}"),
    };
    let next_command = match judgement.status {
        HardenStatus::Passed => format!("scafld approve {task}"),
        HardenStatus::NeedsRevision => format!("edit the draft, then `{again}`"),
        _ => again,
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

/// The workspace as the read-only guard compares it: its material (the spec folders left out)
/// and what steers scafld and git beside it (other specs, ignored config, hooks).
struct Guarded {
    material: Vec<crate::domain::ledger::BaselinePath>,
    controls: std::collections::BTreeMap<String, String>,
}

impl Guarded {
    async fn read(ws: &Workspace) -> RpcResult<Guarded> {
        let root = ws.root.clone();
        let read = move || {
            let material = crate::baseline::guard_snapshot(&root, &[], &[])?;
            Ok(Guarded { material, controls: crate::baseline::control_files(&root) })
        };
        crate::baseline::off_runtime(read).await?.map_err(|e: String| {
            RpcError::new(ErrorKind::WorkspaceError, format!("cannot read the workspace to guard the harden run: {e}"))
        })
    }

    /// What differs from `before`, a path each, once; the receipts scafld itself mints (a
    /// finalize of another task meanwhile) aside.
    fn changed_since(&self, before: &Guarded) -> Vec<String> {
        let mut changed: std::collections::BTreeSet<String> =
            crate::domain::review::changed_paths(&before.material, &self.material).into_iter().collect();
        let keys: std::collections::BTreeSet<&String> = before.controls.keys().chain(self.controls.keys()).collect();
        changed.extend(keys.into_iter().filter(|k| before.controls.get(*k) != self.controls.get(*k)).cloned());
        changed.into_iter().filter(|path| !path.starts_with(".scafld/receipts/")).collect()
    }
}

/// A draft the provider rewrote while judging it is the author's to look at: nothing is
/// recorded over it, and the refusal names it.
fn refuse_a_changed_draft(ws: &Workspace, file: &SpecText) -> RpcResult<()> {
    let now = scafld_local::capped::read(&file.path, "spec", crate::domain::spec::budget::MAX_SPEC_BYTES).ok();
    if now.as_deref() == Some(file.text.as_bytes()) {
        return Ok(());
    }
    let path = ws.relative(&file.path);
    Err(RpcError::new(
        ErrorKind::InvalidState,
        format!(
            "the harden provider changed the draft {path} while judging it (a harden provider must not modify files); nothing was recorded"
        ),
    )
    .with_hint(format!("look at what it changed (`git diff -- {path}`), keep only what you want, then harden again")))
}

/// The provider's answer, or why there is none (a transport problem is the round's `error`).
/// Only a refused request (an unknown or unavailable provider) is an error of the call.
async fn ask(
    daemon: &Daemon,
    ws: &Workspace,
    config: &crate::config::Config,
    task: &str,
    spec_text: &str,
    p: &m::HardenParams,
    provider: &str,
) -> RpcResult<Result<HardenDossier, String>> {
    let caller_env = p.caller.as_ref().map(|c| c.env.clone()).unwrap_or_default();
    let choice = providers::Choice {
        provider: Some(provider),
        command: p.provider_command.as_deref(),
        model: None,
        reasoning: None,
        builders: &[],
    };
    // Chosen like a reviewer, with the harden settings in the reviewer's place.
    let mut settings = config.clone();
    settings.review.external = config.harden.external.clone();
    let config = &settings;
    let selected = providers::select(&choice, config, &caller_env)?;
    if let Provider::Local = selected {
        return Ok(Ok(local_answer()));
    }
    let packet = packet(task, spec_text, config.harden.context_max_bytes, config.harden.max_issues_per_round);
    let scratch = ws.data.join("runs").join(task).join("harden");
    let client_exe = p.caller.as_ref().map(|c| c.client_exe.as_str()).filter(|e| !e.is_empty()).unwrap_or("scafld");
    let place = providers::Place {
        scratch: &scratch,
        root: &ws.root,
        client_exe,
        socket: &daemon.options.socket_path,
        env: &caller_env,
    };
    let invocation =
        providers::invocation(&selected, &place, &daemon.submissions, providers::Expect::Harden).map_err(|e| {
            RpcError::new(ErrorKind::WorkspaceError, format!("cannot prepare the {} run: {e}", selected.name()))
        })?;
    // The provider runs as the call's command: on record, and cancelled by the daemon's stop,
    // which records no round (`runner::CallRuns`).
    let call = daemon.call_runs.begin(&format!("harden {task}")).await?;
    let run = providers::Run {
        task,
        cwd: &ws.root,
        caller_env: &caller_env,
        packet: &packet,
        diagnostics_dir: ws.data.join("runs").join(task).join("diagnostics"),
        on_spawn: Box::new(|_| {}),
        token: Some(call.token()),
        on_event: Box::new(|_| {}),
    };
    let left = providers::run(&invocation, run, config, &daemon.submissions, call.cancel()).await;
    let answer = match left {
        Ok(left) => providers::interpret_harden(&invocation, left),
        Err(failure) if failure.class == FailureClass::Cancelled => {
            let _ = std::fs::remove_dir_all(&scratch);
            return Err(call.stopping());
        }
        Err(failure) => Err(failure.message),
    };
    // Scratch files (codex's answer among them) go once the answer is read.
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(answer.and_then(harden::parse_dossier))
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
