//! The task ledger service: the one way events reach a task's ledger (`record`: append, flush,
//! then project the spec; `record_ending`: the same with a job's end saved after it; a build
//! step gathers its results and records them with its conclusion), and the projection of the
//! ledger onto the spec file. Below the handlers (`tasks/`, `review/`), above the domain; it
//! calls neither handler module.

use std::path::PathBuf;
use std::sync::Arc;

use scafld_protocol::ErrorKind;

use crate::clock;
use crate::daemon::{Daemon, Home};
use crate::domain::job::JobRecord;
use crate::domain::ledger::{self, LedgerEntry, LedgerEvent};
use crate::domain::lifecycle::{Folder, Status};
use crate::domain::next::{MissingSpec, Restore};
use crate::domain::spec::budget::MAX_SPEC_BYTES;
use crate::domain::spec::project::project;
use crate::domain::spec::{Parsed, Spec, parse, parse_as};
use crate::error::{RpcError, RpcResult};
use crate::workspace::Workspace;
use crate::workspace::specfile::{self, FileId, InPlace, Put};
use scafld_local::capped::size;

fn internal(e: impl std::fmt::Display) -> RpcError {
    RpcError::internal(e)
}

/// How many times a projection is computed again from a file that a save replaced while it was
/// being written, before it leaves the file to the user and says so.
const ATTEMPTS: usize = 8;

/// What became of projecting the ledger onto the task's spec file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Projected {
    /// The spec shows the ledger (written now, or already so): where it is.
    Current(PathBuf),
    /// The spec was left exactly as it is on disk (or, missing, not written at all). The ledger
    /// keeps the task's state; the next write or `scafld reconcile` projects it once the file
    /// is there and reads as the task's spec again.
    Deferred {
        /// Why, and what puts it right, in a sentence for answers.
        note: String,
        why: Unprojected,
    },
}

/// Why a projection left the spec file as it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unprojected {
    /// There is no spec file: removed, or moved out of `.scafld/specs`. Nothing is written in
    /// its place (the ledger keeps the runner's record, not the text someone wrote); it needs
    /// putting back.
    Missing,
    /// The file does not read as the task's spec: it needs fixing before anything else.
    Broken,
    /// It could not be written this time (saved again each time it was written, a write that
    /// failed): running the command again does it.
    Unwritten,
    /// The folder the work began in holds the workspace no longer (moved away, another
    /// workspace in its place) and its new place is not known: nothing is written anywhere,
    /// and the next write or `reconcile` in the workspace's folder projects it.
    Away,
}

/// The sentence a deferred projection carries: where, why, and what puts it right.
/// The command is named from where it runs (`cd <main checkout> && ...` in a checkout whose
/// `.scafld` is a link: [`Workspace::runnable`]).
fn deferred(ws: &Workspace, task: &str, why: impl std::fmt::Display, kind: Unprojected) -> Projected {
    let remedy = if kind == Unprojected::Broken { "fix the file, then run" } else { "run" };
    let reconcile = ws.runnable(&format!("scafld reconcile {task}"));
    let note = format!(
        "the spec was not updated ({why}); the ledger keeps the task's state: {remedy} `{reconcile}` to write it"
    );
    tracing::warn!(task, "{note}");
    Projected::Deferred { note, why: kind }
}

/// [`deferred`] for a write that failed (`e`, from [`write_error`]): where it names what to
/// put right first (a link where a spec folder belongs), the note says so before `reconcile`.
fn deferred_write(ws: &Workspace, task: &str, e: RpcError) -> Projected {
    let remedy = e.0.details.as_ref().and_then(|d| d.get("remedy")).and_then(|r| r.as_str()).map(str::to_string);
    let Some(remedy) = remedy else {
        return deferred(ws, task, e, Unprojected::Unwritten);
    };
    let note = format!(
        "the spec was not updated ({e}); the ledger keeps the task's state: {remedy}, then run `{}` to write it",
        ws.runnable(&format!("scafld reconcile {task}"))
    );
    tracing::warn!(task, "{note}");
    Projected::Deferred { note, why: Unprojected::Unwritten }
}

/// [`deferred`] for a task without a spec file, whose ledger (`entries`) says where it belongs.
fn deferred_missing(ws: &Workspace, task: &str, entries: &[LedgerEntry]) -> Projected {
    let note = format!(
        "the spec file is missing (removed or moved out of .scafld/specs), so nothing was written; the ledger keeps the task's state: put the file back at {}, then run `{}`",
        place(ws, task, entries),
        ws.runnable(&format!("scafld reconcile {task}"))
    );
    tracing::warn!(task, "{note}");
    Projected::Deferred { note, why: Unprojected::Missing }
}

impl Projected {
    /// Why the spec was left as it was, when it was.
    pub fn note(self) -> Option<String> {
        match self {
            Projected::Deferred { note, .. } => Some(note),
            Projected::Current(_) => None,
        }
    }

