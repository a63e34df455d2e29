//! Hardening: opening a round, the prompt, the `--mark-passed` evidence check, and whether a
//! passed round still speaks for the draft (its digest).

use crate::domain::lifecycle::HardenStatus;
use crate::domain::spec::budget::clip;
use crate::domain::spec::project::{AUTHORED_DIGEST_PREFIX, ProjectionError, authored_digest, project};
use crate::domain::spec::{HardenRound, RoundForm, Spec, parse};

/// The six checks every round must carry before it can pass.
pub const REQUIRED_CHECKS: [&str; 6] = [
    "Path audit",
    "Command audit",
    "Scope/migration audit",
    "Acceptance timing audit",
    "Rollback/repair audit",
    "Design challenge",
];

/// What the evidence check needs to know about the world.
pub trait Ground {
    /// Whether the workspace-relative file has a line `line`, or `None` if it does not exist
    /// inside the workspace.
    fn reach(&self, path: &str, line: usize) -> Option<Reach>;
    /// Whether an archived spec with this task id exists.
    fn archived(&self, task_id: &str) -> bool;
}

/// Whether a cited line is in its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    Within,
    /// The file has only this many lines.
    Past(usize),
    /// Not counted that far (why).
    Unread(String),
}

/// The round `scafld harden` works on: the latest round when it is one of this tool's still
/// open (`in_progress`, the draft changed since or not: nothing judged it yet, so it is the one
/// to answer, never left open beside a second), else a new one ([`open_round`]). The caller
/// binds it to the draft as it is ([`bind_latest_round`]).
pub fn open_or_resume_round(spec: &Spec, now: &str) -> Spec {
    let open = spec
        .harden_rounds
        .last()
        .is_some_and(|r| r.form == RoundForm::Heading && r.status == HardenStatus::InProgress.as_str());
    if !open {
        return open_round(spec, now);
    }
    let mut next = spec.clone();
    if next.front.harden_status != HardenStatus::InProgress.as_str() {
        next.front.harden_status = HardenStatus::InProgress.as_str().into();
        next.front.updated = now.into();
    }
    let id = next.front.task_id.clone();
    next.current_state.next = "harden".into();
    next.current_state.reason = "hardening round in progress".into();
    next.current_state.allowed_follow_up = format!("scafld harden {id} --mark-passed");
    next
}

/// The state a round still open is closed with when another round opens: nobody judged it,
/// and the round opened after it is the one being answered. Python scafld leaves its rounds
/// open (`Outcome: in_progress`) as it opens the next; this tool never leaves two open.
pub const SUPERSEDED: &str = "superseded";

/// Whether `round` is open: `in_progress`, or no state at all (read as `in_progress`).
fn is_open(round: &HardenRound) -> bool {
    round.status.is_empty() || round.status == HardenStatus::InProgress.as_str()
}

/// Append a new round and mark hardening in progress. Any round still open (Python scafld's
/// `- Round N`, which holds no checks of this tool's; one of ours a delegated run did not fill
/// because the draft changed) is closed as [`SUPERSEDED`] at `now`, so only the new one is open.
pub fn open_round(spec: &Spec, now: &str) -> Spec {
    let mut next = spec.clone();
    for round in next.harden_rounds.iter_mut().filter(|r| is_open(r)) {
        round.status = SUPERSEDED.into();
        if crate::domain::spec::is_unset(&round.ended) {
            round.ended = now.into();
        }
    }
    let mut n = next.harden_rounds.len() + 1;
    while next.harden_rounds.iter().any(|r| r.id == format!("round-{n}")) {
        n += 1;
    }
    next.harden_rounds.push(HardenRound {
        id: format!("round-{n}"),
        status: "in_progress".into(),
        started: now.into(),
        ended: "none".into(),
        ..HardenRound::default()
    });
    let id = next.front.task_id.clone();
    next.front.harden_status = HardenStatus::InProgress.as_str().into();
    next.front.updated = now.into();
    next.current_state.next = "harden".into();
    next.current_state.reason = "hardening round in progress".into();
    next.current_state.allowed_follow_up = format!("scafld harden {id} --mark-passed");
    next
}

/// Why `--mark-passed` did not pass the latest round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkRefused {
    /// The spec holds no round to check: `scafld harden` opens one.
    NoRound,
    /// The latest round is Python scafld's (`- Round N`), which holds no checks of this tool's:
    /// `scafld harden` opens a round of its own.
    NotOurs { round: String },
    /// Evidence is missing or does not hold: every problem.
    Incomplete(Vec<String>),
    /// The round already passed, on an earlier draft: the changed draft needs a round of its own.
    PassedEarlier { round: String },
    /// The round passed without a `Spec digest:` (the original tool binds none): which draft it
    /// passed on cannot be told, so it is not bound to this one after the fact (`approve`
    /// honours it for the draft as it is: [`unbound_pass`]).
    PassedUnbound { round: String },
}

