//! Review providers: choosing one (explicit, configured, or `auto` by host agent), and running
//! the external reviewer CLIs at their process boundary. Codex answers in an output file
//! constrained by a schema; Claude and Gemini answer only through the `submit_review` MCP tool
//! (`scafld mcp submit-review`), which relays the dossier to the daemon's submission slot.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use scafld_local::capped;
use scafld_protocol::ErrorKind;
use scafld_protocol::vocab::HardenStatus;
use serde_json::{Value, json};

use crate::config::{Config, ProviderCli};
use crate::domain::dossier::{self, Dossier, Request};
use crate::domain::job::{FailureClass, ReviewerFailure};
use crate::domain::template::{self, Template};
use crate::error::{RpcError, RpcResult};
use crate::runner::{self, RunRequest};

pub enum Provider {
    Command(String),
    Local,
    Codex(Cli),
    Claude(Cli),
    Gemini(Cli),
}

pub struct Cli {
    pub binary: PathBuf,
    pub model: String,
    pub reasoning: String,
}

impl Provider {
    pub fn name(&self) -> &'static str {
        match self {
            Provider::Command(_) => "command",
            Provider::Local => "local",
            Provider::Codex(_) => "codex",
            Provider::Claude(_) => "claude",
            Provider::Gemini(_) => "gemini",
        }
    }
}

/// What the caller asked for (flags win over config).
pub struct Choice<'a> {
    pub provider: Option<&'a str>,
    pub command: Option<&'a str>,
    pub model: Option<&'a str>,
    pub reasoning: Option<&'a str>,
    /// The agents that built the task under review (its ledger's implementers): `auto` takes
    /// them last, as it does the caller's host, since each wrote some of the work.
    pub builders: &'a [String],
}

/// Variables each host agent sets in the shells it spawns (read from the real CLIs): exact
/// names, because prefixes such as `CLAUDE_CODE*` or `GEMINI_CLI*` also match settings users
/// export everywhere (`CLAUDE_CODE_USE_BEDROCK`, `GEMINI_CLI_HOME`).
const HOST_MARKERS: [(&str, &[&str]); 3] = [
    ("claude", &["CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT", "CLAUDE_CODE_SESSION_ID"]),
    ("codex", &["CODEX_THREAD_ID", "CODEX_SESSION_ID", "CODEX_SANDBOX_NETWORK_DISABLED", "CODEX_CI"]),
    ("gemini", &["GEMINI_CLI"]),
];

/// The agent the caller runs inside: `SCAFLD_HOST_AGENT`, else the host's environment markers.
pub fn host_agent(env: &BTreeMap<String, String>) -> Option<&'static str> {
    if env.contains_key(scafld_protocol::hosts::HOST_AGENT_VAR) {
        return declared_host(env);
    }
    genuine_host(env)
}

/// The agent `SCAFLD_HOST_AGENT` declares (see [`scafld_protocol::hosts::declared`]).
fn declared_host(env: &BTreeMap<String, String>) -> Option<&'static str> {
    scafld_protocol::hosts::declared(env.get(scafld_protocol::hosts::HOST_AGENT_VAR)?)
}

/// Every agent the caller may be running inside: the declared `SCAFLD_HOST_AGENT` and each
/// host whose own markers are set. Independence is judged against all of them, so declaring
/// another agent never hides the one whose markers are there.
pub fn host_agents(env: &BTreeMap<String, String>) -> Vec<&'static str> {
    let declared = declared_host(env);
    let marked = HOST_MARKERS
        .iter()
        .filter(|(_, markers)| markers.iter().any(|m| env.get(*m).is_some_and(|v| !v.is_empty())))
        .map(|(host, _)| *host);
    let mut agents: Vec<&'static str> = declared.into_iter().chain(marked).collect();
    agents.dedup();
    agents
}

/// The host agent from its own markers only (never the self-declared `SCAFLD_HOST_AGENT`).
pub fn genuine_host(env: &BTreeMap<String, String>) -> Option<&'static str> {
    HOST_MARKERS
        .iter()
        .find(|(_, markers)| markers.iter().any(|m| env.get(*m).is_some_and(|v| !v.is_empty())))
        .map(|(host, _)| *host)
}

/// How to install a reviewer CLI (the npm packages the project tests against).
pub fn install_hint(name: &str) -> Option<&'static str> {
    match name {
        "codex" => Some("npm install -g @openai/codex"),
        "claude" => Some("npm install -g @anthropic-ai/claude-code"),
        "gemini" => Some("npm install -g @google/gemini-cli"),
        _ => None,
    }
}

/// How a missing reviewer CLI's error ends when a review would run it: the review fails.
pub const FAILS_CLOSED: &str = "; the review fails closed";

/// "codex (`npm install -g @openai/codex`) or claude (...)": what to install for `names`,
/// each with its install command where one is known.
pub fn installs<S: AsRef<str>>(names: &[S]) -> String {
    let named: Vec<String> = names
        .iter()
        .map(|name| match install_hint(name.as_ref()) {
            Some(hint) => format!("{} (`{hint}`)", name.as_ref()),
            None => name.as_ref().to_string(),
        })
        .collect();
    match named.as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

/// An executable named `name` on the caller's PATH (not the daemon's).
pub fn find_on_path(name: &str, env: &BTreeMap<String, String>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    if name.contains('/') {
        let path = PathBuf::from(name);
        return path.is_file().then_some(path);
    }
    env.get("PATH")?
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(name))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

pub fn select(choice: &Choice<'_>, config: &Config, env: &BTreeMap<String, String>) -> RpcResult<Provider> {
    let external = &config.review.external;
    let name = choice.provider.unwrap_or(&external.provider);
    let command = choice
        .command
        .filter(|c| !c.trim().is_empty())
        .map(str::to_string)
        .or_else(|| Some(external.command.clone()).filter(|c| !c.trim().is_empty()));
    let cli = |provider: &str| -> Option<Provider> {
        let settings: &ProviderCli = match provider {
            "codex" => &external.codex,
            "claude" => &external.claude,
            _ => &external.gemini,
        };
        let binary = if settings.binary.is_empty() { provider } else { settings.binary.as_str() };
        let binary = find_on_path(binary, env)?;
        let model = choice.model.map(str::to_string).unwrap_or_else(|| settings.model.clone());
        let reasoning = choice.reasoning.map(str::to_string).unwrap_or_else(|| settings.reasoning.clone());
        let cli = Cli { binary, model, reasoning };
        Some(match provider {
            "codex" => Provider::Codex(cli),
            "claude" => Provider::Claude(cli),
            _ => Provider::Gemini(cli),
        })
    };
    match name {
        // A line break would make the one command line two, and the retry command printed from
        // it a second line of scafld's output (a `next:` scafld never decided).
        "command" if command.as_deref().is_some_and(|c| c.chars().any(|ch| ch.is_control() && ch != '\t')) => {
            Err(RpcError::new(
                ErrorKind::InvalidInput,
                "the provider command holds a line break or another control character; it must be one command line",
            )
            .with_hint("put a multi-line command in a script and name the script in --provider-command (or review.external.command)"))
        }
        "command" => command.map(Provider::Command).ok_or_else(|| {
            RpcError::new(ErrorKind::InvalidInput, "--provider command requires --provider-command CMD")
        }),
        "local" => Ok(Provider::Local),
        "codex" | "claude" | "gemini" => cli(name).ok_or_else(|| {
            RpcError::new(
                ErrorKind::ReviewFailed,
                format!("the {name} CLI is not on your PATH{FAILS_CLOSED}"),
            )
            .with_hint(format!(
                "install it (`{}`), or choose another provider with --provider",
                install_hint(name).unwrap_or("see its documentation")
            ))
        }),
        "auto" => {
            if let Some(command) = command {
                return Ok(Provider::Command(command));
            }
            let host = host_agent(env);
            let order: &[&str] = match host {
                Some("codex") => &["claude", "gemini", "codex"],
                Some("claude") => &["codex", "gemini", "claude"],
                Some("gemini") => &["codex", "claude", "gemini"],
                _ => &["codex", "claude", "gemini"],
            };
            // The caller's host and the task's builders go last (or, with the fallback
            // disabled, not at all): never the agent that wrote the work while another can.
            let wrote = |p: &str| Some(p) == host || choice.builders.iter().any(|b| b == p);
            let (others, writers): (Vec<&str>, Vec<&str>) = order.iter().copied().partition(|p| !wrote(p));
            let writers = if external.fallback_policy == "disable" { Vec::new() } else { writers };
            others
                .into_iter()
                .chain(writers)
                .find_map(cli)
                .ok_or_else(|| {
                    RpcError::new(
                        ErrorKind::ReviewFailed,
                        format!("no external review provider found on your PATH (codex, claude or gemini){FAILS_CLOSED}"),
                    )
                    .with_hint(format!(
                        "install {}, or use --provider command --provider-command CMD (--provider local is for development only)",
                        installs(&["codex", "claude", "gemini"])
                    ))
                })
        }
        other => Err(RpcError::new(
            ErrorKind::InvalidInput,
            format!("unknown review provider {other:?} (auto, codex, claude, gemini, command or local)"),
        )),
    }
}

/// A stream-json line of any provider: its `type.subtype` (`system.init`, `assistant`,
/// `item.completed`, ...) and, for the event where a provider introduces itself, the model and
/// session it reports: claude's `system.init`, gemini's `init`, codex's `thread.started`.
fn stream_event(line: &[u8]) -> Option<(String, Option<Provenance>)> {
    let value: Value = serde_json::from_slice(line).ok()?;
    let kind = value.get("type")?.as_str()?;
    let label = match value.get("subtype").and_then(Value::as_str) {
        Some(sub) => format!("{kind}.{sub}"),
        None => kind.to_string(),
    };
    let text = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_string);
    let init = match label.as_str() {
        "system.init" | "init" => Some(Provenance { model: text("model"), session_id: text("session_id") }),
        "thread.started" => Some(Provenance { model: None, session_id: text("thread_id") }),
        _ => None,
    };
    Some((label, init))
}

