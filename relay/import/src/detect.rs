//! What a path holds: a zip, a folder or one JSON file, and which export format each conversations file is —
//! told from the file's first bytes, not its name (a renamed `conversations.json` still imports; a
//! `conversations.json` that is not one is refused with what it looks like instead).

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use crate::ImportError;
use crate::stream::Shape;

/// The official export formats this crate reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// `conversations.json` / `conversations-NNN.json`: conversations with a `mapping` tree.
    ChatGpt,
    /// `conversations.json`: conversations with `chat_messages`.
    Claude,
    /// `prod-grok-backend.json`: `{conversations: [{conversation, responses}]}`.
    Grok,
    /// `conversations.json`: conversations with a `mapping` tree whose messages have `fragments`.
    DeepSeek,
    /// Google Takeout `My Activity/Gemini Apps/MyActivity.json`: prompt records, grouped by time.
    Gemini,
    /// The same activity as Takeout's `MyActivity.html` (`gemini::html_records`).
    GeminiHtml,
    /// Claude's `projects.json`: projects with their instructions and documents (`claude_projects`).
    ClaudeProjects,
    /// Perplexity's per-thread Markdown export (`perplexity`).
    Perplexity,
    /// Mistral Le Chat `chat-<uuid>.json`: one conversation, a bare list of messages (`lechat`).
    LeChat,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::ChatGpt => "chatgpt",
            Format::Claude => "claude",
            Format::Grok => "grok",
            Format::DeepSeek => "deepseek",
            Format::Gemini | Format::GeminiHtml => "gemini",
            Format::LeChat => "lechat",
            Format::Perplexity => "perplexity",
            Format::ClaudeProjects => "claude-projects",
        }
    }

    pub fn shape(self) -> Shape {
        match self {
            Format::Grok => Shape::UnderKey("conversations"),
            _ => Shape::Array,
        }
    }
}

/// How many bytes of a file are looked at to tell its format.
const SNIFF_BYTES: usize = 64 * 1024;

/// What the first bytes of a JSON file say it is. `Ok(None)`: an empty list (nothing to import, any format).
pub fn sniff(head: &[u8]) -> Result<Option<Format>, String> {
    let text = String::from_utf8_lossy(head);
    let body = text.trim_start_matches('\u{feff}').trim_start();
    let has = |k: &str| body.contains(&format!("\"{k}\""));
    if !body.starts_with(['[', '{']) && crate::perplexity::looks_like(body) {
        return Ok(Some(Format::Perplexity));
    }
    match body.chars().next() {
        Some('[') => {
            if body[1..].trim_start().starts_with(']') {
                return Ok(None);
            }
            if has("prompt_template") && has("docs") && !has("chat_messages") {
                Ok(Some(Format::ClaudeProjects))
            } else if has("chatId") && has("role") && !has("mapping") {
                Ok(Some(Format::LeChat))
            } else if has("mapping") && (has("fragments") || has("inserted_at")) {
                Ok(Some(Format::DeepSeek))
            } else if has("mapping") {
                Ok(Some(Format::ChatGpt))
            } else if has("chat_messages") {
                Ok(Some(Format::Claude))
            } else if has("safeHtmlItem") || (has("header") && has("Gemini Apps")) {
                Ok(Some(Format::Gemini))
            } else {
                Err("a JSON list, but not of ChatGPT, Claude or DeepSeek conversations or Le Chat messages (no \"mapping\", \"chat_messages\" or \"chatId\" in its first element)".into())
            }
        }
        Some('{') => {
            if has("conversations") && has("responses") {
                Ok(Some(Format::Grok))
            } else if has("mapping") || has("chat_messages") {
                Err("one conversation object, not an export's list of conversations (wrap it in [ ] to import it)".into())
            } else {
                Err("a JSON object, but not a Grok export (no \"conversations\" with \"responses\")".into())
            }
        }
        Some('<') if text.contains("Gemini Apps") => Ok(Some(Format::GeminiHtml)),
        Some('<') => Err("HTML, but not Google Takeout's My Activity for Gemini Apps".into()),
        None => Err("the file is empty".into()),
        Some(_) => Err("not JSON (an export's conversations file starts with [ or {)".into()),
    }
}

