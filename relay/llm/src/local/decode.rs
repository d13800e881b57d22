//! Greedy decoding for the in-process model, behind two small traits so it runs (and is tested) without one: a
//! [`LogitSource`] (feed tokens, get the next token's logits) and a [`Vocabulary`] (each token's bytes, and an
//! encoder for text the decoder writes itself).
//!
//! [`plain`] generates until an end token or the token budget. [`shaped`] decodes UNDER a [`Shape`]: the JSON
//! structure (braces, keys, quotes, commas) is written by the decoder and fed to the model as forced text; the
//! model only picks where the shape leaves a choice, from the tokens that keep the answer valid. So the answer
//! always parses and passes [`Shape::check`], within `max_tokens`.
//!
//! The JSON is compact (`{"a":1,"b":[2]}`): every choice point then follows a character a tokenizer sees often.

use std::time::{Duration, Instant};

use crate::{LlmError, Shape};

/// The model seen as "next-token logits given the tokens so far".
pub(crate) trait LogitSource {
    /// Appends `tokens` to what the model has read and returns the logits for the token after the last one.
    fn feed(&mut self, tokens: &[u32]) -> Result<Vec<f32>, LlmError>;
}

/// The tokens a model reads and writes.
pub(crate) trait Vocabulary {
    /// How many tokens there are (ids `0..len`).
    fn len(&self) -> usize;
    /// The bytes a token stands for; `None` for control tokens (never picked under a shape, an end in plain text).
    fn bytes(&self, id: u32) -> Option<&[u8]>;
    /// Tokens for text the decoder writes itself (no control tokens are produced from text).
    fn encode(&self, text: &str) -> Result<Vec<u32>, LlmError>;
    /// The token that is exactly this one byte (byte-level vocabularies have one for every byte).
    fn byte_token(&self, b: u8) -> Option<u32>;
}

/// Tokens for bytes the decoder writes: whole characters through the encoder, the bytes of a character cut by a
/// choice point (options that differ inside one character) as byte tokens.
fn encode_bytes<V: Vocabulary>(vocab: &V, bytes: &[u8]) -> Result<Vec<u32>, LlmError> {
    let mut ids = Vec::new();
    for chunk in bytes.utf8_chunks() {
        if !chunk.valid().is_empty() {
            ids.extend(vocab.encode(chunk.valid())?);
        }
        for &b in chunk.invalid() {
            ids.push(vocab.byte_token(b).ok_or_else(|| {
                LlmError::Inference(format!("the vocabulary has no token for byte {b:#04x}"))
            })?);
        }
    }
    Ok(ids)
}

/// When a call has to be over.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    pub at: Instant,
    pub timeout: Duration,
}

impl Deadline {
    pub fn after(timeout: Duration) -> Deadline {
        let now = Instant::now();
        Deadline {
            at: now
                .checked_add(timeout)
                .unwrap_or(now + Duration::from_secs(86_400 * 365)),
            timeout,
        }
    }

    pub fn check(&self) -> Result<(), LlmError> {
        if Instant::now() >= self.at {
            Err(LlmError::Timeout(self.timeout))
        } else {
            Ok(())
        }
    }
}

/// A decoded answer: its text and how many tokens it is.
#[derive(Debug, Clone)]
pub(crate) struct Decoded {
    pub text: String,
    pub tokens: usize,
}

/// The highest-scoring id among those `allowed`; the lowest id wins a tie, so decoding is deterministic.
fn argmax(logits: &[f32], n: usize, mut allowed: impl FnMut(u32) -> bool) -> Option<(u32, f32)> {
    let mut best: Option<(u32, f32)> = None;
    for (i, &l) in logits.iter().take(n).enumerate() {
        if l.is_nan() {
            continue;
        }
        let id = i as u32;
        if best.is_none_or(|(_, b)| l > b) && allowed(id) {
            best = Some((id, l));
        }
    }
    best
}

/// Plain generation: feeds the prompt, then the model's own choice each step, until `is_end` says a token ends
/// the answer (a control token always does) or `max_tokens` were generated.
pub(crate) fn plain<S: LogitSource, V: Vocabulary>(
    src: &mut S,
    vocab: &V,
    prompt: &[u32],
    max_tokens: usize,
    is_end: impl Fn(u32) -> bool,
    deadline: Deadline,
) -> Result<Decoded, LlmError> {
    let mut out = Vec::new();
    let mut count = 0;
    let mut logits = src.feed(prompt)?;
    deadline.check()?;
    while count < max_tokens {
        let Some((id, _)) = argmax(&logits, vocab.len(), |_| true) else {
            return Err(LlmError::Inference(
                "the model returned no usable logits".into(),
            ));
        };
        let Some(bytes) = vocab.bytes(id).filter(|_| !is_end(id)) else {
            break;
        };
        out.extend_from_slice(bytes);
        count += 1;
        if count == max_tokens {
            break;
        }
        logits = src.feed(&[id])?;
        deadline.check()?;
    }
    Ok(Decoded {
        text: String::from_utf8_lossy(&out).into_owned(),
        tokens: count,
    })
}

