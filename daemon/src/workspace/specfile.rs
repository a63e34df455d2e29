//! Spec files on disk: where a spec of a given status lives, finding specs, and atomic writes
//! and moves, and the guarded put that never replaces a file other than the one a write was
//! computed from.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::fcntl::OFlag;

use crate::domain::lifecycle::{Folder, Status};

pub const SPECS_DIR: &str = ".scafld/specs";

pub fn specs_dir(root: &Path) -> PathBuf {
    root.join(SPECS_DIR)
}

/// Where a spec with `status` belongs; archived specs go under `archive/<month>/`.
pub fn target_path(root: &Path, task_id: &str, status: Status, month: &str) -> PathBuf {
    let folder = specs_dir(root).join(Folder::of(status).as_str());
    let folder = if Folder::of(status) == Folder::Archive { folder.join(month) } else { folder };
    folder.join(format!("{task_id}.md"))
}

/// A spec file found by [`scan`].
pub struct Found {
    pub path: PathBuf,
    pub folder: Folder,
    /// The entry's own metadata (not following a symlink), read through its directory:
    /// `None` when it could not be read.
    pub meta: Option<fs::Metadata>,
}

pub use scafld_protocol::vocab::ARCHIVE_DEPTH;

/// What [`scan`] found: the spec files, and what under the spec folders it could not read.
#[derive(Default)]
pub struct Scan {
    pub found: Vec<Found>,
    pub unlisted: Vec<Unlisted>,
}

/// Something under the spec folders that may hold a spec no read can see: whole-workspace
/// reads (`list`, `validate --all`, `report`) name each, so nothing there vanishes unsaid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unlisted {
    /// A spec folder that is there but cannot be looked in (no permission, not a folder, a
    /// link loop): the specs in it are not read, and a task's file there is not found.
    Unreadable { folder: PathBuf, kind: io::ErrorKind, error: String },
    /// A `*.md` file whose name is not UTF-8: it names no task id, so it is not read.
    NotUtf8 { path: PathBuf },
    /// A folder of the archive [`ARCHIVE_DEPTH`] levels down that holds folders: nothing below
    /// it is read.
    TooDeep { folder: PathBuf },
}

impl Unlisted {
    fn unreadable(folder: &Path, e: &io::Error) -> Unlisted {
        Unlisted::Unreadable { folder: folder.to_path_buf(), kind: e.kind(), error: e.to_string() }
    }

    /// Whether it is `folder` or below it.
    pub fn is_below(&self, folder: &Path) -> bool {
        match self {
            Unlisted::Unreadable { folder: at, .. } | Unlisted::TooDeep { folder: at } => at.starts_with(folder),
            Unlisted::NotUtf8 { path } => path.starts_with(folder),
        }
    }

    /// What to do about it.
    pub fn remedy(&self) -> String {
        match self {
            Unlisted::Unreadable { folder, kind: io::ErrorKind::PermissionDenied, .. } => {
                format!("give its owner access again (`chmod u+rwx {}`)", shown(folder))
            }
            Unlisted::Unreadable { folder, .. } => format!("make {} a folder scafld can read", shown(folder)),
            Unlisted::NotUtf8 { .. } => "rename it to `<task-id>.md` (a task id is UTF-8)".to_string(),
            Unlisted::TooDeep { .. } => "move the specs below it up into an archive folder nearer the top".to_string(),
        }
    }
}

impl std::fmt::Display for Unlisted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unlisted::Unreadable { folder, error, .. } => {
                write!(f, "{} cannot be read ({error}): no spec in it is read", shown(folder))
            }
            // Shown lossily: each byte that is not UTF-8 as U+FFFD.
            Unlisted::NotUtf8 { path } => {
                write!(f, "{}: its name is not UTF-8, so it names no task and is not read", shown(path))
            }
            Unlisted::TooDeep { folder } => write!(
                f,
                "{} holds folders more than {ARCHIVE_DEPTH} levels below .scafld/specs/archive: no spec below it is read",
                shown(folder)
            ),
        }
    }
}

/// Every `*.md` under the four lifecycle folders (the archive's at any depth up to
/// [`ARCHIVE_DEPTH`]: [`archive_folders`]), in lookup order, and what could not be read.
pub fn scan(root: &Path) -> Scan {
    let specs = specs_dir(root);
    let mut scan = Scan::default();
    for &folder in Folder::ALL {
        let dir = specs.join(folder.as_str());
        if folder == Folder::Archive {
            for archived in archive_folders(&dir) {
                markdown_files(&archived, folder, &mut scan);
                if archive_depth(&dir, &archived) == ARCHIVE_DEPTH && !folders_below(&archived, 1).is_empty() {
                    scan.unlisted.push(Unlisted::TooDeep { folder: archived });
                }
            }
        } else {
            markdown_files(&dir, folder, &mut scan);
        }
    }
    scan
}

