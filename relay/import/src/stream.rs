//! Reading a big JSON file one conversation at a time: the top-level array (ChatGPT, Claude, DeepSeek) or the
//! array under one key of the top-level object (Grok's `conversations`) is walked element by element, each
//! element parsed on its own and handed to the caller before the next is read. Memory stays at one
//! conversation, whatever the file's size.
//!
//! No JSON string is held longer than [`MAX_STRING_BYTES`]: the bytes pass through [`Bounded`], which keeps a
//! string back until it closes and, once it grows past the bound, drops it as it is read and hands the parser a
//! short marker instead. The element holding a marker comes to the caller as [`Oversize`], so one field of a
//! gigabyte costs the bound, not the gigabyte, and the elements beside it are read as usual.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::io::{BufRead, Read};
use std::rc::Rc;

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

/// The longest JSON string (its raw bytes, escapes included) an element may hold: 16 times the longest text a
/// turn can carry (`wire::MAX_CONTENT_BYTES`), room for escapes and for attachment text the export keeps.
pub const MAX_STRING_BYTES: usize = 16 * personkit_shared::wire::MAX_CONTENT_BYTES;

/// An element that held strings over the bound; it was not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Oversize {
    /// How many such strings.
    pub strings: usize,
    /// The raw length of the longest, in bytes.
    pub longest: u64,
}

impl Oversize {
    /// A sentence for the import's problems: what was found, the bound, what to do.
    pub fn describe(&self) -> String {
        let what = if self.strings == 1 {
            "a text field".to_owned()
        } else {
            format!("{} text fields, the longest", self.strings)
        };
        format!(
            "not imported: {what} of {} bytes is over the {} MB a field of an export may have (a turn keeps at most \
             {} KB); the rest of the file was imported. To keep this conversation, shorten or remove that field in \
             the file and import it again (what is already stored is not stored twice)",
            self.longest,
            MAX_STRING_BYTES / (1024 * 1024),
            personkit_shared::wire::MAX_CONTENT_BYTES / 1024
        )
    }
}

/// What stands in for a dropped string (as JSON text, and as the parsed string): a NUL no export's text starts
/// with, then the string's raw length.
const MARKER: &str = "\\u0000personkit:oversize:";
const MARKER_TEXT: &str = "\u{0}personkit:oversize:";

/// Calls `each(index, element)` for every element, in file order; an element that held a string over
/// [`MAX_STRING_BYTES`] comes as `Err`. An error from `each` stops the walk and comes back as
/// [`WalkError::Stopped`].
pub fn walk<R: BufRead, E>(
    reader: R,
    shape: Shape,
    each: impl FnMut(usize, Result<Value, Oversize>) -> Result<(), E>,
) -> Result<usize, WalkError<E>> {
    walk_bounded(reader, shape, MAX_STRING_BYTES, each)
}

