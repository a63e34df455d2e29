//! Receipts without IO: the canonical JSON both tools sign, the receipt digest and the ledger
//! head chain, key ids, the trusted-keys file and its lifecycle (revoked, expired), the body's
//! own rules, and checking a signature. Minting (the host key) and the tree facts live at the
//! edges (`crate::receipts`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ed25519_dalek::{Signature as EdSignature, Verifier, VerifyingKey};
use scafld_protocol::receipt::{Body, Envelope, RECEIPT_SCHEMA_VERSION, SIGNATURE_ALG};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::domain::timestamp;

/// A criterion's `Cwd` as an acceptance record keeps it: relative to the workspace root, `.`
/// and empty segments dropped (`./sub/` is `sub`), so a criterion that names the root (`.`,
/// `./`) records no folder at all, as one without a `Cwd` does: the form the original's strict
/// decoder reads, and `verify` runs it from the root all the same.
pub fn recorded_cwd(cwd: &str) -> String {
    let parts: Vec<&str> = cwd.split('/').filter(|part| !part.is_empty() && *part != ".").collect();
    let relative = parts.join("/");
    // An absolute folder keeps its leading `/` (never run: it is outside the checkout).
    if cwd.starts_with('/') { format!("/{relative}") } else { relative }
}

/// The domain string of the ledger head chain.
const LEDGER_DOMAIN: &str = "scafld-ledger-v1";

/// The largest trusted keys file read (a small JSON document: a few hundred bytes a key).
pub const MAX_TRUSTED_KEYS_BYTES: u64 = 8 << 20;
/// The largest host key file read (base64 of at most 64 bytes, and a newline).
pub const MAX_HOST_KEY_BYTES: u64 = 64 << 10;

/// Compact JSON with object keys in byte order and strings escaped as Go's encoding/json
/// escapes them (`<`, `>`, `&`, U+2028 and U+2029 as `\u` escapes): the bytes both tools sign.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(&mut out, value);
    out
}

fn write_canonical(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                write_canonical(out, &map[key]);
            }
            out.push('}');
        }
    }
}

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

/// The canonical bytes of a body: what is signed.
pub fn canonical_body(body: &Body) -> String {
    canonical_json(&serde_json::to_value(body).unwrap_or(Value::Null))
}

/// sha256 (hex) of the canonical body with `ledger_head` cleared: the head cannot cover itself.
pub fn receipt_digest(body: &Body) -> String {
    let cleared = Body { ledger_head: String::new(), ..body.clone() };
    sha256_hex(canonical_body(&cleared).as_bytes())
}

/// The head of a ledger with no receipt yet.
pub fn genesis_head() -> String {
    sha256_hex(format!("{LEDGER_DOMAIN} genesis").as_bytes())
}

/// The head after appending a receipt with `digest` to a ledger whose head was `prior`.
pub fn next_head(prior: &str, digest: &str) -> String {
    sha256_hex(format!("{LEDGER_DOMAIN}\n{prior}\n{digest}").as_bytes())
}

/// How a signed file stands at a commit, when it is not as signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileMismatch {
    /// Present with other content (the digest found there).
    Differs(String),
    /// Signed, but the commit has no such file.
    Missing,
    /// Signed as deleted, but the commit has it.
    Present,
    /// In the scope there, but the (working tree) receipt does not sign it.
    Unsigned,
}

/// The files of a receipt that are not at a commit as signed: `signed` the receipt's file
/// digests, `found` the digests of the scope's files there, `working_tree` whether the receipt
/// signed the whole scope (then a file there it leaves out is a mismatch too, listed after
/// the signed ones).
pub fn file_mismatches(
    signed: &BTreeMap<String, String>,
    found: &BTreeMap<String, String>,
    working_tree: bool,
) -> Vec<(String, FileMismatch)> {
    use scafld_protocol::receipt::DELETED;
    let mut out = Vec::new();
    for (path, digest) in signed {
        let mismatch = match found.get(path) {
            Some(_) if digest == DELETED => FileMismatch::Present,
            None if digest == DELETED => continue,
            None => FileMismatch::Missing,
            Some(there) if there != digest => FileMismatch::Differs(there.clone()),
            Some(_) => continue,
        };
        out.push((path.clone(), mismatch));
    }
    if working_tree {
        out.extend(found.keys().filter(|p| !signed.contains_key(*p)).map(|p| (p.clone(), FileMismatch::Unsigned)));
    }
    out
}

