//! Review-gate rules that need no IO: the task's review scope, the classification of workspace
//! changes against the approval baseline, and the completion authority walk over the ledger.

use std::collections::BTreeSet;

use crate::domain::dossier::Dossier;
use crate::domain::ledger::{BaselinePath, LedgerEntry, LedgerEvent, RecordedReview, ReviewerRecord};
use crate::domain::spec::budget::{MAX_REVIEW_BYTES, clip};
use crate::domain::spec::{ReviewProjection, Spec};

/// Providers whose passing review can complete a task (`local` and the guard's `scafld` cannot);
/// `worker` is a lease-holding reviewer worker.
pub const COMPLETING_PROVIDERS: [&str; 6] = ["codex", "claude", "gemini", "command", "worker", "human"];

/// Paths the task declares: `--review-scope` if given, else path-like tokens from Context,
/// Scope, Touchpoints and every phase's Changes. Normalised, sorted, without secrets; a
/// pattern that reaches the workspace's top means the whole tree (empty). `root` is the
/// workspace's folder: an absolute path inside it is taken relative to it.
pub fn scope(spec: &Spec, explicit: &[String], root: &str) -> Vec<String> {
    paths(entries(spec, explicit, root, |path| !secret(path)))
}

/// The paths the task's evidence is bound to: [`scope`]'s, with the files it keeps from
/// reviewers for their secrets (`.env*`, `.priv`, the local config) bound all the same (their
/// content is hashed, never shown); only the repository's own `.git` stays out.
pub fn bound_scope(spec: &Spec, root: &str) -> Vec<String> {
    paths(entries(spec, &[], root, |path| !git_store(path)))
}

/// The task's scope entries that name git's own store (`.git`, `.git/config`): no scope keeps
/// them, so no evidence is ever bound to them.
pub fn git_store_entries(spec: &Spec, root: &str) -> Vec<ScopeEntry> {
    entries(spec, &[], root, git_store).into_iter().filter(|e| git_store(&e.path)).collect()
}

/// Whether `path` (workspace-relative, as [`read_path`] gives it) is the repository's `.git`
/// or below it.
pub fn git_store(path: &str) -> bool {
    path == ".git" || path.starts_with(".git/")
}

/// The paths of `entries`, sorted and distinct; empty (the whole tree) when one is the top.
fn paths(entries: Vec<ScopeEntry>) -> Vec<String> {
    if entries.iter().any(|e| e.path.is_empty()) {
        return Vec::new();
    }
    let set: BTreeSet<String> = entries.into_iter().map(|e| e.path).collect();
    set.into_iter().collect()
}

/// One scope entry as written and the path scafld takes it for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeEntry {
    pub written: String,
    /// Workspace-relative; empty for the whole tree; absolute when outside the workspace.
    pub path: String,
    pub reading: Reading,
}

/// How a scope entry was read, when not as the path it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    Path,
    /// A glob pattern: the folder above its first pattern character, everything in it.
    Pattern,
    /// `path:12` (or `:12-20`, `:12:4`): the file, without the line.
    LineRemoved,
    /// An absolute path inside the workspace, taken relative to it.
    MadeRelative,
    /// An absolute path, or one climbing out with `..`, outside the workspace: never read.
    Outside,
}

/// Every scope entry of the task (see [`scope`]), secrets and empty ones left out.
pub fn scope_entries(spec: &Spec, explicit: &[String], root: &str) -> Vec<ScopeEntry> {
    entries(spec, explicit, root, |path| !secret(path))
}

/// Every scope entry of the task whose path `keep` accepts (empty ones left out).
fn entries(spec: &Spec, explicit: &[String], root: &str, keep: impl Fn(&str) -> bool) -> Vec<ScopeEntry> {
    let raw: Vec<String> = if explicit.is_empty() {
        declared_items(spec).filter_map(|item| path_token(item)).collect()
    } else {
        explicit.to_vec()
    };
    let mut seen = BTreeSet::new();
    raw.into_iter()
        // Blank names nothing; only `.`, `./`, `*` or the workspace's own path mean all of it.
        .filter(|written| !written.trim().is_empty() && seen.insert(written.clone()))
        .filter_map(|written| {
            let (path, reading) = read_path(&written, root);
            // An empty path is the whole workspace (`.`, `./`, `*`, the workspace's own path).
            (path.is_empty() || keep(&path)).then_some(ScopeEntry { written, path, reading })
        })
        .collect()
}

/// The items of the sections that declare what a task touches: Context (packages, files
/// impacted), Scope, Touchpoints and every phase's Changes.
fn declared_items(spec: &Spec) -> impl Iterator<Item = &String> {
    spec.context
        .packages
        .iter()
        .chain(&spec.context.files_impacted)
        .chain(&spec.scope)
        .chain(&spec.touchpoints)
        .chain(spec.phases.iter().flat_map(|p| &p.changes))
}

