//! The in-memory index of every spec of one workspace. It starts empty when the workspace
//! opens (so the first call does not wait for a whole workspace to be parsed): single-task
//! calls load their one spec on demand, a background warm-up or the first whole-workspace call
//! loads the rest, and from then on it is updated one file at a time (by the watcher and by
//! the daemon's own writes), so that requests never re-parse the whole workspace.
//!
//! An entry keeps only what whole-workspace reads need (a [`Listing`]: a few hundred bytes);
//! the full parse is kept for the specs used most recently ([`RECENT_PARSES`]) and read again
//! from the file when a single-task call needs one that was let go.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crate::domain::evidence::Definition;
use crate::domain::ledger::{LedgerState, Marks};
use crate::domain::lifecycle::{Folder, HardenStatus, Status};
use crate::domain::spec::budget::MAX_SPEC_BYTES;
use crate::domain::spec::{Diagnostic, Dialect, Parsed, Severity, parse, progress_of};
use crate::workspace::specfile;
use crate::workspace::tripwire::{Armed, TRUST_FOR, Tripwire};
use scafld_local::capped::size;
use scafld_protocol::methods::Counts;

/// How many specs keep their whole parse in memory, most recently used first.
pub const RECENT_PARSES: usize = 64;

/// Whether a file may have changed since it was read: size, inode and both nanosecond
/// timestamps. The change time cannot be set by a user (unlike the modification time), and an
/// atomic rename gives a new inode, so a rewrite of the same size within one clock tick is
/// still seen. This only decides when to re-read; the content read is what counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    len: u64,
    inode: u64,
    modified: (i64, i64),
    changed: (i64, i64),
}

impl Stamp {
    pub fn of(path: &Path) -> Option<Stamp> {
        std::fs::metadata(path).ok().map(|meta| Stamp::from(&meta))
    }

    /// Whether both name the same file with the same content, as far as a stamp tells: all
    /// but the change time, which a rename sets.
    fn same_file(&self, other: &Stamp) -> bool {
        (self.len, self.inode, self.modified) == (other.len, other.inode, other.modified)
    }

    /// Whether the file was last changed long enough ago (more than a second) that a later
    /// change cannot share its modification time: only then may an unchanged stamp stand for
    /// unchanged content.
    pub fn settled(&self) -> bool {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        i64::try_from(now.as_secs()).unwrap_or(i64::MAX).saturating_sub(self.modified.0) >= 2
    }
}

impl From<&std::fs::Metadata> for Stamp {
    fn from(meta: &std::fs::Metadata) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        Stamp {
            len: meta.len(),
            inode: meta.ino(),
            modified: (meta.mtime(), meta.mtime_nsec()),
            changed: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// What an entry keeps of its spec's parse: what `list`, `report` and `validate --all` read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Listing {
    pub status: Option<Status>,
    pub harden: HardenStatus,
    pub title: String,
    /// Each phase's id, `Status` and criteria, in document order, as the file says.
    pub phases: Vec<ListedPhase>,
    /// Each criterion's id, `Status` and definition, in
    /// [`Spec::criteria`](crate::domain::spec::Spec::criteria) order, as the file says.
    pub criteria: Vec<Listed>,
    /// Every diagnostic of the parse (the file-name check included), in document order.
    pub diagnostics: Vec<Diagnostic>,
    /// Whose words the file speaks (Python's `in_progress` says active, blocked and review).
    pub dialect: Dialect,
}

impl Listing {
    fn of(parsed: &Parsed) -> Listing {
        let spec = &parsed.spec;
        Listing {
            dialect: Dialect::of(spec),
            status: spec.status(),
            harden: spec.harden_status(),
            title: spec.title.clone(),
            phases: spec
                .phases
                .iter()
                .map(|p| ListedPhase {
                    id: p.id(),
                    status: p.status.clone(),
                    criteria: p.criteria.iter().map(|c| c.id.clone()).collect(),
                })
                .collect(),
            criteria: spec
                .criteria()
                .map(|c| Listed { id: c.id.clone(), status: c.status.clone(), definition: Definition::of(c) })
                .collect(),
            diagnostics: parsed.diagnostics.clone(),
        }
    }

    /// How far the phases and criteria are, as the file says.
    pub fn progress(&self) -> Counts {
        progress_of(self.phases.iter().map(|p| p.status.as_str()), self.criteria.iter().map(|c| c.status.as_str()))
    }

    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics.iter().filter(|d| d.severity == Severity::Error)
    }

    /// Whether the file says `status`, in its own dialect's words.
    pub fn says(&self, status: Status) -> bool {
        self.status.is_some_and(|file| self.dialect.says(file, status))
    }
}

/// A phase as a [`Listing`] keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedPhase {
    pub id: String,
    pub status: String,
    /// The ids of the criteria it holds.
    pub criteria: Vec<String>,
}

/// A criterion as a [`Listing`] keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    pub id: String,
    pub status: String,
    /// What it runs, to tell a result on record for another definition from one for this.
    pub definition: Definition,
}

#[derive(Debug, Clone)]
pub struct SpecEntry {
    pub task_id: String,
    pub path: PathBuf,
    pub folder: Folder,
    pub listing: Arc<Listing>,
    /// A read error (the file vanished, is not UTF-8, ...) instead of a parse: an error of
    /// the file as a whole (line 0), or of the line it names.
    pub read_error: Option<Diagnostic>,
    /// Every other file claiming the same task id, in lookup order after `path`, which owns
    /// the id ([`specfile::lookup_order`]); empty for a task in one file.
    pub duplicates: Vec<PathBuf>,
    stamp: Option<Stamp>,
    /// The whole parse, while the spec is among the most recently used.
    parsed: Option<Arc<Parsed>>,
}

impl SpecEntry {
    /// The error of a task in more than one file, naming every one (from `.scafld/` on).
    pub fn duplicate_error(&self) -> Option<String> {
        if self.duplicates.is_empty() {
            return None;
        }
        let others: Vec<String> = self.duplicates.iter().map(|p| specfile::shown(p)).collect();
        let none = if others.len() == 1 { "neither" } else { "none" };
        Some(format!("{}; {none} is moved or removed, keep one", in_files(&specfile::shown(&self.path), &others)))
    }

    /// The first problem that makes this spec unusable, if any.
    pub fn first_error(&self) -> Option<String> {
        if let Some(e) = &self.read_error {
            return Some(e.message.clone());
        }
        if let Some(message) = self.duplicate_error() {
            return Some(message);
        }
        self.listing.errors().next().map(ToString::to_string)
    }
}

/// "the task is in two files: `owner` (read as its spec: ...) and `others`": every file of a
/// task in more than one, the one read first (the one wording `status`, `list` and the
/// refusals share).
pub fn in_files(owner: &str, others: &[String]) -> String {
    let count = match others.len() + 1 {
        2 => "two".to_string(),
        3 => "three".to_string(),
        n => n.to_string(),
    };
    let owner = format!("{owner} (read as its spec: the first in lookup order)");
    format!("the task is in {count} files: {}", and_list(&[&[owner], others].concat()))
}

/// "a, b and c".
pub fn and_list<S: AsRef<str>>(items: &[S]) -> String {
    match items.split_last() {
        Some((last, [])) => last.as_ref().to_string(),
        Some((last, rest)) => {
            format!("{} and {}", rest.iter().map(AsRef::as_ref).collect::<Vec<_>>().join(", "), last.as_ref())
        }
        None => String::new(),
    }
}

/// A file on disk claiming a task id (its name): where it is, and its stamp (`None`: it could
/// not be read, a dangling symlink for one).
struct OnDisk<'a> {
    path: &'a Path,
    folder: Folder,
    stamp: Option<Stamp>,
}

/// One task's entry with its whole parse: what single-task calls work from.
#[derive(Debug, Clone)]
pub struct LoadedSpec {
    pub entry: SpecEntry,
    pub parsed: Arc<Parsed>,
}

impl std::ops::Deref for LoadedSpec {
    type Target = SpecEntry;

    fn deref(&self) -> &SpecEntry {
        &self.entry
    }
}

