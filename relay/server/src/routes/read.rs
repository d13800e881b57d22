//! The read API (`docs/api.md`): `GET /v1/threads`, `GET /v1/threads/{id}`, `GET /v1/messages/{id}`, the change
//! feed `GET /v1/changes?since=`, and `POST /v1/me/dashboard-link` (a one-time dashboard sign-in link for the
//! device that asks). Every read goes through `personkit_store::read`, the layer the MCP tools use; nothing here
//! runs a query of its own.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use personkit_search::normalize_bound;
use personkit_store::read::{self, ReadError, ThreadFilter};
use personkit_store::{Connection, signin};
use serde_json::json;

use crate::error::AppError;
use crate::state::{AppState, AuthedDevice};

const DEFAULT_LIMIT: u32 = 50;

/// Runs a read-layer call on a reader connection; its errors become `{code, message, hint}`.
pub(crate) async fn run<T: Send + 'static>(
    st: &AppState,
    hint: &'static str,
    f: impl FnOnce(&Connection) -> Result<T, ReadError> + Send + 'static,
) -> Result<T, AppError> {
    let db = st.db.clone();
    match tokio::task::spawn_blocking(move || db.read(f)).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(ReadError::BadRequest(m))) => Err(AppError::bad_request("bad_query", m, hint)),
        Ok(Err(ReadError::NotFound(m))) => Err(AppError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            m,
            "list threads with GET /v1/threads; ids may be given in full or as 8 or more leading characters",
        )),
        Ok(Err(ReadError::Db(e))) => {
            tracing::warn!(error = %e, "read failed");
            Err(AppError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "storage_unavailable",
                "the corpus could not be read",
                "retry shortly; if it persists, check the relay's log",
            ))
        }
        Err(_) => Err(AppError::internal()),
    }
}

/// Query parameters by name, refusing any name the route does not take (a misspelt filter is an error, not a
/// silently wider answer) and any name given twice.
pub(crate) struct Params {
    pairs: Vec<(String, String)>,
}

impl Params {
    pub(crate) fn parse(
        query: Option<&str>,
        allowed: &[&str],
        hint: &str,
    ) -> Result<Params, AppError> {
        let pairs: Vec<(String, String)> = form_urlencoded(query.unwrap_or(""));
        for (i, (k, _)) in pairs.iter().enumerate() {
            if !allowed.contains(&k.as_str()) {
                return Err(AppError::bad_request(
                    "unknown_parameter",
                    format!(
                        "this route takes no parameter {:?}; it takes {}",
                        personkit_shared::wire::quote_safely(k, 40),
                        allowed.join(", ")
                    ),
                    hint.to_owned(),
                ));
            }
            if pairs[..i].iter().any(|(o, _)| o == k) {
                return Err(AppError::bad_request(
                    "repeated_parameter",
                    format!("{k} is given more than once"),
                    hint.to_owned(),
                ));
            }
        }
        Ok(Params { pairs })
    }

    /// The value of `name`, `None` when absent or empty.
    pub(crate) fn get(&self, name: &str) -> Option<String> {
        self.pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    }

