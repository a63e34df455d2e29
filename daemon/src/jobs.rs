//! The job table: every job's record (persisted in the store), cancellation handles, per-task
//! locks that serialise commands on one task, the parallelism limit, and bounded waits.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use scafld_protocol::methods::{JobCounts, JobInfo};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::clock;
use crate::domain::job::{JobKind, JobRecord, JobState, JobSummary, ReviewWork, StoredJob};
use crate::store::{Store, StoreError};
use crate::sync::lock;
use crate::workspace::Workspace;

/// How many finished build jobs the table keeps whole (those that finished last: what clients
/// wait on and ask about); older ones are kept as their summaries, their records read from the
/// store when asked for, so a long history does not grow the daemon by every build's outcome.
/// Review and harden jobs stay whole: a review session's settling reads its reviewers' jobs,
/// and a store that fails that read must not make one look missing.
const FINISHED_KEPT_WHOLE: usize = 64;

pub struct Jobs {
    table: Mutex<Table>,
    cancels: Mutex<HashMap<String, CancellationToken>>,
    task_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Bumped on every change; waiters re-check their job when it moves.
    changes: watch::Sender<u64>,
    next_id: Mutex<u64>,
    /// Set when the daemon stops and kills what its jobs run: from then on nothing a job sees
    /// is its own doing (see [`Jobs::halt`]).
    halted: AtomicBool,
    /// Jobs whose last durable save failed (a full state disk): the store holds an older
    /// record of them (a failed job's still says `running`, which the next start would report
    /// as abandoned). Saved again by the next durable save that succeeds and by the stop.
    unsaved: Mutex<HashSet<String>>,
}

/// The jobs in memory: every unfinished job and the last finished ones whole, the other
/// finished ones summarised.
#[derive(Default)]
struct Table {
    whole: HashMap<String, JobRecord>,
    summarised: HashMap<String, JobSummary>,
    /// The finished jobs in `whole`, in the order they finished (or were loaded).
    finished: VecDeque<String>,
}

impl Table {
    /// Note that `id`, in `whole`, has finished and the store holds its end, and summarise the
    /// oldest finished build jobs kept whole past [`FINISHED_KEPT_WHOLE`], except one whose
    /// last save failed (the store holds an older record of it).
    fn finished(&mut self, id: &str, unsaved: &HashSet<String>) {
        let build = |r: &JobRecord| r.kind == JobKind::Acceptance && r.state.is_finished();
        if !self.whole.get(id).is_some_and(build) {
            return;
        }
        if !self.finished.iter().any(|f| f == id) {
            self.finished.push_back(id.to_string());
        }
        let mut passes = self.finished.len();
        while self.finished.len() > FINISHED_KEPT_WHOLE && passes > 0 {
            passes -= 1;
            let Some(oldest) = self.finished.pop_front() else { break };
            if unsaved.contains(&oldest) {
                self.finished.push_back(oldest);
                continue;
            }
            if let Some(record) = self.whole.remove(&oldest) {
                self.summarised.insert(oldest, record.summary());
            }
        }
    }

    fn summaries(&self) -> impl Iterator<Item = JobSummary> + '_ {
        self.whole.values().map(JobRecord::summary).chain(self.summarised.values().cloned())
    }
}

impl Jobs {
    pub fn new(stored: Vec<StoredJob>) -> Jobs {
        let (changes, _) = watch::channel(0);
        let mut table = Table::default();
        for job in stored {
            match job {
                StoredJob::Whole(record) => {
                    let finished = record.state.is_finished().then(|| record.id.clone());
                    table.whole.insert(record.id.clone(), *record);
                    if let Some(id) = finished {
                        table.finished(&id, &HashSet::new());
                    }
                }
                StoredJob::Finished(summary) => drop(table.summarised.insert(summary.id.clone(), summary)),
            }
        }
        // Not the count: retention removes old jobs, and numbers must keep increasing.
        let ids = table.whole.keys().chain(table.summarised.keys());
        let next = ids.map(|id| creation_number(id)).filter(|&n| n != u64::MAX).max().unwrap_or(0) + 1;
        Jobs {
            table: Mutex::new(table),
            cancels: Mutex::default(),
            task_locks: Mutex::default(),
            changes,
            next_id: Mutex::new(next),
            halted: AtomicBool::new(false),
            unsaved: Mutex::default(),
        }
    }

