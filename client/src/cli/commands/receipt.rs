//! `scafld finalize` (close a task with a signed receipt) and `scafld verify` (the merge wall:
//! exit 0 verified, 3 failed, 2 usage or runtime error).

use scafld_protocol::methods as m;
use scafld_protocol::receipt::Envelope;

use super::exec::caller;
use super::tasks::{call, session as connect_workspace};
use crate::cli::exit::{verify as codes, workflow};
use crate::cli::output::{CliError, padded};
use crate::cli::workspace::find_root;
use crate::cli::{Context, FinalizeArgs, VerifyArgs};

/// The request `finalize --stdin` reads, as the original tool's finalize transport writes it.
#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct StdinRequest {
    #[serde(default)]
    task_id: String,
    #[serde(default)]
    root: String,
    #[serde(default)]
    base_ref: String,
    #[serde(default)]
    scope_hint: Vec<String>,
}

/// Most a request on stdin may be: a few paths and names.
const MAX_STDIN_REQUEST: u64 = 1 << 20;

fn stdin_request() -> Result<StdinRequest, CliError> {
    use std::io::Read as _;
    let mut text = String::new();
    std::io::stdin().take(MAX_STDIN_REQUEST + 1).read_to_string(&mut text).map_err(|e| {
        CliError::usage(format!("finalize --stdin: cannot read stdin as text: {e}"))
            .with_hint("send one JSON object: {\"task_id\": \"<id>\"}")
    })?;
    if text.len() as u64 > MAX_STDIN_REQUEST {
        return Err(CliError::usage(format!("finalize --stdin: the request is over {MAX_STDIN_REQUEST} bytes")));
    }
    if text.trim().is_empty() {
        return Ok(StdinRequest::default());
    }
    serde_json::from_str(&text).map_err(|e| {
        CliError::usage(format!(
            "finalize --stdin: the request is not one JSON object of task_id, root, base_ref and scope_hint: {e}"
        ))
        .with_hint("send e.g. {\"task_id\": \"<id>\", \"scope_hint\": [\"src/\"]}, or drop --stdin")
    })
}

pub fn finalize(ctx: &Context, args: &FinalizeArgs) -> Result<u8, CliError> {
    let request = if args.stdin { stdin_request()? } else { StdinRequest::default() };
    let typed = args.task.task_id.clone().or_else(|| args.task.task.clone());
    let task_id = match (typed, request.task_id.trim()) {
        (Some(typed), sent) if !sent.is_empty() && sent != typed => {
            return Err(CliError::usage(format!(
                "finalize: the task id `{typed}` differs from the task_id `{sent}` sent on stdin"
            ))
            .with_hint("name one task: drop the argument or the stdin task_id"));
        }
        (None, sent) if !sent.is_empty() => sent.to_string(),
        _ => args.task.resolve()?,
    };
    // The command line's root first, then the request's, then the usual search.
    let sent_root = (!request.root.trim().is_empty()).then(|| std::path::PathBuf::from(&request.root));
    let root = find_root(ctx.global.root.as_deref().or(sent_root.as_deref()))?.display().to_string();
    let mut conn = ctx.connect()?;
    // Typed: relative to the folder it was typed in, sent relative to the workspace. Sent on
    // stdin: relative to the workspace already, as the original's transport writes them.
    let scope_hints = match args.scope_hints.is_empty() {
        false => crate::cli::workspace::typed_paths(std::path::Path::new(&root), "--scope-hint", &args.scope_hints)?,
        true => request.scope_hint,
    };
    let base_ref = args.base_ref.clone().or_else(|| (!request.base_ref.trim().is_empty()).then_some(request.base_ref));
    let params = m::FinalizeParams { root, task_id, base_ref, scope_hints, caller: caller() };
    let r = call::<m::TaskFinalize>(&mut conn, &params)?;
    let human = || {
        let mut text = match (&r.receipt_path, &r.blocked) {
            (Some(path), _) if r.already => format!("{} was already finalized; receipt {path}", r.task_id),
            (Some(path), _) => format!("finalized {}: receipt {path}", r.task_id),
            (None, Some(why)) => format!("{} not finalized: {why}", r.task_id),
            (None, None) => format!("{} not finalized", r.task_id),
        };
        if let Some(note) = &r.note {
            text.push_str(&format!("\nnote: {note}"));
        }
        if let Some(receipt) = &r.receipt {
            let b = &receipt.body;
            text.push_str(&format!(
                "\n  {} file(s), tree {}, ledger head {}\n  reviewer {}, independence {}\n  signed by {}",
                b.file_digests.len(),
                short(&b.tree_sha),
                short(&b.ledger_head),
                b.reviewer.provider,
                b.independence.level,
                receipt.signature.key_id
            ));
        }
        for c in r.criteria.iter().filter(|c| c.status != m::CriterionStatus::Pass) {
            text.push_str(&format!("\n  {} `{}`: {}", c.status, c.criterion_id, c.reason));
        }
        text.push_str(&format!("\nnext: {}", r.next_command));
        text
    };
    let refused = (!r.finalized).then(|| {
        CliError::new("review_gate_blocked", format!("{} is not finalized", r.task_id), workflow::REVIEW_GATE)
            .with_hint(format!("next: {}", r.next_command))
    });
    ctx.out.document(&r, refused, human);
    Ok(if r.finalized { workflow::OK } else { workflow::REVIEW_GATE })
}

