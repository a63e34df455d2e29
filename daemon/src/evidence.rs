//! Evidence freshness for a task: the material of its scope now (git2 and hashing, off the
//! runtime's threads), which recorded results are stale against it, what changed, and the next
//! action with all of that known. Build, status, handoff, review and complete ask here.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::{self, BoxFuture, FutureExt, Shared};
use scafld_protocol::ErrorKind;

use crate::baseline::{self, GitFailure, Material};
use crate::daemon::Daemon;
use crate::domain::evidence::{self, Stale};
use crate::domain::ledger::{self, LedgerEntry};
use crate::domain::next::{Facts, Misfiled, NextAction, next_action};
use crate::domain::review;
use crate::domain::spec::Spec;
use crate::error::{RpcError, RpcResult};
use crate::workspace::Workspace;

/// What the task's evidence says about the files as they are now.
pub(crate) struct Freshness {
    /// The material of the task's scope now; `Err` says why it could not be read.
    pub material: Result<Material, GitFailure>,
    pub stale: BTreeMap<String, Stale>,
    /// Files (or scope paths) that differ from the material the stale evidence judged.
    pub changes: Vec<String>,
}

/// The scope evidence is bound to: the paths the spec declares (never an explicit review scope,
/// which only narrows what a reviewer reads).
pub(crate) fn evidence_scope(ws: &Workspace, spec: &Spec) -> Vec<String> {
    with_present_bare_names(ws, spec, review::bound_scope(spec, &ws.root.to_string_lossy()), |_| true)
}

/// The scope a review reads: `requested` (`--review-scope`) as given, else the task's declared
/// scope with the bare names its evidence binds ([`evidence_scope`]), so a file the evidence
/// is bound to (a `link` the task added) is a task change, never ambient drift; the files
/// kept from reviewers for their secrets stay out, as [`review::scope`] leaves them.
pub(crate) fn review_scope(ws: &Workspace, spec: &Spec, requested: &[String]) -> Vec<String> {
    let scope = review::scope(spec, requested, &ws.root.to_string_lossy());
    if !requested.is_empty() {
        return scope;
    }
    with_present_bare_names(ws, spec, scope, |name| !review::secret(name))
}

/// `scope` with each bare name (`Makefile`) that `keep` accepts and that names a file or
/// folder there now; an empty scope is the whole tree already.
fn with_present_bare_names(
    ws: &Workspace,
    spec: &Spec,
    mut scope: Vec<String>,
    keep: impl Fn(&str) -> bool,
) -> Vec<String> {
    if !scope.is_empty() {
        let present = review::bare_names(spec)
            .into_iter()
            .filter(|name| keep(name) && ws.root.join(name).symlink_metadata().is_ok());
        scope.extend(present);
        scope.sort();
        scope.dedup();
    }
    scope
}

/// What is worth saying about one scope entry, read against the workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScopeProblem {
    /// Outside the workspace: nothing there is ever read, so nothing can be bound to it.
    Outside,
    /// Nothing at that name, but a path that differs from it only in case: a typo.
    CaseTypo,
    /// Nothing at that name (yet).
    Missing,
    /// A pattern: its folder stands for it.
    Pattern,
    /// A `path:line`: the whole file stands for it.
    LineRemoved,
    /// An absolute path inside the workspace, taken relative to it.
    MadeRelative,
    /// The workspace itself (`.`, `./`, its own absolute path): every file in it.
    Whole,
    /// A symlink on its way (the entry itself, or a folder above it) leads outside the
    /// workspace: only the link's text is ever read, so nothing is bound to what it reaches.
    LeadsOutside,
    /// git's own store (`.git`, `.git/config`): never part of a scope, so nothing is bound to it.
    GitStore,
}

impl ScopeProblem {
    /// Whether approval refuses an entry with this problem (elsewhere it is a warning): no
    /// evidence could be bound to what the entry means.
    pub(crate) fn refused_at_approval(self) -> bool {
        matches!(
            self,
            ScopeProblem::Outside | ScopeProblem::LeadsOutside | ScopeProblem::CaseTypo | ScopeProblem::GitStore
        )
    }
}

/// One scope entry's note: the entry as written, its problem, and the sentence for a person.
#[derive(Debug, Clone)]
pub(crate) struct ScopeNote {
    pub written: String,
    pub problem: ScopeProblem,
    pub message: String,
}

/// What a person should know about the task's scope entries: one that names a pattern, a line,
/// or nothing in the workspace (yet) is a warning; one outside the workspace (nothing outside
/// is ever read, so no evidence could be bound to it), naming git's own store (never part of a
/// scope, so nothing is bound to it either) or differing only in case from a path there (a
/// typo: the evidence would be bound to the wrong name) is an error, which approval refuses.
/// `(is_error, line, message)`, the line the entry is declared on (1-based).
pub(crate) async fn scope_notes(ws: &Workspace, spec: &Spec) -> Vec<(bool, usize, String)> {
    let root = ws.root.to_string_lossy();
    let entries = review::scope_entries(spec, &[], &root);
    let git_store = review::git_store_entries(spec, &root).into_iter().map(|e| ScopeNote {
        message: format!(
            "scope entry `{}` names git's own store (`.git`), which is never a task's file: scafld binds no evidence to it; name the task's files instead",
            e.written
        ),
        written: e.written,
        problem: ScopeProblem::GitStore,
    });
    git_store
        .chain(entry_notes(ws, entries, review::bare_names(spec)).await)
        .map(|note| (note.problem.refused_at_approval(), review::declared_line(spec, &note.written), note.message))
        .collect()
}