/// Model and session a provider reported about itself (claude's `system.init` event).
#[derive(Debug, Clone, Default)]
pub struct Provenance {
    pub model: Option<String>,
    pub session_id: Option<String>,
}

/// Dossiers submitted through the MCP tool, by the token given to the provider's server.
#[derive(Default)]
pub struct Submissions {
    slots: Mutex<HashMap<String, Slot>>,
}

struct Slot {
    expect: Expected,
    held: Closed,
    /// The accepted submission as given (nulls dropped) and its verdict: the same answer given
    /// again counts once, any other makes the answer read two ways.
    first: Option<(Value, String)>,
}

/// What a submission slot held when its run ended: the one answer accepted, two different
/// answers (no verdict), or nothing, with why the latest submission was refused (the run's
/// failure says so, not "no submission").
#[derive(Debug)]
pub enum Closed {
    /// Nothing accepted; `refused` is empty when the provider submitted nothing.
    Nothing {
        refused: Vec<String>,
    },
    Accepted(Submitted),
    /// A second submission that differs from the accepted one: the answer reads two ways, so
    /// neither is the verdict (as with two different dossiers in a command reviewer's output).
    TwoWays,
}

impl Default for Closed {
    fn default() -> Self {
        Closed::Nothing { refused: Vec::new() }
    }
}

impl Closed {
    /// Why nothing counts through `tool` though the provider called it: the latest refusal's
    /// reasons, or its two different answers.
    fn refusal(&self, tool: &str) -> Option<String> {
        match self {
            Closed::Nothing { refused } if !refused.is_empty() => Some(format!(
                "the provider's {tool} submission was refused ({}) and nothing it submitted was accepted",
                refused.join("; ")
            )),
            Closed::TwoWays => Some(two_ways(tool)),
            _ => None,
        }
    }
}

/// Why a provider that submitted two different answers through `tool` gave no verdict.
fn two_ways(tool: &str) -> String {
    format!(
        "the provider called {tool} with two different answers, so its answer reads two ways and neither \
         is its verdict (a reviewer submits exactly one answer; the same one again counts once)"
    )
}

/// What a submission slot accepts.
#[derive(Clone)]
enum Expected {
    Dossier(Request),
    TemplateAnswer,
    HardenDossier(HardenCheck),
}

impl Expected {
    /// The MCP tool that takes the answer, and who answers through it.
    fn tool(&self) -> (&'static str, &'static str) {
        match self {
            Expected::HardenDossier(_) => ("submit_harden", "harden provider"),
            Expected::Dossier(_) | Expected::TemplateAnswer => ("submit_review", "reviewer"),
        }
    }
}

/// An accepted submission.
#[derive(Debug, Clone)]
pub enum Submitted {
    Dossier(Box<Dossier>),
    /// A template answer (verdict, summary, findings), as submitted.
    TemplateAnswer(Value),
    /// A delegated harden round's HardenDossier (checked against its schema).
    HardenDossier(Value),
}

impl Submissions {
    fn open(&self, expect: Expected) -> String {
        let token =
            crate::workspace::layout::new_id().unwrap_or_else(|_| format!("{:?}", std::time::SystemTime::now()));
        crate::sync::lock(&self.slots).insert(token.clone(), Slot { expect, held: Closed::default(), first: None });
        token
    }

    pub fn close(&self, token: &str) -> Closed {
        match crate::sync::lock(&self.slots).remove(token) {
            Some(slot) => slot.held,
            None => Closed::default(),
        }
    }

    /// Validate a submission. Until one is accepted, each refusal is kept (the latest one) for
    /// the run's failure to name. Once one is, the same answer again counts once and a
    /// different one (valid or not) leaves the slot with no verdict: [`Closed::TwoWays`]. An
    /// answer over the limit on a provider's output is refused unread, as on every channel.
    /// The check (a harden answer's anchors read from the workspace's files) runs with no
    /// lock held; call this off the runtime's threads.
    pub fn submit(&self, token: &str, answer: Value) -> Result<String, Vec<String>> {
        let waiting = || vec!["no review is waiting for this submission".to_string()];
        let (expect, answer) = {
            let mut slots = crate::sync::lock(&self.slots);
            let slot = slots.get_mut(token).ok_or_else(waiting)?;
            // The dossier's MCP tool is given the schema as written, where no field is
            // nullable: a null there is refused, as on every other channel. Harden and
            // template answers keep dropping theirs.
            let answer = if matches!(slot.expect, Expected::Dossier(_)) { answer } else { strip_nulls(answer) };
            if let Some(settled) = Self::settled(slot, &answer) {
                return settled;
            }
            (slot.expect.clone(), answer)
        };
        let (tool, who) = expect.tool();
        let length = scafld_protocol::json::encoded_len(&answer) as u64;
        let checked = if length > CAPTURE_CAP {
            Err(vec![over_cap(who, &format!("{tool} answer"), Some(length))])
        } else {
            Self::check(&expect, answer.clone())
        };
        let mut slots = crate::sync::lock(&self.slots);
        let slot = slots.get_mut(token).ok_or_else(waiting)?;
        // Another answer may have been accepted while this one was checked.
        if let Some(settled) = Self::settled(slot, &answer) {
            return settled;
        }
        match checked {
            Ok((verdict, accepted)) => {
                slot.held = Closed::Accepted(accepted);
                slot.first = Some((answer, verdict.clone()));
                Ok(verdict)
            }
            Err(problems) => {
                slot.held = Closed::Nothing { refused: problems.clone() };
                Err(problems)
            }
        }
    }

    /// The answer to `answer` of a slot that accepted one already: the same answer counts
    /// once; a different one leaves it with no verdict. `None` while none is accepted.
    fn settled(slot: &mut Slot, answer: &Value) -> Option<Result<String, Vec<String>>> {
        let (tool, _) = slot.expect.tool();
        match (&slot.held, &slot.first) {
            (Closed::TwoWays, _) => Some(Err(vec![format!("{}; nothing more is read", two_ways(tool))])),
            (Closed::Accepted(_), Some((first, verdict))) if first == answer => Some(Ok(verdict.clone())),
            (Closed::Accepted(_), _) => {
                slot.held = Closed::TwoWays;
                slot.first = None;
                Some(Err(vec![two_ways(tool)]))
            }
            (Closed::Nothing { .. }, _) => None,
        }
    }