/// How many folders below `archive` `folder` is.
fn archive_depth(archive: &Path, folder: &Path) -> usize {
    folder.strip_prefix(archive).map_or(0, |below| below.components().count())
}

/// Up to `most` real folders (never through a symlink) below `dir`, breadth first.
fn folders_below(dir: &Path, most: usize) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut queue = std::collections::VecDeque::from([dir.to_path_buf()]);
    while let Some(at) = queue.pop_front() {
        let Ok(entries) = fs::read_dir(&at) else { continue };
        for entry in entries.filter_map(Result::ok) {
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                if found.len() == most {
                    return found;
                }
                found.push(entry.path());
                queue.push_back(entry.path());
            }
        }
    }
    found
}

/// A spec named `file` in the archive further down than anything reads ([`Unlisted::TooDeep`]),
/// looked for in at most 10 000 folders there: its task id is in use all the same.
pub fn too_deep(root: &Path, file: &str) -> Option<PathBuf> {
    let archive = specs_dir(root).join(Folder::Archive.as_str());
    archive_folders(&archive)
        .into_iter()
        .filter(|folder| archive_depth(&archive, folder) == ARCHIVE_DEPTH)
        .flat_map(|folder| folders_below(&folder, 10_000))
        .map(|folder| folder.join(file))
        .find(|path| fs::symlink_metadata(path).is_ok())
}

/// The spec folders where a file named `file` could be but cannot be looked for (a folder
/// without permission, a file where the folder belongs, a link loop): a task not found may
/// still have its spec in one of them.
pub fn hiding(root: &Path, file: &str) -> Vec<Unlisted> {
    let archive = specs_dir(root).join(Folder::Archive.as_str());
    let months = archive_folders(&archive);
    let mut hidden: Vec<Unlisted> = candidates(root, file, &months)
        .into_iter()
        .filter_map(|(_, path)| match fs::symlink_metadata(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Some(Unlisted::unreadable(path.parent()?, &e)),
            _ => None,
        })
        .collect();
    // A folder of the archive that cannot be listed hides the folders below it.
    for month in &months {
        if let Err(e) = fs::read_dir(month)
            && e.kind() != io::ErrorKind::NotFound
            && !hidden.iter().any(|h| matches!(h, Unlisted::Unreadable { folder, .. } if folder == month))
        {
            hidden.push(Unlisted::unreadable(month, &e));
        }
    }
    hidden
}

/// Every path a spec file named `file` could have, with its folder, in lookup order, given the
/// archive's folders ([`archive_folders`]).
pub fn candidates(root: &Path, file: &str, months: &[PathBuf]) -> Vec<(Folder, PathBuf)> {
    let specs = specs_dir(root);
    let mut paths = Vec::with_capacity(Folder::ALL.len() + months.len());
    for &folder in Folder::ALL {
        match folder {
            Folder::Archive => paths.extend(months.iter().map(|month| (folder, month.join(file)))),
            _ => paths.push((folder, specs.join(folder.as_str()).join(file))),
        }
    }
    paths
}

/// Which of the files claiming one task id (its name in more than one spec folder: an
/// interrupted move, a copy made by hand) owns the id: the one with the least key, that is the
/// first in lookup order (drafts, approved, active, then the archive's files by path, name by
/// name, as the original's walk of the archive in name order meets them).
/// The others are duplicates, reported as errors. This is the one rule: the index sorts every
/// task's files by this key, whatever order they were found or arrived in, so that a daemon
/// that watched them come and one that scanned them at start agree. ([`scan`] and
/// [`candidates`] list files in the same order, but nothing relies on that.)
pub fn lookup_order(folder: Folder, path: &Path) -> (usize, &Path) {
    let rank = Folder::ALL.iter().position(|f| *f == folder).unwrap_or(Folder::ALL.len());
    (rank, path)
}

/// The folders of the archive folder `archive` that may hold specs, sorted by path: `archive`
/// itself (when it is a folder) and every folder below it, up to [`ARCHIVE_DEPTH`] levels
/// down. A symlink to a folder is listed (a month linked in, as before), but never walked
/// into, so no link can make the walk loop or reach further than the folders it names.
pub fn archive_folders(archive: &Path) -> Vec<PathBuf> {
    let mut folders = Vec::new();
    if archive.is_dir() {
        walk_archive(archive, 0, &mut folders);
    }
    folders.sort();
    folders
}

fn walk_archive(dir: &Path, depth: usize, folders: &mut Vec<PathBuf>) {
    folders.push(dir.to_path_buf());
    if depth >= ARCHIVE_DEPTH {
        return;
    }
    // A link is not walked into: only the folder it names is listed.
    if fs::symlink_metadata(dir).is_ok_and(|meta| meta.file_type().is_symlink()) {
        return;
    }
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.filter_map(Result::ok) {
        let is_folder = match entry.file_type() {
            Ok(kind) if kind.is_symlink() => entry.path().is_dir(),
            Ok(kind) => kind.is_dir(),
            Err(_) => false,
        };
        if is_folder {
            walk_archive(&entry.path(), depth + 1, folders);
        }
    }
}

