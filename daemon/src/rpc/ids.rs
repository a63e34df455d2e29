//! Request ids jsonrpsee cannot carry, carried for it: swapped for a token before dispatch
//! and put back, byte for byte as the client wrote them, into the reply.
//!
//! JSON-RPC 2.0 lets an id be any string, number or null; jsonrpsee's `Id` holds null, a `u64`
//! and a string only. A request whose id is any other number (negative, fractional, past
//! `u64`, in exponent form) is dispatched under a token, a string of [`TOKEN_PREFIX`] and a
//! count unique on its connection. A client's string id that begins with the prefix is swapped
//! the same way, so whatever a client sends, no id reaching jsonrpsee can be taken for a token
//! but the token itself.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use jsonrpsee::types::Id;
use serde::Deserialize;
use serde::de::{MapAccess, Visitor};
use serde_json::value::RawValue;

/// What every token begins with; a client's string id beginning with it is swapped too.
pub const TOKEN_PREFIX: &str = "scafld-transport-id:";

/// Whether `id`, as jsonrpsee read it, is in the tokens' namespace (and so must be swapped).
pub fn reserved(id: &Id<'_>) -> bool {
    matches!(id, Id::Str(text) if text.starts_with(TOKEN_PREFIX))
}

/// Whether an id, as its JSON `raw` was written, must be swapped: a number jsonrpsee cannot
/// give back as written (anything but a `u64` in plain digits), or a string in the tokens'
/// namespace. Null and plain strings it carries; any other value is no id at all.
fn must_swap(raw: &RawValue) -> bool {
    let text = raw.get();
    match text.as_bytes().first() {
        Some(b'"') => serde_json::from_str::<String>(text).is_ok_and(|s| s.starts_with(TOKEN_PREFIX)),
        Some(b'-' | b'0'..=b'9') => !serde_json::from_str::<u64>(text).is_ok_and(|n| n.to_string() == text),
        _ => false,
    }
}

/// The members of a JSON object in the order written, duplicates kept, values unread.
struct Members<'a>(Vec<(String, &'a RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry::<String, &'de RawValue>()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(MembersVisitor)
    }
}

impl<'a> Members<'a> {
    fn of(json: &'a str) -> Option<Members<'a>> {
        serde_json::from_str(json).ok()
    }

    /// The value of the one `id` member; none when there is none or more than one.
    fn id(&self) -> Option<&'a RawValue> {
        let mut ids = self.0.iter().filter(|(key, _)| key == "id");
        match (ids.next(), ids.next()) {
            (Some((_, raw)), None) => Some(*raw),
            _ => None,
        }
    }

    /// The object again, its `id` written as `id`, every other value as it was.
    fn with_id(&self, id: &str) -> Option<Box<RawValue>> {
        let mut json = String::from("{");
        for (i, (key, raw)) in self.0.iter().enumerate() {
            if i > 0 {
                json.push(',');
            }
            json.push_str(&serde_json::to_string(key).ok()?);
            json.push(':');
            json.push_str(if key == "id" { id } else { raw.get() });
        }
        json.push('}');
        RawValue::from_string(json).ok()
    }
}

/// A request line whose id was swapped, with the id to put back.
pub struct Swapped {
    /// The request as dispatched: the line with the token for its id.
    pub line: String,
    /// The token's JSON.
    token: String,
}

/// One connection's swapped ids: a token is unique on it and held until its reply is written.
#[derive(Default)]
pub struct IdSwaps {
    next: AtomicU64,
    /// Token JSON → the id the client wrote. A subscription call's reply is written by
    /// jsonrpsee into the connection's notification queue, so it is looked up there.
    pending: std::sync::Mutex<HashMap<String, Box<RawValue>>>,
}

impl IdSwaps {
    /// The request `line` (trimmed) with its id swapped for a token, when jsonrpsee could not
    /// carry the id as written; none when it can (or the line is no object with one id).
    pub fn swap(&self, line: &str) -> Option<Swapped> {
        let members = Members::of(line)?;
        let original = members.id().filter(|raw| must_swap(raw))?;
        let token = format!("{TOKEN_PREFIX}{}", self.next.fetch_add(1, Ordering::Relaxed));
        let token = serde_json::to_string(&token).ok()?;
        let line = members.with_id(&token)?.get().to_owned();
        crate::sync::lock(&self.pending).insert(token.clone(), original.to_owned());
        Some(Swapped { line, token })
    }

    /// The reply to the `swapped` request, its id put back as the client wrote it.
    pub fn restore(&self, swapped: &Swapped, reply: Box<RawValue>) -> Box<RawValue> {
        let Some(original) = crate::sync::lock(&self.pending).remove(&swapped.token) else {
            return reply;
        };
        put_back(reply, &swapped.token, &original)
    }

