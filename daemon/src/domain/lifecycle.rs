//! Lifecycle statuses (the words are the protocol's), how a spec's front matter spells them,
//! and the directory each lives in.

pub use scafld_protocol::vocab::{HardenStatus, Status, UnknownWord};

/// Read a front-matter status, accepting the Python scafld 2.x names (`in_progress` is `active`;
/// `under_review` is a draft under discussion) beside the current ones.
pub fn read_status(s: &str) -> Option<Status> {
    match s {
        "in_progress" => Some(Status::Active),
        "under_review" => Some(Status::Draft),
        other => other.parse().ok(),
    }
}

/// Read a front-matter `harden_status`; an empty one has not run.
pub fn read_harden_status(s: &str) -> Result<HardenStatus, UnknownWord> {
    if s.is_empty() { Ok(HardenStatus::NotRun) } else { s.parse() }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Folder {
    Drafts,
    Approved,
    Active,
    Archive,
}

impl Folder {
    /// The `specs/` subdirectory a spec with `status` lives in (archive adds `YYYY-MM/`).
    pub fn of(status: Status) -> Folder {
        match status {
            Status::Draft => Folder::Drafts,
            Status::Approved => Folder::Approved,
            Status::Active | Status::Blocked | Status::Review => Folder::Active,
            Status::Completed | Status::Failed | Status::Cancelled => Folder::Archive,
        }
    }

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
