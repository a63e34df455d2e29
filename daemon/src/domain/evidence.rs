//! Evidence bound to content: the digest of a criterion's definition, the freshness of each
//! recorded result (its definition and the material it judged, against the current ones), and
//! the approved contract (the definitions and the scope approval pinned), its amendments, and
//! the criteria that have no passing result. Values in, values out: the material digest is
//! computed by the caller (`baseline::material`).

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use crate::domain::ledger::{LedgerEntry, LedgerEvent};
use crate::domain::spec::{Criterion, Spec};

/// Digest of what a criterion checks: command, matcher, working directory and timeout, and for
/// a `manual` criterion, which runs nothing, its title too: the text is what a person attests,
/// so rewording it is a new definition (a contract change, its evidence stale) as a changed
/// command is. A command criterion's title and the runner-owned fields are not part of it.
pub fn definition_digest(c: &Criterion) -> String {
    let attested = (c.effective_kind() == "manual").then_some(c.title.as_str());
    digest_of(runs(c).into_iter().chain(attested))
}

/// What a criterion runs, as its definition digest takes it.
fn runs(c: &Criterion) -> [&str; 4] {
    [c.command.as_str(), c.effective_kind(), c.cwd.as_str(), c.timeout_seconds.as_str()]
}

fn digest_of<'a>(parts: impl Iterator<Item = &'a str>) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part.len().to_le_bytes());
        hasher.update(part.as_bytes());
    }
    format!("{:x}", hasher.finalize())
}

/// Whether `recorded`, a definition digest on record, is `c`'s definition as it is now. A
/// manual criterion's pin or result an older scafld recorded without its title (nothing tells
/// which text it was recorded for) is taken as the definition as it is, so an upgrade never
/// turns the manual criteria of a task in flight into contract changes; everything recorded
/// since binds the text.
pub fn same_definition(recorded: &str, c: &Criterion) -> bool {
    Definition::of(c).is(recorded)
}

/// What [`same_definition`] compares of a criterion, kept apart from it: the spec index keeps
/// one per criterion of each file, so `list` and `report` tell a result recorded for another
/// definition (which the file shows pending, [`crate::domain::ledger::for_file`]) without the
/// whole parse.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Definition {
    digest: String,
    /// A manual criterion's digest without its title, as an older scafld recorded it.
    untitled: Option<String>,
}

impl Definition {
    pub fn of(c: &Criterion) -> Definition {
        let untitled = (c.effective_kind() == "manual").then(|| digest_of(runs(c).into_iter()));
        Definition { digest: definition_digest(c), untitled }
    }

    /// Whether `recorded`, a definition digest on record, is this definition.
    pub fn is(&self, recorded: &str) -> bool {
        recorded == self.digest || self.untitled.as_deref() == Some(recorded)
    }
}

/// The definition digest a recorded result is bound to, or `None` for a result recorded
/// unbound (no definition or no material on record: [`Stale::Unbound`], whatever definition it
/// names). Only a bound result can have run another definition ([`Stale::DefinitionChanged`]).
pub fn bound_definition<'e>(definition: &'e str, material: &'e str) -> Option<&'e str> {
    (!definition.is_empty() && !material.is_empty()).then_some(definition)
}

/// The scope the contract pins: the paths the spec declares (Context, Scope, Touchpoints,
/// every phase's Changes; empty means the whole tree) as written, whatever folder the
/// workspace is in (so a moved workspace keeps its contract); the evidence itself is bound to
/// these paths read against the workspace (`crate::evidence::evidence_scope`).
pub fn declared_scope(spec: &Spec) -> Vec<String> {
    crate::domain::review::scope(spec, &[], "")
}

/// What the contract pins beside the declared paths, as evidence binds it
/// (`crate::evidence::evidence_scope`): the bare names (`Makefile`, `bin`: no `/` or `.`) and
/// the files kept from reviewers for their secrets (`.env.local`), every one the spec declares,
/// unless the scope is the whole tree already (then none, as evidence adds none).
pub fn declared_also_bound(spec: &Spec) -> Vec<String> {
    let bound = crate::domain::review::bound_scope(spec, "");
    if bound.is_empty() {
        return Vec::new();
    }
    let declared = declared_scope(spec);
    let mut also: Vec<String> = crate::domain::review::bare_names(spec);
    also.extend(bound.into_iter().filter(|path| !declared.contains(path)));
    also.sort();
    also.dedup();
    also
}

/// Every criterion's id and definition digest.
fn pins(spec: &Spec) -> BTreeMap<String, String> {
    spec.criteria().map(|c| (c.id.clone(), definition_digest(c))).collect()
}

/// The contract approval pins (and `approve --amend` re-pins): what each criterion runs, and
/// the scope whose files its evidence is bound to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Contract {
    /// Criterion id → definition digest.
    pub criteria: BTreeMap<String, String>,
    /// The evidence scope; `None` in approvals recorded before the scope was pinned (and in
    /// imported ledgers), which leave it unchecked.
    pub scope: Option<Vec<String>>,
    /// The bare names and secret files of the scope ([`declared_also_bound`]); `None` in
    /// contracts pinned before they were (by an older scafld, or imported), whose scope is
    /// compared by its paths alone so what it always had never reads as added.
    pub also_bound: Option<Vec<String>>,
    /// Criterion id → its place ([`placement`]); `None` in contracts pinned before it was,
    /// which leave a criterion's move unchecked.
    pub phases: Option<BTreeMap<String, String>>,
    /// The phases, by id in order ([`phase_ids`]): a phase with no criterion of its own is still
    /// work the task claims. `None` in contracts pinned before they were (unchecked).
    pub phase_ids: Option<Vec<String>>,
}