/// Bytes that may follow a value inside the JSON around it; a token that closes a value may carry them.
fn is_structural(b: u8) -> bool {
    matches!(b, b',' | b']' | b'}' | b' ' | b'\n' | b'\r' | b'\t')
}

fn all_structural(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| is_structural(b))
}

/// The first byte of a token that is not whitespace.
fn first_solid(bytes: &[u8]) -> Option<u8> {
    bytes
        .iter()
        .copied()
        .find(|b| !matches!(b, b' ' | b'\n' | b'\r' | b'\t'))
}

/// Characters in UTF-8 bytes (a prefix may end inside one: its lead byte counts).
fn char_count(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .filter(|&&b| !(0x80..0xC0).contains(&b))
        .count()
}

/// `Some(true)` for complete UTF-8, `Some(false)` for UTF-8 that stops inside a character, `None` for invalid.
fn utf8_state(bytes: &[u8]) -> Option<bool> {
    match std::str::from_utf8(bytes) {
        Ok(_) => Some(true),
        Err(e) if e.error_len().is_none() => Some(false),
        Err(_) => None,
    }
}

/// Bytes still missing from a character cut off at the end of `bytes` (0 when it ends on a whole character).
fn utf8_missing(bytes: &[u8]) -> usize {
    let Some(pos) = bytes.iter().rposition(|b| !(0x80..0xC0).contains(b)) else {
        return 0;
    };
    let want: usize = match bytes[pos] {
        0xF0.. => 4,
        0xE0.. => 3,
        0xC0.. => 2,
        _ => 1,
    };
    want.saturating_sub(bytes.len() - pos)
}

/// The longest JSON a shape's smallest answer can take, in bytes (an upper bound on its tokens: every token is at
/// least one byte). Choices count at their longest, so a choice made later always fits what was reserved for it.
fn reserve(shape: &Shape) -> usize {
    match shape {
        Shape::Object(fields) => {
            2 + fields.len().saturating_sub(1)
                + fields
                    .iter()
                    .map(|(k, v)| json_key(k).len() + 1 + reserve(v))
                    .sum::<usize>()
        }
        Shape::Array { items, min, .. } => 2 + min * (reserve(items) + 1),
        Shape::Text { .. } => 2,
        Shape::OneOf(options) => 2 + options.iter().map(|o| escaped(o).len()).max().unwrap_or(0),
        Shape::Bool => 5,
        Shape::Int { min, max } => min.to_string().len().max(max.to_string().len()),
    }
}

fn json_key(k: &str) -> String {
    format!("\"{}\"", escaped(k))
}

/// A string's JSON escaping, without the quotes.
fn escaped(s: &str) -> String {
    let quoted = serde_json::Value::String(s.to_owned()).to_string();
    quoted[1..quoted.len() - 1].to_owned()
}

/// Shapes no answer can satisfy are the caller's error, reported before any decoding.
fn validate(shape: &Shape) -> Result<(), LlmError> {
    match shape {
        Shape::Object(fields) => fields.iter().try_for_each(|(_, v)| validate(v)),
        Shape::Array { items, .. } => validate(items),
        Shape::OneOf(options) if options.is_empty() => Err(LlmError::Inference(
            "the answer's shape has a choice with no options".into(),
        )),
        Shape::Int { min, max } if min > max => Err(LlmError::Inference(format!(
            "the answer's shape has an empty number range {min}..={max}"
        ))),
        _ => Ok(()),
    }
}

/// Decodes an answer of `shape` after `prompt`. The answer is at most `max_tokens` tokens: free text and lists
/// stop early enough that the rest of the structure still fits.
pub(crate) fn shaped<S: LogitSource, V: Vocabulary>(
    src: &mut S,
    vocab: &V,
    prompt: &[u32],
    shape: &Shape,
    max_tokens: usize,
    deadline: Deadline,
) -> Result<Decoded, LlmError> {
    validate(shape)?;
    let least = reserve(shape);
    if least > max_tokens {
        return Err(LlmError::Inference(format!(
            "max_tokens {max_tokens} is below the {least} the answer's shape may need"
        )));
    }
    let mut d = Shaped {
        src,
        vocab,
        out: Vec::new(),
        unfed_tokens: prompt.to_vec(),
        unfed_text: Vec::new(),
        committed: 0,
        max_tokens,
        deadline,
        hint: None,
    };
    d.value(shape, 0)?;
    let tail = encode_bytes(d.vocab, &d.unfed_text)?.len();
    let text = String::from_utf8(d.out)
        .map_err(|_| LlmError::Inference("decoded bytes are not UTF-8".into()))?;
    Ok(Decoded {
        text,
        tokens: d.committed + tail,
    })
}