    /// A submission checked against what its slot expects (a harden or template answer's nulls already dropped): its verdict
    /// and what is kept.
    fn check(expect: &Expected, answer: Value) -> Result<(String, Submitted), Vec<String>> {
        Ok(match expect {
            Expected::Dossier(request) => {
                let parsed = dossier::from_value(answer).map_err(|e| vec![e])?;
                let parsed = dossier::normalize(parsed, request);
                let problems = dossier::validate(&parsed, request);
                if !problems.is_empty() {
                    return Err(problems);
                }
                (parsed.verdict.clone(), Submitted::Dossier(Box::new(parsed)))
            }
            Expected::TemplateAnswer => {
                let parsed = template::answer_from_json(&answer).ok_or_else(|| {
                    vec!["an answer is {verdict: PASS|CONCERNS|FAIL, summary, findings: [{severity: PASS|CONCERN|FAIL, title, description, file}]}, with no other key".to_string()]
                })?;
                (parsed.verdict.to_string(), Submitted::TemplateAnswer(answer))
            }
            Expected::HardenDossier(check) => {
                let dossier = crate::domain::harden::parse_dossier(answer.clone()).map_err(|e| vec![e])?;
                let judgement = crate::domain::harden::judge(&dossier, check.ground.as_ref(), check.max_issues);
                if judgement.status == HardenStatus::Error {
                    return Err(judgement.problems);
                }
                // What the round comes to as the answer stands: passed or needs_revision.
                (judgement.status.to_string(), Submitted::HardenDossier(answer))
            }
        })
    }
}

/// Drop null members (the strict schema given to codex makes optional fields nullable).
pub fn strip_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            Value::Object(map.into_iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k, strip_nulls(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(strip_nulls).collect()),
        other => other,
    }
}

/// The dossier schema in the strict form codex's output schema needs.
pub fn strict_schema() -> Value {
    strict(scafld_protocol::schemas::provider_dossier())
}

/// Keywords OpenAI's strict structured outputs accept; others are dropped (they only ever
/// narrowed what scafld validates again itself).
const STRICT_KEYWORDS: [&str; 20] = [
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "anyOf",
    "description",
    "title",
    "const",
    "$defs",
    "$ref",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minItems",
    "maxItems",
];

/// `schema` in the form OpenAI's strict structured outputs require (codex's `--output-schema`
/// is sent that way): no `$schema`/`$id`, every object closed (`additionalProperties: false`)
/// with every property required (optional ones as a union with null), a `type` on every
/// schema (enums are strings), and only supported keywords.
fn strict(schema: Value) -> Value {
    fn convert(value: Value) -> Value {
        let Value::Object(mut object) = value else { return value };
        object.retain(|key, _| STRICT_KEYWORDS.contains(&key.as_str()));
        if object.contains_key("enum") && !object.contains_key("type") {
            let strings = object["enum"].as_array().is_some_and(|v| v.iter().all(Value::is_string));
            object.insert("type".into(), json!(if strings { "string" } else { "number" }));
        }
        if let Some(Value::Object(props)) = object.remove("properties") {
            let required: Vec<String> = object
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
                .unwrap_or_default();
            let mut converted = serde_json::Map::new();
            for (key, prop) in props {
                let prop = convert(prop);
                let prop = if required.contains(&key) { prop } else { json!({"anyOf": [prop, {"type": "null"}]}) };
                converted.insert(key, prop);
            }
            object.insert("required".into(), Value::Array(converted.keys().cloned().map(Value::String).collect()));
            object.insert("properties".into(), Value::Object(converted));
            object.insert("additionalProperties".into(), Value::Bool(false));
        } else if object.get("type").and_then(Value::as_str) == Some("object") {
            object.insert("properties".into(), json!({}));
            object.insert("required".into(), json!([]));
            object.insert("additionalProperties".into(), Value::Bool(false));
        }
        for key in ["items", "$defs", "anyOf"] {
            if let Some(child) = object.remove(key) {
                let child = match child {
                    Value::Array(items) => Value::Array(items.into_iter().map(convert).collect()),
                    Value::Object(map) if key == "$defs" => {
                        Value::Object(map.into_iter().map(|(k, v)| (k, convert(v))).collect())
                    }
                    other => convert(other),
                };
                object.insert(key.into(), child);
            }
        }
        Value::Object(object)
    }
    convert(schema)
}

fn quote(arg: &str) -> String {
    format!("'{}'", arg.replace('\'', "'\\''"))
}

