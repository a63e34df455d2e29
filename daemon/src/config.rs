//! Workspace configuration: `.scafld/config.yaml` overlaid by `.scafld/config.local.yaml`,
//! on top of built-in defaults. Wrong types and values no command could use are errors naming
//! the file; unknown keys are ignored but named as warnings (with the nearest known key).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    pub invariants: Invariants,
    pub execution: Execution,
    pub harden: Harden,
    pub review: Review,
    /// What the files set that no setting reads (a misspelt key): one warning each, naming
    /// file, line and key.
    #[serde(skip)]
    pub unknown_keys: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Review {
    pub external: External,
    pub context: ReviewContext,
    pub dossier: DossierConfig,
    /// auto (the consensus stands) or manual (it awaits `review accept|reject`).
    pub approval: String,
    pub workers: Workers,
    /// Review templates run as extra passes of every task's review gate.
    pub templates: Vec<String>,
}

impl Default for Review {
    fn default() -> Review {
        Review {
            external: External::default(),
            context: ReviewContext::default(),
            dossier: DossierConfig::default(),
            approval: "auto".into(),
            workers: Workers::default(),
            templates: Vec::new(),
        }
    }
}

/// Reviewer workers (`scafld worker`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Workers {
    /// A claimed job whose worker is silent this long goes back to the queue.
    pub lease_seconds: u64,
}

