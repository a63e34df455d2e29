//! Handlers of the `task.*` methods: resolve the workspace and the task, call the domain, and
//! (for writes) project the result back into the spec file.

mod delegated_harden;
mod exec;
mod finalize;
pub mod job;
mod read;
pub(crate) mod review;
mod verify;
mod write;

pub(crate) use crate::ledger::{projected_spec, record, spec_file, target_for, write_error, write_projection};
pub use exec::{approve, archive, build, recover_jobs, session};
pub use finalize::finalize;
pub use read::{check, handoff, list, report, status, validate, validate_all};
pub(crate) use read::{next_hint, next_step};
pub use review::{complete, decide, review};
pub use verify::verify;
pub use write::{harden, plan, reconcile};

use std::path::{Path, PathBuf};
use std::sync::Arc;

use scafld_protocol::ErrorKind;
use scafld_protocol::methods::Diagnostic as WireDiagnostic;

use crate::daemon::Daemon;
use crate::domain::ledger::LedgerEntry;
use crate::domain::lifecycle::Status;
use crate::domain::next::Misfiled;
use crate::domain::spec::{Diagnostic, Severity};
use crate::domain::task_id::TaskId;
use crate::error::{RpcError, RpcResult};
use crate::workspace::Workspace;
use crate::workspace::index::{LoadedSpec, SpecEntry, and_list, in_files};
use crate::workspace::specfile;

/// Validate a task id from any caller.
pub fn task_id(raw: &str) -> RpcResult<TaskId> {
    TaskId::parse(raw).map_err(|e| {
        RpcError::new(ErrorKind::InvalidInput, e.to_string()).with_hint("task ids look like `add-greeting-flag`")
    })
}

/// The workspace and the indexed spec of `task`, re-read first if the file changed on disk.
pub(crate) async fn entry(daemon: &Daemon, root: &str, raw_task: &str) -> RpcResult<(Arc<Workspace>, LoadedSpec)> {
    let task = task_id(raw_task)?;
    let ws = daemon.workspace(root).await?;
    entry_in(daemon, ws, task.as_str(), true).await
}

/// [`entry`] for a call that only reads (see [`Daemon::workspace_to_read`]).
pub(crate) async fn entry_to_read(
    daemon: &Daemon,
    root: &str,
    raw_task: &str,
) -> RpcResult<(Arc<Workspace>, LoadedSpec)> {
    let task = task_id(raw_task)?;
    let ws = daemon.workspace_to_read(root).await?;
    entry_in(daemon, ws, task.as_str(), false).await
}

/// The entry of `task`, the original's session file followed first; a command that `writes`
/// is refused while that file and the ledger disagree (a read goes on: `status` shows it).
async fn entry_in(
    daemon: &Daemon,
    ws: Arc<Workspace>,
    task: &str,
    writes: bool,
) -> RpcResult<(Arc<Workspace>, LoadedSpec)> {
    let entry = fresh_entry(daemon, &ws, task)?;
    match follow_original_session(daemon, &ws, task, writes).await? {
        Followed::Diverged(diverged) if writes => Err(diverged),
        _ => Ok((ws, entry)),
    }
}

/// The indexed spec of `task` as the file is now (stat first, re-read if it changed). A
/// transition calls it again once it holds the task's lock, so it decides on the state as it
/// is then, not as it was before another command finished.
/// A task found in two files is looked at again once no move of this daemon is half done
/// (`specfile::Moves`): a spec being moved to its status folder is one file, not a leftover.
pub(crate) fn fresh_entry(daemon: &Daemon, ws: &Workspace, task: &str) -> RpcResult<LoadedSpec> {
    let changed = crate::sync::write(&ws.index).sync_task(task);
    if let Some(task_id) = changed {
        daemon.publish_task_changed(ws, &task_id, "hand_edit");
    }
    let found = crate::sync::write(&ws.index).loaded(task);
    let entry = match found {
        Some(entry) if !entry.duplicates.is_empty() => {
            let _settled = daemon.spec_moves.settled();
            let mut index = crate::sync::write(&ws.index);
            index.sync_task(task);
            index.loaded(task)
        }
        found => found,
    };
    entry.ok_or_else(|| missing_spec(daemon, ws, task))
}

