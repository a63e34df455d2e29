//! `harden <task> --provider P`: a read-only provider judges the draft and answers one
//! HardenDossier; scafld grounds its anchors, derives `passed` or `needs_revision` (or `error`
//! when the answer cannot be used), and writes the round bound to the draft's digest. An open
//! round on the same draft is reused; a `needs_revision` round blocks another pass until the
//! draft changes.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::Arc;

use futures::FutureExt;
use scafld_protocol::methods as m;
use scafld_protocol::vocab::HardenStatus;
use scafld_protocol::{ErrorKind, Event};
use tokio_util::sync::CancellationToken;

use super::write::WorkspaceGround;
use super::write_projection;
use crate::clock;
use crate::daemon::Daemon;
use crate::domain::harden::{self, HardenDossier, Judgement};
use crate::domain::job::{FailureClass, JobKind, JobState};
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

/// Judge the draft with `provider`. Its run is a job of the task (`JobKind::Harden`), as a
/// reviewer's is: listed, cancelled by `scafld job cancel` and by the daemon's stop, its process
/// group on record (killed by the stop and, after a crash, by the next start), and the task
/// held (`held`) until the round is written, while other commands on it answer `busy`. The job
/// runs on its own task: a caller that goes away leaves it to finish and record its round, as a
/// reviewer's run does; this call answers with its end.
pub async fn harden(
    daemon: &Arc<Daemon>,
    ws: &Arc<Workspace>,
    task: &str,
    draft: Draft,
    p: &m::HardenParams,
    provider: &str,
    held: tokio::sync::OwnedMutexGuard<()>,
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
    // A provider that cannot be used is refused before any job exists: nothing is recorded.
    let asking = prepare(daemon, ws, &config, task, &file, p, provider)?;
    let (job, cancel) = daemon.jobs.create(daemon.store(), JobKind::Harden, ws, task, None, false);
    // Unless a `job cancel` ended it meanwhile (its token then cancels the run at once).
    let started = daemon.jobs.update_if(
        daemon.store(),
        &job.id,
        true,
        |r| r.state == JobState::Queued,
        |r| {
            r.state = JobState::Running;
            r.owner = "daemon".into();
            r.started_at = Some(clock::now_rfc3339());
            r.activity = Some(format!("{provider} hardening"));
        },
    );
    // A job cancelled before it started is not announced as running.
    if started.is_some() {
        daemon.publish(Event::JobChanged {
            job_id: job.id.clone(),
            task_id: task.to_string(),
            state: JobState::Running,
        });
    }
    let run = Hardening {
        daemon: daemon.clone(),
        ws: ws.clone(),
        task: task.to_string(),
        file,
        spec,
        digest,
        config,
        provider: provider.to_string(),
        job_id: job.id.clone(),
        cancel,
    };
    let (answer, answered) = tokio::sync::oneshot::channel();
    let daemon = daemon.clone();
    tokio::spawn(async move {
        let _held = held; // the task stays held until the job ends
        let (job_id, task) = (run.job_id.clone(), run.task.clone());
        // A bug must end the job, not leave it running for ever with its task held.
        let ended = AssertUnwindSafe(run.execute(asking)).catch_unwind().await.unwrap_or_else(|_| {
            tracing::error!(job = %job_id, "a harden job hit a bug");
            Ended::Refused(RpcError::internal(
                "the daemon hit a bug running this harden; nothing was recorded (the daemon's log has the details; please report it)",
            ))
        });
        end(&daemon, &job_id, &task, &ended);
        let _ = answer.send(ended.answer(&task, &job_id));
    });
    answered.await.unwrap_or_else(|_| Err(RpcError::internal("the harden job ended without an answer")))
}

/// How a harden job ended.
enum Ended {
    /// A round was written.
    Round(m::HardenResult),
    /// Nothing was written, for the reason the error gives.
    Refused(RpcError),
    /// Cancelled (`scafld job cancel`) before the provider answered: nothing was written.
    Cancelled,
    /// The daemon stopped while the job ran: nothing was written.
    Stopped,
}

