//! The session ledger: typed, append-only events per task, and the replay that turns them into
//! the runner-owned parts of the spec. The ledger is the authority; the spec is its projection.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::domain::evidence::Contract;
use crate::domain::lifecycle::Status;
use crate::domain::next::{Facts, NextAction, next_action};
use crate::domain::spec::Spec;
use crate::domain::spec::budget::{MAX_BLOCKERS, clip};
use scafld_protocol::vocab::Decision;

/// One dirty or untracked path at approval: porcelain status, content fingerprint, path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaselinePath {
    pub status: String,
    pub fingerprint: String,
    pub path: String,
}

/// How a build step's own commands changed the files in scope: the material they ran on (the
/// step's evidence is bound to it), the criteria whose commands ran, and what changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepChange {
    pub from: String,
    pub criteria: Vec<String>,
    pub changed: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LedgerEvent {
    WorkspaceBaseline {
        head: Option<String>,
        paths: Vec<BaselinePath>,
        reason: String,
        /// Each nested git repository's HEAD commit (`None`: none yet), by folder: a folder of
        /// the workspace holding a repository of its own, not a submodule, whose changes are
        /// read through its own git from this commit (its dirty paths are among `paths`).
        /// Absent in baselines recorded before they were: such a repository's changes are not
        /// read (its folder is named as changed, its content not shown).
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        nested: BTreeMap<String, Option<String>>,
    },
    Approval {
        reason: String,
        /// Set when approved without a passed harden round: the operator's reason.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        harden_override: Option<String>,
        /// The approved contract: each criterion's id and definition digest
        /// ([`crate::domain::evidence::definition_digest`]). Empty for approvals recorded before
        /// pins existed and for imported ledgers.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        criteria: BTreeMap<String, String>,
        /// The approved evidence scope ([`crate::domain::evidence::declared_scope`]; empty: the
        /// whole tree). Absent in approvals recorded before the scope was pinned.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scope: Option<Vec<String>>,
        /// What the scope binds beside its paths: bare names and secret files
        /// ([`crate::domain::evidence::declared_also_bound`]). Absent in approvals recorded
        /// before they were pinned: the scope is then compared by its paths alone.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        also_bound: Option<Vec<String>>,
        /// Each criterion's place: its phase (`phaseN`) or `final`
        /// ([`crate::domain::evidence::placement`]). Absent in approvals recorded before it was
        /// pinned: a criterion's move is then not checked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        phases: Option<BTreeMap<String, String>>,
        /// The phases by id, in order ([`crate::domain::evidence::phase_ids`]). Absent in
        /// approvals recorded before they were pinned: a phase added or removed is then not
        /// checked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        phase_ids: Option<Vec<String>>,
    },
    /// The approved contract re-pinned after an audited change (`approve --amend --reason`).
    ContractAmended {
        reason: String,
        criteria: BTreeMap<String, String>,
        /// The evidence scope re-pinned with it (absent in amendments recorded before the
        /// scope was pinned: the earlier pin stands).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scope: Option<Vec<String>>,
        /// What the scope binds beside its paths, re-pinned with it (absent in amendments
        /// recorded before it was pinned: the earlier pin stands).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        also_bound: Option<Vec<String>>,
        /// Each criterion's place, re-pinned with it (absent in amendments recorded before it
        /// was pinned: the earlier pin stands).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        phases: Option<BTreeMap<String, String>>,
        /// The phases by id, re-pinned with it (absent in amendments recorded before they were
        /// pinned: the earlier pin stands).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        phase_ids: Option<Vec<String>>,
        /// Ids whose definition changed, was added or removed, for the audit trail.
        changed: Vec<String>,
    },
    /// The material (scoped content) a build step judged, recorded when it changes so that a
    /// later change can be named file by file; also the material a build step's own commands
    /// left, read again after them, when it differs from the one they ran on (`after_step`).
    Material {
        digest: String,
        entries: Vec<BaselinePath>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after_step: Option<StepChange>,
    },
    /// A person's disposition on a `manual` criterion (`build --criterion ID --disposition`).
    ManualEvidence {
        criterion_id: String,
        phase_id: String,
        /// `pass` or `fail`.
        disposition: String,
        reason: String,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        evidence_digest: String,
        actor: String,
        definition: String,
        material: String,
    },
    Phase {
        phase_id: String,
        status: String,
        reason: String,
    },
    Build {
        status: String,
        reason: String,
    },
    Criterion {
        criterion_id: String,
        /// Empty for task-level criteria.
        phase_id: String,
        command: String,
        exit_code: Option<i32>,
        matcher: String,
        status: String,
        reason: String,
        /// The tail of the output (capped); the whole output is in `diagnostic`.
        output: String,
        /// The file holding the whole record (empty when none was written).
        diagnostic: String,
        /// Why the whole record could not be written (`diagnostic` is then empty).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        diagnostic_error: String,
        duration_ms: u64,
        attempt: u32,
        /// Digest of the criterion's definition that ran (empty in entries recorded before
        /// evidence was bound to content, and in imported ones: such evidence is stale).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        definition: String,
        /// Digest of the material the command judged.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        material: String,
        /// What was redacted from the evidence before it was recorded (browser evidence).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        redacted: Vec<String>,
    },
    Job {
        job_id: String,
        state: String,
        reason: String,
    },
    /// A review run started (`running`) or ended without an accepted dossier (`failed`).
    ReviewAttempt {
        status: String,
        reason: String,
    },
    /// An accepted review (the dossier is none for `human`).
    Review(RecordedReview),
    /// Manual approval: the consensus a human must accept or reject (`review accept|reject`).
    ReviewProposed(RecordedReview),
    /// A human's decision on a proposed review; always immediately followed by the `Review`.
    ReviewDecision {
        decision: String,
        reason: String,
    },
    /// The host agent that drives the task's builds (the independence rule refuses its reviews).
    Implementer {
        host_agent: String,
        reason: String,
    },
    /// The audited human override; always immediately followed by a `human` review.
    ReviewOverride {
        reason: String,
    },
    Complete {
        reason: String,
    },
    /// A signed receipt (`finalize`): its digest, the ledger head it anchors, where it was
    /// written, and the whole envelope (so a half-finished write can be repaired).
    Receipt {
        digest: String,
        ledger_head: String,
        path: String,
        envelope: serde_json::Value,
    },
    Fail {
        reason: String,
    },
    Cancel {
        reason: String,
    },
    /// An entry of the original tool's session.json that has no equivalent here, kept whole.
    Imported {
        original_type: String,
        raw: serde_json::Value,
    },
    /// The original tool's session.json imported through here: its first `entries` entries
    /// (the entries before this one), whose digest is `digest`
    /// ([`crate::domain::import::digest`]). A later look imports the entries past them while
    /// those still digest the same; when they do not, the two tools disagree on the history.
    SessionImported {
        entries: u64,
        digest: String,
    },
}