/// What a quoted or bare literal may become.
enum Lit<'a> {
    /// Free text of at most `max_chars` characters, no quote, backslash or control character.
    Text { max_chars: usize },
    /// One of these (already JSON-escaped when `quoted`).
    Options { options: &'a [String], quoted: bool },
    /// A whole number in `min..=max`, no leading zeros.
    Int { min: i64, max: i64 },
}

/// A literal's text so far, with what checking one more token needs precomputed.
struct Cur {
    bytes: Vec<u8>,
    chars: usize,
    /// The bytes of a character still being written (empty when the text ends on a whole character).
    open: Vec<u8>,
}

impl Cur {
    fn new(bytes: &[u8]) -> Cur {
        let open_from = bytes
            .iter()
            .rposition(|b| !(0x80..0xC0).contains(b))
            .filter(|&p| utf8_missing(&bytes[p..]) > 0)
            .unwrap_or(bytes.len());
        Cur {
            bytes: bytes.to_vec(),
            chars: char_count(bytes),
            open: bytes[open_from..].to_vec(),
        }
    }

    /// The open character followed by `add`: all UTF-8 checks of the text grown by `add` need.
    fn tail_with(&self, add: &[u8]) -> Vec<u8> {
        let mut t = self.open.clone();
        t.extend_from_slice(add);
        t
    }
}

impl Lit<'_> {
    fn quoted(&self) -> bool {
        match self {
            Lit::Text { .. } => true,
            Lit::Options { quoted, .. } => *quoted,
            Lit::Int { .. } => false,
        }
    }

    /// Whether the text grown by `add` can still become a value.
    fn extends(&self, cur: &Cur, add: &[u8]) -> bool {
        match self {
            Lit::Text { max_chars } => {
                !add.iter().any(|&b| b == b'"' || b == b'\\' || b < 0x20)
                    && utf8_state(&cur.tail_with(add)).is_some()
                    && cur.chars + char_count(add) <= *max_chars
            }
            Lit::Options { options, .. } => options.iter().any(|o| {
                o.as_bytes()
                    .strip_prefix(cur.bytes.as_slice())
                    .is_some_and(|rest| rest.starts_with(add))
            }),
            Lit::Int { min, max } => {
                let mut t = cur.bytes.clone();
                t.extend_from_slice(add);
                int_prefix_ok(&t, *min, *max)
            }
        }
    }

    /// Whether the text grown by `add` is a value as it stands.
    fn completes(&self, cur: &Cur, add: &[u8]) -> bool {
        match self {
            Lit::Text { .. } => {
                self.extends(cur, add) && utf8_state(&cur.tail_with(add)) == Some(true)
            }
            Lit::Options { options, .. } => options.iter().any(|o| {
                o.as_bytes()
                    .strip_prefix(cur.bytes.as_slice())
                    .is_some_and(|rest| rest == add)
            }),
            Lit::Int { min, max } => {
                let mut t = cur.bytes.clone();
                t.extend_from_slice(add);
                std::str::from_utf8(&t)
                    .ok()
                    .filter(|t| canonical_int(t))
                    .and_then(|t| t.parse::<i64>().ok())
                    .is_some_and(|n| (*min..=*max).contains(&n))
            }
        }
    }

    /// The bytes that can follow in some value (not used for free text, where nearly every byte can).
    fn next_bytes(&self, cur: &Cur) -> Vec<u8> {
        match self {
            Lit::Text { .. } => Vec::new(),
            Lit::Options { options, .. } => {
                let mut next: Vec<u8> = options
                    .iter()
                    .filter_map(|o| {
                        o.as_bytes()
                            .strip_prefix(cur.bytes.as_slice())
                            .and_then(|r| r.first().copied())
                    })
                    .collect();
                next.sort_unstable();
                next.dedup();
                next
            }
            Lit::Int { .. } => b"-0123456789"
                .iter()
                .copied()
                .filter(|&b| self.extends(cur, &[b]))
                .collect(),
        }
    }

    /// How a token continues the text: as more of the value, or as the value's end (with the part before it).
    fn classify<'t>(&self, cur: &Cur, token: &'t [u8]) -> Option<Step<'t>> {
        if self.quoted() {
            // The value ends at a quote followed only by structure.
            for (i, _) in token.iter().enumerate().filter(|(_, b)| **b == b'"') {
                let (head, rest) = (&token[..i], &token[i + 1..]);
                if all_structural(rest) && self.completes(cur, head) {
                    return Some(Step::Close { head, tail: rest });
                }
            }
        } else if let Some(i) = token.iter().position(|&b| is_structural(b)) {
            let (head, rest) = token.split_at(i);
            return (all_structural(rest) && self.completes(cur, head))
                .then_some(Step::Close { head, tail: rest });
        }
        self.extends(cur, token).then_some(Step::More)
    }
}

