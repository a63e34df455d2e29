//! Durable daemon state (workspaces, ledgers, jobs, review sessions) behind a small trait, with sled as the one implementation.
//!
//! The trait speaks in domain records rather than keys and bytes so that another backend
//! (SQLite, redb) could replace sled without touching callers. Writes that acknowledge a
//! mutation are flushed before they return.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::domain::job::{JobRecord, SessionRecord};
use crate::domain::ledger::{LedgerEntry, LedgerEvent};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("state database error: {0}")]
    Backend(#[from] sled::Error),
    #[error("corrupt record in the state database: {0}")]
    Corrupt(#[from] serde_json::Error),
}

/// A workspace the daemon has seen, keyed by the id stored in its `.scafld/workspace_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceRecord {
    pub id: String,
    pub root: String,
}

pub trait Store: Send + Sync + 'static {
    fn save_workspace(&self, record: &WorkspaceRecord) -> Result<(), StoreError>;
    fn workspace(&self, id: &str) -> Result<Option<WorkspaceRecord>, StoreError>;
    fn workspaces(&self) -> Result<Vec<WorkspaceRecord>, StoreError>;
    /// Append events to a task's ledger with the next sequence numbers, flushed before return.
    /// Callers serialise appends per task.
    fn append(
        &self,
        workspace_id: &str,
        task_id: &str,
        recorded_at: &str,
        events: Vec<LedgerEvent>,
    ) -> Result<Vec<LedgerEntry>, StoreError>;
    fn ledger(&self, workspace_id: &str, task_id: &str) -> Result<Vec<LedgerEntry>, StoreError>;
    /// Write an imported ledger (each event with its own time) in one atomic batch, only when
    /// the task has no ledger yet; returns how many entries were written (0: already there).
    /// Callers serialise it with appends to the same task.
    fn import(
        &self,
        workspace_id: &str,
        task_id: &str,
        events: Vec<(String, LedgerEvent)>,
    ) -> Result<usize, StoreError>;
    fn save_job(&self, job: &JobRecord) -> Result<(), StoreError>;
    fn jobs(&self) -> Result<Vec<JobRecord>, StoreError>;
    fn save_session(&self, session: &SessionRecord) -> Result<(), StoreError>;
    fn sessions(&self) -> Result<Vec<SessionRecord>, StoreError>;
    /// Delete finished jobs and settled sessions (retention), flushed before return.
    fn forget(&self, job_ids: &[String], session_keys: &[String]) -> Result<(), StoreError>;
    /// Make every acknowledged write durable against a process crash.
    fn flush(&self) -> Result<(), StoreError>;
}

pub struct SledStore {
    db: sled::Db,
    workspaces: sled::Tree,
    ledger: sled::Tree,
    jobs: sled::Tree,
    sessions: sled::Tree,
}

impl SledStore {
    pub fn open(dir: &Path) -> Result<SledStore, StoreError> {
        let db = sled::Config::new().path(dir).mode(sled::Mode::LowSpace).open()?;
        Ok(SledStore {
            workspaces: db.open_tree("workspaces")?,
            ledger: db.open_tree("ledger")?,
            jobs: db.open_tree("jobs")?,
            sessions: db.open_tree("sessions")?,
            db,
        })
    }
}

/// `<workspace id>/<task id>/` — task ids cannot contain `/`, so prefixes never overlap.
fn ledger_prefix(workspace_id: &str, task_id: &str) -> Vec<u8> {
    format!("{workspace_id}/{task_id}/").into_bytes()
}

impl Store for SledStore {
    fn save_workspace(&self, record: &WorkspaceRecord) -> Result<(), StoreError> {
        self.workspaces.insert(record.id.as_bytes(), serde_json::to_vec(record)?)?;
        self.flush()
    }

