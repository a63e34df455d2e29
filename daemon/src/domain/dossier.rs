//! The ReviewDossier: the one document a reviewer submits. Strict parsing (unknown fields and
//! trailing data are errors), NDJSON `{"type":"dossier"}` frames, normalisation, and validation
//! against the review request (mode and budgets). An invalid dossier is never a pass.

use super::json_schema;
use scafld_protocol::json;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dossier {
    pub verdict: String,
    pub mode: String,
    pub summary: String,
    pub findings: Vec<Finding>,
    pub attack_log: Vec<Attack>,
    pub budget: Budget,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_format: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub normalizations: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_summary: Option<std::collections::BTreeMap<String, u64>>,
}

/// The id of the finding the review gate adds when the workspace changed during a review.
pub const MUTATION_FINDING: &str = "workspace-mutation";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Finding {
    #[serde(default)]
    pub id: String,
    pub severity: String,
    pub blocks_completion: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<Location>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub impact: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reproducer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggested_fix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub related_spec: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review_pass: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Location {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Attack {
    pub target: String,
    pub attack: String,
    pub result: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    #[serde(default)]
    pub max_findings: u32,
    #[serde(default)]
    pub min_attack_angles: u32,
    #[serde(default)]
    pub actual_findings: u32,
    #[serde(default)]
    pub actual_attack_angles: u32,
    #[serde(default)]
    pub depth: String,
}

/// What the review asked for; the dossier is judged against it. Stored with each session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub mode: scafld_protocol::vocab::ReviewMode,
    pub max_findings: u32,
    pub min_attack_angles: u32,
    pub depth: String,
}

impl Finding {
    /// No status, `open`, or an unknown status.
    pub fn is_open(&self) -> bool {
        !matches!(self.status.as_deref(), Some("fixed" | "accepted_risk" | "superseded"))
    }

    /// Open and marked as blocking.
    pub fn blocks(&self) -> bool {
        self.blocks_completion && self.is_open()
    }
}

impl Dossier {
    pub fn open_blockers(&self) -> usize {
        self.findings.iter().filter(|f| f.blocks()).count()
    }

    /// Whether the only findings that block are the mutation guard's ([`MUTATION_FINDING`]):
    /// the verdict was about a tree that moved during the review, not about the work, and the
    /// same tree is to be reviewed again.
    pub fn voided_by_mutation(&self) -> bool {
        let mut blocking = self.findings.iter().filter(|f| f.blocks()).peekable();
        blocking.peek().is_some() && blocking.all(|f| f.id == MUTATION_FINDING)
    }

    /// `fail` when any finding blocks completion, else `pass`.
    pub fn derived_verdict(&self) -> &'static str {
        if self.open_blockers() > 0 { "fail" } else { "pass" }
    }
}

/// Parse provider output: one JSON object (the dossier), or NDJSON frames of which exactly one
/// is `{"type":"dossier","dossier":{...}}` (`tick` and `partial` frames aside; the same dossier
/// repeated is still that one). Anything else is an error saying why, and so is output that
/// reads two ways: an object anywhere in it giving a key twice, or two different dossiers.
pub fn parse(text: &str) -> Result<Dossier, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err("the reviewer produced no output".into());
    }
    let mut values = serde_json::Deserializer::from_str(trimmed).into_iter::<json::Unrepeated>();
    let first = values.next().ok_or("no JSON value")?.map_err(|e| unreadable(e, "the output"))?.0;
    let rest: Vec<_> = values.collect();
    if first.get("type").is_none() {
        if !rest.is_empty() {
            return Err("trailing data after the dossier object; submit exactly one JSON object".into());
        }
        return from_value(first);
    }
    let mut dossier: Option<Value> = None;
    for frame in std::iter::once(Ok(json::Unrepeated(first))).chain(rest) {
        let frame = frame.map_err(|e| unreadable(e, "an NDJSON frame"))?.0;
        match frame.get("type").and_then(Value::as_str) {
            Some("dossier") => {
                let body = frame.get("dossier").cloned().ok_or("a dossier frame has no `dossier` field")?;
                match &dossier {
                    Some(earlier) if *earlier != body => {
                        return Err("the output holds two different dossier frames; a reviewer answers with exactly one dossier"
                            .into());
                    }
                    _ => dossier = Some(body),
                }
            }
            Some("tick" | "partial") => {}
            Some(other) => return Err(format!("unsupported frame type {other:?}")),
            None => return Err("every NDJSON frame needs a `type`".into()),
        }
    }
    from_value(dossier.ok_or("no dossier frame in the output")?)
}