    /// Say in `job`'s answer that the spec was left as it was, and why; a file that needs
    /// fixing first makes that the next command (a build would refuse it), and a missing one
    /// putting it back (`missing`: where it belongs and what restores it).
    fn note_in(&self, job: &mut JobRecord, task: &str, missing: Option<&MissingSpec>) {
        if let Projected::Deferred { note, why } = self {
            let next = match why {
                Unprojected::Broken => Some(format!("scafld validate {task}")),
                Unprojected::Missing => Some(
                    missing.and_then(|m| m.restore.as_ref()).map_or_else(|| "none".to_string(), |r| r.command.clone()),
                ),
                Unprojected::Unwritten | Unprojected::Away => None,
            };
            job.note_unprojected(note, next);
        }
    }

    fn missing(&self) -> bool {
        matches!(self, Projected::Deferred { why: Unprojected::Missing, .. })
    }
}

/// Where the spec of a task whose ledger is `entries` belongs (workspace-relative): the folder
/// of the ledger's status, an archive month from its last entry.
pub fn place(ws: &Workspace, task: &str, entries: &[LedgerEntry]) -> String {
    let status = ledger::state(entries).map_or(Status::Draft, |s| s.status);
    let recorded_at = entries.last().map(|e| e.recorded_at.clone()).unwrap_or_else(clock::now_rfc3339);
    let month = clock::month_of(&recorded_at).unwrap_or("unknown");
    ws.relative(&specfile::target_path(&ws.root, task, status, month))
}

/// A task without its spec file: where the file belongs (its ledger is `entries`) and, when git
/// still holds a copy (at that place, or in another lifecycle folder, which `reconcile` then
/// moves it out of), the command that brings it back. Reads git off the runtime.
pub async fn missing_spec(ws: &Workspace, task: &str, entries: &[LedgerEntry]) -> MissingSpec {
    let place = place(ws, task, entries);
    let specs = specfile::specs_dir(&ws.root);
    let mut candidates = vec![place.clone()];
    for folder in [Folder::Drafts, Folder::Approved, Folder::Active] {
        let path = ws.relative(&specs.join(folder.as_str()).join(format!("{task}.md")));
        if !candidates.contains(&path) {
            candidates.push(path);
        }
    }
    let root = ws.root.clone();
    let kept =
        crate::baseline::off_runtime(move || Ok::<_, String>(crate::baseline::kept_copy(&root, &candidates))).await;
    let restore = kept
        .ok()
        .and_then(Result::ok)
        .flatten()
        .map(|(path, kept)| Restore { command: kept.restore_command(&path), source: kept.source(&path) });
    MissingSpec { place, restore }
}

/// Tell the index of every open folder of `ws`'s workspace what the task's ledger (`entries`,
/// the whole of it after an append) says now, so that whole-workspace reads follow it from
/// memory. A folder opened later reads it from the store ([`load_states`]).
pub fn note_state(daemon: &Daemon, ws: &Workspace, task: &str, entries: &[LedgerEntry]) {
    let Some(state) = ledger::state(entries) else { return };
    crate::sync::write(&ws.index).note_ledger(task, state.clone());
    for other in daemon.open_as(&ws.id) {
        crate::sync::write(&other.index).note_ledger(task, state.clone());
    }
}

/// Read what every ledger of `ws` says into its index, once: the first whole-workspace read
/// (`list`, `report`) does it, and one that comes meanwhile waits for that read rather than
/// reading them all a second time. Blocking: the store's reads.
pub fn load_states(store: &dyn crate::store::Store, ws: &Workspace) -> Result<(), crate::store::StoreError> {
    let _loading = crate::sync::lock(&ws.ledger_loading);
    if crate::sync::read(&ws.index).ledger_loaded() {
        return Ok(());
    }
    let mut states = Vec::new();
    store.each_ledger(&ws.id, &mut |task, entries| {
        if let Some(state) = ledger::state(entries) {
            states.push((task.to_string(), state));
        }
    })?;
    crate::sync::write(&ws.index).take_ledger(states);
    Ok(())
}

/// Append `events` to the task's ledger, then write the spec as the whole ledger says it is.
/// The events are recorded whatever becomes of the spec: a file that does not read as the
/// task's spec, or that cannot be written now (a full disk, no permission), is left as it is
/// ([`Projected::Deferred`], a note for the answer). What was recorded stands, so the command
/// succeeded: an error here would have its caller retry a change already made.
pub fn record(
    daemon: &Daemon,
    ws: &Workspace,
    task: &str,
    events: Vec<LedgerEvent>,
    cause: &str,
) -> RpcResult<Projected> {
    daemon.store().append(&ws.id, task, &clock::now_rfc3339(), events).map_err(internal)?;
    let entries = daemon.store().ledger(&ws.id, task).map_err(internal)?;
    note_state(daemon, ws, task, &entries);
    let moved;
    let ws = match daemon.home_of(ws) {
        Home::Here => ws,
        Home::Moved(home) => {
            moved = home;
            &*moved
        }
        Home::Gone(why) => return Ok(deferred(ws, task, why, Unprojected::Away)),
    };
    Ok(project_entries(daemon, ws, task, &entries, cause).unwrap_or_else(|e| deferred_write(ws, task, e)))
}

