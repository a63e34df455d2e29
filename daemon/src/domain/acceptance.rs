//! Acceptance evidence: the matchers that turn a finished command into pass or fail, browser
//! evidence validation, and the environment acceptance commands run with.

use std::collections::BTreeMap;

use scafld_protocol::vocab::CriterionStatus;
use serde_json::Value;

/// What a finished (or failed-to-finish) command produced.
pub struct RunFacts<'a> {
    /// `None` when the process was killed or never started.
    pub exit_code: Option<i32>,
    pub stdout: &'a [u8],
    /// Whether stdout and stderr together were exactly empty.
    pub output_empty: bool,
    /// Timeout or start failure; it decides the verdict whatever the matcher.
    pub runner_error: Option<String>,
    /// How a command a signal ended ended (`killed by signal 11 (SIGSEGV)`): its exit reads as
    /// -1 to the matchers, as in the original, and is described so.
    pub signal_death: Option<String>,
    pub command: &'a str,
    pub combined_text: &'a str,
}

fn pass_if(passed: bool) -> CriterionStatus {
    if passed { CriterionStatus::Pass } else { CriterionStatus::Fail }
}

/// `(status, reason)` for `expected_kind`.
pub fn evaluate(expected_kind: &str, facts: &RunFacts<'_>) -> (CriterionStatus, String) {
    if let Some(error) = &facts.runner_error {
        return (CriterionStatus::Fail, error.clone());
    }
    let code = facts.exit_code.unwrap_or(-1);
    let exit = || facts.signal_death.clone().unwrap_or_else(|| format!("exit code was {code}"));
    match expected_kind {
        "exit_code_zero" => (pass_if(code == 0), exit()),
        "exit_code_nonzero" => (pass_if(code != 0), exit()),
        "no_matches" => {
            if facts.output_empty {
                (CriterionStatus::Pass, "output was empty".into())
            } else {
                (CriterionStatus::Fail, "output was not empty".into())
            }
        }
        "browser_evidence" => match browser_evidence(code, facts.stdout) {
            Ok(reason) => (CriterionStatus::Pass, reason),
            Err(reason) => (CriterionStatus::Fail, with_playwright_hint(reason, facts.command, facts.combined_text)),
        },
        "manual" => (CriterionStatus::Pending, "manual criterion requires human evidence".into()),
        other => (CriterionStatus::Invalid, format!("unknown expected_kind {other:?}")),
    }
}

/// Validate the one JSON object a browser criterion prints on stdout.
pub fn browser_evidence(exit_code: i32, stdout: &[u8]) -> Result<String, String> {
    if exit_code != 0 {
        return Err(format!("browser command exited with code {exit_code}"));
    }
    let text = String::from_utf8_lossy(stdout);
    let text = text.trim();
    if text.is_empty() {
        return Err("browser evidence missing: the command printed nothing on stdout".into());
    }
    let value: Value = serde_json::from_str(text).map_err(|e| format!("browser evidence is not JSON: {e}"))?;
    let object = value.as_object().ok_or("browser evidence must be one JSON object")?;
    for key in ["url", "viewport", "console_errors", "network_errors"] {
        if !object.contains_key(key) {
            return Err(format!("browser evidence lacks `{key}`"));
        }
    }
    let text_field = |key: &str| object.get(key).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty());
    let url = text_field("url").ok_or("browser evidence `url` must be a non-empty string")?;
    let viewport = text_field("viewport").ok_or("browser evidence `viewport` must be a non-empty string")?;
    if let Some(auth) = object.get("auth") {
        let mode = auth.get("mode").and_then(Value::as_str).map(str::trim).unwrap_or_default();
        if mode.is_empty() {
            return Err("browser evidence `auth.mode` must be a non-empty string".into());
        }
    }
    for key in ["console_errors", "network_errors"] {
        let errors =
            object.get(key).and_then(Value::as_array).ok_or(format!("browser evidence `{key}` must be a list"))?;
        if !errors.is_empty() {
            let first = errors[0].as_str().map(str::to_string).unwrap_or_else(|| errors[0].to_string());
            return Err(format!("browser evidence recorded {} {}: {first}", errors.len(), key.replace('_', " ")));
        }
    }
    let mut artifacts = 0;
    for key in ["screenshots", "traces", "videos", "artifacts"] {
        let Some(list) = object.get(key) else { continue };
        let list = list.as_array().ok_or(format!("browser evidence `{key}` must be a list"))?;
        for item in list {
            let path = item.get("path").and_then(Value::as_str).map(str::trim).unwrap_or_default();
            if path.is_empty() {
                return Err(format!("browser evidence `{key}` has an entry without a path"));
            }
            artifacts += 1;
        }
    }
    if artifacts == 0 {
        return Err("browser evidence needs at least one screenshot, trace, video or artifact".into());
    }
    Ok(format!("browser evidence accepted for {url} at {viewport}"))
}

