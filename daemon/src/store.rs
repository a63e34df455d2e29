//! Durable daemon state behind a small trait, with sled as the one implementation.
//!
//! The trait speaks in domain records rather than keys and bytes so that another backend
//! (SQLite, redb) could replace sled without touching callers.

use std::path::Path;

use serde::{Deserialize, Serialize};

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
    /// Make every acknowledged write durable against a process crash.
    fn flush(&self) -> Result<(), StoreError>;
}

pub struct SledStore {
    db: sled::Db,
    workspaces: sled::Tree,
}

impl SledStore {
    pub fn open(dir: &Path) -> Result<SledStore, StoreError> {
        let db = sled::Config::new().path(dir).mode(sled::Mode::LowSpace).open()?;
        let workspaces = db.open_tree("workspaces")?;
        Ok(SledStore { db, workspaces })
    }
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

    fn flush(&self) -> Result<(), StoreError> {
        self.db.flush()?;
        Ok(())
    }
}
