//! Open spec buffers (text, version, whether they differ from the file) with their change
//! debounce, and the mapping between `file:` URIs, paths and (workspace root, task id).

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant};

use lsp_types::Uri;
use scafld_protocol::vocab::Folder;

/// How long typing must pause before a changed buffer is checked.
pub const DEBOUNCE: Duration = Duration::from_millis(150);

/// Where a spec file belongs: its workspace root (as the editor names it) and its task id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecFile {
    pub root: PathBuf,
    pub task_id: String,
}

impl SpecFile {
    /// The task as the daemon knows it: under its root's canonical path (a workspace reached
    /// through a symbolic link is the same workspace).
    pub fn key(&self) -> TaskKey {
        let root = self.root.canonicalize().unwrap_or_else(|_| self.root.clone());
        (root, self.task_id.clone())
    }
}

/// A task: its workspace root's canonical path and its id.
pub type TaskKey = (PathBuf, String);

/// A spec file: `<root>/.scafld/specs/<lifecycle folder>/<task>.md` (the archive's at depth, as
/// the daemon finds them), or `None` for any other path (`specs/README.md`, one that climbs out
/// with `..`).
pub fn spec_file(path: &Path) -> Option<SpecFile> {
    let task_id = path.file_stem()?.to_str()?.to_string();
    let components: Vec<Component> = path.components().collect();
    // The last `.scafld/specs` pair on the path: a workspace nested inside another is its own.
    let at = components.windows(2).rposition(|w| w[0].as_os_str() == ".scafld" && w[1].as_os_str() == "specs")?;
    Folder::holding(&components[at + 2..].iter().collect::<PathBuf>())?;
    let root: PathBuf = components[..at].iter().collect();
    Some(SpecFile { root, task_id })
}

/// Bytes a path keeps unescaped in a `file:` URI (RFC 3986 unreserved, `/` and a few safe
/// sub-delimiters editors leave alone).
fn keep(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"-._~/!$&'()*+,;=:@".contains(&byte)
}

/// The `file:` URI of an absolute path.
pub fn path_to_uri(path: &Path) -> Option<Uri> {
    use std::os::unix::ffi::OsStrExt;
    let mut text = String::from("file://");
    for &byte in path.as_os_str().as_bytes() {
        if keep(byte) {
            text.push(byte as char);
        } else {
            text.push_str(&format!("%{byte:02X}"));
        }
    }
    Uri::from_str(&text).ok()
}

/// The path of a `file:` URI (percent-decoded); `None` for other schemes or a remote host.
pub fn uri_to_path(uri: &Uri) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    let rest = uri.as_str().strip_prefix("file://")?;
    // `file:///p` (empty authority) or `file://localhost/p`.
    let path = rest.strip_prefix("localhost").unwrap_or(rest);
    if !path.starts_with('/') {
        return None;
    }
    let path = path.split(['?', '#']).next().unwrap_or(path);
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = path.get(i + 1..i + 3)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    Some(PathBuf::from(std::ffi::OsString::from_vec(out)))
}

/// One open spec buffer.
#[derive(Debug, Clone)]
pub struct Document {
    pub uri: Uri,
    pub spec: SpecFile,
    /// `spec.key()`, once, when opened.
    pub key: TaskKey,
    pub text: String,
    /// Whether the buffer has edits the file does not (yet) have: the file's own changes are
    /// then not this buffer's diagnostics.
    pub dirty: bool,
    /// When the pending change should be checked (debounce), if one is pending.
    due: Option<Instant>,
}

/// The open spec buffers, by URI, and how the editor spells the URI of every file it opened.
#[derive(Debug, Default)]
pub struct Documents {
    open: BTreeMap<String, Document>,
    /// The URI each open file (spec or not) came under, by its path: a list is published under
    /// the editor's own spelling (`%3a` or `%3A`, `:` or `%3A`), never another of the same file.
    spelled: BTreeMap<PathBuf, Uri>,
}

impl Documents {
    /// Note the editor's spelling of an opened file's URI; its path when it is a `file:` one.
    pub fn spelled_as(&mut self, uri: &Uri) -> Option<PathBuf> {
        let path = uri_to_path(uri)?;
        self.spelled.insert(path.clone(), uri.clone());
        Some(path)
    }

    /// The URI to publish `path`'s list under: the editor's, when it opened the file, else ours.
    pub fn uri_of(&self, path: &Path) -> Option<Uri> {
        self.spelled.get(path).cloned().or_else(|| path_to_uri(path))
    }

    /// The editor closed `uri`: its spelling is forgotten (unless the file is open under another).
    pub fn closed(&mut self, uri: &Uri) {
        if let Some(path) = uri_to_path(uri)
            && self.spelled.get(&path).is_some_and(|spelled| spelled == uri)
        {
            self.spelled.remove(&path);
        }
    }

    /// Track an opened buffer; `None` when it is not a spec.
    pub fn open(&mut self, uri: Uri, text: String) -> Option<&Document> {
        let spec = spec_file(&uri_to_path(&uri)?)?;
        let at = uri.as_str().to_string();
        let key = spec.key();
        self.open.insert(at.clone(), Document { uri, spec, key, text, dirty: false, due: None });
        self.open.get(&at)
    }

