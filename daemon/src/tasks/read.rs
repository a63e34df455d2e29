//! Read-side task methods: status, validate, list, handoff, report. They read the index only.

use std::collections::BTreeMap;
use std::sync::Arc;

use scafld_protocol::ErrorKind;
use scafld_protocol::methods as m;

use super::{entry_errors, entry_to_read, wire};
use crate::daemon::Daemon;
use crate::domain::handoff;
use crate::domain::ledger::{LedgerEntry, LedgerEvent, RecordedReview};
use crate::domain::lifecycle::{HardenStatus, Status};
use crate::domain::next::Misfiled;
use crate::domain::spec::{Criterion, Spec};
use crate::error::{RpcError, RpcResult};
use crate::rendered::Rendered;
use crate::workspace::ListKey;
use crate::workspace::index::{LoadedSpec, SpecEntry, Task};

/// The spec as the ledger says it is (hand edits to runner-owned fields do not count), named
/// by its file (a front matter naming no task or another one never names the commands shown).
fn ledger_view(
    daemon: &Daemon,
    ws: &crate::workspace::Workspace,
    entry: &LoadedSpec,
) -> RpcResult<(Spec, std::sync::Arc<[LedgerEntry]>)> {
    let entries = daemon.store().ledger(&ws.id, &entry.task_id).map_err(RpcError::internal)?;
    let shadowed = crate::templates::shadows(&ws.root, &entry.task_id);
    // A file that cannot be read as text (a folder, a FIFO, not UTF-8) has no phases to show:
    // what the approved contract pins and the ledger ran stand in for them.
    let sketch;
    let base = match entry.read_error.is_some() && !entries.is_empty() {
        true => {
            sketch = crate::domain::ledger::sketch_pinned(&entry.task_id, &entries);
            &sketch
        }
        false => &entry.parsed.spec,
    };
    let mut spec = crate::domain::ledger::project(base, &entries, &entry.parsed.spec.front.updated, shadowed);
    spec.front.task_id.clone_from(&entry.task_id);
    Ok((spec, entries))
}

/// The evidence's freshness and the next action `status` and `handoff` show: the lifecycle's
/// decision with what only the file and the IO know laid over it (the file's errors and
/// misfiling, a baseline commit gone, a build job still running, unless `ending_build`: the
/// build asks for the next step it answers with).
async fn shown_next(
    daemon: &Daemon,
    ws: &crate::workspace::Workspace,
    entry: &LoadedSpec,
    spec: &Spec,
    entries: &[LedgerEntry],
    errors: usize,
    ending_build: bool,
) -> (crate::evidence::Freshness, m::NextAction) {
    // A file that does not read leaves `spec` the ledger's sketch, with no scope to read.
    let fresh = match entry.read_error {
        Some(_) => crate::evidence::unjudged(spec, entries, crate::domain::evidence::Stale::SpecUnreadable),
        None => crate::evidence::freshness(ws, spec, entries).await,
    };
    let misfiled = super::misfiled(ws, entry, crate::domain::ledger::replay(entries).status);
    let file = crate::evidence::OnDisk {
        errors,
        draft_digest: entry.parsed.draft_digest.as_deref(),
        misfiled: misfiled.as_ref(),
    };
    let next = crate::evidence::next_for(daemon, ws, spec, entries, &fresh.stale, file);
    let next = crate::evidence::past_lost_baseline(ws, spec, entries, next).await;
    let next = if ending_build { next } else { crate::evidence::while_building(daemon, ws, &spec.front.task_id, next) };
    // A step that reads a configuration that does not read would be refused: fixing it first.
    let next = match ws.config() {
        Err(e) if crate::domain::next::reads_config(next.action) => {
            crate::domain::next::fix_config(&next, &e.to_string())
        }
        _ => next,
    };
    (fresh, crate::evidence::from_the_linked_checkout(ws, spec, entries, next))
}

/// The errors `status` shows for the spec: the file's own, and first a note when the ledger
/// cannot be projected into it. The note is a warning: it says what one of the errors below it
/// costs, so it is no error of its own and the count is `validate`'s.
fn status_errors(
    daemon: &Daemon,
    ws: &crate::workspace::Workspace,
    entry: &LoadedSpec,
    entries: &[LedgerEntry],
) -> RpcResult<Vec<m::Diagnostic>> {
    let (mut errors, _) = super::explained_errors(daemon, ws, entry)?;
    if let Some(note) = unprojectable(ws, entry, entries) {
        errors.insert(0, m::Diagnostic { line: 0, severity: crate::domain::spec::Severity::Warning, message: note });
    }
    Ok(errors)
}

