//! Review sessions: one review round of a task or a git range, with one job per reviewer on the
//! same packet. Spawning, settling a reviewer's answer, the consensus once all have answered,
//! bounded waits, retries, status and recovery after a restart.
//!
//! Who runs a reviewer job: the daemon itself (`runner.rs`) for codex, claude, gemini, command
//! and local; an external worker (`worker.rs`) for the `worker` reviewer, under a lease.

pub mod caller_env;
pub mod diff;
pub mod gate;
pub mod runner;
pub mod status;
pub mod template;
pub mod worker;

pub use status::write_report;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use scafld_protocol::methods as m;
use scafld_protocol::vocab::Approval;
use scafld_protocol::{ErrorKind, Event};
use sha2::{Digest, Sha256};
use tracing::warn;

use crate::clock;
use crate::config::Config;
use crate::daemon::Daemon;
use crate::domain::consensus::{self, Answer, Outcome, Reviewer};
use crate::domain::dossier::{Dossier, Request};
use crate::domain::job::{
    FailureClass, JobKind, JobRecord, JobState, Provenance, ReviewWork, ReviewerFailure, SessionRecord, Subject,
    TemplateJob,
};
use crate::domain::ledger::BaselinePath;
use crate::domain::retention::review_group;
use crate::error::{RpcError, RpcResult};
use crate::providers;
use crate::workspace::Workspace;

/// The session table: records (persisted) and, per session, the lock that settles it (or
/// retries it) one step at a time. Per session, so that one session's settling (git
/// snapshots, ledger writes) never holds up another's.
#[derive(Default)]
pub struct Sessions {
    records: Mutex<HashMap<String, SessionRecord>>,
    settling: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Invocations handed to automated workers, by job id (to read their answer back).
    pub(crate) invocations: Mutex<HashMap<String, providers::Invocation>>,
    env_files: caller_env::CallerEnvFiles,
}

impl Sessions {
    /// The stored sessions; unsettled ones get their caller's environment back from its file.
    pub fn new(mut records: Vec<SessionRecord>, state_dir: &std::path::Path) -> Sessions {
        let env_files = caller_env::CallerEnvFiles::new(state_dir);
        for record in &mut records {
            if record.result.is_some() {
                record.caller_env.clear();
                continue;
            }
            let kept = env_files.load(&record.key);
            if !kept.is_empty() {
                record.caller_env = kept;
            } else if !record.caller_env.is_empty() {
                // Written into the record by an older version: move it to its file (the record
                // loses it at its next save).
                if let Err(e) = env_files.save(&record.key, &record.caller_env) {
                    warn!(session = %record.key, "cannot keep the caller's environment for a restart: {e}");
                }
            }
        }
        Sessions {
            records: Mutex::new(records.into_iter().map(|r| (r.key.clone(), r)).collect()),
            env_files,
            ..Sessions::default()
        }
    }

    /// Keep the session's caller environment for a daemon restarted before it settles.
    pub(crate) fn keep_caller_env(&self, session: &SessionRecord) {
        if let Err(e) = self.env_files.save(&session.key, &session.caller_env) {
            warn!(session = %session.key, "cannot keep the caller's environment for a restart: {e}");
        }
    }

    fn drop_caller_env(&self, key: &str) {
        if let Err(e) = self.env_files.remove(key) {
            warn!(session = %key, "cannot remove the stored caller environment: {e}");
        }
    }

    pub fn get(&self, key: &str) -> Option<SessionRecord> {
        crate::sync::lock(&self.records).get(key).cloned()
    }

    /// Whether session `key` is stored and names `job_id` among its jobs: a reviewer job is
    /// created before the session that lists it is stored (first spawn and retry alike), and
    /// a claim must not take it in between (the job table's lock is held: see the lock order).
    pub(crate) fn names_job(&self, key: &str, job_id: &str) -> bool {
        crate::sync::lock(&self.records).get(key).is_some_and(|s| s.job_ids.iter().any(|id| id == job_id))
    }

    pub(crate) fn put(&self, store: &dyn crate::store::Store, session: SessionRecord) {
        if let Err(e) = store.save_session(&session) {
            warn!(session = %session.key, "cannot persist review session: {e}");
        }
        crate::sync::lock(&self.records).insert(session.key.clone(), session);
    }

    pub(crate) fn all(&self) -> Vec<SessionRecord> {
        crate::sync::lock(&self.records).values().cloned().collect()
    }

    /// Drop sessions from memory (retention; the store has already deleted them).
    pub(crate) fn forget(&self, keys: &[String]) {
        let mut records = crate::sync::lock(&self.records);
        let mut settling = crate::sync::lock(&self.settling);
        for key in keys {
            records.remove(key);
            settling.remove(key);
            self.drop_caller_env(key);
        }
    }

    /// The lock that serialises settling and retrying session `key`.
    fn settle_lock(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        crate::sync::lock(&self.settling).entry(key.to_string()).or_default().clone()
    }

    /// The most recent session of a workspace (optionally of one task), range reviews its
    /// folder ran before `scafld init` included.
    pub fn latest(&self, ws: &Workspace, task: Option<&str>) -> Option<SessionRecord> {
        self.latest_where(|s| ws.owns(&s.workspace_id) && task.is_none_or(|t| s.task() == Some(t)))
    }

    fn latest_where(&self, keep: impl Fn(&SessionRecord) -> bool) -> Option<SessionRecord> {
        let records = crate::sync::lock(&self.records);
        records.values().filter(|s| keep(s)).max_by_key(|s| s.seq).cloned()
    }

    /// The session a caller without a key means, and why: its own latest session when it can
    /// be told apart (two agents in one repository must not pick up each other's review), else
    /// the workspace's latest.
    pub fn latest_for_caller(&self, ws: &Workspace, identity: &str) -> Option<(SessionRecord, &'static str)> {
        let own = (!identity.is_empty())
            .then(|| self.latest_where(|s| ws.owns(&s.workspace_id) && s.caller_identity == identity))
            .flatten();
        match own {
            Some(session) => Some((session, "the latest session you started")),
            None => self.latest(ws, None).map(|s| (s, "the latest session of the workspace")),
        }
    }

