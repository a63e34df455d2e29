//! `scafld mcp submit-review`: a minimal MCP server on stdio (line-delimited JSON-RPC) that
//! offers one tool, `submit_review`, and relays each call to the daemon, which validates the
//! dossier against the running review. Invalid submissions come back as tool errors so the
//! reviewer can fix them (a `submit_harden` answer whose anchors do not hold is one); once one is accepted, the same answer again counts once and a
//! different one leaves the review with no verdict (the daemon decides). The server always answers the
//! handshake: when no daemon answers, a call returns a tool error saying so, so the model and
//! the provider's log show why nothing was submitted. It speaks JSON-RPC 2.0 as MCP does: a
//! response or a notification is never answered, a request that is not valid JSON-RPC (no
//! `"jsonrpc": "2.0"`, no method, an id that is not a string or an integer) is refused -32600,
//! nothing but `ping` is served before `initialize`, and `initialize` answers the client's
//! protocol version when it is one this server speaks.

use std::io::{BufRead, Read, Write};

use scafld_client::Connection;
use scafld_protocol::methods::{ReviewSubmit, SubmitParams};
use serde_json::{Value, json};

use crate::cli::Context;
use crate::cli::exit::workflow;
use crate::cli::output::CliError;

/// The MCP versions this server speaks, newest first: the client's is answered when it is one of
/// them, else the newest (MCP's version negotiation; the client then decides whether to go on).
const PROTOCOL_VERSIONS: [&str; 3] = ["2025-06-18", "2025-03-26", "2024-11-05"];
/// The longest request line read: a dossier is far smaller (reviewer answers are capped at 8 MiB).
const MAX_LINE_BYTES: u64 = 16 << 20;
/// Serve `submit_review` for `answer`: `dossier` (the review gate) or `template` (a template
/// review's verdict, summary and findings).
pub fn submit_review(ctx: &Context, token: &str, answer: &str) -> Result<u8, CliError> {
    let answer_kind = answer;
    let (schema, what, tool) = match answer {
        "template" => (scafld_protocol::schemas::template_answer(), "template review answer", "submit_review"),
        "harden" => (scafld_protocol::schemas::harden_dossier(), "HardenDossier", "submit_harden"),
        _ => (scafld_protocol::schemas::provider_dossier(), "ReviewDossier", "submit_review"),
    };
    // Only a submission reaches the daemon: with no socket the environment names, each is
    // refused saying so (the server itself still answers).
    let socket = ctx.paths().map(|paths| paths.socket.clone());
    let mut daemon: Option<Connection> = None;
    let mut stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    let mut line = Vec::new();
    let mut initialized = false;
    loop {
        line.clear();
        // A line past the cap is read to its end and refused; the next one is served.
        match (&mut stdin).take(MAX_LINE_BYTES + 1).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) if line.len() as u64 > MAX_LINE_BYTES && line.last() != Some(&b'\n') => {
                let _ = stdin.skip_until(b'\n');
                reply(&mut stdout, parse_error(format!("a request is at most {MAX_LINE_BYTES} bytes")));
                continue;
            }
            Ok(_) => {}
        }
        if line.trim_ascii().is_empty() {
            continue;
        }
        let Ok(line) = std::str::from_utf8(&line) else {
            reply(&mut stdout, parse_error("a request is UTF-8 text".into()));
            continue;
        };
        let Ok(message) = serde_json::from_str::<Value>(line) else {
            reply(&mut stdout, parse_error("not JSON".into()));
            continue;
        };
        // Read strictly too: a key given twice (`"verdict"` twice in a dossier) reads two ways and
        // is refused, never taken as its last copy (the lenient read above only finds the id).
        let repeated = scafld_protocol::json::from_str(line).err().filter(scafld_protocol::json::is_repeated_key);
        let (id, method) = match incoming(&message) {
            Incoming::Request { id, method } => (id, method),
            // Never answered: a notification needs none, and JSON-RPC forbids answering a response.
            Incoming::Notification | Incoming::Response => continue,
            Incoming::Invalid { id, why } => {
                reply(&mut stdout, json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32600, "message": why}}));
                continue;
            }
        };
        // MCP's lifecycle: nothing but a ping is served before the handshake.
        if !initialized && !matches!(method, "initialize" | "ping") {
            let why = "not initialized: send `initialize` first";
            reply(&mut stdout, json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32600, "message": why}}));
            continue;
        }
        initialized |= method == "initialize";
        let result = match method {
            "initialize" => Ok(json!({
                "protocolVersion": protocol_version(&message["params"]["protocolVersion"]),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "scafld-review-submit", "version": env!("CARGO_PKG_VERSION")},
            })),
            "ping" => Ok(json!({})),
            "tools/list" => Ok(json!({"tools": [{
                "name": tool,
                "description": format!("Submit your one final {what}. Call exactly once, after your review is complete."),
                "inputSchema": schema,
            }]})),
            _ if repeated.is_some() && method == "tools/call" => Ok(json!({
                "content": [{"type": "text", "text": format!(
                    "submission refused: it reads two ways: {}; give each key once",
                    repeated.as_ref().map(ToString::to_string).unwrap_or_default()
                )}],
                "isError": true,
            })),
            _ if repeated.is_some() => Err((-32600, "a key is given twice in the request")),
            "tools/call" if message["params"]["name"] == tool => {
                let dossier = message["params"]["arguments"].clone();
                if daemon.is_none() {
                    daemon = socket.as_ref().ok().and_then(|socket| Connection::connect(socket).ok());
                }
                let params = SubmitParams { token: token.to_string(), dossier };
                let answer = match daemon.as_mut() {
                    Some(conn) => conn.call::<ReviewSubmit>(&params).map_err(|e| {
                        daemon = None; // reconnect on the next call
                        e.to_string()
                    }),
                    None => Err(match &socket {
                        Ok(socket) => {
                            format!("no scafld daemon answers at {}; the review cannot be recorded", socket.display())
                        }
                        Err(e) => format!(
                            "{}; the review cannot be recorded ({})",
                            e.message,
                            e.hint.as_deref().unwrap_or_default()
                        ),
                    }),
                };
                match answer {
                    // A harden answer's "verdict" is what the round comes to as it stands.
                    Ok(r) if r.accepted && answer_kind == "harden" => Ok(json!({
                        "content": [{"type": "text", "text": format!(
                            "harden answer submitted: as it stands the round is {} (scafld records it when your run ends)",
                            r.verdict
                        )}],
                        "structuredContent": {"ok": true, "status": r.verdict},
                    })),
                    Ok(r) if r.accepted => Ok(json!({
                        "content": [{"type": "text", "text": format!("review submitted: verdict {}", r.verdict)}],
                        "structuredContent": {"ok": true, "verdict": r.verdict},
                    })),
                    Ok(r) => Ok(json!({
                        "content": [{"type": "text", "text": format!("submission refused:\n- {}", r.problems.join("\n- "))}],
                        "isError": true,
                    })),
                    Err(e) => Ok(
                        json!({"content": [{"type": "text", "text": format!("scafld daemon: {e}")}], "isError": true}),
                    ),
                }
            }
            "tools/call" => Err((-32602, "unknown tool; there is one submit tool (see tools/list)")),
            _ => Err((-32601, "method not found")),
        };
        let message = match result {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err((code, text)) => json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": text}}),
        };
        reply(&mut stdout, message);
    }
    Ok(workflow::OK)
}

