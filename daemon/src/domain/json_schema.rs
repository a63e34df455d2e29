//! The part of JSON Schema (draft 2020-12) the bundled reviewer schemas speak, checked against
//! a value read from a reviewer: the dossier schema file itself is what a dossier is held to, so
//! the Rust checks cannot drift from it. Each problem names the JSON path (`findings[0].
//! location.line`) and says what the schema wants in its own words (a string, an integer).

use serde_json::Value;

/// The keywords this checker enforces. A schema holding any keyword outside these and
/// [`ANNOTATIONS`] would not be checked in full: a test holds the bundled schema to them.
pub const ENFORCED: [&str; 11] = [
    "type",
    "enum",
    "minLength",
    "minimum",
    "minItems",
    "required",
    "properties",
    "additionalProperties",
    "items",
    "$ref",
    "$defs",
];

/// Keywords that say something about a schema and constrain nothing.
pub const ANNOTATIONS: [&str; 4] = ["$schema", "$id", "title", "description"];

/// Every way `value` breaks `schema` (a part of `root`, which `$ref`s are resolved in), each
/// naming where: `path` is the value's place (empty for the whole document, which is called
/// `whole`). Empty when it conforms.
pub fn problems(root: &Value, schema: &Value, value: &Value, path: &str, whole: &str) -> Vec<String> {
    let mut found = Vec::new();
    check(root, schema, value, path, whole, &mut found);
    found
}

/// Whether `value` is an integer as JSON Schema counts one: a number with no fraction (`1.0`
/// is one).
pub fn is_integer(value: &Value) -> bool {
    value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.is_finite() && f.fract() == 0.0)
}

/// `value` with every number that is a whole float (`1.0`) written as an integer (`1`), so a
/// value the schema accepts reads into the Rust types.
pub fn whole_numbers(value: Value) -> Value {
    match value {
        Value::Number(n) if !n.is_i64() && !n.is_u64() => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && (0.0..u64::MAX as f64).contains(&f) => Value::from(f as u64),
            Some(f) if f.fract() == 0.0 && (i64::MIN as f64..0.0).contains(&f) => Value::from(f as i64),
            _ => Value::Number(n),
        },
        Value::Array(items) => Value::Array(items.into_iter().map(whole_numbers).collect()),
        Value::Object(map) => Value::Object(map.into_iter().map(|(k, v)| (k, whole_numbers(v))).collect()),
        other => other,
    }
}

fn check(root: &Value, schema: &Value, value: &Value, path: &str, whole: &str, found: &mut Vec<String>) {
    let at = if path.is_empty() { whole } else { path };
    if let Some(target) = schema.get("$ref").and_then(Value::as_str) {
        match resolve(root, target) {
            Some(referred) => check(root, referred, value, path, whole, found),
            None => found.push(format!("{at}: the schema refers to {target}, which it does not hold")),
        }
    }
    if let Some(wanted) = schema.get("type") {
        let kinds: Vec<&str> = match wanted {
            Value::String(kind) => vec![kind.as_str()],
            Value::Array(kinds) => kinds.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !kinds.iter().any(|kind| is_kind(value, kind)) {
            let named: Vec<String> = kinds.iter().map(|k| article(k)).collect();
            found.push(format!("{at} must be {} (got {})", named.join(" or "), shown(value)));
            return;
        }
    }
    if let Some(Value::Array(allowed)) = schema.get("enum")
        && !allowed.contains(value)
    {
        let words: Vec<String> =
            allowed.iter().map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string)).collect();
        found.push(format!("{at} must be one of {} (got {})", words.join(", "), shown(value)));
        return;
    }
    if let (Some(least), Some(text)) = (schema.get("minLength").and_then(Value::as_u64), value.as_str())
        && (text.chars().count() as u64) < least
    {
        found.push(if least == 1 {
            format!("{at} must not be empty")
        } else {
            format!("{at} must be at least {least} characters long")
        });
    }
    if let (Some(least), Some(number)) = (schema.get("minimum").and_then(Value::as_f64), value.as_f64())
        && number < least
    {
        found.push(format!("{at} must be at least {least} (got {value})"));
    }
    if let (Some(least), Some(items)) = (schema.get("minItems").and_then(Value::as_u64), value.as_array())
        && (items.len() as u64) < least
    {
        found.push(format!("{at} needs at least {least} {}", if least == 1 { "entry" } else { "entries" }));
    }
    if let (Some(item_schema), Some(items)) = (schema.get("items"), value.as_array()) {
        for (i, item) in items.iter().enumerate() {
            check(root, item_schema, item, &format!("{path}[{i}]"), whole, found);
        }
    }
    if let Some(object) = value.as_object() {
        let member = |key: &str| if path.is_empty() { key.to_string() } else { format!("{path}.{key}") };
        if let Some(Value::Array(required)) = schema.get("required") {
            for key in required.iter().filter_map(Value::as_str) {
                if !object.contains_key(key) {
                    found.push(format!("{} is missing (the schema requires it)", member(key)));
                }
            }
        }
        let properties = schema.get("properties").and_then(Value::as_object);
        for (key, member_value) in object {
            match (properties.and_then(|p| p.get(key)), schema.get("additionalProperties")) {
                (Some(property), _) => check(root, property, member_value, &member(key), whole, found),
                (None, Some(Value::Bool(false))) => found.push(format!("{at}: unknown field `{key}`")),
                (None, Some(extra @ Value::Object(_))) => check(root, extra, member_value, &member(key), whole, found),
                (None, _) => {}
            }
        }
    }
}

