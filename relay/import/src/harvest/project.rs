//! The project an agent session belongs to, read from where its tool keeps the transcript: most coding agents
//! file sessions under a folder named after the working directory. Only the path is read (never the file), so
//! the answer is the same wherever the source's folder was moved to: layouts are matched from the file's end. An
//! encoded working directory is looked up among this machine's directories (names only, a bounded walk).
//!
//! Per tool (the module of each parser names its format sources):
//! - Claude Code `<root>/<encoded cwd>/<session>.jsonl` (sub-agents `<session>/subagents/<agent>.jsonl`), Qwen Code
//!   `<root>/<encoded cwd>/chats/[archive/]<session>.jsonl`, Cursor's agent `<root>/<encoded cwd>/agent-transcripts/
//!   **/<chat>.jsonl`: the working directory with every `/` (and `.`, and for Qwen every non-alphanumeric
//!   character) written as `-`. That is lossy: `-home-ada-src-my-app` may have been `/home/ada/src/my-app` or
//!   `/home/ada/src/my/app`. The directory on this machine whose encoding it is answers (`my-app`); when there is
//!   none (the session ran elsewhere, its folder is gone), the part after the last `-` (`app`) — the project
//!   folder's name when it has no `-` of its own.
//! - Grok Build `<root>/<percent-encoded cwd>/<session>/<file>`: decoded exactly; the cwd's last part.
//! - Gemini CLI `<root>/<project slug or hash>/chats/<session>`: newer builds name the folder by a slug of the
//!   project's name (the answer), older ones by the sha256 of its path (no project).
//! - Aider `<project folder>/.aider.chat.history.md`: that folder's name.
//! - Codex (dated folders), Continue, Cline, Roo Code, Kiro, Amp, Goose, Cursor's and VS Code's workspace
//!   databases (hashed folder names), OpenCode (project ids): the layout names no project.

use std::path::{Component, Path};

use super::{Source, aider};

/// The project (a folder name) a transcript file at `path` of the harvest source named `source` (as
/// `personkit_store::harvest` stores it: `claude-code`, `codex`, …) belongs to, by its tool's layout; `None` when
/// the layout names no project or the path does not follow it.
pub fn project_of(source: &str, path: &Path) -> Option<String> {
    let parts: Vec<&str> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect();
    let n = parts.len();
    let from_end = |k: usize| n.checked_sub(k + 1).map(|i| parts[i]);
    let project = match Source::parse(source)? {
        Source::ClaudeCode => {
            // `<encoded>/<session>.jsonl`, or `<encoded>/<session>/subagents/<agent>.jsonl`.
            let folder = if from_end(1) == Some("subagents") {
                from_end(3)
            } else {
                from_end(1)
            };
            folder.and_then(last_dashed)
        }
        Source::QwenCode => {
            let chats = parts.iter().rposition(|p| *p == "chats")?;
            let folder = parts.get(chats.checked_sub(1)?)?;
            last_dashed(folder)
        }
        Source::CursorAgent => {
            let at = parts.iter().rposition(|p| *p == "agent-transcripts")?;
            let folder = parts.get(at.checked_sub(1)?)?;
            last_dashed(folder)
        }
        Source::GrokBuild => from_end(2).and_then(percent_decoded).and_then(|cwd| {
            cwd.split(['/', '\\'])
                .rfind(|s| !s.is_empty())
                .map(str::to_owned)
        }),
        Source::GeminiCli => {
            if from_end(1) != Some("chats") {
                return None;
            }
            from_end(2)
                .filter(|f| !(f.len() == 64 && f.bytes().all(|b| b.is_ascii_hexdigit())))
                .map(str::to_owned)
        }
        Source::Aider => {
            if from_end(0) != Some(aider::FILE_NAME) {
                return None;
            }
            from_end(1).map(str::to_owned)
        }
        Source::Codex
        | Source::Continue
        | Source::Cline
        | Source::RooCode
        | Source::Kiro
        | Source::Amp
        | Source::Cursor
        | Source::CopilotChat
        | Source::OpenCode
        | Source::Goose => None,
    };
    project.filter(|p| !p.is_empty() && p != "." && p != "..")
}

/// The project folder's name of a folder name that stands for a path with its separators written as `-`: the
/// name of the directory on this machine the encoding came from, when one exists ([`on_disk`]), else the part
/// after the last `-`.
fn last_dashed(folder: &str) -> Option<String> {
    if let Some(name) = on_disk(folder) {
        return Some(name);
    }
    folder
        .rsplit('-')
        .find(|s| !s.is_empty())
        .map(str::to_owned)
}

/// Most directories [`on_disk`] lists for one folder name.
const MAX_LISTINGS: usize = 64;
/// Most entries it reads of one directory.
const MAX_ENTRIES: usize = 5_000;

