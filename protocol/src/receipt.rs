//! The signed receipt a task closes with (`scafld finalize`), as the original tool's latest
//! release writes it: an envelope of a body (schema version 1) and its detached Ed25519
//! signature. Field names, which fields are omitted when empty, and the words of each closed
//! field are the original's, so receipts minted by either tool read in the other. Unknown fields
//! are refused: a receipt is evidence, not a document to be lenient with.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::vocab::Verdict;

/// The receipt body schema this release writes and reads.
pub const RECEIPT_SCHEMA_VERSION: u32 = 1;
/// The only signature algorithm.
pub const SIGNATURE_ALG: &str = "ed25519";
/// A `file_digests` value that signs a file's absence: the change deleted it (from the base, or
/// since approval), and `verify` requires it to be absent still. The original tool's word for a
/// missing file in its workspace snapshots; never a sha256, so never confused with one.
pub const DELETED: &str = "deleted";

/// The largest receipt file read (a receipt is a small JSON document: kilobytes).
pub const MAX_RECEIPT_BYTES: u64 = 8 << 20;

fn is_zero(n: &i64) -> bool {
    *n == 0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    pub body: Body,
    pub signature: Signature,
}

/// The detached signature: `sig` is base64 (standard, padded) over the canonical body bytes;
/// `key_id` is `ed25519:` and the unpadded base64url sha256 of the raw public key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signature {
    pub alg: String,
    pub key_id: String,
    pub sig: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Body {
    pub schema_version: u32,
    pub task_id: String,
    pub session_id: String,
    pub verdict: Verdict,
    pub snapshot_mode: SnapshotMode,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub base_ref: String,
    pub base_commit: String,
    pub head_commit: String,
    /// The workspace-relative paths fingerprinted; `.` is the whole workspace.
    pub scope: Vec<String>,
    pub tree_sha: String,
    /// Each signed file's sha256, or [`DELETED`] for a file the change removed.
    pub file_digests: BTreeMap<String, String>,
    pub ignored_unreviewed: Vec<String>,
    pub reviewed_context_provenance: Vec<ContextProvenance>,
    pub reviewer: ReceiptReviewer,
    pub host_under_review: HostUnderReview,
    pub independence: Independence,
    pub spec_fingerprint: String,
    pub acceptance_declared: bool,
    pub acceptance: Vec<AcceptanceRecord>,
    pub open_blockers: Vec<Blocker>,
    pub mutation_guard: MutationGuard,
    /// The ledger head this receipt anchors (empty while its digest is computed).
    pub ledger_head: String,
    pub minted_at: String,
}

pub use crate::vocab::{Downgrade, IndependenceLevel, SnapshotMode};

/// One source the reviewer was shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextProvenance {
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sha256: String,
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub bytes: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiptReviewer {
    pub provider: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub model: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub binary_sha256: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub endpoint_host: String,
}

/// The agent whose work the receipt gates.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostUnderReview {
    pub agent: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub model: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub session_id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Independence {
    pub level: IndependenceLevel,
    pub distinct: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub downgraded: Option<Downgrade>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// One acceptance criterion as finalize ran it. `cwd` and `timeout_seconds` are this tool's
/// additions (the original re-runs every command from the workspace root under the default
/// timeout): omitted when the criterion names none, so such a record is the original's, and
/// an older receipt (without them) reads and re-runs as it did. Being in the body, they are
/// signed like every other field.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcceptanceRecord {
    pub id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub command: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub expected_kind: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub exit_code: i64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub output_sha256: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub evidence_sha256: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub evidence_actor: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub evidence_recorded_at: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub diagnostic: String,
    /// The folder the command ran in, relative to the workspace root (empty: the root).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cwd: String,
    /// The criterion's own absolute timeout in seconds (0: the configured default).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub timeout_seconds: u64,
}

/// An open reviewer finding at finalize.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Blocker {
    pub id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub severity: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub location: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub summary: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub validation: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MutationGuard {
    pub status: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scope: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}
