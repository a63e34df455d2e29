//! `scafldd --recover`: rebuild a damaged database from what is still readable, keeping the
//! damaged copy. The new database is built beside the old one and swapped in once whole
//! (`swap_in`), so a recovery cut short never leaves an empty database to be served. Sources per
//! task: the ledger entries that still read back from the damaged database (a copy of it is
//! opened, never the original) and from the copies earlier refused starts kept (the database's
//! own win where they disagree); then a ledger exported under `.scafld/runs/<task>/ledger.json`
//! in every workspace the database or its manifest knew, which only fills what the database
//! lost and is refused (and reported) when it contradicts the database or runs past the
//! manifest's head (`domain::recovery`). What was lost is reported against the manifest. Jobs
//! and review sessions are not rebuilt (a review is simply run again).

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use super::manifest::{self, Manifest, head_key};
use super::{SledStore, Store, StoreError, WorkspaceRecord};
use crate::domain::ledger::LedgerEntry;
use crate::domain::recovery::{self, Head};

/// What a recovery did, for the user.
#[derive(Debug, Default)]
pub struct Report {
    /// Where the damaged database (and its manifest) now are.
    pub kept: Option<PathBuf>,
    pub workspaces: usize,
    /// Every ledger rebuilt.
    pub restored: Vec<Restored>,
    /// `(workspace/task, export path, why)` for every export refused: one that cannot be
    /// read or is no ledger export of its folder's task, or one `domain::recovery` refused.
    pub refused: Refused,
    /// Ledgers that could not be rebuilt whole, against the manifest.
    pub lost: Vec<String>,
    /// Whether a manifest was read: without one, what was lost cannot be told, and only the
    /// workspaces a database copy names are searched for exports.
    pub had_manifest: bool,
    /// Why a manifest that was there could not be read (it is kept beside the damaged copy).
    pub unreadable_manifest: Option<String>,
}

/// One task's rebuilt ledger.
#[derive(Debug)]
pub struct Restored {
    /// `workspace/task`.
    pub key: String,
    pub entries: usize,
    /// Sequence numbers of the entries taken from the export (the rest are the database's).
    pub from_export: Vec<u64>,
    /// Whether those were taken with nothing to check their content against.
    pub unchecked: bool,
}

impl Restored {
    /// Where the entries came from, for a person: `from the database`, `from the export`, or
    /// both with the exported entries named.
    pub fn source(&self) -> String {
        let unchecked = if self.unchecked { ", unchecked: nothing recorded to hold it against" } else { "" };
        if self.from_export.is_empty() {
            "from the database".into()
        } else if self.from_export.len() == self.entries {
            format!("from the export{unchecked}")
        } else {
            let word = if self.from_export.len() == 1 { "entry" } else { "entries" };
            format!(
                "from the database and the export ({word} {} from the export{unchecked})",
                recovery::ranges(&self.from_export)
            )
        }
    }
}

/// Per task (`(workspace id, task id)`): every entry the database copies still hold, by
/// sequence number.
type Held = BTreeMap<(String, String), BTreeMap<u64, LedgerEntry>>;

/// Per task: an exported ledger and where it was read.
type Exports = BTreeMap<(String, String), (Vec<LedgerEntry>, PathBuf)>;

/// `(workspace/task, export path, why)` per export refused.
type Refused = Vec<(String, PathBuf, String)>;

/// The copies of the database kept aside by refused starts and earlier recoveries.
pub fn earlier_copies(db_dir: &Path) -> Vec<PathBuf> {
    let prefix = format!("{}.damaged-", super::dir_name(db_dir));
    std::fs::read_dir(db_dir.parent().unwrap_or(Path::new(".")))
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir() && p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&prefix)))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the database opens and holds everything its manifest records, with no copy kept
/// aside to salvage: then a recovery has nothing to restore. Opening a damaged one keeps it
/// aside as it was, as a refused start does (the recovery then reads that copy).
pub fn healthy(db_dir: &Path) -> bool {
    let salvaged = salvaged(db_dir);
    db_dir.is_dir()
        && manifest::path_for(db_dir).is_file()
        && earlier_copies(db_dir).iter().all(|copy| salvaged.contains(&super::dir_name(copy)))
        && SledStore::open(db_dir).is_ok()
}

/// The file naming the kept copies a finished recovery has read (and the one it moved aside),
/// which a later one need not run for.
fn salvaged_list(db_dir: &Path) -> PathBuf {
    db_dir.with_file_name(format!("{}.salvaged", super::dir_name(db_dir)))
}

fn salvaged(db_dir: &Path) -> std::collections::BTreeSet<String> {
    let text = std::fs::read_to_string(salvaged_list(db_dir)).unwrap_or_default();
    text.lines().map(str::to_string).collect()
}