/// [`walk`] with its string bound given.
pub fn walk_bounded<R: BufRead, E>(
    reader: R,
    shape: Shape,
    max_string: usize,
    mut each: impl FnMut(usize, Result<Value, Oversize>) -> Result<(), E>,
) -> Result<usize, WalkError<E>> {
    let stop: RefCell<Option<E>> = RefCell::new(None);
    let mut count = 0usize;
    let dropped = Rc::new(Cell::new(0u64));
    let mut seen = 0u64;
    let result = {
        let mut call = |i: usize, v: Value| -> bool {
            // Only an element read while the filter has dropped strings not yet found can hold a marker.
            let v = if dropped.get() > seen {
                let mut o = Oversize {
                    strings: 0,
                    longest: 0,
                };
                find_markers(&v, &mut o);
                seen += o.strings as u64;
                if o.strings > 0 { Err(o) } else { Ok(v) }
            } else {
                Ok(v)
            };
            match each(i, v) {
                Ok(()) => true,
                Err(e) => {
                    *stop.borrow_mut() = Some(e);
                    false
                }
            }
        };
        let bounded = Bounded::new(reader, max_string, dropped.clone());
        let mut de = serde_json::Deserializer::from_reader(bounded);
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

/// Counts the markers in an element (keys and values).
fn find_markers(v: &Value, o: &mut Oversize) {
    match v {
        Value::String(s) => check_marker(s, o),
        Value::Array(a) => a.iter().for_each(|x| find_markers(x, o)),
        Value::Object(m) => {
            for (k, x) in m {
                check_marker(k, o);
                find_markers(x, o);
            }
        }
        _ => {}
    }
}

fn check_marker(s: &str, o: &mut Oversize) {
    if let Some(n) = s.strip_prefix(MARKER_TEXT) {
        o.strings += 1;
        o.longest = o.longest.max(n.parse().unwrap_or(0));
    }
}

/// Where [`Bounded`] is in the JSON text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lex {
    /// Between strings.
    Outside,
    /// Inside a string, its bytes kept back; `escape` right after a backslash.
    Keeping { escape: bool },
    /// Inside a string past the bound: its bytes are counted and dropped.
    Dropping { escape: bool, len: u64 },
}

/// A reader passing JSON text through, except strings over `max` raw bytes: each becomes [`MARKER`] and its
/// length. Only string boundaries are tracked (a quote not after a backslash); the parser behind it judges the
/// rest, so text that is not JSON stays an error there.
struct Bounded<R> {
    inner: R,
    max: usize,
    lex: Lex,
    /// The open string's bytes so far (at most `max`).
    string: Vec<u8>,
    /// Bytes ready for the parser, from `out_at` on.
    out: Vec<u8>,
    out_at: usize,
    /// Strings dropped so far.
    dropped: Rc<Cell<u64>>,
}

impl<R: BufRead> Bounded<R> {
    fn new(inner: R, max: usize, dropped: Rc<Cell<u64>>) -> Bounded<R> {
        Bounded {
            inner,
            max,
            lex: Lex::Outside,
            string: Vec::new(),
            out: Vec::new(),
            out_at: 0,
            dropped,
        }
    }

    /// Moves one chunk of the inner reader through the filter; `false` at its end.
    fn pump(&mut self) -> std::io::Result<bool> {
        self.out.clear();
        self.out_at = 0;
        let chunk = self.inner.fill_buf()?;
        if chunk.is_empty() {
            // A file cut inside a string: what was kept goes on, and the parser names the cut.
            if matches!(self.lex, Lex::Keeping { .. }) {
                self.out.append(&mut self.string);
                self.lex = Lex::Outside;
            }
            return Ok(false);
        }
        let n = chunk.len();
        let mut i = 0;
        while i < n {
            match self.lex {
                Lex::Outside => {
                    let quote = chunk[i..].iter().position(|&b| b == b'"').map(|p| i + p);
                    let stop = quote.map_or(n, |q| q + 1);
                    self.out.extend_from_slice(&chunk[i..stop]);
                    if quote.is_some() {
                        self.lex = Lex::Keeping { escape: false };
                        self.string.clear();
                    }
                    i = stop;
                }
                Lex::Keeping { escape } => {
                    let b = chunk[i];
                    i += 1;
                    if !escape && b == b'"' {
                        self.out.append(&mut self.string);
                        self.out.push(b);
                        self.lex = Lex::Outside;
                        continue;
                    }
                    self.string.push(b);
                    let escape = !escape && b == b'\\';
                    if self.string.len() > self.max {
                        self.lex = Lex::Dropping {
                            escape,
                            len: self.string.len() as u64,
                        };
                        self.string = Vec::new();
                    } else {
                        self.lex = Lex::Keeping { escape };
                    }
                }
                Lex::Dropping {
                    mut escape,
                    mut len,
                } => {
                    let mut closed = false;
                    while i < n {
                        let b = chunk[i];
                        i += 1;
                        if !escape && b == b'"' {
                            closed = true;
                            break;
                        }
                        escape = !escape && b == b'\\';
                        len += 1;
                    }
                    if closed {
                        self.out
                            .extend_from_slice(format!("{MARKER}{len}\"").as_bytes());
                        self.dropped.set(self.dropped.get() + 1);
                        self.lex = Lex::Outside;
                    } else {
                        self.lex = Lex::Dropping { escape, len };
                    }
                }
            }
        }
        self.inner.consume(n);
        Ok(true)
    }
}

impl<R: BufRead> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.out_at >= self.out.len() {
            if !self.pump()? && self.out_at >= self.out.len() {
                return Ok(0);
            }
        }
        let k = buf.len().min(self.out.len() - self.out_at);
        buf[..k].copy_from_slice(&self.out[self.out_at..self.out_at + k]);
        self.out_at += k;
        Ok(k)
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
            out.push(format!("{i}:{}", v.unwrap()["id"]));
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
    fn a_string_over_the_bound_refuses_its_element_and_keeps_the_others() {
        let long = "x".repeat(100);
        let text = format!(
            r#"[{{"id":1,"t":"short \" quote"}},{{"id":2,"big":"{long}","more":"{long}"}},{{"id":3,"{long}":1}},{{"id":4,"e":"\\"}}]"#
        );
        let mut seen = Vec::new();
        walk_bounded(
            text.as_bytes(),
            Shape::Array,
            50,
            |i, v| -> Result<(), ()> {
                seen.push((i, v.map(|v| v["id"].clone())));
                Ok(())
            },
        )
        .unwrap();
        let big = |strings| {
            Err(Oversize {
                strings,
                longest: 100,
            })
        };
        assert_eq!(
            seen,
            [
                (0, Ok(serde_json::json!(1))),
                (1, big(2)),
                (2, big(1)),
                (3, Ok(serde_json::json!(4))),
            ]
        );
    }

    #[test]
    fn strings_at_the_bound_and_escapes_pass_unchanged() {
        // Chunk edges fall everywhere: the filter reads from a one-byte buffer.
        let text = r#"[{"id":"a\"b\\","u":"\u00e9\ud83d\ude00","n":[1,2.5,null,true]}]"#;
        let mut got = Vec::new();
        let reader = std::io::BufReader::with_capacity(1, text.as_bytes());
        walk_bounded(reader, Shape::Array, 18, |_, v| -> Result<(), ()> {
            got.push(v.unwrap());
            Ok(())
        })
        .unwrap();
        let want: Value = serde_json::from_str(text).unwrap();
        assert_eq!(got, want.as_array().unwrap().clone());
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
