//! An answer kept already serialized: a handler that renders a large reply once and hands it
//! out again while it stays true (see `tasks::read::list`) answers with a [`Rendered`].

use std::marker::PhantomData;

use serde::Serialize;
use serde_json::value::RawValue;

/// `T` serialized. Made only from a `T`, so it is always a valid `T` on the wire.
pub struct Rendered<T> {
    json: Box<RawValue>,
    of: PhantomData<fn() -> T>,
}

impl<T: Serialize> Rendered<T> {
    pub fn of(value: &T) -> serde_json::Result<Rendered<T>> {
        Ok(Rendered { json: serde_json::value::to_raw_value(value)?, of: PhantomData })
    }
}

impl<T> Clone for Rendered<T> {
    fn clone(&self) -> Rendered<T> {
        Rendered { json: self.json.clone(), of: PhantomData }
    }
}

impl<T> Serialize for Rendered<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.json.serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rendered_value_serializes_as_the_value() {
        let value = serde_json::json!({"tasks": [{"task_id": "a", "title": "quote \" and é"}]});
        let rendered = Rendered::of(&value).unwrap();
        assert_eq!(serde_json::to_string(&rendered.clone()).unwrap(), serde_json::to_string(&value).unwrap());
    }
}
