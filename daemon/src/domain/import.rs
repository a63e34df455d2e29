//! Mapping the original tool's `.scafld/runs/<task-id>/session.json` entries to ledger events,
//! so an existing workspace keeps its history and its status: every entry the original's
//! reconcile reads a lifecycle status from (`approval`, `build`, `review`, `complete`, `fail`,
//! `cancel`) becomes the event that means it here. Nothing is dropped: an entry without an
//! equivalent is kept whole as an `imported` event.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::domain::ledger::{BaselinePath, LedgerEntry, LedgerEvent, RecordedReview};
use scafld_protocol::vocab::{Disposition, Verdict};

/// Largest session.json imported. The original's are kilobytes; past this bound the ledger it
/// makes (each entry kept whole, with a few fields of ours) would outgrow what the daemon keeps
/// parsed (8 MiB of JSON), so every command on the task would read it again.
pub const MAX_SESSION_BYTES: u64 = 4 << 20;
/// Most entries a session.json imported may hold: a ledger entry costs memory and reply bytes
/// beyond its text (an entry `{}` is a few bytes of file), so the size alone bounds neither.
pub const MAX_SESSION_ENTRIES: usize = 10_000;

/// Why a session document was not read.
#[derive(Debug, PartialEq)]
pub enum Refused {
    /// It holds this many entries, more than [`MAX_SESSION_ENTRIES`].
    TooManyEntries(usize),
    /// It is not JSON, or not an object.
    Invalid(String),
}

/// The session document in `text`, never holding more than [`MAX_SESSION_ENTRIES`] of its
/// entries in memory: one with more is counted to the end and refused.
pub fn parse(text: &str) -> Result<Value, Refused> {
    let mut de = serde_json::Deserializer::from_str(text);
    let document = de.deserialize_map(Document).map_err(|e| Refused::Invalid(e.to_string()))?;
    de.end().map_err(|e| Refused::Invalid(e.to_string()))?;
    document.map_err(Refused::TooManyEntries)
}

/// The top-level object, its `entries` read by [`Entries`]: `Err(count)` when there are too many.
struct Document;

impl<'de> Visitor<'de> for Document {
    type Value = Result<Value, usize>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a session document (a JSON object)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut document = serde_json::Map::new();
        let mut over = None;
        while let Some(key) = map.next_key::<String>()? {
            if over.is_some() {
                map.next_value::<IgnoredAny>()?;
            } else if key == "entries" {
                match map.next_value::<Entries>()?.0 {
                    Ok(entries) => drop(document.insert(key, Value::Array(entries))),
                    Err(count) => over = Some(count),
                }
            } else {
                document.insert(key, map.next_value()?);
            }
        }
        Ok(over.map_or(Ok(Value::Object(document)), Err))
    }
}

/// A list of entries: `Err(count)` past [`MAX_SESSION_ENTRIES`], the rest only counted.
struct Entries(Result<Vec<Value>, usize>);

impl<'de> de::Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_seq(EntriesVisitor)
    }
}

struct EntriesVisitor;

impl<'de> Visitor<'de> for EntriesVisitor {
    type Value = Entries;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of entries")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Entries, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = seq.next_element::<Value>()? {
            if entries.len() == MAX_SESSION_ENTRIES {
                let mut count = entries.len() + 1;
                drop(entries);
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    count += 1;
                }
                return Ok(Entries(Err(count)));
            }
            entries.push(entry);
        }
        Ok(Entries(Ok(entries)))
    }
}

/// `(recorded_at, event)` for every entry of `task`'s session document, in order. A document
/// that names another task (a `runs/` folder copied or renamed by hand) is refused: its history
/// is not this task's.
pub fn events(session: &Value, task: &str) -> Result<Vec<(String, LedgerEvent)>, String> {
    match session.get("task_id") {
        None => {}
        Some(Value::String(named)) if named == task => {}
        Some(Value::String(named)) => {
            return Err(format!("it is the session of task `{named}`, not of `{task}`"));
        }
        Some(other) => return Err(format!("its `task_id` is {other}, not the task id `{task}`")),
    }
    let entries = session.get("entries").and_then(Value::as_array).ok_or("session.json has no `entries` list")?;
    Ok(entries.iter().map(|entry| (text(entry, "recorded_at"), map(entry))).collect())
}

