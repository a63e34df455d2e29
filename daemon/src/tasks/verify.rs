//! `receipt.verify`: the merge wall. Every check runs and says what it found, so a failure
//! reads in one screen: which file's digest differs, which criterion failed, which key is
//! unknown, revoked or expired. Trust anchors come from flags, `SCAFLD_*` variables or the
//! committed defaults, never from local configuration.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use scafld_protocol::ErrorKind;
use scafld_protocol::methods::{self as m, VerifyCheck};
use scafld_protocol::receipt::{Envelope, IndependenceLevel, SnapshotMode};
use scafld_protocol::vocab::CriterionStatus;
use tokio_util::sync::CancellationToken;

use crate::baseline;
use crate::daemon::Daemon;
use crate::domain::receipt;
use crate::error::{RpcError, RpcResult};
use crate::receipts;

/// How many differing files a failure names before it summarises.
const FILES_NAMED: usize = 8;

pub async fn verify(daemon: &Arc<Daemon>, p: m::VerifyParams) -> RpcResult<m::VerifyResult> {
    let root = PathBuf::from(&p.root);
    let env = &p.caller.env;
    let ci = p.ci || env.get("CI").is_some_and(|v| !matches!(v.trim(), "" | "0" | "false" | "FALSE" | "False"));
    let chosen = |flag: &Option<String>, var: &str, default: &str| {
        flag.clone()
            .or_else(|| env.get(var).filter(|v| !v.is_empty()).cloned())
            .map(|p| root.join(p))
            .unwrap_or_else(|| root.join(default))
    };
    let receipt_path = chosen(&p.receipt, "SCAFLD_RECEIPT_PATH", ".scafld/receipts/latest.json");
    let keys_path = chosen(&p.trusted_keys, "SCAFLD_TRUSTED_KEYS", ".scafld/trusted-keys.json");
    let shown = |path: &Path| path.strip_prefix(&root).unwrap_or(path).display().to_string();
    if p.self_check {
        return Ok(self_check(&receipt_path, &keys_path, env, &shown(&receipt_path)));
    }
    if ci && p.target.is_none() {
        return Err(RpcError::new(ErrorKind::InvalidInput, "verify in CI needs --target (the protected commit)")
            .with_hint("pass --target origin/main (or the merge base you protect)"));
    }
    if ci && !keys_path.exists() {
        return Err(RpcError::new(
            ErrorKind::InvalidInput,
            format!("verify in CI needs trusted keys; {} does not exist", shown(&keys_path)),
        )
        .with_hint("commit .scafld/trusted-keys.json (scafld init writes it) or pass --trusted-keys"));
    }
    let target = p.target.clone().unwrap_or_else(|| "HEAD".into());
    let mut result = m::VerifyResult {
        verified: false,
        receipt_path: shown(&receipt_path),
        task_id: String::new(),
        checks: Vec::new(),
    };
    let mut check = |name: &str, outcome: Result<String, String>| result.checks.push(named(name, outcome));
    let envelope = match read_envelope(&receipt_path) {
        Ok(envelope) => envelope,
        Err(e) => {
            check("receipt", Err(e));
            return Ok(result);
        }
    };
    let body = &envelope.body;
    check("receipt", Ok(format!("{} minted {} for {}", body.verdict, body.minted_at, body.task_id)));
    check(
        "body",
        receipt::validate_body(body).map(|_| "required fields present; every signed file accounted for".into()),
    );
    let keys = receipts::read_trusted_keys(&keys_path);
    check(
        "signature",
        keys.and_then(|keys| receipt::check_signature(&envelope, &keys))
            .map(|_| format!("signed by trusted key {}", envelope.signature.key_id)),
    );
    let at = p.material_ref.clone().unwrap_or_else(|| target.clone());
    check("files", check_files(&root, &envelope, &at).await);
    check("base", check_base(&root, &body.base_commit, &target).await);
    if p.material_only {
        check("acceptance", Ok("not re-run (--material-only)".into()));
    } else {
        check("acceptance", rerun_recorded(daemon, &root, &envelope, env).await);
    }
    check("independence", check_independence(&root, &envelope));
    result.task_id = body.task_id.clone();
    result.verified = result.checks.iter().all(|c| c.ok);
    Ok(result)
}

/// The receipt's independence against `verify.min_independence` of the committed config.
fn check_independence(root: &Path, envelope: &Envelope) -> Result<String, String> {
    let required = crate::config::verify_min_independence(root).map_err(|e| e.to_string())?;
    let required: IndependenceLevel = serde_json::from_value(serde_json::Value::String(required.clone()))
        .map_err(|_| format!("verify.min_independence {required:?} is not isolation_only or cross_vendor"))?;
    let level = envelope.body.independence.level;
    let shown = format!("{level:?}{}", downgraded(envelope));
    if level >= required {
        Ok(format!("{shown}; required {required:?}"))
    } else {
        Err(format!("{shown}; verify.min_independence requires {required:?}"))
    }
}

fn downgraded(envelope: &Envelope) -> String {
    let i = &envelope.body.independence;
    match i.downgraded {
        Some(why) => format!(" (downgraded: {why:?}; {})", i.reason),
        None => String::new(),
    }
}

/// The first 12 characters of a digest or commit (all of a shorter one: receipts are input).
fn short(text: &str) -> &str {
    text.char_indices().nth(12).map_or(text, |(i, _)| &text[..i])
}

fn read_envelope(path: &Path) -> Result<Envelope, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{} is not a receipt: {e}", path.display()))
}

