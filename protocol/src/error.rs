//! Error codes carried in JSON-RPC error objects and the structured `data` that goes with them.

use serde::{Deserialize, Serialize};

/// JSON-RPC 2.0 reserved codes, as the daemon uses them.
pub mod codes {
    pub const PARSE_ERROR: i32 = -32700;
    pub const INVALID_REQUEST: i32 = -32600;
    pub const METHOD_NOT_FOUND: i32 = -32601;
    pub const INVALID_PARAMS: i32 = -32602;
    pub const INTERNAL_ERROR: i32 = -32603;
    /// A request line longer than [`crate::MAX_REQUEST_LINE_BYTES`].
    pub const OVERSIZED_REQUEST: i32 = -32007;
    /// A reply longer than [`crate::MAX_RESPONSE_BYTES`] (the RPC library's own code: its
    /// error object carries no `data`).
    pub const OVERSIZED_RESPONSE: i32 = -32008;
}

/// What went wrong, in a form callers branch on. Serialized in snake_case as `data.kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The line was not JSON.
    ParseError,
    /// JSON, but not a JSON-RPC request (or a batch, which is not supported).
    InvalidRequest,
    MethodNotFound,
    /// Params did not deserialize into the method's params type.
    InvalidParams,
    /// A request line over the size limit.
    OversizedRequest,
    /// A connection from a user other than the daemon's own.
    PeerRefused,
    /// A value supplied by the caller is not acceptable (bad task id, unknown option, ...).
    InvalidInput,
    /// The named thing (workspace, task, job) does not exist.
    NotFound,
    /// The thing to create already exists.
    AlreadyExists,
    /// The directory is not a scafld workspace or its files are unusable.
    WorkspaceError,
    /// A spec or other document failed validation.
    ValidationFailed,
    /// The operation is not allowed in the current lifecycle state.
    InvalidState,
    /// Another operation holds the resource; retry or attach.
    Busy,
    /// The daemon is shutting down and takes no new work.
    ShuttingDown,
    /// The review gate did not accept a review (provider failure, invalid dossier, no provider).
    ReviewFailed,
    /// A bug or an environment failure inside the daemon.
    Internal,
}

impl ErrorKind {
    /// Numeric JSON-RPC error code. Application codes are positive and stable.
    pub fn code(self) -> i32 {
        match self {
            ErrorKind::ParseError => codes::PARSE_ERROR,
            ErrorKind::InvalidRequest => codes::INVALID_REQUEST,
            ErrorKind::MethodNotFound => codes::METHOD_NOT_FOUND,
            ErrorKind::InvalidParams => codes::INVALID_PARAMS,
            ErrorKind::OversizedRequest => codes::OVERSIZED_REQUEST,
            ErrorKind::Internal => codes::INTERNAL_ERROR,
            ErrorKind::PeerRefused => 1001,
            ErrorKind::InvalidInput => 1002,
            ErrorKind::NotFound => 1003,
            ErrorKind::AlreadyExists => 1004,
            ErrorKind::WorkspaceError => 1005,
            ErrorKind::ValidationFailed => 1006,
            ErrorKind::InvalidState => 1007,
            ErrorKind::Busy => 1008,
            ErrorKind::ShuttingDown => 1009,
            ErrorKind::ReviewFailed => 1010,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::ParseError => "parse_error",
            ErrorKind::InvalidRequest => "invalid_request",
            ErrorKind::MethodNotFound => "method_not_found",
            ErrorKind::InvalidParams => "invalid_params",
            ErrorKind::OversizedRequest => "oversized_request",
            ErrorKind::PeerRefused => "peer_refused",
            ErrorKind::InvalidInput => "invalid_input",
            ErrorKind::NotFound => "not_found",
            ErrorKind::AlreadyExists => "already_exists",
            ErrorKind::WorkspaceError => "workspace_error",
            ErrorKind::ValidationFailed => "validation_failed",
            ErrorKind::InvalidState => "invalid_state",
            ErrorKind::Busy => "busy",
            ErrorKind::ShuttingDown => "shutting_down",
            ErrorKind::ReviewFailed => "review_failed",
            ErrorKind::Internal => "internal",
        }
    }
}

/// The key of an error's `details` marking a [`ErrorKind::WorkspaceError`] about the folder
/// named as a workspace being none (missing, not a directory, no `.scafld/`), not about a
/// workspace's unusable files.
pub const WORKSPACE_NOT_FOUND: &str = "workspace_not_found";

/// The key of an error's `details` marking a [`ErrorKind::ShuttingDown`] refusal of a call the
/// stopping daemon never started (nothing of it ran, nothing was recorded): a client may send
/// it again to the next daemon. A `shutting_down` without it is a call the stop cut short.
pub const NOT_STARTED: &str = "not_started";

/// The `data` member of every error object the daemon sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorData {
    pub kind: ErrorKind,
    pub message: String,
    /// What the user can do about it, when there is something to do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// Structured details for callers that want more than the message (diagnostics per line, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}