/// The contract of `spec` as it is now.
pub fn contract(spec: &Spec) -> Contract {
    Contract {
        criteria: pins(spec),
        scope: Some(declared_scope(spec)),
        also_bound: Some(declared_also_bound(spec)),
        phases: Some(placement(spec)),
        phase_ids: Some(phase_ids(spec)),
    }
}

/// The phases with no executable acceptance criterion (by id): approval refuses them (a phase
/// would pass without evidence), so a spec holding one is repaired before its contract can be
/// approved or amended. `status`, and the contract refusals of build, review and complete, say
/// so rather than point at an amendment that would be refused.
pub fn unprovable_phases(spec: &Spec) -> Vec<String> {
    spec.phases.iter().filter(|p| !p.criteria.iter().any(Criterion::is_executable)).map(|p| p.id()).collect()
}

/// What makes the contract approvable again when [`unprovable_phases`] names some.
pub fn unprovable_repair(task: &str, phases: &[String]) -> String {
    let named = phases.iter().map(|p| format!("`{p}`")).collect::<Vec<_>>().join(", ");
    format!(
        "{named} has no executable acceptance criterion, which approval refuses: give it one (or remove the phase), then `scafld approve {task} --amend --reason \"why\"`"
    )
}

/// The spec's phases by id (`phaseN`), in order.
pub fn phase_ids(spec: &Spec) -> Vec<String> {
    spec.phases.iter().map(|p| p.id()).collect()
}

/// The phases added or removed between two contracts, in words (`` phase `phase2` added ``);
/// nothing when either never pinned them.
fn phase_changes(before: &Contract, after: &Contract) -> Vec<String> {
    let (Some(was), Some(now)) = (&before.phase_ids, &after.phase_ids) else { return Vec::new() };
    let mut out: Vec<String> =
        now.iter().filter(|id| !was.contains(id)).map(|id| format!("phase `{id}` added")).collect();
    out.extend(was.iter().filter(|id| !now.contains(id)).map(|id| format!("phase `{id}` removed")));
    out
}

/// Where each criterion sits: its phase's id (`phaseN`), or `final` for the task-level
/// acceptance. Part of the contract: a phase completes on its own criteria, so moving one
/// (into a completed phase, out of a blocked one) changes what the build proves.
pub fn placement(spec: &Spec) -> BTreeMap<String, String> {
    let phases = spec.phases.iter().flat_map(|p| p.criteria.iter().map(move |c| (c.id.clone(), p.id())));
    phases.chain(spec.acceptance.criteria.iter().map(|c| (c.id.clone(), "final".to_string()))).collect()
}

/// The criteria kept in both contracts whose place differs, in words (`` `a2` moved from
/// phase2 to phase1 ``); nothing when either never pinned the places.
fn moves(before: &Contract, after: &Contract) -> Vec<String> {
    let (Some(was), Some(now)) = (&before.phases, &after.phases) else { return Vec::new() };
    let place = |p: &str| if p == "final" { "the task-level acceptance".to_string() } else { p.to_string() };
    now.iter()
        .filter(|(id, _)| before.criteria.contains_key(*id) && after.criteria.contains_key(*id))
        .filter_map(|(id, to)| was.get(id).filter(|from| *from != to).map(|from| (id, from, to)))
        .map(|(id, from, to)| format!("`{id}` moved from {} to {}", place(from), place(to)))
        .collect()
}

/// How the spec differs from the pinned contract: changed, added and removed criteria, criteria
/// moved to another phase, then scope paths added or removed.
pub fn contract_changes(spec: &Spec, pinned: &Contract) -> Vec<String> {
    let mut now = contract(spec);
    // A pin an older scafld took of a manual criterion without its title stands for it as it is.
    for c in spec.criteria() {
        if let Some(pin) = pinned.criteria.get(&c.id).filter(|pin| same_definition(pin, c)) {
            now.criteria.insert(c.id.clone(), pin.clone());
        }
    }
    let mut changed = criteria_changes(&now.criteria, &pinned.criteria)
        .into_iter()
        .map(|(id, how)| format!("`{id}` {}", how.word()))
        .collect::<Vec<_>>();
    changed.extend(moves(pinned, &now));
    changed.extend(phase_changes(pinned, &now));
    changed.extend(contract_scope_changes(pinned, &now));
    changed
}

/// How the scope of `after` differs from that of `before`, in words: by its paths, and by its
/// bare names and secret files too when both contracts pinned them (like with like); nothing when either
/// never pinned a scope.
fn contract_scope_changes(before: &Contract, after: &Contract) -> Vec<String> {
    let (Some(paths_before), Some(paths_after)) = (&before.scope, &after.scope) else {
        return Vec::new();
    };
    match (&before.also_bound, &after.also_bound) {
        (Some(names_before), Some(names_after)) => {
            scope_changes(&with_names(paths_before, names_before), &with_names(paths_after, names_after))
        }
        _ => scope_changes(paths_before, paths_after),
    }
}