/// The part of `root` a local reference (`#/$defs/finding`) names.
pub fn resolve<'a>(root: &'a Value, target: &str) -> Option<&'a Value> {
    root.pointer(target.strip_prefix('#')?)
}

fn is_kind(value: &Value, kind: &str) -> bool {
    match kind {
        "string" => value.is_string(),
        "integer" => is_integer(value),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "null" => value.is_null(),
        _ => false,
    }
}

fn article(kind: &str) -> String {
    match kind {
        "integer" | "object" | "array" => format!("an {kind}"),
        "null" => "null".to_string(),
        _ => format!("a {kind}"),
    }
}

/// A value as a problem shows it: its JSON kind, and a short value in full.
fn shown(value: &Value) -> String {
    let short = |text: String| {
        if text.chars().count() > 40 { format!("{}…", text.chars().take(40).collect::<String>()) } else { text }
    };
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {}", short(Value::String(s.clone()).to_string())),
        Value::Array(_) => "an array".to_string(),
        Value::Object(_) => "an object".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["a"],
            "properties": {
                "a": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/item"}},
                "b": {"enum": ["x", "y"]},
                "c": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}}
            },
            "$defs": {"item": {"type": "object", "required": ["p"], "properties": {
                "p": {"type": "string", "minLength": 1}, "n": {"type": "integer", "minimum": 1}}}}
        })
    }

    fn check(value: Value) -> Vec<String> {
        let root = schema();
        problems(&root, &root, &value, "", "the document")
    }

    #[test]
    fn each_problem_names_its_path_and_the_schema_type() {
        assert_eq!(check(json!({"a": [{"p": "f", "n": 1.0}]})), Vec::<String>::new());
        let cases = [
            (json!([]), "the document must be an object (got an array)"),
            (json!({}), "a is missing (the schema requires it)"),
            (json!({"a": []}), "a needs at least 1 entry"),
            (json!({"a": [{"p": ""}]}), "a[0].p must not be empty"),
            (json!({"a": [{"p": "f", "n": 0}]}), "a[0].n must be at least 1 (got 0)"),
            (json!({"a": [{"p": "f", "n": "7"}]}), "a[0].n must be an integer (got the string \"7\")"),
            (json!({"a": [{"p": "f", "n": 1.5}]}), "a[0].n must be an integer (got the number 1.5)"),
            (json!({"a": [{"p": null}]}), "a[0].p must be a string (got null)"),
            (json!({"a": [[]]}), "a[0] must be an object (got an array)"),
            (json!({"a": [{"p": "f"}], "b": "z"}), "b must be one of x, y (got the string \"z\")"),
            (json!({"a": [{"p": "f"}], "b": null}), "b must be one of x, y (got null)"),
            (json!({"a": [{"p": "f"}], "c": {"k": -1}}), "c.k must be at least 0 (got -1)"),
            (json!({"a": [{"p": "f"}], "d": 1}), "the document: unknown field `d`"),
        ];
        for (value, expected) in cases {
            let found = check(value.clone());
            assert!(found.iter().any(|p| p == expected), "{value}: {expected:?} not in {found:?}");
        }
    }

    #[test]
    fn whole_floats_read_as_integers() {
        assert_eq!(whole_numbers(json!({"a": [1.0, 2.5, -3.0, "4.0"]})), json!({"a": [1, 2.5, -3, "4.0"]}));
        assert!(is_integer(&json!(1.0)) && !is_integer(&json!(1.5)) && !is_integer(&json!("1")));
    }
}
