//! Mapping the original tool's `.scafld/runs/<task-id>/session.json` entries to ledger events,
//! so an existing workspace keeps its history and its status: every entry the original's
//! reconcile reads a lifecycle status from (`approval`, `build`, `review`, `complete`, `fail`,
//! `cancel`) becomes the event that means it here. Nothing is dropped: an entry without an
//! equivalent is kept whole as an `imported` event.

use serde_json::Value;

use crate::domain::ledger::{BaselinePath, LedgerEvent, RecordedReview};
use scafld_protocol::vocab::{Disposition, Verdict};

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
        },
        "approval" => LedgerEvent::Approval {
            reason,
            harden_override: None,
            criteria: Default::default(),
            scope: None,
            also_bound: None,
            phases: None,
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

    #[test]
    fn another_task_s_session_is_refused() {
        let session = serde_json::json!({"task_id": "other", "entries": [{"type": "cancel", "recorded_at": "t"}]});
        let refused = events(&session, "b").unwrap_err();
        assert!(refused.contains("`other`") && refused.contains("`b`"), "{refused}");
        assert!(events(&serde_json::json!({"task_id": 7, "entries": []}), "b").is_err());
        assert_eq!(events(&serde_json::json!({"task_id": "b", "entries": []}), "b"), Ok(Vec::new()));
    }
}
