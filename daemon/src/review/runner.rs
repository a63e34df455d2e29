//! The daemon's own reviewer runner: runs one reviewer job's provider with the caller's
//! environment, heartbeats while it lives, and concludes the job with its answer.

use std::sync::Arc;
use std::time::Duration;

use scafld_protocol::Event;

use crate::clock;
use crate::daemon::Daemon;
use crate::domain::dossier::{self, Attack, Dossier};
use crate::domain::job::{FailureClass, JobState, Provenance, ReviewWork, ReviewerFailure, SessionRecord, TemplateJob};
use crate::domain::template;
use crate::providers::{self, Provider};
use scafld_protocol::methods::TemplateReviewResult;

/// Heartbeat interval of daemon-run reviewers, and the lease their liveness is judged against.
const HEARTBEAT: Duration = Duration::from_secs(2);
pub const HEARTBEAT_LEASE_MS: u64 = 30_000;

/// Run a queued daemon-run reviewer job in the background.
pub fn start(daemon: &Arc<Daemon>, job_id: String) {
    let daemon = daemon.clone();
    let Some(job) = daemon.jobs.get(daemon.store(), &job_id) else { return };
    let Some(work) = job.review.clone() else { return };
    let Some(session) = daemon.sessions.get(&work.session_key) else { return };
    // Reviewers share the workspace's job slots (`execution.max_parallel_jobs`) with builds:
    // the workspace's where it is now (its folder may have moved since the review began). Its
    // place in their line is taken now, in the order the jobs were queued.
    let home = super::home(&daemon, &session).map(|ws| {
        let place = ws.line_up_for_slot();
        (ws, place)
    });
    tokio::spawn(async move {
        let (ws, place) = match home {
            Ok(home) => home,
            Err(why) => {
                let failure = internal(format!("workspace unavailable: {why}"));
                let provenance = Provenance { provider: work.reviewer.clone(), ..Provenance::default() };
                super::conclude(&daemon, &job_id, Err(failure), provenance).await;
                return;
            }
        };
        let _permit = ws.job_slot(place).await;
        // Only the call that moves the job out of the queue runs it (a retry and a restart
        // recovery may both try).
        let mut started = false;
        let Some(job) = daemon.jobs.update(daemon.store(), &job_id, true, |r| {
            if r.state == JobState::Queued {
                started = true;
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
        if !started {
            return;
        }
        let cancel = daemon.jobs.token(&job_id);
        daemon.publish(Event::JobChanged {
            job_id: job_id.clone(),
            task_id: job.task_id.clone(),
            state: JobState::Running,
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
        let outcome = run(&daemon, &job_id, &session, &work, cancel).await;
        heartbeat.abort();
        if daemon.jobs.halted() {
            // Killed by the stop: the next start settles the job (see `Jobs::halt`).
            return;
        }
        if let Some(result) = &outcome.template_result {
            daemon.jobs.update(daemon.store(), &job_id, true, |r| {
                if let Some(w) = r.review.as_mut() {
                    w.template_result = Some(result.clone());
                }
            });
        }
        super::conclude(&daemon, &job_id, outcome.answer, outcome.provenance).await;
    });
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

fn internal(message: String) -> ReviewerFailure {
    ReviewerFailure { class: FailureClass::Internal, message }
}

/// What a reviewer run produced: the answer for the consensus, its provenance, and (for a
/// template) the template result, UNKNOWN included.
struct Outcome {
    answer: Result<Dossier, ReviewerFailure>,
    provenance: Provenance,
    template_result: Option<TemplateReviewResult>,
}

/// Run the reviewer's provider; the answer is validated against the session's request (a
/// dossier) or read as a template answer.
async fn run(
    daemon: &Arc<Daemon>,
    job_id: &str,
    session: &SessionRecord,
    work: &ReviewWork,
    cancel: tokio_util::sync::CancellationToken,
) -> Outcome {
    let provider_name = work.template.as_ref().map(|t| t.provider.clone()).unwrap_or_else(|| work.reviewer.clone());
    let mut provenance =
        Provenance { provider: provider_name.clone(), channel: "local".into(), ..Provenance::default() };
    let reviewer = match Reviewer::resolve(daemon, session, work, &provider_name).await {
        Ok(reviewer) => reviewer,
        Err(message) => return Outcome { answer: Err(internal(message)), provenance, template_result: None },
    };
    if let Provider::Codex(cli) | Provider::Claude(cli) | Provider::Gemini(cli) = &reviewer.provider {
        provenance.model = Some(cli.model.clone()).filter(|m| !m.is_empty());
    }
    if let Provider::Codex(cli) = &reviewer.provider {
        provenance.reasoning = Some(cli.reasoning.clone()).filter(|r| !r.is_empty());
    }
    if let Provider::Local = reviewer.provider {
        return local_outcome(session, reviewer.template.as_ref(), provenance);
    }
    match run_external(daemon, job_id, session, &reviewer, &mut provenance, cancel).await {
        Ok(outcome) => outcome,
        Err(failure) => Outcome { answer: Err(failure), provenance, template_result: None },
    }
}

/// What a reviewer job runs with, resolved from its session and the workspace config.
struct Reviewer<'a> {
    ws: Arc<crate::workspace::Workspace>,
    config: crate::config::Config,
    template: Option<(template::Template, &'a TemplateJob)>,
    provider: Provider,
}

impl<'a> Reviewer<'a> {
    async fn resolve(
        daemon: &Daemon,
        session: &SessionRecord,
        work: &'a ReviewWork,
        provider_name: &str,
    ) -> Result<Reviewer<'a>, String> {
        let ws = super::home(daemon, session).map_err(|why| format!("workspace unavailable: {why}"))?;
        let config = ws.config().map_err(|e| e.to_string())?;
        let template = match &work.template {
            Some(job) => Some((crate::templates::find(&ws.root, &job.name).map_err(|e| e.0.message)?, job)),
            None => None,
        };
        let choice = providers::Choice {
            provider: Some(provider_name),
            command: session.provider_command.as_deref(),
            model: session.model.as_deref(),
            reasoning: session.reasoning.as_deref(),
            builders: &[],
        };
        let provider = providers::select(&choice, &config, &session.caller_env).map_err(|e| e.0.message)?;
        Ok(Reviewer { ws, config, template, provider })
    }
}

/// The local provider's smoke answer: it reviews nothing and never counts.
fn local_outcome(
    session: &SessionRecord,
    template: Option<&(template::Template, &TemplateJob)>,
    provenance: Provenance,
) -> Outcome {
    let request = &session.request;
    match template {
        None => Outcome { answer: Ok(local_dossier(request)), provenance, template_result: None },
        Some((t, job)) => {
            let answer = template::Answer {
                verdict: scafld_protocol::vocab::TemplateVerdict::Pass,
                summary: "Local provider smoke review; it reviews nothing and never counts.".into(),
                findings: Vec::new(),
            };
            let result = template_result(t, job, Some(&answer), String::new(), &provenance, &session.key);
            Outcome {
                answer: Ok(template::to_dossier(&t.name, &answer, request.mode.as_str())),
                provenance,
                template_result: Some(result),
            }
        }
    }
}

/// Run an external provider on the packet and read its answer. Failure messages name paths
/// relative to the workspace.
async fn run_external(
    daemon: &Arc<Daemon>,
    job_id: &str,
    session: &SessionRecord,
    reviewer: &Reviewer<'_>,
    provenance: &mut Provenance,
    cancel: tokio_util::sync::CancellationToken,
) -> Result<Outcome, ReviewerFailure> {
    let Reviewer { ws, config, template, provider } = reviewer;
    // Held until the run's files are written.
    let held = ws.anchored();
    let (root, anchored) = (format!("{}/", ws.root.display()), format!("{}/", held.display()));
    let relative = |mut f: ReviewerFailure| {
        f.message = f.message.replace(&root, "").replace(&anchored, "");
        f
    };
    // A template job's packet is its own (a gate pass shares the session with the dossier
    // reviewers); the others read the session's.
    let packet = match template {
        // A gate pass is shown the task's changes as the gate's reviewers are.
        Some((t, job)) if session.task().is_some() => {
            let changes = super::sealed_changes(ws, session).map_err(internal)?;
            template::with_task_changes(&template::packet(t, &t.build_prompt(&job.inputs)), &changes)
        }
        Some((t, job)) => template::packet(t, &t.build_prompt(&job.inputs)),
        None => super::sealed_packet(ws, session).map_err(internal)?,
    };
    let expect = match template {
        Some((t, _)) => providers::Expect::Template(t),
        None => providers::Expect::Dossier(&session.request),
    };
    let (scratch, invocation) = super::prepare_run(
        daemon,
        ws,
        &format!("review-{job_id}"),
        provider,
        super::Runner { client_exe: &session.client_exe, env: &session.caller_env },
        expect,
    )
    .map_err(|e| internal(format!("cannot prepare the {} run: {e}", provider.name())))?;
    let scratch = Scratch(scratch);
    provenance.channel = invocation.output_format.to_string();
    let on_spawn = {
        let (daemon, id) = (daemon.clone(), job_id.to_string());
        Box::new(move |group: crate::runner::ProcessGroup| {
            daemon.jobs.update(daemon.store(), &id, true, |r| r.group = Some(group));
        })
    };
    let on_event = {
        let (daemon, id, name) = (daemon.clone(), job_id.to_string(), provider.name());
        Box::new(move |event: String| {
            let activity = format!("{name} event {event}");
            daemon.jobs.update(daemon.store(), &id, false, |r| r.activity = Some(activity));
        })
    };
    let cwd = template.as_ref().map(|(_, job)| std::path::PathBuf::from(&job.cwd)).unwrap_or_else(|| ws.root.clone());
    let run = providers::Run {
        on_spawn,
        token: None,
        on_event,
        task: session.task().unwrap_or(&session.key),
        cwd: &cwd,
        caller_env: &session.caller_env,
        packet: &packet,
        // Written once the run ends: into the workspace wherever its folder is by then.
        diagnostics_dir: super::anchored_runs_dir(ws, session, &held).join("diagnostics"),
    };
    let left = providers::run(&invocation, run, config, &daemon.submissions, cancel).await;
    // The scratch directory (codex's answer file among it) goes once the answer is read.
    let outcome = left.map(|left| {
        read_answer(
            &invocation,
            left,
            template.as_ref(),
            &session.request,
            &session.key,
            provider.name(),
            provenance.clone(),
        )
    });
    drop(scratch);
    let mut outcome = outcome.map_err(relative)?;
    outcome.answer = outcome.answer.map_err(relative);
    Ok(outcome)
}

/// A daemon-run reviewer's scratch folder (what the CLI is given of the user's credentials
/// among it), removed when the run ends however it ends: a job aborted mid-run drops it too.
struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Read what a run left: a dossier for the gate, or a template answer (UNKNOWN included).
fn read_answer(
    invocation: &providers::Invocation,
    left: providers::Leftovers,
    template: Option<&(template::Template, &TemplateJob)>,
    request: &crate::domain::dossier::Request,
    session_key: &str,
    provider_name: &str,
    mut provenance: Provenance,
) -> Outcome {
    // The model a provider reports about itself beats the one we asked for.
    if let Some(model) = left.reported.model.clone() {
        provenance.model = Some(model);
    }
    match template {
        None => {
            let answer = providers::interpret(invocation, left).and_then(|d| accept(d, request));
            if let Ok(d) = &answer {
                provenance.channel = d.output_format.clone().unwrap_or(provenance.channel);
                if d.model.is_some() {
                    provenance.model = d.model.clone();
                }
            }
            Outcome { answer, provenance, template_result: None }
        }
        Some((t, job)) => match providers::interpret_template(invocation, left) {
            Err(f) => Outcome { answer: Err(f), provenance, template_result: None },
            Ok((parsed, raw)) => {
                let result = template_result(t, job, parsed.as_ref(), raw, &provenance, session_key);
                let answer = match &parsed {
                    Some(a) => Ok(template::to_dossier(&t.name, a, request.mode.as_str())),
                    None => Err(ReviewerFailure {
                        class: FailureClass::Parse,
                        message: format!(
                            "the {provider_name} answer could not be parsed; the result is UNKNOWN (raw output kept)"
                        ),
                    }),
                };
                Outcome { answer, provenance, template_result: Some(result) }
            }
        },
    }
}

/// One reviewer's template result: its answer, or UNKNOWN with the raw text.
fn template_result(
    template: &template::Template,
    job: &TemplateJob,
    answer: Option<&template::Answer>,
    raw_output: String,
    provenance: &Provenance,
    session_key: &str,
) -> TemplateReviewResult {
    TemplateReviewResult {
        verdict: answer.map(|a| a.verdict).unwrap_or_default(),
        summary: answer.map(|a| a.summary.clone()).unwrap_or_default(),
        findings: answer.map(|a| a.findings.clone()).unwrap_or_default(),
        raw_output,
        template: template.name.clone(),
        inputs: job.inputs.clone(),
        timestamp: clock::now_rfc3339(),
        provider: provenance.provider.clone(),
        model: provenance.model.clone(),
        session_key: session_key.to_string(),
        ..TemplateReviewResult::default()
    }
    .counted()
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
        mode: request.mode.as_str().to_string(),
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