/// Check the latest round; on success return the spec with the round passed and bound to the
/// draft as it is now (`digest`, the [`draft_digest`] of the text `spec` was read from). A round
/// that already passed on an earlier draft is not passed again; one an older scafld bound to
/// part of this very draft ([`PassGap::OlderBinding`]) is bound to all of it.
pub fn mark_passed(spec: &Spec, digest: &str, ground: &dyn Ground, now: &str) -> Result<Spec, MarkRefused> {
    let Some(round) = spec.harden_rounds.last() else {
        return Err(MarkRefused::NoRound);
    };
    if round.form == RoundForm::Listed {
        return Err(MarkRefused::NotOurs { round: round.id.clone() });
    }
    if round.status == HardenStatus::Passed.as_str() && round.digest != digest && !older_binding_holds(spec, round) {
        let (unbound, round) = (round.digest.is_empty(), round.id.clone());
        return Err(if unbound { MarkRefused::PassedUnbound { round } } else { MarkRefused::PassedEarlier { round } });
    }
    let problems = round_problems(round, ground);
    if !problems.is_empty() {
        return Err(MarkRefused::Incomplete(problems));
    }
    let mut next = spec.clone();
    let round = next.harden_rounds.last_mut().expect("checked above");
    round.status = "passed".into();
    round.ended = now.into();
    round.digest = digest.to_string();
    let id = next.front.task_id.clone();
    next.front.harden_status = HardenStatus::Passed.as_str().into();
    next.front.updated = now.into();
    next.current_state.next = "approve".into();
    next.current_state.reason = "hardening passed".into();
    next.current_state.allowed_follow_up = format!("scafld approve {id}");
    Ok(next)
}

/// Why a passed hardening does not speak for the draft as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PassGap {
    NoRound,
    NotPassed {
        round: String,
        status: String,
    },
    /// The author's text changed after the round passed.
    Changed {
        round: String,
    },
    /// An older scafld bound the round to part of the draft only (title, summary, objectives,
    /// scope, touchpoints, context, acceptance and phases), which has not changed; whether the
    /// rest did (other sections, `risk_level`, `size`, the round's own checks) cannot be told.
    /// `--mark-passed` binds the round to the whole draft as it is.
    OlderBinding {
        round: String,
    },
}

impl PassGap {
    /// The command that makes the draft hardened as it is.
    pub fn command(&self, task: &str) -> String {
        match self {
            PassGap::OlderBinding { .. } => format!("scafld harden {task} --mark-passed"),
            _ => format!("scafld harden {task}"),
        }
    }
}

impl std::fmt::Display for PassGap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PassGap::NoRound => f.write_str("the spec holds no harden round that passed"),
            PassGap::NotPassed { round, status } => {
                write!(f, "its latest harden round, {round}, is {status}, not passed")
            }
            PassGap::Changed { round } => write!(f, "the draft changed after {round} passed"),
            PassGap::OlderBinding { round } => write!(
                f,
                "{round} was bound by an older scafld to part of the draft only (not its other sections, front matter or the round's checks), so nothing shows those are what it judged"
            ),
        }
    }
}

/// Why a draft whose front matter says `harden_status: passed` is not hardened as it stands,
/// if it is not: its latest round must have passed on this very draft (the round's `Spec
/// digest:` is `digest`, the [`draft_digest`] of the draft's text now), or passed in the
/// original tool's format, which binds no draft ([`unbound_pass`]). `None` when the pass holds.
pub fn stale_pass(spec: &Spec, digest: &str) -> Option<PassGap> {
    let Some(round) = spec.harden_rounds.last() else {
        return Some(PassGap::NoRound);
    };
    let id = round.id.clone();
    if round.status != HardenStatus::Passed.as_str() {
        return Some(PassGap::NotPassed { round: id, status: round.status.clone() });
    }
    if round.digest.is_empty() || round.digest == digest {
        return None;
    }
    Some(if older_binding_holds(spec, round) {
        PassGap::OlderBinding { round: id }
    } else {
        PassGap::Changed { round: id }
    })
}

/// The latest round, when it passed as the original tool records a pass: without a `Spec
/// digest:` (the Go original's `### round-N`, Python scafld's `- Round N`), so bound to no
/// draft. This tool binds every round it opens, so only the original (or a person) writes one.
/// Such a pass is honoured for the draft as it is when approved, and the approval, which pins
/// that draft's contract, says so.
pub fn unbound_pass(spec: &Spec) -> Option<&HardenRound> {
    spec.harden_rounds.last().filter(|r| r.status == HardenStatus::Passed.as_str() && r.digest.is_empty())
}

/// Whether `round` carries an older scafld's digest (of part of the parsed draft) that still
/// matches `spec`.
fn older_binding_holds(spec: &Spec, round: &HardenRound) -> bool {
    !round.digest.starts_with(AUTHORED_DIGEST_PREFIX) && round.digest == legacy_draft_digest(spec)
}

