//! The JSON Schemas of the documents reviewers hand in, as the wire contract carries them (the
//! files live in `schemas/`; tests check them against the Rust types).

use serde_json::{Value, json};

/// `schemas/review_dossier.schema.json`: the review gate's dossier.
pub const REVIEW_DOSSIER: &str = include_str!("../../schemas/review_dossier.schema.json");
/// `schemas/review_result.schema.json`: a template review's result.
pub const REVIEW_RESULT: &str = include_str!("../../schemas/review_result.schema.json");

pub fn review_dossier() -> Value {
    serde_json::from_str(REVIEW_DOSSIER).expect("the bundled dossier schema is JSON")
}

/// Dossier fields scafld fills in itself once a reviewer has answered (provenance); a model is
/// never asked for them.
pub const PROVENANCE_FIELDS: [&str; 6] =
    ["provider", "model", "session_id", "output_format", "normalizations", "event_summary"];

/// The dossier as a reviewer is asked for it (the MCP tool's input schema, the packet): the six
/// fields a reviewer answers, without the `$schema`/`$id` identifiers that some clients refuse
/// or choke on.
pub fn provider_dossier() -> Value {
    let mut schema = review_dossier();
    if let Some(object) = schema.as_object_mut() {
        object.remove("$schema");
        object.remove("$id");
        if let Some(Value::Object(properties)) = object.get_mut("properties") {
            for field in PROVENANCE_FIELDS {
                properties.remove(field);
            }
        }
    }
    schema
}

/// The HardenDossier a delegated harden round answers with (the `submit_harden` tool's input,
/// and codex's output schema): the task's shape and one observation per dimension.
pub fn harden_dossier() -> Value {
    let text = |description: &str| json!({"type": "string", "description": description});
    let list = |description: &str| json!({"type": "array", "items": {"type": "string"}, "description": description});
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["summary", "shape", "observations"],
        "properties": {
            "summary": text("What the draft is, in a sentence or two."),
            "shape": {
                "type": "object",
                "additionalProperties": false,
                "required": ["decision", "true_shape", "minimal_plan", "shared_owner", "adapter_boundaries", "required_spec_edits"],
                "properties": {
                    "decision": {"type": "string", "enum": ["keep", "shrink", "reframe", "reject"]},
                    "true_shape": text("What the task really is."),
                    "minimal_plan": text("The smallest plan that does it."),
                    "shared_owner": text("Who else owns what it touches (empty when no one)."),
                    "adapter_boundaries": list("Boundaries it must cross through an adapter."),
                    "required_spec_edits": list("Edits the spec needs before approval."),
                },
            },
            "observations": {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["dimension", "result", "anchor", "note", "question", "recommended", "status"],
                    "properties": {
                        "dimension": {"type": "string", "enum": ["design", "scope", "path", "command", "timing", "rollback"]},
                        "result": {"type": "string", "enum": ["clean", "advisory", "blocks", "n/a"]},
                        "anchor": text("spec_gap:<what the spec leaves open>, code:<path>:<line> (a real line) or archive:<task-id>."),
                        "note": text("What was found."),
                        "question": text("What the author must answer (empty when nothing)."),
                        "recommended": text("The recommended answer or change."),
                        // Optional (nullable in codex's strict form), as in the original's schema.
                        "if_unanswered": text("What happens if the question goes unanswered (empty when nothing)."),
                        "default": text("The answer taken when no one answers (empty when none)."),
                        "status": {"type": ["string", "null"], "enum": ["open", "fixed", "accepted_risk", "superseded", null]},
                    },
                },
            },
        },
    })
}

/// What a template reviewer answers (verdict, summary, findings); scafld adds the rest of the
/// ReviewResult.
pub fn template_answer() -> Value {
    let full: Value = serde_json::from_str(REVIEW_RESULT).expect("the bundled result schema is JSON");
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["verdict", "summary", "findings"],
        "properties": {
            "verdict": {"type": "string", "enum": ["PASS", "CONCERNS", "FAIL"]},
            "summary": full["properties"]["summary"],
            "findings": {"type": "array", "items": full["$defs"]["finding"]},
        },
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::methods::{TemplateFinding, TemplateReviewResult};

    fn keys(value: &Value) -> BTreeSet<String> {
        value.as_object().unwrap().keys().cloned().collect()
    }

    fn required(value: &Value) -> BTreeSet<String> {
        value.as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect()
    }

    /// `schemas/review_result.schema.json` names exactly the fields of `TemplateReviewResult`
    /// and requires exactly those without a default.
    #[test]
    fn review_result_schema_matches_the_rust_types() {
        let schema: Value = serde_json::from_str(REVIEW_RESULT).unwrap();
        let full = TemplateReviewResult {
            verdict: crate::vocab::TemplateVerdict::Pass,
            summary: "s".into(),
            findings: vec![TemplateFinding {
                severity: crate::vocab::TemplateSeverity::Pass,
                title: "t".into(),
                description: "d".into(),
                file: Some("a.rs:1".into()),
                reviewer: Some("codex".into()),
            }],
            raw_output: "r".into(),
            template: "code".into(),
            inputs: [("diff".to_string(), "main".to_string())].into(),
            timestamp: "2026-11-22T00:00:00Z".into(),
            provider: "codex".into(),
            model: Some("m".into()),
            session_key: "k".into(),
            has_failures: false,
            concern_count: 0,
        };
        let value = serde_json::to_value(&full).unwrap();
        assert_eq!(keys(&schema["properties"]), keys(&value));
        assert_eq!(keys(&schema["$defs"]["finding"]["properties"]), keys(&value["findings"][0]));
        for key in keys(&value) {
            let mut reduced = value.clone();
            reduced.as_object_mut().unwrap().remove(&key);
            let parses = serde_json::from_value::<TemplateReviewResult>(reduced).is_ok();
            assert_eq!(!parses, required(&schema["required"]).contains(&key), "top-level `{key}`");
        }
        for key in keys(&value["findings"][0]) {
            let mut reduced = value["findings"][0].clone();
            reduced.as_object_mut().unwrap().remove(&key);
            let parses = serde_json::from_value::<TemplateFinding>(reduced).is_ok();
            assert_eq!(!parses, required(&schema["$defs"]["finding"]["required"]).contains(&key), "finding `{key}`");
        }
        let answer = template_answer();
        assert_eq!(required(&answer["required"]), ["verdict", "summary", "findings"].map(String::from).into());
    }
}