/// A spec's path as messages show it: from `.scafld/` on (the whole path for one elsewhere).
pub fn shown(path: &Path) -> String {
    let text = path.display().to_string();
    match text.rfind("/.scafld/specs/") {
        Some(at) => text[at + 1..].to_string(),
        None => text,
    }
}

/// The lifecycle folder of a path under `.scafld/specs/`, if it is a spec file there.
pub fn folder_of(root: &Path, path: &Path) -> Option<Folder> {
    Folder::holding(path.strip_prefix(specs_dir(root)).ok()?)
}

/// Every `*.md` entry of `dir` but directories, sorted by name: a FIFO, a device or a dangling
/// symlink named like a spec is listed too, so the index reports it instead of skipping it
/// silently. Names are filtered before anything is read; the entry's own type needs no stat,
/// and its metadata is read relative to the directory (no walk of the whole path per file).
/// A folder that is there but cannot be listed is reported in `scan`'s `unlisted`.
fn markdown_files(dir: &Path, folder: Folder, scan: &mut Scan) {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return,
        Err(e) => return scan.unlisted.push(Unlisted::unreadable(dir, &e)),
    };
    let mut files: Vec<(std::ffi::OsString, fs::DirEntry)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name();
            let bytes = name.as_encoded_bytes();
            (bytes.ends_with(b".md") && bytes.len() > 3 && !bytes.starts_with(b".")).then_some((name, e))
        })
        .filter(|(_, e)| match e.file_type() {
            Ok(kind) if kind.is_symlink() => !e.path().is_dir(),
            Ok(kind) => !kind.is_dir(),
            Err(_) => !e.path().is_dir(),
        })
        .collect();
    files.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    // A name that is not UTF-8 claims no task id: said, never read as one.
    files.retain(|(name, e)| {
        let utf8 = name.to_str().is_some();
        if !utf8 {
            scan.unlisted.push(Unlisted::NotUtf8 { path: e.path() });
        }
        utf8
    });
    scan.found.extend(files.into_iter().map(|(_, e)| Found { path: e.path(), folder, meta: e.metadata().ok() }));
}

/// Write `text` to `path` atomically: temp file in the same directory, fsync, rename, fsync
/// the directory. Creates the directory if needed, never through a symlink inside `.scafld`
/// ([`super::layout::create_real_dir`]). The file keeps the mode it had; a new one gets the
/// user's usual mode (the daemon's own umask is private, see `runner::adopt_daemon_settings`).
pub fn write_atomic(path: &Path, text: &str) -> io::Result<()> {
    let mode = fs::metadata(path).map(|m| m.permissions().mode() & 0o7777);
    write_atomic_mode(path, text.as_bytes(), mode.unwrap_or(0o666 & !crate::runner::inherited_umask()))
}

/// [`write_atomic`] with the file's mode given (0600 for what only the daemon may read).
pub fn write_atomic_mode(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    stage(path, bytes, mode, None)?.commit()
}

/// Write the spec to `target`, and when it moved from `current`, remove the old file. Refuses
/// to replace an existing file at a new location.
/// Returns the new file's metadata as written ([`Staged::written`]).
pub fn write_spec(current: Option<&Path>, target: &Path, text: &str) -> io::Result<fs::Metadata> {
    let staged = stage_spec(current, target, text)?;
    let written = staged.written().clone();
    staged.commit()?;
    Ok(written)
}

/// The first half of [`write_spec`]: the new bytes written and synced under a temporary name
/// beside `target`, nothing visible yet (a caller can make something else durable first, and
/// meanwhile the disk syncs this).
pub fn stage_spec(current: Option<&Path>, target: &Path, text: &str) -> io::Result<Staged> {
    let moving = current.filter(|c| *c != target);
    if moving.is_some() {
        refuse_existing(target)?;
    }
    // A moved spec keeps the mode it had where it was.
    let mode = current.and_then(|c| fs::metadata(c).ok()).map(|m| m.permissions().mode() & 0o7777);
    let mode = mode.or_else(|| fs::metadata(target).ok().map(|m| m.permissions().mode() & 0o7777));
    stage(target, text.as_bytes(), mode.unwrap_or(0o666 & !crate::runner::inherited_umask()), moving)
}

fn refuse_existing(target: &Path) -> io::Result<()> {
    if target.exists() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} already exists; resolve the duplicate spec by hand", target.display()),
        ));
    }
    Ok(())
}

/// What an atomic write's temporary name carries: `.<name>.tmp-<pid>-<n>`.
const TEMP_MARK: &str = ".tmp-";

/// Whether `name` is an atomic write's temporary file (left behind when the writer died
/// between writing it and renaming it into place).
pub fn is_write_leftover(name: &str) -> bool {
    write_leftover_pid(name).is_some()
}