/// The next action `status` shows for `task` (whose spec file is there), as a refusal's hint:
/// a refused command names the step `status` names, never one of its own that could undo
/// progress (a fresh review after an accepted one) or hide a step (`reconcile`). Should the
/// task not read now, the hint says where to look: the refusal itself still stands.
pub(crate) async fn refusal_hint(daemon: &Daemon, ws: &crate::workspace::Workspace, task: &str) -> String {
    match status_next(daemon, ws, task, false).await {
        Ok(next) => format!("next: `{}` ({})", next.command, next.reason),
        Err(e) => format!("see `scafld status {task}` for the next action ({e})"),
    }
}

/// [`refusal_hint`] as a service below the handlers takes it (`review::gate::NextHint`).
pub(crate) fn next_hint<'a>(
    daemon: &'a Daemon,
    ws: &'a crate::workspace::Workspace,
    task: &'a str,
) -> futures::future::BoxFuture<'a, String> {
    Box::pin(refusal_hint(daemon, ws, task))
}

/// [`status_next`] as a service below the handlers takes it (`review::gate::NextStep`).
pub(crate) fn next_step<'a>(
    daemon: &'a Daemon,
    ws: &'a crate::workspace::Workspace,
    task: &'a str,
) -> futures::future::BoxFuture<'a, RpcResult<m::NextAction>> {
    Box::pin(status_next(daemon, ws, task, false))
}

/// The next action `status` shows for `task`, whose spec file is there (as the build job that
/// asks leaves it, when `ending_build`).
pub(crate) async fn status_next(
    daemon: &Daemon,
    ws: &crate::workspace::Workspace,
    task: &str,
    ending_build: bool,
) -> RpcResult<m::NextAction> {
    let entry = super::fresh_entry(daemon, ws, task)?;
    let (spec, entries) = ledger_view(daemon, ws, &entry)?;
    let errors = status_errors(daemon, ws, &entry, &entries)?;
    Ok(shown_next(daemon, ws, &entry, &spec, &entries, error_count(&errors), ending_build).await.1)
}

pub async fn status(daemon: &Daemon, p: m::StatusParams) -> RpcResult<m::StatusResult> {
    let (ws, entry) = match entry_to_read(daemon, &p.root, &p.task_id).await {
        Ok(found) => found,
        Err(missing) => {
            return match super::Gone::find_to_read(daemon, &p.root, &p.task_id).await? {
                Some((ws, gone)) => {
                    let mut status = gone_status(&ws, &gone).await;
                    status.warnings = daemon.warnings_for(&ws.root);
                    Ok(status)
                }
                None => Err(missing),
            };
        }
    };
    let (spec, entries) = ledger_view(daemon, &ws, &entry)?;
    let errors = status_errors(daemon, &ws, &entry, &entries)?;
    let (fresh, next_action) = shown_next(daemon, &ws, &entry, &spec, &entries, error_count(&errors), false).await;
    let answer =
        Answer { path: ws.relative(&entry.path), root: ws.shown_root(), errors, next_action, spec_missing: false };
    // Its phases and criteria as the file shows them (a result that ran another definition than
    // the one beside it now is pending there): what `list` and `report` count too.
    let shown = crate::domain::ledger::for_file(spec, &entries);
    let mut status = answer.status(&entry.task_id, &shown, &entries, &fresh.stale, fresh.changes);
    status.warnings = daemon.warnings_for(&ws.root);
    // What would refuse every command that changes the task, said where the task is read.
    status.warnings.extend(super::session_divergence(daemon, &ws, &entry.task_id));
    if let Err(e) = ws.config() {
        status.config_error = Some(m::ConfigProblem { hint: e.hint(), file: e.file, message: e.message });
    }
    status.spec_source = spec_source(&entry.path, &status.path, p.source);
    Ok(status)
}

/// The spec file's bytes as they are now, as much of them as asked for: a file that cannot be
/// read (its error is in the answer's `errors`) has no source to show.
fn spec_source(file: &std::path::Path, shown: &str, detail: m::SourceDetail) -> Option<m::SpecSource> {
    use sha2::{Digest, Sha256};
    if detail == m::SourceDetail::Omit {
        return None;
    }
    let bytes = scafld_local::capped::read(file, "spec", crate::domain::spec::budget::MAX_SPEC_BYTES).ok()?;
    let omitted = detail == m::SourceDetail::Digest;
    Some(m::SpecSource {
        path: shown.to_string(),
        sha256: format!("{:x}", Sha256::digest(&bytes)),
        bytes: bytes.len() as u64,
        markdown: (!omitted).then(|| String::from_utf8(bytes).ok()).flatten(),
        markdown_omitted: omitted,
    })
}