    fn limit(&self, hint: &str) -> Result<u32, AppError> {
        match self.get("limit") {
            None => Ok(DEFAULT_LIMIT),
            Some(v) => v
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=read::MAX_PAGE).contains(n))
                .ok_or_else(|| {
                    AppError::bad_request(
                        "bad_query",
                        format!("limit must be a number from 1 to {}", read::MAX_PAGE),
                        hint.to_owned(),
                    )
                }),
        }
    }

    fn compact(&self, hint: &str) -> Result<bool, AppError> {
        match self.get("format").as_deref() {
            None | Some("json") => Ok(false),
            Some("compact") => Ok(true),
            Some(_) => Err(AppError::bad_request(
                "bad_query",
                "format must be json or compact",
                hint.to_owned(),
            )),
        }
    }

    fn flag(&self, name: &str, hint: &str) -> Result<bool, AppError> {
        match self.get(name).as_deref() {
            None | Some("false") | Some("0") => Ok(false),
            Some("true") | Some("1") => Ok(true),
            Some(_) => Err(AppError::bad_request(
                "bad_query",
                format!("{name} must be true or false"),
                hint.to_owned(),
            )),
        }
    }

    /// The heat tier asked for with `tier=` (`hot`, `warm`, `cold`).
    pub(crate) fn tier(&self, hint: &str) -> Result<Option<personkit_heat::Tier>, AppError> {
        self.get("tier")
            .map(|v| {
                personkit_heat::Tier::parse(&v).ok_or_else(|| {
                    AppError::bad_request(
                        "bad_query",
                        format!(
                            "tier must be hot, warm or cold, not {:?}",
                            personkit_shared::wire::quote_safely(&v, 40)
                        ),
                        hint.to_owned(),
                    )
                })
            })
            .transpose()
    }

    /// A time bound as people give it (RFC 3339, a date, a span such as `7d`), in the stored form.
    pub(crate) fn time(
        &self,
        name: &str,
        now: time::OffsetDateTime,
        hint: &str,
    ) -> Result<Option<String>, AppError> {
        self.get(name)
            .map(|v| {
                normalize_bound(&v, now).map_err(|e| {
                    AppError::bad_request("bad_query", format!("{name}: {e}"), hint.to_owned())
                })
            })
            .transpose()
    }
}