#[derive(Debug, Default)]
pub struct Index {
    root: PathBuf,
    entries: BTreeMap<String, SpecEntry>,
    /// Every spec on disk has been loaded at least once. Until then `entries` holds only the
    /// tasks single-task calls asked for, and a task missing from it may still exist.
    complete: bool,
    /// The tasks whose entries keep their parse, least recently used first.
    recent: VecDeque<String>,
    /// The change queue that lets [`Index::catch_up`] skip its stats while it stays quiet.
    tripwire: Option<Arc<Tripwire>>,
    /// When the last whole sync began with the queue armed over every folder (and on which
    /// folders), if it found only specs the queue can vouch for (regular files with one link).
    trust: Option<(Instant, Armed)>,
    /// The archive's folders ([`specfile::archive_folders`]) and each one's stamp when they were
    /// listed (settled stamps only): checking the stamps is a stat per folder, where listing is
    /// an open and reads of each.
    months: Option<(Vec<Stamp>, Vec<PathBuf>)>,
    /// Bumped by every change to what an entry lists (see [`Index::generation`]).
    generation: u64,
    /// What the ledger says of each task that has one: the truth for its lifecycle status,
    /// which whole-workspace reads (`list`, `report`) follow from memory, file or no file.
    /// Read from the store once ([`Index::take_ledger`]), then told of every append
    /// ([`Index::note_ledger`]); ledgers are never forgotten, so neither is an entry here.
    ledger: BTreeMap<String, LedgerState>,
    /// Every ledger of the workspace has been read into `ledger`.
    ledger_loaded: bool,
    /// What the last whole sync could not read under the spec folders, for whole-workspace
    /// reads to name.
    unlisted: Vec<specfile::Unlisted>,
}

/// One task as whole-workspace reads see it: its spec file's entry, what its ledger says, or
/// both ([`Index::tasks`]).
#[derive(Debug, Clone, Copy)]
pub struct Task<'a> {
    pub id: &'a str,
    pub spec: Option<&'a SpecEntry>,
    pub ledger: Option<&'a LedgerState>,
}

impl Task<'_> {
    /// The lifecycle status: the ledger's where it has a say, else the file's (`None`: a spec
    /// too broken to say, and no ledger).
    pub fn status(&self) -> Option<Status> {
        self.ledger.map(|l| l.status).or_else(|| self.spec.and_then(|e| e.listing.status))
    }

    /// The status the spec file's front matter says, when it differs from the ledger's (a hand
    /// edit to a runner-owned line, which `reconcile` undoes).
    pub fn file_disagrees(&self) -> Option<Status> {
        let listing = &self.spec?.listing;
        let file = listing.status?;
        (!listing.says(self.ledger?.status)).then_some(file)
    }

    /// How far the spec's phases and criteria are, as the ledger records them (the truth, as
    /// `status` counts): a task without a ledger has recorded nothing, so whatever its file
    /// marks done (by hand, or another tool) counts pending, and a result that ran another
    /// definition than the one the file holds now counts pending, as the file shows it
    /// ([`Marks::shown`]). Without a file, what its ledger has records of, every result
    /// stale ([`Marks::without_spec`]); `None` with neither.
    pub fn progress(&self) -> Option<Counts> {
        let Some(spec) = self.spec else { return self.ledger.map(|ledger| ledger.marks.without_spec()) };
        let listing = &spec.listing;
        let none = Marks::default();
        let marks = self.ledger.map_or(&none, |ledger| &*ledger.marks);
        Some(progress_of(
            listing.phases.iter().map(|p| marks.phase(&p.id, p.criteria.iter().map(String::as_str))),
            listing.criteria.iter().map(|c| marks.shown(&c.id, &c.definition)),
        ))
    }

    /// What the spec file's phase and criterion states count, when that differs from what the
    /// ledger's count (a hand edit to a runner-owned line, a projection not written yet, or
    /// marks in a file with no ledger, which `reconcile` puts right). A state that differs
    /// without changing a count (a phase the file calls `pending` that the ledger opened) is no
    /// disagreement of counts, and neither is a criterion the file shows pending beside a
    /// definition edited since its result ran: that is what `reconcile` writes.
    pub fn file_progress_disagrees(&self) -> Option<Counts> {
        let listing = &self.spec?.listing;
        // A finished task with no ledger here (run by the original tool, say) keeps the record
        // its file holds: `reconcile` leaves it, so nothing is pointed at it.
        if self.ledger.is_none() && listing.status.is_some_and(|s| Folder::of(s) == Folder::Archive) {
            return None;
        }
        let file = listing.progress();
        (self.progress().as_ref() != Some(&file)).then_some(file)
    }
}

impl Index {
    /// An index that has loaded nothing yet.
    pub fn new(root: &Path) -> Index {
        Index { root: root.to_path_buf(), ..Index::default() }
    }

    /// [`Index::new`] whose whole-workspace reads may rely on `tripwire`.
    pub fn watched(root: &Path, tripwire: Option<Arc<Tripwire>>) -> Index {
        Index { tripwire, ..Index::new(root) }
    }

    /// The change queue the workspace is watched by, if any.
    pub fn tripwire(&self) -> Option<Arc<Tripwire>> {
        self.tripwire.clone()
    }

    /// An index of every spec under `root`, read now.
    pub fn build(root: &Path) -> Index {
        let mut index = Index::new(root);
        index.sync();
        index
    }

    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// A number that changes whenever what any entry lists (its listing, path, duplicate)
    /// changes, or an entry comes or goes: a rendering of the entries stays true while it holds.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The entries, for a change to what they list. (Keeping or dropping a parse goes to the
    /// map directly: it lists the same.)
    fn entries_mut(&mut self) -> &mut BTreeMap<String, SpecEntry> {
        self.generation += 1;
        &mut self.entries
    }

    /// Take in a full index built without the lock held (the warm-up). Entries loaded here
    /// meanwhile are newer and stay; the rest come from `built`. One that went stale between
    /// the two is still caught: every use stats its file first.
    pub fn absorb(&mut self, built: Index) {
        if self.complete {
            return;
        }
        for (task_id, entry) in built.entries {
            self.entries_mut().entry(task_id).or_insert(entry);
        }
        self.unlisted = built.unlisted;
        self.complete = true;
    }

    /// What the last whole sync could not read under the spec folders (a folder without
    /// permission, ...): specs there are in no entry.
    pub fn unlisted(&self) -> &[specfile::Unlisted] {
        &self.unlisted
    }

    pub fn get(&self, task_id: &str) -> Option<&SpecEntry> {
        self.entries.get(task_id)
    }

    /// `task_id`'s entry with its whole parse, read again from the file when it was let go.
    /// It becomes the most recently used; the least recent beyond [`RECENT_PARSES`] lets go.
    pub fn loaded(&mut self, task_id: &str) -> Option<LoadedSpec> {
        let entry = self.entries.get(task_id)?;
        if entry.parsed.is_none() {
            let (path, folder, stamp) = (entry.path.clone(), entry.folder, entry.stamp);
            // Only the content is read again: duplicates found earlier stay on record.
            let fresh = SpecEntry {
                duplicates: entry.duplicates.clone(),
                ..self.read_entry(task_id.to_string(), &path, folder, true)
            };
            if fresh.stamp != stamp || stamp.is_none() {
                // The file changed since it was indexed (or could not be read): the caller gets
                // it as it is now, and the entry is left for the watcher or the next sync to
                // take in and announce as a change.
                let parsed = fresh.parsed.clone().unwrap_or_else(|| Arc::new(parse("")));
                return Some(LoadedSpec { entry: fresh, parsed });
            }
            // The same stamp lists the same, unless the file was rewritten within one tick.
            let relisted = entry.listing != fresh.listing;
            let entries = if relisted { self.entries_mut() } else { &mut self.entries };
            *entries.get_mut(task_id)? = fresh;
        }
        self.touch(task_id);
        let entry = self.entries.get(task_id)?.clone();
        let parsed = entry.parsed.clone().unwrap_or_else(|| Arc::new(parse("")));
        Some(LoadedSpec { entry, parsed })
    }