/// The scope `finalize --scope-hint` names, read as the spec's Scope is (a glob as its folder,
/// `:line` dropped, an absolute path inside the workspace made relative): refused when an entry
/// is outside the workspace or a case typo, since a receipt would sign nothing for it. Returns
/// the entries (each must still hold a file once the tree is read), and apart from them those
/// that name nothing in the workspace now: finalize signs one of those only where it held a
/// file at the base (a file the task deleted), and refuses it otherwise.
pub(crate) async fn hinted_scope(
    ws: &Workspace,
    spec: &Spec,
    hints: &[String],
) -> RpcResult<(Vec<review::ScopeEntry>, Vec<review::ScopeEntry>)> {
    let entries = review::scope_entries(spec, hints, &ws.root.to_string_lossy());
    if let Some(message) = dropped_entry("--scope-hint", hints, &entries) {
        return Err(RpcError::new(ErrorKind::InvalidInput, message)
            .with_hint("name the task's files inside the workspace, or drop --scope-hint to sign the spec's Scope"));
    }
    let notes = entry_notes(ws, entries.clone(), Vec::new()).await;
    if let Some(note) = notes.iter().find(|n| n.problem.refused_at_approval()) {
        return Err(RpcError::new(ErrorKind::InvalidInput, format!("--scope-hint: {}", note.message)).with_hint(
            "name the task's files inside the workspace as they are written, or drop --scope-hint to sign the spec's Scope",
        ));
    }
    let gone =
        |e: &review::ScopeEntry| notes.iter().any(|n| n.problem == ScopeProblem::Missing && n.written == e.written);
    let missing = entries.iter().filter(|e| gone(e)).cloned().collect();
    Ok((entries, missing))
}

/// Refuse a `review --review-scope` that could not mean files of this workspace: an entry
/// that is empty, kept from reviewers for its secrets, outside the workspace, a case typo, or
/// naming nothing there. (What it names bounds what the reviewer is shown; the mutation guard
/// watches the task's own scope as well, `review::guard_scope`.)
pub(crate) async fn require_review_scope(ws: &Workspace, spec: &Spec, explicit: &[String]) -> RpcResult<()> {
    let refuse = |message: String| {
        RpcError::new(ErrorKind::InvalidInput, message).with_hint(
            "name files or folders inside the workspace, as they are written, or drop --review-scope to review the spec's Scope",
        )
    };
    let entries = review::scope_entries(spec, explicit, &ws.root.to_string_lossy());
    if let Some(message) = dropped_entry("--review-scope", explicit, &entries) {
        return Err(refuse(message));
    }
    let notes = entry_notes(ws, entries, Vec::new()).await;
    let Some(note) = notes.iter().find(|n| n.problem.refused_at_approval() || n.problem == ScopeProblem::Missing)
    else {
        return Ok(());
    };
    Err(refuse(match note.problem {
        ScopeProblem::Missing => format!("--review-scope `{}` matches nothing in the workspace", note.written),
        ScopeProblem::Outside => outside_entry("--review-scope", &note.written, ws),
        _ => format!("--review-scope: {}", note.message),
    }))
}

/// Refuse `review.context.files` (the project files a reviewer is shown beside the defaults)
/// naming what a review never shows, as `--review-scope` is refused: an entry outside the
/// workspace, git's own store or a file kept from reviewers for its secrets
/// ([`review::context_path`]), or one that a symlink on its way (the entry itself, or a folder
/// above it) takes outside. One that names nothing (yet) is left out of the packet.
pub(crate) async fn require_context_files(ws: &Workspace, files: &[String]) -> RpcResult<()> {
    const KEY: &str = "review.context.files";
    let refuse = |message: String| {
        RpcError::new(ErrorKind::InvalidInput, message).with_hint(
            "name project files inside the workspace in review.context.files (.scafld/config.yaml, or .scafld/config.local.yaml), or drop the entry",
        )
    };
    let mut paths = Vec::new();
    for written in files {
        match review::context_path(written) {
            Ok(path) => paths.push((written.clone(), path)),
            Err(review::Unshareable::Outside) => return Err(refuse(outside_entry(KEY, written, ws))),
            Err(review::Unshareable::Kept) => return Err(refuse(kept_entry(KEY, written))),
        }
    }
    let root = ws.root.clone();
    let leading = tokio::task::spawn_blocking(move || {
        paths.into_iter().find_map(|(written, path)| Some((written, baseline::leads_outside(&root, &path)?)))
    });
    match leading.await {
        Ok(Some((written, reached))) => Err(refuse(format!("{KEY}: {}", through_link(&written, &reached)))),
        Ok(None) => Ok(()),
        // Unchecked is not checked: the config is not taken as safe.
        Err(e) => Err(RpcError::internal(format!("cannot check {KEY} for symlinks: {e}"))),
    }
}

/// That the entry `written` (given with `flag`) is outside the workspace, which a review never reads.
fn outside_entry(flag: &str, written: &str, ws: &Workspace) -> String {
    format!(
        "{flag} `{written}` is outside the workspace ({}): a review only ever reads files inside it",
        ws.root.display()
    )
}