/// An answer file's text (one JSON object, codex's) as a value, read as strictly as stdout.
pub fn parse_file(text: &str) -> Result<Value, String> {
    json::from_str(text.trim()).map_err(|e| unreadable(e, "the answer file"))
}

/// Why `what` cannot be read: not JSON, or a key given twice (an answer that reads two ways).
fn unreadable(e: serde_json::Error, what: &str) -> String {
    if json::is_repeated_key(&e) {
        format!("{what} reads two ways: {e}; give each key once")
    } else {
        format!("{what} is not JSON: {e}")
    }
}

/// A dossier from a JSON value read by [`json::from_str`] (a key given twice already refused),
/// held to `schemas/review_dossier.schema.json` itself (every channel reads a dossier here):
/// each problem names its JSON path and what the schema wants there.
pub fn from_value(value: Value) -> Result<Dossier, String> {
    conforming(value, "", "the dossier").map_err(|problems| format!("dossier does not match the schema: {problems}"))
}

/// One finding (a worker's checkpoint) from a JSON value, held to the schema's `finding`; its
/// problems are named from `whole` (`finding 1`).
pub fn finding_from_value(value: Value, whole: &str) -> Result<Finding, String> {
    conforming(value, FINDING, whole)
}

/// Where the schema defines one finding.
const FINDING: &str = "#/$defs/finding";

/// The bundled dossier schema, read once.
fn schema() -> &'static Value {
    static SCHEMA: std::sync::LazyLock<Value> = std::sync::LazyLock::new(scafld_protocol::schemas::review_dossier);
    &SCHEMA
}

/// `value` read as a `T` once it conforms to the part of the dossier schema `part` names (the
/// whole when empty); otherwise every problem, joined.
fn conforming<T: serde::de::DeserializeOwned>(value: Value, part: &str, whole: &str) -> Result<T, String> {
    let root = schema();
    let at = if part.is_empty() { Some(root) } else { json_schema::resolve(root, part) };
    let problems = json_schema::problems(root, at.expect("the bundled schema defines its parts"), &value, "", whole);
    if !problems.is_empty() {
        // A part's problems are named from the part (`finding 1: location.line ...`).
        let named = problems
            .into_iter()
            .map(|p| if part.is_empty() || p.starts_with(whole) { p } else { format!("{whole}: {p}") });
        return Err(named.collect::<Vec<_>>().join("; "));
    }
    // What the schema accepts and the Rust types still refuse (an integer past u32): named by path.
    // A part's are named from the part, as above (`finding 1: severity: ...`).
    serde_path_to_error::deserialize(json_schema::whole_numbers(value)).map_err(|e| match e.path().to_string() {
        path if path == "." => format!("{whole}: {}", e.inner()),
        path if part.is_empty() => format!("{path}: {}", e.inner()),
        path => format!("{whole}: {path}: {}", e.inner()),
    })
}

/// The most of one reviewer-written text (the summary, a finding's or an attack's text) a
/// stored dossier keeps: the job, the session and the ledger each hold the answer, so a longer
/// answer is kept whole once, in a file beside the run, and bounded everywhere else.
pub const MAX_KEPT_TEXT: usize = 64 * 1024;

