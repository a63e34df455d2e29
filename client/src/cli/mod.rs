//! The `scafld` command line: argument grammar, command dispatch and output.

pub mod daemon_control;
pub mod exit;
pub mod input;
pub mod output;
pub mod runnable;
pub mod workspace;

mod commands;
mod completion;

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use scafld_client::Paths;
use scafld_protocol::vocab::{Approval, Disposition, ReviewMode, Vocabulary};

use output::{CliError, Output};

/// scafld: a spec-driven workflow for AI coding agents, served by the scafldd daemon.
#[derive(Parser, Debug)]
#[command(name = "scafld", version, propagate_version = true, disable_help_subcommand = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Args, Debug, Clone)]
pub struct GlobalArgs {
    /// Print one JSON envelope instead of human output.
    #[arg(long, global = true)]
    pub json: bool,
    /// Workspace root (default: $SCAFLD_ROOT, else the nearest parent holding .scafld/).
    #[arg(long, global = true, value_name = "PATH")]
    pub root: Option<PathBuf>,
    /// Fail instead of starting the daemon when none answers (also SCAFLD_NO_AUTOSTART=1).
    #[arg(long, global = true)]
    pub no_autostart: bool,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create .scafld/ in the workspace root (default: the current directory), the receipt key
    /// and its trust anchor, and register the workspace.
    Init(InitArgs),
    /// Walk the whole gate in a throwaway repository (plan, harden, approve, a failing and a
    /// repaired build, a blocking and a passing review by a scripted stand-in, a signed receipt).
    Demo {
        /// Leave the demo's private daemon running afterwards (to inspect its ledger).
        #[arg(long)]
        keep: bool,
    },
    /// Start, stop or inspect the daemon.
    #[command(subcommand)]
    Daemon(DaemonCommand),
    /// Create a draft spec from the template (never overwrites).
    Plan(PlanArgs),
    /// Check a spec's structure and print every diagnostic (`--all`: every spec at once).
    Validate(ValidateArgs),
    /// Lifecycle, progress and the next allowed command of a task.
    Status(StatusArgs),
    /// Every task of the workspace with status, title and progress.
    List(ListArgs),
    /// Open a harden round and print the prompt, or check and close it with --mark-passed.
    Harden(HardenArgs),
    /// The compact model-facing summary of a task.
    Handoff(TaskArg),
    /// Counts by status and simple quality figures.
    Report,
    /// Rebuild the runner-owned sections of a spec and put it in the folder of its status.
    Reconcile(TaskArg),
    /// Approve a draft: validate, check hardening, record the git baseline.
    Approve(ApproveArgs),
    /// One step of the build loop: open the next phase, or run the current phase's acceptance.
    Build(BuildArgs),
    /// Archive a task as failed.
    Fail(ArchiveArgs),
    /// Archive a task as cancelled.
    Cancel(ArchiveArgs),
    /// Print a task's session ledger, or export it as JSON.
    Session(SessionArgs),
    /// Run the review gate of a task, review a git range, or manage review sessions.
    Review(Box<ReviewArgs>),
    /// Archive a task whose latest review passed (no receipt; `finalize` closes with one).
    Complete(TaskArg),
    /// Close a reviewed task with a signed receipt: re-run acceptance, fingerprint its scope,
    /// sign, anchor in the ledger, complete.
    Finalize(FinalizeArgs),
    /// Check a receipt: signature, files at a commit, base ancestry, acceptance
    /// (exit 0 verified, 3 failed, 2 usage or runtime error).
    Verify(VerifyArgs),
    /// Read receipts.
    #[command(subcommand)]
    Receipt(ReceiptCommand),
    /// Print a shell completion script (bash, zsh, fish, elvish or powershell) to stdout (with
    /// --json, as the `script` of the envelope).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write man pages for scafld, each of its commands, and scafldd.
    Man {
        /// The folder to write them to (default: ./man).
        #[arg(long, value_name = "DIR", default_value = "man")]
        out: PathBuf,
        /// Replace pages already there (a symlink is never written through).
        #[arg(long)]
        force: bool,
    },
    /// Stdio MCP servers that review providers start (not for interactive use).
    #[command(subcommand)]
    Mcp(McpCommand),
    /// Serve the Language Server Protocol on stdin/stdout for editors: spec diagnostics,
    /// review findings in place, hover, outline and scafld commands (started by the editor).
    Lsp,
    /// Inspect, wait for or cancel daemon jobs.
    #[command(subcommand)]
    Job(JobCommand),
    /// Check git, the daemon and its directories, the reviewer CLIs and the systemd units.
    Doctor,
    /// Serve review jobs as a reviewer worker (loop), or claim and answer one by hand.
    Worker(WorkerArgs),
}

#[derive(Args, Debug, Clone)]
pub struct ApproveArgs {
    #[command(flatten)]
    pub task: TaskArg,
    /// Approve without a harden round passed on this very draft (or amend); the reason is
    /// recorded in the ledger.
    #[arg(long)]
    pub reason: Option<String>,
    /// Re-pin the approved contract (criteria and scope) of an approved task whose spec changed
    /// (needs --reason; the next reviewer is shown the amendment).
    #[arg(long, requires = "reason")]
    pub amend: bool,
}

#[derive(Args, Debug, Clone)]
pub struct BuildArgs {
    #[command(flatten)]
    pub task: TaskArg,
    /// Return the job id at once instead of waiting for the acceptance run.
    #[arg(long, conflicts_with = "criterion")]
    pub detach: bool,
    /// Record a person's evidence for this manual criterion instead of running a step.
    #[arg(long, value_name = "ID", requires_all = ["disposition", "reason"])]
    pub criterion: Option<String>,
    /// The manual criterion's result: pass or fail.
    #[arg(long, value_parser = word::<Disposition>(), requires = "criterion")]
    pub disposition: Option<Disposition>,
    /// What was checked and how (recorded with the evidence).
    #[arg(long, requires = "criterion")]
    pub reason: Option<String>,
    /// sha256 (hex) of an artefact the person checked, recorded with the evidence.
    #[arg(long, value_name = "SHA256", requires = "criterion")]
    pub evidence_digest: Option<String>,
    /// Who decided (default: $USER).
    #[arg(long, value_name = "NAME", requires = "criterion")]
    pub actor: Option<String>,
}

