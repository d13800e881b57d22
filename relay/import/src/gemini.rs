//! Gemini has no conversation export: Google Takeout's "My Activity" for Gemini Apps (`MyActivity.json`) is a list
//! of activity records `{header: "Gemini Apps", title: "Prompted <prompt>", time, safeHtmlItem: [{html: <reply>}],
//! …}`, newest first, without conversation ids (`../shared/docs/formats.md`). Records are grouped into
//! conversations by time: consecutive records less than [`GAP_MS`] apart are one conversation. Such a
//! conversation cannot be matched to a live capture (the live path knows the site's conversation id), so it is
//! a thread of its own on the surface `import:gemini`, with the time of its first prompt as its id: a later
//! Takeout that continues the same conversation adds to the same thread.

use personkit_shared::network::NetTurn;
use personkit_shared::wire::Role;
use serde_json::Value;

use crate::formats::SourceConversation;

/// Records further apart than this start a new conversation.
pub const GAP_MS: i64 = 30 * 60 * 1000;

/// One prompt and its reply.
#[derive(Debug, Clone)]
struct Exchange {
    at_ms: i64,
    prompt: String,
    reply: String,
}

/// Why a record gave no turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// Other activity (feedback, settings): nothing to import.
    NotATurn(String),
    /// A record that should hold a prompt but cannot be read; the reason's code is one of
    /// [`crate::formats::UNREADABLE_REASONS`].
    Unreadable(&'static str),
}

/// Groups records as they stream in; yields a conversation whenever a gap closes one.
#[derive(Debug, Default)]
pub struct Grouper {
    open: Vec<Exchange>,
}

impl Grouper {
    /// Takes one record. `Ok(Some(conv))` when the record started a new group and closed the previous one;
    /// `Err` when the record is not a Gemini prompt, or is one that cannot be read (counted, nothing else
    /// happens).
    pub fn push(&mut self, v: &Value) -> Result<Option<SourceConversation>, Skip> {
        if !v.is_object() {
            return Err(Skip::Unreadable("not_an_object"));
        }
        let Some(title) = v.get("title").and_then(Value::as_str) else {
            return Err(Skip::NotATurn("an activity record without a title".into()));
        };
        let Some(prompt) = title.strip_prefix("Prompted ") else {
            return Err(Skip::NotATurn(format!(
                "not a prompt record ({})",
                personkit_shared::wire::quote_safely(title, 40)
            )));
        };
        // The record's time is the only thing placing a prompt in a conversation.
        let at_ms = v
            .get("time")
            .and_then(Value::as_str)
            .and_then(personkit_shared::time::parse_rfc3339)
            .ok_or(Skip::Unreadable("not_understood"))?;
        let reply = v
            .get("safeHtmlItem")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|i| i.get("html").and_then(Value::as_str))
            .map(html_to_text)
            .collect::<Vec<_>>()
            .join("\n\n");
        let e = Exchange {
            at_ms,
            prompt: prompt.to_owned(),
            reply,
        };
        let closes = self
            .open
            .last()
            .is_some_and(|l| (l.at_ms - at_ms).abs() > GAP_MS);
        let done = if closes { self.finish() } else { None };
        self.open.push(e);
        Ok(done)
    }

    /// The group still open, if any.
    pub fn finish(&mut self) -> Option<SourceConversation> {
        let mut ex = std::mem::take(&mut self.open);
        if ex.is_empty() {
            return None;
        }
        ex.sort_by_key(|e| e.at_ms);
        let first = ex[0].at_ms;
        let conversation_id = format!("takeout-{}", personkit_shared::time::rfc3339(first));
        let mut turns = Vec::new();
        let mut parent: Option<String> = None;
        for e in &ex {
            for (role, key, text) in [
                (Role::User, format!("p{}", e.at_ms), &e.prompt),
                (Role::Assistant, format!("r{}", e.at_ms), &e.reply),
            ] {
                if text.trim().is_empty() {
                    continue;
                }
                turns.push(NetTurn {
                    surface: SURFACE.to_owned(),
                    conversation_id: Some(conversation_id.clone()),
                    message_key: key.clone(),
                    parent_key: parent.replace(key.clone()),
                    role,
                    text: text.clone(),
                    reasoning: None,
                    tool_calls: Vec::new(),
                    tool_output: None,
                    citations: Vec::new(),
                    model: None,
                    created_at_ms: Some(e.at_ms),
                    position: Some(turns.len() as u32),
                    on_current_branch: Some(true),
                    hidden: false,
                    unknown: Vec::new(),
                });
            }
        }
        Some(SourceConversation {
            surface: SURFACE.to_owned(),
            title: ex.first().map(|e| short_title(&e.prompt)),
            conversation_id,
            url: None,
            updated_at_ms: ex.last().map(|e| e.at_ms),
            turns,
            unreadable: Default::default(),
        })
    }
}