/// A scope's paths with its bare names, sorted; the whole tree (empty) stays the whole tree.
fn with_names(paths: &[String], names: &[String]) -> Vec<String> {
    if paths.is_empty() {
        return Vec::new();
    }
    let mut all: Vec<String> = paths.iter().chain(names).cloned().collect();
    all.sort();
    all.dedup();
    all
}

/// How one criterion of a contract differs from an earlier one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CriterionChange {
    Changed,
    Added,
    Removed,
}

impl CriterionChange {
    pub fn word(self) -> &'static str {
        match self {
            CriterionChange::Changed => "changed",
            CriterionChange::Added => "added",
            CriterionChange::Removed => "removed",
        }
    }
}

/// The criteria of `after` that differ from `before` (changed and added, by id), then those
/// `after` lacks (removed).
fn criteria_changes(
    after: &BTreeMap<String, String>,
    before: &BTreeMap<String, String>,
) -> Vec<(String, CriterionChange)> {
    let mut changed: Vec<(String, CriterionChange)> = after
        .iter()
        .filter(|(id, digest)| before.get(*id) != Some(*digest))
        .map(|(id, _)| {
            (id.clone(), if before.contains_key(id) { CriterionChange::Changed } else { CriterionChange::Added })
        })
        .collect();
    changed
        .extend(before.keys().filter(|id| !after.contains_key(*id)).map(|id| (id.clone(), CriterionChange::Removed)));
    changed
}

/// A scope change in words; an empty scope is the whole tree.
fn scope_changes(before: &[String], after: &[String]) -> Vec<String> {
    let list = |paths: &[String]| paths.iter().map(|p| format!("`{p}`")).collect::<Vec<_>>().join(", ");
    match (before.is_empty(), after.is_empty()) {
        _ if before == after => Vec::new(),
        (true, _) => vec![format!("scope narrowed from the whole tree to {}", list(after))],
        (_, true) => vec![format!("scope widened from {} to the whole tree", list(before))],
        _ => {
            let mut out: Vec<String> =
                after.iter().filter(|p| !before.contains(p)).map(|p| format!("scope `{p}` added")).collect();
            out.extend(before.iter().filter(|p| !after.contains(p)).map(|p| format!("scope `{p}` removed")));
            out
        }
    }
}

/// An amendment of the approved contract (`approve --amend --reason`), as a reviewer needs it:
/// what it changed against the contract before it, and each changed or removed criterion's last
/// run before the amendment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Amendment {
    /// The ledger entry (`entry-N`) and when it was recorded.
    pub entry: String,
    pub recorded_at: String,
    pub reason: String,
    pub criteria: Vec<AmendedCriterion>,
    /// Scope changes in words (empty when the scope did not change or was not pinned).
    pub scope: Vec<String>,
    /// Criteria moved to another phase and phases added or removed, in words (empty when none
    /// changed or they were not pinned).
    pub moved: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmendedCriterion {
    pub id: String,
    pub change: CriterionChange,
    /// The last recorded run before the amendment: command, status and the matcher's reason.
    pub last_run: Option<(String, String, String)>,
}

/// Every amendment since the approval, oldest first.
pub fn amendments(entries: &[LedgerEntry]) -> Vec<Amendment> {
    let mut contract: Option<Contract> = None;
    let mut last_runs: BTreeMap<&str, (String, String, String)> = BTreeMap::new();
    let mut out = Vec::new();
    for entry in entries {
        match &entry.event {
            LedgerEvent::Approval { criteria, scope, also_bound, phases, phase_ids, .. } => {
                contract = Some(Contract {
                    criteria: criteria.clone(),
                    scope: scope.clone(),
                    also_bound: also_bound.clone(),
                    phases: phases.clone(),
                    phase_ids: phase_ids.clone(),
                });
                out.clear();
            }
            LedgerEvent::ContractAmended { reason, criteria, scope, also_bound, phases, phase_ids, .. } => {
                let before = contract.take().unwrap_or_default();
                let after = Contract {
                    criteria: criteria.clone(),
                    scope: scope.clone().or(before.scope.clone()),
                    also_bound: also_bound.clone().or(before.also_bound.clone()),
                    phases: phases.clone().or(before.phases.clone()),
                    phase_ids: phase_ids.clone().or(before.phase_ids.clone()),
                };
                let scope_words = contract_scope_changes(&before, &after);
                let mut moved = moves(&before, &after);
                moved.extend(phase_changes(&before, &after));
                out.push(Amendment {
                    entry: entry.id(),
                    recorded_at: entry.recorded_at.clone(),
                    reason: reason.clone(),
                    criteria: criteria_changes(&after.criteria, &before.criteria)
                        .into_iter()
                        .map(|(id, change)| AmendedCriterion {
                            last_run: (change != CriterionChange::Added)
                                .then(|| last_runs.get(id.as_str()).cloned())
                                .flatten(),
                            id,
                            change,
                        })
                        .collect(),
                    scope: scope_words,
                    moved,
                });
                contract = Some(after);
            }
            LedgerEvent::Criterion { criterion_id, command, status, reason, .. } => {
                last_runs.insert(criterion_id, (command.clone(), status.clone(), reason.clone()));
            }
            LedgerEvent::ManualEvidence { criterion_id, disposition, reason, actor, .. } => {
                last_runs.insert(
                    criterion_id,
                    ("(manual)".into(), disposition.clone(), format!("manual evidence by {actor}: {reason}")),
                );
            }
            _ => {}
        }
    }
    out
}

