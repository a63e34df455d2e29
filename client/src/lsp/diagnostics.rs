//! scafld's spec diagnostics and review findings as LSP diagnostics, and what has been
//! published where: a URI's diagnostics are its spec's plus every finding citing it, so one
//! source changing republishes the whole list (and an emptied URI gets an empty list).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use lsp_types::{Diagnostic, DiagnosticRelatedInformation, DiagnosticSeverity, Location, NumberOrString, Uri};
use scafld_protocol::methods as m;
use serde::Deserialize;

use super::documents::{TaskKey, uri_to_path};
use super::lines::{LineMap, zero_based};

pub const SOURCE: &str = "scafld";

/// A diagnostic of scafld's on the editor's line for it in the text checked (`lines`).
pub fn spec_diagnostic(d: &m::Diagnostic, lines: &LineMap) -> Diagnostic {
    Diagnostic {
        range: lines.line_range(zero_based(d.line)),
        severity: Some(match d.severity {
            m::Severity::Error => DiagnosticSeverity::ERROR,
            m::Severity::Warning => DiagnosticSeverity::WARNING,
        }),
        source: Some(SOURCE.into()),
        message: d.message.clone(),
        ..Diagnostic::default()
    }
}

/// The fields of a review finding this server reads (the dossier's `finding`; the rest is
/// ignored).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Finding {
    id: String,
    severity: FindingSeverity,
    status: FindingStatus,
    blocks_completion: bool,
    summary: String,
    evidence: String,
    location: Option<FindingLocation>,
}

#[derive(Debug, Default, Deserialize)]
struct FindingLocation {
    path: String,
    #[serde(default)]
    line: Option<usize>,
}

/// The dossier's finding severities.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum FindingSeverity {
    Critical,
    High,
    #[default]
    Medium,
    Low,
}

/// The dossier's finding statuses; absent means open.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum FindingStatus {
    #[default]
    Open,
    Fixed,
    AcceptedRisk,
    Superseded,
}

/// Whether a task in this status can have findings to show: it is under way (active, blocked
/// or in review). A completed task shows none, nor a failed or cancelled one.
pub fn may_have_findings(status: &str) -> bool {
    matches!(status.parse::<m::Status>(), Ok(m::Status::Active | m::Status::Blocked | m::Status::Review))
}

/// The open findings of a task's latest review, each on the file and line it cites (the
/// spec's first line when it cites none, unless the spec file is missing). Nothing once the
/// task is no longer under way.
/// `uri_of` names the URI of a path (the editor's spelling for a file it has open);
/// `lines_of` places a cited line in that file (read as the reviewer read it).
pub fn findings(
    root: &Path,
    spec_path: &Path,
    status: &m::StatusResult,
    uri_of: impl Fn(&Path) -> Option<Uri>,
    lines_of: impl Fn(&Path) -> LineMap,
) -> Vec<(Uri, Diagnostic)> {
    if !may_have_findings(&status.status) {
        return Vec::new();
    }
    let Some(review) = &status.review else { return Vec::new() };
    let Some(list) = review.get("findings").and_then(|f| f.as_array()) else { return Vec::new() };
    let spec_uri = if status.spec_missing { None } else { uri_of(spec_path) };
    // Each cited file read once.
    let mut maps: BTreeMap<std::path::PathBuf, LineMap> = BTreeMap::new();
    let first_line = LineMap::default().line_range(0);
    list.iter()
        .filter_map(|value| serde_json::from_value::<Finding>(value.clone()).ok())
        .filter(|f| f.status == FindingStatus::Open)
        .filter_map(|f| {
            // A file of the workspace, as cited; anything else (outside it, or climbing out with
            // `..`) is no file of the user's to mark: the finding goes on the spec instead.
            let inside = f.location.as_ref().and_then(|location| {
                let cited = Path::new(&location.path);
                let path = lexically_normal(&if cited.is_absolute() { cited.to_path_buf() } else { root.join(cited) });
                path.starts_with(root).then_some((path, location.line))
            });
            let elsewhere = f.location.as_ref().filter(|_| inside.is_none());
            let (uri, range) = match inside {
                Some((path, Some(line))) => {
                    let uri = uri_of(&path)?;
                    (uri, maps.entry(path).or_insert_with_key(|path| lines_of(path)).line_range(zero_based(line)))
                }
                Some((path, None)) => (uri_of(&path)?, first_line),
                None => (spec_uri.clone()?, first_line),
            };
            let severity = match (f.severity, f.blocks_completion) {
                (FindingSeverity::Critical | FindingSeverity::High, _) | (_, true) => DiagnosticSeverity::ERROR,
                (FindingSeverity::Medium, _) => DiagnosticSeverity::WARNING,
                (FindingSeverity::Low, _) => DiagnosticSeverity::INFORMATION,
            };
            let mut message = [&f.summary, &f.evidence, &f.id].into_iter().find(|t| !t.is_empty()).cloned()?;
            if let Some(cited) = elsewhere {
                message.push_str(&format!(" (cites {}, outside the workspace)", cited.path));
            }
            let diagnostic = Diagnostic {
                range,
                severity: Some(severity),
                code: (!f.id.is_empty()).then(|| NumberOrString::String(f.id.clone())),
                source: Some(SOURCE.into()),
                message,
                related_information: spec_uri.clone().map(|spec_uri| {
                    vec![DiagnosticRelatedInformation {
                        location: Location::new(spec_uri, first_line),
                        message: format!("review finding of task `{}`", status.task_id),
                    }]
                }),
                ..Diagnostic::default()
            };
            Some((uri, diagnostic))
        })
        .collect()
}