/// Takeout's other format for the same activity, `MyActivity.html` (Takeout's default): one
/// `<div class="outer-cell …">` per record, its header in `p.mdl-typography--title`, and a
/// `content-cell … mdl-typography--body-1` cell holding the title (`Prompted …`), a `<br>`, the local time as
/// `Mar 8, 2025, 5:14:40 PM CET`, and then the reply's HTML (the generic My Activity layout as
/// seanbreckenridge/google_takeout_parser `parse_html/activity.py` reads it; the reply after the time is where
/// Gemini's `safeHtmlItem` goes). Each cell becomes the JSON record [`Grouper`] reads; cells of other products,
/// and cells whose time cannot be read, are counted by the caller as records without a turn.
pub fn html_records(html: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut starts: Vec<usize> = html
        .match_indices("class=\"outer-cell")
        .map(|(i, _)| i)
        .collect();
    starts.push(html.len());
    for w in starts.windows(2) {
        let cell = &html[w[0]..w[1]];
        let header = between(cell, "mdl-typography--title", "</p>")
            .map(|h| html_to_text(h.split_once('>').map_or(h, |(_, r)| r)))
            .unwrap_or_default();
        if !(header.contains("Gemini") || header.contains("Bard")) {
            out.push(serde_json::json!({"header": header}));
            continue;
        }
        let Some(body) = body_cell(cell) else {
            out.push(serde_json::json!({"header": header}));
            continue;
        };
        let Some((at, time_start, time_end)) = find_time(body) else {
            out.push(serde_json::json!({"header": header, "title": html_to_text(body)}));
            continue;
        };
        let title = html_to_text(&body[..time_start]).replace('\u{a0}', " ");
        let reply = skip_ws(&body[time_end..]);
        let reply = ["<br>", "<br/>", "<br />"]
            .iter()
            .find_map(|b| reply.strip_prefix(b))
            .unwrap_or(reply);
        out.push(serde_json::json!({
            "header": header,
            "title": title.trim(),
            "time": at,
            "safeHtmlItem": [{"html": reply}],
        }));
    }
    out
}

/// The text after the first `open` marker up to the next `close`.
fn between<'a>(s: &'a str, open: &str, close: &str) -> Option<&'a str> {
    let i = s.find(open)? + open.len();
    let j = s[i..].find(close)?;
    Some(&s[i..i + j])
}

