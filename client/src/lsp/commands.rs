//! `workspace/executeCommand`: scafld build, review, status and handoff of a spec, each on a
//! thread of its own (a build or review runs for minutes while the editor keeps typing),
//! reporting long jobs with `$/progress` and answering with the daemon's result or error. A
//! build or review that ran but did not go well (acceptance failed, the review failed), and
//! any command that failed (the daemon refused it, or could not be reached), ends its progress
//! saying so, and says it in `window/showMessage` too: editors (Neovim) show neither a
//! command's result nor its error answer, only its progress and such messages.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::Sender;
use lsp_server::{Message, Notification, Request, RequestId, Response};
use lsp_types::{
    MessageType, ProgressParams, ProgressParamsValue, ProgressToken, ShowMessageParams, WorkDoneProgress,
    WorkDoneProgressBegin, WorkDoneProgressCreateParams, WorkDoneProgressEnd, WorkDoneProgressReport,
};
use scafld_protocol::methods::{self as m, CallerContext};
use serde_json::Value;

use super::daemon::{Connector, Link, LinkError};
use super::documents::SpecFile;
use super::outline::ScafldCommand;

/// How long one bounded `job.wait` / `review.wait` blocks before progress is reported again.
const WAIT_SECONDS: f64 = 2.0;

/// LSP's `RequestFailed`: the request was valid but the daemon refused or failed it.
pub const REQUEST_FAILED: i32 = -32803;

static TOKENS: AtomicU64 = AtomicU64::new(1);

/// How long a command's end waits for the editor's answer about its progress token.
const GRANT_WAIT: Duration = Duration::from_secs(5);

/// The editor's answers to our `window/workDoneProgress/create` requests, each awaited by the
/// command that asked: no `$/progress` goes out on a token the editor has not accepted.
#[derive(Clone, Default)]
pub struct Grants(Arc<Mutex<HashMap<RequestId, Sender<bool>>>>);

impl Grants {
    fn ask(&self, id: RequestId) -> crossbeam_channel::Receiver<bool> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.0.lock().unwrap_or_else(|e| e.into_inner()).insert(id, tx);
        rx
    }

    /// The editor answered one of our requests: accepted unless it is an error.
    pub fn answer(&self, response: &Response) {
        if let Some(waiting) = self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(&response.id) {
            let _ = waiting.send(response.response_result.is_ok());
        }
    }
}

/// A command to run for one spec.
pub struct Job {
    pub request: RequestId,
    pub command: ScafldCommand,
    pub spec: SpecFile,
    /// Whether the editor accepts `window/workDoneProgress/create`.
    pub progress: bool,
}

/// Run `job` on its own thread; its answer (and progress, once the editor accepts a token
/// through `grants`) go to `out`.
pub fn spawn(job: Job, connect: Connector, caller: CallerContext, out: Sender<Message>, grants: Grants) {
    let request = job.request.clone();
    let fallback = out.clone();
    let spawned = std::thread::Builder::new().name("scafld-lsp-command".into()).spawn(move || {
        let mut progress = job.progress.then(|| Progress::begin(&out, &grants, job.command, &job.spec.task_id));
        let mut link = Link::new(connect);
        let result = run(&mut link, &job, &caller, |message| {
            if let Some(p) = progress.as_mut() {
                p.report(&out, message);
            }
        });
        // A command the daemon refused or could not run is a setback too: the editor shows
        // neither the error answer nor a progress that never began.
        let setback = match &result {
            Ok((_, setback)) => setback.clone(),
            Err(e) => Setback::error(format!("failed: {e}")),
        };
        if let Some(p) = progress {
            p.end(&out, setback.as_ref().map_or_else(|| "done".into(), |s| s.message.clone()));
        }
        if let Some(setback) = setback {
            let message = format!("{} {}: {}", job.command.name(), job.spec.task_id, setback.message);
            show(&out, setback.typ, message);
        }
        let response = match result {
            Ok((value, _)) => Response::new_ok(job.request, value),
            Err(e) => Response::new_err(job.request, REQUEST_FAILED, e.to_string()),
        };
        let _ = out.send(response.into());
    });
    if let Err(e) = spawned {
        let _ = fallback.send(Response::new_err(request, REQUEST_FAILED, format!("cannot start a thread: {e}")).into());
    }
}