/// The line (1-based) of the first declared item (Context, Scope, Touchpoints, Changes) that
/// names `written` as a scope entry, or as a bare name ([`bare_names`]): where a diagnostic of
/// that entry points. 0 when no item names it (an entry given on the command line).
pub fn declared_line(spec: &Spec, written: &str) -> usize {
    let names = |item: &str| {
        path_token(item).is_some_and(|token| token == written)
            || item
                .split('`')
                .nth(1)
                .is_some_and(|token| line_suffix(token).map_or(token, |at| &token[..at]) == written)
    };
    spec.declared_at.iter().find(|(item, _)| names(item)).map_or(0, |(_, line)| *line)
}

/// The backticked word of each Context, Scope, Touchpoints or Changes item that holds no
/// path-like token (no `/` or `.`: `Makefile`, `Dockerfile`, `bin`): it names a file or folder
/// of that name if one is there, which only the caller can tell.
pub fn bare_names(spec: &Spec) -> Vec<String> {
    let items = declared_items(spec);
    let plain = |t: &str| !t.is_empty() && t.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
    let mut names: Vec<String> = items
        .filter(|item| path_token(item).is_none())
        .filter_map(|item| item.split('`').nth(1))
        // `Makefile:12` is the file, as for any path.
        .map(|token| line_suffix(token).map_or(token, |at| &token[..at]))
        .filter(|token| plain(token))
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The first backticked token that looks like a path (or is a glob: `*`, `**`, `src*`, read
/// as [`read_path`] reads every pattern, so `*` is the whole workspace as `.` and `*.txt` are),
/// else the first word if it looks like a path.
fn path_token(item: &str) -> Option<String> {
    let looks = |t: &str| !t.contains("://") && (t.contains('/') || t.starts_with('.') || t.contains('.'));
    let glob = |t: &str| t.contains('*') && !t.contains(char::is_whitespace);
    let backticked = item.split('`').skip(1).step_by(2).find(|t| looks(t) || glob(t));
    if let Some(token) = backticked {
        return Some(token.to_string());
    }
    let word = item.split_whitespace().next()?.trim_start_matches(['-', '*']).trim_end_matches(['`', ':', ',', ';']);
    looks(word).then(|| word.to_string())
}

/// A `:12`, `:12-20` or `:12:4` at the end of a path (a location, not a name).
fn line_suffix(path: &str) -> Option<usize> {
    let mut at = path.len();
    for _ in 0..2 {
        let Some(colon) = path[..at].rfind(':') else { break };
        let tail = &path[colon + 1..at];
        let numbers = tail.split('-').all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if !numbers || tail.split('-').count() > 2 {
            break;
        }
        at = colon;
    }
    (at < path.len() && at > 0).then_some(at)
}

/// The path a scope entry names (the original's normalisation: `\` to `/`, no `./`, no
/// trailing `/**` or `/*`, no surrounding slashes; `.` and `..` segments resolved as written,
/// so `sub/../f` is `f` and `.` the whole workspace, the empty path), and how it was read.
fn read_path(written: &str, root: &str) -> (String, Reading) {
    let mut reading = Reading::Path;
    let mut p = written.replace('\\', "/");
    if let Some(at) = line_suffix(&p) {
        p.truncate(at);
        reading = Reading::LineRemoved;
    }
    if p.starts_with('/') {
        let Some(absolute) = lexical(&p) else { return (p, Reading::Outside) };
        let root = root.trim_end_matches('/');
        let absolute = format!("/{absolute}");
        match absolute.strip_prefix(root).filter(|rest| !root.is_empty() && (rest.is_empty() || rest.starts_with('/')))
        {
            Some(rest) => {
                p = rest.to_string();
                reading = Reading::MadeRelative;
            }
            None => return (absolute, Reading::Outside),
        }
    }
    // A `..` that climbs above the workspace leaves it.
    let Some(p) = lexical(&p) else { return (p.trim_matches('/').to_string(), Reading::Outside) };
    let mut p = p.strip_suffix("/**").or_else(|| p.strip_suffix("/*")).unwrap_or(&p).to_string();
    if let Some(at) = p.find(['*', '?', '[']) {
        p.truncate(p[..at].rfind('/').unwrap_or(0));
        reading = Reading::Pattern;
    }
    (p, reading)
}

/// `path` (`/`-separated) with its empty and `.` segments dropped and each `..` taking away
/// the segment before it, without leading or trailing slashes; `None` when a `..` climbs
/// above where the path starts. Lexical only: a symlinked folder before a `..` is not followed.
fn lexical(path: &str) -> Option<String> {
    let mut kept: Vec<&str> = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                kept.pop()?;
            }
            segment => kept.push(segment),
        }
    }
    Some(kept.join("/"))
}

/// The files [`secret`] keeps from reviewers (`.git` aside), as gitignore-style patterns below
/// a folder: what a reviewer CLI's own file tools are denied (claude's `Read(...)` rules).
pub const SECRET_PATTERNS: [&str; 3] = ["**/.env*", "**/.priv", "**/.scafld/config.local.yaml"];

/// Whether `path` is a file kept from reviewers for its secrets (its name, never its content,
/// may be shown): the repository's `.git`, and at any depth (a nested package or workspace
/// keeps its secrets as the top does) anything below a `.priv` folder, any `.env*` file or
/// folder, and a `.scafld/config.local.yaml`.
pub fn secret(path: &str) -> bool {
    let segments: Vec<&str> = path.split('/').collect();
    git_store(path)
        || segments.iter().any(|segment| *segment == ".priv" || segment.starts_with(".env"))
        || segments.windows(2).any(|pair| pair == [".scafld", "config.local.yaml"])
}