/// The process that wrote `name`, when it is an atomic write's temporary file.
pub fn write_leftover_pid(name: &str) -> Option<u32> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (_, tail) = name.strip_prefix('.')?.rsplit_once(TEMP_MARK)?;
    let (pid, n) = tail.split_once('-')?;
    if digits(pid) && digits(n) { pid.parse().ok() } else { None }
}

/// The folders of a workspace that atomic writes go to: every spec folder (the archive's
/// folders below it too), `.scafld/`, `.scafld/receipts/` and the root (the agent guide).
pub fn write_dirs(root: &Path) -> Vec<PathBuf> {
    let specs = specs_dir(root);
    let mut dirs = vec![root.to_path_buf(), root.join(".scafld"), root.join(".scafld/receipts")];
    dirs.extend(Folder::ALL.iter().map(|f| specs.join(f.as_str())));
    let archive = specs.join(Folder::Archive.as_str());
    dirs.extend(archive_folders(&archive).into_iter().filter(|d| *d != archive));
    dirs
}

/// The daemon's own spec moves in flight. A move (a status change that puts the spec in
/// another folder) renames the new file in before it takes the old one away, so meanwhile the
/// task is in two files; a reader that finds it so must not take that for an interrupted
/// move's leftover. A move holds this shared across its renames ([`Moves::moving`]); a reader
/// that found a task in two files looks again holding it exclusively ([`Moves::settled`]),
/// when no move of this daemon is half done. Held for a few syscalls, never across an await.
#[derive(Default)]
pub struct Moves(std::sync::RwLock<()>);

impl Moves {
    /// Held by a write across [`Staged::put_in_place_over`].
    pub fn moving(&self) -> std::sync::RwLockReadGuard<'_, ()> {
        crate::sync::read(&self.0)
    }

    /// Held by a reader while it looks again at a task it found in two files.
    pub fn settled(&self) -> std::sync::RwLockWriteGuard<'_, ()> {
        crate::sync::write(&self.0)
    }
}

/// New bytes on disk under a temporary name beside `path`, synced; [`Staged::commit`] puts
/// them in place. Dropped uncommitted, the temporary file is removed.
pub struct Staged {
    temp: PathBuf,
    path: PathBuf,
    /// The file this one moves from (removed once it is in place).
    moving_from: Option<PathBuf>,
    /// The file this one replaces, held (by path, O_PATH): its storage is freed when the last
    /// descriptor closes, so this moves that work out of the rename (most of its cost here).
    replaced: Option<File>,
    /// The new file as written, to tell it from a hand edit that replaces it afterwards.
    written: fs::Metadata,
    /// The new file, kept open: its inode number is never another file's while it is held
    /// (how a guarded put tells its own file from a save).
    _open: File,
    committed: bool,
}

/// The next number for a temporary name of this process.
fn next_temp() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    COUNTER.fetch_add(1, Ordering::Relaxed)
}

/// `path` held by path only (O_PATH): nothing opened for reading, so no FIFO or device swapped
/// in meanwhile can block or notice it; not through a symlink either.
fn hold(path: &Path) -> Option<File> {
    OpenOptions::new().read(true).custom_flags((OFlag::O_PATH | OFlag::O_NOFOLLOW).bits()).open(path).ok()
}

/// Temp file in the same directory (created when missing, never through a symlink inside
/// `.scafld`: [`super::layout::create_real_dir`]), written with `mode`, fsynced.
fn stage(path: &Path, bytes: &[u8], mode: u32, moving_from: Option<&Path>) -> io::Result<Staged> {
    let dir = path.parent().ok_or_else(|| io::Error::other("path has no directory"))?;
    super::layout::create_real_dir(dir)?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("spec");
    let temp = dir.join(format!(".{name}{TEMP_MARK}{}-{}", std::process::id(), next_temp()));
    let mut file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&temp)?;
    let replaced = if moving_from.is_none() { hold(path) } else { None };
    let mut staged = Staged {
        temp,
        path: path.to_path_buf(),
        moving_from: moving_from.map(Path::to_path_buf),
        replaced,
        written: file.metadata()?,
        _open: file.try_clone()?,
        committed: false,
    };
    file.set_permissions(fs::Permissions::from_mode(mode))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    staged.written = file.metadata()?;
    Ok(staged)
}

impl Staged {
    /// Rename into place and fsync the directory (and, for a move, remove the old file and
    /// fsync its directory).
    pub fn commit(self) -> io::Result<()> {
        self.put_in_place()?.sync()
    }

    /// The new file's metadata as written (a rename keeps its inode, size and modification
    /// time): what the index compares the file in place with.
    pub fn written(&self) -> &fs::Metadata {
        &self.written
    }