/// [`sniff`], knowing the file's name: Takeout's `My Activity/Gemini Apps/MyActivity.html` may open with more inline
/// style than the sniffed bytes hold, so there the name decides.
fn sniff_named(name: &str, head: &[u8]) -> Result<Option<Format>, String> {
    let html = String::from_utf8_lossy(head)
        .trim_start_matches('\u{feff}')
        .trim_start()
        .starts_with('<');
    let base = name.rsplit(['/', '\\']).next().unwrap_or(name);
    if html && base == "MyActivity.html" && name.contains("Gemini") {
        return Ok(Some(Format::GeminiHtml));
    }
    if base.ends_with(".md") {
        return match sniff(head) {
            Ok(Some(Format::Perplexity)) => Ok(Some(Format::Perplexity)),
            _ => Err("a Markdown file, but not a Perplexity thread export".into()),
        };
    }
    match sniff(head) {
        // A Le Chat file that does not read as one is still that conversation's file: reading it reports why.
        Err(_) if crate::lechat::is_chat_name(base) => Ok(Some(Format::LeChat)),
        other => other,
    }
}

/// File names that may hold conversations inside an export zip or folder.
pub fn is_conversations_name(name: &str) -> bool {
    let base = name.rsplit(['/', '\\']).next().unwrap_or(name);
    if base == "conversations.json"
        || base == "prod-grok-backend.json"
        || base == "MyActivity.json"
        || base == "MyActivity.html"
        || base == "projects.json"
        || base.ends_with(".md")
    {
        return true;
    }
    crate::lechat::is_chat_name(base)
        || base
            .strip_prefix("conversations-")
            .and_then(|r| r.strip_suffix(".json"))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

fn is_activity(name: &str) -> bool {
    matches!(
        name.rsplit(['/', '\\']).next(),
        Some("MyActivity.json" | "MyActivity.html")
    )
}

/// A file whose name other exports use too (Takeout's activity of every product, a `projects.json`, any `.md`): it is read
/// only when its content is the format expected under that name, and otherwise passed over.
fn is_shared_name(name: &str) -> bool {
    let base = name.rsplit(['/', '\\']).next().unwrap_or(name);
    is_activity(name) || base == "projects.json" || base.ends_with(".md")
}

/// Whether a file of a shared name holds what this importer reads under that name.
fn expected_under_shared_name(name: &str, format: Option<Format>) -> bool {
    if is_activity(name) {
        matches!(format, Some(Format::Gemini | Format::GeminiHtml))
    } else if name.ends_with(".md") {
        format == Some(Format::Perplexity)
    } else {
        matches!(format, Some(Format::ClaudeProjects) | None)
    }
}

/// One conversations file of an input: where it is and its format.
#[derive(Debug, Clone)]
pub struct Member {
    /// As shown to people: the path, or `<zip>!<entry>`.
    pub label: String,
    pub format: Option<Format>,
    /// Uncompressed size, for progress.
    pub size: u64,
    location: Location,
}

#[derive(Debug, Clone)]
enum Location {
    File(PathBuf),
    Zip { zip: PathBuf, index: usize },
}

/// The conversations files a path holds, in name order (`conversations-000.json` before `-001`).
pub fn members(path: &Path) -> Result<Vec<Member>, ImportError> {
    let meta = std::fs::metadata(path).map_err(|e| ImportError::io(path, e))?;
    let mut out = if meta.is_dir() {
        folder_members(path)?
    } else if is_zip(path)? {
        zip_members(path)?
    } else {
        let head = read_head(File::open(path).map_err(|e| ImportError::io(path, e))?)
            .map_err(|e| ImportError::io(path, e))?;
        let format =
            sniff_named(&path.display().to_string(), &head).map_err(|why| ImportError::Format {
                file: path.display().to_string(),
                why,
            })?;
        vec![Member {
            label: path.display().to_string(),
            format,
            size: meta.len(),
            location: Location::File(path.to_path_buf()),
        }]
    };
    out.sort_by(|a, b| a.label.cmp(&b.label));
    Ok(out)
}

fn is_zip(path: &Path) -> Result<bool, ImportError> {
    let mut f = File::open(path).map_err(|e| ImportError::io(path, e))?;
    let mut magic = [0u8; 4];
    let n = read_up_to(&mut f, &mut magic).map_err(|e| ImportError::io(path, e))?;
    Ok(n == 4 && (magic == *b"PK\x03\x04" || magic == *b"PK\x05\x06"))
}

fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// The first bytes of a file. A read error after some bytes (a damaged zip member's checksum, checked at its
/// end) still gives those bytes: the walk over the file meets the error again and reports where.
fn read_head(mut r: impl Read) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; SNIFF_BYTES];
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if n == 0 => return Err(e),
            Err(_) => break,
        }
    }
    buf.truncate(n);
    Ok(buf)
}

