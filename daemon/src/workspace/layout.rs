//! The on-disk workspace layout: creating `.scafld/` for `init` and reading the workspace id.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

use scafld_local::capped;

pub const SCAFLD_DIR: &str = ".scafld";
/// Local identity of the workspace; git-ignored so that two clones never share an id.
pub const ID_FILE: &str = ".scafld/workspace_id";
pub const CONFIG_FILE: &str = ".scafld/config.yaml";
pub const LOCAL_CONFIG_FILE: &str = ".scafld/config.local.yaml";
/// The largest workspace id file read (an id is 32 hex digits).
pub const MAX_ID_FILE_BYTES: u64 = 4 << 10;
/// The largest text file of the user's `init` reads to append to (`.gitignore`, `AGENTS.md`).
pub const MAX_APPENDED_BYTES: u64 = 8 << 20;

/// The daemon runs under a private umask (its own state is the user's alone), but what it
/// writes into a workspace belongs to the user's project: new files and folders there get the
/// modes the user's umask gives, as if the user had made them.
pub fn user_mode(dir: bool) -> u32 {
    (if dir { 0o777 } else { 0o666 }) & !crate::runner::inherited_umask()
}

/// Make a new directory of the workspace with the user's mode.
fn create_user_dir(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::create_dir(path).map_err(|e| in_the_way(path, e))?;
    fs::set_permissions(path, fs::Permissions::from_mode(user_mode(true)))
}

/// A folder that cannot be made because something else has its name (a file, a link to
/// nothing) is named with what to do; the error keeps its kind for callers racing a create.
fn in_the_way(path: &Path, e: io::Error) -> io::Error {
    if e.kind() != io::ErrorKind::AlreadyExists || path.is_dir() {
        return e;
    }
    let what = match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => "a link to nothing",
        Ok(meta) if meta.is_file() => "a file",
        _ => "something other than a folder",
    };
    io::Error::new(
        e.kind(),
        format!(
            "{} is in the way: it is {what} where scafld needs a folder; move it aside and try again",
            path.display()
        ),
    )
}

/// Write a new workspace file (or replace one) with the user's mode; not atomic (diagnostics,
/// packets: files nothing reads while they are written).
pub fn write_user_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut file = OpenOptions::new().write(true).create(true).truncate(true).open(path)?;
    file.set_permissions(fs::Permissions::from_mode(user_mode(false)))?;
    file.write_all(bytes)
}

/// Write a new workspace file (or replace one) readable by its owner alone (0600), whatever the
/// user's umask: files that may hold what commands printed (diagnostics), secrets included.
/// Not atomic, as [`write_user_file`].
pub fn write_private_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut file = OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    file.set_permissions(fs::Permissions::from_mode(0o600))?;
    file.write_all(bytes)
}

/// [`create_real_dir`] for a folder of private files: the parents get the user's modes, `dir`
/// itself, when it is made here, 0700 (one that is there already keeps its mode).
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(parent) = dir.parent() {
        create_real_dir(parent)?;
    }
    // One there already (or a link in its place) is judged as `create_real_dir` judges it.
    match fs::create_dir(dir) {
        Ok(()) => fs::set_permissions(dir, fs::Permissions::from_mode(0o700)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => create_real_dir(dir),
        Err(e) => Err(in_the_way(dir, e)),
    }
}

