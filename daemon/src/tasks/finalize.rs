//! `task.finalize`: close a reviewed task with a signed receipt. The gate's completion checks
//! first, then every acceptance criterion again, the scope's files fingerprinted (and refused
//! unless they are still what the review judged), the receipt
//! minted, anchored in the ledger (with the completion, in one append), and written out:
//! `.scafld/receipts/<task>.json`, then `latest.json`. Anchored once; a repeat call repairs
//! the files and returns the same receipt.

use std::sync::Arc;

use scafld_protocol::ErrorKind;
use scafld_protocol::methods::{self as m, CriterionResult};
use scafld_protocol::receipt::{
    AcceptanceRecord, Blocker, Body, ContextProvenance, DELETED, Envelope, HostUnderReview, MAX_RECEIPT_BYTES,
    MutationGuard, RECEIPT_SCHEMA_VERSION, ReceiptReviewer, SnapshotMode,
};
use scafld_protocol::vocab::{CriterionStatus, Verdict};
use sha2::{Digest, Sha256};

use super::exec::{CommandSetup, judge, refuse_completion_while_running};
use super::{entry, projected_spec, record};
use crate::baseline;
use crate::clock;
use crate::daemon::Daemon;
use crate::domain::job::SessionRecord;
use crate::domain::ledger::{LedgerEntry, LedgerEvent, RecordedReview, receipt_head};
use crate::domain::receipt;
use crate::domain::spec::Spec;
use crate::error::{RpcError, RpcResult};
use crate::receipts;
use crate::review::gate;
use crate::workspace::Workspace;