/// The fingerprint of a tree's files: sha256 of the canonical JSON of its path → digest map.
pub fn tree_sha(file_digests: &BTreeMap<String, String>) -> String {
    let value = serde_json::to_value(file_digests).unwrap_or(Value::Null);
    sha256_hex(canonical_json(&value).as_bytes())
}

/// `ed25519:` and the unpadded base64url sha256 of a raw public key.
pub fn key_id(public_key: &[u8; 32]) -> String {
    format!("{SIGNATURE_ALG}:{}", URL_SAFE_NO_PAD.encode(Sha256::digest(public_key)))
}

/// Why a receipt that signs no file proves nothing: no checkout can differ from it. Earlier
/// releases minted such receipts from a scope that matched nothing (`--scope-hint` outside the
/// workspace or misspelled); they are refused, never verified.
pub const NO_FILES: &str = "the receipt signs no file (file_digests is empty): it binds nothing in the tree, so no \
     checkout could fail it; gate the change with a receipt that signs its files";

/// The body's own rules: the schema version, the fields that may not be empty, at least one
/// signed file, and every signed file accounted for (shown to the reviewer, or declared
/// unreviewed), with the digest the reviewer saw.
pub fn validate_body(body: &Body) -> Result<(), String> {
    if body.schema_version != RECEIPT_SCHEMA_VERSION {
        return Err(format!("schema_version must be {RECEIPT_SCHEMA_VERSION} (got {})", body.schema_version));
    }
    let required = [
        ("task_id", &body.task_id),
        ("session_id", &body.session_id),
        ("base_commit", &body.base_commit),
        ("head_commit", &body.head_commit),
        ("tree_sha", &body.tree_sha),
        ("spec_fingerprint", &body.spec_fingerprint),
        ("minted_at", &body.minted_at),
        ("reviewer.provider", &body.reviewer.provider),
        ("host_under_review.agent", &body.host_under_review.agent),
        ("mutation_guard.status", &body.mutation_guard.status),
        ("ledger_head", &body.ledger_head),
    ];
    let missing: Vec<&str> = required.iter().filter(|(_, v)| v.trim().is_empty()).map(|(name, _)| *name).collect();
    if !missing.is_empty() {
        return Err(format!("missing required receipt fields: {}", missing.join(", ")));
    }
    if body.file_digests.is_empty() {
        return Err(NO_FILES.into());
    }
    let mut covered: BTreeMap<&str, &str> = BTreeMap::new();
    for p in &body.reviewed_context_provenance {
        if !p.path.is_empty() {
            covered.insert(&p.path, &p.sha256);
        }
    }
    for path in &body.ignored_unreviewed {
        covered.entry(path).or_insert("");
    }
    let uncovered: Vec<&str> =
        body.file_digests.keys().filter(|p| !covered.contains_key(p.as_str())).map(String::as_str).collect();
    if !uncovered.is_empty() {
        return Err(format!(
            "file_digests not covered by review provenance or ignored_unreviewed: {}",
            uncovered.join(", ")
        ));
    }
    let mismatched: Vec<&str> = body
        .file_digests
        .iter()
        .filter(|(path, digest)| covered.get(path.as_str()).is_some_and(|seen| !seen.is_empty() && seen != digest))
        .map(|(path, _)| path.as_str())
        .collect();
    if !mismatched.is_empty() {
        return Err(format!("file_digests do not match reviewed provenance digest: {}", mismatched.join(", ")));
    }
    Ok(())
}