    /// A message from the notification queue; when it is the reply to a swapped subscription
    /// call, with the id put back.
    pub fn restore_queued(&self, message: Box<RawValue>) -> Box<RawValue> {
        let mut pending = crate::sync::lock(&self.pending);
        if pending.is_empty() {
            return message;
        }
        let Some(token) = Members::of(message.get()).and_then(|members| members.id()).map(|id| id.get().to_owned())
        else {
            return message;
        };
        match pending.remove(&token) {
            Some(original) => {
                drop(pending);
                put_back(message, &token, &original)
            }
            None => message,
        }
    }
}

/// `reply` with its id, which must be `token`, replaced by `original`; unchanged otherwise.
fn put_back(reply: Box<RawValue>, token: &str, original: &RawValue) -> Box<RawValue> {
    let restored = Members::of(reply.get())
        .filter(|members| members.id().is_some_and(|id| id.get() == token))
        .and_then(|members| members.with_id(original.get()));
    restored.unwrap_or(reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(json: &str) -> Box<RawValue> {
        RawValue::from_string(json.to_string()).unwrap()
    }

    #[test]
    fn numbers_jsonrpsee_cannot_give_back_are_swapped_and_put_back_as_written() {
        for id in ["-1", "1.5", "18446744073709551616", "1e400", "-0", "1E2", "2.0"] {
            let ids = IdSwaps::default();
            let line = format!(r#"{{"jsonrpc":"2.0", "id" : {id},"method":"m","params":{{"id":{id}}}}}"#);
            let swapped = ids.swap(&line).unwrap_or_else(|| panic!("{id} not swapped"));
            let request: jsonrpsee::types::Request<'_> = serde_json::from_str(&swapped.line).unwrap();
            assert!(reserved(&request.id), "{id}: {}", swapped.line);
            assert!(swapped.line.contains(&format!(r#""params":{{"id":{id}}}"#)), "{}", swapped.line);
            let reply = format!(r#"{{"jsonrpc":"2.0","id":{},"result":{{"id":{}}}}}"#, swapped.token, swapped.token);
            let restored = ids.restore(&swapped, raw(&reply));
            assert_eq!(restored.get(), format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"id":{}}}}}"#, swapped.token));
        }
    }

    #[test]
    fn ids_jsonrpsee_carries_are_left_alone() {
        let ids = IdSwaps::default();
        for id in ["1", "0", "18446744073709551615", "null", r#""a""#, r#""-1""#, "{}", "true"] {
            assert!(ids.swap(&format!(r#"{{"id":{id},"method":"m"}}"#)).is_none(), "{id}");
        }
        assert!(ids.swap(r#"{"id":-1,"id":-1,"method":"m"}"#).is_none(), "two ids: left to be refused");
        assert!(ids.swap("[1]").is_none());
    }

    #[test]
    fn a_string_id_in_the_tokens_namespace_is_swapped_too() {
        let ids = IdSwaps::default();
        let first = ids.swap(r#"{"id":-5,"method":"m"}"#).unwrap();
        // A client guessing the first token gets its own, different one, and its id back.
        let guess = format!(r#"{{"id":{},"method":"m"}}"#, first.token);
        let second = ids.swap(&guess).unwrap();
        assert_ne!(first.token, second.token);
        let reply = format!(r#"{{"jsonrpc":"2.0","id":{},"result":1}}"#, second.token);
        assert_eq!(
            ids.restore(&second, raw(&reply)).get(),
            format!(r#"{{"jsonrpc":"2.0","id":{},"result":1}}"#, first.token)
        );
        let reply = format!(r#"{{"jsonrpc":"2.0","id":{},"result":1}}"#, first.token);
        assert_eq!(ids.restore(&first, raw(&reply)).get(), r#"{"jsonrpc":"2.0","id":-5,"result":1}"#);
    }

    #[test]
    fn a_queued_subscription_reply_gets_its_id_back_and_notifications_are_untouched() {
        let ids = IdSwaps::default();
        let swapped = ids.swap(r#"{"id":-2.5,"method":"events.subscribe"}"#).unwrap();
        let notification = raw(r#"{"jsonrpc":"2.0","method":"events.event","params":{"subscription":1,"result":{}}}"#);
        assert_eq!(ids.restore_queued(notification.clone()).get(), notification.get());
        let reply = format!(r#"{{"jsonrpc":"2.0","id":{},"result":7}}"#, swapped.token);
        assert_eq!(ids.restore_queued(raw(&reply)).get(), r#"{"jsonrpc":"2.0","id":-2.5,"result":7}"#);
        assert!(crate::sync::lock(&ids.pending).is_empty());
    }
}
