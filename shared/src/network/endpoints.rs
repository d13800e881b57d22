//! Which of a site's own requests carry what its page receives: the table in `shared/network/endpoints.json`
//! (built into [`ENDPOINTS`] by `build.rs`; the page-world script gets the same file from
//! `scripts/build-extension`). The page-world script tees only requests that match, and the worker checks the
//! match again here: what the page world says about a request is never trusted.

use super::Surface;

/// What a body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A streamed reply (or, for a socket, its frames one per line).
    Stream,
    /// The conversation JSON a page loads when it opens a conversation.
    Conversation,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Stream => "stream",
            Kind::Conversation => "conversation",
        }
    }
}

/// How the page makes the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// `fetch` or `XMLHttpRequest`.
    Fetch,
    WebSocket,
}

/// One known endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    pub surface: Surface,
    pub kind: Kind,
    pub transport: Transport,
    pub method: &'static str,
    /// Path segments; `*` is one non-empty segment.
    pub path: &'static str,
}

include!(concat!(env!("OUT_DIR"), "/endpoints.rs"));

/// Whether `path` (a URL's path, without query) matches `pattern`.
fn path_matches(pattern: &str, path: &str) -> bool {
    let mut p = pattern.split('/');
    let mut s = path.split('/');
    loop {
        match (p.next(), s.next()) {
            (None, None) => return true,
            (Some("*"), Some(seg)) if !seg.is_empty() => {}
            (Some(a), Some(b)) if a == b => {}
            _ => return false,
        }
    }
}

/// The kind of body a request of `surface` carries, if it is a known endpoint: `method` as the page used it
/// (`GET` for a socket), `url` absolute. The URL's host must be `page_host` (the page's own).
pub fn endpoint(
    surface: Surface,
    transport: Transport,
    method: &str,
    url: &str,
    page_host: &str,
) -> Option<Kind> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("wss://"))?;
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if host.is_empty() || !host.eq_ignore_ascii_case(page_host) {
        return None;
    }
    let path = path.split(['?', '#']).next().unwrap_or("");
    ENDPOINTS
        .iter()
        .find(|e| {
            e.surface == surface
                && e.transport == transport
                && e.method.eq_ignore_ascii_case(method)
                && path_matches(e.path, path)
        })
        .map(|e| e.kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_endpoints_match_and_others_do_not() {
        let f = |s, m, u| endpoint(s, Transport::Fetch, m, u, "chatgpt.com");
        assert_eq!(
            f(
                Surface::ChatGpt,
                "POST",
                "https://chatgpt.com/backend-api/f/conversation"
            ),
            Some(Kind::Stream)
        );
        assert_eq!(
            f(
                Surface::ChatGpt,
                "get",
                "https://chatgpt.com/backend-api/conversation/abc-1?x=1"
            ),
            Some(Kind::Conversation)
        );
        // Another host, another method, a deeper path, an empty segment, another surface's table.
        assert_eq!(
            f(
                Surface::ChatGpt,
                "POST",
                "https://evil.example/backend-api/f/conversation"
            ),
            None
        );
        assert_eq!(
            f(
                Surface::ChatGpt,
                "PUT",
                "https://chatgpt.com/backend-api/f/conversation"
            ),
            None
        );
        assert_eq!(
            f(
                Surface::ChatGpt,
                "GET",
                "https://chatgpt.com/backend-api/conversation/a/b"
            ),
            None
        );
        assert_eq!(
            f(
                Surface::ChatGpt,
                "GET",
                "https://chatgpt.com/backend-api/conversation/"
            ),
            None
        );
        assert_eq!(
            f(
                Surface::Claude,
                "POST",
                "https://chatgpt.com/backend-api/f/conversation"
            ),
            None
        );
        assert_eq!(
            f(
                Surface::ChatGpt,
                "POST",
                "http://chatgpt.com/backend-api/f/conversation"
            ),
            None
        );
        assert_eq!(
            endpoint(
                Surface::Copilot,
                Transport::WebSocket,
                "GET",
                "wss://copilot.microsoft.com/c/api/chat?api-version=2",
                "copilot.microsoft.com"
            ),
            Some(Kind::Stream)
        );
        assert_eq!(
            endpoint(
                Surface::Copilot,
                Transport::Fetch,
                "GET",
                "https://copilot.microsoft.com/c/api/chat",
                "copilot.microsoft.com"
            ),
            None
        );
    }

    #[test]
    fn every_parsed_surface_has_an_endpoint() {
        for s in Surface::ALL {
            assert!(
                ENDPOINTS
                    .iter()
                    .any(|e| e.surface == s && e.kind == Kind::Stream),
                "{s:?}"
            );
            assert_eq!(
                ENDPOINTS
                    .iter()
                    .any(|e| e.surface == s && e.kind == Kind::Conversation),
                s.has_conversation_format(),
                "{s:?}"
            );
        }
    }
}