enum Step<'t> {
    More,
    Close { head: &'t [u8], tail: &'t [u8] },
}

/// `-0`, `007` and `-` alone are not JSON numbers.
fn canonical_int(t: &str) -> bool {
    let digits = t.strip_prefix('-').unwrap_or(t);
    !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" && !t.starts_with('-') || !digits.starts_with('0'))
}

/// Whether some whole number in `min..=max` is written starting with `s`.
fn int_prefix_ok(s: &[u8], min: i64, max: i64) -> bool {
    let Ok(t) = std::str::from_utf8(s) else {
        return false;
    };
    let (negative, digits) = match t.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, t),
    };
    if digits.is_empty() {
        return !negative || min < 0;
    }
    if !canonical_int(t) || digits.len() > 19 {
        return false;
    }
    if digits == "0" {
        return (min..=max).contains(&0);
    }
    let Ok(base) = digits.parse::<i128>() else {
        return false;
    };
    // Numbers written as `digits` plus k more digits: magnitudes base·10^k ..= base·10^k + 10^k − 1.
    let (lo, hi) = (i128::from(min), i128::from(max));
    let mut scale: i128 = 1;
    for _ in 0..=(19 - digits.len()) {
        let (a, b) = (base * scale, base * scale + scale - 1);
        let (a, b) = if negative { (-b, -a) } else { (a, b) };
        if a <= hi && b >= lo {
            return true;
        }
        scale *= 10;
    }
    false
}

struct Shaped<'a, S, V> {
    src: &'a mut S,
    vocab: &'a V,
    /// The answer so far.
    out: Vec<u8>,
    /// Tokens the model has not read yet (the prompt, then each picked token), read before `unfed_text`.
    unfed_tokens: Vec<u32>,
    /// Bytes the decoder wrote that the model has not read yet.
    unfed_text: Vec<u8>,
    /// Answer tokens read by the model or picked (the prompt excluded).
    committed: usize,
    max_tokens: usize,
    deadline: Deadline,
    /// The structure byte (`,` or `]`) the token that ended the last value carried: the model's own word on
    /// whether a list goes on.
    hint: Option<u8>,
}

