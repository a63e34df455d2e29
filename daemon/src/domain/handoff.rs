//! The handoff: a compact, model-facing summary of a task. Rendered on demand, never stored,
//! never read back.

use std::fmt::Write as _;

use std::collections::BTreeMap;

use crate::domain::build;
use crate::domain::evidence::Stale;
use crate::domain::lifecycle::Status;
use crate::domain::next::NextAction;
use crate::domain::spec::{Criterion, Phase, Spec};

const MAX_SCOPE: usize = 5;
const MAX_TOUCHPOINTS: usize = 8;
const MAX_CHANGES: usize = 12;

/// The phase the task is on: the first that is active or blocked (one an amendment reopened
/// before the phase opened after it, as `build::current` builds it), else the one Current State
/// names if it is open, else the first phase that is not completed. `None` means final
/// acceptance (or no phases).
pub fn current_phase(spec: &Spec) -> Option<&Phase> {
    let named = spec.current_state.current_phase.as_str();
    spec.phases
        .iter()
        .find(|p| matches!(p.status.as_str(), "active" | "blocked"))
        .or_else(|| spec.phases.iter().find(|p| p.id() == named && p.status != "completed"))
        .or_else(|| spec.phases.iter().find(|p| p.status != "completed"))
}

/// The latest run of a criterion: exit code and output excerpt (from the ledger).
pub type LastRuns = std::collections::BTreeMap<String, (Option<i32>, String)>;

/// What the handoff says besides the spec: the next action (the same one `status` gives),
/// stale evidence, and the latest run of each criterion.
pub struct Context<'a> {
    pub errors: &'a [String],
    pub runs: &'a LastRuns,
    pub next: &'a NextAction,
    pub stale: &'a BTreeMap<String, Stale>,
    /// A person's reason for rejecting the latest review (manual approval), if they did.
    pub rejected: Option<&'a str>,
}

pub fn render(spec: &Spec, cx: &Context<'_>) -> String {
    let (errors, runs) = (cx.errors, cx.runs);
    let id = &spec.front.task_id;
    let status = spec.status();
    let mut out = format!(
        "# Handoff: {}\n\nTask: {id}\nStatus: {}\nNext: `{}` ({})\n",
        spec.title,
        spec.status_word(),
        cx.next.command,
        cx.next.reason
    );

    out.push_str("\n## Task Contract\n\n");
    out.push_str(if spec.summary.is_empty() { "(no summary)" } else { &spec.summary });
    out.push('\n');
    list(&mut out, "Scope", &spec.scope, MAX_SCOPE);
    list(&mut out, "Touchpoints", &spec.touchpoints, MAX_TOUCHPOINTS);

    if matches!(status, Some(Status::Approved | Status::Active | Status::Blocked)) {
        out.push_str("\n## Build Step\n\n");
        match current_phase(spec) {
            Some(phase) => {
                let _ = writeln!(out, "Current phase: {} - {}", phase.id(), phase.name);
                if !phase.objective.is_empty() {
                    let _ = writeln!(out, "Objective: {}", phase.objective);
                }
                list(&mut out, "Changes", &phase.changes, MAX_CHANGES);
                out.push_str("\nAcceptance:\n");
                for c in &phase.criteria {
                    criterion_line(&mut out, c);
                }
            }
            None => {
                out.push_str("Current step: final acceptance\n");
                for c in &spec.acceptance.criteria {
                    criterion_line(&mut out, c);
                }
            }
        }
        let _ = writeln!(out, "\nAfter implementing this step, run `scafld build {id}` to record evidence.");
    }

    out.push_str("\n## Acceptance Evidence\n\n");
    let mut any = false;
    for c in spec.criteria() {
        any = true;
        let evidence = if c.evidence.is_empty() { "no evidence recorded" } else { &c.evidence };
        let state = match cx.stale.get(&c.id) {
            Some(why) => format!("{}, stale: {}", c.state(), why.describe()),
            None => c.state().to_string(),
        };
        let _ = writeln!(out, "- [{state}] {} (`{}`): {evidence}", c.display_title(), c.id);
    }
    if !any {
        out.push_str("- none\n");
    }

    if status == Some(Status::Blocked) {
        let target = build::current(spec);
        let blockers = build::blockers(spec, &target);
        if !blockers.is_empty() {
            out.push_str("\n## Blocked Acceptance\n\n");
        }
        for b in &blockers {
            let Some(c) = spec.criteria().find(|c| c.id == b.id) else { continue };
            if b.manual {
                let _ = writeln!(
                    out,
                    "- `{}` {} (manual)\n  - Needs a person's evidence: `scafld build {id} {} --disposition pass|fail --reason \"what was checked\"`",
                    c.id,
                    c.display_title(),
                    scafld_protocol::cli::criterion_flag(&c.id)
                );
                continue;
            }
            let _ = writeln!(
                out,
                "- `{}` {}\n  - Command: `{}`\n  - Expected kind: `{}`\n  - Evidence: {}",
                c.id,
                c.display_title(),
                c.command,
                c.effective_kind(),
                b.reason
            );
            if let Some((exit_code, output)) = runs.get(&c.id) {
                if let Some(code) = exit_code {
                    let _ = writeln!(out, "  - Exit code: {code}");
                }
                if !output.trim().is_empty() {
                    let quoted = crate::domain::packet::fenced("text", output.trim_end());
                    let _ = writeln!(out, "  - Output (last lines):\n\n{quoted}");
                }
            }
        }
    }

    if spec.review.verdict == "fail" && !spec.review.body.is_empty() {
        match cx.rejected {
            Some(why) => {
                let _ = write!(
                    out,
                    "\n## Review Dossier\n\nA person rejected the latest review: {why}\nChange the work to answer that, rerun `scafld build`, then review again.\n\n"
                );
            }
            None => out.push_str(
                "\n## Review Dossier\n\nThe latest review failed; repair these findings, rerun `scafld build`, then review again.\n\n",
            ),
        }
        for line in &spec.review.body {
            let _ = writeln!(out, "{line}");
        }
    }

    if !errors.is_empty() {
        out.push_str("\n## Spec Problems\n\nFix these before anything else:\n");
        for e in errors {
            let _ = writeln!(out, "- {e}");
        }
    }
    out
}

fn list(out: &mut String, heading: &str, items: &[String], max: usize) {
    if items.is_empty() {
        return;
    }
    let _ = writeln!(out, "\n{heading}:");
    for item in items.iter().take(max) {
        let _ = writeln!(out, "- {item}");
    }
    if items.len() > max {
        let _ = writeln!(out, "- ... and {} more in the spec", items.len() - max);
    }
}

fn criterion_line(out: &mut String, c: &Criterion) {
    if c.known_by_id_alone() {
        let _ = writeln!(
            out,
            "- `{}`\n  - Not known: the spec file does not read, and its approval pins this criterion by digest, not its command",
            c.id
        );
        return;
    }
    let _ = writeln!(
        out,
        "- `{}` {} - {}\n  - Command: `{}`\n  - Expected kind: `{}`",
        c.id,
        c.kind,
        c.title,
        c.command,
        c.effective_kind()
    );
}
