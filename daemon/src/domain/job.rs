//! Jobs: stored records of work the daemon runs (acceptance runs of `build`, reviewers of a
//! review session). A job that produced no verdict ends in a state that can never be read as a
//! pass.

use serde::{Deserialize, Serialize};

pub use scafld_protocol::methods::{JobKind, JobState};

/// A process group and the identity of its leader: its start time in clock ticks since boot
/// (field 22 of `/proc/PID/stat`) and the boot it started in. A pid is reused; this pair is not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessGroup {
    pub pgid: i32,
    pub start_ticks: u64,
    pub boot_id: String,
    /// The run's token, in the `SCAFLD_RUN_TOKEN` variable of every process the command
    /// starts: it finds descendants that left the group (`setsid`, double forks).
    #[serde(default)]
    pub token: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    pub id: String,
    pub kind: JobKind,
    pub workspace_id: String,
    pub root: String,
    pub task_id: String,
    pub state: JobState,
    /// `daemon` for the daemon's own runner.
    pub owner: String,
    pub attempt: u32,
    pub created_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub last_heartbeat: Option<String>,
    /// The process group of the command running now and who leads it, so a restarted daemon
    /// kills an orphan only while the recorded leader still owns that group id.
    #[serde(default)]
    pub group: Option<ProcessGroup>,
    /// The token every process of a build job's commands carries, on record from the job's
    /// creation: a restarted daemon finds them by it, so the group of each command need not
    /// be flushed before it starts.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub run_token: String,
    pub activity: Option<String>,
    pub reason: Option<String>,
    /// A build job's outcome, as sent to clients.
    pub outcome: Option<scafld_protocol::methods::BuildOutcome>,
    /// The error kind (snake_case) of a job that ended without a result.
    #[serde(default)]
    pub error_kind: Option<String>,
    /// Set on review jobs: the reviewer's slot in its session, lease, checkpoint and answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<ReviewWork>,
}

impl JobRecord {
    /// A new job, queued for the daemon's runner: the one place a job record starts out.
    pub fn queued(
        id: String,
        kind: JobKind,
        workspace_id: String,
        root: String,
        task_id: String,
        created_at: String,
    ) -> JobRecord {
        JobRecord {
            id,
            kind,
            workspace_id,
            root,
            task_id,
            state: JobState::Queued,
            owner: "daemon".into(),
            attempt: 1,
            created_at,
            started_at: None,
            finished_at: None,
            last_heartbeat: None,
            group: None,
            run_token: String::new(),
            activity: None,
            reason: None,
            outcome: None,
            error_kind: None,
            review: None,
        }
    }

    /// Add `note` (the spec file was left as it was, and why) to what the job answers: its
    /// reason and its build outcome's message, with `next` as the outcome's next command when
    /// given. The job's state is the ledger's, unchanged.
    pub fn note_unprojected(&mut self, note: &str, next: Option<String>) {
        let joined = |said: &str| if said.is_empty() { note.to_string() } else { format!("{said}; {note}") };
        if let Some(outcome) = &mut self.outcome {
            outcome.message = joined(&outcome.message);
            if let Some(next) = next {
                outcome.next_command = next;
            }
        }
        self.reason = Some(joined(self.reason.as_deref().unwrap_or_default()));
    }
}

/// What the job table keeps of a finished job once it is no longer among the most recent:
/// enough to count, order and expire it; the whole record is read from the store when asked
/// for. Read straight from a stored record (its other fields skipped), so a start does not
/// parse the outcomes and dossiers of a long history.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct JobSummary {
    pub id: String,
    pub kind: JobKind,
    pub state: JobState,
    pub created_at: String,
    #[serde(default)]
    pub finished_at: Option<String>,
}

/// A job as the store hands it to the job table's start: finished build jobs summarised, the
/// others whole.
#[derive(Debug, Clone)]
pub enum StoredJob {
    Whole(Box<JobRecord>),
    Finished(JobSummary),
}

impl JobRecord {
    pub fn summary(&self) -> JobSummary {
        JobSummary {
            id: self.id.clone(),
            kind: self.kind,
            state: self.state,
            created_at: self.created_at.clone(),
            finished_at: self.finished_at.clone(),
        }
    }
}

/// One reviewer's share of a review session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReviewWork {
    pub session_key: String,
    /// codex, claude, gemini, command, local, or `worker` (served by an external worker).
    pub reviewer: String,
    /// Unix milliseconds of the last heartbeat (liveness is judged from it).
    #[serde(default)]
    pub heartbeat_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Lease>,
    #[serde(default)]
    pub checkpoint: Checkpoint,
    /// Who gave the answer, through which channel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
    /// The accepted dossier, when the reviewer answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dossier: Option<crate::domain::dossier::Dossier>,
    /// Why the reviewer produced no verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<ReviewerFailure>,
    /// Set when this reviewer runs a review template (standalone or as a gate pass).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<TemplateJob>,
    /// The template result, UNKNOWN ones included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_result: Option<scafld_protocol::methods::TemplateReviewResult>,
    /// The worker lease whose submission was accepted, and a digest of the answer it counted:
    /// the same answer handed in again under that lease is told it is already recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered: Option<Answered>,
}