#[derive(Args, Debug, Clone)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct ReviewArgs {
    #[command(subcommand)]
    pub command: Option<ReviewCommand>,
    #[command(flatten)]
    pub task: TaskArg,
    /// Review a git range `BASE..HEAD` instead of a task (no spec needed).
    // What only a task or template review reads is refused beside it (exit 64, naming it),
    // never dropped: a range review would run as if it were not given.
    #[arg(long, value_name = "BASE..HEAD", conflicts_with_all = [
        "task_id", "task", "print_context", "human_reviewed", "reason", "review_scope", "mode", "force",
        "approval", "review_depth", "max_findings", "min_attack_angles", "inputs", "output", "cwd",
    ])]
    pub diff: Option<String>,
    /// A file with the issue description, injected into the reviewers' prompt (with --diff).
    #[arg(long, value_name = "PATH", requires = "diff")]
    pub context_file: Option<PathBuf>,
    /// Comma-separated reviewers, one job each, unanimous consensus: codex,claude,gemini
    /// (also command, worker, local).
    #[arg(long, value_delimiter = ',')]
    pub reviewers: Vec<String>,
    /// Return at once with the session key and the reviewers spawned (exit 0 spawned, 1 not).
    #[arg(long)]
    pub detach: bool,
    /// auto (the verdict stands) or manual (it waits for `scafld review accept|reject`).
    #[arg(long, value_parser = word::<Approval>())]
    pub approval: Option<Approval>,
    /// Inputs of a user template named as the positional argument (NAME=VALUE, repeatable).
    #[arg(long = "input", value_name = "NAME=VALUE")]
    pub inputs: Vec<String>,
    /// Where a template review's result goes: terminal, json, or `file PATH`.
    #[arg(long, num_args = 1..=2, value_names = ["MODE", "PATH"])]
    pub output: Vec<String>,
    /// The directory a template reviewer works in.
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// auto, codex, claude, gemini, command or local.
    #[arg(long)]
    pub provider: Option<String>,
    /// Reviewer command line (the packet on stdin, one dossier on stdout).
    #[arg(long)]
    pub provider_command: Option<String>,
    /// The reviewer's model (default: the provider's configured one, else the CLI's own).
    #[arg(long)]
    pub model: Option<String>,
    /// Reasoning effort passed to codex: low, medium or high.
    #[arg(long, value_parser = ["low", "medium", "high"])]
    pub codex_reasoning: Option<String>,
    /// Record an audited human review instead of running a provider (needs --reason).
    #[arg(long)]
    pub human_reviewed: bool,
    /// Who reviewed what, recorded with --human-reviewed (required with it).
    #[arg(long)]
    pub reason: Option<String>,
    /// How hard the reviewer looks: light, standard or deep (default: review.dossier.review_depth).
    #[arg(long, value_parser = ["light", "standard", "deep"])]
    pub review_depth: Option<String>,
    /// The most findings a dossier may carry (default: review.dossier.max_findings).
    #[arg(long)]
    pub max_findings: Option<u32>,
    /// The fewest attack-log entries a passing dossier needs (default:
    /// review.dossier.min_attack_angles).
    #[arg(long)]
    pub min_attack_angles: Option<u32>,
    /// Comma-separated paths that bound the review (default: derived from the spec).
    #[arg(long, value_delimiter = ',')]
    pub review_scope: Vec<String>,
    /// discover or verify (default: verify when the last review left open blockers).
    #[arg(long, value_parser = word::<ReviewMode>())]
    pub mode: Option<ReviewMode>,
    /// Print exactly the packet a provider would receive, and run nothing.
    #[arg(long, conflicts_with = "human_reviewed")]
    pub print_context: bool,
    /// Review again although nothing changed since a failed review (with a user template:
    /// replace an existing file at `--output file PATH`).
    #[arg(long)]
    pub force: bool,
}

#[derive(Subcommand, Debug, Clone)]
pub enum ReviewCommand {
    /// Wait for a review session and print its consensus (exit 0 pass, 1 fail or needs work,
    /// 2 parse error, 3 timeout, 4 no reviewers, 5 internal error, 64 usage).
    Wait {
        /// Default: the latest session you started (your agent's session id, else your
        /// terminal; SCAFLD_CALLER_ID overrides), else the workspace's latest.
        #[arg(long, add = clap_complete::ArgValueCompleter::new(completion::session_keys))]
        session_key: Option<String>,
        /// Seconds to wait; the review keeps running when they run out.
        #[arg(long, default_value_t = 300.0)]
        timeout: f64,
    },
    /// Re-run the reviewers of a session that failed to parse, timed out or crashed.
    Retry {
        /// The session to retry (`review status` and `review wait` print keys).
        #[arg(add = clap_complete::ArgValueCompleter::new(completion::session_keys))]
        session_key: String,
    },
    /// A task's latest review session (or --session-key): reviewers, liveness, progress.
    Status {
        #[command(flatten)]
        task: TaskArg,
        /// A session by key instead of the task's latest.
        #[arg(long, add = clap_complete::ArgValueCompleter::new(completion::session_keys))]
        session_key: Option<String>,
    },
    /// Accept the verdict that awaits approval (manual approval).
    Accept(ReasonArgs),
    /// Reject the verdict that awaits approval: the gate fails with the reason.
    Reject(ReasonArgs),
    /// The review templates: built-in and `.scafld/templates/*.yaml`, with their source.
    List,
    /// Past template reviews of this workspace, newest first.
    History,
    /// A template review's result (e.g. after `--detach`): exit 0 PASS or CONCERNS, 4 FAIL,
    /// 1 UNKNOWN or still running when the timeout runs out, 2 usage.
    Result {
        /// Default: the latest session you started (your agent's session id, else your
        /// terminal; SCAFLD_CALLER_ID overrides), else the workspace's latest.
        #[arg(long, add = clap_complete::ArgValueCompleter::new(completion::session_keys))]
        session_key: Option<String>,
        /// Seconds to wait for the review to settle; it keeps running when they run out.
        #[arg(long, default_value_t = 300.0)]
        timeout: f64,
        /// Where the result goes: terminal, json, or `file PATH`.
        #[arg(long, num_args = 1..=2, value_names = ["MODE", "PATH"])]
        output: Vec<String>,
        /// Replace an existing file at `--output file PATH`.
        #[arg(long)]
        force: bool,
    },
    /// Architectural review of a document against the architecture it must fit.
    Arch {
        /// The document to review.
        input: String,
        /// The architecture document to review it against.
        #[arg(long)]
        against: String,
        #[command(flatten)]
        run: TemplateRunArgs,
    },
    /// Task plan review: a task breakdown against the design it implements.
    Tasks {
        /// The task breakdown.
        input: String,
        /// The design the tasks implement.
        #[arg(long)]
        against: String,
        #[command(flatten)]
        run: TemplateRunArgs,
    },
    /// Code review against the project's conventions.
    Code {
        /// Glob pattern that scopes the review.
        #[arg(long)]
        files: Option<String>,
        /// A git ref (compared with the working tree) or BASE..HEAD (its head).
        #[arg(long)]
        diff: Option<String>,
        #[command(flatten)]
        run: TemplateRunArgs,
    },
    /// Run any template (a user template) by name with --input NAME=VALUE.
    Run {
        /// The template's name (`review list` shows them).
        template: String,
        #[command(flatten)]
        run: TemplateRunArgs,
    },
}

