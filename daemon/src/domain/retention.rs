//! Which finished jobs and settled review sessions are old enough to forget.
//!
//! The ledger is the record of a task; jobs and sessions are operational state that would
//! otherwise grow without bound in a long-lived daemon. A record is kept while anything may still
//! need it: unfinished work, the newest session of each review group (its iteration number
//! continues from it, and `review wait` without a key finds it), and the jobs of kept sessions.
//! A diagnostics file goes once old, except one the current evidence of an open task cites.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::job::{JobSummary, SessionRecord};
use super::ledger::{LedgerEntry, LedgerEvent};

/// What a sweep removes.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Prune {
    pub jobs: Vec<String>,
    pub sessions: Vec<String>,
}

impl Prune {
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty() && self.sessions.is_empty()
    }
}

/// Sessions whose iteration numbers count together: one task, or one range base and context.
pub fn review_group(session: &SessionRecord) -> (&str, &str, &str, &str) {
    let base = session.subject.range().split("..").next().unwrap_or_default();
    (&session.workspace_id, session.task().unwrap_or_default(), &session.context_digest, base)
}

/// Records last touched at or before `cutoff` (an RFC 3339 UTC timestamp, which orders as text).
/// `jobs` summarises every job.
pub fn prunable(jobs: &[JobSummary], sessions: &[SessionRecord], cutoff: &str) -> Prune {
    let finished: HashMap<&str, bool> = jobs.iter().map(|j| (j.id.as_str(), j.state.is_finished())).collect();
    let mut newest: HashMap<_, u64> = HashMap::new();
    for session in sessions {
        let seq = newest.entry(review_group(session)).or_default();
        *seq = (*seq).max(session.seq);
    }
    let mut prune = Prune::default();
    let mut kept_jobs = BTreeSet::new();
    for session in sessions {
        let settled = session.result.is_some()
            && session.job_ids.iter().all(|id| finished.get(id.as_str()).copied().unwrap_or(true));
        let superseded = newest[&review_group(session)] > session.seq;
        if settled && superseded && session.created_at.as_str() <= cutoff {
            prune.sessions.push(session.key.clone());
        } else {
            kept_jobs.extend(session.job_ids.iter().map(String::as_str));
        }
    }
    for job in jobs {
        let last = job.finished_at.as_deref().unwrap_or(&job.created_at);
        if job.state.is_finished() && last <= cutoff && !kept_jobs.contains(job.id.as_str()) {
            prune.jobs.push(job.id.clone());
        }
    }
    prune.jobs.sort();
    prune.sessions.sort();
    prune
}