/// `path` with `.` and `..` folded as written (no symlink followed): where it leads by name.
fn lexically_normal(path: &Path) -> std::path::PathBuf {
    let mut normal = std::path::PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                normal.pop();
            }
            other => normal.push(other),
        }
    }
    normal
}

/// Every published source of diagnostics, so that each URI's full list can be rebuilt.
#[derive(Debug, Default)]
pub struct Published {
    /// Spec diagnostics by the spec's URI.
    specs: BTreeMap<String, (Uri, Vec<Diagnostic>)>,
    /// Where each task's spec diagnostics were last published: a URI per open buffer of it
    /// (the same spec may be open through two paths, each buffer with its own text), or the
    /// file's when none is open (a moved spec clears its old URI).
    spec_of_task: BTreeMap<TaskKey, Vec<Uri>>,
    /// Each task's open findings.
    findings: BTreeMap<TaskKey, Vec<(Uri, Diagnostic)>>,
    /// URIs last published with something on them.
    shown: BTreeSet<String>,
}

impl Published {
    /// Replace all of a task's spec diagnostics (none when its spec is gone), a list per URI
    /// (a later one for the same URI wins); the URIs to republish.
    pub fn set_spec(&mut self, task: TaskKey, lists: Vec<(Uri, Vec<Diagnostic>)>) -> Vec<Uri> {
        let mut touched = Vec::new();
        for old in self.spec_of_task.remove(&task).unwrap_or_default() {
            self.specs.remove(old.as_str());
            touched.push(old);
        }
        let mut uris: Vec<Uri> = Vec::new();
        for (uri, diagnostics) in lists {
            if !uris.contains(&uri) {
                uris.push(uri.clone());
            }
            self.specs.insert(uri.as_str().to_string(), (uri.clone(), diagnostics));
            touched.push(uri);
        }
        if !uris.is_empty() {
            self.spec_of_task.insert(task, uris);
        }
        touched
    }

    /// Replace the list of one open buffer of a task, keeping those of its other open buffers
    /// (`open`) and dropping any other of the task's (the file's, published before the buffer
    /// opened); the URIs to republish (the kept ones are not).
    pub fn set_buffer(&mut self, task: TaskKey, uri: Uri, diagnostics: Vec<Diagnostic>, open: &[Uri]) -> Vec<Uri> {
        let mut touched = Vec::new();
        let uris = self.spec_of_task.entry(task).or_default();
        uris.retain(|old| {
            let kept = old != &uri && open.contains(old);
            if !kept && old != &uri {
                self.specs.remove(old.as_str());
                touched.push(old.clone());
            }
            kept
        });
        uris.push(uri.clone());
        self.specs.insert(uri.as_str().to_string(), (uri.clone(), diagnostics));
        touched.push(uri);
        touched
    }

