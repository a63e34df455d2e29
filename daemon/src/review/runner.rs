//! The daemon's own reviewer runner: runs one reviewer job's provider with the caller's
//! environment, heartbeats while it lives, and concludes the job with its answer.

use std::sync::Arc;
use std::time::Duration;

use scafld_protocol::Event;

use crate::clock;
use crate::daemon::Daemon;
use crate::domain::dossier::{self, Attack, Dossier};
use crate::domain::job::{FailureClass, JobState, Provenance, ReviewerFailure, SessionRecord};
use crate::providers::{self, Provider};

/// Heartbeat interval of daemon-run reviewers, and the lease their liveness is judged against.
const HEARTBEAT: Duration = Duration::from_secs(2);
pub const HEARTBEAT_LEASE_MS: u64 = 30_000;

/// Run a queued daemon-run reviewer job in the background.
pub fn start(daemon: &Arc<Daemon>, job_id: String) {
    let daemon = daemon.clone();
    tokio::spawn(async move {
        let Some(job) = daemon.jobs.get(&job_id) else { return };
        let Some(work) = job.review.clone() else { return };
        let Some(session) = daemon.sessions.get(&work.session_key) else { return };
        let cancel = daemon.jobs.rearm(&job_id);
        let Some(job) = daemon.jobs.update(daemon.store(), &job_id, true, |r| {
            if r.state == JobState::Queued {
                r.state = JobState::Running;
                r.owner = "daemon".into();
                r.started_at = Some(clock::now_rfc3339());
                r.last_heartbeat = r.started_at.clone();
                r.activity = Some(format!("{} reviewing", work.reviewer));
                if let Some(w) = r.review.as_mut() {
                    w.heartbeat_ms = now_ms();
                    w.checkpoint.phase = "reviewing".into();
                    w.checkpoint.preflight = Some(session.preflight.clone());
                }
            }
        }) else {
            return;
        };
        if job.owner != "daemon" || job.state != JobState::Running {
            return;
        }
        daemon.publish(Event::JobChanged {
            job_id: job_id.clone(),
            task_id: job.task_id.clone(),
            state: "running".into(),
        });
        let heartbeat = {
            let (daemon, id) = (daemon.clone(), job_id.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(HEARTBEAT).await;
                    daemon.jobs.update(daemon.store(), &id, false, |r| {
                        r.last_heartbeat = Some(clock::now_rfc3339());
                        if let Some(w) = r.review.as_mut() {
                            w.heartbeat_ms = now_ms();
                        }
                    });
                }
            })
        };
        let (answer, provenance) = run(&daemon, &job_id, &session, &work.reviewer, cancel).await;
        heartbeat.abort();
        super::conclude(&daemon, &job_id, answer, provenance).await;
    });
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

fn internal(message: String) -> ReviewerFailure {
    ReviewerFailure { class: FailureClass::Internal, message }
}

