//! Byte framing shared by the stream parsers: line splitting (SSE and NDJSON), the SSE event assembler, Gemini's
//! length-prefixed frames, and the JSON-path patch operations two of the sites' delta encodings use.
//!
//! Every framer takes arbitrary byte chunks and yields the same frames for any chunking: a frame is only handed on
//! once all of its bytes are in, and nothing is decided from where a chunk happens to end.

use serde_json::Value;

use super::ParseError;

/// Longest line or frame accepted before the stream is refused (a hostile or broken stream never grows the buffer
/// without bound). Real frames are far smaller: ChatGPT's largest are whole-message snapshots of a few hundred KB.
pub const MAX_FRAME: usize = 16 * 1024 * 1024;

/// What a framer hands to a format's handler.
#[derive(Debug, Clone, Copy)]
pub enum Frame<'a> {
    /// One dispatched SSE event: its `event:` name (empty when absent) and its `data:` lines joined by `\n`.
    Sse { event: &'a str, data: &'a str },
    /// One JSON text: an NDJSON line or a length-prefixed frame's payload.
    Json(&'a str),
}

/// Which framing a format uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `text/event-stream` (WHATWG HTML, "Server-sent events"): lines ending in CRLF, LF or CR; `field: value`;
    /// a blank line dispatches.
    Sse,
    /// One JSON value per line (blank lines skipped).
    Ndjson,
    /// Google's `)]}'` guard, then frames `<length>\n<json>\n` whose length counts UTF-16 code units from the
    /// newline after the digits through the newline after the JSON.
    LengthPrefixed,
}

/// Splits arbitrary chunks into frames.
#[derive(Debug)]
pub struct Framer {
    framing: Framing,
    buf: Vec<u8>,
    /// Bytes of `buf` already consumed.
    pos: usize,
    /// Total bytes consumed before `buf[0]` (for error offsets).
    base: u64,
    /// SSE: the event being assembled.
    sse: SseEvent,
    /// LengthPrefixed: whether the `)]}'` guard was read.
    guard_seen: bool,
}

impl Framer {
    pub fn new(framing: Framing) -> Framer {
        Framer {
            framing,
            buf: Vec::new(),
            pos: 0,
            base: 0,
            sse: SseEvent::default(),
            guard_seen: false,
        }
    }

