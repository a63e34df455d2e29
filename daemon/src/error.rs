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

    pub fn kind(&self) -> ErrorKind {
        self.0.kind
    }

    pub fn internal(message: impl fmt::Display) -> RpcError {
        RpcError::new(ErrorKind::Internal, message.to_string())
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
        let hint = format!("fix {}: it must be valid YAML with the fields `scafld init` writes", e.file);
        RpcError::new(ErrorKind::WorkspaceError, e.to_string()).with_hint(hint)
    }
}

impl From<RpcError> for ErrorObjectOwned {
    fn from(error: RpcError) -> ErrorObjectOwned {
        ErrorObjectOwned::owned(error.0.kind.code(), error.0.message.clone(), Some(error.0))
    }
}
