//! A spec's outline for the editor: document symbols (phases and their criteria), hover text
//! for a criterion or a phase heading, and the code lenses of the scafld commands. Lines are
//! scafld's (0-based) until a position is built ([`LineMap`]).

use lsp_types::{
    CodeLens, Command, DocumentSymbol, Hover, HoverContents, MarkupContent, MarkupKind, Position, Range, SymbolKind,
    Uri,
};
use scafld_protocol::methods as m;

use super::lines::{LineMap, zero_based};

/// The workspace commands the server runs (`workspace/executeCommand`), by their LSP names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScafldCommand {
    Build,
    Review,
    Status,
    Handoff,
}

impl ScafldCommand {
    pub const ALL: [ScafldCommand; 4] =
        [ScafldCommand::Build, ScafldCommand::Review, ScafldCommand::Status, ScafldCommand::Handoff];

    pub fn name(self) -> &'static str {
        match self {
            ScafldCommand::Build => "scafld.build",
            ScafldCommand::Review => "scafld.review",
            ScafldCommand::Status => "scafld.status",
            ScafldCommand::Handoff => "scafld.handoff",
        }
    }

    pub fn parse(name: &str) -> Option<ScafldCommand> {
        ScafldCommand::ALL.into_iter().find(|c| c.name() == name)
    }

    /// Whether it may run long (a build's acceptance, a review): reported with `$/progress`.
    pub fn is_long(self) -> bool {
        matches!(self, ScafldCommand::Build | ScafldCommand::Review)
    }

    fn title(self) -> &'static str {
        match self {
            ScafldCommand::Build => "scafld build",
            ScafldCommand::Review => "scafld review",
            ScafldCommand::Status => "scafld status",
            ScafldCommand::Handoff => "scafld handoff",
        }
    }
}

/// One lens per command on the spec's first line; each passes the spec's URI.
pub fn lenses(uri: &Uri) -> Vec<CodeLens> {
    ScafldCommand::ALL
        .into_iter()
        .map(|c| CodeLens {
            range: Range::new(Position::new(0, 0), Position::new(0, 0)),
            command: Some(Command {
                title: c.title().into(),
                command: c.name().into(),
                arguments: Some(vec![serde_json::Value::String(uri.as_str().into())]),
            }),
            data: None,
        })
        .collect()
}

/// The last line (0-based) of a criterion starting at `head`: its indented detail lines.
fn criterion_end(lines: &[&str], head: u32) -> u32 {
    let mut end = head;
    while let Some(next) = lines.get(end as usize + 1) {
        if next.trim().is_empty() || !next.starts_with([' ', '\t']) {
            break;
        }
        end += 1;
    }
    end
}

fn criterion_symbol(c: &m::CriterionStructure, lines: &[&str], map: &LineMap) -> DocumentSymbol {
    let head = zero_based(c.line);
    #[allow(deprecated)] // `deprecated` is a required field of the type, superseded by tags.
    DocumentSymbol {
        name: c.id.clone(),
        detail: Some(format!("{} - {}", c.kind, c.title)),
        kind: SymbolKind::EVENT,
        tags: None,
        deprecated: None,
        range: map.whole_lines(head, criterion_end(lines, head)),
        selection_range: map.line_range(head),
        children: None,
    }
}

/// Phases with their criteria, then the task-level criteria.
pub fn symbols(spec: &m::ValidateResult, text: &str) -> Vec<DocumentSymbol> {
    let lines: Vec<&str> = text.lines().collect();
    let map = LineMap::of(text.as_bytes());
    let mut out = Vec::new();
    for (i, phase) in spec.phases.iter().enumerate() {
        let head = zero_based(phase.line);
        let last_criterion = |c: &m::CriterionStructure| criterion_end(&lines, zero_based(c.line));
        let children: Vec<DocumentSymbol> = phase.criteria.iter().map(|c| criterion_symbol(c, &lines, &map)).collect();
        let end = match spec.phases.get(i + 1) {
            Some(next) if next.line > phase.line => zero_based(next.line).saturating_sub(1),
            _ => phase.criteria.iter().map(last_criterion).max().unwrap_or(head),
        };
        #[allow(deprecated)]
        out.push(DocumentSymbol {
            name: format!("Phase {}: {}", phase.id.trim_start_matches("phase"), phase.name),
            detail: (!phase.objective.is_empty()).then(|| phase.objective.clone()),
            kind: SymbolKind::NAMESPACE,
            tags: None,
            deprecated: None,
            range: map.whole_lines(head, end.max(head)),
            selection_range: map.line_range(head),
            children: Some(children),
        });
    }
    out.extend(spec.criteria.iter().map(|c| criterion_symbol(c, &lines, &map)));
    out
}

fn markdown(value: String) -> Hover {
    Hover { contents: HoverContents::Markup(MarkupContent { kind: MarkupKind::Markdown, value }), range: None }
}