/// The last part of the absolute path on this machine whose encoding (every character that is not a letter or
/// digit written as `-`) is `folder`, found by walking down from `/` and matching directory names against the
/// encoded text; `None` when no directory matches (the session ran on another machine, or its folder is gone).
/// Several names may match at one level (`my` and `my-app`): each is tried, within [`MAX_LISTINGS`] listings.
fn on_disk(folder: &str) -> Option<String> {
    let rest = folder.strip_prefix('-').unwrap_or(folder);
    if rest.is_empty() || cfg!(windows) {
        return None;
    }
    let mut listings = 0;
    walk(Path::new("/"), rest, &mut listings)
}

fn walk(dir: &Path, rest: &str, listings: &mut usize) -> Option<String> {
    if *listings >= MAX_LISTINGS {
        return None;
    }
    *listings += 1;
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .take(MAX_ENTRIES)
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| encodes(n, rest))
        .collect();
    // The longest name first: `my-app` before `my` when both are there.
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    for name in names {
        let after = &rest[name.len()..];
        if after.is_empty() {
            return Some(name);
        }
        if let Some(found) = after
            .strip_prefix('-')
            .and_then(|next| walk(&dir.join(&name), next, listings))
        {
            return Some(found);
        }
    }
    None
}

/// Whether `rest` starts with the encoding of `name`, followed by its end or a separator.
fn encodes(name: &str, rest: &str) -> bool {
    let (n, r) = (name.as_bytes(), rest.as_bytes());
    !n.is_empty()
        && n.len() <= r.len()
        && n.iter()
            .zip(r)
            .all(|(&c, &e)| c == e || (e == b'-' && !c.is_ascii_alphanumeric()))
        && (n.len() == r.len() || r[n.len()] == b'-')
}

