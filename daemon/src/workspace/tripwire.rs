//! One kernel change queue (inotify) over `.scafld/` and the spec folders of every open
//! workspace, read without blocking. It serves two readers:
//!
//! - a whole-workspace read (`list`, `report`, `validate --all`) asks it whether anything there
//!   changed since its last full sync; when nothing did, the index answers as it is, without a
//!   stat per spec;
//! - the daemon's watch loop ([`super::watch`]) receives the path of every change, to re-read a
//!   spec edited by hand and publish it, or forget a changed config.
//!
//! It also watches, anywhere in a workspace, the files a task's current review judged (the
//! evidence scope, and what a passing review was shown: [`Tripwire::watch_judged`]): a change
//! there reaches the watch loop as that task's ([`Change::judged`]), so that the spec's own
//! next step follows it as `status` does.
//!
//! Whichever reader takes an event, both learn of it. Reads are not events (no `IN_OPEN` or
//! `IN_ACCESS`): a client or editor reading a spec wakes nothing here.
//!
//! This is sound because the kernel queues the event inside the writing system call: a change
//! that finished before the read began is already in the queue. A watch follows a folder's
//! inode, not its path, so each read also checks that the few watched paths still name the
//! folders watched ([`Armed::in_place`]: a `.scafld` symlink pointed elsewhere, a workspace
//! swapped for another, a dangling folder symlink come to life). What the kernel does not
//! report (a memory-mapped write, a write through a hard link in another folder, another
//! machine writing over a network file system) is covered by [`Index::catch_up`]'s fallbacks:
//! specs that are symlinks or have other links, and folders on other file systems, are never
//! trusted to the queue, and every [`TRUST_FOR`] the stats run anyway.
//!
//! [`Index::catch_up`]: super::index::Index::catch_up

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags as Mask, InitFlags, Inotify, InotifyEvent, WatchDescriptor};
use nix::sys::statfs::{self, FsType};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::domain::lifecycle::Folder;
use crate::workspace::{layout, specfile};

/// Longest a whole-workspace read relies on the queue alone before it stats every spec again.
pub const TRUST_FOR: Duration = Duration::from_secs(1);

/// File systems whose every local write raises its event. A network or FUSE file system
/// does not report what another machine or process behind it writes.
const LOCAL_FILE_SYSTEMS: [FsType; 6] = [
    statfs::EXT4_SUPER_MAGIC, // ext2, ext3 and ext4 share it
    statfs::XFS_SUPER_MAGIC,
    statfs::BTRFS_SUPER_MAGIC,
    statfs::TMPFS_MAGIC,
    statfs::F2FS_SUPER_MAGIC,
    statfs::OVERLAYFS_SUPER_MAGIC,
];

pub struct Tripwire {
    inotify: Inotify,
    state: Mutex<State>,
    /// Where every change goes: the daemon's watch loop.
    changes: mpsc::UnboundedSender<Change>,
}

/// One change the queue reported, in the workspace whose watch saw it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Change {
    pub root: PathBuf,
    pub path: PathBuf,
    /// A folder came, went or moved (or the queue lost events, and `path` is the spec
    /// folders): the files in it were never reported one by one.
    pub folder: bool,
    /// The task whose current review judged `path` ([`Tripwire::watch_judged`]): the change
    /// may move that task's next step; it is no change of a spec.
    pub judged: Option<String>,
}

/// Most folders watched for one task's judged files: a scope of a whole tree (a `target/`
/// in it) could otherwise take the user's whole allowance of watches. Past it, the spec's
/// next step follows a change below the rest at its next write, as before.
pub const JUDGED_FOLDERS: usize = 1024;

/// The watches of one task's judged files, each with the kernel's descriptor it got.
type JudgedWatches = Vec<(WatchDescriptor, JudgedWatch)>;