/// Options of every template review.
#[derive(Args, Debug, Clone)]
pub struct TemplateRunArgs {
    /// A template input, NAME=VALUE (repeatable).
    #[arg(long = "input", value_name = "NAME=VALUE")]
    pub inputs: Vec<String>,
    /// codex, claude, gemini, command or local (default: review.external.provider).
    #[arg(long)]
    pub provider: Option<String>,
    /// Comma-separated reviewers; the verdicts combine (any FAIL fails).
    #[arg(long, value_delimiter = ',')]
    pub reviewers: Vec<String>,
    /// The reviewer command line for --provider command (prompt on stdin, answer on stdout).
    #[arg(long)]
    pub provider_command: Option<String>,
    /// The directory the reviewer works in (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// Return at once with the session key (see `scafld review wait`).
    #[arg(long)]
    pub detach: bool,
    /// terminal (default), json, or `file PATH`.
    #[arg(long, num_args = 1..=2, value_names = ["MODE", "PATH"])]
    pub output: Vec<String>,
    /// Replace an existing file at `--output file PATH`.
    #[arg(long)]
    pub force: bool,
}

#[derive(Args, Debug, Clone)]
#[command(args_conflicts_with_subcommands = true)]
pub struct WorkerArgs {
    #[command(subcommand)]
    pub command: Option<WorkerCommand>,
    /// What this worker reviews with: auto, codex, claude, gemini or command.
    #[arg(long, default_value = "auto")]
    pub provider: String,
    /// The reviewer command line for --provider command (packet on stdin, dossier on stdout).
    #[arg(long)]
    pub provider_command: Option<String>,
    /// Only serve this workspace (default: every workspace of the daemon).
    #[arg(long, value_name = "ROOT")]
    pub workspace: Option<PathBuf>,
    /// Serve one job (or none, if nothing is queued within --timeout) and exit.
    #[arg(long)]
    pub once: bool,
    /// Lease length (1 to 604800, a week); a silent worker loses its job after this long.
    #[arg(long, value_parser = lease_seconds())]
    pub lease_seconds: Option<u64>,
    /// Seconds each claim waits for work (with --once: how long to wait at all); 0 waits for
    /// nothing: serve what is claimable now, and exit once a claim finds nothing.
    #[arg(long, default_value_t = 30.0)]
    pub timeout: f64,
    /// Worker name shown in status and recorded in the ledger (default: $SCAFLD_WORKER_ID or host:pid).
    #[arg(long, value_parser = worker_name)]
    pub id: Option<String>,
}

#[derive(Subcommand, Debug, Clone)]
pub enum WorkerCommand {
    /// Claim one queued review job (waiting at most --timeout) and print it with its lease token.
    Claim {
        /// Seconds to wait for work.
        #[arg(long, default_value_t = 0.0)]
        timeout: f64,
        /// Lease length (1 to 604800, a week); the job goes back to the queue if no heartbeat
        /// comes this long.
        #[arg(long, value_parser = lease_seconds())]
        lease_seconds: Option<u64>,
        /// What reviews it: agent (you, reading the packet), codex, claude or gemini.
        #[arg(long, default_value = "agent")]
        provider: String,
        /// Worker name shown in status and recorded in the ledger (default: $SCAFLD_WORKER_ID or host:pid).
        #[arg(long, value_parser = worker_name)]
        id: Option<String>,
    },
    /// Extend the lease of a claimed job.
    Heartbeat(LeaseArgs),
    /// Record progress: a reviewed file with its findings (dossier finding JSON), or a phase.
    Checkpoint {
        #[command(flatten)]
        lease: LeaseArgs,
        /// A file of the packet you finished reviewing.
        #[arg(long)]
        file: Option<String>,
        /// A finding in that file, as dossier finding JSON (repeatable).
        #[arg(long = "finding", value_name = "JSON")]
        findings: Vec<String>,
        /// preflight, reviewing, writing_report or done.
        #[arg(long)]
        phase: Option<String>,
    },
    /// Submit the review dossier of a claimed job.
    Submit {
        #[command(flatten)]
        lease: LeaseArgs,
        /// The ReviewDossier JSON file (one dossier; exactly one submission is accepted).
        #[arg(long, value_name = "FILE")]
        dossier: PathBuf,
    },
    /// Give a claimed job back to the queue (its checkpoint is kept).
    Release(LeaseArgs),
}

