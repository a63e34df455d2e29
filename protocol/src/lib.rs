//! Wire contract between `scafldd` and its clients: method names with their params and results,
//! subscription events, error codes and the protocol version. Serde types only, no IO.
//!
//! The transport is newline-delimited JSON-RPC 2.0 over a Unix socket: one compact JSON message
//! per line, replies matched by id. Every method is described by a type implementing [`Method`],
//! so its name, params and result live in exactly one place.

pub mod cli;
pub mod error;
pub mod events;
pub mod hosts;
pub mod json;
pub mod methods;
pub mod progress;
pub mod receipt;
pub mod schemas;
pub mod text;
pub mod vocab;

pub use error::{ErrorData, ErrorKind};
pub use events::Event;
pub use methods::Method;

/// Bumped whenever a change to this crate would break an older client or daemon.
pub const PROTOCOL_VERSION: u32 = 4;

/// Largest request line the daemon reads; longer lines are answered with an error and skipped.
pub const MAX_REQUEST_LINE_BYTES: usize = 10 * 1024 * 1024;

/// The most a reviewer's answer (a dossier, a template or harden answer) may take, on every
/// channel: a provider's stdout or answer file, `submit_review`, `worker submit --dossier`.
/// A larger one is refused unread. It fits in one request line with room for the call around it.
pub const MAX_ANSWER_BYTES: usize = 8 << 20;

/// Largest reply the daemon sends; a larger one is answered with
/// [`error::codes::OVERSIZED_RESPONSE`] instead.
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

/// What the daemon's refusal of a workspace outside any git repository says, so that the
/// client can add what only its own environment shows (`GIT_DIR`, `GIT_WORK_TREE`).
pub const NOT_IN_A_REPOSITORY: &str = "is not inside a git repository";

/// The reviewer CLIs this release is tested against, at their real boundary: command, npm
/// package, version. `scafld doctor` compares what is installed with these.
pub const TESTED_REVIEWER_CLIS: [(&str, &str, &str); 3] = [
    ("codex", "@openai/codex", "0.169.0"),
    ("claude", "@anthropic-ai/claude-code", "2.1.197"),
    ("gemini", "@google/gemini-cli", "0.61.0"),
];
