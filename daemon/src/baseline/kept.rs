//! Repositories kept open between calls, one per workspace root. libgit2 keeps what it has read
//! in a repository object (the parsed index and config, the trees it decompressed), so a status
//! walk on a kept one skips that work: about a quarter of a `status` with evidence in a
//! 2,700-file repository. A kept repository is used only while nothing it read can be stale:
//!
//! - its `.git` (and every `.git` between the workspace root and the work tree's top, where a
//!   nearer repository could appear) and its git directory are still the same files;
//! - every config file that applies (the repository's, the user's, the system's) has the
//!   stamp it had, and had it for long enough that a later edit cannot share its time
//!   (libgit2 reads some settings, such as the work tree's place or `core.ignorecase`, only
//!   when it opens one); a config that includes other files (`include.path`, `includeIf`,
//!   which may follow the branch) is never kept;
//! - the pack folder has the stamp it had: a repack or `git gc` opens it again, so the packs
//!   it deleted are let go (libgit2 only ever adds packs to an open repository);
//! - the index is read again if its file changed (or cleared if it is gone), and the attribute
//!   and ignore files are dropped from its cache at each lease (libgit2 would trust an
//!   unchanged time and size).
//!
//! HEAD and the references are read afresh by libgit2 at each lookup, and objects never change.
//! A repository is leased whole to one caller at a time (libgit2's objects are not for
//! concurrent use); a caller that finds it leased opens its own.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use git2::Repository;

use crate::workspace::index::Stamp;

/// Roots whose repository is kept, at most; the least recently returned goes first.
const KEPT_ROOTS: usize = 16;

/// What a kept repository was opened on: it is used again only while this is unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Key(Vec<Identity>);

/// One path of a [`Key`]: a folder by identity (its time changes with every git command that
/// writes in it), a file by its stamp, the pack folder by its stamp (what it lists matters).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Identity {
    Absent,
    Folder(u64, u64),
    File(Stamp),
    Packs(Option<Stamp>),
}

impl Identity {
    fn of(path: &Path) -> Identity {
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => Identity::Folder(meta.dev(), meta.ino()),
            Ok(meta) => Identity::File(Stamp::from(&meta)),
            Err(_) => Identity::Absent,
        }
    }

    fn settled(&self) -> bool {
        match self {
            Identity::File(stamp) => stamp.settled(),
            // A pack missed by a key is only a pack held a while longer, never a wrong answer.
            Identity::Absent | Identity::Folder(..) | Identity::Packs(_) => true,
        }
    }
}

/// The user's and the system's config files, where libgit2 looks for them (fixed for the
/// daemon's life: they follow its environment).
fn global_configs() -> &'static [PathBuf] {
    static CONFIGS: OnceLock<Vec<PathBuf>> = OnceLock::new();
    CONFIGS.get_or_init(|| {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let xdg =
            std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from).or_else(|| home.as_ref().map(|h| h.join(".config")));
        [home.map(|h| h.join(".gitconfig")), xdg.map(|x| x.join("git/config")), Some(PathBuf::from("/etc/gitconfig"))]
            .into_iter()
            .flatten()
            .collect()
    })
}

/// Whether `repo`'s config includes other files: their settings are not in the key.
fn includes_files(repo: &Repository) -> bool {
    let found = repo.config().and_then(|config| {
        let mut found = false;
        config.entries(Some("^include(if)?\\..*path$"))?.for_each(|_| found = true)?;
        Ok(found)
    });
    found.unwrap_or(true)
}

/// The key of `repo`, discovered from `root`; `None` when it must not be kept (a bare
/// repository, or a config file changed too recently for its stamp to vouch for it).
fn key_of(root: &Path, repo: &Repository) -> Option<Key> {
    let top = repo.workdir()?;
    let mut paths = Vec::new();
    let mut dir = Some(root);
    while let Some(here) = dir.filter(|d| d.starts_with(top)) {
        paths.push(here.join(".git"));
        dir = here.parent();
    }
    let (git_dir, common) = (repo.path(), repo.commondir());
    paths.extend([git_dir.to_path_buf(), git_dir.join("config"), git_dir.join("config.worktree")]);
    if common != git_dir {
        paths.extend([common.to_path_buf(), common.join("config")]);
    }
    paths.extend(global_configs().iter().cloned());
    let mut key: Vec<Identity> = paths.iter().map(|p| Identity::of(p)).collect();
    key.push(Identity::Packs(Stamp::of(&common.join("objects/pack"))));
    key.iter().all(Identity::settled).then_some(Key(key))
}

struct Kept {
    root: PathBuf,
    key: Key,
    repo: Repository,
}

static KEPT: Mutex<Vec<Kept>> = Mutex::new(Vec::new());

