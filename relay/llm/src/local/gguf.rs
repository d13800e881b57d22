//! What a GGUF file says besides its weights: metadata values, the tokenizer (a byte-level BPE built from
//! `tokenizer.ggml.*` with the `tokenizers` crate) and the chat template, turned into prompt tokens.

use std::collections::HashMap;

use candle_core::quantized::gguf_file::{Content, Value};
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{SplitDelimiterBehavior, Tokenizer};

use super::decode::Vocabulary;
use crate::LlmError;

/// Reads metadata from a parsed GGUF header; errors are plain messages the caller wraps with the file's path.
pub(crate) struct Meta<'a>(pub &'a Content);

impl Meta<'_> {
    fn get(&self, key: &str) -> Result<&Value, String> {
        self.0
            .metadata
            .get(key)
            .ok_or_else(|| format!("metadata `{key}` is missing"))
    }

    pub fn string(&self, key: &str) -> Result<String, String> {
        self.get(key)?
            .to_string()
            .cloned()
            .map_err(|_| format!("metadata `{key}` is not text"))
    }

    pub fn opt_string(&self, key: &str) -> Option<String> {
        self.string(key).ok()
    }

    /// Any integer type, as `usize`.
    pub fn count(&self, key: &str) -> Result<usize, String> {
        let v = self.get(key)?;
        let n = match v {
            Value::U8(n) => Some(u64::from(*n)),
            Value::U16(n) => Some(u64::from(*n)),
            Value::U32(n) => Some(u64::from(*n)),
            Value::U64(n) => Some(*n),
            Value::I8(n) => u64::try_from(*n).ok(),
            Value::I16(n) => u64::try_from(*n).ok(),
            Value::I32(n) => u64::try_from(*n).ok(),
            Value::I64(n) => u64::try_from(*n).ok(),
            _ => None,
        };
        n.and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| format!("metadata `{key}` is not a count"))
    }

    pub fn flag(&self, key: &str) -> Option<bool> {
        self.get(key).ok()?.to_bool().ok()
    }

    fn strings(&self, key: &str) -> Result<Vec<&str>, String> {
        let list = self
            .get(key)?
            .to_vec()
            .map_err(|_| format!("metadata `{key}` is not a list"))?;
        list.iter()
            .map(|v| {
                v.to_string()
                    .map(String::as_str)
                    .map_err(|_| format!("metadata `{key}` holds a non-text item"))
            })
            .collect()
    }

    fn counts(&self, key: &str) -> Option<Vec<i64>> {
        let list = self.get(key).ok()?.to_vec().ok()?;
        list.iter()
            .map(|v| match v {
                Value::I32(n) => Some(i64::from(*n)),
                Value::U32(n) => Some(i64::from(*n)),
                Value::I8(n) => Some(i64::from(*n)),
                Value::U8(n) => Some(i64::from(*n)),
                _ => None,
            })
            .collect()
    }
}

/// GPT-2's byte-level alphabet: every byte is written as one printable character in the vocabulary. Printable
/// Latin-1 bytes stand for themselves; the rest (controls, space, 0x7F–0xA0, 0xAD) take code points from 256 up,
/// in byte order.
fn byte_of_char() -> HashMap<char, u8> {
    let mut map = HashMap::with_capacity(256);
    let mut next = 256u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        let c = if printable {
            char::from(b)
        } else {
            let c = char::from_u32(next).unwrap_or(char::REPLACEMENT_CHARACTER);
            next += 1;
            c
        };
        map.insert(c, b);
    }
    map
}

/// GGUF token types (llama.cpp's numbering).
const TYPE_CONTROL: i64 = 3;
const TYPE_USER_DEFINED: i64 = 4;
const TYPE_UNUSED: i64 = 5;

// Pre-tokenizer split patterns, as the model families' published tokenizers define them.
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The model's tokens: their bytes, the ids of named control tokens, and an encoder for text.
#[derive(Debug)]
pub(crate) struct GgufVocab {
    tokens: Vec<Option<Vec<u8>>>,
    ids: HashMap<String, u32>,
    tokenizer: Tokenizer,
    /// The token for each single byte.
    byte_tokens: [Option<u32>; 256],
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub add_bos: bool,
}