/// A review as the ledger records it, accepted or proposed: verdict, who gave it, the dossier
/// and the tree it judged, and every reviewer of the session with provenance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedReview {
    pub verdict: String,
    pub provider: String,
    pub reason: String,
    /// Kept as the ledger file holds it: a ledger is a user-visible file (imported, exported,
    /// hand-edited), so a dossier in it is not held to the strict submission schema on read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dossier: Option<serde_json::Value>,
    /// Fingerprint of the workspace snapshot the review judged.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tree: String,
    /// Each reviewer of the session, with provenance (empty for human overrides).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reviewers: Vec<ReviewerRecord>,
    /// The task's spec as the reviewer was shown it: the mutation guard's fingerprint of its
    /// authored text (`review::spec_guard_fingerprint`), which `tree` (the files in scope)
    /// leaves out. `None` in records of an older scafld (skipped then, so they re-serialise to
    /// their stored bytes) and for a human override.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_digest: Option<String>,
    /// The files the review's mutation guard watched: the task's scope and what
    /// `--review-scope` showed the reviewer beside it (`domain::review::guard_scope`), which
    /// `tree` leaves out; with `shown_material`, the digest of their material as the verdict was
    /// recorded. `complete` checks them unchanged. Empty in records of an older scafld and for
    /// a human override (nothing to check then beyond `tree`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shown: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub shown_material: String,
}

/// What the latest accepted review was shown (its guard's scope, [`RecordedReview::shown`])
/// and the digest of that material then, when it passed and recorded them.
pub fn shown_by_passing_review(entries: &[LedgerEntry]) -> Option<(&[String], &str)> {
    let latest = entries.iter().rev().find_map(|e| match &e.event {
        LedgerEvent::Review(review) => Some(review),
        _ => None,
    })?;
    (latest.verdict == "pass" && !latest.shown_material.is_empty())
        .then_some((latest.shown.as_slice(), latest.shown_material.as_str()))
}

/// Whether the spec's authored text changed since the latest accepted review: that review
/// recorded its spec's fingerprint and `now` (the spec file's, as the guard takes it) is
/// another. A review recorded without one (an older scafld's) counts as unchanged.
pub fn spec_changed_since_review(entries: &[LedgerEntry], now: Option<&str>) -> bool {
    let judged = entries.iter().rev().find_map(|e| match &e.event {
        LedgerEvent::Review(RecordedReview { spec_digest, .. }) => Some(spec_digest.as_deref()),
        _ => None,
    });
    matches!((judged.flatten(), now), (Some(then), Some(now)) if then != now)
}

/// What the workspace was at approval: HEAD, the dirty paths, each nested repository's HEAD.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ApprovalBaseline {
    pub head: Option<String>,
    pub paths: Vec<BaselinePath>,
    pub nested: BTreeMap<String, Option<String>>,
}

/// The task's approval baseline: the last `workspace_baseline` (the approval's, or the one
/// `approve --amend` recorded again when its commit was gone).
pub fn approval_baseline(entries: &[LedgerEntry]) -> Option<ApprovalBaseline> {
    entries.iter().rev().find_map(|e| match &e.event {
        LedgerEvent::WorkspaceBaseline { head, paths, nested, .. } => {
            Some(ApprovalBaseline { head: head.clone(), paths: paths.clone(), nested: nested.clone() })
        }
        _ => None,
    })
}

/// What a result says of its whole record when the file `path` could not be written (`why`).
pub fn unwritten_record(path: &str, why: &str) -> String {
    format!("the full record could not be written to {path}: {why}; the output kept here is its tail")
}

impl LedgerEvent {
    pub fn reason(&self) -> &str {
        match self {
            LedgerEvent::WorkspaceBaseline { reason, .. }
            | LedgerEvent::Approval { reason, .. }
            | LedgerEvent::Phase { reason, .. }
            | LedgerEvent::Build { reason, .. }
            | LedgerEvent::Criterion { reason, .. }
            | LedgerEvent::Job { reason, .. }
            | LedgerEvent::ReviewAttempt { reason, .. }
            | LedgerEvent::Review(RecordedReview { reason, .. })
            | LedgerEvent::ReviewProposed(RecordedReview { reason, .. })
            | LedgerEvent::ReviewDecision { reason, .. }
            | LedgerEvent::Implementer { reason, .. }
            | LedgerEvent::ReviewOverride { reason }
            | LedgerEvent::ContractAmended { reason, .. }
            | LedgerEvent::ManualEvidence { reason, .. }
            | LedgerEvent::Complete { reason }
            | LedgerEvent::Fail { reason }
            | LedgerEvent::Cancel { reason } => reason,
            LedgerEvent::Imported { .. }
            | LedgerEvent::SessionImported { .. }
            | LedgerEvent::Material { .. }
            | LedgerEvent::Receipt { .. } => "",
        }
    }

    /// A criterion result citing `path` as its whole record, when that file could not be written
    /// (`why`): it cites no file and says why instead, its own result and output kept.
    pub fn record_unwritten(&mut self, path: &str, why: &str) {
        if let LedgerEvent::Criterion { diagnostic, diagnostic_error, .. } = self
            && diagnostic == path
        {
            *diagnostic_error = unwritten_record(path, why);
            diagnostic.clear();
        }
    }

    /// Whether this event, recorded after a review, means that review no longer stands (the
    /// gate back to `not_started`): a build step, evidence, an approval or an amendment. (A
    /// review run again that gave no verdict leaves none current too, until one does: see
    /// `Replay::failed_attempt`.)
    pub fn supersedes_review(&self) -> bool {
        matches!(
            self,
            LedgerEvent::Build { .. }
                | LedgerEvent::Phase { .. }
                | LedgerEvent::Criterion { .. }
                | LedgerEvent::ManualEvidence { .. }
                | LedgerEvent::ContractAmended { .. }
                | LedgerEvent::Approval { .. }
        )
    }
}

/// The first of `later` (the entries after a review, accepted or proposed) after which that
/// review no longer stands: newer work ([`LedgerEvent::supersedes_review`]) or a review run again
/// that gave no verdict. `status` names it as the review's `superseded_by`; `review accept`
/// refuses a proposal it supersedes.
pub fn superseding(later: &[LedgerEntry]) -> Option<&LedgerEntry> {
    let failed = |e: &LedgerEvent| matches!(e, LedgerEvent::ReviewAttempt { status, .. } if status == "failed");
    later.iter().find(|e| e.event.supersedes_review() || failed(&e.event))
}

/// One reviewer of an accepted review: who answered, through which channel, and its verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReviewerRecord {
    pub reviewer: String,
    #[serde(flatten)]
    pub provenance: crate::domain::job::Provenance,
    pub verdict: String,
}