/// The inner HTML of the record's `mdl-typography--body-1` content cell (its `<div>`s balanced).
fn body_cell(cell: &str) -> Option<&str> {
    let at = cell.find("mdl-typography--body-1")?;
    let open_end = at + cell[at..].find('>')? + 1;
    let mut depth = 1usize;
    let mut i = open_end;
    while depth > 0 {
        let next_open = cell[i..].find("<div").map(|k| i + k);
        let next_close = cell[i..].find("</div").map(|k| i + k)?;
        match next_open {
            Some(o) if o < next_close => {
                depth += 1;
                i = o + 4;
            }
            _ => {
                depth -= 1;
                if depth == 0 {
                    return Some(&cell[open_end..next_close]);
                }
                i = next_close + 5;
            }
        }
    }
    None
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// The first `Mon D, YYYY, H:MM:SS AM|PM [ZONE]` that starts a line of `body` (after a `<br>`): (RFC 3339 in
/// UTC, start, end). A date inside the prompt's own words is not taken for it.
fn find_time(body: &str) -> Option<(String, usize, usize)> {
    for (i, br) in body.match_indices("<br") {
        let after = i + br.len() + body[i + br.len()..].find('>')? + 1;
        let line = skip_ws(&body[after..]);
        let start = body.len() - line.len();
        if let Some((at, len)) = parse_time(line) {
            return Some((at, i, start + len));
        }
    }
    None
}

/// Skips spaces, including the no-break kinds My Activity puts before `AM`/`PM`, raw or as entities.
fn skip_ws(mut r: &str) -> &str {
    loop {
        let t = r.trim_start_matches([' ', '\n', '\r', '\t', '\u{a0}', '\u{202f}']);
        match ["&nbsp;", "&#8239;", "&#160;"]
            .iter()
            .find_map(|e| t.strip_prefix(e))
        {
            Some(rest) => r = rest,
            None => return t,
        }
    }
}

/// Parses a My Activity time at the start of `s`; returns it in UTC and how many bytes it took. A zone
/// abbreviation this table does not know, or none (older Takeouts), is read as UTC.
fn parse_time(s: &str) -> Option<(String, usize)> {
    let month = MONTHS.iter().position(|m| s.starts_with(m))? as u8 + 1;
    let mut rest = s.get(3..)?;
    let number = |r: &str| -> Option<(u32, usize)> {
        let n = r.bytes().take_while(u8::is_ascii_digit).count();
        (n > 0).then(|| r[..n].parse().ok().map(|v| (v, n)))?
    };
    rest = skip_ws(rest);
    let (day, n) = number(rest)?;
    rest = rest[n..].strip_prefix(',')?;
    rest = skip_ws(rest);
    let (year, n) = number(rest)?;
    rest = rest[n..].strip_prefix(',')?;
    rest = skip_ws(rest);
    let (hour, n) = number(rest)?;
    rest = rest[n..].strip_prefix(':')?;
    let (minute, n) = number(rest)?;
    rest = rest[n..].strip_prefix(':')?;
    let (second, n) = number(rest)?;
    rest = skip_ws(&rest[n..]);
    let pm = if let Some(r) = rest.strip_prefix("PM") {
        rest = r;
        true
    } else {
        rest = rest.strip_prefix("AM")?;
        false
    };
    let hour24 = match (hour, pm) {
        (12, false) => 0,
        (12, true) => 12,
        (h, true) => h + 12,
        (h, false) => h,
    };
    let mut offset_min: i64 = 0;
    let after_ampm = s.len() - rest.len();
    let mut used = after_ampm;
    let zone_text = rest.strip_prefix(' ').unwrap_or("");
    let zone: String = zone_text
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | ':'))
        .collect();
    if !zone.is_empty()
        && let Some(off) = zone_offset(&zone)
    {
        offset_min = off;
        used = after_ampm + 1 + zone.len();
    }
    let date = time::Date::from_calendar_date(
        year as i32,
        time::Month::try_from(month).ok()?,
        u8::try_from(day).ok()?,
    )
    .ok()?;
    let clock = time::Time::from_hms(
        u8::try_from(hour24).ok()?,
        u8::try_from(minute).ok()?,
        u8::try_from(second).ok()?,
    )
    .ok()?;
    let utc = time::PrimitiveDateTime::new(date, clock).assume_utc()
        - time::Duration::minutes(offset_min);
    let ms = (utc.unix_timestamp_nanos() / 1_000_000) as i64;
    Some((personkit_shared::time::rfc3339(ms), used))
}