/// A repository lent to one caller; returned to the kept ones when dropped.
pub struct Lease {
    root: PathBuf,
    key: Option<Key>,
    repo: Option<Repository>,
}

impl std::ops::Deref for Lease {
    type Target = Repository;
    fn deref(&self) -> &Repository {
        self.repo.as_ref().expect("held until dropped")
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let (Some(key), Some(repo)) = (self.key.take(), self.repo.take()) else { return };
        let mut kept = crate::sync::lock(&KEPT);
        // Another caller's, returned meanwhile, stands.
        if kept.iter().any(|k| k.root == self.root) {
            return;
        }
        if kept.len() >= KEPT_ROOTS {
            kept.remove(0);
        }
        kept.push(Kept { root: std::mem::take(&mut self.root), key, repo });
    }
}

/// The repository `root` is in: the kept one while it is current, else one opened now.
pub fn lease(root: &Path) -> Result<Lease, git2::Error> {
    let taken = {
        let mut kept = crate::sync::lock(&KEPT);
        kept.iter().position(|k| k.root == root).map(|at| kept.remove(at))
    };
    // One that cannot read its index again (a damaged one) is let go: a fresh one says why.
    if let Some(Kept { root, key, repo }) = taken
        && key_of(&root, &repo).as_ref() == Some(&key)
        && refresh(&repo).is_ok()
    {
        return Ok(Lease { root, key: Some(key), repo: Some(repo) });
    }
    let repo = discover(root)?;
    // Checked once, when opened: a kept one's config files are unchanged, includes and all.
    let key = key_of(root, &repo).filter(|_| !includes_files(&repo));
    Ok(Lease { root: root.to_path_buf(), key, repo: Some(repo) })
}

/// The repository whose work tree holds `root`, found as git finds it: the nearest `.git`
/// above, a folder or a file naming the git directory (`git init --separate-git-dir`, a linked
/// worktree). The work tree is the folder holding that `.git`, not the git directory's parent:
/// `Repository::discover` finds the git directory and opens it again on its own, which loses
/// the `.git` file and with it the work tree's place.
fn discover(root: &Path) -> Result<Repository, git2::Error> {
    Repository::open_ext(root, git2::RepositoryOpenFlags::CROSS_FS, std::iter::empty::<&std::ffi::OsStr>())
}

unsafe extern "C" {
    /// libgit2's own (not wrapped by `git2`): drops the cached attribute and ignore files.
    fn git_attr_cache_flush(repo: *mut std::ffi::c_void) -> std::ffi::c_int;
}

