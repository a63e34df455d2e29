//! The one table of exit codes, a row per command family (README "Exit codes" mirrors it).

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
}

/// Bounded waits (`job wait`).
pub mod wait {
    pub const FINISHED_OK: u8 = 0;
    pub const FINISHED_FAILED: u8 = 3;
    pub const STILL_RUNNING: u8 = 75;
}
