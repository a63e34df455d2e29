//! `worker.*`: reviewer workers claim review jobs under a lease.

use serde::{Deserialize, Serialize};

use super::*;

// ---------------------------------------------------------------------------------------------
// worker.*: reviewer workers claim review jobs with a lease.

method!(
    /// Claim a queued review job (waiting at most `timeout_seconds`); null when none came.
    no_work WorkerClaim = "worker.claim", ClaimParams => Option<Claim>
);

/// The longest lease a claim may ask for: a week (a worker keeps a job longer by heartbeats).
/// A workspace's `review.workers.lease_seconds` above it is taken as this.
pub const MAX_LEASE_SECONDS: u64 = 7 * 24 * 3600;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimParams {
    pub worker_id: String,
    /// What the worker reviews with: codex, claude, gemini, command, or `agent` (an agent that
    /// reviews by itself and only needs the packet).
    pub provider: String,
    #[serde(default)]
    pub provider_command: Option<String>,
    /// Only jobs of this workspace (default: any).
    #[serde(default)]
    pub root: Option<String>,
    #[serde(default)]
    pub timeout_seconds: f64,
    /// Lease length (default: review.workers.lease_seconds of the job's workspace); at most
    /// [`MAX_LEASE_SECONDS`], a longer one is refused.
    #[serde(default)]
    pub lease_seconds: Option<u64>,
    pub caller: CallerContext,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    pub job_id: String,
    pub lease_token: String,
    pub lease_seconds: u64,
    pub session_key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub task_id: String,
    pub root: String,
    pub attempt: u32,
    /// The review packet (the same text a provider receives on stdin).
    pub packet: String,
    /// The files under review.
    pub files: Vec<String>,
    /// The acceptance-evidence preflight for the reviewed tree.
    pub preflight: String,
    /// Set when an earlier worker left a checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<ResumeBriefing>,
    /// For automated workers: the provider process to run (the packet goes to its stdin).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocation: Option<WorkerInvocation>,
    /// What a reviewer that claimed by hand runs next: its lease renewed, its answer handed in
    /// (`next_command`), or the job given back.
    #[serde(default)]
    pub commands: ClaimCommands,
}

/// The commands of a claimed job's lease, with its id and token filled in.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimCommands {
    /// `scafld worker heartbeat <job> --lease <token>`: renew the lease before it ends.
    pub heartbeat: String,
    /// `scafld worker submit <job> --lease <token> --dossier FILE`: hand in the ReviewDossier
    /// JSON written to FILE (one submission is accepted).
    pub next_command: String,
    /// `scafld worker release <job> --lease <token>`: give the job back to the queue.
    pub release: String,
}