/// Create `dir` and its missing parents like `create_dir_all`, except that from a workspace's
/// `.scafld` folder down every directory must be a real one: a symlink there (say
/// `.scafld/runs` pointing at `/etc`) would make the daemon write wherever it points, so it is
/// refused with an error naming it ([`NotRealDir`], found again by [`not_real`]). The `.scafld`
/// folder itself is never made here ([`scafld_gone`]). Paths without a `.scafld` component are
/// created as usual.
pub fn create_real_dir(dir: &Path) -> io::Result<()> {
    let parts: Vec<_> = dir.components().collect();
    let Some(start) = parts.iter().position(|c| c.as_os_str() == SCAFLD_DIR) else {
        return fs::create_dir_all(dir);
    };
    let mut at: std::path::PathBuf = parts[..start].iter().collect();
    for (n, part) in parts[start..].iter().enumerate() {
        at.push(part);
        match real_dir(&at) {
            Ok(true) => {}
            Ok(false) if n == 0 => return Err(scafld_gone(&at)),
            Ok(false) => match create_user_dir(&at) {
                Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
                _ => {}
            },
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A workspace's `.scafld` removed from under the daemon (a criterion's `rm -rf .scafld`):
/// only `init` makes one. A `.scafld` the daemon made to write into (a build's diagnostics)
/// would have no id file, so the next command would take the folder for a new workspace and
/// retire the one whose ledgers this is; what was to be written is not, and the ledger says so.
fn scafld_gone(at: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!(
            "{} is gone (removed while scafld worked there), and scafld makes it only with `scafld init`, which would start a new workspace: put the folder back (its ledgers stay on record), or run `scafld init` there to start anew",
            at.display()
        ),
    )
}

/// What [`create_real_dir`] would refuse on the way to `dir`, creating nothing: the first
/// name from `.scafld` down that is a symlink or not a folder. (A name not there yet would be
/// made; one that cannot be looked at is not said here.)
pub fn unreal_dir(dir: &Path) -> Option<NotRealDir> {
    let parts: Vec<_> = dir.components().collect();
    let start = parts.iter().position(|c| c.as_os_str() == SCAFLD_DIR)?;
    let mut at: std::path::PathBuf = parts[..start].iter().collect();
    for part in &parts[start..] {
        at.push(part);
        match real_dir(&at) {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => return not_real(&e).cloned(),
        }
    }
    None
}

/// Whether `at` is a real folder (`false`: nothing there), or the refusal of a link or a
/// non-folder there.
fn real_dir(at: &Path) -> io::Result<bool> {
    match fs::symlink_metadata(at) {
        Ok(meta) if meta.file_type().is_symlink() => {
            Err(io::Error::other(NotRealDir { at: at.to_path_buf(), link: true }))
        }
        Ok(meta) if meta.is_dir() => Ok(true),
        Ok(_) => Err(io::Error::other(NotRealDir { at: at.to_path_buf(), link: false })),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// A name inside `.scafld` where scafld must write into a folder that is not a real one: a
/// symlink (never written through) or something else than a folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotRealDir {
    pub at: std::path::PathBuf,
    /// A symlink (else: not a folder).
    pub link: bool,
}

impl NotRealDir {
    /// The name as messages show it: from `.scafld/` on.
    pub fn shown(&self) -> String {
        let text = self.at.display().to_string();
        match text.rfind("/.scafld/") {
            Some(at) => text[at + 1..].to_string(),
            None => text,
        }
    }

    /// Whether it is the workspace's `.scafld` itself that is a link: a checkout sharing
    /// another's (a git worktree), where what writes runs from the checkout the link leads to
    /// (`evidence::from_the_linked_checkout`), not a folder to make real.
    pub fn is_shared_scafld(&self) -> bool {
        self.link && self.at.file_name() == Some(std::ffi::OsStr::new(SCAFLD_DIR))
    }

    /// What puts it right.
    pub fn remedy(&self) -> String {
        match self.link {
            true => format!(
                "make {0} a real folder: move what the link points at into a folder of that name in its place (`rm {0}`, `mkdir {0}`, then move the files in)",
                self.shown()
            ),
            false => format!("move {} out of the way, so that a folder can take its place", self.shown()),
        }
    }
}

impl std::fmt::Display for NotRealDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.link {
            true => write!(f, "{} is a symlink; scafld does not write through links inside {SCAFLD_DIR}", self.shown()),
            false => write!(f, "{} is not a directory", self.shown()),
        }
    }
}

impl std::error::Error for NotRealDir {}

/// The [`NotRealDir`] an I/O error carries, if it is one.
pub fn not_real(e: &io::Error) -> Option<&NotRealDir> {
    e.get_ref()?.downcast_ref()
}

const CONFIG_TEMPLATE: &str = include_str!("../../assets/config.yaml");
const LOCAL_CONFIG_TEMPLATE: &str = include_str!("../../assets/config.local.yaml");

const LAYOUT_DIRS: &[&str] = &[
    ".scafld",
    ".scafld/specs",
    ".scafld/specs/drafts",
    ".scafld/specs/approved",
    ".scafld/specs/active",
    ".scafld/specs/archive",
    ".scafld/runs",
];

