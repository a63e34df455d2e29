//! The stored form of a material's entries (what the ledger's `material` events and the
//! mutation guard's snapshots keep), and how a fresh material is brought to that form to be
//! compared with it. No IO.
//!
//! A material holds one entry per file in scope; its digest (computed by `baseline`) covers
//! every one of them and stays the authority for staleness. What is stored only explains a
//! change, so a big material is kept grouped: past [`STORED_BOUND`] entries, the files below a
//! folder become one entry for the folder (`path` `src/`, with its `/`; `status` [`GROUP`];
//! `fingerprint` the hex sha256 of its members' `path\tstatus\tfingerprint\n` lines, sorted).
//! Which folders are groups depends only on the entries' paths (see [`stored`]). A fresh
//! material is compared with a stored one after folding its entries into the stored one's
//! groups ([`like`]), so the lists name a folder (`src/ (changed)`) where they used to name
//! a file. Any change to a member changes its group's fingerprint, so a changed digest never
//! lists nothing for a grouped change.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use sha2::{Digest, Sha256};

use crate::domain::ledger::BaselinePath;

/// A material of more entries than this is stored grouped.
pub const STORED_BOUND: usize = 256;

/// The `status` of a stored entry standing for the files below a folder.
pub const GROUP: &str = "files";

/// The group of the whole tree, when even its top level has more names than the bound.
pub const WHOLE: &str = "./";

/// Paths the runner writes (the mutation guard adds the task's own spec there): never grouped.
const RUNNER_DIRS: [&str; 3] = [".scafld/runs/", ".scafld/reviews/", ".scafld/specs/"];

/// Statuses an earlier scafld stored (committed content by tree and blob ids): such records
/// are kept and compared as they are.
fn earlier_form(entries: &[BaselinePath]) -> bool {
    entries.iter().any(|e| matches!(e.status.as_str(), "tree" | "blob" | "commit" | "object"))
}

/// Whether `e` may go into a group: a relative path going down (an absolute or climbing one, a
/// scope entry outside the workspace, stays apart), not under the runner's folders.
fn groupable(e: &BaselinePath) -> bool {
    e.status != GROUP
        && !e.path.is_empty()
        && !e.path.starts_with('/')
        && !e.path.split('/').any(|part| part.is_empty() || part == "." || part == "..")
        && !RUNNER_DIRS.iter().any(|dir| e.path.starts_with(dir))
}

/// The fingerprint of a group: the sha256 of its members' lines, in sorted order.
fn group_entry(dir: &str, members: &mut [&BaselinePath]) -> BaselinePath {
    members.sort_by(|a, b| (&a.path, &a.status, &a.fingerprint).cmp(&(&b.path, &b.status, &b.fingerprint)));
    let mut hasher = Sha256::new();
    for e in members.iter() {
        for part in [e.path.as_bytes(), b"\t", e.status.as_bytes(), b"\t", e.fingerprint.as_bytes(), b"\n"] {
            hasher.update(part);
        }
    }
    BaselinePath { status: GROUP.into(), fingerprint: format!("{:x}", hasher.finalize()), path: dir.to_string() }
}