/// A ledger's digest with one more entry folded in (`entry_json`, the entry as stored): the
/// sha256 of the digest so far and the entry. Folded from the empty digest over a whole
/// ledger it is the chain the manifest keeps per ledger, so that a recovery can hold an export
/// to what the database recorded entry for entry (an edited export does not match).
pub fn chain_link(digest: &str, entry_json: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(digest.as_bytes());
    hasher.update(b"\n");
    hasher.update(entry_json);
    format!("{:x}", hasher.finalize())
}

/// [`chain_link`] folded over `entries` from the empty digest.
pub fn chain_digest<'a>(entries: impl IntoIterator<Item = &'a LedgerEntry>) -> String {
    entries
        .into_iter()
        .fold(String::new(), |digest, entry| chain_link(&digest, &serde_json::to_vec(entry).unwrap_or_default()))
}

/// A stored event: per-task sequence number (from 1) and the time it was recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerEntry {
    pub seq: u64,
    pub recorded_at: String,
    #[serde(flatten)]
    pub event: LedgerEvent,
}

impl LedgerEntry {
    pub fn id(&self) -> String {
        format!("entry-{}", self.seq)
    }
}

/// Latest state of one criterion or phase according to the ledger.
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    pub status: String,
    pub reason: String,
    pub entry: String,
}

/// Everything the ledger says about a task.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Replay {
    pub status: Option<Status>,
    pub criteria: BTreeMap<String, Mark>,
    pub phases: BTreeMap<String, Mark>,
    /// `phaseN`, `final`, or `None` before the first build.
    pub current_phase: Option<String>,
    pub last_reason: String,
    pub last_recorded_at: String,
    pub approved: bool,
    /// The task was approved over hardening that had not passed (the reason is in the entry).
    pub harden_overridden: bool,
    /// The latest accepted review (`verdict`, `provider`, dossier), if any.
    pub review: Option<(String, String, Option<serde_json::Value>)>,
    /// Whether nothing newer (a build step, evidence, approval) has superseded that review.
    pub review_current: bool,
    /// A person's reason for rejecting that review's proposed verdict (manual approval): what
    /// the repair must answer, as the reviewer's findings are otherwise.
    pub review_rejected: Option<String>,
    /// A proposed verdict waiting for a human decision (manual approval).
    pub awaiting_approval: Option<String>,
    /// The approved contract (criterion definitions and evidence scope), if approval pinned one.
    pub contract: Option<Contract>,
    /// The latest review attempt that ended without an accepted verdict, if it is the latest
    /// review event: its reason.
    pub failed_attempt: Option<String>,
}

impl Replay {
    /// Whether an approval on record pins the contract it approved (criteria and scope). The
    /// original tool's approval (imported) and one recorded before pins existed pin nothing: the
    /// next build adopts the spec's contract as of then, as it adopts a spec approved with no
    /// approval on record at all, and nothing counts until it has.
    pub fn contract_pinned(&self) -> bool {
        self.approved && self.contract.is_some()
    }

    /// Why the next build must adopt the contract first (see [`Replay::contract_pinned`]), or
    /// `None` when an approval on record pins it.
    pub fn adoption_pending(&self) -> Option<Adoption> {
        (!self.contract_pinned()).then_some(if self.approved { Adoption::Unpinned } else { Adoption::Unrecorded })
    }
}

/// Why a task past draft has no approved contract yet, so that its next build adopts one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adoption {
    /// Its approval on record (the original tool's, imported) pins no criteria or scope.
    Unpinned,
    /// Nothing here approved it (its file was set past draft by hand or by another tool).
    Unrecorded,
}

impl Adoption {
    /// A sentence saying so of a task whose spec says `status`.
    pub fn why(self, status: Status) -> String {
        match self {
            Adoption::Unpinned => format!(
                "the spec says {status}, but its approval on record (the original tool's) pins no criteria or scope"
            ),
            Adoption::Unrecorded => format!("the spec says {status} without an approval on record here"),
        }
    }
}

/// What the ledger says of a task, as the spec index keeps it beside the files' listings: the
/// status and the phase and criterion states a projection gives the spec, as of the ledger's
/// entry `seq` (a later entry's state replaces an earlier one's, whatever order they are
/// learnt in).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerState {
    pub seq: u64,
    pub status: Status,
    /// Shared: the index hands states out on every whole-workspace read.
    pub marks: std::sync::Arc<Marks>,
}

/// Each phase's and criterion's state as the ledger records it, by id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Marks {
    pub phases: BTreeMap<String, String>,
    pub criteria: BTreeMap<String, String>,
    /// The definition digest each criterion's latest result ran, where it was recorded bound to
    /// one ([`crate::domain::evidence::bound_definition`]).
    pub ran: BTreeMap<String, String>,
}

impl Marks {
    /// The state [`project`] gives phase `id`, which holds `criteria` (their ids): the one the
    /// ledger records, as [`phase_state`] shows it.
    pub fn phase<'a>(&self, id: &str, criteria: impl IntoIterator<Item = &'a str>) -> &str {
        let recorded = self.phases.get(id).map_or(UNRECORDED_PHASE, String::as_str);
        phase_state(recorded, criteria.into_iter().map(|c| self.criterion(c)))
    }

    /// The status [`project`] gives criterion `id` (empty: nothing recorded, pending).
    pub fn criterion(&self, id: &str) -> &str {
        self.criteria.get(id).map_or("", String::as_str)
    }

    /// The status the spec file shows for criterion `id` beside `definition`, the one it holds
    /// now: [`Marks::criterion`], except that a result that ran another definition shows none
    /// (pending), as [`for_file`] writes it. What `list` and `report` count, so that a file
    /// showing what a projection writes never reads as differing from its ledger.
    pub fn shown(&self, id: &str, definition: &crate::domain::evidence::Definition) -> &str {
        match self.ran.get(id) {
            Some(ran) if !definition.is(ran) => "",
            _ => self.criterion(id),
        }
    }
}

impl Marks {
    /// How far a task whose spec file is gone is, as `status`, `list` and `report` all count
    /// it: the phases and criteria its ledger has records of, each phase as recorded and each
    /// criterion as its last result, except that a pass counts as pending (it is stale: there
    /// is no definition to check it against; a failure stays one, as `status` lists it).
    pub fn without_spec(&self) -> scafld_protocol::methods::Counts {
        let criteria = self.criteria.values().map(|status| match status.as_str() {
            "pass" => "",
            other => other,
        });
        crate::domain::spec::progress_of(self.phases.values().map(String::as_str), criteria)
    }
}

/// The state of a phase the ledger has no record of.
const UNRECORDED_PHASE: &str = "pending";

/// The state a phase is shown in (the spec file, `status`, `list`, `report`), from the state
/// the ledger records for it and the recorded results of the criteria it holds now: a phase
/// the ledger completed that holds a criterion without a pass (one an amendment moved there,
/// which never ran, or a person's failing evidence since) is `active` again, the step the
/// build takes next (`build::current`), never `completed` beside work not done.
pub fn phase_state<'a, 'c>(recorded: &'a str, mut criteria: impl Iterator<Item = &'c str>) -> &'a str {
    match recorded {
        "completed" if criteria.any(|status| status != "pass") => "active",
        _ => recorded,
    }
}

