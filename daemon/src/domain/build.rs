//! The phase-sequenced build loop: which step a `build` call takes, and what it records.
//! One call does one step: open a phase, or run the current phase's criteria and then block,
//! open the next phase, or (after the last phase and the task-level criteria) move to review;
//! in review, criteria an amendment added run before anything is reviewed.

use std::collections::BTreeMap;

use scafld_protocol::vocab::CriterionStatus;

use crate::domain::evidence::Stale;
use crate::domain::ledger::LedgerEvent;
use crate::domain::lifecycle::Status;
use crate::domain::spec::{Criterion, Spec};

/// What acceptance a step runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Phase(String),
    /// The task-level validation criteria, after the last phase.
    Final,
}

impl Target {
    pub fn label(&self) -> String {
        match self {
            Target::Phase(id) => id.clone(),
            Target::Final => "final".into(),
        }
    }

    /// The phase id a criterion of this target records (empty for task-level criteria).
    pub fn phase_id(&self) -> String {
        match self {
            Target::Phase(id) => id.clone(),
            Target::Final => String::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// From approved: activate the task and open the first phase; nothing runs.
    Open(Target),
    /// Run `criteria` of `target` as one acceptance job, after re-running `recheck`: the stale
    /// criteria of phases that already completed, each with its phase.
    Run { target: Target, criteria: Vec<Criterion>, recheck: Vec<(String, Criterion)> },
}

/// Decide the step for a spec already projected from its ledger, given which criteria have
/// stale evidence. `Err` says why build refuses; the caller names the way on as `status` does
/// (`tasks::read::refusal_hint`), never a step of its own that could refuse or redo work.
/// `shadowed`: a user review template has the task's name (`next::Facts::shadowed`).
pub fn plan(spec: &Spec, stale: &BTreeMap<String, Stale>, shadowed: bool) -> Result<Step, String> {
    let id = &spec.front.task_id;
    // A completed phase's stale criteria run again. One holding a criterion without a pass
    // (an amendment moved it there) is no completed phase: the projection shows it active
    // (`ledger::phase_state`), so it is the step the build takes (`current`, `unbuilt`).
    let recheck = |spec: &Spec| -> Vec<(String, Criterion)> {
        spec.phases
            .iter()
            .filter(|p| p.status == "completed")
            .flat_map(|p| p.criteria.iter().filter(|c| stale.contains_key(&c.id)).map(move |c| (p.id(), c.clone())))
            .collect()
    };
    // An amendment of the contract added criteria or a phase to a task in review: they run first.
    if spec.status() == Some(Status::Review)
        && let Some(target) = unbuilt(spec)
    {
        let criteria = criteria_of(spec, &target);
        return Ok(Step::Run { target, criteria, recheck: recheck(spec) });
    }
    match spec.status() {
        Some(Status::Approved) => Ok(Step::Open(first_open(spec))),
        Some(Status::Active | Status::Blocked) => {
            let target = current(spec);
            let criteria = criteria_of(spec, &target);
            Ok(Step::Run { target, criteria, recheck: recheck(spec) })
        }
        // After a failed review, build re-runs the task-level acceptance and whatever went
        // stale, then returns to review.
        Some(Status::Review) if spec.current_state.review_gate == "fail" => {
            let recheck = recheck(spec);
            if spec.acceptance.criteria.is_empty() && recheck.is_empty() {
                return Err(format!(
                    "nothing to re-run for {id}: every criterion's evidence is current for the files in scope (a fix in a file outside them is reviewed again with `{} --force`)",
                    scafld_protocol::cli::review_task(id, shadowed)
                ));
            }
            Ok(Step::Run { target: Target::Final, criteria: spec.acceptance.criteria.clone(), recheck })
        }
        // Files changed after the build: re-run what went stale before anyone reviews it.
        Some(Status::Review) if !stale.is_empty() => {
            let criteria = spec.acceptance.criteria.iter().filter(|c| stale.contains_key(&c.id)).cloned().collect();
            Ok(Step::Run { target: Target::Final, criteria, recheck: recheck(spec) })
        }
        Some(Status::Review) => Err(format!("{id} is in review: its evidence is current and nothing is left to build")),
        Some(Status::Draft) => Err(format!("build requires an approved task; {id} is a draft")),
        Some(status @ (Status::Completed | Status::Failed | Status::Cancelled)) => {
            Err(format!("{id} is archived ({status}); archived tasks are immutable, create a new task to continue"))
        }
        None => Err(format!("{id} has no valid status")),
    }
}

/// A criterion that keeps the current step from passing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocker {
    pub id: String,
    /// A `manual` criterion without a person's passing evidence.
    pub manual: bool,
    /// The recorded reason, or what it waits for.
    pub reason: String,
    /// Its recorded result: `pending` when it never ran (an amendment added it).
    pub status: CriterionStatus,
}

impl Blocker {
    /// How `Blockers:` in Current State names it: a failure only where one was recorded.
    pub fn said(&self) -> String {
        let what = match self.status {
            _ if self.manual => "needs manual evidence",
            CriterionStatus::Fail => "failed",
            CriterionStatus::Invalid => "cannot run as written",
            CriterionStatus::Pending | CriterionStatus::Pass => "pending",
        };
        format!("`{}` {what}", self.id)
    }
}

/// The criteria of `target` that have not passed.
pub fn blockers(spec: &Spec, target: &Target) -> Vec<Blocker> {
    criteria_of(spec, target)
        .into_iter()
        .filter(|c| !c.passed())
        .map(|c| {
            let manual = c.effective_kind() == "manual" && c.status != "fail";
            let reason = if manual && c.evidence.is_empty() {
                "needs a person's evidence".to_string()
            } else if c.evidence.is_empty() {
                c.state().to_string()
            } else {
                c.evidence.clone()
            };
            let status = c.state().parse().unwrap_or_default();
            Blocker { id: c.id.clone(), manual, reason, status }
        })
        .collect()
}

/// Whether criterion `id` belongs to a phase that already completed.
pub fn in_completed_phase(spec: &Spec, id: &str) -> bool {
    spec.phases.iter().any(|p| p.status == "completed" && p.criteria.iter().any(|c| c.id == id))
}

/// The first target of a task past its build (in review) that still needs a build step: a
/// phase not completed (one an amendment added, with or without criteria: a build step
/// completes a phase with none, running nothing, as during the build) or holding a criterion
/// with no recorded result, in phase order, then the task-level criteria when one never ran.
/// Build runs it, `status` names that build, and review and complete refuse until it has run.
pub fn unbuilt(spec: &Spec) -> Option<Target> {
    spec.phases
        .iter()
        .find(|p| p.status != "completed" || p.criteria.iter().any(never_ran))
        .map(|p| Target::Phase(p.id()))
        .or_else(|| spec.acceptance.criteria.iter().any(never_ran).then_some(Target::Final))
}

/// The phases not completed, as `phaseN (status)`: a task in review with one has work no build
/// step did (see [`unbuilt`]).
pub fn open_phases(spec: &Spec) -> Vec<String> {
    spec.phases.iter().filter(|p| p.status != "completed").map(|p| format!("{} ({})", p.id(), p.status)).collect()
}

/// Whether a criterion has no recorded result at all.
pub fn never_ran(c: &Criterion) -> bool {
    c.status.is_empty()
}

fn first_open(spec: &Spec) -> Target {
    spec.phases.iter().find(|p| p.status != "completed").map(|p| Target::Phase(p.id())).unwrap_or(Target::Final)
}

/// The phase being built: the first phase that is active or blocked (phases are built in
/// order, so a completed phase an amendment reopened, which the projection shows active, comes
/// before the one opened after it, and before final acceptance), else the one Current State
/// names if still open, else the first pending one, else final acceptance.
pub fn current(spec: &Spec) -> Target {
    let named = spec.current_state.current_phase.as_str();
    let open = |p: &&crate::domain::spec::Phase| p.status != "completed";
    let building = spec.phases.iter().find(|p| matches!(p.status.as_str(), "active" | "blocked"));
    if building.is_none() && named == "final" {
        return Target::Final;
    }
    building
        .or_else(|| spec.phases.iter().filter(open).find(|p| p.id() == named))
        .or_else(|| spec.phases.iter().find(open))
        .map(|p| Target::Phase(p.id()))
        .unwrap_or(Target::Final)
}

pub fn criteria_of(spec: &Spec, target: &Target) -> Vec<Criterion> {
    match target {
        Target::Phase(id) => spec.phase(id).map(|p| p.criteria.clone()).unwrap_or_default(),
        Target::Final => spec.acceptance.criteria.clone(),
    }
}

/// Events of the opening step.
pub fn open_events(target: &Target) -> Vec<LedgerEvent> {
    match target {
        Target::Phase(id) => vec![
            LedgerEvent::Phase { phase_id: id.clone(), status: "active".into(), reason: format!("phase {id} opened") },
            LedgerEvent::Build { status: "active".into(), reason: format!("phase {id} opened") },
        ],
        Target::Final => vec![LedgerEvent::Build { status: "active".into(), reason: "final acceptance opened".into() }],
    }
}

/// Recorded before the criteria of `target` run.
pub fn running_event(target: &Target) -> LedgerEvent {
    let reason = match target {
        Target::Phase(id) => format!("running phase {id} evidence"),
        Target::Final => "running final acceptance".into(),
    };
    LedgerEvent::Build { status: "active".into(), reason }
}

/// After running `target`: the events to record, and whether final acceptance runs next in the
/// same call.
pub struct Conclusion {
    pub events: Vec<LedgerEvent>,
    pub run_final_next: bool,
}

/// The first completed phase whose stale evidence did not pass when re-run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recheck {
    pub phase: String,
    /// Only manual criteria kept it from passing: they wait for a person, nothing failed.
    pub awaits_person: bool,
}

