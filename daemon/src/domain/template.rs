//! Review templates, pure parts: validating a template document, assembling its prompt (inline
//! `{input}` substitution or a builder compiled into scafld), mapping its tools onto each
//! provider's command line, parsing an answer (JSON or the Markdown format), combining several
//! answers, and turning a result into dossier findings for a task's review gate.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use scafld_protocol::methods::TemplateFinding;
use scafld_protocol::vocab::{TemplateSeverity, TemplateVerdict};
use serde::Deserialize;
use serde_json::Value;

use crate::domain::dossier::{Dossier, Finding, Location};

/// The largest template file read: as large as a spec may be.
pub const MAX_TEMPLATE_BYTES: u64 = super::spec::budget::MAX_SPEC_BYTES;

/// Names a user template may not take: the review subcommands would shadow it (all of
/// `scafld_protocol::cli::REVIEW_SUBCOMMANDS` but the built-in templates, which one may override).
pub const RESERVED: [&str; 9] = ["wait", "retry", "status", "accept", "reject", "list", "history", "result", "run"];

/// Tools a template may allow. Everything else (Edit, Write, ...) is refused: reviews are
/// read-only.
const TOOLS: [&str; 4] = ["Read", "Glob", "Grep", "Bash"];

/// The only shell commands a template with `Bash` may run.
pub const GIT_COMMANDS: [&str; 3] = ["git diff", "git log", "git show"];

/// Inputs the gate can fill when a template runs as a pass of a task's review.
pub const GATE_INPUTS: [&str; 4] = ["diff", "spec", "task", "cwd"];

/// A template file as written (every field optional, so that a missing one gets our message).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TemplateFile {
    name: Option<String>,
    description: Option<String>,
    system_prompt: Option<String>,
    allowed_tools: Option<Vec<String>>,
    permission_mode: Option<String>,
    setting_sources: Option<Vec<String>>,
    inputs: Option<InputsFile>,
    prompt_template: Option<String>,
    prompt_builder: Option<String>,
    hooks: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct InputsFile {
    #[serde(default)]
    required: Vec<InputDef>,
    #[serde(default)]
    optional: Vec<InputDef>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputDef {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub default: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// `{name}` placeholders replaced by inputs; `{{` and `}}` are literal braces.
    Inline(String),
    Builder(Builder),
}

/// Prompt builders compiled into scafld, for prompts with conditional parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builder {
    /// The code review: `diff` (a ref or a range) and/or `files`, else a survey.
    Code,
}

impl Builder {
    fn named(name: &str) -> Option<Builder> {
        match name {
            "code" => Some(Builder::Code),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    pub name: String,
    pub description: String,
    pub system_prompt: String,
    pub allowed_tools: Vec<String>,
    pub permission_mode: String,
    pub setting_sources: Vec<String>,
    pub required: Vec<InputDef>,
    pub optional: Vec<InputDef>,
    pub prompt: Prompt,
    /// Carried through unchanged for providers that support hooks.
    pub hooks: Option<Value>,
}

/// A template that cannot be used: which file, which field, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateError {
    pub file: String,
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for TemplateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(f, "{}: field `{}`: {}", self.file, self.field, self.message)
        }
    }
}