/// Why a project file named as review context (`review.context.files`, or a default such as
/// `.claude/rules`) is never shown to a reviewer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unshareable {
    /// Outside the workspace as written: absolute, or a `..` that climbs above it.
    Outside,
    /// Git's own store or a file kept from reviewers for its secrets ([`secret`]).
    Kept,
}

/// The workspace-relative path a project file named as review context is read at (`.` and
/// `..` segments resolved as written, no surrounding slashes; empty for the workspace's top),
/// or why it is never shown: the one rule the packet's reader and the refusal of a configured
/// entry share. The folders on its way are for the reader to follow (a symlink taking it
/// outside the workspace is never read).
pub fn context_path(written: &str) -> Result<String, Unshareable> {
    let path = lexical(written).filter(|_| !written.starts_with('/')).ok_or(Unshareable::Outside)?;
    if secret(&path) {
        return Err(Unshareable::Kept);
    }
    Ok(path)
}

/// What the mutation guard watches: the task's own scope and the review's (`--review-scope`),
/// so an explicit review scope widens the guard and never narrows it below the task's; empty
/// (the whole tree) when either is.
pub fn guard_scope(task: &[String], review: &[String]) -> Vec<String> {
    if task.is_empty() || review.is_empty() {
        return Vec::new();
    }
    let set: BTreeSet<&String> = task.iter().chain(review).collect();
    set.into_iter().cloned().collect()
}

/// The review scope a review is given: what it was asked for (`--review-scope`), and `carried`,
/// the files a passing review was shown that changed since (which `complete` refuses until a
/// review sees them); `requested` as it is when nothing is carried.
pub fn with_carried(requested: &[String], carried: &[String]) -> Vec<String> {
    if carried.is_empty() {
        return requested.to_vec();
    }
    let set: BTreeSet<&String> = requested.iter().chain(carried).collect();
    set.into_iter().cloned().collect()
}

pub fn in_scope(path: &str, scope: &[String]) -> bool {
    scope.is_empty() || scope.iter().any(|s| path == s || path.starts_with(&format!("{s}/")))
}

/// Changes since the baseline, split by scope. Runner and spec files are not task changes.
#[derive(Debug, Default, PartialEq)]
pub struct Classification {
    pub task_changes: Vec<String>,
    pub ambient_drift: Vec<String>,
    /// Dirty at approval and unchanged since: context only.
    pub baseline_dirty: Vec<String>,
    /// Task changes known only as a whole folder holding scoped paths (a nested repository
    /// whose changes are read through its own git is its files instead, and one whose changes
    /// cannot be read is refused before this): among `task_changes`, their content not diffed.
    pub opaque: Vec<String>,
}

/// Split `changed` (every path that differs from the approval baseline, committed or not) by
/// scope; baseline dirt that did not change since is context. Runner and spec files are not
/// task changes. `grouped_apart` is the scope whose paths the approval dirt's groups leave out
/// (the evidence scope: `baseline::changes_since` reads a group without them).
pub fn classify(
    changed: &[String],
    baseline: &[BaselinePath],
    scope: &[String],
    grouped_apart: &[String],
) -> Classification {
    let relevant = |p: &str| !p.starts_with(".scafld/runs/") && !p.starts_with(".scafld/specs/");
    let changed: BTreeSet<&str> = changed.iter().map(String::as_str).filter(|p| relevant(p)).collect();
    let groups: BTreeSet<&str> =
        baseline.iter().filter(|p| p.status == crate::domain::material::GROUP).map(|p| p.path.as_str()).collect();
    let mut out = Classification::default();
    for path in &changed {
        // A folder git reports as a whole (`lib/`, a nested repository) that holds a scoped
        // path is the task's change, though its files are not listed one by one. A changed
        // group of approval dirt is not: it holds only the dirt outside the scope (the scoped
        // paths in its folder are read one by one), so it is ambient drift, unless it holds a
        // path of a wider review scope that the group does not leave out.
        let folder = path.trim_end_matches('/');
        let grouped = groups.contains(path);
        let encloses = !folder.is_empty()
            && scope.iter().any(|s| s.starts_with(&format!("{folder}/")) && !(grouped && in_scope(s, grouped_apart)));
        if encloses && !in_scope(path, scope) {
            out.opaque.push(path.to_string());
        }
        let bucket = if in_scope(path, scope) || encloses { &mut out.task_changes } else { &mut out.ambient_drift };
        bucket.push(path.to_string());
    }
    let unchanged: BTreeSet<&str> =
        baseline.iter().map(|p| p.path.as_str()).filter(|p| relevant(p) && !changed.contains(p)).collect();
    out.baseline_dirty = unchanged.into_iter().map(str::to_string).collect();
    out
}