pub async fn finalize(daemon: &Arc<Daemon>, p: m::FinalizeParams) -> RpcResult<m::FinalizeResult> {
    let (ws, entry) = entry(daemon, &p.root, &p.task_id).await?;
    let task = entry.task_id.clone();
    refuse_completion_while_running(daemon, &ws, &task, "finalize")?;
    let lock = daemon.jobs.task_lock(&ws, &task);
    let _guard = lock.lock().await;
    let (spec, entries) = projected_spec(daemon, &ws, &task)?;
    if let Some(anchored) = receipts::anchored(&entries) {
        let path = write_receipt_files(&ws, &task, &anchored)?;
        let next = next_after(&ws, &task, &anchored, &path).await;
        let note = unapplied_hint(&ws, &spec, &p.scope_hints, &anchored, &path);
        return Ok(m::FinalizeResult { note, ..finalized(&task, anchored, path, true, Vec::new(), next) });
    }
    super::require_valid(daemon, &ws, &super::fresh_entry(daemon, &ws, &task)?.entry)?;
    super::review::require_review_status(daemon, &ws, &spec, &entries, &task, "finalize", ErrorKind::ReviewFailed)
        .await?;
    let fresh = crate::evidence::freshness(&ws, &spec, &entries).await;
    let (provider, review_entry) =
        super::review::completion_gate(daemon, &ws, &task, &spec, &entries, &fresh, "command:finalize").await?;
    // A hint is read as the spec's Scope is, and refused where it could bind nothing: one that
    // names nothing now binds the file(s) it held at the base, which the task deleted.
    let (hinted, gone) = if p.scope_hints.is_empty() {
        (Vec::new(), Vec::new())
    } else {
        crate::evidence::hinted_scope(&ws, &spec, &p.scope_hints).await?
    };
    refuse_hints_never_there(&ws, &entries, p.base_ref.as_deref(), &gone).await?;
    let scope = receipt_scope(&ws, &spec, &p.scope_hints).ok_or_else(|| {
        RpcError::new(
            ErrorKind::ReviewFailed,
            format!(
                "{task} declares no scope to fingerprint: its spec names no file or folder (Context, Scope, Touchpoints, Changes)"
            ),
        )
        .with_hint("list the task's files in its spec's Scope, or pass --scope-hint PATH")
    })?;

    // A receipt signs the repository's own files: content inside a submodule it names could
    // change under a verified receipt, so such a scope is refused (here, before any command
    // runs, as the spec names it; below, once its links are followed too).
    let (root, scope_now) = (ws.root.clone(), scope.clone());
    let (named, _) = baseline::in_workspace(move || baseline::scoped_submodules(&root, &scope_now)).await?;
    if let Some(sub) = named.first() {
        return Err(reaches_into(&task, sub));
    }

    // The receipt signs the packet the reviewers were given: one edited or removed since is
    // refused before any command runs (and checked again before signing).
    sealed_packet(&ws, daemon.sessions.latest(&ws, Some(&task)).as_ref(), &task)?;

    // Every criterion again, on the files as they are: a receipt never rests on old runs.
    let (criteria, records) = rerun_acceptance(daemon, &ws, &spec, &entries, &p.caller, &task).await?;
    if criteria.iter().any(|c| c.status != CriterionStatus::Pass) {
        let material = fresh.material.as_ref().map(|m| m.digest.clone()).unwrap_or_default();
        return failed_again(daemon, &ws, &spec, &entries, &material, criteria).await;
    }

    // What the scope's symlinks point at inside the workspace is signed too, as evidence was
    // bound to it (a link's text alone would let its target change under a verified receipt).
    let (root, scope_now, base_ref) = (ws.root.clone(), scope.clone(), p.base_ref.clone());
    let (scope, tree) = baseline::in_workspace(move || baseline::tree_files_through_links(&root, scope_now)).await?;
    // The criteria ran for a while: what is signed (read just above) must be what was reviewed
    // and what they just passed on. The material read after the files were is compared with
    // the one the gate found the review judged, as a build step compares its material read
    // after its commands.
    refuse_changed_while_running(&ws, &spec, &task, &fresh.material).await?;
    // Nor may the spec have left its approved contract meanwhile (a criterion that rewrites
    // it, a formatter run over the repository): the receipt would sign a contract nobody
    // approved or reviewed. The file is read again and checked as every gate checks it.
    refuse_contract_changed_while_running(daemon, &ws, &task)?;
    // Widened by what the scope's links point at: a link into a submodule reaches into it too.
    // One holding a submodule whole signs around it, and the answer says so.
    let (root, widened) = (ws.root.clone(), scope.clone());
    let (named, held) = baseline::in_workspace(move || baseline::scoped_submodules(&root, &widened)).await?;
    if let Some(sub) = named.first() {
        return Err(reaches_into(&task, sub));
    }
    let submodule_note = (!held.is_empty()).then(|| {
        format!(
            "submodule content is not signed: {} (a receipt signs this repository's own files)",
            scafld_protocol::text::listed(&held)
        )
    });
    let holds = |e: &crate::domain::review::ScopeEntry| {
        e.path.is_empty()
            || tree.files.keys().any(|f| crate::domain::review::in_scope(f, std::slice::from_ref(&e.path)))
    };
    if let Some(empty) = hinted.iter().find(|e| !holds(e) && !gone.contains(e)) {
        let named = vec![empty.path.clone()];
        if !ignored_files(&ws, &named).await?.is_empty() {
            return Err(RpcError::new(
                ErrorKind::InvalidInput,
                format!("--scope-hint `{}` is a file git ignores, {UNSIGNABLE}", empty.written),
            )
            .with_hint(track_ignored(&task, &named)));
        }
        return Err(RpcError::new(
            ErrorKind::InvalidInput,
            format!("--scope-hint `{}` holds no file (an empty folder, or only files git ignores)", empty.written),
        )
        .with_hint("name the task's files, or drop --scope-hint to sign the spec's Scope"));
    }
    let files_at = |rev: String| {
        let (root, scope_now) = (ws.root.clone(), scope.clone());
        baseline::in_workspace(move || baseline::tree_files(&root, &scope_now, Some(&rev)))
    };
    let (snapshot_mode, base_commit, mut file_digests, at_base) = match base_ref.as_deref() {
        Some(base) => {
            let at_base = files_at(base.to_string()).await?;
            let changed = tree.files.iter().filter(|(path, digest)| at_base.files.get(*path) != Some(digest));
            let changed = changed.map(|(p, d)| (p.clone(), d.clone())).collect();
            (SnapshotMode::BaseDelta, at_base.commit.clone(), changed, Some(at_base))
        }
        None => {
            let approved = approval_head(&entries);
            // A receipt based on a commit the repository no longer has could never verify.
            if let Some(gone) = crate::evidence::lost_baseline(&ws, &entries).await {
                return Err(RpcError::new(
                    ErrorKind::InvalidState,
                    format!(
                        "{task}'s approval baseline commit {gone} is gone from the repository (history rewritten and pruned): a receipt based on it could never verify"
                    ),
                )
                .with_hint("pass --base-ref <commit> to sign the task's changes since a commit the repository has"));
            }
            // Nor one on a commit HEAD no longer descends from (a rebase or an amend since).
            if let Some(head) = approved.clone() {
                let (root, base) = (ws.root.clone(), head.clone());
                let descends = baseline::in_workspace(move || baseline::is_ancestor(&root, &base, "HEAD")).await?;
                if !descends {
                    let (root, base) = (ws.root.clone(), head.clone());
                    let (met, holding) = baseline::in_workspace(move || baseline::meeting(&root, &base)).await?;
                    return Err(not_descended(&task, &head, met, &holding));
                }
            }
            // What the scope held at approval, to see what the task deleted (unreadable: none).
            let at_base = match approved.clone() {
                Some(head) => files_at(head).await.ok(),
                None => None,
            };
            (SnapshotMode::WorkingTree, approved.unwrap_or_else(|| tree.commit.clone()), tree.files.clone(), at_base)
        }
    };
    // A deletion is a change: a file of the scope at the base that is gone now is signed as
    // deleted, and `verify` requires it to be absent still.
    for path in at_base.iter().flat_map(|b| b.files.keys()).filter(|p| !tree.files.contains_key(*p)) {
        file_digests.insert(path.clone(), DELETED.to_string());
    }
    // A receipt that signs no file binds nothing in the tree: `verify` could never fail it.
    if file_digests.is_empty() {
        let shown = if scope == ["."] { "the whole workspace".to_string() } else { scope.join(", ") };
        // Files the scope names that git ignores are there, and evidence and review read them,
        // but no commit holds them: the way to a receipt is to track them.
        let ignored = ignored_files(&ws, &scope).await?;
        if !ignored.is_empty() {
            return Err(RpcError::new(
                ErrorKind::ReviewFailed,
                format!(
                    "{task} would get a receipt that signs no file: its scope ({shown}) holds only files git ignores ({}), {UNSIGNABLE}",
                    ignored.join(", ")
                ),
            )
            .with_hint(track_ignored(&task, &ignored)));
        }
        let why = match snapshot_mode {
            SnapshotMode::BaseDelta => {
                format!("no file of its scope ({shown}) differs from the base, none was deleted")
            }
            SnapshotMode::WorkingTree => {
                format!("its scope ({shown}) holds no file, and none was deleted since approval")
            }
        };
        return Err(RpcError::new(
            ErrorKind::ReviewFailed,
            format!("{task} would get a receipt that signs no file: {why}"),
        )
        .with_hint("list the files the task changed in its spec's Scope (or pass --scope-hint PATH naming them)"));
    }
    let session = daemon.sessions.latest(&ws, Some(&task));
    let reviewed: Vec<String> = session.as_ref().map(|s| s.files.clone()).unwrap_or_default();
    // The packet the reviewers were given, checked again (the criteria ran meanwhile).
    let mut provenance: Vec<ContextProvenance> = sealed_packet(&ws, session.as_ref(), &task)?.into_iter().collect();
    let mut ignored = Vec::new();
    for (path, digest) in &file_digests {
        if reviewed.contains(path) {
            provenance.push(ContextProvenance {
                kind: "file".into(),
                path: path.clone(),
                sha256: digest.clone(),
                bytes: 0,
            });
        } else {
            ignored.push(path.clone());
        }
    }
    // The index's path is absolute: the daemon works from `/`, not from any workspace.
    let spec_file = ws.indexed(&task).map(|entry| entry.path).unwrap_or_default();
    let spec_bytes = crate::workspace::index::read_spec(&ws.root, &spec_file)
        .map_err(|e| RpcError::new(ErrorKind::WorkspaceError, format!("{}: {e}", ws.relative(&spec_file))))?;
    let host = receipts::host_agent(&p.caller.env);
    let mut body = Body {
        schema_version: RECEIPT_SCHEMA_VERSION,
        task_id: task.clone(),
        session_id: session.as_ref().map(|s| s.key.clone()).unwrap_or_else(|| review_entry.clone()),
        verdict: Verdict::Pass,
        snapshot_mode,
        base_ref: base_ref.unwrap_or_default(),
        base_commit,
        head_commit: tree.commit.clone(),
        tree_sha: receipt::tree_sha(&file_digests),
        scope,
        file_digests,
        ignored_unreviewed: ignored,
        reviewed_context_provenance: provenance,
        reviewer: ReceiptReviewer { provider: provider.clone(), model: reviewer_model(&entries), ..Default::default() },
        host_under_review: HostUnderReview { agent: host.unwrap_or("unknown").into(), ..Default::default() },
        independence: receipts::independence(host, &provider),
        spec_fingerprint: format!("{:x}", Sha256::digest(&spec_bytes)),
        acceptance_declared: !records.is_empty(),
        acceptance: records,
        open_blockers: open_blockers(&entries),
        mutation_guard: MutationGuard { status: "clean".into(), ..Default::default() },
        ledger_head: String::new(),
        minted_at: clock::now_rfc3339(),
    };
    body.ledger_head = receipt::next_head(&receipt_head(&entries), &receipt::receipt_digest(&body));
    receipt::validate_body(&body).map_err(RpcError::internal)?;
    let key_path = receipts::host_key_path(&p.caller.env).ok_or_else(|| {
        RpcError::new(ErrorKind::InvalidState, "no config folder for the receipt key (HOME is unset)")
    })?;
    let key = receipts::host_key(&key_path, true).map_err(|e| RpcError::new(ErrorKind::InvalidState, e))?;
    receipts::trust_host_key(&ws.root, &key).map_err(|e| RpcError::new(ErrorKind::WorkspaceError, e))?;
    let envelope = receipts::sign(body, &key);
    let relative = format!(".scafld/receipts/{task}.json");
    let anchor = LedgerEvent::Receipt {
        digest: receipt::receipt_digest(&envelope.body),
        ledger_head: envelope.body.ledger_head.clone(),
        path: relative,
        envelope: serde_json::to_value(&envelope).map_err(RpcError::internal)?,
    };
    // The anchor and the completion in one append: there is no completed task without its
    // receipt in the ledger, and no anchored receipt of a task still in review.
    let completion = LedgerEvent::Complete { reason: format!("finalized with a signed receipt ({provider})") };
    let note = record(daemon, &ws, &task, vec![anchor, completion], "command:finalize")?.note();
    let note = match (note, submodule_note) {
        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
        (a, b) => a.or(b),
    };
    let path = write_receipt_files(&ws, &task, &envelope)?;
    let next = next_after(&ws, &task, &envelope, &path).await;
    Ok(m::FinalizeResult { note, ..finalized(&task, envelope, path, false, criteria, next) })
}