/// Say `message` in `window/showMessage`: what an editor such as Neovim shows of a command.
pub fn show(out: &Sender<Message>, typ: MessageType, message: String) {
    let _ = out.send(Notification::new("window/showMessage".into(), ShowMessageParams { typ, message }).into());
}

/// How a command did not go well (a build or review that ran to its end but failed, or any
/// command that failed): what its progress ends with and the editor is shown.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Setback {
    typ: MessageType,
    message: String,
}

impl Setback {
    fn error(message: String) -> Option<Setback> {
        Some(Setback { typ: MessageType::ERROR, message })
    }

    fn warning(message: String) -> Option<Setback> {
        Some(Setback { typ: MessageType::WARNING, message })
    }

    /// A build step's: acceptance failed (the criteria that did), or a phase held up by
    /// manual criteria awaiting a person's evidence; `None` for one that went on.
    fn of_build(outcome: &m::BuildOutcome) -> Option<Setback> {
        let ids = |wanted: &[m::CriterionStatus]| {
            let ids: Vec<&str> = outcome
                .criteria
                .iter()
                .filter(|c| wanted.contains(&c.status))
                .map(|c| c.criterion_id.as_str())
                .collect();
            ids.join(", ")
        };
        if outcome.failed > 0 {
            let failed = match ids(&[m::CriterionStatus::Fail, m::CriterionStatus::Invalid]) {
                ids if ids.is_empty() => format!("{} criteria", outcome.failed),
                ids => ids,
            };
            return Setback::error(format!("acceptance failed: {failed}; task {}", outcome.status));
        }
        match outcome.status.as_str() {
            "blocked" => Setback::warning(format!(
                "awaiting a person's evidence: {}; task blocked",
                ids(&[m::CriterionStatus::Pending])
            )),
            _ => None,
        }
    }

    /// A review session's consensus: `None` when it passed.
    fn of_review(wait: &m::WaitResult) -> Option<Setback> {
        let issues = match wait.issues.len() {
            0 => String::new(),
            1 => ": 1 issue".into(),
            n => format!(": {n} issues"),
        };
        match wait.outcome {
            m::Outcome::Pass | m::Outcome::Pending => None,
            m::Outcome::Fail => Setback::error(format!("review failed{issues}")),
            m::Outcome::NeedsWork => Setback::warning(format!("review needs work{issues}")),
            other => Setback::warning(format!("review ended without a verdict: {other}")),
        }
    }

    /// A review that ran no session (its gate's result at once).
    fn of_review_result(result: &m::TaskReviewResult) -> Option<Setback> {
        let blockers = match result.open_blockers {
            0 => String::new(),
            1 => ": 1 open blocker".into(),
            n => format!(": {n} open blockers"),
        };
        (result.verdict == "fail")
            .then(|| Setback { typ: MessageType::ERROR, message: format!("review failed{blockers}") })
    }
}