/// That the entry `written` (given with `flag`) names git's own store or a file kept from
/// reviewers for its secrets.
fn kept_entry(flag: &str, written: &str) -> String {
    let path = written.trim().trim_start_matches("./");
    if review::git_store(path) {
        format!("{flag} `{written}` names git's own store (`.git`), which is never a task's file")
    } else {
        format!("{flag} `{written}` names a file kept from reviewers for its secrets")
    }
}

/// That the entry `written` leads through a symlink outside the workspace, to `reached`.
fn through_link(written: &str, reached: &std::path::Path) -> String {
    format!(
        "`{written}` leads through a symlink outside the workspace (to {}): scafld never reads there",
        reached.display()
    )
}

/// Why an entry of `explicit` (given with `flag`) is none of the scope `entries` read from it:
/// a blank one names nothing, and git's own `.git` or a file kept from reviewers for its
/// secrets is never a scope entry. `None` when each of them is one.
fn dropped_entry(flag: &str, explicit: &[String], entries: &[review::ScopeEntry]) -> Option<String> {
    let dropped = explicit.iter().find(|w| !entries.iter().any(|e| &e.written == *w))?;
    Some(if dropped.trim().is_empty() {
        format!("{flag} has an empty entry, which names nothing")
    } else {
        kept_entry(flag, dropped)
    })
}

/// The notes of `entries` and of the spec's `bare` names (a bare name binds only a file of
/// exactly that name, so only its case typos are worth a note), read against the workspace.
async fn entry_notes(ws: &Workspace, entries: Vec<review::ScopeEntry>, bare: Vec<String>) -> Vec<ScopeNote> {
    let root = ws.root.clone();
    let missing = tokio::task::spawn_blocking(move || {
        let typos: Vec<(String, String)> = bare
            .into_iter()
            .filter_map(|name| match baseline::missing_path(&root, &name) {
                Some(Some(like)) => Some((name, like)),
                _ => None,
            })
            .collect();
        let entries = entries
            .into_iter()
            .map(|e| (baseline::missing_path(&root, &e.path), baseline::leads_outside(&root, &e.path), e))
            .collect::<Vec<_>>();
        (entries, typos)
    });
    let Ok((entries, typos)) = missing.await else { return Vec::new() };
    let note = |written: &str, problem, message: String| ScopeNote { written: written.to_string(), problem, message };
    let typo = |written: &str, like: &str| {
        note(
            written,
            ScopeProblem::CaseTypo,
            format!(
                "scope entry `{written}` matches nothing in the workspace; `{like}` differs only in case: name it as it is written"
            ),
        )
    };
    let mut notes: Vec<ScopeNote> = typos.iter().map(|(name, like)| typo(name, like)).collect();
    for (missing, leads, e) in entries {
        let (written, path) = (e.written.as_str(), &e.path);
        if let Some(reached) = leads {
            notes.push(note(
                written,
                ScopeProblem::LeadsOutside,
                format!(
                    "scope entry {}, so no evidence can be bound to what it reaches; name the files inside the workspace",
                    through_link(written, &reached)
                ),
            ));
        }
        match e.reading {
            review::Reading::Outside => notes.push(note(
                written,
                ScopeProblem::Outside,
                format!(
                    "scope entry `{written}` is outside the workspace ({}): scafld never reads it, so no evidence can be bound to it; name the files inside the workspace",
                    ws.root.display()
                ),
            )),
            review::Reading::Path | review::Reading::MadeRelative if path.is_empty() => notes.push(note(
                written,
                ScopeProblem::Whole,
                format!("scope entry `{written}` is the workspace itself: scafld binds evidence and review to every file in it"),
            )),
            review::Reading::Pattern if path.is_empty() => notes.push(note(
                written,
                ScopeProblem::Pattern,
                format!("scope entry `{written}` is a pattern: scafld binds evidence and review to the whole workspace"),
            )),
            review::Reading::Pattern => notes.push(note(
                written,
                ScopeProblem::Pattern,
                format!(
                    "scope entry `{written}` is a pattern: scafld binds evidence and review to everything in `{path}`; name the files to narrow it"
                ),
            )),
            review::Reading::LineRemoved => notes.push(note(
                written,
                ScopeProblem::LineRemoved,
                format!("scope entry `{written}` names a line: scafld takes the whole file `{path}`"),
            )),
            review::Reading::MadeRelative => notes.push(note(
                written,
                ScopeProblem::MadeRelative,
                format!("scope entry `{written}` is an absolute path: scafld takes it as `{path}` in this workspace"),
            )),
            review::Reading::Path => {}
        }
        match missing {
            // A name that differs only in case from what is there is a typo, not a new file.
            Some(Some(like)) => notes.push(typo(written, &like)),
            Some(None) => notes.push(note(
                written,
                ScopeProblem::Missing,
                format!(
                    "scope entry `{written}` matches nothing in the workspace (yet): evidence is bound to its absence, and its content counts once it exists"
                ),
            )),
            None => {}
        }
    }
    notes
}

pub(crate) async fn material_now(ws: &Workspace, spec: &Spec) -> Result<Material, GitFailure> {
    read_material(ws, spec).await
}

/// The material of `spec`'s scope, read on a blocking thread that starts now (not when the
/// future is first polled).
fn read_material(ws: &Workspace, spec: &Spec) -> impl Future<Output = Result<Material, GitFailure>> + Send + 'static {
    let (root, scope) = (ws.root.clone(), evidence_scope(ws, spec));
    let read = tokio::task::spawn_blocking(move || baseline::material(&root, &scope));
    async move { read.await.map_err(|e| GitFailure::Unreadable(format!("cannot read the workspace: {e}")))? }
}

