//! The host agents scafld tells apart (the agent a caller runs inside), and how the
//! self-declared `SCAFLD_HOST_AGENT` names one: read alike by the daemon, which judges
//! independence by it, and by `scafld doctor`, which says when a value names none.

/// The variable a caller sets to declare the agent it runs inside.
pub const HOST_AGENT_VAR: &str = "SCAFLD_HOST_AGENT";

/// Every host agent scafld knows.
pub const HOST_AGENTS: [&str; 3] = ["codex", "claude", "gemini"];

/// The agent a `SCAFLD_HOST_AGENT` value declares, however it is spelt (`Claude`,
/// `claude-code` and `claude_code` are claude; `codex-cli` codex; `gemini-cli` gemini); `None`
/// for a value that names none of them.
pub fn declared(value: &str) -> Option<&'static str> {
    let letters: String = value.chars().filter(char::is_ascii_alphanumeric).collect::<String>().to_ascii_lowercase();
    HOST_AGENTS.into_iter().find(|host| letters.starts_with(host))
}