/// The diagnostics files (as the ledger records them: workspace-relative) that the current
/// evidence of the task whose ledger is `entries` cites: each criterion's latest result's,
/// while the task is open (status shows them as the record of that evidence). None for a
/// finished task: its files go once old.
pub fn cited_diagnostics(entries: &[LedgerEntry]) -> Vec<String> {
    if super::ledger::state(entries).is_none_or(|state| state.status.is_terminal()) {
        return Vec::new();
    }
    let mut latest: BTreeMap<(&str, &str), &str> = BTreeMap::new();
    for entry in entries {
        match &entry.event {
            LedgerEvent::Criterion { criterion_id, phase_id, diagnostic, .. } => {
                latest.insert((phase_id, criterion_id), diagnostic);
            }
            LedgerEvent::ManualEvidence { criterion_id, phase_id, .. } => {
                latest.remove(&(phase_id.as_str(), criterion_id.as_str()));
            }
            _ => {}
        }
    }
    latest.into_values().filter(|file| !file.is_empty()).map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::job::JobState;

    fn job(id: &str, state: JobState, finished_at: Option<&str>) -> JobSummary {
        let kind = crate::domain::job::JobKind::Acceptance;
        JobSummary { id: id.into(), kind, state, created_at: OLD.into(), finished_at: finished_at.map(Into::into) }
    }

    fn session(key: &str, seq: u64, task: &str, created_at: &str, jobs: &[&str], settled: bool) -> SessionRecord {
        SessionRecord {
            key: key.into(),
            seq,
            workspace_id: "ws".into(),
            subject: crate::domain::job::Subject::Task(task.into()),
            created_at: created_at.into(),
            job_ids: jobs.iter().map(|j| j.to_string()).collect(),
            result: settled.then(scafld_protocol::methods::WaitResult::default),
            ..SessionRecord::default()
        }
    }

    const OLD: &str = "2026-01-01T00:00:00Z";
    const CUTOFF: &str = "2026-02-01T00:00:00Z";
    const NEW: &str = "2026-03-01T00:00:00Z";

    #[test]
    fn old_finished_jobs_go_and_unfinished_or_recent_ones_stay() {
        let jobs = [
            job("old-done", JobState::Succeeded, Some(OLD)),
            job("old-running", JobState::Running, None),
            job("new-done", JobState::Failed, Some(NEW)),
            job("at-cutoff", JobState::Cancelled, Some(CUTOFF)),
        ];
        let prune = prunable(&jobs, &[], CUTOFF);
        assert_eq!(prune.jobs, ["at-cutoff", "old-done"]);
        assert!(prune.sessions.is_empty());
    }

    #[test]
    fn the_newest_session_of_a_group_and_its_jobs_stay() {
        let jobs = [
            job("j1", JobState::Succeeded, Some(OLD)),
            job("j2", JobState::Succeeded, Some(OLD)),
            job("j3", JobState::Succeeded, Some(OLD)),
        ];
        let sessions = [
            session("first", 1, "task", OLD, &["j1"], true),
            session("second", 2, "task", OLD, &["j2"], true),
            session("other-task", 3, "other", OLD, &["j3"], true),
        ];
        let prune = prunable(&jobs, &sessions, CUTOFF);
        assert_eq!(prune, Prune { jobs: vec!["j1".into()], sessions: vec!["first".into()] });
    }

    #[test]
    fn unsettled_recent_or_busy_sessions_stay() {
        let jobs = [job("busy", JobState::Running, None), job("done", JobState::Succeeded, Some(OLD))];
        let sessions = [
            session("unsettled", 1, "task", OLD, &["done"], false),
            session("recent", 2, "task", NEW, &[], true),
            session("busy", 3, "task", OLD, &["busy"], true),
            session("newest", 4, "task", OLD, &[], true),
        ];
        let prune = prunable(&jobs, &sessions, CUTOFF);
        assert_eq!(prune, Prune::default());
    }

    #[test]
    fn ranges_group_by_base_and_context() {
        let range = |key: &str, seq, range: &str, digest: &str| SessionRecord {
            subject: crate::domain::job::Subject::Range(range.into()),
            context_digest: digest.into(),
            ..session(key, seq, "", OLD, &[], true)
        };
        let sessions = [
            range("a1", 1, "main..f1", "issue-1"),
            range("a2", 2, "main..f2", "issue-1"),
            range("b1", 3, "main..f3", "issue-2"),
            range("c1", 4, "dev..f4", "issue-1"),
        ];
        assert_eq!(prunable(&[], &sessions, CUTOFF).sessions, ["a1"]);
    }

    /// Only the latest result of each criterion of an open task is cited; a finished task's
    /// files are not kept.
    #[test]
    fn the_latest_diagnostics_of_an_open_tasks_criteria_are_cited() {
        let entry = |seq, event| LedgerEntry { seq, recorded_at: OLD.into(), event };
        let criterion = |id: &str, diagnostic: &str| LedgerEvent::Criterion {
            criterion_id: id.into(),
            phase_id: "phase1".into(),
            command: "true".into(),
            exit_code: Some(0),
            matcher: String::new(),
            status: "pass".into(),
            reason: String::new(),
            output: String::new(),
            diagnostic: diagnostic.into(),
            diagnostic_error: String::new(),
            duration_ms: 1,
            attempt: 1,
            definition: String::new(),
            material: String::new(),
            redacted: Vec::new(),
        };
        let mut entries = vec![
            entry(1, criterion("a", "runs/t/diagnostics/a-1.log")),
            entry(2, criterion("a", "runs/t/diagnostics/a-2.log")),
            entry(3, criterion("b", "runs/t/diagnostics/b-1.log")),
            entry(4, criterion("b", "")),
            entry(5, criterion("c", "runs/t/diagnostics/c-1.log")),
        ];
        assert_eq!(cited_diagnostics(&entries), ["runs/t/diagnostics/a-2.log", "runs/t/diagnostics/c-1.log"]);
        entries.push(entry(6, LedgerEvent::Cancel { reason: "done with".into() }));
        assert!(cited_diagnostics(&entries).is_empty());
    }
}
