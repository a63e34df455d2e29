//! Spec commands: plan, validate, status, list, harden, handoff, report, reconcile.

use std::fmt::Write as _;

use scafld_client::{ClientError, Connection};
use scafld_protocol::Method;
use scafld_protocol::methods::{self as m, Diagnostic};

use crate::cli::daemon_control::rpc_error;
use crate::cli::exit::workflow;
use crate::cli::output::{CliError, Style, columns, padded};
use crate::cli::workspace::find_root;
use crate::cli::{Context, HardenArgs, ListArgs, PlanArgs, StatusArgs, TaskArg};
use scafld_client::terminal::{one_line, quoted};

/// The workspace root (as the daemon expects it) and a connection.
pub(super) fn session(ctx: &Context) -> Result<(String, Connection), CliError> {
    let root = find_root(ctx.global.root.as_deref())?;
    Ok((root.display().to_string(), ctx.connect()?))
}

pub(super) fn call<M: Method>(conn: &mut Connection, params: &M::Params) -> Result<M::Result, CliError> {
    conn.call::<M>(params).map_err(rpc_error)
}

/// What the daemon says the caller must hear of the workspace (an id file put back), on
/// stderr, `--json` or not: said once, by the command that got it.
pub(super) fn say_warnings(ctx: &Context, warnings: &[String]) {
    for warning in warnings {
        ctx.out.eprint_human(&format!("warning: {warning}"));
    }
}

fn task_params(ctx: &Context, task: &TaskArg) -> Result<(m::TaskParams, Connection), CliError> {
    let task_id = task.resolve()?;
    let (root, conn) = session(ctx)?;
    Ok((m::TaskParams { root, task_id }, conn))
}