    /// The daemon is stopping and kills the process groups of its running jobs: a command that
    /// dies now was killed by the stop, not failed by itself. Jobs record nothing more (no
    /// evidence, no end) and start no further command; their records stay `running`, which the
    /// next start reports as abandoned, as after a crash.
    pub fn halt(&self) {
        self.halted.store(true, Ordering::SeqCst);
    }

    /// Whether [`Jobs::halt`] was called.
    pub fn halted(&self) -> bool {
        self.halted.load(Ordering::SeqCst)
    }

    /// The lock every mutating command on `task` of `ws` holds.
    pub fn task_lock(&self, ws: &Workspace, task: &str) -> Arc<tokio::sync::Mutex<()>> {
        let key = format!("{}/{task}", ws.id);
        lock(&self.task_locks).entry(key).or_default().clone()
    }

    /// Create a queued job (`review` is set for the reviewer jobs of a review session), saved
    /// now when `durable` (a build job is put in the store at once and synced on a blocking
    /// thread instead: see [`Jobs::write_unsynced`]).
    pub fn create(
        &self,
        store: &dyn Store,
        kind: JobKind,
        ws: &Workspace,
        task: &str,
        review: Option<ReviewWork>,
        durable: bool,
    ) -> (JobRecord, CancellationToken) {
        let mut next = lock(&self.next_id);
        let id = format!("job-{}-{}", *next, &crate::workspace::layout::new_id().unwrap_or_default()[..6]);
        *next += 1;
        let record = JobRecord {
            // A provider's run (a reviewer's, a harden's) records its own group (and token)
            // durably instead.
            run_token: if kind == JobKind::Acceptance {
                crate::workspace::layout::new_id().unwrap_or_default()
            } else {
                String::new()
            },
            review,
            ..JobRecord::queued(
                id.clone(),
                kind,
                ws.id.clone(),
                ws.root.display().to_string(),
                task.to_string(),
                clock::now_rfc3339(),
            )
        };
        let token = CancellationToken::new();
        lock(&self.cancels).insert(id.clone(), token.clone());
        self.put(store, record.clone(), durable);
        (record, token)
    }

    /// Apply `change` to a job; persist when `durable` (state changes, process groups). The
    /// change and its write happen under the table's lock, so overlapping updates never
    /// overwrite each other.
    pub fn update(
        &self,
        store: &dyn Store,
        id: &str,
        durable: bool,
        change: impl FnOnce(&mut JobRecord),
    ) -> Option<JobRecord> {
        self.update_if(store, id, durable, |_| true, change)
    }

    /// Put the unfinished job as it is now in the store (under the table's lock, so in order
    /// with every durable update of it), leaving the disk to [`Store::sync_job`]. A job that
    /// already ended (cancelled between its creation and this call, by a client that found it
    /// in the table) was saved by its end, with the manifest: it is left as it is.
    pub fn write_unsynced(&self, store: &dyn Store, id: &str) -> Result<(), StoreError> {
        match lock(&self.table).whole.get(id) {
            Some(record) if !record.state.is_finished() => store.put_job(record),
            _ => Ok(()),
        }
    }

    /// The job's end is in the store already (a build's, saved with its step's events): it
    /// may be summarised once it is among the older finished.
    pub fn ended_in_store(&self, id: &str) {
        let mut table = lock(&self.table);
        table.finished(id, &lock(&self.unsaved));
    }

    /// Apply `change` to the job in memory only, waking no waiter: what a running job is doing
    /// (its activity, its current process group), which nobody waits on.
    pub fn note(&self, id: &str, change: impl FnOnce(&mut JobRecord)) {
        if let Some(record) = lock(&self.table).whole.get_mut(id) {
            change(record);
        }
    }