fn command_line(binary: &Path, args: &[String]) -> String {
    std::iter::once(quote(&binary.display().to_string()))
        .chain(args.iter().map(|a| quote(a)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// How to run one provider: the command line, extra environment, and where the answer is.
pub struct Invocation {
    pub command: String,
    pub env: BTreeMap<String, String>,
    pub answer: Answer,
    pub output_format: &'static str,
    /// Idleness is judged on stdout events alone (codex's `--json` stream, gemini's
    /// stream-json), never on stderr's retry chatter.
    pub idle_on_stdout: bool,
    /// Stdout is the whole answer (a command's dossier or template answer, not a harden
    /// round's last line): the run stops once it outgrows what is read of it.
    pub stop_past_capture: bool,
}

pub enum Answer {
    Stdout,
    /// Codex's last-message file (stdout as a fallback).
    File(PathBuf),
    /// The MCP submission slot with this token.
    Submission(String),
}

/// What a provider run must answer with.
#[derive(Clone, Copy)]
pub enum Expect<'a> {
    /// A ReviewDossier for the review gate.
    Dossier(&'a Request),
    /// A template answer; the template's tools and settings shape the command line.
    Template(&'a Template),
    /// A HardenDossier for a delegated harden round (the `submit_harden` tool), judged with
    /// this check as it is submitted.
    Harden(&'a HardenCheck),
}

/// How a delegated harden's `submit_harden` answer is judged as it arrives, as the round will
/// judge it: its anchors grounded in the workspace, its issues counted. An answer the round
/// could only record as `error` is refused to the provider (a tool error), which may fix it.
#[derive(Clone)]
pub struct HardenCheck {
    pub ground: std::sync::Arc<dyn crate::domain::harden::Ground + Send + Sync>,
    pub max_issues: usize,
}

impl<'a> Expect<'a> {
    /// The template whose tools and settings shape the command line, if this is a template run.
    fn template(self) -> Option<&'a Template> {
        match self {
            Expect::Template(t) => Some(t),
            Expect::Dossier(_) | Expect::Harden(_) => None,
        }
    }

    /// The MCP tool that takes the answer.
    fn submit_tool(self) -> &'static str {
        match self {
            Expect::Harden(_) => "submit_harden",
            Expect::Dossier(_) | Expect::Template(_) => "submit_review",
        }
    }
}

/// Where a provider run happens and for whom.
pub struct Place<'a> {
    /// A directory of the run's own for its scratch files, outside the workspace (they may
    /// carry the user's auth): made 0700.
    pub scratch: &'a Path,
    pub root: &'a Path,
    pub client_exe: &'a str,
    pub socket: &'a Path,
    /// The environment the provider will run with (the caller's, or a worker's): user-level
    /// auth settings are carried over from it.
    pub env: &'a BTreeMap<String, String>,
}

/// Prepare the external CLI run in `place.scratch`.
pub fn invocation(
    provider: &Provider,
    place: &Place<'_>,
    submissions: &Submissions,
    expect: Expect<'_>,
) -> std::io::Result<Invocation> {
    let Place { scratch, root, client_exe, socket, env: caller_env } = *place;
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(scratch)?;
    }
    let env = BTreeMap::new();
    let mcp_server = || -> std::io::Result<(String, Value)> {
        let (expected, answer) = match expect {
            Expect::Dossier(request) => (Expected::Dossier(request.clone()), "dossier"),
            Expect::Template(_) => (Expected::TemplateAnswer, "template"),
            Expect::Harden(check) => (Expected::HardenDossier(check.clone()), "harden"),
        };
        let token = submissions.open(expected);
        let server = json!({
            "command": client_exe,
            "args": ["mcp", "submit-review", "--token", token, "--answer", answer],
            "env": {"SCAFLD_SOCKET": socket.display().to_string()},
        });
        Ok((token, server))
    };
    Ok(match provider {
        Provider::Command(command) => Invocation {
            command: command.clone(),
            env,
            answer: Answer::Stdout,
            output_format: "command.stdout",
            idle_on_stdout: false,
            // A harden round's answer is its last JSON line, which a long log before it keeps.
            stop_past_capture: !matches!(expect, Expect::Harden(_)),
        },
        Provider::Local => return Err(std::io::Error::other("the local provider runs no process")),
        Provider::Codex(cli) => codex_invocation(cli, root, scratch, expect, env)?,
        Provider::Claude(cli) => {
            let (token, server) = mcp_server()?;
            claude_invocation(cli, root, scratch, expect, caller_env, env, token, server)?
        }
        Provider::Gemini(cli) => {
            let (token, server) = mcp_server()?;
            gemini_invocation(cli, root, scratch, expect, caller_env, env, token, server)?
        }
    })
}

/// Codex: `exec` in its read-only sandbox, answering in its last-message file under a strict
/// output schema; events on stdout (`--json`), no web search, skills or AGENTS.md.
fn codex_invocation(
    cli: &Cli,
    root: &Path,
    scratch: &Path,
    expect: Expect<'_>,
    env: BTreeMap<String, String>,
) -> std::io::Result<Invocation> {
    let template = expect.template();
    let out = scratch.join("last-message.json");
    let schema_path = scratch.join("output-schema.json");
    let schema = match expect {
        Expect::Template(_) => strict(scafld_protocol::schemas::template_answer()),
        Expect::Harden(_) => strict(scafld_protocol::schemas::harden_dossier()),
        Expect::Dossier(_) => strict_schema(),
    };
    std::fs::write(&schema_path, serde_json::to_vec_pretty(&schema)?)?;
    let mut args: Vec<String> =
        ["exec", "--sandbox", "read-only", "--skip-git-repo-check", "--cd"].iter().map(|s| s.to_string()).collect();
    args.push(root.display().to_string());
    // --json: events on stdout (idleness is judged on them, and they name the model
    // and session); the hosted web search and skills are off; AGENTS.md stays out of the prompt
    // unless a template asks for project settings.
    args.extend(["--ephemeral", "--ignore-user-config", "--json"].map(String::from));
    args.extend(["-c".to_string(), "web_search=\"disabled\"".to_string()]);
    // The user's and the project's skills would be listed to the reviewer.
    args.extend(["-c".to_string(), "skills.include_instructions=false".to_string()]);
    if template.is_none_or(template::codex_ignores_rules) {
        args.push("--ignore-rules".into());
        args.extend(["-c".to_string(), "project_doc_max_bytes=0".to_string()]);
    }
    args.extend(["--color", "never", "--output-last-message"].map(String::from));
    args.push(out.display().to_string());
    args.push("--output-schema".into());
    args.push(schema_path.display().to_string());
    if !cli.model.is_empty() {
        args.extend(["-m".to_string(), cli.model.clone()]);
    }
    if !cli.reasoning.is_empty() {
        args.extend(["-c".to_string(), format!("model_reasoning_effort=\"{}\"", cli.reasoning)]);
    }
    Ok(Invocation {
        command: command_line(&cli.binary, &args),
        env,
        answer: Answer::File(out),
        output_format: "codex.output_file",
        idle_on_stdout: true,
        stop_past_capture: false,
    })
}

/// Claude: print mode with only the read tools, confined to the workspace and kept from its
/// secret files, and the `submit_review` MCP tool; none of the user's settings but their auth.
#[allow(clippy::too_many_arguments)]
fn claude_invocation(
    cli: &Cli,
    root: &Path,
    scratch: &Path,
    expect: Expect<'_>,
    caller_env: &BTreeMap<String, String>,
    env: BTreeMap<String, String>,
    token: String,
    server: Value,
) -> std::io::Result<Invocation> {
    let config_path = scratch.join("mcp.json");
    std::fs::write(&config_path, serde_json::to_vec_pretty(&json!({"mcpServers": {"scafld": server}}))?)?;
    let session = crate::workspace::layout::new_id()?;
    let session = format!(
        "{}-{}-4{}-a{}-{}",
        &session[..8],
        &session[8..12],
        &session[13..16],
        &session[17..20],
        &session[20..32]
    );
    let template = expect.template();
    let (tools, allowed, disallowed) = match template {
        Some(t) => template::claude_tools(t),
        None => (
            "Read,Grep,Glob".into(),
            format!("mcp__scafld__{}", expect.submit_tool()),
            "Agent,Task,Bash,Edit,Write,NotebookEdit".into(),
        ),
    };
    let mut args: Vec<String> = [
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--include-partial-messages",
        "--no-session-persistence",
        "--disable-slash-commands",
        "--no-chrome",
    ]
    .map(String::from)
    .to_vec();
    args.extend(["--tools".into(), tools, "--allowedTools".into(), allowed, "--disallowedTools".into(), disallowed]);
    // Never more than the allow list and the permissions below: anything else is denied, not
    // prompted (a bare `Read` in the allow list would read anywhere, the caller's environment
    // kept in the daemon's state included).
    args.extend(["--permission-mode".to_string(), "dontAsk".to_string()]);
    // The user's own settings (hooks, CLAUDE.md, permissions) never reach a reviewer:
    // only the project's, when a template asks for them; auth settings are carried
    // over on their own.
    let sources = if template.is_some_and(|t| t.loads_project_settings()) { "project" } else { "" };
    args.extend(["--setting-sources".to_string(), sources.to_string()]);
    let mut settings = claude_auth_settings(caller_env).unwrap_or_else(|| json!({}));
    settings["permissions"] = template::claude_permissions(root);
    let path = scratch.join("claude-settings.json");
    write_private(&path, &serde_json::to_vec_pretty(&settings)?)?;
    args.extend(["--settings".to_string(), path.display().to_string()]);
    args.push("--mcp-config".into());
    args.push(config_path.display().to_string());
    args.extend(["--strict-mcp-config".to_string(), "--session-id".to_string(), session]);
    if !cli.model.is_empty() {
        args.extend(["--model".to_string(), cli.model.clone()]);
    }
    Ok(Invocation {
        command: command_line(&cli.binary, &args),
        env,
        answer: Answer::Submission(token),
        output_format: "claude.mcp_submit_review",
        idle_on_stdout: false,
        stop_past_capture: false,
    })
}

/// Gemini: plan mode under a policy that allows reading and submitting only, in a scratch
/// `GEMINI_CLI_HOME` that declares the MCP server, keeps the secret files out of its tools and
/// carries the user's auth.
#[allow(clippy::too_many_arguments)]
fn gemini_invocation(
    cli: &Cli,
    root: &Path,
    scratch: &Path,
    expect: Expect<'_>,
    caller_env: &BTreeMap<String, String>,
    mut env: BTreeMap<String, String>,
    token: String,
    server: Value,
) -> std::io::Result<Invocation> {
    // A scratch Gemini home holds our MCP server: a system settings file would be
    // skipped unless root owns it and every parent directory.
    let home = gemini_home(root, scratch, &server, caller_env)?;
    env.insert("GEMINI_CLI_HOME".into(), home.display().to_string());
    let policy = scratch.join("policy.toml");
    let template = expect.template();
    std::fs::write(&policy, template::gemini_policy(template, expect.submit_tool()))?;
    let mut args: Vec<String> = [
        "--skip-trust",
        "--approval-mode",
        "plan",
        "--output-format",
        "stream-json",
        "--allowed-mcp-server-names",
        "scafld",
        "--policy",
    ]
    .map(String::from)
    .to_vec();
    args.push(policy.display().to_string());
    args.extend(["--prompt".to_string(), String::new()]);
    if !cli.model.is_empty() {
        args.extend(["--model".to_string(), cli.model.clone()]);
    }
    Ok(Invocation {
        command: command_line(&cli.binary, &args),
        env,
        answer: Answer::Submission(token),
        output_format: "gemini.mcp_submit_review",
        // Its stream-json events on stdout show progress; its `Attempt N failed... Retrying`
        // lines on stderr, printed while the model API refuses every call, do not.
        idle_on_stdout: true,
        stop_past_capture: false,
    })
}

/// A file only its owner can read (settings that may carry auth).
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    file.write_all(bytes)
}