/// A build step's material, possibly still being read: the step starts its first command's
/// shell meanwhile and holds the command until the read is done (its run's gate), so every
/// command still runs on the files the material describes.
#[derive(Clone)]
pub(crate) struct StepMaterial(Shared<BoxFuture<'static, Result<Arc<Material>, GitFailure>>>);

impl StepMaterial {
    pub(crate) fn ready(material: Material) -> StepMaterial {
        StepMaterial(future::ready(Ok(Arc::new(material))).boxed().shared())
    }

    /// Start reading the material of `spec`'s scope.
    pub(crate) fn read(ws: &Workspace, spec: &Spec) -> StepMaterial {
        StepMaterial(read_material(ws, spec).map(|read| read.map(Arc::new)).boxed().shared())
    }

    /// The material, once read.
    pub(crate) async fn get(&self) -> RpcResult<Arc<Material>> {
        self.0.clone().await.map_err(RpcError::from)
    }
}

/// Freshness of every recorded result of `spec` (projected from `entries`).
pub(crate) async fn freshness(ws: &Workspace, spec: &Spec, entries: &[LedgerEntry]) -> Freshness {
    let recorded = spec.criteria().any(|c| evidence::latest_result(entries, &c.id).is_some());
    if !recorded {
        // Nothing recorded yet (a draft, a new task): there is nothing to compare.
        return Freshness {
            material: Err(GitFailure::Unreadable("no evidence recorded".into())),
            stale: BTreeMap::new(),
            changes: Vec::new(),
        };
    }
    judged(spec, entries, material_now(ws, spec).await)
}

/// The freshness of `spec`'s recorded results where the spec file gives nothing to judge them
/// against (`why`: it is missing, or does not read, and `spec` is the ledger's sketch, with no
/// scope): every recorded result is marked so, no file is read and none is named as changed
/// (reading the sketch's empty scope would take the whole tree for it).
pub(crate) fn unjudged(spec: &Spec, entries: &[LedgerEntry], why: Stale) -> Freshness {
    let stale = spec
        .criteria()
        .filter(|c| evidence::latest_result(entries, &c.id).is_some())
        .map(|c| (c.id.clone(), why.clone()))
        .collect();
    Freshness { material: Err(why.describe().into()), stale, changes: Vec::new() }
}

/// The freshness of `spec`'s recorded results against `material`, the material of its scope
/// in some checkout: which are stale, and what changed since they ran.
fn judged(spec: &Spec, entries: &[LedgerEntry], material: Result<Material, GitFailure>) -> Freshness {
    let mut stale = evidence::stale(spec, entries, material.as_ref().ok().map(|m| m.digest.as_str()));
    // A name that is not UTF-8 is the user's to put right, not the repository's trouble.
    if let Some(name) = material.as_ref().err().and_then(GitFailure::shown_name) {
        for why in stale.values_mut().filter(|why| **why == Stale::Unverifiable) {
            *why = Stale::UnreadableName { name: name.clone() };
        }
    }
    let mut changes = Vec::new();
    match &material {
        Ok(now) => {
            let mut seen = std::collections::BTreeSet::new();
            for why in stale.values() {
                if let Stale::RewrittenWhileRunning { changed } = why {
                    changes.extend(changed.iter().cloned());
                }
                if let Stale::MaterialChanged { recorded }
                | Stale::ChangedByOwnRuns { recorded, .. }
                | Stale::RewritesOwnScope { recorded, .. } = why
                    && seen.insert(recorded.clone())
                {
                    match evidence::recorded_material(entries, recorded) {
                        Some(before) => changes.extend(baseline::material_changes(before, &now.entries)),
                        None => changes.push("files in scope (the earlier content was not recorded)".into()),
                    }
                }
            }
            changes.sort();
            changes.dedup();
        }
        Err(e) if !stale.is_empty() => changes.push(e.to_string()),
        Err(_) => {}
    }
    Freshness { material, stale, changes }
}

/// The approval baseline's commit, when the repository no longer has it (history rewritten and
/// pruned): nothing since approval can be diffed until `approve --amend` records a new one.
pub(crate) async fn lost_baseline(ws: &Workspace, entries: &[LedgerEntry]) -> Option<String> {
    let head = ledger::approval_baseline(entries)?.head?;
    let (root, probe) = (ws.root.clone(), head.clone());
    let gone = baseline::off_runtime(move || Ok::<_, String>(baseline::commit_gone(&root, &probe))).await;
    gone.ok().and_then(Result::ok).unwrap_or(false).then_some(head)
}

/// The approval baseline's nested repositories whose changes since approval cannot be read
/// (`baseline::lost_nested`): `review` refuses until `approve --amend` records them again.
pub(crate) async fn lost_nested(ws: &Workspace, entries: &[LedgerEntry]) -> Vec<baseline::LostNested> {
    let Some(base) = ledger::approval_baseline(entries) else { return Vec::new() };
    let root = ws.root.clone();
    let lost = baseline::off_runtime(move || baseline::lost_nested(&root, &base.paths, &base.nested)).await;
    lost.ok().and_then(Result::ok).unwrap_or_default()
}

/// What the files tell of `task`'s current review (`domain::next::Seen`), the one source of it
/// for every surface that says what comes next: `status`, `handoff`, a refusal's hint, and the
/// spec's own `Next:`/`Allowed follow-up command:` lines that each projection writes. Read
/// only where a review is current: the fingerprint of the spec's authored text (of `text`, the
/// spec a projection is writing, else the file on disk), which that review recorded of the spec
/// it judged; and, for a passing review shown files by `--review-scope`, whether they changed
/// since (one that cannot be read counts as changed, as `complete` takes it).
///
/// It also keeps the files such a review judged watched while the task is in review (the
/// evidence scope of `spec`, and what a passing review was shown: [`judged_paths`]), so that
/// the daemon's watch loop writes the spec's next step again when one changes
/// (`Daemon::reshow_next`); once no review is current, or the task left review, they are not.
/// Every surface reads it, so a daemon started again watches them from the first read.
pub(crate) fn seen_now(
    ws: &Workspace,
    task: &str,
    spec: &Spec,
    entries: &[LedgerEntry],
    text: Option<&str>,
) -> SeenNow {
    let replay = ledger::replay(entries);
    if replay.review.is_none() || !replay.review_current {
        ws.forget_judged(task);
        return SeenNow::default();
    }
    match replay.status == Some(crate::domain::lifecycle::Status::Review) {
        true => ws.watch_judged(task, &judged_paths(ws, spec, entries)),
        false => ws.forget_judged(task),
    }
    let spec_digest = Some(match text {
        Some(text) => crate::domain::review::spec_guard_fingerprint(text),
        None => crate::review::gate::spec_fingerprint(&ws.root, &ws.spec_path(task)),
    });
    // Reading the shown files walks them: never on a runtime worker's turn.
    let shown_changed = ledger::shown_by_passing_review(entries).is_some_and(|(shown, then)| {
        blocking(|| baseline::material(&ws.root, shown)).ok().map(|m| m.digest).as_deref() != Some(then)
    });
    SeenNow { spec_digest, shown_changed, stale: None }
}

/// [`seen_now`] for a projection, which reads no other file: with the evidence staled by the
/// files where a review of the task in review is current (what that review judged changed
/// since: `status` names the build that re-runs it, and so does the spec's line). Elsewhere the
/// files are for `status` to see, and the projection knows only what the ledger says.
pub(crate) fn seen_for_projection(
    ws: &Workspace,
    task: &str,
    spec: &Spec,
    entries: &[LedgerEntry],
    text: Option<&str>,
) -> SeenNow {
    let mut seen = seen_now(ws, task, spec, entries, text);
    let replay = ledger::replay(entries);
    if replay.review.is_some()
        && replay.review_current
        && replay.status == Some(crate::domain::lifecycle::Status::Review)
    {
        let scope = evidence_scope(ws, spec);
        let material = blocking(|| baseline::material(&ws.root, &scope));
        seen.stale = Some(evidence::stale(spec, entries, material.ok().as_ref().map(|m| m.digest.as_str())));
    }
    seen
}

/// What a current review of `spec`'s task judged, workspace-relative, for the watch loop to
/// watch ([`seen_now`]): the evidence scope (a change there stales the evidence) and the files
/// a passing review was shown (a change there makes `complete` refuse it). None: the whole tree.
fn judged_paths(ws: &Workspace, spec: &Spec, entries: &[LedgerEntry]) -> Vec<String> {
    let mut paths = evidence_scope(ws, spec);
    let shown = ledger::shown_by_passing_review(entries).map(|(shown, _)| shown);
    // An empty list is the whole tree, which holds everything else.
    if paths.is_empty() || shown.is_some_and(<[String]>::is_empty) {
        return Vec::new();
    }
    paths.extend(shown.into_iter().flatten().cloned());
    paths.sort();
    paths.dedup();
    paths
}

/// The files the latest passing review was shown (its guard's scope: the task's and its
/// `--review-scope`), when they changed since it passed: `complete` refuses until a review
/// sees them as they are, so the next review is shown them all (`tasks::review` adds them to
/// what it is asked for). `None` when it recorded none, watched the whole tree, or they are
/// as it saw them.
pub(crate) async fn changed_shown(ws: &Workspace, entries: &[LedgerEntry]) -> Option<Vec<String>> {
    let (shown, then) = ledger::shown_by_passing_review(entries)?;
    if shown.is_empty() {
        return None;
    }
    let now = crate::review::gate::shown_now(ws, entries).await;
    (now.as_deref() != Some(then)).then(|| shown.to_vec())
}

/// [`seen_now`]'s answer, owned.
#[derive(Debug, Default, Clone)]
pub(crate) struct SeenNow {
    pub spec_digest: Option<String>,
    pub shown_changed: bool,
    /// The evidence the files staled, where a projection asked for it ([`seen_for_projection`]).
    pub stale: Option<BTreeMap<String, Stale>>,
}

impl SeenNow {
    pub(crate) fn facts(&self) -> crate::domain::next::Seen<'_> {
        crate::domain::next::Seen {
            spec_digest: self.spec_digest.as_deref(),
            shown_changed: self.shown_changed,
            stale: self.stale.as_ref(),
        }
    }
}