    /// Number a new session of `ws` (its creation `seq`, and its round: rounds count per task,
    /// or per range base and context file, the folder's rounds from before `scafld init`
    /// included), let `complete` fill in what depends on the numbers, and record it. One step
    /// under the lock, so concurrent spawns never share a number.
    pub(crate) fn add(
        &self,
        store: &dyn crate::store::Store,
        ws: &Workspace,
        mut session: SessionRecord,
        complete: impl FnOnce(&mut SessionRecord),
    ) -> SessionRecord {
        let mut records = crate::sync::lock(&self.records);
        session.seq = 1 + records.values().map(|s| s.seq).max().unwrap_or(0);
        let group = review_group(&session);
        let same_group = |s: &SessionRecord| {
            let other = review_group(s);
            ws.owns(other.0) && (other.1, other.2, other.3) == (group.1, group.2, group.3)
        };
        let last_round = records.values().filter(|s| same_group(s)).map(|s| s.iteration).max();
        session.iteration = 1 + last_round.unwrap_or(0);
        complete(&mut session);
        if let Err(e) = store.save_session(&session) {
            warn!(session = %session.key, "cannot persist review session: {e}");
        }
        records.insert(session.key.clone(), session.clone());
        session
    }
}

/// Everything a new session needs; the caller has built the packet and snapshot.
pub struct Spawn<'a> {
    pub ws: Arc<Workspace>,
    pub config: &'a Config,
    pub caller: &'a m::CallerContext,
    pub subject: Subject,
    /// Requested reviewer names (already validated).
    pub reviewers: Vec<String>,
    pub approval: Approval,
    pub packet: Packet,
    pub baseline: Baseline,
    /// Model, reasoning and command overrides given at spawn.
    pub overrides: Overrides,
    /// Rounds of a range or template review count per base and context file (see retention).
    pub context_digest: String,
    pub templates: Templates,
    /// The agents that built the task under review (none for a range or template review):
    /// `auto` passes over them (see [`providers::Choice::builders`]).
    pub builders: Vec<String>,
}

/// What every reviewer of a session is given.
pub struct Packet {
    pub text: String,
    pub request: Request,
    /// The acceptance-evidence preflight for the reviewed tree.
    pub preflight: String,
    /// The files under review.
    pub files: Vec<String>,
    /// A task review's changes since approval as its packet lists and diffs them (nested
    /// repositories' and untracked files included), which its gate passes are shown too:
    /// a template's own `git diff` of the workspace would miss some of them.
    pub task_changes: Option<String>,
}

/// The workspace as the session starts: the mutation guard compares against it (empty for a
/// plain range, which no guard watches).
#[derive(Default)]
pub struct Baseline {
    pub scope: Vec<String>,
    /// An entry per file (`baseline::guard_snapshot`); the session keeps it as stored
    /// (`baseline::stored`: grouped by folder when large).
    pub snapshot: Vec<BaselinePath>,
    pub tree: String,
    /// The clock before the files were first read for the session (`baseline::clock_ns`).
    pub since: Option<i64>,
}

#[derive(Default)]
pub struct Overrides {
    pub model: Option<String>,
    pub reasoning: Option<String>,
    pub provider_command: Option<String>,
}

/// Review templates the session's jobs run.
#[derive(Default)]
pub struct Templates {
    /// A standalone template review: every reviewer runs this template.
    pub standalone: Option<TemplateJob>,
    /// Template passes of a task's gate: each runs with the first daemon-run reviewer.
    pub passes: Vec<TemplateJob>,
}

/// The reviewers the caller asked for, else the configured list, else the single provider.
/// A list that names none (`--reviewers ''` or `','`) is refused as bad input before anything
/// is opened or recorded: a session with no reviewer would only record that none ran.
pub fn requested_reviewers(explicit: &[String], provider: Option<&str>, config: &Config) -> RpcResult<Vec<String>> {
    let (names, source) = if !explicit.is_empty() {
        (explicit.to_vec(), "--reviewers")
    } else if let Some(provider) = provider {
        (vec![provider.to_string()], "--provider")
    } else if !config.review.external.reviewers.is_empty() {
        (config.review.external.reviewers.clone(), "review.external.reviewers in the config")
    } else {
        (vec![config.review.external.provider.clone()], "review.external.provider in the config")
    };
    let reviewers = consensus::parse_reviewers(&names).map_err(|e| RpcError::new(ErrorKind::InvalidInput, e))?;
    if reviewers.is_empty() {
        return Err(RpcError::new(ErrorKind::InvalidInput, format!("{source} names no reviewer"))
            .with_hint("name one or more of codex, claude, gemini, command, local, worker or auto, comma-separated"));
    }
    Ok(reviewers)
}

/// `auto` or manual approval, from the call or config.
pub fn approval_mode(explicit: Option<Approval>, config: &Config) -> RpcResult<Approval> {
    match explicit {
        Some(approval) => Ok(approval),
        None => config.review.approval.parse().map_err(|e: scafld_protocol::vocab::UnknownWord| {
            RpcError::new(ErrorKind::InvalidInput, format!("review.approval in the config: {e}"))
        }),
    }
}

/// Resolve each requested reviewer to one that can run, or report it missing. A reviewer that
/// is misconfigured (a `command` without a command line) is an error, not "missing"; two
/// names that resolve to one reviewer (`auto` picking the `codex` named beside it) are refused
/// as a name given twice is: the consensus would be of fewer reviewers than were asked for.
fn available(
    names: &[String],
    config: &Config,
    caller: &m::CallerContext,
    command: Option<&str>,
    builders: &[String],
) -> RpcResult<(Vec<String>, Vec<String>)> {
    let (mut spawned, mut missing) = (Vec::new(), Vec::new());
    // Each reviewer spawned, beside the name that asked for it.
    let mut asked: Vec<&str> = Vec::new();
    for name in names {
        if name == "worker" {
            spawned.push(name.clone());
            asked.push(name);
            continue;
        }
        let choice = providers::Choice { provider: Some(name), command, model: None, reasoning: None, builders };
        match providers::select(&choice, config, &caller.env) {
            Ok(provider) => match spawned.iter().position(|s| s == provider.name()) {
                None => {
                    spawned.push(provider.name().to_string());
                    asked.push(name);
                }
                Some(at) => return Err(resolved_twice(asked[at], name, provider.name())),
            },
            Err(e) if e.kind() == ErrorKind::ReviewFailed => missing.push(name.clone()),
            Err(e) => return Err(e),
        }
    }
    Ok((spawned, missing))
}

/// The refusal of reviewers `first` and `then` that both resolve to reviewer `to`.
fn resolved_twice(first: &str, then: &str, to: &str) -> RpcError {
    let (auto, other) = if then == "auto" { (then, first) } else { (first, then) };
    RpcError::new(
        ErrorKind::InvalidInput,
        format!(
            "reviewers {first:?} and {then:?} are one reviewer: {auto:?} resolves to {to:?} here, which {other:?} names too; a consensus of one reviewer named twice is refused"
        ),
    )
    .with_hint(format!(
        "name each reviewer once: drop {auto:?}, or name the other reviewer you mean instead (codex, claude, gemini, command or worker)"
    ))
}