/// The receipt's entry for the review packet of `session` (where the workspace is now: a
/// folder renamed since holds it elsewhere): the digest and length of the packet its reviewers
/// were given. Refused when the file is gone or was edited after the review began, or cannot
/// be read: a receipt never signs as reviewed context a packet no reviewer saw, nor drops the
/// entry in silence. No session (a review recorded by an older scafld whose sessions were
/// swept): no entry.
fn sealed_packet(ws: &Workspace, session: Option<&SessionRecord>, task: &str) -> RpcResult<Option<ContextProvenance>> {
    let Some(session) = session else { return Ok(None) };
    let text = crate::review::sealed_packet(ws, session).map_err(|why| {
        RpcError::new(
            ErrorKind::ReviewFailed,
            format!("cannot finalize {task}: {why}; a receipt signs the packet its reviewers were given, so nothing was minted"),
        )
        .with_hint(format!(
            "review the task again (`{}`): a new review writes its own packet, and leave .scafld/reviews alone until finalize",
            crate::templates::review_command(&ws.root, task)
        ))
    })?;
    Ok(Some(ContextProvenance {
        kind: "packet".into(),
        path: ws.relative(&crate::review::packet_path(ws, session)),
        sha256: format!("{:x}", Sha256::digest(text.as_bytes())),
        bytes: text.len() as u64,
    }))
}