/// `next` for a task whose review would read the changes since its approval baseline when
/// that baseline's commit is gone, or a nested repository's HEAD then ([`lost_nested`]):
/// recording a new one comes first (`review` refuses until then). Apart from the lifecycle's decision (`domain::next`), which does no IO.
pub(crate) async fn past_lost_baseline(
    ws: &Workspace,
    spec: &Spec,
    entries: &[LedgerEntry],
    next: NextAction,
) -> NextAction {
    if next.action != crate::domain::next::Action::Review {
        return next;
    }
    let reason = match lost_baseline(ws, entries).await {
        Some(gone) => format!(
            "the approval baseline's commit {gone} is gone from the repository (history rewritten and pruned): record a new baseline at HEAD, then review"
        ),
        None => match lost_nested(ws, entries).await.first() {
            // Not a new baseline: access to it again (`review` refuses meanwhile).
            Some(lost @ baseline::LostNested { loss: baseline::NestedLoss::Unreadable(_), .. }) => {
                let shown = scafld_protocol::cli::shell_word(&lost.folder);
                return NextAction {
                    role: crate::domain::next::Role::Human,
                    action: crate::domain::next::Action::Inspect,
                    command: format!("git -C {shown} status"),
                    reason: format!(
                        "{lost}: its changes since approval cannot be read; make it readable to git again (`git -C {shown} status` shows what git finds; for a permission problem, `chmod -R u+rwX {shown}/.git`) or remove it, then review"
                    ),
                };
            }
            Some(lost) => format!(
                "{lost}: its changes since approval cannot be read; record a new baseline (its files then read as new since approval), then review"
            ),
            None => return next,
        },
    };
    let task = spec.front.task_id.as_str();
    NextAction {
        role: crate::domain::next::Role::Human,
        action: crate::domain::next::Action::AmendContract,
        command: format!("scafld approve {task} --amend --reason \"why\""),
        reason,
    }
}