/// How the criteria a step ran came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepOutcome {
    Passed,
    /// Nothing failed, but manual criteria wait for a person's evidence.
    AwaitsPerson,
    Failed,
}

impl StepOutcome {
    /// The outcome once a criterion with `status` is counted in too.
    pub fn with(self, status: CriterionStatus) -> StepOutcome {
        match (self, status) {
            (StepOutcome::Failed, _) | (_, CriterionStatus::Pass) => self,
            (_, CriterionStatus::Pending) => StepOutcome::AwaitsPerson,
            _ => StepOutcome::Failed,
        }
    }
}

/// `recheck` names the first completed phase whose stale evidence did not pass when re-run: it
/// is blocked again, whatever the target did.
pub fn conclude(spec: &Spec, target: &Target, outcome: StepOutcome, recheck: Option<&Recheck>) -> Conclusion {
    let blocked = |reason: String| LedgerEvent::Build { status: "blocked".into(), reason };
    let to_review =
        || LedgerEvent::Build { status: "review".into(), reason: "build completed; ready for review".into() };
    if let Some(Recheck { phase, awaits_person }) = recheck {
        let reason = match awaits_person {
            true => format!("phase {phase} evidence went stale: its manual evidence needs a person again"),
            false => format!("phase {phase} evidence went stale and failed when re-run"),
        };
        return Conclusion {
            events: vec![
                LedgerEvent::Phase { phase_id: phase.to_string(), status: "blocked".into(), reason: reason.clone() },
                blocked(reason),
            ],
            run_final_next: false,
        };
    }
    match target {
        Target::Phase(id) if outcome != StepOutcome::Passed => {
            let reason = match outcome {
                StepOutcome::AwaitsPerson => format!("phase {id} waits for a person's evidence of its manual criteria"),
                _ => format!("phase {id} acceptance failed"),
            };
            Conclusion {
                events: vec![
                    LedgerEvent::Phase { phase_id: id.clone(), status: "blocked".into(), reason: reason.clone() },
                    blocked(reason),
                ],
                run_final_next: false,
            }
        }
        Target::Phase(id) => {
            let mut events = vec![LedgerEvent::Phase {
                phase_id: id.clone(),
                status: "completed".into(),
                reason: "all phase criteria passed".into(),
            }];
            let later = spec.phases.iter().skip_while(|p| p.id() != *id).skip(1).find(|p| p.status != "completed");
            match later {
                Some(next) => {
                    let next_id = next.id();
                    events.push(LedgerEvent::Phase {
                        phase_id: next_id.clone(),
                        status: "active".into(),
                        reason: format!("phase {next_id} opened"),
                    });
                    events.push(LedgerEvent::Build {
                        status: "active".into(),
                        reason: format!("phase {id} completed; phase {next_id} opened"),
                    });
                    Conclusion { events, run_final_next: false }
                }
                None if spec.acceptance.criteria.is_empty() => {
                    events.push(to_review());
                    Conclusion { events, run_final_next: false }
                }
                None => Conclusion { events, run_final_next: true },
            }
        }
        Target::Final if outcome != StepOutcome::Passed => {
            let reason = match outcome {
                StepOutcome::AwaitsPerson => "final acceptance waits for a person's evidence of its manual criteria",
                _ => "final acceptance failed",
            };
            Conclusion { events: vec![blocked(reason.into())], run_final_next: false }
        }
        Target::Final => Conclusion { events: vec![to_review()], run_final_next: false },
    }
}