/// No spec file for `task`: a new id (`plan` makes one), or a task whose file was removed or
/// moved out while its ledger, the truth, stays (`plan` refuses that id): then the answer says
/// so and how to go on, never pointing at a command that refuses.
fn missing_spec(daemon: &Daemon, ws: &Workspace, task: &str) -> RpcError {
    if let Some(hidden) = hidden_spec(ws, task) {
        return hidden;
    }
    let history = daemon.store().ledger(&ws.id, task).unwrap_or_default();
    match crate::domain::ledger::state(&history) {
        None => RpcError::new(
            ErrorKind::NotFound,
            format!("no spec for task `{task}` under {}/.scafld/specs", ws.root.display()),
        )
        .with_hint(format!("create it with `scafld plan {task}`, or see `scafld list`")),
        Some(state) => Gone { task: task.to_string(), entries: history, status: state.status }.error(ws),
    }
}

/// No spec file found for `task` while a spec folder it could be in cannot be looked in (no
/// permission, a file where the folder belongs): the file may well be there, so it is neither
/// missing nor a new id. The error names the folders and what gives access again; nothing
/// that would replace or close the task is suggested.
fn hidden_spec(ws: &Workspace, task: &str) -> Option<RpcError> {
    hidden_in(task, specfile::hiding(&ws.root, &format!("{task}.md")))
}

/// [`hidden_spec`] of the folders `hidden`.
fn hidden_in(task: &str, hidden: Vec<specfile::Unlisted>) -> Option<RpcError> {
    let first = hidden.first()?;
    let folders: Vec<String> = hidden.iter().map(ToString::to_string).collect();
    Some(
        RpcError::new(
            ErrorKind::WorkspaceError,
            format!("cannot tell where the spec of `{task}` is: {}", and_list(&folders)),
        )
        .with_hint(format!("{}, then run the command again", first.remedy())),
    )
}

/// `plan`'s last look before it takes `task` as a new id: while a spec folder its file could be
/// in cannot be looked in, a spec there may have the id, so the id is refused, naming the
/// folders and what gives access again (any other id could be hidden there just as well).
pub(crate) fn refuse_hidden_id(ws: &Workspace, task: &str) -> RpcResult<()> {
    let hidden = specfile::hiding(&ws.root, &format!("{task}.md"));
    let Some(first) = hidden.first() else { return Ok(()) };
    let folders: Vec<String> = hidden.iter().map(ToString::to_string).collect();
    Err(RpcError::new(
        ErrorKind::WorkspaceError,
        format!("cannot tell whether task id `{task}` is free: {}; a spec there may have it", and_list(&folders)),
    )
    .with_hint(format!("{}, then run `scafld plan {task}` again", first.remedy())))
}

/// A task whose spec file is gone (removed, or moved out of `.scafld/specs`) while its ledger
/// keeps it. The ledger holds the runner's record (states, evidence, reviews), never the text
/// someone wrote, so nothing rebuilds the file: `status`, `session`, `fail` and `cancel` work
/// from the ledger alone, and every command that needs the file says where to put it back.
pub(crate) struct Gone {
    pub task: String,
    /// The whole ledger (never empty).
    pub entries: std::sync::Arc<[LedgerEntry]>,
    /// The ledger's status.
    pub status: Status,
}

impl Gone {
    /// `task` of the workspace at `root` (as the caller named them), when its spec file is gone
    /// and its ledger keeps it.
    pub(crate) async fn find(daemon: &Daemon, root: &str, raw_task: &str) -> RpcResult<Option<(Arc<Workspace>, Gone)>> {
        let task = task_id(raw_task)?;
        let ws = daemon.workspace(root).await?;
        Ok(Gone::of(daemon, &ws, task.as_str())?.map(|gone| (ws, gone)))
    }

    /// [`Gone::find`] for a call that only reads (see [`Daemon::workspace_to_read`]).
    pub(crate) async fn find_to_read(
        daemon: &Daemon,
        root: &str,
        raw_task: &str,
    ) -> RpcResult<Option<(Arc<Workspace>, Gone)>> {
        let task = task_id(raw_task)?;
        let ws = daemon.workspace_to_read(root).await?;
        Ok(Gone::of(daemon, &ws, task.as_str())?.map(|gone| (ws, gone)))
    }

    /// [`Gone::find`] in an open workspace, as the files are now (stat first).
    pub(crate) fn of(daemon: &Daemon, ws: &Workspace, task: &str) -> RpcResult<Option<Gone>> {
        Gone::of_unless_hidden(daemon, ws, task, |_| true)
    }

