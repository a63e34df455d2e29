//! Receipts at the edges: the host's signing key (in the user's config dir, 0600, refused when
//! others can read it), the workspace's `.scafld/trusted-keys.json`, the receipt files, and who
//! the host agent is (its genuine markers, never a self-declared variable).

use std::collections::BTreeMap;
use std::io::Read as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use ed25519_dalek::{Signer as _, SigningKey};
use scafld_protocol::receipt::{Body, Downgrade, Envelope, Independence, IndependenceLevel, SIGNATURE_ALG, Signature};

use crate::domain::ledger::{LedgerEntry, LedgerEvent};
use crate::domain::receipt::{self, MAX_HOST_KEY_BYTES, MAX_TRUSTED_KEYS_BYTES, TrustedKeys};

/// The receipt a task's ledger anchors, if any (the last one).
pub fn anchored(entries: &[LedgerEntry]) -> Option<Envelope> {
    entries.iter().rev().find_map(|e| match &e.event {
        LedgerEvent::Receipt { envelope, .. } => serde_json::from_value(envelope.clone()).ok(),
        _ => None,
    })
}

/// A receipt file's text: the envelope, pretty-printed, with a final newline.
pub fn file_text(envelope: &Envelope) -> String {
    let mut text = serde_json::to_string_pretty(envelope).unwrap_or_default();
    text.push('\n');
    text
}

/// Where the receipt the ledger anchors should be (`.scafld/receipts/<task>.json`), when that
/// file is missing or holds something else: a finalize interrupted after its ledger append,
/// or a file removed or cut short since. `None` when nothing is anchored or the file is whole.
pub fn unwritten(root: &Path, task: &str, entries: &[LedgerEntry]) -> Option<String> {
    let envelope = anchored(entries)?;
    let relative = format!(".scafld/receipts/{task}.json");
    let on_disk = std::fs::read_to_string(root.join(&relative)).ok();
    (on_disk.as_deref() != Some(file_text(&envelope).as_str())).then_some(relative)
}

/// Where the host key lives for a caller: `$SCAFLD_CONFIG_HOME/scafld/keys/receipt-ed25519`,
/// else under `$XDG_CONFIG_HOME`, else `~/.config`.
pub fn host_key_path(env: &BTreeMap<String, String>) -> Option<PathBuf> {
    let base = env
        .get("SCAFLD_CONFIG_HOME")
        .or_else(|| env.get("XDG_CONFIG_HOME"))
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| env.get("HOME").filter(|h| !h.is_empty()).map(|h| Path::new(h).join(".config")))?;
    Some(base.join("scafld/keys/receipt-ed25519"))
}