impl Ended {
    /// The call's answer.
    fn answer(self, task: &str, job_id: &str) -> RpcResult<m::HardenResult> {
        match self {
            Ended::Round(result) => Ok(result),
            Ended::Refused(error) => Err(error),
            Ended::Cancelled => Err(RpcError::new(
                ErrorKind::InvalidState,
                format!("the harden of {task} (job {job_id}) was cancelled before its provider answered; no round was recorded"),
            )
            .with_hint(format!("run `scafld harden {task}` again when you want the draft judged"))),
            Ended::Stopped => Err(RpcError::new(
                ErrorKind::ShuttingDown,
                format!("the daemon is stopping: harden {task} was cut short and recorded nothing"),
            )
            .with_hint("run it again: the next scafld command starts the daemon")),
        }
    }
}

/// Record how the job ended (once: a job a restart abandoned meanwhile is left as it is).
fn end(daemon: &Daemon, job_id: &str, task: &str, ended: &Ended) {
    let (state, reason, kind) = match ended {
        // A round the provider could not give a usable answer for failed the job, as the call.
        Ended::Round(result) => match (result.harden_status, result.problems.first()) {
            (HardenStatus::Error, problem) => (
                JobState::Failed,
                format!("{} error: {}", result.round_id, problem.map_or("no usable answer", String::as_str)),
                None,
            ),
            (status, _) => (JobState::Succeeded, format!("{} {status}", result.round_id), None),
        },
        Ended::Refused(error) => (JobState::Failed, error.0.message.clone(), Some(error.0.kind.as_str().to_string())),
        Ended::Cancelled => {
            (JobState::Cancelled, "cancelled before the provider answered; no round was recorded".into(), None)
        }
        Ended::Stopped => (
            JobState::Abandoned,
            "the daemon stopped while the provider ran; it was killed and no round was recorded".into(),
            None,
        ),
    };
    let ended = daemon.jobs.update_if(
        daemon.store(),
        job_id,
        true,
        |r| !r.state.is_finished(),
        |r| {
            r.state = state;
            r.finished_at = Some(clock::now_rfc3339());
            r.reason = Some(reason);
            r.error_kind = kind;
            r.activity = None;
            r.group = None;
        },
    );
    if ended.is_some() {
        daemon.publish(Event::JobChanged { job_id: job_id.to_string(), task_id: task.to_string(), state });
    }
}

/// One delegated harden, run as its job.
struct Hardening {
    daemon: Arc<Daemon>,
    ws: Arc<Workspace>,
    task: String,
    file: SpecText,
    spec: Spec,
    digest: String,
    config: crate::config::Config,
    provider: String,
    job_id: String,
    cancel: CancellationToken,
}

impl Hardening {
    async fn execute(self, asking: Asking) -> Ended {
        match self.judge(asking).await {
            Ok(ended) => ended,
            Err(error) => Ended::Refused(error),
        }
    }