/// The refusal of a gate whose `review.templates` pass no reviewer of the session can run.
pub fn pass_without_provider(template: &str) -> RpcError {
    RpcError::new(
        ErrorKind::ReviewFailed,
        format!(
            "review.templates asks for a `{template}` pass, which no reviewer here can run (a worker runs the review's dossier only, and the daemon found no other)"
        ),
    )
    .with_hint("add a reviewer the daemon runs beside the worker (`--reviewers worker,codex`, or `--provider command --provider-command CMD`)")
}

/// Start a session: persist its packet, create one job per available reviewer and start the
/// daemon-run ones. With no reviewer available the session settles at once (`no_reviewers`).
pub fn spawn(daemon: &Arc<Daemon>, s: Spawn<'_>) -> RpcResult<m::SpawnResult> {
    let prepared = prepare(&s)?;
    Ok(start(daemon, s, prepared))
}

/// A session made ready to start, nothing recorded yet: the reviewers that can run, the
/// template each job runs, and its packet written under its key. Everything a start can
/// refuse is refused by [`prepare`], so a caller that records the review's attempt only once it
/// has one records nothing for a review that never started.
pub struct Prepared {
    key: String,
    dir: std::path::PathBuf,
    spawned: Vec<String>,
    missing: Vec<String>,
    templates: Vec<Option<TemplateJob>>,
}

