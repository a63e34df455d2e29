//! The one table of exit codes, a row per command family (README "Exit codes" mirrors it), and
//! the one place an error's exit code is decided: from the daemon's error kind
//! ([`for_kind`]), then moved into a command's family ([`in_family`]).

use scafld_protocol::ErrorKind;

use super::output::CliError;

/// Workflow commands: init, plan, validate, approve, build, review <task>, complete, daemon ...
pub mod workflow {
    pub const OK: u8 = 0;
    pub const RUNTIME: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const VALIDATION: u8 = 3;
    pub const REVIEW_GATE: u8 = 4;
    pub const CANCELLED: u8 = 5;
    pub const UNREACHABLE: u8 = 6;
}

/// Spawn/wait (`review --detach`, `review --diff`, `review wait`, `review retry`), seed 004.
pub mod spawn_wait {
    pub const PASS: u8 = 0;
    /// Wait: fail or needs work (valid JSON with issues). Spawn: nothing was spawned.
    pub const FAIL: u8 = 1;
    pub const PARSE_ERROR: u8 = 2;
    pub const TIMEOUT: u8 = 3;
    pub const NO_REVIEWERS: u8 = 4;
    pub const INTERNAL: u8 = 5;
    /// Usage errors, distinct from every "retry" code.
    pub const USAGE: u8 = 64;
}

/// Template reviews (`review arch|tasks|code|run|<template>`).
pub mod template {
    /// PASS or CONCERNS.
    pub const PASS: u8 = 0;
    /// UNKNOWN (no answer could be parsed) or a runtime failure.
    pub const UNKNOWN: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const FAIL: u8 = 4;
    /// The daemon unreachable, as in the workflow table.
    pub const UNREACHABLE: u8 = super::workflow::UNREACHABLE;
}

/// `verify`: the merge wall's three answers.
pub mod verify {
    pub const VERIFIED: u8 = 0;
    /// Usage errors and runtime errors alike: nothing was verified.
    pub const ERROR: u8 = 2;
    pub const FAILED: u8 = 3;
}

/// Bounded waits (`job wait`).
pub mod wait {
    pub const FINISHED_OK: u8 = 0;
    pub const FINISHED_FAILED: u8 = 3;
    pub const STILL_RUNNING: u8 = 75;
}

/// The workflow exit code of a daemon error kind.
pub fn for_kind(kind: ErrorKind) -> u8 {
    match kind {
        // Naming a task, job or session that does not exist is the caller's mistake.
        ErrorKind::InvalidInput | ErrorKind::InvalidParams | ErrorKind::NotFound => workflow::USAGE,
        ErrorKind::ValidationFailed | ErrorKind::AlreadyExists => workflow::VALIDATION,
        // The workspace exists but its files (config, specs, git) cannot be used: a runtime
        // failure; a folder that is no workspace is told apart by [`for_error`].
        ErrorKind::WorkspaceError => workflow::RUNTIME,
        ErrorKind::ReviewFailed => workflow::REVIEW_GATE,
        _ => workflow::RUNTIME,
    }
}

/// The workflow exit code and the envelope's `error.code` of a daemon error: its kind's, except
/// for a task whose spec file is missing while its ledger keeps it (`details.spec_missing`):
/// no unknown task (usage) but one that cannot go on until the file is back, `spec_missing`
/// (3, as `status` of such a task); and for a folder that is no workspace
/// (`details.workspace_not_found`), unreachable (6, as the client's own "workspace not found").
pub fn for_error(data: &scafld_protocol::error::ErrorData) -> (&'static str, u8) {
    use scafld_protocol::error::WORKSPACE_NOT_FOUND;
    let marked = |key: &str| data.details.as_ref().is_some_and(|d| d.get(key).is_some());
    if marked("spec_missing") {
        ("spec_missing", workflow::VALIDATION)
    } else if marked(WORKSPACE_NOT_FOUND) {
        (WORKSPACE_NOT_FOUND, workflow::UNREACHABLE)
    } else {
        (data.kind.as_str(), for_kind(data.kind))
    }
}

/// The exit code of a command that ended with `code` but whose answer on stdout was lost (a
/// full disk, a closed descriptor): a success is a runtime failure (1, as coreutils exit
/// non-zero; `verify`'s error, 2: nothing verified reached the caller), a failure keeps its code.
pub fn output_lost(code: u8, verify: bool) -> u8 {
    match code {
        workflow::OK if verify => self::verify::ERROR,
        workflow::OK => workflow::RUNTIME,
        failed => failed,
    }
}

/// The spawn/wait exit code of a review session's outcome (`review wait`).
pub fn for_outcome(outcome: scafld_protocol::methods::Outcome) -> u8 {
    use scafld_protocol::methods::Outcome;
    match outcome {
        Outcome::Pass => spawn_wait::PASS,
        Outcome::Fail | Outcome::NeedsWork => spawn_wait::FAIL,
        Outcome::ParseError => spawn_wait::PARSE_ERROR,
        Outcome::Timeout | Outcome::Pending => spawn_wait::TIMEOUT,
        Outcome::NoReviewers => spawn_wait::NO_REVIEWERS,
        Outcome::Internal => spawn_wait::INTERNAL,
    }
}

/// The command families whose codes differ from the workflow table.
#[derive(Debug, Clone, Copy)]
pub enum Family {
    /// Spawn/wait: usage errors exit 64, anything else `otherwise`.
    SpawnWait { otherwise: u8 },
    /// Template reviews: usage errors exit 2, anything else counts as UNKNOWN.
    Template,
}

/// Move a workflow-coded error into `family`'s table: what the caller got wrong (usage, an
/// unknown or invalid name) is that family's usage code, anything else its failure code.
pub fn in_family(error: CliError, family: Family) -> CliError {
    let usage = error.exit_code == workflow::USAGE || matches!(error.code.as_str(), "not_found" | "invalid_input");
    let exit_code = match family {
        Family::SpawnWait { otherwise } => {
            if usage {
                spawn_wait::USAGE
            } else {
                otherwise
            }
        }
        Family::Template => {
            if usage {
                template::USAGE
            } else if error.exit_code == workflow::UNREACHABLE
                && error.code != scafld_protocol::error::WORKSPACE_NOT_FOUND
            {
                // No daemon to ask (none answers, one of another protocol or build, one not to
                // be trusted): the table's own code for it, never an UNKNOWN verdict.
                template::UNREACHABLE
            } else {
                template::UNKNOWN
            }
        }
    };
    CliError { exit_code, ..error }
}