/// Append `events` to the task's ledger of workspace `workspace_id`, which is open at no folder
/// that may be written as its (the start's recovery of a job whose folder holds a copy now, or
/// nothing): the workspace reads them wherever it is opened next, and its spec shows them with
/// the task's next write. Nothing is appended for a workspace the store no longer records.
pub fn record_unopened(daemon: &Daemon, workspace_id: &str, task: &str, events: Vec<LedgerEvent>) -> RpcResult<()> {
    let known = daemon.store().workspaces().map_err(internal)?.iter().any(|r| r.id == workspace_id);
    if known {
        daemon.store().append(workspace_id, task, &clock::now_rfc3339(), events).map_err(internal)?;
    }
    Ok(())
}

/// [`record`] for the events that end a build job: `end` gets the spec and the ledger as the
/// events leave them and returns the job's final record, which reaches the disk in the same
/// flush as the events. The spec's new bytes are written and synced under a temporary name meanwhile,
/// and put in place once the flush is done (never showing what the ledger does not hold).
/// Returns the job's record, for the caller to publish now that the spec says so too, the
/// spec's rename, whose directory the caller syncs once it has answered (until then a power
/// loss may bring back the previous spec, which the ledger is ahead of), and whether the job's
/// record reached the disk after the events (when not, the events stand and the caller has the
/// job table save the record again). Callers hold the task's lock, so nothing appends in between.
///
/// `base` is the spec the job worked from: it stands in for a file that no longer reads as the
/// task's spec (emptied, broken front matter, another task's id), which is then left as it is
/// and the job's answer says so ([`JobRecord::note_unprojected`]).
///
/// `after` is what is known only once a read still under way ends (a build step's material
/// after its commands): its material records, and what `end` needs of it. The spec is read,
/// projected and staged meanwhile, so `after`'s events must be ones the projection passes over
/// ([`LedgerEvent::Material`] only).
pub async fn record_ending<T>(
    daemon: &Daemon,
    ws: &Workspace,
    task: &str,
    mut events: Vec<LedgerEvent>,
    after: impl Future<Output = (Vec<LedgerEvent>, T)>,
    base: &Spec,
    end: impl FnOnce(&Spec, &[LedgerEntry], T) -> JobRecord,
) -> RpcResult<(JobRecord, InPlace, bool)> {
    let cause = "command:build";
    let mut entries = daemon.store().ledger(&ws.id, task).map_err(internal)?.to_vec();
    let recorded_at = clock::now_rfc3339();
    let first = entries.last().map_or(1, |e| e.seq + 1);
    let entry =
        |(event, seq): (&LedgerEvent, u64)| LedgerEntry { seq, recorded_at: recorded_at.clone(), event: event.clone() };
    entries.extend(events.iter().zip(first..).map(entry));
    // The job's result goes to the folder that holds its workspace now, never to one that
    // holds another workspace since (the folder renamed, another moved into its place).
    let moved;
    let (ws, away) = match daemon.home_of(ws) {
        Home::Here => (ws, None),
        Home::Moved(home) => {
            moved = home;
            (&*moved, None)
        }
        Home::Gone(why) => (ws, Some(deferred(ws, task, why, Unprojected::Away))),
    };
    let (on_disk, mut unprojected) = match away {
        Some(away) => (None, Some(away)),
        None => match read_as_spec(ws, task) {
            Ok(found) => (Some(found), None),
            Err(Unread::Missing) => (None, Some(deferred_missing(ws, task, &entries))),
            Err(Unread::Broken(why)) => (None, Some(deferred(ws, task, why, Unprojected::Broken))),
        },
    };
    // The next step it shows is the one `status` shows (what the file and the files a review
    // was shown say now): only where there is a file to write.
    let next = match &on_disk {
        Some((file, parsed)) => as_status(daemon, ws, task, &parsed.spec, &entries, &file.text, &recorded_at),
        None => ledger::project(base, &entries, &recorded_at, crate::templates::shadows(&ws.root, task)),
    };
    let rendered = match &on_disk {
        Some((file, _)) => render(ws, task, file, &ledger::for_file(next.clone(), &entries)).unwrap_or_else(|e| {
            unprojected = Some(deferred(ws, task, e, Unprojected::Broken));
            None
        }),
        None => None,
    };
    // Staged, and parsed for the index, while the ledger flushes.
    let staging = rendered.as_ref().map(|r| {
        let (path, target, text) = (r.from.clone(), r.target.clone(), r.text.clone());
        tokio::task::spawn_blocking(move || {
            specfile::stage_spec(Some(&path), &target, &text).map(|s| (s, parse(&text)))
        })
    });
    let (late, known) = after.await;
    debug_assert!(late.iter().all(|e| matches!(e, LedgerEvent::Material { .. })), "the projection passed over these");
    let seq = first + events.len() as u64;
    entries.extend(late.iter().zip(seq..).map(entry));
    events.extend(late);
    let mut job = end(&next, &entries, known);
    let missing = match unprojected.as_ref().is_some_and(Projected::missing) {
        true => Some(missing_spec(ws, task, &entries).await),
        false => None,
    };
    if let Some(unprojected) = &unprojected {
        unprojected.note_in(&mut job, task, missing.as_ref());
    }
    let ending = daemon.store().append_ending(&ws.id, task, &recorded_at, events, &job).map_err(internal)?;
    let (written, job_unsaved) = (ending.written, ending.job_unsaved);
    if written.first().is_some_and(|w| w.seq == first) {
        note_state(daemon, ws, task, &entries);
    }
    let staged = match staging {
        Some(staging) => Some(staging.await.map_err(internal)?),
        None => None,
    };
    let mut in_place = InPlace::default();
    let after_flush = if written.first().is_some_and(|w| w.seq != first) {
        // Only a caller that broke the lock rule gets here: project what the ledger holds.
        drop(staged);
        if let Ok(entries) = daemon.store().ledger(&ws.id, task) {
            note_state(daemon, ws, task, &entries);
        }
        project_from_ledger(daemon, ws, task, cause).unwrap_or_else(|e| deferred_write(ws, task, e))
    } else if let (Some(rendered), Some(staged), Some((file, _))) = (rendered, staged, &on_disk) {
        match staged.and_then(|(staged, parsed)| {
            let written = staged.written().clone();
            let _moving = daemon.spec_moves.moving();
            Ok((staged.put_in_place_over(file.id, file.text.as_bytes())?, parsed, written))
        }) {
            Ok((Put::Placed(placed), parsed, written)) => {
                in_place = placed;
                rendered.announce(daemon, ws, task, cause, Some(parsed), &written);
                Projected::Current(rendered.target)
            }
            // A save came in after the read: again, from the file as it is now.
            Ok((Put::Changed, _, _)) => {
                project_entries(daemon, ws, task, &entries, cause).unwrap_or_else(|e| deferred_write(ws, task, e))
            }
            Err(e) => deferred_write(ws, task, write_error(e)),
        }
    } else {
        Projected::Current(PathBuf::new())
    };
    let missing = match (missing, after_flush.missing()) {
        (None, true) => Some(missing_spec(ws, task, &entries).await),
        (missing, _) => missing,
    };
    after_flush.note_in(&mut job, task, missing.as_ref());
    if let Some(e) = &job_unsaved {
        tracing::warn!(task, job = %job.id, "the job's end is recorded in the ledger, but its record could not be saved after it ({e}); the job table saves it again");
    }
    Ok((job, in_place, job_unsaved.is_none()))
}