/// Refuse when the files of the task's scope are no longer the `reviewed` material (the one the
/// gate checked against the passing review): they changed while finalize's criteria ran, so a
/// receipt would sign content no reviewer saw. Names what changed; nothing is recorded, so the
/// evidence is simply stale and the next build runs it again.
async fn refuse_changed_while_running(
    ws: &Workspace,
    spec: &Spec,
    task: &str,
    reviewed: &Result<baseline::Material, baseline::GitFailure>,
) -> RpcResult<()> {
    let unreadable = |why: baseline::GitFailure| {
        let hint = why.hint().unwrap_or_else(|| "repair the repository (see `git status`), then try again".into());
        RpcError::new(
            ErrorKind::WorkspaceError,
            format!("cannot finalize {task}: the files in its scope cannot be read ({why}), so what would be signed cannot be checked against what was reviewed"),
        )
        .with_hint(hint)
    };
    let reviewed = reviewed.as_ref().map_err(|why| unreadable(why.clone()))?;
    let now = crate::evidence::material_now(ws, spec).await.map_err(unreadable)?;
    if now.digest == reviewed.digest {
        return Ok(());
    }
    let mut changed = baseline::material_changes(&reviewed.stored(), &now.entries);
    if changed.is_empty() {
        changed.push("files in scope".into());
    }
    Err(RpcError::new(
        ErrorKind::ReviewFailed,
        format!(
            "cannot finalize {task}: files in its scope changed while its criteria ran: {}; a receipt signs only what was reviewed, so nothing was minted",
            scafld_protocol::text::listed(&changed)
        ),
    )
    .with_hint(format!(
        "if the change is meant, run `scafld build {task}` and `{}` again, then finalize; otherwise restore the reviewed content and finalize again",
        crate::templates::review_command(&ws.root, task)
    ))
    .with_details(serde_json::json!({ "changed_during_finalize": changed })))
}

/// Refuse when the task's spec, read again after finalize's criteria ran, no longer matches
/// its approved contract (or no longer reads as a valid spec): the same refusal and hint as
/// before any criterion ran (`gate::refuse_contract_changes`), saying when it happened.
fn refuse_contract_changed_while_running(daemon: &Daemon, ws: &Workspace, task: &str) -> RpcResult<()> {
    super::require_valid(daemon, ws, &super::fresh_entry(daemon, ws, task)?.entry)?;
    let (spec, entries) = projected_spec(daemon, ws, task)?;
    gate::refuse_contract_changes(task, &spec, &entries, "finalize", ErrorKind::ReviewFailed).map_err(|mut e| {
        e.0.message.push_str(" (the spec changed while its criteria ran; nothing was minted)");
        e
    })
}

