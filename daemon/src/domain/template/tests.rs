//! Tests of the template domain: loading and validation, prompt assembly (snapshots in
//! `snapshots/`; set `SCAFLD_UPDATE_SNAPSHOTS=1` to rewrite them after a deliberate change),
//! the tool mapping per provider, answer parsing and the gate conversion.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::*;

const BUILTINS: [(&str, &str); 3] = [
    ("arch", include_str!("../../../assets/templates/arch.yaml")),
    ("tasks", include_str!("../../../assets/templates/tasks.yaml")),
    ("code", include_str!("../../../assets/templates/code.yaml")),
];

fn yaml(text: &str) -> Value {
    serde_saphyr::from_str(text).expect("test YAML parses")
}

fn builtin(name: &str) -> Template {
    let text = BUILTINS.iter().find(|(n, _)| *n == name).unwrap().1;
    load(&format!("{name}.yaml"), yaml(text)).unwrap()
}

fn inputs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Compare with `snapshots/<name>.txt`, or write it when asked to.
fn snapshot(name: &str, actual: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/domain/template/snapshots")
        .join(format!("{name}.txt"));
    if std::env::var_os("SCAFLD_UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| panic!("missing snapshot {}", path.display()));
    assert_eq!(actual, expected, "prompt {name} changed; review it and rerun with SCAFLD_UPDATE_SNAPSHOTS=1");
}

#[test]
fn builtins_load_with_their_tools_and_inputs() {
    for (name, _) in BUILTINS {
        let t = builtin(name);
        assert_eq!(t.name, name);
        assert!(
            t.system_prompt.contains("FAIL") && t.system_prompt.contains("CONCERN"),
            "{name}: severities explained"
        );
    }
    assert_eq!(builtin("arch").allowed_tools, ["Read", "Glob", "Grep"]);
    assert!(builtin("code").allows_shell() && builtin("code").loads_project_settings());
    assert_eq!(builtin("code").prompt, Prompt::Builder(Builder::Code));
    assert_eq!(builtin("tasks").required.iter().map(|i| i.name.as_str()).collect::<Vec<_>>(), ["input", "against"]);
}

#[test]
fn prompts_for_each_builtin_with_and_without_optional_inputs() {
    let arch = builtin("arch");
    let given = inputs(&[("input", "slices/105.md"), ("against", "arch/100.md")]);
    let resolved = arch.resolve_inputs(&given).unwrap();
    assert_eq!(resolved["cwd"], ".", "optional defaults are filled");
    snapshot("arch", &arch.build_prompt(&resolved));
    let tasks = builtin("tasks");
    snapshot(
        "tasks",
        &tasks.build_prompt(&tasks.resolve_inputs(&inputs(&[("input", "t.md"), ("against", "s.md")])).unwrap()),
    );
    let code = builtin("code");
    for (label, given) in [
        ("code-survey", inputs(&[])),
        ("code-ref", inputs(&[("diff", "main")])),
        ("code-range", inputs(&[("diff", "v1..v2")])),
        ("code-files", inputs(&[("files", "src/**/*.rs")])),
        ("code-range-files", inputs(&[("diff", "v1..v2"), ("files", "*.rs")])),
    ] {
        snapshot(label, &code.build_prompt(&code.resolve_inputs(&given).unwrap()));
    }
    snapshot("arch-packet", &packet(&arch, &arch.build_prompt(&resolved)));
}

#[test]
fn missing_and_unknown_inputs_are_named() {
    let arch = builtin("arch");
    let missing = arch.resolve_inputs(&inputs(&[("input", "a.md")])).unwrap_err();
    assert!(missing.contains("needs against"), "{missing}");
    let unknown = arch.resolve_inputs(&inputs(&[("input", "a"), ("against", "b"), ("colour", "red")])).unwrap_err();
    assert!(unknown.contains("no input `colour`"), "{unknown}");
}

#[test]
fn bad_templates_are_refused_with_file_and_field() {
    let good = "name: sec\ndescription: d\nsystem_prompt: s\nallowed_tools: [Read]\npermission_mode: default\ninputs:\n  required:\n    - name: target\nprompt_template: 'check {target}'\n";
    assert!(load("sec.yaml", yaml(good)).is_ok());
    let cases = [
        (good.replace("description: d\n", ""), "description", "missing"),
        (good.replace("prompt_template: 'check {target}'\n", ""), "prompt_template", "exactly one"),
        (format!("{good}prompt_builder: code\n"), "prompt_template", "not both"),
        (good.replace("prompt_template: 'check {target}'", "prompt_builder: lint"), "prompt_builder", "not a builder"),
        (good.replace("{target}", "{path}"), "prompt_template", "{path}, which is not a declared input"),
        (good.replace("[Read]", "[Read, Write]"), "allowed_tools", "read-only"),
        (good.replace("name: sec", "name: wait"), "name", "subcommand"),
        (good.replace("name: sec", "name: ../x"), "name", "must match"),
        (good.replace("permission_mode: default", "permission_mode: acceptEdits"), "permission_mode", "never edit"),
        (good.replace("{target}'", "{target} {'"), "prompt_template", "without its"),
    ];
    for (text, field, message) in cases {
        let error = load("sec.yaml", yaml(&text)).unwrap_err();
        assert_eq!((error.file.as_str(), error.field.as_str()), ("sec.yaml", field), "{error}");
        assert!(error.to_string().contains(message), "{error}");
    }
    let unknown = load("sec.yaml", yaml(&format!("{good}colour: red\n"))).unwrap_err();
    assert!(unknown.to_string().contains("unknown field `colour`"), "{unknown}");
    let hooks = load("sec.yaml", yaml(&format!("{good}hooks:\n  PostToolUse: [audit]\n"))).unwrap();
    assert_eq!(hooks.hooks, Some(json!({"PostToolUse": ["audit"]})), "hooks are carried through");
    let literal = load("sec.yaml", yaml(&good.replace("check {target}", "use {{braces}} on {target}"))).unwrap();
    assert_eq!(literal.build_prompt(&inputs(&[("target", "x")])), "use {braces} on x");
}

#[test]
fn tools_map_onto_each_provider() {
    let (tools, allowed, disallowed) = claude_tools(&builtin("arch"));
    assert_eq!(tools, "Read,Grep,Glob");
    assert_eq!(allowed, "mcp__scafld__submit_review", "a bare Read would read anywhere");
    assert!(disallowed.split(',').any(|t| t == "Bash") && disallowed.contains("Write"));
    let (tools, allowed, disallowed) = claude_tools(&builtin("code"));
    assert_eq!(tools, "Read,Grep,Glob,Bash");
    assert_eq!(allowed, "Bash(git diff:*),Bash(git log:*),Bash(git show:*),mcp__scafld__submit_review");
    assert!(!disallowed.split(',').any(|t| t == "Bash"));
    snapshot("gemini-policy-code", &gemini_policy(Some(&builtin("code")), "submit_review"));
    snapshot("gemini-policy-gate", &gemini_policy(None, "submit_review"));
    assert!(disallowed.split(',').any(|t| t == "Bash(git *--output*)"));
    let arch = gemini_policy(Some(&builtin("arch")), "submit_review");
    assert!(arch.contains("toolName = \"run_shell_command\"\ndecision = \"deny\""), "{arch}");
    assert!(!arch.contains("commandPrefix"), "{arch}");
    assert!(!codex_ignores_rules(&builtin("code")), "code loads AGENTS.md");
    assert!(codex_ignores_rules(&builtin("arch")));
}

#[test]
fn claude_reads_below_the_workspace_only_and_never_its_secrets() {
    let rules = claude_permissions(std::path::Path::new("/w/a*b/"));
    assert_eq!(rules["allow"], json!(["Read(//w/a\\*b/**)"]));
    let deny: Vec<&str> = rules["deny"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    for rule in ["Read(//w/a\\*b/**/.env*)", "Read(**/.priv)", "Read(//w/a\\*b/**/.scafld/config.local.yaml)"] {
        assert!(deny.contains(&rule), "{rule}: {deny:?}");
    }
}

#[test]
fn answers_parse_from_json_or_markdown_and_anything_else_is_unknown() {
    let json = r#"{"verdict":"concerns","summary":"ok","findings":[{"severity":"CONCERN","title":"T","description":"D","file":"a.rs:3"}]}"#;
    let a = parse_answer(json).unwrap();
    assert_eq!((a.verdict.as_str(), a.findings[0].file.as_deref()), ("CONCERNS", Some("a.rs:3")));
    let markdown = "Some preamble.\n\n## Summary\n[overall assessment: FAIL] The API leaks.\n\n## Findings\n\n### [FAIL] Leaky boundary\nThe handler reads the store directly (src/api/handler.rs:42).\nIt should go through the service.\n\n### [PASS] Naming\nConsistent.\n";
    let a = parse_answer(markdown).unwrap();
    assert_eq!(a.verdict, "FAIL");
    assert_eq!(a.summary, "[overall assessment: FAIL] The API leaks.");
    assert_eq!(a.findings.len(), 2);
    assert_eq!(a.findings[0].title, "Leaky boundary");
    assert_eq!(a.findings[0].file.as_deref(), Some("src/api/handler.rs:42"));
    assert_eq!(
        a.findings[0].description,
        "The handler reads the store directly (src/api/handler.rs:42).\nIt should go through the service."
    );
    assert_eq!(a.findings[1].severity, "PASS");
    for garbage in [
        "",
        "looks good to me",
        "## Summary\nno verdict here\n",
        "### [MAYBE] x",
        r#"{"verdict":"GREAT","findings":[]}"#,
        "{not json",
    ] {
        assert!(parse_answer(garbage).is_none(), "{garbage:?}");
    }
}

/// A summary naming two verdicts, on one line or on two, gives no verdict (UNKNOWN), never
/// the first one it names.
#[test]
fn a_summary_naming_two_verdicts_gives_none() {
    for unread in [
        "## Summary\n\nPASS on the module layout.\nFAIL overall: the data layer is missing.\n",
        "## Summary\nPASS\n\nThe design would fail under load.\n",
        "## Summary\n[overall assessment: PASS | CONCERNS | FAIL]\n",
    ] {
        assert!(parse_answer(unread).is_none(), "{unread:?}");
    }
    let answer = parse_answer("## Summary\nFAIL: the data layer is missing.\nNothing stores the sessions.\n");
    assert_eq!(answer.map(|a| a.verdict.to_string()).as_deref(), Some("FAIL"));
}

/// The verdict is read only from the statement the format asks for, the start of the summary's
/// first line; a verdict word in prose, or a summary naming two verdicts on any of its lines,
/// gives no verdict (UNKNOWN), never a pass.
#[test]
fn a_markdown_verdict_is_read_from_its_statement_never_from_prose() {
    for (answer, verdict) in [
        ("## Summary\nPASS - the plan covers every criterion.\n", "PASS"),
        ("## Summary\n\nFAIL: the data layer is missing.\nNothing stores the sessions.\n", "FAIL"),
        ("## Summary\n**CONCERNS** two risks remain.\n", "CONCERNS"),
        ("## Summary\n[overall assessment: FAIL] The API leaks.\n", "FAIL"),
        ("## Summary\n**Verdict:** pass, nothing to add.\n", "PASS"),
        ("## Summary\n- PASS\n", "PASS"),
        // A verdict word denied in prose names no other verdict.
        ("## Summary\nPASS\n\nNo concerns found.\n", "PASS"),
        ("## Summary\nPASS - nothing will fail; no blocking concerns.\n", "PASS"),
        ("## Summary\nFAIL: the data layer is missing.\nIt will not pass review.\n", "FAIL"),
        ("## Summary\nFAIL: it doesn't pass its own tests.\n", "FAIL"),
        ("## Summary\nFAIL: the API leaks.\n\n## Verdict\nFAIL\n", "FAIL"),
    ] {
        assert_eq!(parse_answer(answer).map(|a| a.verdict.to_string()).as_deref(), Some(verdict), "{answer:?}");
    }
    for unread in [
        // Prose that happens to hold a verdict word states no verdict.
        "## Summary\n\nThis design does not pass: it omits the storage layer.\n",
        "## Summary\nIt would pass if the storage layer were there.\n",
        "## Summary\nPass-through layer is missing.\n",
        "## Summary\nOverall:\nPASS\n",
        "## Summary\nPASSED\n",
        // Two verdicts, on one line or on two.
        "## Summary\n\nPASS on the module layout.\nFAIL overall: the data layer is missing.\n",
        "## Summary\nPASS, but the design would fail under load.\n",
        "## Summary\n[overall assessment: PASS | CONCERNS | FAIL]\n",
        "## Summary\nVerdict: unknown\n",
        // A verdict in capitals is said outright, whatever comes before it.
        "## Summary\nPASS on the layout.\nNo, actually FAIL overall.\n",
        // A denial across a comma denies nothing; one of the stated verdict takes it back.
        "## Summary\nPASS on the layout.\nNo, actually fail overall.\n",
        // A verdict stated outside the summary, other than the summary's.
        "## Summary\nPASS on structure.\n\n## Verdict\nFAIL\n",
        "## Summary\nPASS\n\n## Findings\n- FAIL: data loss on restart\n",
        "## Summary\nPASS\n\n## Verdict: FAIL\n",
        "## Summary\nPASS? Not a pass.\n",
        "## Summary\nPASS - it would not pass under load.\n",
    ] {
        assert!(parse_answer(unread).is_none(), "{unread:?}");
    }
}

/// A verdict is never milder than the answer's own findings: a FAIL finding under a PASS (or
/// CONCERNS) summary fails, a CONCERN under a PASS is CONCERNS, in either format.
#[test]
fn an_answer_is_as_grave_as_its_gravest_finding() {
    let json = |verdict: &str, severity: &str| {
        format!(r#"{{"verdict":"{verdict}","summary":"s","findings":[{{"severity":"{severity}","title":"t"}}]}}"#)
    };
    for (verdict, severity, settled) in [
        ("PASS", "FAIL", "FAIL"),
        ("CONCERNS", "FAIL", "FAIL"),
        ("PASS", "CONCERN", "CONCERNS"),
        ("PASS", "PASS", "PASS"),
        ("FAIL", "PASS", "FAIL"),
    ] {
        assert_eq!(parse_answer(&json(verdict, severity)).unwrap().verdict, settled, "{verdict} with {severity}");
    }
    let markdown = "## Summary\nPASS\n\n### [FAIL] real bug\nthe change breaks a.txt\n";
    assert_eq!(parse_answer(markdown).unwrap().verdict, "FAIL");
    // A finding at another heading level is a finding all the same, never dropped.
    for level in ["##", "####", "######"] {
        let answer = parse_answer(&format!("## Summary\nPASS\n\n{level} [FAIL] real bug\nbroken\n")).unwrap();
        assert_eq!((answer.verdict.as_str(), answer.findings.len()), ("FAIL", 1), "{level}");
    }
    // A setext heading is a heading: a finding underlined with `---` (or `===`) counts.
    for underline in ["---", "==="] {
        let answer = parse_answer(&format!("## Summary\nPASS\n\n[FAIL] real bug\n{underline}\nbroken\n")).unwrap();
        assert_eq!((answer.verdict.as_str(), answer.findings.len()), ("FAIL", 1), "{underline}");
    }
    // Headings a Markdown reader takes as headings: after a tab, in a list item, in a quote.
    for shape in ["###\t[FAIL] broken", "- ### [FAIL] broken", "> ### [FAIL] broken", "1. ## [FAIL] broken"] {
        let answer = parse_answer(&format!("## Summary\nPASS\n\n{shape}\nwhy\n")).unwrap();
        assert_eq!((answer.verdict.as_str(), answer.findings.len()), ("FAIL", 1), "{shape}");
    }
    // Answers that say FAIL somewhere they are not read as a finding or a verdict are no
    // answer (UNKNOWN), never a pass.
    for unclear in [
        "## Summary\nNOT PASS - FAIL\n",
        "## Summary\nPASS\n\n## Summary\nFAIL\n",
        "## Summary\nPASS\n\n{\"verdict\":\"FAIL\",\"summary\":\"s\",\"findings\":[]}\n",
        "## Summary\nPASS\n\nSee [FAIL] below, in prose.\n",
        r#"{"verdict":"PASS","summary":"s","findings":[],"blocking_findings":[{"severity":"FAIL","title":"t"}]}"#,
        // A key the answer schema lacks, at the top or in a finding, would go unread.
        r#"{"verdict":"PASS","summary":"s","findings":[],"issues":[{"severity":"FAIL","title":"t"}]}"#,
        r#"{"verdict":"PASS","summary":"s","findings":[{"severity":"PASS","title":"t","blocking":true}]}"#,
    ] {
        assert!(parse_answer(unclear).is_none(), "{unclear}");
    }
    // A key given twice is no answer (UNKNOWN), whichever value comes last, at any depth.
    for twice in [
        r#"{"verdict":"PASS","summary":"s","findings":[{"severity":"PASS","title":"t","file":"a","file":"b"}]}"#,
        r#"{"verdict":"FAIL","summary":"s","findings":[],"verdict":"PASS"}"#,
        r#"{"verdict":"PASS","summary":"s","findings":[{"severity":"FAIL","title":"t"}],"findings":[]}"#,
        r#"{"verdict":"PASS","summary":"s","findings":[{"severity":"FAIL","severity":"PASS","title":"t"}]}"#,
    ] {
        assert!(parse_answer(twice).is_none(), "{twice}");
    }
}

#[test]
fn verdicts_combine_and_template_findings_reach_the_gate() {
    let words = |w: &[&str]| w.iter().map(|w| w.parse().unwrap()).collect::<Vec<_>>();
    assert_eq!(combine(&words(&["PASS", "CONCERNS"])), "CONCERNS");
    assert_eq!(combine(&words(&["PASS", "UNKNOWN"])), "UNKNOWN");
    assert_eq!(combine(&words(&["UNKNOWN", "FAIL"])), "FAIL");
    assert_eq!(combine(&[]), "UNKNOWN");
    let answer = parse_answer(
        r#"{"verdict":"FAIL","summary":"s","findings":[{"severity":"FAIL","title":"Broken","description":"d","file":"src/a.rs:7"},{"severity":"CONCERN","title":"Thin","description":"d2"},{"severity":"PASS","title":"ok","description":""}]}"#,
    )
    .unwrap();
    let d = to_dossier("code", &answer, "discover");
    assert_eq!((d.verdict.as_str(), d.findings.len(), d.open_blockers()), ("fail", 2, 1));
    assert_eq!(d.findings[0].location.as_ref().map(|l| (l.path.as_str(), l.line)), Some(("src/a.rs", Some(7))));
    assert!(!d.findings[1].blocks_completion);
    let request = crate::domain::dossier::Request {
        mode: scafld_protocol::vocab::ReviewMode::Discover,
        max_findings: 12,
        min_attack_angles: 1,
        depth: "standard".into(),
    };
    let normalized = crate::domain::dossier::normalize(d, &request);
    assert_eq!(crate::domain::dossier::validate(&normalized, &request), Vec::<String>::new(), "a valid dossier");
}

/// The names a user template may not take are the `review` subcommands a template could not
/// override: all of them but the built-in templates' own.
#[test]
fn reserved_names_are_the_review_subcommands_but_the_built_ins() {
    let builtins: Vec<&str> = BUILTINS.iter().map(|(name, _)| *name).collect();
    let expected: Vec<&str> =
        scafld_protocol::cli::REVIEW_SUBCOMMANDS.into_iter().filter(|w| !builtins.contains(w)).collect();
    assert_eq!(RESERVED.to_vec(), expected);
}