/// The user's settings file of a CLI, as JSON (`None` when absent or unreadable).
fn user_settings(path: &Path) -> Option<Value> {
    serde_json::from_slice(&capped::read(path, "settings file", MAX_USER_FILE_BYTES).ok()?).ok()
}

/// The largest file of a CLI's own the daemon reads (settings, credentials: kilobytes).
const MAX_USER_FILE_BYTES: u64 = 8 << 20;

/// The most of a provider's output read as its answer: its stdout's capture, its answer file
/// (the one reviewer answer cap, [`scafld_protocol::MAX_ANSWER_BYTES`]).
const CAPTURE_CAP: u64 = scafld_protocol::MAX_ANSWER_BYTES as u64;

/// A provider's answer file, read like its stdout: at most as much as is captured of that.
fn answer_file(path: &Path) -> Option<String> {
    capped::read_text(path, "answer file", CAPTURE_CAP).ok()
}

/// Why a dossier a worker submitted, `len` bytes as JSON, is refused unread.
pub fn answer_over_cap(len: u64) -> String {
    format!(
        "the dossier is {}, over the {} limit on a reviewer's answer, so it was not read; an answer must fit within it",
        capped::size(len),
        capped::size(CAPTURE_CAP)
    )
}

/// Why `who`'s `what` (`output`, `answer file`) of `len` bytes (`None`: it grew past the cap
/// while read) gives no answer: it exceeded what scafld reads of a provider's answer.
fn over_cap(who: &str, what: &str, len: Option<u64>) -> String {
    let size = len.map(|n| format!(" is {}, over", capped::size(n))).unwrap_or_else(|| " grew past".into());
    format!(
        "the {who}'s {what}{size} the {} limit on a provider's output, so it was not read as an answer; an answer must fit within it",
        capped::size(CAPTURE_CAP)
    )
}

/// Environment variables of a Claude settings file that choose or authenticate a provider.
const CLAUDE_AUTH_ENV: [&str; 6] = ["ANTHROPIC_", "AWS_", "CLAUDE_CODE_USE_", "CLOUD_ML_", "GOOGLE_", "VERTEX_"];

/// The auth part of the user's `~/.claude/settings.json` (an `apiKeyHelper`, AWS credential
/// helpers, provider-selecting `env` entries), which `--setting-sources ""` would drop.
fn claude_auth_settings(env: &BTreeMap<String, String>) -> Option<Value> {
    let dir = env
        .get("CLAUDE_CONFIG_DIR")
        .map(PathBuf::from)
        .or_else(|| env.get("HOME").map(|h| Path::new(h).join(".claude")))?;
    let user = user_settings(&dir.join("settings.json"))?;
    let mut auth = serde_json::Map::new();
    for key in ["apiKeyHelper", "awsAuthRefresh", "awsCredentialExport", "forceLoginMethod"] {
        if let Some(value) = user.get(key) {
            auth.insert(key.into(), value.clone());
        }
    }
    if let Some(Value::Object(vars)) = user.get("env") {
        let kept: serde_json::Map<String, Value> = vars
            .iter()
            .filter(|(k, _)| CLAUDE_AUTH_ENV.iter().any(|p| k.starts_with(p)))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !kept.is_empty() {
            auth.insert("env".into(), Value::Object(kept));
        }
    }
    (!auth.is_empty()).then_some(Value::Object(auth))
}

/// Credential files of a Google login that a scratch Gemini home needs.
const GEMINI_CREDENTIALS: [&str; 3] = ["oauth_creds.json", "google_accounts.json", "google_account_id"];

/// A scratch `GEMINI_CLI_HOME` whose `.gemini/settings.json` declares our MCP server, ignores
/// the files kept from reviewers for their secrets (an ignore file of the run's, which
/// `read_file`, also through a link, and `grep_search` honour) and carries over the user's auth
/// choice (`security.auth`), with the credential files of a Google login copied beside it (0600).
fn gemini_home(
    root: &Path,
    scratch: &Path,
    server: &Value,
    env: &BTreeMap<String, String>,
) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let home = scratch.join("gemini-home");
    let dir = home.join(".gemini");
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
    let user_dir = env
        .get("GEMINI_CLI_HOME")
        .map(PathBuf::from)
        .or_else(|| env.get("HOME").map(PathBuf::from))
        .map(|h| h.join(".gemini"));
    let user = user_dir.as_deref().and_then(|d| user_settings(&d.join("settings.json")));
    // Skills off: gemini's built-in ones and the project's would be listed to the reviewer.
    let ignore = scratch.join("secrets.ignore");
    std::fs::write(&ignore, crate::domain::review::SECRET_PATTERNS.join("\n") + "\n")?;
    let mut settings = json!({"mcpServers": {"scafld": server}, "mcp": {"allowed": ["scafld"]}, "skills": {"enabled": false},
        "context": {"fileFiltering": {"customIgnoreFilePaths": [from_root(root, &ignore)]}}});
    if let Some(auth) = user.as_ref().and_then(|u| u.pointer("/security/auth")) {
        settings["security"] = json!({"auth": auth});
    }
    write_private(&dir.join("settings.json"), &serde_json::to_vec_pretty(&settings)?)?;
    if let Some(user_dir) = &user_dir {
        for name in GEMINI_CREDENTIALS {
            if let Ok(bytes) = capped::read(&user_dir.join(name), "credentials file", MAX_USER_FILE_BYTES) {
                write_private(&dir.join(name), &bytes)?;
            }
        }
    }
    Ok(home)
}

/// `path` as gemini finds an ignore file: joined onto the folder it runs in (an absolute path
/// would be read below it), so up to `/` first. That folder is the workspace root or one below
/// it (a template's); climbing past `/` stays at `/`, so a margin does no harm.
fn from_root(root: &Path, path: &Path) -> String {
    let up = root.components().filter(|c| matches!(c, std::path::Component::Normal(_))).count() + 64;
    let rest = path.display().to_string();
    format!("{}{}", "../".repeat(up), rest.trim_start_matches('/'))
}

/// Where and for whom a provider runs.
pub struct Run<'a> {
    pub task: &'a str,
    pub cwd: &'a Path,
    /// The caller's environment: the base of the provider's (auth, HOME, PATH).
    pub caller_env: &'a BTreeMap<String, String>,
    pub packet: &'a str,
    pub diagnostics_dir: PathBuf,
    /// Called with the provider's process group id once it runs (recorded in the job).
    pub on_spawn: Box<dyn FnOnce(crate::runner::ProcessGroup) + Send + 'a>,
    /// The run token its processes carry when one is on record already (a call's,
    /// `runner::CallRun`); else a fresh one, found through the group `on_spawn` records.
    pub token: Option<String>,
    /// Called with each structured event the provider streams (`type.subtype`).
    pub on_event: Box<dyn FnMut(String) + Send>,
}

