//! Hardening: opening a round, the prompt, and the `--mark-passed` evidence check.

use crate::domain::lifecycle::HardenStatus;
use crate::domain::spec::{HardenRound, Spec};

/// The six checks every round must carry before it can pass.
pub const REQUIRED_CHECKS: [&str; 6] = [
    "Path audit",
    "Command audit",
    "Scope/migration audit",
    "Acceptance timing audit",
    "Rollback/repair audit",
    "Design challenge",
];

/// What the evidence check needs to know about the world.
pub trait Ground {
    /// Number of lines of the workspace-relative file, or `None` if it does not exist inside
    /// the workspace.
    fn line_count(&self, path: &str) -> Option<usize>;
    /// Whether an archived spec with this task id exists.
    fn archived(&self, task_id: &str) -> bool;
}

/// Append a new round and mark hardening in progress.
pub fn open_round(spec: &Spec, now: &str) -> Spec {
    let mut next = spec.clone();
    let mut n = next.harden_rounds.len() + 1;
    while next.harden_rounds.iter().any(|r| r.id == format!("round-{n}")) {
        n += 1;
    }
    next.harden_rounds.push(HardenRound {
        id: format!("round-{n}"),
        status: "in_progress".into(),
        started: now.into(),
        ended: "none".into(),
        ..HardenRound::default()
    });
    let id = next.front.task_id.clone();
    next.front.harden_status = HardenStatus::InProgress.as_str().into();
    next.front.updated = now.into();
    next.current_state.next = "harden".into();
    next.current_state.reason = "hardening round in progress".into();
    next.current_state.allowed_follow_up = format!("scafld harden {id} --mark-passed");
    next
}

/// Check the latest round; on success return the spec with the round passed, else every
/// missing piece of evidence.
pub fn mark_passed(spec: &Spec, ground: &dyn Ground, now: &str) -> Result<Spec, Vec<String>> {
    let Some(round) = spec.harden_rounds.last() else {
        return Err(vec!["no harden round exists; run `scafld harden <task-id>` first".into()]);
    };
    let problems = round_problems(round, ground);
    if !problems.is_empty() {
        return Err(problems);
    }
    let mut next = spec.clone();
    let round = next.harden_rounds.last_mut().expect("checked above");
    round.status = "passed".into();
    round.ended = now.into();
    let id = next.front.task_id.clone();
    next.front.harden_status = HardenStatus::Passed.as_str().into();
    next.front.updated = now.into();
    next.current_state.next = "approve".into();
    next.current_state.reason = "hardening passed".into();
    next.current_state.allowed_follow_up = format!("scafld approve {id}");
    Ok(next)
}

fn normalize(name: &str) -> String {
    name.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()
}

fn round_problems(round: &HardenRound, ground: &dyn Ground) -> Vec<String> {
    let mut problems = Vec::new();
    for required in REQUIRED_CHECKS {
        if !round.checks.iter().any(|c| normalize(&c.name) == normalize(required)) {
            problems.push(format!("{}: the required check `{required}` is missing", round.id));
        }
    }
    for check in &round.checks {
        let at = format!("{} check `{}` (line {})", round.id, check.name, check.line);
        if check.evidence.trim().is_empty() {
            problems.push(format!("{at}: Evidence is empty"));
        }
        if !matches!(check.result.trim(), "passed" | "not_applicable") {
            problems.push(format!("{at}: Result must be passed or not_applicable (found {:?})", check.result));
        }
        if let Err(why) = citation(&check.grounded_in, ground) {
            problems.push(format!("{at}: {why}"));
        }
    }
    for q in &round.questions {
        let at = format!("{} question {:?} (line {})", round.id, q.text, q.line);
        if let Err(why) = citation(&q.grounded_in, ground) {
            problems.push(format!("{at}: {why}"));
        }
        if q.recommended_answer.trim().is_empty() {
            problems.push(format!("{at}: Recommended answer is empty"));
        }
        if q.answered_with.trim().is_empty() {
            problems.push(format!("{at}: Answered with is empty"));
        }
    }
    problems
}

/// `spec_gap:<text>`, `code:<path>:<line>` (a real line of a real file) or `archive:<task-id>`.
fn citation(grounded_in: &str, ground: &dyn Ground) -> Result<(), String> {
    let g = grounded_in.trim();
    if let Some(gap) = g.strip_prefix("spec_gap:") {
        return if gap.trim().is_empty() { Err("Grounded in `spec_gap:` needs a description".into()) } else { Ok(()) };
    }
    if let Some(rest) = g.strip_prefix("code:") {
        let Some((path, line)) = rest.rsplit_once(':') else {
            return Err(format!("Grounded in {g:?} must be code:<path>:<line>"));
        };
        let line: usize = line
            .parse()
            .ok()
            .filter(|l| *l > 0)
            .ok_or_else(|| format!("Grounded in {g:?}: the line must be one positive number (no ranges)"))?;
        return match ground.line_count(path) {
            None => Err(format!("Grounded in {g:?}: {path} does not exist in the workspace")),
            Some(count) if line > count => Err(format!("Grounded in {g:?}: {path} has only {count} lines")),
            Some(_) => Ok(()),
        };
    }
    if let Some(task) = g.strip_prefix("archive:") {
        return if ground.archived(task.trim()) {
            Ok(())
        } else {
            Err(format!("Grounded in {g:?}: no archived spec {} exists", task.trim()))
        };
    }
    if g.is_empty() {
        Err("Grounded in is missing".into())
    } else {
        Err(format!("Grounded in {g:?} must start with spec_gap:, code: or archive:"))
    }
}

/// The prompt `scafld harden` prints for the agent doing the round.
pub fn prompt(
    spec_path: &str,
    round_id: &str,
    task_id: &str,
    max_questions: u32,
    invariants: &[(String, String)],
) -> String {
    let mut text = String::from(
        "You are hardening a scafld spec before it is approved. Read the spec and the code it names, \
then challenge it: could an agent build exactly this, prove it with the listed commands, and undo it?\n\n\
Add to the open round under `## Harden Rounds` one check per audit below, each with\n\
  - Grounded in: spec_gap:<section> | code:<path>:<line> | archive:<task-id>\n\
  - Result: passed | not_applicable   (fix the spec first when it would be failed)\n\
  - Evidence: what you looked at and why it holds\n\n\
Required checks:\n",
    );
    for check in REQUIRED_CHECKS {
        text.push_str(&format!("- {check}\n"));
    }
    text.push_str(
        "\nAsk a question only where the spec cannot be fixed without the operator; give each a \
Grounded in, a Recommended answer, If unanswered, and, once settled, Answered with.\n",
    );
    text.push_str(&format!("Configured max_questions_per_round: {max_questions}. This is a cap, not a target.\n"));
    if !invariants.is_empty() {
        text.push_str("\nProject invariants the spec must respect:\n");
        for (id, rule) in invariants {
            text.push_str(&format!("- `{id}`: {rule}\n"));
        }
    }
    text.push_str(&format!(
        "\n---\nspec: {spec_path}\nround: {round_id}\nwhen done, mark the round passed: scafld harden {task_id} --mark-passed\n"
    ));
    text
}