/// The digest of a session document's `entries`: sha256 of each entry's canonical JSON
/// ([`crate::domain::receipt::canonical_json`]), chained. The original rewrites its file whole
/// on each append, so its layout and key order may change; the entries' content may not.
pub fn digest(entries: &[Value]) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for entry in entries {
        hasher.update(crate::domain::receipt::canonical_json(entry).as_bytes());
        hasher.update(b"\n");
    }
    format!("{:x}", hasher.finalize())
}

/// What a look at the original's session document calls for, given the task's ledger.
#[derive(Debug, PartialEq)]
pub enum Follow {
    /// Nothing to import: the ledger holds every entry already, or it is not an import (a
    /// ledger of this tool's own, begun without the file).
    Nothing,
    /// Append these after what the ledger holds (the first import: the whole ledger), each
    /// with its own time (`now` for an entry without one), the mark of the import last.
    Import(Vec<(String, LedgerEvent)>),
    /// The entries imported are not the file's first entries any more: why, said to the user.
    Diverged(String),
}

/// How `ledger` follows the session document `session` of `task`: the entries past those it
/// imported (the last [`LedgerEvent::SessionImported`] counts them), once the ones imported
/// are shown unchanged by their digest. A ledger imported before the mark existed counts as
/// imported the file's leading entries it holds, in order, as the import wrote them; one
/// that holds none of them is no import. An error: the document is refused (another task's).
pub fn follow(ledger: &[LedgerEntry], session: &Value, task: &str, now: &str) -> Result<Follow, String> {
    let mapped = events(session, task)?;
    let entries: &[Value] = session.get("entries").and_then(Value::as_array).map_or(&[], Vec::as_slice);
    let imported = ledger.iter().rev().find_map(|entry| match &entry.event {
        LedgerEvent::SessionImported { entries, digest } => Some((*entries as usize, Some(digest.as_str()))),
        _ => None,
    });
    let (through, digest_then) = match imported {
        Some(found) => found,
        None if ledger.is_empty() => (0, None),
        None => match ledger.iter().zip(&mapped).take_while(|(held, wanted)| same(held, wanted)).count() {
            0 => return Ok(Follow::Nothing),
            held => (held, None),
        },
    };
    if entries.len() < through {
        return Ok(Follow::Diverged(format!(
            "it holds {} entries, fewer than the {through} the ledger imported from it",
            entries.len()
        )));
    }
    if digest_then.is_some_and(|then| digest(&entries[..through]) != then) {
        return Ok(Follow::Diverged(format!(
            "its first {through} entries, which the ledger imported, are not as they were (rewritten since)"
        )));
    }
    if entries.len() == through {
        return Ok(Follow::Nothing);
    }
    let mut new: Vec<(String, LedgerEvent)> = mapped
        .into_iter()
        .skip(through)
        .map(|(at, event)| (if at.is_empty() { now.to_string() } else { at }, event))
        .collect();
    // At the time of the last entry it imports: where an archived spec belongs and the
    // Current State's time come from the ledger's last entry, and this one changes neither.
    let at = new.last().map(|(at, _)| at.clone()).unwrap_or_default();
    new.push((at, LedgerEvent::SessionImported { entries: entries.len() as u64, digest: digest(entries) }));
    Ok(Follow::Import(new))
}

/// Whether `held` is the entry an import of `wanted` wrote (an entry without a time took the
/// import's).
fn same(held: &LedgerEntry, (at, event): &(String, LedgerEvent)) -> bool {
    held.event == *event && (at.is_empty() || held.recorded_at == *at)
}

