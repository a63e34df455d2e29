//! Template reviews (`review.template`, `review.templates`, `review.result`,
//! `review.history`): a template review is a review session whose reviewers run a template
//! instead of the gate's dossier review, under the same jobs, providers and mutation guard.

use std::collections::BTreeMap;
use std::sync::Arc;

use scafld_protocol::ErrorKind;
use scafld_protocol::methods as m;
use scafld_protocol::vocab::{Approval, ReviewMode, TemplateSeverity, TemplateVerdict};

use super::{Baseline, Overrides, Packet, Spawn, Templates, requested_reviewers};
use crate::baseline;
use crate::clock;
use crate::daemon::Daemon;
use crate::domain::dossier::Request;
use crate::domain::job::{SessionRecord, Subject, TemplateJob};
use crate::domain::template;
use crate::error::{RpcError, RpcResult};
use crate::templates;

pub async fn list(daemon: &Arc<Daemon>, p: m::WorkspaceRootParams) -> RpcResult<m::TemplateListResult> {
    let ws = daemon.workspace_to_read(&p.root).await?;
    let (loaded, errors) = templates::load_all(&ws.root);
    Ok(m::TemplateListResult { templates: loaded.iter().map(templates::info).collect(), errors })
}

pub async fn start(daemon: &Arc<Daemon>, p: m::TemplateReviewParams) -> RpcResult<m::TemplateReviewStarted> {
    let ws = daemon.workspace(&p.root).await?;
    let config = ws.config()?;
    let chosen = templates::find(&ws.root, &p.template)?;
    let cwd = match p.cwd.as_deref().filter(|c| !c.is_empty()) {
        Some(dir) => std::path::PathBuf::from(&p.caller.cwd).join(dir),
        None if !p.caller.cwd.is_empty() => std::path::PathBuf::from(&p.caller.cwd),
        None => ws.root.clone(),
    };
    let cwd =
        cwd.canonicalize().ok().filter(|c| c.is_dir()).ok_or_else(|| {
            RpcError::new(ErrorKind::InvalidInput, format!("--cwd {} is not a directory", cwd.display()))
        })?;
    let mut given: BTreeMap<String, String> = p.inputs.clone();
    if chosen.optional.iter().chain(&chosen.required).any(|i| i.name == "cwd") {
        given.insert("cwd".into(), cwd.display().to_string());
    }
    let inputs = chosen.resolve_inputs(&given).map_err(|e| {
        RpcError::new(ErrorKind::InvalidInput, e)
            .with_hint(format!("pass the inputs of `{}` (see `scafld review list`)", chosen.name))
    })?;
    let reviewers = requested_reviewers(&p.reviewers, None, &config)?;
    if reviewers.iter().any(|r| r == "worker") {
        return Err(RpcError::new(
            ErrorKind::InvalidInput,
            "template reviews run with codex, claude, gemini or command, not a worker",
        ));
    }
    // A template review with no reviewer that can run is an error now, naming what is missing,
    // not an UNKNOWN result later.
    let (runnable, missing) = super::available(&reviewers, &config, &p.caller, p.provider_command.as_deref(), &[])?;
    if runnable.is_empty() {
        return Err(RpcError::new(
            ErrorKind::ReviewFailed,
            format!("no reviewer can run this template review: {} not found on your PATH", missing.join(", ")),
        )
        .with_hint(format!(
            "install {}, or use --provider command --provider-command CMD",
            crate::providers::installs(&missing)
        )));
    }
    // The read-only guard needs a snapshot to compare with; without one the review fails closed.
    let root = ws.root.clone();
    let snapshot = baseline::off_runtime(move || baseline::guard_snapshot(&root, &[], &[])).await?.map_err(|e| {
        RpcError::new(
            ErrorKind::WorkspaceError,
            format!("template reviews run under the mutation guard, which needs git: {e}"),
        )
        .with_hint("run template reviews inside a git repository (`git init`)")
    })?;
    let packet = template::packet(&chosen, &chosen.build_prompt(&inputs));
    let dossier = &config.review.dossier;
    // `diff` names revisions (a ref, or BASE..HEAD): one git does not know is refused here, as
    // `review --diff` refuses it, never handed to a reviewer to review nothing.
    let files = match inputs.get("diff").map(|d| d.trim().to_string()).filter(|d| !d.is_empty()) {
        Some(diff) => {
            let root = ws.root.clone();
            baseline::off_runtime(move || match diff.contains("..") {
                true => baseline::range_diff(&root, &diff).map(|(files, _)| files),
                false => baseline::known_revision(&root, &diff).map(|()| Vec::new()),
            })
            .await?
            .map_err(|e| {
                RpcError::new(ErrorKind::InvalidInput, format!("--diff: {e}"))
                    .with_hint("pass --diff REF or BASE..HEAD with revisions git knows")
            })?
        }
        None => Vec::new(),
    };
    let session = super::spawn(
        daemon,
        Spawn {
            ws: ws.clone(),
            config: &config,
            caller: &p.caller,
            subject: Subject::Template {
                name: chosen.name.clone(),
                range: inputs.get("diff").cloned().unwrap_or_default(),
            },
            reviewers,
            approval: Approval::Auto,
            packet: Packet {
                text: packet,
                request: Request {
                    mode: ReviewMode::Discover,
                    max_findings: dossier.max_findings,
                    min_attack_angles: 1,
                    depth: dossier.review_depth.clone(),
                },
                preflight: format!("template review `{}`; no acceptance evidence applies", chosen.name),
                files,
                task_changes: None,
            },
            baseline: Baseline { scope: Vec::new(), snapshot, tree: String::new(), since: None },
            overrides: Overrides { provider_command: p.provider_command.clone(), ..Overrides::default() },
            context_digest: format!("template:{}", chosen.name),
            templates: Templates {
                standalone: Some(TemplateJob {
                    name: chosen.name.clone(),
                    inputs,
                    cwd: cwd.display().to_string(),
                    provider: String::new(),
                }),
                passes: Vec::new(),
            },
            builders: Vec::new(),
        },
    )?;
    let result = if p.wait_seconds > 0.0 {
        let wait = m::ReviewWaitParams {
            root: p.root.clone(),
            session_key: Some(session.session_key.clone()),
            timeout_seconds: p.wait_seconds,
            caller_identity: String::new(),
        };
        super::wait(daemon, wait, None).await?.template_result
    } else {
        None
    };
    Ok(m::TemplateReviewStarted { session, result })
}