fn folder_members(dir: &Path) -> Result<Vec<Member>, ImportError> {
    let mut out = Vec::new();
    for entry in walkdir::WalkDir::new(dir).follow_links(false) {
        let entry = entry.map_err(|e| ImportError::Io {
            file: e
                .path()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| dir.display().to_string()),
            message: e.to_string(),
        })?;
        let name = entry.file_name().to_string_lossy();
        if !entry.file_type().is_file() || !is_conversations_name(&name) {
            continue;
        }
        let p = entry.path();
        let head = read_head(File::open(p).map_err(|e| ImportError::io(p, e))?)
            .map_err(|e| ImportError::io(p, e))?;
        let format = match sniff_named(&p.display().to_string(), &head) {
            Ok(f) => f,
            // Takeout holds a MyActivity.json per Google product; only Gemini's is a conversations file.
            Err(_) if is_shared_name(&name) => continue,
            Err(why) => {
                return Err(ImportError::Format {
                    file: p.display().to_string(),
                    why,
                });
            }
        };
        if is_shared_name(&name) && !expected_under_shared_name(&name, format) {
            continue;
        }
        out.push(Member {
            label: p.display().to_string(),
            format,
            size: entry.metadata().map(|m| m.len()).unwrap_or(0),
            location: Location::File(p.to_path_buf()),
        });
    }
    if out.is_empty() {
        return Err(ImportError::Format {
            file: dir.display().to_string(),
            why: "no conversations.json, conversations-NNN.json, prod-grok-backend.json, Le Chat chat-<id>.json or Gemini MyActivity.json/.html in this folder".into(),
        });
    }
    Ok(out)
}

fn open_zip(path: &Path) -> Result<zip::ZipArchive<BufReader<File>>, ImportError> {
    let f = File::open(path).map_err(|e| ImportError::io(path, e))?;
    zip::ZipArchive::new(BufReader::new(f)).map_err(|e| ImportError::Zip {
        file: path.display().to_string(),
        message: e.to_string(),
    })
}

