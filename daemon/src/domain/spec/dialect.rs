//! Which tool's words a spec file speaks, told from the file itself, so a write keeps it one its
//! own tool still reads: the original's releases accept fewer front-matter words than this
//! tool writes.

use super::model::{RoundForm, Spec};
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
    /// Python scafld 2.x: a `- Round N` harden round, a status only it writes (`in_progress`,
    /// `under_review`), or the criterion lines only it writes (`Last attempt:`, `Checked at:`).
    /// Its statuses are `draft`, `under_review`, `approved`, `in_progress`, `completed`,
    /// `failed`, `cancelled` (`blocked` is read, but its build and review want `in_progress`),
    /// its `harden_status` one of `not_run`, `in_progress`, `passed`.
    Python,
}

impl Dialect {
    /// The dialect `spec` (as parsed from its file) is written in.
    pub fn of(spec: &Spec) -> Dialect {
        let python_status = matches!(spec.front.status.as_str(), "in_progress" | "under_review");
        let listed = spec.harden_rounds.iter().any(|r| r.form == RoundForm::Listed);
        let python_details = spec.criteria().any(|c| {
            c.other
                .iter()
                .any(|(key, _)| key.eq_ignore_ascii_case("last attempt") || key.eq_ignore_ascii_case("checked at"))
        });
        if python_status || listed || python_details {
            Dialect::Python
        } else if spec.harden_rounds.iter().any(|r| r.digest.is_empty()) {
            Dialect::Go
        } else {
            Dialect::Scafld
        }
    }

    /// The word this dialect writes for `status`.
    pub fn status(self, status: Status) -> &'static str {
        match (self, status) {
            (Dialect::Python, Status::Active | Status::Blocked | Status::Review) => "in_progress",
            _ => status.as_str(),
        }
    }

    /// Whether a file saying `file` (as read) says `status` in this dialect: Python's
    /// `in_progress` is an active, blocked or reviewed task alike.
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
            (Dialect::Python, NotRun | InProgress | Passed) => Some(harden.as_str()),
            (Dialect::Go | Dialect::Python, _) => None,
        }
    }

    /// The front-matter (or Current State) status to write over `written` for the model's
    /// `wanted`: `written` itself when it already says that status in this dialect (Python's
    /// `under_review` stays a draft's word), else the dialect's word. A word that names no
    /// status is written as it is.
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
    const PY: &str = "---\nspec_version: '2.0'\ntask_id: p\nstatus: draft\nharden_status: passed\n---\n\n# P\n\n## Harden Rounds\n\n- Round 1\n  - Started at: 2026-11-26T21:48:14Z\n  - Ended at: 2026-11-26T21:48:50Z\n  - Outcome: passed\n  - Questions:\n    - Question: Which file?\n      - Grounded in: spec_gap:scope\n      - Answered with: greet.txt\n";

    #[test]
    fn the_dialect_is_told_from_the_file() {
        assert_eq!(Dialect::of(&parse(GO).spec), Dialect::Go);
        let bound = GO.replace("Ended: none\n", "Ended: none\nSpec digest: sha256:00\n");
        assert_eq!(Dialect::of(&parse(&bound).spec), Dialect::Scafld, "this tool's rounds are bound");
        let none = GO.replace("### round-1", "- none");
        assert_eq!(Dialect::of(&parse(&none).spec), Dialect::Scafld, "nothing marks another tool");
        assert_eq!(Dialect::of(&parse(&none.replace("status: draft", "status: in_progress")).spec), Dialect::Python);
        let python = parse(PY).spec;
        assert_eq!(Dialect::of(&python), Dialect::Python);
        let round = &python.harden_rounds[0];
        assert_eq!((round.id.as_str(), round.status.as_str(), round.form), ("round-1", "passed", RoundForm::Listed));
        assert_eq!((round.started.as_str(), round.ended.as_str()), ("2026-11-26T21:48:14Z", "2026-11-26T21:48:50Z"));
        assert_eq!(
            (round.questions[0].text.as_str(), round.questions[0].answered_with.as_str()),
            ("Which file?", "greet.txt")
        );
    }

    /// The file Python scafld 2.0.0 wrote (`plan`, `harden --mark-passed`), written over as a
    /// build and an override would: its words stay Python's, and projecting again changes nothing.
    #[test]
    fn a_python_file_is_written_in_pythons_words() {
        let text = include_str!("../../../../tests/fixtures/specs/python-hardened.md");
        let parsed = parse(text);
        assert_eq!(Dialect::of(&parsed.spec), Dialect::Python);
        assert_eq!(parsed.spec.harden_rounds[0].status, "passed");
        let mut next = parsed.spec.clone();
        next.front.status = "review".into();
        next.current_state.status = "review".into();
        next.front.harden_status = "overridden".into();
        let written = crate::domain::spec::project::project(text, &next).unwrap();
        assert!(written.contains("\nstatus: in_progress\nharden_status: passed\n"), "{written}");
        assert!(written.contains("\n## Current State\n\nStatus: in_progress\n"), "{written}");
        assert_eq!(crate::domain::spec::project::project(&written, &next).unwrap(), written);
    }

    #[test]
    fn each_dialect_writes_only_its_own_words() {
        assert_eq!(Dialect::Python.status_over("approved", "active"), "in_progress");
        assert_eq!(Dialect::Python.status_over("in_progress", "review"), "in_progress");
        assert_eq!(Dialect::Python.status_over("in_progress", "completed"), "completed");
        assert_eq!(Dialect::Python.status_over("under_review", "draft"), "under_review");
        assert_eq!(Dialect::Scafld.status_over("in_progress", "active"), "active", "this tool's word");
        assert_eq!(Dialect::Go.status_over("active", "review"), "review");
        assert_eq!(Dialect::Go.harden_over("not_run", "overridden"), "not_run", "the ledger holds the override");
        assert_eq!(Dialect::Go.harden_over("in_progress", "needs_revision"), "failed");
        assert_eq!(Dialect::Python.harden_over("in_progress", "needs_revision"), "in_progress");
        assert_eq!(Dialect::Python.harden_over("", "overridden"), "");
        assert_eq!(Dialect::Scafld.harden_over("not_run", "overridden"), "overridden");
    }
}