/// `review.result`: a template session's result once it has settled (bounded wait).
pub async fn result(daemon: &Arc<Daemon>, p: m::ReviewWaitParams) -> RpcResult<Option<m::TemplateReviewResult>> {
    let ws = daemon.workspace_to_read(&p.root).await?;
    let session = match p.session_key.as_deref() {
        None => daemon.sessions.latest_for_caller(&ws, &p.caller_identity).map(|(s, _)| s),
        key => Some(super::find(daemon, &ws, key, None)?),
    };
    let session = session.map(Ok).unwrap_or_else(|| super::find(daemon, &ws, None, None))?;
    if session.subject.template().is_none() {
        return Err(RpcError::new(
            ErrorKind::InvalidInput,
            format!("session {} is not a template review", session.key),
        )
        .with_hint("`scafld review wait` reads task and range reviews"));
    }
    let p = m::ReviewWaitParams { session_key: Some(session.key), ..p };
    Ok(super::wait(daemon, p, None).await?.template_result)
}

/// `review.history`: the workspace's settled template reviews, newest first.
pub async fn history(daemon: &Arc<Daemon>, p: m::WorkspaceRootParams) -> RpcResult<m::ReviewHistoryResult> {
    let ws = daemon.workspace_to_read(&p.root).await?;
    let mut sessions: Vec<_> = daemon
        .sessions
        .all()
        .into_iter()
        .filter(|s| ws.owns(&s.workspace_id) && s.subject.template().is_some())
        .collect();
    sessions.sort_by_key(|s| std::cmp::Reverse(s.seq));
    let reviews = sessions.into_iter().filter_map(|s| s.result.and_then(|w| w.template_result)).collect();
    Ok(m::ReviewHistoryResult { reviews })
}

/// A standalone template session's result: the reviewers' results combined (a reviewer with
/// none counts as UNKNOWN), under the read-only mutation guard.
pub(super) async fn outcome(daemon: &Daemon, session: &SessionRecord) -> m::TemplateReviewResult {
    let mut results = Vec::new();
    for (name, job_id) in session.reviewers.iter().zip(&session.job_ids) {
        let work = daemon.jobs.get(daemon.store(), job_id).and_then(|j| j.review).unwrap_or_default();
        let result = work.template_result.unwrap_or_else(|| m::TemplateReviewResult {
            verdict: TemplateVerdict::Unknown,
            raw_output: work.failure.map(|f| f.message).unwrap_or_default(),
            provider: name.clone(),
            ..m::TemplateReviewResult::default()
        });
        results.push((name.clone(), result));
    }
    let several = results.len() > 1;
    let verdicts: Vec<TemplateVerdict> = results.iter().map(|(_, r)| r.verdict).collect();
    let mut combined = m::TemplateReviewResult {
        verdict: crate::domain::template::combine(&verdicts),
        summary: results
            .iter()
            .map(|(_, r)| r.summary.clone())
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" | "),
        findings: results
            .iter()
            .flat_map(|(name, r)| {
                r.findings.iter().cloned().map(move |mut f| {
                    if several {
                        f.reviewer = Some(name.clone());
                    }
                    f
                })
            })
            .collect(),
        raw_output: if several {
            results.iter().map(|(n, r)| format!("--- {n}\n{}", r.raw_output)).collect::<Vec<_>>().join("\n")
        } else {
            results.first().map(|(_, r)| r.raw_output.clone()).unwrap_or_default()
        },
        template: session.subject.template().unwrap_or_default().to_string(),
        inputs: results.iter().map(|(_, r)| r.inputs.clone()).find(|i| !i.is_empty()).unwrap_or_default(),
        timestamp: clock::now_rfc3339(),
        provider: session.reviewers.join(","),
        model: results.iter().find_map(|(_, r)| r.model.clone()),
        session_key: session.key.clone(),
        ..m::TemplateReviewResult::default()
    };
    let root = std::path::PathBuf::from(&session.root);
    let after = tokio::task::spawn_blocking(move || crate::baseline::guard_snapshot(&root, &[], &[]))
        .await
        .ok()
        .and_then(Result::ok);
    let changed = match after {
        Some(after) => crate::domain::review::changed_paths(&session.snapshot, &after),
        None => vec!["(the workspace could not be snapshotted after the review)".into()],
    };
    if !changed.is_empty() {
        combined.verdict = TemplateVerdict::Fail;
        combined.findings.insert(
            0,
            m::TemplateFinding {
                severity: TemplateSeverity::Fail,
                title: "The workspace changed during review".into(),
                description: format!(
                    "changed while the reviewer ran: {}; a review must not modify files, so its verdict cannot be trusted",
                    scafld_protocol::text::listed(&changed)
                ),
                file: changed.first().cloned(),
                reviewer: Some("scafld".into()),
            },
        );
    }
    combined.counted()
}