/// `dossier` with every text longer than [`MAX_KEPT_TEXT`] cut there (at a character boundary)
/// and ending with where the whole answer is (`whole`); `None` when no text is that long.
pub fn bounded(dossier: &Dossier, whole: &str) -> Option<Dossier> {
    let long = |text: &str| text.len() > MAX_KEPT_TEXT;
    let finding_texts = |f: &Finding| {
        [&f.evidence, &f.impact, &f.reproducer, &f.suggested_fix, &f.validation, &f.related_spec, &f.summary]
            .into_iter()
            .flatten()
            .any(|t| long(t))
    };
    let any_long = long(&dossier.summary)
        || dossier.findings.iter().any(finding_texts)
        || dossier
            .attack_log
            .iter()
            .any(|a| long(&a.target) || long(&a.attack) || a.notes.as_deref().is_some_and(long));
    if !any_long {
        return None;
    }
    let clip = |text: &mut String| {
        if text.len() > MAX_KEPT_TEXT {
            let mut end = MAX_KEPT_TEXT;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
            text.push_str(&format!("… [cut at {MAX_KEPT_TEXT} bytes; the whole answer: {whole}]"));
        }
    };
    let mut kept = dossier.clone();
    clip(&mut kept.summary);
    for f in &mut kept.findings {
        for text in [
            &mut f.evidence,
            &mut f.impact,
            &mut f.reproducer,
            &mut f.suggested_fix,
            &mut f.validation,
            &mut f.related_spec,
            &mut f.summary,
        ]
        .into_iter()
        .flatten()
        {
            clip(text);
        }
    }
    for a in &mut kept.attack_log {
        clip(&mut a.target);
        clip(&mut a.attack);
        if let Some(notes) = a.notes.as_mut() {
            clip(notes);
        }
    }
    Some(kept)
}

/// Fill what the reviewer may leave out (finding ids, statuses, actual counts, requested budget).
pub fn normalize(mut dossier: Dossier, request: &Request) -> Dossier {
    for (i, finding) in dossier.findings.iter_mut().enumerate() {
        if finding.id.trim().is_empty() {
            finding.id = format!("finding-{}", i + 1);
        }
        if finding.status.is_none() {
            finding.status = Some("open".into());
        }
    }
    let budget = &mut dossier.budget;
    if budget.max_findings == 0 {
        budget.max_findings = request.max_findings;
    }
    if budget.min_attack_angles == 0 {
        budget.min_attack_angles = request.min_attack_angles;
    }
    if budget.depth.is_empty() {
        budget.depth = request.depth.clone();
    }
    budget.actual_findings = dossier.findings.len() as u32;
    budget.actual_attack_angles = dossier.attack_log.len() as u32;
    dossier
}

/// Every reason one finding is malformed; a blocking finding must say where, why and how to
/// check the fix. Used for dossiers and for worker checkpoints alike.
pub fn finding_problems(f: &Finding) -> Vec<String> {
    let mut problems = Vec::new();
    let at = format!("finding `{}`", f.id);
    if !matches!(f.severity.as_str(), "critical" | "high" | "medium" | "low") {
        problems.push(format!("{at}: severity must be critical, high, medium or low (got {:?})", f.severity));
    }
    if let Some(c) = &f.confidence
        && !matches!(c.as_str(), "high" | "medium" | "low")
    {
        problems.push(format!("{at}: confidence must be high, medium or low (got {c:?})"));
    }
    if let Some(s) = &f.status
        && !matches!(s.as_str(), "open" | "fixed" | "accepted_risk" | "superseded")
    {
        problems.push(format!("{at}: status must be open, fixed, accepted_risk or superseded (got {s:?})"));
    }
    if f.blocks() {
        let blank = |v: &Option<String>| v.as_deref().is_none_or(|s| s.trim().is_empty());
        if f.location.as_ref().is_none_or(|l| l.path.trim().is_empty()) {
            problems.push(format!("{at} blocks completion but has no location.path"));
        }
        for (name, value) in [("evidence", &f.evidence), ("impact", &f.impact), ("validation", &f.validation)] {
            if blank(value) {
                problems.push(format!("{at} blocks completion but has no {name}"));
            }
        }
    }
    problems
}