    async fn judge(self, asking: Asking) -> RpcResult<Ended> {
        let Hardening { daemon, ws, task, file, spec, digest, config, provider, job_id, cancel } = self;
        let (ws, task) = (ws.as_ref(), task.as_str());
        // The provider is read-only: the workspace is compared before and after it runs (the
        // draft by its bytes, as the material leaves the spec folders out).
        let before = Guarded::read(ws).await?;
        let local = matches!(asking, Asking::Local);
        let Some(answer) = ask(&daemon, ws, task, asking, &job_id, cancel.clone()).await else {
            return Ok(if cancel.is_cancelled() { Ended::Cancelled } else { Ended::Stopped });
        };
        // An answer that came as the daemon began to stop is not recorded: the call answers
        // that the stop cut it short.
        if daemon.shutdown_token().is_cancelled() {
            return Ok(Ended::Stopped);
        }
        refuse_a_changed_draft(ws, &file)?;
        let changed = Guarded::read(ws).await?.changed_since(&before);
        let answer = match changed.is_empty() {
            true => answer,
            // Who changed them is not known: a person or another program as well as the
            // provider (which must not), so the message accuses no one.
            false => Err(format!(
                "the workspace changed while the harden provider judged the draft ({}): edited by hand or by another program, or by the provider, which must not modify files; an answer about files that changed under it does not count",
                scafld_protocol::text::listed(&changed)
            )),
        };
        let (dossier, judgement) = match answer {
            // Nothing read the draft: its round records that, and is no pass.
            Ok(dossier) if local => (Some(dossier), harden::unjudged("local")),
            Ok(dossier) => {
                let ground = WorkspaceGround { ws };
                let judgement = harden::judge(&dossier, &ground, config.harden.max_issues_per_round as usize);
                (Some(dossier), judgement)
            }
            Err(problem) => (None, Judgement { status: HardenStatus::Error, problems: vec![problem] }),
        };
        let now = clock::now_rfc3339();
        let next = harden::delegated_round(&spec, &digest, &provider, dossier.as_ref(), &judgement, &now);
        // Bound to the draft as written with the round's checks in it: an edit to them counts too.
        let next = harden::bind_latest_round(&file.text, next).map_err(super::write::projection_error)?;
        let round_id = next.harden_rounds.last().map(|r| r.id.clone()).unwrap_or_default();
        let written = write_projection(&daemon, ws, task, &file, &next, "command:harden")?;
        // The one next step, as the spec's Current State now says it and `status` does (after
        // a local round, a harden that reads the draft; its problem names `--reason` too).
        let next_command = next.current_state.allowed_follow_up.clone();
        Ok(Ended::Round(m::HardenResult {
            task_id: task.to_string(),
            path: ws.relative(&written),
            harden_status: judgement.status,
            round_id,
            marked_passed: judgement.status == HardenStatus::Passed,
            next_command,
            prompt: String::new(),
            problems: judgement.problems,
            raised: dossier.as_ref().map(raised).unwrap_or_default(),
        }))
    }
}

/// What the provider raised for the author, as the call shows it (the round holds it too).
fn raised(dossier: &HardenDossier) -> Vec<m::HardenRaised> {
    harden::raised(dossier)
        .map(|o| m::HardenRaised {
            check: o.dimension.check().to_string(),
            result: o.result.as_str().to_string(),
            anchor: o.anchor.clone(),
            note: o.note.trim().to_string(),
            question: o.question.trim().to_string(),
            recommended: o.recommended.trim().to_string(),
            if_unanswered: o.if_unanswered.trim().to_string(),
            default: o.default.trim().to_string(),
        })
        .collect()
}