/// `next` for a task whose build job still runs (a detached `build`, or one another client
/// started): its evidence is being recorded, so what follows is waiting for it, not the step
/// the spec shows now; likewise for a delegated harden's round. Asked by `status` and `handoff`
/// only: a build's own answer is worked out while its job still counts as running.
pub(crate) fn while_building(daemon: &Daemon, ws: &Workspace, task: &str, next: NextAction) -> NextAction {
    match daemon.jobs.active_for(ws, task) {
        Some(job) if job.kind == scafld_protocol::vocab::JobKind::Harden => NextAction {
            role: crate::domain::next::Role::Agent,
            action: crate::domain::next::Action::Harden,
            command: format!("scafld job wait {}", job.id),
            reason: format!(
                "a harden of {task} is running (job {}): wait for its round, or stop it with `scafld job cancel {}`",
                job.id, job.id
            ),
        },
        Some(job) if job.kind == scafld_protocol::vocab::JobKind::Acceptance => NextAction {
            role: crate::domain::next::Role::Agent,
            action: crate::domain::next::Action::Implement,
            command: format!("scafld job wait {}", job.id),
            reason: format!(
                "a build of {task} is running (job {}): wait for it, or follow it with `scafld build {task}`",
                job.id
            ),
        },
        _ => next,
    }
}

/// A finalized task whose receipt file is missing or not the one its ledger anchors (a
/// finalize interrupted between its ledger append and the file, a file removed since):
/// `finalize` writes it again from the ledger. Nothing else decides this, so it stays apart
/// from the lifecycle's decision (`domain::next`).
fn unwritten_receipt(
    ws: &Workspace,
    spec: &Spec,
    replay: &ledger::Replay,
    entries: &[LedgerEntry],
) -> Option<NextAction> {
    if replay.status != Some(crate::domain::lifecycle::Status::Completed) {
        return None;
    }
    let task = spec.front.task_id.as_str();
    let path = crate::receipts::unwritten(&ws.root, task, entries)?;
    Some(NextAction {
        role: crate::domain::next::Role::Agent,
        action: crate::domain::next::Action::Repair,
        command: format!("scafld finalize {task}"),
        reason: format!(
            "the task is finalized, but its receipt {path} is missing or not the one its ledger anchors: finalize writes it again"
        ),
    })
}

/// What the spec file on disk says beside the ledger's projection of it, for the next action.
/// The default is a file without errors, as a command that refuses anything else sees it.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct OnDisk<'a> {
    /// Its errors (a second file counts as one).
    pub errors: usize,
    /// For a draft, the digest of its text (`Parsed::draft_digest`).
    pub draft_digest: Option<&'a str>,
    /// What `reconcile` has to put right (`tasks::misfiled`).
    pub misfiled: Option<&'a Misfiled>,
}