    /// Apply `change` only if `check` holds for the job as it is now: one compare-and-update.
    /// A finished job no longer kept whole is changed no more (none is).
    pub fn update_if(
        &self,
        store: &dyn Store,
        id: &str,
        durable: bool,
        check: impl FnOnce(&JobRecord) -> bool,
        change: impl FnOnce(&mut JobRecord),
    ) -> Option<JobRecord> {
        let mut table = lock(&self.table);
        let record = table.whole.get_mut(id).filter(|r| check(r))?;
        change(record);
        let record = record.clone();
        self.persist(store, &mut table, &record, durable);
        drop(table);
        self.changed(&record);
        Some(record)
    }

    /// Apply `change` only while `token` is the job's current lease and the job runs: a stale
    /// token (expired, released, finished, re-claimed) changes nothing.
    pub fn update_leased(
        &self,
        store: &dyn Store,
        id: &str,
        token: &str,
        change: impl FnOnce(&mut JobRecord),
    ) -> Option<JobRecord> {
        let holds = |r: &JobRecord| {
            r.state == JobState::Running
                && !token.is_empty()
                && r.review.as_ref().and_then(|w| w.lease.as_ref()).is_some_and(|l| l.token == token)
        };
        self.update_if(store, id, true, holds, change)
    }

    /// Save `record` when `durable`; the caller holds the table's lock (`table`), so the
    /// saves of one job land in order. A save that fails is remembered and made again, with
    /// the job's record as it is then, once a later save succeeds. A finished job is only
    /// summarised once saved so: the store then holds its record as it ended.
    fn persist(&self, store: &dyn Store, table: &mut Table, record: &JobRecord, durable: bool) {
        if !durable {
            return;
        }
        let mut unsaved = lock(&self.unsaved);
        match store.save_job(record) {
            Ok(()) => {
                unsaved.remove(&record.id);
                let saved = Self::save_again(store, &table.whole, &mut unsaved);
                for id in saved.iter().chain([&record.id]) {
                    table.finished(id, &unsaved);
                }
            }
            Err(e) => {
                warn!(job = %record.id, "cannot persist job (saved again once the database takes writes): {e}");
                unsaved.insert(record.id.clone());
            }
        }
    }

    /// Save the jobs whose last save failed, as they are now; those that fail again stay.
    /// Returns those saved.
    fn save_again(
        store: &dyn Store,
        records: &HashMap<String, JobRecord>,
        unsaved: &mut HashSet<String>,
    ) -> Vec<String> {
        let mut saved = Vec::new();
        unsaved.retain(|id| {
            let Some(record) = records.get(id) else { return false }; // forgotten since
            match store.save_job(record) {
                Ok(()) => {
                    info!(job = %id, "saved the job's record that an earlier save could not write");
                    saved.push(id.clone());
                    false
                }
                Err(e) => {
                    warn!(job = %id, "still cannot persist job: {e}");
                    true
                }
            }
        });
        saved
    }

    /// Save every job whose last save failed (at the daemon's stop, so that the next start
    /// reads how each one really ended rather than an older `running` record).
    pub fn save_unsaved(&self, store: &dyn Store) {
        let table = lock(&self.table);
        let _ = Self::save_again(store, &table.whole, &mut lock(&self.unsaved));
    }

    fn changed(&self, record: &JobRecord) {
        if record.state.is_finished() {
            lock(&self.cancels).remove(&record.id);
        }
        self.changes.send_modify(|n| *n += 1);
    }

    fn put(&self, store: &dyn Store, record: JobRecord, durable: bool) {
        let mut table = lock(&self.table);
        table.whole.insert(record.id.clone(), record.clone());
        self.persist(store, &mut table, &record, durable);
        drop(table);
        self.changed(&record);
    }

    /// Drop finished jobs from memory (retention; the store has already deleted them).
    pub fn forget(&self, ids: &[String]) {
        let mut table = lock(&self.table);
        let mut cancels = lock(&self.cancels);
        for id in ids {
            let whole = table.whole.get(id).is_some_and(|r| r.state.is_finished());
            if whole {
                table.whole.remove(id);
                table.finished.retain(|f| f != id);
            }
            if whole | table.summarised.remove(id).is_some() {
                cancels.remove(id);
            }
        }
    }

