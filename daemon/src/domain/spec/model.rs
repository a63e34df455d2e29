//! Spec model types. Field values are kept as written (strings) where the file may hold
//! anything; typed accessors interpret them and the parser reports what does not parse.

use scafld_protocol::methods::Counts;
use serde::Serialize;

use crate::domain::lifecycle::{HardenStatus, Status};

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Spec {
    pub front: FrontMatter,
    pub title: String,
    pub current_state: CurrentState,
    pub summary: String,
    pub objectives: Vec<String>,
    pub scope: Vec<String>,
    pub touchpoints: Vec<String>,
    pub context: Context,
    pub acceptance: Acceptance,
    pub phases: Vec<Phase>,
    pub review: ReviewProjection,
    pub harden_rounds: Vec<HardenRound>,
    /// Each item of the sections that declare what the task touches (Context's packages and
    /// files impacted, Scope, Touchpoints, every phase's Changes) as read, with the line it
    /// starts on (1-based), in the order read: where a scope entry's diagnostic points. Where
    /// the text says it, not what it says: never serialized.
    #[serde(skip)]
    pub declared_at: Vec<(String, usize)>,
}

impl Spec {
    pub fn status(&self) -> Option<Status> {
        crate::domain::lifecycle::read_status(&self.front.status)
    }

    /// The status as every command's output says it: the lifecycle status the front matter
    /// means ([`Spec::status`]: `in_progress`, a Python scafld name, is `active`, as `list`
    /// has it), or the word as written when it means none (the spec's error names it).
    pub fn status_word(&self) -> String {
        self.status().map_or_else(|| self.front.status.clone(), |s| s.to_string())
    }

    pub fn harden_status(&self) -> HardenStatus {
        crate::domain::lifecycle::read_harden_status(&self.front.harden_status).unwrap_or(HardenStatus::NotRun)
    }

    pub fn phase(&self, id: &str) -> Option<&Phase> {
        self.phases.iter().find(|p| p.id() == id)
    }

    /// Every criterion: phase criteria in document order, then the task-level ones.
    pub fn criteria(&self) -> impl Iterator<Item = &Criterion> {
        self.phases.iter().flat_map(|p| p.criteria.iter()).chain(self.acceptance.criteria.iter())
    }

    /// How far the spec's phases and criteria are, as written.
    pub fn progress(&self) -> Counts {
        progress_of(self.phases.iter().map(|p| p.status.as_str()), self.criteria().map(|c| c.status.as_str()))
    }
}

/// How far phases and criteria with these states are (a phase's `Status`, a criterion's; a
/// criterion's empty one is pending): a spec's [`Spec::progress`], or its ledger's as the index
/// keeps it.
pub fn progress_of<'a>(
    phases: impl IntoIterator<Item = &'a str>,
    criteria: impl IntoIterator<Item = &'a str>,
) -> Counts {
    let mut progress = Counts::default();
    for phase in phases {
        progress.phases_total += 1;
        progress.phases_completed += usize::from(phase == "completed");
    }
    for status in criteria {
        progress.criteria_total += 1;
        progress.criteria_passed += usize::from(status == PASS);
        progress.criteria_failed += usize::from(matches!(status, "fail" | "invalid"));
        progress.criteria_pending += usize::from(criterion_state(status) == PENDING);
    }
    progress
}

const PASS: &str = "pass";
const PENDING: &str = "pending";

/// A criterion's state from its status: `pending` when nothing was recorded yet.
pub fn criterion_state(status: &str) -> &str {
    if status.is_empty() { PENDING } else { status }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FrontMatter {
    pub spec_version: String,
    pub task_id: String,
    pub created: String,
    pub updated: String,
    pub status: String,
    pub harden_status: String,
    pub size: String,
    pub risk_level: String,
    /// Keys this version does not know, kept in order.
    pub extra: Vec<(String, String)>,
}

/// `## Current State`: written by the runner for humans and agents.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CurrentState {
    /// The `Status:` line as written; the front matter's `status` is the truth, this line is
    /// its copy for readers (a projection rewrites it when the two differ).
    pub status: String,
    pub current_phase: String,
    pub next: String,
    pub reason: String,
    pub blockers: String,
    pub allowed_follow_up: String,
    pub latest_runner_update: String,
    pub review_gate: String,
}

/// `## Context` (packages and impacted files feed review scope).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Context {
    pub packages: Vec<String>,
    pub files_impacted: Vec<String>,
}

/// Task-level `## Acceptance`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Acceptance {
    pub profile: String,
    /// Definition-of-done lines, kept verbatim.
    pub definition_of_done: Vec<String>,
    /// Validation criteria, run as final acceptance after the last phase.
    pub criteria: Vec<Criterion>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Phase {
    pub number: u32,
    pub name: String,
    pub status: String,
    pub dependencies: String,
    /// `Objective:` (or the older `Goal:`).
    pub objective: String,
    pub changes: Vec<String>,
    pub criteria: Vec<Criterion>,
    pub line: usize,
}