    /// Adds bytes and hands every frame they complete to `f`.
    pub fn push(
        &mut self,
        chunk: &[u8],
        f: &mut dyn FnMut(Frame<'_>) -> Result<(), ParseError>,
    ) -> Result<(), ParseError> {
        self.buf.extend_from_slice(chunk);
        let r = self.drain(false, f);
        self.compact();
        r
    }

    /// The stream ended: an NDJSON last line without its line ending still counts (when it is not whole JSON,
    /// the stream was cut: [`ParseError::Incomplete`]); an SSE event not closed by a blank line is discarded; a
    /// cut-off length-prefixed frame is [`ParseError::Incomplete`].
    pub fn finish(
        &mut self,
        f: &mut dyn FnMut(Frame<'_>) -> Result<(), ParseError>,
    ) -> Result<(), ParseError> {
        self.drain(true, f)?;
        match self.framing {
            // An event without its closing blank line is discarded, as the SSE specification says for the end
            // of a stream: the message it belonged to stays unfinished, and the handler reports that.
            Framing::Sse => Ok(()),
            Framing::Ndjson => Ok(()),
            Framing::LengthPrefixed => {
                let rest = &self.buf[self.pos..];
                if rest.iter().all(u8::is_ascii_whitespace) {
                    Ok(())
                } else {
                    Err(ParseError::Incomplete {
                        detail: "the stream ends inside a length-prefixed frame".into(),
                    })
                }
            }
        }
    }

    fn compact(&mut self) {
        if self.pos > 0 && (self.pos > 64 * 1024 || self.pos * 2 > self.buf.len()) {
            self.buf.drain(..self.pos);
            self.base += self.pos as u64;
            self.pos = 0;
        }
    }

    fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    fn drain(
        &mut self,
        at_end: bool,
        f: &mut dyn FnMut(Frame<'_>) -> Result<(), ParseError>,
    ) -> Result<(), ParseError> {
        match self.framing {
            Framing::Sse | Framing::Ndjson => {
                while let Some((end, next)) = line_end(&self.buf[self.pos..], at_end) {
                    let start = self.pos;
                    let at = self.offset();
                    let line =
                        std::str::from_utf8(&self.buf[start..start + end]).map_err(|_| {
                            ParseError::Malformed {
                                at,
                                detail: "a line is not UTF-8".into(),
                            }
                        })?;
                    // The line is copied out only for SSE fields; NDJSON lines are handed over in place.
                    if self.framing == Framing::Ndjson {
                        let t = line.trim();
                        let unterminated = start + next == self.buf.len() && end == next;
                        if !t.is_empty() {
                            match f(Frame::Json(t)) {
                                Err(ParseError::Malformed { .. }) if unterminated => {
                                    return Err(ParseError::Incomplete {
                                        detail: "the stream ends inside a line".into(),
                                    });
                                }
                                r => r?,
                            }
                        }
                    } else {
                        self.sse.line(line, f)?;
                    }
                    self.pos = start + next;
                }
                if self.buf.len() - self.pos > MAX_FRAME {
                    return Err(ParseError::TooLarge { limit: MAX_FRAME });
                }
                Ok(())
            }
            Framing::LengthPrefixed => self.drain_length_prefixed(f),
        }
    }

    fn drain_length_prefixed(
        &mut self,
        f: &mut dyn FnMut(Frame<'_>) -> Result<(), ParseError>,
    ) -> Result<(), ParseError> {
        if !self.guard_seen {
            let rest = &self.buf[self.pos..];
            let n = rest.len().min(4);
            if rest[..n] != b")]}'"[..n] {
                return Err(ParseError::Malformed {
                    at: self.offset(),
                    detail: "the body does not open with Google's )]}' guard".into(),
                });
            }
            if n < 4 {
                return Ok(());
            }
            self.pos += 4;
            self.guard_seen = true;
        }
        loop {
            let rest = &self.buf[self.pos..];
            let ws = rest.iter().take_while(|b| b.is_ascii_whitespace()).count();
            let rest = &rest[ws..];
            let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
            if digits == rest.len() {
                // Need more bytes to see the whole length line.
                if digits > 10 {
                    return Err(self.malformed("a frame length has too many digits"));
                }
                self.pos += ws;
                return Ok(());
            }
            if digits == 0 || digits > 10 || rest[digits] != b'\n' {
                self.pos += ws;
                return Err(self.malformed("expected a frame length followed by a newline"));
            }
            let units: u64 = std::str::from_utf8(&rest[..digits])
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| self.malformed("a frame length is not a number"))?;
            if units > MAX_FRAME as u64 {
                return Err(ParseError::TooLarge { limit: MAX_FRAME });
            }
            let body = &rest[digits..];
            match utf16_prefix(body, units) {
                Utf16Prefix::Need => {
                    self.pos += ws;
                    return Ok(());
                }
                Utf16Prefix::Splits => {
                    self.pos += ws;
                    return Err(self.malformed("a frame length ends inside a character"));
                }
                Utf16Prefix::Bytes(n) => {
                    let at = self.offset() + (ws + digits) as u64;
                    let text =
                        std::str::from_utf8(&body[..n]).map_err(|_| ParseError::Malformed {
                            at,
                            detail: "a frame is not UTF-8".into(),
                        })?;
                    let t = text.trim();
                    if !t.is_empty() {
                        f(Frame::Json(t))?;
                    }
                    self.pos += ws + digits + n;
                }
            }
        }
    }

    fn malformed(&self, detail: &str) -> ParseError {
        ParseError::Malformed {
            at: self.offset(),
            detail: detail.into(),
        }
    }
}

/// The SSE event being assembled (its buffers keep their capacity from one event to the next).
#[derive(Debug, Default)]
struct SseEvent {
    event: String,
    data: String,
    has_data: bool,
}

impl SseEvent {
    fn line(
        &mut self,
        line: &str,
        f: &mut dyn FnMut(Frame<'_>) -> Result<(), ParseError>,
    ) -> Result<(), ParseError> {
        if line.is_empty() {
            if self.has_data {
                self.has_data = false;
                let data = self.data.strip_suffix('\n').unwrap_or(&self.data);
                let r = f(Frame::Sse {
                    event: &self.event,
                    data,
                });
                self.data.clear();
                self.event.clear();
                return r;
            }
            self.event.clear();
            return Ok(());
        }
        if line.starts_with(':') {
            return Ok(());
        }
        let (field, value) = match line.find(':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.data.len() + value.len() > MAX_FRAME {
                    return Err(ParseError::TooLarge { limit: MAX_FRAME });
                }
                self.data.push_str(value);
                self.data.push('\n');
                self.has_data = true;
            }
            "event" => {
                self.event.clear();
                self.event.push_str(value);
            }
            // `id`, `retry` and unknown fields are ignored, as the SSE specification says.
            _ => {}
        }
        Ok(())
    }
}

/// The end of the first line in `b`: (length of the line, bytes to skip including the ending). A CR at the very
/// end waits for the next byte (it may be the first half of CRLF) unless the stream ended.
fn line_end(b: &[u8], at_end: bool) -> Option<(usize, usize)> {
    let i = b.iter().position(|&c| c == b'\n' || c == b'\r');
    match i {
        Some(i) if b[i] == b'\n' => Some((i, i + 1)),
        Some(i) => match b.get(i + 1) {
            Some(b'\n') => Some((i, i + 2)),
            Some(_) => Some((i, i + 1)),
            None if at_end => Some((i, i + 1)),
            None => None,
        },
        None if at_end && !b.is_empty() => Some((b.len(), b.len())),
        None => None,
    }
}

enum Utf16Prefix {
    /// The bytes spanning exactly that many UTF-16 code units.
    Bytes(usize),
    /// Not enough bytes yet.
    Need,
    /// The count ends in the middle of a surrogate pair.
    Splits,
}

/// How many bytes of UTF-8 `b` hold `units` UTF-16 code units (counted by lead bytes: a 4-byte sequence is two
/// units, any other one).
fn utf16_prefix(b: &[u8], units: u64) -> Utf16Prefix {
    let mut seen = 0u64;
    let mut i = 0usize;
    while seen < units {
        // Runs of ASCII are one unit per byte: skip them in one pass.
        let want = usize::try_from(units - seen).unwrap_or(usize::MAX);
        let span = b.len().saturating_sub(i).min(want);
        let ascii = b[i..i + span]
            .iter()
            .position(|&c| c >= 0x80)
            .unwrap_or(span);
        i += ascii;
        seen += ascii as u64;
        if seen == units {
            break;
        }
        let Some(&lead) = b.get(i) else {
            return Utf16Prefix::Need;
        };
        let (len, u) = match lead {
            0x00..=0x7f => (1, 1),
            0xc0..=0xdf => (2, 1),
            0xe0..=0xef => (3, 1),
            0xf0..=0xf7 => (4, 2),
            // A stray continuation or invalid byte: count it as one unit; UTF-8 validation refuses it later.
            _ => (1, 1),
        };
        if seen + u > units {
            return Utf16Prefix::Splits;
        }
        if b.len() < i + len {
            return Utf16Prefix::Need;
        }
        seen += u;
        i += len;
    }
    Utf16Prefix::Bytes(i)
}

/// One step of a path into a JSON document.
fn step<'a>(v: &'a mut Value, seg: &str, create: bool) -> Option<&'a mut Value> {
    match v {
        Value::Object(m) => {
            if create && !m.contains_key(seg) {
                m.insert(seg.to_owned(), Value::Null);
            }
            m.get_mut(seg)
        }
        Value::Array(a) => {
            let i = array_index(a.len(), seg)?;
            a.get_mut(i)
        }
        _ => None,
    }
}