fn diagnostics_text(diagnostics: &[Diagnostic]) -> String {
    diagnostics
        .iter()
        .map(|d| {
            if d.line > 0 {
                format!("  line {}: {}: {}", d.line, d.severity, d.message)
            } else {
                format!("  {}: {}", d.severity, d.message)
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn invalid(task_id: &str, count: usize) -> CliError {
    CliError::new("validation_failed", format!("{task_id}: the spec has {count} error(s)"), workflow::VALIDATION)
        .with_hint(format!("fix them and run `scafld validate {task_id}` again"))
}

pub fn plan(ctx: &Context, args: &PlanArgs) -> Result<u8, CliError> {
    let task_id = args.task.resolve()?;
    let (root, mut conn) = session(ctx)?;
    let params = m::PlanParams {
        root,
        task_id,
        title: args.title.clone(),
        summary: args.summary.clone(),
        size: args.size.clone(),
        risk: args.risk.clone(),
        command: args.command.clone(),
    };
    let result = call::<m::TaskPlan>(&mut conn, &params)?;
    ctx.out.success(&result, || {
        // Counted as `validate` counts the draft's errors: its placeholders, and any other.
        let errors: Vec<&Diagnostic> = result.diagnostics.iter().filter(|d| d.severity == m::Severity::Error).collect();
        let todo = errors.iter().filter(|d| d.message.contains("placeholder")).count();
        let other = match errors.len() - todo {
            0 => String::new(),
            n => format!(" and fix its {n} other error(s)"),
        };
        let mut text = format!("created draft {}\n", result.path);
        if !errors.is_empty() {
            let _ = writeln!(
                text,
                "fill its {todo} TODO placeholder(s){other}; `scafld validate {}` lists them",
                result.task_id
            );
        }
        let _ = write!(text, "next: {}", result.next_action.command);
        text
    });
    Ok(workflow::OK)
}

/// Every spec's diagnostics; exit 3 when any spec has an error.
pub fn validate_all(ctx: &Context) -> Result<u8, CliError> {
    let (root, mut conn) = session(ctx)?;
    let result = call::<m::TaskValidateAll>(&mut conn, &m::WorkspaceRootParams { root })?;
    say_warnings(ctx, &result.warnings);
    let invalid: Vec<&str> = result.specs.iter().filter(|s| !s.valid).map(|s| s.task_id.as_str()).collect();
    let human = || {
        let mut text = String::new();
        for spec in &result.specs {
            let verdict =
                if spec.valid { ctx.out.paint("valid", Style::Good) } else { ctx.out.paint("invalid", Style::Bad) };
            let warnings = spec.diagnostics.iter().filter(|d| d.severity == m::Severity::Warning).count();
            let _ = writeln!(text, "{} ({}): {verdict}, {warnings} warning(s)", spec.task_id, spec.path);
            if !spec.diagnostics.is_empty() {
                let _ = writeln!(text, "{}", diagnostics_text(&spec.diagnostics));
            }
        }
        for gone in &result.missing {
            let _ = writeln!(text, "{} ({}): {}", gone.task_id, gone.path, ctx.out.paint("missing", Style::Bad));
            let _ = writeln!(text, "{}", diagnostics_text(&gone.diagnostics));
        }
        for unread in &result.unlisted {
            let _ = writeln!(text, "{}: {unread}", ctx.out.paint("not read", Style::Bad));
        }
        let _ = write!(text, "{} spec(s), {} invalid", result.specs.len(), invalid.len());
        if !result.missing.is_empty() {
            let _ = write!(text, ", {} missing", result.missing.len());
        }
        if !result.unlisted.is_empty() {
            let _ = write!(text, ", {} place(s) not read", result.unlisted.len());
        }
        text
    };
    let missing: Vec<&str> = result.missing.iter().map(|s| s.task_id.as_str()).collect();
    if invalid.is_empty() && missing.is_empty() && result.unlisted.is_empty() {
        ctx.out.success(&result, human);
        return Ok(workflow::OK);
    }
    if !ctx.out.json {
        ctx.out.eprint_human(&human());
    }
    // What could not be read may hold specs with errors: "all" was not validated.
    let error = match (invalid.is_empty(), missing.is_empty()) {
        (false, _) => CliError::new(
            "validation_failed",
            format!("{} of {} spec(s) have errors: {}", invalid.len(), result.specs.len(), invalid.join(", ")),
            workflow::VALIDATION,
        )
        .with_hint("each spec's diagnostics are listed with their lines"),
        // An open task's spec that is gone is no spec validated: as `validate <task>` of it.
        (true, false) => CliError::new(
            "spec_missing",
            format!("{} open task(s) have no spec file: {}", missing.len(), missing.join(", ")),
            workflow::VALIDATION,
        )
        .with_hint("each is listed with where its file belongs and what to run once it is back"),
        (true, true) => CliError::new(
            "validation_failed",
            format!(
                "{} place(s) under .scafld/specs could not be read, so not every spec was validated",
                result.unlisted.len()
            ),
            workflow::VALIDATION,
        )
        .with_hint("each is listed above with what to do"),
    };
    ctx.out.failure(&error, serde_json::to_value(&result).ok());
    Ok(workflow::VALIDATION)
}

pub fn validate(ctx: &Context, task: &TaskArg) -> Result<u8, CliError> {
    let (params, mut conn) = task_params(ctx, task)?;
    let result = call::<m::TaskValidate>(&mut conn, &params)?;
    say_warnings(ctx, &result.warnings);
    let criteria: usize = result.phases.iter().map(|p| p.criteria.len()).sum::<usize>() + result.criteria.len();
    if !result.valid {
        let errors = result.diagnostics.iter().filter(|d| d.severity == m::Severity::Error).count();
        let mut error = invalid(&result.task_id, errors);
        if !ctx.out.json {
            // The diagnostics quote the spec: shown safe for a terminal, like all human text.
            ctx.out.eprint_human(&format!(
                "{}: {}\n{}",
                result.task_id,
                ctx.out.paint("invalid", Style::Bad),
                diagnostics_text(&result.diagnostics)
            ));
        }
        error.details = Some(serde_json::json!({ "diagnostics": result.diagnostics }));
        ctx.out.failure(&error, serde_json::to_value(&result).ok());
        return Ok(workflow::VALIDATION);
    }
    ctx.out.success(&result, || {
        let mut text = format!(
            "{}: {} ({} phase(s), {criteria} criteria)",
            result.task_id,
            ctx.out.paint("valid", Style::Good),
            result.phases.len()
        );
        if !result.diagnostics.is_empty() {
            let _ = write!(text, "\n{}", diagnostics_text(&result.diagnostics));
        }
        text
    });
    Ok(workflow::OK)
}

pub fn status(ctx: &Context, args: &StatusArgs) -> Result<u8, CliError> {
    let (params, mut conn) = task_params(ctx, &args.task)?;
    // Only the JSON answer shows the spec's source; the daemon reads the file again for it.
    let source = match (ctx.out.json, args.no_context) {
        (false, _) => m::SourceDetail::Omit,
        (true, true) => m::SourceDetail::Digest,
        (true, false) => m::SourceDetail::Text,
    };
    let s = call::<m::TaskStatus>(&mut conn, &m::StatusParams { source, ..m::StatusParams::plain(params) })?;
    say_warnings(ctx, &s.warnings);
    let human = || {
        let title = if s.spec_missing {
            ctx.out.paint("spec file missing (from the ledger)", Style::Bad)
        } else {
            s.title.clone()
        };
        // A file that cannot be read has neither: said so, its errors following.
        let (status, title) = match s.status.is_empty() && title.is_empty() {
            true => ("unreadable".to_string(), "the spec file cannot be read (see its errors)".to_string()),
            false => (s.status.clone(), title),
        };
        let mut text = format!("{}: {} - {title}\n", s.task_id, ctx.out.paint(&status, Style::Bold));
        let _ = writeln!(text, "harden: {}   review gate: {}", s.harden_status, s.review_gate);
        let _ = writeln!(
            text,
            "phase: {} ({}/{} phases completed)",
            s.current_phase, s.counts.phases_completed, s.counts.phases_total
        );
        for p in &s.phases {
            let _ = writeln!(
                text,
                "  {:<8} {:<10} {}/{} criteria  {}",
                p.id, p.status, p.criteria_passed, p.criteria_total, p.name
            );
        }
        let _ = writeln!(
            text,
            "criteria: {} passed, {} failed, {} pending",
            s.counts.criteria_passed, s.counts.criteria_failed, s.counts.criteria_pending
        );
        for c in s.criteria.iter().filter(|c| matches!(c.status.as_str(), "fail" | "invalid")) {
            // A manual criterion has no command to show.
            let command = if c.command.is_empty() { String::new() } else { format!(" `{}`", c.command) };
            let _ = writeln!(text, "  {} {}{command}: {}", ctx.out.paint("blocked", Style::Bad), c.id, c.evidence);
        }
        // Without the spec every result is unchecked: said once, by the missing file.
        for c in s.criteria.iter().filter(|c| c.freshness == m::Freshness::Stale && !s.spec_missing) {
            let _ = writeln!(text, "  {} {}: {}", ctx.out.paint("stale", Style::Bad), c.id, c.stale_reason);
        }
        if !s.stale_changes.is_empty() {
            // Each a path (and how it changed): kept to its line, whatever the file is named.
            let _ =
                writeln!(text, "changed since that evidence ran: {}", scafld_protocol::text::listed(&s.stale_changes));
        }
        if let Some(review) = &s.review {
            let (verdict, provider, summary) = (
                review["verdict"].as_str().unwrap_or(""),
                review["provider"].as_str().unwrap_or(""),
                quoted(review["summary"].as_str().unwrap_or(""), "  "),
            );
            // A review that later work superseded is history, not the gate's verdict.
            let label = match review["superseded_by"].as_str() {
                Some(entry) => format!("last review (superseded by {entry})"),
                None => "review".to_string(),
            };
            match review["rejected"].as_str() {
                // Manual approval: the reviewer proposed, a person decided.
                Some(why) => {
                    let why = quoted(why, "  ");
                    let proposed = review["proposed_verdict"].as_str().unwrap_or("");
                    let _ = writeln!(
                        text,
                        "{label}: {verdict}, rejected by a person: {why} ({provider} proposed {proposed} - {summary})"
                    );
                }
                None => {
                    let _ = writeln!(text, "{label}: {verdict} by {provider} - {summary}");
                }
            }
            text.push_str(&findings_text(review["findings"].as_array().map(Vec::as_slice).unwrap_or_default()));
        }
        if let Some(config) = &s.config_error {
            let _ = writeln!(
                text,
                "{}: {}: {} ({})",
                ctx.out.paint("config error", Style::Bad),
                config.file,
                config.message,
                config.hint
            );
        }
        let _ = write!(text, "next: {} ({})", s.next_action.command, s.next_action.reason);
        text
    };
    if !s.valid {
        if !ctx.out.json {
            ctx.out.print_human(&human());
            ctx.out.eprint_human(&format!(
                "{}:\n{}",
                ctx.out.paint("spec errors", Style::Bad),
                diagnostics_text(&s.errors)
            ));
        }
        // Counted as `validate` counts them: a note among them (the spec cannot be projected)
        // is a warning.
        let errors = s.errors.iter().filter(|d| d.severity == m::Severity::Error).count();
        // An open task whose spec file is gone: nothing but fail, cancel and session works on
        // it until the file is back, so a script reads it as it reads a broken spec (exit 3).
        let mut error = match s.spec_missing {
            true => CliError::new(
                "spec_missing",
                format!("{}: the spec file is missing; the ledger keeps the task ({})", s.task_id, s.status),
                workflow::VALIDATION,
            )
            .with_hint(format!("{} ({})", s.next_action.command, s.next_action.reason)),
            // The errors' way out when it is not an edit (a leftover copy: `reconcile`).
            false if s.next_action.command != format!("scafld validate {}", s.task_id) => {
                invalid(&s.task_id, errors).with_hint(format!("{} ({})", s.next_action.command, s.next_action.reason))
            }
            false => invalid(&s.task_id, errors),
        };
        error.details = Some(serde_json::json!({ "diagnostics": s.errors }));
        ctx.out.failure(&error, serde_json::to_value(&s).ok());
        return Ok(workflow::VALIDATION);
    }
    // The workspace's configuration does not read: the status stands, but the commands that
    // read it are refused (workspace_error), so a script stops here too.
    if let Some(config) = &s.config_error {
        if !ctx.out.json {
            ctx.out.print_human(&human());
        }
        let error = CliError::new(
            "workspace_error",
            format!("{}: {} (build, review, harden and finalize refuse until it reads)", config.file, config.message),
            workflow::RUNTIME,
        )
        .with_hint(config.hint.clone());
        ctx.out.failure(&error, serde_json::to_value(&s).ok());
        return Ok(workflow::RUNTIME);
    }
    ctx.out.success(&s, human);
    Ok(workflow::OK)
}

pub fn list(ctx: &Context, args: &ListArgs) -> Result<u8, CliError> {
    let (root, mut conn) = session(ctx)?;
    // The text listing shows each task's progress; JSON carries counts only when asked.
    let params = m::ListParams { root, status: args.status.clone(), counts: args.counts || !ctx.out.json };
    let raw = conn.call_verbatim::<m::TaskList>(&params).map_err(rpc_error)?;
    // Rare, and looked for before anything is parsed: a title cannot hold the bare key (its
    // quotes are escaped). Not only first: a reply the caller's rewrite re-serialised has its
    // keys sorted.
    if raw.get().contains("\"warnings\":[") {
        #[derive(serde::Deserialize)]
        struct Warnings {
            warnings: Vec<String>,
        }
        if let Ok(said) = serde_json::from_str::<Warnings>(raw.get()) {
            say_warnings(ctx, &said.warnings);
        }
    }
    if ctx.out.json {
        // Printed as the daemon wrote it: parsing thousands of summaries only to print them
        // again would cost more than the rest of the call.
        ctx.out.success_verbatim(&raw);
        return Ok(workflow::OK);
    }
    let result: m::ListResult = serde_json::from_str(raw.get())
        .map_err(|e| rpc_error(ClientError::Decode(format!("{}: {e}", m::TaskList::NAME))))?;
    ctx.out.success(&result, || {
        if result.tasks.is_empty() {
            return "no tasks".to_string();
        }
        let width = result.tasks.iter().map(|t| columns(&t.task_id)).max().unwrap_or(0);
        let mut text = String::new();
        for t in &result.tasks {
            let counts = t.counts.clone().unwrap_or_default();
            let progress = format!("{}/{}", counts.criteria_passed, counts.criteria_total);
            match &t.error {
                // The status is the ledger's whatever the file says; the cell says what is wrong.
                Some(error) if !t.status.is_empty() => {
                    let what = if t.spec_missing { "missing" } else { "invalid" };
                    let cell = ctx.out.cell(what, Style::Bad, 7);
                    let _ = writeln!(text, "{}  {:<9} {cell}  {error}", padded(&t.task_id, width), t.status);
                }
                Some(error) => {
                    let _ = writeln!(
                        text,
                        "{}  {} {}",
                        padded(&t.task_id, width),
                        ctx.out.cell("invalid", Style::Bad, 9),
                        error
                    );
                }
                None => {
                    let _ = write!(text, "{}  {:<9} {:>7}  {}", padded(&t.task_id, width), t.status, progress, t.title);
                    // The row is the ledger's; what the spec file says otherwise is flagged.
                    let file_counts = t.file_counts.as_ref().map(|file| counted_otherwise(&counts, file));
                    let says: Vec<String> = t.file_status.iter().cloned().chain(file_counts).collect();
                    if !says.is_empty() {
                        let reconcile = scafld_protocol::cli::run_from(
                            result.writes_from.as_deref(),
                            &format!("scafld reconcile {}", t.task_id),
                        );
                        let note = format!("(the file says {}: `{reconcile}`)", says.join(", "));
                        let _ = write!(text, "  {}", ctx.out.paint(&note, Style::Bad));
                    }
                    text.push('\n');
                }
            }
        }
        text.trim_end().to_string()
    });
    Ok(workflow::OK)
}

/// What a spec file counts that differs from what its ledger counts, each count named: the
/// criteria passed as the row shows them (`1/1`), then failed, pending and completed phases.
fn counted_otherwise(ledger: &m::Counts, file: &m::Counts) -> String {
    let mut says = Vec::new();
    if file.criteria_passed != ledger.criteria_passed || file.criteria_total != ledger.criteria_total {
        says.push(format!("{}/{}", file.criteria_passed, file.criteria_total));
    }
    if file.criteria_failed != ledger.criteria_failed {
        says.push(format!("{} failed", file.criteria_failed));
    }
    if file.criteria_pending != ledger.criteria_pending {
        says.push(format!("{} pending", file.criteria_pending));
    }
    if file.phases_completed != ledger.phases_completed || file.phases_total != ledger.phases_total {
        says.push(format!("{}/{} phases completed", file.phases_completed, file.phases_total));
    }
    if says.is_empty() {
        says.push(format!("{}/{}", file.criteria_passed, file.criteria_total));
    }
    says.join(", ")
}

pub fn harden(ctx: &Context, args: &HardenArgs) -> Result<u8, CliError> {
    let task_id = args.task.resolve()?;
    let (root, mut conn) = session(ctx)?;
    // Any harden but `--mark-passed` may delegate (`--provider`, or `harden.external` in the
    // workspace's configuration), and its provider runs with the caller's environment: what it
    // cannot get is named only when one will run, by its name.
    let caller = match (&args.provider, args.mark_passed) {
        (Some(provider), _) => Some(super::exec::caller_for_providers(&format!("the harden provider {provider}"))),
        (None, false) => {
            let caller = super::exec::caller();
            // The configuration is asked only when there is something to warn of.
            if !caller.env_bytes.is_empty() {
                let params = m::WorkspaceRootParams { root: root.clone() };
                let configured = conn.call::<m::WorkspaceConfig>(&params).ok().and_then(|c| c.harden_provider);
                if let Some(provider) = configured {
                    super::exec::warn_unpassed(&caller, &format!("the harden provider {provider} (`harden.external`)"));
                }
            }
            Some(caller)
        }
        (None, true) => None,
    };
    let params = m::HardenParams {
        root,
        task_id,
        mark_passed: args.mark_passed,
        provider: args.provider.clone(),
        provider_command: crate::cli::input::provider_command(args.provider_command.as_deref()),
        caller,
    };
    let result = match conn.call::<m::TaskHarden>(&params) {
        Ok(result) => result,
        Err(e) => {
            let error = rpc_error(e);
            if let Some(problems) = error.details.as_ref().and_then(|d| d.get("problems")).and_then(|p| p.as_array())
                && !ctx.out.json
            {
                for problem in problems {
                    ctx.out.eprint_human(&format!("  - {}", quoted(problem.as_str().unwrap_or_default(), "    ")));
                }
            }
            return Err(error);
        }
    };
    if let Some(provider) = &args.provider {
        let code = match result.harden_status {
            m::HardenStatus::Passed => workflow::OK,
            m::HardenStatus::NeedsRevision => workflow::VALIDATION,
            _ => workflow::RUNTIME,
        };
        let not_passed = (code != workflow::OK).then(|| {
            let word = if code == workflow::VALIDATION { "harden_needs_revision" } else { "harden_failed" };
            CliError::new(word, format!("{} of {}: {}", result.round_id, result.task_id, result.harden_status), code)
                .with_hint(format!("next: {}", result.next_command))
        });
        ctx.out.document(&result, not_passed, || {
            let mut text = format!("{} of {} by {provider}: {}", result.round_id, result.task_id, result.harden_status);
            // A problem can carry the provider's own words: quoted, so no line of them can
            // pass for one of scafld's (a `next:` of the provider's reads `    | next:`).
            for problem in &result.problems {
                text.push_str(&format!("\n  - {}", quoted(problem, "    ")));
            }
            // What the provider raised for the author (the round in the spec holds it too).
            for r in &result.raised {
                text.push_str(&format!("\n  {} ({}, {})", r.check, r.result, quoted(&r.anchor, "    ")));
                for (label, value) in [
                    ("note", &r.note),
                    ("question", &r.question),
                    ("recommended", &r.recommended),
                    ("if unanswered", &r.if_unanswered),
                    ("default", &r.default),
                ] {
                    if !value.is_empty() {
                        text.push_str(&format!("\n    {label}: {}", quoted(value, "      ")));
                    }
                }
            }
            text.push_str(&format!("\nnext: {}", result.next_command));
            text
        });
        return Ok(code);
    }
    ctx.out.success(&result, || {
        if result.marked_passed {
            format!("{} passed for {}\nnext: {}", result.round_id, result.task_id, result.next_command)
        } else {
            result.prompt.trim_end().to_string()
        }
    });
    Ok(workflow::OK)
}

pub fn handoff(ctx: &Context, task: &TaskArg) -> Result<u8, CliError> {
    let (params, mut conn) = task_params(ctx, task)?;
    let result = call::<m::TaskHandoff>(&mut conn, &params)?;
    ctx.out.success(&result, || result.markdown.trim_end().to_string());
    Ok(workflow::OK)
}

pub fn report(ctx: &Context) -> Result<u8, CliError> {
    let (root, mut conn) = session(ctx)?;
    let r = call::<m::TaskReport>(&mut conn, &m::WorkspaceRootParams { root })?;
    ctx.out.success(&r, || {
        let mut text = format!("tasks: {} ({} invalid)\n", r.total, r.invalid_specs);
        for (status, count) in r.by_status.iter().filter(|(_, c)| **c > 0) {
            let _ = writeln!(text, "  {status:<10} {count}");
        }
        if !r.specs_missing.is_empty() {
            let _ = writeln!(text, "spec file missing (open in the ledger): {}", r.specs_missing.join(", "));
        }
        for unread in &r.unlisted {
            let _ = writeln!(text, "not read (not counted): {unread}");
        }
        let disagree: std::collections::BTreeSet<&String> =
            r.status_disagrees.iter().chain(&r.counts_disagree).collect();
        if !disagree.is_empty() {
            let ids: Vec<&str> = disagree.into_iter().map(String::as_str).collect();
            let _ = writeln!(
                text,
                "counted as their ledger says; the spec file says otherwise (`{}`): {}",
                scafld_protocol::cli::run_from(r.writes_from.as_deref(), "scafld reconcile <task>"),
                ids.join(", ")
            );
        }
        let _ = writeln!(text, "hardened: {}", r.harden_passed);
        let _ = writeln!(text, "phases: {}/{} completed", r.phases_completed, r.phases_total);
        let _ = write!(
            text,
            "criteria: {}/{} passed ({:.1}%), {} failed",
            r.criteria_passed,
            r.criteria_total,
            r.criteria_pass_rate * 100.0,
            r.criteria_failed
        );
        text
    });
    Ok(workflow::OK)
}

pub fn reconcile(ctx: &Context, task: &TaskArg) -> Result<u8, CliError> {
    let (params, mut conn) = task_params(ctx, task)?;
    let r = call::<m::TaskReconcile>(&mut conn, &params)?;
    ctx.out.success(&r, || {
        let mut text = match &r.moved_aside {
            Some(aside) => format!(
                "{}: moved {} aside to {} (an interrupted move's leftover: it differed from the spec only in runner-owned lines)\n",
                r.task_id, aside.from, aside.to
            ),
            None => String::new(),
        };
        text.push_str(&match (r.changed, r.moved) {
            (false, _) => format!("{}: already consistent ({})", r.task_id, r.path),
            (true, true) => format!("{}: reconciled and moved to {}", r.task_id, r.path),
            (true, false) => format!("{}: reconciled ({})", r.task_id, r.path),
        });
        text
    });
    Ok(workflow::OK)
}

/// Dossier findings as indented lines (used by `review` and `status`).
pub(super) fn findings_text(findings: &[serde_json::Value]) -> String {
    let mut text = String::new();
    for f in findings {
        let open = f["status"].as_str().is_none_or(|s| s == "open");
        let blocking = if f["blocks_completion"] == true && open { "blocks completion" } else { "non-blocking" };
        let _ = writeln!(
            text,
            "  [{}/{blocking}] {} {}",
            one_line(f["severity"].as_str().unwrap_or("")),
            one_line(f["id"].as_str().unwrap_or("")),
            // The reviewer's words: its further lines indented, none passing for one of ours.
            quoted(f["summary"].as_str().unwrap_or(""), "      ")
        );
        if let Some(path) = f["location"]["path"].as_str() {
            let line = f["location"]["line"].as_u64().map(|l| format!(":{l}")).unwrap_or_default();
            let _ = writeln!(text, "      at {}{line}", one_line(path));
        }
    }
    text
}