/// The state `entries` leave the task in; `None` for a task without a ledger (its spec file
/// alone says where it stands). A ledger with entries but no lifecycle event is a draft, as
/// [`project`] writes it.
pub fn state(entries: &[LedgerEntry]) -> Option<LedgerState> {
    let last = entries.last()?;
    let r = replay(entries);
    let states = |marks: BTreeMap<String, Mark>| marks.into_iter().map(|(id, mark)| (id, mark.status)).collect();
    let mut ran = BTreeMap::new();
    for entry in entries {
        let (id, definition, material) = match &entry.event {
            LedgerEvent::Criterion { criterion_id, definition, material, .. }
            | LedgerEvent::ManualEvidence { criterion_id, definition, material, .. } => {
                (criterion_id, definition, material)
            }
            _ => continue,
        };
        match crate::domain::evidence::bound_definition(definition, material) {
            Some(bound) => ran.insert(id.clone(), bound.to_string()),
            None => ran.remove(id),
        };
    }
    let marks = Marks { phases: states(r.phases), criteria: states(r.criteria), ran };
    Some(LedgerState { seq: last.seq, status: r.status.unwrap_or(Status::Draft), marks: std::sync::Arc::new(marks) })
}

/// The head of the receipt chain: the last receipt's `ledger_head`, or genesis.
pub fn receipt_head(entries: &[LedgerEntry]) -> String {
    entries
        .iter()
        .rev()
        .find_map(|e| match &e.event {
            LedgerEvent::Receipt { ledger_head, .. } => Some(ledger_head.clone()),
            _ => None,
        })
        .unwrap_or_else(crate::domain::receipt::genesis_head)
}

pub fn replay(entries: &[LedgerEntry]) -> Replay {
    let mut r = Replay::default();
    // A person's decision, until the review it decided (always the very next entry).
    let mut decided: Option<(Decision, String)> = None;
    for entry in entries {
        let decision = decided.take();
        let mark =
            |status: &str, reason: &str| Mark { status: status.into(), reason: reason.into(), entry: entry.id() };
        match &entry.event {
            LedgerEvent::Approval { criteria, harden_override, scope, also_bound, phases, phase_ids, .. } => {
                // An approval after one on record pins the contract that one did not (adopted
                // at build, see `Replay::contract_pinned`): the task stays where it stands.
                if !r.approved {
                    r.status = Some(Status::Approved);
                }
                r.approved = true;
                r.harden_overridden = harden_override.is_some();
                r.contract = (!criteria.is_empty() || scope.is_some()).then(|| Contract {
                    criteria: criteria.clone(),
                    scope: scope.clone(),
                    also_bound: also_bound.clone(),
                    phases: phases.clone(),
                    phase_ids: phase_ids.clone(),
                });
            }
            LedgerEvent::ContractAmended { criteria, scope, also_bound, phases, phase_ids, .. } => {
                let earlier = r.contract.take().unwrap_or_default();
                r.contract = Some(Contract {
                    criteria: criteria.clone(),
                    scope: scope.clone().or(earlier.scope),
                    also_bound: also_bound.clone().or(earlier.also_bound),
                    phases: phases.clone().or(earlier.phases),
                    phase_ids: phase_ids.clone().or(earlier.phase_ids),
                });
            }
            LedgerEvent::ReviewAttempt { status, reason } => {
                r.failed_attempt = (status == "failed").then(|| reason.clone());
                // A review run again that gave no verdict supersedes a proposal too (`superseding`).
                if r.failed_attempt.is_some() {
                    r.awaiting_approval = None;
                }
            }
            LedgerEvent::Phase { phase_id, status, reason } => {
                r.phases.insert(phase_id.clone(), mark(status, reason));
                if matches!(status.as_str(), "active" | "blocked") {
                    r.current_phase = Some(phase_id.clone());
                }
            }
            LedgerEvent::Build { status, reason } => {
                r.status = status.parse().ok().or(r.status);
                if reason.contains("final acceptance") || reason.starts_with("build completed") {
                    r.current_phase = Some("final".into());
                }
            }
            LedgerEvent::Criterion { criterion_id, status, reason, .. } => {
                r.criteria.insert(criterion_id.clone(), mark(status, reason));
            }
            LedgerEvent::ManualEvidence { criterion_id, disposition, reason, actor, .. } => {
                let reason = format!("manual evidence by {actor}: {reason}");
                r.criteria.insert(criterion_id.clone(), mark(disposition, &reason));
            }
            LedgerEvent::Review(RecordedReview { verdict, provider, dossier, .. }) => {
                r.status = Some(Status::Review);
                r.review = Some((verdict.clone(), provider.clone(), dossier.clone()));
                r.review_rejected = decision.filter(|(d, _)| *d == Decision::Reject).map(|(_, why)| why);
                r.review_current = true;
                r.awaiting_approval = None;
                r.failed_attempt = None;
            }
            LedgerEvent::ReviewProposed(RecordedReview { verdict, .. }) => r.awaiting_approval = Some(verdict.clone()),
            LedgerEvent::Complete { .. } => r.status = Some(Status::Completed),
            LedgerEvent::Fail { .. } => r.status = Some(Status::Failed),
            LedgerEvent::Cancel { .. } => r.status = Some(Status::Cancelled),
            LedgerEvent::WorkspaceBaseline { .. }
            | LedgerEvent::Material { .. }
            | LedgerEvent::Job { .. }
            | LedgerEvent::Implementer { .. }
            | LedgerEvent::ReviewOverride { .. }
            | LedgerEvent::Receipt { .. }
            | LedgerEvent::Imported { .. }
            | LedgerEvent::SessionImported { .. } => {}
            LedgerEvent::ReviewDecision { decision, reason } => {
                decided = decision.parse().ok().map(|d| (d, reason.clone()));
            }
        }
        if entry.event.supersedes_review() {
            r.review_current = false;
            r.awaiting_approval = None;
            r.failed_attempt = None;
        }
        if !entry.event.reason().is_empty() {
            r.last_reason = entry.event.reason().to_string();
        }
        r.last_recorded_at = entry.recorded_at.clone();
    }
    r
}

