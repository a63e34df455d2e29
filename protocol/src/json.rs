//! The one strict reader of a reviewer's JSON answer (a dossier, a template answer, a worker's
//! `--dossier` file): an object anywhere in it that gives a key twice is refused, where
//! serde_json's own reading keeps the last copy silently. An answer giving `"verdict":"fail"`
//! and then `"verdict":"pass"` reads two ways, and a reader keeping the last would take the
//! milder.

use serde::de::{Deserialize, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// A JSON value read with each object's keys given once (see the module's doc).
#[derive(Debug, Clone, PartialEq)]
pub struct Unrepeated(pub Value);

/// `text` as one JSON value, refused when it is not JSON, when something follows the value, or
/// when an object in it gives a key twice (the error then names the key and where).
pub fn from_str(text: &str) -> Result<Value, serde_json::Error> {
    serde_json::from_str::<Unrepeated>(text).map(|v| v.0)
}

/// Whether `error` (from this module's readers) is a key given twice rather than text that is
/// not JSON at all.
pub fn is_repeated_key(error: &serde_json::Error) -> bool {
    error.is_data() && error.to_string().contains(REPEATED)
}

const REPEATED: &str = "is given twice";

impl<'de> Deserialize<'de> for Unrepeated {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Unrepeated, D::Error> {
        deserializer.deserialize_any(UnrepeatedVisitor).map(Unrepeated)
    }
}

struct UnrepeatedVisitor;

impl<'de> Visitor<'de> for UnrepeatedVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value whose objects give each key once")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        Unrepeated::deserialize(deserializer).map(|v| v.0)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Unrepeated(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(A::Error::custom(format!("the key `{key}` {REPEATED}")));
            }
            let Unrepeated(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// How many bytes `value` takes as compact JSON, counted without writing it anywhere (a size
/// limit checked before anything is kept or sent).
pub fn encoded_len(value: &impl serde::Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_given_twice_anywhere_is_refused_and_the_rest_reads_as_serde_json_does() {
        for text in
            [r#"{"verdict":"fail","verdict":"pass"}"#, r#"{"a":{"b":1,"b":1}}"#, r#"[{"x":[{"k":null,"k":null}]}]"#]
        {
            let error = from_str(text).unwrap_err();
            assert!(is_repeated_key(&error), "{text}: {error}");
        }
        assert!(from_str(r#"{"verdict":"fail","verdict":"pass"}"#).unwrap_err().to_string().contains("`verdict`"));
        let text = r#"{"a":[1,-2,3.5,"s",true,null,{"b":{}}],"c":"\u00e9","d":18446744073709551615}"#;
        assert_eq!(from_str(text).unwrap(), serde_json::from_str::<Value>(text).unwrap());
        let error = from_str("{\"a\":1} trailing").unwrap_err();
        assert!(!is_repeated_key(&error), "{error}");
        assert!(!is_repeated_key(&from_str("not json").unwrap_err()));
    }
}