    /// [`Gone::find`] for `fail` and `cancel`, which close the task in its ledger: a spec folder
    /// of the archive that cannot be looked in does not stop them. Whether or not the file is
    /// in it, it is where the file of a task so closed belongs (any folder of the archive is:
    /// `misfiled`), and once it reads again `reconcile` puts its status line right, as for a
    /// file put back later. (Nor can the ledger say the file is not there: scafld archives a
    /// file only when its ledger closes the task, but a hand move puts it in any folder,
    /// whatever month the folder's name says.) One of the open tasks' folders that cannot be
    /// looked in still refuses, naming it: a file there would be left open beside a closed task.
    pub(crate) async fn find_to_close(
        daemon: &Daemon,
        root: &str,
        raw_task: &str,
    ) -> RpcResult<Option<(Arc<Workspace>, Gone)>> {
        let task = task_id(raw_task)?;
        let ws = daemon.workspace(root).await?;
        Ok(Gone::of_to_close(daemon, &ws, task.as_str())?.map(|gone| (ws, gone)))
    }

    /// [`Gone::find_to_close`] in an open workspace, as the files are now (stat first).
    pub(crate) fn of_to_close(daemon: &Daemon, ws: &Workspace, task: &str) -> RpcResult<Option<Gone>> {
        let archive = specfile::specs_dir(&ws.root).join(crate::domain::lifecycle::Folder::Archive.as_str());
        Gone::of_unless_hidden(daemon, ws, task, |hidden| !hidden.is_below(&archive))
    }

    /// [`Gone::of`], refused while a folder its file could be in that `blocks` cannot be
    /// looked in.
    fn of_unless_hidden(
        daemon: &Daemon,
        ws: &Workspace,
        task: &str,
        blocks: impl Fn(&specfile::Unlisted) -> bool,
    ) -> RpcResult<Option<Gone>> {
        if let Some(changed) = crate::sync::write(&ws.index).sync_task(task) {
            daemon.publish_task_changed(ws, &changed, "hand_edit");
        }
        if crate::sync::read(&ws.index).get(task).is_some() {
            return Ok(None);
        }
        let entries = daemon.store().ledger(&ws.id, task).map_err(RpcError::internal)?;
        let Some(state) = crate::domain::ledger::state(&entries) else { return Ok(None) };
        let mut hidden = specfile::hiding(&ws.root, &format!("{task}.md"));
        hidden.retain(blocks);
        if let Some(hidden) = hidden_in(task, hidden) {
            return Err(hidden);
        }
        Ok(Some(Gone { task: task.to_string(), entries, status: state.status }))
    }

    /// The answer of a command that needs the file: it is missing, what the ledger keeps, and
    /// where to put it back (`details.spec_missing`: the status and the place, for scripts).
    pub(crate) fn error(&self, ws: &Workspace) -> RpcError {
        let (task, place) = (&self.task, crate::ledger::place(ws, &self.task, &self.entries));
        RpcError::new(
            ErrorKind::NotFound,
            format!(
                "the spec file of `{task}` is missing (removed or moved out of .scafld/specs); its ledger keeps the task ({} entries, last {})",
                self.entries.len(),
                self.status
            ),
        )
        .with_hint(format!(
            "put the file back at {place} (from git, a backup or your editor), then run `{}`; `scafld status {task}` and `scafld session {task}` show what the ledger keeps meanwhile",
            ws.runnable(&format!("scafld reconcile {task}"))
        ))
        .with_details(serde_json::json!({ "spec_missing": { "status": self.status, "place": place } }))
    }
}

/// Several files claim one task (the index's `duplicates`): an interrupted move's leftover, a
/// copy made by hand, or a save an editor made to the old place after a command moved the spec.
pub(crate) struct Copies {
    /// The file the index reads as the task's spec (first in `specfile::lookup_order`).
    pub owner: PathBuf,
    /// Every other one, in lookup order.
    pub others: Vec<PathBuf>,
    /// The copy in the folder the ledger's status puts the task in, when exactly one is.
    pub placed: Option<PathBuf>,
    /// The copy that is only a leftover: the task is in two files, and it differs from
    /// `placed` in runner-owned lines alone (`only_runner_parts_differ`), so putting it away
    /// loses nothing anyone wrote. An interrupted move leaves one such copy, never two: a task
    /// in three files or more has none, since moving one aside would leave it in two.
    pub leftover: Option<PathBuf>,
}

