//! What the database must hold, kept beside it: every workspace (id and root) and the head of
//! every task's ledger. Checked at start, so a truncated, emptied or deleted database is a
//! refusal to serve rather than a silent loss; and the list of roots is where a rebuild starts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::workspace::specfile::write_atomic;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Workspace id → root.
    pub workspaces: BTreeMap<String, String>,
    /// `<workspace id>/<task id>` → the sequence number of its last ledger entry.
    pub heads: BTreeMap<String, u64>,
}

/// Where the manifest of the database in `db_dir` lives: beside it, so that losing the
/// database directory does not lose the manifest too.
pub fn path_for(db_dir: &Path) -> PathBuf {
    let name = super::dir_name(db_dir);
    db_dir.with_file_name(format!("{name}.manifest.json"))
}

pub fn head_key(workspace_id: &str, task_id: &str) -> String {
    format!("{workspace_id}/{task_id}")
}

impl Manifest {
    /// The manifest at `path`: `None` when there is none yet (a new or older state directory).
    pub fn load(path: &Path) -> Result<Option<Manifest>, String> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| format!("{}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let text = serde_json::to_string(self).map_err(std::io::Error::other)?;
        write_atomic(path, &text)
    }

    /// What `self` (the manifest) promises that `actual` (what the database holds) lacks, one
    /// line each; empty when the database holds at least everything recorded. A head beyond
    /// the manifest's is fine: the manifest is written after the database.
    pub fn missing_from(&self, actual: &Manifest) -> Vec<String> {
        let mut missing = Vec::new();
        for (id, root) in &self.workspaces {
            if !actual.workspaces.contains_key(id) {
                missing.push(format!("workspace {id} ({root}) is gone"));
            }
        }
        for (key, &head) in &self.heads {
            match actual.heads.get(key) {
                None => missing.push(format!("the ledger of {key} is gone (it had {head} entries)")),
                Some(&now) if now < head => {
                    missing.push(format!("the ledger of {key} ends at {now} of {head} entries"))
                }
                Some(_) => {}
            }
        }
        missing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_losses_count_as_missing() {
        let mut recorded = Manifest::default();
        recorded.workspaces.insert("w".into(), "/r".into());
        recorded.heads.insert("w/a".into(), 3);
        recorded.heads.insert("w/b".into(), 2);
        let mut actual = recorded.clone();
        actual.heads.insert("w/a".into(), 4); // written after the manifest: fine
        assert!(recorded.missing_from(&actual).is_empty());
        actual.heads.insert("w/b".into(), 1);
        actual.workspaces.clear();
        let missing = recorded.missing_from(&actual);
        assert_eq!(missing, ["workspace w (/r) is gone", "the ledger of w/b ends at 1 of 2 entries"]);
        assert_eq!(path_for(Path::new("/s/db")), Path::new("/s/db.manifest.json"));
    }
}