    /// A new full text for an open buffer; checked after [`DEBOUNCE`].
    pub fn change(&mut self, uri: &Uri, text: String, now: Instant) -> bool {
        let Some(doc) = self.open.get_mut(uri.as_str()) else { return false };
        doc.text = text;
        doc.dirty = true;
        doc.due = Some(now + DEBOUNCE);
        true
    }

    /// The buffer was written to its file (with its text when the editor sends it).
    pub fn saved(&mut self, uri: &Uri, text: Option<String>) -> Option<&Document> {
        let doc = self.open.get_mut(uri.as_str())?;
        if let Some(text) = text {
            doc.text = text;
        }
        doc.dirty = false;
        doc.due = None;
        Some(doc)
    }

    pub fn close(&mut self, uri: &Uri) -> Option<Document> {
        self.open.remove(uri.as_str())
    }

    pub fn get(&self, uri: &Uri) -> Option<&Document> {
        self.open.get(uri.as_str())
    }

    pub fn all(&self) -> impl Iterator<Item = &Document> {
        self.open.values()
    }

    /// The open buffers of a task (one spec may be open through two paths).
    pub fn of_task(&self, key: &TaskKey) -> Vec<Document> {
        self.open.values().filter(|d| &d.key == key).cloned().collect()
    }

    /// The earliest pending check.
    pub fn next_due(&self) -> Option<Instant> {
        self.open.values().filter_map(|d| d.due).min()
    }

    /// The buffers whose debounce ran out by `now` (their pending check taken).
    pub fn take_due(&mut self, now: Instant) -> Vec<Document> {
        self.open
            .values_mut()
            .filter(|d| d.due.is_some_and(|due| due <= now))
            .map(|d| {
                d.due = None;
                d.clone()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_files_are_markdown_under_dot_scafld_specs() {
        let spec = spec_file(Path::new("/w/a b/.scafld/specs/drafts/add-x.md")).unwrap();
        assert_eq!(spec, SpecFile { root: PathBuf::from("/w/a b"), task_id: "add-x".into() });
        assert!(spec_file(Path::new("/w/.scafld/specs/active/t.md")).is_some());
        assert!(spec_file(Path::new("/w/.scafld/specs/t.txt")).is_none());
        assert!(spec_file(Path::new("/w/.scafld/reviews/t.md")).is_none());
        assert!(spec_file(Path::new("/w/src/t.md")).is_none());
        assert!(spec_file(Path::new("/w/.scafld/specs/../../etc/t.md")).is_none());
        assert!(spec_file(Path::new("/w/.scafld/specs/./drafts/t.md")).is_some(), "`.` inside a path is dropped");
        // Where the daemon finds specs, and nowhere else under `specs/`.
        assert!(spec_file(Path::new("/w/.scafld/specs/archive/legacy/2025-01/t.md")).is_some());
        assert!(spec_file(Path::new("/w/.scafld/specs/README.md")).is_none());
        assert!(spec_file(Path::new("/w/.scafld/specs/notes/t.md")).is_none());
        assert!(spec_file(Path::new("/w/.scafld/specs/drafts/.t.md.tmp-1-2.md")).is_none());
    }

    #[test]
    fn uris_round_trip_through_paths_with_spaces_and_unicode() {
        let path = Path::new("/tmp/a b/ünï%/x.md");
        let uri = path_to_uri(path).unwrap();
        assert_eq!(uri.as_str(), "file:///tmp/a%20b/%C3%BCn%C3%AF%25/x.md");
        assert_eq!(uri_to_path(&uri).unwrap(), path);
        assert_eq!(uri_to_path(&Uri::from_str("file://localhost/x/y.md").unwrap()).unwrap(), Path::new("/x/y.md"));
        assert!(uri_to_path(&Uri::from_str("untitled:Untitled-1").unwrap()).is_none());
    }

    /// A file is published under the URI the editor opened it with, whatever its escapes.
    #[test]
    fn a_file_keeps_the_editors_spelling_of_its_uri() {
        let mut docs = Documents::default();
        let path = Path::new("/tmp/a:b/ü.md");
        assert_eq!(docs.uri_of(path).unwrap().as_str(), "file:///tmp/a:b/%C3%BC.md");
        let editor = Uri::from_str("file:///tmp/a%3ab/%c3%bc.md").unwrap();
        assert_eq!(docs.spelled_as(&editor).as_deref(), Some(path));
        assert_eq!(docs.uri_of(path), Some(editor.clone()));
        docs.closed(&Uri::from_str("file:///tmp/a:b/%C3%BC.md").unwrap());
        assert_eq!(docs.uri_of(path), Some(editor.clone()), "another spelling's close keeps it");
        docs.closed(&editor);
        assert_eq!(docs.uri_of(path).unwrap().as_str(), "file:///tmp/a:b/%C3%BC.md");
    }

    #[test]
    fn a_change_waits_for_the_debounce() {
        let mut docs = Documents::default();
        let uri = Uri::from_str("file:///w/.scafld/specs/drafts/t.md").unwrap();
        assert!(docs.open(uri.clone(), "a".into()).is_some());
        let now = Instant::now();
        assert!(docs.change(&uri, "b".into(), now));
        assert!(docs.take_due(now).is_empty());
        assert_eq!(docs.next_due(), Some(now + DEBOUNCE));
        let due = docs.take_due(now + DEBOUNCE);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].text, "b");
        assert!(docs.get(&uri).unwrap().dirty);
        assert_eq!(docs.next_due(), None);
    }
}