    /// Wake every waiter (a session settled without a job changing).
    pub fn touch(&self) {
        self.changes.send_modify(|n| *n += 1);
    }

    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Atomically take the oldest queued job that `eligible` accepts and apply `claim` to it.
    pub fn claim(
        &self,
        store: &dyn Store,
        eligible: impl Fn(&JobRecord) -> bool,
        claim: impl FnOnce(&mut JobRecord),
    ) -> Option<JobRecord> {
        let mut table = lock(&self.table);
        let record = table
            .whole
            .values_mut()
            .filter(|r| r.state == JobState::Queued && eligible(r))
            // By creation sequence, never the wall clock (which may be set back).
            .min_by(|a, b| created_before(a, b))?;
        claim(record);
        let record = record.clone();
        self.persist(store, &mut table, &record, true);
        drop(table);
        self.changed(&record);
        Some(record)
    }

    /// The cancellation token of an unfinished job (created for jobs recovered from the store).
    pub fn token(&self, id: &str) -> CancellationToken {
        lock(&self.cancels).entry(id.to_string()).or_default().clone()
    }

    /// The job's record: from memory, or for an older finished job from the store (`None`
    /// as well when that read fails, which is logged).
    pub fn get(&self, store: &dyn Store, id: &str) -> Option<JobRecord> {
        let table = lock(&self.table);
        if let Some(record) = table.whole.get(id) {
            return Some(record.clone());
        }
        if !table.summarised.contains_key(id) {
            return None;
        }
        drop(table);
        store.job(id).unwrap_or_else(|e| {
            warn!(job = %id, "cannot read the finished job's record: {e}");
            None
        })
    }

    /// The jobs kept whole (every unfinished one, the last finished) that `matches` accepts,
    /// copying only those (for loops that run often).
    pub fn matching(&self, matches: impl Fn(&JobRecord) -> bool) -> Vec<JobRecord> {
        lock(&self.table).whole.values().filter(|r| matches(r)).cloned().collect()
    }

    /// The oldest job kept whole that `matches` accepts, by creation sequence (never the wall
    /// clock, which may be set back), as [`Jobs::claim`] and [`Jobs::all`] order them.
    pub fn oldest_matching(&self, matches: impl Fn(&JobRecord) -> bool) -> Option<JobRecord> {
        lock(&self.table).whole.values().filter(|r| matches(r)).min_by(|a, b| created_before(a, b)).cloned()
    }

    /// Every job, newest first: the older finished ones read from the store.
    pub fn all(&self, store: &dyn Store) -> Vec<JobRecord> {
        let (mut jobs, summarised): (Vec<JobRecord>, HashSet<String>) = {
            let table = lock(&self.table);
            (table.whole.values().cloned().collect(), table.summarised.keys().cloned().collect())
        };
        if !summarised.is_empty() {
            match store.jobs() {
                Ok(stored) => jobs.extend(stored.into_iter().filter(|r| summarised.contains(&r.id))),
                Err(e) => warn!("cannot read the finished jobs' records: {e}"),
            }
        }
        newest_first(jobs)
    }

    /// Every job's summary, in no order (retention's).
    pub fn summaries(&self) -> Vec<JobSummary> {
        lock(&self.table).summaries().collect()
    }

    /// The unfinished job of `task`, if any (a second build attaches to it).
    pub fn active_for(&self, ws: &Workspace, task: &str) -> Option<JobRecord> {
        lock(&self.table)
            .whole
            .values()
            .find(|r| r.workspace_id == ws.id && r.task_id == task && !r.state.is_finished())
            .cloned()
    }

    pub fn counts(&self) -> JobCounts {
        let table = lock(&self.table);
        let count = |state: JobState| table.whole.values().filter(|r| r.state == state).count() as u64;
        JobCounts {
            queued: count(JobState::Queued),
            running: count(JobState::Running),
            finished: (table.whole.values().filter(|r| r.state.is_finished()).count() + table.summarised.len()) as u64,
        }
    }