impl ClaimCommands {
    pub fn new(job_id: &str, lease_token: &str) -> ClaimCommands {
        let lease = format!("{} --lease {}", crate::cli::shell_word(job_id), crate::cli::shell_word(lease_token));
        ClaimCommands {
            heartbeat: format!("scafld worker heartbeat {lease}"),
            next_command: format!("scafld worker submit {lease} --dossier FILE"),
            release: format!("scafld worker release {lease}"),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResumeBriefing {
    pub phase: String,
    pub files_total: usize,
    /// Files already reviewed, with their finding counts.
    pub reviewed: Vec<ReviewedCount>,
    pub remaining: Vec<String>,
    pub findings_so_far: usize,
    /// Where to continue.
    #[serde(default)]
    pub next_file: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReviewedCount {
    pub path: String,
    pub findings: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerInvocation {
    /// A `sh -c` command line.
    pub command: String,
    /// Environment added to the worker's own.
    pub env: std::collections::BTreeMap<String, String>,
    pub cwd: String,
    pub timeout_seconds: u64,
    pub idle_timeout_seconds: u64,
    /// Where the answer is: stdout, or this file (codex's last message).
    #[serde(default)]
    pub answer_file: Option<String>,
    /// Judge idleness on stdout alone (codex's event stream; its stderr chatter does not count).
    #[serde(default)]
    pub idle_on_stdout: bool,
    /// Stdout is the whole answer: stop the run once it outgrows what is kept of it.
    #[serde(default)]
    pub stop_past_capture: bool,
}

method!(
    /// Extend a lease; refused unless `lease_token` is the job's current lease.
    WorkerHeartbeat = "worker.heartbeat", LeaseParams => LeaseResult
);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseParams {
    pub job_id: String,
    pub lease_token: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LeaseResult {
    pub job_id: String,
    pub state: JobState,
    pub lease_expires_in_seconds: f64,
}

method!(
    /// Record progress: a reviewed file with its findings, and/or the phase.
    WorkerCheckpoint = "worker.checkpoint", CheckpointParams => CheckpointResult
);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointParams {
    pub job_id: String,
    pub lease_token: String,
    /// preflight, reviewing, writing_report or done.
    #[serde(default)]
    pub phase: Option<String>,
    #[serde(default)]
    pub file: Option<String>,
    /// Dossier findings for `file`.
    #[serde(default)]
    pub findings: Vec<serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckpointResult {
    pub job_id: String,
    pub phase: String,
    pub files_reviewed: usize,
    pub files_remaining: Vec<String>,
    pub findings_so_far: usize,
    /// The review report, relative to `root`.
    pub report_path: String,
    /// The job's workspace root: a worker may call from any folder, and what it is shown
    /// (`report_path`) is made to resolve from there.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub root: String,
}

method!(
    /// Deliver the reviewer's answer: a dossier, or an automated worker's raw provider output.
    WorkerSubmit = "worker.submit", WorkerSubmitParams => WorkerSubmitResult
);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerSubmitParams {
    pub job_id: String,
    pub lease_token: String,
    #[serde(default)]
    pub dossier: Option<serde_json::Value>,
    /// An automated worker's provider run: its stdout, answer file, exit code, timeout.
    #[serde(default)]
    pub run: Option<WorkerRun>,
    #[serde(default)]
    pub model: Option<String>,
    pub caller: CallerContext,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerRun {
    pub exit_code: Option<i32>,
    pub stdout: String,
    /// Bytes of stdout before `stdout` that the worker's capture cap dropped (its output was
    /// longer than a reviewer's may be).
    #[serde(default)]
    pub stdout_dropped: u64,
    #[serde(default)]
    pub answer_file: Option<String>,
    #[serde(default)]
    pub timed_out: bool,
    /// The tail of stderr, for the error message.
    #[serde(default)]
    pub stderr_tail: String,
    /// What the run's diagnostics file keeps of stderr (as the daemon's own runs keep it): the
    /// last of it, `stderr_dropped` bytes before it not sent.
    #[serde(default)]
    pub stderr: String,
    #[serde(default)]
    pub stderr_dropped: u64,
    /// Why the runner stopped it, if it did (`absolute_timeout`, `idle_timeout`, `cancelled`,
    /// `output_limit`: the runner's `KillReason`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kill_reason: Option<String>,
    #[serde(default)]
    pub duration_ms: u64,
    /// How long it had been silent when it ended.
    #[serde(default)]
    pub silent_for_ms: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerSubmitResult {
    pub job_id: String,
    pub accepted: bool,
    /// The job had already finished with this very answer from this lease: it is recorded
    /// once, and this repeat changed nothing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub already_recorded: bool,
    /// The verdict recorded for this reviewer's job, as `review status` shows it (`PASS`,
    /// `FAIL` or `NEEDS_WORK`: an answer of pass with an open blocker is a fail, with other open
    /// findings it needs work); empty when the answer did not count.
    pub verdict: String,
    /// What the review recorded once this submission settled its session (it was the last
    /// reviewer to finish): the task's review gate, which can differ from the verdict (the
    /// workspace changed while the reviewer ran, another reviewer failed, manual approval);
    /// none while other reviewers are still at work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateState>,
    /// Why the gate is not the verdict, when they differ: the review's first issue or error.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub gate_reason: String,
    /// Why the submission was refused or the answer did not count.
    pub problems: Vec<String>,
    /// What comes next once the answer counted: the task's next step when it settled a task's
    /// review (as `status` gives it), else the wait for the session's other reviewers.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub next_command: String,
    /// The job's workspace root: a worker may submit from any folder, and `next_command` is
    /// made to run from there (`--root <root>` when the caller is outside it).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub root: String,
}

method!(
    /// Give a claimed job back to the queue (its checkpoint is kept).
    WorkerRelease = "worker.release", LeaseParams => LeaseResult
);