const GITIGNORE: &str = ".gitignore";
const GITIGNORE_HEADER: &str = "# scafld runtime state";
const GITIGNORE_ENTRIES: &[&str] =
    &[".scafld/config.local.yaml", ".scafld/runs/", ".scafld/reviews/", ".scafld/workspace_id"];

/// What `init` did, as workspace-relative paths.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct InitReport {
    pub created: Vec<String>,
    pub updated: Vec<String>,
    pub skipped: Vec<String>,
    /// What the user should know about a file left as it is (a link scafld does not follow).
    pub warnings: Vec<String>,
}

/// Create whatever part of the layout is missing. Never overwrites an existing file. The
/// workspace id is not written here: the daemon settles it when it opens the workspace
/// (`Daemon::open_workspace`), under the lock that makes two opens agree.
///
/// A write that fails (a full disk) takes back what this call made (the folders and files it
/// created, the lines it appended to `.gitignore`), and its error names the path.
pub fn init_layout(root: &Path) -> io::Result<InitReport> {
    let mut report = InitReport::default();
    let made = layout_parts(root, &mut report);
    if let Err(e) = made {
        undo_created(root, &report.created);
        return Err(e);
    }
    Ok(report)
}

/// Remove what `init` created (`created`, workspace-relative, in the order made): files, then
/// folders only while empty, last first. What was there before is never touched.
pub fn undo_created(root: &Path, created: &[String]) {
    for relative in created.iter().rev() {
        let path = root.join(relative);
        let gone = match fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_dir() => fs::remove_dir(&path),
            Ok(_) => fs::remove_file(&path),
            Err(_) => Ok(()),
        };
        if let Err(e) = gone {
            tracing::warn!(path = %path.display(), "cannot take back what a failed init made: {e}");
        }
    }
}

/// An error of `init`'s write of `path`, naming it.
fn naming(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("cannot write {}: {e}", path.display()))
}

/// [`init_layout`]'s steps; what each made is in `report.created` as it goes.
fn layout_parts(root: &Path, report: &mut InitReport) -> io::Result<()> {
    for dir in LAYOUT_DIRS {
        let path = root.join(dir);
        if path.is_dir() {
            report.skipped.push(dir.to_string());
        } else {
            create_user_dir(&path).map_err(|e| naming(&path, e))?;
            report.created.push(dir.to_string());
        }
    }
    for (file, content) in [(CONFIG_FILE, CONFIG_TEMPLATE), (LOCAL_CONFIG_FILE, LOCAL_CONFIG_TEMPLATE)] {
        let path = root.join(file);
        match create_new(&path, content.as_bytes()) {
            Ok(true) => report.created.push(file.to_string()),
            Ok(false) => report.skipped.push(file.to_string()),
            Err(e) => {
                // Made, then cut short: removed with the rest.
                if path.is_file() {
                    report.created.push(file.to_string());
                }
                return Err(naming(&path, e));
            }
        }
    }
    // git (2.32 and later) reads no `.gitignore` that is a symlink in the work tree, wherever
    // it leads: lines written through one would ignore nothing while `init` said they were
    // added. The link is left as it is, with a warning saying what to do instead.
    let gitignore = root.join(GITIGNORE);
    let path = match fs::symlink_metadata(&gitignore) {
        Ok(meta) if meta.file_type().is_symlink() => {
            report.skipped.push(GITIGNORE.to_string());
            report.warnings.push(symlinked_gitignore(&gitignore));
            None
        }
        _ => Some(gitignore),
    };
    if let Some(path) = path {
        match ensure_gitignore(&path).map_err(|e| naming(&path, e))? {
            GitignoreChange::Created => report.created.push(GITIGNORE.to_string()),
            GitignoreChange::Updated => report.updated.push(GITIGNORE.to_string()),
            GitignoreChange::Unchanged => report.skipped.push(GITIGNORE.to_string()),
        }
    }
    Ok(())
}

