//! `review.diff`: a review session over a plain git range (`BASE..HEAD`) with no task spec. The
//! caller's context file (an issue description) is injected into the packet; an empty range
//! passes without spawning anyone.

use std::sync::Arc;

use scafld_protocol::ErrorKind;
use scafld_protocol::methods::{self as m};
use scafld_protocol::vocab::{Approval, ReviewMode};
use sha2::{Digest, Sha256};

use super::{Baseline, Overrides, Packet, Spawn, Templates, requested_reviewers};
use crate::baseline;
use crate::clock;
use crate::daemon::Daemon;
use crate::domain::consensus::{self, Outcome};
use crate::domain::dossier::Request;
use crate::domain::job::{SessionRecord, Subject};
use crate::domain::packet::{self, Section};
use crate::error::{RpcError, RpcResult};

pub async fn review_diff(daemon: &Arc<Daemon>, p: m::DiffReviewParams) -> RpcResult<m::SpawnResult> {
    let ws = daemon.review_workspace(&p.root).await?;
    let kept_in = ws.is_bare().then(|| ws.data.display().to_string());
    let config = ws.config()?;
    let context = p.context.unwrap_or_default();
    // Larger ones are refused (the packet budget would drop them anyway).
    if context.len() > m::MAX_CONTEXT_BYTES {
        return Err(RpcError::new(
            ErrorKind::InvalidInput,
            format!("the context file is {} bytes; at most {} are accepted", context.len(), m::MAX_CONTEXT_BYTES),
        ));
    }
    let reviewers = requested_reviewers(&p.reviewers, p.provider.as_deref(), &config)?;
    let approval = Approval::Auto;
    let root = ws.root.clone();
    let range = p.range.clone();
    let (files, patch) = baseline::off_runtime(move || baseline::range_diff(&root, &range)).await?.map_err(|e| {
        RpcError::new(ErrorKind::InvalidInput, e).with_hint("pass --diff BASE..HEAD with two revisions git knows")
    })?;
    let context_digest = format!("{:x}", Sha256::digest(context.as_bytes()));
    if files.is_empty() {
        return Ok(m::SpawnResult { kept_in, ..empty_range(daemon, &ws, &p.range, context_digest) });
    }
    let dossier = &config.review.dossier;
    let request = Request {
        mode: ReviewMode::Discover,
        max_findings: dossier.max_findings,
        min_attack_angles: dossier.min_attack_angles,
        depth: dossier.review_depth.clone(),
    };
    let packet = packet(&p.range, &context, &files, &patch, &request, config.review.context.budget())
        .map_err(|e| RpcError::new(ErrorKind::InvalidInput, e))?;
    super::spawn(
        daemon,
        Spawn {
            ws: ws.clone(),
            config: &config,
            caller: &p.caller,
            subject: Subject::Range(p.range),
            reviewers,
            approval,
            packet: Packet {
                text: packet,
                request,
                preflight: "no acceptance evidence applies to a plain diff range".into(),
                files,
                task_changes: None,
            },
            baseline: Baseline::default(),
            overrides: Overrides { model: p.model, reasoning: p.codex_reasoning, provider_command: p.provider_command },
            context_digest,
            templates: Templates::default(),
            builders: Vec::new(),
        },
    )
    .map(|spawned| m::SpawnResult { kept_in, ..spawned })
}

/// An empty range is a pass with no reviewer spawned; the session records it so `wait` finds it.
fn empty_range(
    daemon: &Daemon,
    ws: &crate::workspace::Workspace,
    range: &str,
    context_digest: String,
) -> m::SpawnResult {
    let key = crate::workspace::layout::new_id().unwrap_or_else(|_| clock::now_rfc3339());
    let session = SessionRecord {
        key: key.clone(),
        workspace_id: ws.id.clone(),
        root: ws.root.display().to_string(),
        began_in: ws.root.display().to_string(),
        subject: Subject::Range(range.to_string()),
        created_at: clock::now_rfc3339(),
        approval: Approval::Auto,
        request: Request::default(),
        preflight: "empty diff: nothing to review".into(),
        context_digest,
        ..SessionRecord::default()
    };
    daemon.sessions.add(daemon.store(), ws, session, |session| {
        let mut result =
            consensus::wait_result(&session.key, session.iteration, &[], Outcome::Pass, consensus::Question::Change);
        result.gate = Some(Outcome::Pass.into());
        session.result = Some(result);
    });
    daemon.jobs.touch();
    m::SpawnResult { session_key: key, resolved: Some("pass".into()), ..m::SpawnResult::default() }
}

fn packet(
    range: &str,
    context: &str,
    files: &[String],
    patch: &str,
    request: &Request,
    budget: packet::Budget,
) -> Result<String, String> {
    let mut sections = vec![
        Section::derived(
            "review_context",
            "Issue Context",
            "--context-file",
            if context.trim().is_empty() { "(no context file given)".into() } else { context.trim_end().to_string() },
            true,
        ),
        packet::request_section(request, &format!("Range: {range}")),
        Section::derived(
            "changed_files",
            "Changed Files",
            &format!("git diff --name-only {range}"),
            packet::list(files),
            true,
        ),
        Section::derived(
            "range_diff",
            "Diff",
            &format!("git diff {range}"),
            packet::fenced("diff", patch.trim_end()),
            false,
        ),
    ];
    sections.extend(packet::answer_sections(request));
    packet::render(&packet::Header { task_id: range, title: "git range review", status: "review" }, &sections, budget)
}
