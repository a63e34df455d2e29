//! `receipt.verify`: the merge wall. Every check runs and says what it found, so a failure
//! reads in one screen: which file's digest differs, which criterion failed, which key is
//! unknown, revoked or expired. Trust anchors come from flags, `SCAFLD_*` variables, a commit
//! (`--trust-ref`; in CI the protected target, so a change never vouches for its own key or
//! lowers its own policy) or the working tree, never from local configuration; the answer
//! says which.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use scafld_protocol::ErrorKind;
use scafld_protocol::methods::{self as m, VerifyCheck};
use scafld_protocol::receipt::{DELETED, Envelope, IndependenceLevel, MAX_RECEIPT_BYTES, SnapshotMode};
use scafld_protocol::vocab::CriterionStatus;

use crate::baseline;
use crate::config::BASE_FILE;
use crate::daemon::Daemon;
use crate::domain::receipt::{self, FileMismatch, TrustedKeys};
use crate::error::{RpcError, RpcResult};
use crate::receipts;

/// How many differing files a failure names before it summarises.
const FILES_NAMED: usize = 8;

/// The trusted keys file, relative to the workspace.
const KEYS_FILE: &str = ".scafld/trusted-keys.json";

/// Where the trust anchor and the verify policy were read from, and what they said.
struct Trust {
    /// The trusted keys, or why they did not read.
    keys: Result<TrustedKeys, String>,
    /// Where the keys came from, for a person.
    keys_source: String,
    /// `verify.min_independence`, or why the policy did not read.
    min_independence: Result<String, String>,
    /// Where the policy came from, for a person.
    policy_source: String,
    /// The trust commit (`origin/main (1a2b3c4d5e6f)`), when there is one.
    commit: Option<String>,
    /// Whether the keys came from that commit (the fix for an untrusted key is a commit there).
    keys_from_commit: bool,
}

impl Trust {
    /// One line for the answer: both sources, once when they are the same commit.
    fn source(&self) -> String {
        let here = format!("{KEYS_FILE} in the working tree");
        match &self.commit {
            Some(label) if self.keys_from_commit => format!("{KEYS_FILE} and {BASE_FILE} at {label}"),
            None if self.keys_source == here => format!("{KEYS_FILE} and {BASE_FILE} in the working tree"),
            _ => format!("keys: {}; policy: {}", self.keys_source, self.policy_source),
        }
    }
}