/// The harden of `task` again as it was asked for: a configured provider needs no flag, a
/// command its command.
pub(super) fn again(task: &str, p: &m::HardenParams, provider: &str) -> String {
    match (p.provider.as_deref(), p.provider_command.as_deref()) {
        (None, _) => format!("scafld harden {task}"),
        (Some("command"), Some(command)) => format!(
            "scafld harden {task} --provider command --provider-command {}",
            scafld_protocol::cli::shell_word(command)
        ),
        (Some(_), _) => format!("scafld harden {task} --provider {provider}"),
    }
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

/// A draft that changed while the provider judged it is the author's to look at: nothing is
/// recorded over it, and the refusal names it. Whose the change is cannot be told (an edit by
/// hand as much as the provider's), so the refusal says what happened, not who did it.
fn refuse_a_changed_draft(ws: &Workspace, file: &SpecText) -> RpcResult<()> {
    let now = scafld_local::capped::read(&file.path, "spec", crate::domain::spec::budget::MAX_SPEC_BYTES).ok();
    if now.as_deref() == Some(file.text.as_bytes()) {
        return Ok(());
    }
    let path = ws.relative(&file.path);
    Err(RpcError::new(
        ErrorKind::InvalidState,
        format!(
            "the draft {path} changed while the harden provider judged it (edited by hand or by another program, or by the provider, which must not modify files); nothing was recorded: the answer judged the draft as it was before"
        ),
    )
    .with_hint(format!(
        "look at the change (`git diff -- {path}`), keep what you want, then harden again so the round judges the draft as it is now"
    )))
}

/// The provider a harden asks, ready to run: chosen like a reviewer, with the harden
/// settings in the reviewer's place.
enum Asking {
    Local,
    External {
        /// The provider's name, for the job's activity.
        name: &'static str,
        invocation: providers::Invocation,
        packet: String,
        /// Its scratch files (codex's answer among them), removed once the answer is read.
        scratch: PathBuf,
        settings: Box<crate::config::Config>,
        caller_env: BTreeMap<String, String>,
    },
}

/// Choose the provider and prepare its run; only a refused request (an unknown or unavailable
/// provider) is an error of the call.
fn prepare(
    daemon: &Daemon,
    ws: &Arc<Workspace>,
    config: &crate::config::Config,
    task: &str,
    draft: &SpecText,
    p: &m::HardenParams,
    provider: &str,
) -> RpcResult<Asking> {
    let caller_env = p.caller.as_ref().map(|c| c.env.clone()).unwrap_or_default();
    let choice = providers::Choice {
        provider: Some(provider),
        command: p.provider_command.as_deref(),
        model: None,
        reasoning: None,
        builders: &[],
    };
    let mut settings = config.clone();
    settings.review.external = config.harden.external.clone();
    let selected = providers::select(&choice, &settings, &caller_env)?;
    if let Provider::Local = selected {
        return Ok(Asking::Local);
    }
    let path = ws.relative(&draft.path);
    let packet =
        packet(task, &path, &draft.text, settings.harden.context_max_bytes, settings.harden.max_issues_per_round);
    let scratch = ws.data.join("runs").join(task).join("harden");
    let client_exe = p.caller.as_ref().map(|c| c.client_exe.as_str()).filter(|e| !e.is_empty()).unwrap_or("scafld");
    let place = providers::Place {
        scratch: &scratch,
        root: &ws.root,
        client_exe,
        socket: &daemon.options.socket_path,
        env: &caller_env,
    };
    // Its answer is judged as it is submitted too (anchors, issue count): one that could only
    // end the round in `error` is refused to the provider, which may fix it.
    let check = providers::HardenCheck {
        ground: Arc::new(super::write::HeldGround(ws.clone())),
        max_issues: settings.harden.max_issues_per_round as usize,
    };
    let invocation = providers::invocation(&selected, &place, &daemon.submissions, providers::Expect::Harden(&check))
        .map_err(|e| {
        RpcError::new(ErrorKind::WorkspaceError, format!("cannot prepare the {} run: {e}", selected.name()))
    })?;
    let name = selected.name();
    Ok(Asking::External { name, invocation, packet, scratch, settings: Box::new(settings), caller_env })
}

/// The provider's answer, or why there is none (a transport problem is the round's `error`);
/// `None` when its run was cancelled (`cancel`: the job's, or the daemon's stop). Its process
/// group goes on the job's record as it starts.
async fn ask(
    daemon: &Arc<Daemon>,
    ws: &Workspace,
    task: &str,
    asking: Asking,
    job_id: &str,
    cancel: CancellationToken,
) -> Option<Result<HardenDossier, String>> {
    let Asking::External { name, invocation, packet, scratch, settings, caller_env } = asking else {
        return Some(Ok(local_answer()));
    };
    let on_spawn = {
        let (daemon, id) = (daemon.clone(), job_id.to_string());
        Box::new(move |group: crate::runner::ProcessGroup| {
            daemon.jobs.update(daemon.store(), &id, true, |r| r.group = Some(group));
        })
    };
    let on_event = {
        let (daemon, id) = (daemon.clone(), job_id.to_string());
        Box::new(move |event: String| daemon.jobs.note(&id, |r| r.activity = Some(format!("{name} event {event}"))))
    };
    let run = providers::Run {
        task,
        cwd: &ws.root,
        caller_env: &caller_env,
        packet: &packet,
        diagnostics_dir: ws.data.join("runs").join(task).join("diagnostics"),
        on_spawn,
        // The group on the job's record carries the runner's own token, as a reviewer's does.
        token: None,
        on_event,
    };
    // Cancelled by the job's cancel and by the daemon's stop, so the stop never waits for it.
    let stop_or_cancel = daemon.shutdown_token().child_token();
    let relay = tokio::spawn({
        let (cancel, run) = (cancel, stop_or_cancel.clone());
        async move {
            cancel.cancelled().await;
            run.cancel();
        }
    });
    let left = providers::run(&invocation, run, &settings, &daemon.submissions, stop_or_cancel).await;
    relay.abort();
    let answer = match left {
        Ok(left) => Some(providers::interpret_harden(&invocation, left)),
        Err(failure) if failure.class == FailureClass::Cancelled => None,
        Err(failure) => Some(Err(failure.message)),
    };
    // Scratch files (codex's answer among them) go once the answer is read.
    let _ = std::fs::remove_dir_all(&scratch);
    answer.map(|answer| answer.and_then(harden::parse_dossier))
}

/// The local provider reviews nothing: every dimension `n/a`, grounded in what it is (its
/// round is never a pass: [`harden::unjudged`]).
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
                result: ObservationResult::NotApplicable,
                anchor: "spec_gap:the local provider does not review".into(),
                note: "local provider: nothing reviewed".into(),
                question: String::new(),
                recommended: String::new(),
                if_unanswered: String::new(),
                default: String::new(),
                status: None,
            })
            .collect(),
    }
}