pub fn recover(db_dir: &Path) -> Result<Report, StoreError> {
    let manifest_path = manifest::path_for(db_dir);
    // A manifest that does not read as one is no record to check against; the workspaces it
    // still names are searched all the same (what they export is then taken unchecked).
    let (loaded, unreadable) = match Manifest::load(&manifest_path) {
        Ok(loaded) => (loaded, None),
        Err(why) => (None, Some(why)),
    };
    let has_manifest = loaded.is_some();
    let named = unreadable.as_ref().map(|_| workspaces_named(&manifest_path)).unwrap_or_default();
    let recorded = loaded.unwrap_or_default();
    let mut report = Report { had_manifest: has_manifest, unreadable_manifest: unreadable, ..Report::default() };
    let mut roots: BTreeMap<String, String> = recorded.workspaces.clone();
    roots.extend(named);
    let mut held = Held::new();
    let mut exports = Exports::new();

    // Copies kept by refused starts (as they were before sled touched them) are read too.
    let kept_copies = earlier_copies(db_dir);
    // The database itself is read first: where copies disagree, its entries stand.
    let current = db_dir.is_dir().then(|| db_dir.to_path_buf());
    for copy in current.iter().chain(&kept_copies) {
        salvage(copy, &mut roots, &mut held);
    }
    let mut by_root: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (id, root) in &roots {
        by_root.entry(root.as_str()).or_default().push(id.as_str());
    }
    for (root, workspaces) in &by_root {
        read_exports(Path::new(root), workspaces, &mut exports, &mut report.refused);
    }

    // Rebuilt beside the database, which stays in place until the new one is whole
    // (`swap_in`): a recovery cut short leaves what a start refuses, never an empty database.
    let scratch = scratch_for(db_dir);
    remove_scratch(&scratch)?;
    let store = SledStore::open(&scratch)?;
    for (id, root) in &roots {
        store.save_workspace(&WorkspaceRecord { id: id.clone(), root: root.clone(), scafld: None })?;
    }
    report.workspaces = roots.len();
    let mut tasks: Vec<(String, String)> = held.keys().chain(exports.keys()).cloned().collect();
    tasks.sort();
    tasks.dedup();
    let none = BTreeMap::new();
    for task in tasks {
        let key = head_key(&task.0, &task.1);
        // A ledger an earlier recovery lost (and no new one replaced) is held to what was
        // recorded before it.
        let lost = recorded.lost.get(&key).filter(|_| !recorded.heads.contains_key(&key));
        let head = match recorded.heads.get(&key).or(lost.map(|l| &l.head)) {
            Some(&head) => Head::Recorded(head),
            None if has_manifest => Head::Unrecorded,
            None => Head::NoManifest,
        };
        let export = exports.get(&task);
        let digests = recovery::Digests {
            head: recorded.digests.get(&key).or(lost.and_then(|l| l.digest.as_ref())).map(String::as_str),
            exported: recorded.exported.get(&key).map(|point| (point.seq, point.digest.as_str())),
        };
        let kept = recovery::keep(held.get(&task).unwrap_or(&none), export.map(|(e, _)| e.as_slice()), head, digests);
        if let (Some(reason), Some((_, path))) = (kept.refused, export) {
            report.refused.push((key.clone(), path.clone(), reason));
        }
        if kept.entries.is_empty() {
            continue;
        }
        let count = kept.entries.len();
        store.import(&task.0, &task.1, kept.entries.into_iter().map(|e| (e.recorded_at, e.event)).collect())?;
        report.restored.push(Restored {
            key,
            entries: count,
            from_export: kept.from_export,
            unchecked: kept.unchecked,
        });
    }
    let restored: BTreeMap<&str, usize> = report.restored.iter().map(|r| (r.key.as_str(), r.entries)).collect();
    // What was recorded, this time or before an earlier recovery lost it, and is not back: the
    // loss is reported and stays on record, so that its export can still restore it once it
    // can be read (a workspace moved back, say).
    let recorded_heads = recorded.heads.iter().map(|(key, &head)| (key, head, recorded.digests.get(key).cloned()));
    let earlier = recorded
        .lost
        .iter()
        .filter(|(key, _)| !recorded.heads.contains_key(*key))
        .map(|(key, lost)| (key, lost.head, lost.digest.clone()));
    let mut still_lost = BTreeMap::new();
    for (key, head, digest) in recorded_heads.chain(earlier) {
        let have = restored.get(key.as_str()).copied().unwrap_or(0) as u64;
        if have < head && !still_lost.contains_key(key) {
            report.lost.push(format!("{key}: {have} of {head} ledger entries restored"));
            still_lost.insert(key.clone(), manifest::LostLedger { head, digest });
        }
    }
    // Where exports end stays on record too: a later recovery holds them to it.
    store.manifest.note(|m| {
        m.lost.extend(still_lost);
        m.exported.extend(recorded.exported.clone());
    });
    store.manifest.save()?;
    drop(store);
    report.kept = swap_in(db_dir, &scratch)?;
    // Every kept copy is read now: a later recovery of the database as it stands has nothing
    // to restore from them (a new refused start's copy is not on the list).
    let read: Vec<String> = kept_copies.iter().chain(&report.kept).map(|copy| super::dir_name(copy)).collect();
    let mut list = salvaged(db_dir);
    list.extend(read);
    let _ = std::fs::write(salvaged_list(db_dir), list.into_iter().map(|n| n + "\n").collect::<String>());
    for (id, root) in &roots {
        if !Path::new(root).is_dir() {
            report
                .lost
                .push(format!("workspace {id}: its folder {root} is not there (moved?), so its exports were not read"));
        }
    }
    Ok(report)
}