/// Decide and read the trust anchor and policy. The keys: `--trusted-keys`, else
/// `SCAFLD_TRUSTED_KEYS`, else `.scafld/trusted-keys.json` at the trust commit (`--trust-ref`;
/// in CI, the target), else in the working tree. The policy: `.scafld/config.yaml` at the
/// trust commit, else in the working tree (never config.local.yaml).
async fn read_trust(root: &Path, p: &m::VerifyParams, ci: bool) -> RpcResult<Trust> {
    // A self-check reports the wiring, whatever it is; only a verification fails closed.
    let fail_closed = ci && !p.self_check;
    let env = &p.caller.env;
    let explicit = p.trusted_keys.clone().map(|path| (path, "--trusted-keys")).or_else(|| {
        env.get("SCAFLD_TRUSTED_KEYS").filter(|v| !v.is_empty()).map(|v| (v.clone(), "SCAFLD_TRUSTED_KEYS"))
    });
    let trust_ref = p.trust_ref.clone().or_else(|| if ci { p.target.clone() } else { None });
    let at_commit = match &trust_ref {
        Some(rev) => {
            let (root, rev_owned) = (root.to_path_buf(), rev.clone());
            let read = tokio::task::spawn_blocking(move || baseline::files_at(&root, &rev_owned, &[KEYS_FILE, BASE_FILE]))
                .await
                .map_err(|e| RpcError::internal(e.to_string()))?
                .map_err(|e| {
                    RpcError::new(ErrorKind::InvalidInput, format!("cannot read the trust anchor at {rev}: {e}"))
                        .with_hint("pass --trust-ref (or, in CI, --target) a commit-ish this clone has: fetch the protected branch first")
                })?;
            Some((format!("{rev} ({})", short(&read.commit)), read.files))
        }
        None => None,
    };
    let (min_independence, policy_source) = match &at_commit {
        Some((label, files)) => {
            let text = files[1].as_deref().map(String::from_utf8_lossy);
            (
                crate::config::verify_min_independence_in(text.as_deref()).map_err(|e| format!("{e} at {label}")),
                format!("{BASE_FILE} at {label}"),
            )
        }
        None => (
            crate::config::verify_min_independence(root).map_err(|e| e.to_string()),
            format!("{BASE_FILE} in the working tree"),
        ),
    };
    let shown = |path: &Path| path.strip_prefix(root).unwrap_or(path).display().to_string();
    let own_keys = receipts::trusted_keys_path(root);
    let (keys, keys_source, keys_from_commit) = match explicit {
        Some((path, how)) => {
            let path = root.join(path);
            if fail_closed && same_file(&path, &own_keys) {
                return Err(RpcError::new(
                    ErrorKind::InvalidInput,
                    format!("in CI the checkout's own {KEYS_FILE} is no trust anchor: the change under verification can add its own key to it"),
                )
                .with_hint("drop --trusted-keys (and SCAFLD_TRUSTED_KEYS): verify --ci reads the keys from --trust-ref, by default the --target commit"));
            }
            (receipts::read_trusted_keys(&path), format!("{} ({how})", shown(&path)), false)
        }
        None => match &at_commit {
            Some((label, files)) => match &files[0] {
                Some(bytes) => (
                    TrustedKeys::parse(&String::from_utf8_lossy(bytes))
                        .map_err(|e| format!("{KEYS_FILE} at {label}: {e}")),
                    format!("{KEYS_FILE} at {label}"),
                    true,
                ),
                None if fail_closed => {
                    return Err(RpcError::new(
                        ErrorKind::InvalidInput,
                        format!("verify in CI needs trusted keys; {label} has no {KEYS_FILE}"),
                    )
                    .with_hint("commit .scafld/trusted-keys.json (scafld init writes it) to the protected branch, or pass --trusted-keys"));
                }
                None => (Err(format!("{label} has no {KEYS_FILE}")), format!("{KEYS_FILE} at {label}"), true),
            },
            None => {
                if fail_closed && !own_keys.exists() {
                    return Err(RpcError::new(
                        ErrorKind::InvalidInput,
                        format!("verify in CI needs trusted keys; {KEYS_FILE} does not exist"),
                    )
                    .with_hint("commit .scafld/trusted-keys.json (scafld init writes it) or pass --trusted-keys"));
                }
                (receipts::read_trusted_keys(&own_keys), format!("{KEYS_FILE} in the working tree"), false)
            }
        },
    };
    let commit = at_commit.map(|(label, _)| label);
    Ok(Trust { keys, keys_source, min_independence, policy_source, commit, keys_from_commit })
}

/// Whether two paths name the same file (the paths themselves when either does not exist).
fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