impl<S: LogitSource, V: Vocabulary> Shaped<'_, S, V> {
    fn force(&mut self, text: &str) {
        self.force_bytes(text.as_bytes());
    }

    fn force_bytes(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
        self.unfed_text.extend_from_slice(bytes);
    }

    /// Answer tokens so far, counting unread forced text at a byte a token (an upper bound).
    fn used(&self) -> usize {
        self.committed + self.unfed_text.len()
    }

    /// Feeds everything unread and returns the next token's logits.
    fn logits(&mut self) -> Result<Vec<f32>, LlmError> {
        let mut tokens = std::mem::take(&mut self.unfed_tokens);
        if !self.unfed_text.is_empty() {
            let forced = encode_bytes(self.vocab, &self.unfed_text)?;
            self.committed += forced.len();
            tokens.extend(forced);
            self.unfed_text.clear();
        }
        self.deadline.check()?;
        let logits = self.src.feed(&tokens)?;
        self.deadline.check()?;
        Ok(logits)
    }

    fn take(&mut self, id: u32, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
        self.unfed_tokens.push(id);
        self.committed += 1;
    }

    /// Decodes one value; `after` is the room (bytes) the structure after it needs.
    fn value(&mut self, shape: &Shape, after: usize) -> Result<(), LlmError> {
        self.hint = None;
        match shape {
            Shape::Object(fields) => {
                self.force("{");
                for (i, (k, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        self.force(",");
                    }
                    self.force(&json_key(k));
                    self.force(":");
                    let rest: usize = fields[i + 1..]
                        .iter()
                        .map(|(k, v)| 1 + json_key(k).len() + 1 + reserve(v))
                        .sum();
                    self.value(v, after + rest + 1)?;
                }
                self.force("}");
                self.hint = None;
            }
            Shape::Array { items, min, max } => self.array(items, *min, *max, after)?,
            Shape::Text { max_chars } => {
                self.force("\"");
                self.literal(
                    &Lit::Text {
                        max_chars: *max_chars,
                    },
                    after,
                )?;
            }
            Shape::OneOf(options) => {
                let options: Vec<String> = options.iter().map(|o| escaped(o)).collect();
                self.force("\"");
                self.literal(
                    &Lit::Options {
                        options: &options,
                        quoted: true,
                    },
                    after,
                )?;
            }
            Shape::Bool => {
                let options = ["true".to_owned(), "false".to_owned()];
                self.literal(
                    &Lit::Options {
                        options: &options,
                        quoted: false,
                    },
                    after,
                )?;
            }
            Shape::Int { min, max } => self.literal(
                &Lit::Int {
                    min: *min,
                    max: *max,
                },
                after,
            )?,
        }
        Ok(())
    }

    fn array(
        &mut self,
        items: &Shape,
        min: usize,
        max: usize,
        after: usize,
    ) -> Result<(), LlmError> {
        self.force("[");
        let mut n = 0;
        while n < max {
            // Room for this item and the rest of the minimum (reserved by `reserve`, so the minimum always fits).
            let still = min.saturating_sub(n + 1) * (reserve(items) + 1);
            let room = self.used() + usize::from(n > 0) + reserve(items) + 1 + still + after;
            if room > self.max_tokens && n >= min {
                break;
            }
            let more = match (n, self.hint.take()) {
                _ if n < min => true,
                (0, _) | (_, None) => {
                    let logits = self.logits()?;
                    self.prefers_more(&logits, items, n == 0)
                }
                (_, Some(b)) => b == b',',
            };
            if !more {
                break;
            }
            if n > 0 {
                self.force(",");
            }
            self.value(items, after + 1)?;
            n += 1;
        }
        self.force("]");
        self.hint = None;
        Ok(())
    }

    /// Whether the model would rather start (`first`) or continue the list than close it.
    fn prefers_more(&self, logits: &[f32], items: &Shape, first: bool) -> bool {
        let opens: &[u8] = match items {
            Shape::Object(_) => b"{",
            Shape::Array { .. } => b"[",
            Shape::Text { .. } | Shape::OneOf(_) => b"\"",
            Shape::Bool => b"tf",
            Shape::Int { .. } => b"-0123456789",
        };
        let mut best_more = f32::NEG_INFINITY;
        let mut best_close = f32::NEG_INFINITY;
        for (i, &l) in logits.iter().take(self.vocab.len()).enumerate() {
            let Some(b) = self.vocab.bytes(i as u32).and_then(first_solid) else {
                continue;
            };
            if b == b']' {
                best_close = best_close.max(l);
            } else if (first && opens.contains(&b)) || (!first && b == b',') {
                best_more = best_more.max(l);
            }
        }
        best_more > best_close
    }

    /// Decodes a string's content (after its opening quote, through its closing one) or a bare literal.
    fn literal(&mut self, lit: &Lit<'_>, after: usize) -> Result<(), LlmError> {
        let start = self.out.len();
        loop {
            let cur = Cur::new(&self.out[start..]);
            let complete = lit.completes(&cur, b"");
            match lit {
                Lit::Text { max_chars } => {
                    if complete && cur.chars >= *max_chars {
                        return self.close(lit, None);
                    }
                }
                // Write what the shape leaves no choice about.
                _ => match (complete, lit.next_bytes(&cur).as_slice()) {
                    (true, []) => return self.close(lit, None),
                    (false, [only]) => {
                        self.force_bytes(&[*only]);
                        continue;
                    }
                    (false, []) => {
                        return Err(LlmError::Inference("the answer reached a dead end".into()));
                    }
                    _ => {}
                },
            }
            let logits = self.logits()?;
            let (vocab, used, max) = (self.vocab, self.used(), self.max_tokens);
            // Free text may only grow while the rest of the answer still fits; a choice's longest outcome was
            // reserved already. `need` counts this step's tokens, the closing quote and what comes after.
            let fits = |step: &Step<'_>, joined_missing: usize| match (lit, step) {
                (Lit::Text { .. }, Step::More) => used + 1 + joined_missing + 1 + after <= max,
                (Lit::Text { .. }, Step::Close { head, .. }) => {
                    used + head.len() + 1 + after <= max
                }
                _ => true,
            };
            let classify = |id: u32| {
                let bytes = vocab.bytes(id).filter(|b| !b.is_empty())?;
                let step = lit.classify(&cur, bytes)?;
                fits(&step, utf8_missing(&cur.tail_with(bytes))).then_some((bytes, step))
            };
            let picked = argmax(&logits, vocab.len(), |id| classify(id).is_some())
                .and_then(|(id, _)| Some((id, classify(id)?)));
            match picked {
                Some((id, (bytes, Step::More))) => self.take(id, bytes),
                Some((_, (_, Step::Close { head, tail }))) => {
                    self.force_bytes(head);
                    return self.close(lit, first_solid(tail));
                }
                // Nothing may follow (the budget, or a vocabulary that cannot go on): end the value here.
                None if complete => return self.close(lit, None),
                None => {
                    return Err(LlmError::Inference(
                        "no token continues the answer under its shape".into(),
                    ));
                }
            }
        }
    }

    fn close(&mut self, lit: &Lit<'_>, hint: Option<u8>) -> Result<(), LlmError> {
        if lit.quoted() {
            self.force("\"");
        }
        self.hint = hint.filter(|b| matches!(b, b',' | b']'));
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// A vocabulary like a byte-level BPE's: every single byte, some merges that straddle JSON structure (`",`,
    /// `"]`, `true,`), multi-byte pieces, and two control tokens (ids 0 and 1).
    struct FakeVocab {
        tokens: Vec<Option<Vec<u8>>>,
    }

    impl FakeVocab {
        fn new() -> FakeVocab {
            let mut tokens: Vec<Option<Vec<u8>>> = vec![None, None];
            for b in 0..=255u8 {
                tokens.push(Some(vec![b]));
            }
            for t in [
                "\",", "\"]", "\"}", "],", "]}", "},", "}]", ", ", "true", "false", "true,", "fal",
                "se", "dec", "decision", "stan", "standard", "the", " the", " cat", "cat", "sat",
                " sat", "12", "123", "99", "-4", "0,", "7]", " on", " mat", "tests", "é", "ab\"",
                "x\\", "\"x", "{\"", "\":", "\":\"", "[\"", "hello", " world", "ok", "no",
            ] {
                tokens.push(Some(t.as_bytes().to_vec()));
            }
            // The two halves of "ü" as separate tokens, as byte-level vocabularies have them.
            tokens.push(Some(vec![0xC3]));
            tokens.push(Some(vec![0xBC]));
            FakeVocab { tokens }
        }

        fn text_of(&self, ids: &[u32]) -> Vec<u8> {
            ids.iter()
                .filter_map(|&i| self.tokens[i as usize].clone())
                .flatten()
                .collect()
        }
    }

    impl Vocabulary for FakeVocab {
        fn len(&self) -> usize {
            self.tokens.len()
        }
        fn bytes(&self, id: u32) -> Option<&[u8]> {
            self.tokens.get(id as usize)?.as_deref()
        }
        /// Longest match first.
        fn encode(&self, text: &str) -> Result<Vec<u32>, LlmError> {
            let mut rest = text.as_bytes();
            let mut ids = Vec::new();
            while !rest.is_empty() {
                let (id, len) = self
                    .tokens
                    .iter()
                    .enumerate()
                    .filter_map(|(i, t)| t.as_ref().map(|t| (i as u32, t)))
                    .filter(|(_, t)| rest.starts_with(t))
                    .map(|(i, t)| (i, t.len()))
                    .max_by_key(|&(i, len)| (len, std::cmp::Reverse(i)))
                    .unwrap();
                ids.push(id);
                rest = &rest[len..];
            }
            Ok(ids)
        }
        fn byte_token(&self, b: u8) -> Option<u32> {
            Some(2 + u32::from(b))
        }
    }

    /// A stand-in for a model (the decoder's logic needs no real one): it steers towards `target`, scoring a
    /// token by how far it extends the answer so far along the target; everything else gets a small
    /// pseudo-random score from `seed`, so where the target cannot be followed the choice is arbitrary.
    struct Steer<'v> {
        vocab: &'v FakeVocab,
        target: Vec<u8>,
        seed: u64,
        fed: Vec<u32>,
        calls: usize,
    }

    impl<'v> Steer<'v> {
        fn new(vocab: &'v FakeVocab, target: &str, seed: u64) -> Steer<'v> {
            Steer {
                vocab,
                target: target.as_bytes().to_vec(),
                seed,
                fed: Vec::new(),
                calls: 0,
            }
        }
    }

    fn noise(seed: u64, a: u64, b: u64) -> f32 {
        let mut x =
            seed ^ a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ b.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
        x ^= x >> 33;
        x = x.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
        x ^= x >> 33;
        (x % 1000) as f32 / 1000.0
    }

    impl LogitSource for Steer<'_> {
        fn feed(&mut self, tokens: &[u32]) -> Result<Vec<f32>, LlmError> {
            self.calls += 1;
            self.fed.extend_from_slice(tokens);
            let so_far = self.vocab.text_of(&self.fed[PROMPT.len()..]);
            let on_track = self.target.starts_with(&so_far);
            Ok((0..self.vocab.len())
                .map(|i| {
                    let base = noise(self.seed, self.fed.len() as u64, i as u64);
                    match &self.vocab.tokens[i] {
                        Some(t) if on_track && self.target[so_far.len()..].starts_with(t) => {
                            10.0 + t.len() as f32
                        }
                        _ => base,
                    }
                })
                .collect())
        }
    }

    fn entry() -> Shape {
        Shape::object([
            ("type", Shape::one_of(["decision", "standard", "de"])),
            ("topic", Shape::Text { max_chars: 12 }),
            ("keep", Shape::Bool),
            ("score", Shape::Int { min: -5, max: 120 }),
            ("tags", Shape::array(Shape::Text { max_chars: 8 }, 3)),
        ])
    }

    const PROMPT: [u32; 3] = [0, 5, 6];

    fn run(shape: &Shape, target: &str, seed: u64, max_tokens: usize) -> (Decoded, usize) {
        let vocab = FakeVocab::new();
        let mut src = Steer::new(&vocab, target, seed);
        let d = shaped(
            &mut src,
            &vocab,
            &PROMPT,
            shape,
            max_tokens,
            Deadline::after(Duration::from_secs(60)),
        )
        .unwrap();
        // What the model read is the prompt and then a prefix of the answer (nothing, when the shape left no
        // choice at all).
        if !src.fed.is_empty() {
            assert_eq!(&src.fed[..3], &PROMPT);
        }
        let read = vocab.text_of(src.fed.get(3..).unwrap_or_default());
        assert!(
            d.text.as_bytes().starts_with(&read),
            "{} vs {:?}",
            d.text,
            String::from_utf8_lossy(&read)
        );
        (d, src.calls)
    }

    fn parsed(d: &Decoded, shape: &Shape) -> Value {
        let v: Value = serde_json::from_str(&d.text).unwrap_or_else(|e| panic!("{}: {e}", d.text));
        shape
            .check(&v)
            .unwrap_or_else(|e| panic!("{}: {e}", d.text));
        v
    }

    #[test]
    fn a_model_that_wants_a_valid_answer_gets_exactly_it() {
        // Targets are written in the shape's field order (the order the decoder writes them in).
        let want = r#"{"type":"standard","topic":"the cat sat","keep":false,"score":99,"tags":["hello","ok"]}"#;
        let (d, _) = run(&entry(), want, 1, 200);
        assert_eq!(d.text, want);
        parsed(&d, &entry());
        // The choice among options that are prefixes of each other ("de" / "decision") is the model's.
        for t in ["de", "decision"] {
            let want = format!(r#"{{"type":"{t}","topic":"","keep":true,"score":-4,"tags":[]}}"#);
            let (d, _) = run(&entry(), &want, 2, 200);
            assert_eq!(d.text, want);
            parsed(&d, &entry());
        }
    }

    #[test]
    fn whatever_the_model_prefers_the_answer_checks_and_keeps_its_bounds() {
        let shapes = [
            entry(),
            Shape::array(entry(), 2),
            Shape::array(Shape::Int { min: 3, max: 7 }, 4),
            Shape::array(Shape::Bool, 5),
            Shape::Int {
                min: i64::MIN,
                max: i64::MAX,
            },
            Shape::Int { min: 42, max: 42 },
            Shape::one_of(["a\"b", "back\\slash", "ü"]),
            Shape::Text { max_chars: 1 },
            Shape::array(Shape::array(Shape::one_of(["x", "y"]), 2), 2),
            // A list with a minimum: the model's wish to close it early is overruled.
            Shape::array_of(Shape::Int { min: 1, max: 9 }, 2, 4),
            Shape::object([(
                "sources",
                Shape::array_of(Shape::Int { min: 1, max: 3 }, 1, 6),
            )]),
        ];
        for (i, shape) in shapes.iter().enumerate() {
            for seed in 0..20 {
                // Targets that no valid answer follows far: the noise decides most choices.
                for target in [
                    "{\"type\":\"vibe\"",
                    "[[[",
                    "\"ab\\\"",
                    "garbage",
                    "150",
                    "{\"keep\":maybe}",
                ] {
                    let (d, _) = run(shape, target, seed * 7 + i as u64, 400);
                    parsed(&d, shape);
                    assert!(d.tokens <= 400);
                }
            }
        }
    }

    #[test]
    fn text_never_holds_quotes_backslashes_or_control_characters_and_stops_at_max_chars() {
        let shape = Shape::object([("t", Shape::Text { max_chars: 6 })]);
        let (d, _) = run(&shape, "{\"t\":\"ab\\\"c\\n\u{1}déf ghi\"}", 3, 100);
        let v = parsed(&d, &shape);
        let t = v["t"].as_str().unwrap();
        assert!(
            t.chars().count() <= 6 && !t.contains(['"', '\\', '\u{1}']),
            "{t:?}"
        );
        // A character split across two tokens is completed, never cut.
        let (d, _) = run(&shape, "{\"t\":\"üüüüüüüü\"}", 3, 100);
        assert_eq!(parsed(&d, &shape)["t"], "üüüüüü");
    }

    #[test]
    fn lists_can_be_empty_stop_at_their_max_and_follow_the_closing_token() {
        let shape = Shape::array(Shape::Text { max_chars: 5 }, 2);
        let (d, _) = run(&shape, "[]", 0, 50);
        assert_eq!(parsed(&d, &shape), json!([]));
        let (d, _) = run(&shape, "[\"a\",\"b\",\"c\",\"d\"]", 0, 50);
        assert_eq!(parsed(&d, &shape), json!(["a", "b"]));
        // A token that ends a string and the list at once (`"]`) ends the list without asking again.
        let (d, calls) = run(
            &Shape::array(Shape::Text { max_chars: 10 }, 5),
            "[\"the\"]",
            0,
            50,
        );
        assert_eq!(d.text, "[\"the\"]");
        assert_eq!(calls, 3, "start the list, `the`, then `\"]`");
    }

    #[test]
    fn numbers_stay_in_range_and_bools_are_one_choice() {
        let shape = Shape::Int { min: 0, max: 100 };
        let (d, _) = run(&shape, "150", 0, 10);
        let n = parsed(&d, &shape).as_i64().unwrap();
        assert!(
            (0..=100).contains(&n) && d.text.starts_with('1'),
            "{}",
            d.text
        );
        let (d, _) = run(&shape, "007", 0, 10);
        assert_eq!(d.text, "0");
        let (d, calls) = run(&Shape::Bool, "false", 0, 10);
        assert_eq!((d.text.as_str(), calls), ("false", 1));
    }

    #[test]
    fn the_token_budget_holds_and_still_closes_every_bracket() {
        let shape = Shape::object([("tags", Shape::array(Shape::Text { max_chars: 100 }, 8))]);
        let long = format!(
            "{{\"tags\":[\"{}\",\"{}\"]}}",
            "the cat sat on the mat ".repeat(3),
            "hello world"
        );
        for max in [reserve(&shape), 12, 20, 31, 64] {
            let (d, _) = run(&shape, &long, 0, max);
            parsed(&d, &shape);
            assert!(d.tokens <= max, "{} tokens > {max}: {}", d.tokens, d.text);
        }
        let vocab = FakeVocab::new();
        let err = shaped(
            &mut Steer::new(&vocab, "", 0),
            &vocab,
            &PROMPT,
            &entry(),
            5,
            Deadline::after(Duration::from_secs(5)),
        );
        assert!(matches!(err, Err(LlmError::Inference(m)) if m.contains("max_tokens 5")));
    }

    #[test]
    fn impossible_shapes_and_a_passed_deadline_are_errors() {
        let vocab = FakeVocab::new();
        let far = Deadline::after(Duration::from_secs(5));
        for bad in [Shape::OneOf(vec![]), Shape::Int { min: 3, max: 2 }] {
            let r = shaped(
                &mut Steer::new(&vocab, "", 0),
                &vocab,
                &PROMPT,
                &bad,
                50,
                far,
            );
            assert!(matches!(r, Err(LlmError::Inference(_))), "{bad:?}");
        }
        let gone = Deadline {
            at: Instant::now(),
            timeout: Duration::from_millis(1),
        };
        let r = shaped(
            &mut Steer::new(&vocab, "", 0),
            &vocab,
            &PROMPT,
            &entry(),
            200,
            gone,
        );
        assert!(matches!(r, Err(LlmError::Timeout(_))));
        let r = plain(
            &mut Steer::new(&vocab, "", 0),
            &vocab,
            &PROMPT,
            10,
            |_| false,
            gone,
        );
        assert!(matches!(r, Err(LlmError::Timeout(_))));
    }

    #[test]
    fn plain_text_stops_at_an_end_token_or_the_budget() {
        let vocab = FakeVocab::new();
        let far = Deadline::after(Duration::from_secs(5));
        let d = plain(
            &mut Steer::new(&vocab, "the cat sat on the mat", 0),
            &vocab,
            &PROMPT,
            3,
            |_| false,
            far,
        )
        .unwrap();
        assert_eq!((d.text.as_str(), d.tokens), ("the cat sat", 3));
        // Past its target the steering source's favourite is noise; an end token chosen by `is_end` stops it.
        let end = vocab.encode(" mat").unwrap()[0];
        let d = plain(
            &mut Steer::new(&vocab, "the cat sat on the mat", 0),
            &vocab,
            &PROMPT,
            50,
            |id| id == end,
            far,
        )
        .unwrap();
        assert_eq!((d.text.as_str(), d.tokens), ("the cat sat on the", 5));
    }

    #[test]
    fn number_prefixes() {
        assert!(
            int_prefix_ok(b"1", 0, 100)
                && int_prefix_ok(b"10", 0, 100)
                && int_prefix_ok(b"100", 0, 100)
        );
        assert!(
            !int_prefix_ok(b"101", 0, 100)
                && !int_prefix_ok(b"01", 0, 100)
                && !int_prefix_ok(b"-", 0, 100)
        );
        assert!(
            int_prefix_ok(b"-", -5, 0)
                && int_prefix_ok(b"-5", -5, 0)
                && !int_prefix_ok(b"-6", -5, 0)
        );
        assert!(!int_prefix_ok(b"-0", -5, 0) && int_prefix_ok(b"0", -5, 0));
        assert!(int_prefix_ok(b"9223372036854775807", i64::MIN, i64::MAX));
        assert!(!int_prefix_ok(b"9223372036854775808", i64::MIN, i64::MAX));
        assert!(int_prefix_ok(b"-9223372036854775808", i64::MIN, i64::MAX));
    }
}