/// Write the spec again when the next step its Current State shows is not the one every other
/// surface decides now (`evidence::seen_now`, as `status`): what a review judged changed after
/// the last write (the spec's authored text edited after a pass, or put back; a refused
/// `complete` found the files a passing review was shown changed; after a review that gave no
/// verdict, its session's result kept, or the spec's text edited since its packet was made).
/// Only for a task in review whose review is current or whose last review gave no verdict, and
/// only when the lines differ; the write is the whole projection, as any write of the spec. Callers hold the task, or leave it to whoever holds it. `Ok(None)`:
/// nothing to write.
pub fn reshow_next(daemon: &Daemon, ws: &Workspace, task: &str, cause: &str) -> RpcResult<Option<Projected>> {
    let entries = daemon.store().ledger(&ws.id, task).map_err(internal)?;
    let replay = ledger::replay(&entries);
    // Only a task in review: a finished one's file is `reconcile`'s to put right, as before.
    let in_review = replay.status == Some(crate::domain::lifecycle::Status::Review);
    let judged = in_review && replay.review.is_some() && replay.review_current;
    if !judged {
        // Nothing it judged is watched any more (`evidence::seen_now` keeps them watched).
        ws.forget_judged(task);
        // After a review that gave no verdict, the step is that review run again as it ran:
        // once its session's result is kept (after the ledger's write), or the spec's text
        // changes the command (`evidence::as_before`).
        // So is a review whose answers the ledger could not take (its session's retry records them).
        let unrecorded = || daemon.sessions.latest(ws, Some(task)).is_some_and(|s| crate::evidence::unrecorded(&s));
        if !in_review || (replay.failed_attempt.is_none() && !unrecorded()) {
            return Ok(None);
        }
    }
    let Ok((file, parsed)) = read_as_spec(ws, task) else { return Ok(None) };
    let next = as_status(daemon, ws, task, &parsed.spec, &entries, &file.text, &clock::now_rfc3339());
    let (shown, decided) = (&parsed.spec.current_state, &next.current_state);
    if shown.next == decided.next && shown.allowed_follow_up == decided.allowed_follow_up {
        return Ok(None);
    }
    project_from_ledger(daemon, ws, task, cause).map(Some)
}