/// The refusal of a scope reaching into the submodule `sub` (by a path, or a link into it).
/// Why a file git ignores is never signed.
/// The refusal of a finalize whose HEAD does not descend from the approval baseline `head`:
/// history rewritten since (a rebase, an amend), with `met`, the commit where HEAD's history
/// meets it, to sign against; or a history that shares no commit with it (an orphan branch),
/// put on the history of a branch `holding` it by a soft reset, the files kept as they are.
fn not_descended(task: &str, head: &str, met: Option<String>, holding: &[String]) -> RpcError {
    let refused = |why: &str| {
        RpcError::new(
            ErrorKind::InvalidState,
            format!(
                "{task}'s approval baseline commit {head} is not an ancestor of HEAD ({why}): a receipt based on it could never verify"
            ),
        )
    };
    match (met, holding.first()) {
        (Some(met), _) => refused("the history was rewritten since approval: a rebase or an amend").with_hint(format!(
            "pass --base-ref {met} (where HEAD's history meets it: `git merge-base HEAD {head}`) to sign the task's changes since that commit"
        )),
        (None, Some(branch)) => refused(
            "HEAD's history shares no commit with it: an orphan branch, as `git checkout --orphan` makes, or a root commit rewritten",
        )
        .with_hint(format!(
            "put this branch on the history of a branch that holds it, the files kept as they are: `git reset --soft {}` (this branch's own commits then stay only in the reflog; `git branch --contains {head}` lists those branches), then run the command again",
            scafld_protocol::cli::shell_word(branch)
        )),
        (None, None) => refused("HEAD's history shares no commit with it, and no branch holds it").with_hint(
            "pass --base-ref <commit> naming a commit of HEAD's history to sign the task's changes since it",
        ),
    }
}

const UNSIGNABLE: &str = "which a receipt cannot sign: `verify` checks the signed files at a commit, and no commit holds a file git ignores unless it is tracked";

/// Those of `paths` that are files git ignores and does not track ([`baseline::ignored_files`]).
async fn ignored_files(ws: &Workspace, paths: &[String]) -> RpcResult<Vec<String>> {
    let (root, paths) = (ws.root.clone(), paths.to_vec());
    baseline::in_workspace(move || baseline::ignored_files(&root, &paths)).await
}

/// The way to a receipt for a task whose files git ignores: track them (git then signs and
/// commits them as any other), or close the task without a receipt.
fn track_ignored(task: &str, ignored: &[String]) -> String {
    let files = ignored.iter().map(|f| scafld_protocol::cli::shell_word(f)).collect::<Vec<_>>().join(" ");
    format!(
        "track what git ignores so a commit can hold it: `git add -f -- {files}`, then `scafld finalize {task}` again; or close the task without a receipt: `scafld complete {task}`"
    )
}

fn reaches_into(task: &str, sub: &str) -> RpcError {
    RpcError::new(
        ErrorKind::ReviewFailed,
        format!(
            "{task}'s scope reaches into the submodule `{sub}`, whose files a receipt cannot sign (it signs this repository's own files; a submodule is a commit of another repository)"
        ),
    )
    .with_hint(format!(
        "finalize the submodule's work in its own workspace, or take `{sub}` (and any link into it) out of the scope (--scope-hint PATH names the rest)"
    ))
}

/// Refuse a `--scope-hint` entry that names nothing in the workspace unless it held a file at
/// the base (`--base-ref`, else the approval commit): a file the task deleted is signed as
/// deleted, but a hint that never named anything would sign nothing.
async fn refuse_hints_never_there(
    ws: &Workspace,
    entries: &[LedgerEntry],
    base_ref: Option<&str>,
    gone: &[crate::domain::review::ScopeEntry],
) -> RpcResult<()> {
    if gone.is_empty() {
        return Ok(());
    }
    let (base, at) = match base_ref {
        Some(rev) => (Some(rev.to_string()), format!("at the base `{rev}`")),
        None => match approval_head(entries) {
            Some(head) => (Some(head.clone()), format!("at approval ({})", &head[..head.len().min(12)])),
            None => (None, "at approval (no commit was recorded)".to_string()),
        },
    };
    let at_base = match base {
        Some(rev) => {
            let (root, paths) = (ws.root.clone(), gone.iter().map(|e| e.path.clone()).collect::<Vec<_>>());
            baseline::in_workspace(move || baseline::tree_files(&root, &paths, Some(&rev))).await?.files
        }
        None => Default::default(),
    };
    let held = |e: &crate::domain::review::ScopeEntry| {
        at_base.keys().any(|f| crate::domain::review::in_scope(f, std::slice::from_ref(&e.path)))
    };
    match gone.iter().find(|e| !held(e)) {
        None => Ok(()),
        Some(never) => Err(RpcError::new(
            ErrorKind::InvalidInput,
            format!("--scope-hint `{}` matches nothing in the workspace, nor {at}", never.written),
        )
        .with_hint(
            "name the task's files inside the workspace as they are written (a file the task deleted: as it was at the base), or drop --scope-hint to sign the spec's Scope",
        )),
    }
}