/// Run an external provider and return what it left (read it with `interpret` or
/// `interpret_template`).
pub async fn run(
    invocation: &Invocation,
    run: Run<'_>,
    config: &Config,
    submissions: &Submissions,
    cancel: tokio_util::sync::CancellationToken,
) -> Result<Leftovers, ReviewerFailure> {
    let Run { task, cwd, caller_env, packet, diagnostics_dir, on_spawn, token, mut on_event } = run;
    let reported = std::sync::Arc::new(Mutex::new(Provenance::default()));
    let mut env = caller_env.clone();
    env.insert("SCAFLD_TASK_ID".into(), task.to_string());
    let overrides: Vec<String> = invocation.env.keys().cloned().chain(["SCAFLD_TASK_ID".to_string()]).collect();
    env.extend(invocation.env.clone());
    let external = &config.review.external;
    let request = RunRequest {
        command: invocation.command.clone(),
        cwd: cwd.to_path_buf(),
        env,
        env_bytes: Vec::new(),
        absolute_timeout: Duration::from_secs(external.absolute_max_seconds.max(1)),
        idle_timeout: (external.idle_timeout_seconds > 0).then(|| Duration::from_secs(external.idle_timeout_seconds)),
        stdin: Some(packet.as_bytes().to_vec()),
        die_with_parent: false,
        token,
        gate: None,
        umask: None,
        idle_on_stdout: invocation.idle_on_stdout,
        stop_past_capture: invocation.stop_past_capture,
        on_stdout: Some(Box::new({
            let mut pending = Vec::new();
            let reported = reported.clone();
            move |chunk: &[u8]| {
                pending.extend_from_slice(chunk);
                while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=end).collect();
                    if let Some((event, init)) = stream_event(&line) {
                        if let Some(init) = init {
                            *crate::sync::lock(&reported) = init;
                        }
                        on_event(event);
                    }
                }
                if pending.len() > 1 << 20 {
                    pending.clear(); // not a line-oriented stream
                }
            }
        })),
    };
    let diagnostics = runner::Diagnostics { dir: diagnostics_dir, env_overrides: overrides };
    let (outcome, diagnostic) = runner::run(request, diagnostics, cancel, on_spawn).await;
    let submitted = match &invocation.answer {
        Answer::Submission(token) => submissions.close(token),
        _ => Closed::default(),
    };
    let cancelled = matches!(outcome.kill_reason, Some(runner::KillReason::Cancelled));
    let left = Leftovers {
        exit_code: outcome.exit_code,
        timed_out: matches!(
            outcome.kill_reason,
            Some(runner::KillReason::AbsoluteTimeout | runner::KillReason::IdleTimeout)
        ),
        runner_error: outcome.runner_error(),
        stdout: String::from_utf8_lossy(&outcome.stdout.bytes).into_owned(),
        stdout_dropped: outcome.stdout.dropped,
        submitted,
        tail: outcome.tail(1200),
        diagnostic: diagnostic.cited(),
        reported: crate::sync::lock(&reported).clone(),
    };
    if cancelled {
        return Err(ReviewerFailure { class: FailureClass::Cancelled, message: "the reviewer was cancelled".into() });
    }
    Ok(left)
}

/// A template reviewer's answer from what its run left, with the raw text kept: `None` when
/// nothing parses (the result is then UNKNOWN). Only a timeout or a run that never started is
/// a failure of the reviewer itself.
pub fn interpret_template(
    invocation: &Invocation,
    left: Leftovers,
) -> Result<(Option<template::Answer>, String), ReviewerFailure> {
    let Leftovers { exit_code, timed_out, runner_error, stdout, stdout_dropped, submitted, tail, diagnostic, .. } =
        left;
    if timed_out {
        return Err(ReviewerFailure {
            class: FailureClass::Timeout,
            message: format!("{} (diagnostic: {diagnostic})", runner_error.unwrap_or_else(|| "timed out".into())),
        });
    }
    if let Some(error) = runner_error {
        return Err(ReviewerFailure {
            class: FailureClass::Parse,
            message: format!("review provider failed: {error} (diagnostic: {diagnostic})"),
        });
    }
    let raw = match (&invocation.answer, submitted) {
        (Answer::Submission(_), Closed::Accepted(Submitted::TemplateAnswer(value))) => value.to_string(),
        // Why nothing counts (refused, or two different answers) above the output: UNKNOWN.
        (Answer::Submission(_), closed) => match closed.refusal("submit_review") {
            Some(why) => format!("[{why}]\n{stdout}"),
            None => stdout.clone(),
        },
        (Answer::File(path), _) => answer_file(path).filter(|t| !t.trim().is_empty()).unwrap_or_else(|| stdout.clone()),
        (Answer::Stdout, _) => stdout.clone(),
    };
    let answer = match &invocation.answer {
        // Prose from a submission-channel provider never counts.
        Answer::Submission(_) => {
            scafld_protocol::json::from_str(&raw).ok().and_then(|v| template::answer_from_json(&v))
        }
        _ => template::parse_answer(&raw),
    };
    // Read from stdout cut at its start: the raw text kept says why it gave no answer.
    let raw = if answer.is_none() && stdout_dropped > 0 && raw == stdout {
        format!("[{}]\n{raw}", over_cap("reviewer", "output", Some(stdout_dropped + stdout.len() as u64)))
    } else {
        raw
    };
    let raw = if exit_code == Some(0) || answer.is_some() {
        raw
    } else {
        format!("{raw}\n[provider exited {}: {}]", exit_code.unwrap_or(-1), tail.trim())
    };
    // As with dossiers, a failed run only counts when its answer is itself a failing verdict.
    Ok((answer.filter(|a| exit_code == Some(0) || a.verdict == "FAIL"), raw))
}

/// What a provider process left behind, wherever it ran (the daemon's runner or a worker).
pub struct Leftovers {
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    /// A runner-level failure (could not start, killed).
    pub runner_error: Option<String>,
    pub stdout: String,
    /// Bytes of stdout before `stdout`, dropped by the runner's capture cap (`CAPTURE_CAP`):
    /// more than zero, and `stdout` is not the whole output.
    pub stdout_dropped: u64,
    /// What the MCP submit tool delivered (or why it refused it), for submission-channel
    /// providers.
    pub submitted: Closed,
    pub tail: String,
    pub diagnostic: String,
    /// What the provider's stream said about itself.
    pub reported: Provenance,
}

/// A delegated harden round's answer from what its run left (the `submit_harden` submission,
/// codex's output file, or the last JSON object on stdout), or why there is none. Read as
/// strictly as a reviewer's dossier (`scafld_protocol::json`): an answer that gives a key twice
/// reads two ways and is refused, never read as its last copy.
pub fn interpret_harden(invocation: &Invocation, left: Leftovers) -> Result<Value, String> {
    let Leftovers { exit_code, timed_out, runner_error, stdout, stdout_dropped, submitted, diagnostic, .. } = left;
    if let Some(error) = runner_error {
        let what = if timed_out { "timed out" } else { "failed" };
        return Err(format!("the harden provider {what}: {error} (diagnostic: {diagnostic})"));
    }
    let answer = match &invocation.answer {
        Answer::Submission(_) => match &submitted {
            Closed::Accepted(Submitted::HardenDossier(value)) => Some(value.clone()),
            _ => None,
        },
        Answer::File(path) => match answer_file(path).map(|text| json_object(&text, "answer file")).transpose()? {
            Some(Some(value)) => Some(value),
            _ => last_json_object(&stdout)?,
        }
        .map(strip_nulls),
        Answer::Stdout => last_json_object(&stdout)?.map(strip_nulls),
    };
    match (answer, exit_code) {
        (Some(answer), _) => Ok(answer),
        (None, Some(0)) => Err(match &invocation.answer {
            Answer::Submission(_) => submitted
                .refusal("submit_harden")
                .unwrap_or_else(|| "the provider submitted nothing through submit_harden".to_string()),
            // Its start dropped: one JSON object longer than the cap cannot be read whole.
            _ if stdout_dropped > 0 => {
                over_cap("harden provider", "output", Some(stdout_dropped + stdout.len() as u64))
            }
            _ => "the provider printed no JSON object".to_string(),
        }),
        (None, code) => Err(format!(
            "the harden provider exited {} without an answer (diagnostic: {diagnostic})",
            code.map(|c| c.to_string()).unwrap_or_else(|| "abnormally".into())
        )),
    }
}

/// The whole text when it is one JSON object, else its last line that is one; refused when
/// that object gives a key twice (see [`json_object`]).
fn last_json_object(text: &str) -> Result<Option<Value>, String> {
    if let Some(value) = json_object(text, "output")? {
        return Ok(Some(value));
    }
    for line in text.lines().rev() {
        if let Some(value) = json_object(line, "output")? {
            return Ok(Some(value));
        }
    }
    Ok(None)
}