/// Whether the body attests a passed gate, as `finalize` only ever mints one: the verdict
/// `pass`, no open blocking finding, and every recorded criterion passing, with at least one
/// when it declares acceptance. A signature proves who wrote a body, not that it says pass:
/// `verify`, the merge wall, fails any other (another tool's or a hand-signed one). `Ok` says
/// what it attests.
pub fn attests_pass(body: &Body) -> Result<String, String> {
    use scafld_protocol::vocab::Verdict;
    if body.verdict != Verdict::Pass {
        return Err(format!("the receipt's verdict is {}: it does not attest a passing review", body.verdict));
    }
    if !body.open_blockers.is_empty() {
        let ids: Vec<String> = body.open_blockers.iter().map(|b| format!("`{}`", b.id)).collect();
        return Err(format!(
            "the receipt lists {} open blocking finding(s) ({}): a pass with open blockers attests nothing",
            ids.len(),
            ids.join(", ")
        ));
    }
    if body.acceptance_declared && body.acceptance.is_empty() {
        return Err("the receipt declares acceptance but records no criterion: nothing shows the task done".into());
    }
    let unpassed: Vec<String> =
        body.acceptance.iter().filter(|a| a.status != "pass").map(|a| format!("`{}` ({})", a.id, a.status)).collect();
    if !unpassed.is_empty() {
        return Err(format!("the receipt records criteria that did not pass: {}", unpassed.join(", ")));
    }
    Ok(format!("pass, no open blockers, {} recorded criteria passed", body.acceptance.len()))
}

/// `.scafld/trusted-keys.json`: the public keys whose receipts count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustedKeys {
    pub version: u32,
    pub keys: Vec<TrustedKey>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustedKey {
    pub key_id: String,
    pub alg: String,
    /// The raw 32-byte public key, base64 (standard, padded).
    pub public_key: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub revoked: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub revoked_at: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub expires_at: String,
}

impl TrustedKeys {
    pub const VERSION: u32 = 1;

    /// Parse and check the file: version, algorithm, key length, and ids that match their keys
    /// and are not repeated.
    pub fn parse(text: &str) -> Result<TrustedKeys, String> {
        let keys: TrustedKeys = serde_json::from_str(text).map_err(|e| format!("trusted keys: {e}"))?;
        if keys.version != Self::VERSION {
            return Err(format!("trusted keys: version must be {} (got {})", Self::VERSION, keys.version));
        }
        let mut seen = std::collections::BTreeSet::new();
        for key in &keys.keys {
            if key.alg != SIGNATURE_ALG {
                return Err(format!("trusted key {}: alg must be {SIGNATURE_ALG}", key.key_id));
            }
            let raw = key.raw()?;
            if key_id(&raw) != key.key_id {
                return Err(format!("trusted key {}: the key_id does not match its public key", key.key_id));
            }
            if !seen.insert(key.key_id.clone()) {
                return Err(format!("trusted key {} is listed twice", key.key_id));
            }
        }
        Ok(keys)
    }

    /// The file's text: sorted by key id, two-space indented, one trailing newline.
    pub fn render(&self) -> String {
        let mut sorted = self.clone();
        sorted.keys.sort_by(|a, b| a.key_id.cmp(&b.key_id));
        let mut text = serde_json::to_string_pretty(&sorted).unwrap_or_default();
        text.push('\n');
        text
    }

    /// Add a public key unless it is already listed (a listed key, revoked or not, is left as
    /// the file says). Returns whether it was added.
    pub fn upsert(&mut self, public_key: &[u8; 32]) -> bool {
        let id = key_id(public_key);
        if self.keys.iter().any(|k| k.key_id == id) {
            return false;
        }
        self.keys.push(TrustedKey {
            key_id: id,
            alg: SIGNATURE_ALG.into(),
            public_key: STANDARD.encode(public_key),
            revoked: false,
            revoked_at: String::new(),
            expires_at: String::new(),
        });
        true
    }