/// `status` of a task whose spec file is gone: what its ledger knows (the phases and criteria
/// it has records of, the latest review), marked `spec_missing`. While the task is open that
/// is its error and putting the file back its next action (nothing else works until then); a
/// finished task's ledger is its whole record, so it is only marked.
async fn gone_status(ws: &crate::workspace::Workspace, gone: &super::Gone) -> m::StatusResult {
    use crate::domain::ledger;
    let (task, entries) = (gone.task.as_str(), &gone.entries[..]);
    let missing = crate::ledger::missing_spec(ws, task, entries).await;
    let shadowed = crate::templates::shadows(&ws.root, task);
    let spec = ledger::project(&ledger::sketch(task, entries), entries, &crate::clock::now_rfc3339(), shadowed);
    let stale = crate::evidence::unjudged(&spec, entries, crate::domain::evidence::Stale::SpecMissing).stale;
    let replay = ledger::replay(entries);
    // While the task is open, putting the file back comes before anything else (a running
    // review included); a finished task's next action is its lifecycle's.
    let next_action = crate::domain::next::next_action(&crate::domain::next::Facts {
        spec: &spec,
        entries,
        replay: &replay,
        spec_errors: 0,
        stale: &stale,
        running_review: None,
        draft_digest: None,
        spec_digest: None,
        shown_changed: false,
        missing: Some(&missing),
        misfiled: None,
        shadowed,
        oversize: None,
    });
    let errors = match gone.status.is_terminal() {
        true => Vec::new(),
        false => vec![m::Diagnostic {
            line: 0,
            severity: crate::domain::spec::Severity::Error,
            message: format!(
                "the spec file is missing (removed or moved out of .scafld/specs); the ledger keeps the task ({} entries, {}), not the spec's text: put the file back at {}",
                entries.len(),
                gone.status,
                missing.place
            ),
        }],
    };
    let mut status = Answer { path: String::new(), root: ws.shown_root(), errors, next_action, spec_missing: true }
        .status(task, &spec, entries, &stale, Vec::new());
    // Every result is stale, so none counts as passed: pending, as `list` and `report` count it.
    status.counts = ledger::state(entries).map(|state| state.marks.without_spec()).unwrap_or_default();
    for phase in &mut status.phases {
        phase.criteria_passed = 0;
    }
    status
}

/// What a `status` answer says beyond the spec and its ledger.
struct Answer {
    /// The spec file, relative to `root`, the workspace's folder (empty: there is none).
    path: String,
    root: String,
    errors: Vec<m::Diagnostic>,
    next_action: crate::domain::next::NextAction,
    spec_missing: bool,
}

impl Answer {
    /// The answer for `spec`, the task as its ledger (`entries`) projects it.
    fn status(
        self,
        task: &str,
        spec: &Spec,
        entries: &[LedgerEntry],
        stale: &BTreeMap<String, crate::domain::evidence::Stale>,
        stale_changes: Vec<String>,
    ) -> m::StatusResult {
        let current_phase = match handoff::current_phase(spec) {
            Some(phase) if spec.status().is_some_and(|s| !s.is_terminal() && s != Status::Draft) => phase.id(),
            _ => spec.current_state.current_phase.clone(),
        };
        let next_action = self.next_action;
        m::StatusResult {
            task_id: task.to_string(),
            title: spec.title.clone(),
            status: spec.status_word(),
            harden_status: spec.harden_status(),
            path: self.path,
            root: self.root,
            current_phase: if current_phase.is_empty() { "none".into() } else { current_phase },
            next: crate::domain::next::word(next_action.action).to_string(),
            next_command: next_action.command.clone(),
            next_action,
            stale_changes,
            review_gate: if spec.current_state.review_gate.is_empty() {
                "not_started".into()
            } else {
                spec.current_state.review_gate.clone()
            },
            phases: spec
                .phases
                .iter()
                .map(|p| m::PhaseProgress {
                    id: p.id(),
                    name: p.name.clone(),
                    status: if p.status.is_empty() { "pending".into() } else { p.status.clone() },
                    criteria_total: p.criteria.len(),
                    criteria_passed: p.criteria.iter().filter(|c| c.passed()).count(),
                })
                .collect(),
            criteria: criterion_states(spec, entries, stale),
            counts: spec.progress(),
            valid: self.errors.is_empty(),
            errors: self.errors,
            review: latest_review(entries),
            spec_missing: self.spec_missing,
            config_error: None,
            warnings: Vec::new(),
            spec_source: None,
        }
    }
}

/// How many of [`status_errors`] are errors (the note before them is not).
fn error_count(errors: &[m::Diagnostic]) -> usize {
    errors.iter().filter(|d| d.severity == m::Severity::Error).count()
}

/// A task with a ledger whose spec file a projection will not write into (emptied, broken
/// front matter, another task's id, a structural error such as a criterion id used twice,
/// unreadable): the file cannot show what the ledger holds until it is put right. Said in a
/// sentence naming the error that stops it (the one `spec::parse_as` gives), the file's own
/// errors following it.
fn unprojectable(ws: &crate::workspace::Workspace, entry: &LoadedSpec, entries: &[LedgerEntry]) -> Option<String> {
    let cause =
        entry.read_error.clone().or_else(|| entry.parsed.structural_errors().min_by_key(|d| d.line == 0).cloned())?;
    (!entries.is_empty()).then(|| {
        format!(
            "the spec cannot be projected: {cause}; so the file is left as it is and does not show the task's state, which the ledger keeps ({} entries); fix the file, then run `{}`",
            entries.len(),
            ws.runnable(&format!("scafld reconcile {}", entry.task_id)),
        )
    })
}