/// The note for a `--scope-hint` given to a task already finalized for another scope: the
/// anchored receipt stands as signed, the hint is not applied.
fn unapplied_hint(ws: &Workspace, spec: &Spec, hints: &[String], anchored: &Envelope, path: &str) -> Option<String> {
    if hints.is_empty() {
        return None;
    }
    let entries = crate::domain::review::scope_entries(spec, hints, &ws.root.to_string_lossy());
    let mut asked: Vec<String> =
        entries.iter().map(|e| if e.path.is_empty() { ".".to_string() } else { e.path.clone() }).collect();
    let mut signed = anchored.body.scope.clone();
    asked.sort();
    asked.dedup();
    signed.sort();
    if asked == signed {
        return None;
    }
    Some(format!(
        "{} is already finalized with receipt {} signed for scope {}; the --scope-hint ({}) was not applied: a task's receipt is minted once",
        anchored.body.task_id,
        path,
        anchored.body.scope.join(", "),
        hints.join(", ")
    ))
}

fn finalized(
    task: &str,
    envelope: Envelope,
    path: String,
    already: bool,
    criteria: Vec<CriterionResult>,
    next_command: String,
) -> m::FinalizeResult {
    m::FinalizeResult {
        task_id: task.to_string(),
        finalized: true,
        already,
        receipt_path: Some(path.clone()),
        receipt: Some(envelope),
        blocked: None,
        criteria,
        next_command,
        note: None,
    }
}

/// What follows a receipt: `verify` at HEAD, which reads the commit, not the working tree;
/// so when HEAD does not hold the signed files as signed (the work is not committed yet),
/// committing them comes first, in the same command.
async fn next_after(ws: &Workspace, task: &str, envelope: &Envelope, path: &str) -> String {
    let verify = format!("scafld verify {path} --target HEAD");
    let body = &envelope.body;
    let (root, scope) = (ws.root.clone(), body.scope.clone());
    let Ok(Ok(head)) = baseline::off_runtime(move || baseline::tree_files(&root, &scope, Some("HEAD"))).await else {
        return verify;
    };
    let working_tree = body.snapshot_mode == SnapshotMode::WorkingTree;
    let paths: Vec<String> =
        receipt::file_mismatches(&body.file_digests, &head.files, working_tree).into_iter().map(|(p, _)| p).collect();
    if paths.is_empty() {
        return verify;
    }
    // `git add` refuses a path that is in neither the index nor the tree (a deletion already
    // staged by `git rm`); `git commit -- PATH` commits a deletion either way.
    let deleted = |p: &String| body.file_digests.get(p).is_some_and(|d| d == DELETED);
    let words = |keep: &dyn Fn(&String) -> bool| {
        paths.iter().filter(|p| keep(p)).map(|p| scafld_protocol::cli::shell_word(p)).collect::<Vec<_>>().join(" ")
    };
    let (added, files) = (words(&|p| !deleted(p)), words(&|_| true));
    let add = if added.is_empty() { String::new() } else { format!("git add -A -- {added} && ") };
    format!("{add}git commit -m \"{task}: the finalized work\" -- {files} && {verify}")
}

/// Write the receipt, then `latest.json`, both only when they differ (a repeat call repairs a
/// write a crash cut short). Returns the receipt's workspace-relative path. A file that cannot
/// be written (a folder in its place, no permission) is the workspace's to fix: the ledger
/// holds the receipt, and finalize writes it again.
fn write_receipt_files(ws: &Workspace, task: &str, envelope: &Envelope) -> RpcResult<String> {
    let relative = format!(".scafld/receipts/{task}.json");
    let dir = ws.root.join(".scafld/receipts");
    let io = |place: &str| {
        let place = place.to_string();
        let task = task.to_string();
        move |e: std::io::Error| {
            let remedy = match e.kind() {
                std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => {
                    "free space on the workspace's disk".to_string()
                }
                _ => format!("make {place} a writable file (remove a folder or an unwritable file in its place)"),
            };
            RpcError::new(ErrorKind::InvalidState, format!("cannot write the receipt to {place}: {e}"))
                .with_hint(format!("{remedy}, then run `scafld finalize {task}` again: the ledger holds the receipt"))
        }
    };
    crate::workspace::layout::create_real_dir(&dir).map_err(io(".scafld/receipts"))?;
    let text = receipts::file_text(envelope);
    for name in [format!("{task}.json"), "latest.json".to_string()] {
        let path = dir.join(&name);
        let now = scafld_local::capped::read(&path, "receipt", MAX_RECEIPT_BYTES).ok();
        if now.as_deref() != Some(text.as_bytes()) {
            let place = format!(".scafld/receipts/{name}");
            crate::workspace::specfile::write_atomic(&path, &text).map_err(io(&place))?;
        }
    }
    Ok(relative)
}