/// The projection of `entries` onto `spec`, the task's spec file read as `text`, its next step
/// the one `status` names (`evidence::next_for`): decided with what the files a current review
/// judged say now (`evidence::seen_for_projection`) and, after a review that gave no verdict,
/// that review run again as it ran (`evidence::as_before`, its session's retry).
fn as_status(
    daemon: &Daemon,
    ws: &Workspace,
    task: &str,
    spec: &Spec,
    entries: &[LedgerEntry],
    text: &str,
    now: &str,
) -> Spec {
    let seen = crate::evidence::seen_for_projection(ws, task, spec, entries, Some(text));
    let shadowed = crate::templates::shadows(&ws.root, task);
    let replay = ledger::replay(entries);
    ledger::project_then(spec, entries, now, shadowed, seen.facts(), |next| {
        // The session is looked up only where the step is to run a review again, or a new one
        // (after one whose answers the ledger could not take, its retry records them).
        use crate::domain::next::Action;
        let again = replay.failed_attempt.is_some() && next.action == Action::RetryReview;
        if !again && next.action != Action::Review {
            return next;
        }
        let latest = daemon.sessions.latest(ws, Some(task));
        crate::evidence::as_before(ws, latest.as_ref(), &replay, next, || {
            crate::domain::review::spec_guard_fingerprint(text)
        })
    })
}

/// [`reshow_next`] for a review session of `task` that kept its result after the ledger
/// recorded it: one that gave no verdict is run again as it ran (`review retry <key>`), which
/// the spec's line could name only once the session held its result. Takes the task.
pub async fn reshow_after_review(daemon: &Daemon, session: &crate::domain::job::SessionRecord, task: &str) {
    let Ok(ws) = daemon.workspace_of(&session.root, &session.workspace_id).await else { return };
    if ws.id != session.workspace_id {
        return;
    }
    let lock = daemon.jobs.task_lock(&ws, task);
    let _held = lock.lock().await;
    if let Err(e) = reshow_next(daemon, &ws, task, "command:review") {
        tracing::warn!("cannot write the next step of {task} after its review: {e}; trying again until it is written");
        daemon.unshown.mark(&ws, task, "command:review");
    }
}

/// Rebuild the spec's runner-owned sections (and its folder) from the ledger. A spec file that
/// does not read as the task's spec, or that is saved again each time it is written, is left
/// as it is ([`Projected::Deferred`]); a file that cannot be written (a full disk, no
/// permission, a symlink inside `.scafld`) is an error, as is a ledger that cannot be read.
pub fn project_from_ledger(daemon: &Daemon, ws: &Workspace, task: &str, cause: &str) -> RpcResult<Projected> {
    let entries = daemon.store().ledger(&ws.id, task).map_err(internal)?;
    match daemon.home_of(ws) {
        Home::Here => project_entries(daemon, ws, task, &entries, cause),
        Home::Moved(home) => project_entries(daemon, &home, task, &entries, cause),
        Home::Gone(why) => Ok(deferred(ws, task, why, Unprojected::Away)),
    }
}

/// Project `entries` onto the task's spec file as it is now: read it, render, stage, and put
/// the new bytes in place over the very file read; when a save replaced it meanwhile, do it
/// all again from that save (a bounded number of times), so that no save is ever replaced by
/// a projection of an older text.
fn project_entries(
    daemon: &Daemon,
    ws: &Workspace,
    task: &str,
    entries: &[LedgerEntry],
    cause: &str,
) -> RpcResult<Projected> {
    let now = clock::now_rfc3339();
    for _ in 0..ATTEMPTS {
        let (file, parsed) = match read_as_spec(ws, task) {
            Ok(found) => found,
            Err(Unread::Missing) => return Ok(deferred_missing(ws, task, entries)),
            Err(Unread::Broken(why)) => return Ok(deferred(ws, task, why, Unprojected::Broken)),
        };
        let next = as_status(daemon, ws, task, &parsed.spec, entries, &file.text, &now);
        let next = ledger::for_file(next, entries);
        let rendered = match render(ws, task, &file, &next) {
            Ok(Some(rendered)) => rendered,
            Ok(None) => return Ok(Projected::Current(file.path)),
            Err(e) => return Ok(deferred(ws, task, e, Unprojected::Broken)),
        };
        if let Some(in_place) = rendered.put(daemon, ws, task, &file, cause).map_err(write_error)? {
            in_place.sync().map_err(write_error)?;
            return Ok(Projected::Current(rendered.target));
        }
    }
    Ok(deferred(
        ws,
        task,
        format!("it was saved again each of the {ATTEMPTS} times it was written"),
        Unprojected::Unwritten,
    ))
}