#[derive(Args, Debug, Clone)]
pub struct LeaseArgs {
    /// The claimed job (`worker claim` printed it).
    pub job_id: String,
    /// The lease token `worker claim` printed (default: $SCAFLD_LEASE_TOKEN).
    #[arg(long, env = "SCAFLD_LEASE_TOKEN", hide_env_values = true, value_parser = lease_token)]
    pub lease: String,
}

#[derive(Args, Debug, Clone)]
pub struct ReasonArgs {
    #[command(flatten)]
    pub task: TaskArg,
    /// Why; recorded in the ledger and the spec.
    #[arg(long)]
    pub reason: String,
}

/// `fail` and `cancel`: as in the original tool, the reason may be left out.
#[derive(Args, Debug, Clone)]
pub struct ArchiveArgs {
    #[command(flatten)]
    pub task: TaskArg,
    /// Why; recorded in the ledger and the spec (default: the command's name, `fail` or `cancel`).
    #[arg(long)]
    pub reason: Option<String>,
}

#[derive(Args, Debug, Clone)]
pub struct SessionArgs {
    #[command(flatten)]
    pub task: TaskArg,
    /// Also write the ledger as JSON to PATH, or given alone to .scafld/runs/<task-id>/ledger.json
    /// (the export `scafldd --recover` reads); an empty or blank PATH is refused.
    // The flag alone parses as `Some(None)`.
    #[arg(long, value_name = "PATH", num_args = 0..=1, value_parser = named_path)]
    pub export: Option<Option<String>>,
    /// Replace an existing file at the export path.
    #[arg(long, requires = "export")]
    pub force: bool,
}