/// Verdict, provider, summary and findings of the latest accepted review, a person's reason
/// for rejecting its proposed verdict (`rejected`, manual approval) when they did, and the
/// entry after which it no longer stands (`superseded_by`: a build step, evidence, approval;
/// the gate is then `not_started`), so its verdict is never read as the gate's.
fn latest_review(entries: &[LedgerEntry]) -> Option<serde_json::Value> {
    entries.iter().enumerate().rev().find_map(|(i, e)| match &e.event {
        LedgerEvent::Review(RecordedReview { verdict, provider, reason, dossier, .. }) => {
            let mut review = serde_json::json!({
                "verdict": verdict,
                "provider": provider,
                "summary": dossier.as_ref().and_then(|d| d.get("summary")).cloned().unwrap_or_else(|| reason.clone().into()),
                "findings": dossier.as_ref().and_then(|d| d.get("findings")).cloned().unwrap_or_else(|| serde_json::json!([])),
                "entry": e.id(),
            });
            if let Some(why) = crate::domain::ledger::replay(&entries[..=i]).review_rejected {
                review["rejected"] = why.into();
                review["proposed_verdict"] = dossier.as_ref().and_then(|d| d.get("verdict")).cloned().unwrap_or_default();
            }
            // Later work, or a review run again that gave no verdict (none is current then).
            if let Some(later) = crate::domain::ledger::superseding(&entries[i + 1..]) {
                review["superseded_by"] = later.id().into();
            }
            Some(review)
        }
        _ => None,
    })
}

fn criterion_states(
    spec: &Spec,
    entries: &[LedgerEntry],
    stale: &std::collections::BTreeMap<String, crate::domain::evidence::Stale>,
) -> Vec<m::CriterionState> {
    let state = |c: &Criterion, phase_id: String| {
        let last_run = entries.iter().rev().find_map(|e| match &e.event {
            LedgerEvent::Criterion {
                criterion_id,
                exit_code,
                output,
                diagnostic,
                diagnostic_error,
                duration_ms,
                ..
            } if *criterion_id == c.id => {
                Some((*exit_code, output.clone(), diagnostic.clone(), diagnostic_error.clone(), Some(*duration_ms)))
            }
            _ => None,
        });
        let (exit_code, output, diagnostic, diagnostic_error, duration_ms) = last_run.unwrap_or_default();
        m::CriterionState {
            id: c.id.clone(),
            phase_id,
            title: c.title.clone(),
            command: c.command.clone(),
            // Not known of a criterion known by its id alone (empty), never "manual".
            expected_kind: if c.known_by_id_alone() { String::new() } else { c.effective_kind().to_string() },
            status: c.state().to_string(),
            evidence: c.evidence.clone(),
            freshness: match (stale.get(&c.id), crate::domain::evidence::latest_result(entries, &c.id)) {
                (Some(_), _) => m::Freshness::Stale,
                (None, Some(_)) => m::Freshness::Current,
                (None, None) => m::Freshness::None,
            },
            stale_reason: stale.get(&c.id).map(|s| s.describe().to_string()).unwrap_or_default(),
            exit_code,
            duration_ms,
            output_excerpt: output.chars().rev().take(400).collect::<Vec<_>>().into_iter().rev().collect(),
            diagnostic,
            diagnostic_error,
        }
    };
    let mut out: Vec<m::CriterionState> =
        spec.phases.iter().flat_map(|p| p.criteria.iter().map(move |c| state(c, p.id()))).collect();
    out.extend(spec.acceptance.criteria.iter().map(|c| state(c, String::new())));
    out
}

/// Every diagnostic of an entry (read, duplicate and parse errors, then warnings), by line.
fn all_diagnostics(entry: &SpecEntry) -> Vec<m::Diagnostic> {
    let mut diagnostics = entry_errors(entry);
    diagnostics.extend(
        entry.listing.diagnostics.iter().filter(|d| d.severity != crate::domain::spec::Severity::Error).map(wire),
    );
    diagnostics.sort_by_key(|d| d.line);
    diagnostics
}

