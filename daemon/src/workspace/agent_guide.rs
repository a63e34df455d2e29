//! `init --agents`: a short guide for coding agents appended to the repository's agent
//! instruction files (AGENTS.md, and CLAUDE.md when there is one), once. The guide is marked,
//! so a second run (or a user's edits to it) leaves the file alone. A symlink is the user's and
//! is never replaced: the guide goes into the file it leads to inside the workspace, and a link
//! leading out of it (or to nothing) is left as it is, with a warning naming it.

use std::path::Path;

use super::layout::InitReport;

const GUIDE: &str = include_str!("../../assets/agent-guide.md");
const MARKER: &str = "<!-- scafld:agent-guide";

/// Append the guide to `AGENTS.md` (created when missing) and to an existing `CLAUDE.md`.
pub fn add(root: &Path, report: &mut InitReport) -> std::io::Result<()> {
    for (name, create) in [("AGENTS.md", true), ("CLAUDE.md", false)] {
        let path = match std::fs::symlink_metadata(root.join(name)) {
            Ok(meta) if meta.file_type().is_symlink() => match inside(root, &root.join(name)) {
                Some(target) => target,
                None => {
                    report.skipped.push(name.into());
                    report.warnings.push(format!(
                        "{name} is a symlink leading outside the workspace (or to nothing): it is left as it is, without the agent guide; add the guide where it leads yourself, or make {name} a file here and run `scafld init --agents` again"
                    ));
                    continue;
                }
            },
            _ => root.join(name),
        };
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

/// Where the symlink `link` leads, when that is a path inside the workspace `root`.
fn inside(root: &Path, link: &Path) -> Option<std::path::PathBuf> {
    let target = link.canonicalize().ok()?;
    target.starts_with(root.canonicalize().ok()?).then_some(target)
}