    /// [`Staged::commit`], except that an in-place replacement leaves its directory's fsync to
    /// the caller ([`InPlace::sync`]): until then a power loss may bring back the previous
    /// version, whole. A move completes here, its old file removed only once the new one's
    /// directory is synced, so that no crash leaves the spec twice or nowhere.
    pub fn put_in_place(mut self) -> io::Result<InPlace> {
        if self.moving_from.is_some() {
            refuse_existing(&self.path)?;
        }
        fs::rename(&self.temp, &self.path)?;
        self.committed = true;
        let dir = self.path.parent().ok_or_else(|| io::Error::other("path has no directory"))?.to_path_buf();
        let Some(old) = &self.moving_from else {
            return Ok(InPlace { dir: Some(dir), _replaced: self.replaced.take() });
        };
        File::open(&dir)?.sync_all()?;
        fs::remove_file(old)?;
        if let Some(dir) = old.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok(InPlace::default())
    }
}

/// A file renamed into place whose directory may still need its fsync.
#[derive(Default)]
#[must_use = "the rename is durable only once its directory is synced"]
pub struct InPlace {
    dir: Option<PathBuf>,
    /// The replaced file, freed once this is synced (or dropped).
    _replaced: Option<File>,
}

impl InPlace {
    pub fn sync(self) -> io::Result<()> {
        match &self.dir {
            Some(dir) => File::open(dir)?.sync_all(),
            None => Ok(()),
        }
    }
}

/// Which file a name led to: its device and inode, not following a symlink (a symlinked spec
/// is told by the link itself, as a rename replaces the link).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    pub fn of(meta: &fs::Metadata) -> FileId {
        FileId { dev: meta.dev(), ino: meta.ino() }
    }

    /// The file `path` names now.
    pub fn at(path: &Path) -> io::Result<FileId> {
        fs::symlink_metadata(path).map(|meta| FileId::of(&meta))
    }
}

/// How many times a guarded put swaps a newer save back before it stops and lets the last one
/// it took stand where the spec is (each swap is one system call: only a file saved again
/// within microseconds, over and over, gets there).
const MAX_SWAPS: usize = 16;

/// What [`Staged::put_in_place_over`] found.
#[must_use]
pub enum Put {
    /// The new bytes are in place, over the very file they were computed from.
    Placed(InPlace),
    /// That file had been replaced or changed (a save landed after it was read): nothing of the
    /// write stayed; the file there now is the user's, as they saved it. Compute again from it.
    Changed,
}

/// Whether `path` still names the file `id` with exactly `bytes` in it. Opened without
/// blocking (a FIFO swapped in meanwhile is read as empty, never waited on).
fn holds(path: &Path, id: FileId, bytes: &[u8]) -> io::Result<bool> {
    match FileId::at(path) {
        Ok(now) if now == id => {}
        Ok(_) => return Ok(false),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    }
    let file = match OpenOptions::new().read(true).custom_flags(OFlag::O_NONBLOCK.bits()).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let mut now = Vec::with_capacity(bytes.len() + 1);
    match file.take(bytes.len() as u64 + 1).read_to_end(&mut now) {
        Ok(_) => Ok(now == bytes),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
        Err(e) => Err(e),
    }
}

/// `renameat2` with `flags`; `EINVAL` where the C library has no such call (as from a file
/// system without the flag).
fn rename_with(from: &Path, to: &Path, exchange: bool) -> io::Result<()> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
        let flags = if exchange { RenameFlags::RENAME_EXCHANGE } else { RenameFlags::RENAME_NOREPLACE };
        renameat2(AT_FDCWD, from, AT_FDCWD, to, flags).map_err(io::Error::from)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        let _ = (from, to, exchange);
        Err(io::Error::from(nix::errno::Errno::EINVAL))
    }
}

/// Whether a `renameat2` flag is unsupported here (the file system, the kernel or the C
/// library), so that the plain rename is all there is.
fn unsupported(e: &io::Error) -> bool {
    use nix::errno::Errno;
    [Errno::EINVAL, Errno::ENOSYS, Errno::EOPNOTSUPP].iter().any(|errno| e.raw_os_error() == Some(*errno as i32))
}

/// Swap the files at `a` and `b` in one step (both stay, each under the other's name).
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    rename_with(a, b, true)
}

/// Rename `from` to `to` unless `to` exists (`AlreadyExists`), in one step where the file
/// system can; elsewhere checked first, then renamed.
fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    match rename_with(from, to, false) {
        Err(e) if unsupported(&e) => {
            refuse_existing(to)?;
            fs::rename(from, to)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} already exists; resolve the duplicate spec by hand", to.display()),
        )),
        done => done,
    }
}

fn sync_dir_of(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) => File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