/// Where a recovery builds the new database: beside the old one, under a name no start reads.
fn scratch_for(db_dir: &Path) -> PathBuf {
    db_dir.with_file_name(format!("{}.rebuilding", super::dir_name(db_dir)))
}

/// Remove what a recovery cut short left in `scratch` (the folder and its manifest).
fn remove_scratch(scratch: &Path) -> std::io::Result<()> {
    let gone = |result: std::io::Result<()>| match result {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    };
    gone(std::fs::remove_dir_all(scratch))?;
    gone(std::fs::remove_file(manifest::path_for(scratch)))
}

/// Put the database rebuilt in `scratch` (closed, its manifest saved) in the place of `db_dir`,
/// keeping the old database and its manifest aside as `<name>.damaged-<time>`; returns where
/// the old database went, if there was one. Renames are atomic but two cannot be, so they come
/// in an order where every state a kill in between leaves is one a start refuses, with
/// `scafldd --recover` as the way out, or serves in full:
///
/// 1. the old manifest copied beside the kept name: nothing else changed yet;
/// 2. the new manifest over the old one: the old database stays (a start serves it only if it
///    holds everything the rebuilt one does);
/// 3. the old database moved aside: no database beside a manifest recording what the rebuilt one
///    holds, which a start refuses unless that is nothing;
/// 4. the rebuilt database moved in.
///
/// A recovery run again reads the copy moved aside as it reads any kept by a refused start.
fn swap_in(db_dir: &Path, scratch: &Path) -> std::io::Result<Option<PathBuf>> {
    let manifest_path = manifest::path_for(db_dir);
    let kept = super::aside(db_dir, "damaged");
    // Kept even with no database to move aside: the manifest as it was, for a later recovery.
    if manifest_path.exists() {
        std::fs::copy(&manifest_path, manifest::path_for(&kept))?;
    }
    std::fs::rename(manifest::path_for(scratch), &manifest_path)?;
    let moved = match db_dir.exists() {
        true => {
            std::fs::rename(db_dir, &kept)?;
            Some(kept)
        }
        false => None,
    };
    std::fs::rename(scratch, db_dir)?;
    Ok(moved)
}

/// The workspaces (id → root) a manifest that does not read whole still names.
fn workspaces_named(path: &Path) -> BTreeMap<String, String> {
    let text = scafld_local::capped::read(path, "manifest", 64 << 20).unwrap_or_default();
    let document: serde_json::Value = serde_json::from_slice(&text).unwrap_or_default();
    let named = document.get("workspaces").and_then(serde_json::Value::as_object).cloned().unwrap_or_default();
    named.into_iter().filter_map(|(id, root)| Some((id, root.as_str()?.to_string()))).collect()
}

/// Read what still reads back from a copy of the damaged database; stop a tree at its first
/// unreadable record, and survive the engine panicking.
fn salvage(kept: &Path, roots: &mut BTreeMap<String, String>, held: &mut Held) {
    let copy = kept.with_extension("salvage");
    let _ = std::fs::remove_dir_all(&copy);
    if copy_dir(kept, &copy).is_err() {
        return;
    }
    // The copy is scratch: an unfinished snapshot in it would make sled refuse all of it.
    for unfinished in super::unfinished_snapshots(&copy).unwrap_or_default() {
        let _ = std::fs::remove_file(unfinished);
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
                    let task = held.entry((workspace.to_string(), task.to_string())).or_default();
                    task.entry(record.seq).or_insert(record);
                }
            }
        }
    }));
    let _ = std::fs::remove_dir_all(&copy);
}

/// The most an export may hold: a ledger past it is no export `session --export` wrote.
const MAX_EXPORT_BYTES: u64 = 64 << 20;