/// The next action with everything known: the file on disk, stale evidence, running reviews.
pub(crate) fn next_for(
    daemon: &Daemon,
    ws: &Workspace,
    spec: &Spec,
    entries: &[LedgerEntry],
    stale: &BTreeMap<String, Stale>,
    file: OnDisk<'_>,
) -> NextAction {
    let replay = ledger::replay(entries);
    // An interrupted move's leftover comes first, as everywhere (`list` names it alone).
    let leftover = matches!(file.misfiled, Some(Misfiled::Leftover { .. }));
    if !leftover && let Some(rewrite) = unwritten_receipt(ws, spec, &replay, entries) {
        return rewrite;
    }
    let latest = daemon.sessions.latest(ws, Some(&spec.front.task_id));
    let running = latest.as_ref().filter(|s| s.result.is_none()).map(|s| s.key.clone());
    let seen = seen_now(ws, &spec.front.task_id, spec, entries, None);
    let next = next_action(&Facts {
        spec,
        entries,
        replay: &replay,
        spec_errors: file.errors,
        stale,
        running_review: running.as_deref(),
        draft_digest: file.draft_digest,
        spec_digest: seen.spec_digest.as_deref(),
        shown_changed: seen.shown_changed,
        missing: None,
        misfiled: file.misfiled,
        shadowed: crate::templates::shadows(&ws.root, &spec.front.task_id),
        // Only a task in review is sent to a reviewer.
        oversize: (spec.status() == Some(crate::domain::lifecycle::Status::Review))
            .then(|| ws.config().ok())
            .flatten()
            .and_then(|c| crate::domain::packet::Oversize::of(spec, c.review.context.required_max_bytes)),
    });
    let next = as_before(ws, latest.as_ref(), &replay, next, || {
        crate::review::gate::spec_fingerprint(&ws.root, &ws.spec_path(&spec.front.task_id))
    });
    from_the_linked_checkout(ws, spec, entries, next)
}

/// The step after a review that gave no verdict, run again as it ran ([`again_as_before`]) when
/// `latest` is the task's latest review session; `next` as decided otherwise. The one place
/// both `status` ([`next_for`]) and the spec's `Allowed follow-up command` (each projection:
/// `ledger::project_then`) take it from. `spec_now`: the spec's guard fingerprint as it is
/// (`review::gate::spec_fingerprint`), read only when a session holds one to compare.
pub(crate) fn as_before(
    ws: &Workspace,
    latest: Option<&crate::domain::job::SessionRecord>,
    replay: &ledger::Replay,
    next: NextAction,
    spec_now: impl FnOnce() -> String,
) -> NextAction {
    match latest {
        // Only a review that gave no verdict: one voided by a change is not run as it was.
        Some(session) if replay.failed_attempt.is_some() => {
            again_as_before(next, session, spec_now, || crate::review::sealed_packet(ws, session).is_ok())
        }
        Some(session) if unrecorded(session) => {
            record_as_before(next, session, spec_now, || crate::review::sealed_packet(ws, session).is_ok())
        }
        _ => next,
    }
}

/// Whether `session` settled with answers the ledger could not take (a full state disk): no
/// verdict is on record, and `review retry <key>` records them.
pub(crate) fn unrecorded(session: &crate::domain::job::SessionRecord) -> bool {
    session.result.as_ref().is_some_and(|r| r.gate == Some(scafld_protocol::vocab::GateState::Unrecorded))
}

/// The step after a review whose answers the ledger could not take ([`unrecorded`]): its
/// session's retry, which records them (`review status` names it), rather than a new review
/// that runs the model again. Only while a retry would be taken: the spec's authored text as
/// its packet showed it and that packet still the one sealed; otherwise `next` (a new review).
fn record_as_before(
    mut next: NextAction,
    last: &crate::domain::job::SessionRecord,
    spec_now: impl FnOnce() -> String,
    packet_sealed: impl FnOnce() -> bool,
) -> NextAction {
    if !matches!(next.action, crate::domain::next::Action::Review | crate::domain::next::Action::RetryReview) {
        return next;
    }
    if retry_stands(last, spec_now, packet_sealed).is_err() {
        return next;
    }
    next.action = crate::domain::next::Action::RetryReview;
    next.command = format!("scafld review retry {}", scafld_protocol::cli::shell_word(&last.key));
    next.reason = format!(
        "review session {} settled but its verdict was not recorded (the daemon could not write its state): `review retry` records the reviewers' answers without running them again ({})",
        last.key,
        as_it_ran(last)
    );
    next
}

/// Whether `review retry` of `last` would be taken, else why not: the spec's authored text as
/// its packet showed it (`spec_now`: the guard's fingerprint, `review::gate::spec_fingerprint`,
/// read only when the session holds one to compare) and that packet still the one sealed.
fn retry_stands(
    last: &crate::domain::job::SessionRecord,
    spec_now: impl FnOnce() -> String,
    packet_sealed: impl FnOnce() -> bool,
) -> Result<(), &'static str> {
    let shown = last
        .snapshot
        .iter()
        .find(|p| p.fingerprint.starts_with(crate::domain::review::AUTHORED_SPEC))
        .map(|p| p.fingerprint.as_str());
    if shown.is_some_and(|then| then != spec_now()) {
        return Err("the spec changed since its packet was made");
    }
    match packet_sealed() {
        true => Ok(()),
        false => Err("its packet changed since the review began"),
    }
}

