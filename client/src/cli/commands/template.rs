//! Template reviews: `review list`, `review history`, `review arch|tasks|code`, user templates
//! (`review run NAME` or `review NAME --input k=v`), with `--output terminal|json|file PATH`.

use scafld_protocol::vocab::{TemplateSeverity, TemplateVerdict};
use std::collections::BTreeMap;
use std::fmt::Write as _;

use scafld_protocol::methods::{self as m, TemplateReviewResult};

use super::exec::caller_for_reviewers;
use super::review::{follow, spawn_output};
use super::tasks::{call, session as connect_workspace};
use crate::cli::exit::{template as codes, workflow};
use crate::cli::output::{CliError, Style, columns, note, padded};
use crate::cli::{Context, TemplateRunArgs};
use scafld_client::terminal::{one_line, quoted};

fn usage(message: impl Into<String>) -> CliError {
    CliError::new("usage", message, codes::USAGE)
}

pub fn list(ctx: &Context) -> Result<u8, CliError> {
    let (root, mut conn) = connect_workspace(ctx)?;
    let r = call::<m::ReviewTemplates>(&mut conn, &m::WorkspaceRootParams { root })?;
    ctx.out.success(&r, || {
        let width = r.templates.iter().map(|t| columns(&t.name)).max().unwrap_or(4);
        let mut text = String::from("Available review templates:\n");
        for t in &r.templates {
            let source =
                if t.overrides_builtin { format!("{} (overrides the built-in)", t.source) } else { t.source.clone() };
            let _ = writeln!(text, "  {}  {}  [{source}]", padded(&t.name, width), t.description);
        }
        for e in &r.errors {
            let _ = writeln!(text, "  {} {e}", ctx.out.paint("broken:", Style::Bad));
        }
        text.trim_end().to_string()
    });
    Ok(workflow::OK)
}