    /// Wait until the job finishes, `timeout` passes or `stop` (the daemon's orderly stop) is
    /// cancelled; return its record either way (unfinished when the wait was cut short).
    pub async fn wait(
        &self,
        store: &dyn Store,
        id: &str,
        timeout: Duration,
        stop: &CancellationToken,
    ) -> Option<JobRecord> {
        let mut changes = self.changes.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let record = self.get(store, id)?;
            if record.state.is_finished() || stop.is_cancelled() {
                return Some(record);
            }
            tokio::select! {
                changed = tokio::time::timeout_at(deadline, changes.changed()) => if changed.is_err() {
                    return Some(record);
                },
                _ = stop.cancelled() => {}
            }
        }
    }

    /// Cancel a job: a running one is killed by its runner; a queued one ends here.
    pub fn cancel(&self, store: &dyn Store, id: &str) -> Option<JobRecord> {
        if let Some(token) = lock(&self.cancels).get(id) {
            token.cancel();
        }
        // Only a queued job ends here (a running one ends on its own path, told by the token),
        // and nothing else is written: a save of a running job's record could land after its
        // own end was saved.
        let queued = |r: &JobRecord| r.state == JobState::Queued;
        self.update_if(store, id, true, queued, |r| {
            r.state = JobState::Cancelled;
            r.finished_at = Some(clock::now_rfc3339());
            r.reason = Some("cancelled before it started".into());
        })
        .or_else(|| self.get(store, id))
    }

    /// After a restart: acceptance jobs that were queued or running have lost their runner:
    /// kill any orphaned process group and mark them abandoned (returned). Review jobs keep
    /// their checkpoint: one the daemon ran is killed and re-queued (the session resumes it);
    /// one a worker holds keeps its lease, which the worker may go on renewing.
    pub fn recover(&self, store: &dyn Store) -> Vec<JobRecord> {
        let unfinished = newest_first(self.matching(|r| !r.state.is_finished()));
        let mut abandoned = Vec::new();
        for job in unfinished {
            // A recorded group carries its run's token (a build job's is the job's own), and
            // killing it looks for that token's carriers too.
            let killed = match &job.group {
                Some(group) => group.kill_if_ours(),
                None => !job.run_token.is_empty() && crate::runner::kill_carriers(&job.run_token) > 0,
            };
            if let Some(work) = &job.review {
                let ours = work.lease.is_none();
                self.token(&job.id);
                // Its deadline was on the last daemon's monotonic clock, which is gone with it.
                self.note(&job.id, |r| {
                    if let Some(lease) = r.review.as_mut().and_then(|w| w.lease.as_mut()) {
                        lease.deadline = Some(clock::deadline_in(lease.seconds));
                    }
                });
                if ours && job.state == JobState::Running {
                    info!(job = %job.id, "re-queued: the daemon stopped while its reviewer ran");
                    self.update(store, &job.id, true, |r| {
                        r.state = JobState::Queued;
                        r.attempt += 1;
                        r.group = None;
                        r.activity = Some("re-queued after a daemon restart".into());
                    });
                }
                continue;
            }
            let reason = match (&job.group, killed) {
                (Some(g), true) => {
                    format!("the daemon stopped while the job ran; its process group {} was killed", g.pgid)
                }
                (Some(g), false) => format!(
                    "the daemon stopped while the job ran; its process group {} had already ended (a process now using that id was left alone)",
                    g.pgid
                ),
                (None, true) => "the daemon stopped while the job ran; its processes were killed".to_string(),
                (None, false) => "the daemon stopped before the job finished".to_string(),
            };
            info!(job = %job.id, "abandoned: {reason}");
            if let Some(record) = self.update(store, &job.id, true, |r| {
                r.state = JobState::Abandoned;
                r.finished_at = Some(clock::now_rfc3339());
                r.reason = Some(reason);
                r.group = None;
            }) {
                abandoned.push(record);
            }
        }
        abandoned
    }
}

/// `jobs` newest first by creation sequence, never the wall clock (which may be set back).
fn newest_first(mut jobs: Vec<JobRecord>) -> Vec<JobRecord> {
    jobs.sort_by(|a, b| created_before(b, a));
    jobs
}