impl Copies {
    /// The files of `entry`, which the ledger places and whether the other is a leftover.
    /// Reads the two files of a task in two; decides nothing on modification times and moves
    /// nothing.
    pub(crate) fn of(daemon: &Daemon, ws: &Workspace, entry: &SpecEntry) -> RpcResult<Option<Copies>> {
        if entry.duplicates.is_empty() {
            return Ok(None);
        }
        let entries = daemon.store().ledger(&ws.id, &entry.task_id).map_err(RpcError::internal)?;
        Ok(Copies::placed_by(ws, entry, crate::domain::ledger::replay(&entries).status))
    }

    /// [`Copies::of`] with the ledger's status (`None`: no ledger) already known.
    fn placed_by(ws: &Workspace, entry: &SpecEntry, status: Option<Status>) -> Option<Copies> {
        if entry.duplicates.is_empty() {
            return None;
        }
        let (owner, others) = (entry.path.clone(), entry.duplicates.clone());
        let expected = status.map(crate::domain::lifecycle::Folder::of);
        let in_place = |p: &&PathBuf| expected.is_some() && specfile::folder_of(&ws.root, p) == expected;
        let mut placed = std::iter::once(&owner).chain(&others).filter(in_place);
        let (Some(placed), None) = (placed.next().cloned(), placed.next()) else {
            return Some(Copies { owner, others, placed: None, leftover: None });
        };
        let leftover = match others.as_slice() {
            [other] => {
                let candidate = if placed == owner { other } else { &owner };
                let text = |p: &Path| {
                    crate::workspace::index::read_spec(&ws.root, p).ok().and_then(|bytes| String::from_utf8(bytes).ok())
                };
                match (text(candidate), text(&placed)) {
                    (Some(old), Some(current)) => {
                        crate::domain::spec::project::only_runner_parts_differ(&old, &current)
                            .then(|| candidate.clone())
                    }
                    _ => None,
                }
            }
            _ => None,
        };
        Some(Copies { owner, others, placed: Some(placed), leftover })
    }

    /// The error saying so, naming every file, with the way out: `reconcile` for a leftover,
    /// else a merge by hand (nothing a person wrote is moved by the runner).
    pub(crate) fn explain(&self, ws: &Workspace, task: &str) -> (String, String) {
        let owner = ws.relative(&self.owner);
        let others: Vec<String> = self.others.iter().map(|p| ws.relative(p)).collect();
        let all = in_files(&owner, &others);
        let two = others.len() == 1;
        match (&self.placed, &self.leftover) {
            (Some(placed), Some(leftover)) => (
                format!(
                    "{all}; {} differs from {} only in runner-owned lines (an interrupted move's leftover)",
                    ws.relative(leftover),
                    ws.relative(placed)
                ),
                format!(
                    "`{}` moves {} aside to .scafld/runs/{task}/superseded/ and says so; or delete it yourself",
                    ws.runnable(&format!("scafld reconcile {task}")),
                    ws.relative(leftover)
                ),
            ),
            (Some(placed), None) => {
                let placed = ws.relative(placed);
                let strays: Vec<&String> = std::iter::once(&owner).chain(&others).filter(|p| **p != placed).collect();
                let diffs: Vec<String> = strays.iter().map(|stray| format!("`diff {stray} {placed}`")).collect();
                let (why, show) = if two {
                    ("they differ in text someone wrote, so neither is moved or removed", "shows them")
                } else {
                    (
                        "an interrupted move leaves a task in two files, not more, so none is taken for its leftover; none is moved or removed",
                        "show them",
                    )
                };
                (
                    format!("{all}; {why} (the ledger puts the task at {placed})"),
                    format!(
                        "merge the edits you want to keep from {strays} into {placed} ({} {show}), then delete {strays}",
                        and_list(&diffs),
                        strays = and_list(&strays),
                    ),
                )
            }
            (None, _) if two => (
                format!("{all}; neither is moved or removed"),
                format!(
                    "keep one: merge what you want from one file into the other, then delete it (`diff {owner} {}`)",
                    others[0]
                ),
            ),
            (None, _) => {
                let diffs: Vec<String> = others.iter().map(|other| format!("`diff {owner} {other}`")).collect();
                (
                    format!("{all}; none is moved or removed"),
                    format!(
                        "keep one: merge what you want from the others into it ({}), then delete the others, so that one file is left",
                        diffs.join(", ")
                    ),
                )
            }
        }
    }
}