/// `task.validate_all`: every spec's [`problems`], as `task.validate` says them one by one.
pub async fn validate_all(daemon: &Daemon, p: m::WorkspaceRootParams) -> RpcResult<m::ValidateAllResult> {
    let ws = daemon.workspace_to_read(&p.root).await?;
    // With the ledgers' states, so an open task whose spec file is gone is seen, as `list` sees it.
    sync_with_ledgers(daemon, &ws).await?;
    let (tasks, unlisted, gone) = {
        let index = crate::sync::read(&ws.index);
        // A place that could not be read may hold the file: such a task is not called missing
        // (the place is named, and fails the call, instead).
        let gone: Vec<(String, Status)> = index
            .tasks()
            .filter(|task| task.spec.is_none() && index.unlisted().is_empty())
            .filter_map(|task| task.status().filter(|s| !s.is_terminal()).map(|s| (task.id.to_string(), s)))
            .collect();
        (index.entries().map(|e| e.task_id.clone()).collect::<Vec<String>>(), unlisted(&index), gone)
    };
    let mut missing = Vec::with_capacity(gone.len());
    for (task, status) in gone {
        let entries = daemon.store().ledger(&ws.id, &task).map_err(RpcError::internal)?;
        let place = crate::ledger::place(&ws, &task, &entries);
        let message = format!(
            "the spec file is missing (removed or moved out of .scafld/specs); its ledger keeps the task ({status}): put the file back at {}, then run `{}`",
            scafld_protocol::text::one_line(&place),
            ws.runnable(&format!("scafld reconcile {task}"))
        );
        missing.push(m::SpecDiagnostics {
            task_id: task,
            path: place,
            status: status.to_string(),
            valid: false,
            diagnostics: vec![m::Diagnostic { line: 0, severity: m::Severity::Error, message }],
        });
    }
    let mut specs = Vec::with_capacity(tasks.len());
    for task in &tasks {
        // The whole parse (the Scope is not in the listing), one spec at a time.
        let Some(e) = crate::sync::write(&ws.index).loaded(task) else { continue };
        let diagnostics = problems(daemon, &ws, &e).await?;
        specs.push(m::SpecDiagnostics {
            task_id: e.task_id.clone(),
            path: ws.relative(&e.path),
            status: e.listing.status.map(|s| s.to_string()).unwrap_or_default(),
            valid: diagnostics.iter().all(|d| d.severity != m::Severity::Error),
            diagnostics,
        });
    }
    specs.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(m::ValidateAllResult { specs, missing, unlisted, warnings: daemon.warnings_for(&ws.root) })
}

/// What the index's last whole sync could not read under the spec folders, each said with
/// what to do: `list` warns of it, `validate --all` and `report` name it.
fn unlisted(index: &crate::workspace::index::Index) -> Vec<String> {
    index.unlisted().iter().map(|u| format!("{u}; {}", u.remedy())).collect()
}

/// `task.validate`: the spec file's [`problems`] and its outline.
pub async fn validate(daemon: &Daemon, p: m::TaskParams) -> RpcResult<m::ValidateResult> {
    let (ws, entry) = entry_to_read(daemon, &p.root, &p.task_id).await?;
    let diagnostics = problems(daemon, &ws, &entry).await?;
    let mut result = structure(entry.task_id.clone(), ws.relative(&entry.path), &entry.parsed.spec, diagnostics);
    result.warnings = daemon.warnings_for(&ws.root);
    Ok(result)
}

/// A spec file's problems, the one answer `validate`, `validate --all` and `task.check` of
/// the file (a saved spec in an editor) give: its own diagnostics (a duplicate's said with
/// the ledger's view, first) and what the workspace says of it ([`workspace_diagnostics`]).
async fn problems(
    daemon: &Daemon,
    ws: &crate::workspace::Workspace,
    entry: &LoadedSpec,
) -> RpcResult<Vec<m::Diagnostic>> {
    let mut diagnostics = all_diagnostics(entry);
    if !entry.duplicates.is_empty() {
        // The duplicate's error comes first (line 0, inserted first); said with the ledger's view
        // when the ledger can be read, else as the text alone says it (a state database that
        // cannot be read must not cost every other spec its diagnostics).
        if let Ok((explained, _)) = super::explained_errors(daemon, ws, entry) {
            diagnostics[0].message.clone_from(&explained[0].message);
        }
    }
    let draft = entry.parsed.spec.status() == Some(Status::Draft);
    diagnostics.extend(workspace_diagnostics(ws, &entry.parsed.spec, draft).await);
    diagnostics.sort_by_key(|d| d.line);
    Ok(diagnostics)
}

/// What the workspace says of a spec beyond its own text: each Scope entry checked against the
/// workspace, on the line that declares it (an error where approval refuses it, when
/// `approving` (a draft): outside the workspace, git's own store, a case typo; a warning
/// otherwise), and a contract too long for any review packet (a warning of the file as a
/// whole: a dead end in review). `validate`, `validate --all`, `task.check` (the editor's
/// buffer too) and `approve` all take these from here.
pub(crate) async fn workspace_diagnostics(
    ws: &crate::workspace::Workspace,
    spec: &Spec,
    approving: bool,
) -> Vec<m::Diagnostic> {
    let mut diagnostics: Vec<m::Diagnostic> = crate::evidence::scope_notes(ws, spec)
        .await
        .into_iter()
        .map(|(error, line, message)| {
            let severity = if error && approving { m::Severity::Error } else { m::Severity::Warning };
            m::Diagnostic { line, severity, message }
        })
        .collect();
    // In the order the entries are written, so a refusal quotes the first of them.
    diagnostics.sort_by_key(|d| d.line);
    diagnostics.extend(oversize(ws, spec).map(|message| m::Diagnostic {
        line: 0,
        severity: m::Severity::Warning,
        message,
    }));
    diagnostics
}