pub fn history(ctx: &Context) -> Result<u8, CliError> {
    let (root, mut conn) = connect_workspace(ctx)?;
    let r = call::<m::ReviewHistory>(&mut conn, &m::WorkspaceRootParams { root })?;
    ctx.out.success(&r, || {
        if r.reviews.is_empty() {
            return "no template reviews yet".into();
        }
        r.reviews
            .iter()
            .map(|h| {
                format!(
                    "{}  {:<8} {} {} finding(s)  {}  {}",
                    h.timestamp,
                    h.template,
                    ctx.out.cell(h.verdict.as_str(), verdict_style(h.verdict), 9),
                    h.findings.len(),
                    h.provider,
                    h.session_key
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    });
    Ok(workflow::OK)
}

/// Where the result goes.
enum Destination {
    Terminal,
    Json,
    /// A file of the caller's, and whether an existing one may be replaced (`--force`).
    File(String, bool),
}

/// Where `--output` sends the result. A file is checked here, before any reviewer runs, as
/// `session --export` checks its path (`scafld_local::out_file`): never a link, a folder, a
/// FIFO or a device, an existing file only with `force`.
fn destination(output: &[String], force: bool) -> Result<Destination, CliError> {
    match output {
        [] => Ok(Destination::Terminal),
        [mode] if mode == "terminal" => Ok(Destination::Terminal),
        [mode] if mode == "json" => Ok(Destination::Json),
        [mode, path] if mode == "file" => {
            scafld_local::out_file::check(std::path::Path::new(path), force)
                .map_err(|why| usage(format!("--output file: {why}; no review was run")).with_hint(why.hint()))?;
            Ok(Destination::File(path.clone(), force))
        }
        [mode] if mode == "file" => Err(usage("--output file needs a PATH")),
        _ => Err(usage(format!("--output {} is not terminal, json or `file PATH`", output.join(" ")))),
    }
}

/// Add NAME=VALUE inputs to those already given (by a built-in template's own flags). An input
/// given twice reads two ways and is refused, never taken as its last copy.
pub fn add_inputs(inputs: &mut BTreeMap<String, String>, raw: &[String]) -> Result<(), CliError> {
    for item in raw {
        let (name, value) = item
            .split_once('=')
            .filter(|(k, _)| !k.trim().is_empty())
            .ok_or_else(|| usage(format!("--input {item:?} is not NAME=VALUE")))?;
        let name = name.trim();
        if inputs.insert(name.to_string(), value.to_string()).is_some() {
            return Err(usage(format!("the input `{name}` is given twice; no review was run"))
                .with_hint("give each input once: which value was meant is never guessed"));
        }
    }
    Ok(())
}

/// Run template `name` with `inputs` and report its result.
pub fn run(
    ctx: &Context,
    name: &str,
    mut inputs: BTreeMap<String, String>,
    args: &TemplateRunArgs,
) -> Result<u8, CliError> {
    let destination = destination(&args.output, args.force)?;
    add_inputs(&mut inputs, &args.inputs)?;
    let (root, mut conn) = connect_workspace(ctx)?;
    let mut reviewers = args.reviewers.clone();
    if let Some(provider) = &args.provider {
        if !reviewers.is_empty() {
            return Err(usage("give --provider or --reviewers, not both"));
        }
        reviewers.push(provider.clone());
    }
    let params = m::TemplateReviewParams {
        root: root.clone(),
        template: name.to_string(),
        inputs,
        reviewers,
        provider_command: crate::cli::input::provider_command(args.provider_command.as_deref()),
        cwd: args.cwd.as_ref().map(|c| c.display().to_string()),
        wait_seconds: 0.0,
        caller: caller_for_reviewers(),
    };
    let started = call::<m::ReviewTemplate>(&mut conn, &params).map_err(in_template_table)?;
    if args.detach {
        let code = spawn_output(ctx, &started.session);
        if !ctx.out.json && !started.session.reviewers_spawned.is_empty() {
            note(&format!("next: scafld review result --session-key {}", started.session.session_key));
        }
        return Ok(code);
    }
    let waited = follow(ctx, &mut conn, &root, name, &started.session)?;
    let result = waited.template_result.ok_or_else(|| {
        CliError::new("runtime_error", "the template review settled without a result", codes::UNKNOWN)
    })?;
    deliver(ctx, &result, destination)
}

/// `review result`: a template session's result, once it settles (bounded by `timeout`).
pub fn result(
    ctx: &Context,
    session_key: Option<String>,
    timeout: f64,
    output: &[String],
    force: bool,
) -> Result<u8, CliError> {
    let destination = destination(output, force)?;
    if !(timeout.is_finite() && timeout >= 0.0) {
        return Err(usage("--timeout must be a non-negative number of seconds"));
    }
    let (root, mut conn) = connect_workspace(ctx)?;
    let params = m::ReviewWaitParams {
        root,
        session_key: session_key.clone(),
        timeout_seconds: timeout,
        caller_identity: super::exec::caller_identity(),
    };
    match call::<m::ReviewResult>(&mut conn, &params).map_err(in_template_table)? {
        Some(result) => deliver(ctx, &result, destination),
        None => {
            let again = session_key.map(|k| format!(" --session-key {k}")).unwrap_or_default();
            Err(CliError::new("still_running", "the template review is still running", codes::UNKNOWN)
                .with_hint(format!("it keeps running; wait again with `scafld review result{again}`")))
        }
    }
}

/// Daemon errors keep the template exit table: usage (an unknown name or key, bad input) 2,
/// anything else 1.
fn in_template_table(e: CliError) -> CliError {
    crate::cli::exit::in_family(e, crate::cli::exit::Family::Template)
}

/// Print or write a result; its verdict decides the exit code, and a FAIL or UNKNOWN result
/// is not a success in the `--json` envelope either.
fn deliver(ctx: &Context, result: &TemplateReviewResult, destination: Destination) -> Result<u8, CliError> {
    let code = match result.verdict {
        TemplateVerdict::Pass | TemplateVerdict::Concerns => codes::PASS,
        TemplateVerdict::Fail => codes::FAIL,
        TemplateVerdict::Unknown => codes::UNKNOWN,
    };
    let human = match destination {
        Destination::Json => {
            println!("{}", serde_json::to_string_pretty(result).unwrap_or_default());
            return Ok(code);
        }
        Destination::File(path, force) => {
            let text = serde_json::to_string_pretty(result).unwrap_or_default();
            // Checked again in the open: a link, a FIFO or a file that appeared meanwhile.
            scafld_local::out_file::write(std::path::Path::new(&path), format!("{text}\n").as_bytes(), force)
                .map_err(|e| CliError::new("output", format!("cannot write {path}: {e}"), codes::UNKNOWN))?;
            format!("{} review: {} (written to {path})", result.template, result.verdict)
        }
        Destination::Terminal => render(ctx, result),
    };
    if code == codes::PASS {
        ctx.out.success(result, || human);
    } else if ctx.out.json {
        let (kind, message) = if code == codes::FAIL {
            ("review_failed", format!("{} review: FAIL", result.template))
        } else {
            ("review_unknown", format!("{} review: UNKNOWN (no answer could be read)", result.template))
        };
        ctx.out.failure(&CliError::new(kind, message, code), serde_json::to_value(result).ok());
    } else {
        ctx.out.print_human(&human);
    }
    Ok(code)
}

fn verdict_style(verdict: TemplateVerdict) -> Style {
    match verdict {
        TemplateVerdict::Pass => Style::Good,
        TemplateVerdict::Concerns => Style::Warn,
        TemplateVerdict::Fail | TemplateVerdict::Unknown => Style::Bad,
    }
}

fn paint_verdict(ctx: &Context, verdict: TemplateVerdict) -> String {
    ctx.out.paint(verdict.as_str(), verdict_style(verdict))
}

fn paint_severity(ctx: &Context, severity: TemplateSeverity) -> String {
    let style = match severity {
        TemplateSeverity::Pass => Style::Good,
        TemplateSeverity::Concern => Style::Warn,
        TemplateSeverity::Fail => Style::Bad,
    };
    ctx.out.paint(severity.as_str(), style)
}

/// The terminal rendering: verdict, summary, findings by severity.
fn render(ctx: &Context, r: &TemplateReviewResult) -> String {
    let mut text = format!("{} review: {}", r.template, paint_verdict(ctx, r.verdict));
    if !r.summary.is_empty() {
        let _ = write!(text, " - {}", quoted(&r.summary, "  "));
    }
    let _ = writeln!(text, "\n({}, session {})", r.provider, r.session_key);
    for f in &r.findings {
        let by = f.reviewer.as_deref().map(|r| format!(" [{r}]")).unwrap_or_default();
        let _ = writeln!(text, "\n  {} {}{by}", paint_severity(ctx, f.severity), quoted(&f.title, "    "));
        if let Some(file) = &f.file {
            let _ = writeln!(text, "    at {}", one_line(file));
        }
        for line in f.description.lines().filter(|l| !l.trim().is_empty()) {
            let _ = writeln!(text, "    {}", quoted(line, "    "));
        }
    }
    if r.verdict == TemplateVerdict::Unknown {
        // Every line of it marked, the first too: the provider's output is no line of ours.
        let _ = writeln!(
            text,
            "\nThe answer could not be parsed; raw output:\n  | {}",
            quoted(r.raw_output.trim_end(), "  ")
        );
    }
    text.trim_end().to_string()
}