    /// Mark `task_id` most recently used; the least recent parse beyond the bound is dropped.
    fn touch(&mut self, task_id: &str) {
        if let Some(at) = self.recent.iter().position(|t| t == task_id) {
            self.recent.remove(at);
        }
        self.recent.push_back(task_id.to_string());
        while self.recent.len() > RECENT_PARSES {
            if let Some(old) = self.recent.pop_front()
                && let Some(entry) = self.entries.get_mut(&old)
            {
                entry.parsed = None;
            }
        }
    }

    fn keeps_parse(&self, task_id: &str) -> bool {
        self.recent.iter().any(|t| t == task_id)
    }

    pub fn entries(&self) -> impl Iterator<Item = &SpecEntry> {
        self.entries.values()
    }

    /// Every task by id: a spec file's, a ledger's, or both (the two sorted maps walked side by
    /// side: no lookup per row).
    pub fn tasks(&self) -> impl Iterator<Item = Task<'_>> {
        use std::cmp::Ordering;
        let mut specs = self.entries.iter().peekable();
        let mut ledgers = self.ledger.iter().peekable();
        std::iter::from_fn(move || {
            let order = match (specs.peek(), ledgers.peek()) {
                (None, None) => return None,
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (Some((spec, _)), Some((ledger, _))) => spec.cmp(ledger),
            };
            let (spec, ledger) = match order {
                Ordering::Less => (specs.next(), None),
                Ordering::Greater => (None, ledgers.next()),
                Ordering::Equal => (specs.next(), ledgers.next()),
            };
            let id = spec.map(|(id, _)| id).or(ledger.map(|(id, _)| id))?;
            Some(Task { id, spec: spec.map(|(_, e)| e), ledger: ledger.map(|(_, l)| l) })
        })
    }

    /// What the ledger says of `task_id`, if it has a ledger (and the ledgers were read).
    pub fn ledger_state(&self, task_id: &str) -> Option<LedgerState> {
        self.ledger.get(task_id).cloned()
    }

    /// Whether every ledger of the workspace has been read in ([`Index::take_ledger`]).
    pub fn ledger_loaded(&self) -> bool {
        self.ledger_loaded
    }

    /// Take in what `task_id`'s ledger says after an append. A state older than the one kept
    /// (learnt out of order: a read of the store that began before the append) changes nothing.
    pub fn note_ledger(&mut self, task_id: &str, state: LedgerState) {
        match self.ledger.get_mut(task_id) {
            Some(kept) if kept.seq >= state.seq => {}
            Some(kept) if (kept.status, &kept.marks) == (state.status, &state.marks) => kept.seq = state.seq,
            _ => {
                self.generation += 1;
                self.ledger.insert(task_id.to_string(), state);
            }
        }
    }

    /// Take in every ledger's state as read from the store, once; a newer one noted meanwhile
    /// stays.
    pub fn take_ledger(&mut self, states: impl IntoIterator<Item = (String, LedgerState)>) {
        if self.ledger_loaded {
            return;
        }
        for (task_id, state) in states {
            self.note_ledger(&task_id, state);
        }
        self.ledger_loaded = true;
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// [`Index::sync`] for a whole-workspace read, skipped when the change queue reports
    /// nothing in the spec folders since the last one (see `tripwire.rs` for why that is
    /// sound, and for what is never trusted to it).
    pub fn catch_up(&mut self) -> Vec<String> {
        let Some(wire) = self.tripwire.clone() else { return self.sync() };
        // Drained every time, so that an event is never left to trip a later read instead.
        let quiet = wire.quiet(&self.root);
        let trusted = self.trust.as_ref().is_some_and(|(since, armed)| since.elapsed() < TRUST_FOR && armed.in_place());
        if quiet && trusted && self.complete {
            return Vec::new();
        }
        self.trust = None;
        let started = Instant::now();
        // Armed before the stats, so that whatever changes during them trips the next read.
        let armed = wire.arm(&self.root);
        let (changed, all_vouched) = self.sync_scanned(false);
        if let Some(armed) = armed
            && all_vouched
        {
            self.trust = Some((started, armed));
        }
        changed
    }

    /// Bring the index in line with the disk without waiting for the watcher: list the spec
    /// folders, re-read only files whose stamp changed, drop vanished ones. Returns the
    /// task ids whose entries changed (a first load of a task nobody has seen yet is not a
    /// change).
    pub fn sync(&mut self) -> Vec<String> {
        self.sync_scanned(false).0
    }

    /// [`Index::sync`] for a watcher that lost track of the files one by one (a spec folder
    /// replaced whole, events lost to an overflow): every task whose entry changed, a first
    /// load included even while the index is still warming up, since nobody was told of it.
    pub fn resync(&mut self) -> Vec<String> {
        self.sync_scanned(true).0
    }

    /// The files of the entries in `dir` or below it (duplicates' second files included).
    pub fn paths_under(&self, dir: &Path) -> Vec<PathBuf> {
        let files = self.entries.values().flat_map(|e| std::iter::once(&e.path).chain(&e.duplicates));
        files.filter(|path| path.starts_with(dir)).cloned().collect()
    }

    /// [`Index::sync`] (with first loads reported when `first_loads`), and whether every spec
    /// found is one the change queue can vouch for: a regular file with one link (not a
    /// symlink to elsewhere, no second name it may be written through).
    fn sync_scanned(&mut self, first_loads: bool) -> (Vec<String>, bool) {
        let specfile::Scan { found: on_disk, unlisted } = specfile::scan(&self.root);
        if unlisted != self.unlisted {
            self.generation += 1;
            self.unlisted = unlisted;
        }
        // A folder that could not be read is one the change queue cannot vouch for either.
        let readable = !self.unlisted.iter().any(|u| matches!(u, specfile::Unlisted::Unreadable { .. }));
        let all_vouched = readable
            && on_disk.iter().all(|found| {
                use std::os::unix::fs::MetadataExt;
                found.meta.as_ref().is_some_and(|meta| meta.file_type().is_file() && meta.nlink() == 1)
            });
        // Every file by the task it claims (its name), so that a task is settled from all of
        // its files at once, never from whichever the scan met first.
        let mut claims: Vec<(&str, usize)> = on_disk
            .iter()
            .enumerate()
            .filter_map(|(at, found)| Some((found.path.file_stem()?.to_str()?, at)))
            .collect();
        claims.sort_unstable();
        let copy = |&(_, at): &(&str, usize)| {
            let found = &on_disk[at];
            // The metadata read through the directory is the stamp, unless the entry is a
            // symlink: its stamp is what it names.
            let stamp = match &found.meta {
                Some(meta) if !meta.file_type().is_symlink() => Some(Stamp::from(meta)),
                _ => Stamp::of(&found.path),
            };
            OnDisk { path: &found.path, folder: found.folder, stamp }
        };
        let mut changed = Vec::new();
        let mut claimed: Vec<&str> = Vec::new();
        for files in claims.chunk_by(|a, b| a.0 == b.0) {
            let task_id = files[0].0;
            claimed.push(task_id);
            let seen = first_loads || self.complete || self.entries.contains_key(task_id);
            let settled = match files {
                [one] => self.settle(task_id, &mut [copy(one)]),
                _ => self.settle(task_id, &mut files.iter().map(copy).collect::<Vec<_>>()),
            };
            if let Some(id) = settled
                && seen
            {
                changed.push(id);
            }
        }
        self.complete = true;
        // The tasks no file claims any more (`claimed` is sorted, as the scan's task ids were).
        let gone: Vec<String> =
            self.entries.keys().filter(|id| claimed.binary_search(&id.as_str()).is_err()).cloned().collect();
        for id in gone {
            self.entries_mut().remove(&id);
            changed.push(id);
        }
        (changed, all_vouched)
    }

    /// [`Index::sync`] for one task: only its possible paths are looked at (a stat per
    /// lifecycle folder and archive folder). A second copy in another folder (an interrupted
    /// move) is noticed here too, without waiting for the watcher.
    /// As with `sync`, loading a task for the first time before the index is complete is not
    /// reported as a change.
    pub fn sync_task(&mut self, task_id: &str) -> Option<String> {
        let seen = self.complete || self.entries.contains_key(task_id);
        self.settle_on_disk(task_id).filter(|_| seen)
    }

    /// The archive's folders (itself and those below it), listed again only when one of them
    /// changed (a folder's stamp moves when a name in it comes, goes or is renamed).
    fn archive_folders(&mut self) -> Vec<PathBuf> {
        let archive = specfile::specs_dir(&self.root).join(Folder::Archive.as_str());
        if let Some((kept, folders)) = &self.months
            && folders.iter().zip(kept).all(|(folder, kept)| Stamp::of(folder).as_ref() == Some(kept))
        {
            return folders.clone();
        }
        let folders = specfile::archive_folders(&archive);
        let stamps: Option<Vec<Stamp>> =
            folders.iter().map(|folder| Stamp::of(folder).filter(Stamp::settled)).collect();
        // Nothing kept for an archive that is not there: its coming shows in `specs`' stamp
        // only, which is not checked here.
        self.months = stamps.filter(|_| !folders.is_empty()).map(|stamps| (stamps, folders.clone()));
        folders
    }

    /// Re-read one changed path. Returns the task id whose entry changed, if any.
    pub fn refresh(&mut self, path: &Path) -> Option<String> {
        let folder = specfile::folder_of(&self.root, path)?;
        let task_id = task_id_of(path)?;
        self.refresh_found(path, folder, &task_id, Stamp::of(path))
    }

    /// [`Index::refresh`] with the path's folder, task id and stamp (`None`: it could not be
    /// read) known.
    fn refresh_found(&mut self, path: &Path, folder: Folder, task_id: &str, stamp: Option<Stamp>) -> Option<String> {
        // One stat in the usual case: a file that has a stamp exists; only without one is the
        // path looked at again (a dangling symlink still exists, and is reported).
        let exists = stamp.is_some() || std::fs::symlink_metadata(path).is_ok();
        let entry = self.entries.get(task_id);
        // The one file of its task: the file of an entry without a duplicate, or a new task
        // when every file on disk has been loaded (another of its files would have an entry).
        let alone = match entry {
            Some(entry) => entry.path == path && entry.duplicates.is_empty(),
            None => self.complete,
        };
        if exists && alone {
            return self.settle(task_id, &mut [OnDisk { path, folder, stamp }]);
        }
        let on_record = entry.is_some_and(|e| e.path == path || e.duplicates.iter().any(|d| d == path));
        if !exists && !on_record {
            return None;
        }
        // A second file of a task, one of its files removed (or moved away), a file of a task
        // with a duplicate edited: its files are looked for in every folder (a stat per folder
        // and archive folder, not a scan of every spec, which a thousand files moved by hand
        // would pay a thousand times) and the rule decides again.
        self.settle_on_disk(task_id)
    }

    /// Settle `task_id` from the files that claim it on disk now.
    fn settle_on_disk(&mut self, task_id: &str) -> Option<String> {
        let months = self.archive_folders();
        let found: Vec<(Folder, PathBuf, Option<Stamp>)> =
            specfile::candidates(&self.root, &format!("{task_id}.md"), &months)
                .into_iter()
                .filter_map(|(folder, path)| {
                    // A dangling symlink is still a file claiming the task (and is reported).
                    let meta = std::fs::symlink_metadata(&path).ok()?;
                    let stamp = if meta.file_type().is_symlink() { Stamp::of(&path) } else { Some(Stamp::from(&meta)) };
                    Some((folder, path, stamp))
                })
                .collect();
        let mut copies: Vec<OnDisk<'_>> =
            found.iter().map(|(folder, path, stamp)| OnDisk { path, folder: *folder, stamp: *stamp }).collect();
        self.settle(task_id, &mut copies)
    }

    /// Make `task_id`'s entry what `copies` (every file on disk claiming it, in any order)
    /// say: the first in lookup order ([`specfile::lookup_order`], the one rule) owns the
    /// id, the rest are its duplicates; no file, no entry. Only the owner is read, and only when
    /// it is not the file the entry already read (same stamp). Returns the task id when its
    /// entry changed.
    fn settle(&mut self, task_id: &str, copies: &mut [OnDisk<'_>]) -> Option<String> {
        copies.sort_by(|a, b| specfile::lookup_order(a.folder, a.path).cmp(&specfile::lookup_order(b.folder, b.path)));
        let Some(owner) = copies.first() else {
            if !self.entries.contains_key(task_id) {
                return None;
            }
            self.entries_mut().remove(task_id);
            return Some(task_id.to_string());
        };
        let duplicates: Vec<PathBuf> = copies[1..].iter().map(|other| other.path.to_path_buf()).collect();
        if let Some(entry) = self.entries.get(task_id)
            && entry.path == owner.path
            && entry.stamp.is_some()
            && entry.stamp == owner.stamp
        {
            if entry.duplicates == duplicates {
                return None;
            }
            self.entries_mut().get_mut(task_id).expect("present").duplicates = duplicates;
            return Some(task_id.to_string());
        }
        let keep = self.keeps_parse(task_id);
        let entry = SpecEntry { duplicates, ..self.read_entry(task_id.to_string(), owner.path, owner.folder, keep) };
        self.entries_mut().insert(task_id.to_string(), entry);
        Some(task_id.to_string())
    }

    /// Record a spec the daemon itself just wrote (`previous` is where it was before a move;
    /// `written`, the new file's metadata as written).
    pub fn record_write(&mut self, path: &Path, text: &str, previous: Option<&Path>, written: &std::fs::Metadata) {
        self.record_parsed(path, parse(text), previous, written);
    }

    /// [`Index::record_write`] with the written text already parsed (off the caller's path).
    pub fn record_parsed(&mut self, path: &Path, parsed: Parsed, previous: Option<&Path>, written: &std::fs::Metadata) {
        let Some(folder) = specfile::folder_of(&self.root, path) else { return };
        let Some(task_id) = task_id_of(path) else { return };
        // Another file of the task on record, neither the one written nor the one it moved from.
        let others = self.entries.get(&task_id).is_some_and(|entry| {
            std::iter::once(&entry.path)
                .chain(&entry.duplicates)
                .any(|other| other != path && Some(other.as_path()) != previous)
        });
        let keep = self.keeps_parse(&task_id);
        // A hand edit that replaced the file since it was written is not what was parsed: no
        // stamp, so that the next look at it reads it.
        let stamp = Stamp::of(path).filter(|now| now.same_file(&Stamp::from(written)));
        let entry = self.entry_from_parsed(task_id.clone(), path, folder, parsed, stamp, keep);
        self.entries_mut().insert(task_id.clone(), entry);
        if others {
            // Still a duplicate: the rule decides which file owns the task, as for any other.
            self.settle_on_disk(&task_id);
        }
    }

    /// Read and parse one spec file (stamped before it is read, so an edit during the read is
    /// seen next time); its parse is kept only when `keep`.
    fn read_entry(&self, task_id: String, path: &Path, folder: Folder, keep: bool) -> SpecEntry {
        let stamp = Stamp::of(path);
        let broken = |error: Diagnostic| SpecEntry {
            task_id: task_id.clone(),
            path: path.to_path_buf(),
            folder,
            listing: Arc::new(Listing::default()),
            read_error: Some(error),
            duplicates: Vec::new(),
            stamp,
            parsed: None,
        };
        match read_spec(&self.root, path) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => self.entry_from_text(task_id, path, folder, &text, stamp, keep),
                Err(e) => broken(crate::domain::spec::not_utf8(e.as_bytes(), &e.utf8_error())),
            },
            Err(e) => broken(Diagnostic::of_file(e)),
        }
    }

    /// The entry of `text`, read from `path` when it had `stamp`.
    fn entry_from_text(
        &self,
        task_id: String,
        path: &Path,
        folder: Folder,
        text: &str,
        stamp: Option<Stamp>,
        keep: bool,
    ) -> SpecEntry {
        self.entry_from_parsed(task_id, path, folder, parse(text), stamp, keep)
    }

    fn entry_from_parsed(
        &self,
        task_id: String,
        path: &Path,
        folder: Folder,
        mut parsed: Parsed,
        stamp: Option<Stamp>,
        keep: bool,
    ) -> SpecEntry {
        parsed.check_file_name(&task_id);
        SpecEntry {
            task_id,
            path: path.to_path_buf(),
            folder,
            listing: Arc::new(Listing::of(&parsed)),
            read_error: None,
            duplicates: Vec::new(),
            stamp,
            parsed: keep.then(|| Arc::new(parsed)),
        }
    }
}