/// An index into an array of `len`: a number, or `-1`/`-N` counted from the end (DeepSeek's form).
fn array_index(len: usize, seg: &str) -> Option<usize> {
    if let Some(back) = seg.strip_prefix('-') {
        let n: usize = back.parse().ok()?;
        len.checked_sub(n)
    } else {
        seg.parse().ok()
    }
}

/// The segments of a path: JSON Pointer (`/a/b/0`, `~1` and `~0` unescaped) or DeepSeek's relative form (`a/b/-1`).
pub fn segments(path: &str) -> Vec<String> {
    let p = path.strip_prefix('/').unwrap_or(path);
    if p.is_empty() {
        return Vec::new();
    }
    p.split('/')
        .map(|s| {
            if s.contains('~') {
                s.replace("~1", "/").replace("~0", "~")
            } else {
                s.to_owned()
            }
        })
        .collect()
}

/// A patch operation on a document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchOp {
    /// Put the value at the path (creating the last key of an object, or appending at index = length).
    Set,
    /// Strings concatenate, arrays extend (a non-array value is pushed), objects merge key by key; a missing
    /// target takes the value.
    Append,
    /// Take the path's value out.
    Remove,
}

/// Applies one operation; `false` when the path does not lead anywhere in the document (nothing changed).
pub fn apply(doc: &mut Value, path: &[String], op: PatchOp, v: Value) -> bool {
    let Some((last, parents)) = path.split_last() else {
        match op {
            PatchOp::Set => *doc = v,
            PatchOp::Append => append(doc, v),
            PatchOp::Remove => *doc = Value::Null,
        }
        return true;
    };
    let mut cur = doc;
    for seg in parents {
        match step(cur, seg, false) {
            Some(next) => cur = next,
            None => return false,
        }
    }
    match (cur, op) {
        (Value::Object(m), PatchOp::Remove) => m.remove(last.as_str()).is_some(),
        (Value::Array(a), PatchOp::Remove) => match array_index(a.len(), last) {
            Some(i) if i < a.len() => {
                a.remove(i);
                true
            }
            _ => false,
        },
        (Value::Object(m), PatchOp::Set) => {
            m.insert(last.clone(), v);
            true
        }
        (Value::Object(m), PatchOp::Append) => {
            match m.get_mut(last.as_str()) {
                Some(t) => append(t, v),
                None => {
                    m.insert(last.clone(), v);
                }
            }
            true
        }
        (Value::Array(a), op) => {
            let len = a.len();
            match array_index(len, last) {
                Some(i) if i < len => {
                    if op == PatchOp::Set {
                        a[i] = v;
                    } else {
                        append(&mut a[i], v);
                    }
                    true
                }
                Some(i) if i == len || last == "-" => {
                    a.push(v);
                    true
                }
                None if last == "-" => {
                    a.push(v);
                    true
                }
                _ => false,
            }
        }
        (cur, _) => {
            // The parent is a scalar or null: a set or append creates the object it needs.
            if cur.is_null() {
                let mut m = serde_json::Map::new();
                m.insert(last.clone(), v);
                *cur = Value::Object(m);
                true
            } else {
                false
            }
        }
    }
}