/// In a checkout whose `.scafld` is a link to another checkout's (a git worktree sharing it),
/// what writes specs or packets fails on the link (scafld never writes through one): such a
/// next command is named from the checkout the link leads to, with why. A review, complete or
/// finalize there judges that checkout's files: when they differ from those this checkout's
/// evidence was recorded on (it would be refused at once as stale there), the step is to
/// bring this checkout's changes there first, and the command it then runs is in the reason.
pub(crate) fn from_the_linked_checkout(
    ws: &Workspace,
    spec: &Spec,
    entries: &[LedgerEntry],
    mut next: NextAction,
) -> NextAction {
    const WRITES: [&str; 6] = ["review", "approve", "complete", "finalize", "reconcile", "harden"];
    const JUDGE_THE_FILES: [&str; 3] = ["review", "complete", "finalize"];
    // The command first: one already named from there (`cd ...`) or that writes nothing needs
    // no look at the disk.
    let mut words = next.command.split_whitespace();
    if words.next() != Some("scafld") {
        return next;
    }
    let Some(word) = words.next().filter(|word| WRITES.contains(word)) else {
        return next;
    };
    let Some(main) = ws.writes_from() else {
        return next;
    };
    let there = scafld_protocol::cli::run_from(Some(&main.to_string_lossy()), &next.command);
    let differ = match JUDGE_THE_FILES.contains(&word) {
        true => differs_there(&main, ws, spec, entries),
        false => None,
    };
    if let Some(changes) = differ {
        next.command = "none".into();
        next.reason = format!(
            "`{there}` runs from {}, the checkout this one's .scafld links to (scafld does not write through the link), and judges that checkout's files, which differ from the ones this checkout's evidence was recorded on (there: {changes}): bring this checkout's changes there (commit them here, merge them there), then run `{there}` ({})",
            main.display(),
            next.reason
        );
        return next;
    }
    next.command = there;
    next.reason = format!(
        "{} (from the checkout this one's .scafld links to: scafld does not write through the link)",
        next.reason
    );
    next
}

/// What differs in checkout `main` from the files `spec`'s evidence was recorded on (in
/// another checkout of the same workspace): `None` when its evidence is current there too, or
/// when `main`'s files cannot be read (the command then says why itself).
fn differs_there(main: &std::path::Path, ws: &Workspace, spec: &Spec, entries: &[LedgerEntry]) -> Option<String> {
    let (root, scope) = (main.to_path_buf(), evidence_scope(ws, spec));
    let material = blocking(move || baseline::material(&root, &scope));
    if material.is_err() {
        return None;
    }
    let there = judged(spec, entries, material);
    match (there.stale.is_empty(), there.changes.is_empty()) {
        (true, _) => None,
        (false, true) => Some("files in the task's scope".into()),
        (false, false) => Some(scafld_protocol::text::listed(&there.changes)),
    }
}

/// Run `read`, which blocks on the disk, from code that cannot await it: on the daemon's
/// multi-threaded runtime the worker hands its other tasks on first; anywhere else (a
/// test's single-threaded runtime, no runtime) it simply runs.
fn blocking<T>(read: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|handle| handle.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(read),
        _ => read(),
    }
}

/// The review to run after one that gave no verdict, as that one ran: its session's retry
/// (`scafld review retry <key>`: the reviewers that gave no verdict run again on its packet,
/// with its approval, the others' answers standing), the step the review's own hint names.
/// Where the spec's authored text changed since that packet was made (a retry would show the
/// reviewers the old text), or the packet is no longer the one sealed when the review began (a
/// retry is refused then), a new review with the same reviewers, provider command and
/// approval. Without either, `scafld review <task>` would run whatever reviewer is configured,
/// under automatic approval: a reviewer that never answered, or a person's decision, dropped.
fn again_as_before(
    mut next: NextAction,
    last: &crate::domain::job::SessionRecord,
    spec_now: impl FnOnce() -> String,
    packet_sealed: impl FnOnce() -> bool,
) -> NextAction {
    use scafld_protocol::vocab::{Approval, GateState, Outcome};
    if next.action != crate::domain::next::Action::RetryReview {
        return next;
    }
    // Only a session some reviewer of which gave no verdict has one to run again (a snapshot
    // that failed at its end, every reviewer having answered, has not: `review retry` refuses).
    let unanswered = last.result.as_ref().is_some_and(|r| {
        r.gate == Some(GateState::Retry)
            && matches!(r.outcome, Outcome::ParseError | Outcome::Timeout | Outcome::Internal)
    });
    if !unanswered {
        return next;
    }
    let stands = retry_stands(last, spec_now, packet_sealed);
    if stands.is_ok() {
        next.command = format!("scafld review retry {}", scafld_protocol::cli::shell_word(&last.key));
        next.reason = format!(
            "{}: `review retry` runs the reviewers that gave no verdict again, as the review ran ({})",
            next.reason,
            as_it_ran(last)
        );
        return next;
    }
    // The gate's template passes (`name:provider`) are added again by the review itself; named
    // in `--reviewers` they would be refused as unknown reviewers.
    let names: Vec<&str> =
        last.reviewers.iter().chain(&last.missing).map(String::as_str).filter(|name| !name.contains(':')).collect();
    let command = last.provider_command.as_deref().map(scafld_protocol::cli::shell_word);
    match (names.as_slice(), command) {
        ([_, _, ..], command) => {
            next.command =
                format!("{} --reviewers {}", next.command, scafld_protocol::cli::shell_word(&names.join(",")));
            if let Some(command) = command {
                next.command = format!("{} --provider-command {command}", next.command);
            }
        }
        (["command"], Some(command)) => {
            next.command = format!("{} --provider command --provider-command {command}", next.command);
        }
        _ => {}
    }
    if last.approval == Approval::Manual {
        next.command = format!("{} --approval manual", next.command);
    }
    let why = stands.err().unwrap_or_default();
    next.reason = format!("{} ({}; {why})", next.reason, as_it_ran(last));
    next
}

/// The reviewers and approval a session ran with, for a reason.
fn as_it_ran(session: &crate::domain::job::SessionRecord) -> String {
    let reviewers: Vec<&str> = session.reviewers.iter().chain(&session.missing).map(String::as_str).collect();
    format!("reviewers {}, approval {}", reviewers.join(", "), session.approval)
}