/// One watch of a task's judged files: anything inside `dir` (`name` is `None`: a folder of
/// the scope, or one below it), or only its entry `name` (a file of the scope, or the first
/// missing folder on the way to one).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct JudgedWatch {
    root: PathBuf,
    task: String,
    dir: PathBuf,
    name: Option<std::ffi::OsString>,
}

impl std::fmt::Debug for Tripwire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tripwire").finish_non_exhaustive()
    }
}

/// The folders a workspace's watches were put on, each with the (device, inode) its path named
/// then (`None`: nothing was there).
#[derive(Debug)]
pub struct Armed {
    folders: Vec<(PathBuf, Option<(u64, u64)>)>,
}

impl Armed {
    /// Whether every watched path still names the folder watched: a few stats, where a full
    /// sync takes one per spec.
    pub fn in_place(&self) -> bool {
        self.folders.iter().all(|(path, id)| identity(path) == *id)
    }
}

/// What `path` names now, through symlinks, as a watch on it would follow.
fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|meta| (meta.dev(), meta.ino()))
}

#[derive(Default)]
struct State {
    /// The workspace roots each watch serves, each with the folder's path under it: one folder
    /// may belong to several (worktrees sharing their specs through a symlink), and the kernel
    /// gives it one watch.
    roots: HashMap<WatchDescriptor, HashMap<PathBuf, PathBuf>>,
    /// Every root armed at least once: all of them trip when the queue overflows.
    armed: HashSet<PathBuf>,
    /// Roots with an event that [`Tripwire::quiet`] has not handed out yet.
    tripped: HashSet<PathBuf>,
    /// Each task's judged files (by root and task) as last asked for, workspace-relative, and
    /// the watches they were given.
    judged: HashMap<(PathBuf, String), (Vec<String>, JudgedWatches)>,
    /// What each watch of judged files serves.
    judged_by: HashMap<WatchDescriptor, Vec<JudgedWatch>>,
}

/// What one read of the queue found.
#[derive(Default)]
struct Taken {
    changes: Vec<Change>,
    /// Roots with a new folder, which needs its own watch.
    to_arm: HashSet<PathBuf>,
    /// Tasks whose judged files gained or lost a folder: watched again as they are now.
    to_rewatch: HashSet<(PathBuf, String)>,
}