fn append(t: &mut Value, v: Value) {
    match (t, v) {
        (Value::String(s), Value::String(add)) => s.push_str(&add),
        (Value::Array(a), Value::Array(add)) => a.extend(add),
        (Value::Array(a), add) => a.push(add),
        (Value::Object(m), Value::Object(add)) => {
            for (k, v) in add {
                match m.get_mut(&k) {
                    Some(t) => append(t, v),
                    None => {
                        m.insert(k, v);
                    }
                }
            }
        }
        (t, v) => *t = v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(framing: Framing, chunks: &[&[u8]]) -> Result<Vec<String>, ParseError> {
        let mut f = Framer::new(framing);
        let mut out = Vec::new();
        let mut sink = |fr: Frame<'_>| {
            out.push(match fr {
                Frame::Sse { event, data } => format!("{event}|{data}"),
                Frame::Json(j) => j.to_owned(),
            });
            Ok(())
        };
        for c in chunks {
            f.push(c, &mut sink)?;
        }
        f.finish(&mut sink)?;
        Ok(out)
    }

    #[test]
    fn sse_line_endings_and_multiline_data() {
        let got = frames(
            Framing::Sse,
            &[
                b"event: a\r",
                b"\ndata: 1\rdata:2\n\n: comment\n\ndata: x\r\n\r\n",
                b"data: tail",
            ],
        )
        .unwrap_or_default();
        // The last event has no closing blank line: discarded.
        assert_eq!(got, vec!["a|1\n2", "|x"]);
    }

    #[test]
    fn length_prefixed_counts_utf16_units() {
        // "😀" is two UTF-16 units and four UTF-8 bytes; "é" one unit, two bytes.
        let json = "[\"😀é\"]";
        let units = json.encode_utf16().count() + 2;
        let body = format!(")]}}'\n\n{units}\n{json}\n5\n[1]\n");
        let bytes = body.as_bytes();
        for cut in 0..bytes.len() {
            let got = frames(Framing::LengthPrefixed, &[&bytes[..cut], &bytes[cut..]]);
            assert_eq!(
                got,
                Ok(vec![json.to_owned(), "[1]".to_owned()]),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn length_prefixed_cut_frame_is_incomplete() {
        let got = frames(Framing::LengthPrefixed, &[b")]}'\n12\n[1,2"]);
        assert!(matches!(got, Err(ParseError::Incomplete { .. })), "{got:?}");
        let got = frames(Framing::LengthPrefixed, &[b"<html>"]);
        assert!(matches!(got, Err(ParseError::Malformed { .. })), "{got:?}");
    }

    #[test]
    fn patch_ops() {
        let mut d =
            serde_json::json!({"message": {"content": {"parts": [""]}, "status": "in_progress"}});
        assert!(apply(
            &mut d,
            &segments("/message/content/parts/0"),
            PatchOp::Append,
            "Hi".into()
        ));
        assert!(apply(
            &mut d,
            &segments("/message/content/parts/0"),
            PatchOp::Append,
            " there".into()
        ));
        assert!(apply(
            &mut d,
            &segments("/message/status"),
            PatchOp::Set,
            "done".into()
        ));
        assert!(apply(
            &mut d,
            &segments("/message/metadata"),
            PatchOp::Append,
            serde_json::json!({"a": 1})
        ));
        assert!(!apply(
            &mut d,
            &segments("/nowhere/deep"),
            PatchOp::Set,
            1.into()
        ));
        assert_eq!(
            d,
            serde_json::json!({"message": {"content": {"parts": ["Hi there"]}, "status": "done", "metadata": {"a": 1}}})
        );
        let mut d =
            serde_json::json!({"response": {"fragments": [{"content": "a"}, {"content": "b"}]}});
        assert!(apply(
            &mut d,
            &segments("response/fragments/-1/content"),
            PatchOp::Append,
            "c".into()
        ));
        assert_eq!(d["response"]["fragments"][1]["content"], "bc");
    }
}