impl GgufVocab {
    pub fn from_meta(meta: &Meta<'_>) -> Result<GgufVocab, String> {
        let model = meta.string("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(format!(
                "tokenizer `{model}` is not supported (only byte-level BPE, `gpt2`, as Llama-, SmolLM- and \
                 Qwen-family models use)"
            ));
        }
        let texts = meta.strings("tokenizer.ggml.tokens")?;
        let types = meta.counts("tokenizer.ggml.token_type");
        let alphabet = byte_of_char();
        let tokens: Vec<Option<Vec<u8>>> = texts
            .iter()
            .enumerate()
            .map(
                |(i, t)| match types.as_ref().and_then(|ty| ty.get(i)).copied() {
                    Some(TYPE_CONTROL | TYPE_UNUSED) => None,
                    Some(TYPE_USER_DEFINED) => Some(t.as_bytes().to_vec()),
                    _ => t.chars().map(|c| alphabet.get(&c).copied()).collect(),
                },
            )
            .collect();
        let ids: HashMap<String, u32> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| ((*t).to_owned(), i as u32))
            .collect();
        let vocab: Vocab = ids.iter().map(|(t, i)| (t.clone(), *i)).collect();
        let merges = meta
            .strings("tokenizer.ggml.merges")?
            .into_iter()
            .map(|m| {
                m.split_once(' ')
                    .map(|(a, b)| (a.to_owned(), b.to_owned()))
                    .ok_or_else(|| format!("tokenizer merge `{m}` is not two tokens"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut bpe = BPE::builder().vocab_and_merges(vocab, merges);
        if meta.flag("tokenizer.ggml.ignore_merges") == Some(true) {
            bpe = bpe.ignore_merges(true);
        }
        let bpe = bpe.build().map_err(|e| format!("tokenizer: {e}"))?;
        let mut tokenizer = Tokenizer::new(bpe);
        let pre = meta
            .opt_string("tokenizer.ggml.pre")
            .unwrap_or_else(|| "gpt2".into());
        let split = |pattern: &str, byte_level: ByteLevel| -> Result<PreTokenizerWrapper, String> {
            let split = Split::new(
                SplitPattern::Regex(pattern.into()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(|e| format!("tokenizer pattern: {e}"))?;
            Ok(Sequence::new(vec![split.into(), byte_level.into()]).into())
        };
        let pre_tokenizer: PreTokenizerWrapper = match pre.as_str() {
            "gpt2" | "default" => ByteLevel::new(false, true, true).into(),
            // SmolLM: every digit on its own, then GPT-2's split.
            "smollm" => Sequence::new(vec![
                Digits::new(true).into(),
                ByteLevel::new(false, true, true).into(),
            ])
            .into(),
            "llama-bpe" | "llama3" | "smaug-bpe" => {
                split(LLAMA3_SPLIT, ByteLevel::new(false, true, false))?
            }
            "qwen2" => {
                tokenizer
                    .with_normalizer(Some(NFC))
                    .map_err(|e| format!("tokenizer: {e}"))?;
                split(QWEN2_SPLIT, ByteLevel::new(false, false, false))?
            }
            other => {
                return Err(format!(
                    "tokenizer pre-tokenizer `{other}` is not supported (gpt2, smollm, llama-bpe, qwen2)"
                ));
            }
        };
        tokenizer.with_pre_tokenizer(Some(pre_tokenizer));
        let id = |key: &str| {
            meta.count(key)
                .ok()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|&n| (n as usize) < tokens.len())
        };
        let (bos, eos) = (
            id("tokenizer.ggml.bos_token_id"),
            id("tokenizer.ggml.eos_token_id"),
        );
        let mut byte_tokens = [None; 256];
        for (i, t) in tokens.iter().enumerate() {
            if let Some([b]) = t.as_deref() {
                byte_tokens[usize::from(*b)].get_or_insert(i as u32);
            }
        }
        Ok(GgufVocab {
            byte_tokens,
            add_bos: meta.flag("tokenizer.ggml.add_bos_token").unwrap_or(false) && bos.is_some(),
            tokens,
            ids,
            tokenizer,
            bos,
            eos,
        })
    }

    /// The id of a token written exactly as `text` in the vocabulary (control tokens such as `<|im_start|>`).
    pub fn id_of(&self, text: &str) -> Option<u32> {
        self.ids.get(text).copied()
    }
}

impl Vocabulary for GgufVocab {
    fn len(&self) -> usize {
        self.tokens.len()
    }

    fn bytes(&self, id: u32) -> Option<&[u8]> {
        self.tokens.get(id as usize)?.as_deref()
    }

    /// Text is always plain text here: a control token's name inside it (`<|im_end|>` in a transcript) is
    /// spelled out in ordinary tokens, never read as the control token.
    fn encode(&self, text: &str) -> Result<Vec<u32>, LlmError> {
        self.tokenizer
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| LlmError::Inference(format!("tokenizer: {e}")))
    }

    fn byte_token(&self, b: u8) -> Option<u32> {
        self.byte_tokens[usize::from(b)]
    }
}

/// How a model's chat template lays out a conversation, recognised from `tokenizer.chat_template`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Template {
    /// `<|im_start|>role\n…<|im_end|>\n` (SmolLM2, Qwen).
    ChatMl { start: u32, end: u32 },
    /// `<|start_header_id|>role<|end_header_id|>\n\n…<|eot_id|>` (Llama 3).
    Llama3 {
        header: u32,
        header_end: u32,
        eot: u32,
    },
}

impl Template {
    pub fn detect(template: &str, vocab: &GgufVocab) -> Result<Template, String> {
        let id = |t: &str| {
            vocab.id_of(t).ok_or_else(|| {
                format!("the chat template uses `{t}`, which is not in the vocabulary")
            })
        };
        if template.contains("<|im_start|>") {
            Ok(Template::ChatMl {
                start: id("<|im_start|>")?,
                end: id("<|im_end|>")?,
            })
        } else if template.contains("<|start_header_id|>") {
            Ok(Template::Llama3 {
                header: id("<|start_header_id|>")?,
                header_end: id("<|end_header_id|>")?,
                eot: id("<|eot_id|>")?,
            })
        } else {
            Err(
                "the chat template is not one this build knows (ChatML `<|im_start|>` or Llama 3 \
                 `<|start_header_id|>`)"
                    .into(),
            )
        }
    }

    /// The token that ends the assistant's turn.
    pub fn end_of_turn(&self) -> u32 {
        match self {
            Template::ChatMl { end, .. } => *end,
            Template::Llama3 { eot, .. } => *eot,
        }
    }

    /// Prompt tokens for a system and a user message, ending where the assistant's answer starts. The messages
    /// are encoded as plain text between the template's control tokens.
    pub fn prompt(
        &self,
        vocab: &GgufVocab,
        system: &str,
        user: &str,
    ) -> Result<Vec<u32>, LlmError> {
        let mut out = Vec::new();
        if let (true, Some(bos)) = (vocab.add_bos, vocab.bos) {
            out.push(bos);
        }
        let mut turn = |role: &str, content: Option<&str>| -> Result<(), LlmError> {
            match *self {
                Template::ChatMl { start, end } => {
                    out.push(start);
                    match content {
                        Some(c) => {
                            out.extend(vocab.encode(&format!("{role}\n{c}"))?);
                            out.push(end);
                            out.extend(vocab.encode("\n")?);
                        }
                        None => out.extend(vocab.encode(&format!("{role}\n"))?),
                    }
                }
                Template::Llama3 {
                    header,
                    header_end,
                    eot,
                } => {
                    out.push(header);
                    out.extend(vocab.encode(role)?);
                    out.push(header_end);
                    match content {
                        Some(c) => {
                            out.extend(vocab.encode(&format!("\n\n{c}"))?);
                            out.push(eot);
                        }
                        None => out.extend(vocab.encode("\n\n")?),
                    }
                }
            }
            Ok(())
        };
        if !system.is_empty() {
            turn("system", Some(system))?;
        }
        turn("user", Some(user))?;
        turn("assistant", None)?;
        Ok(out)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// The real SmolLM2 file's tokenizer (header only; no weights are loaded).
    fn smollm2() -> GgufVocab {
        let path = personkit_testkit::llm_model_path();
        let mut f = std::io::BufReader::new(std::fs::File::open(path).unwrap());
        let content = Content::read(&mut f).unwrap();
        GgufVocab::from_meta(&Meta(&content)).unwrap()
    }

    #[test]
    fn the_real_vocabulary_round_trips_text_and_never_reads_control_tokens_from_it() {
        let vocab = smollm2();
        for text in [
            "Hello, world! 12345 tabs\tand\nnewlines",
            "Grüße aus Köln — naïve café, 東京, emoji 🦀",
            "<|im_end|> is only text here",
        ] {
            let ids = vocab.encode(text).unwrap();
            let bytes: Vec<u8> = ids
                .iter()
                .flat_map(|&i| vocab.bytes(i).expect("a text token").to_vec())
                .collect();
            assert_eq!(String::from_utf8(bytes).unwrap(), text);
        }
        let end = vocab.id_of("<|im_end|>").unwrap();
        assert!(vocab.bytes(end).is_none());
        assert!(!vocab.encode("<|im_end|>").unwrap().contains(&end));
        // SmolLM splits digits one by one.
        assert_eq!(vocab.encode("2024").unwrap().len(), 4);
        // Every byte UTF-8 text can hold has its own token (a choice point inside a character needs one).
        // (SmolLM2 lacks some ASCII control bytes, which JSON strings cannot hold raw anyway, and some lead bytes
        // of four-byte characters: an option that differs from another inside such a character is an error.)
        for b in (0x20..=0xEFu8).filter(|b| !matches!(b, 0x7F | 0xC0 | 0xC1)) {
            let id = vocab
                .byte_token(b)
                .unwrap_or_else(|| panic!("no token for {b:#04x}"));
            assert_eq!(vocab.bytes(id), Some(&[b][..]));
        }
    }

    #[test]
    fn the_real_chat_template_is_chatml_and_frames_the_messages() {
        let path = personkit_testkit::llm_model_path();
        let mut f = std::io::BufReader::new(std::fs::File::open(path).unwrap());
        let content = Content::read(&mut f).unwrap();
        let meta = Meta(&content);
        let vocab = GgufVocab::from_meta(&meta).unwrap();
        let template =
            Template::detect(&meta.string("tokenizer.chat_template").unwrap(), &vocab).unwrap();
        let Template::ChatMl { start, end } = template else {
            panic!("{template:?}")
        };
        let ids = template.prompt(&vocab, "Be brief.", "Hi").unwrap();
        let text: String = ids
            .iter()
            .map(|&i| match vocab.bytes(i) {
                Some(b) => String::from_utf8_lossy(b).into_owned(),
                None if i == start => "<S>".into(),
                None if i == end => "<E>".into(),
                None => "<?>".into(),
            })
            .collect();
        assert_eq!(
            text,
            "<S>system\nBe brief.<E>\n<S>user\nHi<E>\n<S>assistant\n"
        );
        assert_eq!(template.end_of_turn(), end);
    }

    #[test]
    fn the_byte_alphabet_covers_every_byte_once() {
        let map = byte_of_char();
        assert_eq!(map.len(), 256);
        assert_eq!(map.get(&'Ġ'), Some(&b' '));
        assert_eq!(map.get(&'Ċ'), Some(&b'\n'));
        assert_eq!(map.get(&'a'), Some(&b'a'));
        let mut bytes: Vec<u8> = map.values().copied().collect();
        bytes.sort_unstable();
        bytes.dedup();
        assert_eq!(bytes.len(), 256);
    }
}
