//! The daemon's error type for RPC handlers: a protocol [`ErrorKind`], a message and an optional
//! hint, turned into a JSON-RPC error object with a stable code and a structured `data` member.

use std::fmt;

use jsonrpsee::types::ErrorObjectOwned;
use scafld_protocol::{ErrorData, ErrorKind};

#[derive(Debug, Clone, PartialEq)]
pub struct RpcError(pub ErrorData);

pub type RpcResult<T> = Result<T, RpcError>;

impl RpcError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> RpcError {
        RpcError(ErrorData { kind, message: message.into(), hint: None, details: None })
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> RpcError {
        self.0.hint = Some(hint.into());
        self
    }

    pub fn with_details(mut self, details: serde_json::Value) -> RpcError {
        self.0.details = Some(details);
        self
    }

    /// The folder named as a workspace is none (missing, not a directory, no `.scafld/`): the
    /// one workspace error that means "unreachable" to a client (exit 6, as the original's
    /// "workspace not found"); a workspace whose files cannot be used is a runtime failure.
    pub fn workspace_not_found(message: impl Into<String>) -> RpcError {
        RpcError::new(ErrorKind::WorkspaceError, message)
            .with_details(serde_json::json!({ scafld_protocol::error::WORKSPACE_NOT_FOUND: true }))
    }

    /// A call refused because the daemon began to stop before it started (nothing of it ran):
    /// marked so a client sends it again to the next daemon.
    pub fn not_started_while_stopping() -> RpcError {
        RpcError::new(ErrorKind::ShuttingDown, "the daemon is shutting down and takes no new calls")
            .with_hint("run the command again: the next one starts a new daemon")
            .with_details(serde_json::json!({ scafld_protocol::error::NOT_STARTED: true }))
    }

    pub fn kind(&self) -> ErrorKind {
        self.0.kind
    }

    /// A failure inside the daemon or its environment. A full disk (or quota) is the one a user
    /// can act on, and it arrives as a store's or a file's error text from many places: it is
    /// recognised by the OS's own wording and gets a hint.
    pub fn internal(message: impl fmt::Display) -> RpcError {
        let message = message.to_string();
        let full = ["No space left on device", "Disk quota exceeded", "(os error 28)", "(os error 122)"]
            .iter()
            .any(|sign| message.contains(sign));
        let error = RpcError::new(ErrorKind::Internal, message);
        if full {
            return error.with_hint(
                "a disk is full: free space where the daemon writes (its state directory, the workspace), then run the command again",
            );
        }
        error
    }
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.message)
    }
}

impl std::error::Error for RpcError {}

/// A workspace whose configuration cannot be read: every handler that needs it answers so.
impl From<crate::config::ConfigError> for RpcError {
    fn from(e: crate::config::ConfigError) -> RpcError {
        let hint = e.hint();
        RpcError::new(ErrorKind::WorkspaceError, e.to_string()).with_hint(hint)
    }
}

impl From<RpcError> for ErrorObjectOwned {
    fn from(error: RpcError) -> ErrorObjectOwned {
        ErrorObjectOwned::owned(error.0.kind.code(), error.0.message.clone(), Some(error.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_gets_a_hint_other_failures_do_not() {
        let full = std::io::Error::from_raw_os_error(28);
        let error = RpcError::internal(format!("state database I/O error: {full}"));
        assert!(error.0.hint.as_deref().unwrap().contains("a disk is full"), "{error:?}");
        assert_eq!(RpcError::internal("something else").0.hint, None);
    }
}