/// The members of the folder `dir` (`""` for the top, else ending in `/`) split one level
/// down: the folders below it with their members (in path order), and the entries right in
/// it (or alone in their folder).
fn split<'e>(
    entries: &'e [BaselinePath],
    dir: &str,
    members: &[usize],
) -> (Vec<(&'e str, Vec<usize>)>, Vec<&'e BaselinePath>) {
    let mut folders: BTreeMap<&'e str, Vec<usize>> = BTreeMap::new();
    let mut files = Vec::new();
    for &i in members {
        let path = entries[i].path.as_str();
        match path[dir.len()..].find('/') {
            Some(at) => folders.entry(&path[..=dir.len() + at]).or_default().push(i),
            None => files.push(&entries[i]),
        }
    }
    let mut groups = Vec::new();
    for (folder, inside) in folders {
        if let [only] = inside.as_slice() {
            files.push(&entries[*only]);
        } else {
            groups.push((folder, inside));
        }
    }
    (groups, files)
}

/// The stored form of a material's entries (sorted by path and status, as the material is):
/// the entries themselves up to [`STORED_BOUND`]; past it, the files grouped by folder. Every
/// top-level folder of two or more entries starts as a group; then, folder by folder (by depth,
/// then path), a group is opened into its subfolders' groups and its own files while the total
/// stays within the bound. Entries that are never grouped (see `groupable`) stay as they are;
/// a top level of more names than the bound is one group, [`WHOLE`].
/// Deterministic: it depends only on the entries' paths (the fingerprints only on the members).
/// A form already stored, or written by an earlier scafld, is returned unchanged.
pub fn stored(entries: &[BaselinePath]) -> Vec<BaselinePath> {
    if entries.len() <= STORED_BOUND || earlier_form(entries) || entries.iter().any(|e| e.status == GROUP) {
        return entries.to_vec();
    }
    let mut out: Vec<BaselinePath> = entries.iter().filter(|e| !groupable(e)).cloned().collect();
    let top: Vec<usize> = (0..entries.len()).filter(|&i| groupable(&entries[i])).collect();
    let (groups, files) = split(entries, "", &top);
    if out.len() + files.len() + groups.len() > STORED_BOUND {
        let mut members: Vec<&BaselinePath> = top.iter().map(|&i| &entries[i]).collect();
        out.push(group_entry(WHOLE, &mut members));
        out.sort_by(|a, b| a.path.cmp(&b.path).then_with(|| a.status.cmp(&b.status)));
        return out;
    }
    out.extend(files.into_iter().cloned());
    let mut total = out.len() + groups.len();
    let mut queue: VecDeque<(&str, Vec<usize>)> = groups.into();
    while let Some((dir, members)) = queue.pop_front() {
        let (groups, files) = split(entries, dir, &members);
        let opened = groups.len() + files.len();
        if total - 1 + opened <= STORED_BOUND {
            total = total - 1 + opened;
            out.extend(files.into_iter().cloned());
            queue.extend(groups);
        } else {
            let mut members: Vec<&BaselinePath> = members.iter().map(|&i| &entries[i]).collect();
            out.push(group_entry(dir, &mut members));
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path).then_with(|| a.status.cmp(&b.status)));
    out
}

/// `after` (a material as read now, an entry per file) brought to the form of `before` (as
/// stored): each entry below one of `before`'s groups folded into that group, the others kept.
/// Unchanged when `before` has no groups.
pub fn like(before: &[BaselinePath], after: &[BaselinePath]) -> Vec<BaselinePath> {
    let groups: BTreeSet<&str> = before.iter().filter(|e| e.status == GROUP).map(|e| e.path.as_str()).collect();
    if groups.is_empty() {
        return after.to_vec();
    }
    let mut out = Vec::new();
    let mut members: BTreeMap<&str, Vec<&BaselinePath>> = BTreeMap::new();
    for e in after {
        let group = if groupable(e) {
            e.path.match_indices('/').map(|(at, _)| &e.path[..=at]).chain([WHOLE]).find(|dir| groups.contains(dir))
        } else {
            None
        };
        match group {
            Some(dir) => members.entry(dir).or_default().push(e),
            None => out.push(e.clone()),
        }
    }
    for (dir, mut inside) in members {
        out.push(group_entry(dir, &mut inside));
    }
    out.sort_by(|a, b| a.path.cmp(&b.path).then_with(|| a.status.cmp(&b.status)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, fp: &str) -> BaselinePath {
        BaselinePath { status: "file".into(), fingerprint: fp.into(), path: path.into() }
    }

    #[test]
    fn a_group_fingerprint_covers_its_members_in_any_order() {
        let (a, b) = (file("d/a", "1"), file("d/b", "2"));
        let one = group_entry("d/", &mut [&a, &b]);
        assert_eq!(one, group_entry("d/", &mut [&b, &a]));
        assert_ne!(one, group_entry("d/", &mut [&a, &file("d/b", "3")]));
        assert_eq!(one.status, GROUP);
    }

    #[test]
    fn a_top_level_past_the_bound_is_one_group() {
        let entries: Vec<BaselinePath> = (0..300).map(|i| file(&format!("f{i:03}"), "f")).collect();
        let kept = stored(&entries);
        assert_eq!(kept.len(), 1);
        assert_eq!((kept[0].path.as_str(), kept[0].status.as_str()), (WHOLE, GROUP));
        assert_eq!(like(&kept, &entries), kept);
        let mut after = entries.clone();
        after[7].fingerprint = "g".into();
        assert_ne!(like(&kept, &after), kept);
    }

    #[test]
    fn runner_and_outside_paths_are_never_grouped() {
        let mut entries: Vec<BaselinePath> = (0..400).map(|i| file(&format!(".scafld/x/{i:03}"), "f")).collect();
        entries.push(file(".scafld/specs/active/t.md", "spec"));
        entries.push(BaselinePath { status: "outside".into(), fingerprint: String::new(), path: "/etc/x".into() });
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        let stored = stored(&entries);
        let paths: Vec<&str> = stored.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, vec![".scafld/specs/active/t.md", ".scafld/x/", "/etc/x"]);
        // The spec's own entry is compared by itself against a fresh read.
        let mut after = entries.clone();
        after.iter_mut().find(|e| e.path.starts_with(".scafld/specs/")).unwrap().fingerprint = "edited".into();
        let folded = like(&stored, &after);
        assert_eq!(folded.len(), 3);
        assert_eq!(folded.iter().find(|e| e.path == ".scafld/x/"), stored.iter().find(|e| e.path == ".scafld/x/"));
    }
}