/// The version `initialize` answers for the one the client asked.
fn protocol_version(asked: &Value) -> &'static str {
    PROTOCOL_VERSIONS.into_iter().find(|v| asked.as_str() == Some(v)).unwrap_or(PROTOCOL_VERSIONS[0])
}

/// What one JSON value read from the client is, as JSON-RPC 2.0 and MCP read it.
enum Incoming<'a> {
    Request {
        id: Value,
        method: &'a str,
    },
    Notification,
    /// An answer to a request (this server sends none): never answered back.
    Response,
    /// Not a valid request: answered -32600 by its id when it has a usable one, else id null.
    Invalid {
        id: Value,
        why: String,
    },
}

fn incoming(message: &Value) -> Incoming<'_> {
    let Some(members) = message.as_object() else {
        let why = if message.is_array() { "batches are not supported" } else { "a request is a JSON object" };
        return Incoming::Invalid { id: Value::Null, why: why.into() };
    };
    let method = members.get("method");
    if method.is_none() && (members.contains_key("result") || members.contains_key("error")) {
        return Incoming::Response;
    }
    // MCP: an id is a string or an integer, never null.
    let id = members.get("id");
    let usable_id = id.filter(|id| id.is_string() || id.is_i64() || id.is_u64()).cloned();
    let invalid = |why: String| Incoming::Invalid { id: usable_id.clone().unwrap_or(Value::Null), why };
    if members.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid("Invalid Request: no \"jsonrpc\": \"2.0\" member".into());
    }
    let Some(method) = method.and_then(Value::as_str) else {
        return invalid("Invalid Request: no \"method\" string".into());
    };
    match id {
        None => Incoming::Notification,
        Some(_) if usable_id.is_none() => invalid("Invalid Request: an id is a string or an integer".into()),
        Some(_) => Incoming::Request { id: usable_id.unwrap_or_default(), method },
    }
}

/// JSON-RPC's answer to a line that is not a request it can read: it has no id to answer.
fn parse_error(why: String) -> Value {
    json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": format!("parse error: {why}")}})
}

fn reply(out: &mut impl Write, message: Value) {
    let _ = writeln!(out, "{message}");
    let _ = out.flush();
}