/// Validate a parsed template document (`file` names it in errors).
pub fn load(file: &str, document: Value) -> Result<Template, TemplateError> {
    let error = |field: &str, message: String| TemplateError { file: file.into(), field: field.into(), message };
    let raw: TemplateFile = serde_path_to_error::deserialize(document).map_err(|e| {
        let field = e.path().to_string();
        error(if field == "." { "" } else { &field }, e.into_inner().to_string())
    })?;
    let text = |value: Option<String>, field: &str| {
        value.filter(|v| !v.trim().is_empty()).ok_or_else(|| error(field, "is missing or empty".into()))
    };
    let name = text(raw.name, "name")?;
    let valid_name = name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        && name.len() <= 64;
    if !valid_name {
        return Err(error("name", format!("{name:?} must match ^[a-z][a-z0-9_-]*$ (at most 64 characters)")));
    }
    if RESERVED.contains(&name.as_str()) {
        return Err(error("name", format!("{name:?} is a `scafld review` subcommand; choose another name")));
    }
    let description = text(raw.description, "description")?;
    let system_prompt = text(raw.system_prompt, "system_prompt")?;
    let allowed_tools = raw.allowed_tools.ok_or_else(|| error("allowed_tools", "is missing".into()))?;
    if let Some(tool) = allowed_tools.iter().find(|t| !TOOLS.contains(&t.as_str())) {
        return Err(error(
            "allowed_tools",
            format!("{tool:?} is not allowed; reviews are read-only ({})", TOOLS.join(", ")),
        ));
    }
    let permission_mode = text(raw.permission_mode, "permission_mode")?;
    if !matches!(permission_mode.as_str(), "default" | "plan" | "bypassPermissions") {
        return Err(error(
            "permission_mode",
            format!("{permission_mode:?} is not default, plan or bypassPermissions (reviews never edit)"),
        ));
    }
    let setting_sources = raw.setting_sources.unwrap_or_default();
    if let Some(source) = setting_sources.iter().find(|s| !matches!(s.as_str(), "project" | "user" | "local")) {
        return Err(error("setting_sources", format!("{source:?} is not project, user or local")));
    }
    let inputs = raw.inputs.unwrap_or_default();
    let mut declared = BTreeSet::new();
    for input in inputs.required.iter().chain(&inputs.optional) {
        if input.name.trim().is_empty() || !declared.insert(input.name.clone()) {
            return Err(error("inputs", format!("input {:?} is empty or declared twice", input.name)));
        }
    }
    let prompt = match (raw.prompt_template, raw.prompt_builder) {
        (Some(_), Some(_)) => {
            return Err(error(
                "prompt_template",
                "set exactly one of prompt_template and prompt_builder, not both".into(),
            ));
        }
        (None, None) => {
            return Err(error("prompt_template", "set exactly one of prompt_template and prompt_builder".into()));
        }
        (Some(inline), None) => {
            let used = placeholders(&inline).map_err(|m| error("prompt_template", m))?;
            if let Some(undeclared) = used.iter().find(|u| !declared.contains(*u)) {
                return Err(error("prompt_template", format!("uses {{{undeclared}}}, which is not a declared input")));
            }
            Prompt::Inline(inline)
        }
        (None, Some(builder)) => Prompt::Builder(Builder::named(&builder).ok_or_else(|| {
            error("prompt_builder", format!("{builder:?} is not a builder compiled into scafld (known: code)"))
        })?),
    };
    Ok(Template {
        name,
        description,
        system_prompt,
        allowed_tools,
        permission_mode,
        setting_sources,
        required: inputs.required,
        optional: inputs.optional,
        prompt,
        hooks: raw.hooks,
    })
}

/// The `{name}` placeholders of an inline template.
fn placeholders(template: &str) -> Result<BTreeSet<String>, String> {
    let mut used = BTreeSet::new();
    walk(template, |piece| {
        if let Piece::Placeholder(name) = piece {
            used.insert(name.to_string());
        }
    })?;
    Ok(used)
}

enum Piece<'a> {
    Text(&'a str),
    Placeholder(&'a str),
}

/// Split an inline template into text and placeholders.
fn walk<'a>(template: &'a str, mut each: impl FnMut(Piece<'a>)) -> Result<(), String> {
    let mut rest = template;
    while let Some(at) = rest.find(['{', '}']) {
        each(Piece::Text(&rest[..at]));
        let tail = &rest[at..];
        if tail.starts_with("{{") || tail.starts_with("}}") {
            each(Piece::Text(&tail[..1]));
            rest = &tail[2..];
        } else if tail.starts_with('}') {
            return Err("a lone `}`; write `}}` for a literal brace".into());
        } else {
            let end = tail.find('}').ok_or("a `{` without its `}`; write `{{` for a literal brace")?;
            let name = &tail[1..end];
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                return Err(format!("{{{name}}} is not a placeholder name"));
            }
            each(Piece::Placeholder(name));
            rest = &tail[end + 1..];
        }
    }
    each(Piece::Text(rest));
    Ok(())
}

impl Template {
    /// Inputs with optional defaults filled in; every required one must be given and no
    /// undeclared one may be.
    pub fn resolve_inputs(&self, given: &BTreeMap<String, String>) -> Result<BTreeMap<String, String>, String> {
        let known: BTreeSet<&str> = self.required.iter().chain(&self.optional).map(|i| i.name.as_str()).collect();
        if let Some(unknown) = given.keys().find(|k| !known.contains(k.as_str())) {
            return Err(format!(
                "template `{}` has no input `{unknown}` (inputs: {})",
                self.name,
                known.iter().copied().collect::<Vec<_>>().join(", ")
            ));
        }
        let missing: Vec<String> = self
            .required
            .iter()
            .filter(|i| given.get(&i.name).is_none_or(|v| v.trim().is_empty()))
            .map(|i| format!("{} ({})", i.name, i.description))
            .collect();
        if !missing.is_empty() {
            return Err(format!("template `{}` needs {}", self.name, missing.join(", ")));
        }
        let mut inputs = given.clone();
        for input in &self.optional {
            if let Some(default) = &input.default {
                inputs.entry(input.name.clone()).or_insert_with(|| default.clone());
            }
        }
        Ok(inputs)
    }