/// The host's signing key; created (32 random bytes, stored as base64 of the 64-byte key pair,
/// 0600 in a 0700 folder) when `create` and none exists. A key others can read is refused.
pub fn host_key(path: &Path, create: bool) -> Result<SigningKey, String> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) => {
            if meta.file_type().is_symlink() || !meta.is_file() {
                return Err(format!("the receipt key {} is not a regular file", path.display()));
            }
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(format!(
                    "the receipt key {} has mode {mode:04o}; others could forge receipts with it (chmod 600 {})",
                    path.display(),
                    path.display()
                ));
            }
            let text =
                scafld_local::capped::read_text(path, "receipt key", MAX_HOST_KEY_BYTES).map_err(|e| e.to_string())?;
            parse_key(text.trim()).map_err(|e| format!("the receipt key {}: {e}", path.display()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
            let mut seed = [0u8; 32];
            std::fs::File::open("/dev/urandom")
                .and_then(|mut f| f.read_exact(&mut seed))
                .map_err(|e| format!("no randomness for a key: {e}"))?;
            let key = SigningKey::from_bytes(&seed);
            write_private(path, STANDARD.encode(key.to_keypair_bytes()).as_bytes())?;
            Ok(key)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(format!("no receipt key at {}; `scafld init` creates one", path.display()))
        }
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// A key file's text: base64 (standard, unpadded or url-safe) of a 64-byte key pair or a
/// 32-byte seed, as either tool writes it.
fn parse_key(text: &str) -> Result<SigningKey, String> {
    if text.starts_with("-----BEGIN") {
        return Err("PEM keys are not read; store the key as base64 of its 32-byte seed".into());
    }
    let bytes = [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE_NO_PAD]
        .iter()
        .find_map(|engine| engine.decode(text).ok())
        .ok_or("it is not base64")?;
    match bytes.len() {
        32 => Ok(SigningKey::from_bytes(&bytes.try_into().map_err(|_| "bad seed")?)),
        64 => {
            let pair: [u8; 64] = bytes.try_into().map_err(|_| "bad key pair")?;
            SigningKey::from_keypair_bytes(&pair).map_err(|e| format!("the key pair does not match: {e}"))
        }
        n => Err(format!("a key is 32 seed bytes or a 64-byte pair, not {n} bytes")),
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write as _;
    use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
    let dir = path.parent().ok_or("the key path has no folder")?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    file.write_all(bytes).and_then(|_| file.sync_all()).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The workspace's trusted keys file.
pub fn trusted_keys_path(root: &Path) -> PathBuf {
    root.join(".scafld/trusted-keys.json")
}

/// Read a trusted keys file.
pub fn read_trusted_keys(path: &Path) -> Result<TrustedKeys, String> {
    let text = scafld_local::capped::read_text(path, "trusted keys file", MAX_TRUSTED_KEYS_BYTES)
        .map_err(|e| e.to_string())?;
    TrustedKeys::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Add the host's public key to the workspace's trusted keys (created when missing); a listed
/// key is left as it is. Returns whether the file changed.
pub fn trust_host_key(root: &Path, key: &SigningKey) -> Result<bool, String> {
    let path = trusted_keys_path(root);
    let mut keys = if path.exists() { read_trusted_keys(&path)? } else { TrustedKeys::default() };
    if !keys.upsert(&key.verifying_key().to_bytes()) {
        return Ok(false);
    }
    crate::workspace::specfile::write_atomic(&path, &keys.render())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(true)
}

/// `init`: create the caller's host key when missing and trust it in the workspace.
/// The workspace is made whatever becomes of the key: a key that cannot be had is a warning
/// naming why (receipts need it only at `finalize`, which makes it on first use), never a
/// failed `init` that has already written the layout.
pub fn init_trust(root: &Path, env: &BTreeMap<String, String>, report: &mut crate::workspace::layout::InitReport) {
    let Some(path) = host_key_path(env) else {
        report.warnings.push(
            "no receipt signing key was made: none of SCAFLD_CONFIG_HOME, XDG_CONFIG_HOME and HOME is set; set one \
             and run `scafld init` again before `scafld finalize` signs a receipt"
                .to_string(),
        );
        return;
    };
    let existed = trusted_keys_path(root).exists();
    let name = ".scafld/trusted-keys.json".to_string();
    match host_key(&path, true).and_then(|key| trust_host_key(root, &key)) {
        Ok(true) if existed => report.updated.push(name),
        Ok(true) => report.created.push(name),
        Ok(false) => report.skipped.push(name),
        Err(e) => report.warnings.push(format!(
            "no receipt signing key was trusted: {e}; fix that and run `scafld init` again before `scafld finalize` \
             signs a receipt"
        )),
    }
}

/// The CI workflow `init --ci` writes.
const CI_WORKFLOW: &str = include_str!("../assets/scafld-verify.yml");
const CI_WORKFLOW_PATH: &str = ".github/workflows/scafld-verify.yml";

/// `init --ci`: write the verify workflow unless a file is already there (idempotent; a file
/// the user changed is theirs).
pub fn init_ci(root: &Path, report: &mut crate::workspace::layout::InitReport) -> Result<(), String> {
    let path = root.join(CI_WORKFLOW_PATH);
    if path.exists() {
        report.skipped.push(CI_WORKFLOW_PATH.into());
        return Ok(());
    }
    let dir = path.parent().ok_or("no folder for the workflow")?;
    crate::workspace::layout::create_real_dir(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    crate::workspace::layout::write_user_file(&path, CI_WORKFLOW.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    report.created.push(CI_WORKFLOW_PATH.into());
    Ok(())
}

/// Sign a body (its `ledger_head` set) with the host key.
pub fn sign(body: Body, key: &SigningKey) -> Envelope {
    let signature = key.sign(receipt::canonical_body(&body).as_bytes());
    Envelope {
        signature: Signature {
            alg: SIGNATURE_ALG.into(),
            key_id: receipt::key_id(&key.verifying_key().to_bytes()),
            sig: STANDARD.encode(signature.to_bytes()),
        },
        body,
    }
}

/// The model vendor of a provider or agent name, when it names one.
fn vendor(name: &str) -> Option<&'static str> {
    match name {
        "codex" => Some("openai"),
        "claude" => Some("anthropic"),
        "gemini" => Some("google"),
        _ => None,
    }
}

/// The agent the caller runs under, from the markers each CLI sets in its children's
/// environment (never `SCAFLD_HOST_AGENT`, which anyone can set).
pub fn host_agent(env: &BTreeMap<String, String>) -> Option<&'static str> {
    let set = |name: &str| env.get(name).is_some_and(|v| !v.is_empty());
    if set("CLAUDECODE") || set("CLAUDE_CODE_ENTRYPOINT") {
        Some("claude")
    } else if set("CODEX_SANDBOX") || set("CODEX_SANDBOX_NETWORK_DISABLED") || set("CODEX_THREAD_ID") {
        Some("codex")
    } else if set("GEMINI_CLI") {
        Some("gemini")
    } else {
        None
    }
}

/// How independent the reviewer was: `cross_vendor` only when both sides resolve to vendors
/// and they differ.
pub fn independence(host: Option<&str>, reviewer: &str) -> Independence {
    let downgrade = |why: Downgrade, reason: String| Independence {
        level: IndependenceLevel::IsolationOnly,
        distinct: host.is_none_or(|h| h != reviewer),
        downgraded: Some(why),
        reason,
    };
    match (host.and_then(vendor), vendor(reviewer)) {
        (None, _) => downgrade(Downgrade::UnknownHost, "no genuine host-agent marker in the environment".into()),
        (_, None) => downgrade(Downgrade::UnknownReviewer, format!("reviewer {reviewer:?} names no model vendor")),
        (Some(h), Some(r)) if h == r => downgrade(Downgrade::SameVendor, format!("host and reviewer are both {h}")),
        (Some(h), Some(r)) => Independence {
            level: IndependenceLevel::CrossVendor,
            distinct: true,
            downgraded: None,
            reason: format!("host {h}, reviewer {r}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_others_can_read_is_refused_and_a_new_one_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys/receipt-ed25519");
        assert!(host_key(&path, false).unwrap_err().contains("scafld init"));
        let key = host_key(&path, true).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(host_key(&path, false).unwrap().to_bytes(), key.to_bytes());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert!(host_key(&path, false).unwrap_err().contains("mode 0640"));
    }

    #[test]
    fn independence_is_cross_vendor_only_on_genuine_markers() {
        let env = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert_eq!(host_agent(&env(&[("SCAFLD_HOST_AGENT", "claude")])), None);
        let claude = host_agent(&env(&[("CLAUDECODE", "1")]));
        assert_eq!(independence(claude, "codex").level, IndependenceLevel::CrossVendor);
        assert_eq!(independence(claude, "claude").downgraded, Some(Downgrade::SameVendor));
        assert_eq!(independence(None, "codex").downgraded, Some(Downgrade::UnknownHost));
        assert_eq!(independence(claude, "command").downgraded, Some(Downgrade::UnknownReviewer));
    }
}
