//! `task.finalize` (close a task with a signed receipt) and `receipt.*` (check one: the merge
//! wall CI runs).

use serde::{Deserialize, Serialize};

use super::*;
use crate::receipt::Envelope;

method!(
    /// After a passing review: re-run the acceptance criteria, fingerprint the scope, mint and
    /// anchor a signed receipt, and complete the task. Idempotent once anchored.
    TaskFinalize = "task.finalize", FinalizeParams => FinalizeResult
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FinalizeParams {
    pub root: String,
    pub task_id: String,
    /// Fingerprint the change from this ref (`base_delta`) instead of the working tree.
    #[serde(default)]
    pub base_ref: Option<String>,
    /// The paths the receipt covers (default: the spec's declared scope).
    #[serde(default)]
    pub scope_hints: Vec<String>,
    pub caller: CallerContext,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FinalizeResult {
    pub task_id: String,
    /// True when a receipt stands (minted now, or already anchored).
    pub finalized: bool,
    /// True when the receipt had been anchored by an earlier call.
    #[serde(default)]
    pub already: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<Envelope>,
    /// Why no receipt was minted (an acceptance criterion failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked: Option<String>,
    /// Each acceptance criterion as finalize ran it.
    pub criteria: Vec<CriterionResult>,
    pub next_command: String,
    /// What the call asked for that did not apply (a `--scope-hint` for a task already
    /// finalized: its anchored receipt stands as signed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

method!(
    /// Check a receipt: signature against a trusted key, the target's files against the
    /// signed digests, base ancestry, the recorded acceptance commands, independence.
    ReceiptVerify = "receipt.verify", VerifyParams => VerifyResult
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyParams {
    pub root: String,
    /// The receipt file (default: SCAFLD_RECEIPT_PATH, else `.scafld/receipts/latest.json`).
    #[serde(default)]
    pub receipt: Option<String>,
    /// The protected commit-ish the receipt must hold for.
    #[serde(default)]
    pub target: Option<String>,
    /// Read the files at this commit instead of the target.
    #[serde(default)]
    pub material_ref: Option<String>,
    /// Run the recorded acceptance commands in this folder (absolute), a clean checkout of
    /// `material_ref`, not in the workspace. Optional (older clients omit it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acceptance_root: Option<String>,
    /// The trusted keys (default: SCAFLD_TRUSTED_KEYS, else `.scafld/trusted-keys.json`).
    #[serde(default)]
    pub trusted_keys: Option<String>,
    /// Read the trust anchor (`.scafld/trusted-keys.json`) and the verify policy
    /// (`.scafld/config.yaml`) from this commit's tree, not the working tree. With `ci` it
    /// defaults to `target`: a change never vouches for itself. Added in protocol 3 as an
    /// optional field (older clients omit it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_ref: Option<String>,
    /// Skip re-running the acceptance commands (the first of two CI lanes).
    #[serde(default)]
    pub material_only: bool,
    /// Fail closed without a target or keys (also when the caller's CI variable is truthy).
    #[serde(default)]
    pub ci: bool,
    /// Report the key and configuration wiring instead of checking a receipt.
    #[serde(default)]
    pub self_check: bool,
    pub caller: CallerContext,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerifyResult {
    pub verified: bool,
    pub receipt_path: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub task_id: String,
    /// Where the trusted keys and the verify policy were read from: a commit
    /// (`.scafld/trusted-keys.json at origin/main (1a2b3c4d5e6f)`) or a file. Optional on the
    /// wire (older daemons omit it).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub trust_source: String,
    /// Every check in order, each with what it found.
    pub checks: Vec<VerifyCheck>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerifyCheck {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}
