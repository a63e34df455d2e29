//! Lifecycle statuses, the directory each lives in, and what a task may do next.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Draft,
    Approved,
    Active,
    Blocked,
    Review,
    Completed,
    Failed,
    Cancelled,
}

impl Status {
    pub const ALL: [Status; 8] = [
        Status::Draft,
        Status::Approved,
        Status::Active,
        Status::Blocked,
        Status::Review,
        Status::Completed,
        Status::Failed,
        Status::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Draft => "draft",
            Status::Approved => "approved",
            Status::Active => "active",
            Status::Blocked => "blocked",
            Status::Review => "review",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }

    /// The `specs/` subdirectory a spec with this status lives in (archive adds `YYYY-MM/`).
    pub fn folder(self) -> Folder {
        match self {
            Status::Draft => Folder::Drafts,
            Status::Approved => Folder::Approved,
            Status::Active | Status::Blocked | Status::Review => Folder::Active,
            Status::Completed | Status::Failed | Status::Cancelled => Folder::Archive,
        }
    }

    pub fn is_terminal(self) -> bool {
        self.folder() == Folder::Archive
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Status {
    type Err = String;
    fn from_str(s: &str) -> Result<Status, String> {
        Status::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| format!("unknown status {s:?} (expected one of {})", Status::names()))
    }
}

impl Status {
    /// Read a front-matter status, accepting the Python scafld 2.x names (`in_progress` is
    /// `active`; `under_review` is a draft under discussion) beside the current ones.
    pub fn read(s: &str) -> Option<Status> {
        match s {
            "in_progress" => Some(Status::Active),
            "under_review" => Some(Status::Draft),
            other => other.parse().ok(),
        }
    }

    fn names() -> String {
        Status::ALL.map(Status::as_str).join(", ")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Folder {
    Drafts,
    Approved,
    Active,
    Archive,
}

impl Folder {
    pub const ALL: [Folder; 4] = [Folder::Drafts, Folder::Approved, Folder::Active, Folder::Archive];

    pub fn dir_name(self) -> &'static str {
        match self {
            Folder::Drafts => "drafts",
            Folder::Approved => "approved",
            Folder::Active => "active",
            Folder::Archive => "archive",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HardenStatus {
    NotRun,
    InProgress,
    Passed,
    Failed,
    /// The original tool's later releases: a delegated round found blocking problems.
    NeedsRevision,
    /// Approved over an unfinished round with an operator's reason.
    Overridden,
    /// A delegated round could not run (transport or grounding problems).
    Error,
}

impl HardenStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            HardenStatus::NotRun => "not_run",
            HardenStatus::InProgress => "in_progress",
            HardenStatus::Passed => "passed",
            HardenStatus::Failed => "failed",
            HardenStatus::NeedsRevision => "needs_revision",
            HardenStatus::Overridden => "overridden",
            HardenStatus::Error => "error",
        }
    }
}

impl FromStr for HardenStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<HardenStatus, String> {
        match s {
            "" | "not_run" => Ok(HardenStatus::NotRun),
            "in_progress" => Ok(HardenStatus::InProgress),
            "passed" => Ok(HardenStatus::Passed),
            "failed" => Ok(HardenStatus::Failed),
            "needs_revision" => Ok(HardenStatus::NeedsRevision),
            "overridden" => Ok(HardenStatus::Overridden),
            "error" => Ok(HardenStatus::Error),
            other => Err(format!(
                "unknown harden_status {other:?} (expected not_run, in_progress, passed, failed, needs_revision, overridden or error)"
            )),
        }
    }
}