impl Phase {
    pub fn id(&self) -> String {
        format!("phase{}", self.number)
    }
}

/// One acceptance criterion. Optional fields are empty when unset: absent, or written `none`
/// as the original tool writes every field it does not know.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Criterion {
    pub id: String,
    /// The type word (`test`, `command`, `boundary`, `browser`, `manual`, `focused-tests`, ...);
    /// empty when the line names none.
    pub kind: String,
    pub title: String,
    /// One line, or the body of a fenced block under `- Command:` (lines joined with `\n`).
    pub command: String,
    pub expected_kind: String,
    pub cwd: String,
    pub timeout_seconds: String,
    pub status: String,
    pub evidence: String,
    pub source_event: String,
    /// Detail lines with keys this version does not interpret, kept in order.
    pub other: Vec<(String, String)>,
    /// A second line of a field that defines the check (`Command`, `Expected kind`, `Cwd`,
    /// `Timeout seconds`): its label as written and its 1-based line. The first is read; a
    /// criterion with one is not run ([`super::criterion_problems`]). Never serialized, so the
    /// model's older digests are unchanged.
    #[serde(skip)]
    pub repeated: Vec<(String, usize)>,
    pub line: usize,
}

/// Whether a criterion's `Cwd` stays inside the workspace: relative, never climbing out with
/// `..` (empty is the workspace root).
pub fn cwd_inside(cwd: &str) -> bool {
    !cwd.starts_with('/') && !cwd.split('/').any(|part| part == "..")
}

pub const EXPECTED_KINDS: [&str; 5] =
    ["exit_code_zero", "exit_code_nonzero", "no_matches", "browser_evidence", "manual"];

impl Criterion {
    /// The matcher: the declared kind, else `browser_evidence` for browser criteria, else
    /// `exit_code_zero`.
    pub fn effective_kind(&self) -> &str {
        if !self.expected_kind.is_empty() {
            &self.expected_kind
        } else if self.kind == "browser" {
            "browser_evidence"
        } else if self.kind == "manual" || (self.kind.is_empty() && self.command.is_empty()) {
            // A line without a type or a command is a checklist item a person signs off.
            "manual"
        } else {
            "exit_code_zero"
        }
    }

    /// Known by its id alone: a criterion of a ledger sketch that the approved contract pins
    /// and that never ran (`ledger::sketch_pinned`): no line in a file, no command, no matcher.
    /// Its kind is not known either, whatever [`Criterion::effective_kind`] makes of it.
    pub fn known_by_id_alone(&self) -> bool {
        self.line == 0 && self.command.is_empty() && self.expected_kind.is_empty() && self.kind.is_empty()
    }

    /// The criterion's own absolute timeout, when it names a positive one.
    pub fn own_timeout_seconds(&self) -> Option<u64> {
        self.timeout_seconds.parse::<u64>().ok().filter(|t| *t > 0)
    }

    /// The title, or the type when the line has no title (``- [ ] `v1` compile``).
    pub fn display_title(&self) -> &str {
        if self.title.is_empty() { &self.kind } else { &self.title }
    }

    /// Runs a command (everything but manual criteria).
    pub fn is_executable(&self) -> bool {
        self.effective_kind() != "manual"
    }

    pub fn passed(&self) -> bool {
        self.status == PASS
    }

    /// `pending` when nothing was recorded yet.
    pub fn state(&self) -> &str {
        criterion_state(&self.status)
    }
}

/// `## Review`, as far as the runner reads it back.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReviewProjection {
    pub status: String,
    pub verdict: String,
    /// The section body as written (the review gate re-renders it wholesale).
    pub body: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HardenRound {
    pub id: String,
    pub status: String,
    pub started: String,
    pub ended: String,
    /// The digest of the draft a delegated round judged (empty for a round written by hand).
    pub digest: String,
    pub checks: Vec<HardenCheck>,
    pub questions: Vec<HardenQuestion>,
    pub line: usize,
    /// How the file writes the round.
    #[serde(skip)]
    pub form: RoundForm,
}

/// How a harden round is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RoundForm {
    /// `### round-N` with `Status:`/`Started:`/`Ended:` lines: this tool's and the Go original's.
    #[default]
    Heading,
    /// `- Round N` with `- Started at:`/`- Ended at:`/`- Outcome:` nested under it: Python
    /// scafld 2.x's.
    Listed,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HardenCheck {
    pub name: String,
    pub grounded_in: String,
    pub result: String,
    pub evidence: String,
    pub line: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HardenQuestion {
    pub text: String,
    pub grounded_in: String,
    pub recommended_answer: String,
    pub if_unanswered: String,
    pub answered_with: String,
    pub line: usize,
}