/// `task.check`: `task.validate` on given text (an editor's buffer). Reads the index for the
/// spec's path only; parses the text in memory and writes nothing.
pub async fn check(daemon: &Daemon, p: m::CheckParams) -> RpcResult<m::ValidateResult> {
    let Some(text) = p.text else {
        let (ws, entry) = entry_to_read(daemon, &p.root, &p.task_id).await?;
        let diagnostics = problems(daemon, &ws, &entry).await?;
        return Ok(structure(entry.task_id.clone(), ws.relative(&entry.path), &entry.parsed.spec, diagnostics));
    };
    if text.len() > m::MAX_CHECK_TEXT_BYTES {
        return Err(RpcError::new(
            ErrorKind::InvalidInput,
            format!("the text is {} bytes; task.check takes at most {} bytes", text.len(), m::MAX_CHECK_TEXT_BYTES),
        ));
    }
    let task = super::task_id(&p.task_id)?;
    let ws = daemon.workspace_to_read(&p.root).await?;
    // Catch up with the file (stat first), as validate does, for the path it is under now.
    let changed = crate::sync::write(&ws.index).sync_task(task.as_str());
    if let Some(changed) = changed {
        daemon.publish_task_changed(&ws, &changed, "hand_edit");
    }
    let path = crate::sync::read(&ws.index).get(task.as_str()).map(|e| ws.relative(&e.path)).unwrap_or_default();
    let mut parsed = crate::domain::spec::parse(&text);
    parsed.check_file_name(task.as_str());
    let mut diagnostics: Vec<m::Diagnostic> = parsed.errors().map(wire).collect();
    diagnostics
        .extend(parsed.diagnostics.iter().filter(|d| d.severity != crate::domain::spec::Severity::Error).map(wire));
    diagnostics.sort_by_key(|d| d.line);
    // The buffer's Scope read against the workspace, as the saved file's would be.
    let draft = parsed.spec.status() == Some(Status::Draft);
    diagnostics.extend(workspace_diagnostics(&ws, &parsed.spec, draft).await);
    diagnostics.sort_by_key(|d| d.line);
    Ok(structure(task.as_str().to_string(), path, &parsed.spec, diagnostics))
}

/// What `validate` and `check` answer: the diagnostics and the spec's outline with lines.
fn structure(task_id: String, path: String, spec: &Spec, diagnostics: Vec<m::Diagnostic>) -> m::ValidateResult {
    let structure = |c: &Criterion| m::CriterionStructure {
        id: c.id.clone(),
        kind: c.kind.clone(),
        title: c.title.clone(),
        expected_kind: c.effective_kind().to_string(),
        command: c.command.clone(),
        cwd: c.cwd.clone(),
        timeout_seconds: c.timeout_seconds.parse().ok(),
        line: c.line,
    };
    m::ValidateResult {
        task_id,
        path,
        valid: diagnostics.iter().all(|d| d.severity != m::Severity::Error),
        diagnostics,
        title: spec.title.clone(),
        status: spec.status_word(),
        phases: spec
            .phases
            .iter()
            .map(|ph| m::PhaseStructure {
                id: ph.id(),
                name: ph.name.clone(),
                objective: ph.objective.clone(),
                criteria: ph.criteria.iter().map(structure).collect(),
                line: ph.line,
            })
            .collect(),
        criteria: spec.acceptance.criteria.iter().map(structure).collect(),
        warnings: Vec::new(),
    }
}