/// `application/x-www-form-urlencoded` pairs (query strings and form bodies), percent-decoded, `+` as space;
/// undecodable bytes become U+FFFD.
pub(crate) fn form_urlencoded(s: &str) -> Vec<(String, String)> {
    fn decode(s: &str) -> String {
        let b = s.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < b.len()
                    && b[i + 1].is_ascii_hexdigit()
                    && b[i + 2].is_ascii_hexdigit() =>
                {
                    let hex = |c: u8| (c as char).to_digit(16).unwrap_or(0) as u8;
                    out.push(hex(b[i + 1]) * 16 + hex(b[i + 2]));
                    i += 2;
                }
                c => out.push(c),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    s.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

const LIST_HINT: &str = "GET /v1/threads?surface=&since=&until=&words=&tier=hot|warm|cold&limit=50&cursor=&format=compact (docs/api.md)";
const THREAD_HINT: &str =
    "GET /v1/threads/{id}?limit=50&cursor=&current_only=false&format=compact (docs/api.md)";
const CHANGES_HINT: &str =
    "GET /v1/changes?since=<time>&surface=&limit=200; pass next_since back as since (docs/api.md)";

/// `GET /v1/threads`.
pub(super) async fn list_threads(
    State(st): State<AppState>,
    uri: axum::http::Uri,
) -> Result<Response, AppError> {
    let p = Params::parse(
        uri.query(),
        &[
            "surface", "since", "until", "words", "tier", "limit", "cursor", "format",
        ],
        LIST_HINT,
    )?;
    let now = st.clock.now();
    let filter = ThreadFilter {
        surface: p.get("surface"),
        since: p.time("since", now, LIST_HINT)?,
        until: p.time("until", now, LIST_HINT)?,
        words: p.get("words"),
        tier: p.tier(LIST_HINT)?,
    };
    let (limit, cursor, compact) = (p.limit(LIST_HINT)?, p.get("cursor"), p.compact(LIST_HINT)?);
    let list = run(&st, LIST_HINT, move |c| {
        read::list_threads(c, &filter, limit, cursor.as_deref())
    })
    .await?;
    Ok(if compact {
        Json(read::compact::threads(&list)).into_response()
    } else {
        Json(list).into_response()
    })
}

/// `GET /v1/threads/{id}`.
pub(super) async fn get_thread(
    State(st): State<AppState>,
    Path(id): Path<String>,
    uri: axum::http::Uri,
) -> Result<Response, AppError> {
    let p = Params::parse(
        uri.query(),
        &["limit", "cursor", "current_only", "format"],
        THREAD_HINT,
    )?;
    let (limit, cursor, compact) = (
        p.limit(THREAD_HINT)?,
        p.get("cursor"),
        p.compact(THREAD_HINT)?,
    );
    let current_only = p.flag("current_only", THREAD_HINT)?;
    let detail = run(&st, THREAD_HINT, move |c| {
        read::get_thread(c, &id, current_only, limit, cursor.as_deref())
    })
    .await?;
    Ok(if compact {
        Json(json!({
            "thread": detail.thread,
            "turns": read::compact::turns(&detail, 200),
        }))
        .into_response()
    } else {
        Json(detail).into_response()
    })
}

/// `GET /v1/messages/{id}`.
pub(super) async fn get_message(
    State(st): State<AppState>,
    Path(id): Path<String>,
    uri: axum::http::Uri,
) -> Result<Response, AppError> {
    Params::parse(
        uri.query(),
        &[],
        "GET /v1/messages/{id} takes no parameters",
    )?;
    let m = run(&st, "GET /v1/messages/{id}", move |c| {
        read::get_message(c, &id)
    })
    .await?;
    Ok(Json(m).into_response())
}

/// `GET /v1/changes?since=`.
pub(super) async fn get_changes(
    State(st): State<AppState>,
    uri: axum::http::Uri,
) -> Result<Response, AppError> {
    let p = Params::parse(uri.query(), &["since", "surface", "limit"], CHANGES_HINT)?;
    // The cursor is the time taken before the query (less a grace the store applies).
    let now = st.clock.now();
    let since = p.time("since", now, CHANGES_HINT)?.ok_or_else(|| {
        AppError::bad_request(
            "bad_query",
            "since is required: the time of the last call's next_since, or the start of history",
            CHANGES_HINT,
        )
    })?;
    let limit = match p.get("limit") {
        None => read::MAX_PAGE,
        Some(_) => p.limit(CHANGES_HINT)?,
    };
    let surface = p.get("surface");
    let ch = run(&st, CHANGES_HINT, move |c| {
        read::changes(c, &since, surface.as_deref(), limit, now)
    })
    .await?;
    Ok(Json(ch).into_response())
}

const TODAY_HINT: &str = "GET /v1/today, optionally with utc_offset_minutes=<minutes east of UTC, -1080..1080> (docs/api.md)";

/// `GET /v1/today[?utc_offset_minutes=]`: what the dashboard's Today page shows, as JSON (`crate::today::Today`),
/// with local days at the relay's offset from UTC or the one given.
pub(super) async fn get_today(
    State(st): State<AppState>,
    uri: axum::http::Uri,
) -> Result<Response, AppError> {
    let p = Params::parse(uri.query(), &["utc_offset_minutes"], TODAY_HINT)?;
    let offset = match p.get("utc_offset_minutes") {
        None => st.local,
        Some(m) => m
            .parse::<i32>()
            .ok()
            .filter(|m| m.abs() <= read::activity::MAX_OFFSET_MINUTES)
            .and_then(|m| time::UtcOffset::from_whole_seconds(m * 60).ok())
            .ok_or_else(|| {
                AppError::bad_request(
                    "bad_query",
                    format!("utc_offset_minutes {m:?} is not a whole number of minutes from -1080 to 1080"),
                    TODAY_HINT,
                )
            })?,
    };
    let now = st.clock.now();
    let t = run(&st, TODAY_HINT, move |c| {
        crate::today::build(c, now, offset)
    })
    .await?;
    Ok(Json(t).into_response())
}

const BY_URL_HINT: &str = "GET /v1/threads/by-url?url=<the conversation's page address, as the browser shows it> (docs/api.md)";

/// `GET /v1/threads/by-url?url=`: the thread of a conversation page, found the way the extension names it (the
/// surface registry's URL rules → surface and conversation id → `ids::thread_id`), so a client can link to the
/// captured copy of the page it shows without holding a thread id.
pub(super) async fn get_thread_by_url(
    State(st): State<AppState>,
    uri: axum::http::Uri,
) -> Result<Response, AppError> {
    let p = Params::parse(uri.query(), &["url"], BY_URL_HINT)?;
    let Some(url) = p.get("url") else {
        return Err(AppError::bad_request(
            "bad_query",
            "url is missing",
            BY_URL_HINT,
        ));
    };
    let now = st.clock.now();
    let day = personkit_shared::time::day(
        i64::try_from((now.unix_timestamp_nanos() / 1_000_000).max(0)).unwrap_or(0),
    );
    let registry = personkit_shared::capture::registry::Registry::builtin();
    let Some((surface, conversation)) = registry
        .match_url(&url, &day)
        .and_then(|m| Some((m.surface.id.clone(), m.conversation_id?)))
    else {
        return Err(AppError::bad_request(
            "not_a_conversation",
            format!(
                "{} is not a conversation page of a supported site",
                personkit_shared::wire::quote_safely(&url, 120)
            ),
            "pass the address of an open conversation (e.g. https://chatgpt.com/c/…)",
        ));
    };
    let id = personkit_shared::ids::thread_id(&surface, &conversation)
        .hyphenated()
        .to_string();
    let detail = run(&st, BY_URL_HINT, move |c| {
        read::get_thread(c, &id, true, 1, None)
    })
    .await
    .map_err(|e| {
        if e.status == StatusCode::NOT_FOUND {
            AppError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "this conversation has not been captured",
                "turn the site on in the extension's popup and open the conversation",
            )
        } else {
            e
        }
    })?;
    Ok(Json(json!({"thread": detail.thread})).into_response())
}

/// `POST /v1/me/dashboard-link`: a one-time link that signs the browser in to the dashboard. Only a paired
/// device's token may ask (an agent token reads the corpus but does not get the dashboard, where devices are
/// revoked and turns forgotten). An optional body `{"thread": "<id>"}` makes the link land on that thread.
/// The link is made with the relay's public URL when one is configured (behind a proxy), else with the address
/// the request came to.
pub(super) async fn post_dashboard_link(
    State(st): State<AppState>,
    axum::Extension(AuthedDevice(device)): axum::Extension<AuthedDevice>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, AppError> {
    const HINT: &str =
        "POST /v1/me/dashboard-link with no body, or {\"thread\": \"<id>\"} (docs/api.md)";
    if !device.kind.can_ingest() {
        return Err(AppError::read_only_token(
            "an agent token cannot open the dashboard",
            "run `personkit open` on the relay's machine, or use the extension's Open library",
        ));
    }
    let thread = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct LinkRequest {
            thread: Option<String>,
        }
        let r: LinkRequest = serde_json::from_slice(&body).map_err(|e| {
            AppError::bad_request(
                "bad_request",
                format!("the body is not a link request: {e}"),
                HINT,
            )
        })?;
        r.thread
    };
    let thread = match thread {
        None => None,
        Some(t) => Some(run(&st, HINT, move |c| read::resolve_thread_id(c, &t)).await?),
    };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let base = st.config.link_base(host);
    let now = st.clock.now();
    let db = st.db.clone();
    let (secret, expires) =
        tokio::task::spawn_blocking(move || db.write(|c| signin::create_link(c, now)))
            .await
            .map_err(|_| AppError::internal())??;
    let next = thread
        .map(|t| format!("&next=threads/{t}"))
        .unwrap_or_default();
    Ok(Json(json!({
        "url": format!("{base}/signin?t={}{next}", secret.expose()),
        "expires_at": personkit_store::clock::fmt_time(expires),
    }))
    .into_response())
}
