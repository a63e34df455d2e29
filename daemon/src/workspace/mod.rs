//! Workspaces on disk: the `.scafld/` layout, spec files, the in-memory spec index and the
//! file watcher that keeps it current.

pub mod index;
pub mod layout;
pub mod specfile;
pub mod watch;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};

pub use layout::{ID_FILE, SCAFLD_DIR};

use crate::config::{self, Config, ConfigError};
use index::Index;

/// An open workspace: its identity, its spec index and the lock that serialises writes.
pub struct Workspace {
    pub id: String,
    pub root: PathBuf,
    pub index: RwLock<Index>,
    /// Held by every command that writes this workspace's specs.
    pub writes: tokio::sync::Mutex<()>,
    config: Mutex<Option<Config>>,
}

impl Workspace {
    pub fn open(id: String, root: PathBuf) -> Workspace {
        let index = Index::build(&root);
        Workspace { id, root, index: RwLock::new(index), writes: tokio::sync::Mutex::new(()), config: Mutex::new(None) }
    }

    /// The merged configuration, read once and re-read after the watcher sees a change.
    pub fn config(&self) -> Result<Config, ConfigError> {
        let mut cached = self.config.lock().expect("config lock");
        if let Some(config) = cached.as_ref() {
            return Ok(config.clone());
        }
        let config = config::load(&self.root)?;
        *cached = Some(config.clone());
        Ok(config)
    }

    pub fn forget_config(&self) {
        *self.config.lock().expect("config lock") = None;
    }

    /// `path` relative to the workspace root, for display.
    pub fn relative(&self, path: &Path) -> String {
        path.strip_prefix(&self.root).unwrap_or(path).display().to_string()
    }
}
