//! Which tool's words a spec file speaks, told from the file itself, so a write keeps it one its
//! own tool still reads: the original's releases accept fewer front-matter words than this
//! tool writes.

use super::model::Spec;
use crate::domain::lifecycle::{HardenStatus, Status, read_harden_status, read_status};

/// A spec file's dialect.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Dialect {
    /// This tool's (and the original's later releases, which bind rounds with `Spec digest:`):
    /// every word of [`Status`] and [`HardenStatus`].
    #[default]
    Scafld,
    /// The Go original's 2.x releases: a `### round-N` harden round without `Spec digest:`.
    /// `harden_status` is one of `not_run`, `in_progress`, `passed`, `failed` (or empty).
    Go,
}

impl Dialect {
    /// The dialect `spec` (as parsed from its file) is written in.
    pub fn of(spec: &Spec) -> Dialect {
        if spec.harden_rounds.iter().any(|r| r.digest.is_empty()) { Dialect::Go } else { Dialect::Scafld }
    }

    /// The word this dialect writes for `status`.
    pub fn status(self, status: Status) -> &'static str {
        status.as_str()
    }

    /// Whether a file saying `file` (as read) says `status` in this dialect.
    pub fn says(self, file: Status, status: Status) -> bool {
        self.status(file) == self.status(status)
    }

    /// The word this dialect writes for `harden`; `None` where it has none, and the line keeps
    /// what it says (the ledger holds the rest: an override is recorded there).
    pub fn harden(self, harden: HardenStatus) -> Option<&'static str> {
        use HardenStatus::*;
        match (self, harden) {
            (Dialect::Scafld, any) => Some(any.as_str()),
            (Dialect::Go, NotRun | InProgress | Passed | Failed) => Some(harden.as_str()),
            // A delegated round that asked for revision: the hardening failed.
            (Dialect::Go, NeedsRevision) => Some(Failed.as_str()),
            (Dialect::Go, _) => None,
        }
    }

    /// The front-matter (or Current State) status to write over `written` for the model's
    /// `wanted`: `written` itself when it already says that status in this dialect, else the
    /// dialect's word. A word that names no status is written as it is.
    pub fn status_over(self, written: &str, wanted: &str) -> String {
        match (read_status(written), read_status(wanted)) {
            (Some(file), Some(status)) if self.says(file, status) && self != Dialect::Scafld => written.to_string(),
            (_, Some(status)) => self.status(status).to_string(),
            (_, None) => wanted.to_string(),
        }
    }

    /// The `harden_status` to write over `written` for the model's `wanted` (see
    /// [`Dialect::harden`]).
    pub fn harden_over(self, written: &str, wanted: &str) -> String {
        match read_harden_status(wanted) {
            _ if wanted.is_empty() => String::new(),
            Ok(harden) => self.harden(harden).map_or_else(|| written.to_string(), str::to_string),
            Err(_) => wanted.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::spec::parse;

    const GO: &str = "---\nspec_version: '2.0'\ntask_id: g\nstatus: draft\nharden_status: in_progress\n---\n\n# G\n\n## Harden Rounds\n\n### round-1\n\nStatus: in_progress\nStarted: 2026-05-15T09:10:00Z\nEnded: none\n";

    #[test]
    fn the_dialect_is_told_from_the_file() {
        assert_eq!(Dialect::of(&parse(GO).spec), Dialect::Go);
        let bound = GO.replace("Ended: none\n", "Ended: none\nSpec digest: sha256:00\n");
        assert_eq!(Dialect::of(&parse(&bound).spec), Dialect::Scafld, "this tool's rounds are bound");
        let none = GO.replace("### round-1", "- none");
        assert_eq!(Dialect::of(&parse(&none).spec), Dialect::Scafld, "nothing marks another tool");
    }

    #[test]
    fn each_dialect_writes_only_its_own_words() {
        assert_eq!(Dialect::Go.status_over("active", "review"), "review");
        assert_eq!(Dialect::Go.harden_over("not_run", "overridden"), "not_run", "the ledger holds the override");
        assert_eq!(Dialect::Go.harden_over("in_progress", "needs_revision"), "failed");
        assert_eq!(Dialect::Go.harden_over("", "overridden"), "");
        assert_eq!(Dialect::Scafld.harden_over("not_run", "overridden"), "overridden");
    }
}