/// Make a kept repository read what may have changed since its last lease.
fn refresh(repo: &Repository) -> Result<(), git2::Error> {
    use git2::Binding;
    // SAFETY: the pointer is the live repository `repo` holds, used by this thread alone (a
    // lease is exclusive), and the function only frees cache entries libgit2 reloads on use.
    let flushed = unsafe { git_attr_cache_flush(repo.raw().cast()) };
    if flushed < 0 {
        return Err(git2::Error::from_str("cannot drop the repository's attribute cache"));
    }
    // Read again only when the file's stamp changed (git replaces it whole, so its inode does);
    // libgit2 keeps the old entries of an index whose file is gone unless forced.
    let gone = !repo.path().join("index").exists();
    repo.index()?.read(gone)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(root: &Path, args: &[&str]) {
        let out = std::process::Command::new("git").current_dir(root).args(args).output().unwrap();
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    fn repo_with_file() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        git(dir.path(), &["init", "-q"]);
        std::fs::write(dir.path().join("a.txt"), "a\n").unwrap();
        git(dir.path(), &["add", "a.txt"]);
        git(dir.path(), &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a"]);
        dir
    }

    fn age(path: &Path) {
        let past = std::time::SystemTime::now() - std::time::Duration::from_secs(10);
        std::fs::File::options().append(true).open(path).unwrap().set_modified(past).unwrap();
    }

    fn kept_for(root: &Path) -> bool {
        crate::sync::lock(&KEPT).iter().any(|k| k.root == root)
    }

    /// A repository is kept once its config has settled, and opened again when a change would
    /// not show in a kept one: a config setting read at open, a nearer repository.
    #[test]
    fn a_kept_repository_is_used_only_while_what_it_read_is_current() {
        let dir = repo_with_file();
        let top = dir.path().canonicalize().unwrap();
        let root = top.join("sub");
        std::fs::create_dir(&root).unwrap();
        let config = top.join(".git/config");
        drop(lease(&root).unwrap());
        assert!(!kept_for(&root), "a config written just now cannot vouch for itself");
        age(&config);
        let first = lease(&root).unwrap();
        let second = lease(&root).unwrap();
        drop(first);
        drop(second);
        assert!(kept_for(&root), "one of the two leases is kept");
        // libgit2 reads the work tree's place once, when it opens the repository.
        let elsewhere = tempfile::tempdir().unwrap();
        git(&top, &["config", "core.worktree", &elsewhere.path().display().to_string()]);
        age(&config);
        let workdir = lease(&root).unwrap().workdir().map(Path::to_path_buf);
        assert_eq!(workdir.map(|w| w.canonicalize().unwrap()), Some(elsewhere.path().canonicalize().unwrap()));
        git(&top, &["config", "--unset", "core.worktree"]);
        age(&config);
        assert!(lease(&root).unwrap().head().is_ok());
        // A repository made in the workspace's own folder is the nearer one from now on.
        git(&root, &["init", "-q"]);
        age(&root.join(".git/config"));
        assert!(lease(&root).unwrap().head().is_err(), "still the outer repository, with its history");
    }

    /// The index is read again when git replaced it, and the ignore files when they changed,
    /// however little time passed.
    #[test]
    fn a_kept_repository_reads_a_new_index_and_new_ignore_rules() {
        let dir = repo_with_file();
        let root = dir.path().canonicalize().unwrap();
        age(&root.join(".git/config"));
        std::fs::write(root.join(".gitignore"), "b.txt\n").unwrap();
        std::fs::write(root.join("b.txt"), "b\n").unwrap();
        let status = |path: &str| {
            let repo = lease(&root).unwrap();
            let statuses = repo.statuses(Some(git2::StatusOptions::new().include_untracked(true))).unwrap();
            statuses.iter().find(|s| s.path().ok() == Some(path)).map(|s| s.status())
        };
        assert_eq!(status("b.txt"), None, "ignored");
        assert!(kept_for(&root));
        // Same size and, set back, the same modification time: only a dropped cache sees it.
        let ignore = root.join(".gitignore");
        let modified = std::fs::metadata(&ignore).unwrap().modified().unwrap();
        std::fs::write(&ignore, "c.txt\n").unwrap();
        std::fs::File::options().append(true).open(&ignore).unwrap().set_modified(modified).unwrap();
        assert_eq!(status("b.txt"), Some(git2::Status::WT_NEW), "the old ignore rules were kept");
        git(&root, &["add", "b.txt"]);
        let staged = lease(&root).unwrap().index().unwrap().get_path(Path::new("b.txt"), 0).is_some();
        assert!(staged, "the index git wrote was not read");
        assert_eq!(status("b.txt"), Some(git2::Status::INDEX_NEW));
        std::fs::remove_file(root.join(".git/index")).unwrap();
        assert!(lease(&root).unwrap().index().unwrap().is_empty(), "the index is gone, its entries too");
    }

    /// Settings from an included file are not in the key (and `includeIf` may follow the
    /// branch): such a repository is opened afresh every time.
    #[test]
    fn a_config_that_includes_files_is_never_kept() {
        let dir = repo_with_file();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(root.join(".git/extra.cfg"), "[core]\n\tignorecase = true\n").unwrap();
        git(&root, &["config", "includeIf.onbranch:other.path", "extra.cfg"]);
        age(&root.join(".git/config"));
        drop(lease(&root).unwrap());
        assert!(!kept_for(&root), "kept with a conditional include");
        git(&root, &["config", "--unset", "includeIf.onbranch:other.path"]);
        git(&root, &["config", "include.path", "extra.cfg"]);
        age(&root.join(".git/config"));
        drop(lease(&root).unwrap());
        assert!(!kept_for(&root), "kept with an include");
        git(&root, &["config", "--unset", "include.path"]);
        age(&root.join(".git/config"));
        drop(lease(&root).unwrap());
        assert!(kept_for(&root));
    }

    /// `git gc` writes a new pack and deletes the old: a kept repository that had read the old
    /// one is opened again, so no deleted pack stays open (and its disk space taken).
    #[test]
    fn a_repack_lets_the_deleted_packs_go() {
        let dir = repo_with_file();
        let root = dir.path().canonicalize().unwrap();
        let held = || {
            std::fs::read_dir("/proc/self/fd")
                .unwrap()
                .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
                .filter(|target| target.starts_with(&root) && target.to_string_lossy().ends_with("(deleted)"))
                .count()
        };
        let read_head = || {
            let repo = lease(&root).unwrap();
            let tree = repo.head().unwrap().peel_to_tree().unwrap();
            assert!(tree.get_name("a.txt").is_some());
        };
        git(&root, &["gc", "-q"]);
        age(&root.join(".git/config"));
        read_head();
        assert!(kept_for(&root));
        for round in 0..3 {
            std::fs::write(root.join("a.txt"), format!("round {round}\n")).unwrap();
            git(&root, &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "again"]);
            git(&root, &["gc", "-q", "--prune=now"]);
            read_head();
        }
        assert_eq!(held(), 0, "deleted packs are still open");
    }
}