/// The spec as far as its ledger knows it, for a task whose file is gone (what `list` and
/// `report` count: [`Marks::without_spec`]): the phases and criteria that have a record (ids, commands, matchers; a result's phase `phaseN`, else the
/// task level), no title, no prose, nothing that was never run. [`project`] gives it the
/// ledger's states.
pub fn sketch(task: &str, entries: &[LedgerEntry]) -> Spec {
    use crate::domain::spec::{Criterion, Phase};
    let mut spec = Spec::default();
    spec.front.task_id = task.to_string();
    let r = replay(entries);
    if r.approved && !r.harden_overridden {
        // Approval needs a passed round unless overridden (which `project` shows).
        spec.front.harden_status = crate::domain::lifecycle::HardenStatus::Passed.as_str().into();
    }
    for entry in entries {
        let (phase_id, criterion) = match &entry.event {
            LedgerEvent::Phase { phase_id, .. } => (phase_id, None),
            LedgerEvent::Criterion { criterion_id, phase_id, command, matcher, .. } => {
                let c = Criterion {
                    id: criterion_id.clone(),
                    command: command.clone(),
                    expected_kind: matcher.clone(),
                    ..Criterion::default()
                };
                (phase_id, Some(c))
            }
            LedgerEvent::ManualEvidence { criterion_id, phase_id, .. } => {
                let c = Criterion { id: criterion_id.clone(), expected_kind: "manual".into(), ..Criterion::default() };
                (phase_id, Some(c))
            }
            _ => continue,
        };
        let criteria = match phase_id.strip_prefix("phase").and_then(|n| n.parse::<u32>().ok()) {
            Some(number) => {
                let at = match spec.phases.iter().position(|p| p.number == number) {
                    Some(at) => at,
                    None => {
                        spec.phases.push(Phase { number, ..Phase::default() });
                        spec.phases.len() - 1
                    }
                };
                &mut spec.phases[at].criteria
            }
            None => &mut spec.acceptance.criteria,
        };
        if let Some(c) = criterion {
            // The latest definition that ran.
            match criteria.iter().position(|kept| kept.id == c.id) {
                Some(at) => criteria[at] = c,
                None => criteria.push(c),
            }
        }
    }
    spec.phases.sort_by_key(|p| p.number);
    spec
}

/// [`sketch`] of a task whose file is there but does not read as a spec, laid over what its
/// approved contract pins (as amended): every phase, in order, and every criterion in its
/// place, by id alone for one that never ran (the contract pins a definition by its digest,
/// not its command, kind or title; nor does any entry hold the task's title). An approval
/// that pinned no phases or places (an older scafld's) leaves what ran.
pub fn sketch_pinned(task: &str, entries: &[LedgerEntry]) -> Spec {
    use crate::domain::spec::{Criterion, Phase};
    let mut spec = sketch(task, entries);
    let Some(contract) = replay(entries).contract else { return spec };
    let numbered = |id: &str| id.strip_prefix("phase").and_then(|n| n.parse::<u32>().ok());
    for number in contract.phase_ids.iter().flatten().filter_map(|id| numbered(id)) {
        if !spec.phases.iter().any(|p| p.number == number) {
            spec.phases.push(Phase { number, ..Phase::default() });
        }
    }
    let places = contract.phases.unwrap_or_default();
    for (id, place) in places.iter().filter(|(id, _)| contract.criteria.contains_key(*id)) {
        if spec.criteria().any(|c| c.id == *id) {
            continue;
        }
        let criterion = Criterion { id: id.clone(), ..Criterion::default() };
        match numbered(place) {
            Some(number) => match spec.phases.iter_mut().find(|p| p.number == number) {
                Some(phase) => phase.criteria.push(criterion),
                None => spec.phases.push(Phase { number, criteria: vec![criterion], ..Phase::default() }),
            },
            None => spec.acceptance.criteria.push(criterion),
        }
    }
    spec.phases.sort_by_key(|p| p.number);
    spec
}

/// The spec as the ledger says it is: criterion and phase states, lifecycle status and Current
/// State. Prose and structure come from `spec`; a hand edit to a runner-owned field is undone.
/// `shadowed`: a user review template has the task's name (`next::Facts::shadowed`).
///
/// A spec without a ledger keeps its file's status and Current State (a draft, a spec the
/// original tool wrote without its session), but never its criterion and phase states: a
/// `- [x]`, `Status: pass` or `Status: completed` nobody recorded here (written by hand, or by
/// another tool) is no evidence, so they read as the empty ledger's, pending ([`unrecorded`]).
pub fn project(spec: &Spec, entries: &[LedgerEntry], now: &str, shadowed: bool) -> Spec {
    project_seen(spec, entries, now, shadowed, crate::domain::next::Seen::default())
}

/// [`project`], its Current State's next step decided with what the files tell (`seen`): the
/// projection written into the spec shows the step `status` shows, never `complete` where
/// `complete` would refuse (the spec's text or the files a passing review was shown changed).
pub fn project_seen(
    spec: &Spec,
    entries: &[LedgerEntry],
    now: &str,
    shadowed: bool,
    seen: crate::domain::next::Seen<'_>,
) -> Spec {
    project_then(spec, entries, now, shadowed, seen, |action| action)
}

/// [`project_seen`], the step it decides handed to `then` before it is shown: what only the
/// caller knows of it goes in there, as `status` adds it (after a review that gave no verdict,
/// that review run again as it ran: the daemon's `evidence::as_before`), so the spec's
/// `Allowed follow-up command` is the command `status` names.
pub fn project_then(
    spec: &Spec,
    entries: &[LedgerEntry],
    now: &str,
    shadowed: bool,
    seen: crate::domain::next::Seen<'_>,
    then: impl FnOnce(NextAction) -> NextAction,
) -> Spec {
    if entries.is_empty() {
        return unrecorded(spec);
    }
    let r = replay(entries);
    let mut next = spec.clone();
    apply_marks(&mut next, &r);
    let status = r.status.unwrap_or(Status::Draft);
    if next.front.status != status.as_str() {
        next.front.status = status.as_str().into();
    }
    next.current_state.status = status.as_str().into();
    if r.harden_overridden {
        next.front.harden_status = crate::domain::lifecycle::HardenStatus::Overridden.as_str().into();
    }
    if let Some((verdict, provider, dossier)) = &r.review {
        next.review =
            crate::domain::review::projection(verdict, provider, dossier.as_ref(), r.review_rejected.as_deref());
    }
    // The phase the ledger last opened, while the spec still has it; one an amendment took out
    // of the spec is no current phase: the step the build takes now is (`build::current`), as
    // is a phase built before it that an amendment reopened (`phase_state`).
    next.current_state.current_phase = r.current_phase.clone().unwrap_or_else(|| "none".into());
    let named = next.current_state.current_phase.as_str();
    if named != "none" {
        let now = crate::domain::build::current(&next);
        let reopened = matches!(&now, crate::domain::build::Target::Phase(id) if id != named);
        if reopened || (named != "final" && next.phase(named).is_none()) {
            next.current_state.current_phase = now.label();
        }
    }
    let cs = &mut next.current_state;
    cs.reason = if r.last_reason.is_empty() { "none".into() } else { clip(&r.last_reason) };
    cs.latest_runner_update = r.last_recorded_at.clone();
    cs.review_gate = match (&r.review, r.review_current, r.awaiting_approval.is_some()) {
        (_, _, true) if status == Status::Review => "awaiting_approval".into(),
        // A review run again since that gave no verdict leaves none current (`complete` says so).
        (Some((verdict, _, _)), true, _) if r.failed_attempt.is_none() => verdict.clone(),
        _ => "not_started".into(),
    };
    let blockers: Vec<String> = if status == Status::Blocked {
        crate::domain::build::blockers(&next, &crate::domain::build::current(&next))
            .into_iter()
            .map(|b| b.said())
            .collect()
    } else {
        Vec::new()
    };
    // Clipped whole as well: a criterion id can be as long as its author likes.
    next.current_state.blockers = clip(&match blockers.len() {
        0 => "none".into(),
        n if n > MAX_BLOCKERS => format!("{}, and {} more", blockers[..MAX_BLOCKERS].join(", "), n - MAX_BLOCKERS),
        _ => blockers.join(", "),
    });
    // The follow-up a projection shows is decided from the ledger (with the evidence it shows
    // stale: a definition amended since it ran) and what `seen` read of the files a current
    // review judged; `status` adds what else needs IO (evidence staled by the files outside a
    // current review, a running review).
    let on_record;
    let stale = match seen.stale {
        Some(stale) => stale,
        None => {
            on_record = crate::domain::evidence::stale_on_record(&next, entries);
            &on_record
        }
    };
    let action = next_action(&Facts {
        spec: &next,
        entries,
        replay: &r,
        spec_errors: 0,
        stale,
        running_review: None,
        draft_digest: None,
        spec_digest: seen.spec_digest,
        shown_changed: seen.shown_changed,
        missing: None,
        misfiled: None,
        shadowed,
        oversize: None,
    });
    crate::domain::next::show(&then(action), &mut next.current_state);
    // `updated` moves only with what the projection changes: a file that already says what the
    // ledger does stays as it is (a `reconcile` a second after a build rewrites nothing).
    if next != *spec {
        next.front.updated = now.into();
    }
    next
}