const PLAYWRIGHT_MISSING: [&str; 10] = [
    "command not found",
    // dash: `sh: 1: playwright: not found`, also through `eval`
    ": not found",
    "not recognized as an internal or external command",
    "cannot find module '@playwright/test'",
    "cannot find package '@playwright/test'",
    "executable doesn't exist",
    "browser executable not found",
    "please run the following command",
    "playwright install",
    "no executable found",
];

fn with_playwright_hint(reason: String, command: &str, output: &str) -> String {
    let haystack = format!("{command}\n{output}").to_lowercase();
    if haystack.contains("playwright") && PLAYWRIGHT_MISSING.iter().any(|m| haystack.contains(m)) {
        format!(
            "{reason}; Playwright or its browsers look missing: install the project's dependencies, then \
             its browsers with the repo's package manager (for example `npx playwright install`), and rerun"
        )
    } else {
        reason
    }
}

/// Keys whose values are secrets wherever they appear in browser evidence.
const SECRET_KEYS: [&str; 16] = [
    "cookie",
    "cookies",
    "set-cookie",
    "authorization",
    "proxy-authorization",
    "token",
    "access_token",
    "refresh_token",
    "id_token",
    "password",
    "passwd",
    "secret",
    "api_key",
    "apikey",
    "x-api-key",
    "sessionid",
];

/// Query parameters that carry credentials in URLs.
const SECRET_PARAMS: [&str; 12] = [
    "token",
    "access_token",
    "refresh_token",
    "id_token",
    "api_key",
    "apikey",
    "key",
    "password",
    "secret",
    "sig",
    "signature",
    "session",
];

const REDACTED: &str = "[redacted]";

/// Browser evidence as it may be recorded: cookie values, `Authorization`,
/// `Proxy-Authorization` and `Set-Cookie` headers, other credential fields and token-like URL
/// query parameters replaced by `[redacted]`. Returns the text and what was redacted, so the
/// evidence can say so. JSON stays JSON (re-serialised); other text is redacted line by line.
pub fn redact_browser_evidence(text: &str) -> (String, Vec<String>) {
    let mut redacted = Vec::new();
    match serde_json::from_str::<Value>(text.trim()) {
        Ok(mut value) => {
            redact_value(&mut value, "", &mut redacted);
            (value.to_string(), redacted)
        }
        Err(_) => {
            let lines: Vec<String> = text.lines().map(|line| redact_line(line, &mut redacted)).collect();
            let mut out = lines.join("\n");
            if text.ends_with('\n') {
                out.push('\n');
            }
            (out, redacted)
        }
    }
}

fn secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    SECRET_KEYS.contains(&key.as_str()) || key.ends_with("_token") || key.ends_with("-token")
}