pub async fn verify(daemon: &Arc<Daemon>, p: m::VerifyParams) -> RpcResult<m::VerifyResult> {
    let root = PathBuf::from(&p.root);
    let env = &p.caller.env;
    let ci = p.ci || scafld_local::env_flag(env.get("CI").map(String::as_str));
    let receipt_path = p
        .receipt
        .clone()
        .or_else(|| env.get("SCAFLD_RECEIPT_PATH").filter(|v| !v.is_empty()).cloned())
        .map(|p| root.join(p))
        .unwrap_or_else(|| root.join(".scafld/receipts/latest.json"));
    let shown = |path: &Path| path.strip_prefix(&root).unwrap_or(path).display().to_string();
    if ci && p.target.is_none() && !p.self_check {
        return Err(RpcError::new(ErrorKind::InvalidInput, "verify in CI needs --target (the protected commit)")
            .with_hint("pass --target origin/main (or the merge base you protect)"));
    }
    // A revision named by flag that git does not know is the caller's mistake, refused before
    // anything is read or run (as `--trust-ref` is), not a failed check of the receipt.
    for (flag, rev) in [("--target", &p.target), ("--material-ref", &p.material_ref)] {
        if let Some(rev) = rev {
            known_revision(&root, flag, rev).await?;
        }
    }
    let trust = read_trust(&root, &p, ci).await?;
    if p.self_check {
        return Ok(self_check(&receipt_path, &trust, env, &shown(&receipt_path)));
    }
    let lane = acceptance_lane(&root, &p).await?;
    let target = p.target.clone().unwrap_or_else(|| "HEAD".into());
    let mut result = m::VerifyResult {
        verified: false,
        receipt_path: shown(&receipt_path),
        task_id: String::new(),
        trust_source: trust.source(),
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
    let signature = check_signature(&root, &envelope, &trust);
    let signed = signature.is_ok();
    check("signature", signature);
    // A signature proves who wrote the body; this, that it attests a pass.
    check("verdict", receipt::attests_pass(body));
    let at = p.material_ref.clone().unwrap_or_else(|| target.clone());
    check("files", check_files(&root, &envelope, &at).await);
    check("base", check_base(&root, &body.base_commit, &target).await);
    if p.material_only {
        check("acceptance", Ok("not re-run (--material-only)".into()));
    } else if !signed {
        // Commands from a receipt no trusted key signed are anyone's: never run (in CI, a pull
        // request could otherwise run whatever it writes into one).
        check("acceptance", Err("not re-run: the receipt's signature did not verify".into()));
    } else {
        check("acceptance", rerun_recorded(daemon, &root, lane.as_deref(), &envelope, &p.caller).await?);
    }
    check("independence", check_independence(&envelope, &trust));
    result.task_id = body.task_id.clone();
    result.verified = result.checks.iter().all(|c| c.ok);
    Ok(result)
}

/// The signature against the trusted keys; an unknown key names where trust was read and how
/// a key becomes trusted there.
fn check_signature(root: &Path, envelope: &Envelope, trust: &Trust) -> Result<String, String> {
    let id = &envelope.signature.key_id;
    let keys = trust.keys.as_ref().map_err(Clone::clone)?;
    match receipt::check_signature(envelope, keys) {
        Ok(()) => Ok(format!("signed by trusted key {id} (keys from {})", trust.keys_source)),
        Err(e) if keys.keys.iter().any(|k| &k.key_id == id) => Err(format!("{e} (keys from {})", trust.keys_source)),
        Err(_) if trust.keys_from_commit => {
            let own = receipts::read_trusted_keys(&receipts::trusted_keys_path(root))
                .is_ok_and(|own| own.keys.iter().any(|k| &k.key_id == id));
            let own = if own {
                format!("; the checkout's own {KEYS_FILE} lists it, but a change cannot vouch for its own key")
            } else {
                String::new()
            };
            Err(format!(
                "key {id} is not trusted by {}{own}; a key is trusted once a commit to the protected branch adds it \
                 to {KEYS_FILE} (`scafld init` run there adds the host's key)",
                trust.keys_source
            ))
        }
        Err(_) => Err(format!(
            "key {id} is not trusted by {}; add it there, or verify against the protected branch's keys \
             (--trust-ref origin/main)",
            trust.keys_source
        )),
    }
}

/// The receipt's independence against `verify.min_independence` of the trusted policy.
fn check_independence(envelope: &Envelope, trust: &Trust) -> Result<String, String> {
    let required = trust.min_independence.clone()?;
    let required: IndependenceLevel = serde_json::from_value(serde_json::Value::String(required.clone()))
        .map_err(|_| format!("verify.min_independence {required:?} is not isolation_only or cross_vendor"))?;
    let level = envelope.body.independence.level;
    let shown = format!("{level:?}{}", downgraded(envelope));
    if level >= required {
        Ok(format!("{shown}; required {required:?} ({})", trust.policy_source))
    } else {
        Err(format!("{shown}; verify.min_independence requires {required:?} ({})", trust.policy_source))
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
    let text = scafld_local::capped::read_text(path, "receipt", MAX_RECEIPT_BYTES).map_err(|e| e.to_string())?;
    serde_json::from_str(&text).map_err(|e| format!("{} is not a receipt: {e}", path.display()))
}

/// The signed files against the files at `at`: the same digest for each (a file signed as
/// deleted: absent), and (for a working tree receipt) no file of the scope left out.
async fn check_files(root: &Path, envelope: &Envelope, at: &str) -> Result<String, String> {
    let body = &envelope.body;
    if body.file_digests.is_empty() {
        return Err(receipt::NO_FILES.into());
    }
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
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    let working_tree = body.snapshot_mode == SnapshotMode::WorkingTree;
    let mut problems: Vec<String> = receipt::file_mismatches(&body.file_digests, &now.files, working_tree)
        .into_iter()
        .map(|(path, mismatch)| match mismatch {
            FileMismatch::Present => format!("{path}: signed as deleted but present at {at}"),
            FileMismatch::Missing => format!("{path}: signed but missing at {at}"),
            FileMismatch::Differs(found) => {
                format!(
                    "{path}: digest differs (signed {}, {at} has {})",
                    short(&body.file_digests[&path]),
                    short(&found)
                )
            }
            FileMismatch::Unsigned => format!("{path}: in scope at {at} but not signed"),
        })
        .collect();
    if problems.is_empty() {
        let deleted = body.file_digests.values().filter(|d| *d == DELETED).count();
        let deleted = if deleted > 0 { format!(", {deleted} of them absent as signed") } else { String::new() };
        return Ok(format!(
            "{} file(s) match at {at}{deleted} ({}; {tree})",
            body.file_digests.len(),
            short(&now.commit)
        ));
    }
    let more = problems.len().saturating_sub(FILES_NAMED);
    problems.truncate(FILES_NAMED);
    if more > 0 {
        problems.push(format!("... and {more} more"));
    }
    Err(problems.join("; "))
}

/// Where the recorded acceptance commands run: `None` for the working tree as it is (no
/// `--material-ref`, or `--material-only`, which runs none), else a clean checkout of the
/// `--material-ref` commit, so that the commands run on the code whose files were checked:
/// `--acceptance-root`, or the working tree when it is such a checkout. Anything else is
/// refused before a receipt is read or a command run.
async fn acceptance_lane(root: &Path, p: &m::VerifyParams) -> RpcResult<Option<PathBuf>> {
    let refuse = |message: String, hint: String| Err(RpcError::new(ErrorKind::InvalidInput, message).with_hint(hint));
    let chosen = p.acceptance_root.as_deref().map(PathBuf::from);
    let material = match (&p.material_ref, &chosen) {
        (_, Some(_)) if p.material_only => {
            return refuse(
                "--acceptance-root names where the acceptance commands run, and --material-only runs none".into(),
                "pass one of them: --material-only checks the signature and files alone, --acceptance-root the whole receipt".into(),
            );
        }
        _ if p.material_only => return Ok(None),
        (None, Some(folder)) => {
            return refuse(
                format!(
                    "--acceptance-root {} needs --material-ref, the commit checked out there: the files are read at that commit and its acceptance commands run there",
                    folder.display()
                ),
                format!(
                    "add --material-ref <the commit checked out there> (`git -C {} rev-parse HEAD` names it)",
                    word(&folder.display().to_string())
                ),
            );
        }
        (None, None) => return Ok(None),
        (Some(material), _) => material.clone(),
    };
    let folder = chosen.clone().unwrap_or_else(|| root.to_path_buf());
    let fresh = format!("`git worktree add --detach <folder> {}`", word(&material));
    let named = format!("--acceptance-root {}", folder.display());
    if chosen.is_some() && !folder.is_dir() {
        return refuse(
            format!("{named} is not a folder"),
            format!("make it a clean checkout of --material-ref: {fresh}"),
        );
    }
    let (root_owned, rev, checkout) = (root.to_path_buf(), material.clone(), folder.clone());
    let checked = tokio::task::spawn_blocking(move || baseline::exact_checkout(&root_owned, &rev, &checkout))
        .await
        .map_err(|e| RpcError::internal(e.to_string()))?;
    let unlike = match checked {
        Ok(_) => return Ok(Some(folder)),
        Err(unlike) => unlike,
    };
    let other_ways = format!(
        "pass --acceptance-root <folder>, a clean checkout of it ({fresh}), or --material-only to check the signature and files alone"
    );
    match (unlike, chosen.is_some()) {
        (baseline::Unlike::Unresolved(e), _) => refuse(
            format!("--material-ref {material}: {e}"),
            format!(
                "pass --material-ref a commit-ish this clone has (`git rev-parse --verify {}` says whether it does): fetch it first",
                word(&material)
            ),
        ),
        (baseline::Unlike::NoCheckout(e), true) => refuse(
            format!("{named} is not a git checkout: {e}"),
            format!("make it a clean checkout of --material-ref: {fresh}"),
        ),
        (baseline::Unlike::NoCheckout(e), false) => {
            refuse(format!("the working tree cannot be read through git: {e}"), other_ways)
        }
        (baseline::Unlike::NotTheWorkspace { expected }, _) => refuse(
            format!(
                "{named} is not where the workspace's folder is in that checkout ({}): the acceptance commands would run in another folder",
                expected.display()
            ),
            format!("pass --acceptance-root {}", word(&expected.display().to_string())),
        ),
        (baseline::Unlike::OtherCommit { wanted, found }, explicit) => {
            let found = found.as_deref().map_or("no commit".to_string(), |id| format!("commit {}", short(id)));
            let place = if explicit { named } else { "the working tree".into() };
            refuse(
                format!(
                    "--material-ref {material} is commit {}, but {place} has {found} checked out: the acceptance commands would run on other code than the files checked",
                    short(&wanted)
                ),
                if explicit {
                    format!("check the commit out there, or use a fresh checkout: {fresh}")
                } else {
                    other_ways
                },
            )
        }
        (baseline::Unlike::Differs(mut paths), explicit) => {
            let more = paths.len().saturating_sub(FILES_NAMED);
            paths.truncate(FILES_NAMED);
            if more > 0 {
                paths.push(format!("... and {more} more"));
            }
            let place = if explicit { named } else { "the working tree".into() };
            refuse(
                format!(
                    "{place} has --material-ref {material} checked out but is not a clean checkout of it: {}; the acceptance commands could read what differs",
                    paths.join(", ")
                ),
                if explicit { format!("use a fresh checkout: {fresh}") } else { other_ways },
            )
        }
    }
}

/// `text` as one shell word, for a command a hint names.
fn word(text: &str) -> std::borrow::Cow<'_, str> {
    scafld_protocol::cli::shell_word(text)
}

/// `rev`, given as `flag`, names a revision the repository at `root` has.
async fn known_revision(root: &Path, flag: &str, rev: &str) -> RpcResult<()> {
    let (root, rev_owned) = (root.to_path_buf(), rev.to_string());
    tokio::task::spawn_blocking(move || baseline::known_revision(&root, &rev_owned))
        .await
        .map_err(|e| RpcError::internal(e.to_string()))?
        .map_err(|e| {
            RpcError::new(ErrorKind::InvalidInput, format!("{flag} {rev}: {e}")).with_hint(format!(
                "pass {flag} a commit-ish this clone has (`git rev-parse --verify {}` says whether it does): fetch it first",
                scafld_protocol::cli::shell_word(rev)
            ))
        })
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

/// Run each recorded acceptance command again in the checkout, in its recorded folder and
/// under its recorded timeout; every one must pass. The commands are the call's, on record and
/// cancelled by the daemon's stop, as finalize's (`CallRuns`): a stop fails the call, not the
/// check. With a `clean` checkout (see [`acceptance_lane`]) they run there, in its
/// environment (fresh HOME and TMPDIR in the throwaway folder, no credential of the caller).
async fn rerun_recorded(
    daemon: &Arc<Daemon>,
    root: &Path,
    clean: Option<&Path>,
    envelope: &Envelope,
    caller: &m::CallerContext,
) -> RpcResult<Result<String, String>> {
    // A check writes nothing into the checkout it checks: a fresh clone is read unsettled (no
    // id written, nothing registered), and the runs' diagnostics go to a throwaway folder
    // removed with the call (no answer names them: a failure says the criterion and why).
    let ws = match daemon.workspace_to_read(&root.display().to_string()).await {
        Ok(ws) => ws,
        Err(e) => return Ok(Err(e.0.message)),
    };
    let config = match ws.config() {
        Ok(config) => config,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let scratch = diagnostics_folder()?;
    let mut commands =
        super::exec::CommandSetup::new(&ws, &config, caller).diagnostics_in(scratch.path().join("diagnostics"));
    if let Some(checkout) = clean {
        let (home, tmp) = (scratch.path().join("home"), scratch.path().join("tmp"));
        for folder in [&home, &tmp] {
            std::fs::create_dir(folder).map_err(|e| {
                RpcError::internal(format!("cannot make {} for the acceptance commands: {e}", folder.display()))
            })?;
        }
        commands = commands.in_clean_checkout(&ws, &config, caller, checkout.to_path_buf(), &home, &tmp);
    }
    let call = daemon.call_runs.begin("verify").await?;
    let mut ran = 0;
    for record in &envelope.body.acceptance {
        if record.command.is_empty() || record.expected_kind == "manual" {
            continue;
        }
        // Where and how long finalize ran it (a receipt without them: the root, the default).
        let criterion = crate::domain::spec::Criterion {
            id: record.id.clone(),
            command: record.command.clone(),
            expected_kind: record.expected_kind.clone(),
            cwd: record.cwd.clone(),
            timeout_seconds: if record.timeout_seconds > 0 {
                record.timeout_seconds.to_string()
            } else {
                String::new()
            },
            ..Default::default()
        };
        // A receipt is input: its folder must stay inside the checkout, as written and as
        // resolved through symlinks (a later commit can make the folder a link leading out).
        let (request, diagnostics) = match commands.request(&envelope.body.task_id, &criterion) {
            Ok(run) => run,
            Err(why) => return Ok(Err(format!("{why}; it is not run"))),
        };
        let request = crate::runner::RunRequest { token: Some(call.token()), ..request };
        let (outcome, _) = crate::runner::run(request, diagnostics, call.cancel(), |_| {}).await;
        call.cut_short(&outcome)?;
        let observed = super::exec::judge(criterion.effective_kind(), &criterion, &outcome);
        if observed.status != CriterionStatus::Pass {
            let place = if record.cwd.is_empty() { String::new() } else { format!(" in `{}`", record.cwd) };
            return Ok(Err(format!(
                "criterion `{}` ({}{place}) is {}: {}",
                record.id, record.command, observed.status, observed.reason
            )));
        }
        ran += 1;
    }
    let place = clean.map_or(String::new(), |checkout| format!(" in the clean checkout {}", checkout.display()));
    Ok(Ok(format!("{ran} recorded command(s) pass{place}")))
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
fn self_check(receipt: &Path, trust: &Trust, env: &BTreeMap<String, String>, shown: &str) -> m::VerifyResult {
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
    let trusted = &trust.keys;
    push(
        "trusted keys",
        trusted.as_ref().map(|k| format!("{} key(s) in {}", k.keys.len(), trust.keys_source)).map_err(Clone::clone),
    );
    let host = receipts::host_key_path(env)
        .ok_or_else(|| "no config folder for the host key".to_string())
        .and_then(|path| receipts::host_key(&path, false).map(|k| (path, k)));
    push(
        "host key",
        match (&host, trusted) {
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
    m::VerifyResult {
        verified,
        receipt_path: shown.to_string(),
        task_id: String::new(),
        trust_source: trust.source(),
        checks,
    }
}

/// A throwaway folder for verify's diagnostics: under the daemon's `TMPDIR` (the one of the
/// client that started it), or under `/tmp` when that folder is gone or refuses it (a login's
/// tmp folder cleaned, a CI job's removed) while the daemon runs on. Where neither takes it,
/// the error names both and what puts it right.
fn diagnostics_folder() -> RpcResult<tempfile::TempDir> {
    let make = |dir: &std::path::Path| tempfile::Builder::new().prefix("scafld-verify-").tempdir_in(dir);
    let preferred = scafld_local::temp_dir();
    let first = match make(&preferred) {
        Ok(folder) => return Ok(folder),
        Err(e) => e,
    };
    let fallback = std::path::Path::new("/tmp");
    if preferred != fallback {
        match make(fallback) {
            Ok(folder) => {
                tracing::warn!(tmpdir = %preferred.display(), "verify's diagnostics go under /tmp: the daemon's TMPDIR refused them ({first})");
                return Ok(folder);
            }
            Err(e) => {
                return Err(RpcError::internal(format!(
                    "cannot make a folder for verify's diagnostics in {} (the daemon's TMPDIR, from the client that started it: {first}) or in /tmp ({e})",
                    preferred.display()
                ))
                .with_hint("make TMPDIR name a folder that exists and can be written, then restart the daemon from that shell: `scafld daemon stop`, and the next command starts it"));
            }
        }
    }
    Err(RpcError::internal(format!("cannot make a folder for verify's diagnostics in /tmp: {first}"))
        .with_hint("make /tmp (or TMPDIR) a folder that exists and can be written, then run verify again"))
}
