//! The projection writer: put a changed model back into the spec text, rewriting only the
//! runner-owned sections whose canonical text changed and keeping every other byte.

use super::model::Spec;
use super::parse::{SectionKey, parse};
use super::render;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProjectionError {
    #[error("the phases on disk ({on_disk}) differ from the ones being written ({written}); run `scafld reconcile`")]
    PhaseShapeChanged { on_disk: String, written: String },
    #[error("the spec on disk has a duplicate `## {0}` section; fix it by hand first")]
    DuplicateSection(String),
}

/// Rewrite `text` (the spec as it is on disk) so that it shows `next`.
pub fn project(text: &str, next: &Spec) -> Result<String, ProjectionError> {
    let parsed = parse(text);
    let previous = &parsed.spec;
    let ids = |spec: &Spec| spec.phases.iter().map(|p| p.id()).collect::<Vec<_>>().join(",");
    if ids(previous) != ids(next) {
        return Err(ProjectionError::PhaseShapeChanged { on_disk: ids(previous), written: ids(next) });
    }
    let mut keys: Vec<&SectionKey> = Vec::new();
    for (key, _, _) in &parsed.layout.sections {
        if !matches!(key, SectionKey::Other(_)) {
            if keys.contains(&key) {
                return Err(ProjectionError::DuplicateSection(format!("{key:?}")));
            }
            keys.push(key);
        }
    }

    let eol = if parsed.layout.crlf { "\r\n" } else { "\n" };
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    // (start line, end line, replacement) for every part whose canonical text changed.
    let mut replacements: Vec<(usize, usize, String)> = Vec::new();
    let mut appended = String::new();

    match parsed.layout.front_matter {
        Some((start, end)) if render::front_matter(&previous.front) != render::front_matter(&next.front) => {
            replacements.push((start, end, render::front_matter(&next.front)));
        }
        Some(_) => {}
        None => replacements.push((0, 0, render::front_matter(&next.front) + "\n")),
    }

    for (key, rendered_next) in managed_sections(next) {
        // An absent section parses as the default, so a section is written (or appended) only
        // once the model has something in it that the file does not show.
        if render_section(previous, &key).as_deref() == Some(rendered_next.as_str()) {
            continue;
        }
        match parsed.layout.sections.iter().find(|(k, _, _)| *k == key) {
            Some((_, start, end)) => {
                let last = *end == lines.len();
                let text = if last { rendered_next } else { format!("{rendered_next}\n") };
                replacements.push((*start, *end, text));
            }
            None => {
                appended.push('\n');
                appended.push_str(&rendered_next);
            }
        }
    }

    replacements.sort_by_key(|(start, _, _)| *start);
    let mut out = String::with_capacity(text.len() + appended.len());
    let mut cursor = 0;
    for (start, end, replacement) in replacements {
        out.extend(lines[cursor..start].iter().copied());
        out.push_str(&with_eol(&replacement, eol));
        cursor = end;
    }
    out.extend(lines[cursor..].iter().copied());
    if !appended.is_empty() {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push_str(eol);
        }
        out.push_str(&with_eol(&appended, eol));
    }
    Ok(out)
}

/// The runner-owned sections of `spec` with their canonical text.
fn managed_sections(spec: &Spec) -> Vec<(SectionKey, String)> {
    let mut out = vec![(SectionKey::CurrentState, render::current_state(spec))];
    out.push((SectionKey::Acceptance, render::acceptance(&spec.acceptance)));
    for phase in &spec.phases {
        out.push((SectionKey::Phase(phase.number), render::phase(phase)));
    }
    out.push((SectionKey::Review, render::review(&spec.review)));
    out.push((SectionKey::HardenRounds, render::harden_rounds(&spec.harden_rounds)));
    out
}

fn render_section(spec: &Spec, key: &SectionKey) -> Option<String> {
    managed_sections(spec).into_iter().find(|(k, _)| k == key).map(|(_, text)| text)
}

fn with_eol(text: &str, eol: &str) -> String {
    if eol == "\n" { text.to_string() } else { text.replace("\r\n", "\n").replace('\n', eol) }
}