/// Criteria whose latest result is not a pass (failed, invalid, or never recorded): a task
/// cannot be done while any is.
pub fn unproven(spec: &Spec, entries: &[LedgerEntry]) -> Vec<String> {
    spec.criteria()
        .filter(|c| latest_result(entries, &c.id).is_none_or(|(status, _, _)| status != "pass"))
        .map(|c| c.id.clone())
        .collect()
}

/// Why a recorded result no longer speaks for the current state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stale {
    /// Recorded before evidence was bound to content, or imported from the original tool.
    Unbound,
    /// The criterion's command, matcher, cwd or timeout changed since it ran.
    DefinitionChanged,
    /// The scoped files changed since it ran (their material digest differs).
    MaterialChanged { recorded: String },
    /// The scoped files changed since it ran, and its own command changed them on its last
    /// `runs` steps in a row (each run on what the one before left, nothing else changing the
    /// files between or since), too few to call a loop: a formatter can need a second pass.
    /// Building again runs it on what it left.
    ChangedByOwnRuns { recorded: String, changed: Vec<String>, runs: usize },
    /// The scoped files changed since it ran, and its own command changes them every time: on
    /// three steps in a row (or two that brought the files back to a state they were in), with
    /// nothing else changing the files between or since, the step that ran it left the files
    /// different from what they ran on (`changed`). Building again runs it again and leaves it
    /// stale again.
    RewritesOwnScope { recorded: String, changed: Vec<String> },
    /// The scoped files hold the content it is bound to, but were rewritten while the step that
    /// recorded it ran (`changed`: a branch switched and back, a stash and its pop): it may
    /// have run on other content. Building again runs it on the files as they are.
    RewrittenWhileRunning { changed: Vec<String> },
    /// The files in scope cannot be read now (for example the workspace is not a git
    /// repository any more), so nothing recorded can be shown to match them.
    Unverifiable,
    /// The files in scope cannot be read now because one of them (`name`, as shown to a
    /// person) has a name that is not UTF-8: the user renames it or keeps it out of the scope.
    UnreadableName { name: String },
    /// The spec file is missing: there is no definition to check the result against.
    SpecMissing,
    /// The spec file is there but does not read (not UTF-8, a folder, a FIFO): neither its
    /// definitions nor its scope are known, so the result cannot be judged until it reads again.
    SpecUnreadable,
}

impl Stale {
    pub fn describe(&self) -> &'static str {
        match self {
            Stale::Unbound => "recorded without a content fingerprint",
            Stale::DefinitionChanged => "its definition changed since it ran",
            Stale::MaterialChanged { .. } => "the files in the task's scope changed since it ran",
            Stale::ChangedByOwnRuns { .. } => "its own command changed the files in the task's scope when it last ran",
            Stale::RewritesOwnScope { .. } => "its own command changes the files in the task's scope each time it runs",
            Stale::RewrittenWhileRunning { .. } => {
                "files in the task's scope were rewritten while it ran, so it may have run on other content"
            }
            Stale::Unverifiable | Stale::UnreadableName { .. } => {
                "the files in the task's scope cannot be read to check it"
            }
            Stale::SpecMissing => "the spec file is missing, so its definition cannot be checked",
            Stale::SpecUnreadable => {
                "the spec file does not read, so its definition and scope cannot be checked until it reads again"
            }
        }
    }
}

/// The latest recorded result of a criterion: `(status, definition digest, material digest)`.
pub fn latest_result<'e>(entries: &'e [LedgerEntry], id: &str) -> Option<(&'e str, &'e str, &'e str)> {
    latest_result_entry(entries, id).and_then(|e| match &e.event {
        LedgerEvent::Criterion { status, definition, material, .. } => {
            Some((status.as_str(), definition.as_str(), material.as_str()))
        }
        LedgerEvent::ManualEvidence { disposition, definition, material, .. } => {
            Some((disposition.as_str(), definition.as_str(), material.as_str()))
        }
        _ => None,
    })
}

/// The ledger entry holding a criterion's latest result (a run, a wait, or a person's manual
/// evidence), for what it carries beside the status: who recorded manual evidence, and when.
pub fn latest_result_entry<'e>(entries: &'e [LedgerEntry], id: &str) -> Option<&'e LedgerEntry> {
    entries.iter().rev().find(|e| match &e.event {
        LedgerEvent::Criterion { criterion_id, .. } | LedgerEvent::ManualEvidence { criterion_id, .. } => {
            criterion_id == id
        }
        _ => false,
    })
}

/// What a build step finds for a manual criterion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManualResult<'e> {
    /// A person's result (`pass` or `fail`) current for its definition and the material.
    Current(&'e str),
    /// Nothing current: it waits for a person. `superseded` when a result is on record but
    /// went stale: the step records the wait in its place, so the ledger (and the spec projected
    /// from it) no longer shows the old result as the criterion's state.
    Waiting { superseded: bool },
}

/// The manual criterion `c`'s result against the step's `material`.
pub fn manual_result<'e>(entries: &'e [LedgerEntry], c: &Criterion, material: &str) -> ManualResult<'e> {
    match latest_result(entries, &c.id) {
        Some((status, def, mat)) if same_definition(def, c) && mat == material => match status {
            // A wait recorded on this very material is still a wait.
            "pending" => ManualResult::Waiting { superseded: false },
            status => ManualResult::Current(status),
        },
        recorded => ManualResult::Waiting { superseded: recorded.is_some() },
    }
}