fn redact_value(value: &mut Value, path: &str, redacted: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map.iter_mut() {
                let here = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                if secret_key(key) && !inner.is_null() {
                    *inner = Value::String(REDACTED.into());
                    redacted.push(here);
                } else {
                    redact_value(inner, &here, redacted);
                }
            }
        }
        Value::Array(items) => {
            for (i, inner) in items.iter_mut().enumerate() {
                redact_value(inner, &format!("{path}[{i}]"), redacted);
            }
        }
        Value::String(text) => {
            let mut found = Vec::new();
            let clean = redact_line(text, &mut found);
            if !found.is_empty() {
                *text = clean;
                redacted.extend(found.into_iter().map(|f| format!("{path}: {f}")));
            }
        }
        _ => {}
    }
}

/// Text that may quote browser evidence (a matcher's reason): each line redacted like
/// [`redact_browser_evidence`]'s plain-text form.
pub fn redact_text(text: &str) -> (String, Vec<String>) {
    let mut redacted = Vec::new();
    let lines: Vec<String> = text.split('\n').map(|line| redact_line(line, &mut redacted)).collect();
    (lines.join("\n"), redacted)
}

/// One line of text: header values, bearer tokens and credential query parameters.
fn redact_line(line: &str, redacted: &mut Vec<String>) -> String {
    // A header anywhere on the line (`Cookie: ...`, `... Proxy-Authorization: Basic ...`): its
    // value is the rest of the line.
    let lower = line.to_ascii_lowercase();
    let header = ["proxy-authorization:", "authorization:", "set-cookie:", "cookie:"]
        .iter()
        .filter_map(|name| {
            lower
                .match_indices(name)
                .find(|(at, _)| !lower[..*at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        })
        .min_by_key(|(at, _)| *at);
    if let Some((at, name)) = header {
        let end = at + name.len();
        redacted.push(format!("{} header", &line[at..end - 1]));
        return format!("{} {REDACTED}", &line[..end]);
    }
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    // Bearer tokens anywhere in the text.
    while let Some(at) = rest.to_ascii_lowercase().find("bearer ") {
        out.push_str(&rest[..at + 7]);
        let token_len =
            rest[at + 7..].find(|c: char| c.is_whitespace() || c == '"' || c == '\'').unwrap_or(rest.len() - at - 7);
        if token_len > 0 {
            out.push_str(REDACTED);
            redacted.push("bearer token".into());
        }
        rest = &rest[at + 7 + token_len..];
    }
    out.push_str(rest);
    redact_query(&out, redacted)
}

/// `name=value` pairs after a `?` or `&` whose name carries credentials.
fn redact_query(text: &str, redacted: &mut Vec<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (i, c) in text.char_indices() {
        if (c != '?' && c != '&') || i < last {
            continue;
        }
        let after = &text[i + 1..];
        let Some(eq) = after.find('=') else { continue };
        let name = &after[..eq];
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            continue;
        }
        if !SECRET_PARAMS.contains(&name.to_ascii_lowercase().as_str()) {
            continue;
        }
        let value_start = i + 1 + eq + 1;
        let value_end = text[value_start..]
            .find(|c: char| c == '&' || c == '#' || c.is_whitespace() || c == '"' || c == '\'')
            .map(|n| value_start + n)
            .unwrap_or(text.len());
        if value_end > value_start && &text[value_start..value_end] != REDACTED {
            out.push_str(&text[last..value_start]);
            out.push_str(REDACTED);
            last = value_end;
            redacted.push(format!("`{name}` query parameter"));
        }
    }
    out.push_str(&text[last..]);
    out
}

/// Toolchain files and the shim directories they imply (relative to `$HOME`).
pub const SHIM_FILES: [(&str, &[&str]); 8] = [
    (".ruby-version", &[".rbenv/shims"]),
    (".python-version", &[".pyenv/shims"]),
    (".node-version", &[".nodenv/shims"]),
    (".nvmrc", &[".nodenv/shims"]),
    (".go-version", &[".goenv/shims"]),
    (".java-version", &[".jenv/shims"]),
    (".tool-versions", &[".asdf/shims", ".local/share/mise/shims", ".mise/shims"]),
    ("mise.toml", &[".local/share/mise/shims", ".mise/shims"]),
];

/// The environment of an acceptance command: the caller's environment, then PATH =
/// `path_prepend` + shims of `found_files` + the caller's PATH, then `config_env` last.
/// `$VAR`, `${VAR}` and a leading `~` are expanded from the caller's environment.
pub fn environment(
    caller: &BTreeMap<String, String>,
    path_prepend: &[String],
    found_files: &[&str],
    config_env: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut env = caller.clone();
    let home = caller.get("HOME").cloned().unwrap_or_default();
    let mut entries: Vec<String> = path_prepend.iter().map(|p| expand(p, caller)).collect();
    for (file, shims) in SHIM_FILES {
        let present = found_files.contains(&file) || (file == "mise.toml" && found_files.contains(&".mise.toml"));
        if present && !home.is_empty() {
            entries.extend(shims.iter().map(|s| format!("{home}/{s}")));
        }
    }
    let mut seen = std::collections::HashSet::new();
    entries.retain(|e| !e.is_empty() && seen.insert(e.clone()));
    let base_path =
        config_env.get("PATH").map(|p| expand(p, caller)).or_else(|| caller.get("PATH").cloned()).unwrap_or_default();
    if !base_path.is_empty() {
        entries.push(base_path);
    }
    env.insert("PATH".into(), entries.join(":"));
    for (key, value) in config_env {
        if key != "PATH" {
            env.insert(key.clone(), expand(value, caller));
        }
    }
    env
}

/// The caller's variables a clean-checkout acceptance command starts from (`verify
/// --material-ref`): PATH, CI, and HOME only to find toolchain shims and expand `~` in the
/// configuration (the command gets a fresh HOME). Every other variable of the caller is left
/// out, so whatever credentials it holds (tokens, cloud keys, `SSH_AUTH_SOCK`) never reach a
/// command the change under verification wrote.
const CLEAN_CHECKOUT_PASSED: [&str; 3] = ["PATH", "HOME", "CI"];

/// The CI host's credentials, removed from a clean-checkout acceptance command's environment
/// even when the configuration sets them (the original tool's list).
pub const CREDENTIAL_VARS: [&str; 4] =
    ["ACTIONS_ID_TOKEN_REQUEST_TOKEN", "ACTIONS_RUNTIME_TOKEN", "GH_TOKEN", "GITHUB_TOKEN"];

/// The environment of an acceptance command `verify` runs in a clean checkout: [`environment`]
/// of the [`CLEAN_CHECKOUT_PASSED`] variables alone (the configuration's values expanded from
/// those, so `$SOME_SECRET` there expands to nothing), HOME and TMPDIR the fresh folders
/// `home` and `tmp` unless the configuration sets them, CI `true` unless set,
/// `SCAFLD_VERIFY=1`, and none of [`CREDENTIAL_VARS`].
pub fn clean_checkout_environment(
    caller: &BTreeMap<String, String>,
    path_prepend: &[String],
    found_files: &[&str],
    config_env: &BTreeMap<String, String>,
    home: &str,
    tmp: &str,
) -> BTreeMap<String, String> {
    let passed: BTreeMap<String, String> = caller
        .iter()
        .filter(|(name, _)| CLEAN_CHECKOUT_PASSED.contains(&name.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut env = environment(&passed, path_prepend, found_files, config_env);
    for (name, fresh) in [("HOME", home), ("TMPDIR", tmp)] {
        if !config_env.contains_key(name) {
            env.insert(name.into(), fresh.into());
        }
    }
    if env.get("CI").is_none_or(|v| v.is_empty()) {
        env.insert("CI".into(), "true".into());
    }
    env.insert("SCAFLD_VERIFY".into(), "1".into());
    for name in CREDENTIAL_VARS {
        env.remove(name);
    }
    env
}

fn expand(value: &str, vars: &BTreeMap<String, String>) -> String {
    let value = match value.strip_prefix('~') {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => {
            format!("{}{rest}", vars.get("HOME").map(String::as_str).unwrap_or("~"))
        }
        _ => value.to_string(),
    };
    let mut out = String::with_capacity(value.len());
    let mut rest = value.as_str();
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        let (name, tail) = if let Some(braced) = after.strip_prefix('{') {
            match braced.find('}') {
                Some(end) => (&braced[..end], &braced[end + 1..]),
                None => ("", after),
            }
        } else {
            let end = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        if name.is_empty() {
            out.push('$');
            rest = after;
        } else {
            out.push_str(vars.get(name).map(String::as_str).unwrap_or(""));
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(code: i32, stdout: &'static str) -> RunFacts<'static> {
        RunFacts {
            exit_code: Some(code),
            stdout: stdout.as_bytes(),
            output_empty: stdout.is_empty(),
            runner_error: None,
            signal_death: None,
            command: "x",
            combined_text: stdout,
        }
    }

    #[test]
    fn matchers() {
        assert_eq!(evaluate("exit_code_zero", &facts(0, "")).0, "pass");
        assert_eq!(evaluate("exit_code_zero", &facts(2, "")), (CriterionStatus::Fail, "exit code was 2".into()));
        assert_eq!(evaluate("exit_code_nonzero", &facts(1, "")).0, "pass");
        assert_eq!(evaluate("no_matches", &facts(1, "")).0, "pass");
        assert_eq!(evaluate("no_matches", &facts(0, "x")).0, "fail");
        assert_eq!(evaluate("manual", &facts(0, "")).0, "pending");
        assert_eq!(evaluate("bogus", &facts(0, "")).0, "invalid");
        let mut timed_out = facts(0, "");
        timed_out.runner_error = Some("process timeout".into());
        assert_eq!(evaluate("exit_code_zero", &timed_out), (CriterionStatus::Fail, "process timeout".into()));
    }

    #[test]
    fn browser_evidence_rules() {
        let ok = r#"{"url":"http://x/","viewport":"1440x900","screenshots":[{"path":"a.png"}],"console_errors":[],"network_errors":[]}"#;
        assert_eq!(browser_evidence(0, ok.as_bytes()).unwrap(), "browser evidence accepted for http://x/ at 1440x900");
        let cases = [
            (
                r#"{"url":"u","viewport":"v","console_errors":["boom"],"network_errors":[],"screenshots":[{"path":"a"}]}"#,
                "1 console errors: boom",
            ),
            (r#"{"url":"u","viewport":"v","console_errors":[],"network_errors":[]}"#, "at least one screenshot"),
            (
                r#"{"url":"","viewport":"v","console_errors":[],"network_errors":[],"traces":[{"path":"t"}]}"#,
                "`url` must be",
            ),
            (r#"{"url":"u","viewport":"v","network_errors":[],"traces":[{"path":"t"}]}"#, "lacks `console_errors`"),
            (r#"{"url":"u","viewport":"v","console_errors":[],"network_errors":[],"videos":[{}]}"#, "without a path"),
            (
                r#"{"url":"u","viewport":"v","auth":{},"console_errors":[],"network_errors":[],"videos":[{"path":"v"}]}"#,
                "auth.mode",
            ),
            ("not json", "not JSON"),
            ("", "printed nothing"),
        ];
        for (input, expected) in cases {
            let error = browser_evidence(0, input.as_bytes()).unwrap_err();
            assert!(error.contains(expected), "{input}: {error}");
        }
        assert!(browser_evidence(1, ok.as_bytes()).unwrap_err().contains("exited with code 1"));
        let (_, reason) = evaluate(
            "browser_evidence",
            &RunFacts {
                exit_code: Some(127),
                stdout: b"",
                output_empty: false,
                runner_error: None,
                signal_death: None,
                command: "npx playwright test",
                combined_text: "sh: npx: command not found",
            },
        );
        assert!(reason.contains("Playwright or its browsers look missing"), "{reason}");
    }

    #[test]
    fn environment_order() {
        let caller: BTreeMap<String, String> = [("HOME", "/h"), ("PATH", "/usr/bin:/bin"), ("TOKEN", "t")]
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        let config_env: BTreeMap<String, String> =
            [("GEMFILE", "${HOME}/Gemfile")].into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        let env = environment(
            &caller,
            &["~/bin".into(), "$HOME/.rbenv/shims".into()],
            &[".ruby-version", ".tool-versions"],
            &config_env,
        );
        assert_eq!(
            env["PATH"],
            "/h/bin:/h/.rbenv/shims:/h/.asdf/shims:/h/.local/share/mise/shims:/h/.mise/shims:/usr/bin:/bin"
        );
        assert_eq!(env["GEMFILE"], "/h/Gemfile");
        assert_eq!(env["TOKEN"], "t");
    }

    #[test]
    fn a_clean_checkout_gets_no_credential_of_the_caller() {
        let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        let caller = map(&[
            ("HOME", "/h"),
            ("PATH", "/usr/bin"),
            ("GITHUB_TOKEN", "t"),
            ("AWS_SECRET_ACCESS_KEY", "k"),
            ("SSH_AUTH_SOCK", "/s"),
        ]);
        let config = map(&[("GH_TOKEN", "configured"), ("LEAK", "$AWS_SECRET_ACCESS_KEY"), ("CACHE", "~/c")]);
        let env = clean_checkout_environment(&caller, &["~/bin".into()], &[], &config, "/fresh", "/tmp/x");
        assert_eq!(
            env,
            map(&[
                ("CACHE", "/h/c"),
                ("CI", "true"),
                ("HOME", "/fresh"),
                ("LEAK", ""),
                ("PATH", "/h/bin:/usr/bin"),
                ("SCAFLD_VERIFY", "1"),
                ("TMPDIR", "/tmp/x"),
            ])
        );
    }

    #[test]
    fn browser_evidence_loses_its_secrets_before_it_is_recorded() {
        let evidence = r#"{"url":"http://localhost:3000/app?token=abc123&page=2","viewport":"1440x900",
            "auth":{"mode":"storage_state","cookies":[{"name":"sid","value":"s3cr3t"}]},
            "headers":{"Authorization":"Bearer eyJhbGciOi","Accept":"text/html"},
            "screenshots":[{"path":"shot.png"}],"console_errors":[],"network_errors":[],
            "notes":"sent Proxy-Authorization: Basic dXNlcjpwYXNz"}"#;
        let (clean, redacted) = redact_browser_evidence(evidence);
        for secret in ["abc123", "s3cr3t", "eyJhbGciOi", "dXNlcjpwYXNz"] {
            assert!(!clean.contains(secret), "{secret} survived: {clean}");
        }
        assert!(clean.contains("page=2") && clean.contains("text/html") && clean.contains("shot.png"), "{clean}");
        assert!(redacted.iter().any(|r| r.contains("auth.cookies")), "{redacted:?}");
        assert!(redacted.iter().any(|r| r.contains("headers.Authorization")), "{redacted:?}");
        assert!(redacted.iter().any(|r| r.contains("`token` query parameter")), "{redacted:?}");
        // The redacted evidence is still valid evidence.
        assert!(browser_evidence(0, clean.as_bytes()).is_ok());
        let (url, _) = redact_browser_evidence("see http://h/p?token=a?b&key=c&x=1 and ?sig=");
        assert_eq!(url, "see http://h/p?token=[redacted]&key=[redacted]&x=1 and ?sig=");
        let (text, found) = redact_browser_evidence("Set-Cookie: sid=abc; Path=/\nok line\n");
        assert_eq!(text, "Set-Cookie: [redacted]\nok line\n");
        assert_eq!(found, ["Set-Cookie header"]);
    }

    #[test]
    fn the_playwright_hint_reads_dash_as_well_as_bash() {
        let dash = evaluate(
            "browser_evidence",
            &RunFacts {
                exit_code: Some(127),
                stdout: b"",
                output_empty: false,
                runner_error: None,
                signal_death: None,
                command: "playwright test",
                combined_text: "sh: 1: eval: playwright: not found",
            },
        );
        assert!(dash.1.contains("Playwright or its browsers look missing"), "{}", dash.1);
    }
}