    /// The key `id` if it was active at `at` (the receipt's `minted_at`): listed, not revoked by
    /// then, not expired by then. Times are compared as the instants they name (any RFC 3339
    /// offset, fractional seconds); one that names none fails closed: the key is not trusted.
    pub fn active_at(&self, id: &str, at: &str) -> Result<[u8; 32], String> {
        let key = self.keys.iter().find(|k| k.key_id == id).ok_or_else(|| format!("key {id} is not trusted"))?;
        let minted = || {
            timestamp::parse_rfc3339(at)
                .map_err(|e| format!("the receipt's minted_at {e}, so key {id}'s lifecycle cannot be judged"))
        };
        let lifecycle = |field: &str, text: &str| {
            timestamp::parse_rfc3339(text).map_err(|e| {
                format!(
                    "key {id}'s {field} {e}: its lifecycle cannot be judged, so it is not trusted (fix the keys file)"
                )
            })
        };
        // A `revoked_at` is a revocation whatever `revoked` says (a key revoked at an instant is
        // revoked from then on, the flag or not); `revoked` alone revokes it for every receipt.
        if !key.revoked_at.is_empty() {
            if lifecycle("revoked_at", &key.revoked_at)? <= minted()? {
                return Err(format!(
                    "key {id} was revoked at {}, before the receipt was minted ({at})",
                    key.revoked_at
                ));
            }
        } else if key.revoked {
            return Err(format!("key {id} was revoked"));
        }
        if !key.expires_at.is_empty() && lifecycle("expires_at", &key.expires_at)? <= minted()? {
            return Err(format!("key {id} expired at {}, before the receipt was minted ({at})", key.expires_at));
        }
        key.raw()
    }
}

impl TrustedKey {
    fn raw(&self) -> Result<[u8; 32], String> {
        let bytes =
            STANDARD.decode(&self.public_key).map_err(|e| format!("trusted key {}: public_key: {e}", self.key_id))?;
        bytes
            .try_into()
            .map_err(|b: Vec<u8>| format!("trusted key {}: public key is {} bytes, not 32", self.key_id, b.len()))
    }
}

impl Default for TrustedKeys {
    fn default() -> TrustedKeys {
        TrustedKeys { version: Self::VERSION, keys: Vec::new() }
    }
}

