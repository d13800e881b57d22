//! Reading a big JSON file one conversation at a time: the top-level array (ChatGPT, Claude, DeepSeek) or the
//! array under one key of the top-level object (Grok's `conversations`) is walked element by element, each
//! element parsed on its own and handed to the caller before the next is read. Memory stays at one
//! conversation, whatever the file's size.

use std::cell::RefCell;
use std::fmt;
use std::io::Read;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// Where the conversations sit in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `[conv, conv, …]`
    Array,
    /// `{"<key>": [conv, …], …}`; other keys are skipped.
    UnderKey(&'static str),
}

/// Why a walk stopped.
#[derive(Debug, thiserror::Error)]
pub enum WalkError<E> {
    /// The bytes are not JSON, or not of the expected shape; `line`/`column` are serde_json's (1-based), 0 when
    /// the reader failed instead.
    #[error("{message} (line {line}, column {column})")]
    Json {
        message: String,
        line: usize,
        column: usize,
    },
    /// The caller's callback asked to stop.
    #[error("stopped by the caller")]
    Stopped(E),
}

/// Calls `each(index, element)` for every element, in file order. An error from `each` stops the walk and comes
/// back as [`WalkError::Stopped`].
pub fn walk<R: Read, E>(
    reader: R,
    shape: Shape,
    mut each: impl FnMut(usize, Value) -> Result<(), E>,
) -> Result<usize, WalkError<E>> {
    let stop: RefCell<Option<E>> = RefCell::new(None);
    let mut count = 0usize;
    let result = {
        let mut call = |i: usize, v: Value| -> bool {
            match each(i, v) {
                Ok(()) => true,
                Err(e) => {
                    *stop.borrow_mut() = Some(e);
                    false
                }
            }
        };
        let mut de = serde_json::Deserializer::from_reader(reader);
        let elements = Elements {
            each: &mut call,
            count: &mut count,
        };
        let r = match shape {
            Shape::Array => de.deserialize_seq(elements),
            Shape::UnderKey(key) => de.deserialize_map(Keyed { key, elements }),
        };
        r.and_then(|()| de.end())
    };
    match result {
        Ok(()) => Ok(count),
        Err(e) => match stop.into_inner() {
            Some(s) => Err(WalkError::Stopped(s)),
            None => Err(WalkError::Json {
                message: json_message(&e),
                line: e.line(),
                column: e.column(),
            }),
        },
    }
}

/// serde_json's message without its own " at line … column …" suffix (the error carries both apart).
fn json_message(e: &serde_json::Error) -> String {
    let s = e.to_string();
    match s.rfind(" at line ") {
        Some(i) => s[..i].to_owned(),
        None => s,
    }
}

struct Elements<'a> {
    each: &'a mut dyn FnMut(usize, Value) -> bool,
    count: &'a mut usize,
}

impl<'de> Visitor<'de> for Elements<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of conversations")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(v) = seq.next_element::<Value>()? {
            let i = *self.count;
            *self.count += 1;
            if !(self.each)(i, v) {
                return Err(de::Error::custom("stopped"));
            }
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Elements<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

struct Keyed<'a> {
    key: &'static str,
    elements: Elements<'a>,
}

impl<'de> Visitor<'de> for Keyed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an object with a {:?} list", self.key)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut elements = Some(self.elements);
        while let Some(k) = map.next_key::<String>()? {
            match (k == self.key, elements.take()) {
                (true, Some(e)) => map.next_value_seed(e)?,
                (_, e) => {
                    elements = e;
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if elements.is_some() {
            return Err(de::Error::custom(format!("no {:?} list", self.key)));
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ids(text: &str, shape: Shape) -> Result<Vec<String>, WalkError<()>> {
        let mut out = Vec::new();
        walk(text.as_bytes(), shape, |i, v| {
            out.push(format!("{i}:{}", v["id"]));
            Ok(())
        })?;
        Ok(out)
    }

    #[test]
    fn walks_an_array_and_a_keyed_list() {
        assert_eq!(
            ids(r#" [{"id":1},{"id":"b"}] "#, Shape::Array).unwrap(),
            ["0:1", "1:\"b\""]
        );
        assert_eq!(
            ids(
                r#"{"x":{"conversations":[1]},"conversations":[{"id":3}],"y":[]}"#,
                Shape::UnderKey("conversations")
            )
            .unwrap(),
            ["0:3"]
        );
    }

    #[test]
    fn a_cut_file_keeps_what_came_before_and_names_the_place() {
        let mut seen = 0;
        let err = walk(
            "[{\"id\":1},\n{\"id\":2},\n{\"id\":".as_bytes(),
            Shape::Array,
            |_, _| -> Result<(), ()> {
                seen += 1;
                Ok(())
            },
        )
        .unwrap_err();
        assert_eq!(seen, 2);
        match err {
            WalkError::Json { line, .. } => assert_eq!(line, 3),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn wrong_shapes_and_trailing_bytes_are_errors() {
        assert!(ids(r#"{"id":1}"#, Shape::Array).is_err());
        assert!(ids(r#"[{"id":1}] x"#, Shape::Array).is_err());
        assert!(ids(r#"{"other":[]}"#, Shape::UnderKey("conversations")).is_err());
    }

    #[test]
    fn the_callback_can_stop_the_walk() {
        let err = walk(r#"[1,2,3]"#.as_bytes(), Shape::Array, |i, _| {
            if i == 1 { Err("enough") } else { Ok(()) }
        })
        .unwrap_err();
        assert!(matches!(err, WalkError::Stopped("enough")));
    }
}