/// A worker's accepted submission, as a repeat of it is recognised.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answered {
    pub lease_token: String,
    /// SHA-256 of the accepted dossier (after the checkpoint's findings were merged in).
    pub digest: String,
}

/// A template a reviewer job runs: which one, with which inputs, where, with which provider.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TemplateJob {
    pub name: String,
    pub inputs: std::collections::BTreeMap<String, String>,
    /// The directory the reviewer works in.
    pub cwd: String,
    /// codex, claude, gemini, command or local.
    pub provider: String,
}

/// A worker's claim on a review job. Only the holder of `token` may checkpoint or submit.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Lease {
    pub token: String,
    pub worker_id: String,
    /// What the worker said it reviews with (codex, claude, ... or `agent`).
    pub provider: String,
    #[serde(default)]
    pub host_agent: Option<String>,
    pub seconds: u64,
    /// When the lease runs out, on the daemon's monotonic clock: a wall clock set forward never
    /// ends every lease at once, nor does one set back keep a dead worker's alive. Not stored
    /// (monotonic time does not survive a restart): a lease recovered then starts a fresh term
    /// (`Jobs::recover`); until it has one it does not run out.
    #[serde(skip)]
    pub deadline: Option<std::time::Instant>,
    pub claimed_at: String,
}

/// The reviewer's progress, posted by workers; it survives the worker and seeds the next one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// preflight, reviewing, writing_report or done (empty before the first claim).
    #[serde(default)]
    pub phase: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preflight: Option<String>,
    #[serde(default)]
    pub reviewed: Vec<ReviewedFile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_activity: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReviewedFile {
    pub path: String,
    #[serde(default)]
    pub findings: Vec<crate::domain::dossier::Finding>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    pub provider: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// codex.output_file, claude.mcp_submit_review, command.stdout, worker.lease, ...
    pub channel: String,
    /// Codex's reasoning effort, when codex reviewed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
}

/// Why a reviewer has no verdict. Each class means "retry the review", never "fix the code".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    /// The answer was missing, malformed or invalid, or the provider crashed.
    Parse,
    /// The provider ran out of time.
    Timeout,
    /// scafld itself could not run the reviewer.
    Internal,
    Cancelled,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReviewerFailure {
    pub class: FailureClass,
    pub message: String,
}

/// A review session: one review round of a task or a git range, with one job per reviewer on
/// the same packet. Settled once every reviewer job has finished; `result` is the consensus.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub key: String,
    /// Creation order within the daemon (timestamps have one-second precision).
    #[serde(default)]
    pub seq: u64,
    pub workspace_id: String,
    /// Where the workspace is: the folder the session began in, followed to the workspace's
    /// new folder when it settles there after a move.
    pub root: String,
    /// The folder the session began in, kept after `root` follows a move, so a caller still
    /// naming it finds the session ([`crate::review::session_workspace`]). Empty in sessions
    /// an older scafld kept.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub began_in: String,
    /// What the session reviews (stored as the `task_id`, `range` and `template` fields).
    #[serde(flatten)]
    pub subject: Subject,
    pub iteration: u32,
    pub created_at: String,
    pub approval: scafld_protocol::vocab::Approval,
    /// Spawned reviewers and their current jobs, in the same order.
    pub reviewers: Vec<String>,
    pub job_ids: Vec<String>,
    pub missing: Vec<String>,
    /// The files under review.
    pub files: Vec<String>,
    /// The workspace when the session first started (the mutation guard compares against it).
    pub snapshot: Vec<crate::domain::ledger::BaselinePath>,
    pub tree: String,
    /// The clock (nanoseconds since the epoch) before the files were first read for the
    /// session, or its retry: a file in scope written since is a mutation even when its
    /// content is the same again at the end. `None` in a session an older scafld kept.
    #[serde(default)]
    pub guard_since: Option<i64>,
    pub scope: Vec<String>,
    pub request: crate::domain::dossier::Request,
    pub packet_path: String,
    /// The sha256 (hex) and length of the packet as it was written for the reviewers: what a
    /// receipt signs as the reviewed context, and what a reviewer is given only while the file
    /// still matches (`review::sealed_packet`). Empty in a session an older scafld kept.
    #[serde(default)]
    pub packet_sha256: String,
    #[serde(default)]
    pub packet_bytes: u64,
    /// The sha256 (hex) of the task changes written beside the packet for the gate's template
    /// passes (`task_changes.md`): a pass is shown them only while the file still matches.
    /// Empty when there are none, and in a session an older scafld kept.
    #[serde(default)]
    pub changes_sha256: String,
    pub report_path: String,
    pub preflight: String,
    /// The caller's cwd and environment: daemon-run reviewers are started (and resumed after a
    /// restart) with it. The environment is never written with the record (it may hold secrets;
    /// records from older versions may still carry one); `review::caller_env` keeps it in a
    /// private file until the session settles.
    pub caller_cwd: String,
    #[serde(default, skip_serializing)]
    pub caller_env: std::collections::BTreeMap<String, String>,
    /// Who started the session (`CallerContext::identity`): `review wait` without a key picks
    /// the caller's own latest session.
    #[serde(default)]
    pub caller_identity: String,
    pub client_exe: String,
    /// Model and codex reasoning overrides given at spawn.
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub reasoning: Option<String>,
    #[serde(default)]
    pub provider_command: Option<String>,
    /// The wait document once settled.
    #[serde(default)]
    pub result: Option<scafld_protocol::methods::WaitResult>,
    /// A digest of the context file of a range review (iterations count per issue).
    #[serde(default)]
    pub context_digest: String,
}

