//! `task.*` and `job.*`: specs (plan, validate, harden, status, handoff, reconcile) and their
//! execution (approve, build, fail, cancel, the session ledger, jobs).

use serde::{Deserialize, Serialize};

use super::*;

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
    pub status: Status,
    /// What `validate` reports for the fresh draft (its TODO placeholders).
    pub diagnostics: Vec<Diagnostic>,
    /// What the draft needs next, as `status` says it (`scafld validate` while it has errors).
    pub next_action: NextAction,
}

/// A problem found in a spec; `line` is 1-based, 0 for the file as a whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    pub line: usize,
    pub severity: Severity,
    pub message: String,
}

method!(
    /// Full structure of a spec and every diagnostic.
    read_only TaskValidate = "task.validate", TaskParams => ValidateResult
);

method!(
    /// Check a spec like `task.validate`, but on the given text (an editor's unsaved buffer)
    /// when there is one. Writes nothing; the spec need not exist on disk yet.
    no_work TaskCheck = "task.check", CheckParams => ValidateResult
);

/// The largest `text` `task.check` takes (the daemon's spec read limit).
pub const MAX_CHECK_TEXT_BYTES: usize = 8 << 20;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckParams {
    pub root: String,
    pub task_id: String,
    /// The spec's text; absent: the file on disk, as `task.validate` reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

method!(
    /// Every spec's diagnostics at once (archive included): how an existing workspace reads.
    read_only TaskValidateAll = "task.validate_all", WorkspaceRootParams => ValidateAllResult
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValidateAllResult {
    /// One entry per spec file, ordered by path.
    pub specs: Vec<SpecDiagnostics>,
    /// Each open task whose spec file is gone while its ledger keeps it, by task id: `path`
    /// where the file belongs, `status` the ledger's, never `valid`, its one diagnostic what to
    /// do. `validate --all` fails while any is (as `validate <task>` of it does).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<SpecDiagnostics>,
    /// What under the spec folders could not be read, each with what to do (a folder without
    /// permission, ...): specs there are in no entry, so `validate --all` fails while any is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unlisted: Vec<String>,
    /// As [`StatusResult::warnings`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
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
    /// As [`StatusResult::warnings`] (none for `task.check`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseStructure {
    pub id: String,
    pub name: String,
    pub objective: String,
    pub criteria: Vec<CriterionStructure>,
    /// 1-based line of the phase heading (0 when unknown: an older daemon).
    #[serde(default)]
    pub line: usize,
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
    read_only TaskStatus = "task.status", StatusParams => StatusResult
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusParams {
    pub root: String,
    pub task_id: String,
    /// How much of the spec file the answer carries as `spec_source` (reading and hashing it
    /// is work only `status --json` wants).
    #[serde(default)]
    pub source: SourceDetail,
}

impl StatusParams {
    /// Status without the spec file's source: what every caller but `status --json` wants.
    pub fn plain(task: TaskParams) -> Self {
        Self { root: task.root, task_id: task.task_id, source: SourceDetail::Omit }
    }
}

/// What `spec_source` a status answer carries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceDetail {
    /// None: the file is not read again.
    #[default]
    Omit,
    /// Its path, sha256 and size, the text left out (`status --json --no-context`).
    Digest,
    /// All of it, the text included (`status --json`).
    Text,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusResult {
    pub task_id: String,
    /// What the task needs next (blockers first), as the original's `next_action`.
    pub next_action: NextAction,
    /// Files in the task's scope that changed since the stale evidence ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stale_changes: Vec<String>,
    pub title: String,
    /// As the spec's front matter says (a Python scafld name included).
    pub status: String,
    pub harden_status: HardenStatus,
    /// The spec file, relative to `root`.
    pub path: String,
    /// The workspace's folder (absolute): what `path` is relative to, whichever folder the
    /// command was run from.
    #[serde(default)]
    pub root: String,
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
    /// The latest accepted review: verdict, provider, summary and findings (`entry`, its
    /// ledger entry); `superseded_by`, when present, the later entry (a build step, evidence,
    /// an approval) after which it no longer stands: `review_gate` is then `not_started` and
    /// its verdict is history, not the gate's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<serde_json::Value>,
    /// The spec file is gone (removed, or moved out of `.scafld/specs`) while the ledger keeps
    /// the task: this answer is the ledger's alone (`path` and `title` empty; the phases and
    /// criteria it has records of). While the task is open, `errors` and `next_action` say
    /// where to put the file back.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub spec_missing: bool,
    /// The workspace's configuration does not read (`.scafld/config.yaml` or
    /// `config.local.yaml`): the commands that read it (build, review, harden, finalize)
    /// refuse until it is fixed, so `next_action` is fixing it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_error: Option<ConfigProblem>,
    /// What happened to the workspace that the caller must hear of, once (an id file put back
    /// by this call or an earlier one that no command said yet); the CLI shows each on stderr.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The spec file as read for this answer (the original tool's `spec_source`); absent when
    /// there is none to read (`spec_missing`) or it cannot be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_source: Option<SpecSource>,
}

/// A spec file's bytes as one answer read them: where, their digest and size, and the text
/// (left out with `status --no-context`, the digest standing for it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecSource {
    /// Relative to the workspace's folder, as `path`.
    pub path: String,
    /// sha256 of the file's bytes, hex.
    pub sha256: String,
    pub bytes: u64,
    /// The file's text (absent when left out, or when it is not UTF-8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub markdown: Option<String>,
    /// The text was left out on purpose (`--no-context`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub markdown_omitted: bool,
}

/// A configuration file that does not read: which, why, and what to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigProblem {
    /// Workspace-relative.
    pub file: String,
    pub message: String,
    pub hint: String,
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
    /// A workspace configuration file does not read: fix it (no command does).
    FixConfig,
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
    /// How long the latest recorded run took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub output_excerpt: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub diagnostic: String,
    /// Why the latest run's whole record could not be written.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub diagnostic_error: String,
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
    read_only TaskList = "task.list", ListParams => ListResult
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    pub root: String,
    /// Only tasks with this lifecycle status.
    #[serde(default)]
    pub status: Option<String>,
    /// Each task's phase and criterion counts too (they are more than half of the reply).
    #[serde(default)]
    pub counts: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListResult {
    /// As [`StatusResult::warnings`]; first, so a client that passes the reply on unparsed
    /// sees them at its start.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    pub tasks: Vec<TaskSummary>,
    /// The workspace's folder (absolute): what each task's `path` is relative to.
    #[serde(default)]
    pub root: String,
    /// The checkout the commands that write under `.scafld` run from, when this checkout's
    /// `.scafld` is a link to it (a git worktree sharing the main checkout's): the
    /// `scafld reconcile <task>` a disagreeing file needs is run there
    /// (`cli::run_from`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writes_from: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskSummary {
    pub task_id: String,
    /// The ledger's status when the task has a ledger (the truth, as `task.status` says),
    /// else the spec's front matter's. Empty when the spec is too broken to say.
    pub status: String,
    pub title: String,
    /// Empty for a task whose spec file is missing (`spec_missing`).
    pub path: String,
    /// Only when the call asked for them (`ListParams::counts`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counts: Option<Counts>,
    /// The first error of a broken spec (or the note of a missing one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the spec file's front matter says when it differs from the ledger's `status`: a
    /// hand edit to a runner-owned line, which `scafld reconcile <task>` undoes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_status: Option<String>,
    /// What the spec file's phase and criterion states count when that differs from what the
    /// ledger's count (`counts` follows the ledger): a hand edit to a runner-owned line, or a
    /// projection not written yet, which `scafld reconcile <task>` puts right.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_counts: Option<Counts>,
    /// An open task (as its ledger says) whose spec file is gone: removed, or moved out of
    /// `.scafld/specs`. Finished tasks whose files were cleared away are not listed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub spec_missing: bool,
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
    /// Delegate the round to a read-only provider: auto, codex, claude, gemini, command or
    /// local (chosen like a reviewer).
    #[serde(default)]
    pub provider: Option<String>,
    /// The command line of a `command` provider (the packet on stdin, one HardenDossier on stdout).
    #[serde(default)]
    pub provider_command: Option<String>,
    #[serde(default)]
    pub caller: Option<CallerContext>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HardenResult {
    pub task_id: String,
    pub path: String,
    pub harden_status: HardenStatus,
    pub round_id: String,
    pub marked_passed: bool,
    pub next_command: String,
    /// The harden prompt (when a round was opened).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prompt: String,
    /// Why a delegated round did not pass (or could not be used).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
    /// What a delegated round's provider raised for the author (advisories, blockers,
    /// questions, recommendations), in its words, whatever the round came to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub raised: Vec<HardenRaised>,
}

/// One observation of a delegated harden's provider that asks the author for something.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HardenRaised {
    /// The round's check it is written under (`Command audit`).
    pub check: String,
    /// `clean`, `advisory`, `blocks` or `n/a`, as the provider said.
    pub result: String,
    pub anchor: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub question: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub recommended: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub if_unanswered: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub default: String,
}

method!(
    /// The compact model-facing summary of a task.
    read_only TaskHandoff = "task.handoff", TaskParams => HandoffResult
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandoffResult {
    pub task_id: String,
    pub markdown: String,
}

method!(
    /// Counts by status and simple quality figures for a workspace.
    read_only TaskReport = "task.report", WorkspaceRootParams => ReportResult
);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReportResult {
    /// The tasks `task.list` lists: every spec, and the open tasks whose spec file is missing.
    pub total: usize,
    /// By the ledger's status where the task has a ledger, else the front matter's.
    pub by_status: std::collections::BTreeMap<String, usize>,
    pub invalid_specs: usize,
    pub harden_passed: usize,
    /// Phases and criteria as each task's ledger records them where it has one, else as its
    /// spec file says.
    pub phases_total: usize,
    pub phases_completed: usize,
    pub criteria_total: usize,
    pub criteria_passed: usize,
    pub criteria_failed: usize,
    /// criteria_passed / criteria_total (0 when there are none).
    pub criteria_pass_rate: f64,
    /// Tasks whose spec file's front matter says another status than their ledger (a hand edit
    /// `scafld reconcile <task>` undoes), by id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub status_disagrees: Vec<String>,
    /// Tasks whose spec file's phase or criterion states count otherwise than their ledger's
    /// (counted here as the ledger says; `scafld reconcile <task>` writes them), by id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub counts_disagree: Vec<String>,
    /// Open tasks whose spec file is missing (their ledger keeps them), by id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub specs_missing: Vec<String>,
    /// What under the spec folders could not be read (as [`ValidateAllResult::unlisted`]):
    /// specs there are not counted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unlisted: Vec<String>,
    /// The checkout `scafld reconcile <task>` runs from when this checkout's `.scafld` is a
    /// link to it (as [`ListResult::writes_from`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writes_from: Option<String>,
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
    /// A second copy of the spec put aside first: an interrupted move's leftover, differing
    /// from the spec only in runner-owned lines (a copy with anyone's text in it stays).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved_aside: Option<MovedAside>,
}

/// A file the daemon moved out of the spec folders (never deleted): from where, to where
/// (workspace-relative).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MovedAside {
    pub from: String,
    pub to: String,
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
    /// The variables `env` cannot carry, a name or a value that is not UTF-8 (JSON text is
    /// UTF-8), as their bytes: set exactly so for the commands run for the call, after the
    /// caller's others and before what scafld sets itself. Sent only when there is one, so a
    /// client without it and a daemon reading a call without it work as before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_bytes: Vec<EnvBytes>,
    /// The caller's umask (its permission bits): the commands run for the call create files
    /// under it, as from the caller's shell, whatever umask the daemon was started under.
    /// Absent (an older client): the daemon's inherited one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub umask: Option<u32>,
}

/// One environment variable as bytes (each a JSON array of numbers 0-255): its name and its
/// value, neither necessarily UTF-8.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvBytes {
    pub name: Vec<u8>,
    pub value: Vec<u8>,
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
    pub status: Status,
    pub path: String,
    /// HEAD commit at approval, if the repository has one.
    pub head: Option<String>,
    /// Dirty and untracked paths recorded in the baseline.
    pub baseline_paths: usize,
    pub harden_override: bool,
    pub next_command: String,
    /// What to know about the scope's entries: a pattern taken as its folder, a line number
    /// dropped, a path with nothing there yet (its evidence bound to its absence).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scope_warnings: Vec<String>,
    /// Why the spec file was left as it was, when it was (the ledger holds the approval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
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
    /// Wait up to this many seconds for the step's job to finish and answer with its outcome
    /// (saves a short step's `job.wait` round trip); without it, the job's id comes back at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_seconds: Option<f64>,
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BuildResult {
    pub task_id: String,
    /// The acceptance job, when this step runs commands.
    #[serde(default)]
    pub job_id: Option<String>,
    /// True when a build of this task was already running and this call joined it.
    #[serde(default)]
    pub attached: bool,
    /// The finished step: when it needed no job, or its job finished within `wait_seconds`.
    #[serde(default)]
    pub outcome: Option<BuildOutcome>,
    /// As [`StatusResult::warnings`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// What one build step did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BuildOutcome {
    pub task_id: String,
    /// The workspace's folder (absolute): what each criterion's `diagnostic` is relative to,
    /// whichever folder the command was run from (as [`StatusResult::root`]; empty in an
    /// outcome recorded by an older scafld).
    #[serde(default)]
    pub root: String,
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
    pub status: CriterionStatus,
    pub reason: String,
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
    pub output_excerpt: String,
    /// The file holding the whole record, relative to the outcome's `root` (empty when none
    /// was written).
    pub diagnostic: String,
    /// Why the whole record could not be written (`diagnostic` is then empty).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub diagnostic_error: String,
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
    pub status: Status,
    /// Where the archived spec is (empty when it is missing).
    pub path: String,
    /// Why the spec file was left as it was, when it was (the ledger holds the end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The spec file is missing: the end is recorded in the ledger alone, and nothing was
    /// written in the file's place (`reconcile` archives the file once it is put back).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub spec_missing: bool,
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
    /// The ledger's entries; no key at all when it was exported (the file holds them, and a
    /// ledger too large for one reply still exports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entries: Option<Vec<serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exported: Option<String>,
    /// How many entries the export wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exported_entries: Option<usize>,
}