/// Run the reviewer's provider; the answer is validated against the session's request.
async fn run(
    daemon: &Arc<Daemon>,
    job_id: &str,
    session: &SessionRecord,
    reviewer: &str,
    cancel: tokio_util::sync::CancellationToken,
) -> (Result<Dossier, ReviewerFailure>, Provenance) {
    let request = session.request.request();
    let mut provenance =
        Provenance { provider: reviewer.to_string(), channel: "local".into(), ..Provenance::default() };
    let ws = match daemon.workspace(&session.root).await {
        Ok(ws) => ws,
        Err(e) => return (Err(internal(format!("workspace unavailable: {}", e.0.message))), provenance),
    };
    let config = match ws.config() {
        Ok(c) => c,
        Err(e) => return (Err(internal(e.to_string())), provenance),
    };
    let choice = providers::Choice {
        provider: Some(reviewer),
        command: session.provider_command.as_deref(),
        model: session.model.as_deref(),
        reasoning: session.reasoning.as_deref(),
    };
    let provider = match providers::select(&choice, &config, &session.caller_env) {
        Ok(p) => p,
        Err(e) => return (Err(internal(e.0.message)), provenance),
    };
    if let Provider::Local = provider {
        return (Ok(local_dossier(&request)), provenance);
    }
    if let Provider::Codex(cli) | Provider::Claude(cli) | Provider::Gemini(cli) = &provider {
        provenance.model = Some(cli.model.clone()).filter(|m| !m.is_empty());
    }
    if let Provider::Codex(cli) = &provider {
        provenance.reasoning = Some(cli.reasoning.clone()).filter(|r| !r.is_empty());
    }
    let packet = match std::fs::read_to_string(&session.packet_path) {
        Ok(p) => p,
        Err(e) => return (Err(internal(format!("cannot read the review packet: {e}"))), provenance),
    };
    let label =
        if session.task_id.is_empty() { format!("review-{}", &session.key[..8]) } else { session.task_id.clone() };
    let runs = ws.root.join(".scafld/runs").join(&label);
    // A directory of its own per run, so parallel reviews never share temp files.
    let scratch = runs.join(format!("review-{job_id}"));
    let client_exe = if session.client_exe.is_empty() { "scafld" } else { session.client_exe.as_str() };
    let invocation = match providers::invocation(
        &provider,
        &scratch,
        &ws.root,
        client_exe,
        &daemon.options.socket_path,
        &daemon.submissions,
        &request,
    ) {
        Ok(i) => i,
        Err(e) => return (Err(internal(format!("cannot prepare the {} run: {e}", provider.name()))), provenance),
    };
    provenance.channel = invocation.output_format.to_string();
    let on_spawn = {
        let (daemon, id) = (daemon.clone(), job_id.to_string());
        Box::new(move |pgid: i32| {
            daemon.jobs.update(daemon.store(), &id, true, |r| r.pgid = Some(pgid));
        })
    };
    let on_event = {
        let (daemon, id, name) = (daemon.clone(), job_id.to_string(), provider.name());
        Box::new(move |event: String| {
            let activity = format!("{name} event {event}");
            daemon.jobs.update(daemon.store(), &id, false, |r| r.activity = Some(activity));
        })
    };
    let caller_env = session.caller_env.clone();
    let run = providers::Run {
        on_spawn,
        on_event,
        task: &label,
        cwd: &ws.root,
        caller_env: &caller_env,
        packet: &packet,
        diagnostics_dir: runs.join("diagnostics"),
    };
    let answer = providers::run(&invocation, run, &config, &daemon.submissions, cancel).await;
    let _ = std::fs::remove_dir_all(&scratch);
    let root = format!("{}/", ws.root.display());
    let answer = answer
        .map_err(|mut f| {
            f.message = f.message.replace(&root, "");
            f
        })
        .and_then(|d| accept(d, &request));
    if let Ok(d) = &answer {
        provenance.channel = d.output_format.clone().unwrap_or(provenance.channel);
        if d.model.is_some() {
            provenance.model = d.model.clone();
        }
    }
    (answer, provenance)
}

/// Normalise and validate a dossier against the request; an invalid one is a parse failure.
pub fn accept(dossier: Dossier, request: &dossier::Request) -> Result<Dossier, ReviewerFailure> {
    let dossier = dossier::normalize(dossier, request);
    let problems = dossier::validate(&dossier, request);
    if problems.is_empty() {
        Ok(dossier)
    } else {
        Err(ReviewerFailure {
            class: FailureClass::Parse,
            message: format!("review dossier invalid: {}", problems.join("; ")),
        })
    }
}

/// The `local` pass-through: a development smoke review that can never complete a task.
fn local_dossier(request: &dossier::Request) -> Dossier {
    Dossier {
        verdict: "pass".into(),
        mode: request.mode.clone(),
        summary: "Local provider smoke review passed.".into(),
        attack_log: vec![Attack {
            target: "local provider".into(),
            attack: "development pass-through".into(),
            result: "clean".into(),
            notes: Some("not an adversarial review; cannot complete a task".into()),
        }],
        budget: dossier::Budget { depth: "local".into(), ..Default::default() },
        output_format: Some("local".into()),
        ..Dossier::default()
    }
}
