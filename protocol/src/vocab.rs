//! The closed vocabularies of the wire: every field whose value is one word out of a fixed list
//! is one of these enums. Each serialises as its snake_case (or historical) word, so the bytes
//! on the wire and in stored records are the words they always were.

use serde::{Deserialize, Serialize};

/// A word that is not in a vocabulary, with the words that are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownWord {
    /// What the word names (`status`, `mode`, ...).
    pub what: &'static str,
    pub got: String,
    pub expected: &'static [&'static str],
}

impl std::fmt::Display for UnknownWord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unknown {} {:?} (expected one of {})", self.what, self.got, self.expected.join(", "))
    }
}

impl std::error::Error for UnknownWord {}

/// What every vocabulary offers generically (a command line lists `WORDS` as its choices).
pub trait Vocabulary: Copy + std::str::FromStr<Err = UnknownWord> + Send + Sync + 'static {
    /// Every word, in declaration order.
    const WORDS: &'static [&'static str];
}

/// Declares vocabularies: `pub enum Name("what") { Variant = "word", ... }`. Each gets serde
/// under its words, `ALL`, [`Vocabulary`], `as_str`, `Display` (padded) and `FromStr` ([`UnknownWord`]).
macro_rules! vocabulary {
    ($(
        $(#[$meta:meta])*
        pub enum $name:ident($what:literal) {
            $( $(#[$vmeta:meta])* $variant:ident = $word:literal ),+ $(,)?
        }
    )+) => {$(
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum $name {
            $( $(#[$vmeta])* #[serde(rename = $word)] $variant, )+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// The wire spelling.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $word,)+
                }
            }
        }

        impl Vocabulary for $name {
            const WORDS: &'static [&'static str] = &[$($word),+];
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.as_str())
            }
        }

        /// A vocabulary word compares equal to its spelling.
        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl std::str::FromStr for $name {
            type Err = UnknownWord;
            fn from_str(s: &str) -> Result<$name, UnknownWord> {
                $name::ALL
                    .iter()
                    .copied()
                    .find(|v| v.as_str() == s)
                    .ok_or_else(|| UnknownWord { what: $what, got: s.to_string(), expected: <$name as Vocabulary>::WORDS })
            }
        }
    )+};
}