/// What the provider reads: the draft (capped; a cut names the file, `path`, relative to the
/// workspace root the provider runs in, where the rest is) and the answer it must give.
fn packet(task: &str, path: &str, spec_text: &str, max_bytes: usize, max_issues: u32) -> String {
    let mut spec = spec_text.to_string();
    if spec.len() > max_bytes {
        let mut cut = max_bytes;
        while !spec.is_char_boundary(cut) {
            cut -= 1;
        }
        spec.truncate(cut);
        let path = scafld_protocol::text::one_line(path);
        spec.push_str(&format!(
            "\n[... the draft is longer than the {max_bytes} bytes shown; read the rest in the file {path}]\n"
        ));
    }
    format!(
        "# Harden the draft `{task}`\n\nYou are hardening a task spec before it is approved: read it (and the code it names) and judge it. Do not modify any file.\n\n\
         Answer with exactly one JSON object, a HardenDossier:\n\
         {{\"summary\": \"...\", \"shape\": {{\"decision\": \"keep|shrink|reframe|reject\", \"true_shape\": \"...\", \"minimal_plan\": \"...\", \"shared_owner\": \"...\", \"adapter_boundaries\": [], \"required_spec_edits\": []}}, \
         \"observations\": [{{\"dimension\": \"design|scope|path|command|timing|rollback\", \"result\": \"clean|advisory|blocks|n/a\", \"anchor\": \"spec_gap:<what the spec leaves open> | code:<path>:<line> | archive:<task-id>\", \"note\": \"...\", \"question\": \"...\", \"recommended\": \"...\", \"if_unanswered\": \"...\", \"default\": \"...\", \"status\": \"open|fixed|accepted_risk|superseded\"}}]}}\n\n\
         Cover all six dimensions. A `code:` anchor must name a real line of a real file. At most {max_issues} observations may be advisory or blocking.\n\n\
         ## The draft\n\n{spec}"
    )
}