/// Put the spec of a task its ledger just closed (`fail`, `cancel`) in the archive exactly as it
/// is, when it does not read as the task's spec (a hand edit left an error in it, so
/// [`record`] could not project onto it): abandoning a task never waits on mending the text
/// being abandoned, and that text is never rewritten. Its runner-owned lines still say what
/// they said (the deferred projection's note says so, and that `reconcile` writes them once the
/// file is fixed); this says where it went. `None`: there was nothing to move (the ledger's
/// status is not a finished one, or the file is already in the archive).
pub fn archive_as_written(daemon: &Daemon, ws: &Workspace, task: &str, cause: &str) -> RpcResult<Option<String>> {
    let entries = daemon.store().ledger(&ws.id, task).map_err(internal)?;
    let status = ledger::state(&entries).map_or(Status::Draft, |s| s.status);
    let file = spec_file(ws, task)?;
    if Folder::of(status) != Folder::Archive || specfile::folder_of(&ws.root, &file.path) == Some(Folder::Archive) {
        return Ok(None);
    }
    let now = clock::now_rfc3339();
    let target = specfile::target_path(&ws.root, task, status, clock::month_of(&now).unwrap_or("unknown"));
    let rendered = Rendered { from: file.path.clone(), target, text: file.text.clone() };
    match rendered.put(daemon, ws, task, &file, cause).map_err(write_error)? {
        Some(in_place) => in_place.sync().map_err(write_error)?,
        None => {
            return Err(RpcError::new(ErrorKind::Busy, format!("{} was saved while it was archived", task)).with_hint(
                format!("the task is {status} in its ledger: run `scafld reconcile {task}` to archive it"),
            ));
        }
    }
    Ok(Some(format!("it was archived as written, to {}", ws.relative(&rendered.target))))
}

/// The spec as the ledger says it is (what build decisions are made from).
pub fn projected_spec(daemon: &Daemon, ws: &Workspace, task: &str) -> RpcResult<(Spec, Arc<[LedgerEntry]>)> {
    let entry =
        ws.loaded(task).ok_or_else(|| RpcError::new(ErrorKind::NotFound, format!("no spec for task `{task}`")))?;
    let entries = daemon.store().ledger(&ws.id, task).map_err(internal)?;
    let shadowed = crate::templates::shadows(&ws.root, task);
    Ok((ledger::project(&entry.parsed.spec, &entries, &clock::now_rfc3339(), shadowed), entries))
}

/// [`projected_spec`] for work under way: `base`, the spec it started from, stands in for a
/// spec file that no longer reads as the task's spec (a hand edit that empties or breaks it
/// never decides what the work concludes).
pub fn projected_spec_or(daemon: &Daemon, ws: &Workspace, task: &str, base: &Spec) -> RpcResult<Spec> {
    let entry = ws.loaded(task);
    let entries = daemon.store().ledger(&ws.id, task).map_err(internal)?;
    let spec = match &entry {
        Some(entry) if entry.read_error.is_none() && entry.parsed.structural_errors().next().is_none() => {
            &entry.parsed.spec
        }
        _ => base,
    };
    Ok(ledger::project(spec, &entries, &clock::now_rfc3339(), crate::templates::shadows(&ws.root, task)))
}

/// The task's spec file as read for a write: where it is, its text, and which file that was
/// (a write replaces that file only: `specfile::Staged::put_in_place_over`).
pub struct SpecText {
    pub path: PathBuf,
    pub text: String,
    pub id: FileId,
}

/// The task's spec file and its bytes as they are on disk (writes start from these, not from
/// the index).
pub fn spec_file(ws: &Workspace, task: &str) -> RpcResult<SpecText> {
    // Loaded on demand: a workspace just opened (followed to where it moved, say) may not
    // have indexed the whole of its specs folder yet.
    let indexed = || {
        ws.indexed(task)
            .map(|e| e.path)
            .ok_or_else(|| RpcError::new(ErrorKind::NotFound, format!("no spec for task `{task}`")))
    };
    let mut path = indexed()?;
    // Seen before the read: a file put there after it is told apart when the write comes.
    let mut id = FileId::at(&path);
    // Moved since the index last looked (a criterion's `mv`, a rename the watcher has not
    // delivered yet): the task's files are looked for again and the one found is read, rather
    // than the write deferred for a file that reads where it is now.
    if id.as_ref().is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
        crate::sync::write(&ws.index).sync_task(task);
        path = indexed()?;
        id = FileId::at(&path);
    }
    let unreadable = |e: String| RpcError::new(ErrorKind::WorkspaceError, format!("{}: {e}", ws.relative(&path)));
    let id = id.map_err(|e| unreadable(format!("cannot read the spec: {e}")))?;
    let bytes = crate::workspace::index::read_spec(&ws.root, &path).map_err(unreadable)?;
    let text = String::from_utf8(bytes)
        .map_err(|e| unreadable(crate::domain::spec::not_utf8(e.as_bytes(), &e.utf8_error()).message))?;
    Ok(SpecText { path, text, id })
}