    /// The user prompt for resolved `inputs`.
    pub fn build_prompt(&self, inputs: &BTreeMap<String, String>) -> String {
        match &self.prompt {
            Prompt::Inline(template) => {
                let mut out = String::new();
                let _ = walk(template, |piece| match piece {
                    Piece::Text(t) => out.push_str(t),
                    Piece::Placeholder(name) => out.push_str(inputs.get(name).map(String::as_str).unwrap_or("")),
                });
                out
            }
            Prompt::Builder(Builder::Code) => code_prompt(inputs),
        }
    }

    pub fn allows_shell(&self) -> bool {
        self.allowed_tools.iter().any(|t| t == "Bash")
    }

    pub fn loads_project_settings(&self) -> bool {
        self.setting_sources.iter().any(|s| s == "project")
    }
}

/// The code review prompt: what to review depends on `diff` and `files`.
fn code_prompt(inputs: &BTreeMap<String, String>) -> String {
    let mut prompt = String::from("Review the code of this project.\n\n");
    let diff = inputs.get("diff").map(|d| d.trim()).filter(|d| !d.is_empty());
    let files = inputs.get("files").map(|f| f.trim()).filter(|f| !f.is_empty());
    match diff {
        Some(range) if range.contains("..") => {
            let head = range.split("..").last().unwrap_or("HEAD");
            prompt.push_str(&format!(
                "Scope: the changes of the range `{range}`. List them with `git diff --stat {range}` and read \
                 them with `git diff {range}`; judge each changed file as it is at `{head}` (`git show {head}:<path>`), \
                 not as it is in the working tree.\n"
            ));
        }
        Some(reference) => prompt.push_str(&format!(
            "Scope: the working tree's changes against `{reference}`. List them with `git diff --stat {reference}` \
             and read them with `git diff {reference}`; judge each changed file as it is now in the working tree.\n"
        )),
        None => {}
    }
    match (files, diff) {
        (Some(glob), Some(_)) => prompt.push_str(&format!("Only changed files that match `{glob}` are in scope.\n")),
        (Some(glob), None) => prompt
            .push_str(&format!("Scope: the files matching `{glob}` (find them with Glob). Read each one in full.\n")),
        (None, None) => prompt.push_str(
            "Scope: not given. Survey the project with Glob and Grep, then focus on the code where a review is \
             most useful: recent or central modules, error handling, and anything the guidance files single out.\n",
        ),
        (None, Some(_)) => {}
    }
    prompt.push_str(
        "\nRead the project's agent guidance (CLAUDE.md, AGENTS.md) and a neighbouring module before judging, and \
         follow imports or callers where a change's effect depends on them. Report your findings with the \
         severities described in your instructions.\n",
    );
    prompt
}

/// The text a template reviewer receives: the template's instructions, the task, and how to
/// answer.
pub fn packet(template: &Template, prompt: &str) -> String {
    format!(
        "# Review: {name}\n\n{description}\n\n## Instructions\n\n{system}\n\n## Task\n\n{prompt}\n\n## How to answer\n\n\
         Do not modify any file. Answer with one JSON object: {{\"verdict\": \"PASS|CONCERNS|FAIL\", \"summary\": \"...\", \
         \"findings\": [{{\"severity\": \"PASS|CONCERN|FAIL\", \"title\": \"...\", \"description\": \"...\", \"file\": \"path:line\"}}]}}, \
         with no other key (an answer with another key is read as no answer). When you have the `submit_review` tool, submit it there exactly once (prose is ignored). Otherwise make it your \
         final message; a reviewer that cannot write JSON may answer in Markdown instead: a `## Summary` whose first line \
         opens with the verdict (PASS, CONCERNS or FAIL), then `### [FAIL|CONCERN|PASS] Title` findings.\n",
        name = template.name,
        description = template.description,
        system = template.system_prompt.trim_end(),
        prompt = prompt.trim_end(),
    )
}