    fn workspace(&self, id: &str) -> Result<Option<WorkspaceRecord>, StoreError> {
        match self.workspaces.get(id.as_bytes())? {
            Some(bytes) => Ok(Some(serde_json::from_slice(&bytes)?)),
            None => Ok(None),
        }
    }

    fn workspaces(&self) -> Result<Vec<WorkspaceRecord>, StoreError> {
        self.workspaces.iter().map(|entry| Ok(serde_json::from_slice(&entry?.1)?)).collect()
    }

    fn append(
        &self,
        workspace_id: &str,
        task_id: &str,
        recorded_at: &str,
        events: Vec<LedgerEvent>,
    ) -> Result<Vec<LedgerEntry>, StoreError> {
        let prefix = ledger_prefix(workspace_id, task_id);
        let last = match self.ledger.scan_prefix(&prefix).next_back() {
            Some(entry) => serde_json::from_slice::<LedgerEntry>(&entry?.1)?.seq,
            None => 0,
        };
        let mut batch = sled::Batch::default();
        let mut written = Vec::with_capacity(events.len());
        for (i, event) in events.into_iter().enumerate() {
            let entry = LedgerEntry { seq: last + 1 + i as u64, recorded_at: recorded_at.to_string(), event };
            let mut key = prefix.clone();
            key.extend_from_slice(&entry.seq.to_be_bytes());
            batch.insert(key, serde_json::to_vec(&entry)?);
            written.push(entry);
        }
        self.ledger.apply_batch(batch)?;
        self.flush()?;
        Ok(written)
    }

    fn ledger(&self, workspace_id: &str, task_id: &str) -> Result<Vec<LedgerEntry>, StoreError> {
        self.ledger
            .scan_prefix(ledger_prefix(workspace_id, task_id))
            .map(|entry| Ok(serde_json::from_slice(&entry?.1)?))
            .collect()
    }

    fn import(
        &self,
        workspace_id: &str,
        task_id: &str,
        events: Vec<(String, LedgerEvent)>,
    ) -> Result<usize, StoreError> {
        let prefix = ledger_prefix(workspace_id, task_id);
        if self.ledger.scan_prefix(&prefix).next().is_some() {
            return Ok(0);
        }
        let mut batch = sled::Batch::default();
        let count = events.len();
        for (i, (recorded_at, event)) in events.into_iter().enumerate() {
            let entry = LedgerEntry { seq: 1 + i as u64, recorded_at, event };
            let mut key = prefix.clone();
            key.extend_from_slice(&entry.seq.to_be_bytes());
            batch.insert(key, serde_json::to_vec(&entry)?);
        }
        self.ledger.apply_batch(batch)?;
        self.flush()?;
        Ok(count)
    }

    fn save_job(&self, job: &JobRecord) -> Result<(), StoreError> {
        self.jobs.insert(job.id.as_bytes(), serde_json::to_vec(job)?)?;
        self.flush()
    }

    fn jobs(&self) -> Result<Vec<JobRecord>, StoreError> {
        self.jobs.iter().map(|entry| Ok(serde_json::from_slice(&entry?.1)?)).collect()
    }

    fn save_session(&self, session: &SessionRecord) -> Result<(), StoreError> {
        self.sessions.insert(session.key.as_bytes(), serde_json::to_vec(session)?)?;
        self.flush()
    }

    fn forget(&self, job_ids: &[String], session_keys: &[String]) -> Result<(), StoreError> {
        let batch = |keys: &[String]| {
            let mut batch = sled::Batch::default();
            keys.iter().for_each(|k| batch.remove(k.as_bytes()));
            batch
        };
        self.jobs.apply_batch(batch(job_ids))?;
        self.sessions.apply_batch(batch(session_keys))?;
        self.flush()
    }

    fn sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        self.sessions.iter().map(|entry| Ok(serde_json::from_slice(&entry?.1)?)).collect()
    }

    fn flush(&self) -> Result<(), StoreError> {
        self.db.flush()?;
        Ok(())
    }
}