#[derive(Subcommand, Debug)]
pub enum McpCommand {
    /// Serve the submit tool over stdio (`submit_review`, or `submit_harden` for a harden
    /// round) and relay the answer to the daemon.
    SubmitReview {
        /// The submission token of the review this reviewer answers.
        #[arg(long)]
        token: String,
        /// What the tool accepts: a review-gate dossier, a template review answer, or a
        /// HardenDossier.
        #[arg(long, default_value = "dossier", value_parser = ["dossier", "template", "harden"])]
        answer: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum JobCommand {
    /// Jobs of this workspace, newest first.
    List,
    /// One job's record.
    Status {
        /// The job (`job list` shows them; `build --detach` prints one).
        job_id: String,
    },
    /// Wait for a job to finish (exit 0 ok, 3 failed, 75 still running at the timeout).
    Wait {
        /// The job to wait for.
        job_id: String,
        /// Seconds to wait before returning the current state.
        #[arg(long, default_value_t = 300.0)]
        timeout: f64,
    },
    /// Kill a job's process group and record it cancelled.
    Cancel {
        /// The job to cancel.
        job_id: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum ReceiptCommand {
    /// Render a receipt for a person: what it covers, who reviewed, what ran, who signed.
    Show {
        /// The receipt (default: .scafld/receipts/latest.json of the workspace).
        #[arg(value_name = "RECEIPT")]
        receipt: Option<PathBuf>,
    },
}

#[derive(Args, Debug)]
pub struct InitArgs {
    /// Also write .github/workflows/scafld-verify.yml, which runs `scafld verify` on pull
    /// requests (kept as it is when it exists).
    #[arg(long)]
    pub ci: bool,
    /// Also append a short guide for coding agents (the loop, bounded waits, worker cadence) to
    /// AGENTS.md (created when missing), and to CLAUDE.md when there is one (none is created;
    /// once; your edits are kept).
    #[arg(long)]
    pub agents: bool,
}

#[derive(Args, Debug)]
pub struct FinalizeArgs {
    #[command(flatten)]
    pub task: TaskArg,
    /// Fingerprint only the change from this ref (`base_delta`), not the whole scope.
    #[arg(long, value_name = "REF")]
    pub base_ref: Option<String>,
    /// A path the receipt covers (repeatable; default: the spec's declared scope).
    #[arg(long = "scope-hint", value_name = "PATH")]
    pub scope_hints: Vec<String>,
    /// Also read the request as JSON on stdin, as the original tool's finalize transport sends
    /// it: `{"task_id", "root", "base_ref", "scope_hint": [...]}`, each optional (paths
    /// relative to the workspace); what the command line says wins, a different task id is
    /// refused. Empty stdin adds nothing.
    #[arg(long)]
    pub stdin: bool,
}

#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// The receipt (default: $SCAFLD_RECEIPT_PATH, else .scafld/receipts/latest.json).
    #[arg(value_name = "RECEIPT")]
    pub receipt: Option<String>,
    /// The protected commit-ish the receipt must hold for (default HEAD; required with --ci).
    #[arg(long, value_name = "COMMIT")]
    pub target: Option<String>,
    /// Read the files at this commit instead of the target; the acceptance commands then run
    /// in a clean checkout of it (the working tree when it is one, else --acceptance-root).
    #[arg(long, value_name = "COMMIT")]
    pub material_ref: Option<String>,
    /// Re-run the acceptance commands in this folder, a clean checkout of --material-ref
    /// (`git worktree add --detach PATH COMMIT`), with the caller's credentials left out.
    #[arg(long, value_name = "PATH")]
    pub acceptance_root: Option<std::path::PathBuf>,
    /// The trusted keys (default: $SCAFLD_TRUSTED_KEYS, else .scafld/trusted-keys.json at
    /// --trust-ref, else in the working tree).
    #[arg(long, value_name = "PATH")]
    pub trusted_keys: Option<String>,
    /// Read the trusted keys and the verify policy (.scafld/config.yaml) from this commit, not
    /// the working tree (default with --ci: the --target commit; a change never trusts itself).
    #[arg(long, value_name = "COMMIT")]
    pub trust_ref: Option<String>,
    /// Check the signature and the files only; do not re-run acceptance commands.
    #[arg(long)]
    pub material_only: bool,
    /// Fail closed without --target or trusted keys, and read trust from the protected commit
    /// (implied by a truthy CI variable).
    #[arg(long)]
    pub ci: bool,
    /// Report the receipt, trusted keys and host key wiring instead of checking a receipt.
    #[arg(long)]
    pub self_check: bool,
}

/// A task id, positional or as `--task` (for ids that equal a subcommand word).
#[derive(Args, Debug, Clone)]
pub struct TaskArg {
    /// The task id (the spec's file name without .md).
    #[arg(value_name = "TASK_ID", add = clap_complete::ArgValueCompleter::new(completion::task_ids))]
    pub task_id: Option<String>,
    /// The task id, for ids that would read as a subcommand.
    #[arg(long = "task", value_name = "TASK_ID", conflicts_with = "task_id")]
    pub task: Option<String>,
}

impl TaskArg {
    pub fn resolve(&self) -> Result<String, CliError> {
        if let Some(id) = &self.task_id
            && Cli::command().get_subcommands().any(|c| c.get_name() == id)
        {
            output::note(&format!(
                "scafld: note: `{id}` is also a scafld command; here it is read as a task id (`--task {id}` says so explicitly)"
            ));
        }
        self.task_id
            .clone()
            .or_else(|| self.task.clone())
            .ok_or_else(|| CliError::usage("a task id is required (positional or --task <id>)"))
    }
}

#[derive(Args, Debug, Clone)]
pub struct StatusArgs {
    #[command(flatten)]
    pub task: TaskArg,
    /// With --json: leave the spec's text out of `spec_source` (its path, sha256 and size
    /// stand for it).
    #[arg(long)]
    pub no_context: bool,
}

#[derive(Args, Debug, Clone)]
pub struct ValidateArgs {
    #[command(flatten)]
    pub task: TaskArg,
    /// Every spec of the workspace (archive included), with all its diagnostics.
    #[arg(long, conflicts_with_all = ["task_id", "task"])]
    pub all: bool,
}

#[derive(Args, Debug, Clone)]
pub struct PlanArgs {
    #[command(flatten)]
    pub task: TaskArg,
    /// Title of the spec (default: the task id).
    #[arg(long)]
    pub title: Option<String>,
    /// One-paragraph summary.
    #[arg(long)]
    pub summary: Option<String>,
    /// micro, small, medium or large.
    #[arg(long)]
    pub size: Option<String>,
    /// low, medium or high.
    #[arg(long)]
    pub risk: Option<String>,
    /// The acceptance command of phase 1.
    #[arg(long)]
    pub command: Option<String>,
}

#[derive(Args, Debug, Clone)]
pub struct ListArgs {
    /// Only tasks with this status (draft, approved, active, blocked, review, completed, failed,
    /// cancelled; Python scafld's in_progress is active, blocked and review, its under_review draft).
    #[arg(long)]
    pub status: Option<String>,
    /// With --json: each task's phase and criterion counts too (the text listing always shows progress).
    #[arg(long)]
    pub counts: bool,
}

#[derive(Args, Debug, Clone)]
pub struct HardenArgs {
    #[command(flatten)]
    pub task: TaskArg,
    /// Check the latest round's evidence and close it.
    #[arg(long, conflicts_with = "provider")]
    pub mark_passed: bool,
    /// Let a read-only provider judge the draft: auto, codex, claude, gemini, command or local
    /// (exit 0 passed, 3 needs revision, 1 when its answer could not be used).
    #[arg(long)]
    pub provider: Option<String>,
    /// The command of `--provider command`: the packet on stdin, one HardenDossier JSON on stdout.
    #[arg(long, requires = "provider")]
    pub provider_command: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum DaemonCommand {
    /// Start the daemon in the background; returns once its socket answers.
    Start,
    /// Ask the daemon to shut down and wait until it has.
    Stop,
    /// Show version, pid, uptime, socket, state directory, workspaces and jobs.
    Status,
    /// Forget a workspace whose folder is gone (no longer listed or reopened; its ledgers stay).
    Forget {
        /// Its id (or the start of it, as `daemon status` shows it), or the folder it was at.
        workspace: String,
    },
}

impl Command {
    /// Name used in the JSON envelope's `command` field.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Init(_) => "init",
            Command::Doctor => "doctor",
            Command::Lsp => "lsp",
            Command::Daemon(DaemonCommand::Start) => "daemon start",
            Command::Daemon(DaemonCommand::Stop) => "daemon stop",
            Command::Daemon(DaemonCommand::Status) => "daemon status",
            Command::Daemon(DaemonCommand::Forget { .. }) => "daemon forget",
            Command::Plan(_) => "plan",
            Command::Validate(_) => "validate",
            Command::Status(_) => "status",
            Command::List(_) => "list",
            Command::Harden(_) => "harden",
            Command::Handoff(_) => "handoff",
            Command::Report => "report",
            Command::Reconcile(_) => "reconcile",
            Command::Approve(_) => "approve",
            Command::Build(_) => "build",
            Command::Fail(_) => "fail",
            Command::Cancel(_) => "cancel",
            Command::Session(_) => "session",
            Command::Review(args) => match &args.command {
                Some(ReviewCommand::Wait { .. }) => "review wait",
                Some(ReviewCommand::Retry { .. }) => "review retry",
                Some(ReviewCommand::Status { .. }) => "review status",
                Some(ReviewCommand::Accept(_)) => "review accept",
                Some(ReviewCommand::Reject(_)) => "review reject",
                Some(ReviewCommand::List) => "review list",
                Some(ReviewCommand::History) => "review history",
                Some(ReviewCommand::Result { .. }) => "review result",
                Some(ReviewCommand::Arch { .. }) => "review arch",
                Some(ReviewCommand::Tasks { .. }) => "review tasks",
                Some(ReviewCommand::Code { .. }) => "review code",
                Some(ReviewCommand::Run { .. }) => "review run",
                None => "review",
            },
            Command::Worker(args) => match &args.command {
                None => "worker",
                Some(WorkerCommand::Claim { .. }) => "worker claim",
                Some(WorkerCommand::Heartbeat(_)) => "worker heartbeat",
                Some(WorkerCommand::Checkpoint { .. }) => "worker checkpoint",
                Some(WorkerCommand::Submit { .. }) => "worker submit",
                Some(WorkerCommand::Release(_)) => "worker release",
            },
            Command::Complete(_) => "complete",
            Command::Finalize(_) => "finalize",
            Command::Verify(_) => "verify",
            Command::Receipt(ReceiptCommand::Show { .. }) => "receipt show",
            Command::Completions { .. } => "completions",
            Command::Demo { .. } => "demo",
            Command::Man { .. } => "man",
            Command::Mcp(_) => "mcp submit-review",
            Command::Job(JobCommand::List) => "job list",
            Command::Job(JobCommand::Status { .. }) => "job status",
            Command::Job(JobCommand::Wait { .. }) => "job wait",
            Command::Job(JobCommand::Cancel { .. }) => "job cancel",
        }
    }
}

/// Everything a command needs besides its own arguments.
pub struct Context {
    pub global: GlobalArgs,
    /// Where the daemon's socket and state are, or why the environment names no state
    /// directory: only the commands that reach a daemon need one ([`Context::paths`]), so
    /// `completions`, `man` and `demo` run without it and `doctor` reports it.
    pub paths: Result<Paths, scafld_local::paths::PathsError>,
    pub out: Output,
    /// Where the caller is: the commands it is shown are made to run there.
    pub caller: runnable::Caller,
}

impl Context {
    /// The socket and state directory, or the refusal of a command that needs a daemon when
    /// the environment names no state directory (which variables to set, in the hint).
    pub fn paths(&self) -> Result<&Paths, CliError> {
        self.paths.as_ref().map_err(|e| {
            CliError::new("environment", e.message.clone(), exit::workflow::USAGE).with_hint(e.hint.clone())
        })
    }

    pub fn autostart(&self) -> bool {
        let env_off = scafld_local::env_flag(std::env::var("SCAFLD_NO_AUTOSTART").ok().as_deref());
        !(self.global.no_autostart || env_off)
    }

    pub fn connect(&self) -> Result<scafld_client::Connection, CliError> {
        let (paths, autostart) = (self.paths()?.clone(), self.autostart());
        let conn = daemon_control::connect(&paths, autostart)?;
        // A call the daemon refused unstarted because a stop began goes to the next daemon,
        // started here as any command would start it (the old one is waited for first).
        let reconnect: scafld_client::connection::Reconnect = std::sync::Arc::new(move || {
            daemon_control::connect(&paths, autostart).map_err(|e| scafld_client::ClientError::Refused {
                kind: e.code,
                message: e.message,
                hint: e.hint,
            })
        });
        let conn = conn.reconnecting(Some(reconnect));
        let caller = self.caller.clone();
        let hook: Option<scafld_client::connection::ResultHook> = caller
            .rewrites()
            .then(|| std::sync::Arc::new(move |value: &mut serde_json::Value| caller.result(value)) as _);
        Ok(conn.with_results(hook))
    }
}

/// The command line's grammar: the derived one, every on/off flag also taking a value after
/// `=` (`--json=true`, `--mark-passed=0`) as the original tool's flags do. Used for parsing,
/// help, completions and man pages alike.
pub fn grammar() -> clap::Command {
    valued_flags(Cli::command())
}

/// `args` parsed with [`grammar`].
fn parse(args: &[OsString]) -> Result<Cli, clap::Error> {
    let mut matches = grammar().try_get_matches_from(args)?;
    Cli::from_arg_matches_mut(&mut matches)
}

/// Every flag of `command` and its subcommands that is on when given alone also reads an
/// optional `=BOOL` (a word of [`scafld_local::flag_word`]); one place, so a flag added later
/// gets it too. Written with `=` only: `--json true` stays a flag and a positional word.
fn valued_flags(command: clap::Command) -> clap::Command {
    let command = command.mut_args(|arg| match arg.get_action() {
        clap::ArgAction::SetTrue => arg
            .action(clap::ArgAction::Set)
            .num_args(0..=1)
            .require_equals(true)
            .default_missing_value("true")
            .default_value("false")
            .hide_default_value(true)
            .value_name("BOOL")
            .value_parser(flag_value),
        _ => arg,
    });
    let names: Vec<String> = command.get_subcommands().map(|c| c.get_name().to_string()).collect();
    names.iter().fold(command, |command, name| command.mut_subcommand(name, valued_flags))
}

/// The value of an on/off flag; a word that says neither is refused rather than read as off.
fn flag_value(value: &str) -> Result<bool, String> {
    scafld_local::flag_word(value).ok_or_else(|| {
        format!("say on ({}) or off ({})", scafld_local::FLAG_ON.join(", "), scafld_local::FLAG_OFF.join(", "))
    })
}

/// A parser for one of the protocol's vocabularies: its words are the choices clap lists.
fn word<T: Vocabulary>() -> impl clap::builder::TypedValueParser<Value = T> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(T::WORDS).try_map(|word| word.parse::<T>())
}

/// A PATH the caller names (`session --export PATH`): an empty or blank one is a usage error
/// rather than the flag's default or a file named by its spaces.
fn named_path(value: &str) -> Result<String, String> {
    match value.trim().is_empty() {
        true => Err("PATH is empty; name a file, or give the flag alone for its default path".to_string()),
        false => Ok(value.to_string()),
    }
}

/// `--lease`: an empty token (`--lease ""`, an unexpanded `$SCAFLD_LEASE_TOKEN`) is a mistake in
/// the command line, refused here rather than sent and read as a lease lost, which would have the
/// worker abandon a lease it still holds.
fn lease_token(value: &str) -> Result<String, String> {
    match value.trim().is_empty() {
        true => Err("the lease token is empty; pass --lease TOKEN (or set SCAFLD_LEASE_TOKEN) as `scafld worker claim` printed it".to_string()),
        false => Ok(value.to_string()),
    }
}

/// `--id`: a worker name the daemon takes (its `worker_id`: 1-128 printable characters), refused
/// here naming the flag the user typed.
fn worker_name(value: &str) -> Result<String, String> {
    match value.trim().is_empty() || value.len() > 128 || value.chars().any(char::is_control) {
        true => Err("a worker name is 1-128 printable characters; pass --id NAME, or leave --id out for $SCAFLD_WORKER_ID or host:pid".to_string()),
        false => Ok(value.to_string()),
    }
}

/// `--lease-seconds`: a lease the daemon can hold (`MAX_LEASE_SECONDS`); anything longer is
/// a usage error here, before any call.
fn lease_seconds() -> clap::builder::RangedU64ValueParser<u64> {
    clap::value_parser!(u64).range(1..=scafld_protocol::methods::MAX_LEASE_SECONDS)
}

/// The variable a shell's completion script sets when it asks `scafld` for completions.
pub const COMPLETE_VAR: &str = "SCAFLD_COMPLETE";

pub fn main(args: Vec<OsString>) -> u8 {
    // A shell asking for completions (SCAFLD_COMPLETE=<shell>, set by `scafld completions`'
    // script) is answered here, and the process exits. The variable is scafld's own: a bare
    // `COMPLETE` some other tool left in the environment takes over nothing.
    clap_complete::CompleteEnv::with_factory(grammar).var(COMPLETE_VAR).complete();
    // Before parsing, for the envelope of a usage error: `--json`, or `--json=` a word for on.
    let wants_json = args.iter().filter_map(|a| a.to_str()).any(|a| match a.strip_prefix("--json") {
        Some("") => true,
        Some(value) => value.strip_prefix('=').and_then(scafld_local::flag_word) == Some(true),
        None => false,
    });
    let cli = match parse(&args) {
        Ok(cli) => cli,
        Err(e) => {
            // `--help` and `--version` are answers on stdout too: one that is lost fails.
            let code = usage_error(e, wants_json, &args);
            return match output::report_lost_output() {
                true => exit::output_lost(code, false),
                false => code,
            };
        }
    };
    // `review --json wait`: parsed, but `wait` read as a task; the review would look for it.
    if let Command::Review(review) = &cli.command
        && review.command.is_none()
        && let Some(misread) = review.task.task_id.as_deref().and_then(|word| review_misread(&args, word))
    {
        let code = if spawn_wait_family(&args) { exit::spawn_wait::USAGE } else { exit::workflow::USAGE };
        Output::new(cli.global.json, "review").failure(&CliError { exit_code: code, ..misread }, None);
        return code;
    }
    let out = Output::new(cli.global.json, cli.command.name());
    let caller = runnable::Caller::current(cli.global.root.as_deref());
    let ctx = Context { global: cli.global, paths: Paths::from_env(), out, caller };
    let code = match commands::run(&ctx, cli.command) {
        Ok(code) => code,
        Err(mut error) => {
            error.hint = error.hint.map(|hint| ctx.caller.prose(&hint));
            ctx.out.failure(&error, None);
            error.exit_code
        }
    };
    match output::report_lost_output() {
        true => exit::output_lost(code, ctx.out.command == "verify"),
        false => code,
    }
}

/// Whether the command line belongs to the spawn/wait family (`review --detach`, `review
/// --diff`, `review wait`, `review retry`), whose usage errors exit 64.
fn spawn_wait_family(args: &[OsString]) -> bool {
    let words: Vec<&str> = args.iter().skip(1).filter_map(|a| a.to_str()).collect();
    let Some(at) = words.iter().position(|w| *w == "review") else { return false };
    words[at + 1..].iter().any(|w| {
        matches!(*w, "wait" | "retry" | "--detach") || w.starts_with("--diff") || w.starts_with("--context-file")
    })
}

fn usage_error(error: clap::Error, json: bool, args: &[OsString]) -> u8 {
    use clap::error::ErrorKind;
    if matches!(error.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        // Written as every answer is, so a failed write is kept and said (`report_lost_output`).
        let rendered = error.render();
        // Coloured as any answer is: on a terminal, unless NO_COLOR says otherwise.
        let text = match output::Streams::current().stdout {
            true => rendered.ansi().to_string(),
            false => rendered.to_string(),
        };
        output::write_stdout(text.as_bytes());
        return exit::workflow::OK;
    }
    let code = if spawn_wait_family(args) { exit::spawn_wait::USAGE } else { exit::workflow::USAGE };
    // What clap cannot know: a review subcommand read as a task after a flag, a command named
    // without its subcommand. Said in our words, in both modes.
    if let Some(misread) = misread(&error, args) {
        let command = command_path(args);
        Output::new(json, &command).failure(&CliError { exit_code: code, ..misread }, None);
        return code;
    }
    if json {
        // clap's own first line ("error: unexpected argument '-5' found"), without its prefix;
        // one ending in a colon ("the following required arguments were not provided:") takes
        // the lines it introduces (each missing argument), so the message names them.
        let rendered = error.render().to_string();
        let first = rendered.lines().next().unwrap_or_default();
        let mut message = first.strip_prefix("error: ").unwrap_or(first).to_string();
        let listed: Vec<&str> = match message.ends_with(':') {
            true => rendered.lines().skip(1).map(str::trim).take_while(|l| !l.is_empty()).collect(),
            false => Vec::new(),
        };
        if !listed.is_empty() {
            message = format!("{message} {}", listed.join(", "));
        }
        // clap's advice after those lines ("tip: a similar subcommand exists: 'review'",
        // "[possible values: ...]"), up to its usage block.
        let advice: Vec<&str> = rendered
            .lines()
            .skip(1 + listed.len())
            .map(str::trim)
            .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
            .filter(|l| !l.is_empty())
            .collect();
        let command = command_path(args);
        let help = if command.is_empty() { "scafld --help".to_string() } else { format!("scafld {command} --help") };
        let hint = advice.iter().map(|a| format!("{a}; ")).collect::<String>() + &format!("run `{help}` for usage");
        // The envelope's exit_code is the one the process exits with.
        let cli_error = CliError::new("usage", message, code).with_hint(hint);
        Output::new(true, &command).failure(&cli_error, None);
    } else {
        let _ = error.print();
    }
    code
}

/// A usage error clap words misleadingly, in words that say what went wrong: a command that
/// needs a subcommand and was given none (clap's message is the command's description), and a
/// `review` that read a word after its own as a subcommand ([`review_misread`]).
fn misread(error: &clap::Error, args: &[OsString]) -> Option<CliError> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    match error.kind() {
        // A command of the original tool that scafld does not have: said plainly, with what
        // to use instead, never a near miss ("a similar subcommand exists").
        ErrorKind::InvalidSubcommand if command_path(args).is_empty() => {
            let Some(ContextValue::String(word)) = error.get(ContextKind::InvalidSubcommand) else { return None };
            let instead = match word.as_str() {
                "adapter" => {
                    "a wrapper script gets the same trigger packet from `scafld status <task-id> --json` (its `next_action`) and `scafld handoff <task-id>`"
                }
                "update" => {
                    "scafld copies no prompts, schemas or scripts into .scafld/ for `update` to refresh (they come with the binaries): upgrade scafld; `scafld init` again adds what is missing and never overwrites your files"
                }
                "config" => {
                    "edit .scafld/config.yaml (every key is written there with its default and a comment); `scafld doctor` names keys it does not know"
                }
                _ => return None,
            };
            Some(
                CliError::usage(format!("scafld has no `{word}` command (the original tool's)"))
                    .with_hint(instead.to_string()),
            )
        }
        ErrorKind::MissingSubcommand | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let path = command_path(args);
            let mut command = grammar();
            for word in path.split_whitespace() {
                command = command.find_subcommand(word)?.clone();
            }
            let choices: Vec<&str> = command
                .get_subcommands()
                .filter(|c| !c.is_hide_set() && c.get_name() != "help")
                .map(|c| c.get_name())
                .collect();
            if choices.is_empty() {
                return None;
            }
            let named = if path.is_empty() { "scafld".to_string() } else { format!("scafld {path}") };
            Some(
                CliError::usage(format!("`{named}` needs a subcommand: one of {}", choices.join(", ")))
                    .with_hint(format!("run `{named} --help` for what each does")),
            )
        }
        // Only `review` has arguments that conflict with its subcommands (which the command
        // path, skipping flags, may name: `review --json status greet`).
        ErrorKind::ArgumentConflict if command_path(args).split(' ').next() == Some("review") => {
            let Some(ContextValue::String(extra)) = error.get(ContextKind::InvalidSubcommand) else { return None };
            // What review read as its task: the command line parsed without the extra word.
            let at = args.iter().rposition(|a| a.to_str() == Some(extra.as_str()))?;
            let mut without = args.to_vec();
            without.remove(at);
            let Ok(Cli { command: Command::Review(review), .. }) = parse(&without) else { return None };
            let task = review.task.task_id.as_deref()?;
            if let Some(misread) = review_misread(args, task) {
                return Some(misread);
            }
            Some(
                CliError::usage(format!(
                    "unexpected argument '{extra}': `scafld review` read `{task}` as the task to review and takes nothing after it; `{task}` is none of its subcommands ({})",
                    scafld_protocol::cli::REVIEW_SUBCOMMANDS.join(", ")
                ))
                .with_hint("run `scafld review --help` for usage"),
            )
        }
        _ => None,
    }
}