impl Tripwire {
    /// The daemon's queue, and where the paths that change arrive; `None` (every read stats,
    /// and nothing reports hand edits) when the kernel refuses one, e.g. at the user's limit
    /// of inotify instances.
    pub fn new() -> Option<(Arc<Tripwire>, mpsc::UnboundedReceiver<Change>)> {
        match Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC) {
            Ok(inotify) => {
                let (changes, changed) = mpsc::unbounded_channel();
                Some((Arc::new(Tripwire { inotify, state: Mutex::default(), changes }), changed))
            }
            Err(e) => {
                warn!("no change queue ({e}); whole-workspace reads stat every spec, hand edits are seen when read");
                None
            }
        }
    }

    /// Watch `root`'s spec folders, again each time: a folder re-created or a new archive
    /// month gets its watch here. Call it before the stats it is to cover. `Some` when every
    /// folder that exists is watched on a local file system, so that from now on a quiet
    /// queue, with the folders still in place, means nothing in them changed.
    pub fn arm(&self, root: &Path) -> Option<Armed> {
        let scafld = root.join(layout::SCAFLD_DIR);
        let specs = specfile::specs_dir(root);
        // Renames, creations and removals of the folders themselves show in their parent.
        let names = Mask::IN_CREATE
            | Mask::IN_DELETE
            | Mask::IN_MOVED_FROM
            | Mask::IN_MOVED_TO
            | Mask::IN_DELETE_SELF
            | Mask::IN_MOVE_SELF
            | Mask::IN_ONLYDIR;
        let contents = names | Mask::IN_MODIFY | Mask::IN_ATTRIB;
        let archive = specs.join(Folder::Archive.as_str());
        let mut state = crate::sync::lock(&self.state);
        state.armed.insert(root.to_path_buf());
        let mut armed = Armed { folders: Vec::new() };
        // Without `.scafld/specs` itself there is nothing to vouch for. `.scafld/`'s own files
        // are watched for their contents too: a config edited in place is a change.
        let mut trusted = self.watch(&mut state, root, &scafld, contents, &mut armed) == Some(true);
        trusted &= self.watch(&mut state, root, &specs, names, &mut armed) == Some(true);
        for &folder in Folder::ALL {
            // A folder that does not exist yet is fine: its creation shows in `specs`, and a
            // dangling symlink coming to life shows in `Armed::in_place`.
            trusted &= self.watch(&mut state, root, &specs.join(folder.as_str()), contents, &mut armed) != Some(false);
        }
        // Listed once the archive is watched, so that a folder made meanwhile trips the queue
        // (one made deeper while they are listed trips its parent's watch, put on first).
        for folder in specfile::archive_folders(&archive).into_iter().filter(|f| *f != archive) {
            trusted &= self.watch(&mut state, root, &folder, contents, &mut armed) != Some(false);
        }
        // The workspace folder itself, for `.scafld` replaced whole (its watches die with it);
        // nothing else there is a change (see `State::note`), and trust never rests on it.
        // Added to what else the folder is watched for (judged files in it), never narrowing it.
        if let Ok(wd) = self.inotify.add_watch(root, names | mask_add()) {
            state.roots.entry(wd).or_default().insert(root.to_path_buf(), root.to_path_buf());
        }
        trusted.then_some(armed)
    }

    /// Watch `dir` for `root` and note it in `armed`: `None` when it does not exist, `Some`
    /// whether it is watched now (not on a file system this queue can vouch for, or it changed
    /// while the watch was being put on it: no).
    fn watch(&self, state: &mut State, root: &Path, dir: &Path, mask: Mask, armed: &mut Armed) -> Option<bool> {
        let before = identity(dir);
        armed.folders.push((dir.to_path_buf(), before));
        before?;
        let local = statfs::statfs(dir).is_ok_and(|fs| LOCAL_FILE_SYSTEMS.contains(&fs.filesystem_type()));
        let Ok(wd) = self.inotify.add_watch(dir, mask).map_err(|e| debug!(dir = %dir.display(), "no watch: {e}"))
        else {
            return Some(false);
        };
        state.roots.entry(wd).or_default().insert(root.to_path_buf(), dir.to_path_buf());
        Some(local && identity(dir) == before)
    }

    /// Take every event queued so far; true when none of them was `root`'s since the last
    /// call (nor was any lost to an overflow of the queue).
    pub fn quiet(&self, root: &Path) -> bool {
        let mut state = crate::sync::lock(&self.state);
        let taken = self.take(&mut state);
        let quiet = !state.tripped.remove(root);
        drop(state);
        // A new folder of `root`'s trips it: its caller arms it as it syncs.
        self.hand_out(taken, Some(root));
        quiet
    }

    /// Take every event queued so far and pass on the paths that changed: what the watch loop
    /// calls when the kernel says the queue is readable.
    pub fn read_events(&self) {
        let taken = self.take(&mut crate::sync::lock(&self.state));
        self.hand_out(taken, None);
    }

    /// Watch `paths` of `root` (workspace-relative, as a scope names them; none is the whole
    /// tree) as the files `task`'s current review judged: a change to any of them reaches the
    /// watch loop as `task`'s ([`Change::judged`]). Asked again for the same paths, it does
    /// nothing; for others, the watches follow them.
    pub fn watch_judged(&self, root: &Path, task: &str, paths: &[String]) {
        let key = (root.to_path_buf(), task.to_string());
        if crate::sync::lock(&self.state).judged.get(&key).is_some_and(|(kept, _)| kept == paths) {
            return;
        }
        self.rewatch(&key, paths.to_vec());
    }

    /// Stop watching the files `task`'s review judged (none is current now).
    pub fn forget_judged(&self, root: &Path, task: &str) {
        let key = (root.to_path_buf(), task.to_string());
        let mut state = crate::sync::lock(&self.state);
        if let Some((_, watches)) = state.judged.remove(&key) {
            self.unwatch(&mut state, &watches);
        }
    }

    /// Give `key`'s judged `paths` the watches the folders need now, then drop the watches it
    /// had that are no longer needed (added first: no change falls between the two).
    fn rewatch(&self, key: &(PathBuf, String), paths: Vec<String>) {
        let (root, task) = key;
        let wanted = judged_watches(root, task, &paths);
        let mut state = crate::sync::lock(&self.state);
        let mut watches = Vec::new();
        for watch in wanted {
            // Added to what the folder is watched for already (a spec folder's watch, the
            // workspace folder's), never narrowing it.
            match self.inotify.add_watch(&watch.dir, judged_mask() | mask_add()) {
                Ok(wd) => {
                    let served = state.judged_by.entry(wd).or_default();
                    if !served.contains(&watch) {
                        served.push(watch.clone());
                    }
                    watches.push((wd, watch));
                }
                Err(e) => debug!(dir = %watch.dir.display(), "no watch of a task's judged files: {e}"),
            }
        }
        let old = state.judged.insert(key.clone(), (paths, watches.clone())).map(|(_, old)| old).unwrap_or_default();
        let gone: Vec<_> = old.into_iter().filter(|w| !watches.contains(w)).collect();
        self.unwatch(&mut state, &gone);
    }

    /// Drop `watches` of judged files, and the kernel's watch of a folder nothing else uses.
    fn unwatch(&self, state: &mut State, watches: &[(WatchDescriptor, JudgedWatch)]) {
        for (wd, watch) in watches {
            let Some(served) = state.judged_by.get_mut(wd) else { continue };
            served.retain(|w| w != watch);
            if served.is_empty() {
                state.judged_by.remove(wd);
                if !state.roots.contains_key(wd) {
                    let _ = self.inotify.rm_watch(*wd);
                }
            }
        }
    }

    /// Read the queue dry, noting every event in `state`.
    fn take(&self, state: &mut State) -> Taken {
        let mut taken = Taken::default();
        loop {
            match self.inotify.read_events() {
                Ok(events) if !events.is_empty() => {
                    for event in events {
                        state.note(event, &mut taken);
                    }
                }
                Err(Errno::EINTR) => {}
                Ok(_) | Err(Errno::EAGAIN) => break,
                // Nothing can be trusted after a failed read.
                Err(_) => {
                    state.trip_all();
                    break;
                }
            }
        }
        taken
    }

    /// Watch the new folders found (`arming`, whose caller arms it itself, excepted), then
    /// send what was taken to the watch loop: what it reads of a new folder is then covered by
    /// its watch. Outside the state's lock, which arming takes.
    fn hand_out(&self, taken: Taken, arming: Option<&Path>) {
        for root in taken.to_arm.iter().filter(|root| Some(root.as_path()) != arming) {
            self.arm(root);
        }
        // Before the changes go: what the loop then reads of a new folder is watched.
        for key in &taken.to_rewatch {
            let paths = crate::sync::lock(&self.state).judged.get(key).map(|(paths, _)| paths.clone());
            if let Some(paths) = paths {
                self.rewatch(key, paths);
            }
        }
        for change in taken.changes {
            // A closed channel is a daemon stopping (or a test not listening).
            let _ = self.changes.send(change);
        }
    }
}