/// The `## Review` section for the latest accepted review; `rejected`, a person's reason for
/// rejecting its proposed verdict (manual approval), right under the verdict it decided.
pub fn projection(
    verdict: &str,
    provider: &str,
    dossier: Option<&serde_json::Value>,
    rejected: Option<&str>,
) -> ReviewProjection {
    let mut body = vec!["Status: completed".to_string(), format!("Verdict: {verdict}")];
    let dossier = dossier.and_then(|d| serde_json::from_value::<Dossier>(d.clone()).ok());
    if let Some(why) = rejected {
        let proposed = dossier.as_ref().map(|d| format!(" {}", d.verdict)).unwrap_or_default();
        body.push(clip(&format!("Decision: a person rejected the proposed{proposed} verdict: {why}")));
    }
    match &dossier {
        Some(d) => {
            body.push(clip(&format!("Mode: {}", d.mode)));
            let model = d.model.as_deref().filter(|m| !m.is_empty()).map(|m| format!(":{m}")).unwrap_or_default();
            body.push(clip(&format!("Provider: {provider}{model}")));
            if let Some(format) = &d.output_format {
                body.push(clip(&format!("Output: {format}")));
            }
            body.push(format!("Summary: {}", clip(&d.summary)));
            body.push(String::new());
            body.push("Attack log:".into());
            for a in &d.attack_log {
                let notes = a.notes.as_deref().map(|n| format!(" ({n})")).unwrap_or_default();
                body.push(clip(&format!("- `{}`: {} -> {}{notes}", a.target, a.attack, a.result)));
            }
            body.push(String::new());
            body.push("Findings:".into());
            if d.findings.is_empty() {
                body.push("- none".into());
            }
            for f in &d.findings {
                let blocking = if f.blocks() { "blocks completion" } else { "non-blocking" };
                body.push(clip(&format!(
                    "- [{}/{blocking}] `{}` {}",
                    f.severity,
                    f.id,
                    f.summary.as_deref().unwrap_or("")
                )));
                if let Some(l) = &f.location {
                    body.push(clip(&format!(
                        "  - Location: `{}{}`",
                        l.path,
                        l.line.map(|n| format!(":{n}")).unwrap_or_default()
                    )));
                }
                for (label, value) in [("Evidence", &f.evidence), ("Impact", &f.impact), ("Validation", &f.validation)]
                {
                    if let Some(v) = value.as_deref().filter(|v| !v.is_empty()) {
                        body.push(format!("  - {label}: {}", clip(v)));
                    }
                }
            }
        }
        None => {
            body.push("Mode: verify".into());
            body.push(format!("Provider: {provider}"));
            body.push(String::new());
            body.push("Findings:".into());
            body.push("- none".into());
        }
    }
    within_review_budget(&mut body);
    ReviewProjection { status: "completed".into(), verdict: verdict.into(), body }
}

/// Keep the section within [`MAX_REVIEW_BYTES`]: the lines past it are counted on one last line
/// (the whole dossier stays in the ledger).
fn within_review_budget(body: &mut Vec<String>) {
    let mut used = 0;
    let Some(cut) = body.iter().position(|line| {
        used += line.len() + 1;
        used > MAX_REVIEW_BYTES - 200
    }) else {
        return;
    };
    let left_out = body.len() - cut;
    body.truncate(cut);
    // The section ends with its findings list, as every review's does (where the runner's part
    // of `## Review` ends, so text written after it stays): the note is that list's last item.
    if !body.iter().any(|line| line == "Findings:") {
        while body.last().is_some_and(|line| line.is_empty()) {
            body.pop();
        }
        body.extend([String::new(), "Findings:".into()]);
    }
    body.push(format!(
        "- … {left_out} more line(s) of this review are in the ledger (`scafld session <task>` shows it)"
    ));
}

/// Why `complete` may (or may not) close the task.
#[derive(Debug, Clone, PartialEq)]
pub enum Authority {
    Valid { provider: String, review_entry: String, summary: String },
    Invalid { reason: String },
}

/// Walk the ledger backwards: the newest `review` decides, unless something newer (a build,
/// criterion, phase, approval, baseline, review attempt, fail, cancel or complete) invalidated
/// it. The review must pass, come from a completing provider, carry a valid dossier without open
/// blockers, and a `human` one must directly follow its `review_override`.
/// Channels through which an answer may count toward completion: a provider's own output
/// channel, a lease-holding worker, or the audited human path.
const TRUSTED_CHANNELS: [&str; 7] = [
    "codex.output_file",
    "codex.stdout",
    "claude.mcp_submit_review",
    "gemini.mcp_submit_review",
    "command.stdout",
    "worker.lease",
    "human",
];

/// Why a consensus member cannot count toward completion, if one cannot.
fn untrusted_reviewer(reviewers: &[ReviewerRecord]) -> Option<String> {
    reviewers.iter().find_map(|r| {
        if r.provenance.provider == "local" || r.reviewer == "local" {
            Some(format!("the passing review came from `{}`, which cannot complete a task", r.reviewer))
        } else if !TRUSTED_CHANNELS.contains(&r.provenance.channel.as_str()) {
            Some(format!(
                "reviewer `{}` answered through `{}`, not a provider channel",
                r.reviewer, r.provenance.channel
            ))
        } else {
            None
        }
    })
}