    /// Drop one URI's spec diagnostics of a task (a closed buffer nothing can be read for);
    /// the URIs to republish.
    pub fn forget(&mut self, task: &TaskKey, uri: &Uri) -> Vec<Uri> {
        let Some(uris) = self.spec_of_task.get_mut(task) else { return Vec::new() };
        let before = uris.len();
        uris.retain(|u| u != uri);
        if uris.len() == before {
            return Vec::new();
        }
        if uris.is_empty() {
            self.spec_of_task.remove(task);
        }
        self.specs.remove(uri.as_str());
        vec![uri.clone()]
    }

    /// The editor opened `path` as `uri`: what was published for that file under another
    /// spelling of its URI moves to `uri`; the URIs to republish (the old emptied).
    pub fn respell(&mut self, path: &Path, uri: &Uri) -> Vec<Uri> {
        let other = |u: &Uri| u != uri && uri_to_path(u).as_deref() == Some(path);
        let mut touched: Vec<Uri> = Vec::new();
        let moved: Vec<String> = self.specs.iter().filter(|(_, (u, _))| other(u)).map(|(k, _)| k.clone()).collect();
        for key in moved {
            let Some((old, diagnostics)) = self.specs.remove(&key) else { continue };
            for uris in self.spec_of_task.values_mut() {
                uris.iter_mut().filter(|u| **u == old).for_each(|u| *u = uri.clone());
            }
            self.specs.insert(uri.as_str().to_string(), (uri.clone(), diagnostics));
            touched.push(old);
        }
        for list in self.findings.values_mut() {
            for (u, _) in list.iter_mut().filter(|(u, _)| other(u)) {
                touched.push(std::mem::replace(u, uri.clone()));
            }
        }
        if !touched.is_empty() {
            touched.push(uri.clone());
        }
        touched
    }

    /// Replace a task's findings; the URIs to republish (where they were and where they are).
    pub fn set_findings(&mut self, task: TaskKey, findings: Vec<(Uri, Diagnostic)>) -> Vec<Uri> {
        let mut touched: Vec<Uri> =
            self.findings.remove(&task).unwrap_or_default().into_iter().map(|(u, _)| u).collect();
        touched.extend(findings.iter().map(|(u, _)| u.clone()));
        if !findings.is_empty() {
            self.findings.insert(task, findings);
        }
        touched
    }

    /// The full list of `uri` now, when it must be sent: it has something, had something, or
    /// `force` (a buffer was just checked: its editor expects an answer, even an empty one).
    pub fn compose(&mut self, uri: &Uri, force: bool) -> Option<Vec<Diagnostic>> {
        let mut all: Vec<Diagnostic> = self.specs.get(uri.as_str()).map(|(_, d)| d.clone()).unwrap_or_default();
        for list in self.findings.values() {
            all.extend(list.iter().filter(|(u, _)| u == uri).map(|(_, d)| d.clone()));
        }
        let had =
            if all.is_empty() { self.shown.remove(uri.as_str()) } else { !self.shown.insert(uri.as_str().into()) };
        (force || had || !all.is_empty()).then_some(all)
    }

    /// Every URI with something on it (to republish after a reconnection).
    pub fn uris(&self) -> Vec<Uri> {
        let mut uris: BTreeMap<String, Uri> =
            self.specs.values().map(|(u, _)| (u.as_str().to_string(), u.clone())).collect();
        for list in self.findings.values() {
            uris.extend(list.iter().map(|(u, _)| (u.as_str().to_string(), u.clone())));
        }
        uris.into_values().collect()
    }

    /// The tasks whose spec diagnostics are published (an empty list included: it says the
    /// file was checked and found clean).
    pub fn tasks_with_spec(&self) -> Vec<TaskKey> {
        self.spec_of_task.keys().cloned().collect()
    }