/// `spec` with the criterion and phase states a ledger with no entries gives it: every
/// criterion pending (its checkbox empty, no evidence), every phase pending. Nothing else of
/// it changes. What `status`, `list`, `report` and a `reconcile` of a task without a ledger
/// show: a pass is a recorded result, never a mark in the file.
pub fn unrecorded(spec: &Spec) -> Spec {
    let mut next = spec.clone();
    for phase in &mut next.phases {
        // A phase without a `Status:` line already reads as pending: none is added.
        if !phase.status.is_empty() {
            phase.status = UNRECORDED_PHASE.into();
        }
        for c in &mut phase.criteria {
            apply_mark(c, None);
        }
    }
    for c in &mut next.acceptance.criteria {
        apply_mark(c, None);
    }
    next
}

/// `next`, a projection, as the spec file shows it: a criterion whose recorded result ran
/// another definition than the one the file holds now (its command, matcher, cwd or timeout
/// edited since) shows no result for the text beside it: unchecked, `pending`, its evidence
/// marked stale, as `status` calls it. The model the runner decides from keeps the result
/// (`evidence::stale` holds it stale there).
pub fn for_file(mut next: Spec, entries: &[LedgerEntry]) -> Spec {
    use crate::domain::evidence::{Stale, stale_on_record};
    let stale = stale_on_record(&next, entries);
    let criteria = next.phases.iter_mut().flat_map(|p| p.criteria.iter_mut()).chain(&mut next.acceptance.criteria);
    for c in criteria.filter(|c| !c.status.is_empty()) {
        if let Some(why @ Stale::DefinitionChanged) = stale.get(&c.id) {
            let ran = if c.evidence.is_empty() { String::new() } else { format!(" (it gave: {})", c.evidence) };
            c.evidence = clip(&format!("stale: {}{ran}; a build runs it again", why.describe()));
            c.status = String::new();
        }
    }
    next
}

/// The phase and criterion states `r` records, onto `spec` (pending where it records none).
fn apply_marks(spec: &mut Spec, r: &Replay) {
    for phase in &mut spec.phases {
        let phase_id = phase.id();
        for c in &mut phase.criteria {
            apply_mark(c, r.criteria.get(&c.id));
        }
        let recorded = r.phases.get(&phase_id).map_or(UNRECORDED_PHASE, |m| m.status.as_str());
        phase.status = phase_state(recorded, phase.criteria.iter().map(|c| c.status.as_str())).into();
    }
    for c in &mut spec.acceptance.criteria {
        apply_mark(c, r.criteria.get(&c.id));
    }
}