/// Why the task's spec file could not be read as its spec.
enum Unread {
    /// No file of the task is in `.scafld/specs` (the index is caught up with the disk first).
    Missing,
    /// A sentence naming the file and what is wrong with it.
    Broken(String),
}

/// The task's spec file read and parsed as its spec ([`crate::domain::spec::parse_as`]), or
/// why it does not read so.
fn read_as_spec(ws: &Workspace, task: &str) -> Result<(SpecText, Parsed), Unread> {
    let file = spec_file(ws, task).map_err(|e| {
        // Gone from every folder (not merely unreadable): the index drops it as it looks.
        crate::sync::write(&ws.index).sync_task(task);
        match crate::sync::read(&ws.index).get(task) {
            None => Unread::Missing,
            Some(_) => Unread::Broken(e.to_string()),
        }
    })?;
    match parse_as(&file.text, task) {
        Ok(parsed) => Ok((file, parsed)),
        Err(first) => Err(Unread::Broken(format!("{}: {first}", ws.relative(&file.path)))),
    }
}

/// Where the spec belongs for its status (archive month from `updated`). A finished task's
/// file already in the archive (`current`, in any folder of it) stays there: rewriting its runner-owned lines
/// (a `reconcile`) does not archive it again under this month.
pub fn target_for(ws: &Workspace, task: &str, spec: &Spec, current: &std::path::Path) -> std::path::PathBuf {
    let status = spec.status().unwrap_or(Status::Draft);
    let archived = |folder| folder == Some(Folder::Archive);
    if archived(Some(Folder::of(status)))
        && archived(specfile::folder_of(&ws.root, current))
        && current.file_stem().is_some_and(|stem| stem == task)
    {
        return current.to_path_buf();
    }
    let now = crate::clock::now_rfc3339();
    let month = crate::clock::month_of(&spec.front.updated)
        .or_else(|| crate::clock::month_of(&now))
        .unwrap_or("unknown")
        .to_string();
    specfile::target_path(&ws.root, task, status, &month)
}

/// Project `next` into `file` (the task's spec as read) and write it where its status belongs,
/// over that very file; nothing is written when neither the bytes nor the place change. A
/// save that replaced the file since it was read is left alone and the call is refused
/// (`busy`): its model came from the older text, so it is the caller's to run again.
pub fn write_projection(
    daemon: &Daemon,
    ws: &Workspace,
    task: &str,
    file: &SpecText,
    next: &Spec,
    cause: &str,
) -> RpcResult<std::path::PathBuf> {
    let Some(rendered) = render(ws, task, file, next)? else {
        return Ok(file.path.clone());
    };
    match rendered.put(daemon, ws, task, file, cause).map_err(write_error)? {
        Some(in_place) => in_place.sync().map_err(write_error)?,
        None => {
            return Err(RpcError::new(
                ErrorKind::Busy,
                format!("{} was saved while scafld was writing it; nothing was written", ws.relative(&file.path)),
            )
            .with_hint("run the command again"));
        }
    }
    Ok(rendered.target)
}

/// A projection that changes the spec: where it belongs now and its new bytes.
struct Rendered {
    /// Where the spec was.
    from: PathBuf,
    target: PathBuf,
    text: String,
}

/// `next` projected into `file`; `None` when neither the bytes nor the place change. The place
/// is the task's own (its file name is the task id), whatever the model's front matter says.
fn render(ws: &Workspace, task: &str, file: &SpecText, next: &Spec) -> RpcResult<Option<Rendered>> {
    let new_text = project(&file.text, next).map_err(|e| RpcError::new(ErrorKind::ValidationFailed, e.to_string()))?;
    // Never a file the daemon could not read back (approval leaves room; this is the backstop
    // for a spec grown by hand since).
    if new_text.len() as u64 > MAX_SPEC_BYTES {
        return Err(RpcError::new(
            ErrorKind::ValidationFailed,
            format!(
                "it would grow to {}, past the {} a spec may have",
                size(new_text.len() as u64),
                size(MAX_SPEC_BYTES)
            ),
        )
        .with_hint("shorten the spec's own text (or split the task), then run the command again"));
    }
    let target = target_for(ws, task, next, &file.path);
    let changed = target != file.path || !(new_text == file.text || only_updated_differs(&file.text, &new_text));
    Ok(changed.then(|| Rendered { from: file.path.clone(), target, text: new_text }))
}