impl Staged {
    /// Put the staged bytes in place, over the file they were computed from and nothing else:
    /// the file `id` holding `bytes` (for a move, at the path it moves from). A user's save
    /// that came after the read is never replaced: the answer is [`Put::Changed`], the save is
    /// where it was, and nothing of this write stays.
    ///
    /// In place, the new file is swapped with the one at the path in one step
    /// (`RENAME_EXCHANGE`), and then the file taken out is looked at: the one read is removed;
    /// a newer save is swapped back (each file is at one name or the other throughout, so no
    /// save is ever unlinked by the daemon). A file system without the exchange gets a check
    /// right before a plain rename, a window of microseconds. A move renames the new file
    /// into its folder (refusing one there), then takes the old file away by renaming it and
    /// looks at what it took: a newer save goes back and the new file is removed.
    pub fn put_in_place_over(self, id: FileId, bytes: &[u8]) -> io::Result<Put> {
        match self.moving_from.clone() {
            Some(from) => self.move_over(&from, id, bytes),
            None => self.exchange_over(id, bytes),
        }
    }

    fn exchange_over(mut self, id: FileId, bytes: &[u8]) -> io::Result<Put> {
        if !holds(&self.path, id, bytes)? {
            return Ok(Put::Changed);
        }
        let dir = self.path.parent().ok_or_else(|| io::Error::other("path has no directory"))?.to_path_buf();
        match exchange(&self.temp, &self.path) {
            Ok(()) => self.committed = true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Put::Changed),
            Err(e) if unsupported(&e) => {
                fs::rename(&self.temp, &self.path)?;
                self.committed = true;
                return Ok(Put::Placed(InPlace { dir: Some(dir), _replaced: self.replaced.take() }));
            }
            Err(e) => return Err(e),
        }
        self.after_swap(id, bytes, dir)
    }

    /// Once swapped, the temporary name holds what was at the path: the file read, removed; or
    /// a newer save, swapped back (again, as long as newer ones come). Each file swapped back
    /// is held open meanwhile, so that no later file can have its inode number.
    fn after_swap(&mut self, id: FileId, bytes: &[u8], dir: PathBuf) -> io::Result<Put> {
        let ours = FileId::of(&self.written);
        let mut swapped_back: Vec<(FileId, Option<File>)> = Vec::new();
        for swaps in 0.. {
            let taken = FileId::at(&self.temp)?;
            if taken == id && holds(&self.temp, id, bytes)? {
                // The file read: the new one replaced exactly it.
                let replaced = hold(&self.temp);
                fs::remove_file(&self.temp)?;
                return Ok(Put::Placed(InPlace { dir: Some(dir), _replaced: replaced }));
            }
            if taken == ours || swapped_back.iter().any(|(back, _)| *back == taken) {
                // Ours came back (the user's file is in place again), or a save put back once
                // that a later one has replaced since: the file at the path is the newest.
                fs::remove_file(&self.temp)?;
                return Ok(Put::Changed);
            }
            if swaps == MAX_SWAPS {
                // Newer than what is at the path (saved back there by this loop).
                fs::rename(&self.temp, &self.path)?;
                return Ok(Put::Changed);
            }
            swapped_back.push((taken, hold(&self.temp)));
            match exchange(&self.temp, &self.path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    // The path was removed meanwhile: the save goes back there.
                    return match rename_noreplace(&self.temp, &self.path) {
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                            fs::remove_file(&self.temp).map(|()| Put::Changed)
                        }
                        done => done.map(|()| Put::Changed),
                    };
                }
                Err(e) => return Err(e),
            }
        }
        unreachable!("the loop returns by MAX_SWAPS")
    }

    fn move_over(mut self, from: &Path, id: FileId, bytes: &[u8]) -> io::Result<Put> {
        if !holds(from, id, bytes)? {
            return Ok(Put::Changed);
        }
        rename_noreplace(&self.temp, &self.path)?;
        self.committed = true;
        sync_dir_of(&self.path)?;
        let ours = FileId::of(&self.written);
        // The old file taken away under a temporary name, in one step, then looked at.
        let taken = self.temp.with_file_name(format!(
            ".{}{TEMP_MARK}{}-{}",
            from.file_name().and_then(|n| n.to_str()).unwrap_or("spec"),
            std::process::id(),
            next_temp()
        ));
        match fs::rename(from, &taken) {
            Ok(()) => {}
            // Removed or moved away by hand meanwhile: the new file is the spec.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Put::Placed(InPlace::default())),
            Err(e) => return Err(e),
        }
        if holds(&taken, id, bytes)? {
            fs::remove_file(&taken)?;
            sync_dir_of(from)?;
            return Ok(Put::Placed(InPlace::default()));
        }
        // A newer save: back where it was (unless a still newer one is there), and the new
        // file goes.
        match rename_noreplace(&taken, from) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => fs::remove_file(&taken)?,
            done => done?,
        }
        if FileId::at(&self.path).is_ok_and(|at| at == ours) {
            fs::remove_file(&self.path)?;
        }
        sync_dir_of(&self.path)?;
        sync_dir_of(from)?;
        Ok(Put::Changed)
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.temp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `active/t.md` under `dir`, its folder made.
    fn active_spec(dir: &Path) -> PathBuf {
        let spec = dir.join("active/t.md");
        fs::create_dir_all(spec.parent().unwrap()).unwrap();
        spec
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }

    /// A staged write shows nothing until it is committed, and leaves nothing behind when it
    /// is dropped instead.
    #[test]
    fn a_staged_spec_is_invisible_until_committed_and_gone_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let spec = active_spec(dir.path());
        fs::write(&spec, "old").unwrap();
        let staged = stage_spec(Some(&spec), &spec, "new").unwrap();
        assert_eq!(fs::read_to_string(&spec).unwrap(), "old");
        // Named so that a sweep can tell it from anything else once its writer is gone.
        assert!(is_write_leftover(staged.temp.file_name().unwrap().to_str().unwrap()), "{:?}", staged.temp);
        staged.commit().unwrap();
        assert_eq!(fs::read_to_string(&spec).unwrap(), "new");
        assert_eq!(names(spec.parent().unwrap()), vec!["t.md"]);

        drop(stage_spec(Some(&spec), &spec, "newer").unwrap());
        assert_eq!(fs::read_to_string(&spec).unwrap(), "new");
        assert_eq!(names(spec.parent().unwrap()), vec!["t.md"], "the dropped temporary file is removed");
    }

    /// A move removes the old file once the new one is in place, and refuses a target that
    /// appeared while the write was staged.
    #[test]
    fn a_staged_move_refuses_a_target_that_appeared_meanwhile() {
        let dir = tempfile::tempdir().unwrap();
        let (from, to) = (dir.path().join("approved/t.md"), dir.path().join("active/t.md"));
        fs::create_dir_all(from.parent().unwrap()).unwrap();
        fs::write(&from, "spec").unwrap();
        stage_spec(Some(&from), &to, "moved").unwrap().commit().unwrap();
        assert!(!from.exists());
        assert_eq!(fs::read_to_string(&to).unwrap(), "moved");

        let back = dir.path().join("approved/t.md");
        let staged = stage_spec(Some(&to), &back, "back").unwrap();
        fs::write(&back, "someone else's").unwrap();
        assert_eq!(staged.commit().unwrap_err().kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read_to_string(&back).unwrap(), "someone else's");
        assert_eq!(fs::read_to_string(&to).unwrap(), "moved");
        assert_eq!(names(back.parent().unwrap()), vec!["t.md"], "the refused temporary file is removed");
    }

    /// Put in place, a replacement is visible at once with its folder's sync still to come,
    /// while a move is finished outright: its old file is gone before anything is answered.
    #[test]
    fn put_in_place_finishes_a_move_and_leaves_only_a_replacements_sync() {
        let dir = tempfile::tempdir().unwrap();
        let spec = active_spec(dir.path());
        fs::write(&spec, "old").unwrap();
        let in_place = stage_spec(Some(&spec), &spec, "new").unwrap().put_in_place().unwrap();
        assert_eq!(fs::read_to_string(&spec).unwrap(), "new");
        assert!(in_place.dir.is_some() && in_place._replaced.is_some());
        in_place.sync().unwrap();
        assert_eq!(names(spec.parent().unwrap()), vec!["t.md"]);

        let to = dir.path().join("review/t.md");
        let moved = stage_spec(Some(&spec), &to, "moved").unwrap().put_in_place().unwrap();
        assert!(!spec.exists() && moved.dir.is_none(), "a move is synced and finished in place");
        assert_eq!(fs::read_to_string(&to).unwrap(), "moved");
    }

    /// `text` saved at `path` as editors save: a temporary file renamed over it.
    fn save_atomically(path: &Path, text: &str) {
        let temp = path.with_extension("md~");
        fs::write(&temp, text).unwrap();
        fs::rename(&temp, path).unwrap();
    }

    /// A guarded put replaces the very file its bytes were computed from and nothing else: a
    /// save that came after the read (renamed over it, or written in place), or a removal,
    /// leaves the user's file as it is and nothing of the write behind.
    #[test]
    fn a_guarded_put_replaces_only_the_file_it_was_computed_from() {
        let dir = tempfile::tempdir().unwrap();
        let spec = active_spec(dir.path());
        fs::write(&spec, "read").unwrap();
        let read = FileId::at(&spec).unwrap();
        let staged = stage_spec(Some(&spec), &spec, "projected").unwrap();
        let Put::Placed(in_place) = staged.put_in_place_over(read, b"read").unwrap() else { panic!("not placed") };
        in_place.sync().unwrap();
        assert_eq!(fs::read_to_string(&spec).unwrap(), "projected");
        assert_eq!(names(spec.parent().unwrap()), vec!["t.md"]);

        let read = FileId::at(&spec).unwrap();
        let staged = stage_spec(Some(&spec), &spec, "projected again").unwrap();
        save_atomically(&spec, "the user's save");
        assert!(matches!(staged.put_in_place_over(read, b"projected").unwrap(), Put::Changed));
        assert_eq!(fs::read_to_string(&spec).unwrap(), "the user's save");
        assert_eq!(names(spec.parent().unwrap()), vec!["t.md"], "nothing of the write stays");

        let read = FileId::at(&spec).unwrap();
        let staged = stage_spec(Some(&spec), &spec, "projected again").unwrap();
        fs::write(&spec, "written in place").unwrap();
        assert!(matches!(staged.put_in_place_over(read, b"the user's save").unwrap(), Put::Changed));
        assert_eq!(fs::read_to_string(&spec).unwrap(), "written in place");

        let read = FileId::at(&spec).unwrap();
        let staged = stage_spec(Some(&spec), &spec, "projected again").unwrap();
        fs::remove_file(&spec).unwrap();
        assert!(matches!(staged.put_in_place_over(read, b"written in place").unwrap(), Put::Changed));
        assert!(names(spec.parent().unwrap()).is_empty(), "a removed spec is not written back");
    }

    /// The swap of a guarded put, with a save landing between its check and its swap: the
    /// save taken out is swapped back, the new file goes, and the save is the spec again. With
    /// no save, the file read is what the swap takes out, and it goes.
    #[test]
    fn a_save_that_lands_between_the_check_and_the_swap_is_swapped_back() {
        let dir = tempfile::tempdir().unwrap();
        let spec = active_spec(dir.path());
        let folder = spec.parent().unwrap().to_path_buf();
        fs::write(&spec, "read").unwrap();
        let read = FileId::at(&spec).unwrap();
        let mut staged = stage_spec(Some(&spec), &spec, "projected").unwrap();
        // The check passed on the file read; then the user saved, then the swap.
        save_atomically(&spec, "the user's save");
        match exchange(&staged.temp, &spec) {
            Err(e) if unsupported(&e) => return eprintln!("no RENAME_EXCHANGE here: {e}"),
            swapped => swapped.unwrap(),
        }
        staged.committed = true;
        assert_eq!(fs::read_to_string(&spec).unwrap(), "projected");
        assert!(matches!(staged.after_swap(read, b"read", folder.clone()).unwrap(), Put::Changed));
        drop(staged);
        assert_eq!(fs::read_to_string(&spec).unwrap(), "the user's save");
        assert_eq!(names(&folder), vec!["t.md"], "the new file is gone");

        let read = FileId::at(&spec).unwrap();
        let mut staged = stage_spec(Some(&spec), &spec, "projected").unwrap();
        exchange(&staged.temp, &spec).unwrap();
        staged.committed = true;
        let Put::Placed(in_place) = staged.after_swap(read, b"the user's save", folder.clone()).unwrap() else {
            panic!("the file read was taken out, yet the write was not placed")
        };
        in_place.sync().unwrap();
        drop(staged);
        assert_eq!(fs::read_to_string(&spec).unwrap(), "projected");
        assert_eq!(names(&folder), vec!["t.md"], "the file read is gone");
    }

    /// A guarded move leaves a save made after the read where it was, and removes the copy it
    /// had put in the new folder; without one, it moves.
    #[test]
    fn a_guarded_move_leaves_a_newer_save_where_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let (from, to) = (dir.path().join("approved/t.md"), dir.path().join("active/t.md"));
        fs::create_dir_all(from.parent().unwrap()).unwrap();
        fs::write(&from, "read").unwrap();
        let read = FileId::at(&from).unwrap();
        let staged = stage_spec(Some(&from), &to, "moved").unwrap();
        save_atomically(&from, "the user's save");
        assert!(matches!(staged.put_in_place_over(read, b"read").unwrap(), Put::Changed));
        assert_eq!(fs::read_to_string(&from).unwrap(), "the user's save");
        assert_eq!(names(from.parent().unwrap()), vec!["t.md"]);
        assert!(names(to.parent().unwrap()).is_empty(), "nothing stays in the new folder");

        let read = FileId::at(&from).unwrap();
        let staged = stage_spec(Some(&from), &to, "moved").unwrap();
        let Put::Placed(_) = staged.put_in_place_over(read, b"the user's save").unwrap() else { panic!("not moved") };
        assert!(names(from.parent().unwrap()).is_empty());
        assert_eq!(fs::read_to_string(&to).unwrap(), "moved");
    }

    /// The replaced file is held by path only: a FIFO put where the spec was (a hostile or
    /// broken workspace) neither blocks the write nor is opened for reading.
    #[test]
    fn holding_the_replaced_file_never_opens_a_fifo() {
        let dir = tempfile::tempdir().unwrap();
        let spec = active_spec(dir.path());
        nix::unistd::mkfifo(&spec, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let (done, finished) = std::sync::mpsc::channel();
        let path = spec.clone();
        std::thread::spawn(move || {
            let written = stage(&path, b"new", 0o644, None).and_then(Staged::put_in_place).map(drop);
            let _ = done.send(written);
        });
        let written = finished.recv_timeout(std::time::Duration::from_secs(20)).expect("the write blocked on the FIFO");
        written.unwrap();
        assert_eq!(fs::read_to_string(&spec).unwrap(), "new");
    }
}
