//! `init --agents`: a short guide for coding agents appended to the repository's agent
//! instruction files (AGENTS.md, and CLAUDE.md when there is one), once. The guide is marked,
//! so a second run (or a user's edits to it) leaves the file alone. A symlink is the user's and
//! is never replaced: the guide goes into the file it leads to only when that is a regular
//! Markdown file of the work tree (inside the workspace, outside any git store and outside
//! `.scafld/`); any other link is left as it is, with a warning naming it and where it leads.
//! One guide file that cannot take the guide (a folder, unreadable, not UTF-8) never fails
//! `init`: it is left as it is, with a warning, and the rest of `init` goes on.

use std::path::{Path, PathBuf};

use scafld_local::capped;

use super::layout::InitReport;

const GUIDE: &str = include_str!("../../assets/agent-guide.md");
const MARKER: &str = "<!-- scafld:agent-guide";

/// The agent instruction files, in the order they get the guide, and whether one is created
/// when missing (AGENTS.md first, so a CLAUDE.md linking to it finds it there).
const GUIDE_FILES: [(&str, bool); 2] = [("AGENTS.md", true), ("CLAUDE.md", false)];

/// What became of one guide file.
enum Outcome {
    Created,
    Updated,
    /// It has the guide already.
    HasGuide,
    /// Not there, and not one to create.
    Absent,
}

/// Why a guide file was left as it is: the warning's subject and what the user can do.
struct LeftAlone {
    why: String,
    hint: String,
}

impl LeftAlone {
    /// A link leading out of the workspace, to a file that may well be a guide.
    fn outside(name: &str, why: String) -> Self {
        Self {
            why,
            hint: format!(
                "add the guide where it leads yourself, or make {name} a file here and run `scafld init --agents` again"
            ),
        }
    }

    /// A link leading to nothing, or to what is no guide of the work tree.
    fn link(name: &str, why: String) -> Self {
        Self {
            why,
            hint: format!(
                "make {name} a Markdown file here (or a link to one in the work tree) and run `scafld init --agents` again"
            ),
        }
    }

    fn file(name: &str, why: String) -> Self {
        Self { why, hint: format!("make {name} a UTF-8 text file you can read and run `scafld init --agents` again") }
    }
}

/// Append the guide to `AGENTS.md` (created when missing) and to an existing `CLAUDE.md`. A
/// file that cannot take it is reported as skipped with a warning; `init` goes on.
pub fn add(root: &Path, report: &mut InitReport) {
    for (name, create) in GUIDE_FILES {
        match add_to(root, name, create) {
            Ok(Outcome::Created) => report.created.push(name.into()),
            Ok(Outcome::Updated) => report.updated.push(name.into()),
            Ok(Outcome::HasGuide) => report.skipped.push(name.into()),
            Ok(Outcome::Absent) => {}
            Err(LeftAlone { why, hint }) => {
                report.skipped.push(name.into());
                report.warnings.push(format!("{why}: it is left as it is, without the agent guide; {hint}"));
            }
        }
    }
}

fn add_to(root: &Path, name: &str, create: bool) -> Result<Outcome, LeftAlone> {
    let path = match std::fs::symlink_metadata(root.join(name)) {
        Ok(meta) if meta.file_type().is_symlink() => follow(root, name)?,
        _ => root.join(name),
    };
    let current = capped::read_text_if_there(&path, "file", super::layout::MAX_APPENDED_BYTES).map_err(|e| {
        let why = match e.refusal {
            capped::Refusal::Io(e) => format!("{name} cannot be read ({e})"),
            capped::Refusal::NotAFile(kind) => format!("{name} is a {kind}, not a file"),
            capped::Refusal::TooLarge(_) => {
                format!("{name} is larger than {}", capped::size(super::layout::MAX_APPENDED_BYTES))
            }
            capped::Refusal::NotText => format!("{name} is not UTF-8 text"),
        };
        LeftAlone::file(name, why)
    })?;
    let written = match current {
        Some(text) if text.contains(MARKER) => return Ok(Outcome::HasGuide),
        Some(text) => {
            let separator = if text.is_empty() || text.ends_with("\n\n") {
                ""
            } else if text.ends_with('\n') {
                "\n"
            } else {
                "\n\n"
            };
            super::specfile::write_atomic(&path, &format!("{text}{separator}{GUIDE}")).map(|()| Outcome::Updated)
        }
        None if create => super::layout::write_user_file(&path, GUIDE.as_bytes()).map(|()| Outcome::Created),
        None => return Ok(Outcome::Absent),
    };
    written.map_err(|e| LeftAlone::file(name, format!("{name} could not be written ({e})")))
}