/// Minutes east of UTC for the zone names My Activity prints (`CET`, `PDT`, `GMT+05:30`, …).
fn zone_offset(zone: &str) -> Option<i64> {
    if let Some(rest) = zone
        .strip_prefix("GMT")
        .or_else(|| zone.strip_prefix("UTC"))
    {
        if rest.is_empty() {
            return Some(0);
        }
        let sign = match rest.as_bytes()[0] {
            b'+' => 1,
            b'-' => -1,
            _ => return None,
        };
        let (h, m) = rest[1..].split_once(':').unwrap_or((&rest[1..], "0"));
        return Some(sign * (h.parse::<i64>().ok()? * 60 + m.parse::<i64>().ok()?));
    }
    let h = match zone {
        "WET" | "Z" => 0,
        "BST" | "WEST" | "CET" => 1,
        "CEST" | "EET" | "SAST" => 2,
        "EEST" | "MSK" => 3,
        "IST" => return Some(330),
        "SGT" | "HKT" | "AWST" | "CST8" => 8,
        "JST" | "KST" => 9,
        "AEST" => 10,
        "AEDT" => 11,
        "NZST" => 12,
        "NZDT" => 13,
        "AST" | "EDT" => -4,
        "EST" | "CDT" => -5,
        "CST" | "MDT" => -6,
        "MST" | "PDT" => -7,
        "PST" | "AKDT" => -8,
        "AKST" => -9,
        "HST" => -10,
        _ => return None,
    };
    Some(h * 60)
}

/// The surface of Takeout's Gemini conversations (no live thread to merge with).
pub const SURFACE: &str = "import:gemini";

fn short_title(prompt: &str) -> String {
    let line = prompt.lines().next().unwrap_or_default();
    let mut t: String = line.chars().take(80).collect();
    if line.chars().count() > 80 {
        t.push('…');
    }
    t
}

