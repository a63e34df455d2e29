//! `review.*`: the review gate and completion, and review sessions (several reviewers,
//! spawn/wait, retry, status, manual approval).

use serde::{Deserialize, Serialize};

use super::*;

// ---------------------------------------------------------------------------------------------
// Review gate and completion.

method!(
    /// Run the review gate of a task in `review` status (or record an audited human override).
    TaskReview = "task.review", TaskReviewParams => TaskReviewResult
);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskReviewParams {
    pub root: String,
    pub task_id: String,
    pub caller: CallerContext,
    /// auto, codex, claude, gemini, command or local (default: review.external.provider).
    #[serde(default)]
    pub provider: Option<String>,
    #[serde(default)]
    pub provider_command: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    /// Codex reasoning effort: low, medium or high.
    #[serde(default)]
    pub codex_reasoning: Option<String>,
    #[serde(default)]
    pub human_reviewed: bool,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub review_depth: Option<String>,
    #[serde(default)]
    pub max_findings: Option<u32>,
    #[serde(default)]
    pub min_attack_angles: Option<u32>,
    #[serde(default)]
    pub review_scope: Vec<String>,
    /// Default: by review.dossier.rerun_policy.
    #[serde(default)]
    pub mode: Option<ReviewMode>,
    /// Return the packet a provider would receive; run nothing, record nothing.
    #[serde(default)]
    pub print_context: bool,
    /// Review again even though nothing changed since a failed review.
    #[serde(default)]
    pub force: bool,
    /// Several reviewers, one job each (default: review.external.reviewers, else `provider`).
    #[serde(default)]
    pub reviewers: Vec<String>,
    /// Whether the verdict stands or awaits `review accept|reject` (default: review.approval).
    #[serde(default)]
    pub approval: Option<Approval>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskReviewResult {
    pub task_id: String,
    /// The review job, when the review runs a provider (wait for it with `job.wait`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// pass, fail, or `not_run` for --print-context.
    pub verdict: String,
    pub mode: ReviewMode,
    pub provider: String,
    pub summary: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub output_format: String,
    pub open_blockers: usize,
    /// The accepted dossier's findings.
    pub findings: Vec<serde_json::Value>,
    pub next_command: String,
    /// The packet, for --print-context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// The review session a provider review started (wait for it with `review.wait`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SpawnResult>,
    /// The gate state: pass, fail, or awaiting_approval (manual approval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateState>,
}

method!(
    /// Archive a task whose latest review passed from a provider that may complete it.
    TaskComplete = "task.complete", TaskParams => CompleteResult
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompleteResult {
    pub task_id: String,
    pub status: Status,
    pub path: String,
    pub provider: String,
    pub review_entry: String,
    /// Why the spec file was left as it was, when it was (the ledger holds the completion).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

method!(
    /// A reviewer's answer, relayed by `scafld mcp submit-review` for a running review.
    ReviewSubmit = "review.submit", SubmitParams => SubmitResult
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitParams {
    /// The submission token the daemon gave the provider's MCP server.
    pub token: String,
    /// The reviewer's answer: a ReviewDossier for the review gate, or a template answer
    /// (`verdict`, `summary`, `findings`) for a template review; the token's slot says which.
    pub dossier: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubmitResult {
    pub accepted: bool,
    pub verdict: String,
    /// Why the dossier was refused (the reviewer may fix it and submit again).
    pub problems: Vec<String>,
}

// ---------------------------------------------------------------------------------------------
// Review sessions: several reviewers, spawn/wait, retry, status, manual approval.

/// Returned by every call that starts a review session (`task.review`, `review.diff`,
/// `review.retry`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SpawnResult {
    pub session_key: String,
    pub reviewers_spawned: Vec<String>,
    /// Requested reviewers whose CLI is not installed (skipped).
    pub reviewers_missing: Vec<String>,
    /// One job per spawned reviewer, in the order of `reviewers_spawned`.
    pub job_ids: Vec<String>,
    /// Set when the session was decided without spawning: an empty diff passes, and a retry of
    /// a session whose verdict was never recorded records its reviewers' answers (the gate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<String>,
    /// Where the review's data is kept when the repository has no `.scafld/` (a range review
    /// without `scafld init`): a folder in the daemon's state dir.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_in: Option<String>,
}

method!(
    /// Review a plain git range (no task spec) with one job per available reviewer.
    ReviewDiff = "review.diff", DiffReviewParams => SpawnResult
);

/// The longest `context` (a `--context-file`) a range review takes, in bytes: the daemon
/// refuses a longer one, and the client reads no further.
pub const MAX_CONTEXT_BYTES: usize = 256 * 1024;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiffReviewParams {
    pub root: String,
    /// `BASE..HEAD`.
    pub range: String,
    /// The issue description injected into the reviewers' prompt (the context file's text), at
    /// most [`MAX_CONTEXT_BYTES`].
    #[serde(default)]
    pub context: Option<String>,
    /// Reviewers to spawn (default: `provider`, else review.external.reviewers, else
    /// review.external.provider).
    #[serde(default)]
    pub reviewers: Vec<String>,
    /// The one reviewer when `reviewers` is empty (`--provider`).
    #[serde(default)]
    pub provider: Option<String>,
    #[serde(default)]
    pub provider_command: Option<String>,
    /// The reviewers' model (default: each provider's configured one).
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub codex_reasoning: Option<String>,
    pub caller: CallerContext,
}

method!(
    /// Wait (bounded) for a review session and return its consensus.
    no_work ReviewWait = "review.wait", ReviewWaitParams => WaitResult
);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewWaitParams {
    pub root: String,
    /// Default: the most recent session this caller started (by `caller_identity`), else the
    /// most recent session of the workspace.
    #[serde(default)]
    pub session_key: Option<String>,
    pub timeout_seconds: f64,
    /// The caller's identity (`CallerContext::identity`).
    #[serde(default)]
    pub caller_identity: String,
}

/// The seed-004 wait document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WaitResult {
    /// resolved, timeout or error.
    pub status: WaitStatus,
    pub session_key: String,
    /// pass, fail, needs_work, no_reviewers, parse_error, timeout, internal_error or pending:
    /// what the exit code is derived from.
    pub outcome: Outcome,
    pub consensus: Consensus,
    pub reviewers: std::collections::BTreeMap<String, ReviewerReport>,
    pub issues: Vec<ReviewIssue>,
    pub parse_errors: Vec<String>,
    /// The task of a task review (empty for a diff range).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub task_id: String,
    /// Where the incremental report is kept.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub report_path: String,
    /// The task gate state after the session: pass, fail, awaiting_approval, retry or
    /// unrecorded (the answers are in, the ledger could not take them: `review.retry` records
    /// them) (a range review's: its outcome).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateState>,
    /// For a task review: the gate's result as `scafld review <task>` prints it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<TaskReviewResult>,
    /// For a template review: its result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_result: Option<TemplateReviewResult>,
    /// When no session key was given: why this session was chosen.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub chosen: String,
    /// For a task review some reviewer of which gave no verdict (gate `retry`): the task's next
    /// step as `status` gives it when the wait answered (this session's retry, or a new review
    /// with the same reviewers once the spec's text changed since its packet). Clients show it
    /// rather than deciding between the two themselves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_action: Option<NextAction>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Consensus {
    /// Null while pending, and for a task session whose verdict could not be recorded in its
    /// ledger (gate `unrecorded`): nothing judged the work on record.
    pub verdict: Option<ConsensusVerdict>,
    /// The review round of this task or range (1 for the first).
    pub iteration: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReviewerReport {
    /// PASS, FAIL or NEEDS_WORK; null when the reviewer gave no verdict.
    pub verdict: Option<ConsensusVerdict>,
    pub summary: String,
    pub issues: Vec<ReviewIssue>,
    pub error: Option<String>,
    pub job_id: String,
    pub state: JobState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// One finding, in the shape orchestrators consume.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReviewIssue {
    pub reviewer: String,
    pub file: String,
    pub line_start: u64,
    pub line_end: u64,
    /// 0 critical, 1 high, 2 medium, 3 low; null when the severity is unknown.
    pub priority: Option<u8>,
    pub title: String,
    pub body: String,
    /// Whether the finding blocks completion.
    pub blocking: bool,
}

method!(
    /// Re-run the reviewers of a session that failed to parse, timed out or crashed.
    ReviewRetry = "review.retry", ReviewRetryParams => SpawnResult
);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewRetryParams {
    pub root: String,
    pub session_key: String,
    pub caller: CallerContext,
}

method!(
    /// The latest review session of a task (or a given session): reviewers, liveness, progress.
    no_work ReviewStatus = "review.status", ReviewStatusParams => ReviewStatusResult
);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewStatusParams {
    pub root: String,
    #[serde(default)]
    pub task_id: Option<String>,
    #[serde(default)]
    pub session_key: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReviewStatusResult {
    pub session_key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub task_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub range: String,
    pub iteration: u32,
    pub approval: Approval,
    pub state: SessionState,
    pub files_total: usize,
    pub reviewers: Vec<ReviewerProgress>,
    pub report_path: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReviewerProgress {
    pub reviewer: String,
    pub job_id: String,
    pub state: JobState,
    pub attempt: u32,
    /// fresh, quiet or stale (by the age of the last heartbeat); empty when not running.
    pub liveness: String,
    pub heartbeat_age_seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    pub phase: String,
    pub files_reviewed: usize,
    pub findings_so_far: usize,
    pub files_remaining: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preflight: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<ConsensusVerdict>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

method!(
    /// Record a human decision on a review that awaits approval (`review.approval: manual`).
    ReviewDecide = "review.decide", DecideParams => DecideResult
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecideParams {
    pub root: String,
    pub task_id: String,
    pub decision: Decision,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecideResult {
    pub task_id: String,
    pub decision: Decision,
    /// The gate verdict that now stands.
    pub verdict: Verdict,
    pub next_command: String,
}