/// A gate pass's packet: `packet` with the task's changes since approval (`changes`, as the
/// gate's reviewers are shown them) before how to answer; `git diff` in the workspace misses
/// some of them (a nested repository's, an untracked file).
pub fn with_task_changes(packet: &str, changes: &str) -> String {
    let section = format!(
        "## Task changes since approval\n\nThese are the task's changes, all of them, as the gate's reviewers are shown them: judge these (a nested git repository's changes and untracked files are among them, which `git diff` in the workspace does not show).\n\n{}\n\n",
        changes.trim_end()
    );
    match packet.find("## How to answer") {
        Some(at) => format!("{}{section}{}", &packet[..at], &packet[at..]),
        None => format!("{packet}\n{section}"),
    }
}

/// Claude's tool flags for a template: `--tools`, `--allowedTools`, `--disallowedTools`. The
/// read tools are offered but not allowed by name: a bare `Read` would allow reading anywhere;
/// [`claude_permissions`] allows them below the workspace only.
pub fn claude_tools(template: &Template) -> (String, String, String) {
    let mut tools: Vec<&str> =
        ["Read", "Grep", "Glob"].into_iter().filter(|t| template.allowed_tools.iter().any(|a| a == t)).collect();
    let mut allowed: Vec<String> = Vec::new();
    let mut disallowed = vec!["Agent", "Task", "Edit", "Write", "NotebookEdit", "WebFetch", "WebSearch"];
    if template.allows_shell() {
        tools.push("Bash");
        allowed.extend(GIT_COMMANDS.iter().map(|c| format!("Bash({c}:*)")));
        // `git diff|log|show --output=FILE` writes a file; git refuses abbreviations of it.
        disallowed.push("Bash(git *--output*)");
    } else {
        disallowed.push("Bash");
    }
    allowed.push("mcp__scafld__submit_review".into());
    (tools.join(","), allowed.join(","), disallowed.join(","))
}

/// Claude's `permissions` settings for a reviewer in the workspace at `root` (run in
/// `dontAsk` mode, so what no rule allows is denied): its file tools (Read, and Grep and Glob,
/// which follow Read's rules) allowed below `root` only, never outside it (the daemon's state,
/// the caller's home), and denied the files kept from reviewers for their secrets, by absolute
/// path and, for Grep's exclusions, relative to the run's folder too.
pub fn claude_permissions(root: &Path) -> Value {
    let root = format!("/{}", gitignore_literal(&root.display().to_string()));
    let root = root.trim_end_matches('/');
    let deny: Vec<String> = crate::domain::review::SECRET_PATTERNS
        .iter()
        .flat_map(|p| [format!("Read({root}/{p})"), format!("Read({p})")])
        .collect();
    serde_json::json!({"allow": [format!("Read({root}/**)")], "deny": deny})
}

/// `text` matched literally in a gitignore-style pattern (claude's path rules).
fn gitignore_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Tools gemini 0.61 offers in plan mode (or may reach from it) that a reviewer must never run:
/// writes, leaving plan mode (headless, that switches to YOLO), the web, sub-agents, skills,
/// memory. Checked against the tools the real CLI declares (`real_clis` tests).
pub const GEMINI_DENIED_TOOLS: [&str; 10] = [
    "exit_plan_mode",
    "enter_plan_mode",
    "write_file",
    "replace",
    "google_web_search",
    "web_fetch",
    "invoke_agent",
    "activate_skill",
    "save_memory",
    "run_shell_command",
];