/// `text` as one JSON object read by the strict reader: `None` when it is no JSON object, and
/// refused, naming the key, when it is one that gives a key twice (`"decision":"reject"` then
/// `"decision":"keep"` reads two ways, and a reader keeping the last copy would take the milder).
fn json_object(text: &str, what: &str) -> Result<Option<Value>, String> {
    let text = text.trim();
    // Whether it is one JSON object at all is asked first: a log line giving a key twice
    // followed by the answer is no object, not an answer that reads two ways.
    if !text.starts_with('{') || serde_json::from_str::<serde::de::IgnoredAny>(text).is_err() {
        return Ok(None);
    }
    scafld_protocol::json::from_str(text)
        .map(Some)
        .map_err(|e| format!("the harden provider's {what} reads two ways: {e}; an answer gives each key once"))
}

/// The provider's dossier from what its run left, or why there is none. A non-zero exit only
/// counts when the answer itself is a failing verdict.
pub fn interpret(invocation: &Invocation, left: Leftovers) -> Result<Dossier, ReviewerFailure> {
    let Leftovers { exit_code, timed_out, runner_error, stdout, stdout_dropped, submitted, tail, diagnostic, reported } =
        left;
    let parse_failure = |message: String| ReviewerFailure { class: FailureClass::Parse, message };
    if timed_out {
        return Err(ReviewerFailure {
            class: FailureClass::Timeout,
            message: format!("{} (diagnostic: {diagnostic})", runner_error.unwrap_or_else(|| "timed out".into())),
        });
    }
    // Stopped for outgrowing what is read of it (the daemon's runner says so, a worker's run
    // does not): that is what went wrong, as the answer's read below says.
    let outgrown = stdout_dropped > 0 && invocation.stop_past_capture;
    if let Some(error) = runner_error.filter(|_| !outgrown) {
        return Err(parse_failure(format!("review provider failed: {error} (diagnostic: {diagnostic})")));
    }
    // Output over the cap is never parsed: what is left of it is its end, not a dossier.
    let from_stdout = || match stdout_dropped {
        0 => dossier::parse(&stdout),
        dropped => Err(over_cap("reviewer", "output", Some(dropped + stdout.len() as u64))),
    };
    let parsed = match &invocation.answer {
        Answer::Stdout => from_stdout(),
        Answer::File(path) => match capped::read_text(path, "answer file", CAPTURE_CAP) {
            Ok(text) if !text.trim().is_empty() => {
                dossier::parse_file(&text).map(strip_nulls).and_then(dossier::from_value)
            }
            Err(capped::ReadError { refusal: capped::Refusal::TooLarge(len), .. }) => {
                Err(over_cap("reviewer", "answer file", len))
            }
            _ => from_stdout(),
        },
        Answer::Submission(_) => match submitted {
            Closed::Accepted(Submitted::Dossier(d)) => Ok(*d),
            other => Err(other.refusal("submit_review").unwrap_or_else(|| {
                "provider produced no submission; the verdict only counts through the submit_review tool".into()
            })),
        },
    };
    let mut dossier = match (exit_code, parsed) {
        (Some(0), Ok(d)) => d,
        (_, Ok(d)) if d.verdict == "fail" => d,
        // Stopped for outgrowing what is read of it: why there is no dossier, not the exit
        // its stop caused.
        (_, Err(why)) if outgrown => return Err(parse_failure(why)),
        (code, _) if code != Some(0) => {
            return Err(parse_failure(format!(
                "review provider failed: exit code {} ({}) (diagnostic: {diagnostic})",
                code.unwrap_or(-1),
                tail.trim()
            )));
        }
        (_, Err(why)) => {
            return Err(parse_failure(format!("review dossier invalid: {why} (diagnostic: {diagnostic})")));
        }
        (_, Ok(d)) => d,
    };
    dossier.model = dossier.model.or(reported.model);
    dossier.session_id = dossier.session_id.or(reported.session_id);
    if dossier.output_format.is_none() {
        let format = match (&invocation.answer, invocation.output_format) {
            (Answer::File(path), "codex.output_file") if !path.is_file() => "codex.stdout",
            (_, format) => format,
        };
        dossier.output_format = Some(format.to_string());
    }
    Ok(dossier)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// Output over the capture cap, on stdout (its start dropped) or in an answer file, is
    /// refused as too long with the limit named, never parsed (its kept end read as "not JSON").
    #[test]
    fn output_over_the_cap_is_refused_as_too_long() {
        let left = |stdout: &str, stdout_dropped: u64| Leftovers {
            exit_code: Some(0),
            timed_out: false,
            runner_error: None,
            stdout: stdout.into(),
            stdout_dropped,
            submitted: Closed::default(),
            tail: String::new(),
            diagnostic: "d.txt".into(),
            reported: Provenance::default(),
        };
        let stdout = Invocation {
            command: String::new(),
            env: BTreeMap::new(),
            answer: Answer::Stdout,
            output_format: "command.stdout",
            idle_on_stdout: false,
            stop_past_capture: true,
        };
        let failure = interpret(&stdout, left("xxxx\"}", 10)).unwrap_err();
        assert_eq!(failure.class, FailureClass::Parse);
        assert!(
            failure.message.contains("the reviewer's output is 16 bytes, over the 8.0 MiB (8388608 bytes) limit"),
            "{}",
            failure.message
        );
        // A worker's run stopped there reports no reason but the exit its stop caused: the
        // limit is still what is named.
        let stopped = Leftovers { exit_code: None, ..left("xxxx\"}", 10) };
        let failure = interpret(&stdout, stopped).unwrap_err();
        assert!(failure.message.contains("over the 8.0 MiB"), "{}", failure.message);

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("answer.json");
        std::fs::write(&path, vec![b' '; CAPTURE_CAP as usize + 1]).unwrap();
        let file = Invocation { answer: Answer::File(path), ..stdout };
        let failure = interpret(&file, left("", 0)).unwrap_err();
        assert!(
            failure.message.contains("the reviewer's answer file is 8.0 MiB (8388609 bytes), over the 8.0 MiB"),
            "{}",
            failure.message
        );
        assert!(!failure.message.contains("not JSON") && !failure.message.contains("no output"), "{}", failure.message);

        // A delegated harden's one JSON object cut at its start says so too; a final JSON line
        // after a long log is still its answer.
        let stdout = Invocation { answer: Answer::Stdout, ..file };
        let refused = interpret_harden(&stdout, left("xxxx\"}", 10)).unwrap_err();
        assert!(refused.contains("the harden provider's output is 16 bytes, over the 8.0 MiB"), "{refused}");
        let answer = interpret_harden(&stdout, left("log\n{\"round\":1}\n", 10)).unwrap();
        assert_eq!(answer, json!({"round": 1}));
        // A template answer cut so is UNKNOWN (no answer) with the reason above its raw text.
        let (answer, raw) = interpret_template(&stdout, left("xxxx\"}", 10)).unwrap();
        assert!(answer.is_none() && raw.starts_with("[the reviewer's output is 16 bytes, over"), "{raw}");
    }

    /// A delegated harden's answer that gives a key twice, in codex's answer file or on stdout,
    /// is refused naming the key: never read as its last copy, nor passed over for an earlier
    /// answer.
    #[test]
    fn a_harden_answer_giving_a_key_twice_is_refused() {
        let left = |stdout: &str| Leftovers {
            exit_code: Some(0),
            timed_out: false,
            runner_error: None,
            stdout: stdout.into(),
            stdout_dropped: 0,
            submitted: Closed::default(),
            tail: String::new(),
            diagnostic: "d.txt".into(),
            reported: Provenance::default(),
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("answer.json");
        let file = Invocation {
            command: String::new(),
            env: BTreeMap::new(),
            answer: Answer::File(path.clone()),
            output_format: "codex.output_file",
            idle_on_stdout: false,
            stop_past_capture: true,
        };
        std::fs::write(&path, r#"{"shape":{"decision":"reject","decision":"keep"}}"#).unwrap();
        let refused = interpret_harden(&file, left("{\"round\":1}\n")).unwrap_err();
        assert!(refused.contains("answer file reads two ways: the key `decision` is given twice"), "{refused}");
        std::fs::write(&path, "").unwrap();
        let refused = interpret_harden(&file, left("{\"round\":1}\n{\"a\":1,\"a\":2}\n")).unwrap_err();
        assert!(refused.contains("output reads two ways: the key `a` is given twice"), "{refused}");
        // A log line giving a key twice before the answer is no answer, and not refused.
        let answer = interpret_harden(&file, left("{\"a\":1,\"a\":2}\n{\"round\":1}\n")).unwrap();
        assert_eq!(answer, json!({"round": 1}));
    }

    /// A refused submission is what the run's failure names (the daemon decided it), and a
    /// later valid one still counts.
    #[test]
    fn a_refused_submission_is_named_in_the_failure_not_reported_as_none() {
        let submissions = Submissions::default();
        let request = Request { min_attack_angles: 6, ..Request::default() };
        let token = submissions.open(Expected::Dossier(request.clone()));
        let attack = json!({"target": "a", "attack": "b", "result": "clean"});
        let thin = json!({"verdict": "pass", "mode": "discover", "summary": "ok", "findings": [], "attack_log": [attack, attack], "budget": {}});
        let problems = submissions.submit(&token, thin).unwrap_err();
        let invocation = Invocation {
            command: String::new(),
            env: BTreeMap::new(),
            answer: Answer::Submission(token.clone()),
            output_format: "claude.mcp_submit_review",
            idle_on_stdout: false,
            stop_past_capture: false,
        };
        let left = |submitted| Leftovers {
            exit_code: Some(0),
            timed_out: false,
            runner_error: None,
            stdout: String::new(),
            stdout_dropped: 0,
            submitted,
            tail: String::new(),
            diagnostic: "d.txt".into(),
            reported: Provenance::default(),
        };
        let failure = interpret(&invocation, left(submissions.close(&token))).unwrap_err();
        assert!(failure.message.contains("submit_review submission was refused"), "{}", failure.message);
        assert!(failure.message.contains(&problems[0]), "{} / {problems:?}", failure.message);
        let none = interpret(&invocation, left(Closed::default())).unwrap_err();
        assert!(none.message.contains("provider produced no submission"), "{}", none.message);

        let token = submissions.open(Expected::Dossier(request));
        let attacks: Vec<Value> = (0..6).map(|_| attack.clone()).collect();
        let full = json!({"verdict": "pass", "mode": "discover", "summary": "ok", "findings": [], "attack_log": attacks, "budget": {}});
        assert!(submissions.submit(&token, json!({"verdict": "maybe"})).is_err());
        submissions.submit(&token, full).unwrap();
        let invocation = Invocation { answer: Answer::Submission(token.clone()), ..invocation };
        assert!(interpret(&invocation, left(submissions.close(&token))).is_ok());
    }

    /// Once an answer is accepted, the same one again counts once; a different one, valid or
    /// not, leaves no verdict, and nothing after it is read.
    #[test]
    fn a_second_different_submission_reads_two_ways() {
        let submissions = Submissions::default();
        let request = Request { min_attack_angles: 1, ..Request::default() };
        let attack = json!({"target": "a", "attack": "b", "result": "clean"});
        let pass = json!({"verdict": "pass", "mode": "discover", "summary": "ok", "findings": [], "attack_log": [attack], "budget": {}});
        let token = submissions.open(Expected::Dossier(request.clone()));
        assert_eq!(submissions.submit(&token, pass.clone()).unwrap(), "pass");
        assert_eq!(submissions.submit(&token, pass.clone()).unwrap(), "pass", "the same answer counts once");
        assert!(matches!(submissions.close(&token), Closed::Accepted(Submitted::Dossier(_))));

        let mut changed = pass.clone();
        changed["summary"] = json!("on second thought");
        for second in [changed, json!({"verdict": "maybe"})] {
            let token = submissions.open(Expected::Dossier(request.clone()));
            submissions.submit(&token, pass.clone()).unwrap();
            let refused = submissions.submit(&token, second).unwrap_err();
            assert!(refused[0].contains("two different answers"), "{refused:?}");
            let refused = submissions.submit(&token, pass.clone()).unwrap_err();
            assert!(refused[0].contains("nothing more is read"), "{refused:?}");
            let closed = submissions.close(&token);
            assert!(matches!(closed, Closed::TwoWays), "{closed:?}");
            assert!(closed.refusal("submit_review").unwrap().contains("neither is its verdict"));
        }
    }

    #[test]
    fn the_host_is_read_from_the_markers_agents_set_not_from_user_settings() {
        assert_eq!(host_agent(&env(&[("CLAUDECODE", "1")])), Some("claude"));
        assert_eq!(host_agent(&env(&[("CODEX_THREAD_ID", "t")])), Some("codex"));
        assert_eq!(host_agent(&env(&[("GEMINI_CLI", "1")])), Some("gemini"));
        let settings = env(&[("CLAUDE_CODE_USE_BEDROCK", "1"), ("GEMINI_CLI_HOME", "/g"), ("CODEX_HOME", "/c")]);
        assert_eq!(host_agent(&settings), None, "settings users export everywhere are not hosts");
        let declared = env(&[("SCAFLD_HOST_AGENT", "codex"), ("CLAUDECODE", "1")]);
        assert_eq!((host_agent(&declared), genuine_host(&declared)), (Some("codex"), Some("claude")));
        assert_eq!(host_agents(&declared), ["codex", "claude"]);
        // However it is capitalised.
        assert_eq!(host_agent(&env(&[("SCAFLD_HOST_AGENT", " Claude")])), Some("claude"));
        for spelling in ["claude-code", "claude_code", "ClaudeCode"] {
            assert_eq!(host_agent(&env(&[("SCAFLD_HOST_AGENT", spelling)])), Some("claude"), "{spelling}");
        }
        assert_eq!(host_agent(&env(&[("SCAFLD_HOST_AGENT", "codex-cli")])), Some("codex"));
        assert_eq!(host_agents(&env(&[("SCAFLD_HOST_AGENT", "GEMINI")])), ["gemini"]);
    }

    /// What OpenAI's strict structured outputs refuse, checked the way the service checks.
    fn strict_problems(schema: &Value, path: &str, out: &mut Vec<String>) {
        let Some(object) = schema.as_object() else { return };
        for key in object.keys() {
            if !STRICT_KEYWORDS.contains(&key.as_str()) {
                out.push(format!("{path}: unsupported `{key}`"));
            }
        }
        if let Some(options) = object.get("anyOf").and_then(Value::as_array) {
            options.iter().for_each(|o| strict_problems(o, path, out));
            return;
        }
        if !object.contains_key("type") && !object.contains_key("$ref") {
            out.push(format!("{path}: no type"));
        }
        if let Some(props) = object.get("properties").and_then(Value::as_object) {
            if object.get("additionalProperties") != Some(&Value::Bool(false)) {
                out.push(format!("{path}: not closed"));
            }
            let required: Vec<&str> =
                object["required"].as_array().map(|r| r.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
            for (key, prop) in props {
                if !required.contains(&key.as_str()) {
                    out.push(format!("{path}.{key}: not required"));
                }
                strict_problems(prop, &format!("{path}.{key}"), out);
            }
        }
        for key in ["items"] {
            if let Some(child) = object.get(key) {
                strict_problems(child, &format!("{path}.{key}"), out);
            }
        }
        if let Some(defs) = object.get("$defs").and_then(Value::as_object) {
            defs.iter().for_each(|(k, d)| strict_problems(d, &format!("{path}.$defs.{k}"), out));
        }
    }

    #[test]
    fn codex_output_schemas_follow_openais_strict_rules() {
        for (name, schema) in
            [("dossier", strict_schema()), ("template", strict(scafld_protocol::schemas::template_answer()))]
        {
            let mut problems = Vec::new();
            strict_problems(&schema, name, &mut problems);
            assert!(problems.is_empty(), "{problems:#?}");
            assert!(schema.get("$schema").is_none() && schema.get("$id").is_none());
        }
        let dossier = strict_schema();
        for field in scafld_protocol::schemas::PROVENANCE_FIELDS {
            assert!(dossier["properties"].get(field).is_none(), "{field} is scafld's to fill");
        }
        assert_eq!(dossier["properties"]["verdict"]["type"], "string", "enums are typed");
    }
}