pub fn verify(ctx: &Context, args: &VerifyArgs) -> Result<u8, CliError> {
    let params = |root: String| m::VerifyParams {
        root,
        receipt: args.receipt.clone(),
        target: args.target.clone(),
        material_ref: args.material_ref.clone(),
        // The daemon works from elsewhere: a relative folder is the caller's.
        acceptance_root: args
            .acceptance_root
            .as_deref()
            .map(|path| std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()).display().to_string()),
        trusted_keys: args.trusted_keys.clone(),
        trust_ref: args.trust_ref.clone(),
        material_only: args.material_only,
        ci: args.ci,
        self_check: args.self_check,
        caller: caller(),
    };
    let r = connect_workspace(ctx)
        .and_then(|(root, mut conn)| call::<m::ReceiptVerify>(&mut conn, &params(root)))
        .map_err(|e| CliError { exit_code: codes::ERROR, ..e })?;
    let failed = (!r.verified).then(|| {
        let check = r.checks.iter().find(|c| !c.ok).map(|c| format!(": {} {}", c.name, c.detail)).unwrap_or_default();
        CliError::new("verification_failed", format!("{} is not verified{check}", r.receipt_path), codes::FAILED)
    });
    ctx.out.document(&r, failed, || {
        let mut text = format!(
            "{} {}{}",
            r.receipt_path,
            if r.verified { "verified" } else { "NOT verified" },
            if r.task_id.is_empty() { String::new() } else { format!(" (task {})", r.task_id) }
        );
        if !r.trust_source.is_empty() {
            text.push_str(&format!("\n  trust: {}", r.trust_source));
        }
        for c in &r.checks {
            text.push_str(&format!("\n  {} {:<12} {}", if c.ok { "ok  " } else { "FAIL" }, c.name, c.detail));
        }
        text
    });
    Ok(if r.verified { codes::VERIFIED } else { codes::FAILED })
}

/// Render a receipt file; nothing is checked here (that is `verify`).
pub fn show(ctx: &Context, path: Option<&std::path::Path>) -> Result<u8, CliError> {
    let path = match path {
        Some(path) => path.to_path_buf(),
        None => find_root(ctx.global.root.as_deref())?.join(".scafld/receipts/latest.json"),
    };
    let text = scafld_local::capped::read_text(&path, "receipt", scafld_protocol::receipt::MAX_RECEIPT_BYTES).map_err(
        |e| match e.refusal {
            scafld_local::capped::Refusal::Io(_) => CliError::new("not_found", e.to_string(), workflow::RUNTIME),
            _ => CliError::new("invalid_input", e.to_string(), workflow::VALIDATION),
        },
    )?;
    let receipt: Envelope = serde_json::from_str(&text).map_err(|e| {
        CliError::new("invalid_input", format!("{} is not a receipt: {e}", path.display()), workflow::VALIDATION)
    })?;
    ctx.out.success(&receipt, || render(&receipt));
    Ok(workflow::OK)
}

fn render(receipt: &Envelope) -> String {
    let b = &receipt.body;
    let mut text = format!(
        "receipt for {}: {} (minted {})
  scope: {}
  files: {}{} ({} shown to the reviewer, {} not), tree {}
  commits: base {} -> head {} ({})",
        b.task_id,
        b.verdict,
        b.minted_at,
        scafld_protocol::text::listed(&b.scope),
        b.file_digests.len(),
        match b.file_digests.values().filter(|d| *d == scafld_protocol::receipt::DELETED).count() {
            0 => String::new(),
            deleted => format!(", {deleted} signed as deleted"),
        },
        b.reviewed_context_provenance.iter().filter(|p| p.kind == "file").count(),
        b.ignored_unreviewed.len(),
        short(&b.tree_sha),
        short(&b.base_commit),
        short(&b.head_commit),
        b.snapshot_mode,
    );
    let model = if b.reviewer.model.is_empty() { String::new() } else { format!(" ({})", b.reviewer.model) };
    text.push_str(&format!(
        "
  reviewer: {}{model}; host: {}; independence: {}{}",
        b.reviewer.provider,
        b.host_under_review.agent,
        b.independence.level,
        if b.independence.reason.is_empty() { String::new() } else { format!(" ({})", b.independence.reason) }
    ));
    text.push_str(&format!(
        "
  acceptance ({}):",
        b.acceptance.len()
    ));
    for a in &b.acceptance {
        // A manual criterion runs nothing: its line names the person and the evidence signed.
        let what = if a.evidence_actor.is_empty() {
            a.command.clone()
        } else if a.evidence_sha256.is_empty() {
            format!("manual, by {} at {}", a.evidence_actor, a.evidence_recorded_at)
        } else {
            format!(
                "manual, by {} at {} (evidence {})",
                a.evidence_actor,
                a.evidence_recorded_at,
                short(&a.evidence_sha256)
            )
        };
        text.push_str(&format!(
            "
    {:<5} {} {}",
            a.status,
            padded(&a.id, 12),
            what
        ));
    }
    if !b.open_blockers.is_empty() {
        text.push_str(&format!(
            "
  open blockers: {}",
            b.open_blockers.len()
        ));
    }
    text.push_str(&format!(
        "
  ledger head: {}
  signed by {} ({})",
        short(&b.ledger_head),
        receipt.signature.key_id,
        receipt.signature.alg
    ));
    text
}

fn short(digest: &str) -> &str {
    digest.char_indices().nth(12).map_or(digest, |(i, _)| &digest[..i])
}