/// The warning for a `.gitignore` that is a symlink: git does not read it, so scafld's ignore
/// lines are not written through it; what to do instead.
fn symlinked_gitignore(link: &Path) -> String {
    let leads = fs::read_link(link).map(|to| to.display().to_string()).unwrap_or_default();
    format!(
        "{GITIGNORE} is a symlink (to {leads}), and git does not read a {GITIGNORE} that is a symlink (git 2.32 and later): it is left as it is, without scafld's ignore lines, which would ignore nothing there; make {GITIGNORE} a regular file and run `scafld init` again, or add {} to .git/info/exclude",
        GITIGNORE_ENTRIES.join(", ")
    )
}

/// The id in `.scafld/workspace_id`; `None` when there is no such file (a workspace made by
/// the original tool, or one whose id file was deleted: `git clean -X` removes it).
pub fn read_id(root: &Path) -> io::Result<Option<String>> {
    let path = root.join(ID_FILE);
    match capped::read_text_if_there(&path, "workspace id file", MAX_ID_FILE_BYTES) {
        Ok(Some(text)) if is_valid_id(text.trim()) => Ok(Some(text.trim().to_string())),
        // Empty: an older scafld's write cut short (a full disk) before the id reached it. It
        // names nothing, so it is taken as no file at all: the folder keeps the workspace on
        // record for it, or gets a new one, exactly as after a deleted id file, and the id is
        // written over it.
        Ok(Some(text)) if text.trim().is_empty() => Ok(None),
        Ok(None) => Ok(None),
        Err(capped::ReadError { refusal: capped::Refusal::Io(e), .. }) => Err(e),
        // Not text, not a regular file, or far too long for an id.
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} does not hold a workspace id; delete it and run `scafld init` again", path.display()),
        )),
    }
}

/// Make `<root>/.scafld` with a new workspace id in it, for `scafld init` in a folder without
/// one; `AlreadyExists` when the folder appeared meanwhile. The caller holds the daemon's
/// workspace table (see `Daemon::create_workspace`).
pub fn create_scafld_with_new_id(root: &Path) -> io::Result<String> {
    let dir = root.join(SCAFLD_DIR);
    create_user_dir(&dir).map_err(|e| if e.kind() == io::ErrorKind::AlreadyExists { e } else { naming(&dir, e) })?;
    let id = new_id().and_then(|id| write_id(root, &id).map(|()| id));
    // A `.scafld` left without its id would be taken for a workspace: made here, so gone again.
    id.inspect_err(|_| undo_created(root, &[SCAFLD_DIR.to_string()])).map_err(|e| naming(&root.join(ID_FILE), e))
}

/// Write the workspace id (a new one, or the one the daemon has on record for the folder),
/// atomically: a write cut short (a full disk) leaves the file as it was, never empty.
pub fn write_id(root: &Path, id: &str) -> io::Result<()> {
    super::specfile::write_atomic_mode(&root.join(ID_FILE), format!("{id}\n").as_bytes(), user_mode(false))
}

/// The id of a `.scafld` with no id file that nothing is recorded for (a fresh clone, a
/// vendored example), until a command that writes settles it by writing it: derived from the
/// canonical `root` and its `.scafld` folder itself (device and inode), so every read before
/// then (after a daemon restart too) and that write agree on it, and a new `.scafld` made
/// where a workspace moved away from is not taken for that workspace.
pub fn unsettled_id(root: &Path) -> io::Result<String> {
    use sha2::{Digest, Sha256};
    let (dev, ino) = scafld_identity(root)
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{} has no .scafld folder", root.display())))?;
    let digest = format!("{:x}", Sha256::digest(format!("{dev}:{ino}:{}", root.display()).as_bytes()));
    Ok(digest[..32].to_string())
}

/// The workspace id of a plain git repository's range reviews (it has no `.scafld/` to keep
/// one in): derived from its canonical path.
pub fn range_id(root: &Path) -> String {
    use sha2::{Digest, Sha256};
    let digest = format!("{:x}", Sha256::digest(root.display().to_string().as_bytes()));
    format!("repo-{}", &digest[..24])
}

/// The folder `<root>/.scafld` names, through a symlink (device and inode): two roots with the
/// same one share one workspace's files (a git worktree whose `.scafld` links to the main
/// checkout's). `None` when there is none.
pub fn scafld_identity(root: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(root.join(SCAFLD_DIR)).ok().filter(|m| m.is_dir()).map(|m| (m.dev(), m.ino()))
}