    /// The tasks whose findings are published.
    pub fn tasks_with_findings(&self) -> Vec<TaskKey> {
        self.findings.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::documents::path_to_uri;
    use super::*;
    use std::str::FromStr;

    fn status(review: serde_json::Value, task_status: &str) -> m::StatusResult {
        serde_json::from_value(serde_json::json!({
            "task_id": "t", "next_action": {"role": "agent", "action": "repair", "command": "", "reason": ""},
            "title": "", "status": task_status, "harden_status": "not_run", "path": "", "current_phase": "",
            "next": "", "next_command": "", "review_gate": "", "phases": [], "criteria": [], "counts": {
                "phases_total": 0, "phases_completed": 0, "criteria_total": 0, "criteria_passed": 0,
                "criteria_failed": 0, "criteria_pending": 0},
            "valid": true, "errors": [], "review": review,
        }))
        .unwrap()
    }

    /// Files without a lone CR: scafld's lines are the editor's.
    fn no_lines(_: &Path) -> LineMap {
        LineMap::default()
    }

    #[test]
    fn open_findings_land_on_the_cited_line_and_resolved_ones_do_not() {
        let review = serde_json::json!({"findings": [
            {"id": "f1", "severity": "high", "blocks_completion": true, "summary": "broken", "location": {"path": "src/a.rs", "line": 3}},
            {"id": "f2", "severity": "low", "blocks_completion": false, "summary": "nit", "status": "open"},
            {"id": "f3", "severity": "high", "blocks_completion": true, "summary": "done", "status": "fixed"},
        ]});
        let spec = Path::new("/w/.scafld/specs/review/t.md");
        let found = findings(Path::new("/w"), spec, &status(review.clone(), "review"), path_to_uri, no_lines);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].0.as_str(), "file:///w/src/a.rs");
        assert_eq!(found[0].1.range.start.line, 2);
        assert_eq!(found[0].1.severity, Some(DiagnosticSeverity::ERROR));
        assert_eq!(found[0].1.code, Some(NumberOrString::String("f1".into())));
        assert_eq!(found[1].0.as_str(), "file:///w/.scafld/specs/review/t.md");
        assert_eq!(found[1].1.severity, Some(DiagnosticSeverity::INFORMATION));
        for over in ["completed", "failed", "cancelled"] {
            assert!(
                findings(Path::new("/w"), spec, &status(review.clone(), over), path_to_uri, no_lines).is_empty(),
                "{over}"
            );
        }
        // A lone CR before the cited line ends a line in the editor: the finding moves with it.
        let cr = |path: &Path| {
            assert_eq!(path, Path::new("/w/src/a.rs"));
            LineMap::of(b"a\rb\nc\nd\n")
        };
        let found = findings(Path::new("/w"), spec, &status(review, "review"), path_to_uri, cr);
        assert_eq!((found[0].1.range.start.line, found[0].1.range.end.line), (3, 4));
    }

    /// A finding citing a file outside the workspace (absolute, or climbing out with `..`) marks
    /// no file of the user's: it goes on the spec, naming what it cites.
    #[test]
    fn a_finding_citing_a_path_outside_the_workspace_lands_on_the_spec() {
        let review = serde_json::json!({"findings": [
            {"id": "f1", "severity": "high", "blocks_completion": true, "summary": "hosts", "location": {"path": "/etc/hosts", "line": 1}},
            {"id": "f2", "severity": "high", "blocks_completion": true, "summary": "up", "location": {"path": "src/../../etc/passwd", "line": 2}},
            {"id": "f3", "severity": "high", "blocks_completion": true, "summary": "in", "location": {"path": "./src/../b.rs", "line": 4}},
        ]});
        let spec = Path::new("/w/.scafld/specs/review/t.md");
        let found = findings(Path::new("/w"), spec, &status(review, "review"), path_to_uri, no_lines);
        let uris: Vec<&str> = found.iter().map(|(uri, _)| uri.as_str()).collect();
        assert_eq!(
            uris,
            ["file:///w/.scafld/specs/review/t.md", "file:///w/.scafld/specs/review/t.md", "file:///w/b.rs"]
        );
        assert_eq!(found[0].1.message, "hosts (cites /etc/hosts, outside the workspace)");
        assert_eq!(found[1].1.message, "up (cites src/../../etc/passwd, outside the workspace)");
        assert_eq!((found[2].1.message.as_str(), found[2].1.range.start.line), ("in", 3));
    }

    /// A file the editor opens under another spelling of its URI takes what was published for
    /// it there (spec diagnostics and findings alike); the old spelling is emptied once.
    #[test]
    fn lists_move_to_the_editors_spelling_of_a_uri() {
        let mut published = Published::default();
        let ours = Uri::from_str("file:///w%C3%B6/src/a.rs").unwrap();
        let editors = Uri::from_str("file:///w%c3%b6/src/a.rs").unwrap();
        let task: TaskKey = ("/wö".into(), "t".into());
        let d = spec_diagnostic(
            &m::Diagnostic { line: 1, severity: m::Severity::Error, message: "x".into() },
            &LineMap::default(),
        );
        published.set_findings(task, vec![(ours.clone(), d.clone())]);
        assert!(published.compose(&ours, false).is_some());
        let touched = published.respell(Path::new("/wö/src/a.rs"), &editors);
        assert_eq!(touched, vec![ours.clone(), editors.clone()]);
        assert_eq!(published.compose(&ours, false), Some(vec![]), "the old spelling is emptied");
        assert_eq!(published.compose(&editors, false), Some(vec![d]));
        assert!(published.respell(Path::new("/wö/src/a.rs"), &editors).is_empty(), "nothing moves twice");
        assert!(published.respell(Path::new("/elsewhere.rs"), &editors).is_empty());
    }

    #[test]
    fn a_uri_emptied_of_everything_gets_one_empty_list() {
        let mut published = Published::default();
        let uri = Uri::from_str("file:///w/.scafld/specs/drafts/t.md").unwrap();
        let task: TaskKey = ("/w".into(), "t".into());
        let d = spec_diagnostic(
            &m::Diagnostic { line: 0, severity: m::Severity::Error, message: "x".into() },
            &LineMap::default(),
        );
        assert_eq!(d.range.start.line, 0);
        published.set_spec(task.clone(), vec![(uri.clone(), vec![d])]);
        assert_eq!(published.compose(&uri, false).unwrap().len(), 1);
        published.set_spec(task, vec![(uri.clone(), vec![])]);
        assert_eq!(published.compose(&uri, false), Some(vec![]));
        assert_eq!(published.compose(&uri, false), None);
        assert_eq!(published.compose(&uri, true), Some(vec![]));
    }

    /// Two buffers of one task (the spec through two paths) each keep their own list; the
    /// file's list published before they opened goes.
    #[test]
    fn each_open_buffer_of_a_task_keeps_its_own_list() {
        let mut published = Published::default();
        let uri = |p: &str| Uri::from_str(&format!("file://{p}/.scafld/specs/drafts/t.md")).unwrap();
        let (file, one, two) = (uri("/w"), uri("/one"), uri("/two"));
        let task: TaskKey = ("/w".into(), "t".into());
        let d = spec_diagnostic(
            &m::Diagnostic { line: 3, severity: m::Severity::Error, message: "x".into() },
            &LineMap::default(),
        );
        published.set_spec(task.clone(), vec![(file.clone(), vec![d.clone()])]);
        assert!(published.compose(&file, false).is_some());
        let open = [one.clone(), two.clone()];
        assert_eq!(
            published.set_buffer(task.clone(), one.clone(), vec![d.clone()], &open),
            vec![file.clone(), one.clone()]
        );
        assert_eq!(published.set_buffer(task.clone(), two.clone(), vec![], &open), vec![two.clone()]);
        assert_eq!(published.compose(&one, false), Some(vec![d]), "the first buffer keeps its list");
        assert_eq!(published.compose(&file, false), Some(vec![]), "the file's list is emptied once");
        assert_eq!(published.forget(&task, &one), vec![one.clone()]);
        assert_eq!(published.compose(&one, false), Some(vec![]));
    }
}