fn normalize(name: &str) -> String {
    name.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()
}

fn round_problems(round: &HardenRound, ground: &dyn Ground) -> Vec<String> {
    let mut problems = Vec::new();
    for required in REQUIRED_CHECKS {
        if !round.checks.iter().any(|c| normalize(&c.name) == normalize(required)) {
            problems.push(format!("{}: the required check `{required}` is missing", round.id));
        }
    }
    for check in &round.checks {
        let at = format!("{} check `{}` (line {})", round.id, check.name, check.line);
        if check.evidence.trim().is_empty() {
            problems.push(format!("{at}: Evidence is empty"));
        }
        if !matches!(check.result.trim(), "passed" | "not_applicable") {
            problems.push(format!("{at}: Result must be passed or not_applicable (found {:?})", check.result));
        }
        if let Err(why) = citation(&check.grounded_in, ground) {
            problems.push(format!("{at}: {why}"));
        }
    }
    for q in &round.questions {
        let at = format!("{} question {:?} (line {})", round.id, q.text, q.line);
        if let Err(why) = citation(&q.grounded_in, ground) {
            problems.push(format!("{at}: {why}"));
        }
        if q.recommended_answer.trim().is_empty() {
            problems.push(format!("{at}: Recommended answer is empty"));
        }
        if q.answered_with.trim().is_empty() {
            problems.push(format!("{at}: Answered with is empty"));
        }
    }
    problems
}

/// `spec_gap:<text>`, `code:<path>:<line>` (a real line of a real file) or `archive:<task-id>`.
fn citation(grounded_in: &str, ground: &dyn Ground) -> Result<(), String> {
    let g = grounded_in.trim();
    if let Some(gap) = g.strip_prefix("spec_gap:") {
        return if gap.trim().is_empty() { Err("Grounded in `spec_gap:` needs a description".into()) } else { Ok(()) };
    }
    if let Some(rest) = g.strip_prefix("code:") {
        let Some((path, line)) = rest.rsplit_once(':') else {
            return Err(format!("Grounded in {g:?} must be code:<path>:<line>"));
        };
        let line: usize = line
            .parse()
            .ok()
            .filter(|l| *l > 0)
            .ok_or_else(|| format!("Grounded in {g:?}: the line must be one positive number (no ranges)"))?;
        return match ground.reach(path, line) {
            None => Err(format!("Grounded in {g:?}: {path} does not exist in the workspace")),
            Some(Reach::Past(count)) => Err(format!("Grounded in {g:?}: {path} has only {count} lines")),
            Some(Reach::Unread(why)) => Err(format!("Grounded in {g:?}: {why}")),
            Some(Reach::Within) => Ok(()),
        };
    }
    if let Some(task) = g.strip_prefix("archive:") {
        return if ground.archived(task.trim()) {
            Ok(())
        } else {
            Err(format!("Grounded in {g:?}: no archived spec {} exists", task.trim()))
        };
    }
    if g.is_empty() {
        Err("Grounded in is missing".into())
    } else {
        Err(format!("Grounded in {g:?} must start with spec_gap:, code: or archive:"))
    }
}

/// Where a project keeps its own harden prompt, in the order the original looks (before its
/// built-in one), relative to the workspace root.
pub const PROMPT_OVERRIDES: [&str; 2] = [".scafld/prompts/harden.md", ".scafld/core/prompts/harden.md"];

/// The prompt `scafld harden` prints for the agent doing the round: the project's prompt
/// (`project`, from [`PROMPT_OVERRIDES`]) in place of the built-in one, then, either way, the
/// question cap, the invariants and where the round is.
pub fn prompt(
    project: Option<&str>,
    spec_path: &str,
    round_id: &str,
    task_id: &str,
    max_questions: u32,
    invariants: &[(String, String)],
) -> String {
    let mut text = match project {
        Some(own) => format!("{}\n\n", own.trim_end()),
        None => builtin_prompt(),
    };
    text.push_str(&format!("Configured max_questions_per_round: {max_questions}. This is a cap, not a target.\n"));
    if !invariants.is_empty() {
        text.push_str("\nProject invariants the spec must respect:\n");
        for (id, rule) in invariants {
            text.push_str(&format!("- `{id}`: {rule}\n"));
        }
    }
    text.push_str(&format!(
        "\n---\nspec: {spec_path}\nround: {round_id}\nwhen done, mark the round passed: scafld harden {task_id} --mark-passed\n"
    ));
    text
}