/// What `finalize` records when criteria whose current evidence passed fail as it runs them
/// again on the same files (a `Cwd` that became a link leading out, a file outside the scope
/// they read): each failed result as the criterion's evidence, bound to `material` (the scope's
/// material it ran on), and its step blocked again, as a build that saw it fail would block it
/// (the first phase holding one, else the task-level acceptance). The passing review is
/// superseded with them: the task is repaired, built and reviewed again before it is done.
/// `attempts` counts each criterion's recorded results so far. Empty when nothing failed.
pub fn failed_on_rerun(
    spec: &Spec,
    results: &[scafld_protocol::methods::CriterionResult],
    material: &str,
    attempts: impl Fn(&str) -> u32,
) -> Vec<LedgerEvent> {
    let failed: Vec<(&scafld_protocol::methods::CriterionResult, &Criterion)> = results
        .iter()
        .filter(|r| r.status != CriterionStatus::Pass)
        .filter_map(|r| spec.criteria().find(|c| c.id == r.criterion_id).map(|c| (r, c)))
        // A manual criterion is never run again: a person's evidence is what it counts.
        .filter(|(_, c)| c.effective_kind() != "manual")
        .collect();
    let Some(phase) = spec
        .phases
        .iter()
        .find(|p| p.criteria.iter().any(|c| failed.iter().any(|(_, f)| f.id == c.id)))
        .map(|p| p.id())
        .or_else(|| (!failed.is_empty()).then(String::new))
    else {
        return Vec::new();
    };
    let mut events: Vec<LedgerEvent> = failed
        .iter()
        .map(|(r, c)| LedgerEvent::Criterion {
            criterion_id: c.id.clone(),
            phase_id: if spec.phase(&r.phase_id).is_some() { r.phase_id.clone() } else { String::new() },
            command: c.command.clone(),
            exit_code: r.exit_code,
            matcher: c.effective_kind().to_string(),
            status: r.status.to_string(),
            reason: format!("finalize ran it again: {}", r.reason),
            output: String::new(),
            diagnostic: r.diagnostic.clone(),
            diagnostic_error: r.diagnostic_error.clone(),
            duration_ms: r.duration_ms,
            attempt: attempts(&c.id) + 1,
            definition: crate::domain::evidence::definition_digest(c),
            material: material.to_string(),
            redacted: Vec::new(),
        })
        .collect();
    let named: Vec<String> = failed.iter().map(|(_, c)| format!("`{}`", c.id)).collect();
    let why = format!("{} failed when finalize ran it again on the files its evidence passed on", named.join(", "));
    if phase.is_empty() {
        events.push(LedgerEvent::Build { status: "blocked".into(), reason: format!("final acceptance: {why}") });
    } else {
        let reason = format!("phase {phase}: {why}");
        events.push(LedgerEvent::Phase { phase_id: phase, status: "blocked".into(), reason: reason.clone() });
        events.push(LedgerEvent::Build { status: "blocked".into(), reason });
    }
    events
}