pub fn completion_authority(entries: &[LedgerEntry]) -> Authority {
    let invalid = |reason: &str| Authority::Invalid { reason: reason.to_string() };
    for (i, entry) in entries.iter().enumerate().rev() {
        match &entry.event {
            LedgerEvent::Review(RecordedReview { verdict, provider, dossier, reason, reviewers, .. }) => {
                if verdict != "pass" {
                    return invalid("the latest review did not pass");
                }
                if let Some(why) = untrusted_reviewer(reviewers) {
                    return Authority::Invalid { reason: why };
                }
                if provider == "consensus" && reviewers.is_empty() {
                    return invalid("the consensus review does not name its reviewers");
                }
                if provider != "consensus" && !COMPLETING_PROVIDERS.contains(&provider.as_str()) {
                    return Authority::Invalid {
                        reason: format!("the passing review came from `{provider}`, which cannot complete a task"),
                    };
                }
                let summary = match dossier {
                    Some(value) => match serde_json::from_value::<Dossier>(value.clone()) {
                        Ok(d) if d.open_blockers() == 0 => d.summary,
                        Ok(_) => return invalid("the latest review dossier has open blocking findings"),
                        Err(_) => return invalid("the latest review dossier is invalid"),
                    },
                    None if provider == "human" => reason.clone(),
                    None => return invalid("the latest review has no dossier"),
                };
                if provider == "human" {
                    let audited = i > 0 && matches!(entries[i - 1].event, LedgerEvent::ReviewOverride { .. });
                    if !audited {
                        return invalid("the human-reviewed pass is missing its audit record");
                    }
                }
                return Authority::Valid { provider: provider.clone(), review_entry: entry.id(), summary };
            }
            LedgerEvent::ReviewProposed(_) => {
                return invalid("a review awaits approval: record `scafld review accept|reject` first");
            }
            LedgerEvent::ReviewOverride { .. }
            | LedgerEvent::ReviewDecision { .. }
            | LedgerEvent::Implementer { .. }
            | LedgerEvent::Job { .. }
            | LedgerEvent::Imported { .. }
            | LedgerEvent::SessionImported { .. } => {}
            // Something newer than any review: say what the latest review was, if there was one.
            _ => {
                let latest = entries[..i].iter().rev().find_map(|e| match &e.event {
                    LedgerEvent::Review(r) => Some(r.verdict.as_str()),
                    LedgerEvent::ReviewProposed(_) => Some("proposed"),
                    _ => None,
                });
                return invalid(match latest {
                    None => "no review has been recorded",
                    Some("pass") => "no current accepted review: something newer than the latest review invalidates it",
                    Some("proposed") => {
                        "no current accepted review: something newer than the proposed review invalidates it"
                    }
                    Some(_) => "the latest review did not pass (and something newer has been recorded since)",
                });
            }
        }
    }
    invalid("no review has been recorded")
}

/// What begins the mutation guard's fingerprint of the task's own spec when it is the digest of
/// the authored text ([`spec_guard_fingerprint`]); a stored snapshot without it (an older
/// scafld's) holds the file's plain fingerprint.
pub const AUTHORED_SPEC: &str = "authored:";

/// The mutation guard's fingerprint of the task's own spec: the digest of what the author wrote
/// (`spec::project::authored_digest`, the runner-owned lines set aside). scafld's own writes to
/// the spec (a projection of a build, of another review's verdict) never change it; any edit of
/// the spec's authored text does.
pub fn spec_guard_fingerprint(text: &str) -> String {
    let layout = crate::domain::spec::parse(text).layout;
    format!("{AUTHORED_SPEC}{}", crate::domain::spec::project::authored_digest(text, &layout))
}

/// Paths changed during the review that matter: the task's own spec, or anything in scope that
/// is not runner or spec state. `before` is the snapshot as the session stored it (grouped by
/// folder when large: `domain::material::stored`), `after` read now, an entry per file: it is
/// folded into `before`'s groups first, and a changed group is named as its folder (`src/`).
pub fn mutations(before: &[BaselinePath], after: &[BaselinePath], scope: &[String], spec_path: &str) -> Vec<String> {
    let after = crate::domain::material::like(before, after);
    let key = |p: &BaselinePath| (p.path.clone(), (p.status.clone(), p.fingerprint.clone()));
    let before: std::collections::BTreeMap<_, _> = before.iter().map(key).collect();
    let after: std::collections::BTreeMap<_, _> = after.iter().map(key).collect();
    // A group (`src/`) is in scope when it is below a scope entry or holds one.
    let holds_scope = |path: &str| {
        path == crate::domain::material::WHOLE
            || path.ends_with('/') && scope.iter().any(|s| format!("{s}/").starts_with(path))
    };
    let mut changed: Vec<String> = before
        .keys()
        .chain(after.keys())
        .filter(|path| before.get(*path) != after.get(*path))
        .filter(|path| {
            *path == spec_path
                || (!path.starts_with(".scafld/runs/")
                    && !path.starts_with(".scafld/reviews/")
                    && !path.starts_with(".scafld/specs/")
                    && (in_scope(path, scope) || holds_scope(path)))
        })
        .cloned()
        .collect();
    changed.sort();
    changed.dedup();
    changed
}