/// Ledgers exported by `scafld session <task> --export` (the default path) in the folder
/// `root`, which the database knew as each workspace of `workspaces`. An export names its
/// workspace and goes to it alone (one without a `workspace_id`, to each); every
/// `.scafld/runs/<task>/ledger.json` that cannot be used (unreadable, not a regular file,
/// over 64 MiB, not UTF-8, not JSON, not a ledger export of this folder's task) is refused
/// with the reason, never passed over in silence.
fn read_exports(root: &Path, workspaces: &[&str], exports: &mut Exports, refused: &mut Refused) {
    let Some(&first) = workspaces.first() else { return };
    let runs = root.join(".scafld/runs");
    let listing = match std::fs::read_dir(&runs) {
        Ok(listing) => listing,
        Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory) => return,
        Err(e) => {
            let why = format!("the folder cannot be listed ({e}), so none of its exports were read");
            refused.push((head_key(first, "*"), runs, why));
            return;
        }
    };
    for run in listing.flatten() {
        let path = run.path().join("ledger.json");
        let folder = run.file_name().to_string_lossy().into_owned();
        let document = match read_export(&path) {
            Ok(Some(document)) => document,
            Ok(None) => continue,
            Err(why) => {
                refused.push((head_key(first, &folder), path, why));
                continue;
            }
        };
        let owners: Vec<&str> = match document.get("workspace_id") {
            None => workspaces.to_vec(),
            Some(serde_json::Value::String(id)) if workspaces.contains(&id.as_str()) => vec![id.as_str()],
            Some(other) => {
                let why = format!(
                    "exported from workspace {other}, not {} (the workspace the database knew at {})",
                    workspaces.join(" or "),
                    root.display()
                );
                refused.push((head_key(first, &folder), path, why));
                continue;
            }
        };
        let key = |workspace: &str| head_key(workspace, &folder);
        let entries = match ledger_of(&document, &folder) {
            Ok(entries) => entries,
            Err(why) => {
                refused.push((key(owners[0]), path, format!("not a ledger export of task {folder:?}: {why}")));
                continue;
            }
        };
        for workspace in owners {
            exports.insert((workspace.to_string(), folder.clone()), (entries.clone(), path.clone()));
        }
    }
}

/// The JSON document at `path`: `None` when there is nothing there (no export), why it
/// cannot be read otherwise. A symlink is not followed.
fn read_export(path: &Path) -> Result<Option<serde_json::Value>, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        // A run folder with no export, or a file where a run folder would be.
        Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory) => {
            return Ok(None);
        }
        Err(e) => return Err(format!("cannot be read: {e}")),
    };
    let kind = meta.file_type();
    if !kind.is_file() {
        let what = if kind.is_dir() {
            "a directory"
        } else if kind.is_symlink() {
            "a symbolic link (not followed)"
        } else {
            "a special file"
        };
        return Err(format!("not a regular file but {what}"));
    }
    let too_big = |size: u64| format!("{size} bytes, over the {MAX_EXPORT_BYTES} an export may hold");
    if meta.len() > MAX_EXPORT_BYTES {
        return Err(too_big(meta.len()));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
        .map_err(|e| format!("cannot be read: {e}"))?;
    // Read up to the cap and one byte more: a file that grew since its size was read.
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_EXPORT_BYTES + 1).read_to_end(&mut bytes).map_err(|e| format!("cannot be read: {e}"))?;
    if bytes.len() as u64 > MAX_EXPORT_BYTES {
        return Err(too_big(bytes.len() as u64));
    }
    let text = std::str::from_utf8(&bytes).map_err(|e| format!("not UTF-8 (byte {} is not)", e.valid_up_to()))?;
    serde_json::from_str(text).map(Some).map_err(|e| format!("not JSON ({e})"))
}

/// The entries of an export read from the run folder `folder`, sorted; why it is no export
/// of that task otherwise.
fn ledger_of(document: &serde_json::Value, folder: &str) -> Result<Vec<LedgerEntry>, String> {
    // The id names the folder it was exported to, and must be a valid one.
    let task = document.get("task_id").and_then(|v| v.as_str()).ok_or("no task_id")?;
    if let Err(e) = crate::domain::task_id::TaskId::parse(task) {
        return Err(format!("its task_id is no task id ({e})"));
    }
    if task != folder {
        return Err(format!("its task_id is {task:?}, not the folder's name"));
    }
    let entries = document.get("entries").cloned().ok_or("no entries")?;
    let mut entries =
        serde_json::from_value::<Vec<LedgerEntry>>(entries).map_err(|e| format!("its entries do not read ({e})"))?;
    entries.sort_by_key(|e| e.seq);
    Ok(entries)
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