/// `IN_MASK_ADD` (`<sys/inotify.h>`), which nix does not name: a watch put on a folder already
/// watched adds to what it is told of instead of replacing it.
fn mask_add() -> Mask {
    Mask::from_bits_retain(0x2000_0000)
}

/// What a watch of judged files is told of: entries that come, go, are written or change
/// mode, and the folder itself removed or moved.
fn judged_mask() -> Mask {
    Mask::IN_CREATE
        | Mask::IN_DELETE
        | Mask::IN_MOVED_FROM
        | Mask::IN_MOVED_TO
        | Mask::IN_MODIFY
        | Mask::IN_ATTRIB
        | Mask::IN_CLOSE_WRITE
        | Mask::IN_DELETE_SELF
        | Mask::IN_MOVE_SELF
        | Mask::IN_ONLYDIR
}

/// The watches `paths` of `root` need as the folders are now: each entry in the nearest
/// folder on its way that exists (a file, one gone, or a folder to come), a folder watched
/// whole with every folder below it, and a symlink's target inside the workspace as the
/// material reads it. Never `.git` or `.scafld` (no material, and the daemon's own writes), and
/// at most [`JUDGED_FOLDERS`] folders watched whole.
fn judged_watches(root: &Path, task: &str, paths: &[String]) -> Vec<JudgedWatch> {
    let watch = |dir: &Path, name: Option<&std::ffi::OsStr>| JudgedWatch {
        root: root.to_path_buf(),
        task: task.to_string(),
        dir: dir.to_path_buf(),
        name: name.map(ToOwned::to_owned),
    };
    let mut entries: Vec<PathBuf> = match paths.is_empty() {
        true => vec![root.to_path_buf()],
        false => paths.iter().map(|p| root.join(p.trim_end_matches('/'))).collect(),
    };
    let (mut out, mut whole, mut seen) = (Vec::new(), Vec::new(), HashSet::new());
    while let Some(entry) = entries.pop() {
        if !entry.starts_with(root) || never_judged(root, &entry) || !seen.insert(entry.clone()) {
            continue;
        }
        let meta = std::fs::symlink_metadata(&entry).ok();
        if meta.as_ref().is_some_and(|m| m.file_type().is_symlink()) {
            entries.extend(std::fs::canonicalize(&entry).ok());
        } else if meta.as_ref().is_some_and(std::fs::Metadata::is_dir) {
            whole.push(entry.clone());
        }
        let mut at = entry.as_path();
        while let (Some(dir), Some(name)) = (at.parent(), at.file_name()) {
            if !dir.starts_with(root) {
                break;
            }
            if dir.is_dir() {
                out.push(watch(dir, Some(name)));
                break;
            }
            at = dir;
        }
    }
    // Every folder below those watched whole, breadth first, never through a symlink.
    let mut folders = Vec::new();
    let mut queue: std::collections::VecDeque<PathBuf> = whole.into();
    while let Some(dir) = queue.pop_front() {
        if folders.len() >= JUDGED_FOLDERS {
            debug!(task, "more than {JUDGED_FOLDERS} folders of judged files: the rest are not watched");
            break;
        }
        if folders.contains(&dir) {
            continue;
        }
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) && !never_judged(root, &entry.path()) {
                queue.push_back(entry.path());
            }
        }
        folders.push(dir);
    }
    out.extend(folders.iter().map(|dir| watch(dir, None)));
    out
}