fn text(entry: &Value, key: &str) -> String {
    entry.get(key).and_then(Value::as_str).unwrap_or_default().to_string()
}

fn map(entry: &Value) -> LedgerEvent {
    let kind = text(entry, "type");
    let (status, reason) = (text(entry, "status"), text(entry, "reason"));
    let imported = || LedgerEvent::Imported { original_type: kind.clone(), raw: entry.clone() };
    match kind.as_str() {
        "workspace_baseline" => LedgerEvent::WorkspaceBaseline {
            head: None,
            paths: text(entry, "output")
                .lines()
                .filter_map(|line| {
                    let (status, rest) = (line.get(..2)?, line.get(3..)?);
                    let (fingerprint, path) = rest.split_once(' ')?;
                    Some(BaselinePath { status: status.into(), fingerprint: fingerprint.into(), path: path.into() })
                })
                .collect(),
            reason,
            nested: Default::default(),
        },
        "approval" => LedgerEvent::Approval {
            reason,
            harden_override: None,
            criteria: Default::default(),
            scope: None,
            also_bound: None,
            phases: None,
            phase_ids: None,
        },
        "phase" if !text(entry, "phase_id").is_empty() => {
            LedgerEvent::Phase { phase_id: text(entry, "phase_id"), status, reason }
        }
        "build" => LedgerEvent::Build { status, reason },
        "criterion" if !text(entry, "criterion_id").is_empty() => LedgerEvent::Criterion {
            criterion_id: text(entry, "criterion_id"),
            phase_id: text(entry, "phase_id"),
            command: text(entry, "command"),
            // The original omits a zero exit code.
            exit_code: Some(entry.get("exit_code").and_then(Value::as_i64).unwrap_or(0) as i32),
            matcher: String::new(),
            status,
            reason,
            output: text(entry, "output"),
            diagnostic: text(entry, "path"),
            diagnostic_error: String::new(),
            duration_ms: 0,
            attempt: 1,
            // The original bound evidence to nothing: imported evidence is stale until re-run.
            definition: String::new(),
            material: String::new(),
            redacted: Vec::new(),
        },
        // The original's accepted review: its verdict, provider and the dossier it accepted
        // (compact JSON in `output`; none for a human override). Its reviewer left no provenance
        // here, and any build since (which imported evidence, bound to nothing, needs before a
        // completion) supersedes it.
        "review" if status.parse::<Verdict>().is_ok() => LedgerEvent::Review(RecordedReview {
            verdict: status,
            provider: text(entry, "provider"),
            reason,
            dossier: serde_json::from_str::<Value>(&text(entry, "output")).ok().filter(Value::is_object),
            tree: String::new(),
            reviewers: Vec::new(),
            spec_digest: None,
            shown: Vec::new(),
            shown_material: String::new(),
        }),
        "review_attempt" => LedgerEvent::ReviewAttempt { status, reason },
        "review_override" => LedgerEvent::ReviewOverride { reason },
        "manual_evidence" if !text(entry, "criterion_id").is_empty() && status.parse::<Disposition>().is_ok() => {
            LedgerEvent::ManualEvidence {
                criterion_id: text(entry, "criterion_id"),
                phase_id: text(entry, "phase_id"),
                disposition: status,
                reason,
                evidence_digest: text(entry, "evidence_digest"),
                actor: text(entry, "evidence_actor"),
                // Bound to nothing here, as imported criterion results: stale until given again.
                definition: String::new(),
                material: String::new(),
            }
        }
        "complete" => LedgerEvent::Complete { reason },
        "fail" => LedgerEvent::Fail { reason },
        "cancel" => LedgerEvent::Cancel { reason },
        _ => imported(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn maps_known_entries_and_keeps_the_rest() {
        let session: Value = serde_json::from_str(
            r#"{"schema_version":1,"task_id":"t","entries":[
            {"id":"entry-1","type":"workspace_baseline","recorded_at":"2026-05-15T09:20:00Z","status":"captured","reason":"r","output":"?? 4f0c notes.txt"},
            {"id":"entry-2","type":"approval","recorded_at":"2026-05-15T09:20:00Z","status":"approved","reason":"spec approved"},
            {"id":"entry-3","type":"criterion","recorded_at":"2026-05-15T09:30:00Z","criterion_id":"ac1","phase_id":"phase1","status":"pass","reason":"exit code was 0","command":"true"},
            {"id":"entry-4","type":"review","recorded_at":"2026-05-15T09:40:00Z","status":"pass","provider":"codex"}]}"#,
        )
        .unwrap();
        let events = events(&session, "t").unwrap();
        assert_eq!(events.len(), 4);
        assert!(matches!(&events[0].1, LedgerEvent::WorkspaceBaseline { paths, .. } if paths[0].path == "notes.txt"));
        assert!(matches!(&events[2].1, LedgerEvent::Criterion { exit_code: Some(0), .. }));
        assert!(matches!(&events[3].1, LedgerEvent::Review(r) if r.verdict == "pass" && r.provider == "codex"));
    }

    /// Every entry the original reads a lifecycle status from means that status here: a task it
    /// completed, failed or cancelled stays so, one it left in review is in review.
    #[test]
    fn the_original_s_status_survives_the_import() {
        use crate::domain::ledger::{LedgerEntry, state};
        use crate::domain::lifecycle::Status;
        let status_after = |types: &[(&str, &str)]| {
            let entries: Vec<Value> = types
                .iter()
                .map(|(kind, status)| serde_json::json!({"type": kind, "status": status, "recorded_at": "t", "reason": "r"}))
                .collect();
            let ledger: Vec<LedgerEntry> = events(&serde_json::json!({ "entries": entries }), "t")
                .unwrap()
                .into_iter()
                .enumerate()
                .map(|(i, (recorded_at, event))| LedgerEntry { seq: i as u64 + 1, recorded_at, event })
                .collect();
            state(&ledger).unwrap().status
        };
        let reviewed =
            [("approval", "approved"), ("build", "review"), ("review_attempt", "running"), ("review", "fail")];
        assert_eq!(status_after(&reviewed), Status::Review);
        assert_eq!(status_after(&[reviewed.as_slice(), &[("complete", "completed")]].concat()), Status::Completed);
        assert_eq!(status_after(&[("approval", "approved"), ("fail", "failed")]), Status::Failed);
        assert_eq!(status_after(&[("approval", "approved"), ("cancel", "cancelled")]), Status::Cancelled);
        assert_eq!(status_after(&[("approval", "approved"), ("build", "blocked")]), Status::Blocked);
        assert_eq!(status_after(&[("approval", "approved")]), Status::Approved);
    }

    /// A document is read with at most [`MAX_SESSION_ENTRIES`] of its entries in memory: one
    /// with exactly that many is read whole, one with more is counted and refused; anything
    /// but a JSON object is invalid.
    #[test]
    fn a_session_past_the_entry_bound_is_counted_and_refused() {
        let with = |n: usize| format!(r#"{{"task_id":"t","entries":[{}],"after":1}}"#, vec!["{}"; n].join(","));
        let whole = parse(&with(MAX_SESSION_ENTRIES)).unwrap();
        assert_eq!(whole["entries"].as_array().map(Vec::len), Some(MAX_SESSION_ENTRIES));
        assert_eq!((whole["task_id"].as_str(), whole["after"].as_i64()), (Some("t"), Some(1)));
        assert_eq!(parse(&with(MAX_SESSION_ENTRIES + 5)), Err(Refused::TooManyEntries(MAX_SESSION_ENTRIES + 5)));
        for invalid in ["[]", "{\"entries\": 3}", "{} {}", "{\"entries\": [1,]}"] {
            assert!(matches!(parse(invalid), Err(Refused::Invalid(_))), "{invalid}");
        }
        assert_eq!(parse("{}"), Ok(serde_json::json!({})));
    }

    /// The ledger an import of `session` writes, then `ours` appended (as this tool records).
    fn imported(session: &Value, ours: &[LedgerEvent]) -> Vec<LedgerEntry> {
        let Follow::Import(events) = follow(&[], session, "t", "now").unwrap() else { panic!("nothing imported") };
        let events = events.into_iter().chain(ours.iter().map(|e| ("later".to_string(), e.clone())));
        events
            .enumerate()
            .map(|(i, (recorded_at, event))| LedgerEntry { seq: i as u64 + 1, recorded_at, event })
            .collect()
    }

    /// Entries past those imported are imported after what the ledger holds, with a new mark;
    /// the imported ones rewritten or cut short are a divergence; their layout and key order
    /// are no change. A ledger imported before the mark existed counts the entries it holds.
    #[test]
    fn later_entries_follow_and_a_rewritten_history_diverges() {
        let entry = |n: u32, kind: &str| json!({"id": format!("entry-{n}"), "type": kind, "recorded_at": "t", "status": "x", "reason": "r"});
        let session = |entries: Vec<Value>| json!({"task_id": "t", "entries": entries});
        let first = session(vec![entry(1, "approval"), entry(2, "build")]);
        let build = LedgerEvent::Build { status: "review".into(), reason: "ours".into() };
        let ledger = imported(&first, std::slice::from_ref(&build));
        assert!(matches!(&ledger[2].event, LedgerEvent::SessionImported { entries: 2, .. }));
        assert_eq!(follow(&ledger, &first, "t", "now"), Ok(Follow::Nothing));
        // Reordered keys are the same entries.
        let reordered: Value = serde_json::from_str(r#"{"entries":[{"reason":"r","status":"x","recorded_at":"t","type":"approval","id":"entry-1"},{"id":"entry-2","type":"build","recorded_at":"t","status":"x","reason":"r"}],"task_id":"t"}"#).unwrap();
        assert_eq!(follow(&ledger, &reordered, "t", "now"), Ok(Follow::Nothing));
        let later = session(vec![entry(1, "approval"), entry(2, "build"), entry(3, "cancel")]);
        let Ok(Follow::Import(new)) = follow(&ledger, &later, "t", "now") else { panic!("nothing to import") };
        assert!(matches!(
            &new[..],
            [(_, LedgerEvent::Cancel { .. }), (_, LedgerEvent::SessionImported { entries: 3, .. })]
        ));
        for changed in [
            session(vec![entry(1, "approval"), entry(2, "fail"), entry(3, "cancel")]),
            session(vec![entry(1, "approval")]),
        ] {
            assert!(matches!(follow(&ledger, &changed, "t", "now"), Ok(Follow::Diverged(_))), "{changed}");
        }
        // Before the mark: the two entries the ledger holds were imported; the third is new.
        let unmarked: Vec<LedgerEntry> =
            ledger.iter().filter(|e| !matches!(e.event, LedgerEvent::SessionImported { .. })).cloned().collect();
        let Ok(Follow::Import(new)) = follow(&unmarked, &later, "t", "now") else { panic!("nothing to import") };
        assert!(matches!(&new[0].1, LedgerEvent::Cancel { .. }) && new.len() == 2);
        // A ledger of this tool's own holds none of the file's entries: not an import.
        let ours = [LedgerEntry { seq: 1, recorded_at: "t".into(), event: build }];
        assert_eq!(follow(&ours, &later, "t", "now"), Ok(Follow::Nothing));
    }

    #[test]
    fn another_task_s_session_is_refused() {
        let session = serde_json::json!({"task_id": "other", "entries": [{"type": "cancel", "recorded_at": "t"}]});
        let refused = events(&session, "b").unwrap_err();
        assert!(refused.contains("`other`") && refused.contains("`b`"), "{refused}");
        assert!(events(&serde_json::json!({"task_id": 7, "entries": []}), "b").is_err());
        assert_eq!(events(&serde_json::json!({"task_id": "b", "entries": []}), "b"), Ok(Vec::new()));
    }
}