/// What to show for the editor's 0-based `line`: a criterion's state, or a phase's progress.
pub fn hover(spec: &m::ValidateResult, status: Option<&m::StatusResult>, text: &str, line: u32) -> Option<Hover> {
    let lines: Vec<&str> = text.lines().collect();
    let line = LineMap::of(text.as_bytes()).scafld_line(line);
    if let Some(phase) = spec.phases.iter().find(|p| p.line > 0 && zero_based(p.line) == line) {
        let progress = status.and_then(|s| s.phases.iter().find(|p| p.id == phase.id));
        let value = match progress {
            Some(p) => format!(
                "**{}** ({}): {}\n\n{}/{} criteria passed",
                phase.name, phase.id, p.status, p.criteria_passed, p.criteria_total
            ),
            None => {
                format!("**{}** ({}): {} criteria; no recorded progress", phase.name, phase.id, phase.criteria.len())
            }
        };
        return Some(markdown(value));
    }
    let criterion = spec.phases.iter().flat_map(|p| p.criteria.iter()).chain(spec.criteria.iter()).find(|c| {
        let head = zero_based(c.line);
        c.line > 0 && (head..=criterion_end(&lines, head)).contains(&line)
    })?;
    let state = status.and_then(|s| s.criteria.iter().find(|c| c.id == criterion.id));
    let mut value = format!("**`{}`** {} - {}\n\n", criterion.id, criterion.kind, criterion.title);
    match state {
        Some(state) => {
            value.push_str(&format!("- status: **{}** ({})\n", state.status, evidence(state, criterion)));
        }
        None => value.push_str("- status: unknown (the daemon has no record of this task)\n"),
    }
    if !criterion.command.is_empty() {
        value.push_str(&format!("- command: `{}`\n", criterion.command));
    }
    value.push_str(&format!("- expected: {}\n", criterion.expected_kind));
    if let Some(state) = state {
        match (state.exit_code, state.duration_ms) {
            (Some(code), Some(ms)) => value.push_str(&format!("- last run: exit code {code}, {ms} ms\n")),
            (Some(code), None) => value.push_str(&format!("- last run: exit code {code}\n")),
            (None, Some(ms)) => value.push_str(&format!("- last run: no exit code, {ms} ms\n")),
            (None, None) => value.push_str("- last run: none\n"),
        }
    }
    Some(markdown(value))
}

/// What the recorded result of `criterion` is worth. The daemon's record speaks for the saved
/// file: an unsaved edit of the criterion's definition has not run, whatever the saved one did.
fn evidence(state: &m::CriterionState, criterion: &m::CriterionStructure) -> String {
    let edited = state.command != criterion.command || state.expected_kind != criterion.expected_kind;
    match state.freshness {
        _ if edited => "for the saved definition; this buffer's edit of it has not run".to_string(),
        m::Freshness::Current => "evidence current".to_string(),
        m::Freshness::Stale if state.stale_reason.is_empty() => "evidence stale".to_string(),
        m::Freshness::Stale => format!("evidence stale: {}", state.stale_reason),
        m::Freshness::None => "no evidence yet".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn criterion(id: &str, line: usize) -> m::CriterionStructure {
        m::CriterionStructure {
            id: id.into(),
            kind: "test".into(),
            title: "works".into(),
            expected_kind: "exit_code_zero".into(),
            command: "true".into(),
            cwd: String::new(),
            timeout_seconds: None,
            line,
        }
    }

    fn spec() -> m::ValidateResult {
        m::ValidateResult {
            task_id: "t".into(),
            path: String::new(),
            valid: true,
            diagnostics: vec![],
            title: "T".into(),
            status: "draft".into(),
            phases: vec![
                m::PhaseStructure {
                    id: "phase1".into(),
                    name: "One".into(),
                    objective: "o".into(),
                    criteria: vec![criterion("a1", 3)],
                    line: 1,
                },
                m::PhaseStructure {
                    id: "phase2".into(),
                    name: "Two".into(),
                    objective: String::new(),
                    criteria: vec![],
                    line: 6,
                },
            ],
            criteria: vec![],
            warnings: vec![],
        }
    }

    const TEXT: &str = "## Phase 1: One\n\n- [ ] `a1` test - works\n  - Command: `true`\n\n## Phase 2: Two\n";

    #[test]
    fn symbols_nest_criteria_under_their_phase_with_lines() {
        let symbols = symbols(&spec(), TEXT);
        assert_eq!(symbols.len(), 2);
        assert_eq!(symbols[0].name, "Phase 1: One");
        // Whole lines: a range ends at the start of the line after its last (0-4, 2-3).
        let end = |r: Range| (r.end.line, r.end.character);
        assert_eq!((symbols[0].range.start.line, end(symbols[0].range)), (0, (5, 0)));
        let child = &symbols[0].children.as_ref().unwrap()[0];
        assert_eq!((child.name.as_str(), child.range.start.line, end(child.range)), ("a1", 2, (4, 0)));
    }

    #[test]
    fn hover_covers_a_criterion_and_its_detail_lines_and_phase_headings() {
        let text = |h: Hover| match h.contents {
            HoverContents::Markup(m) => m.value,
            _ => unreachable!(),
        };
        assert!(text(hover(&spec(), None, TEXT, 3).unwrap()).contains("command: `true`"));
        assert!(text(hover(&spec(), None, TEXT, 0).unwrap()).contains("**One** (phase1)"));
        assert!(hover(&spec(), None, TEXT, 1).is_none());
    }

    #[test]
    fn evidence_recorded_for_the_saved_definition_is_not_current_for_an_edited_buffer() {
        let saved = m::CriterionState {
            id: "a1".into(),
            phase_id: "phase1".into(),
            title: "works".into(),
            command: "true".into(),
            expected_kind: "exit_code_zero".into(),
            status: "pass".into(),
            evidence: String::new(),
            freshness: m::Freshness::Current,
            stale_reason: String::new(),
            exit_code: Some(0),
            duration_ms: None,
            output_excerpt: String::new(),
            diagnostic: String::new(),
            diagnostic_error: String::new(),
        };
        assert_eq!(evidence(&saved, &criterion("a1", 3)), "evidence current");
        let edited = m::CriterionStructure { command: "true # never run".into(), ..criterion("a1", 3) };
        assert!(evidence(&saved, &edited).contains("has not run"));
        let expects_other = m::CriterionStructure { expected_kind: "no_matches".into(), ..criterion("a1", 3) };
        assert!(evidence(&saved, &expects_other).contains("has not run"));
    }
}