/// Refuse to change a task that is archived (completed, failed, cancelled): its outcome stands.
pub(crate) fn refuse_archived(task: &str, status: Status) -> RpcResult<()> {
    if status.is_terminal() {
        return Err(RpcError::new(ErrorKind::InvalidState, format!("{task} is already archived ({status})"))
            .with_hint("archived tasks are immutable; create a new task to continue"));
    }
    Ok(())
}

/// What `reconcile` has to put right in `entry`'s files, as `next_action` takes it, given the
/// status its ledger says (`None`: no ledger, nothing to say): a second copy that is an
/// interrupted move's leftover ([`Copies`]), or a single file whose front matter or folder is
/// not the ledger's status. `status`, `handoff` and `list` ask it alike; it reads the two files
/// of a task in two, and nothing else (a task in three files or more has no leftover).
pub(crate) fn misfiled(ws: &Workspace, entry: &SpecEntry, status: Option<Status>) -> Option<Misfiled> {
    if !entry.duplicates.is_empty() {
        let copies = Copies::placed_by(ws, entry, status)?;
        let (leftover, placed) = (copies.leftover?, copies.placed?);
        return Some(Misfiled::Leftover { path: ws.relative(&leftover), placed: ws.relative(&placed) });
    }
    let status = status?;
    let file = entry.listing.status;
    let placed = specfile::folder_of(&ws.root, &entry.path) == Some(crate::domain::lifecycle::Folder::of(status));
    (!entry.listing.says(status) || !placed).then(|| Misfiled::Unmoved {
        path: ws.relative(&entry.path),
        file: file.map_or_else(|| "no status".to_string(), |s| s.to_string()),
        // The folder it belongs in is a link or no folder: `reconcile` would be refused (in a
        // checkout sharing another's `.scafld`, it runs there instead).
        blocked: crate::workspace::layout::unreal_dir(
            &specfile::specs_dir(&ws.root).join(crate::domain::lifecycle::Folder::of(status).as_str()),
        )
        .filter(|unreal| !unreal.is_shared_scafld())
        .map(|unreal| format!("{unreal}: {}", unreal.remedy())),
    })
}

/// Under the task's lock, in a command that writes (`reconcile`): move an interrupted move's
/// leftover (see [`Copies`]) aside to `.scafld/runs/<task>/superseded/`, never deleting it.
/// Returns where it went, for the command's answer. A copy with anyone's text in it stays.
pub(crate) fn tidy_leftover(daemon: &Daemon, ws: &Workspace, task: &str) -> RpcResult<Option<(String, String)>> {
    crate::sync::write(&ws.index).sync_task(task);
    let Some(entry) = crate::sync::read(&ws.index).get(task).cloned() else { return Ok(None) };
    let Some(Copies { leftover: Some(leftover), .. }) = Copies::of(daemon, ws, &entry)? else { return Ok(None) };
    let aside = ws.root.join(".scafld/runs").join(task).join("superseded");
    crate::workspace::layout::create_real_dir(&aside).map_err(super::daemon::workspace_io_error)?;
    let folder = specfile::folder_of(&ws.root, &leftover).map(|f| f.as_str()).unwrap_or("spec");
    let to = set_aside(&leftover, &aside, &format!("{folder}-{}", crate::clock::now_rfc3339()))
        .map_err(super::daemon::workspace_io_error)?;
    tracing::info!(task, leftover = %leftover.display(), to = %to.display(), "moved an interrupted move's leftover aside");
    let mut index = crate::sync::write(&ws.index);
    index.refresh(&leftover);
    index.sync_task(task);
    drop(index);
    daemon.publish_task_changed(ws, task, "recovery");
    Ok(Some((ws.relative(&leftover), ws.relative(&to))))
}