/// Every reason the (normalised) dossier cannot be accepted; empty when it can.
pub fn validate(d: &Dossier, request: &Request) -> Vec<String> {
    let mut problems = Vec::new();
    if !matches!(d.verdict.as_str(), "pass" | "fail") {
        problems.push(format!("verdict must be pass or fail (got {:?})", d.verdict));
    }
    if d.mode != request.mode.as_str() {
        problems.push(format!("mode is {:?} but the review asked for {:?}", d.mode, request.mode.as_str()));
    }
    if d.summary.trim().is_empty() {
        problems.push("summary is empty".into());
    }
    if d.attack_log.is_empty() {
        problems.push("attack_log needs at least one entry".into());
    }
    for (i, a) in d.attack_log.iter().enumerate() {
        if a.target.trim().is_empty() || a.attack.trim().is_empty() {
            problems.push(format!("attack_log[{i}] needs a target and an attack"));
        }
        if !matches!(a.result.as_str(), "finding" | "clean" | "skipped") {
            problems.push(format!("attack_log[{i}].result must be finding, clean or skipped (got {:?})", a.result));
        }
    }
    for f in &d.findings {
        problems.extend(finding_problems(f));
    }
    if d.verdict != d.derived_verdict() && matches!(d.verdict.as_str(), "pass" | "fail") {
        problems.push(format!(
            "verdict {:?} contradicts the findings: {} open blocking finding(s) mean {:?}",
            d.verdict,
            d.open_blockers(),
            d.derived_verdict()
        ));
    }
    if request.max_findings > 0 && d.findings.len() as u32 > request.max_findings {
        problems.push(format!("{} findings exceed the budget of {}", d.findings.len(), request.max_findings));
    }
    if d.verdict == "pass" && (d.attack_log.len() as u32) < request.min_attack_angles {
        problems.push(format!(
            "a pass needs at least {} attack angles in attack_log (got {})",
            request.min_attack_angles,
            d.attack_log.len()
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> Request {
        Request {
            mode: scafld_protocol::vocab::ReviewMode::Discover,
            max_findings: 3,
            min_attack_angles: 2,
            depth: "standard".into(),
        }
    }

    const PASS: &str = r#"{"verdict":"pass","mode":"discover","summary":"No blockers.","findings":[],
        "attack_log":[{"target":"diff","attack":"regression scan","result":"clean"},{"target":"spec","attack":"contract","result":"clean"}],
        "budget":{}}"#;

    fn blocking() -> String {
        r#"{"verdict":"fail","mode":"discover","summary":"One blocker.","findings":[{"severity":"high","blocks_completion":true,
        "location":{"path":"src/a.rs","line":4},"evidence":"e","impact":"i","validation":"cargo test"}],
        "attack_log":[{"target":"a","attack":"b","result":"finding"}],"budget":{}}"#
            .to_string()
    }

    fn check(text: &str) -> Result<Dossier, Vec<String>> {
        let d = parse(text).map_err(|e| vec![e])?;
        let d = normalize(d, &request());
        let problems = validate(&d, &request());
        if problems.is_empty() { Ok(d) } else { Err(problems) }
    }

    #[test]
    fn accepts_pass_and_fail_and_normalises() {
        let d = check(PASS).unwrap();
        assert_eq!((d.budget.max_findings, d.budget.actual_attack_angles), (3, 2));
        let d = check(&blocking()).unwrap();
        assert_eq!(d.findings[0].id, "finding-1");
        assert_eq!(d.open_blockers(), 1);
        let framed =
            format!("{{\"type\":\"tick\"}}\n{{\"type\":\"dossier\",\"dossier\":{}}}\n", PASS.replace('\n', ""));
        assert!(check(&framed).is_ok());
        // The same dossier framed twice is still one answer.
        let again = format!("{framed}{}", framed.replace("{\"type\":\"tick\"}\n", ""));
        assert_eq!(check(&again).unwrap().verdict, "pass");
    }

    #[test]
    fn rejects_what_must_be_rejected() {
        let cases: Vec<(String, &str)> = vec![
            (PASS.replace("\"pass\"", "\"fail\""), "contradicts the findings"),
            (blocking().replace("\"fail\"", "\"pass\""), "contradicts the findings"),
            (blocking().replace(",\"validation\":\"cargo test\"", ""), "has no validation"),
            (blocking().replace("\"location\":{\"path\":\"src/a.rs\",\"line\":4},", ""), "has no location.path"),
            (PASS.replace("\"summary\"", "\"extra\":1,\"summary\""), "unknown field `extra`"),
            (format!("{PASS} trailing"), "trailing data"),
            (format!("{PASS}{PASS}"), "trailing data"),
            (PASS.replace("\"discover\"", "\"verify\""), "asked for \"discover\""),
            (
                PASS.replace(",{\"target\":\"spec\",\"attack\":\"contract\",\"result\":\"clean\"}", ""),
                "at least 2 attack angles",
            ),
            (PASS.replace("\"clean\"}]", "\"maybe\"}]"), "one of finding, clean, skipped"),
            ("".into(), "no output"),
            ("garbage".into(), "not JSON"),
            ("{\"type\":\"verdict\"}".into(), "unsupported frame type"),
            // A key given twice reads two ways, wherever it is: never the last copy.
            (
                PASS.replace("{\"verdict\":\"pass\"", "{\"verdict\":\"fail\",\"verdict\":\"pass\""),
                "the key `verdict` is given twice",
            ),
            (
                PASS.replace("\"budget\":{}", "\"budget\":{\"depth\":\"a\",\"depth\":\"b\"}"),
                "the key `depth` is given twice",
            ),
            (
                format!(
                    "{{\"type\":\"tick\"}}\n{{\"type\":\"dossier\",\"dossier\":{},\"dossier\":{}}}",
                    blocking(),
                    PASS
                )
                .replace("\n        ", ""),
                "an NDJSON frame reads two ways: the key `dossier` is given twice",
            ),
            // Two different dossiers read two ways: never the last one.
            (
                format!(
                    "{{\"type\":\"dossier\",\"dossier\":{}}}\n{{\"type\":\"dossier\",\"dossier\":{}}}",
                    blocking(),
                    PASS
                )
                .replace("\n        ", ""),
                "two different dossier frames",
            ),
        ];
        for (text, expected) in cases {
            let problems = check(&text).expect_err(&text);
            assert!(problems.iter().any(|p| p.contains(expected)), "{expected:?} not in {problems:?}");
        }
        let many = blocking().replace("[{\"severity\"", "[{\"severity\":\"low\",\"blocks_completion\":false},{\"severity\":\"low\",\"blocks_completion\":false},{\"severity\":\"low\",\"blocks_completion\":false},{\"severity\"");
        assert!(check(&many).unwrap_err().iter().any(|p| p.contains("exceed the budget of 3")));
    }

    #[test]
    fn non_open_statuses_do_not_block() {
        let text = blocking()
            .replace("\"blocks_completion\":true", "\"blocks_completion\":true,\"status\":\"accepted_risk\"")
            .replace("\"fail\"", "\"pass\"");
        let mut req = request();
        req.min_attack_angles = 1;
        let d = normalize(parse(&text).unwrap(), &req);
        assert_eq!(validate(&d, &req), Vec::<String>::new());
    }
}