/// Run `job`: its answer, and its setback if it ran but did not go well.
fn run(
    link: &mut Link,
    job: &Job,
    caller: &CallerContext,
    mut report: impl FnMut(String),
) -> Result<(Value, Option<Setback>), LinkError> {
    let root = job.spec.root.display().to_string();
    let task_id = job.spec.task_id.clone();
    let built = |outcome: m::BuildOutcome| (json(&outcome), Setback::of_build(&outcome));
    match job.command {
        ScafldCommand::Status => {
            Ok((json(&link.call::<m::TaskStatus>(&m::StatusParams::plain(m::TaskParams { root, task_id }))?), None))
        }
        ScafldCommand::Handoff => Ok((json(&link.call::<m::TaskHandoff>(&m::TaskParams { root, task_id })?), None)),
        ScafldCommand::Build => {
            let params = m::BuildParams { root, task_id, caller: caller.clone(), manual: None, wait_seconds: None };
            let started = link.call_once::<m::TaskBuild>(&params)?;
            if let Some(outcome) = started.outcome {
                return Ok(built(outcome));
            }
            let Some(job_id) = started.job_id else {
                return Err(LinkError::Unavailable("the daemon returned neither a job nor an outcome".into()));
            };
            loop {
                let info = link
                    .call::<m::JobWait>(&m::JobWaitParams { job_id: job_id.clone(), timeout_seconds: WAIT_SECONDS })?;
                if !info.finished {
                    report(info.activity.clone().unwrap_or_else(|| info.state.to_string()));
                    continue;
                }
                return match info.outcome {
                    Some(outcome) => Ok(built(outcome)),
                    None => Err(LinkError::Refused {
                        kind: scafld_protocol::ErrorKind::Internal,
                        message: format!(
                            "build job {job_id} ended {}: {}",
                            info.state,
                            info.reason.unwrap_or_else(|| info.state.to_string())
                        ),
                    }),
                };
            }
        }
        ScafldCommand::Review => {
            let params =
                m::TaskReviewParams { root: root.clone(), task_id, caller: caller.clone(), ..Default::default() };
            let started = link.call_once::<m::TaskReview>(&params)?;
            let Some(session) = started.session.clone() else {
                return Ok((json(&started), Setback::of_review_result(&started)));
            };
            report(format!("reviewers: {}", session.reviewers_spawned.join(", ")));
            loop {
                let wait = m::ReviewWaitParams {
                    root: root.clone(),
                    session_key: Some(session.session_key.clone()),
                    timeout_seconds: WAIT_SECONDS,
                    caller_identity: caller.identity.clone(),
                };
                let result = link.call::<m::ReviewWait>(&wait)?;
                if result.outcome != m::Outcome::Pending {
                    return Ok((json(&result), Setback::of_review(&result)));
                }
                report(format!("waiting for {}", session.reviewers_spawned.join(", ")));
            }
        }
    }
}

fn json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// One `$/progress` token: created, then (once the editor accepts it) begun, reported, ended.
/// The command never waits for the editor: what comes before its answer is held back, and
/// nothing at all goes out on a token it refused or never answered.
struct Progress {
    token: ProgressToken,
    granted: crossbeam_channel::Receiver<bool>,
    /// Whether the editor accepted the token; `None` until it answers.
    accepted: Option<bool>,
    begin: WorkDoneProgressBegin,
}

impl Progress {
    fn begin(out: &Sender<Message>, grants: &Grants, command: ScafldCommand, task_id: &str) -> Progress {
        let n = TOKENS.fetch_add(1, Ordering::Relaxed);
        let token = ProgressToken::String(format!("scafld/{n}"));
        let id = RequestId::from(format!("scafld-progress-{n}"));
        let granted = grants.ask(id.clone());
        let create = Request::new(
            id,
            "window/workDoneProgress/create".into(),
            WorkDoneProgressCreateParams { token: token.clone() },
        );
        let _ = out.send(create.into());
        let begin = WorkDoneProgressBegin {
            title: format!("{} {task_id}", command.name()),
            cancellable: Some(false),
            message: None,
            percentage: None,
        };
        Progress { token, granted, accepted: None, begin }
    }

    fn report(&mut self, out: &Sender<Message>, message: String) {
        let report = WorkDoneProgressReport { cancellable: Some(false), message: Some(message), percentage: None };
        self.send(out, WorkDoneProgress::Report(report), Duration::ZERO);
    }

    /// The end, once the editor has answered (a little while is given for that).
    fn end(mut self, out: &Sender<Message>, message: String) {
        self.send(out, WorkDoneProgress::End(WorkDoneProgressEnd { message: Some(message) }), GRANT_WAIT);
    }

    fn send(&mut self, out: &Sender<Message>, value: WorkDoneProgress, wait: Duration) {
        if self.accepted.is_none() {
            match self.granted.recv_timeout(wait) {
                Ok(accepted) => {
                    self.accepted = Some(accepted);
                    if accepted {
                        self.notify(out, WorkDoneProgress::Begin(self.begin.clone()));
                    }
                }
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => self.accepted = Some(false),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            }
        }
        if self.accepted == Some(true) {
            self.notify(out, value);
        }
    }

    fn notify(&self, out: &Sender<Message>, value: WorkDoneProgress) {
        let params = ProgressParams { token: self.token.clone(), value: ProgressParamsValue::WorkDone(value) };
        let _ = out.send(Notification::new("$/progress".into(), params).into());
    }
}