/// Whether `<root>/.scafld` is a symlink (to another checkout's, say) rather than the folder.
pub fn scafld_is_link(root: &Path) -> bool {
    fs::symlink_metadata(root.join(SCAFLD_DIR)).is_ok_and(|m| m.file_type().is_symlink())
}

pub use scafld_local::new_id;

fn is_valid_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Write `content` to `path` only if nothing is there yet.
fn create_new(path: &Path, content: &[u8]) -> io::Result<bool> {
    match OpenOptions::new().write(true).create_new(true).open(path) {
        Ok(mut file) => {
            use std::os::unix::fs::PermissionsExt;
            file.set_permissions(fs::Permissions::from_mode(user_mode(false)))?;
            file.write_all(content)?;
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

enum GitignoreChange {
    Created,
    Updated,
    Unchanged,
}

/// Append the scafld block (only the entries that are missing) to `.gitignore`.
fn ensure_gitignore(path: &Path) -> io::Result<GitignoreChange> {
    let existing = capped::read_text_if_there(path, "file", MAX_APPENDED_BYTES).map_err(io::Error::other)?;
    let text = existing.as_deref().unwrap_or("");
    let present = |entry: &str| text.lines().any(|line| line.trim() == entry);
    let missing: Vec<&str> = GITIGNORE_ENTRIES.iter().copied().filter(|e| !present(e)).collect();
    if missing.is_empty() {
        return Ok(GitignoreChange::Unchanged);
    }
    let mut block = String::new();
    if !text.is_empty() && !text.ends_with('\n') {
        block.push('\n');
    }
    if !text.is_empty() {
        block.push('\n');
    }
    if !present(GITIGNORE_HEADER) {
        block.push_str(GITIGNORE_HEADER);
        block.push('\n');
    }
    for entry in missing {
        block.push_str(entry);
        block.push('\n');
    }
    let mut file = OpenOptions::new().create(true).append(true).open(path)?;
    let written = (|| {
        if existing.is_none() {
            use std::os::unix::fs::PermissionsExt;
            file.set_permissions(fs::Permissions::from_mode(user_mode(false)))?;
        }
        file.write_all(block.as_bytes())
    })();
    if let Err(e) = written {
        // Cut short (a full disk): the file as it was, or none.
        let _ = match &existing {
            Some(text) => file.set_len(text.len() as u64),
            None => fs::remove_file(path),
        };
        return Err(e);
    }
    Ok(if existing.is_some() { GitignoreChange::Updated } else { GitignoreChange::Created })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Folders below a workspace's `.scafld` are made, the `.scafld` itself never (only `init`
    /// makes one): a write into a removed one fails, naming it, and makes nothing.
    #[test]
    fn real_dirs_are_made_below_scafld_never_scafld_itself() {
        let root = tempfile::tempdir().unwrap();
        let runs = root.path().join(".scafld/runs/t/diagnostics");
        let refused = create_real_dir(&runs).unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::NotFound);
        assert!(refused.to_string().contains(".scafld is gone"), "{refused}");
        assert!(!root.path().join(SCAFLD_DIR).exists());
        fs::create_dir(root.path().join(SCAFLD_DIR)).unwrap();
        create_real_dir(&runs).unwrap();
        assert!(runs.is_dir());
    }

    #[test]
    fn gitignore_entries_are_appended_once() {
        let dir = std::env::temp_dir().join(format!("scafld-gi-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(".gitignore");
        fs::write(&path, "target\n.scafld/runs/").unwrap();
        assert!(matches!(ensure_gitignore(&path).unwrap(), GitignoreChange::Updated));
        let after = fs::read_to_string(&path).unwrap();
        assert!(after.starts_with("target\n.scafld/runs/\n\n# scafld runtime state\n"), "{after}");
        assert_eq!(after.matches(".scafld/runs/").count(), 1);
        assert!(matches!(ensure_gitignore(&path).unwrap(), GitignoreChange::Unchanged));
        assert_eq!(fs::read_to_string(&path).unwrap(), after);
        fs::remove_dir_all(&dir).unwrap();
    }
}