/// The workspace's tasks, each with its ledger's status where it has a ledger (the truth, as
/// `status` says; a front matter that says otherwise is flagged), and the open tasks whose spec
/// file is gone. The reply is rendered once and handed out again while the index (files and
/// ledgers alike) and the call's parameters stay the same: a `list` of an unchanged workspace
/// costs the catch-up and a copy.
pub async fn list(daemon: &Daemon, p: m::ListParams) -> RpcResult<Rendered<m::ListResult>> {
    let filter = match p.status.as_deref() {
        Some(raw) => Some(crate::domain::lifecycle::statuses_named(raw).map_err(|e| {
            RpcError::new(ErrorKind::InvalidInput, e.to_string()).with_hint(
                "`in_progress` (an active, blocked or review task) and `under_review` (a draft) are Python scafld's words; the rest are this tool's and the Go original's",
            )
        })?),
        None => None,
    };
    let ws = daemon.workspace_to_read(&p.root).await?;
    let diverged = sync_with_ledgers(daemon, &ws).await?;
    // Rare, and never kept with the reply: said once.
    let mut warnings = daemon.warnings_for(&ws.root);
    warnings.extend(diverged);
    let index = crate::sync::read(&ws.index);
    let asked = ListKey { generation: index.generation(), filter, counts: p.counts };
    let mut listed = crate::sync::lock(&ws.listed);
    if let Some((key, reply)) = listed.as_ref()
        && *key == asked
        && warnings.is_empty()
    {
        return Ok(reply.clone());
    }
    let mut tasks: Vec<(Option<Status>, m::TaskSummary)> = index
        .tasks()
        .filter_map(|task| summary(&ws, &task, p.counts))
        .filter(|(status, _)| filter.is_none_or(|wanted| status.is_some_and(|s| wanted.contains(&s))))
        .collect();
    // The index yields tasks by id, so a stable sort by status alone orders them by status,
    // then id, without comparing ids again.
    tasks.sort_by_key(|(status, _)| *status);
    let mut result = m::ListResult {
        // Kept with the reply: the index's generation moves when they change.
        warnings: unlisted(&index),
        tasks: tasks.into_iter().map(|(_, t)| t).collect(),
        root: ws.shown_root(),
        writes_from: ws.writes_from().map(|f| f.to_string_lossy().into_owned()),
    };
    let reply = Rendered::of(&result).map_err(RpcError::internal)?;
    *listed = Some((asked, reply.clone()));
    if warnings.is_empty() {
        return Ok(reply);
    }
    result.warnings.splice(0..0, warnings);
    Rendered::of(&result).map_err(RpcError::internal)
}

/// Catch up with edits the watcher has not delivered yet (changed files re-parsed; the stats
/// are skipped while the change queue vouches for the spec folders). A task found in two files
/// is looked at again once no move of this daemon is half done (`specfile::Moves`).
fn sync(daemon: &Daemon, ws: &crate::workspace::Workspace) {
    let changed = crate::sync::write(&ws.index).catch_up();
    for task_id in changed {
        daemon.publish_task_changed(ws, &task_id, "hand_edit");
    }
    let doubled: Vec<String> = crate::sync::read(&ws.index)
        .entries()
        .filter(|entry| !entry.duplicates.is_empty())
        .map(|entry| entry.task_id.clone())
        .collect();
    if !doubled.is_empty() {
        let _settled = daemon.spec_moves.settled();
        let mut index = crate::sync::write(&ws.index);
        for task in &doubled {
            index.sync_task(task);
        }
    }
}

/// [`sync`], with every ledger's state read into the index first if the warm-up has not done
/// it yet (once per workspace, off the runtime), then the original tool's session files
/// followed ([`super::follow_original_sessions`]): what `list` and `report` show follows it.
/// The divergences of those files from their ledgers, as warnings.
async fn sync_with_ledgers(daemon: &Daemon, ws: &Arc<crate::workspace::Workspace>) -> RpcResult<Vec<String>> {
    if !crate::sync::read(&ws.index).ledger_loaded() {
        let (store, loading) = (daemon.store_handle(), ws.clone());
        tokio::task::spawn_blocking(move || crate::ledger::load_states(&*store, &loading))
            .await
            .map_err(RpcError::internal)?
            .map_err(RpcError::internal)?;
    }
    sync(daemon, ws);
    Ok(super::follow_original_sessions(daemon, ws).await)
}

/// How `list` shows a task, with the status it is sorted and filtered by; `None` for a
/// finished task whose spec file was cleared away (its ledger is its whole record).
fn summary(
    ws: &crate::workspace::Workspace,
    task: &Task<'_>,
    counts: bool,
) -> Option<(Option<Status>, m::TaskSummary)> {
    let status = task.status();
    let Some(entry) = task.spec else {
        let open = status.filter(|s| !s.is_terminal())?;
        let summary = m::TaskSummary {
            task_id: task.id.to_string(),
            status: open.to_string(),
            title: String::new(),
            path: String::new(),
            counts: counts.then(|| task.progress().unwrap_or_default()),
            error: Some(format!(
                "the spec file is missing (removed or moved out of .scafld/specs); its ledger keeps the task: put the file back, then run `{}`",
                ws.runnable(&format!("scafld reconcile {}", task.id))
            )),
            file_status: None,
            file_counts: None,
            spec_missing: true,
        };
        return Some((status, summary));
    };
    let listing = &entry.listing;
    // A second copy that is only a leftover is named with the command that moves it aside, as
    // `status` names it for the next action (the one rule: `tasks::misfiled`).
    let error = match super::misfiled(ws, entry, task.ledger.map(|l| l.status)) {
        Some(Misfiled::Leftover { path, placed }) => Some(format!(
            "the task is in two files: {placed} and {path}, an interrupted move's leftover (it differs only in runner-owned lines): `{}` moves it aside",
            ws.runnable(&format!("scafld reconcile {}", entry.task_id))
        )),
        // `reconcile` would be refused: what to put right first, as `status` says.
        Some(Misfiled::Unmoved { path, blocked: Some(blocked), .. }) => {
            Some(format!("{path} is not where the ledger puts the task, and reconcile cannot move it: {blocked}"))
        }
        _ => entry.first_error(),
    };
    let summary = m::TaskSummary {
        task_id: entry.task_id.clone(),
        status: status.map(|s| s.to_string()).unwrap_or_default(),
        title: listing.title.clone(),
        path: ws.relative(&entry.path),
        counts: counts.then(|| task.progress().unwrap_or_default()),
        error,
        file_status: task.file_disagrees().map(|s| s.to_string()),
        file_counts: task.file_progress_disagrees(),
        spec_missing: false,
    };
    Some((status, summary))
}