/// Every criterion with a recorded result that no longer matches its definition or the current
/// material, by id. Criteria without a result are pending, not stale.
/// `material` is `None` when it could not be computed: every recorded result is then stale.
pub fn stale(spec: &Spec, entries: &[LedgerEntry], material: Option<&str>) -> BTreeMap<String, Stale> {
    let own = material.and_then(|now| own_changes(entries, now));
    let mut out = BTreeMap::new();
    for c in spec.criteria() {
        let Some((_, definition, recorded)) = latest_result(entries, &c.id) else { continue };
        let why = match bound_definition(definition, recorded) {
            None => Some(Stale::Unbound),
            Some(definition) if !same_definition(definition, c) => Some(Stale::DefinitionChanged),
            Some(_) if material.is_none() => Some(Stale::Unverifiable),
            Some(_) if Some(recorded) == material => rewritten_while_running(entries, &c.id, recorded)
                .map(|changed| Stale::RewrittenWhileRunning { changed }),
            Some(_) => Some(match &own {
                Some(own) if own.step.from == recorded && own.step.criteria.contains(&c.id) => {
                    let (recorded, changed) = (recorded.to_string(), own.step.changed.clone());
                    match own.looped() {
                        true => Stale::RewritesOwnScope { recorded, changed },
                        false => Stale::ChangedByOwnRuns { recorded, changed, runs: own.runs },
                    }
                }
                _ => Stale::MaterialChanged { recorded: recorded.to_string() },
            }),
        };
        if let Some(why) = why {
            out.insert(c.id.clone(), why);
        }
    }
    out
}

/// The files rewritten while the step that recorded the latest result of `id` ran, when that
/// step ended with the files' content the one the result is bound to (`recorded`): a
/// `material` event of the step with its content unchanged (`digest` its `from`), naming the
/// criteria that ran and the files written meanwhile. `None` when the result was recorded
/// after any such event (a build that ran it again).
pub fn rewritten_while_running(entries: &[LedgerEntry], id: &str, recorded: &str) -> Option<Vec<String>> {
    entries.iter().rev().find_map(|e| match &e.event {
        LedgerEvent::Material { digest, after_step: Some(step), .. }
            if digest == recorded && step.from == *digest && step.criteria.iter().any(|c| c == id) =>
        {
            Some(Some(step.changed.clone()))
        }
        LedgerEvent::Criterion { criterion_id, .. } | LedgerEvent::ManualEvidence { criterion_id, .. }
            if criterion_id == id =>
        {
            Some(None)
        }
        _ => None,
    })?
}

/// What [`stale`] says without the files: results whose criterion's definition changed since
/// they ran (an amendment) or that were recorded unbound to one. The ledger alone shows these,
/// so a projection, which reads no file, names the build that re-runs them as `status` does.
pub fn stale_on_record(spec: &Spec, entries: &[LedgerEntry]) -> BTreeMap<String, Stale> {
    let mut stale = stale(spec, entries, None);
    stale.retain(|_, why| !matches!(why, Stale::Unverifiable));
    stale
}

/// The steps in a row whose own commands changed the files, ending with the last build step
/// (see [`own_changes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnChanges {
    /// The last step's change, its `criteria` narrowed to those that ran in every step counted.
    pub step: crate::domain::ledger::StepChange,
    /// How many steps in a row changed the files (counted up to [`LOOP_RUNS`]).
    pub runs: usize,
    /// Whether the files came back to a state one of those steps had already left or run on.
    pub cycle: bool,
}

/// Steps in a row whose commands changed the files that make a loop rather than a formatter
/// still converging.
pub const LOOP_RUNS: usize = 3;

impl OwnChanges {
    /// Whether building again cannot be expected to settle: [`LOOP_RUNS`] changes in a row,
    /// or a state of the files seen again (a cycle repeats for ever).
    pub fn looped(&self) -> bool {
        self.runs >= LOOP_RUNS || self.cycle
    }
}

/// The last build step's change to the files, with the steps before it that it continues: the
/// last step left the files as they are now (`now`), and each step counted ran on exactly
/// what the one before left, with the same criteria running in all of them (none in common:
/// the count stops). One change, or two, says nothing of a loop: a formatter can rewrite once
/// or twice and then leave the files as they are. `None` when the files are not what the last
/// step left (something else changed them since) or no step changed them.
pub fn own_changes(entries: &[LedgerEntry], now: &str) -> Option<OwnChanges> {
    // A step that left the content as it found it (files rewritten meanwhile) changed nothing.
    let mut changes = entries.iter().rev().filter_map(|e| match &e.event {
        LedgerEvent::Material { digest, after_step: Some(step), .. } if *digest != step.from => {
            Some((digest.as_str(), step))
        }
        _ => None,
    });
    let (left, last) = changes.next()?;
    if left != now {
        return None;
    }
    let mut criteria = last.criteria.clone();
    let mut states = vec![left, last.from.as_str()];
    let mut from = last.from.as_str();
    let mut runs = 1;
    while runs < LOOP_RUNS {
        let Some((before_left, before)) = changes.next() else { break };
        let common: Vec<String> = criteria.iter().filter(|c| before.criteria.contains(c)).cloned().collect();
        if before_left != from || common.is_empty() {
            break;
        }
        criteria = common;
        from = before.from.as_str();
        states.push(from);
        runs += 1;
    }
    if criteria.is_empty() {
        return None;
    }
    let mut seen = std::collections::BTreeSet::new();
    let cycle = !states.iter().all(|s| seen.insert(*s));
    Some(OwnChanges { step: crate::domain::ledger::StepChange { criteria, ..last.clone() }, runs, cycle })
}