/// `word`, which `review` read as its task, is one of its subcommands: a flag before it (a
/// global one, most likely: `review --json wait`) made `review` read its own flags, which a
/// subcommand cannot be combined with. The refusal says to put the flags after the subcommand.
fn review_misread(args: &[OsString], word: &str) -> Option<CliError> {
    if !scafld_protocol::cli::REVIEW_SUBCOMMANDS.contains(&word) {
        return None;
    }
    let words: Vec<String> = args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let review = words.iter().position(|w| w == "review")?;
    let at = review + 1 + words[review + 1..].iter().position(|w| w == word)?;
    let before = &words[review + 1..at];
    let flags: Vec<&str> = before.iter().map(String::as_str).filter(|w| w.starts_with('-')).collect();
    let shell = |w: &String| scafld_protocol::cli::shell_word(w).into_owned();
    let fixed: Vec<String> = std::iter::once("scafld".to_string())
        .chain(words[1..=review].iter().map(shell))
        .chain(std::iter::once(word.to_string()))
        .chain(words[at + 1..].iter().map(shell))
        .chain(before.iter().map(shell))
        .collect();
    Some(
        CliError::usage(format!(
            "`{word}` is a `scafld review` subcommand, but after {} `review` reads its own flags and takes `{word}` as a task: put global flags after the subcommand",
            if flags.is_empty() { "a flag".to_string() } else { format!("`{}`", flags.join(" ")) }
        ))
        .with_hint(format!(
            "run `{}`; a task named `{word}` is reviewed with `scafld review --task {word}`",
            fixed.join(" ")
        )),
    )
}

/// The subcommands named on the command line (`review wait`), as far as they are valid.
fn command_path(args: &[OsString]) -> String {
    let mut command = grammar();
    let mut path = Vec::new();
    for word in args.iter().skip(1).filter_map(|a| a.to_str()) {
        if word.starts_with('-') {
            continue;
        }
        let Some(sub) = command.find_subcommand(word).cloned() else { break };
        path.push(sub.get_name().to_string());
        command = sub;
    }
    path.join(" ")
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// The daemon spells a task's review command from `REVIEW_SUBCOMMANDS` (`--task <id>` for
    /// an id equal to one): the list must be exactly the subcommands `scafld review` has.
    #[test]
    fn the_protocol_knows_every_review_subcommand() {
        let cli = super::Cli::command();
        let review = cli.find_subcommand("review").expect("a review command");
        let mut ours: Vec<&str> = review.get_subcommands().map(|c| c.get_name()).collect();
        let mut listed = scafld_protocol::cli::REVIEW_SUBCOMMANDS.to_vec();
        ours.sort_unstable();
        listed.sort_unstable();
        assert_eq!(ours, listed);
    }
}