pub async fn handoff(daemon: &Daemon, p: m::TaskParams) -> RpcResult<m::HandoffResult> {
    let (ws, entry) = entry_to_read(daemon, &p.root, &p.task_id).await?;
    let errors: Vec<String> = super::explained_errors(daemon, &ws, &entry)?.0.into_iter().map(|d| d.message).collect();
    let (spec, entries) = ledger_view(daemon, &ws, &entry)?;
    let mut runs = handoff::LastRuns::new();
    for e in entries.iter() {
        if let LedgerEvent::Criterion { criterion_id, exit_code, output, .. } = &e.event {
            let excerpt: String =
                output.lines().rev().take(12).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
            runs.insert(criterion_id.clone(), (*exit_code, excerpt));
        }
    }
    let (fresh, next) = shown_next(daemon, &ws, &entry, &spec, &entries, errors.len(), false).await;
    let rejected = crate::domain::ledger::replay(&entries).review_rejected;
    let context = handoff::Context {
        errors: &errors,
        runs: &runs,
        next: &next,
        stale: &fresh.stale,
        rejected: rejected.as_deref(),
    };
    Ok(m::HandoffResult { task_id: entry.task_id.clone(), markdown: handoff::render(&spec, &context) })
}

pub async fn report(daemon: &Daemon, p: m::WorkspaceRootParams) -> RpcResult<m::ReportResult> {
    let ws = daemon.workspace_to_read(&p.root).await?;
    sync_with_ledgers(daemon, &ws).await?;
    let index = crate::sync::read(&ws.index);
    let mut report = m::ReportResult {
        by_status: BTreeMap::new(),
        writes_from: ws.writes_from().map(|f| f.to_string_lossy().into_owned()),
        unlisted: unlisted(&index),
        ..m::ReportResult::default()
    };
    for status in Status::ALL {
        report.by_status.insert(status.to_string(), 0);
    }
    for task in index.tasks() {
        // The tasks `list` shows, counted by the status it shows.
        let Some(entry) = task.spec else {
            if let Some(open) = task.status().filter(|s| !s.is_terminal()) {
                report.total += 1;
                *report.by_status.entry(open.to_string()).or_default() += 1;
                report.specs_missing.push(task.id.to_string());
                add_counts(&mut report, &task.progress().unwrap_or_default());
            }
            continue;
        };
        report.total += 1;
        let listing = &entry.listing;
        if entry.first_error().is_some() {
            report.invalid_specs += 1;
        }
        if let Some(status) = task.status() {
            *report.by_status.entry(status.to_string()).or_default() += 1;
        }
        if task.file_disagrees().is_some() {
            report.status_disagrees.push(task.id.to_string());
        }
        if task.file_progress_disagrees().is_some() {
            report.counts_disagree.push(task.id.to_string());
        }
        if listing.harden == HardenStatus::Passed {
            report.harden_passed += 1;
        }
        add_counts(&mut report, &task.progress().unwrap_or_default());
    }
    if report.criteria_total > 0 {
        report.criteria_pass_rate = report.criteria_passed as f64 / report.criteria_total as f64;
    }
    Ok(report)
}

/// `c`, one task's counts, added to the report's totals.
fn add_counts(report: &mut m::ReportResult, c: &m::Counts) {
    report.phases_total += c.phases_total;
    report.phases_completed += c.phases_completed;
    report.criteria_total += c.criteria_total;
    report.criteria_passed += c.criteria_passed;
    report.criteria_failed += c.criteria_failed;
}

/// The warning for a spec whose task contract alone is over the review packet's required cap
/// (`validate` and `approve` say it; `status` in review names the way on).
pub(crate) fn oversize(ws: &crate::workspace::Workspace, spec: &crate::domain::spec::Spec) -> Option<String> {
    let config = ws.config().ok()?;
    crate::domain::packet::Oversize::of(spec, config.review.context.required_max_bytes)
        .map(|over| format!("no review can run as the spec is: {}", over.advice()))
}