/// Every path whose state differs between two snapshots, outside scafld's own run and review
/// directories (the mutation guard of template reviews, which have no task scope).
pub fn changed_paths(before: &[BaselinePath], after: &[BaselinePath]) -> Vec<String> {
    mutations(before, after, &[], "")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::spec::parse;

    /// The guard's view of the spec moves with the author's text, never with the runner's lines.
    #[test]
    fn the_guards_spec_fingerprint_ignores_runner_owned_lines() {
        let spec = |status: &str, review: &str, summary: &str| {
            format!(
                "---\nspec_version: '2.0'\ntask_id: t\nstatus: {status}\n---\n\n# T\n\n## Summary\n\n{summary}\n\n## Phase 1: Do\n\nStatus: {status}\n\nAcceptance:\n- [ ] `a1` test - x\n  - Command: `true`\n{review}"
            )
        };
        let before = spec_guard_fingerprint(&spec("review", "", "s"));
        let projected = "\n## Review\n\nStatus: pass\nVerdict: pass\n";
        assert_eq!(before, spec_guard_fingerprint(&spec("completed", projected, "s")));
        assert!(before.starts_with(AUTHORED_SPEC));
        assert_ne!(before, spec_guard_fingerprint(&spec("review", "", "an edit")));
    }

    /// A project file named as review context is read where it is written, inside the
    /// workspace, and never when it is kept from reviewers for its secrets, at any depth.
    #[test]
    fn a_context_file_is_read_inside_the_workspace_and_never_a_secret() {
        assert_eq!(context_path("./docs//review.md"), Ok("docs/review.md".into()));
        assert_eq!(context_path("docs/../README.md"), Ok("README.md".into()));
        for outside in ["/etc/passwd", "../x.md", "docs/../../x.md"] {
            assert_eq!(context_path(outside), Err(Unshareable::Outside), "{outside}");
        }
        for kept in
            [".priv", "pkg/.priv/key.txt", "sub/.scafld/config.local.yaml", ".env.md", ".git/config", "x/../.priv/a"]
        {
            assert_eq!(context_path(kept), Err(Unshareable::Kept), "{kept}");
        }
    }

    /// A reviewer's text reaches the spec clipped, line by line and as a whole: a dossier of
    /// megabytes writes a section of at most [`MAX_REVIEW_BYTES`] (the ledger keeps it all).
    #[test]
    fn a_huge_review_writes_a_bounded_section() {
        let finding = |n: usize| {
            serde_json::json!({"id": format!("f{n}"), "severity": "low", "blocks_completion": false,
                "summary": "s".repeat(2000), "evidence": "line\n".repeat(500)})
        };
        let dossier = serde_json::json!({
            "verdict": "pass", "mode": "discover", "summary": "x".repeat(4_500_000),
            "findings": (0..5000).map(finding).collect::<Vec<_>>(),
            "attack_log": [{"target": "t", "attack": "a".repeat(9000), "result": "r"}],
            "budget": {},
        });
        let section = crate::domain::spec::render::review(&projection("pass", "command", Some(&dossier), None));
        assert!(section.len() <= MAX_REVIEW_BYTES, "{}", section.len());
        assert!(section.lines().all(|l| l.len() <= crate::domain::spec::budget::MAX_LINE_VALUE + 20));
        assert!(
            section.trim_end().ends_with("(`scafld session <task>` shows it)"),
            "{}",
            &section[section.len() - 300..]
        );
        assert!(section.contains("Verdict: pass") && section.contains("Summary: xxx"));
        // Cut before its findings, it still ends with a findings list (where the runner's part
        // of the section ends): the note on what was left out is its item.
        let attacks: Vec<_> = (0..5000)
            .map(|n| serde_json::json!({"target": format!("t{n}"), "attack": "a".repeat(200), "result": "r"}))
            .collect();
        let dossier = serde_json::json!({"verdict": "pass", "mode": "discover", "summary": "s", "findings": [],
            "attack_log": attacks, "budget": {}});
        let section = crate::domain::spec::render::review(&projection("pass", "command", Some(&dossier), None));
        let tail: Vec<&str> = section.lines().rev().take(3).collect();
        assert!(tail[0].starts_with("- … ") && tail[1] == "Findings:" && tail[2].is_empty(), "{tail:?}");
    }

    fn entry(seq: u64, event: LedgerEvent) -> LedgerEntry {
        LedgerEntry { seq, recorded_at: String::new(), event }
    }

    fn review(verdict: &str, provider: &str, dossier: Option<&str>) -> LedgerEvent {
        LedgerEvent::Review(RecordedReview {
            verdict: verdict.into(),
            provider: provider.into(),
            reason: "r".into(),
            dossier: dossier.map(|d| serde_json::from_str(d).unwrap()),
            tree: String::new(),
            reviewers: Vec::new(),
            spec_digest: None,
            shown: Vec::new(),
            shown_material: String::new(),
        })
    }

    const CLEAN: &str = r#"{"verdict":"pass","mode":"discover","summary":"clean","findings":[],"attack_log":[{"target":"t","attack":"a","result":"clean"}],"budget":{}}"#;

    #[test]
    fn completion_authority_rules() {
        let build = || LedgerEvent::Build { status: "review".into(), reason: "done".into() };
        let ok = completion_authority(&[entry(1, build()), entry(2, review("pass", "codex", Some(CLEAN)))]);
        assert!(matches!(ok, Authority::Valid { ref provider, .. } if provider == "codex"), "{ok:?}");
        let cases = vec![
            (vec![entry(1, build())], "no review has been recorded"),
            (vec![entry(1, review("fail", "codex", Some(CLEAN))), entry(2, build())], "did not pass"),
            (vec![], "no review has been recorded"),
            (vec![entry(1, review("pass", "local", Some(CLEAN)))], "cannot complete"),
            (vec![entry(1, review("fail", "codex", Some(CLEAN)))], "did not pass"),
            (vec![entry(1, review("pass", "codex", Some(CLEAN))), entry(2, build())], "invalidates"),
            (vec![entry(1, review("pass", "human", None))], "audit record"),
            (vec![entry(1, review("pass", "codex", Some("{\"verdict\":1}")))], "dossier is invalid"),
        ];
        for (entries, expected) in cases {
            match completion_authority(&entries) {
                Authority::Invalid { reason } => assert!(reason.contains(expected), "{expected:?} vs {reason:?}"),
                other => panic!("expected {expected:?}, got {other:?}"),
            }
        }
        let human = completion_authority(&[
            entry(1, LedgerEvent::ReviewOverride { reason: "PR 12 reviewed".into() }),
            entry(2, review("pass", "human", None)),
        ]);
        assert!(matches!(human, Authority::Valid { .. }));
    }

    #[test]
    fn scope_and_classification() {
        let spec = parse(
            "---\nspec_version: '2.0'\ntask_id: t\nstatus: review\n---\n# T\n## Scope\n\n- `api/handlers/` - handlers\n- `.env.local` - secrets\n\n## Touchpoints\n\n- docs/api.md: reference\n\n## Phase 1: A\n\nChanges:\n- `./api/errors.rs` - codes\n\nAcceptance:\n- [ ] `a` test - x\n  - Command: true\n",
        )
        .spec;
        let scope = scope(&spec, &[], "/ws");
        assert_eq!(scope, vec!["api/errors.rs", "api/handlers", "docs/api.md"]);
        let p = |status: &str, fp: &str, path: &str| BaselinePath {
            status: status.into(),
            fingerprint: fp.into(),
            path: path.into(),
        };
        let baseline = vec![p("??", "1", "notes.txt"), p(" M", "2", "api/handlers/x.rs")];
        let changed: Vec<String> =
            ["api/handlers/x.rs", "web/app.js", ".scafld/specs/drafts/other.md"].map(String::from).to_vec();
        let c = classify(&changed, &baseline, &scope, &scope);
        assert_eq!(c.task_changes, vec!["api/handlers/x.rs"]);
        assert_eq!(c.ambient_drift, vec!["web/app.js"]);
        assert_eq!(c.baseline_dirty, vec!["notes.txt"]);
    }

    /// A changed group of approval dirt (`api/`, its out-of-scope dirt recorded grouped) whose
    /// folder holds a scoped path is ambient drift, never an opaque task change: the group
    /// leaves the scoped paths out, which are read one by one. A folder git reports whole that
    /// holds a scoped path is still the task's, and so is a group holding a path of a wider
    /// review scope that the group does not leave out.
    #[test]
    fn a_changed_group_of_dirt_holding_a_scoped_path_is_ambient_drift() {
        let p = |status: &str, path: &str| BaselinePath {
            status: status.into(),
            fingerprint: "f".into(),
            path: path.into(),
        };
        let bound = vec!["api/handlers".to_string()];
        let baseline = vec![p(crate::domain::material::GROUP, "api/"), p("??", "lib/")];
        let changed: Vec<String> = ["api/", "lib/"].map(String::from).to_vec();
        let scope = vec!["api/handlers".to_string(), "lib/x.rs".to_string()];
        let c = classify(&changed, &baseline, &scope, &bound);
        assert_eq!(c.ambient_drift, vec!["api/"]);
        assert_eq!((c.task_changes, c.opaque), (vec!["lib/".to_string()], vec!["lib/".to_string()]));
        let wider = vec!["api/handlers".to_string(), "api/notes.md".to_string()];
        let c = classify(&changed[..1], &baseline, &wider, &bound);
        assert_eq!((c.task_changes, c.opaque), (vec!["api/".to_string()], vec!["api/".to_string()]));
    }

    /// The guard watches the task's scope and the review's together; either being the whole
    /// tree makes it the whole tree.
    #[test]
    fn a_review_scope_widens_the_guard_and_never_narrows_it() {
        let s = |paths: &[&str]| paths.iter().map(|p| p.to_string()).collect::<Vec<_>>();
        assert_eq!(guard_scope(&s(&["src/lib.rs"]), &s(&["docs", "src/lib.rs"])), s(&["docs", "src/lib.rs"]));
        assert_eq!(guard_scope(&s(&["src/lib.rs"]), &s(&["notes.txt"])), s(&["notes.txt", "src/lib.rs"]));
        assert!(guard_scope(&s(&["src/lib.rs"]), &[]).is_empty(), "a whole-tree review guards the whole tree");
        assert!(guard_scope(&[], &s(&["notes.txt"])).is_empty(), "a whole-tree task keeps the whole tree guarded");
    }

    /// Scope entries that name no path as written: a pattern takes its folder (the whole tree
    /// from the top), a line number is dropped, an absolute path inside the workspace is made
    /// relative and one outside (or climbing out) is kept apart, never read as relative.
    #[test]
    fn scope_entries_name_the_files_they_mean() {
        let read = |w: &str| read_path(w, "/repo");
        assert_eq!(read("src/*.txt"), ("src".into(), Reading::Pattern));
        assert_eq!(read("src/**/x?.rs"), ("src".into(), Reading::Pattern));
        assert_eq!(read("*.rs"), (String::new(), Reading::Pattern));
        assert_eq!(read("src/a.txt:1"), ("src/a.txt".into(), Reading::LineRemoved));
        assert_eq!(read("src/a.txt:12-20"), ("src/a.txt".into(), Reading::LineRemoved));
        assert_eq!(read("src/a.txt:12:4"), ("src/a.txt".into(), Reading::LineRemoved));
        assert_eq!(read("src/a:b.txt"), ("src/a:b.txt".into(), Reading::Path));
        assert_eq!(read("/repo/src/a.txt"), ("src/a.txt".into(), Reading::MadeRelative));
        assert_eq!(read("/repo/src/a.txt:3"), ("src/a.txt".into(), Reading::MadeRelative));
        assert_eq!(read("/repository/a.txt"), ("/repository/a.txt".into(), Reading::Outside));
        assert_eq!(read("../other/a.txt"), ("../other/a.txt".into(), Reading::Outside));
        assert_eq!(read("./src/"), ("src".into(), Reading::Path));
        // `.` and `..` as written: inside stays inside, the top is the whole workspace.
        assert_eq!(read("sub/../sub/f"), ("sub/f".into(), Reading::Path));
        assert_eq!(read("sub/./f"), ("sub/f".into(), Reading::Path));
        assert_eq!(read("."), (String::new(), Reading::Path));
        assert_eq!(read("./"), (String::new(), Reading::Path));
        assert_eq!(read("/repo"), (String::new(), Reading::MadeRelative));
        assert_eq!(read("/repo/"), (String::new(), Reading::MadeRelative));
        assert_eq!(read("/repo/x/../a.txt"), ("a.txt".into(), Reading::MadeRelative));
        assert_eq!(read("/repo/../etc/passwd"), ("/etc/passwd".into(), Reading::Outside));
        assert_eq!(read("sub/../../x"), ("sub/../../x".into(), Reading::Outside));
        assert_eq!(read("sub/../*.rs"), (String::new(), Reading::Pattern));
        let spec = parse(
            "---\nspec_version: '2.0'\ntask_id: t\nstatus: draft\n---\n# T\n## Scope\n\n- `src/*.txt` - texts\n- `lib/a.rs:4` - one\n\n## Phase 1: A\n\nAcceptance:\n- [ ] `a` test - x\n  - Command: true\n",
        )
        .spec;
        assert_eq!(scope(&spec, &[], "/repo"), vec!["lib/a.rs", "src"]);
        assert_eq!(scope(&spec, &["**/*.rs".into(), "x".into()], "/repo"), Vec::<String>::new(), "the whole tree");
        for whole in [".", "./", "*", "/repo"] {
            let entries = scope_entries(&spec, &[whole.into()], "/repo");
            assert_eq!(entries.len(), 1, "{whole}: the whole workspace is an entry, not nothing");
            assert_eq!(entries[0].path, "", "{whole}");
        }
        // Written in the spec's Scope, a bare glob is declared as the same entry a hint is.
        for (whole, reading) in [("*", Reading::Pattern), ("**", Reading::Pattern), (".", Reading::Path)] {
            let text = format!(
                "---\nspec_version: '2.0'\ntask_id: t\nstatus: draft\n---\n# T\n## Scope\n\n- `{whole}` - all\n\n## Phase 1: A\n\nAcceptance:\n- [ ] `a` test - x\n  - Command: true\n"
            );
            let entries = scope_entries(&parse(&text).spec, &[], "/repo");
            assert_eq!(entries, vec![ScopeEntry { written: whole.into(), path: String::new(), reading }], "{whole}");
        }
        let text = "---\nspec_version: '2.0'\ntask_id: t\nstatus: draft\n---\n# T\n## Scope\n\n- `src*` - sources\n- multiply with `a * b` in `calc.rs`\n\n## Phase 1: A\n\nAcceptance:\n- [ ] `a` test - x\n  - Command: true\n";
        assert_eq!(scope(&parse(text).spec, &[], "/repo"), Vec::<String>::new(), "`src*` is a top-level glob");
        let spaced: Vec<String> =
            scope_entries(&parse(text).spec, &[], "/repo").into_iter().map(|e| e.written).collect();
        assert_eq!(spaced, ["src*", "calc.rs"], "a spaced `a * b` is no path");
    }
}
