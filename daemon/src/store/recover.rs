//! `scafldd --recover`: rebuild a damaged database from what is still readable, keeping the
//! damaged copy. Sources, best first per task: the ledger entries that still read back from
//! the damaged database (a copy of it is opened, never the kept original), and ledgers exported
//! under `.scafld/runs/<task>/ledger.json` in every workspace the database or its manifest
//! knew. A task keeps the longest gap-free history found; what was lost is reported against
//! the manifest. Jobs and review sessions are not rebuilt (a review is simply run again).

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use super::manifest::{self, Manifest, head_key};
use super::{SledStore, Store, StoreError, WorkspaceRecord};
use crate::domain::ledger::LedgerEntry;

/// What a recovery did, for the user.
#[derive(Debug, Default)]
pub struct Report {
    /// Where the damaged database (and its manifest) now are.
    pub kept: Option<PathBuf>,
    pub workspaces: usize,
    /// `(workspace/task, entries, source)` for every ledger rebuilt.
    pub restored: Vec<(String, usize, &'static str)>,
    /// Ledgers that could not be rebuilt whole, against the manifest.
    pub lost: Vec<String>,
}

/// Histories found so far: `workspace id` → `task id` → `(entries, source)`.
type Found = BTreeMap<String, BTreeMap<String, (Vec<LedgerEntry>, &'static str)>>;

pub fn recover(db_dir: &Path) -> Result<Report, StoreError> {
    let manifest_path = manifest::path_for(db_dir);
    let recorded = Manifest::load(&manifest_path).ok().flatten().unwrap_or_default();
    let mut report = Report::default();
    let mut roots: BTreeMap<String, String> = recorded.workspaces.clone();
    let mut found = Found::new();

    // Copies kept by refused starts (as they were before sled touched them) are read too.
    let name = super::dir_name(db_dir);
    let earlier: Vec<PathBuf> = std::fs::read_dir(db_dir.parent().unwrap_or(Path::new(".")))
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.is_dir()
                        && p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&format!("{name}.damaged-")))
                })
                .collect()
        })
        .unwrap_or_default();
    let kept = super::aside(db_dir, "damaged");
    if db_dir.exists() {
        std::fs::rename(db_dir, &kept)?;
        report.kept = Some(kept.clone());
    }
    if manifest_path.exists() {
        std::fs::rename(&manifest_path, manifest::path_for(&kept))?;
    }
    for copy in report.kept.iter().chain(&earlier) {
        salvage(copy, &mut roots, &mut found);
    }
    for (id, root) in &roots {
        read_exports(id, Path::new(root), &mut found);
    }

    let store = SledStore::open(db_dir)?;
    for (id, root) in &roots {
        store.save_workspace(&WorkspaceRecord { id: id.clone(), root: root.clone() })?;
    }
    report.workspaces = roots.len();
    for (workspace, tasks) in found {
        for (task, (entries, source)) in tasks {
            let count = entries.len();
            store.import(&workspace, &task, entries.into_iter().map(|e| (e.recorded_at, e.event)).collect())?;
            report.restored.push((head_key(&workspace, &task), count, source));
        }
    }
    let restored: BTreeMap<&str, usize> = report.restored.iter().map(|(k, n, _)| (k.as_str(), *n)).collect();
    for (key, &head) in &recorded.heads {
        let have = restored.get(key.as_str()).copied().unwrap_or(0) as u64;
        if have < head {
            report.lost.push(format!("{key}: {have} of {head} ledger entries restored"));
        }
    }
    Ok(report)
}

/// Keep `entries` for the task when they are a longer gap-free history than what was found.
fn offer(found: &mut Found, workspace: &str, task: &str, mut entries: Vec<LedgerEntry>, source: &'static str) {
    entries.sort_by_key(|e| e.seq);
    let whole = entries.iter().enumerate().take_while(|(i, e)| e.seq == *i as u64 + 1).count();
    entries.truncate(whole);
    let slot = found.entry(workspace.to_string()).or_default().entry(task.to_string()).or_insert((Vec::new(), source));
    if entries.len() > slot.0.len() {
        *slot = (entries, source);
    }
}

/// Read what still reads back from a copy of the damaged database; stop a tree at its first
/// unreadable record, and survive the engine panicking.
fn salvage(kept: &Path, roots: &mut BTreeMap<String, String>, found: &mut Found) {
    let copy = kept.with_extension("salvage");
    let _ = std::fs::remove_dir_all(&copy);
    if copy_dir(kept, &copy).is_err() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let Ok(db) = sled::Config::new().path(&copy).open() else { return };
        if let Ok(tree) = db.open_tree("workspaces") {
            for entry in tree.iter() {
                let Ok((_, value)) = entry else { break };
                if let Ok(record) = serde_json::from_slice::<WorkspaceRecord>(&value) {
                    roots.entry(record.id).or_insert(record.root);
                }
            }
        }
        let mut ledgers: BTreeMap<(String, String), Vec<LedgerEntry>> = BTreeMap::new();
        if let Ok(tree) = db.open_tree("ledger") {
            for entry in tree.iter() {
                let Ok((key, value)) = entry else { break };
                let Some(prefix) = key.get(..key.len().saturating_sub(8)).and_then(|k| std::str::from_utf8(k).ok())
                else {
                    continue;
                };
                let Some((workspace, task)) = prefix.strip_suffix('/').and_then(|k| k.split_once('/')) else {
                    continue;
                };
                if let Ok(record) = serde_json::from_slice::<LedgerEntry>(&value) {
                    ledgers.entry((workspace.to_string(), task.to_string())).or_default().push(record);
                }
            }
        }
        for ((workspace, task), entries) in ledgers {
            offer(found, &workspace, &task, entries, "database");
        }
    }));
    let _ = std::fs::remove_dir_all(&copy);
}

/// Ledgers exported by `scafld session <task> --export` (the default path) in one workspace.
fn read_exports(workspace: &str, root: &Path, found: &mut Found) {
    let Ok(runs) = std::fs::read_dir(root.join(".scafld/runs")) else { return };
    for run in runs.flatten() {
        let path = run.path().join("ledger.json");
        let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
        if !meta.is_file() || meta.len() > 64 << 20 {
            continue;
        }
        let Ok(document) = std::fs::read(&path)
            .map_err(|_| ())
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).map_err(|_| ()))
        else {
            continue;
        };
        if document.get("workspace_id").and_then(|v| v.as_str()).is_some_and(|id| id != workspace) {
            continue;
        }
        // The id names the folder it was exported to, and must be a valid one.
        let Some(task) = document.get("task_id").and_then(|v| v.as_str()) else { continue };
        if crate::domain::task_id::TaskId::parse(task).is_err() || run.file_name().to_str() != Some(task) {
            continue;
        }
        let Some(entries) = document.get("entries").cloned() else { continue };
        if let Ok(entries) = serde_json::from_value::<Vec<LedgerEntry>>(entries) {
            offer(found, workspace, task, entries, "export");
        }
    }
}

pub(super) fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else if entry.file_type()?.is_file() {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}