/// Check a receipt's signature against the trusted keys, as of its `minted_at`.
pub fn check_signature(envelope: &Envelope, keys: &TrustedKeys) -> Result<(), String> {
    let sig = &envelope.signature;
    if sig.alg != SIGNATURE_ALG {
        return Err(format!("signature alg {:?} is not {SIGNATURE_ALG}", sig.alg));
    }
    let raw = keys.active_at(&sig.key_id, &envelope.body.minted_at)?;
    let key =
        VerifyingKey::from_bytes(&raw).map_err(|e| format!("key {} is not a valid Ed25519 key: {e}", sig.key_id))?;
    let bytes = STANDARD.decode(&sig.sig).map_err(|e| format!("the signature is not base64: {e}"))?;
    let signature = EdSignature::from_slice(&bytes).map_err(|_| "the signature is not 64 bytes".to_string())?;
    key.verify(canonical_body(&envelope.body).as_bytes(), &signature)
        .map_err(|_| format!("the signature does not match the receipt body (key {})", sig.key_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cwd_naming_the_root_is_recorded_as_none() {
        for root in ["", ".", "./", "./.", ".//."] {
            assert_eq!(recorded_cwd(root), "", "{root:?}");
        }
        assert_eq!(recorded_cwd("./sub/"), "sub");
        assert_eq!(recorded_cwd("sub/./deeper"), "sub/deeper");
        assert_eq!(recorded_cwd("/abs/."), "/abs");
        assert_eq!(recorded_cwd("sub/.."), "sub/..", "`..` is kept: a folder climbing out is refused as written");
    }

    #[test]
    fn canonical_json_sorts_keys_and_escapes_as_go_does() {
        let value: Value =
            serde_json::from_str(r#"{"b":[1,{"z":null,"a":true}],"a":"<x & y>\u2028\n\u0001é"}"#).unwrap();
        assert_eq!(
            canonical_json(&value),
            r#"{"a":"\u003cx \u0026 y\u003e\u2028\n\u0001é","b":[1,{"a":true,"z":null}]}"#
        );
    }

    /// The chain's constants, against digests of the literal strings computed here.
    #[test]
    fn the_ledger_head_chain_matches_the_published_formula() {
        let sha = |s: &str| format!("{:x}", Sha256::digest(s.as_bytes()));
        assert_eq!(genesis_head(), sha("scafld-ledger-v1 genesis"));
        // Computed once, outside this code: `printf 'scafld-ledger-v1 genesis' | sha256sum`.
        assert_eq!(genesis_head(), "c7180e7beadce77a59ea98dc15f48b4654d44ea33533be41e3eedb346607f166");
        let digest = "ab".repeat(32);
        assert_eq!(
            next_head(&genesis_head(), &digest),
            sha(&format!("scafld-ledger-v1\n{}\n{digest}", genesis_head()))
        );
    }

    #[test]
    fn key_ids_are_the_unpadded_base64url_sha256_of_the_raw_key() {
        let raw = [7u8; 32];
        let id = key_id(&raw);
        assert!(id.starts_with("ed25519:") && !id.ends_with('='));
        assert_eq!(URL_SAFE_NO_PAD.decode(&id["ed25519:".len()..]).unwrap(), Sha256::digest(raw).to_vec());
    }

    #[test]
    fn trusted_keys_judge_revocation_and_expiry_at_the_minting_time() {
        let mut keys = TrustedKeys::default();
        assert!(keys.upsert(&[9u8; 32]) && !keys.upsert(&[9u8; 32]));
        let id = keys.keys[0].key_id.clone();
        assert!(keys.active_at(&id, "2026-01-01T00:00:00Z").is_ok());
        keys.keys[0].expires_at = "2026-06-01T00:00:00Z".into();
        assert!(keys.active_at(&id, "2026-05-31T23:59:59Z").is_ok());
        assert!(keys.active_at(&id, "2026-06-02T00:00:00Z").unwrap_err().contains("expired"));
        keys.keys[0].revoked = true;
        keys.keys[0].revoked_at = "2026-03-01T00:00:00Z".into();
        assert!(keys.active_at(&id, "2026-02-01T00:00:00Z").is_ok(), "a receipt minted before the revocation stands");
        assert!(keys.active_at(&id, "2026-04-01T00:00:00Z").unwrap_err().contains("revoked"));
        assert!(keys.active_at("ed25519:nope", "2026-01-01T00:00:00Z").unwrap_err().contains("not trusted"));
        // Instants, not text: an offset names the same instant as its UTC time.
        keys.keys[0].revoked_at = "2026-03-01T04:00:00+05:00".into();
        assert!(keys.active_at(&id, "2026-02-28T23:30:00Z").unwrap_err().contains("revoked"), "an hour before");
        assert!(keys.active_at(&id, "2026-02-28T22:30:00Z").is_ok(), "half an hour before the revocation");
        keys.keys[0].revoked = false;
        keys.keys[0].revoked_at.clear();
        keys.keys[0].expires_at = "2026-06-01T04:00:00+05:00".into();
        assert!(keys.active_at(&id, "2026-05-31T23:30:00Z").unwrap_err().contains("expired"));
        keys.keys[0].expires_at = "2026-06-01T00:00:00.5Z".into();
        assert!(keys.active_at(&id, "2026-06-01T00:00:00Z").is_ok(), "half a second before it expires");
        // A time that names no instant fails closed, saying which field.
        keys.keys[0].expires_at = "garbage".into();
        let unreadable = keys.active_at(&id, "2026-01-01T00:00:00Z").unwrap_err();
        assert!(unreadable.contains("expires_at `garbage` is not an RFC 3339 time"), "{unreadable}");
        keys.keys[0].expires_at.clear();
        keys.keys[0].revoked = true;
        keys.keys[0].revoked_at = "yesterday".into();
        assert!(keys.active_at(&id, "2026-01-01T00:00:00Z").unwrap_err().contains("revoked_at `yesterday`"));
        keys.keys[0].revoked_at = "2026-03-01T00:00:00Z".into();
        assert!(keys.active_at(&id, "soon").unwrap_err().contains("minted_at `soon`"));
        // `revoked_at` revokes without the flag, and fails closed without it when unreadable.
        keys.keys[0].revoked = false;
        assert!(keys.active_at(&id, "2026-02-01T00:00:00Z").is_ok(), "minted before the revocation");
        assert!(keys.active_at(&id, "2026-04-01T00:00:00Z").unwrap_err().contains("revoked at"));
        keys.keys[0].revoked_at = "garbage".into();
        assert!(keys.active_at(&id, "2026-01-01T00:00:00Z").unwrap_err().contains("revoked_at `garbage`"));
        keys.keys[0].revoked_at.clear();
        let reread = TrustedKeys::parse(&keys.render()).unwrap();
        assert_eq!(reread, keys);
        let forged = keys.render().replace(&id, "ed25519:AAAA");
        assert!(TrustedKeys::parse(&forged).unwrap_err().contains("does not match"));
    }
}
