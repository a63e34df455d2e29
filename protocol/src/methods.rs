//! Every RPC method: its name and the types of its params and result.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A JSON-RPC method of the daemon. Implemented by uninhabited marker types so that a method's
/// name and both of its payload types are declared together.
pub trait Method {
    const NAME: &'static str;
    type Params: Serialize + DeserializeOwned + Send + 'static;
    type Result: Serialize + DeserializeOwned + Clone + Send + 'static;
}

macro_rules! method {
    ($(#[$doc:meta])* $marker:ident = $name:literal, $params:ty => $result:ty) => {
        $(#[$doc])*
        pub enum $marker {}
        impl Method for $marker {
            const NAME: &'static str = $name;
            type Params = $params;
            type Result = $result;
        }
    };
}

/// Params of methods that take none. Absent params are treated as `{}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

/// Name of the subscription method, its notifications and its unsubscribe method.
pub const EVENTS_SUBSCRIBE: &str = "events.subscribe";
pub const EVENTS_NOTIFICATION: &str = "events.event";
pub const EVENTS_UNSUBSCRIBE: &str = "events.unsubscribe";

// ---------------------------------------------------------------------------------------------
// daemon.*

method!(
    /// First call of every client: compare protocol versions.
    Hello = "daemon.hello", HelloParams => HelloResult
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelloParams {
    pub protocol_version: u32,
    pub client_version: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HelloResult {
    pub protocol_version: u32,
    pub daemon_version: String,
    pub pid: u32,
}

method!(
    /// Health and inventory of the running daemon.
    DaemonStatus = "daemon.status", NoParams => DaemonStatusResult
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DaemonStatusResult {
    pub daemon_version: String,
    pub protocol_version: u32,
    pub pid: u32,
    pub uptime_seconds: f64,
    pub socket_path: String,
    /// True when systemd handed the daemon its socket.
    pub socket_activated: bool,
    pub state_dir: String,
    pub log_file: String,
    pub workspaces: Vec<WorkspaceInfo>,
    pub jobs: JobCounts,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobCounts {
    pub queued: u64,
    pub running: u64,
    pub finished: u64,
}

method!(
    /// Stop accepting work, finish in-flight calls, flush state, remove the socket and exit 0.
    DaemonShutdown = "daemon.shutdown", NoParams => ShutdownResult
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShutdownResult {
    pub stopping: bool,
}

// ---------------------------------------------------------------------------------------------
// workspace.*

method!(
    /// Create (or complete) the `.scafld/` layout of a workspace and register it. Idempotent.
    WorkspaceInit = "workspace.init", WorkspaceRootParams => WorkspaceInitResult
);

method!(
    /// Register an existing workspace by root and return its identity.
    WorkspaceOpen = "workspace.open", WorkspaceRootParams => WorkspaceInfo
);

method!(
    /// Every workspace the daemon knows.
    WorkspaceList = "workspace.list", NoParams => WorkspaceListResult
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceRootParams {
    /// Absolute path of the directory that holds (or will hold) `.scafld/`.
    pub root: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkspaceInfo {
    pub workspace_id: String,
    pub root: String,
    /// Whether the daemon currently holds the workspace open (index and watcher live).
    pub open: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkspaceInitResult {
    pub workspace: WorkspaceInfo,
    /// Workspace-relative paths created by this call.
    pub created: Vec<String>,
    /// Paths whose content this call changed (for example `.gitignore`).
    pub updated: Vec<String>,
    /// Paths that already existed and were left untouched.
    pub skipped: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkspaceListResult {
    pub workspaces: Vec<WorkspaceInfo>,
}

// ---------------------------------------------------------------------------------------------
// task.*: specs. Every task method names its workspace by root and its task by id.

/// Params of task methods that need nothing but the task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskParams {
    pub root: String,
    pub task_id: String,
}

method!(
    /// Create a draft spec from the template. Never overwrites.
    TaskPlan = "task.plan", PlanParams => PlanResult
);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanParams {
    pub root: String,
    pub task_id: String,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub summary: Option<String>,
    #[serde(default)]
    pub size: Option<String>,
    #[serde(default)]
    pub risk: Option<String>,
    #[serde(default)]
    pub command: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanResult {
    pub task_id: String,
    /// Workspace-relative path of the new spec.
    pub path: String,
    pub status: String,
    /// What `validate` reports for the fresh draft (its TODO placeholders).
    pub diagnostics: Vec<Diagnostic>,
}

/// A problem found in a spec; `line` is 1-based, 0 for the file as a whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    pub line: usize,
    /// `error` or `warning`.
    pub severity: String,
    pub message: String,
}

method!(
    /// Full structure of a spec and every diagnostic.
    TaskValidate = "task.validate", TaskParams => ValidateResult
);

method!(
    /// Every spec's diagnostics at once (archive included): how an existing workspace reads.
    TaskValidateAll = "task.validate_all", WorkspaceRootParams => ValidateAllResult
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValidateAllResult {
    /// One entry per spec file, ordered by path.
    pub specs: Vec<SpecDiagnostics>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpecDiagnostics {
    pub task_id: String,
    pub path: String,
    /// Empty when the spec is too broken to say.
    pub status: String,
    pub valid: bool,
    /// Errors and warnings, by line.
    pub diagnostics: Vec<Diagnostic>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValidateResult {
    pub task_id: String,
    pub path: String,
    pub valid: bool,
    pub diagnostics: Vec<Diagnostic>,
    pub title: String,
    pub status: String,
    pub phases: Vec<PhaseStructure>,
    /// Task-level validation criteria (final acceptance).
    pub criteria: Vec<CriterionStructure>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseStructure {
    pub id: String,
    pub name: String,
    pub objective: String,
    pub criteria: Vec<CriterionStructure>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CriterionStructure {
    pub id: String,
    /// The type word of the criterion line.
    pub kind: String,
    pub title: String,
    pub expected_kind: String,
    pub command: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cwd: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
    pub line: usize,
}

method!(
    /// Lifecycle and progress of one task, and the one command it should see next.
    TaskStatus = "task.status", TaskParams => StatusResult
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusResult {
    pub task_id: String,
    /// What the task needs next (blockers first), as the original's `next_action`.
    pub next_action: NextAction,
    /// Files in the task's scope that changed since the stale evidence ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stale_changes: Vec<String>,
    pub title: String,
    pub status: String,
    pub harden_status: String,
    pub path: String,
    pub current_phase: String,
    /// The next step (`approve`, `build`, `repair`, `review`, ...).
    pub next: String,
    /// The one allowed follow-up command.
    pub next_command: String,
    pub review_gate: String,
    pub phases: Vec<PhaseProgress>,
    pub criteria: Vec<CriterionState>,
    pub counts: Counts,
    pub valid: bool,
    /// Errors that make the spec unusable until fixed (empty when valid).
    pub errors: Vec<Diagnostic>,
    /// The latest accepted review: verdict, provider, summary and findings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseProgress {
    pub id: String,
    pub name: String,
    pub status: String,
    pub criteria_total: usize,
    pub criteria_passed: usize,
}

/// Who acts next on a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NextRole {
    /// The implementing agent.
    Agent,
    /// An independent reviewer.
    Reviewer,
    /// A person: approvals, manual evidence, review decisions.
    Human,
    /// Nobody: the task is finished.
    None,
}

/// What a task needs next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NextStep {
    FixSpec,
    Harden,
    FinishHarden,
    Approve,
    AmendContract,
    Implement,
    RerunStale,
    Repair,
    RecordManualEvidence,
    Review,
    WaitForReview,
    RetryReview,
    DecideReview,
    Complete,
    Done,
    Inspect,
}

/// The next action: who, what, the command (`none` when there is nothing to run), and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NextAction {
    pub role: NextRole,
    pub action: NextStep,
    pub command: String,
    pub reason: String,
}

/// Freshness of a criterion's recorded result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Freshness {
    /// Nothing recorded yet.
    #[default]
    None,
    /// Bound to the current definition and the current files.
    Current,
    /// The definition or the files changed since it ran (or it was never bound to them).
    Stale,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CriterionState {
    pub id: String,
    /// Empty for task-level criteria.
    pub phase_id: String,
    pub title: String,
    pub command: String,
    pub expected_kind: String,
    /// `pending`, `pass`, `fail` or `invalid`.
    pub status: String,
    pub evidence: String,
    /// Whether the recorded result still speaks for the current definition and files.
    pub freshness: Freshness,
    /// Why the result is stale.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stale_reason: String,
    /// From the latest recorded run, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub output_excerpt: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub diagnostic: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    pub phases_total: usize,
    pub phases_completed: usize,
    pub criteria_total: usize,
    pub criteria_passed: usize,
    pub criteria_failed: usize,
    pub criteria_pending: usize,
}

method!(
    /// Every task of a workspace, from the daemon's index.
    TaskList = "task.list", ListParams => ListResult
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    pub root: String,
    /// Only tasks with this lifecycle status.
    #[serde(default)]
    pub status: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListResult {
    pub tasks: Vec<TaskSummary>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskSummary {
    pub task_id: String,
    /// Empty when the spec is too broken to say.
    pub status: String,
    pub title: String,
    pub path: String,
    pub counts: Counts,
    /// The first error of a broken spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

method!(
    /// Open a harden round (or with `mark_passed`, check and close the latest one).
    TaskHarden = "task.harden", HardenParams => HardenResult
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HardenParams {
    pub root: String,
    pub task_id: String,
    #[serde(default)]
    pub mark_passed: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HardenResult {
    pub task_id: String,
    pub path: String,
    pub harden_status: String,
    pub round_id: String,
    pub marked_passed: bool,
    pub next_command: String,
    /// The harden prompt (when a round was opened).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prompt: String,
}

method!(
    /// The compact model-facing summary of a task.
    TaskHandoff = "task.handoff", TaskParams => HandoffResult
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandoffResult {
    pub task_id: String,
    pub markdown: String,
}

method!(
    /// Counts by status and simple quality figures for a workspace.
    TaskReport = "task.report", WorkspaceRootParams => ReportResult
);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReportResult {
    pub total: usize,
    pub by_status: std::collections::BTreeMap<String, usize>,
    pub invalid_specs: usize,
    pub harden_passed: usize,
    pub phases_total: usize,
    pub phases_completed: usize,
    pub criteria_total: usize,
    pub criteria_passed: usize,
    pub criteria_failed: usize,
    /// criteria_passed / criteria_total (0 when there are none).
    pub criteria_pass_rate: f64,
}

method!(
    /// Rebuild the runner-owned sections of a spec (and its folder) from the runner's record.
    TaskReconcile = "task.reconcile", TaskParams => ReconcileResult
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReconcileResult {
    pub task_id: String,
    pub path: String,
    /// Whether the file changed.
    pub changed: bool,
    /// Whether the file moved to the folder its status belongs in.
    pub moved: bool,
}

// ---------------------------------------------------------------------------------------------
// Execution: approve, build, fail, cancel, the session ledger and jobs.

/// The calling client's working directory and environment: the base environment of every
/// process the daemon runs for this call (never the daemon's own).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallerContext {
    pub cwd: String,
    pub env: std::collections::BTreeMap<String, String>,
    /// Path of the calling `scafld` executable (review providers start its MCP server).
    #[serde(default)]
    pub client_exe: String,
    /// Who is calling, so that "the latest session" means the latest this caller started:
    /// the host agent's session id when there is one, else the terminal (see the client's
    /// `caller_identity`). Empty when unknown.
    #[serde(default)]
    pub identity: String,
}

method!(
    /// Approve a draft: validate, check hardening (or record the override reason), capture the
    /// git baseline, move the spec to approved/.
    TaskApprove = "task.approve", ApproveParams => ApproveResult
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApproveParams {
    pub root: String,
    pub task_id: String,
    /// Required to approve without a passed harden round, and to amend; recorded in the ledger.
    #[serde(default)]
    pub reason: Option<String>,
    /// Re-pin the contract of an approved task whose acceptance criteria changed.
    #[serde(default)]
    pub amend: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApproveResult {
    pub task_id: String,
    pub status: String,
    pub path: String,
    /// HEAD commit at approval, if the repository has one.
    pub head: Option<String>,
    /// Dirty and untracked paths recorded in the baseline.
    pub baseline_paths: usize,
    pub harden_override: bool,
    pub next_command: String,
}

method!(
    /// One step of the build loop. Opening a phase answers at once; running acceptance starts
    /// (or attaches to) a job whose id is returned.
    TaskBuild = "task.build", BuildParams => BuildResult
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildParams {
    pub root: String,
    pub task_id: String,
    pub caller: CallerContext,
    /// Record a person's evidence for a `manual` criterion instead of running a step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manual: Option<ManualEvidence>,
}

/// `build --criterion ID --disposition pass|fail --reason R [--evidence-digest D] [--actor A]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManualEvidence {
    pub criterion_id: String,
    pub disposition: Disposition,
    pub reason: String,
    /// sha256 of an artefact the person checked (a screenshot, a signed checklist).
    #[serde(default)]
    pub evidence_digest: Option<String>,
    /// Who decided (default: the caller's user name).
    #[serde(default)]
    pub actor: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Disposition {
    Pass,
    Fail,
}

impl Disposition {
    pub fn as_str(self) -> &'static str {
        match self {
            Disposition::Pass => "pass",
            Disposition::Fail => "fail",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BuildResult {
    pub task_id: String,
    /// The acceptance job, when this step runs commands.
    #[serde(default)]
    pub job_id: Option<String>,
    /// True when a build of this task was already running and this call joined it.
    #[serde(default)]
    pub attached: bool,
    /// The finished step, when it needed no job.
    #[serde(default)]
    pub outcome: Option<BuildOutcome>,
}

/// What one build step did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BuildOutcome {
    pub task_id: String,
    /// Lifecycle status after the step: active, blocked or review.
    pub status: String,
    /// The phase the step ran or opened (`final` for task-level acceptance).
    pub phase: String,
    pub passed: usize,
    pub failed: usize,
    pub criteria: Vec<CriterionResult>,
    pub next_command: String,
    pub message: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CriterionResult {
    pub criterion_id: String,
    pub phase_id: String,
    pub command: String,
    pub status: String,
    pub reason: String,
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
    pub output_excerpt: String,
    pub diagnostic: String,
}

method!(
    /// Archive a task as failed, with the reason recorded.
    TaskFail = "task.fail", ReasonParams => ArchiveResult
);

method!(
    /// Archive a task as cancelled, with the reason recorded.
    TaskCancel = "task.cancel", ReasonParams => ArchiveResult
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReasonParams {
    pub root: String,
    pub task_id: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArchiveResult {
    pub task_id: String,
    pub status: String,
    pub path: String,
}

method!(
    /// The task's session ledger; with `export`, also written as JSON to that path (relative
    /// paths are under the workspace; default `.scafld/runs/<task-id>/ledger.json`).
    TaskSession = "task.session", SessionParams => SessionResult
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionParams {
    pub root: String,
    pub task_id: String,
    /// Write the ledger as JSON here: an absolute path, or empty for the default
    /// `.scafld/runs/<task-id>/ledger.json`.
    #[serde(default)]
    pub export: Option<String>,
    /// Replace an existing file at `export`.
    #[serde(default)]
    pub force: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionResult {
    pub task_id: String,
    pub entries: Vec<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exported: Option<String>,
}

method!(
    /// Jobs of one workspace (or all, without a root), newest first.
    JobList = "job.list", JobListParams => JobListResult
);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobListParams {
    #[serde(default)]
    pub root: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobListResult {
    pub jobs: Vec<JobInfo>,
}

method!(
    /// One job's current record.
    JobStatus = "job.status", JobParams => JobInfo
);

method!(
    /// Wait until the job is finished or `timeout_seconds` pass; either way return its record.
    JobWait = "job.wait", JobWaitParams => JobInfo
);

method!(
    /// Kill the job's process group and record it cancelled.
    JobCancel = "job.cancel", JobParams => JobInfo
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobParams {
    pub job_id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobWaitParams {
    pub job_id: String,
    pub timeout_seconds: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobInfo {
    pub job_id: String,
    /// `acceptance`.
    pub kind: String,
    pub workspace_id: String,
    pub root: String,
    pub task_id: String,
    /// queued, running, succeeded, failed, timed_out, cancelled or abandoned.
    pub state: String,
    pub finished: bool,
    pub owner: String,
    pub attempt: u32,
    pub created_at: String,
    #[serde(default)]
    pub started_at: Option<String>,
    #[serde(default)]
    pub finished_at: Option<String>,
    #[serde(default)]
    pub last_heartbeat: Option<String>,
    /// What the job is doing now (the criterion being run).
    #[serde(default)]
    pub activity: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub outcome: Option<BuildOutcome>,
    /// The error kind of a job that ended without a result (for example `review_failed`).
    #[serde(default)]
    pub error_kind: Option<String>,
    /// For a reviewer job: its reviewer and review session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reviewer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// Review gate and completion.

method!(
    /// Run the review gate of a task in `review` status (or record an audited human override).
    TaskReview = "task.review", ReviewParams => ReviewResult
);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewParams {
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
    /// discover or verify (default: by review.dossier.rerun_policy).
    #[serde(default)]
    pub mode: Option<String>,
    /// Return the packet a provider would receive; run nothing, record nothing.
    #[serde(default)]
    pub print_context: bool,
    /// Review again even though nothing changed since a failed review.
    #[serde(default)]
    pub force: bool,
    /// Several reviewers, one job each (default: review.external.reviewers, else `provider`).
    #[serde(default)]
    pub reviewers: Vec<String>,
    /// auto (the verdict stands) or manual (it awaits `review accept|reject`).
    #[serde(default)]
    pub approval: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReviewResult {
    pub task_id: String,
    /// The review job, when the review runs a provider (wait for it with `job.wait`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// pass, fail, or `not_run` for --print-context.
    pub verdict: String,
    pub mode: String,
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
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub gate: String,
}

method!(
    /// Archive a task whose latest review passed from a provider that may complete it.
    TaskComplete = "task.complete", TaskParams => CompleteResult
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompleteResult {
    pub task_id: String,
    pub status: String,
    pub path: String,
    pub provider: String,
    pub review_entry: String,
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
    /// Set when the session was decided without spawning (an empty diff passes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<String>,
}

method!(
    /// Review a plain git range (no task spec) with one job per available reviewer.
    ReviewDiff = "review.diff", DiffReviewParams => SpawnResult
);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiffReviewParams {
    pub root: String,
    /// `BASE..HEAD`.
    pub range: String,
    /// The issue description injected into the reviewers' prompt (the context file's text).
    #[serde(default)]
    pub context: Option<String>,
    /// Reviewers to spawn (default: review.external.reviewers, else review.external.provider).
    #[serde(default)]
    pub reviewers: Vec<String>,
    #[serde(default)]
    pub provider_command: Option<String>,
    #[serde(default)]
    pub codex_reasoning: Option<String>,
    pub caller: CallerContext,
}

method!(
    /// Wait (bounded) for a review session and return its consensus.
    ReviewWait = "review.wait", ReviewWaitParams => WaitResult
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
    pub status: String,
    pub session_key: String,
    /// pass, fail, needs_work, no_reviewers, parse_error, timeout, internal_error or pending:
    /// what the exit code is derived from.
    pub outcome: String,
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
    /// The task gate state after the session: pass, fail, awaiting_approval or retry.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub gate: String,
    /// For a task review: the gate's result as `scafld review <task>` prints it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<ReviewResult>,
    /// For a template review: its result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_result: Option<TemplateReviewResult>,
    /// When no session key was given: why this session was chosen.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub chosen: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Consensus {
    /// PASS, FAIL, NEEDS_WORK or no_reviewers (null while pending).
    pub verdict: Option<String>,
    /// The review round of this task or range (1 for the first).
    pub iteration: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReviewerReport {
    /// PASS, FAIL or NEEDS_WORK; null when the reviewer gave no verdict.
    pub verdict: Option<String>,
    pub summary: String,
    pub issues: Vec<ReviewIssue>,
    pub error: Option<String>,
    pub job_id: String,
    /// queued, running, succeeded, failed, timed_out, cancelled or abandoned.
    pub state: String,
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
    ReviewStatus = "review.status", ReviewStatusParams => ReviewStatusResult
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

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReviewStatusResult {
    pub session_key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub task_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub range: String,
    pub iteration: u32,
    /// auto or manual.
    pub approval: String,
    /// running, resolved, awaiting_approval or decided.
    pub state: String,
    pub files_total: usize,
    pub reviewers: Vec<ReviewerProgress>,
    pub report_path: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReviewerProgress {
    pub reviewer: String,
    pub job_id: String,
    pub state: String,
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
    pub verdict: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

method!(
    /// Record a human decision on a review that awaits approval (`review.approval: manual`).
    ReviewDecide = "review.decide", DecideParams => DecideResult
);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecideParams {
    pub root: String,
    pub task_id: String,
    /// accept or reject.
    pub decision: String,
    pub reason: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DecideResult {
    pub task_id: String,
    pub decision: String,
    /// The gate verdict that now stands: pass or fail.
    pub verdict: String,
    pub next_command: String,
}

// ---------------------------------------------------------------------------------------------
// worker.*: reviewer workers claim review jobs with a lease.

method!(
    /// Claim a queued review job (waiting at most `timeout_seconds`); null when none came.
    WorkerClaim = "worker.claim", ClaimParams => Option<Claim>
);

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
    /// Lease length (default: review.workers.lease_seconds of the job's workspace).
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
    pub state: String,
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
    pub report_path: String,
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
    #[serde(default)]
    pub answer_file: Option<String>,
    #[serde(default)]
    pub timed_out: bool,
    /// The tail of stderr, for the error message.
    #[serde(default)]
    pub stderr_tail: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerSubmitResult {
    pub job_id: String,
    pub accepted: bool,
    pub verdict: String,
    /// Why the submission was refused or the answer did not count.
    pub problems: Vec<String>,
}

method!(
    /// Give a claimed job back to the queue (its checkpoint is kept).
    WorkerRelease = "worker.release", LeaseParams => LeaseResult
);

// ---------------------------------------------------------------------------------------------
// Review templates (arch, tasks, code, and user templates): standalone reviews and gate passes.

/// The result of a template review (`schemas/review_result.schema.json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateReviewResult {
    /// PASS, CONCERNS, FAIL, or UNKNOWN when no answer could be parsed (never a pass).
    pub verdict: String,
    #[serde(default)]
    pub summary: String,
    pub findings: Vec<TemplateFinding>,
    /// The reviewers' answers as given, kept whole.
    pub raw_output: String,
    pub template: String,
    pub inputs: std::collections::BTreeMap<String, String>,
    pub timestamp: String,
    pub provider: String,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub session_key: String,
    /// Whether the verdict or any finding is FAIL.
    #[serde(default)]
    pub has_failures: bool,
    /// How many findings are CONCERN.
    #[serde(default)]
    pub concern_count: usize,
}

impl TemplateReviewResult {
    /// The result with its derived counts (`has_failures`, `concern_count`) filled in.
    pub fn counted(mut self) -> TemplateReviewResult {
        self.has_failures = self.verdict == "FAIL" || self.findings.iter().any(|f| f.severity == "FAIL");
        self.concern_count = self.findings.iter().filter(|f| f.severity == "CONCERN").count();
        self
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateFinding {
    /// PASS, CONCERN or FAIL.
    pub severity: String,
    pub title: String,
    pub description: String,
    /// A file (and line) reference, e.g. `src/lib.rs:12`.
    #[serde(default)]
    pub file: Option<String>,
    /// Which reviewer found it, when several reviewed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reviewer: Option<String>,
}

method!(
    /// Every template with its description and source; broken user templates with their error.
    ReviewTemplates = "review.templates", WorkspaceRootParams => TemplateListResult
);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TemplateListResult {
    pub templates: Vec<TemplateInfo>,
    /// User template files that failed to load (the others still work).
    pub errors: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TemplateInfo {
    pub name: String,
    pub description: String,
    /// `built-in`, or the file it came from.
    pub source: String,
    /// Set when a user file overrides the built-in of the same name.
    #[serde(default)]
    pub overrides_builtin: bool,
    pub required_inputs: Vec<String>,
    pub optional_inputs: Vec<String>,
}

method!(
    /// Start a template review (one job per reviewer); optionally wait for its result.
    ReviewTemplate = "review.template", TemplateReviewParams => TemplateReviewStarted
);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateReviewParams {
    pub root: String,
    pub template: String,
    #[serde(default)]
    pub inputs: std::collections::BTreeMap<String, String>,
    /// Default: review.external.reviewers, else review.external.provider.
    #[serde(default)]
    pub reviewers: Vec<String>,
    #[serde(default)]
    pub provider_command: Option<String>,
    /// The directory the reviewer works in (default: the caller's).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Wait this long for the result (0: return at once).
    #[serde(default)]
    pub wait_seconds: f64,
    pub caller: CallerContext,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TemplateReviewStarted {
    pub session: SpawnResult,
    /// Present once the review has settled.
    #[serde(default)]
    pub result: Option<TemplateReviewResult>,
}

method!(
    /// The result of a template review session, waiting at most `timeout_seconds`.
    ReviewResultOf = "review.result", ReviewWaitParams => Option<TemplateReviewResult>
);

method!(
    /// Past template reviews of the workspace, newest first.
    ReviewHistory = "review.history", WorkspaceRootParams => ReviewHistoryResult
);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReviewHistoryResult {
    pub reviews: Vec<TemplateReviewResult>,
}