/// A spec's bytes, read only when it is a regular file inside the workspace (a symlink may
/// point to one) of at most [`MAX_SPEC_BYTES`]: never a device, a FIFO or something outside
/// (`scafld_local::capped`, the one reader of files others supply).
pub fn read_spec(root: &Path, path: &Path) -> Result<Vec<u8>, String> {
    use scafld_local::capped::{self, Refusal};
    let meta = std::fs::symlink_metadata(path).map_err(|e| format!("cannot read the spec: {e}"))?;
    if meta.file_type().is_symlink() {
        let target = path.canonicalize().map_err(|e| format!("the spec is a broken symlink: {e}"))?;
        let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
        if !target.starts_with(&root) {
            return Err(format!(
                "the spec is a symlink to {}, outside the workspace; it is not read",
                target.display()
            ));
        }
    }
    capped::read(path, "spec", MAX_SPEC_BYTES).map_err(|e| match e.refusal {
        Refusal::NotAFile(kind) => format!("the spec is not a regular file (a {kind}); it is not read"),
        Refusal::TooLarge(Some(len)) => {
            format!("the spec is {}, over the {} a spec may have; it is not read", size(len), size(MAX_SPEC_BYTES))
        }
        Refusal::TooLarge(None) => {
            format!("the spec grew over {} while it was read; it is not read", size(MAX_SPEC_BYTES))
        }
        Refusal::Io(e) => format!("cannot read the spec: {e}"),
        Refusal::NotText => "the spec is not UTF-8 text".into(),
    })
}