#[cfg(test)]
mod schema_tests {
    use super::*;
    use std::collections::BTreeSet;

    fn keys(value: &Value) -> BTreeSet<String> {
        value.as_object().unwrap().keys().cloned().collect()
    }

    /// A dossier giving every field the schema knows, valid.
    fn every_field() -> Value {
        serde_json::json!({
            "verdict": "fail", "mode": "discover", "summary": "s",
            "findings": [{"id": "f", "severity": "low", "blocks_completion": true, "status": "open",
                "category": "c", "confidence": "low", "location": {"path": "p", "line": 1}, "evidence": "e",
                "impact": "i", "reproducer": "r", "suggested_fix": "s", "validation": "v", "related_spec": "r",
                "review_pass": "r", "summary": "s"}],
            "attack_log": [{"target": "t", "attack": "a", "result": "finding", "notes": "n"}],
            "budget": {"max_findings": 0, "min_attack_angles": 0, "actual_findings": 0, "actual_attack_angles": 0, "depth": "d"},
            "provider": "p", "model": "m", "session_id": "s", "output_format": "o", "normalizations": ["n"],
            "event_summary": {"tick": 0}
        })
    }

    /// Every node of `value` with the schema that governs it: (JSON pointer, shown path, schema).
    fn nodes<'a>(
        root: &'a Value,
        schema: &'a Value,
        value: &Value,
        at: (String, String),
        out: &mut Vec<(String, String, &'a Value)>,
    ) {
        let schema = match schema.get("$ref").and_then(Value::as_str) {
            Some(target) => json_schema::resolve(root, target).unwrap(),
            None => schema,
        };
        out.push((at.0.clone(), at.1.clone(), schema));
        match value {
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    nodes(root, &schema["items"], item, (format!("{}/{i}", at.0), format!("{}[{i}]", at.1)), out);
                }
            }
            Value::Object(map) => {
                for (key, member) in map {
                    let governing = schema["properties"].get(key).unwrap_or(&schema["additionalProperties"]);
                    let shown = if at.1.is_empty() { key.clone() } else { format!("{}.{key}", at.1) };
                    nodes(root, governing, member, (format!("{}/{key}", at.0), shown), out);
                }
            }
            _ => {}
        }
    }

    /// Every keyword of the bundled schema is one the checker enforces or an annotation, and
    /// every constraint in it (type, enum, minLength, minimum, minItems, required, closed
    /// objects) refuses a dossier breaking it, naming the field: the Rust validation is the
    /// schema's own and cannot drift from it.
    #[test]
    fn every_constraint_of_the_schema_file_is_enforced() {
        let root: Value = serde_json::from_str(include_str!("../../../schemas/review_dossier.schema.json")).unwrap();
        fn keywords(schema: &Value, out: &mut BTreeSet<String>) {
            let Some(object) = schema.as_object() else { return };
            for (key, value) in object {
                out.insert(key.clone());
                match key.as_str() {
                    "properties" | "$defs" => value.as_object().unwrap().values().for_each(|s| keywords(s, out)),
                    "items" | "additionalProperties" => keywords(value, out),
                    _ => {}
                }
            }
        }
        let mut used = BTreeSet::new();
        keywords(&root, &mut used);
        for keyword in &used {
            assert!(
                json_schema::ENFORCED.contains(&keyword.as_str())
                    || json_schema::ANNOTATIONS.contains(&keyword.as_str()),
                "the dossier schema uses `{keyword}`, which json_schema does not enforce"
            );
        }

        let valid = every_field();
        from_value(valid.clone()).unwrap();
        let mut all = Vec::new();
        nodes(&root, &root, &valid, (String::new(), String::new()), &mut all);
        let mut checked = BTreeSet::new();
        for (pointer, shown, schema) in all {
            let mut breaking: Vec<(&str, Value)> = Vec::new();
            match schema.get("type").and_then(Value::as_str) {
                Some("string") => breaking.extend([("type", Value::Null), ("type", 7.into())]),
                Some("integer") => breaking.extend([("type", "7".into()), ("type", 1.5.into()), ("type", Value::Null)]),
                Some("boolean") => breaking.extend([("type", "true".into()), ("type", Value::Null)]),
                Some("object") => breaking.extend([("type", serde_json::json!([])), ("type", Value::Null)]),
                Some("array") => breaking.extend([("type", serde_json::json!({})), ("type", Value::Null)]),
                Some(other) => panic!("{shown}: type {other} has no breaking sample"),
                None => {}
            }
            if schema.get("enum").is_some() {
                breaking.extend([("enum", "bogus".into()), ("enum", Value::Null)]);
            }
            if let Some(least) = schema.get("minLength").and_then(Value::as_u64) {
                breaking.push(("minLength", "x".repeat(least as usize - 1).into()));
            }
            if let Some(least) = schema.get("minimum").and_then(Value::as_i64) {
                breaking.push(("minimum", (least - 1).into()));
            }
            if let Some(least) = schema.get("minItems").and_then(Value::as_u64) {
                let mut items = valid.pointer(&pointer).unwrap().as_array().unwrap().clone();
                items.truncate(least as usize - 1);
                breaking.push(("minItems", Value::Array(items)));
            }
            if schema.get("additionalProperties") == Some(&Value::Bool(false)) {
                let mut object = valid.pointer(&pointer).unwrap().clone();
                object.as_object_mut().unwrap().insert("unknown_field".into(), 1.into());
                breaking.push(("additionalProperties", object));
            }
            let mut missing = Vec::new();
            for key in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
                let key = key.as_str().unwrap();
                let mut object = valid.pointer(&pointer).unwrap().clone();
                object.as_object_mut().unwrap().remove(key);
                let member = if shown.is_empty() { key.to_string() } else { format!("{shown}.{key}") };
                missing.push((object, format!("{member} is missing")));
            }
            let named = if shown.is_empty() { "the dossier".to_string() } else { shown.clone() };
            let breaking = breaking.into_iter().map(|(keyword, sample)| (keyword, sample, named.clone()));
            for (keyword, sample, named) in breaking.chain(missing.into_iter().map(|(o, n)| ("required", o, n))) {
                let mut dossier = valid.clone();
                *dossier.pointer_mut(&pointer).unwrap() = sample.clone();
                let error = from_value(dossier).expect_err(&format!("{shown} = {sample} breaks `{keyword}`"));
                assert!(error.contains(&named), "{shown} = {sample}: the error does not name {named:?}: {error}");
                checked.insert(keyword);
            }
        }
        let constraints: BTreeSet<&str> =
            used.iter().map(String::as_str).filter(|k| !["properties", "items", "$ref", "$defs"].contains(k)).collect();
        let constraints: BTreeSet<&str> =
            constraints.into_iter().filter(|k| !json_schema::ANNOTATIONS.contains(k)).collect();
        assert_eq!(constraints, checked, "every constraint keyword the schema uses is tried");
        // A whole float is an integer to JSON Schema.
        let mut dossier = valid.clone();
        dossier["findings"][0]["location"]["line"] = 3.0.into();
        assert_eq!(from_value(dossier).unwrap().findings[0].location.as_ref().unwrap().line, Some(3));
    }

    /// `schemas/review_dossier.schema.json` names exactly the fields the Rust types accept, and
    /// requires exactly the ones that have no default.
    #[test]
    fn schema_matches_the_rust_types() {
        let schema: Value = serde_json::from_str(include_str!("../../../schemas/review_dossier.schema.json")).unwrap();
        let full_finding = Finding {
            id: "f".into(),
            severity: "low".into(),
            blocks_completion: false,
            status: Some("open".into()),
            category: Some(String::new()),
            confidence: Some("low".into()),
            location: Some(Location { path: "p".into(), line: Some(1) }),
            evidence: Some(String::new()),
            impact: Some(String::new()),
            reproducer: Some(String::new()),
            suggested_fix: Some(String::new()),
            validation: Some(String::new()),
            related_spec: Some(String::new()),
            review_pass: Some(String::new()),
            summary: Some(String::new()),
        };
        let full = Dossier {
            verdict: "pass".into(),
            mode: "discover".into(),
            summary: "s".into(),
            findings: vec![full_finding],
            attack_log: vec![Attack {
                target: "t".into(),
                attack: "a".into(),
                result: "clean".into(),
                notes: Some(String::new()),
            }],
            budget: Budget::default(),
            provider: Some(String::new()),
            model: Some(String::new()),
            session_id: Some(String::new()),
            output_format: Some(String::new()),
            normalizations: vec![String::new()],
            event_summary: Some(Default::default()),
        };
        let value = serde_json::to_value(&full).unwrap();
        assert_eq!(keys(&schema["properties"]), keys(&value));
        assert_eq!(keys(&schema["$defs"]["finding"]["properties"]), keys(&value["findings"][0]));
        assert_eq!(keys(&schema["$defs"]["location"]["properties"]), keys(&value["findings"][0]["location"]));
        assert_eq!(keys(&schema["$defs"]["attack"]["properties"]), keys(&value["attack_log"][0]));
        assert_eq!(keys(&schema["$defs"]["budget"]["properties"]), keys(&value["budget"]));
        // Required = what fails to parse when missing.
        for (path, sample) in
            [("", value.clone()), ("finding", value["findings"][0].clone()), ("attack", value["attack_log"][0].clone())]
        {
            let required = if path.is_empty() { &schema["required"] } else { &schema["$defs"][path]["required"] };
            let required: BTreeSet<String> =
                required.as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
            for key in keys(&sample) {
                let mut reduced = value.clone();
                let target = match path {
                    "" => &mut reduced,
                    "finding" => &mut reduced["findings"][0],
                    _ => &mut reduced["attack_log"][0],
                };
                target.as_object_mut().unwrap().remove(&key);
                let parses = serde_json::from_value::<Dossier>(reduced).is_ok();
                assert_eq!(
                    !parses,
                    required.contains(&key),
                    "{path}.{key}: required in schema = {}",
                    required.contains(&key)
                );
            }
        }
    }
}