/// The file the symlink `<root>/<name>` leads to, when the guide may go there: a regular
/// Markdown file inside the workspace, in neither a git store (`.git/`, a gitdir a `.git` file
/// names, `.git/modules`) nor `.scafld/` -- a link to `.git/config` or `.scafld/config.yaml`
/// must not get Markdown appended. Otherwise why not, naming the link and where it leads.
fn follow(root: &Path, name: &str) -> Result<PathBuf, LeftAlone> {
    link_target(root, name).map_err(|refused| match refused {
        LinkRefused::Outside(why) => LeftAlone::outside(name, why),
        LinkRefused::Elsewhere(why) => LeftAlone::link(name, why),
    })
}

/// Why `init` leaves a link of the user's as it is.
enum LinkRefused {
    /// It leads out of the workspace.
    Outside(String),
    /// It leads to nothing, into a store, or to no file `init` may append to.
    Elsewhere(String),
}

/// The file the symlink `<root>/<name>` leads to, when `init` may append the agent guide to
/// it: a regular Markdown file inside the workspace, in neither a git store nor `.scafld/`.
/// Otherwise why not, naming the link and where it leads.
fn link_target(root: &Path, name: &str) -> Result<PathBuf, LinkRefused> {
    let left = LinkRefused::Elsewhere;
    let link = root.join(name);
    let leads = std::fs::read_link(&link).map(|to| to.display().to_string()).unwrap_or_default();
    let (Ok(target), Ok(root)) = (link.canonicalize(), root.canonicalize()) else {
        return Err(left(format!("{name} is a symlink to {leads}, which does not exist")));
    };
    let Ok(inner) = target.strip_prefix(&root) else {
        let why = format!("{name} is a symlink leading outside the workspace, to {}", target.display());
        return Err(LinkRefused::Outside(why));
    };
    let shown = inner.display();
    if let Some(store) = store_holding(&root, inner) {
        return Err(left(format!("{name} is a symlink to {shown}, inside {store}")));
    }
    if !std::fs::metadata(&target).is_ok_and(|meta| meta.is_file()) {
        return Err(left(format!("{name} is a symlink to {shown}, which is not a regular file")));
    }
    if !target.extension().is_some_and(|ext| ext.eq_ignore_ascii_case("md")) {
        return Err(left(format!("{name} is a symlink to {shown}, which is not a Markdown file")));
    }
    Ok(target)
}

/// The store the workspace-relative path `inner` lies in, for a person, when it is one scafld
/// never writes a guide into: `.scafld/`, or a git directory (named `.git`, or any folder git
/// keeps a repository in: a `.git` file's gitdir, `.git/modules/x`, a bare repository).
fn store_holding(root: &Path, inner: &Path) -> Option<String> {
    let mut dir = root.to_path_buf();
    let folders = inner.parent().into_iter().flat_map(Path::components);
    for part in std::iter::once(None).chain(folders.map(Some)) {
        if let Some(part) = part {
            dir.push(part);
            if part.as_os_str() == super::layout::SCAFLD_DIR {
                return Some("scafld's own .scafld/ folder".into());
            }
            if part.as_os_str() == ".git" {
                return Some(format!("git's store {}", dir.strip_prefix(root).unwrap_or(&dir).display()));
            }
        }
        // What git itself checks a gitdir by: a HEAD, and objects (or a commondir naming them).
        if dir.join("HEAD").is_file() && (dir.join("objects").is_dir() || dir.join("commondir").is_file()) {
            let shown = dir.strip_prefix(root).map_or(dir.display().to_string(), |d| d.display().to_string());
            return Some(format!("the git store {}", if shown.is_empty() { ".".into() } else { shown }));
        }
    }
    None
}