/// The reply's HTML as plain text: block ends and `<br>` become line breaks, other tags go, the common
/// entities are decoded.
pub fn html_to_text(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut rest = html;
    while let Some(i) = rest.find('<') {
        out.push_str(&rest[..i]);
        let Some(j) = rest[i..].find('>') else {
            out.push_str(&rest[i..]);
            rest = "";
            break;
        };
        let tag = rest[i + 1..i + j].trim().to_ascii_lowercase();
        let name = tag
            .trim_start_matches('/')
            .split(|c: char| c.is_whitespace() || c == '/')
            .next()
            .unwrap_or_default();
        let closing = tag.starts_with('/');
        match name {
            "br" => out.push('\n'),
            "li" if !closing => out.push_str("\n- "),
            "p" | "div" | "ul" | "ol" | "h1" | "h2" | "h3" | "h4" | "h5" | "h6" | "pre"
            | "table" | "tr" | "blockquote"
                if closing =>
            {
                out.push('\n')
            }
            _ => {}
        }
        rest = &rest[i + j + 1..];
    }
    out.push_str(rest);
    let decoded = out
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&nbsp;", " ")
        .replace("&amp;", "&");
    personkit_shared::capture::normalize::normalize(&decoded)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn html_becomes_text() {
        assert_eq!(
            html_to_text("<p>Two &amp; three:</p><ul><li>a</li><li>b &lt;c&gt;</li></ul>"),
            "Two & three:\n\n- a\n- b <c>"
        );
        assert_eq!(html_to_text("line<br>next"), "line\nnext");
        assert_eq!(html_to_text("a < b"), "a < b");
    }

    fn rec(t: &str, prompt: &str, reply: &str) -> Value {
        json!({"header": "Gemini Apps", "title": format!("Prompted {prompt}"), "time": t,
               "products": ["Gemini Apps"], "safeHtmlItem": [{"html": reply}]})
    }

    #[test]
    fn records_group_by_time_gaps_newest_first() {
        let mut g = Grouper::default();
        assert!(
            g.push(&rec("2025-05-02T10:20:00Z", "and then?", "<p>Then B.</p>"))
                .unwrap()
                .is_none()
        );
        assert!(
            g.push(&rec("2025-05-02T10:00:00Z", "first?", "<p>A.</p>"))
                .unwrap()
                .is_none()
        );
        let c = g
            .push(&rec("2025-05-01T09:00:00Z", "older", "<p>Old.</p>"))
            .unwrap()
            .unwrap();
        assert_eq!(c.conversation_id, "takeout-2025-05-02T10:00:00.000Z");
        let texts: Vec<_> = c.turns.iter().map(|t| (t.role, t.text.as_str())).collect();
        assert_eq!(
            texts,
            [
                (Role::User, "first?"),
                (Role::Assistant, "A."),
                (Role::User, "and then?"),
                (Role::Assistant, "Then B.")
            ]
        );
        assert_eq!(c.turns[1].parent_key.as_deref(), Some("p1746180000000"));
        let last = g.finish().unwrap();
        assert_eq!(last.turns.len(), 2);
        assert!(g.finish().is_none());
        assert!(
            g.push(&json!({"title": "Used Gemini Apps", "time": "2025-05-01T09:00:00Z"}))
                .is_err()
        );
    }

    #[test]
    fn my_activity_times_read_in_utc() {
        let t = |s: &str| parse_time(s).map(|(at, _)| at);
        assert_eq!(
            t("May 2, 2025, 12:00:00\u{202f}PM CEST").unwrap(),
            "2025-05-02T10:00:00.000Z"
        );
        assert_eq!(
            t("Jan 1, 2025, 12:30:05 AM PST").unwrap(),
            "2025-01-01T08:30:05.000Z"
        );
        assert_eq!(
            t("Mar 8, 2018, 5:14:40 PM").unwrap(),
            "2018-03-08T17:14:40.000Z"
        );
        assert_eq!(
            t("Mar 8, 2018, 5:14:40 PM GMT+05:30").unwrap(),
            "2018-03-08T11:44:40.000Z"
        );
        assert_eq!(t("Feb 30, 2025, 1:00:00 PM UTC"), None);
        assert_eq!(t("Prompted at 5"), None);
    }

    #[test]
    fn html_cells_become_records_and_a_date_in_the_prompt_stays_in_the_prompt() {
        let cell = |header: &str, body: &str| {
            format!(
                "<div class=\"outer-cell mdl-cell\"><div class=\"header-cell\"><p class=\"mdl-typography--title\">{header}<br></p></div>\
                 <div class=\"content-cell mdl-cell--6-col mdl-typography--body-1\">{body}</div>\
                 <div class=\"content-cell mdl-typography--caption\"><b>Products:</b><br>&emsp;{header}</div></div>"
            )
        };
        let html = [
            cell(
                "Gemini Apps",
                "Prompted&nbsp;Was war am\nMay 1, 2025, 9:00:00 AM UTC?<br>May 2, 2025, 10:00:00 AM UTC<br><div><p>Nichts.</p></div>",
            ),
            cell("Search", "Searched for rust<br>May 2, 2025, 9:00:00 AM UTC"),
        ]
        .concat();
        let r = html_records(&html);
        assert_eq!(r.len(), 2);
        assert_eq!(
            r[0]["title"],
            "Prompted Was war am\nMay 1, 2025, 9:00:00 AM UTC?"
        );
        assert_eq!(r[0]["time"], "2025-05-02T10:00:00.000Z");
        assert_eq!(
            html_to_text(r[0]["safeHtmlItem"][0]["html"].as_str().unwrap()),
            "Nichts."
        );
        // Another product's cell carries no prompt: the grouper counts it as a record without a turn.
        assert!(Grouper::default().push(&r[1]).is_err());
    }
}