/// A manual criterion's evidence as its receipt record signs it.
#[derive(Default)]
struct ManualSigned {
    sha256: String,
    actor: String,
    recorded_at: String,
}

/// Run every criterion again (manual ones count their current evidence) and record each as the
/// receipt shows it. The commands run as the call's, on record and cancelled by the daemon's
/// stop, which fails the call ([`crate::runner::CallRun`]).
async fn rerun_acceptance(
    daemon: &Daemon,
    ws: &Workspace,
    spec: &Spec,
    entries: &[LedgerEntry],
    caller: &m::CallerContext,
    task: &str,
) -> RpcResult<(Vec<CriterionResult>, Vec<AcceptanceRecord>)> {
    let config = ws.config()?;
    let phases: Vec<(String, &crate::domain::spec::Criterion)> = spec
        .phases
        .iter()
        .flat_map(|p| p.criteria.iter().map(move |c| (p.id(), c)))
        .chain(spec.acceptance.criteria.iter().map(|c| ("final".to_string(), c)))
        .collect();
    let commands = CommandSetup::new(ws, &config, caller);
    let call = daemon.call_runs.begin(&format!("finalize {task}")).await?;
    let (mut results, mut records) = (Vec::new(), Vec::new());
    for (phase_id, criterion) in phases {
        let kind = criterion.effective_kind().to_string();
        // A person's evidence for a manual criterion, signed with it: the digest, who, and
        // when scafld recorded it (empty for a run criterion, or a manual one still waiting).
        let mut manual = ManualSigned::default();
        let (status, reason, exit_code, output, (diagnostic, diagnostic_error)) = if kind == "manual" {
            let latest = crate::domain::evidence::latest_result_entry(entries, &criterion.id);
            if let Some(LedgerEntry {
                recorded_at,
                event: LedgerEvent::ManualEvidence { evidence_digest, actor, .. },
                ..
            }) = latest
            {
                manual = ManualSigned {
                    sha256: evidence_digest.clone(),
                    actor: actor.clone(),
                    recorded_at: recorded_at.clone(),
                };
            }
            let status = crate::domain::evidence::latest_result(entries, &criterion.id)
                .and_then(|(status, _, _)| status.parse().ok())
                .unwrap_or(CriterionStatus::Pending);
            (status, "manual evidence recorded".to_string(), None, String::new(), Default::default())
        } else {
            match commands.request(task, criterion) {
                Ok((request, diagnostics)) => {
                    let request = crate::runner::RunRequest { token: Some(call.token()), ..request };
                    let (outcome, written) = crate::runner::run(request, diagnostics, call.cancel(), |_| {}).await;
                    call.cut_short(&outcome)?;
                    let observed = judge(&kind, criterion, &outcome);
                    // A record the disk refused is cited by nothing, the result says why.
                    let path = ws.relative(&written.path);
                    let record = match written.error {
                        None => (path, String::new()),
                        Some(why) => (String::new(), crate::domain::ledger::unwritten_record(&path, &why)),
                    };
                    (observed.status, observed.reason, observed.exit_code, observed.output, record)
                }
                // Its folder leads out of the workspace (or is none there): not run, no receipt.
                Err(why) => (CriterionStatus::Fail, format!("not run: {why}"), None, String::new(), Default::default()),
            }
        };
        records.push(AcceptanceRecord {
            id: criterion.id.clone(),
            phase_id: phase_id.clone(),
            command: criterion.command.clone(),
            expected_kind: kind,
            status: status.to_string(),
            reason: reason.clone(),
            exit_code: exit_code.unwrap_or(0).into(),
            output_sha256: if output.is_empty() {
                String::new()
            } else {
                format!("{:x}", Sha256::digest(output.as_bytes()))
            },
            diagnostic: diagnostic.clone(),
            evidence_sha256: manual.sha256,
            evidence_actor: manual.actor,
            evidence_recorded_at: manual.recorded_at,
            // Where and how long it ran: `verify` runs it again the same way.
            cwd: receipt::recorded_cwd(&criterion.cwd),
            timeout_seconds: criterion.own_timeout_seconds().unwrap_or(0),
        });
        results.push(CriterionResult {
            criterion_id: criterion.id.clone(),
            phase_id,
            command: criterion.command.clone(),
            status,
            reason,
            exit_code,
            duration_ms: 0,
            output_excerpt: String::new(),
            diagnostic,
            diagnostic_error,
        });
    }
    Ok((results, records))
}

