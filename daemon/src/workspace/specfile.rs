//! Spec files on disk: where a spec of a given status lives, finding specs, and atomic writes
//! and moves.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
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
    let folder = specs_dir(root).join(Folder::of(status).dir_name());
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

/// Every `*.md` under the four lifecycle folders (archive one level down), in lookup order.
pub fn scan(root: &Path) -> Vec<Found> {
    let specs = specs_dir(root);
    let mut found = Vec::new();
    for folder in Folder::ALL {
        let dir = specs.join(folder.dir_name());
        if folder == Folder::Archive {
            let mut months: Vec<PathBuf> = read_dir_sorted(&dir).into_iter().filter(|p| p.is_dir()).collect();
            months.sort();
            for month in months {
                found.extend(markdown_files(&month, folder));
            }
        } else {
            found.extend(markdown_files(&dir, folder));
        }
    }
    found
}

/// Every path a spec file named `file` could have, with its folder, in lookup order, given the
/// archive's month folders ([`archive_months`]).
pub fn candidates(root: &Path, file: &str, months: &[PathBuf]) -> Vec<(Folder, PathBuf)> {
    let specs = specs_dir(root);
    let mut paths = Vec::with_capacity(Folder::ALL.len() + months.len());
    for folder in Folder::ALL {
        match folder {
            Folder::Archive => paths.extend(months.iter().map(|month| (folder, month.join(file)))),
            _ => paths.push((folder, specs.join(folder.dir_name()).join(file))),
        }
    }
    paths
}

/// Which of the files claiming one task id (its name in more than one spec folder: an
/// interrupted move, a copy made by hand) owns the id: the one with the least key, that is the
/// first in lookup order (drafts, approved, active, then the archive's months oldest first).
/// The others are duplicates, reported as errors. This is the one rule: the index sorts every
/// task's files by this key, whatever order they were found or arrived in, so that a daemon
/// that watched them come and one that scanned them at start agree. ([`scan`] and
/// [`candidates`] list files in the same order, but nothing relies on that.)
pub fn lookup_order(folder: Folder, path: &Path) -> (usize, &Path) {
    let rank = Folder::ALL.iter().position(|f| *f == folder).unwrap_or(Folder::ALL.len());
    (rank, path)
}

/// The month folders of the archive folder `archive`, sorted.
pub fn archive_months(archive: &Path) -> Vec<PathBuf> {
    read_dir_sorted(archive).into_iter().filter(|p| p.is_dir()).collect()
}

/// The lifecycle folder of a path under `.scafld/specs/`, if it is a spec file there.
pub fn folder_of(root: &Path, path: &Path) -> Option<Folder> {
    let relative = path.strip_prefix(specs_dir(root)).ok()?;
    let parts: Vec<_> = relative.components().collect();
    if path.extension().is_none_or(|e| e != "md") || is_temp(path) {
        return None;
    }
    let first = parts.first()?.as_os_str().to_str()?;
    let folder = Folder::ALL.into_iter().find(|f| f.dir_name() == first)?;
    let depth_ok = if folder == Folder::Archive { parts.len() == 3 } else { parts.len() == 2 };
    depth_ok.then_some(folder)
}

fn is_temp(path: &Path) -> bool {
    path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with('.'))
}

fn read_dir_sorted(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> =
        fs::read_dir(dir).map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    entries.sort();
    entries
}

/// Every `*.md` entry of `dir` but directories, sorted by name: a FIFO, a device or a dangling
/// symlink named like a spec is listed too, so the index reports it instead of skipping it
/// silently. Names are filtered before anything is read; the entry's own type needs no stat,
/// and its metadata is read relative to the directory (no walk of the whole path per file).
fn markdown_files(dir: &Path, folder: Folder) -> Vec<Found> {
    let Ok(entries) = fs::read_dir(dir) else { return Vec::new() };
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
    files.into_iter().map(|(_, e)| Found { path: e.path(), folder, meta: e.metadata().ok() }).collect()
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
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let Some((_, tail)) = name.strip_prefix('.').and_then(|rest| rest.rsplit_once(TEMP_MARK)) else { return false };
    tail.split_once('-').is_some_and(|(pid, n)| digits(pid) && digits(n))
}

/// The folders of a workspace that atomic writes go to: every spec folder (archive months
/// too), `.scafld/`, `.scafld/receipts/` and the root (the agent guide).
pub fn write_dirs(root: &Path) -> Vec<PathBuf> {
    let specs = specs_dir(root);
    let mut dirs = vec![root.to_path_buf(), root.join(".scafld"), root.join(".scafld/receipts")];
    dirs.extend(Folder::ALL.iter().map(|f| specs.join(f.dir_name())));
    dirs.extend(read_dir_sorted(&specs.join(Folder::Archive.dir_name())).into_iter().filter(|p| p.is_dir()));
    dirs
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
    committed: bool,
}

/// Temp file in the same directory (created when missing, never through a symlink inside
/// `.scafld`: [`super::layout::create_real_dir`]), written with `mode`, fsynced.
fn stage(path: &Path, bytes: &[u8], mode: u32, moving_from: Option<&Path>) -> io::Result<Staged> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().ok_or_else(|| io::Error::other("path has no directory"))?;
    super::layout::create_real_dir(dir)?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("spec");
    let temp =
        dir.join(format!(".{name}{TEMP_MARK}{}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed)));
    let mut file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&temp)?;
    // By path only (O_PATH): nothing opened for reading, so no FIFO or device swapped in
    // meanwhile can block or notice it; not through a symlink either.
    let hold =
        || OpenOptions::new().read(true).custom_flags((OFlag::O_PATH | OFlag::O_NOFOLLOW).bits()).open(path).ok();
    let replaced = if moving_from.is_none() { hold() } else { None };
    let mut staged = Staged {
        temp,
        path: path.to_path_buf(),
        moving_from: moving_from.map(Path::to_path_buf),
        replaced,
        written: file.metadata()?,
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
