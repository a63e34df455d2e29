//! Evidence bound to content: the digest of a criterion's definition, the freshness of each
//! recorded result (its definition and the material it judged, against the current ones), and
//! the approved contract (the definitions approval pinned). Values in, values out: the material
//! digest is computed by the caller (`baseline::material`).

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use crate::domain::ledger::{LedgerEntry, LedgerEvent};
use crate::domain::spec::{Criterion, Spec};

/// Digest of what a criterion runs: command, matcher, working directory and timeout. The title
/// and the runner-owned fields are not part of it.
pub fn definition_digest(c: &Criterion) -> String {
    let mut hasher = Sha256::new();
    for part in [c.command.as_str(), c.effective_kind(), c.cwd.as_str(), c.timeout_seconds.as_str()] {
        hasher.update(part.len().to_le_bytes());
        hasher.update(part.as_bytes());
    }
    format!("{:x}", hasher.finalize())
}

/// The contract approval pins: every criterion's id and definition digest.
pub fn pins(spec: &Spec) -> BTreeMap<String, String> {
    spec.criteria().map(|c| (c.id.clone(), definition_digest(c))).collect()
}

/// How the spec's criteria differ from the pinned contract: changed, added and removed ids.
pub fn contract_changes(spec: &Spec, pinned: &BTreeMap<String, String>) -> Vec<String> {
    let now = pins(spec);
    let mut changed: Vec<String> = now
        .iter()
        .filter(|(id, digest)| pinned.get(*id) != Some(*digest))
        .map(|(id, _)| if pinned.contains_key(id) { format!("`{id}` changed") } else { format!("`{id}` added") })
        .collect();
    changed.extend(pinned.keys().filter(|id| !now.contains_key(*id)).map(|id| format!("`{id}` removed")));
    changed
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
    /// The files in scope cannot be read now (for example the workspace is not a git
    /// repository any more), so nothing recorded can be shown to match them.
    Unverifiable,
}

impl Stale {
    pub fn describe(&self) -> &'static str {
        match self {
            Stale::Unbound => "recorded without a content fingerprint",
            Stale::DefinitionChanged => "its definition changed since it ran",
            Stale::MaterialChanged { .. } => "the files in the task's scope changed since it ran",
            Stale::Unverifiable => "the files in the task's scope cannot be read to check it",
        }
    }
}

/// The latest recorded result of a criterion: `(status, definition digest, material digest)`.
pub fn latest_result<'e>(entries: &'e [LedgerEntry], id: &str) -> Option<(&'e str, &'e str, &'e str)> {
    entries.iter().rev().find_map(|e| match &e.event {
        LedgerEvent::Criterion { criterion_id, status, definition, material, .. } if criterion_id == id => {
            Some((status.as_str(), definition.as_str(), material.as_str()))
        }
        LedgerEvent::ManualEvidence { criterion_id, disposition, definition, material, .. } if criterion_id == id => {
            Some((disposition.as_str(), definition.as_str(), material.as_str()))
        }
        _ => None,
    })
}

/// Every criterion with a recorded result that no longer matches its definition or the current
/// material, by id. Criteria without a result are pending, not stale.
/// `material` is `None` when it could not be computed: every recorded result is then stale.
pub fn stale(spec: &Spec, entries: &[LedgerEntry], material: Option<&str>) -> BTreeMap<String, Stale> {
    let mut out = BTreeMap::new();
    for c in spec.criteria() {
        let Some((_, definition, recorded)) = latest_result(entries, &c.id) else { continue };
        let why = if definition.is_empty() || recorded.is_empty() {
            Some(Stale::Unbound)
        } else if definition != definition_digest(c) {
            Some(Stale::DefinitionChanged)
        } else if material.is_none() {
            Some(Stale::Unverifiable)
        } else if Some(recorded) != material {
            Some(Stale::MaterialChanged { recorded: recorded.to_string() })
        } else {
            None
        };
        if let Some(why) = why {
            out.insert(c.id.clone(), why);
        }
    }
    out
}

/// The entries of the material recorded under `digest`, if a step recorded it.
pub fn recorded_material<'e>(
    entries: &'e [LedgerEntry],
    digest: &str,
) -> Option<&'e [crate::domain::ledger::BaselinePath]> {
    entries.iter().rev().find_map(|e| match &e.event {
        LedgerEvent::Material { digest: d, entries } if d == digest => Some(entries.as_slice()),
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

    #[test]
    fn contract_changes_name_changed_added_and_removed_criteria() {
        let mut spec = Spec::default();
        spec.acceptance.criteria.push(criterion("cargo test"));
        let pinned = pins(&spec);
        assert!(contract_changes(&spec, &pinned).is_empty());
        spec.acceptance.criteria[0].command = "true".into();
        spec.acceptance.criteria.push(Criterion { id: "b".into(), command: "x".into(), ..Criterion::default() });
        let mut pinned_more = pinned.clone();
        pinned_more.insert("gone".into(), "d".into());
        assert_eq!(contract_changes(&spec, &pinned_more), ["`a` changed", "`b` added", "`gone` removed"]);
    }
}