/// The Gemini policy of a review run (`--policy`, in plan mode), highest priority first wins:
/// git's `--output` (which writes files) is denied above everything; the read tools the
/// template allows (all of them for the gate), git's read commands when it allows a shell and
/// the `submit_review` tool of the `scafld` MCP server are allowed; below those, every tool in
/// [`GEMINI_DENIED_TOOLS`] and the read tools the template leaves out are denied. Every rule
/// has a priority (the CLI refuses the whole file otherwise). No `*` rule: it would also hide
/// the submit tool.
pub fn gemini_policy(template: Option<&Template>, submit_tool: &str) -> String {
    const GUARD: u32 = 200;
    const ALLOW: u32 = 100;
    const DENY: u32 = 50;
    let mut rules = String::new();
    let mut rule = |fields: &[(&str, &str)], decision: &str, priority: u32| {
        rules.push_str("[[rule]]\n");
        for (key, value) in fields {
            rules.push_str(&format!("{key} = \"{}\"\n", value.replace('\\', "\\\\").replace('"', "\\\"")));
        }
        rules.push_str(&format!("decision = \"{decision}\"\npriority = {priority}\n\n"));
    };
    // Grep's `no_ignore` would search the files kept from reviewers for their secrets, which
    // the run's ignore file (`context.fileFiltering.customIgnoreFilePaths`) leaves out of
    // ripgrep's search; without ripgrep gemini's fallback grep honours no ignore file, so a
    // search aimed at them is denied too (a search of the whole tree cannot be told apart).
    rule(&[("toolName", "grep_search"), ("argsPattern", r#""no_ignore":true"#)], "deny", GUARD);
    // Gemini matches the args as sorted JSON with each top-level pair between NULs, and
    // refuses a pattern with a quantified group (`(?:...)*`) as unsafe.
    let aimed = r#""(dir_path|include_pattern)":"[^\x00]*(\.env|\.priv|config\.local\.yaml)"#;
    rule(&[("toolName", "grep_search"), ("argsPattern", aimed)], "deny", GUARD);
    let shell = template.is_some_and(Template::allows_shell);
    if shell {
        rule(&[("toolName", "run_shell_command"), ("argsPattern", "--output")], "deny", GUARD);
        for command in GIT_COMMANDS {
            rule(&[("toolName", "run_shell_command"), ("commandPrefix", command)], "allow", ALLOW);
        }
    }
    for (tool, gemini) in [("Read", "read_file"), ("Glob", "glob"), ("Glob", "list_directory"), ("Grep", "grep_search")]
    {
        let allowed = template.is_none_or(|t| t.allowed_tools.iter().any(|a| a == tool));
        rule(&[("toolName", gemini)], if allowed { "allow" } else { "deny" }, if allowed { ALLOW } else { DENY });
    }
    rule(&[("mcpName", "scafld"), ("toolName", submit_tool)], "allow", ALLOW);
    for tool in GEMINI_DENIED_TOOLS {
        rule(&[("toolName", tool)], "deny", DENY);
    }
    rules
}

/// Whether codex should load the project's rules (AGENTS.md): only for `setting_sources:
/// [project]`. Codex always runs in its read-only sandbox, where git's read commands work.
pub fn codex_ignores_rules(template: &Template) -> bool {
    !template.loads_project_settings()
}

/// What a reviewer answered, before the daemon adds provenance.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub verdict: TemplateVerdict,
    pub summary: String,
    pub findings: Vec<TemplateFinding>,
}

impl Answer {
    /// An answer whose verdict is at least as grave as its gravest finding: a FAIL finding
    /// under a PASS summary is a FAIL (it blocks a gate pass, so it fails a review alone too),
    /// a CONCERN finding makes a PASS CONCERNS.
    fn new(verdict: TemplateVerdict, summary: String, findings: Vec<TemplateFinding>) -> Answer {
        let has = |severity| findings.iter().any(|f| f.severity == severity);
        let verdict = match verdict {
            _ if has(TemplateSeverity::Fail) => TemplateVerdict::Fail,
            TemplateVerdict::Pass if has(TemplateSeverity::Concern) => TemplateVerdict::Concerns,
            verdict => verdict,
        };
        Answer { verdict, summary, findings }
    }
}

/// A verdict a reviewer may give (UNKNOWN is scafld's word for no readable answer).
fn answered_verdict(word: &str) -> Option<TemplateVerdict> {
    word.trim().to_uppercase().parse().ok().filter(|v| *v != TemplateVerdict::Unknown)
}

fn severity(word: &str) -> Option<TemplateSeverity> {
    word.trim().to_uppercase().parse().ok()
}

/// Parse an answer: one JSON object (`verdict`, `summary`, `findings`), or the Markdown format
/// (`## Summary` with the verdict, `### [SEVERITY] Title` findings). `None` when it is neither:
/// the result is then UNKNOWN, never a pass.
pub fn parse_answer(text: &str) -> Option<Answer> {
    let trimmed = text.trim();
    // A model often wraps its JSON in a ```json fence; the fence is packaging, not the answer.
    let unfenced = trimmed
        .strip_prefix("```json")
        .or_else(|| trimmed.strip_prefix("```"))
        .and_then(|rest| rest.trim_end().strip_suffix("```"))
        .map(str::trim);
    match unfenced.unwrap_or(trimmed) {
        // A key given twice (`"verdict":"FAIL", ... "verdict":"PASS"`) is no answer: which one
        // was meant cannot be told, and a reader keeping the last would take the milder.
        json if json.starts_with('{') => scafld_protocol::json::from_str(json).ok().and_then(|v| answer_from_json(&v)),
        _ => parse_markdown(&atx_headings(trimmed)),
    }
}

/// The keys a template answer and each of its findings may have, as the answer schema names
/// them.
static ANSWER_KEYS: std::sync::LazyLock<(BTreeSet<String>, BTreeSet<String>)> = std::sync::LazyLock::new(|| {
    let schema = scafld_protocol::schemas::template_answer();
    let keys = |object: &Value| -> BTreeSet<String> {
        object["properties"].as_object().map(|p| p.keys().cloned().collect()).unwrap_or_default()
    };
    (keys(&schema), keys(&schema["properties"]["findings"]["items"]))
});

/// An answer from a JSON value (a submission or codex's output file).
///
/// `None` when the answer has a key the answer schema does not (`scafld_protocol::schemas::
/// template_answer`, whose `additionalProperties: false` codex is held to), at its top or in a
/// finding: a key such as `blocking_findings` or `issues` beside `findings` would go unread, so
/// the answer is not read one way.
pub fn answer_from_json(value: &Value) -> Option<Answer> {
    let (answer_keys, finding_keys) = &*ANSWER_KEYS;
    let only =
        |object: &serde_json::Map<String, Value>, keys: &BTreeSet<String>| object.keys().all(|k| keys.contains(k));
    if !only(value.as_object()?, answer_keys) {
        return None;
    }
    let verdict = answered_verdict(value.get("verdict")?.as_str()?)?;
    let mut findings = Vec::new();
    for f in value.get("findings")?.as_array()? {
        if !only(f.as_object()?, finding_keys) {
            return None;
        }
        findings.push(TemplateFinding {
            severity: severity(f.get("severity")?.as_str()?)?,
            title: f.get("title")?.as_str()?.trim().to_string(),
            description: f.get("description").and_then(Value::as_str).unwrap_or_default().trim().to_string(),
            file: f.get("file").and_then(Value::as_str).map(str::to_string).filter(|s| !s.is_empty()),
            reviewer: None,
        });
    }
    let summary = value.get("summary").and_then(Value::as_str).unwrap_or_default().trim().to_string();
    Some(Answer::new(verdict, summary, findings))
}

fn parse_markdown(text: &str) -> Option<Answer> {
    // A Markdown answer that holds a JSON answer too says two things: which one counts cannot
    // be told.
    if text.contains("\"verdict\"") {
        return None;
    }
    let mut summary = Vec::new();
    let mut summaries = 0;
    let mut findings: Vec<TemplateFinding> = Vec::new();
    // Verdicts stated outside the summary (`## Verdict` then `FAIL`, a `- FAIL: ...` line): one
    // other than the summary's makes the answer read two ways.
    let mut stated_elsewhere = Vec::new();
    let mut section = "";
    for line in text.lines() {
        let stripped = line.trim();
        // A finding at any heading level (a model's `## [FAIL]` is one, never dropped), inside a
        // list item or a quote too; another `###` is no part of the format, so the answer is not
        // read; a deeper one is its text.
        if let Some((level, words)) = heading(uncontained(stripped)) {
            match (level, words.strip_prefix('[').and_then(|h| h.split_once(']'))) {
                (_, Some((word, title))) => {
                    let severity = severity(word)?;
                    let title = title.trim().to_string();
                    findings.push(TemplateFinding { severity, title, ..TemplateFinding::default() });
                    section = "finding";
                    continue;
                }
                (2, None) => {
                    section = if words.eq_ignore_ascii_case("summary") { "summary" } else { "other" };
                    summaries += usize::from(section == "summary");
                    stated_elsewhere.extend(stated_verdict(words).filter(|_| section == "other"));
                    continue;
                }
                (3, None) => return None,
                _ => {}
            }
        }
        match section {
            "summary" if !stripped.is_empty() => summary.push(stripped.to_string()),
            "" | "other" => stated_elsewhere.extend(stated_verdict(stripped)),
            "finding" => {
                let finding = findings.last_mut().expect("a finding section has a finding");
                if !finding.description.is_empty() || !stripped.is_empty() {
                    if !finding.description.is_empty() {
                        finding.description.push('\n');
                    }
                    finding.description.push_str(line.trim_end());
                }
                if finding.file.is_none() {
                    finding.file = file_reference(stripped);
                }
            }
            _ => {}
        }
    }
    for f in &mut findings {
        f.description = f.description.trim().to_string();
    }
    // Two summaries, or a `[FAIL]` the format did not read as a finding: not an answer that
    // can be read one way (a FAIL somewhere in it must never come out a pass).
    let failing = findings.iter().filter(|f| f.severity == TemplateSeverity::Fail).count();
    if summaries > 1 || fail_markers(text) > failing {
        return None;
    }
    let verdict = summary_verdict(&summary)?;
    if stated_elsewhere.iter().any(|other| *other != verdict) {
        return None;
    }
    Some(Answer::new(verdict, summary.join(" "), findings))
}

/// Labels a verdict statement may carry before its verdict (`[overall assessment: FAIL]`, the
/// format of the original design; `Verdict: PASS`).
const VERDICT_LABELS: [&str; 4] = ["overall assessment", "overall verdict", "assessment", "verdict"];

/// The verdict of a Markdown summary's lines: the one its first line states, as the format asks
/// (`PASS | CONCERNS | FAIL, then one or two sentences`), when no word of the summary names
/// another. A verdict word in prose only (`This does not pass`) states nothing, and a summary
/// naming two (`PASS on the layout.` / `FAIL overall.`) reads two ways: neither is the verdict.
fn summary_verdict(lines: &[String]) -> Option<TemplateVerdict> {
    let stated = stated_verdict(lines.first()?)?;
    // A verdict named agrees when it is the stated one; a denied one when it is another (`PASS.
    // No concerns.`, `FAIL: it will not pass`), never when it denies the stated one.
    let agrees = |(verdict, denied): (TemplateVerdict, bool)| (verdict == stated) != denied;
    lines.iter().flat_map(|line| verdicts_in(line)).all(agrees).then_some(stated)
}

/// The verdict a line states at its very start: the word itself in capitals (`PASS - ...`,
/// `**FAIL**`, `[CONCERNS]`), or in any case after a label and a colon (`Verdict: pass`).
fn stated_verdict(line: &str) -> Option<TemplateVerdict> {
    let decoration = |c: char| matches!(c, '*' | '_' | '`' | '[' | ' ' | '\t');
    let line = uncontained(line).trim_start_matches(decoration);
    let labelled = VERDICT_LABELS.iter().find_map(|label| {
        let after =
            line.get(..label.len()).filter(|head| head.eq_ignore_ascii_case(label)).map(|_| &line[label.len()..])?;
        after.trim_start_matches(decoration).strip_prefix(':').map(|rest| rest.trim_start_matches(decoration))
    });
    let statement = labelled.unwrap_or(line);
    let end = statement.find(|c: char| !c.is_ascii_alphabetic()).unwrap_or(statement.len());
    let word = &statement[..end];
    match labelled {
        Some(_) => answered_verdict(word),
        None => word.parse().ok().filter(|v| *v != TemplateVerdict::Unknown),
    }
}

/// A Markdown heading of level 1 to 6: its level and its text.
fn heading(line: &str) -> Option<(usize, &str)> {
    let level = line.chars().take_while(|c| *c == '#').count();
    let text = line[level..].strip_prefix([' ', '\t'])?;
    (1..=6).contains(&level).then(|| (level, text.trim()))
}

/// `text` with each setext heading (a line underlined with `===` or `---`) written as the ATX
/// heading it is (`# ` or `## `), so that a finding written so counts like any other.
fn atx_headings(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let underline = |line: &str, mark: char| {
        let line = line.trim();
        !line.is_empty() && line.chars().all(|c| c == mark)
    };
    let mut out = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim();
        let next = lines.get(i + 1).copied().unwrap_or_default();
        let plain = !line.is_empty() && !line.starts_with('#');
        match (plain, underline(next, '='), underline(next, '-')) {
            (true, true, _) => out.push(format!("# {line}")),
            (true, _, true) => out.push(format!("## {line}")),
            _ => {
                out.push(lines[i].to_string());
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    out.join("\n")
}

/// The PASS, CONCERNS or FAIL words of a summary line, in any case and anywhere in it, each
/// with whether it is denied: a prose one (not in capitals) with a denial among the two words
/// before it in its clause (`No concerns.`, `no blocking concerns`, `nothing will fail`, `it
/// doesn't pass`; not across a comma or a stop, as in `No, actually fail`).
fn verdicts_in(line: &str) -> Vec<(TemplateVerdict, bool)> {
    const DENIALS: [&str; 8] = ["no", "not", "t", "without", "never", "nor", "zero", "nothing"];
    let mut named = Vec::new();
    for clause in line.split([',', '.', ';', ':', '!', '?']) {
        let words: Vec<&str> = clause.split(|c: char| !c.is_ascii_alphabetic()).filter(|w| !w.is_empty()).collect();
        for (at, word) in words.iter().enumerate() {
            let Some(verdict) = answered_verdict(word) else { continue };
            let capitals = word.chars().all(|c| c.is_ascii_uppercase());
            let denial =
                words[at.saturating_sub(2)..at].iter().any(|w| DENIALS.iter().any(|d| w.eq_ignore_ascii_case(d)));
            named.push((verdict, denial && !capitals));
        }
    }
    named
}

/// `line` without the list-item and quote markers in front of it (`- `, `* `, `1. `, `> `).
fn uncontained(mut line: &str) -> &str {
    loop {
        let trimmed = line.trim_start();
        let digits = trimmed.chars().take_while(char::is_ascii_digit).count();
        let rest = trimmed
            .strip_prefix('>')
            .or_else(|| ["- ", "* ", "+ ", "-\t", "*\t", "+\t"].iter().find_map(|m| trimmed.strip_prefix(m)))
            .or_else(|| {
                (digits > 0).then(|| &trimmed[digits..]).and_then(|r| r.strip_prefix(". ").or(r.strip_prefix(") ")))
            });
        match rest {
            Some(rest) => line = rest,
            None => return trimmed,
        }
    }
}

/// How many `[FAIL]` markers (any case, spaces inside allowed) `text` holds.
fn fail_markers(text: &str) -> usize {
    text.split('[')
        .skip(1)
        .filter(|after| after.split(']').next().is_some_and(|word| word.trim().eq_ignore_ascii_case("fail")))
        .count()
}

/// A `path:line` (or `path`) reference in a line of prose: the first token with a `/` or a
/// `.` that is followed by `:digits`.
fn file_reference(line: &str) -> Option<String> {
    line.split_whitespace()
        .map(|t| t.trim_matches(|c: char| matches!(c, '`' | '(' | ')' | ',' | ';' | '"' | '\'') || c == '.'))
        .find(|t| {
            let (path, line) = t.rsplit_once(':').unwrap_or((t, ""));
            (path.contains('/') || path.contains('.'))
                && !path.contains("://")
                && !line.is_empty()
                && line.split('-').all(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        })
        .map(str::to_string)
}

/// Several reviewers' verdicts: FAIL if any failed, else UNKNOWN if any could not be read,
/// else CONCERNS if any had concerns, else PASS.
pub fn combine(verdicts: &[TemplateVerdict]) -> TemplateVerdict {
    let any = |v: TemplateVerdict| verdicts.contains(&v);
    if verdicts.is_empty() {
        TemplateVerdict::Unknown
    } else if any(TemplateVerdict::Fail) {
        TemplateVerdict::Fail
    } else if any(TemplateVerdict::Unknown) {
        TemplateVerdict::Unknown
    } else if any(TemplateVerdict::Concerns) {
        TemplateVerdict::Concerns
    } else {
        TemplateVerdict::Pass
    }
}

/// A template pass as a dossier for the review gate: FAIL findings block completion, CONCERN
/// findings are reported without blocking, PASS findings are left out.
pub fn to_dossier(template: &str, answer: &Answer, mode: &str) -> Dossier {
    let findings: Vec<Finding> = answer
        .findings
        .iter()
        .filter(|f| f.severity != TemplateSeverity::Pass)
        .enumerate()
        .map(|(i, f)| {
            let blocks = f.severity == TemplateSeverity::Fail;
            let (path, line) = match f.file.as_deref().map(|r| r.rsplit_once(':').unwrap_or((r, ""))) {
                Some((path, line)) => (path.to_string(), line.split('-').next().and_then(|l| l.parse().ok())),
                None => (format!("(template {template})"), None),
            };
            Finding {
                id: format!("{template}-{}", i + 1),
                severity: if blocks { "high" } else { "medium" }.into(),
                blocks_completion: blocks,
                status: Some("open".into()),
                category: Some(format!("template:{template}")),
                location: Some(Location { path, line }),
                evidence: Some(if f.description.is_empty() { f.title.clone() } else { f.description.clone() }),
                impact: Some(format!("the `{template}` review marks this {}", f.severity)),
                validation: Some(format!("run `scafld review {template}` again after the fix")),
                summary: Some(f.title.clone()),
                ..Finding::default()
            }
        })
        .collect();
    let blocks = findings.iter().any(|f| f.blocks_completion);
    Dossier {
        verdict: if blocks { "fail" } else { "pass" }.into(),
        mode: mode.into(),
        summary: format!(
            "{template} review: {}{}",
            answer.verdict,
            if answer.summary.is_empty() { String::new() } else { format!(" - {}", answer.summary) }
        ),
        findings,
        attack_log: vec![crate::domain::dossier::Attack {
            target: format!("template {template}"),
            attack: format!("the `{template}` review template"),
            result: if blocks { "finding" } else { "clean" }.into(),
            notes: None,
        }],
        output_format: Some(format!("template.{template}")),
        ..Dossier::default()
    }
}

#[cfg(test)]
mod tests;