vocabulary! {
    /// Which tree a receipt fingerprints.
    pub enum SnapshotMode("snapshot mode") {
        /// The working tree as it was at finalize.
        WorkingTree = "working_tree",
        /// The change from a base ref to the head.
        BaseDelta = "base_delta",
    }

    /// How independent a receipt's reviewer was of the agent under review.
    pub enum IndependenceLevel("independence level") {
        /// A separate, read-only reviewer process, vendor separation not proven.
        IsolationOnly = "isolation_only",
        /// The host and the reviewer resolve to different model vendors.
        CrossVendor = "cross_vendor",
    }

    /// Why a receipt's independence is only `isolation_only`.
    pub enum Downgrade("downgrade") {
        SameVendor = "same_vendor",
        UnknownHost = "unknown_host",
        UnknownReviewer = "unknown_reviewer",
    }

    /// A task's lifecycle status (the spec's front matter `status`).
    pub enum Status("status") {
        Draft = "draft",
        Approved = "approved",
        Active = "active",
        Blocked = "blocked",
        Review = "review",
        Completed = "completed",
        Failed = "failed",
        Cancelled = "cancelled",
    }

    /// Where a task's hardening stands.
    #[derive(Default)]
    pub enum HardenStatus("harden_status") {
        #[default]
        NotRun = "not_run",
        InProgress = "in_progress",
        Passed = "passed",
        Failed = "failed",
        /// The original tool's later releases: a delegated round found blocking problems.
        NeedsRevision = "needs_revision",
        /// Approved over an unfinished round with an operator's reason.
        Overridden = "overridden",
        /// A delegated round could not run (transport or grounding problems).
        Error = "error",
    }

    /// How a reviewer reads the work: find problems, or check that earlier ones were fixed.
    #[derive(Default)]
    pub enum ReviewMode("mode") {
        #[default]
        Discover = "discover",
        Verify = "verify",
    }

    /// Whether a review's verdict stands (auto) or awaits `review accept|reject` (manual).
    #[derive(Default)]
    pub enum Approval("approval") {
        #[default]
        Auto = "auto",
        Manual = "manual",
    }

    /// A human's decision on a proposed verdict.
    pub enum Decision("decision") {
        Accept = "accept",
        Reject = "reject",
    }

    /// What a criterion's run (or a person's evidence) came to.
    #[derive(Default)]
    pub enum CriterionStatus("status") {
        /// Not run yet, or waiting for a person's evidence.
        #[default]
        Pending = "pending",
        Pass = "pass",
        Fail = "fail",
        /// The criterion cannot run as written (it names no command, or an unknown matcher).
        Invalid = "invalid",
    }

    /// A person's result for a manual criterion.
    pub enum Disposition("disposition") {
        Pass = "pass",
        Fail = "fail",
    }

    /// A verdict of the review gate.
    pub enum Verdict("verdict") {
        Pass = "pass",
        Fail = "fail",
    }

    /// Where the review gate stands after a session: a task's verdict (or that it awaits a
    /// human decision, that the review must be retried, or that its verdict could not be
    /// recorded), or a range review's outcome.
    pub enum GateState("gate") {
        Pass = "pass",
        Fail = "fail",
        AwaitingApproval = "awaiting_approval",
        Retry = "retry",
        NeedsWork = "needs_work",
        NoReviewers = "no_reviewers",
        ParseError = "parse_error",
        Timeout = "timeout",
        Internal = "internal_error",
        Pending = "pending",
        /// The reviewers answered, but their verdict could not be written to the task's
        /// ledger (a full state disk): nothing is on record, and `review retry` records it.
        Unrecorded = "unrecorded",
    }

    /// A template review's verdict; UNKNOWN when no answer could be read (never a pass).
    #[derive(Default)]
    pub enum TemplateVerdict("verdict") {
        Pass = "PASS",
        Concerns = "CONCERNS",
        Fail = "FAIL",
        #[default]
        Unknown = "UNKNOWN",
    }

    /// How a template review's finding weighs.
    #[derive(Default)]
    pub enum TemplateSeverity("severity") {
        Pass = "PASS",
        #[default]
        Concern = "CONCERN",
        Fail = "FAIL",
    }

    /// Where a review session is.
    pub enum SessionState("state") {
        Running = "running",
        /// Settled, with a verdict awaiting a human decision (manual approval).
        AwaitingApproval = "awaiting_approval",
        Resolved = "resolved",
        /// Every reviewer answered, but the verdict could not be recorded in the task's ledger:
        /// `review retry` records it (or a new review replaces it).
        Unrecorded = "unrecorded",
    }

    /// How a spec diagnostic weighs.
    pub enum Severity("severity") {
        Error = "error",
        Warning = "warning",
    }

    /// What a session's reviewers came to together, or one reviewer's verdict, in the
    /// seed-004 spelling.
    pub enum ConsensusVerdict("verdict") {
        Pass = "PASS",
        Fail = "FAIL",
        NeedsWork = "NEEDS_WORK",
        NoReviewers = "no_reviewers",
    }

    /// What a session came to: the wait document's `outcome`, from which `review wait`'s exit
    /// code is derived.
    #[derive(Default)]
    pub enum Outcome("outcome") {
        #[default]
        Pending = "pending",
        Pass = "pass",
        Fail = "fail",
        NeedsWork = "needs_work",
        NoReviewers = "no_reviewers",
        ParseError = "parse_error",
        Timeout = "timeout",
        Internal = "internal_error",
    }

    /// The lifecycle folders under `.scafld/specs/`, in lookup order.
    pub enum Folder("folder") {
        Drafts = "drafts",
        Approved = "approved",
        Active = "active",
        Archive = "archive",
    }

    /// Where a wait ended: the session resolved, the wait timed out, or an error settled it.
    #[derive(Default)]
    pub enum WaitStatus("status") {
        #[default]
        Resolved = "resolved",
        Timeout = "timeout",
        Error = "error",
    }

    /// Where a job is in its life. Terminal states never read as a pass.
    #[derive(Default)]
    pub enum JobState("state") {
        #[default]
        Queued = "queued",
        Running = "running",
        /// Ran to the end and every criterion passed.
        Succeeded = "succeeded",
        /// Ran to the end with failing criteria.
        Failed = "failed",
        /// A criterion hit its timeout.
        TimedOut = "timed_out",
        Cancelled = "cancelled",
        /// The daemon stopped or died while the job ran; it has no result.
        Abandoned = "abandoned",
    }

    /// What a job does: run a task's acceptance criteria, one reviewer's review, or the
    /// provider of a delegated harden (`harden --provider`).
    pub enum JobKind("kind") {
        Acceptance = "acceptance",
        Review = "review",
        Harden = "harden",
    }
}