/// How jobs `a` and `b` order by creation: their sequence numbers, then (within one, which
/// only jobs of an older scafld share) their ids.
fn created_before(a: &JobRecord, b: &JobRecord) -> std::cmp::Ordering {
    creation_number(&a.id).cmp(&creation_number(&b.id)).then_with(|| a.id.cmp(&b.id))
}

/// The counter part of a job id (`job-<n>-<random>`): creation order within one second.
fn creation_number(id: &str) -> u64 {
    id.strip_prefix("job-").and_then(|rest| rest.split('-').next()).and_then(|n| n.parse().ok()).unwrap_or(u64::MAX)
}

pub fn info(record: &JobRecord) -> JobInfo {
    JobInfo {
        job_id: record.id.clone(),
        kind: record.kind,
        reviewer: record.review.as_ref().map(|w| w.reviewer.clone()),
        session_key: record.review.as_ref().map(|w| w.session_key.clone()),
        workspace_id: record.workspace_id.clone(),
        root: record.root.clone(),
        task_id: record.task_id.clone(),
        state: record.state,
        finished: record.state.is_finished(),
        owner: record.owner.clone(),
        attempt: record.attempt,
        created_at: record.created_at.clone(),
        started_at: record.started_at.clone(),
        finished_at: record.finished_at.clone(),
        last_heartbeat: record.last_heartbeat.clone(),
        activity: record.activity.clone(),
        reason: record.reason.clone(),
        outcome: match record.kind {
            JobKind::Acceptance => record.outcome.clone(),
            JobKind::Review | JobKind::Harden => None,
        },
        error_kind: record.error_kind.clone(),
    }
}