impl Default for Workers {
    fn default() -> Workers {
        Workers { lease_seconds: 300 }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct External {
    pub provider: String,
    pub command: String,
    pub fallback_policy: String,
    /// Several reviewers, one job each, unanimous consensus (empty: `provider` alone).
    pub reviewers: Vec<String>,
    pub idle_timeout_seconds: u64,
    pub absolute_max_seconds: u64,
    pub codex: ProviderCli,
    pub claude: ProviderCli,
    pub gemini: ProviderCli,
}

impl Default for External {
    fn default() -> External {
        External {
            provider: "auto".into(),
            command: String::new(),
            fallback_policy: "warn".into(),
            reviewers: Vec::new(),
            idle_timeout_seconds: 180,
            absolute_max_seconds: 1800,
            codex: ProviderCli { model: "gpt-5.5".into(), binary: String::new(), reasoning: "high".into() },
            claude: ProviderCli { model: "claude-opus-4-7".into(), ..ProviderCli::default() },
            gemini: ProviderCli::default(),
        }
    }
}

/// Model and binary of one external reviewer CLI.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProviderCli {
    pub model: String,
    pub binary: String,
    /// Codex reasoning effort (low, medium, high).
    pub reasoning: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReviewContext {
    pub max_bytes: usize,
    /// Cap on the required packet sections together; over it a review is refused before any
    /// provider runs.
    pub required_max_bytes: usize,
    pub files: Vec<String>,
}

impl Default for ReviewContext {
    fn default() -> ReviewContext {
        ReviewContext {
            max_bytes: 16384,
            required_max_bytes: crate::domain::packet::REQUIRED_MAX_BYTES,
            files: Vec::new(),
        }
    }
}

impl ReviewContext {
    pub fn budget(&self) -> crate::domain::packet::Budget {
        crate::domain::packet::Budget { max_bytes: self.max_bytes, required_max_bytes: self.required_max_bytes }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DossierConfig {
    pub max_findings: u32,
    pub min_attack_angles: u32,
    pub review_depth: String,
    pub rerun_policy: String,
}

impl Default for DossierConfig {
    fn default() -> DossierConfig {
        DossierConfig {
            max_findings: 12,
            min_attack_angles: 6,
            review_depth: "standard".into(),
            rerun_policy: "verify_open_blockers".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Invariants {
    pub canonical: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Execution {
    pub path_prepend: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub absolute_timeout_seconds: u64,
    pub idle_timeout_seconds: u64,
    pub max_parallel_jobs: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Harden {
    pub max_questions_per_round: u32,
    /// Advisory or blocking observations a delegated round may carry.
    pub max_issues_per_round: u32,
    /// The most spec bytes a delegated round's packet carries.
    pub context_max_bytes: usize,
    /// Delegated rounds' provider settings, shaped as `review.external` (provider empty:
    /// rounds are written by hand unless `--provider` is given).
    pub external: External,
}

impl Default for Invariants {
    fn default() -> Invariants {
        let canonical = [
            ("domain_boundaries", "Respect layer boundaries; dependencies point inward and never form cycles."),
            ("no_legacy_code", "Migrate directly; no dual reads or writes, shims or dead compatibility paths."),
            ("no_test_logic_in_production", "Production code never branches on being under test."),
            ("public_api_stable", "Public schemas and contracts change only with explicit approval."),
            ("config_from_env", "No hard-coded secrets or environment-specific configuration."),
        ];
        Invariants { canonical: canonical.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect() }
    }
}

impl Default for Execution {
    fn default() -> Execution {
        Execution {
            path_prepend: Vec::new(),
            env: BTreeMap::new(),
            absolute_timeout_seconds: 300,
            idle_timeout_seconds: 0,
            max_parallel_jobs: 4,
        }
    }
}

impl Default for Harden {
    fn default() -> Harden {
        Harden {
            max_questions_per_round: 8,
            max_issues_per_round: 8,
            context_max_bytes: 16384,
            external: External { provider: String::new(), ..External::default() },
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{file}: {message}")]
pub struct ConfigError {
    pub file: String,
    pub message: String,
}

impl ConfigError {
    /// What to do about it.
    pub fn hint(&self) -> String {
        format!("fix {}: it must be valid YAML with the fields `scafld init` writes", self.file)
    }
}

pub const BASE_FILE: &str = ".scafld/config.yaml";
pub const LOCAL_FILE: &str = ".scafld/config.local.yaml";
/// The largest configuration file read (real ones are a few kilobytes).
const MAX_CONFIG_BYTES: u64 = 8 << 20;

/// `verify.min_independence` from the committed file only: a local file cannot lower what a
/// receipt must prove (default `isolation_only`).
pub fn verify_min_independence(root: &Path) -> Result<String, ConfigError> {
    Ok(min_independence_of(&read_yaml(root, BASE_FILE)?))
}

/// `verify.min_independence` from the text of a config.yaml (`None`: no such file), as a
/// protected commit holds it: `verify --ci` reads the policy there, not in the checkout.
pub fn verify_min_independence_in(text: Option<&str>) -> Result<String, ConfigError> {
    let base = match text {
        Some(text) if !text.trim().is_empty() => serde_saphyr::from_str::<Value>(text)
            .map_err(|e| ConfigError { file: BASE_FILE.to_string(), message: yaml_error(&e) })?,
        _ => Value::Null,
    };
    Ok(min_independence_of(&base))
}

fn min_independence_of(base: &Value) -> String {
    base.pointer("/verify/min_independence").and_then(Value::as_str).unwrap_or("isolation_only").to_string()
}

/// Read both files of the workspace at `root` and merge them. Each file is checked on its own
/// first, so a value of the wrong type is blamed on the file that has it, by key and line.
pub fn load(root: &Path) -> Result<Config, ConfigError> {
    let (base, base_text) = read_yaml_text(root, BASE_FILE)?;
    check(BASE_FILE, &base, &base_text)?;
    let (local, local_text) = read_yaml_text(root, LOCAL_FILE)?;
    check(LOCAL_FILE, &local, &local_text)?;
    let mut unknown = unknown_keys(BASE_FILE, &base, &base_text);
    unknown.extend(unknown_keys(LOCAL_FILE, &local, &local_text));
    let mut config = merge(base, local)?;
    config.unknown_keys = unknown;
    Ok(config)
}

/// Keys the original tool writes or reads that no setting here reads: not misspelt, so no
/// warning.
const FOREIGN_KEYS: &[&str] = &[
    "version",
    "llm.model_profile",
    "review.external.provider_binary",
    "harden.external.provider_binary",
    "harden.required_context_max_bytes",
    "workspace.evidence_roots",
    "verify.min_independence",
    "verify.receipt_path",
    "verify.trusted_keys_path",
    "verify.policy",
];

/// Mappings whose keys are the user's own names (any key is known below them).
const OPEN_MAPS: &[&str] =
    &["invariants.canonical", "execution.env", "review.automated_passes", "review.adversarial_passes"];

/// Every known key path (`a.b.c`): the settings' fields, the foreign keys and the sections
/// above them.
fn known_keys() -> std::collections::BTreeSet<String> {
    fn walk(value: &Value, prefix: &str, known: &mut std::collections::BTreeSet<String>) {
        let Value::Object(fields) = value else { return };
        for (key, value) in fields {
            let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
            if !OPEN_MAPS.contains(&path.as_str()) {
                walk(value, &path, known);
            }
            known.insert(path);
        }
    }
    let mut known = std::collections::BTreeSet::new();
    walk(&serde_json::to_value(Config::default()).unwrap_or_default(), "", &mut known);
    for key in FOREIGN_KEYS.iter().chain(OPEN_MAPS) {
        let mut path = String::new();
        for part in key.split('.') {
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(part);
            known.insert(path.clone());
        }
    }
    known
}

/// One warning per key of `value` (the file `file`, whose text is `text`) that no setting
/// reads, with its line and the nearest known key beside it. Below an unknown key nothing
/// more is named.
fn unknown_keys(file: &str, value: &Value, text: &str) -> Vec<String> {
    fn walk(value: &Value, prefix: &str, known: &std::collections::BTreeSet<String>, found: &mut Vec<String>) {
        let Value::Object(fields) = value else { return };
        for (key, value) in fields {
            let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
            if !known.contains(&path) {
                found.push(path);
            } else if !OPEN_MAPS.contains(&path.as_str()) {
                walk(value, &path, known, found);
            }
        }
    }
    let known = known_keys();
    let mut found = Vec::new();
    walk(value, "", &known, &mut found);
    found
        .into_iter()
        .map(|key| {
            let line = line_of(text, &key).map(|n| format!("line {n}: ")).unwrap_or_default();
            let nearest = nearest_key(&key, &known).map(|k| format!(" (did you mean `{k}`?)")).unwrap_or_default();
            format!("{file}: {line}unknown key `{key}` is ignored{nearest}")
        })
        .collect()
}

/// The known key beside `key` (same section) whose last name is closest to its last name,
/// when close enough to be a slip of the keyboard.
fn nearest_key(key: &str, known: &std::collections::BTreeSet<String>) -> Option<String> {
    let (section, name) = key.rsplit_once('.').map_or(("", key), |(s, n)| (s, n));
    let within = (name.chars().count() / 3).max(1);
    known
        .iter()
        .filter_map(|k| {
            let (s, n) = k.rsplit_once('.').map_or(("", k.as_str()), |(s, n)| (s, n));
            (s == section).then(|| (edit_distance(name, n), k))
        })
        .filter(|(d, _)| *d <= within)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k.clone())
}

/// Levenshtein distance between two names, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diagonal + usize::from(ca != *cb)).min(row[j] + 1).min(row[j + 1] + 1);
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

fn read_yaml(root: &Path, file: &str) -> Result<Value, ConfigError> {
    read_yaml_text(root, file).map(|(value, _)| value)
}

/// A file's YAML and its text (empty when there is no such file).
fn read_yaml_text(root: &Path, file: &str) -> Result<(Value, String), ConfigError> {
    let error = |message: String| ConfigError { file: file.to_string(), message };
    match scafld_local::capped::read_text_if_there(&root.join(file), "configuration file", MAX_CONFIG_BYTES) {
        Ok(Some(text)) if text.trim().is_empty() => Ok((Value::Null, text)),
        Ok(Some(text)) => serde_saphyr::from_str::<Value>(&text).map(|v| (v, text)).map_err(|e| error(yaml_error(&e))),
        // A link to nothing (a shared file on a path not mounted) is no absent file: the
        // defaults in its place would be a silent change of every setting.
        Ok(None) => match std::fs::read_link(root.join(file)) {
            Ok(target) => Err(error(format!(
                "it is a symbolic link to {}, which does not exist; point it at the file or remove the link",
                target.display()
            ))),
            Err(_) => Ok((Value::Null, String::new())),
        },
        Err(e) => Err(error(e.to_string())),
    }
}

/// One file's settings read alone: a value that does not fit its field is named by file,
/// line (found in `text`) and key path.
fn check(file: &str, value: &Value, text: &str) -> Result<(), ConfigError> {
    if value.is_null() {
        return Ok(());
    }
    // A key left empty (`review:` with all below it commented out) is no setting: the merge
    // skips it in the local file, and the other file may fill it in the base.
    let blame = |key: &str, why: String| {
        let line = line_of(text, key).map(|n| format!("line {n}: ")).unwrap_or_default();
        Err(ConfigError { file: file.to_string(), message: format!("{line}`{key}`: {why}") })
    };
    match serde_path_to_error::deserialize::<_, Config>(&without_empty_keys(value)) {
        Err(e) => blame(&e.path().to_string(), e.inner().to_string()),
        Ok(config) => match unusable_value(&config) {
            Some((key, why)) => blame(&key, why),
            None => Ok(()),
        },
    }
}

/// The first setting of one file's `config` that no command could use: its key path and
/// why. A zero timeout would fail every command it bounds; a NUL, `=` or empty name in the
/// environment would fail every command before it starts.
fn unusable_value(config: &Config) -> Option<(String, String)> {
    let execution = &config.execution;
    if execution.absolute_timeout_seconds == 0 {
        let why = "must be a positive whole number of seconds (0 would time out every command at once)";
        return Some(("execution.absolute_timeout_seconds".into(), why.into()));
    }
    for (name, value) in &execution.env {
        let key = format!("execution.env.{name}");
        if name.is_empty() || name.contains(['=', '\0']) {
            return Some((key, "an environment variable's name must be non-empty, without `=` or NUL".into()));
        }
        if value.contains('\0') {
            return Some((key, "an environment variable's value cannot hold a NUL character".into()));
        }
    }
    execution
        .path_prepend
        .iter()
        .position(|dir| dir.contains('\0'))
        .map(|i| (format!("execution.path_prepend.[{i}]"), "a folder's path cannot hold a NUL character".into()))
}

/// `value` without the mapping keys whose value is empty (null), at any depth.
fn without_empty_keys(value: &Value) -> Value {
    match value {
        Value::Object(fields) => Value::Object(
            fields.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), without_empty_keys(v))).collect(),
        ),
        other => other.clone(),
    }
}

/// The line (from 1) where the block-style key path `a.b.c` is set in `text`: each key
/// looked for below the one before it, more indented. `None` when it is not written so.
fn line_of(text: &str, key: &str) -> Option<usize> {
    let mut wanted = key.split('.').filter(|k| !k.starts_with('[') && !k.is_empty()).peekable();
    let mut indent: Option<usize> = None;
    for (n, line) in text.lines().enumerate() {
        let Some(name) = wanted.peek() else { break };
        let body = line.trim_start();
        let depth = line.len() - body.len();
        if body.starts_with('#') {
            continue;
        }
        let matches = body.strip_prefix(*name).is_some_and(|rest| rest.trim_start().starts_with(':'));
        if matches && indent.is_none_or(|outer| depth > outer) {
            indent = Some(depth);
            wanted.next();
            if wanted.peek().is_none() {
                return Some(n + 1);
            }
        }
    }
    None
}

/// Why a configuration file does not parse, in the file's terms: a key given twice is named
/// with its line (the parser's own text speaks of its options), anything else as the parser
/// says it, with its line and a snippet.
fn yaml_error(e: &serde_saphyr::Error) -> String {
    match e.without_snippet() {
        serde_saphyr::Error::DuplicateMappingKey { key, location } => {
            let key = key.as_deref().map_or_else(|| "a key".to_string(), |k| format!("the key `{k}`"));
            format!(
                "line {}: {key} is given twice in the same mapping; keep one of them (YAML allows each key once)",
                location.line()
            )
        }
        _ => e.to_string(),
    }
}

/// Overlay `local` on `base` key by key; `execution.path_prepend` lists are concatenated
/// (base first), and the invariant catalog is merged over the defaults.
pub fn merge(base: Value, local: Value) -> Result<Config, ConfigError> {
    let mut prepend: Vec<Value> = Vec::new();
    for doc in [&base, &local] {
        if let Some(Value::Array(items)) = doc.pointer("/execution/path_prepend") {
            prepend.extend(items.iter().cloned());
        }
    }
    let mut merged = base;
    overlay(&mut merged, local);
    if let Value::Object(map) = &mut merged
        && let Some(Value::Object(execution)) = map.get_mut("execution")
    {
        execution.insert("path_prepend".into(), Value::Array(prepend));
    }
    let merged = if merged.is_null() { Value::Object(Default::default()) } else { without_empty_keys(&merged) };
    let mut config: Config = serde_json::from_value(merged)
        .map_err(|e| ConfigError { file: format!("{BASE_FILE} + {LOCAL_FILE}"), message: e.to_string() })?;
    let mut canonical = Invariants::default().canonical;
    canonical.append(&mut config.invariants.canonical);
    config.invariants.canonical = canonical;
    Ok(config)
}

fn overlay(base: &mut Value, local: Value) {
    match (base, local) {
        (Value::Object(base), Value::Object(local)) => {
            for (key, value) in local {
                overlay(base.entry(key).or_insert(Value::Null), value);
            }
        }
        (_, Value::Null) => {}
        (slot, value) => *slot = value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> Value {
        serde_saphyr::from_str(text).unwrap()
    }

    #[test]
    fn the_init_template_parses_to_the_defaults() {
        let template = yaml(include_str!("../assets/config.yaml"));
        assert_eq!(merge(template, Value::Null).unwrap(), Config::default());
    }

    #[test]
    fn local_overrides_base_and_path_prepend_concatenates() {
        let base = yaml("execution:\n  path_prepend: [/a]\n  absolute_timeout_seconds: 10\n  env: {A: '1', B: '2'}\n");
        let local = yaml("execution:\n  path_prepend: [/b]\n  env: {B: '3'}\nharden:\n  max_questions_per_round: 2\n");
        let config = merge(base, local).unwrap();
        assert_eq!(config.execution.path_prepend, vec!["/a", "/b"]);
        assert_eq!(config.execution.absolute_timeout_seconds, 10);
        assert_eq!(config.execution.env.get("B").map(String::as_str), Some("3"));
        assert_eq!(config.execution.env.get("A").map(String::as_str), Some("1"));
        assert_eq!(config.harden.max_questions_per_round, 2);
    }

    #[test]
    fn a_key_given_twice_is_named_with_its_line() {
        let error = verify_min_independence_in(Some("# top\nexecution:\n  env: {}\n  env: {}\n")).unwrap_err();
        assert_eq!(error.file, BASE_FILE);
        assert!(error.message.starts_with("line 4: the key `env` is given twice"), "{error}");
        assert!(!error.message.contains("DuplicateKeyPolicy"), "{error}");
    }

    #[test]
    fn wrong_types_are_errors() {
        let error = merge(yaml("execution:\n  absolute_timeout_seconds: soon\n"), Value::Null).unwrap_err();
        assert!(error.message.contains("invalid type"), "{error}");
    }

    /// A value of the wrong type is blamed on the file that has it, with its line and key.
    #[test]
    fn a_wrong_type_names_its_file_line_and_key() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join(".scafld")).unwrap();
        let text = "# settings\nreview:\n  external: {}\nexecution:\n  env: {}\n  absolute_timeout_seconds: abc\n";
        std::fs::write(root.path().join(BASE_FILE), text).unwrap();
        let error = load(root.path()).unwrap_err();
        assert_eq!(error.file, BASE_FILE);
        assert!(error.message.starts_with("line 6: `execution.absolute_timeout_seconds`: invalid type"), "{error}");
        std::fs::write(root.path().join(BASE_FILE), "execution:\n  absolute_timeout_seconds: 5\n").unwrap();
        std::fs::write(root.path().join(LOCAL_FILE), "harden:\n  max_questions_per_round: many\n").unwrap();
        let error = load(root.path()).unwrap_err();
        assert_eq!(error.file, LOCAL_FILE);
        assert!(error.message.starts_with("line 2: `harden.max_questions_per_round`"), "{error}");
    }

    /// A section left empty (its settings all commented out) is no setting, as the merge takes
    /// it: neither file's own check refuses it.
    #[test]
    fn an_empty_section_is_no_setting() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join(".scafld")).unwrap();
        std::fs::write(
            root.path().join(BASE_FILE),
            "execution:
  absolute_timeout_seconds: 5
",
        )
        .unwrap();
        std::fs::write(
            root.path().join(LOCAL_FILE),
            "review:
  # external: {}
execution:
",
        )
        .unwrap();
        let config = load(root.path()).expect("an empty section reads");
        assert_eq!(config.execution.absolute_timeout_seconds, 5);
    }

    /// Values no command could use are refused at load, by file, line and key: a zero timeout
    /// (every command would time out) and a NUL in the environment (none would start).
    #[test]
    fn unusable_values_name_their_file_line_and_key() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join(".scafld")).unwrap();
        std::fs::write(root.path().join(BASE_FILE), "execution:\n  env: {}\n  absolute_timeout_seconds: 0\n").unwrap();
        let error = load(root.path()).unwrap_err();
        assert_eq!(error.file, BASE_FILE);
        assert!(
            error.message.starts_with("line 3: `execution.absolute_timeout_seconds`: must be a positive"),
            "{error}"
        );
        std::fs::write(root.path().join(BASE_FILE), "execution:\n  absolute_timeout_seconds: 5\n").unwrap();
        std::fs::write(root.path().join(LOCAL_FILE), "execution:\n  env:\n    FOO: \"a\\u0000b\"\n").unwrap();
        let error = load(root.path()).unwrap_err();
        assert_eq!(error.file, LOCAL_FILE);
        assert!(error.message.starts_with("line 3: `execution.env.FOO`: an environment variable's value"), "{error}");
        std::fs::write(root.path().join(LOCAL_FILE), "execution:\n  env:\n    \"A=B\": x\n").unwrap();
        let error = load(root.path()).unwrap_err();
        assert!(error.message.contains("`execution.env.A=B`: an environment variable's name"), "{error}");
    }

    /// A config file that is a link to nothing is refused, naming the link's target, not read
    /// as no file (the defaults).
    #[test]
    fn a_dangling_link_is_an_error() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join(".scafld")).unwrap();
        std::os::unix::fs::symlink("/no-such-mount/shared.yaml", root.path().join(BASE_FILE)).unwrap();
        let error = load(root.path()).unwrap_err();
        assert_eq!(error.file, BASE_FILE);
        assert!(error.message.contains("symbolic link to /no-such-mount/shared.yaml, which does not exist"), "{error}");
    }

    /// Unknown keys are named with the nearest known one; the original tool's keys and the
    /// user's own names in open mappings are not unknown.
    #[test]
    fn unknown_keys_are_named() {
        let text = "version: '1.0'\nexecution:\n  env: {ANY: x}\n  max_paralel_jobs: 2\nverify:\n  policy: local\nreview:\n  automated_passes: {mine: {order: 1}}\nzzz: 1\n";
        let found = unknown_keys(BASE_FILE, &yaml(text), text);
        assert_eq!(
            found,
            vec![
                format!(
                    "{BASE_FILE}: line 4: unknown key `execution.max_paralel_jobs` is ignored (did you mean `execution.max_parallel_jobs`?)"
                ),
                format!("{BASE_FILE}: line 9: unknown key `zzz` is ignored"),
            ]
        );
        let template = include_str!("../assets/config.yaml");
        assert_eq!(unknown_keys(BASE_FILE, &yaml(template), template), Vec::<String>::new());
    }
}