/// The entries of the material recorded under `digest`, if a step recorded it.
pub fn recorded_material<'e>(
    entries: &'e [LedgerEntry],
    digest: &str,
) -> Option<&'e [crate::domain::ledger::BaselinePath]> {
    entries.iter().rev().find_map(|e| match &e.event {
        LedgerEvent::Material { digest: d, entries, .. } if d == digest => Some(entries.as_slice()),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ledger::LedgerEntry;

    fn criterion(command: &str) -> Criterion {
        Criterion { id: "a".into(), kind: "test".into(), command: command.into(), ..Criterion::default() }
    }

    fn result(definition: &str, material: &str) -> LedgerEntry {
        LedgerEntry {
            seq: 1,
            recorded_at: String::new(),
            event: LedgerEvent::Criterion {
                criterion_id: "a".into(),
                phase_id: "phase1".into(),
                command: String::new(),
                exit_code: Some(0),
                matcher: String::new(),
                status: "pass".into(),
                reason: String::new(),
                output: String::new(),
                diagnostic: String::new(),
                diagnostic_error: String::new(),
                duration_ms: 0,
                attempt: 1,
                definition: definition.into(),
                material: material.into(),
                redacted: Vec::new(),
            },
        }
    }

    #[test]
    fn the_definition_digest_covers_what_runs_and_nothing_else() {
        let base = criterion("cargo test");
        let mut retitled = base.clone();
        retitled.title = "another title".into();
        retitled.status = "pass".into();
        assert_eq!(definition_digest(&base), definition_digest(&retitled));
        // A manual criterion runs nothing: its text is what a person attests.
        let manual = Criterion { kind: "manual".into(), command: String::new(), ..base.clone() };
        let reworded = Criterion { title: "another claim".into(), ..manual.clone() };
        assert_ne!(definition_digest(&manual), definition_digest(&reworded));
        assert!(same_definition(&digest_of(runs(&manual).into_iter()), &reworded), "an older pin stands");
        for change in [
            |c: &mut Criterion| c.command = "true".into(),
            |c: &mut Criterion| c.expected_kind = "exit_code_nonzero".into(),
            |c: &mut Criterion| c.cwd = "sub".into(),
            |c: &mut Criterion| c.timeout_seconds = "5".into(),
        ] {
            let mut changed = base.clone();
            change(&mut changed);
            assert_ne!(definition_digest(&base), definition_digest(&changed));
        }
    }

    #[test]
    fn results_are_stale_when_their_definition_or_material_moved() {
        let mut spec = Spec::default();
        spec.acceptance.criteria.push(criterion("cargo test"));
        let digest = definition_digest(&spec.acceptance.criteria[0]);
        assert!(stale(&spec, &[result(&digest, "m1")], Some("m1")).is_empty());
        assert_eq!(
            stale(&spec, &[result(&digest, "m1")], Some("m2"))["a"],
            Stale::MaterialChanged { recorded: "m1".into() }
        );
        assert_eq!(stale(&spec, &[result("other", "m1")], Some("m1"))["a"], Stale::DefinitionChanged);
        assert_eq!(stale(&spec, &[result("", "")], Some("m1"))["a"], Stale::Unbound);
        assert_eq!(stale(&spec, &[result(&digest, "m1")], None)["a"], Stale::Unverifiable);
        assert!(stale(&spec, &[], Some("m1")).is_empty(), "no result is pending, not stale");
    }

    /// Only three consecutive steps that each left the files changed, each running on what the
    /// one before left and the files still as the last left them, or two that brought the files
    /// back to where they were, make a rewriting criterion; fewer are a criterion that changed
    /// the files on its last runs (a formatter can need two passes).
    #[test]
    fn a_criterion_rewrites_its_own_scope_only_on_three_changes_in_a_row_or_a_cycle() {
        let mut spec = Spec::default();
        spec.acceptance.criteria.push(criterion("echo x >> f"));
        let digest = definition_digest(&spec.acceptance.criteria[0]);
        let left = |from: &str, to: &str| LedgerEntry {
            seq: 1,
            recorded_at: String::new(),
            event: LedgerEvent::Material {
                digest: to.into(),
                entries: Vec::new(),
                after_step: Some(crate::domain::ledger::StepChange {
                    from: from.into(),
                    criteria: vec!["a".into()],
                    changed: vec!["f (changed)".into()],
                }),
            },
        };
        let changed = vec!["f (changed)".to_string()];
        let own = |recorded: &str, runs| Stale::ChangedByOwnRuns {
            recorded: recorded.into(),
            changed: changed.clone(),
            runs,
        };
        let thrice = [
            result(&digest, "m1"),
            left("m1", "m2"),
            result(&digest, "m2"),
            left("m2", "m3"),
            result(&digest, "m3"),
            left("m3", "m4"),
        ];
        let rewrites = Stale::RewritesOwnScope { recorded: "m3".into(), changed: changed.clone() };
        assert_eq!(stale(&spec, &thrice, Some("m4"))["a"], rewrites);
        // Changed since by something else: a plain change.
        assert_eq!(stale(&spec, &thrice, Some("m5"))["a"], Stale::MaterialChanged { recorded: "m3".into() });
        // Twice: a formatter that needs two passes is not yet a loop; once: its first run.
        assert_eq!(stale(&spec, &thrice[..4], Some("m3"))["a"], own("m2", 2));
        assert_eq!(stale(&spec, &thrice[..2], Some("m2"))["a"], own("m1", 1));
        // Twice, but back where it started: a toggle, which repeats for ever.
        let toggle = [result(&digest, "m1"), left("m1", "m2"), result(&digest, "m2"), left("m2", "m1")];
        let rewrites = Stale::RewritesOwnScope { recorded: "m2".into(), changed: changed.clone() };
        assert_eq!(stale(&spec, &toggle, Some("m1"))["a"], rewrites);
        // A change by hand between the steps restarts the count.
        let edited = [
            result(&digest, "m1"),
            left("m1", "m2"),
            result(&digest, "e"),
            left("e", "m3"),
            result(&digest, "m3"),
            left("m3", "m4"),
        ];
        assert_eq!(stale(&spec, &edited, Some("m4"))["a"], own("m3", 2));
    }

    #[test]
    fn a_manual_result_counts_while_current_and_a_stale_one_is_replaced_by_a_wait() {
        let manual = Criterion { id: "a".into(), kind: "manual".into(), ..Criterion::default() };
        let digest = definition_digest(&manual);
        let with_status = |status: &str, material: &str| {
            let mut entry = result(&digest, material);
            if let LedgerEvent::Criterion { status: s, .. } = &mut entry.event {
                *s = status.into();
            }
            entry
        };
        assert_eq!(manual_result(&[], &manual, "m1"), ManualResult::Waiting { superseded: false });
        assert_eq!(manual_result(&[with_status("pass", "m1")], &manual, "m1"), ManualResult::Current("pass"));
        assert_eq!(
            manual_result(&[with_status("pass", "m1")], &manual, "m2"),
            ManualResult::Waiting { superseded: true }
        );
        let waiting = [with_status("pass", "m1"), with_status("pending", "m2")];
        assert_eq!(manual_result(&waiting, &manual, "m2"), ManualResult::Waiting { superseded: false });
        assert_eq!(manual_result(&[result("other", "m1")], &manual, "m1"), ManualResult::Waiting { superseded: true });
    }

    #[test]
    fn contract_changes_name_changed_added_and_removed_criteria() {
        let mut spec = Spec::default();
        spec.acceptance.criteria.push(criterion("cargo test"));
        let pinned = contract(&spec);
        assert!(contract_changes(&spec, &pinned).is_empty());
        spec.acceptance.criteria[0].command = "true".into();
        spec.acceptance.criteria.push(Criterion { id: "b".into(), command: "x".into(), ..Criterion::default() });
        let mut pinned_more = pinned.clone();
        pinned_more.criteria.insert("gone".into(), "d".into());
        assert_eq!(contract_changes(&spec, &pinned_more), ["`a` changed", "`b` added", "`gone` removed"]);
    }

    #[test]
    fn the_scope_is_part_of_the_contract_unless_it_was_never_pinned() {
        let mut spec = Spec::default();
        spec.acceptance.criteria.push(criterion("cargo test"));
        spec.scope = vec!["`src/a.txt` - the source".into(), "`src/b.txt` - more".into()];
        let pinned = contract(&spec);
        assert_eq!(pinned.scope.as_deref(), Some(&["src/a.txt".to_string(), "src/b.txt".to_string()][..]));
        spec.scope = vec!["`nothing.txt` - x".into(), "`src/b.txt` - more".into()];
        assert_eq!(contract_changes(&spec, &pinned), ["scope `nothing.txt` added", "scope `src/a.txt` removed"]);
        let unpinned = Contract { scope: None, ..pinned.clone() };
        assert!(contract_changes(&spec, &unpinned).is_empty(), "an approval without a scope pin checks criteria only");
        spec.scope.clear();
        assert_eq!(contract_changes(&spec, &pinned), ["scope widened from `src/a.txt`, `src/b.txt` to the whole tree"]);
        let whole = contract(&spec);
        spec.scope = vec!["`x.txt`".into()];
        assert_eq!(contract_changes(&spec, &whole), ["scope narrowed from the whole tree to `x.txt`"]);
    }

    /// A criterion's phase is part of the contract: moving one unchanged to another phase (or to
    /// the task-level acceptance) is a change to amend; a contract pinned before the places
    /// were leaves moves unchecked.
    #[test]
    fn a_criterion_moved_to_another_phase_is_a_contract_change() {
        use crate::domain::spec::Phase;
        let mut spec = Spec::default();
        let phase = |number: u32, criteria: Vec<Criterion>| Phase { number, criteria, ..Phase::default() };
        let a2 = Criterion { id: "a2".into(), command: "grep -q hello greet.txt".into(), ..Criterion::default() };
        spec.phases = vec![phase(1, vec![criterion("true")]), phase(2, vec![a2.clone()])];
        let pinned = contract(&spec);
        assert!(contract_changes(&spec, &pinned).is_empty());
        spec.phases[1].criteria.clear();
        spec.phases[0].criteria.push(a2.clone());
        assert_eq!(contract_changes(&spec, &pinned), ["`a2` moved from phase2 to phase1"]);
        let older = Contract { phases: None, ..pinned.clone() };
        assert!(contract_changes(&spec, &older).is_empty(), "a contract pinned without places checks definitions");
        spec.phases[0].criteria.pop();
        spec.acceptance.criteria.push(a2);
        assert_eq!(contract_changes(&spec, &pinned), ["`a2` moved from phase2 to the task-level acceptance"]);
    }

    /// A bare name (`Makefile`) binds evidence as a path does, so adding or removing one is a
    /// contract change; a contract pinned without bare names (an older scafld's) compares
    /// paths alone, and the bare names it always had are not reported as added.
    #[test]
    fn bare_names_are_part_of_the_scope_pinned_with_them() {
        let mut spec = Spec::default();
        spec.acceptance.criteria.push(criterion("cargo test"));
        spec.scope = vec!["`greet.txt` - the greeting".into(), "`Makefile` - build rules".into()];
        let pinned = contract(&spec);
        assert_eq!(pinned.also_bound.as_deref(), Some(&["Makefile".to_string()][..]));
        assert!(contract_changes(&spec, &pinned).is_empty());
        spec.scope.push("`Dockerfile` - the image".into());
        spec.scope.retain(|item| !item.contains("Makefile"));
        assert_eq!(contract_changes(&spec, &pinned), ["scope `Dockerfile` added", "scope `Makefile` removed"]);
        let older = Contract { also_bound: None, ..pinned.clone() };
        assert!(contract_changes(&spec, &older).is_empty(), "a contract pinned without bare names compares paths");
        // A file kept from reviewers for its secrets binds evidence all the same: pinned too.
        let mut secrets = spec.clone();
        secrets.scope.push("`.env.local` - the local settings".into());
        assert_eq!(contract_changes(&secrets, &contract(&spec)), ["scope `.env.local` added"]);
        spec.scope = vec!["`Makefile` - build rules".into()];
        assert_eq!(contract(&spec).also_bound.as_deref(), Some(&[][..]), "a whole-tree scope binds no bare name");
        assert_eq!(contract_changes(&spec, &pinned), ["scope widened from `Makefile`, `greet.txt` to the whole tree"]);
    }

    #[test]
    fn amendments_say_what_changed_and_how_a_dropped_criterion_last_ran() {
        let entry = |seq: u64, event: LedgerEvent| LedgerEntry { seq, recorded_at: format!("t{seq}"), event };
        let pinned = |ids: &[(&str, &str)]| ids.iter().map(|(i, d)| (i.to_string(), d.to_string())).collect();
        let mut failed = result("d2", "m");
        if let LedgerEvent::Criterion { criterion_id, command, status, reason, .. } = &mut failed.event {
            *criterion_id = "a2".into();
            *command = "false".into();
            *status = "fail".into();
            *reason = "exit code was 1".into();
        }
        let entries = vec![
            entry(
                1,
                LedgerEvent::Approval {
                    reason: "ok".into(),
                    harden_override: None,
                    criteria: pinned(&[("a1", "d1"), ("a2", "d2")]),
                    scope: Some(vec!["src/a.txt".into()]),
                    also_bound: None,
                    phases: Some(pinned(&[("a1", "phase1"), ("a2", "phase1")])),
                    phase_ids: None,
                },
            ),
            LedgerEntry { seq: 2, ..failed },
            entry(
                3,
                LedgerEvent::ContractAmended {
                    reason: "a2 was wrong".into(),
                    criteria: pinned(&[("a1", "d1b"), ("a3", "d3")]),
                    scope: Some(vec!["nothing.txt".into()]),
                    also_bound: None,
                    phases: Some(pinned(&[("a1", "final"), ("a3", "phase1")])),
                    phase_ids: None,
                    changed: Vec::new(),
                },
            ),
        ];
        let found = amendments(&entries);
        assert_eq!(found.len(), 1);
        let a = &found[0];
        assert_eq!((a.entry.as_str(), a.recorded_at.as_str(), a.reason.as_str()), ("entry-3", "t3", "a2 was wrong"));
        let changes: Vec<(&str, CriterionChange)> = a.criteria.iter().map(|c| (c.id.as_str(), c.change)).collect();
        assert_eq!(
            changes,
            [("a1", CriterionChange::Changed), ("a3", CriterionChange::Added), ("a2", CriterionChange::Removed)]
        );
        assert_eq!(a.criteria[0].last_run, None, "a1 never ran");
        assert_eq!(a.criteria[2].last_run, Some(("false".into(), "fail".into(), "exit code was 1".into())));
        assert_eq!(a.scope, ["scope `nothing.txt` added", "scope `src/a.txt` removed"]);
        assert_eq!(a.moved, ["`a1` moved from phase1 to the task-level acceptance"]);
        assert!(amendments(&entries[..2]).is_empty());
    }

    #[test]
    fn a_criterion_without_a_passing_result_is_unproven() {
        let mut spec = Spec::default();
        spec.acceptance.criteria.push(criterion("cargo test"));
        spec.acceptance.criteria.push(Criterion { id: "b".into(), command: "x".into(), ..Criterion::default() });
        assert_eq!(unproven(&spec, &[result("d", "m")]), ["b"]);
    }
}