impl Status {
    /// Completed, failed or cancelled: the task's life is over.
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Completed | Status::Failed | Status::Cancelled)
    }
}

impl From<Outcome> for GateState {
    /// A session's outcome as the gate state of a review that records no task verdict.
    fn from(outcome: Outcome) -> GateState {
        match outcome {
            Outcome::Pending => GateState::Pending,
            Outcome::Pass => GateState::Pass,
            Outcome::Fail => GateState::Fail,
            Outcome::NeedsWork => GateState::NeedsWork,
            Outcome::NoReviewers => GateState::NoReviewers,
            Outcome::ParseError => GateState::ParseError,
            Outcome::Timeout => GateState::Timeout,
            Outcome::Internal => GateState::Internal,
        }
    }
}

impl From<Verdict> for GateState {
    fn from(verdict: Verdict) -> GateState {
        match verdict {
            Verdict::Pass => GateState::Pass,
            Verdict::Fail => GateState::Fail,
        }
    }
}

/// How many folder levels below `archive/` specs are looked for: the original walks the whole
/// archive (a spec directly in it, in a month, or deeper, `archive/legacy/2025-01/`); this bound
/// only keeps a pathological tree from costing without end.
pub const ARCHIVE_DEPTH: usize = 16;

impl Folder {
    /// The folder a spec with `status` lives in (archive adds `YYYY-MM/`).
    pub fn of(status: Status) -> Folder {
        match status {
            Status::Draft => Folder::Drafts,
            Status::Approved => Folder::Approved,
            Status::Active | Status::Blocked | Status::Review => Folder::Active,
            Status::Completed | Status::Failed | Status::Cancelled => Folder::Archive,
        }
    }

    /// The folder of a spec file at `relative` (a path below `.scafld/specs/`), or `None` when
    /// no spec lives there: a `*.md` directly in a lifecycle folder, or at most
    /// [`ARCHIVE_DEPTH`] folders below `archive/`, and not a hidden (temporary) file. Anything
    /// else there (`specs/README.md`, notes) is not a spec, for the daemon and the editor alike.
    pub fn holding(relative: &std::path::Path) -> Option<Folder> {
        use std::path::Component;
        let parts: Vec<Component> = relative.components().collect();
        if !parts.iter().all(|part| matches!(part, Component::Normal(_))) {
            return None;
        }
        let name = relative.file_name()?.to_str()?;
        if !name.ends_with(".md") || name.starts_with('.') {
            return None;
        }
        let folder: Folder = parts.first()?.as_os_str().to_str()?.parse().ok()?;
        let depth_ok =
            if folder == Folder::Archive { (2..=ARCHIVE_DEPTH + 2).contains(&parts.len()) } else { parts.len() == 2 };
        depth_ok.then_some(folder)
    }
}

impl JobState {
    pub fn is_finished(self) -> bool {
        !matches!(self, JobState::Queued | JobState::Running)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_through_serde_and_from_str() {
        for status in Status::ALL {
            let json = serde_json::to_string(status).unwrap();
            assert_eq!(json, format!("\"{status}\""));
            assert_eq!(serde_json::from_str::<Status>(&json).unwrap(), *status);
            assert_eq!(status.as_str().parse::<Status>().unwrap(), *status);
        }
        assert_eq!(serde_json::to_string(&Outcome::Internal).unwrap(), "\"internal_error\"");
        assert_eq!(serde_json::to_string(&ConsensusVerdict::NeedsWork).unwrap(), "\"NEEDS_WORK\"");
        let unknown = "maybe".parse::<Verdict>().unwrap_err();
        assert_eq!(unknown.to_string(), r#"unknown verdict "maybe" (expected one of pass, fail)"#);
    }
}