/// The error for a job id the table does not know.
pub fn unknown_job(id: &str) -> crate::error::RpcError {
    crate::error::RpcError::new(scafld_protocol::ErrorKind::NotFound, format!("no job `{id}`"))
        .with_hint("`scafld job list` shows the jobs")
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::store::SledStore;

    /// A table holding `records` whole, as the store hands over unfinished jobs.
    fn kept_whole(records: Vec<JobRecord>) -> Jobs {
        Jobs::new(records.into_iter().map(|r| StoredJob::Whole(Box::new(r))).collect())
    }

    /// Two writers change different fields of one job at the same time: neither change may be
    /// lost, in memory or in the store (an update used to re-insert a stale copy after the
    /// lock was released).
    #[test]
    fn overlapping_updates_never_lose_a_write() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SledStore::open(&dir.path().join("db")).unwrap());
        let record =
            JobRecord::queued("job-1-a".into(), JobKind::Acceptance, "w".into(), "/r".into(), "t".into(), "now".into());
        let jobs = Arc::new(kept_whole(vec![record]));
        let writers: Vec<_> = (0..2)
            .map(|writer| {
                let (jobs, store) = (jobs.clone(), store.clone());
                std::thread::spawn(move || {
                    for _ in 0..300 {
                        jobs.update(&*store, "job-1-a", true, |r| {
                            if writer == 0 {
                                r.attempt += 1;
                            } else {
                                let n: u32 = r.activity.as_deref().unwrap_or("0").parse().unwrap();
                                r.activity = Some((n + 1).to_string());
                            }
                        });
                    }
                })
            })
            .collect();
        writers.into_iter().for_each(|w| w.join().unwrap());
        let memory = jobs.get(&*store, "job-1-a").unwrap();
        assert_eq!((memory.attempt, memory.activity.as_deref()), (301, Some("300")));
        let stored = store.jobs().unwrap().into_iter().find(|r| r.id == "job-1-a").unwrap();
        assert_eq!((stored.attempt, stored.activity.as_deref()), (301, Some("300")));
    }

    /// A build job cancelled in the instant between its creation and its first write (a
    /// client that listed it) has saved its end already: the unsynced write leaves that end
    /// alone instead of putting a finished record past the manifest (a debug build's assertion
    /// fired here), and the sync still finds the job on disk.
    #[test]
    fn an_unsynced_write_of_a_job_cancelled_meanwhile_keeps_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(&dir.path().join("db")).unwrap();
        let record =
            JobRecord::queued("job-1-a".into(), JobKind::Acceptance, "w".into(), "/r".into(), "t".into(), "now".into());
        let jobs = kept_whole(vec![record]);
        assert_eq!(jobs.cancel(&store, "job-1-a").unwrap().state, JobState::Cancelled);
        jobs.write_unsynced(&store, "job-1-a").unwrap();
        store.sync_job("job-1-a").unwrap();
        assert_eq!(store.jobs().unwrap()[0].state, JobState::Cancelled);
    }

    /// Past the last [`FINISHED_KEPT_WHOLE`] finished jobs, a finished job is kept as its
    /// summary alone: still counted, listed whole (read from the store), found by id with its
    /// outcome, and forgotten by retention; a new start summarises every finished job.
    #[test]
    fn older_finished_jobs_are_kept_as_summaries_and_read_whole_from_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(&dir.path().join("db")).unwrap();
        let range = crate::workspace::RangeHome { id: "r".into(), data: dir.path().join("range") };
        let ws = Workspace::open("w".into(), dir.path().to_path_buf(), range, None);
        let total = FINISHED_KEPT_WHOLE + 6;
        let mut ids = Vec::new();
        let jobs = kept_whole(Vec::new());
        let (review, _) = jobs.create(&store, JobKind::Review, &ws, "r", None, true);
        jobs.update(&store, &review.id, true, |r| r.state = JobState::Succeeded);
        for n in 0..total {
            let (job, _) = jobs.create(&store, JobKind::Acceptance, &ws, &format!("t{n}"), None, true);
            jobs.update(&store, &job.id, true, |r| {
                r.state = JobState::Succeeded;
                r.finished_at = Some(format!("2026-01-01T00:00:{:02}Z", n % 60));
                r.reason = Some(format!("ended {n}"));
            });
            ids.push(job.id);
        }
        let table = lock(&jobs.table);
        assert_eq!((table.whole.len(), table.summarised.len()), (FINISHED_KEPT_WHOLE + 1, 6));
        assert!(table.summarised.contains_key(&ids[0]) && table.whole.contains_key(&ids[total - 1]));
        assert!(table.whole.contains_key(&review.id), "a review job is kept whole");
        drop(table);
        ids.insert(0, review.id);
        let total = total + 1;

        assert_eq!(jobs.counts().finished, total as u64);
        assert_eq!(jobs.get(&store, &ids[1]).unwrap().reason.as_deref(), Some("ended 0"));
        let listed: Vec<String> = jobs.all(&store).into_iter().map(|r| r.id).collect();
        assert_eq!(listed, ids.iter().rev().cloned().collect::<Vec<_>>());
        assert_eq!(jobs.summaries().len(), total);
        // Nothing changes a summarised job any more (it is finished).
        assert!(jobs.update(&store, &ids[1], true, |r| r.attempt = 9).is_none());

        jobs.forget(&ids[1..2]);
        assert!(jobs.get(&store, &ids[1]).is_none());
        assert_eq!(jobs.counts().finished, total as u64 - 1);

        let restarted = Jobs::new(store.job_table().unwrap());
        let table = lock(&restarted.table);
        assert_eq!((table.whole.len(), table.summarised.len()), (1, total - 1), "all but the review");
        drop(table);
        assert_eq!(restarted.get(&store, &ids[total - 1]).unwrap().reason, Some(format!("ended {}", total - 2)));
        let (next, _) = restarted.create(&store, JobKind::Acceptance, &ws, "after", None, true);
        assert_eq!(creation_number(&next.id), total as u64 + 1, "job numbers go on from the summarised ones")
    }

    /// Jobs are listed and claimed in creation order even when the wall clock was set back
    /// between two of them (their recorded times then read the other way round).
    #[test]
    fn jobs_are_ordered_by_creation_sequence_not_the_wall_clock() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(&dir.path().join("db")).unwrap();
        let job = |id: &str, at: &str| {
            JobRecord::queued(id.into(), JobKind::Review, "w".into(), "/r".into(), "t".into(), at.into())
        };
        let jobs = kept_whole(vec![job("job-9-a", "2026-01-01T10:00:00Z"), job("job-10-b", "2026-01-01T09:00:00Z")]);
        let ids: Vec<String> = jobs.all(&store).into_iter().map(|r| r.id).collect();
        assert_eq!(ids, ["job-10-b", "job-9-a"]);
        assert_eq!(jobs.claim(&store, |_| true, |_| {}).unwrap().id, "job-9-a");
    }

    /// The oldest of several jobs is the first created, even when the wall clock was set back
    /// between them (`refuse_while_held` names it).
    #[test]
    fn the_oldest_job_is_the_first_created_not_the_earliest_recorded_time() {
        let job = |id: &str, at: &str| {
            JobRecord::queued(id.into(), JobKind::Acceptance, "w".into(), "/r".into(), "t".into(), at.into())
        };
        let jobs = kept_whole(vec![job("job-9-a", "2026-01-01T10:00:00Z"), job("job-10-b", "2026-01-01T09:00:00Z")]);
        assert_eq!(jobs.oldest_matching(|_| true).unwrap().id, "job-9-a");
        assert!(jobs.oldest_matching(|r| r.id == "none").is_none());
    }

    #[test]
    fn a_stale_lease_token_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(&dir.path().join("db")).unwrap();
        let mut record =
            JobRecord::queued("job-1-a".into(), JobKind::Review, "w".into(), "/r".into(), "t".into(), "now".into());
        record.state = JobState::Running;
        record.review = Some(ReviewWork {
            lease: Some(crate::domain::job::Lease { token: "current".into(), ..Default::default() }),
            ..Default::default()
        });
        let jobs = kept_whole(vec![record]);
        assert!(jobs.update_leased(&store, "job-1-a", "stale", |r| r.attempt = 9).is_none());
        assert!(jobs.update_leased(&store, "job-1-a", "", |r| r.attempt = 9).is_none());
        assert_eq!(jobs.get(&store, "job-1-a").unwrap().attempt, 1);
        assert!(jobs.update_leased(&store, "job-1-a", "current", |r| r.attempt = 2).is_some());
        assert_eq!(jobs.get(&store, "job-1-a").unwrap().attempt, 2);
    }

    /// A build job whose running command's group never reached the disk: recovery finds its
    /// processes by the job's run token, with what they started under a cleared environment.
    #[test]
    fn recovery_kills_a_build_jobs_processes_by_its_run_token() {
        use std::os::unix::process::CommandExt;
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(&dir.path().join("db")).unwrap();
        let mut record =
            JobRecord::queued("job-1-b".into(), JobKind::Acceptance, "w".into(), "/r".into(), "t".into(), "now".into());
        record.state = JobState::Running;
        record.run_token = crate::workspace::layout::new_id().unwrap();
        let mut orphan = std::process::Command::new("/bin/sh")
            .args(["-c", "env -i /bin/sleep 1093 & wait"])
            .env(scafld_local::runner::RUN_TOKEN, &record.run_token)
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = nix::unistd::Pid::from_raw(orphan.id() as i32);
        let members = || {
            std::fs::read_dir("/proc")
                .unwrap()
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                .filter(|pid| {
                    let pid = nix::unistd::Pid::from_raw(*pid);
                    nix::unistd::getpgid(Some(pid)) == Ok(pgid)
                        && scafld_local::proc::stat(pid.as_raw()).is_some_and(|stat| !stat.is_dead())
                })
                .count()
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let wait = |done: &dyn Fn() -> bool, what: &str| {
            while !done() {
                assert!(std::time::Instant::now() < deadline, "{what}");
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        };
        wait(&|| members() == 2, "the orphan's child never started");
        let jobs = kept_whole(vec![record]);
        let abandoned = jobs.recover(&store);
        assert_eq!(abandoned.len(), 1);
        assert!(abandoned[0].reason.as_deref().unwrap().contains("its processes were killed"), "{abandoned:?}");
        orphan.wait().unwrap();
        wait(&|| members() == 0, "the child with a cleared environment survived");
    }
}
