//! The language server's stdio transport: LSP frames (`Content-Length` headers, a JSON body)
//! read by one thread and written by another. Unlike lsp-server's own stdio threads, which end
//! on the first body that is not a message (and the server with them, silently, as if the
//! editor had gone), a bad body is answered as JSON-RPC says (-32700 Parse error, -32600
//! Invalid Request: a batch, no `"jsonrpc": "2.0"`, an id that is neither an integer nor a string, no
//! message's members; id null unless the body names a valid one) and reading goes on; bytes
//! that are not UTF-8 are read as U+FFFD, with a warning, rather than refusing an editor's
//! buffer as it is typed. A frame that
//! cannot be delimited (a header line that is not `Name: value`, no `Content-Length` or more
//! than one) ends
//! reading with the reason: past it no byte of the stream can be trusted to start a message,
//! and a guess could run an editor's text as a command, so the server exits non-zero instead.

use std::io::{BufRead, Read, Write};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, select};
use lsp_server::{Connection, ErrorCode, Message};
use lsp_types::MessageType;
use serde_json::{Value, json};

/// Longest header line read (`Content-Length: 123` and its kind need a few dozen bytes).
const MAX_HEADER_LINE: u64 = 4096;

/// How long the reader waits for its last word (why it stopped) to be written before the
/// server exits: the editor may have stopped reading.
const LAST_WORD_WAIT: Duration = Duration::from_secs(1);

/// What the reader thread writes itself (lsp-server's `Message` has no reply with id null):
/// a JSON body, and who waits for it to be written.
struct Raw {
    body: Value,
    written: Option<Sender<()>>,
}

/// Why the editor's input ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputEnd {
    /// Closed at a message boundary, or the `exit` notification was read.
    Closed,
    /// A frame could not be delimited (or the input ended inside one): the reason.
    Unframed(String),
}

/// The editor's stdio as an lsp-server [`Connection`], and the reader thread that says why
/// the input ended once `connection.receiver` is disconnected.
pub struct Stdio {
    pub connection: Connection,
    reader: JoinHandle<InputEnd>,
}

impl Stdio {
    /// Why the input ended; call once `connection.receiver` is disconnected (it waits for the
    /// reader thread otherwise).
    pub fn input_end(self) -> InputEnd {
        self.reader.join().unwrap_or_else(|_| InputEnd::Unframed("the reader thread panicked".into()))
    }
}

/// Serve LSP frames on stdin and stdout.
pub fn stdio() -> std::io::Result<Stdio> {
    let (to_editor, outgoing) = crossbeam_channel::bounded::<Message>(0);
    let (raw, raws) = crossbeam_channel::unbounded::<Raw>();
    let (to_server, incoming) = crossbeam_channel::bounded::<Message>(0);
    std::thread::Builder::new()
        .name("scafld-lsp-writer".into())
        .spawn(move || write_loop(&mut std::io::stdout(), &outgoing, &raws))?;
    let reader = std::thread::Builder::new()
        .name("scafld-lsp-reader".into())
        .spawn(move || read_loop(&mut std::io::stdin().lock(), &to_server, &raw))?;
    Ok(Stdio { connection: Connection { sender: to_editor, receiver: incoming }, reader })
}

/// Write every message as a frame until both channels are closed or the editor stops
/// reading.
fn write_loop(out: &mut impl Write, messages: &Receiver<Message>, raws: &Receiver<Raw>) {
    let (mut messages_open, mut raws_open) = (true, true);
    while messages_open || raws_open {
        let never_m = crossbeam_channel::never();
        let never_r = crossbeam_channel::never();
        let written = select! {
            recv(if messages_open { messages } else { &never_m }) -> message => match message {
                Ok(message) => message.write(out),
                Err(_) => { messages_open = false; Ok(()) }
            },
            recv(if raws_open { raws } else { &never_r }) -> raw => match raw {
                Ok(raw) => {
                    let written = write_frame(out, raw.body.to_string().as_bytes());
                    if let Some(waiting) = raw.written {
                        let _ = waiting.send(());
                    }
                    written
                }
                Err(_) => { raws_open = false; Ok(()) }
            },
        };
        if written.is_err() {
            return;
        }
    }
}