/// Whether `new` is `old` with nothing but the front matter's `updated:` line changed: such a
/// projection says nothing new, and the file is left as it is (the projected spec may differ
/// from the parsed one in what is never written, so `ledger::project` cannot always tell).
fn only_updated_differs(old: &str, new: &str) -> bool {
    if old.len().abs_diff(new.len()) > 64 {
        return false;
    }
    let (mut old_lines, mut new_lines) = (old.split('\n'), new.split('\n'));
    let mut fences = 0;
    loop {
        match (old_lines.next(), new_lines.next()) {
            (None, None) => return true,
            (Some(a), Some(b)) if a == b => fences += usize::from(a == "---"),
            (Some(a), Some(b)) if fences == 1 && a.starts_with("updated:") && b.starts_with("updated:") => {}
            _ => return false,
        }
    }
}

impl Rendered {
    /// Stage the new bytes and put them in place over `file` (the file they were computed
    /// from), then tell the index and subscribers. `None`: a save replaced that file
    /// meanwhile, and nothing was written.
    fn put(
        &self,
        daemon: &Daemon,
        ws: &Workspace,
        task: &str,
        file: &SpecText,
        cause: &str,
    ) -> std::io::Result<Option<InPlace>> {
        let staged = specfile::stage_spec(Some(&self.from), &self.target, &self.text)?;
        let written = staged.written().clone();
        let put = {
            let _moving = daemon.spec_moves.moving();
            staged.put_in_place_over(file.id, file.text.as_bytes())?
        };
        match put {
            Put::Placed(in_place) => {
                self.announce(daemon, ws, task, cause, None, &written);
                Ok(Some(in_place))
            }
            Put::Changed => Ok(None),
        }
    }

    /// The written spec, told to the index (`parsed`: its text, parsed already; `written`: the
    /// file's metadata as written) and to subscribers.
    fn announce(
        &self,
        daemon: &Daemon,
        ws: &Workspace,
        task: &str,
        cause: &str,
        parsed: Option<Parsed>,
        written: &std::fs::Metadata,
    ) {
        let parsed = parsed.unwrap_or_else(|| parse(&self.text));
        crate::sync::write(&ws.index).record_parsed(&self.target, parsed, Some(&self.from), written);
        daemon.publish_task_changed(ws, task, cause);
    }
}

pub fn write_error(e: std::io::Error) -> RpcError {
    let kind = if e.kind() == std::io::ErrorKind::AlreadyExists {
        ErrorKind::AlreadyExists
    } else {
        ErrorKind::WorkspaceError
    };
    let remedy = crate::workspace::layout::not_real(&e).filter(|u| !u.is_shared_scafld()).map(|u| u.remedy());
    let error = RpcError::new(kind, format!("cannot write the spec: {e}"));
    match remedy {
        // `details.remedy`: what a deferred projection's note says to do first.
        Some(remedy) => error
            .with_hint(format!("{remedy}, then run the command again"))
            .with_details(serde_json::json!({ "remedy": remedy })),
        None => error,
    }
}

/// The host agent that last built the task (recorded again only when it changes).
pub fn implementer(entries: &[crate::domain::ledger::LedgerEntry]) -> Option<String> {
    implementers(entries).next_back().map(str::to_string)
}

/// Every host agent that built the task, in the order they were recorded (one may appear more
/// than once): a reviewer must differ from each, since each wrote some of the work.
pub fn implementers(entries: &[crate::domain::ledger::LedgerEntry]) -> impl DoubleEndedIterator<Item = &str> {
    entries.iter().filter_map(|e| match &e.event {
        LedgerEvent::Implementer { host_agent, .. } => Some(host_agent.as_str()),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_projection_that_moves_only_updated_changes_nothing() {
        let old = "---\ntask_id: t\nupdated: '2026-11-27T05:30:07Z'\nstatus: active\n---\n\n# T\nupdated: body\n";
        let new = old.replace("05:30:07", "05:30:08");
        assert!(super::only_updated_differs(old, &new));
        assert!(!super::only_updated_differs(old, &new.replace("status: active", "status: review")));
        assert!(!super::only_updated_differs(old, &old.replace("updated: body", "updated: other")));
        assert!(!super::only_updated_differs(old, &format!("{new}more\n")));
    }

    /// A workspace just opened has not indexed its specs yet (that runs in the background):
    /// the spec a job's end writes to is found all the same (a build's workspace followed to
    /// where its folder moved is opened right then, and its result was left unprojected).
    #[test]
    fn a_workspace_not_indexed_yet_finds_the_spec_it_writes() {
        let dir = tempfile::tempdir().unwrap();
        let active = dir.path().join(".scafld/specs/active");
        std::fs::create_dir_all(&active).unwrap();
        std::fs::write(active.join("t.md"), "---\ntask_id: t\nstatus: active\n---\n\n# T\n").unwrap();
        let range = crate::workspace::RangeHome { id: "r".into(), data: dir.path().join("range") };
        let ws = crate::workspace::Workspace::open("w".into(), dir.path().to_path_buf(), range, None);
        let file = super::spec_file(&ws, "t").expect("the spec is found before the warm-up");
        assert!(file.path.ends_with(".scafld/specs/active/t.md"), "{}", file.path.display());
        assert!(ws.loaded("t").is_some());
    }
}