fn apply_mark(c: &mut crate::domain::spec::Criterion, mark: Option<&Mark>) {
    match mark {
        Some(mark) => {
            c.status = mark.status.clone();
            c.evidence = clip(&mark.reason);
            c.source_event = mark.entry.clone();
        }
        None => {
            c.status = String::new();
            c.evidence = String::new();
            c.source_event = String::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64, event: LedgerEvent) -> LedgerEntry {
        LedgerEntry { seq, recorded_at: "2026-11-26T10:00:00Z".into(), event }
    }

    /// A review by the `command` provider with `verdict`, no dossier and no spec digest.
    fn recorded(verdict: &str) -> RecordedReview {
        RecordedReview {
            verdict: verdict.into(),
            provider: "command".into(),
            reason: "r".into(),
            dossier: None,
            tree: String::new(),
            reviewers: Vec::new(),
            spec_digest: None,
            shown: Vec::new(),
            shown_material: String::new(),
        }
    }

    fn ran(id: &str, phase: &str, command: &str, status: &str) -> LedgerEvent {
        LedgerEvent::Criterion {
            criterion_id: id.into(),
            phase_id: phase.into(),
            command: command.into(),
            exit_code: Some(0),
            matcher: "exit_code_zero".into(),
            status: status.into(),
            reason: "r".into(),
            output: String::new(),
            diagnostic: String::new(),
            diagnostic_error: String::new(),
            duration_ms: 1,
            attempt: 1,
            definition: String::new(),
            material: String::new(),
            redacted: Vec::new(),
        }
    }

    /// A projection moves `updated` only when it changes something else: projected again later
    /// from the same ledger, the spec it gave stays exactly as it was.
    #[test]
    fn projecting_what_the_file_already_says_keeps_its_updated_time() {
        let mut spec = Spec::default();
        spec.front.updated = "2026-11-26T09:00:00Z".into();
        spec.phases.push(crate::domain::spec::Phase { number: 1, ..Default::default() });
        spec.phases[0].criteria.push(crate::domain::spec::Criterion { id: "a".into(), ..Default::default() });
        let entries = vec![entry(1, ran("a", "phase1", "true", "pass"))];
        let first = project(&spec, &entries, "2026-11-26T10:00:00Z", false);
        assert_eq!(first.front.updated, "2026-11-26T10:00:00Z", "the first projection changes the criterion");
        let again = project(&first, &entries, "2026-11-26T10:00:01Z", false);
        assert_eq!(again, first, "nothing changed, yet the projection did");
    }

    /// The current phase is always one the spec has: after an amendment took the open phase out
    /// of the spec, it is the step the build takes now (final acceptance once the phases left
    /// have all completed), not the phase that is gone.
    #[test]
    fn a_phase_an_amendment_removed_is_not_the_current_phase() {
        use crate::domain::spec::{Criterion, Phase};
        let phase = |number: u32, criterion: &str| Phase {
            number,
            criteria: vec![Criterion { id: criterion.into(), command: "true".into(), ..Criterion::default() }],
            ..Phase::default()
        };
        let opened =
            |id: &str| LedgerEvent::Phase { phase_id: id.into(), status: "active".into(), reason: "opened".into() };
        let done =
            LedgerEvent::Phase { phase_id: "phase1".into(), status: "completed".into(), reason: "passed".into() };
        let entries = vec![
            entry(1, opened("phase1")),
            entry(2, ran("a1", "phase1", "true", "pass")),
            entry(3, done),
            entry(4, opened("phase2")),
            entry(5, LedgerEvent::Build { status: "active".into(), reason: "phase phase2 opened".into() }),
        ];
        let mut spec = Spec { phases: vec![phase(1, "a1"), phase(2, "a2")], ..Spec::default() };
        assert_eq!(project(&spec, &entries, "now", false).current_state.current_phase, "phase2");
        spec.phases.truncate(1);
        assert_eq!(project(&spec, &entries, "now", false).current_state.current_phase, "final");
        spec.phases.push(phase(3, "a3"));
        assert_eq!(project(&spec, &entries, "now", false).current_state.current_phase, "phase3");
    }

    /// A person's rejection belongs to the review it decided, and to no later one.
    #[test]
    fn a_rejection_is_the_reason_of_the_review_it_decided() {
        let decision =
            |decision: &str| LedgerEvent::ReviewDecision { decision: decision.into(), reason: "in French".into() };
        let mut entries = vec![
            entry(1, LedgerEvent::ReviewProposed(recorded("pass"))),
            entry(2, decision("reject")),
            entry(3, LedgerEvent::Review(recorded("fail"))),
        ];
        assert_eq!(replay(&entries).review_rejected.as_deref(), Some("in French"));
        let text = crate::domain::spec::render::review(&project(&Spec::default(), &entries, "now", false).review);
        assert!(text.contains("Verdict: fail\nDecision: a person rejected the proposed verdict: in French"), "{text}");
        entries.push(entry(4, LedgerEvent::Review(recorded("pass"))));
        assert_eq!(replay(&entries).review_rejected, None);
        entries.extend([
            entry(5, LedgerEvent::ReviewProposed(recorded("pass"))),
            entry(6, decision("accept")),
            entry(7, LedgerEvent::Review(recorded("pass"))),
        ]);
        assert_eq!(replay(&entries).review_rejected, None);
    }

    /// A review compares its spec by the digest it recorded; one recorded without (an older
    /// scafld's) counts as unchanged and re-serialises to its stored bytes.
    #[test]
    fn the_spec_changed_since_a_review_only_when_its_recorded_digest_differs() {
        let review = |digest: Option<&str>| {
            LedgerEvent::Review(RecordedReview {
                tree: "t".into(),
                spec_digest: digest.map(str::to_string),
                ..recorded("fail")
            })
        };
        let entries = [entry(1, review(Some("authored:a")))];
        assert!(spec_changed_since_review(&entries, Some("authored:b")));
        assert!(!spec_changed_since_review(&entries, Some("authored:a")));
        assert!(!spec_changed_since_review(&entries, None));
        let older = [entry(1, review(Some("authored:a"))), entry(2, review(None))];
        assert!(!spec_changed_since_review(&older, Some("authored:b")));
        let json = serde_json::to_string(&review(None)).unwrap();
        assert!(!json.contains("spec_digest"), "{json}");
        assert_eq!(serde_json::to_string(&serde_json::from_str::<LedgerEvent>(&json).unwrap()).unwrap(), json);
    }

    /// A proposal no longer awaits a decision once newer work or a review run again without a
    /// verdict follows it; `superseding` names the first such entry, as `status` shows it.
    #[test]
    fn a_proposal_is_superseded_by_newer_work_or_a_failed_attempt() {
        let proposed = LedgerEvent::ReviewProposed(recorded("pass"));
        let attempt = |status: &str| LedgerEvent::ReviewAttempt { status: status.into(), reason: "r".into() };
        let mut entries = vec![entry(1, proposed.clone()), entry(2, attempt("running"))];
        assert_eq!(replay(&entries).awaiting_approval.as_deref(), Some("pass"));
        assert_eq!(superseding(&entries[1..]), None);
        entries.push(entry(3, attempt("failed")));
        assert_eq!(replay(&entries).awaiting_approval, None);
        assert_eq!(superseding(&entries[1..]).map(LedgerEntry::id).as_deref(), Some("entry-3"));
        let entries = [entry(1, proposed), entry(2, ran("a1", "phase1", "true", "pass")), entry(3, attempt("failed"))];
        assert_eq!(replay(&entries).awaiting_approval, None);
        assert_eq!(superseding(&entries[1..]).map(LedgerEntry::id).as_deref(), Some("entry-2"));
    }

    /// Without its file, a task is sketched from what its ledger ran: phases by number, the
    /// latest command of each criterion, task-level ones apart; projected, it has the ledger's
    /// states, and its status is the ledger's.
    #[test]
    fn a_task_without_its_file_is_sketched_from_its_ledger() {
        let approval = LedgerEvent::Approval {
            reason: "ok".into(),
            harden_override: None,
            criteria: BTreeMap::new(),
            scope: None,
            also_bound: None,
            phases: None,
            phase_ids: None,
        };
        let phase = |id: &str, status: &str| LedgerEvent::Phase {
            phase_id: id.into(),
            status: status.into(),
            reason: "r".into(),
        };
        let entries: Vec<LedgerEntry> = [
            approval,
            phase("phase2", "active"),
            ran("b1", "phase2", "false", "fail"),
            ran("b1", "phase2", "true", "pass"),
            phase("phase1", "completed"),
            ran("t1", "", "make", "pass"),
        ]
        .into_iter()
        .zip(1..)
        .map(|(event, seq)| entry(seq, event))
        .collect();
        let marks = |pairs: &[(&str, &str)]| pairs.iter().map(|(id, s)| (id.to_string(), s.to_string())).collect();
        let marks = Marks {
            phases: marks(&[("phase1", "completed"), ("phase2", "active")]),
            criteria: marks(&[("b1", "pass"), ("t1", "pass")]),
            ran: BTreeMap::new(),
        };
        let state_now = state(&entries).unwrap();
        assert_eq!((state_now.seq, state_now.status, &*state_now.marks), (6, Status::Approved, &marks));
        assert_eq!((state_now.marks.phase("phase3", []), state_now.marks.criterion("c9")), ("pending", ""));
        assert_eq!(state(&[]), None);
        let sketched = sketch("t", &entries);
        assert_eq!(sketched.phases.iter().map(|p| p.id()).collect::<Vec<_>>(), ["phase1", "phase2"]);
        assert_eq!(sketched.phases[1].criteria[0].command, "true", "the latest definition that ran");
        assert_eq!(sketched.acceptance.criteria[0].id, "t1");
        let projected = project(&sketched, &entries, "now", false);
        assert_eq!((projected.front.status.as_str(), projected.front.task_id.as_str()), ("approved", "t"));
        assert_eq!(projected.phases[1].criteria[0].status, "pass");
        assert_eq!(projected.harden_status(), crate::domain::lifecycle::HardenStatus::Passed);
    }

    /// A file that does not read is sketched over its approved contract: every pinned phase in
    /// order (one nothing ran in too), every pinned criterion in its place by its id alone
    /// when it never ran, and one that ran shown once, where it ran, with what it ran.
    #[test]
    fn a_pinned_sketch_lays_out_the_contracts_phases_and_criteria() {
        let pairs = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        let approval = LedgerEvent::Approval {
            reason: "r".into(),
            harden_override: None,
            criteria: pairs(&[("a1", "d"), ("b1", "d"), ("b2", "d")]),
            scope: Some(Vec::new()),
            also_bound: None,
            phases: Some(pairs(&[("a1", "phase1"), ("b1", "phase2"), ("b2", "phase2")])),
            phase_ids: Some(vec!["phase1".into(), "phase2".into(), "phase3".into()]),
        };
        let entries = vec![entry(1, approval), entry(2, ran("b1", "phase1", "true", "pass"))];
        let spec = sketch_pinned("t", &entries);
        let laid: Vec<(String, Vec<&str>)> =
            spec.phases.iter().map(|p| (p.id(), p.criteria.iter().map(|c| c.id.as_str()).collect())).collect();
        let want = |id: &str, ids: &[&'static str]| (id.to_string(), ids.to_vec());
        assert_eq!(laid, [want("phase1", &["b1", "a1"]), want("phase2", &["b2"]), want("phase3", &[])]);
        assert_eq!(spec.phases[0].criteria[0].command, "true");
        assert!(spec.phases[0].criteria[1].known_by_id_alone() && !spec.phases[0].criteria[0].known_by_id_alone());
        assert_eq!(sketch("t", &entries).phases.len(), 1, "a missing file's sketch is what ran");
    }

    /// The state the index keeps counts a criterion as its file shows it: a result that ran
    /// another definition than the one beside it now shows pending, as [`for_file`] writes it,
    /// one recorded unbound keeps its status (it is stale for another reason), and a result for
    /// the definition as it is keeps its pass.
    #[test]
    fn the_marks_show_a_criterion_as_for_file_writes_it() {
        use crate::domain::evidence::{Definition, definition_digest};
        use crate::domain::spec::Criterion;
        let criterion = |command: &str| Criterion { id: "a1".into(), command: command.into(), ..Criterion::default() };
        let mut spec = Spec::default();
        spec.phases.push(crate::domain::spec::Phase {
            number: 1,
            criteria: vec![criterion("true")],
            ..Default::default()
        });
        let result = |digest: String, bound_to: &str| {
            let mut event = ran("a1", "phase1", "true", "pass");
            if let LedgerEvent::Criterion { definition, material, .. } = &mut event {
                (*definition, *material) = (digest, bound_to.to_string());
            }
            event
        };
        let shown = |entries: &[LedgerEntry], command: &str| {
            let mut edited = spec.clone();
            edited.phases[0].criteria[0].command = command.into();
            let file = for_file(project(&edited, entries, "now", false), entries);
            let marks = state(entries).unwrap().marks;
            let listed = marks.shown("a1", &Definition::of(&edited.phases[0].criteria[0])).to_string();
            assert_eq!(listed, file.phases[0].criteria[0].status, "the index and the file agree ({command})");
            listed
        };
        let bound = [entry(1, result(definition_digest(&criterion("true")), "m"))];
        assert_eq!(shown(&bound, "true"), "pass");
        assert_eq!(shown(&bound, "true # changed"), "");
        let unbound = [entry(1, result(String::new(), ""))];
        assert_eq!(shown(&unbound, "true # changed"), "pass");
        // A later unbound result replaces the bound one's definition.
        let both = [bound[0].clone(), entry(2, result(String::new(), ""))];
        assert_eq!(shown(&both, "true # changed"), "pass");
    }

    /// An approval that pins nothing (the original tool's) leaves the contract to adopt; the
    /// approval that adopts it pins it and leaves the task where it stands.
    #[test]
    fn an_adopting_approval_pins_the_contract_and_keeps_the_status() {
        let approval = |criteria: &[&str]| LedgerEvent::Approval {
            reason: "r".into(),
            harden_override: None,
            criteria: criteria.iter().map(|id| (id.to_string(), "digest".to_string())).collect(),
            scope: (!criteria.is_empty()).then(Vec::new),
            also_bound: None,
            phases: None,
            phase_ids: None,
        };
        let build = LedgerEvent::Build { status: "blocked".into(), reason: "r".into() };
        let imported = [entry(1, approval(&[])), entry(2, build)];
        assert!(replay(&imported).approved && !replay(&imported).contract_pinned());
        let adopted = [imported.as_slice(), &[entry(3, approval(&["a1"]))]].concat();
        let r = replay(&adopted);
        assert!(r.contract_pinned());
        assert_eq!(r.status, Some(Status::Blocked));
        assert_eq!(r.contract.unwrap().criteria.keys().collect::<Vec<_>>(), ["a1"]);
    }

    #[test]
    fn accepted_and_proposed_reviews_keep_their_flat_stored_form() {
        // Ledgers already on disk hold `{"type": "review", "verdict": ...}`: the shared record
        // must read and write exactly that shape.
        let stored = r#"{"type":"review_proposed","verdict":"pass","provider":"consensus","reason":"r","tree":"t"}"#;
        let event: LedgerEvent = serde_json::from_str(stored).unwrap();
        let LedgerEvent::ReviewProposed(review) = &event else { panic!("{event:?}") };
        assert_eq!((review.verdict.as_str(), review.tree.as_str(), review.dossier.as_ref()), ("pass", "t", None));
        assert_eq!(serde_json::to_string(&event).unwrap(), stored);
        let accepted = LedgerEvent::Review(review.clone());
        assert_eq!(serde_json::to_string(&accepted).unwrap(), stored.replace("review_proposed", "review"));
    }
}