fn write_frame(out: &mut impl Write, body: &[u8]) -> std::io::Result<()> {
    write!(out, "Content-Length: {}\r\n\r\n", body.len())?;
    out.write_all(body)?;
    out.flush()
}

/// Read frames until the input ends: messages go to the server, bad bodies are refused (and
/// logged), and the reason reading stopped is returned.
fn read_loop(input: &mut impl BufRead, to_server: &Sender<Message>, raw: &Sender<Raw>) -> InputEnd {
    loop {
        let body = match read_frame(input) {
            Ok(Some(body)) => body,
            Ok(None) => return InputEnd::Closed,
            Err(why) => {
                // The server exits next: this is written before it does (or given up on).
                let (written, done) = crossbeam_channel::bounded(1);
                let message = format!("cannot read the editor's messages any more: {why}");
                if raw.send(Raw { body: log_error(&message), written: Some(written) }).is_ok() {
                    let _ = done.recv_timeout(LAST_WORD_WAIT);
                }
                return InputEnd::Unframed(why);
            }
        };
        // An editor may send a buffer's bytes as they are (Neovim does), some not UTF-8, which
        // is no JSON: read with each such byte replaced (U+FFFD), so the buffer is still checked
        // as it is typed, and say so once per message.
        let body = match String::from_utf8(body) {
            Ok(text) => text.into_bytes(),
            Err(invalid) => {
                let at = invalid.utf8_error().valid_up_to();
                let note = format!(
                    "a message held bytes that are not UTF-8 (from byte {at}): read with each replaced by U+FFFD; a spec saved with them does not read as one"
                );
                let _ = raw.send(Raw { body: log_warning(&note), written: None });
                String::from_utf8_lossy(invalid.as_bytes()).into_owned().into_bytes()
            }
        };
        match parse(&body) {
            Ok(message) => {
                let exit = matches!(&message, Message::Notification(n) if n.method == "exit");
                if to_server.send(message).is_err() || exit {
                    return InputEnd::Closed;
                }
            }
            Err(refusal) => {
                let message = format!("refused a message: {}", refusal.message);
                let _ = raw.send(Raw { body: log_error(&message), written: None });
                if let Some(reply) = refusal.reply {
                    let _ = raw.send(Raw { body: reply, written: None });
                }
            }
        }
    }
}

/// `message` on stderr (an error: worth the editor's attention) and as the body of a
/// `window/logMessage` of type error.
fn log_error(message: &str) -> Value {
    eprintln!("scafld lsp: {}", crate::terminal::terminal_safe(message, false));
    json!({"jsonrpc": "2.0", "method": "window/logMessage", "params": {"type": MessageType::ERROR, "message": message}})
}

/// `message` as the body of a `window/logMessage` of type warning.
fn log_warning(message: &str) -> Value {
    json!({"jsonrpc": "2.0", "method": "window/logMessage", "params": {"type": MessageType::WARNING, "message": message}})
}

/// One frame's body; `None` when the input ended cleanly before it; the reason it cannot be
/// delimited otherwise.
fn read_frame(input: &mut impl BufRead) -> Result<Option<Vec<u8>>, String> {
    let mut length: Option<u64> = None;
    let mut first = true;
    loop {
        let mut line = Vec::new();
        input.by_ref().take(MAX_HEADER_LINE).read_until(b'\n', &mut line).map_err(|e| e.to_string())?;
        if line.is_empty() {
            return if first { Ok(None) } else { Err("the input ended inside a message's headers".into()) };
        }
        first = false;
        let Some(text) = line.strip_suffix(b"\n") else {
            return Err(if line.len() as u64 >= MAX_HEADER_LINE {
                format!("a header line longer than {MAX_HEADER_LINE} bytes")
            } else {
                "the input ended inside a message's headers".into()
            });
        };
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        if text.is_empty() {
            break;
        }
        let text = String::from_utf8_lossy(text);
        let Some((name, value)) = text.split_once(':') else {
            return Err(format!("a header line that is not `Name: value`: {:?}", shorten(&text)));
        };
        if name.trim().eq_ignore_ascii_case("Content-Length") {
            // A second one, even of the same value: which one delimits the body is a guess.
            if length.is_some() {
                return Err("a message with more than one Content-Length header".into());
            }
            let value = value.trim();
            length = Some(
                value.parse().map_err(|_| format!("a Content-Length that is not a number: {:?}", shorten(value)))?,
            );
        }
    }
    let length = length.ok_or("a message without a Content-Length header")?;
    // Grown as the bytes arrive: a claimed length the editor never sends costs nothing.
    let mut body = Vec::with_capacity(length.min(1 << 20) as usize);
    input.by_ref().take(length).read_to_end(&mut body).map_err(|e| e.to_string())?;
    if (body.len() as u64) < length {
        return Err(format!("the input ended {} bytes into a {length}-byte message", body.len()));
    }
    Ok(Some(body))
}