/// What a review session reviews.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "SubjectFields", into = "SubjectFields")]
pub enum Subject {
    /// A task's build, through the gate (its id).
    Task(String),
    /// A git range (`BASE..HEAD`), with no spec.
    Range(String),
    /// A standalone template review: the template's name, and the range it was given (empty
    /// when it reviews no diff).
    Template { name: String, range: String },
}

impl Default for Subject {
    fn default() -> Subject {
        Subject::Range(String::new())
    }
}

impl Subject {
    /// The task reviewed, if a task is.
    pub fn task(&self) -> Option<&str> {
        match self {
            Subject::Task(task) => Some(task),
            _ => None,
        }
    }

    /// The template of a standalone template review.
    pub fn template(&self) -> Option<&str> {
        match self {
            Subject::Template { name, .. } => Some(name),
            _ => None,
        }
    }

    /// The git range reviewed (empty for a task, or a template given no diff).
    pub fn range(&self) -> &str {
        match self {
            Subject::Task(_) => "",
            Subject::Range(range) | Subject::Template { range, .. } => range,
        }
    }
}

/// The stored form of [`Subject`]: the fields records have always had, so records written
/// before the enum read unchanged.
#[derive(Serialize, Deserialize)]
struct SubjectFields {
    #[serde(default)]
    task_id: String,
    #[serde(default)]
    range: String,
    #[serde(default)]
    template: Option<String>,
}

impl From<SubjectFields> for Subject {
    fn from(f: SubjectFields) -> Subject {
        match (f.task_id, f.template) {
            (task, _) if !task.is_empty() => Subject::Task(task),
            (_, Some(name)) => Subject::Template { name, range: f.range },
            _ => Subject::Range(f.range),
        }
    }
}

impl From<Subject> for SubjectFields {
    fn from(subject: Subject) -> SubjectFields {
        match subject {
            Subject::Task(task_id) => SubjectFields { task_id, range: String::new(), template: None },
            Subject::Range(range) => SubjectFields { task_id: String::new(), range, template: None },
            Subject::Template { name, range } => SubjectFields { task_id: String::new(), range, template: Some(name) },
        }
    }
}

impl SessionRecord {
    /// The task a session reviews, if it reviews one.
    pub fn task(&self) -> Option<&str> {
        self.subject.task()
    }

    /// Session keys are daemon-generated ids (hex, or a timestamp when no randomness was to
    /// be had); only such a key may name a file or folder.
    pub fn is_plain_key(key: &str) -> bool {
        !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == ':')
    }
}

#[cfg(test)]
mod tests {
    use super::{SessionRecord, Subject};

    /// The subject is stored as the three fields records have always had: records written before
    /// the enum read back as the same subject, and new ones write the same bytes.
    #[test]
    fn a_session_subject_is_stored_as_its_old_fields() {
        let read = |fields: &str| {
            let json = format!(
                r#"{{"key":"k","workspace_id":"w","root":"/r",{fields}"iteration":1,"created_at":"t","approval":"auto","reviewers":[],"job_ids":[],"missing":[],"files":[],"snapshot":[],"tree":"","scope":[],"request":{{"mode":"discover","max_findings":5,"min_attack_angles":1,"depth":"standard"}},"packet_path":"","report_path":"","preflight":"","caller_cwd":"","client_exe":""}}"#
            );
            serde_json::from_str::<SessionRecord>(&json).unwrap()
        };
        let cases = [
            (r#""task_id":"add-login","range":"","#, Subject::Task("add-login".into())),
            (r#""range":"main..HEAD","#, Subject::Range("main..HEAD".into())),
            (
                r#""task_id":"","range":"a..b","template":"security","#,
                Subject::Template { name: "security".into(), range: "a..b".into() },
            ),
            ("", Subject::Range(String::new())),
        ];
        for (fields, subject) in cases {
            let session = read(fields);
            assert_eq!(session.subject, subject, "{fields}");
            let written = serde_json::to_value(&session).unwrap();
            let again: SessionRecord = serde_json::from_value(written.clone()).unwrap();
            assert_eq!(again.subject, subject);
            assert!(written.get("task_id").is_some() && written.get("range").is_some(), "{written}");
        }
    }
}