/// Whether `path` is in `.git` or `.scafld` (at any depth: a submodule's too).
fn never_judged(root: &Path, path: &Path) -> bool {
    let inside = path.strip_prefix(root).unwrap_or(path);
    inside.components().any(|c| c.as_os_str() == ".git" || c.as_os_str() == layout::SCAFLD_DIR)
}

/// The queue's descriptor, for the runtime to poll (the [`Tripwire`] keeps owning it).
pub struct QueueFd(pub Arc<Tripwire>);

impl AsRawFd for QueueFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.inotify.as_fd().as_raw_fd()
    }
}

impl State {
    fn note(&mut self, event: InotifyEvent, taken: &mut Taken) {
        let mask = event.mask;
        // Events were lost: every root's spec folders are a change to look at whole.
        if mask.contains(Mask::IN_Q_OVERFLOW) {
            self.trip_all();
            let lost = self.armed.iter().map(|root| Change {
                root: root.clone(),
                path: specfile::specs_dir(root),
                folder: true,
                judged: None,
            });
            taken.changes.extend(lost);
            // And any task's judged files may have changed.
            for (root, task) in self.judged.keys() {
                taken.changes.push(Change {
                    root: root.clone(),
                    path: root.clone(),
                    folder: false,
                    judged: Some(task.clone()),
                });
                taken.to_rewatch.insert((root.clone(), task.clone()));
            }
            return;
        }
        let arrived = mask.intersects(Mask::IN_CREATE | Mask::IN_MOVED_TO);
        if let Some(roots) = self.roots.get(&event.wd) {
            for (root, dir) in roots {
                let Some(name) = &event.name else {
                    self.tripped.insert(root.clone());
                    continue;
                };
                let path = dir.join(name);
                // Where a spec folder lives (a lifecycle folder, `specs` or `.scafld` itself), a
                // name is a folder even as a symlink, which the kernel does not mark as one; so
                // is one in the archive's folders that no spec or temporary file could have
                // (the archive holds specs and folders of them at any depth). Each gets its
                // watch if it came.
                let specs = specfile::specs_dir(root);
                let in_archive = dir.starts_with(specs.join(Folder::Archive.as_str()));
                let text = name.to_string_lossy();
                let archive_folder =
                    in_archive && (mask.contains(Mask::IN_ISDIR) || !(text.ends_with(".md") || text.starts_with('.')));
                let folder_place =
                    *dir == specs || archive_folder || path == specs || path == root.join(layout::SCAFLD_DIR);
                if dir == root && !folder_place {
                    // The workspace folder's other names are not the queue's business.
                    continue;
                }
                self.tripped.insert(root.clone());
                let folder = folder_place || mask.contains(Mask::IN_ISDIR);
                taken.changes.push(Change { root: root.clone(), path, folder, judged: None });
                if folder_place && arrived {
                    taken.to_arm.insert(root.clone());
                }
            }
        }
        for watch in self.judged_by.get(&event.wd).into_iter().flatten() {
            // Anything in a folder watched whole, only its entry in one watched for it, and
            // the folder itself removed or moved (no name).
            let path = match (&event.name, &watch.name) {
                (Some(name), Some(wanted)) if name != wanted => continue,
                (Some(name), _) => watch.dir.join(name),
                (None, _) => watch.dir.clone(),
            };
            let (root, task) = (watch.root.clone(), watch.task.clone());
            // A folder came or went where judged files are: they are watched again as they are.
            if mask.intersects(Mask::IN_ISDIR | Mask::IN_DELETE_SELF | Mask::IN_MOVE_SELF | Mask::IN_IGNORED) {
                taken.to_rewatch.insert((root.clone(), task.clone()));
            }
            taken.changes.push(Change { root, path, folder: false, judged: Some(task) });
        }
        // The watch is gone (its folder was removed): the next arm adds one if it comes back.
        if mask.contains(Mask::IN_IGNORED) {
            self.roots.remove(&event.wd);
            self.judged_by.remove(&event.wd);
        }
    }