/// The built-in harden prompt, used when the project has none of its own.
fn builtin_prompt() -> String {
    let mut text = String::from(
        "You are hardening a scafld spec before it is approved. Read the spec and the code it names, \
then challenge it: could an agent build exactly this, prove it with the listed commands, and undo it?\n\n\
Add to the open round under `## Harden Rounds` one check per audit below, each with\n\
  - Grounded in: spec_gap:<section> | code:<path>:<line> | archive:<task-id>\n\
  - Result: passed | not_applicable   (fix the spec first when it would be failed)\n\
  - Evidence: what you looked at and why it holds\n\n\
Required checks:\n",
    );
    for check in REQUIRED_CHECKS {
        text.push_str(&format!("- {check}\n"));
    }
    text.push_str(
        "\nAsk a question only where the spec cannot be fixed without the operator; give each a \
Grounded in, a Recommended answer, If unanswered, and, once settled, Answered with.\n",
    );
    text
}

/// A delegated round's answer (the original's HardenDossier): the shape of the task, and one
/// observation per dimension, each anchored in the spec, the code or an archived task.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HardenDossier {
    pub summary: String,
    pub shape: Shape,
    pub observations: Vec<Observation>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Shape {
    pub decision: ShapeDecision,
    pub true_shape: String,
    pub minimal_plan: String,
    #[serde(default)]
    pub shared_owner: String,
    #[serde(default)]
    pub adapter_boundaries: Vec<String>,
    #[serde(default)]
    pub required_spec_edits: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShapeDecision {
    Keep,
    Shrink,
    Reframe,
    Reject,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Observation {
    pub dimension: Dimension,
    pub result: ObservationResult,
    /// `spec_gap:<text>`, `code:<path>:<line>` or `archive:<task-id>`.
    pub anchor: String,
    #[serde(default)]
    pub note: String,
    #[serde(default)]
    pub question: String,
    #[serde(default)]
    pub recommended: String,
    /// What happens if the question goes unanswered (the original's `if_unanswered`).
    #[serde(default)]
    pub if_unanswered: String,
    /// The answer taken by default (the original's `default`).
    #[serde(default)]
    pub default: String,
    #[serde(default)]
    pub status: Option<ObservationStatus>,
}

/// The six things a round looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dimension {
    Design,
    Scope,
    Path,
    Command,
    Timing,
    Rollback,
}

impl Dimension {
    pub const ALL: [Dimension; 6] = [
        Dimension::Design,
        Dimension::Scope,
        Dimension::Path,
        Dimension::Command,
        Dimension::Timing,
        Dimension::Rollback,
    ];

    /// The round check a dimension is written as (the names `--mark-passed` requires).
    pub fn check(self) -> &'static str {
        match self {
            Dimension::Design => "Design challenge",
            Dimension::Scope => "Scope/migration audit",
            Dimension::Path => "Path audit",
            Dimension::Command => "Command audit",
            Dimension::Timing => "Acceptance timing audit",
            Dimension::Rollback => "Rollback/repair audit",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ObservationResult {
    #[serde(rename = "clean")]
    Clean,
    #[serde(rename = "advisory")]
    Advisory,
    #[serde(rename = "blocks")]
    Blocks,
    #[serde(rename = "n/a")]
    NotApplicable,
}

impl ObservationResult {
    /// The word the provider gave (its serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            ObservationResult::Clean => "clean",
            ObservationResult::Advisory => "advisory",
            ObservationResult::Blocks => "blocks",
            ObservationResult::NotApplicable => "n/a",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ObservationStatus {
    Open,
    Fixed,
    AcceptedRisk,
    Superseded,
}

/// What a delegated round came to.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    pub status: HardenStatus,
    /// Why it is not a pass (missing dimensions, unresolved blockers), or why it is an error
    /// (unreadable answer, ungrounded anchors, too many issues).
    pub problems: Vec<String>,
}

/// Parse a provider's answer strictly.
pub fn parse_dossier(value: serde_json::Value) -> Result<HardenDossier, String> {
    serde_json::from_value(value).map_err(|e| format!("the harden dossier does not match its schema: {e}"))
}

/// Judge an answer: every anchor must hold (else `error`, with each bad anchor named), at most
/// `max_issues` observations may be advisory or blocking (else `error`); then `passed` when all
/// six dimensions are covered and no blocker is unresolved, else `needs_revision`.
pub fn judge(dossier: &HardenDossier, ground: &dyn Ground, max_issues: usize) -> Judgement {
    let mut errors: Vec<String> = dossier
        .observations
        .iter()
        .filter_map(|o| citation(&o.anchor, ground).err().map(|why| format!("{:?} observation: {why}", o.dimension)))
        .collect();
    let issues = dossier
        .observations
        .iter()
        .filter(|o| matches!(o.result, ObservationResult::Advisory | ObservationResult::Blocks))
        .count();
    if issues > max_issues {
        errors.push(format!("{issues} advisory or blocking observations; a round carries at most {max_issues}"));
    }
    if !errors.is_empty() {
        return Judgement { status: HardenStatus::Error, problems: errors };
    }
    let mut problems: Vec<String> = Dimension::ALL
        .iter()
        .filter(|d| !dossier.observations.iter().any(|o| o.dimension == **d))
        .map(|d| format!("the {d:?} dimension has no observation"))
        .collect();
    problems.extend(
        dossier
            .observations
            .iter()
            .filter(|o| o.result == ObservationResult::Blocks && o.status.is_none_or(|s| s == ObservationStatus::Open))
            .map(|o| {
                format!(
                    "{:?} blocks: {} ({})",
                    o.dimension,
                    if o.note.is_empty() { &o.question } else { &o.note },
                    o.anchor
                )
            }),
    );
    let status = if problems.is_empty() { HardenStatus::Passed } else { HardenStatus::NeedsRevision };
    Judgement { status, problems }
}

/// The judgement of a round no reviewer read (the `local` provider, which reviews nothing):
/// never a pass, so approving over it needs a reason, recorded as a harden override.
pub fn unjudged(provider: &str) -> Judgement {
    Judgement {
        status: HardenStatus::Error,
        problems: vec![format!(
            "the {provider} provider reviews nothing, so this round judged nothing and is no pass: harden with a provider that reads the draft (or answer a round by hand and `--mark-passed`), or approve with `--reason`"
        )],
    }
}

/// The digest a round is bound to: what the author wrote, the spec file's text with the
/// runner-owned parts set aside ([`authored_digest`]). Any edit after a pass changes it (a
/// prose section, the front matter's `risk_level`, a round's checks); a projection does not.
pub fn draft_digest(text: &str) -> String {
    authored_digest(text, &parse(text).layout)
}

/// `next` with its latest round bound to the draft as it will be written: the [`draft_digest`]
/// of `text` (the file it is projected onto) with `next` projected, the round's own checks
/// included. The `Spec digest:` line is the runner's, so writing it changes nothing digested.
pub fn bind_latest_round(text: &str, mut next: Spec) -> Result<Spec, ProjectionError> {
    let written = project(text, &next)?;
    if let Some(round) = next.harden_rounds.last_mut() {
        round.digest = draft_digest(&written);
    }
    Ok(next)
}

/// What scafld before the digest of the text bound a round to (bare hex): title, summary,
/// objectives, scope, touchpoints, context, acceptance and phases of the parsed model. Kept only
/// to recognise those rounds ([`PassGap::OlderBinding`]).
pub fn legacy_draft_digest(spec: &Spec) -> String {
    use sha2::{Digest, Sha256};
    let authored = without_runner_state(serde_json::json!({
        "title": spec.title,
        "summary": spec.summary,
        "objectives": spec.objectives,
        "scope": spec.scope,
        "touchpoints": spec.touchpoints,
        "context": serde_json::to_value(&spec.context).unwrap_or_default(),
        "acceptance": serde_json::to_value(&spec.acceptance).unwrap_or_default(),
        "phases": serde_json::to_value(&spec.phases).unwrap_or_default(),
    }));
    format!("{:x}", Sha256::digest(authored.to_string().as_bytes()))
}

/// Drop what the runner writes or where things sit (line numbers move when a round is added).
fn without_runner_state(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(k, _)| !matches!(k.as_str(), "line" | "status" | "evidence" | "source_event"))
                .map(|(k, v)| (k, without_runner_state(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_runner_state).collect()),
        other => other,
    }
}

/// Write a delegated round's outcome as the spec's latest round: the open round bound to the
/// same draft (`digest`, the draft's digest now) is replaced, anything else gets a new round,
/// which the caller binds to the text it writes ([`bind_latest_round`]). Checks come from the observations
/// (one per dimension, the first given); an error round carries its problems as evidence.
pub fn delegated_round(
    spec: &Spec,
    digest: &str,
    provider: &str,
    dossier: Option<&HardenDossier>,
    judgement: &Judgement,
    now: &str,
) -> Spec {
    let mut next = spec.clone();
    // A round of this very draft that is still open is the one to fill; anything else (a
    // judged round keeps what it said) gets a new round.
    let reuse = next.harden_rounds.last().is_some_and(|r| r.digest == digest && r.status == "in_progress");
    if !reuse {
        next = open_round(&next, now);
    }
    let round = next.harden_rounds.last_mut().expect("a round exists");
    round.digest = digest.to_string();
    round.status = judgement.status.as_str().into();
    round.ended = now.into();
    round.checks = match dossier {
        Some(d) => Dimension::ALL
            .iter()
            .filter_map(|dim| d.observations.iter().find(|o| o.dimension == *dim))
            // The provider's words go on single lines of the user's spec: clipped, so that no
            // newline in them can start a section (a phase, a criterion) of its own.
            .map(|o| crate::domain::spec::HardenCheck {
                name: o.dimension.check().into(),
                grounded_in: clip(&o.anchor),
                result: match o.result {
                    ObservationResult::Clean | ObservationResult::Advisory => "passed".into(),
                    ObservationResult::NotApplicable => "not_applicable".into(),
                    ObservationResult::Blocks => "blocks".into(),
                },
                evidence: clip(&check_evidence(provider, &d.summary, o)),
                line: 0,
            })
            .collect(),
        None => Vec::new(),
    };
    // Every question the provider asked, as the original's grammar writes one: the product of
    // the round for the author to answer, never folded into a check's `passed`.
    round.questions = dossier
        .map(|d| {
            d.observations
                .iter()
                .filter(|o| !o.question.trim().is_empty())
                .map(|o| crate::domain::spec::HardenQuestion {
                    text: clip(o.question.trim()),
                    grounded_in: clip(&o.anchor),
                    recommended_answer: clip(o.recommended.trim()),
                    if_unanswered: clip(&if_unanswered(o)),
                    answered_with: String::new(),
                    line: 0,
                })
                .collect()
        })
        .unwrap_or_default();
    let id = next.front.task_id.clone();
    next.front.harden_status = judgement.status.as_str().into();
    next.front.updated = now.into();
    let reason = match judgement.status {
        HardenStatus::Passed => "hardening passed".to_string(),
        HardenStatus::NeedsRevision => format!(
            "the {provider} round asks for revision: {}; edit the draft, then harden it again",
            judgement.problems.join("; ")
        ),
        _ => format!("the {provider} round could not be used: {}", judgement.problems.join("; ")),
    };
    // The step is the one decision `status` makes of the draft as judged (never a command of
    // the round's own, which could not name a `--provider-command`); the reason is the round's.
    crate::domain::next::show(&crate::domain::next::of_draft(&id, &next), &mut next.current_state);
    next.current_state.reason = clip(&reason);
    next
}

/// A check's evidence from its observation: the provider's note (else the answer's summary);
/// an advisory says so (its `Result:` reads `passed`), and a recommendation that no question
/// carries follows it.
fn check_evidence(provider: &str, summary: &str, o: &Observation) -> String {
    let mut text = format!("{provider}: ");
    if o.result == ObservationResult::Advisory {
        text.push_str("advisory: ");
    }
    text.push_str(if o.note.trim().is_empty() { summary } else { o.note.trim() });
    if o.question.trim().is_empty() && !o.recommended.trim().is_empty() {
        text.push_str(&format!("; recommended: {}", o.recommended.trim()));
    }
    text
}

/// A question's `If unanswered:` line: the original's question grammar has no `Default:`, so
/// an observation's default answer is written there too.
fn if_unanswered(o: &Observation) -> String {
    match (o.if_unanswered.trim(), o.default.trim()) {
        (when, "") => when.to_string(),
        ("", default) => format!("default: {default}"),
        (when, default) => format!("{when} (default: {default})"),
    }
}

/// What a provider raised that the author should read: every observation that is not clean
/// or not applicable, or that asks or recommends something.
pub fn raised(dossier: &HardenDossier) -> impl Iterator<Item = &Observation> {
    dossier.observations.iter().filter(|o| {
        matches!(o.result, ObservationResult::Advisory | ObservationResult::Blocks)
            || !o.question.trim().is_empty()
            || !o.recommended.trim().is_empty()
    })
}

#[cfg(test)]
mod delegated_tests {
    use super::*;

    struct Files;
    impl Ground for Files {
        fn reach(&self, path: &str, line: usize) -> Option<Reach> {
            (path == "src/a.rs").then_some(if line <= 3 { Reach::Within } else { Reach::Past(3) })
        }
        fn archived(&self, _: &str) -> bool {
            false
        }
    }

    fn dossier(results: &[(Dimension, ObservationResult, &str, Option<ObservationStatus>)]) -> HardenDossier {
        HardenDossier {
            summary: "s".into(),
            shape: Shape {
                decision: ShapeDecision::Keep,
                true_shape: "t".into(),
                minimal_plan: "m".into(),
                shared_owner: String::new(),
                adapter_boundaries: Vec::new(),
                required_spec_edits: Vec::new(),
            },
            observations: results
                .iter()
                .map(|(d, r, a, s)| Observation {
                    dimension: *d,
                    result: *r,
                    anchor: a.to_string(),
                    note: String::new(),
                    question: String::new(),
                    recommended: String::new(),
                    if_unanswered: String::new(),
                    default: String::new(),
                    status: *s,
                })
                .collect(),
        }
    }

    #[test]
    fn a_round_passes_only_with_every_dimension_and_no_open_blocker() {
        use ObservationResult::*;
        let clean: Vec<_> = Dimension::ALL.iter().map(|d| (*d, Clean, "spec_gap:ok", None)).collect();
        assert_eq!(judge(&dossier(&clean), &Files, 8).status, HardenStatus::Passed);
        let missing = judge(&dossier(&clean[1..]), &Files, 8);
        assert_eq!(missing.status, HardenStatus::NeedsRevision);
        assert!(missing.problems[0].contains("Design"), "{:?}", missing.problems);
        let mut blocked = clean.clone();
        blocked[2] = (Dimension::Path, Blocks, "code:src/a.rs:3", None);
        assert_eq!(judge(&dossier(&blocked), &Files, 8).status, HardenStatus::NeedsRevision);
        blocked[2].3 = Some(ObservationStatus::Fixed);
        assert_eq!(
            judge(&dossier(&blocked), &Files, 8).status,
            HardenStatus::Passed,
            "a fixed blocker no longer blocks"
        );
        blocked[2].2 = "code:src/a.rs:4";
        let ungrounded = judge(&dossier(&blocked), &Files, 8);
        assert_eq!(ungrounded.status, HardenStatus::Error);
        assert!(ungrounded.problems[0].contains("has only 3 lines"), "{:?}", ungrounded.problems);
        let noisy: Vec<_> = Dimension::ALL.iter().map(|d| (*d, Advisory, "spec_gap:meh", None)).collect();
        assert_eq!(judge(&dossier(&noisy), &Files, 5).status, HardenStatus::Error);
        let strict = parse_dossier(serde_json::json!({"summary": "s", "shape": {}, "observations": [], "extra": 1}));
        assert!(strict.is_err());
    }

    const DRAFT: &str = "---\nspec_version: '2.0'\ntask_id: t\nstatus: draft\nsize: small\nrisk_level: low\n---\n\n# T\n\n## Summary\n\nS.\n\n## Rollback\n\nRevert it.\n\n## Risks\n\n- none known\n\n## Phase 1: Do\n\nObjective: o.\n\nAcceptance:\n- [ ] `a1` test - ok\n  - Command: `true`\n\nValidation:\nRun it twice.\n";

    const T0: &str = "2026-01-01T00:00:00Z";

    /// `text` with `next` written into it (as the daemon writes it).
    fn write(text: &str, next: &Spec) -> String {
        project(text, next).unwrap()
    }

    /// The draft with a round opened and its six checks answered by hand.
    fn answered(text: &str) -> String {
        let opened = bind_latest_round(text, open_round(&parse(text).spec, T0)).unwrap();
        let mut checks = String::from("Checks:\n");
        for name in REQUIRED_CHECKS {
            checks.push_str(&format!(
                "- {name}\n  - Grounded in: spec_gap:fine\n  - Result: passed\n  - Evidence: looked\n"
            ));
        }
        let open = write(text, &opened);
        let round = open.rfind("Checks:\n- none\n").unwrap();
        format!("{}{checks}{}", &open[..round], &open[round + "Checks:\n- none\n".len()..])
    }

    fn gap(text: &str) -> Option<PassGap> {
        stale_pass(&parse(text).spec, &draft_digest(text))
    }

    #[test]
    fn a_pass_is_bound_to_the_draft_it_judged() {
        assert_eq!(gap(DRAFT), Some(PassGap::NoRound), "no round, no pass");
        // The author fixes the draft while the round is open: the pass binds the draft it closes on.
        let answered = answered(DRAFT).replace("S.", "S, fixed during the round.");
        let passed = mark_passed(&parse(&answered).spec, &draft_digest(&answered), &Files, T0).unwrap();
        let text = write(&answered, &passed);
        assert!(text.contains("Spec digest: sha256:"), "{text}");
        assert_eq!(gap(&text), None);
        let changed = Some(PassGap::Changed { round: "round-1".into() });
        // Every part the author wrote counts, the round's own checks and prose under a label too.
        for (from, to) in [
            ("S, fixed", "S, refixed"),
            ("Revert it.", "Revert it by hand."),
            ("- none known", "- the disk fills"),
            ("risk_level: low", "risk_level: high"),
            ("size: small", "size: large"),
            ("Run it twice.", "Run it once."),
            ("Command: `true`", "Command: `false`"),
            ("  - Evidence: looked\n", "  - Evidence: glanced\n"),
            ("- Design challenge\n", "- Design challenge (skipped)\n"),
        ] {
            let edited = text.replacen(from, to, 1);
            assert_ne!(edited, text, "{from}");
            assert_eq!(gap(&edited), changed, "{from} → {to}");
        }
        let edited = text.replace("Revert it.", "Revert it twice.");
        let refused = mark_passed(&parse(&edited).spec, &draft_digest(&edited), &Files, T0).unwrap_err();
        assert_eq!(refused, MarkRefused::PassedEarlier { round: "round-1".into() });
        // A pass without a digest (as the original tool records one) binds no draft: it is
        // honoured for the draft as it is, edited or not, and `--mark-passed` does not bind it
        // after the fact.
        let mut unbound = parse(&text).spec;
        unbound.harden_rounds[0].digest.clear();
        assert_eq!(stale_pass(&unbound, &draft_digest(&text)), None);
        assert_eq!(stale_pass(&unbound, &draft_digest(&edited)), None);
        assert_eq!(unbound_pass(&unbound).map(|r| r.id.as_str()), Some("round-1"));
        assert_eq!(unbound_pass(&parse(&text).spec), None, "this tool's rounds are bound");
        let refused = mark_passed(&unbound, &draft_digest(&text), &Files, T0).unwrap_err();
        assert_eq!(refused, MarkRefused::PassedUnbound { round: "round-1".into() });
        // A new round on the edited draft passes it again.
        let again = self::answered(&edited);
        let passed = mark_passed(&parse(&again).spec, &draft_digest(&again), &Files, T0).unwrap();
        assert_eq!(gap(&write(&again, &passed)), None);
    }

    #[test]
    fn the_draft_digest_ignores_what_the_runner_writes() {
        let before = draft_digest(DRAFT);
        let spec = parse(DRAFT).spec;
        let judged = bind_latest_round(
            DRAFT,
            delegated_round(
                &spec,
                &before,
                "command",
                None,
                &Judgement { status: HardenStatus::Error, problems: vec!["x".into()] },
                T0,
            ),
        )
        .unwrap();
        let text = write(DRAFT, &judged);
        // The round itself is text of the draft from now on; its state lines are not.
        let bound = judged.harden_rounds[0].digest.clone();
        assert_eq!(draft_digest(&text), bound);
        let mut state = parse(&text).spec;
        state.front.status = "approved".into();
        state.front.updated = "2026-02-02T00:00:00Z".into();
        state.front.harden_status = "passed".into();
        state.current_state.next = "build".into();
        state.current_state.blockers = "`a1` failed".into();
        state.phases[0].status = "blocked".into();
        let c = &mut state.phases[0].criteria[0];
        (c.status, c.evidence, c.source_event) = ("pass".into(), "exit 0".into(), "entry-3".into());
        state.harden_rounds[0].status = "passed".into();
        state.harden_rounds[0].ended = T0.into();
        state.review.body = vec!["Status: pass".into()];
        let projected = write(&text, &state);
        assert!(projected.contains("- [x] `a1`") && projected.contains("## Review"), "{projected}");
        assert_eq!(draft_digest(&projected), bound, "the runner's lines change nothing authored");
        assert_eq!(draft_digest(&projected.replace('\n', "\r\n")), bound, "nor do line endings");
        assert_ne!(draft_digest(&text.replace("S.", "S, edited.")), bound);
    }

    /// Outside code, trailing spaces and blank lines are layout; inside a fenced command they
    /// are the program (a space after a line-ending `\` breaks the shell's continuation).
    #[test]
    fn the_draft_digest_reads_fenced_commands_byte_for_byte() {
        let fenced = "  - Command:\n    ```sh\n    cargo test \\\n      --all\n\n    ```\n";
        let with = |command: &str| format!("{DRAFT}\n## Notes\n\n- [ ] `c9` test - fenced\n{command}");
        let bound = draft_digest(&with(fenced));
        assert_ne!(draft_digest(&with(&fenced.replace("\\\n", "\\ \n"))), bound, "a space after the backslash");
        assert_ne!(draft_digest(&with(&fenced.replace("--all\n\n", "--all\n"))), bound, "a blank line in the block");
        assert_eq!(draft_digest(&with(fenced).replace('\n', "\r\n")), bound, "line endings still do not count");
        assert_eq!(draft_digest(&with(&format!("{fenced}   \n"))), bound, "a trailing blank outside the fence");
    }

    /// A round an older scafld bound (a digest of part of the model) still refuses a draft
    /// changed in that part; unchanged there, the rest cannot be told apart, so it asks for
    /// `--mark-passed`, which binds the round to the whole draft.
    #[test]
    fn a_round_bound_by_an_older_scafld_is_bound_again_by_mark_passed() {
        let answered = answered(DRAFT);
        let mut passed = mark_passed(&parse(&answered).spec, &draft_digest(&answered), &Files, T0).unwrap();
        passed.harden_rounds[0].digest = legacy_draft_digest(&parse(DRAFT).spec);
        let text = write(&answered, &passed);
        assert!(!parse(&text).spec.harden_rounds[0].digest.starts_with(AUTHORED_DIGEST_PREFIX));
        let older = gap(&text).unwrap();
        assert_eq!(older, PassGap::OlderBinding { round: "round-1".into() });
        assert_eq!(older.command("t"), "scafld harden t --mark-passed");
        assert_eq!(gap(&text.replace("S.", "S2.")), Some(PassGap::Changed { round: "round-1".into() }));
        let rebound = mark_passed(&parse(&text).spec, &draft_digest(&text), &Files, T0).unwrap();
        assert_eq!(gap(&write(&text, &rebound)), None);
        let changed = text.replace("S.", "S2.");
        assert!(mark_passed(&parse(&changed).spec, &draft_digest(&changed), &Files, T0).is_err());
    }
}