fn zip_members(path: &Path) -> Result<Vec<Member>, ImportError> {
    let mut zip = open_zip(path)?;
    let mut out = Vec::new();
    for index in 0..zip.len() {
        let entry = zip.by_index(index).map_err(|e| ImportError::Zip {
            file: path.display().to_string(),
            message: e.to_string(),
        })?;
        let name = match entry.name() {
            Ok(n) => n.to_string(),
            // A name that is not text cannot be a conversations file.
            Err(_) => continue,
        };
        if entry.is_dir() || !is_conversations_name(&name) {
            continue;
        }
        let size = entry.size();
        let label = format!("{}!{name}", path.display());
        let head = read_head(entry).map_err(|e| ImportError::Zip {
            file: label.clone(),
            message: e.to_string(),
        })?;
        let format = match sniff_named(&name, &head) {
            Ok(f) => f,
            Err(_) if is_shared_name(&name) => continue,
            Err(why) => return Err(ImportError::Format { file: label, why }),
        };
        if is_shared_name(&name) && !expected_under_shared_name(&name, format) {
            continue;
        }
        out.push(Member {
            label,
            format,
            size,
            location: Location::Zip {
                zip: path.to_path_buf(),
                index,
            },
        });
    }
    if out.is_empty() {
        return Err(ImportError::Format {
            file: path.display().to_string(),
            why: "no conversations.json, conversations-NNN.json, prod-grok-backend.json, Le Chat chat-<id>.json or Gemini MyActivity.json/.html in this zip".into(),
        });
    }
    Ok(out)
}

/// Opens a member for reading from its start and hands the (unbuffered) reader to `f`.
pub fn with_reader<T>(
    m: &Member,
    f: impl FnOnce(&mut dyn Read) -> Result<T, ImportError>,
) -> Result<T, ImportError> {
    match &m.location {
        Location::File(p) => {
            let file = File::open(p).map_err(|e| ImportError::io(p, e))?;
            f(&mut { file })
        }
        Location::Zip { zip, index } => {
            let mut archive = open_zip(zip)?;
            let mut entry = archive.by_index(*index).map_err(|e| ImportError::Zip {
                file: m.label.clone(),
                message: e.to_string(),
            })?;
            f(&mut entry)
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn sniffs_by_content() {
        let chatgpt =
            br#"[{"title":null,"create_time":1.5,"mapping":{"a":{"id":"a","message":null}}}]"#;
        assert_eq!(sniff(chatgpt).unwrap(), Some(Format::ChatGpt));
        let claude = b"\xef\xbb\xbf [ {\"uuid\":\"x\",\"name\":\"\",\"chat_messages\":[]}]";
        assert_eq!(sniff(claude).unwrap(), Some(Format::Claude));
        let deepseek = br#"[{"id":"s","inserted_at":"2025","mapping":{"root":{}}}]"#;
        assert_eq!(sniff(deepseek).unwrap(), Some(Format::DeepSeek));
        let grok = br#"{"conversations":[{"conversation":{"id":"c"},"responses":[]}]}"#;
        assert_eq!(sniff(grok).unwrap(), Some(Format::Grok));
        let gemini =
            br#"[{"header":"Gemini Apps","title":"Prompted hi","time":"2025-05-01T10:00:00Z"}]"#;
        assert_eq!(sniff(gemini).unwrap(), Some(Format::Gemini));
        let lechat = br#"[{"id":"m1","version":0,"chatId":"c","role":"user","content":"hi"}]"#;
        assert_eq!(sniff(lechat).unwrap(), Some(Format::LeChat));
        assert_eq!(
            sniff_named("x/chat-0b8f2c1e-7d1a.json", b"garbage").unwrap(),
            Some(Format::LeChat)
        );
        assert_eq!(sniff(b" [ ] ").unwrap(), None);
        assert!(sniff(br#"[{"foo":1}]"#).is_err());
        assert!(
            sniff(br#"{"mapping":{}}"#)
                .unwrap_err()
                .contains("one conversation")
        );
        assert!(sniff(b"PK").is_err());
        assert!(sniff(b"").is_err());
    }

    #[test]
    fn conversations_file_names() {
        for ok in [
            "conversations.json",
            "x/conversations-000.json",
            "conversations-12.json",
            "prod-grok-backend.json",
            "chat-0b8f2c1e-7d1a-4c55-9e0b-3f6a2d9c1e77.json",
        ] {
            assert!(is_conversations_name(ok), "{ok}");
        }
        for no in [
            "user.json",
            "shared_conversations.json",
            "conversations-.json",
            "conversations-a1.json",
        ] {
            assert!(!is_conversations_name(no), "{no}");
        }
    }
}