/// The signed files against the files at `at`: the same digest for each, and (for a working
/// tree receipt) no file of the scope left out.
async fn check_files(root: &Path, envelope: &Envelope, at: &str) -> Result<String, String> {
    let body = &envelope.body;
    // The per-file digests are the content check; `tree_sha` is covered by the signature, and
    // its formula is each tool's own, so another tool's receipt is not held to this one's.
    let tree = if receipt::tree_sha(&body.file_digests) == body.tree_sha {
        "tree_sha recomputed"
    } else {
        "tree_sha from another tool"
    };
    let (root_owned, scope, rev) = (root.to_path_buf(), body.scope.clone(), at.to_string());
    let now = tokio::task::spawn_blocking(move || baseline::tree_files(&root_owned, &scope, Some(&rev)))
        .await
        .map_err(|e| e.to_string())??;
    let mut problems = Vec::new();
    for (path, signed) in &body.file_digests {
        match now.files.get(path) {
            None => problems.push(format!("{path}: signed but missing at {at}")),
            Some(digest) if digest != signed => {
                problems.push(format!("{path}: digest differs (signed {}, {at} has {})", short(signed), short(digest)))
            }
            Some(_) => {}
        }
    }
    if body.snapshot_mode == SnapshotMode::WorkingTree {
        for path in now.files.keys().filter(|p| !body.file_digests.contains_key(*p)) {
            problems.push(format!("{path}: in scope at {at} but not signed"));
        }
    }
    if problems.is_empty() {
        return Ok(format!("{} file(s) match at {at} ({}; {tree})", body.file_digests.len(), short(&now.commit)));
    }
    let more = problems.len().saturating_sub(FILES_NAMED);
    problems.truncate(FILES_NAMED);
    if more > 0 {
        problems.push(format!("... and {more} more"));
    }
    Err(problems.join("; "))
}

async fn check_base(root: &Path, base: &str, target: &str) -> Result<String, String> {
    let (root, base_owned, target_owned) = (root.to_path_buf(), base.to_string(), target.to_string());
    let ancestor = tokio::task::spawn_blocking(move || baseline::is_ancestor(&root, &base_owned, &target_owned))
        .await
        .map_err(|e| e.to_string())??;
    if ancestor {
        Ok(format!("base {} is an ancestor of {target}", short(base)))
    } else {
        Err(format!("base {} is not an ancestor of {target}", short(base)))
    }
}

/// Run each recorded acceptance command again in the checkout; every one must pass.
async fn rerun_recorded(
    daemon: &Arc<Daemon>,
    root: &Path,
    envelope: &Envelope,
    env: &BTreeMap<String, String>,
) -> Result<String, String> {
    let ws = daemon.workspace(&root.display().to_string()).await.map_err(|e| e.0.message)?;
    let config = ws.config().map_err(|e| e.to_string())?;
    let commands = super::exec::CommandSetup::new(&ws, &config, env);
    let mut ran = 0;
    for record in &envelope.body.acceptance {
        if record.command.is_empty() || record.expected_kind == "manual" {
            continue;
        }
        let criterion = crate::domain::spec::Criterion {
            id: record.id.clone(),
            command: record.command.clone(),
            expected_kind: record.expected_kind.clone(),
            ..Default::default()
        };
        let (request, diagnostics) = commands.request(&envelope.body.task_id, &criterion);
        let (outcome, _) = crate::runner::run(request, diagnostics, CancellationToken::new(), |_| {}).await;
        let observed = super::exec::judge(criterion.effective_kind(), &criterion, &outcome);
        if observed.status != CriterionStatus::Pass {
            return Err(format!(
                "criterion `{}` ({}) is {}: {}",
                record.id, record.command, observed.status, observed.reason
            ));
        }
        ran += 1;
    }
    Ok(format!("{ran} recorded command(s) pass"))
}

/// One check's line: passed with a detail, or failed with the reason.
fn named(name: &str, outcome: Result<String, String>) -> VerifyCheck {
    let (ok, detail) = match outcome {
        Ok(detail) => (true, detail),
        Err(detail) => (false, detail),
    };
    VerifyCheck { name: name.into(), ok, detail }
}

/// The wiring: the receipt and keys files, and this host's key.
fn self_check(receipt: &Path, keys: &Path, env: &BTreeMap<String, String>, shown: &str) -> m::VerifyResult {
    let mut checks = Vec::new();
    let mut push = |name: &str, outcome: Result<String, String>| checks.push(named(name, outcome));
    push(
        "receipt",
        if receipt.exists() {
            Ok(format!("{} exists", receipt.display()))
        } else {
            Err(format!("{} does not exist", receipt.display()))
        },
    );
    let trusted = receipts::read_trusted_keys(keys);
    push(
        "trusted keys",
        trusted.as_ref().map(|k| format!("{} key(s) in {}", k.keys.len(), keys.display())).map_err(Clone::clone),
    );
    let host = receipts::host_key_path(env)
        .ok_or_else(|| "no config folder for the host key".to_string())
        .and_then(|path| receipts::host_key(&path, false).map(|k| (path, k)));
    push(
        "host key",
        match (&host, &trusted) {
            (Ok((path, key)), Ok(keys)) => {
                let id = receipt::key_id(&key.verifying_key().to_bytes());
                if keys.keys.iter().any(|k| k.key_id == id) {
                    Ok(format!("{} ({id}) is trusted", path.display()))
                } else {
                    Err(format!("{} ({id}) is not in the trusted keys", path.display()))
                }
            }
            (Err(e), _) => Err(e.clone()),
            (Ok(_), Err(_)) => Err("cannot tell: the trusted keys did not read".into()),
        },
    );
    let verified = checks.iter().all(|c| c.ok);
    m::VerifyResult { verified, receipt_path: shown.to_string(), task_id: String::new(), checks }
}