impl Prepared {
    /// Give up a session that will not start: its packet folder goes (nothing names it).
    pub fn discard(self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Choose the reviewers of `s` and write its packet (see [`Prepared`]); `s.baseline` is not
/// read, so a caller may take the guard's snapshot after this and before [`start`].
pub fn prepare(s: &Spawn<'_>) -> RpcResult<Prepared> {
    let (mut spawned, missing) =
        available(&s.reviewers, s.config, s.caller, s.overrides.provider_command.as_deref(), &s.builders)?;
    // Which job runs which template: every reviewer the standalone template, plus one job per
    // gate pass with the first reviewer the daemon runs.
    let mut templates: Vec<Option<TemplateJob>> = spawned
        .iter()
        .map(|reviewer| s.templates.standalone.clone().map(|t| TemplateJob { provider: reviewer.clone(), ..t }))
        .collect();
    let pass_provider = spawned.iter().find(|r| *r != "worker").cloned();
    for pass in &s.templates.passes {
        match &pass_provider {
            Some(provider) => {
                spawned.push(format!("{}:{provider}", pass.name));
                templates.push(Some(TemplateJob { provider: provider.clone(), ..pass.clone() }));
            }
            // The gate would settle without the pass the policy asks for: never.
            None => return Err(pass_without_provider(&pass.name)),
        }
    }
    let key = crate::workspace::layout::new_id().map_err(RpcError::internal)?;
    let dir = s.ws.data.join("reviews").join(&key);
    let changes = s.packet.task_changes.as_deref().filter(|_| !s.templates.passes.is_empty());
    crate::workspace::layout::create_real_dir(&dir)
        .and_then(|_| crate::workspace::layout::write_user_file(&dir.join("packet.md"), s.packet.text.as_bytes()))
        .and_then(|_| match changes {
            Some(text) => crate::workspace::layout::write_user_file(&dir.join(CHANGES_FILE), text.as_bytes()),
            None => Ok(()),
        })
        .map_err(|e| {
            let e = RpcError::new(ErrorKind::WorkspaceError, format!("cannot write the review packet: {e}"));
            let _ = std::fs::remove_dir(&dir);
            match s.ws.writes_from() {
                Some(from) => e.with_hint(format!(
                    "scafld writes under .scafld only through the real folder, in {}: a review runs from there and judges that checkout's files (`scafld status` names the next step); nothing was recorded",
                    from.display()
                )),
                None => e,
            }
        })?;
    Ok(Prepared { key, dir, spawned, missing, templates })
}

/// Start the session [`prepare`] made ready: its record, a job per reviewer, the daemon-run
/// ones started.
pub fn start(daemon: &Arc<Daemon>, s: Spawn<'_>, prepared: Prepared) -> m::SpawnResult {
    let Prepared { key, dir, spawned, missing, templates } = prepared;
    let report_path = match s.subject.task() {
        Some(task) => format!(".scafld/runs/{task}/review_report.md"),
        None => s.ws.relative(&dir.join("review_report.md")),
    };
    let mut session = SessionRecord {
        key: key.clone(),
        seq: 0,
        workspace_id: s.ws.id.clone(),
        root: s.ws.root.display().to_string(),
        began_in: s.ws.root.display().to_string(),
        subject: s.subject,
        iteration: 0,
        created_at: clock::now_rfc3339(),
        approval: s.approval,
        reviewers: spawned.clone(),
        job_ids: Vec::new(),
        missing: missing.clone(),
        files: s.packet.files,
        snapshot: crate::baseline::stored(&s.baseline.snapshot),
        tree: s.baseline.tree,
        guard_since: s.baseline.since,
        scope: s.baseline.scope,
        request: s.packet.request,
        packet_path: dir.join("packet.md").display().to_string(),
        packet_sha256: format!("{:x}", Sha256::digest(s.packet.text.as_bytes())),
        packet_bytes: s.packet.text.len() as u64,
        changes_sha256: s
            .packet
            .task_changes
            .as_deref()
            .filter(|_| !s.templates.passes.is_empty())
            .map_or_else(String::new, |text| format!("{:x}", Sha256::digest(text.as_bytes()))),
        report_path,
        preflight: s.packet.preflight,
        caller_cwd: s.caller.cwd.clone(),
        caller_env: s.caller.env.clone(),
        caller_identity: s.caller.identity.clone(),
        client_exe: s.caller.client_exe.clone(),
        model: s.overrides.model,
        reasoning: s.overrides.reasoning,
        provider_command: s.overrides.provider_command,
        result: None,
        context_digest: s.context_digest,
    };
    for (reviewer, template) in spawned.iter().zip(templates) {
        session.job_ids.push(new_job(daemon, &s.ws, &session, reviewer, 1, template));
    }
    daemon.sessions.keep_caller_env(&session);
    let session = daemon.sessions.add(daemon.store(), &s.ws, session, |_| {});
    write_report(daemon, &session);
    start_jobs(daemon, &session);
    if spawned.is_empty() {
        let daemon = daemon.clone();
        let key = key.clone();
        tokio::spawn(async move { settle(&daemon, &key).await });
    }
    m::SpawnResult {
        session_key: key,
        reviewers_spawned: spawned,
        reviewers_missing: missing,
        job_ids: session.job_ids,
        resolved: None,
        kept_in: None,
    }
}

fn new_job(
    daemon: &Daemon,
    ws: &Workspace,
    session: &SessionRecord,
    reviewer: &str,
    attempt: u32,
    template: Option<TemplateJob>,
) -> String {
    let work = ReviewWork {
        session_key: session.key.clone(),
        reviewer: reviewer.to_string(),
        template,
        ..ReviewWork::default()
    };
    let (job, _) =
        daemon.jobs.create(daemon.store(), JobKind::Review, ws, session.task().unwrap_or_default(), Some(work), true);
    if attempt > 1 {
        daemon.jobs.update(daemon.store(), &job.id, true, |r| r.attempt = attempt);
    }
    if reviewer == "worker" {
        daemon.jobs.update(daemon.store(), &job.id, true, |r| r.activity = Some("waiting for a worker".into()));
    }
    publish(daemon, session, &job.id, "queued", &format!("{reviewer} reviewer queued"));
    job.id
}

/// Where a session's reviewer runs keep diagnostics and scratch files: the task's runs folder,
/// or one per range or template session.
pub(super) fn runs_dir(ws: &Workspace, session: &SessionRecord) -> std::path::PathBuf {
    ws.data_of(&session.workspace_id).join("runs").join(runs_label(session))
}

fn runs_label(session: &SessionRecord) -> String {
    match session.task() {
        Some(task) => task.to_string(),
        None => format!("review-{}", &session.key[..8]),
    }
}

/// [`runs_dir`] reached through the daemon's descriptor of the workspace's folder
/// ([`Workspace::anchored`]), for a file written once a run ends: it lands in this workspace
/// even when its folder was renamed while the reviewer ran, never in one moved to the old path.
/// A range review's folder in the state dir moves with nothing. `anchored`: the folder as
/// [`Workspace::anchored`] gave it, kept by the caller for as long as it uses the path.
fn anchored_runs_dir(
    ws: &Workspace,
    session: &SessionRecord,
    anchored: &crate::workspace::Anchored,
) -> std::path::PathBuf {
    if ws.is_bare() || ws.data_of(&session.workspace_id) != ws.data {
        return runs_dir(ws, session);
    }
    anchored.join(crate::workspace::layout::SCAFLD_DIR).join("runs").join(runs_label(session))
}

/// The workspace `session` is of, where it is now: its folder may have been renamed since the
/// review began (followed, as a build's is: [`Daemon::workspace_of`]), and whatever sits at
/// the folder it began in now is never taken for it. Why not, in a sentence, otherwise.
pub(crate) fn home(daemon: &Daemon, session: &SessionRecord) -> Result<Arc<Workspace>, String> {
    // The folder it began in first: a git worktree whose `.scafld` links to the main checkout's
    // is the same workspace at another root, and its review is of its own tree.
    let root = std::path::Path::new(&session.root);
    let began_here = daemon.open_as(&session.workspace_id).into_iter().find(|ws| ws.root == root);
    if let Some(ws) = began_here {
        return match daemon.home_of(&ws) {
            crate::daemon::Home::Here => Ok(ws),
            crate::daemon::Home::Moved(moved) => Ok(moved),
            crate::daemon::Home::Gone(why) => Err(why),
        };
    }
    let named_here = crate::workspace::layout::read_id(root).ok().flatten();
    // Not a copy left where the workspace moved from: `workspace_of_now` refuses it, saying why.
    let recorded = daemon.store().workspaces().unwrap_or_default().into_iter().find(|r| r.id == session.workspace_id);
    let its_folder = recorded.is_none_or(|r| crate::daemon::not_its_folder(&r, root).is_none());
    if named_here.as_deref() == Some(session.workspace_id.as_str())
        && its_folder
        && let Ok(ws) = daemon.workspace_now(&session.root)
        && ws.owns(&session.workspace_id)
    {
        return Ok(ws);
    }
    match daemon.workspace_of_now(&session.root, &session.workspace_id) {
        Ok(ws) if ws.owns(&session.workspace_id) => Ok(ws),
        Ok(ws) => Err(format!(
            "{} holds workspace {} now, not workspace {} that review {} is of",
            session.root, ws.id, session.workspace_id, session.key
        )),
        Err(e) => Err(e.0.message),
    }
}

/// The file beside a task session's packet holding its task changes ([`Packet::task_changes`]),
/// written when the session has gate passes.
const CHANGES_FILE: &str = "task_changes.md";

/// Where a task session's changes for its gate passes are ([`CHANGES_FILE`]).
pub(crate) fn changes_path(ws: &Workspace, session: &SessionRecord) -> std::path::PathBuf {
    ws.data_of(&session.workspace_id).join("reviews").join(&session.key).join(CHANGES_FILE)
}

/// Where a session's packet is in its workspace as it is now (`packet_path` is where it was
/// written: the folder it began in).
pub(crate) fn packet_path(ws: &Workspace, session: &SessionRecord) -> std::path::PathBuf {
    ws.data_of(&session.workspace_id).join("reviews").join(&session.key).join("packet.md")
}

/// The session's packet as its reviewers were given it, read where the workspace is now: the
/// text, refused (saying why, its path relative to the workspace) when the file is gone or is
/// no longer the bytes written when the session began. Every reviewer is handed it through
/// here, and finalize signs it through here, so a packet edited after it was sent is never
/// given to a reviewer nor signed as reviewed context. A session an older scafld kept recorded
/// no digest: its file is taken as it is.
pub(crate) fn sealed_packet(ws: &Workspace, session: &SessionRecord) -> Result<String, String> {
    sealed(ws, &packet_path(ws, session), "review packet", &session.packet_sha256)
}

/// The task changes a gate pass is shown ([`CHANGES_FILE`]), as [`sealed_packet`] reads the
/// packet: refused when gone or changed since the review began (a reviewer running beside the
/// pass could have edited them).
pub(crate) fn sealed_changes(ws: &Workspace, session: &SessionRecord) -> Result<String, String> {
    sealed(ws, &changes_path(ws, session), "review's task changes", &session.changes_sha256)
}

/// The file at `path` (what it is, `what`) as it was written when the session began (its
/// sha256, `digest`; empty: taken as it is).
fn sealed(ws: &Workspace, path: &std::path::Path, what: &'static str, digest: &str) -> Result<String, String> {
    let shown = ws.relative(path);
    let text = scafld_local::capped::read_text(path, what, crate::domain::packet::MAX_PACKET_BYTES)
        .map_err(|e| if e.is_not_found() { format!("the {what} {shown} is gone") } else { e.to_string() })?;
    let now = format!("{:x}", Sha256::digest(text.as_bytes()));
    if !digest.is_empty() && now != digest {
        return Err(format!(
            "the {what} {shown} was changed after the review began (sha256 {now}, {} bytes; the reviewers were given {digest})",
            text.len()
        ));
    }
    Ok(text)
}

/// Who will run a prepared provider: the client executable its MCP server is started from,
/// and the environment it runs with (the caller's for the daemon's runner, a worker's own).
pub(crate) struct Runner<'a> {
    pub client_exe: &'a str,
    pub env: &'a std::collections::BTreeMap<String, String>,
}

/// The folder of the daemon's state holding reviewer runs' scratch directories.
const SCRATCH_DIR: &str = "reviewer-runs";

/// The scratch directory of a reviewer run named `name`: in the daemon's private state (a
/// 0700 folder), never in the workspace, because it holds what the provider CLI is given of
/// the user's own (claude's auth settings, gemini's login credentials) and a reviewer reads
/// the workspace. Removed once the run has served, and at the next start after a crash.
pub(crate) fn scratch_dir(daemon: &Daemon, name: &str) -> std::path::PathBuf {
    daemon.options.state_dir.join(SCRATCH_DIR).join(name)
}

/// At start-up, before any reviewer is resumed: the scratch directories a stopped or crashed
/// daemon left are removed, but for those of worker runs still holding a lease (the worker's
/// provider may be running on; they go when the lease ends).
pub fn clear_scratch(daemon: &Daemon) {
    let leased: std::collections::HashSet<String> = daemon
        .jobs
        .matching(|r| r.state == JobState::Running && r.review.as_ref().is_some_and(|w| w.lease.is_some()))
        .iter()
        .map(worker::scratch_name)
        .collect();
    let Ok(entries) = std::fs::read_dir(daemon.options.state_dir.join(SCRATCH_DIR)) else { return };
    for entry in entries.flatten() {
        if leased.contains(entry.file_name().to_string_lossy().as_ref()) {
            continue;
        }
        if let Err(e) = std::fs::remove_dir_all(entry.path()) {
            warn!("cannot remove the reviewer scratch directory {}: {e}", entry.path().display());
        }
    }
}

/// Prepare a provider run for a reviewer job in a scratch directory of its own (so parallel
/// runs never share temp files), wired to this daemon's socket and submission slots.
fn prepare_run(
    daemon: &Daemon,
    ws: &Workspace,
    scratch_name: &str,
    provider: &providers::Provider,
    runner: Runner<'_>,
    expect: providers::Expect<'_>,
) -> std::io::Result<(std::path::PathBuf, providers::Invocation)> {
    let Runner { client_exe, env } = runner;
    let scratch = scratch_dir(daemon, scratch_name);
    let client_exe = if client_exe.is_empty() { "scafld" } else { client_exe };
    let place =
        providers::Place { scratch: &scratch, root: &ws.root, client_exe, socket: &daemon.options.socket_path, env };
    // A run that cannot be prepared leaves none of what was written for it (credentials among it).
    let invocation = providers::invocation(provider, &place, &daemon.submissions, expect)
        .inspect_err(|_| drop(std::fs::remove_dir_all(&scratch)))?;
    Ok((scratch, invocation))
}

/// Start the daemon-run reviewers of a session that are queued.
fn start_jobs(daemon: &Arc<Daemon>, session: &SessionRecord) {
    // A worker job is claimable from now, its session stored (`Sessions::names_job`): wake the
    // claims that woke to its creation and found it not yet theirs to take.
    daemon.jobs.touch();
    for job_id in &session.job_ids {
        if let Some(job) = daemon.jobs.get(daemon.store(), job_id)
            && job.state == JobState::Queued
            && job.review.as_ref().is_some_and(|w| w.reviewer != "worker")
        {
            runner::start(daemon, job_id.clone());
        }
    }
}

pub fn publish(daemon: &Daemon, session: &SessionRecord, job_id: &str, what: &str, detail: &str) {
    daemon.publish(Event::Review {
        session_key: session.key.clone(),
        task_id: session.task().unwrap_or_default().to_string(),
        job_id: job_id.to_string(),
        what: what.to_string(),
        detail: detail.to_string(),
    });
}

/// Record a reviewer's answer (or why it has none), end its job, and settle the session when
/// it was the last one.
pub async fn conclude(
    daemon: &Arc<Daemon>,
    job_id: &str,
    answer: Result<Dossier, ReviewerFailure>,
    provenance: Provenance,
) {
    let Some(job) = daemon.jobs.get(daemon.store(), job_id) else { return };
    let Some(session) = job.review.as_ref().and_then(|w| daemon.sessions.get(&w.session_key)) else { return };
    if job.state.is_finished() {
        return;
    }
    let answer = match answer {
        Ok(d) => Ok(kept(daemon, &session, job_id, d).await),
        failed => failed,
    };
    let (state, detail) = match &answer {
        Ok(d) => (
            JobState::Succeeded,
            format!("verdict {}", consensus::reviewer_verdict(d, consensus::Question::of(&session.subject))),
        ),
        Err(f) if f.class == FailureClass::Timeout => (JobState::TimedOut, f.message.clone()),
        Err(f) if f.class == FailureClass::Cancelled => (JobState::Cancelled, f.message.clone()),
        Err(f) => (JobState::Failed, f.message.clone()),
    };
    daemon.jobs.update(daemon.store(), job_id, true, |r| {
        r.state = state;
        r.finished_at = Some(clock::now_rfc3339());
        r.activity = None;
        r.group = None;
        r.reason = Some(detail.clone());
        if let Some(work) = r.review.as_mut() {
            work.lease = None;
            work.checkpoint.phase = "done".into();
            match &answer {
                Ok(d) => {
                    work.dossier = Some(d.clone());
                    work.provenance = Some(provenance.clone());
                }
                Err(f) => {
                    work.failure = Some(f.clone());
                    r.error_kind = Some(
                        match f.class {
                            FailureClass::Parse => "parse_error",
                            FailureClass::Timeout => "timeout",
                            FailureClass::Internal => "internal",
                            FailureClass::Cancelled => "cancelled",
                        }
                        .into(),
                    );
                }
            }
        }
    });
    daemon.publish(Event::JobChanged {
        job_id: job_id.into(),
        task_id: session.task().unwrap_or_default().to_string(),
        state,
    });
    publish(daemon, &session, job_id, "verdict", &detail);
    write_report(daemon, &session);
    settle(daemon, &session.key).await;
}

/// An answer as its job (and from it the session and the ledger) keeps it: bounded
/// (`dossier::bounded`), a longer one written whole once, to `<runs>/answers/<job>.json`.
async fn kept(daemon: &Arc<Daemon>, session: &SessionRecord, job_id: &str, dossier: Dossier) -> Dossier {
    if crate::domain::dossier::bounded(&dossier, "").is_none() {
        return dossier; // nothing too long to keep whole elsewhere
    }
    // Where the session's workspace is now (its folder may have moved), never whatever holds
    // its old path.
    let path = match daemon.workspace_of(&session.root, &session.workspace_id).await {
        Ok(ws) if ws.owns(&session.workspace_id) => {
            Ok(runs_dir(&ws, session).join("answers").join(format!("{job_id}.json")))
        }
        Ok(_) => Err("its workspace is not where the review began".to_string()),
        Err(e) => Err(e.0.message),
    };
    let written = match path {
        Ok(path) => {
            let whole = serde_json::to_vec(&dossier).unwrap_or_default();
            let at = path.clone();
            let write = tokio::task::spawn_blocking(move || {
                // Never a `.scafld` made anew (nor a link followed) where the workspace's was.
                crate::workspace::layout::create_real_dir(at.parent().expect("a folder"))?;
                std::fs::write(&at, whole)
            });
            match write.await {
                Ok(Ok(())) => Ok(path),
                Ok(Err(e)) => Err(format!("{}: {e}", path.display())),
                Err(e) => Err(e.to_string()),
            }
        }
        Err(why) => Err(why),
    };
    // Cited only once it holds the answer: a write the disk refused is said, never pointed at.
    let shown = match &written {
        Ok(path) => path.display().to_string(),
        Err(why) => {
            warn!(job = %job_id, "cannot keep the whole answer: {why}");
            format!("not kept ({why})")
        }
    };
    crate::domain::dossier::bounded(&dossier, &shown).unwrap_or(dossier)
}

/// After `job.cancel`: a reviewer job with no runner of ours (queued, or held by a worker)
/// ends here; the session settles without it.
pub async fn cancelled(daemon: &Arc<Daemon>, job: &JobRecord) {
    let Some(work) = &job.review else { return };
    let ours = work.lease.is_none() && work.reviewer != "worker" && job.state == JobState::Running;
    if ours {
        return; // the runner sees the cancellation and concludes the job itself
    }
    if job.state == JobState::Running {
        worker::end_run(daemon, &job.id);
        let failure = ReviewerFailure { class: FailureClass::Cancelled, message: "the reviewer was cancelled".into() };
        conclude(daemon, &job.id, Err(failure), Provenance::default()).await;
    } else {
        settle(daemon, &work.session_key).await;
    }
}

/// The consensus view of a session's reviewers.
pub fn reviewers_of(daemon: &Daemon, session: &SessionRecord) -> Vec<Reviewer> {
    session
        .reviewers
        .iter()
        .zip(&session.job_ids)
        .map(|(name, job_id)| {
            let job = daemon.jobs.get(daemon.store(), job_id);
            let work = job.as_ref().and_then(|j| j.review.clone()).unwrap_or_default();
            let state = job.as_ref().map(|j| j.state);
            let answer = match (state, &work.dossier, &work.failure) {
                (_, Some(d), _) => Answer::Answered(Box::new(d.clone())),
                (_, None, Some(f)) => Answer::Failed(f.clone()),
                (Some(s), None, None) if s.is_finished() => Answer::Failed(ReviewerFailure {
                    class: if s == JobState::Cancelled { FailureClass::Cancelled } else { FailureClass::Internal },
                    message: job.as_ref().and_then(|j| j.reason.clone()).unwrap_or_else(|| s.as_str().into()),
                }),
                (None, None, None) => Answer::Failed(ReviewerFailure {
                    class: FailureClass::Internal,
                    message: format!("job {job_id} is missing"),
                }),
                _ => Answer::Pending,
            };
            Reviewer {
                name: name.clone(),
                job_id: job_id.clone(),
                // A job no longer in the table (forgotten) has no result: abandoned.
                state: state.unwrap_or(JobState::Abandoned),
                provider: work.provenance.as_ref().map(|p| p.provider.clone()),
                model: work.provenance.as_ref().and_then(|p| p.model.clone()),
                answer,
            }
        })
        .collect()
}

/// Once every reviewer has finished: decide, record the gate (for a task) and keep the result.
/// Idempotent; safe to call after every change.
pub async fn settle(daemon: &Arc<Daemon>, key: &str) {
    let lock = daemon.sessions.settle_lock(key);
    let _one_at_a_time = lock.lock().await;
    settle_held(daemon, key).await;
}

/// [`settle`] for a caller that holds the session's settle lock; the result it kept, if the
/// session settled.
async fn settle_held(daemon: &Arc<Daemon>, key: &str) -> Option<m::WaitResult> {
    let mut session = daemon.sessions.get(key)?;
    if session.result.is_some() {
        return None;
    }
    let reviewers = reviewers_of(daemon, &session);
    let question = consensus::Question::of(&session.subject);
    let outcome = consensus::decide(&reviewers, question);
    if outcome == Outcome::Pending {
        return None;
    }
    // The session's workspace may have moved since it began (its folder renamed): the review
    // is recorded, and its report written, where the workspace is now.
    if let Ok(ws) = daemon.workspace_of(&session.root, &session.workspace_id).await
        && ws.owns(&session.workspace_id)
        && !ws.is_bare()
    {
        session.root = ws.root.display().to_string();
    }
    let mut result = consensus::wait_result(&session.key, session.iteration, &reviewers, outcome, question);
    result.task_id = session.task().unwrap_or_default().to_string();
    result.report_path = session.report_path.clone();
    result.gate = Some(outcome.into());
    if let Some(task) = session.task() {
        match gate::record_consensus(daemon, &session, task, &reviewers, outcome).await {
            Ok(gate) => {
                if let Some(issue) = gate.guard_issue {
                    result.issues.insert(0, issue);
                    result.outcome = Outcome::Fail;
                    result.status = consensus::WaitStatus::Resolved;
                    result.consensus.verdict = Some(m::ConsensusVerdict::Fail);
                }
                result.gate = Some(gate.state);
                result.review = gate.review;
            }
            Err(e) => {
                // Nothing is on record: no verdict may read as given, and `review retry` records
                // the answers once the ledger takes writes again.
                warn!(session = %key, "cannot record the review: {}", e.0.message);
                result.outcome = Outcome::Internal;
                result.status = consensus::WaitStatus::Error;
                result.gate = Some(m::GateState::Unrecorded);
                result.consensus.verdict = None;
                result.parse_errors.push(format!("scafld: cannot record the review: {}", e.0.message));
            }
        }
    }
    if session.subject.template().is_some() {
        result.template_result = Some(template::outcome(daemon, &session).await);
    }
    session.result = Some(result.clone());
    // The caller's environment (auth variables included) was kept only to start reviewers; a
    // retry brings its own.
    session.caller_env.clear();
    daemon.sessions.drop_caller_env(&session.key);
    daemon.sessions.put(daemon.store(), session.clone());
    // The spec's follow-up line names this session's retry as `status` does, now it is kept
    // (one that gave no verdict runs its reviewers again, an unrecorded one records them).
    if let Some(task) = session.task()
        && matches!(result.gate, Some(m::GateState::Retry | m::GateState::Unrecorded))
    {
        crate::ledger::reshow_after_review(daemon, &session, task).await;
    }
    write_report(daemon, &session);
    publish(daemon, &session, "", "resolved", &format!("consensus {}", result.outcome));
    if result.gate == Some(m::GateState::AwaitingApproval) {
        publish(daemon, &session, "", "awaiting_approval", "a human must accept or reject the proposed verdict");
    }
    daemon.jobs.touch();
    Some(result)
}

/// The session a call names, checked against the workspace it came from (which owns the range
/// reviews its folder ran before `scafld init`). A key names its session from a folder nested
/// in the session's or holding it too: a client in a repository nested in a workspace reaches
/// that repository's range reviews and the workspace's task reviews alike.
pub fn find(daemon: &Daemon, ws: &Workspace, key: Option<&str>, task: Option<&str>) -> RpcResult<SessionRecord> {
    let related = |s: &SessionRecord| {
        let root = std::path::Path::new(&s.root);
        ws.owns(&s.workspace_id) || root.starts_with(&ws.root) || ws.root.starts_with(root)
    };
    let session = match key {
        Some(key) => daemon.sessions.get(key).filter(related),
        None => daemon.sessions.latest(ws, task),
    };
    session.ok_or_else(|| {
        let what = match (key, task) {
            (Some(key), _) => format!("no review session {key:?} in this workspace"),
            (None, Some(task)) => format!("no review session for {task}"),
            (None, None) => "no review session in this workspace".into(),
        };
        RpcError::new(ErrorKind::NotFound, what).with_hint(
            "start one with `scafld review <task-id>` or `scafld review --diff BASE..HEAD`; superseded \
             sessions are forgotten after the daemon's retention period (--retention-days, default 30)",
        )
    })
}

/// `review.wait`: the settled result, or the current state when the timeout runs out. A task
/// session that settled with no verdict carries the task's next step as `status` gives it now
/// (`next`; `None` for a template review's own wait, which has no task): its retry, or the new
/// review with the same reviewers once the spec changed (`evidence::again_as_before` decides,
/// here as everywhere).
pub async fn wait(
    daemon: &Arc<Daemon>,
    p: m::ReviewWaitParams,
    next: Option<gate::NextStep>,
) -> RpcResult<m::WaitResult> {
    if !(p.timeout_seconds.is_finite() && p.timeout_seconds >= 0.0) {
        return Err(RpcError::new(ErrorKind::InvalidInput, "timeout must be a non-negative number of seconds"));
    }
    // Waiting only reads (a session settles on its own, through its own workspace).
    let again = |key: &str| format!("wait --session-key {key}");
    let opened = daemon.workspace_to_read(&p.root).await;
    let ws = session_workspace(daemon, &p.root, p.session_key.as_deref(), opened, again).await?;
    let (key, chosen) = match p.session_key.as_deref() {
        Some(key) => (find(daemon, &ws, Some(key), None)?.key, ""),
        None => match daemon.sessions.latest_for_caller(&ws, &p.caller_identity) {
            Some((session, why)) => (session.key, why),
            None => (find(daemon, &ws, None, None)?.key, ""),
        },
    };
    let mut result = wait_for(daemon, &key, p.timeout_seconds).await?;
    result.chosen = chosen.to_string();
    if let Some(next) = next.filter(|_| result.gate == Some(m::GateState::Retry) && !result.task_id.is_empty()) {
        // A task whose step cannot be worked out now (its spec unreadable) has none to show;
        // `status` says why.
        result.next_action = next(daemon, &ws, &result.task_id).await.ok();
    }
    Ok(result)
}

/// The workspace a call naming session `key` from `root` works in, given how the call opened
/// `root` itself (`opened`: read-only for status and wait, settled for retry). When `root` is
/// gone and was the folder the session began in (its workspace moved while a caller held on
/// to the old folder: `scafld review` polling from where it started, an editor, an agent;
/// before or after the session settled and its `root` followed the move), the
/// session's workspace is found again by its id wherever it is now, as the session's own
/// settling finds it. Wait, status and retry alike; `again` words the call for the session's
/// key (`scafld review <again>`), the hint when the workspace is found nowhere.
pub(crate) async fn session_workspace(
    daemon: &Arc<Daemon>,
    root: &str,
    key: Option<&str>,
    opened: RpcResult<Arc<Workspace>>,
    again: impl FnOnce(&str) -> String,
) -> RpcResult<Arc<Workspace>> {
    let error = match opened {
        Ok(ws) => return Ok(ws),
        Err(error) => error,
    };
    let session = key.and_then(|key| daemon.sessions.get(key));
    let began_here = |s: &SessionRecord| s.root == root || s.began_in == root;
    let Some(session) = session.filter(|s| began_here(s) && !std::path::Path::new(root).exists()) else {
        return Err(error);
    };
    match daemon.workspace_of(&session.root, &session.workspace_id).await {
        Ok(ws) if ws.owns(&session.workspace_id) => Ok(ws),
        _ => Err(RpcError::workspace_not_found(format!(
            "{root} is gone (moved or removed) while review session {} of workspace {} was open, and the workspace is not found elsewhere; the session is kept and settles on its own",
            session.key, session.workspace_id
        ))
        .with_hint(format!("in the workspace's folder, wherever it is now, run `scafld review {}`", again(&session.key)))),
    }
}

/// Wait for session `key` to settle, at most `timeout_seconds`.
async fn wait_for(daemon: &Arc<Daemon>, key: &str, timeout_seconds: f64) -> RpcResult<m::WaitResult> {
    let mut changes = daemon.jobs.changes();
    let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(timeout_seconds.min(86_400.0));
    loop {
        let session = daemon.sessions.get(key).ok_or_else(|| RpcError::internal("session vanished"))?;
        if let Some(result) = session.result {
            return Ok(result);
        }
        let stop = daemon.shutdown_token();
        if stop.is_cancelled() {
            // The stop ends the session's reviewers, as it does a build's job (see
            // `tasks::job::stopped_before_end`): said at once, the same way whenever it comes.
            return Err(RpcError::new(
                ErrorKind::ShuttingDown,
                format!(
                    "the daemon is shutting down: review session {key} had not settled; the stop ends the reviewers it runs, and the next start runs them again"
                ),
            )
            .with_hint(format!(
                "once the daemon runs again, `scafld review wait --session-key {key}` shows how it was settled"
            ))
            .with_details(serde_json::json!({"session_key": key})));
        }
        let changed = tokio::select! {
            changed = tokio::time::timeout_at(deadline, changes.changed()) => changed.is_ok(),
            _ = stop.cancelled() => true,
        };
        if !changed {
            let reviewers = reviewers_of(daemon, &session);
            let question = consensus::Question::of(&session.subject);
            let mut result =
                consensus::wait_result(&session.key, session.iteration, &reviewers, Outcome::Pending, question);
            result.task_id = session.task().unwrap_or_default().to_string();
            result.report_path = session.report_path.clone();
            return Ok(result);
        }
    }
}

/// `review.retry`: new jobs for the reviewers that gave no verdict; the others' answers stand.
/// A task's retry that cannot run is refused with `next`, the step `status` gives.
pub async fn retry(daemon: &Arc<Daemon>, p: m::ReviewRetryParams, next: gate::NextHint) -> RpcResult<m::SpawnResult> {
    let key = Some(p.session_key.as_str());
    let ws =
        session_workspace(daemon, &p.root, key, daemon.workspace(&p.root).await, |key| format!("retry {key}")).await?;
    let mut session = find(daemon, &ws, key, None)?;
    let lock = daemon.sessions.settle_lock(&session.key);
    let _one_at_a_time = lock.lock().await;
    let reviewers = reviewers_of(daemon, &session);
    if reviewers.iter().any(|r| matches!(r.answer, Answer::Pending)) {
        return Err(RpcError::new(ErrorKind::Busy, "the session's reviewers are still running")
            .with_hint(format!("wait with `scafld review wait --session-key {}`", session.key)));
    }
    // Every reviewer answered but nothing was recorded: record those answers. A reviewer that
    // gave no verdict is run again below, as any retry does.
    if session.result.as_ref().is_some_and(|r| r.gate == Some(m::GateState::Unrecorded))
        && !reviewers.iter().any(|r| matches!(r.answer, Answer::Failed(_)))
    {
        return record_again(daemon, &ws, session, next).await;
    }
    let failed: Vec<usize> =
        reviewers.iter().enumerate().filter(|(_, r)| matches!(r.answer, Answer::Failed(_))).map(|(i, _)| i).collect();
    if failed.is_empty() {
        return Err(RpcError::new(
            ErrorKind::InvalidState,
            "every reviewer of this session gave a verdict; nothing to retry",
        )
        .with_hint("a failing verdict is fixed in the code, then reviewed in a new session"));
    }
    // A task's retry holds the task (after the session: the lock order) until its jobs exist,
    // so no review or build of the task starts in between.
    let mut _task_held = None;
    if let Some(task) = session.task().map(str::to_string) {
        gate::refuse_while_running(daemon, &ws, &task)?;
        _task_held = Some(daemon.jobs.task_lock(&ws, &task).lock_owned().await);
        // The retry's reviewers are guarded from now: what was written before is the retry
        // check's to judge (the content against the packet's).
        let since = crate::baseline::clock_ns();
        session.snapshot = crate::baseline::stored(&gate::check_retry(daemon, &ws, &session, &task, next).await?);
        session.guard_since = session.guard_since.map(|_| since);
    }
    session.caller_env = p.caller.env.clone();
    session.caller_cwd = p.caller.cwd.clone();
    if !p.caller.client_exe.is_empty() {
        session.client_exe = p.caller.client_exe.clone();
    }
    let mut respawned = Vec::new();
    for i in failed {
        let old = daemon.jobs.get(daemon.store(), &session.job_ids[i]);
        let attempt = old.as_ref().map(|j| j.attempt + 1).unwrap_or(2);
        let template = old.and_then(|j| j.review.and_then(|w| w.template));
        session.job_ids[i] = new_job(daemon, &ws, &session, &session.reviewers[i], attempt, template);
        respawned.push(session.reviewers[i].clone());
    }
    session.result = None;
    daemon.sessions.keep_caller_env(&session);
    daemon.sessions.put(daemon.store(), session.clone());
    write_report(daemon, &session);
    start_jobs(daemon, &session);
    Ok(m::SpawnResult {
        session_key: session.key.clone(),
        reviewers_spawned: respawned,
        reviewers_missing: session.missing.clone(),
        job_ids: session.job_ids.clone(),
        resolved: None,
        kept_in: None,
    })
}

/// `review.retry` of a session whose reviewers all answered but whose verdict the ledger could
/// not take (a full state disk): their answers are recorded now, as settling would have, once
/// the checks a retry makes still hold (the task in review, its contract and the files the
/// reviewers judged unchanged, no newer session); nothing is run again. The caller holds the
/// session's settle lock.
async fn record_again(
    daemon: &Arc<Daemon>,
    ws: &Workspace,
    mut session: SessionRecord,
    next: gate::NextHint,
) -> RpcResult<m::SpawnResult> {
    let task =
        session.task().map(str::to_string).ok_or_else(|| RpcError::internal("an unrecorded session of no task"))?;
    {
        gate::refuse_while_running(daemon, ws, &task)?;
        let _task_held = daemon.jobs.task_lock(ws, &task).lock_owned().await;
        // The guard compares against what the reviewers were shown: the first snapshot (the
        // failed settle wrote nothing to the spec).
        gate::check_retry(daemon, ws, &session, &task, next).await?;
    }
    let failed = session.result.take();
    daemon.sessions.put(daemon.store(), session.clone());
    let Some(result) = settle_held(daemon, &session.key).await else {
        // Not settled again (cannot happen: every reviewer answered); keep what was said.
        session.result = failed;
        daemon.sessions.put(daemon.store(), session);
        return Err(RpcError::internal("the session did not settle"));
    };
    if result.gate == Some(m::GateState::Unrecorded) {
        let why = result.parse_errors.last().cloned().unwrap_or_default();
        return Err(RpcError::internal(format!("the review is still not recorded: {why}")).with_hint(format!(
            "put right what stops the write (a full disk: free space where the daemon keeps its state), then run `scafld review retry {}` again",
            session.key
        )));
    }
    Ok(m::SpawnResult {
        session_key: session.key.clone(),
        reviewers_spawned: Vec::new(),
        reviewers_missing: session.missing.clone(),
        job_ids: session.job_ids.clone(),
        resolved: result.gate.map(|g| g.to_string()),
        kept_in: None,
    })
}

/// After a restart: start the daemon-run reviewers that were re-queued, and settle sessions
/// whose reviewers all finished before the daemon stopped.
pub async fn recover(daemon: &Arc<Daemon>) {
    for session in daemon.sessions.all() {
        if session.result.is_some() {
            continue;
        }
        start_jobs(daemon, &session);
        settle(daemon, &session.key).await;
    }
}