    fn trip_all(&mut self) {
        self.tripped.extend(self.armed.iter().cloned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// What the watch loop is told: the path of every change in the watched folders (a new
    /// archive month is watched as it appears), a config edited in place, and never a read.
    #[test]
    fn every_change_but_a_read_is_reported_by_its_path() {
        let (wire, mut changes) = Tripwire::new().expect("inotify");
        let root = tempfile::tempdir().unwrap();
        let specs = specfile::specs_dir(root.path());
        std::fs::create_dir_all(specs.join("drafts")).unwrap();
        std::fs::create_dir_all(specs.join("archive")).unwrap();
        assert!(wire.arm(root.path()).is_some());
        let mut reported = || {
            wire.read_events();
            let mut paths = Vec::new();
            while let Ok(change) = changes.try_recv() {
                assert_eq!(change.root, root.path());
                assert_eq!(change.folder, change.path.is_dir() || change.path.ends_with("2026-11"), "{change:?}");
                paths.push(change.path);
            }
            paths.dedup();
            paths
        };
        let draft = specs.join("drafts/a.md");
        std::fs::write(&draft, "# a").unwrap();
        assert_eq!(reported(), vec![draft.clone()]);
        std::fs::read(&draft).unwrap();
        std::fs::read_dir(specs.join("drafts")).unwrap().for_each(drop);
        assert_eq!(reported(), Vec::<PathBuf>::new(), "a read is no change");
        let config = root.path().join(".scafld/config.yaml");
        std::fs::write(&config, "a: 1\n").unwrap();
        reported();
        std::fs::OpenOptions::new().append(true).open(&config).unwrap().write_all(b"b: 2\n").unwrap();
        assert_eq!(reported(), vec![config]);
        let month = specs.join("archive/2026-11");
        std::fs::create_dir(&month).unwrap();
        assert_eq!(reported(), vec![month.clone()]);
        std::fs::rename(&draft, month.join("a.md")).unwrap();
        assert_eq!(reported(), vec![draft, month.join("a.md")], "the new month is watched");
        // A whole-workspace read that takes the events first hands them on too.
        std::fs::write(month.join("a.md"), "# a, edited").unwrap();
        assert!(!wire.quiet(root.path()));
        assert_eq!(changes.try_recv().ok().map(|c| c.path), Some(month.join("a.md")));
    }

    /// A spec folder that arrives as a symlink, and `.scafld` replaced whole, are folder
    /// changes whose new folders are watched at once; the workspace folder's other names are
    /// no change at all.
    #[test]
    fn symlinked_folders_and_a_replaced_scafld_are_watched_as_they_come() {
        let (wire, mut changes) = Tripwire::new().expect("inotify");
        let root = tempfile::tempdir().unwrap();
        let (root, elsewhere) = (root.path().join("w"), root.path().join("elsewhere"));
        let specs = specfile::specs_dir(&root);
        std::fs::create_dir_all(specs.join("drafts")).unwrap();
        std::fs::create_dir_all(&elsewhere).unwrap();
        assert!(wire.arm(&root).is_some());
        assert!(wire.quiet(&root));
        let mut taken = || {
            wire.read_events();
            let mut all = Vec::new();
            while let Ok(change) = changes.try_recv() {
                all.push((change.path.strip_prefix(&root).unwrap().to_path_buf(), change.folder));
            }
            all.dedup();
            all
        };
        std::fs::write(root.join("build.log"), "x").unwrap();
        assert_eq!(taken(), vec![]);
        assert!(wire.quiet(&root), "a file beside .scafld trips nothing");
        std::os::unix::fs::symlink(&elsewhere, specs.join("approved")).unwrap();
        assert_eq!(taken(), vec![(PathBuf::from(".scafld/specs/approved"), true)]);
        std::fs::write(elsewhere.join("t.md"), "# t").unwrap();
        assert_eq!(taken(), vec![(PathBuf::from(".scafld/specs/approved/t.md"), false)], "the link was watched");
        let kept = root.parent().unwrap().join("kept");
        std::fs::rename(root.join(".scafld"), &kept).unwrap();
        std::fs::create_dir_all(specs.join("drafts")).unwrap();
        assert!(taken().contains(&(PathBuf::from(".scafld"), true)));
        std::fs::write(specs.join("drafts/new.md"), "# new").unwrap();
        assert_eq!(taken(), vec![(PathBuf::from(".scafld/specs/drafts/new.md"), false)], "the new .scafld was watched");
    }

    /// A task's judged files are watched wherever they are: a file of the scope (edits to its
    /// neighbours are no change of it), a folder whole with a folder made in it later, and a
    /// file whose folder does not exist yet; forgotten, nothing of them is reported.
    #[test]
    fn judged_files_are_reported_as_their_tasks_wherever_they_are() {
        let (wire, mut changes) = Tripwire::new().expect("inotify");
        let root = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(root.path()).unwrap();
        std::fs::create_dir_all(root.join("src/deep")).unwrap();
        std::fs::write(root.join("notes.txt"), "1").unwrap();
        let paths = ["notes.txt".to_string(), "src".to_string(), "later/new.rs".to_string()];
        wire.watch_judged(&root, "t", &paths);
        let mut taken = || {
            wire.read_events();
            let mut all = Vec::new();
            while let Ok(change) = changes.try_recv() {
                assert_eq!(change.judged.as_deref(), Some("t"), "{change:?}");
                all.push(change.path.strip_prefix(&root).unwrap().to_path_buf());
            }
            all.dedup();
            all
        };
        std::fs::write(root.join("notes.txt"), "2").unwrap();
        assert_eq!(taken(), vec![PathBuf::from("notes.txt")]);
        std::fs::write(root.join("other.txt"), "x").unwrap();
        assert_eq!(taken(), Vec::<PathBuf>::new(), "a neighbour is no judged file");
        std::fs::write(root.join("src/deep/a.rs"), "a").unwrap();
        assert_eq!(taken(), vec![PathBuf::from("src/deep/a.rs")]);
        std::fs::create_dir(root.join("src/new")).unwrap();
        assert_eq!(taken(), vec![PathBuf::from("src/new")]);
        std::fs::write(root.join("src/new/b.rs"), "b").unwrap();
        assert_eq!(taken(), vec![PathBuf::from("src/new/b.rs")], "a folder made later is watched");
        std::fs::create_dir(root.join("later")).unwrap();
        assert_eq!(taken(), vec![PathBuf::from("later")]);
        std::fs::write(root.join("later/new.rs"), "n").unwrap();
        assert_eq!(taken(), vec![PathBuf::from("later/new.rs")], "the file's folder, once made, is watched");
        wire.forget_judged(&root, "t");
        taken();
        std::fs::write(root.join("notes.txt"), "3").unwrap();
        std::fs::write(root.join("src/deep/a.rs"), "b").unwrap();
        assert_eq!(taken(), Vec::<PathBuf>::new(), "forgotten");
    }

    #[test]
    fn an_overflow_trips_every_armed_root_and_a_removed_watch_is_forgotten() {
        let (wire, _changes) = Tripwire::new().expect("inotify");
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        for root in [a.path(), b.path()] {
            std::fs::create_dir_all(specfile::specs_dir(root).join("drafts")).unwrap();
            assert!(wire.arm(root).is_some_and(|armed| armed.in_place()));
        }
        assert!(wire.quiet(a.path()) && wire.quiet(b.path()));
        // The kernel's overflow event names no watch of ours.
        let other = wire.inotify.add_watch(a.path(), Mask::IN_ONLYDIR | Mask::IN_DELETE_SELF).unwrap();
        let overflow = InotifyEvent { wd: other, mask: Mask::IN_Q_OVERFLOW, cookie: 0, name: None };
        let mut taken = Taken::default();
        crate::sync::lock(&wire.state).note(overflow, &mut taken);
        let mut lost: Vec<PathBuf> = taken.changes.iter().filter(|c| c.folder).map(|c| c.root.clone()).collect();
        lost.sort();
        let mut both = vec![a.path().to_path_buf(), b.path().to_path_buf()];
        both.sort();
        assert_eq!(lost, both, "every root's spec folders are to be looked at whole");
        assert!(!wire.quiet(a.path()) && !wire.quiet(b.path()), "events were lost: no root is quiet");
        assert!(wire.quiet(a.path()), "and once told, quiet again");
        std::fs::remove_dir_all(specfile::specs_dir(a.path()).join("drafts")).unwrap();
        assert!(!wire.quiet(a.path()));
        assert!(wire.quiet(b.path()), "b's folders did not change");
        let watches =
            |root: &Path| crate::sync::lock(&wire.state).roots.values().filter(|r| r.contains_key(root)).count();
        // `.scafld`, `specs` and the workspace folder itself are left of a's four.
        assert_eq!(watches(a.path()), 3, "the removed folder's watch is forgotten");
        assert_eq!(watches(b.path()), 4);
    }
}