/// A header quoted in a reason: its first 80 characters.
fn shorten(text: &str) -> String {
    text.chars().take(80).collect()
}

/// A body that is not a message: what to tell the log, and the error reply (none for what
/// reads as a response: JSON-RPC never answers those).
#[derive(Debug)]
struct Refusal {
    message: String,
    reply: Option<Value>,
}

/// The members of a body that decide whether it is a JSON-RPC 2.0 message at all, read before
/// lsp-server's `Message` sees it: that type ignores `jsonrpc`, and reads a request whose `id`
/// it cannot hold (an object, an array, `1.5`, `null`) as a notification, which would drop it
/// unanswered or act on it. A member that is there as `null` is `Some(Value::Null)`.
#[derive(serde::Deserialize)]
struct Envelope {
    #[serde(default, deserialize_with = "present")]
    jsonrpc: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    method: Option<serde::de::IgnoredAny>,
    #[serde(default, deserialize_with = "present")]
    result: Option<serde::de::IgnoredAny>,
    #[serde(default, deserialize_with = "present")]
    error: Option<serde::de::IgnoredAny>,
}

/// A member that is there, `null` included (serde's `Option` reads `null` as absent).
fn present<'de, D: serde::Deserializer<'de>, T: serde::Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// What an `id` member is, as LSP reads it (`integer | string`, an integer being 32 bits).
enum Id {
    /// An integer or a string: answered by it.
    Valid(Value),
    /// A JSON-RPC id LSP has no room for (an integer past 32 bits): refused, but answered by
    /// it, so the editor can tell which request was refused.
    Unserved(Value),
    /// Not an id at all (`null`, an object, an array, a boolean, a number with a fraction or an
    /// exponent): refused with id null, as JSON-RPC says when the id cannot be told.
    Invalid,
}

fn id_of(id: &Value) -> Id {
    match id {
        Value::String(_) => Id::Valid(id.clone()),
        Value::Number(n) if n.as_i64().is_some_and(|n| i32::try_from(n).is_ok()) => Id::Valid(id.clone()),
        Value::Number(n) if n.is_i64() || n.is_u64() => Id::Unserved(id.clone()),
        _ => Id::Invalid,
    }
}