/// The paths a receipt fingerprints: the hints, else what the spec declares (with the bare
/// names, `Makefile`, that name something in the workspace, as evidence binds them). An entry
/// that is the workspace itself (`.`, a top-level glob, its own path) makes it the whole
/// workspace, `.` (every file but `.scafld/`). `None` when nothing is declared at all.
fn receipt_scope(ws: &Workspace, spec: &Spec, hints: &[String]) -> Option<Vec<String>> {
    let root = ws.root.to_string_lossy();
    let declared = !crate::domain::review::scope_entries(spec, hints, &root).is_empty();
    let mut bare: Vec<String> = if hints.is_empty() {
        crate::domain::review::bare_names(spec)
            .into_iter()
            .filter(|name| ws.root.join(name).symlink_metadata().is_ok())
            .collect()
    } else {
        Vec::new()
    };
    let scope = crate::domain::review::scope(spec, hints, &root);
    match (declared, scope.is_empty()) {
        (false, _) if bare.is_empty() => None,
        (false, _) => Some(bare),
        (true, true) => Some(vec![".".to_string()]),
        (true, false) => {
            bare.extend(scope);
            bare.sort();
            bare.dedup();
            Some(bare)
        }
    }
}

/// Criteria that fail as finalize runs them again, though their evidence passed on the same
/// files: the failures are recorded as the task's evidence, its step blocked again and the
/// review superseded ([`crate::domain::build::failed_on_rerun`]), so `status`, `complete` and
/// the next action no longer call it done; nothing is minted, and the next action is the one
/// the ledger now gives (the build that repairs it).
async fn failed_again(
    daemon: &Arc<Daemon>,
    ws: &Workspace,
    spec: &Spec,
    entries: &[LedgerEntry],
    material: &str,
    criteria: Vec<CriterionResult>,
) -> RpcResult<m::FinalizeResult> {
    let task = spec.front.task_id.clone();
    let attempts = |id: &str| {
        let recorded =
            |e: &&LedgerEntry| matches!(&e.event, LedgerEvent::Criterion { criterion_id, .. } if criterion_id == id);
        entries.iter().filter(recorded).count() as u32
    };
    let events = crate::domain::build::failed_on_rerun(spec, &criteria, material, attempts);
    let note = match events.is_empty() {
        true => None,
        false => record(daemon, ws, &task, events, "command:finalize")?.note(),
    };
    let (spec, entries) = projected_spec(daemon, ws, &task)?;
    let fresh = crate::evidence::freshness(ws, &spec, &entries).await;
    let next = crate::evidence::next_for(daemon, ws, &spec, &entries, &fresh.stale, Default::default());
    let failed = criteria.iter().find(|c| c.status != CriterionStatus::Pass);
    Ok(m::FinalizeResult {
        task_id: task,
        finalized: false,
        already: false,
        receipt_path: None,
        receipt: None,
        blocked: failed.map(|f| format!("acceptance criterion `{}` is {}: {}", f.criterion_id, f.status, f.reason)),
        criteria,
        next_command: next.command,
        note,
    })
}

/// HEAD when the task was approved (the approval baseline), if recorded.
fn approval_head(entries: &[LedgerEntry]) -> Option<String> {
    crate::domain::ledger::approval_baseline(entries).and_then(|b| b.head)
}

/// The model of the accepted review's first reviewer, when it was recorded.
fn reviewer_model(entries: &[LedgerEntry]) -> String {
    entries
        .iter()
        .rev()
        .find_map(|e| match &e.event {
            LedgerEvent::Review(RecordedReview { reviewers, .. }) => {
                Some(reviewers.first().and_then(|r| r.provenance.model.clone()).unwrap_or_default())
            }
            _ => None,
        })
        .unwrap_or_default()
}

/// The open blocking findings of the accepted review (none for a pass; listed if any).
fn open_blockers(entries: &[LedgerEntry]) -> Vec<Blocker> {
    let dossier = entries.iter().rev().find_map(|e| match &e.event {
        LedgerEvent::Review(RecordedReview { dossier, .. }) => Some(dossier.clone()),
        _ => None,
    });
    let Some(Some(dossier)) = dossier else { return Vec::new() };
    let Ok(dossier) = serde_json::from_value::<crate::domain::dossier::Dossier>(dossier) else { return Vec::new() };
    dossier
        .findings
        .iter()
        .filter(|f| f.blocks_completion && f.is_open())
        .map(|f| Blocker {
            id: f.id.clone(),
            severity: f.severity.clone(),
            location: f.location.as_ref().map(|l| l.path.clone()).unwrap_or_default(),
            summary: f.summary.clone().unwrap_or_default(),
            validation: f.validation.clone().unwrap_or_default(),
        })
        .collect()
}