/// `%2Fhome%2Fada` → `/home/ada`; `None` for a broken escape or bytes that are not UTF-8.
fn percent_decoded(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn p(source: &str, path: &str) -> Option<String> {
        project_of(source, Path::new(path))
    }

    #[test]
    fn claude_code_takes_the_last_part_of_the_encoded_working_directory() {
        let s = "claude-code";
        assert_eq!(
            p(
                s,
                "/home/ada/.claude/projects/-home-ada-src-orbit/5d1c2a3e-7f40-4b7e-9a51-2c8e0f6d9b12.jsonl"
            )
            .as_deref(),
            Some("orbit")
        );
        // A sub-agent's file, under its session's folder.
        assert_eq!(
            p(
                s,
                "/home/ada/.claude/projects/-home-ada-src-orbit/5d1c2a3e/subagents/agent-a1b2.jsonl"
            )
            .as_deref(),
            Some("orbit")
        );
        // `CLAUDE_CONFIG_DIR` moved the folder; a `.` became `-` too; the lossy case keeps what follows the last `-`.
        assert_eq!(
            p(s, "/cfg/projects/-Users-ada-work-site-io/s.jsonl").as_deref(),
            Some("io")
        );
        assert_eq!(
            p(s, "/cfg/projects/-home-ada--config/s.jsonl").as_deref(),
            Some("config")
        );
        // Windows: `C:\Users\ada\orbit` → `C--Users-ada-orbit`.
        assert_eq!(
            p(
                s,
                "/c/Users/ada/.claude/projects/C--Users-ada-orbit/s.jsonl"
            )
            .as_deref(),
            Some("orbit")
        );
        // A session started in `/`.
        assert_eq!(p(s, "/home/ada/.claude/projects/-/s.jsonl"), None);
    }

    #[test]
    fn a_working_directory_on_this_machine_keeps_the_dashes_of_its_name() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        // `my` beside `my-app`, and a dotted folder: the encoding alone cannot tell them apart.
        for d in ["src/my-app", "src/my/app", "site.io/web"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let encoded = |rel: &str| {
            root.join(rel)
                .to_str()
                .unwrap()
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                .collect::<String>()
        };
        let claude = |rel: &str| {
            p(
                "claude-code",
                &format!("/cfg/projects/{}/s.jsonl", encoded(rel)),
            )
        };
        assert_eq!(claude("src/my-app").as_deref(), Some("my-app"));
        assert_eq!(claude("site.io/web").as_deref(), Some("web"));
        assert_eq!(
            p(
                "qwen-code",
                &format!("/q/projects/{}/chats/s.jsonl", encoded("site.io"))
            )
            .as_deref(),
            Some("site.io")
        );
        // Cursor's agent drops the leading `-`.
        let cursor = encoded("src/my-app");
        assert_eq!(
            p(
                "cursor-agent",
                &format!("/c/projects/{}/agent-transcripts/x.jsonl", &cursor[1..])
            )
            .as_deref(),
            Some("my-app")
        );
        // Gone from this machine: the part after the last `-`, as before.
        assert_eq!(claude("src/gone-app").as_deref(), Some("app"));
    }

    #[test]
    fn qwen_code_reads_the_folder_above_chats() {
        let s = "qwen-code";
        assert_eq!(
            p(
                s,
                "/home/ada/.qwen/projects/-home-ada-src-kite/chats/7d2e4f60-1a3b-4c5d-8e9f-0a1b2c3d4e5f.jsonl"
            )
            .as_deref(),
            Some("kite")
        );
        assert_eq!(
            p(s, "/rt/projects/-home-ada-src-kite/chats/archive/old.jsonl").as_deref(),
            Some("kite")
        );
        assert_eq!(p(s, "/rt/projects/loose.jsonl"), None);
    }

    #[test]
    fn cursor_agent_reads_the_folder_above_agent_transcripts() {
        let s = "cursor-agent";
        assert_eq!(
            p(
                s,
                "/home/ada/.cursor/projects/home-ada-src-orbit/agent-transcripts/3f9c2d1e-aa10-4c5b-9e7d-1b2c3d4e5f60.jsonl"
            )
            .as_deref(),
            Some("orbit")
        );
        assert_eq!(
            p(
                s,
                "/home/ada/.cursor/projects/home-ada-src-orbit/agent-transcripts/3f9c/3f9c.jsonl"
            )
            .as_deref(),
            Some("orbit")
        );
    }

    #[test]
    fn grok_build_decodes_the_working_directory() {
        let s = "grok-build";
        assert_eq!(
            p(
                s,
                "/home/ada/.grok/sessions/%2Fhome%2Fada%2Fsrc%2Fkite/01JD2K8Q7ZAB/updates.jsonl"
            )
            .as_deref(),
            Some("kite")
        );
        // Decoding is exact: a `-` in the name stays.
        assert_eq!(
            p(
                s,
                "/g/sessions/%2Fhome%2Fada%2Fmy-app/01JD/chat_history.jsonl"
            )
            .as_deref(),
            Some("my-app")
        );
        assert_eq!(p(s, "/g/sessions/%zz/01JD/updates.jsonl"), None);
    }

    #[test]
    fn gemini_cli_names_a_slug_folder_and_not_a_hash() {
        let s = "gemini-cli";
        assert_eq!(
            p(
                s,
                "/home/ada/.gemini/tmp/orbit/chats/session-2026-11-20T09-00-1a2b3c4d.jsonl"
            )
            .as_deref(),
            Some("orbit")
        );
        let hash = "a".repeat(40) + &"0".repeat(24);
        assert_eq!(
            p(
                s,
                &format!(
                    "/home/ada/.gemini/tmp/{hash}/chats/session-2026-11-20T09-00-1a2b3c4d.json"
                )
            ),
            None
        );
    }

    #[test]
    fn aider_names_the_folder_its_history_is_in() {
        assert_eq!(
            p("aider", "/home/ada/src/orbit/.aider.chat.history.md").as_deref(),
            Some("orbit")
        );
        assert_eq!(p("aider", "/home/ada/src/orbit/notes.md"), None);
    }

    #[test]
    fn layouts_without_a_project_and_unknown_sources_name_none() {
        for (s, path) in [
            (
                "codex",
                "/home/ada/.codex/sessions/2026/11/28/rollout-2026-11-28T09-00-00-1a2b.jsonl",
            ),
            (
                "codex",
                "/home/ada/.codex/archived_sessions/rollout-1.jsonl.zst",
            ),
            ("continue", "/home/ada/.continue/sessions/0b7e.json"),
            (
                "cline",
                "/home/ada/.config/Code/User/globalStorage/saoudrizwan.claude-dev/tasks/1732/api_conversation_history.json",
            ),
            ("kiro", "/home/ada/.kiro/sessions/cli/0b7e.jsonl"),
            ("amp", "/home/ada/.local/share/amp/threads/T-0b7e.json"),
            (
                "cursor",
                "/home/ada/.config/Cursor/User/globalStorage/state.vscdb",
            ),
            (
                "copilot-chat",
                "/home/ada/.config/Code/User/workspaceStorage/9f1c/chatSessions/0b7e.json",
            ),
            ("opencode", "/home/ada/.local/share/opencode/opencode.db"),
            ("goose", "/home/ada/.local/share/goose/sessions/sessions.db"),
            (
                "not-a-tool",
                "/home/ada/.claude/projects/-home-ada-src-orbit/s.jsonl",
            ),
        ] {
            assert_eq!(p(s, path), None, "{s} {path}");
        }
    }
}