fn parse(body: &[u8]) -> Result<Message, Refusal> {
    let reply = |code: ErrorCode, id: Value, message: &str| {
        Some(json!({"jsonrpc": "2.0", "id": id, "error": {"code": code as i32, "message": message}}))
    };
    // A batch (an array of messages), which LSP does not have, refused as one: serde would read
    // an array into `Envelope` member by member, its first element taken for `jsonrpc`.
    if body.trim_ascii_start().starts_with(b"[")
        && let Ok(Value::Array(batch)) = serde_json::from_slice::<Value>(body)
    {
        let message = format!(
            "Invalid Request: a JSON-RPC batch (an array of {} message(s)), which LSP does not support: send each message in a frame of its own",
            batch.len()
        );
        return Err(Refusal { reply: reply(ErrorCode::InvalidRequest, Value::Null, &message), message });
    }
    let envelope = match serde_json::from_slice::<Envelope>(body) {
        Ok(envelope) => envelope,
        Err(invalid) => {
            let value = match serde_json::from_slice::<Value>(body) {
                Ok(value) => value,
                Err(e) => {
                    let message = format!("Parse error: a {}-byte body that is not JSON ({e})", body.len());
                    return Err(Refusal { reply: reply(ErrorCode::ParseError, Value::Null, &message), message });
                }
            };
            // JSON, but no object of members (a member given twice, a number).
            let message = format!("Invalid Request: not a JSON-RPC message ({invalid})");
            let id = match value.get("id").map(id_of) {
                Some(Id::Valid(id) | Id::Unserved(id)) => id,
                _ => Value::Null,
            };
            return Err(Refusal { reply: reply(ErrorCode::InvalidRequest, id, &message), message });
        }
    };
    let is_response = envelope.method.is_none() && (envelope.result.is_some() || envelope.error.is_some());
    let (id, bad_id) = match envelope.id.as_ref().map(id_of) {
        None => (Value::Null, None),
        Some(Id::Valid(id)) => (id, None),
        Some(Id::Unserved(id)) => (id, Some("an integer id outside the 32 bits LSP allows")),
        Some(Id::Invalid) => (Value::Null, Some("an id that is neither an integer nor a string")),
    };
    let refuse = |why: String| {
        let message = format!("Invalid Request: {why}");
        // A response is never answered, whatever is wrong with it.
        let reply = if is_response { None } else { reply(ErrorCode::InvalidRequest, id.clone(), &message) };
        Err(Refusal { message, reply })
    };
    if envelope.jsonrpc.as_ref().and_then(Value::as_str) != Some("2.0") {
        return refuse(match &envelope.jsonrpc {
            None => "no \"jsonrpc\": \"2.0\" member".into(),
            Some(other) => format!("\"jsonrpc\" is {}, not \"2.0\"", shorten(&other.to_string())),
        });
    }
    if let Some(why) = bad_id {
        return refuse(format!("{why} ({})", shorten(&envelope.id.unwrap_or_default().to_string())));
    }
    serde_json::from_slice::<Message>(body).or_else(|invalid| refuse(format!("not a JSON-RPC message ({invalid})")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(input: &[u8]) -> Vec<Result<Option<Vec<u8>>, String>> {
        let mut input = std::io::Cursor::new(input.to_vec());
        let mut out = Vec::new();
        loop {
            let frame = read_frame(&mut input);
            let done = !matches!(frame, Ok(Some(_)));
            out.push(frame);
            if done {
                return out;
            }
        }
    }

    #[test]
    fn frames_are_delimited_by_content_length_and_bad_headers_end_reading() {
        let two = b"Content-Length: 2\r\n\r\n{}content-length:3\nContent-Type: x\n\n[1]";
        assert_eq!(frames(two), vec![Ok(Some(b"{}".to_vec())), Ok(Some(b"[1]".to_vec())), Ok(None)]);
        let no_length = frames(b"Content-Type: x\r\n\r\n{}");
        assert_eq!(no_length, vec![Err("a message without a Content-Length header".into())]);
        assert!(frames(b"garbage\r\n\r\n")[0].as_ref().unwrap_err().contains("not `Name: value`"));
        assert!(frames(b"Content-Length: x\r\n\r\n")[0].as_ref().unwrap_err().contains("not a number"));
        for twice in [
            b"Content-Length: 2\r\ncontent-length: 3\r\n\r\n{}".as_slice(),
            b"Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
        ] {
            assert_eq!(frames(twice), vec![Err("a message with more than one Content-Length header".into())]);
        }
        assert!(frames(b"Content-Length: 10\r\n\r\n{}")[0].as_ref().unwrap_err().contains("2 bytes into a 10-byte"));
        let long = [b"X: ".as_slice(), &[b'a'; 5000]].concat();
        assert!(frames(&long)[0].as_ref().unwrap_err().contains("longer than 4096"));
    }

    #[test]
    fn bad_bodies_get_the_json_rpc_error_and_responses_get_none() {
        let truncated =
            parse(br#"{"jsonrpc": "2.0", "id": 99, "method": "textDocument/hover", "params": {"#).unwrap_err();
        let reply = truncated.reply.unwrap();
        assert_eq!((reply["id"].clone(), reply["error"]["code"].clone()), (Value::Null, json!(-32700)));
        let no_method = parse(br#"{"jsonrpc": "2.0", "id": "a", "method": 5}"#).unwrap_err();
        let reply = no_method.reply.unwrap();
        assert_eq!((reply["id"].clone(), reply["error"]["code"].clone()), (json!("a"), json!(-32600)));
        assert!(parse(br#"{"jsonrpc": "2.0", "id": {}, "result": 1}"#).unwrap_err().reply.is_none());
        assert!(parse(br#"{"id": 1, "result": 1}"#).unwrap_err().reply.is_none());
        assert!(parse(br#"{"jsonrpc": "2.0", "method": "initialized", "params": {}}"#).is_ok());
        let refused = |body: &[u8]| {
            let reply = parse(body).unwrap_err().reply.expect("a reply");
            assert_eq!(reply["error"]["code"], json!(-32600), "{reply}");
            reply["id"].clone()
        };
        for id in ["{}", "[1]", "1.5", "1.0", "1e2", "null", "true"] {
            let body = format!(r#"{{"jsonrpc": "2.0", "id": {id}, "method": "textDocument/hover", "params": {{}}}}"#);
            assert_eq!(refused(body.as_bytes()), Value::Null, "{body}");
        }
        assert_eq!(refused(br#"{"jsonrpc": "2.0", "id": 4294967296, "method": "shutdown"}"#), json!(4294967296u64));
        assert_eq!(refused(br#"{"id": 3, "method": "shutdown"}"#), json!(3));
        assert_eq!(refused(br#"{"jsonrpc": "1.0", "id": "x", "method": "shutdown"}"#), json!("x"));
        assert_eq!(refused(br#"{"jsonrpc": 2.0, "method": "initialized"}"#), Value::Null);
        assert_eq!(refused(br#"[{"jsonrpc": "2.0", "id": 1, "method": "shutdown"}]"#), Value::Null);
        for body in [
            br#"{"jsonrpc": "2.0", "id": 2147483647, "method": "shutdown"}"#.as_slice(),
            br#"{"jsonrpc": "2.0", "id": -2147483648, "method": "shutdown"}"#,
            br#"{"jsonrpc": "2.0", "id": "", "method": "shutdown"}"#,
        ] {
            assert!(matches!(parse(body), Ok(Message::Request(_))), "{}", String::from_utf8_lossy(body));
        }
    }

    /// A buffer's bytes that are not UTF-8 (Neovim sends them as they are) still make a message:
    /// each replaced by U+FFFD, with a warning; the next message is read as ever.
    #[test]
    fn a_message_with_bytes_that_are_not_utf8_is_read_with_them_replaced() {
        let body = b"{\"jsonrpc\":\"2.0\",\"method\":\"textDocument/didChange\",\"params\":{\"text\":\"a\xff\xfeb\"}}";
        let mut input = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
        input.extend_from_slice(body);
        input.extend_from_slice(
            b"Content-Length: 52\r\n\r\n{\"jsonrpc\":\"2.0\",\"method\":\"initialized\",\"params\":{}}",
        );
        let (to_server, messages) = crossbeam_channel::unbounded();
        let (raw, raws) = crossbeam_channel::unbounded();
        let end = read_loop(&mut std::io::Cursor::new(input), &to_server, &raw);
        assert!(matches!(end, InputEnd::Closed));
        let read: Vec<Message> = messages.try_iter().collect();
        match &read[..] {
            [Message::Notification(change), Message::Notification(next)] => {
                assert_eq!(change.params["text"], "a\u{fffd}\u{fffd}b");
                assert_eq!(next.method, "initialized");
            }
            other => panic!("{other:?}"),
        }
        let logged: Vec<Value> = raws.try_iter().map(|r| r.body).collect();
        assert_eq!(logged.len(), 1, "one warning, no refusal: {logged:?}");
        assert!(logged[0]["params"]["message"].as_str().unwrap().contains("not UTF-8 (from byte 70)"), "{logged:?}");
    }

    #[test]
    fn refusals_and_messages_are_written_as_whole_frames() {
        let (messages_tx, messages) = crossbeam_channel::unbounded();
        let (raw_tx, raws) = crossbeam_channel::unbounded();
        let (written, done) = crossbeam_channel::bounded(1);
        raw_tx.send(Raw { body: json!({"id": null}), written: Some(written) }).unwrap();
        messages_tx.send(lsp_server::Notification::new("x".into(), json!({})).into()).unwrap();
        drop((messages_tx, raw_tx));
        let mut out = Vec::new();
        write_loop(&mut out, &messages, &raws);
        assert_eq!(done.try_recv(), Ok(()), "the writer says when it wrote a raw body");
        let mut input = std::io::Cursor::new(out);
        let mut bodies = Vec::new();
        while let Ok(Some(body)) = read_frame(&mut input) {
            bodies.push(serde_json::from_slice::<Value>(&body).unwrap());
        }
        assert_eq!(bodies.len(), 2, "{bodies:?}");
    }
}