/// Move `file` into `dir` as `<stem>.md`, or `<stem>-2.md`, `-3`, ... when a copy set aside
/// before has that name (two in the same second): linked under the new name first, which
/// fails rather than replace anything, then unlinked from the old.
fn set_aside(file: &Path, dir: &Path, stem: &str) -> std::io::Result<PathBuf> {
    for n in 1.. {
        let to = dir.join(if n == 1 { format!("{stem}.md") } else { format!("{stem}-{n}.md") });
        match std::fs::hard_link(file, &to) {
            Ok(()) => return std::fs::remove_file(file).map(|()| to),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    unreachable!("some name is free")
}

/// A task of the original tool has `.scafld/runs/<task-id>/session.json`: its entries are
/// imported as the task's ledger the first time the task is looked at, and the entries the
/// original appends later (it may be used again: the tools take turns) at each look after,
/// each batch in one atomic write under the task's lock, marked with the count and digest of
/// the file's entries it brings the ledger to (`LedgerEvent::SessionImported`); the file is
/// left untouched. A file whose imported entries are not as they were (rewritten, or cut
/// short) is a divergence: nothing more is imported, and it is returned, for a command that
/// would change the task to refuse with and one that reads to show beside its answer.
/// A read does not wait for a task held by another command to import later entries: the next
/// look does.
async fn follow_original_session(daemon: &Daemon, ws: &Workspace, task: &str, writes: bool) -> RpcResult<Followed> {
    let first = match look_at_session(daemon, ws, task)? {
        Look::Nothing => return Ok(Followed::Current),
        Look::Diverged(refusal) => return Ok(Followed::Diverged(refusal)),
        Look::Import { first, .. } => first,
    };
    let lock = daemon.jobs.task_lock(ws, task);
    let _guard = match writes || first {
        true => lock.lock().await,
        false => match lock.try_lock() {
            Ok(guard) => guard,
            Err(_) => return Ok(Followed::Busy),
        },
    };
    // Again under the lock: another command may have imported or appended meanwhile.
    let (events, first) = match look_at_session(daemon, ws, task)? {
        Look::Nothing => return Ok(Followed::Current),
        Look::Diverged(refusal) => return Ok(Followed::Diverged(refusal)),
        Look::Import { events, first } => (events, first),
    };
    let imported = match first {
        true => daemon.store().import(&ws.id, task, events).map_err(RpcError::internal)?,
        false => daemon.store().append_imported(&ws.id, task, events).map_err(RpcError::internal)?.len(),
    };
    if imported > 0 {
        let entries = daemon.store().ledger(&ws.id, task).map_err(RpcError::internal)?;
        crate::ledger::note_state(daemon, ws, task, &entries);
        tracing::info!(
            task,
            imported,
            "imported the original session ledger entries from {}",
            ws.relative(&session_path(ws, task))
        );
    }
    Ok(Followed::Current)
}

/// Where [`follow_original_session`] left the task.
enum Followed {
    /// The ledger holds every entry of the file (or it holds none: it is no import of it).
    Current,
    /// A read found the task held by another command: the next look imports.
    Busy,
    /// The file and the ledger disagree: the refusal of a command that would change the task.
    Diverged(RpcError),
}

/// What `list`, `report` and `validate --all` see of the original's session files: each task
/// whose ledger already holds entries follows its file as a look at the task would (a first
/// import waits for a look at the task, as it always did), a file unchanged since the last
/// such look (its settled stamp) skipped. The divergences found, as warnings.
pub(crate) async fn follow_original_sessions(daemon: &Daemon, ws: &Workspace) -> Vec<String> {
    use crate::workspace::index::Stamp;
    let Ok(runs) = std::fs::read_dir(ws.root.join(".scafld/runs")) else { return Vec::new() };
    let tasks: Vec<String> = runs
        .filter_map(|found| found.ok()?.file_name().into_string().ok())
        .filter(|name| TaskId::parse(name).is_ok())
        .collect();
    let mut warnings = Vec::new();
    for task in tasks {
        // No session file, nothing of the original's to follow: its ledger is not read (`list`
        // passes here for every task that has a runs folder).
        let Some(stamp) = Stamp::of(&session_path(ws, &task)) else { continue };
        let stamp = Some(stamp).filter(Stamp::settled);
        if stamp.is_some() && crate::sync::lock(&ws.sessions_followed).get(&task) == stamp.as_ref() {
            continue;
        }
        if daemon.store().ledger(&ws.id, &task).map_or(true, |ledger| ledger.is_empty()) {
            continue;
        }
        match follow_original_session(daemon, ws, &task, false).await {
            Ok(Followed::Current) => {
                if let Some(stamp) = stamp {
                    crate::sync::lock(&ws.sessions_followed).insert(task, stamp);
                }
            }
            Ok(Followed::Diverged(RpcError(refusal))) => {
                warnings.push(format!("{} ({})", refusal.message, refusal.hint.unwrap_or_default()));
            }
            Ok(Followed::Busy) | Err(_) => {}
        }
    }
    warnings
}

/// Why the original's session file of `task` and its ledger disagree (see
/// [`follow_original_session`]), as a read shows it beside its answer; `None` when they do not.
pub(crate) fn session_divergence(daemon: &Daemon, ws: &Workspace, task: &str) -> Option<String> {
    match look_at_session(daemon, ws, task) {
        Ok(Look::Diverged(RpcError(refusal))) => {
            Some(format!("{} ({})", refusal.message, refusal.hint.unwrap_or_default()))
        }
        _ => None,
    }
}

/// What the original's session file of a task calls for now.
enum Look {
    Nothing,
    /// Entries to write: the whole ledger (`first`), or after what it holds.
    Import {
        events: Vec<(String, crate::domain::ledger::LedgerEvent)>,
        first: bool,
    },
    /// The file and the ledger disagree: the refusal of a command that would change the task.
    Diverged(RpcError),
}

fn session_path(ws: &Workspace, task: &str) -> PathBuf {
    ws.root.join(".scafld/runs").join(task).join("session.json")
}

/// The session file of `task` read and held against its ledger ([`import::follow`]). A file
/// that cannot be imported is refused while nothing was imported from it (the task has no
/// ledger); once its entries were, it is a divergence; and a ledger of this tool's own (no
/// entry of the file in it) ignores the file, as it always did.
///
/// [`import::follow`]: crate::domain::import::follow
fn look_at_session(daemon: &Daemon, ws: &Workspace, task: &str) -> RpcResult<Look> {
    use crate::domain::import::{self, Follow};
    let path = session_path(ws, task);
    // The path itself, not what it points at: a dangling link is there, and refused.
    let meta = std::fs::symlink_metadata(&path);
    if meta.as_ref().is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
        return Ok(Look::Nothing);
    }
    let ledger = daemon.store().ledger(&ws.id, task).map_err(RpcError::internal)?;
    let file = ws.relative(&path);
    let imported = ledger.iter().any(|e| matches!(e.event, crate::domain::ledger::LedgerEvent::SessionImported { .. }));
    let refused = |refusal: RpcError| match (ledger.is_empty(), imported) {
        (true, _) => Err(refusal),
        (false, true) => Ok(Look::Diverged(refusal)),
        (false, false) => Ok(Look::Nothing),
    };
    let meta = match meta {
        Ok(meta) => meta,
        Err(e) => {
            return refused(
                RpcError::new(ErrorKind::WorkspaceError, format!("cannot import {file}: {e}"))
                    .with_hint("check the permissions of .scafld/runs; the file is only read, never changed"),
            );
        }
    };
    let document = match read_session(ws, task, &path, &meta) {
        Ok(document) => document,
        Err(refusal) => return refused(refusal),
    };
    match import::follow(&ledger, &document, task, &crate::clock::now_rfc3339()) {
        Err(why) => refused(invalid_session(&file, why)),
        Ok(Follow::Nothing) => Ok(Look::Nothing),
        Ok(Follow::Import(events)) => Ok(Look::Import { events, first: ledger.is_empty() }),
        Ok(Follow::Diverged(why)) => Ok(Look::Diverged(
            RpcError::new(
                ErrorKind::ValidationFailed,
                format!("{file} and the ledger of `{task}` disagree: {why}; nothing more is imported from it, and no command changes the task until they agree"),
            )
            .with_hint(format!(
                "put the file's entries back as they were when imported (`scafld session {task}` shows the ledger), or move it out of .scafld/runs/{task}/ to go on from the ledger alone; then run the command again"
            )),
        )),
    }
}

/// A session document that is refused for what it holds (or is): `validation_failed` (exit 3),
/// as a spec with errors is; only an I/O failure reading it is the workspace's.
fn invalid_session(file: &str, why: String) -> RpcError {
    RpcError::new(ErrorKind::ValidationFailed, format!("cannot import {file}: {why}"))
        .with_hint("fix or move the file; it is only read, never changed")
}

/// The session document at `path`. One past the bounds (`import::MAX_SESSION_BYTES`,
/// `MAX_SESSION_ENTRIES`) is refused whole, its size looked at before it is read. Anything at
/// its path that is not a regular file (a folder, a FIFO, a link to a device or to nothing) is
/// refused too, never taken for "no session": a build would then write a fresh ledger over the
/// history the file may hold.
fn read_session(ws: &Workspace, task: &str, path: &Path, meta: &std::fs::Metadata) -> RpcResult<serde_json::Value> {
    use crate::domain::import::{self, MAX_SESSION_BYTES, MAX_SESSION_ENTRIES, Refused};
    use scafld_local::capped::{Refusal, size};
    let file = ws.relative(path);
    let invalid = |why: String| invalid_session(&file, why);
    let too_large = |what: String| {
        RpcError::new(
            ErrorKind::ValidationFailed,
            format!(
                "cannot import {file}: {what}; an imported session may have at most {} and {MAX_SESSION_ENTRIES} entries, so nothing was imported",
                size(MAX_SESSION_BYTES)
            ),
        )
        .with_hint(format!(
            "the original tool can still read it; archive it (move it out of .scafld/runs/{task}/) or trim its entries, then run the command again"
        ))
    };
    let link = meta.file_type().is_symlink().then(|| std::fs::read_link(path).unwrap_or_default());
    let link_to = |what: &str| match &link {
        Some(target) => format!("it is a symbolic link to {what} (`{}`)", target.display()),
        None => format!("it is {what}"),
    };
    let text =
        scafld_local::capped::read_text(path, "session file", MAX_SESSION_BYTES).map_err(|e| match &e.refusal {
            Refusal::TooLarge(Some(len)) => too_large(format!("it is {}", size(*len))),
            Refusal::TooLarge(None) => too_large("it grew while it was read".into()),
            Refusal::NotAFile(kind) => invalid(format!("{}, not a regular file", link_to(&format!("a {kind}")))),
            Refusal::Io(io) if io.kind() == std::io::ErrorKind::NotFound && link.is_some() => {
                invalid(link_to("nothing"))
            }
            Refusal::NotText => invalid("it is not UTF-8 text".into()),
            Refusal::Io(_) => RpcError::new(ErrorKind::WorkspaceError, format!("cannot import {file}: {e}"))
                .with_hint("check the file's permissions; it is only read, never changed"),
        })?;
    import::parse(&text).map_err(|refused| match refused {
        Refused::TooManyEntries(count) => too_large(format!("it holds {count} entries ({})", size(text.len() as u64))),
        Refused::Invalid(why) => invalid(why),
    })
}

pub(crate) fn wire(d: &Diagnostic) -> WireDiagnostic {
    WireDiagnostic { line: d.line, severity: d.severity, message: d.message.clone() }
}

/// Every error of an entry (read, duplicate and parse errors) as wire diagnostics.
pub(crate) fn entry_errors(entry: &SpecEntry) -> Vec<WireDiagnostic> {
    let mut errors: Vec<WireDiagnostic> = entry.listing.errors().map(wire).collect();
    if let Some(e) = &entry.read_error {
        errors.insert(0, wire(e));
    }
    if let Some(message) = entry.duplicate_error() {
        errors.insert(0, WireDiagnostic { line: 0, severity: Severity::Error, message });
    }
    errors
}

/// [`entry_errors`], with the other files explained from the ledger and every file
/// ([`Copies::explain`]), and the hint that goes with it.
pub(crate) fn explained_errors(
    daemon: &Daemon,
    ws: &Workspace,
    entry: &SpecEntry,
) -> RpcResult<(Vec<WireDiagnostic>, Option<String>)> {
    let mut errors = entry_errors(entry);
    let Some(copies) = Copies::of(daemon, ws, entry)? else { return Ok((errors, None)) };
    let (message, hint) = copies.explain(ws, &entry.task_id);
    errors[0].message = message;
    Ok((errors, Some(hint)))
}

/// A diagnostic as a refusal quotes it: `line N: message`, or the message alone for the file
/// as a whole.
pub(crate) fn at_line(d: &WireDiagnostic) -> String {
    if d.line > 0 { format!("line {}: {}", d.line, d.message) } else { d.message.clone() }
}

/// Refuse to operate on a spec with errors, listing them.
pub(crate) fn require_valid(daemon: &Daemon, ws: &Workspace, entry: &SpecEntry) -> RpcResult<()> {
    let (errors, hint) = explained_errors(daemon, ws, entry)?;
    if errors.is_empty() {
        return Ok(());
    }
    // With its line, as `validate` says it (a duplicate's message names the first copy's line:
    // without this one, that would read as the line at fault).
    let first = errors.first().map(at_line).unwrap_or_default();
    Err(RpcError::new(
        ErrorKind::ValidationFailed,
        format!("{} has {} error(s); first: {first}", ws.relative(&entry.path), errors.len()),
    )
    .with_hint(hint.unwrap_or_else(|| format!("run `scafld validate {}` for every diagnostic", entry.task_id)))
    .with_details(serde_json::json!({ "diagnostics": errors })))
}