fn task_id_of(path: &Path) -> Option<String> {
    path.file_stem().and_then(|s| s.to_str()).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(task: &str, title: &str) -> String {
        format!(
            "---\nspec_version: '2.0'\ntask_id: {task}\nstatus: draft\n---\n\n# {title}\n\n## Phase 1: Do\n\nAcceptance:\n- [ ] `a1` test - runs\n  - Command: `true`\n"
        )
    }

    fn workspace_with(tasks: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let drafts = dir.path().join(".scafld/specs/drafts");
        std::fs::create_dir_all(&drafts).unwrap();
        for task in tasks {
            std::fs::write(drafts.join(format!("{task}.md")), spec(task, task)).unwrap();
        }
        dir
    }

    #[test]
    fn a_lazy_index_loads_one_task_on_demand_and_the_rest_without_reporting_them_changed() {
        let dir = workspace_with(&["a", "b", "c"]);
        let mut index = Index::new(dir.path());
        assert!(index.get("b").is_none() && !index.is_complete());
        assert_eq!(index.sync_task("b"), None);
        assert_eq!(index.len(), 1);
        // b changes on disk before the first whole sync: that is a change; a and c are not.
        std::fs::write(dir.path().join(".scafld/specs/drafts/b.md"), spec("b", "b edited at length")).unwrap();
        assert_eq!(index.sync(), vec!["b".to_string()]);
        assert!(index.is_complete());
        assert_eq!(index.len(), 3);
        // Once complete, a new spec is a change.
        std::fs::write(dir.path().join(".scafld/specs/drafts/d.md"), spec("d", "d")).unwrap();
        assert_eq!(index.sync(), vec!["d".to_string()]);
    }

    #[test]
    fn the_generation_moves_with_every_listed_change_and_only_then() {
        let dir = workspace_with(&["a", "b"]);
        let drafts = dir.path().join(".scafld/specs/drafts");
        let mut index = Index::new(dir.path());
        index.sync();
        let seen = std::cell::Cell::new(index.generation());
        let moved = |index: &Index, what: &str| {
            assert_ne!(index.generation(), seen.get(), "{what} changed the listing but not the generation");
            seen.set(index.generation());
        };
        // Nothing changed: the same generation (a rendered list stays true).
        index.sync();
        index.sync_task("a");
        index.loaded("a");
        assert_eq!(index.generation(), seen.get());
        std::fs::write(drafts.join("a.md"), spec("a", "a, edited at length")).unwrap();
        index.sync();
        moved(&index, "an edit");
        std::fs::write(drafts.join("c.md"), spec("c", "c")).unwrap();
        index.sync_task("c");
        moved(&index, "a new spec");
        let approved = dir.path().join(".scafld/specs/approved");
        std::fs::create_dir_all(&approved).unwrap();
        std::fs::copy(drafts.join("b.md"), approved.join("b.md")).unwrap();
        index.sync();
        moved(&index, "a duplicate");
        std::fs::remove_file(approved.join("b.md")).unwrap();
        index.sync();
        moved(&index, "a duplicate gone");
        std::fs::remove_file(drafts.join("c.md")).unwrap();
        index.sync();
        moved(&index, "a removal");
        let text = spec("a", "a, written by the daemon");
        std::fs::write(drafts.join("a.md"), &text).unwrap();
        let written = std::fs::metadata(drafts.join("a.md")).unwrap();
        index.record_write(&drafts.join("a.md"), &text, None, &written);
        moved(&index, "the daemon's own write");
        // A parse read again for a file whose stamp did not change, but whose listing did (a
        // rewrite within one timestamp tick, simulated): the new listing moves it too.
        let entry = index.entries.get_mut("a").unwrap();
        let stale = Listing { title: "as it was".into(), ..(*entry.listing).clone() };
        (entry.parsed, entry.listing) = (None, Arc::new(stale));
        index.recent.clear();
        index.loaded("a");
        moved(&index, "a listing found changed when a parse was read again");
        index.entries.get_mut("a").unwrap().parsed = None;
        index.recent.clear();
        index.loaded("a");
        assert_eq!(index.generation(), seen.get(), "a parse read again that lists the same");
    }

    /// What the ledger says joins the files' entries by task id, a task with only one of them
    /// included; a state learnt out of order never replaces a newer one, and only a change to
    /// what is listed moves the generation.
    #[test]
    fn ledger_states_join_the_files_and_the_newest_one_stands() {
        let dir = workspace_with(&["a", "c"]);
        let mut index = Index::new(dir.path());
        index.sync();
        let state = |seq, status| LedgerState { seq, status, marks: Default::default() };
        index.note_ledger("c", state(4, Status::Active));
        index.take_ledger([
            ("b".to_string(), state(2, Status::Approved)),
            ("c".to_string(), state(3, Status::Approved)),
        ]);
        assert!(index.ledger_loaded());
        let tasks: Vec<(&str, bool, Option<Status>)> =
            index.tasks().map(|t| (t.id, t.spec.is_some(), t.ledger.map(|l| l.status))).collect();
        assert_eq!(
            tasks,
            vec![("a", true, None), ("b", false, Some(Status::Approved)), ("c", true, Some(Status::Active))]
        );
        let c = index.tasks().find(|t| t.id == "c").unwrap();
        assert_eq!((c.status(), c.file_disagrees()), (Some(Status::Active), Some(Status::Draft)));
        let seen = index.generation();
        index.note_ledger("c", state(5, Status::Active));
        assert_eq!(index.generation(), seen, "the same status lists the same");
        index.note_ledger("c", state(6, Status::Review));
        assert_ne!(index.generation(), seen);

        // Progress is the ledger's where there is one, and a file that says otherwise is
        // flagged with what it counts; new evidence is a change to what is listed.
        let c = index.tasks().find(|t| t.id == "c").unwrap();
        let counts = |passed, failed, pending| Counts {
            phases_total: 1,
            criteria_total: 1,
            criteria_passed: passed,
            criteria_failed: failed,
            criteria_pending: pending,
            ..Counts::default()
        };
        assert_eq!((c.progress(), c.file_progress_disagrees()), (Some(counts(0, 0, 1)), None));
        let seen = index.generation();
        let failed = crate::domain::ledger::Marks {
            criteria: [("a1".to_string(), "fail".to_string())].into(),
            phases: [("phase1".to_string(), "blocked".to_string())].into(),
            ..Default::default()
        };
        index.note_ledger("c", LedgerState { seq: 7, status: Status::Blocked, marks: Arc::new(failed) });
        assert_ne!(index.generation(), seen, "new evidence lists otherwise");
        let c = index.tasks().find(|t| t.id == "c").unwrap();
        assert_eq!((c.progress(), c.file_progress_disagrees()), (Some(counts(0, 1, 0)), Some(counts(0, 0, 1))));
        // A phase state the file says otherwise that counts alike is no disagreement of counts.
        let opened = crate::domain::ledger::Marks {
            criteria: [("a1".to_string(), "pending".to_string())].into(),
            phases: [("phase1".to_string(), "active".to_string())].into(),
            ..Default::default()
        };
        index.note_ledger("c", LedgerState { seq: 8, status: Status::Active, marks: Arc::new(opened) });
        let c = index.tasks().find(|t| t.id == "c").unwrap();
        assert_eq!((c.progress(), c.file_progress_disagrees()), (Some(counts(0, 0, 1)), None));
        let a = index.tasks().find(|t| t.id == "a").unwrap();
        assert_eq!(
            (a.progress(), a.file_progress_disagrees()),
            (Some(counts(0, 0, 1)), None),
            "no ledger: nothing recorded, as the file says"
        );
        index.take_ledger([("a".to_string(), state(1, Status::Approved))]);
        assert_eq!(index.ledger_state("a"), None, "the store is read once");
    }

    #[test]
    fn a_settled_archive_is_not_listed_again_until_it_changes() {
        let dir = workspace_with(&[]);
        let archive = dir.path().join(".scafld/specs/archive");
        let month = |name: &str, task: &str| {
            std::fs::create_dir_all(archive.join(name)).unwrap();
            std::fs::write(archive.join(name).join(format!("{task}.md")), spec(task, task)).unwrap();
        };
        let age = |path: &Path| {
            let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
            std::fs::File::open(path).unwrap().set_modified(old).unwrap();
        };
        month("2026-01", "a");
        let mut index = Index::new(dir.path());
        // A folder changed within the last second is listed on every lookup.
        index.sync_task("a");
        assert!(index.months.is_none());
        age(&archive);
        index.sync_task("a");
        assert!(index.months.is_none(), "every folder of the archive must be settled");
        age(&archive.join("2026-01"));
        index.sync_task("a");
        assert_eq!(index.months.as_ref().map(|(_, folders)| folders.len()), Some(2), "a settled archive is kept");
        assert!(index.get("a").is_some());
        // A month added later changes the archive folder's stamp: it is listed again.
        month("2026-02", "b");
        index.sync_task("b");
        assert!(index.get("b").is_some(), "a spec in a new month is found");
        // As does a month folder swapped for another of the same name count.
        age(&archive);
        index.sync_task("b");
        std::fs::rename(archive.join("2026-02"), archive.join("2026-03")).unwrap();
        age(&archive);
        index.sync_task("b");
        assert!(index.get("b").unwrap().path.starts_with(archive.join("2026-03")), "the renamed month is followed");
        // A folder made deeper down changes only its parent's stamp: it is listed again too.
        age(&archive);
        age(&archive.join("2026-03"));
        index.sync_task("b");
        assert!(index.months.is_some());
        month("2026-03/old/2025-01", "c");
        age(&archive.join("2026-03"));
        index.sync_task("c");
        assert!(index.get("c").unwrap().path.starts_with(archive.join("2026-03/old/2025-01")), "a spec two deep");
    }

    #[test]
    fn only_the_most_recently_used_specs_keep_their_parse() {
        let tasks: Vec<String> = (0..=RECENT_PARSES).map(|n| format!("t{n}")).collect();
        let dir = workspace_with(&tasks.iter().map(String::as_str).collect::<Vec<_>>());
        let mut index = Index::new(dir.path());
        index.sync();
        assert!(index.entries().all(|e| e.parsed.is_none()), "a whole sync keeps listings only");
        assert_eq!(index.get("t3").unwrap().listing.title, "t3");
        // A second file for t0 in another folder: a duplicate the entry keeps.
        let approved = dir.path().join(".scafld/specs/approved");
        std::fs::create_dir_all(&approved).unwrap();
        std::fs::write(approved.join("t0.md"), spec("t0", "t0")).unwrap();
        index.sync();
        assert!(!index.get("t0").unwrap().duplicates.is_empty());
        assert_eq!(index.loaded("t0").unwrap().parsed.spec.title, "t0");
        for task in &tasks[1..] {
            assert_eq!(&index.loaded(task).unwrap().parsed.spec.title, task);
        }
        let kept = index.entries().filter(|e| e.parsed.is_some()).count();
        assert_eq!(kept, RECENT_PARSES);
        assert!(index.get("t0").unwrap().parsed.is_none(), "the least recently used lets go");
        // Read again from the file as it is now, with its duplicate still on record; an edit
        // found that way is left for sync to take in and report, never swallowed.
        std::fs::write(dir.path().join(".scafld/specs/drafts/t0.md"), spec("t0", "t0 edited")).unwrap();
        let again = index.loaded("t0").unwrap();
        assert_eq!(again.parsed.spec.title, "t0 edited");
        assert_eq!(again.listing.title, "t0 edited");
        assert!(!again.duplicates.is_empty());
        assert_eq!(index.get("t0").unwrap().listing.title, "t0");
        assert_eq!(index.sync(), vec!["t0".to_string()]);
        assert_eq!(index.loaded("t0").unwrap().listing.title, "t0 edited");
        assert!(index.get("t0").unwrap().parsed.is_some(), "an unchanged file's parse is kept");
        assert!(!index.get("t0").unwrap().duplicates.is_empty());
    }

    #[test]
    fn a_whole_sync_notices_that_a_duplicate_was_removed() {
        let dir = workspace_with(&["x"]);
        let approved = dir.path().join(".scafld/specs/approved");
        std::fs::create_dir_all(&approved).unwrap();
        std::fs::write(approved.join("x.md"), spec("x", "the second copy")).unwrap();
        let mut index = Index::new(dir.path());
        index.sync();
        assert_eq!(index.get("x").unwrap().duplicates, vec![approved.join("x.md")]);
        std::fs::remove_file(approved.join("x.md")).unwrap();
        assert_eq!(index.sync(), vec!["x".to_string()]);
        assert!(index.get("x").unwrap().duplicates.is_empty());
        assert_eq!(index.get("x").unwrap().first_error(), None);
        assert_eq!(index.sync(), Vec::<String>::new());
    }

    /// A hand edit that replaces the spec between the daemon's rename and its record of the
    /// write is not taken for the daemon's own bytes: the next sync reads it.
    #[test]
    fn a_hand_edit_right_after_a_write_of_the_daemon_is_read_again() {
        let dir = workspace_with(&["a"]);
        let mut index = Index::new(dir.path());
        index.sync();
        let path = dir.path().join(".scafld/specs/drafts/a.md");
        let text = spec("a", "the daemon's projection");
        let written = specfile::write_spec(Some(&path), &path, &text).unwrap();
        edit(&path, "the hand edit");
        index.record_write(&path, &text, None, &written);
        assert_eq!(index.sync(), vec!["a".to_string()]);
        assert_eq!(index.get("a").unwrap().listing.title, "the hand edit");
        // The daemon's own write, untouched since, is not read again.
        let written = specfile::write_spec(Some(&path), &path, &text).unwrap();
        index.record_write(&path, &text, None, &written);
        assert_eq!(index.sync(), Vec::<String>::new());
        assert_eq!(index.get("a").unwrap().listing.title, "the daemon's projection");
    }

    #[test]
    fn absorbing_a_warm_up_keeps_what_was_loaded_meanwhile() {
        let dir = workspace_with(&["a", "b"]);
        let built = Index::build(dir.path());
        let mut index = Index::new(dir.path());
        let path = dir.path().join(".scafld/specs/drafts/a.md");
        let text = spec("a", "written after the warm-up read it");
        let written = specfile::write_spec(Some(&path), &path, &text).unwrap();
        index.record_write(&path, &text, None, &written);
        index.absorb(built);
        assert!(index.is_complete());
        assert_eq!(index.len(), 2);
        assert_eq!(index.get("a").unwrap().listing.title, "written after the warm-up read it");
        // A warm-up that lands after a whole sync adds nothing (it may hold removed specs).
        let stale = Index::build(dir.path());
        std::fs::remove_file(dir.path().join(".scafld/specs/drafts/b.md")).unwrap();
        let mut synced = Index::new(dir.path());
        synced.sync();
        synced.absorb(stale);
        assert!(synced.get("b").is_none());
    }

    /// A watched index over `dir`, caught up once: from here on only the queue says when to stat.
    fn watched(dir: &Path) -> Index {
        let mut index = Index::watched(dir, Tripwire::new().map(|(wire, _)| wire));
        index.catch_up();
        let fs = nix::sys::statfs::statfs(dir).map(|s| s.filesystem_type());
        assert!(index.trust.is_some(), "the queue should vouch for a temp dir on {fs:?}");
        index
    }

    /// A watcher that lost track syncs with `resync`: while the index is still warming up, a
    /// plain `sync` takes a task it had not loaded for a first load, nobody's news, but the
    /// watcher's subscribers were told of none of them. A spec moved away by hand is found in
    /// its new folder from its old path alone.
    #[test]
    fn a_resync_reports_first_loads_and_a_removed_path_finds_where_its_task_went() {
        let dir = workspace_with(&["a", "b"]);
        let mut warming = Index::new(dir.path());
        assert_eq!(warming.sync(), Vec::<String>::new(), "first loads are no change to a sync");
        let mut warming = Index::new(dir.path());
        let mut all = warming.resync();
        all.sort();
        assert_eq!(all, vec!["a".to_string(), "b".to_string()]);
        let specs = dir.path().join(".scafld/specs");
        std::fs::create_dir_all(specs.join("archive/2026-11")).unwrap();
        std::fs::rename(specs.join("drafts/a.md"), specs.join("archive/2026-11/a.md")).unwrap();
        assert_eq!(warming.refresh(&specs.join("drafts/a.md")), Some("a".to_string()));
        assert_eq!(warming.get("a").unwrap().path, specs.join("archive/2026-11/a.md"));
        assert_eq!(warming.paths_under(&specs.join("archive")), vec![specs.join("archive/2026-11/a.md")]);
    }

    /// A task in two folders whose first copy is removed: a sync gives the id to the second.
    #[test]
    fn a_sync_gives_a_removed_copys_task_to_the_second_copy() {
        let dir = workspace_with(&["a"]);
        let specs = dir.path().join(".scafld/specs");
        std::fs::create_dir_all(specs.join("approved")).unwrap();
        std::fs::write(specs.join("approved/a.md"), spec("a", "second")).unwrap();
        let mut index = Index::new(dir.path());
        index.sync();
        let first = index.get("a").unwrap().path.clone();
        assert!(!index.get("a").unwrap().duplicates.is_empty());
        std::fs::remove_file(&first).unwrap();
        assert_eq!(index.sync(), vec!["a".to_string()]);
        let entry = index.get("a").expect("the second copy holds the task");
        assert_ne!(entry.path, first);
        assert!(entry.duplicates.is_empty());
    }

    /// What a task's entry says of its files: the owner's path and title, and its duplicates.
    fn files_of(index: &Index, task: &str) -> Option<(PathBuf, String, Vec<PathBuf>)> {
        index.get(task).map(|e| (e.path.clone(), e.listing.title.clone(), e.duplicates.clone()))
    }

    /// A task in several folders is owned by its first file in lookup order, however its files
    /// were seen: one by one by a live index (in every order), all at once by a fresh scan, by
    /// one task's lookup; an edit to the owner keeps the duplicate; and when a file goes, the
    /// next in that order takes over, as a fresh scan would have it.
    #[test]
    fn the_files_of_a_task_settle_the_same_whatever_order_they_are_seen_in() {
        let folders = ["archive/2026-01", "active", "drafts"];
        let orders = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]];
        for order in orders {
            let dir = tempfile::tempdir().unwrap();
            let specs = dir.path().join(".scafld/specs");
            let path = |i: usize| specs.join(folders[i]).join("t.md");
            for folder in folders {
                std::fs::create_dir_all(specs.join(folder)).unwrap();
            }
            let mut live = Index::new(dir.path());
            live.sync();
            let agree = |live: &mut Index, when: &str| {
                let fresh = Index::build(dir.path());
                assert_eq!(files_of(live, "t"), files_of(&fresh, "t"), "order {order:?}, {when}: live and fresh");
                let mut one = Index::new(dir.path());
                one.sync_task("t");
                assert_eq!(files_of(&one, "t"), files_of(&fresh, "t"), "order {order:?}, {when}: one task's lookup");
                assert_eq!(live.sync(), Vec::<String>::new(), "order {order:?}, {when}: a sync finds nothing new");
            };
            for &i in &order {
                std::fs::write(path(i), spec("t", folders[i])).unwrap();
                live.refresh(&path(i));
                agree(&mut live, &format!("{} arrived", folders[i]));
            }
            // Every other file is on record, in lookup order (the archive month last).
            assert_eq!(files_of(&live, "t"), Some((path(2), "drafts".to_string(), vec![path(1), path(0)])));
            let error = live.get("t").unwrap().duplicate_error().unwrap();
            assert!(error.starts_with("the task is in three files: .scafld/specs/drafts/t.md (read as its spec: the first in lookup order), .scafld/specs/active/t.md and .scafld/specs/archive/2026-01/t.md; none is moved"), "{error}");
            edit(&path(2), "drafts edited");
            assert_eq!(live.refresh(&path(2)), Some("t".to_string()));
            assert_eq!(files_of(&live, "t"), Some((path(2), "drafts edited".to_string(), vec![path(1), path(0)])));
            agree(&mut live, "the owner edited");
            for &i in &order {
                std::fs::remove_file(path(i)).unwrap();
                live.refresh(&path(i));
                agree(&mut live, &format!("{} removed", folders[i]));
            }
            assert!(live.get("t").is_none());
        }
    }

    /// The same over whole syncs: a second file arriving before its task's first in lookup
    /// order takes the task over at the next sync, and a resync agrees.
    #[test]
    fn a_sync_gives_a_task_to_its_first_file_in_lookup_order() {
        let dir = tempfile::tempdir().unwrap();
        let specs = dir.path().join(".scafld/specs");
        std::fs::create_dir_all(specs.join("active")).unwrap();
        std::fs::write(specs.join("active/t.md"), spec("t", "active")).unwrap();
        let mut index = Index::new(dir.path());
        index.sync();
        std::fs::create_dir_all(specs.join("drafts")).unwrap();
        std::fs::write(specs.join("drafts/t.md"), spec("t", "drafts")).unwrap();
        assert_eq!(index.sync(), vec!["t".to_string()]);
        let expected = Some((specs.join("drafts/t.md"), "drafts".to_string(), vec![specs.join("active/t.md")]));
        assert_eq!(files_of(&index, "t"), expected);
        assert_eq!(index.resync(), Vec::<String>::new());
        assert_eq!(files_of(&index, "t"), expected);
        // The daemon's own write to the owner keeps the duplicate on record.
        let (owner, text) = (specs.join("drafts/t.md"), spec("t", "drafts written"));
        let written = specfile::write_spec(Some(&owner), &owner, &text).unwrap();
        index.record_write(&owner, &text, None, &written);
        assert_eq!(index.get("t").unwrap().duplicates, vec![specs.join("active/t.md")]);
        assert_eq!(index.sync(), Vec::<String>::new());
    }

    fn edit(path: &Path, title: &str) {
        std::fs::write(path, spec(path.file_stem().unwrap().to_str().unwrap(), title)).unwrap();
    }

    #[test]
    fn every_change_in_the_spec_folders_trips_the_queue_and_is_seen_at_once() {
        let dir = workspace_with(&["a", "b"]);
        let specs = dir.path().join(".scafld/specs");
        let mut index = watched(dir.path());
        assert_eq!(index.catch_up(), Vec::<String>::new());
        // Written in place, replaced by a rename, added, moved to another folder, removed.
        edit(&specs.join("drafts/a.md"), "a in place");
        assert_eq!(index.catch_up(), vec!["a".to_string()]);
        assert_eq!(index.get("a").unwrap().listing.title, "a in place");
        std::fs::write(specs.join("drafts/.b.tmp"), spec("b", "b renamed over")).unwrap();
        std::fs::rename(specs.join("drafts/.b.tmp"), specs.join("drafts/b.md")).unwrap();
        assert_eq!(index.catch_up(), vec!["b".to_string()]);
        assert_eq!(index.get("b").unwrap().listing.title, "b renamed over");
        edit(&specs.join("drafts/c.md"), "c");
        assert_eq!(index.catch_up(), vec!["c".to_string()]);
        std::fs::create_dir_all(specs.join("approved")).unwrap();
        std::fs::rename(specs.join("drafts/c.md"), specs.join("approved/c.md")).unwrap();
        assert_eq!(index.catch_up(), vec!["c".to_string()]);
        assert_eq!(index.get("c").unwrap().folder, Folder::Approved);
        std::fs::remove_file(specs.join("approved/c.md")).unwrap();
        assert_eq!(index.catch_up(), vec!["c".to_string()]);
        assert!(index.get("c").is_none());
        // A new archive month gets its own watch: an edit inside it later is seen too.
        std::fs::create_dir_all(specs.join("archive/2026-11")).unwrap();
        edit(&specs.join("archive/2026-11/d.md"), "d");
        assert_eq!(index.catch_up(), vec!["d".to_string()]);
        edit(&specs.join("archive/2026-11/d.md"), "d edited");
        assert_eq!(index.catch_up(), vec!["d".to_string()]);
        // A folder removed and made again is watched again.
        std::fs::remove_dir_all(specs.join("approved")).unwrap();
        assert_eq!(index.catch_up(), Vec::<String>::new());
        std::fs::create_dir_all(specs.join("approved")).unwrap();
        index.catch_up();
        edit(&specs.join("approved/e.md"), "e");
        assert_eq!(index.catch_up(), vec!["e".to_string()]);
        assert!(index.trust.is_some());
    }

    #[test]
    fn what_the_queue_cannot_see_is_never_left_to_it() {
        let dir = workspace_with(&["a", "b"]);
        let drafts = dir.path().join(".scafld/specs/drafts");
        let mut index = watched(dir.path());
        // A hard link made elsewhere after the sync raises no event in the folder, nor does a
        // write through it: the index may miss it, but for no longer than TRUST_FOR.
        let outside = dir.path().join("a-elsewhere.md");
        std::fs::hard_link(drafts.join("a.md"), &outside).unwrap();
        edit(&outside, "a through another link");
        let deadline = Instant::now() + TRUST_FOR * 5;
        while index.catch_up().is_empty() {
            assert!(Instant::now() < deadline, "an unseen write must show within {TRUST_FOR:?}");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(index.get("a").unwrap().listing.title, "a through another link");
        // Now that the sync has seen the second link, the queue is not trusted for this folder.
        assert!(index.trust.is_none());
        edit(&outside, "a again");
        assert_eq!(index.catch_up(), vec!["a".to_string()]);
        // Nor for a spec that is a symlink to a file elsewhere.
        std::fs::remove_file(&outside).unwrap();
        index.catch_up();
        assert!(index.trust.is_some());
        let target = dir.path().join("b-target.md");
        std::fs::rename(drafts.join("b.md"), &target).unwrap();
        std::os::unix::fs::symlink(&target, drafts.join("b.md")).unwrap();
        index.catch_up();
        assert!(index.trust.is_none());
        edit(&target, "b through its symlink");
        assert_eq!(index.catch_up(), vec!["b".to_string()]);
    }

    /// Two workspaces whose drafts are one folder (a symlink, e.g. git worktrees sharing their
    /// specs): the kernel gives the folder one watch, and an edit there trips both.
    #[test]
    fn a_folder_shared_by_two_workspaces_trips_both() {
        let (wire, _changes) = Tripwire::new().expect("inotify");
        let a = workspace_with(&["a"]);
        let b = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(b.path().join(".scafld/specs")).unwrap();
        std::os::unix::fs::symlink(a.path().join(".scafld/specs/drafts"), b.path().join(".scafld/specs/drafts"))
            .unwrap();
        let mut index_a = Index::watched(a.path(), Some(wire.clone()));
        let mut index_b = Index::watched(b.path(), Some(wire.clone()));
        index_a.catch_up();
        index_b.catch_up();
        assert!(index_a.trust.is_some() && index_b.trust.is_some());
        edit(&a.path().join(".scafld/specs/drafts/a.md"), "a edited");
        // Within TRUST_FOR of the last full sync, as a scripted edit-then-list is.
        assert_eq!(index_a.catch_up(), vec!["a".to_string()], "the edit in a's own folder is missed");
        assert_eq!(index_a.get("a").unwrap().listing.title, "a edited");
    }

    /// `.scafld` is a symlink, pointed elsewhere (`ln -sfn other .scafld`, a rename in the
    /// workspace root, which is not watched): no event, but the watched paths moved.
    #[test]
    fn a_scafld_symlink_pointed_elsewhere_is_noticed() {
        let root = tempfile::tempdir().unwrap();
        let (one, two) = (workspace_with(&["a"]), workspace_with(&["b"]));
        std::os::unix::fs::symlink(one.path().join(".scafld"), root.path().join(".scafld")).unwrap();
        let mut index = Index::watched(root.path(), Tripwire::new().map(|(wire, _)| wire));
        index.catch_up();
        assert!(index.trust.is_some());
        std::os::unix::fs::symlink(two.path().join(".scafld"), root.path().join(".scafld.new")).unwrap();
        std::fs::rename(root.path().join(".scafld.new"), root.path().join(".scafld")).unwrap();
        index.catch_up();
        assert!(index.get("b").is_some() && index.get("a").is_none(), "still listing the old .scafld");
    }

    /// A lifecycle folder that is a dangling symlink when armed, whose target is made later:
    /// its parent sees nothing (the symlink did not change), but the path now names a folder.
    #[test]
    fn a_dangling_folder_symlink_that_comes_to_life_is_noticed() {
        let root = workspace_with(&["a"]);
        let elsewhere = tempfile::tempdir().unwrap();
        let target = elsewhere.path().join("approved");
        std::os::unix::fs::symlink(&target, root.path().join(".scafld/specs/approved")).unwrap();
        let mut index = Index::watched(root.path(), Tripwire::new().map(|(wire, _)| wire));
        index.catch_up();
        assert!(index.trust.is_some());
        std::fs::create_dir_all(&target).unwrap();
        std::fs::write(target.join("c.md"), spec("c", "c")).unwrap();
        assert_eq!(index.catch_up(), vec!["c".to_string()], "c is on disk before the call");
    }

    #[test]
    fn without_a_queue_or_a_spec_folder_every_catch_up_stats() {
        let dir = workspace_with(&["a"]);
        let mut index = Index::new(dir.path());
        index.catch_up();
        edit(&dir.path().join(".scafld/specs/drafts/a.md"), "a edited");
        assert_eq!(index.catch_up(), vec!["a".to_string()]);
        let bare = tempfile::tempdir().unwrap();
        let mut index = Index::watched(bare.path(), Tripwire::new().map(|(wire, _)| wire));
        index.catch_up();
        assert!(index.trust.is_none(), "no .scafld/specs: nothing to vouch for");
    }
}
