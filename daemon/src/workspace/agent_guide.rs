//! `init --agents`: a short guide for coding agents appended to the repository's agent
//! instruction files (AGENTS.md, and CLAUDE.md when there is one), once. The guide is marked,
//! so a second run (or a user's edits to it) leaves the file alone.

use std::path::Path;

use super::layout::InitReport;

const GUIDE: &str = include_str!("../../assets/agent-guide.md");
const MARKER: &str = "<!-- scafld:agent-guide";

/// Append the guide to `AGENTS.md` (created when missing) and to an existing `CLAUDE.md`.
pub fn add(root: &Path, report: &mut InitReport) -> std::io::Result<()> {
    for (name, create) in [("AGENTS.md", true), ("CLAUDE.md", false)] {
        let path = root.join(name);
        let current = scafld_local::capped::read_text_if_there(&path, "file", super::layout::MAX_APPENDED_BYTES)
            .map_err(std::io::Error::other)?;
        match current {
            Some(text) if text.contains(MARKER) => report.skipped.push(name.into()),
            Some(text) => {
                let separator = if text.is_empty() || text.ends_with("\n\n") {
                    ""
                } else if text.ends_with('\n') {
                    "\n"
                } else {
                    "\n\n"
                };
                super::specfile::write_atomic(&path, &format!("{text}{separator}{GUIDE}"))?;
                report.updated.push(name.into());
            }
            None if create => {
                super::layout::write_user_file(&path, GUIDE.as_bytes())?;
                report.created.push(name.into());
            }
            None => {}
        }
    }
    Ok(())
}
