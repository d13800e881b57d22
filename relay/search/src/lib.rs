//! `personkit-search`: hybrid retrieval over messages and events (`corpus_query`).
//!
//! Candidates come from FTS5 BM25, vector similarity (sign-bit Hamming first pass over an in-memory index of
//! every vector, candidates rescored with int8 copies: [`index`]), entity references (entity ids given by the
//! caller restrict the candidates to the threads the graph links them to; their names and aliases, and those found in
//! the query text, are matched as phrases, except a name found in so many turns that it tells none apart), the user's approved knowledge
//! (the messages cited by the entries the words match), recency (only when a time window is given: the pooled
//! candidates ordered newest first) and the dates the question names — and are fused by
//! score-normalised weighted fusion ([`fusion::convex`], the default) or weighted reciprocal rank fusion
//! ([`fusion::rrf`]). Every hit says which signals found it and where each ranked it.
//!
//! A query reads the corpus through [`personkit_store::retrieval::SearchReader`] and the in-memory vector
//! indexes of whoever serves ([`index::Indexes`]: the server's state, or one per CLI process); it writes nothing.
//! Vectors are computed by the embedding job ([`indexer`]) and written by `personkit_store::vectors`.

pub mod fusion;
pub mod health;
pub mod index;
pub mod indexer;
pub mod pair;
pub mod params;
pub mod settings;
pub mod text;
pub mod when;

use std::collections::{BTreeMap, HashMap, HashSet};

use personkit_embed::{EmbedError, Embedder};
use personkit_store::DbError;
use personkit_store::budget::QueryTextError;
use personkit_store::retrieval::{KnowledgeMatch, RowMeta, SearchReader};
use personkit_store::vectors::Kind;
use serde::Serialize;
use time::OffsetDateTime;

pub use fusion::{Signal, SignalRank};
pub use index::Indexes;

/// Errors of a query.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error("database: {0}")]
    Db(#[from] DbError),
    #[error(transparent)]
    Embed(#[from] EmbedError),
    #[error("{0}")]
    BadRequest(String),
    /// The query text is over a bound ([`personkit_store::budget::check_query_text`]).
    #[error(transparent)]
    TooLarge(#[from] QueryTextError),
    /// The search ran out of its time, its caller went away, or the relay is stopping
    /// ([`personkit_store::budget`]).
    #[error("the search did not finish in time; nothing was found before it stopped")]
    Interrupted,
}

impl SearchError {
    /// What to do about a refused or stopped search (`None` for a broken corpus or embedder).
    pub fn caller_hint(&self) -> Option<&'static str> {
        match self {
            SearchError::TooLarge(e) => Some(e.hint()),
            SearchError::Interrupted => Some(
                "search with fewer or rarer words, or narrow it with a filter (a site, a thread, a time range)",
            ),
            _ => None,
        }
    }

    /// A stable code for the errors [`SearchError::caller_hint`] speaks of.
    pub fn code(&self) -> &'static str {
        match self {
            SearchError::TooLarge(_) => "query_too_large",
            SearchError::Interrupted => "query_too_costly",
            SearchError::BadRequest(_) => "bad_query",
            SearchError::Embed(_) => "embedder_unavailable",
            SearchError::Db(_) => "storage_unavailable",
        }
    }
}

/// How ranked lists are combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fusion {
    /// Weighted reciprocal rank fusion with constant `rrf_k`.
    Rrf,
    /// Weighted sum of min-max normalised scores ([`fusion::convex`]).
    Convex,
}

/// Which signals a query may use and how much each counts in the fusion.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Weights {
    pub fts: f64,
    pub vector: f64,
    pub entity: f64,
    pub recency: f64,
}

impl Weights {
    /// Every signal at weight 1 (plain RRF).
    pub const EQUAL: Weights = Weights {
        fts: 1.0,
        vector: 1.0,
        entity: 1.0,
        recency: 1.0,
    };
    pub const FTS_ONLY: Weights = Weights {
        fts: 1.0,
        vector: 0.0,
        entity: 0.0,
        recency: 0.0,
    };
    pub const VECTOR_ONLY: Weights = Weights {
        fts: 0.0,
        vector: 1.0,
        entity: 0.0,
        recency: 0.0,
    };
}

impl Default for Weights {
    /// The shipped hybrid: words count more than meaning (see BENCHMARKS.md, "Search").
    fn default() -> Self {
        Weights {
            fts: 0.7,
            vector: 0.3,
            entity: 0.3,
            recency: 0.1,
        }
    }
}

/// A query and its filters.
#[derive(Debug, Clone, Serialize)]
pub struct Query {
    pub text: String,
    pub k: usize,
    pub surface: Option<String>,
    /// Restrict to these threads (empty = all).
    pub threads: Vec<String>,
    pub role: Option<String>,
    /// Inclusive lower bound on `occurred_at` (stored time form; see [`normalize_bound`]).
    pub since: Option<String>,
    /// Exclusive upper bound on `occurred_at`.
    pub until: Option<String>,
    /// Entity ids whose mentions count as a signal (aliases resolved).
    pub entities: Vec<String>,
    /// Search events as well as messages (events have no thread or role, so those filters exclude them).
    pub include_events: bool,
    pub weights: Weights,
    pub fusion: Fusion,
    /// RRF constant.
    pub rrf_k: f64,
    /// Candidates taken from each signal.
    pub depth: usize,
    /// Share of a message's fused score that the message right after it in its thread gains (0: off). In a
    /// conversation the turn that matches the words is often the question, and the one after it the answer.
    pub context: f64,
    /// Share of a message's full-text score that the message right after it in its thread gains, before fusion
    /// (0: off): the reply is scored as if the turn it answers were part of it, at this weight.
    pub neighbour: f64,
    /// Pseudo-relevance feedback for the full-text signal (0: off): the [`PRF_TERMS`] words that best mark the
    /// first [`PRF_DOCS`] full-text hits are searched as a second query, whose scores count at this weight.
    pub prf: f64,
    /// Full-text scores of messages as if the turn before each were part of it at this weight (0: off), and
    /// the turn after it at [`Query::turn_after`] ([`pair`]).
    pub turn_before: f64,
    pub turn_after: f64,
    /// Scale of the signal of dates named in the question (0: off; 1: the weights of [`when::Mention::weight`]).
    pub dates: f64,
    /// Weight of the signal that, for a question asking when, marks candidates that say when (0: off).
    pub when: f64,
    /// Weight of the knowledge signal (0: off): the messages cited by the approved knowledge entries the words
    /// match, ranked by how well their entry matched. The entries themselves come back in
    /// [`QueryResult::knowledge`].
    pub knowledge: f64,
    /// Heat as a tiebreaker after fusion (`personkit_heat::tiebreak`: a score × at most 1.1 for the hottest
    /// thread or event); off, the order is relevance alone.
    pub heat: bool,
}

impl Query {
    pub fn new(text: impl Into<String>) -> Self {
        Query {
            text: text.into(),
            k: 10,
            surface: None,
            threads: Vec::new(),
            role: None,
            since: None,
            until: None,
            entities: Vec::new(),
            include_events: true,
            weights: Weights::default(),
            fusion: Fusion::Convex,
            rrf_k: 60.0,
            depth: 100,
            context: CONTEXT,
            neighbour: NEIGHBOUR,
            prf: PRF,
            turn_before: TURN_BEFORE,
            turn_after: TURN_AFTER,
            dates: DATES,
            when: WHEN,
            knowledge: KNOWLEDGE,
            heat: true,
        }
    }
}

/// The shipped [`Query::context`] (BENCHMARKS.md, "Retrieval").
pub const CONTEXT: f64 = 0.0;
/// The shipped [`Query::neighbour`] (BENCHMARKS.md, "Retrieval").
pub const NEIGHBOUR: f64 = 0.0;
/// The shipped [`Query::prf`] (BENCHMARKS.md, "Retrieval").
pub const PRF: f64 = 0.0;
/// The shipped [`Query::turn_before`] and [`Query::turn_after`] (BENCHMARKS.md, "Retrieval"; chosen on the dev
/// split).
pub const TURN_BEFORE: f64 = 0.5;
pub const TURN_AFTER: f64 = 0.2;
/// The shipped [`Query::dates`].
pub const DATES: f64 = 1.0;
/// The shipped [`Query::when`] (chosen on the dev split).
pub const WHEN: f64 = 0.2;
/// The shipped [`Query::knowledge`]: as much as an entity mention. Not tuned on a benchmark (LoCoMo has no approved
/// entries); an entry the user approved and the words match is strong evidence its sources are what is asked.
pub const KNOWLEDGE: f64 = 0.3;
/// Approved entries a query reads for the knowledge signal.
pub const KNOWLEDGE_ENTRIES: usize = 10;
/// Feedback documents: the first full-text hits whose words expand the query.
pub const PRF_DOCS: usize = 3;
/// Words added by feedback.
pub const PRF_TERMS: usize = 5;

/// Parses a time bound: RFC 3339, a date `YYYY-MM-DD`, or a span back from `now` (`7d`, `12h`); says what is
/// accepted when it is none of them or out of range.
pub fn normalize_bound(s: &str, now: OffsetDateTime) -> Result<String, SearchError> {
    use personkit_store::clock;
    if let Some(t) = clock::normalize_time(s) {
        return Ok(t);
    }
    if s.len() == 10
        && let Some(t) = clock::normalize_time(&format!("{s}T00:00:00Z"))
    {
        return Ok(t);
    }
    if let Some(t) = clock::parse_span(s).and_then(|span| clock::back_from(now, span)) {
        return Ok(clock::fmt_time(t));
    }
    Err(SearchError::BadRequest(format!(
        "{s:?} is not a time bound: use RFC 3339 (2026-11-01T00:00:00Z) or a date (2026-11-01) between 0000-01-01 \
         and 9999-12-31, or {}",
        clock::SPAN_HELP
    )))
}

/// One result.
#[derive(Debug, Clone, Serialize)]
pub struct Hit {
    /// `message` or `event`.
    pub kind: &'static str,
    /// Id, thread, surface, role, time (and, not serialised, the full content) of the hit.
    #[serde(flatten)]
    pub row: RowMeta,
    /// A window of the content with matched words wrapped in `**`.
    pub snippet: String,
    /// Fused score.
    pub score: f64,
    /// Signals that found this hit.
    pub matched_via: Vec<Signal>,
    /// Signals that could not run for this query (the same for every hit), so a hit found by words alone says
    /// that meaning was not searched.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Skipped>,
    /// Per-signal rank (1-based) and the signal's own score (BM25 as -rank, cosine similarity, ...).
    pub signals: BTreeMap<Signal, SignalRank>,
}

/// The answer to a query.
#[derive(Debug, Clone, Serialize)]
pub struct QueryResult {
    pub query: String,
    /// How the signals' rankings were combined.
    pub fusion: Fusion,
    /// The embedder model used for the vector signal, if any.
    pub model: Option<String>,
    /// Signals that ran.
    pub signals_used: Vec<Signal>,
    /// Signals that should have run and could not: the answer comes from the others.
    pub signals_skipped: Vec<Skipped>,
    pub hits: Vec<Hit>,
    /// The approved knowledge entries the words matched (at most [`KNOWLEDGE_ENTRIES`]), best first; their sources
    /// are the hits found via [`Signal::Knowledge`].
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub knowledge: Vec<KnowledgeMatch>,
}

/// A signal a query could not use, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    pub signal: Signal,
    /// `embedder_unavailable`.
    pub code: &'static str,
    /// What failed (the endpoint and its answer, never the query text).
    pub reason: String,
    pub hint: &'static str,
}

impl Skipped {
    fn vector(e: &EmbedError) -> Skipped {
        Skipped {
            signal: Signal::Vector,
            code: "embedder_unavailable",
            reason: e.to_string(),
            hint: e.hint(),
        }
    }
}

type Key = (u8, i64); // (0 = message | 1 = event, pk)
/// Candidates with a signal's own score, best first.
type Scored = Vec<(Key, f64)>;

fn kind_of(k: Key) -> Kind {
    if k.0 == 0 { Kind::Message } else { Kind::Event }
}

struct Ctx<'a, R: SearchReader + ?Sized> {
    reader: &'a R,
    q: &'a Query,
    meta: HashMap<Key, Option<RowMeta>>,
}

impl<R: SearchReader + ?Sized> Ctx<'_, R> {
    fn load(&mut self, key: Key) -> Result<Option<&RowMeta>, SearchError> {
        if !self.meta.contains_key(&key) {
            let m = self.reader.row_meta(kind_of(key), key.1)?;
            self.meta.insert(key, m);
        }
        Ok(self.meta.get(&key).and_then(|m| m.as_ref()))
    }

    /// True when the query has no filter: every current row passes.
    fn unfiltered(&self) -> bool {
        let q = self.q;
        q.surface.is_none()
            && q.threads.is_empty()
            && q.role.is_none()
            && q.since.is_none()
            && q.until.is_none()
    }

    /// True when the row exists, is current and passes every filter.
    fn passes(&mut self, key: Key) -> Result<bool, SearchError> {
        let q = self.q;
        let Some(m) = self.load(key)? else {
            return Ok(false);
        };
        if let Some(s) = &q.surface
            && &m.surface != s
        {
            return Ok(false);
        }
        if !q.threads.is_empty() && !m.thread_id.as_ref().is_some_and(|t| q.threads.contains(t)) {
            return Ok(false);
        }
        if let Some(r) = &q.role
            && m.role.as_ref() != Some(r)
        {
            return Ok(false);
        }
        if let Some(s) = &q.since
            && m.occurred_at.as_deref().is_none_or(|o| o < s.as_str())
        {
            return Ok(false);
        }
        if let Some(u) = &q.until
            && m.occurred_at.as_deref().is_none_or(|o| o >= u.as_str())
        {
            return Ok(false);
        }
        Ok(true)
    }

    fn kinds(&self) -> Vec<Kind> {
        let q = self.q;
        if q.include_events && q.threads.is_empty() && q.role.is_none() {
            vec![Kind::Message, Kind::Event]
        } else {
            vec![Kind::Message]
        }
    }

    /// Keeps the first `depth` candidates that pass the filters, re-ranked densely.
    fn filter(&mut self, items: Vec<(Key, f64)>) -> Result<Vec<(Key, f64)>, SearchError> {
        let mut out = Vec::new();
        for (k, s) in items {
            if out.len() >= self.q.depth {
                break;
            }
            if self.passes(k)? {
                out.push((k, s));
            }
        }
        Ok(out)
    }
}

fn key(kind: Kind, pk: i64) -> Key {
    (if kind == Kind::Message { 0 } else { 1 }, pk)
}

fn merge_by_score(mut a: Vec<(Key, f64)>, b: Vec<(Key, f64)>) -> Vec<(Key, f64)> {
    a.extend(b);
    a.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
    a
}

/// FTS5 candidates ([`SearchReader::fts`]), filters applied afterwards; when filters drop too many, a second
/// pass inside the chosen threads. Scores are `-bm25` (higher is better). With `words` (the query's words; `None`
/// for a phrase query such as entity names) messages are scored as turn pairs ([`with_turn_pairs`]).
fn fts_signal<R: SearchReader + ?Sized>(
    ctx: &mut Ctx<'_, R>,
    expr: &str,
    words: Option<&[String]>,
) -> Result<Vec<(Key, f64)>, SearchError> {
    let mut all = fts_pass(ctx, expr)?;
    if let Some(words) = words
        && (ctx.q.turn_before > 0.0 || ctx.q.turn_after > 0.0)
    {
        all = with_turn_pairs(ctx, all, words)?;
    }
    if ctx.q.prf > 0.0 {
        all = with_feedback(ctx, all)?;
    }
    if ctx.q.neighbour > 0.0 {
        all = with_neighbours(ctx, all)?;
    }
    all.truncate(ctx.q.depth);
    Ok(all)
}

/// One full-text query over every kind searched, filtered, best first (at most `depth` per kind).
fn fts_pass<R: SearchReader + ?Sized>(
    ctx: &mut Ctx<'_, R>,
    expr: &str,
) -> Result<Vec<(Key, f64)>, SearchError> {
    let depth = ctx.q.depth;
    let limit = if ctx.q.threads.is_empty() && ctx.q.surface.is_none() {
        depth * 2
    } else {
        depth * 5
    };
    let mut all = Vec::new();
    for kind in ctx.kinds() {
        let rows: Vec<(Key, f64)> = ctx
            .reader
            .fts(kind, expr, limit)?
            .into_iter()
            .map(|(pk, bm25)| (key(kind, pk), -bm25))
            .collect();
        let full = rows.len() == limit;
        let mut kept = ctx.filter(rows)?;
        if full && kept.len() < depth && kind == Kind::Message && !ctx.q.threads.is_empty() {
            // The filter is selective: search inside the chosen threads directly.
            let rows = ctx
                .reader
                .fts_in_threads(expr, &ctx.q.threads, depth * 2)?
                .into_iter()
                .map(|(pk, bm25)| (key(kind, pk), -bm25))
                .collect();
            kept = ctx.filter(rows)?;
        }
        all = merge_by_score(all, kept);
    }
    Ok(all)
}

/// Pseudo-relevance feedback ([`Query::prf`]): the words of the first [`PRF_DOCS`] messages found, each weighted
/// by how rare it is among everything the first pass found (so words every candidate shares — a speaker's name,
/// the topic of the whole conversation — do not count), minus the query's own words; the best [`PRF_TERMS`] are a
/// second query whose scores, scaled to the first pass's best, are added at weight `prf`.
fn with_feedback<R: SearchReader + ?Sized>(
    ctx: &mut Ctx<'_, R>,
    list: Vec<(Key, f64)>,
) -> Result<Vec<(Key, f64)>, SearchError> {
    use std::collections::BTreeSet;
    let asked: HashSet<String> = text::query_terms(&ctx.q.text).into_iter().collect();
    let mut df: HashMap<String, usize> = HashMap::new();
    let mut feedback: Vec<BTreeSet<String>> = Vec::new();
    for (k, _) in &list {
        let Some(m) = ctx.load(*k)? else { continue };
        let words: BTreeSet<String> = text::query_terms(&m.content)
            .into_iter()
            .filter(|w| w.chars().count() >= 3 && !w.chars().all(|c| c.is_ascii_digit()))
            .filter(|w| !asked.contains(w))
            .collect();
        for w in &words {
            *df.entry(w.clone()).or_default() += 1;
        }
        if kind_of(*k) == Kind::Message && feedback.len() < PRF_DOCS {
            feedback.push(words);
        }
    }
    let n = list.len() as f64;
    let mut weight: HashMap<&str, f64> = HashMap::new();
    for w in feedback.iter().flatten() {
        let rarity = (1.0 + n / df.get(w).copied().unwrap_or(1) as f64).ln();
        *weight.entry(w.as_str()).or_default() += rarity;
    }
    let mut ranked: Vec<(&str, f64)> = weight.into_iter().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    let terms: Vec<String> = ranked
        .into_iter()
        .take(PRF_TERMS)
        .map(|(w, _)| w.to_owned())
        .collect();
    let Some(expr) = text::fts_match(&terms) else {
        return Ok(list);
    };
    let second = fts_pass(ctx, &expr)?;
    let best = |l: &[(Key, f64)]| l.iter().map(|(_, s)| *s).fold(0.0f64, f64::max);
    let (b1, b2) = (best(&list), best(&second));
    if b2 <= 0.0 {
        return Ok(list);
    }
    let scale = ctx.q.prf * if b1 > 0.0 { b1 / b2 } else { 1.0 };
    // The second pass was filtered like the first.
    let gains = second.into_iter().map(|(k, s2)| (k, scale * s2)).collect();
    Ok(add_scores(list, gains))
}

/// Adds each gain to its row's score (a row not in `list` joins it with the gain alone), best first again.
fn add_scores(mut list: Vec<(Key, f64)>, gains: Vec<(Key, f64)>) -> Vec<(Key, f64)> {
    let mut at: HashMap<Key, usize> = list.iter().enumerate().map(|(i, (k, _))| (*k, i)).collect();
    for (k, gain) in gains {
        match at.get(&k) {
            Some(&i) => list[i].1 += gain,
            None => {
                at.insert(k, list.len());
                list.push((k, gain));
            }
        }
    }
    list.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
    list
}

/// Full-text scores of turn pairs ([`pair`]): every message found, and the message right after each (when it
/// passes the filters), is scored as if the turn before it were part of it at [`Query::turn_before`] and the
/// turn after it at [`Query::turn_after`], with FTS5's statistics (each word's document count, each text's term
/// counts and length) read from SQLite. Events keep their scores; a query of more than [`pair::MAX_TERMS`] words
/// keeps the plain scores. Costs one read of the order of each thread found (its messages' pks in turn order), one
/// document-count look-up per word, and one pass of the texts scored through FTS5's tokenizer (BENCHMARKS.md,
/// "Turn pairs").
fn with_turn_pairs<R: SearchReader + ?Sized>(
    ctx: &mut Ctx<'_, R>,
    list: Vec<(Key, f64)>,
    words: &[String],
) -> Result<Vec<(Key, f64)>, SearchError> {
    let Some((rows, avg_len)) = ctx.reader.fts_totals(Kind::Message)? else {
        return Ok(list);
    };
    type Scored = Vec<(Key, f64)>;
    let (found, events): (Scored, Scored) = list
        .into_iter()
        .partition(|(k, _)| kind_of(*k) == Kind::Message);
    if found.is_empty() {
        return Ok(merge_by_score(events, found));
    }
    let terms = ctx.reader.message_terms(&words.join(" "))?;
    if terms.is_empty() || terms.len() > pair::MAX_TERMS {
        return Ok(merge_by_score(events, found));
    }
    let (w_before, w_after) = (ctx.q.turn_before, ctx.q.turn_after);
    // The messages found and the turn right after each (a reply whose own words did not match), each with the
    // turns before and after it, from one read of each thread's order: `(pk, before, after)`.
    let mut pool: Vec<(i64, Option<i64>, Option<i64>)> = Vec::new();
    let mut pooled: HashSet<i64> = found.iter().map(|(k, _)| k.1).collect();
    let mut orders: HashMap<String, personkit_store::order::ThreadOrder> = HashMap::new();
    for (k, _) in &found {
        let Some(m) = ctx.load(*k)? else { continue };
        let Some(thread) = m.thread_id.clone() else {
            pool.push((k.1, None, None));
            continue;
        };
        if !orders.contains_key(&thread) {
            let rows = ctx.reader.thread_order(&thread)?;
            orders.insert(
                thread.clone(),
                personkit_store::order::ThreadOrder::new(rows),
            );
        }
        let order = &orders[&thread];
        let next = order.after(k.1);
        pool.push((k.1, order.before(k.1), next));
        // The thread's order lists current messages only, so without filters there is nothing to check.
        if let Some(n) = next
            && !pooled.contains(&n)
            && (ctx.unfiltered() || ctx.passes(key(Kind::Message, n))?)
        {
            pooled.insert(n);
            pool.push((n, order.before(n), order.after(n)));
        }
    }
    let texts = 1.0 + f64::from(u8::from(w_before > 0.0)) + f64::from(u8::from(w_after > 0.0));
    let idf: Vec<f64> = ctx
        .reader
        .message_term_docs(&terms)?
        .into_iter()
        .map(|docs| pair::spread_idf(docs as f64, rows, texts))
        .collect();
    let avg_pair = avg_len * texts;
    let before = |b: Option<i64>| b.filter(|_| w_before > 0.0);
    let after = |a: Option<i64>| a.filter(|_| w_after > 0.0);
    // Term counts by pk: of every turn scored and of the neighbours it is scored with.
    let mut wanted: Vec<i64> = Vec::new();
    let mut seen: HashSet<i64> = HashSet::new();
    for &(pk, b, a) in &pool {
        for p in [Some(pk), before(b), after(a)].into_iter().flatten() {
            if seen.insert(p) {
                wanted.push(p);
            }
        }
    }
    let counts: HashMap<i64, pair::Counts> = ctx
        .reader
        .message_term_counts(&wanted, &terms)?
        .into_iter()
        .map(|(pk, c)| (pk, c.into()))
        .collect();
    let pairs: Scored = pool
        .iter()
        .filter_map(|&(pk, b, a)| {
            let p = pair::Pair {
                turn: counts.get(&pk)?,
                before: before(b).and_then(|b| counts.get(&b)),
                after: after(a).and_then(|a| counts.get(&a)),
            };
            let s = pair::score(&p, &idf, w_before, w_after, avg_pair);
            (s > 0.0).then_some((key(Kind::Message, pk), s))
        })
        .collect();
    Ok(merge_by_score(events, pairs))
}

/// Full-text scores with the turn before: the message right after each of the best `depth` messages gains
/// [`Query::neighbour`] × that message's score (joining the list if it passes the filters), then the list is
/// sorted again. It is what indexing each message together with the turn before it, at that weight, would score
/// for the messages found, without a second index: the turn before's words are its own score.
fn with_neighbours<R: SearchReader + ?Sized>(
    ctx: &mut Ctx<'_, R>,
    list: Vec<(Key, f64)>,
) -> Result<Vec<(Key, f64)>, SearchError> {
    let share = ctx.q.neighbour;
    let listed: HashSet<Key> = list.iter().map(|(k, _)| *k).collect();
    let mut gains: Vec<(Key, f64)> = Vec::new();
    for (k, s) in list.iter().take(ctx.q.depth) {
        if kind_of(*k) != Kind::Message {
            continue;
        }
        if let Some(next) = ctx.reader.next_in_thread(k.1)? {
            let next = key(Kind::Message, next);
            // A reply not found by the words joins only if it passes the filters.
            if listed.contains(&next) || ctx.passes(next)? {
                gains.push((next, share * s));
            }
        }
    }
    Ok(add_scores(list, gains))
}

/// How many sign-bit candidates are rescored per wanted result ...
pub const BIT_OVERSAMPLE: usize = 10;
/// ... and at least this many (rescoring from memory costs ~0.1 µs per candidate).
pub const MIN_CANDIDATES: usize = 1000;
/// ... and at least this share of all vectors (1 in 250): the sign bits of a large corpus put more near-ties at
/// the cut-off, so a fixed count loses recall as the corpus grows (0.87 of the exact top 10 at 10^6 vectors with
/// 1,000 candidates).
pub const CANDIDATE_FRACTION: usize = 250;

/// Vector candidates for a query vector. With a thread filter, an exact scan of those threads' vectors;
/// with `exact`, sqlite-vec's float KNN; otherwise the in-memory index ([`index`]): a sign-bit Hamming pass over
/// every vector keeping `max(depth * BIT_OVERSAMPLE, MIN_CANDIDATES, vectors / CANDIDATE_FRACTION)` candidates,
/// rescored with int8 copies.
/// Rows whose vector came from another model are skipped. Scores are cosine similarities.
#[allow(clippy::too_many_arguments)]
pub fn vector_candidates<R: SearchReader + ?Sized>(
    reader: &R,
    indexes: &Indexes,
    kind: Kind,
    model_key: &str,
    qv: &[f32],
    depth: usize,
    threads: &[String],
    exact: bool,
) -> Result<Vec<(i64, f64)>, SearchError> {
    let dim = qv.len();
    personkit_embed::check_dim(dim)?;
    let mut scored: Vec<(i64, f64)> = if !threads.is_empty() && kind == Kind::Message {
        reader.vectors_in_threads(model_key, qv, threads)?
    } else if exact {
        reader.vector_knn_exact(kind, model_key, qv, depth * 2)?
    } else {
        let ix = indexes.shared(reader, kind, model_key, dim)?;
        let ix = ix.lock().unwrap_or_else(|e| e.into_inner());
        search_index(&ix, qv, depth)
    };
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    Ok(scored)
}

/// The in-memory path of [`vector_candidates`]: best first, at most `depth`.
fn search_index(ix: &index::VecIndex, qv: &[f32], depth: usize) -> Vec<(i64, f64)> {
    let candidates = (depth * BIT_OVERSAMPLE)
        .max(MIN_CANDIDATES)
        .max(ix.len() / CANDIDATE_FRACTION);
    ix.search(qv, depth, candidates)
}

/// How many vector candidates to take before filters: deeper when surface/time filters will drop some.
fn vector_depth(q: &Query) -> usize {
    let filtered = q.surface.is_some() || q.since.is_some() || q.until.is_some();
    if filtered { q.depth * 4 } else { q.depth }
}

/// Raw in-memory candidates per kind, computed off the query's connection (see [`query`]).
type Prefetched = Vec<(Kind, Vec<(i64, f64)>)>;

fn vector_signal<R: SearchReader + ?Sized>(
    ctx: &mut Ctx<'_, R>,
    indexes: &Indexes,
    embedder: &dyn Embedder,
    qv: &[f32],
    mut prefetched: Prefetched,
) -> Result<Vec<(Key, f64)>, SearchError> {
    let model_key = embedder.model_key();
    let mut all = Vec::new();
    let depth = vector_depth(ctx.q);
    for kind in ctx.kinds() {
        let rows = match prefetched.iter().position(|(k, _)| *k == kind) {
            Some(i) => prefetched.swap_remove(i).1,
            None => vector_candidates(
                ctx.reader,
                indexes,
                kind,
                &model_key,
                qv,
                depth,
                &ctx.q.threads,
                false,
            )?,
        };
        let rows = rows.into_iter().map(|(pk, s)| (key(kind, pk), s)).collect();
        let kept = ctx.filter(rows)?;
        all = merge_by_score(all, kept);
    }
    all.truncate(ctx.q.depth);
    Ok(all)
}

/// Names and aliases of the given entity ids, plus entities whose name or alias appears in the query text.
fn entity_names<R: SearchReader + ?Sized>(
    reader: &R,
    q: &Query,
) -> Result<Vec<String>, SearchError> {
    let mut ids: HashSet<String> = q.entities.iter().cloned().collect();
    let words = text::words(&q.text);
    // Phrases of 1-3 words from the query.
    for n in 1..=3 {
        for w in words.windows(n) {
            let phrase = w.join(" ");
            if phrase.len() >= 3 {
                ids.extend(reader.entities_named(&phrase)?);
            }
        }
    }
    let mut names = Vec::new();
    for id in &ids {
        names.extend(reader.entity_names(id)?);
    }
    names.sort();
    names.dedup();
    Ok(names)
}

/// Most entity names the entity signal searches for (one full-text query each).
const MAX_ENTITY_NAMES: usize = 8;

/// The turns that name the entities, each name searched as a phrase. A name found in at least [`Query::depth`]
/// turns of the query's scope is left out: a name that is everywhere (the two people of every turn of a
/// conversation, the project every session is about) tells no candidate from another, and boosting all of them
/// alike only pushes down what the words found (measured: BENCHMARKS.md, "Entities and heat in retrieval").
fn entity_signal<R: SearchReader + ?Sized>(
    ctx: &mut Ctx<'_, R>,
    names: &[String],
) -> Result<Vec<(Key, f64)>, SearchError> {
    let mut all = Vec::new();
    for name in names.iter().take(MAX_ENTITY_NAMES) {
        let Some(expr) = text::fts_phrases(std::slice::from_ref(name)) else {
            continue;
        };
        let found = fts_pass(ctx, &expr)?;
        if found.len() < ctx.q.depth {
            all = merge_by_score(all, found);
        }
    }
    // A turn that names two of the entities counts once, at its best.
    let mut seen = HashSet::new();
    all.retain(|(k, _)| seen.insert(*k));
    all.truncate(ctx.q.depth);
    Ok(all)
}

/// Runs a query. `embedder` is `None` for the `none` kind (or when the caller wants no vector signal);
/// `indexes` are the caller's in-memory vector indexes, caught up with the corpus here.
pub fn query<R: SearchReader + ?Sized>(
    reader: &R,
    indexes: &Indexes,
    embedder: Option<&dyn Embedder>,
    q: &Query,
) -> Result<QueryResult, SearchError> {
    personkit_store::budget::check_query_text(&q.text)?;
    run(reader, indexes, embedder, q).map_err(|e| match e {
        SearchError::Db(e) if e.is_interrupted() => SearchError::Interrupted,
        e => e,
    })
}

/// Most threads the given entities restrict a query to.
pub const MAX_ENTITY_THREADS: usize = 2_000;

fn run<R: SearchReader + ?Sized>(
    reader: &R,
    indexes: &Indexes,
    embedder: Option<&dyn Embedder>,
    q: &Query,
) -> Result<QueryResult, SearchError> {
    if q.k == 0 || q.k > 1000 {
        return Err(SearchError::BadRequest(
            "k must be between 1 and 1000".into(),
        ));
    }
    // Entity ids given by the caller restrict the candidates to the threads the graph links them to (within any
    // thread filter given too); no linked thread, no candidate. Names found in the text only boost (below).
    let restricted;
    let q = if q.entities.is_empty() {
        q
    } else {
        let linked = reader.entity_threads(&q.entities, MAX_ENTITY_THREADS)?;
        let threads: Vec<String> = if q.threads.is_empty() {
            linked
        } else {
            q.threads
                .iter()
                .filter(|t| linked.contains(t))
                .cloned()
                .collect()
        };
        if threads.is_empty() {
            return Ok(QueryResult {
                query: q.text.clone(),
                fusion: q.fusion,
                model: None,
                signals_used: Vec::new(),
                signals_skipped: Vec::new(),
                hits: Vec::new(),
                knowledge: Vec::new(),
            });
        }
        restricted = Query {
            threads,
            include_events: false,
            ..q.clone()
        };
        &restricted
    };
    let mut ctx = Ctx {
        reader,
        q,
        meta: HashMap::new(),
    };
    let terms = text::query_terms(&q.text);
    let mut lists = Vec::new();
    let vec_embedder = embedder.filter(|_| q.weights.vector > 0.0 && !q.text.trim().is_empty());
    // The query embedding (tens of ms with a local model) and the in-memory vector pass need no database, so a
    // second thread runs them while this one runs the FTS query. Catching the indexes up with the corpus reads
    // it, so that happens here first; a thread filter takes the exact SQL path afterwards instead.
    let mut shared = Vec::new();
    if let Some(e) = vec_embedder
        && q.threads.is_empty()
        && personkit_embed::check_dim(e.dim()).is_ok()
    {
        for kind in ctx.kinds() {
            shared.push((kind, indexes.shared(reader, kind, &e.model_key(), e.dim())?));
        }
    }
    let depth_v = vector_depth(q);
    let (fts, vector) = std::thread::scope(|s| {
        let job = vec_embedder.map(|e| {
            let shared = &shared;
            s.spawn(move || -> Result<(Vec<f32>, Prefetched), EmbedError> {
                let qv = e.embed_query(&q.text)?;
                let raw = shared
                    .iter()
                    .map(|(kind, ix)| {
                        let ix = ix.lock().unwrap_or_else(|e| e.into_inner());
                        (*kind, search_index(&ix, &qv, depth_v))
                    })
                    .collect();
                Ok((qv, raw))
            })
        });
        let fts = match text::fts_match(&terms) {
            Some(expr) if q.weights.fts > 0.0 => {
                fts_signal(&mut ctx, &expr, Some(&terms)).map(Some)
            }
            _ => Ok(None),
        };
        let vector = job.map(|h| {
            h.join().unwrap_or_else(|_| {
                Err(EmbedError::Inference(
                    "the query embedding thread panicked".into(),
                ))
            })
        });
        (fts, vector)
    });
    if let Some(items) = fts? {
        lists.push(fusion::Ranked {
            signal: Signal::Fts,
            weight: q.weights.fts,
            items,
        });
    }
    let mut model = None;
    let mut skipped = Vec::new();
    if let (Some(e), Some(v)) = (vec_embedder, vector) {
        // An embedder that fails (an endpoint down, slow or answering garbage) costs the meaning signal, not the
        // search: the answer comes from the others and says so.
        let items = match v {
            Ok((qv, prefetched)) => match vector_signal(&mut ctx, indexes, e, &qv, prefetched) {
                Ok(items) => Ok(items),
                Err(SearchError::Embed(x)) => Err(x),
                Err(other) => return Err(other),
            },
            Err(x) => Err(x),
        };
        match items {
            Ok(items) => {
                model = Some(e.model_key());
                lists.push(fusion::Ranked {
                    signal: Signal::Vector,
                    weight: q.weights.vector,
                    items,
                });
            }
            Err(x) => skipped.push(Skipped::vector(&x)),
        }
    }
    time_signals(&mut ctx, &mut lists)?;
    let mut knowledge = Vec::new();
    if q.knowledge > 0.0
        && let Some(expr) = text::fts_match(&terms)
    {
        let (entries, items) = knowledge_signal(&mut ctx, &expr)?;
        knowledge = entries;
        if !items.is_empty() {
            lists.push(fusion::Ranked {
                signal: Signal::Knowledge,
                weight: q.knowledge,
                items,
            });
        }
    }
    if q.weights.entity > 0.0 {
        let names = entity_names(reader, q)?;
        if !names.is_empty() {
            lists.push(fusion::Ranked {
                signal: Signal::Entity,
                weight: q.weights.entity,
                items: entity_signal(&mut ctx, &names)?,
            });
        }
    }
    if q.weights.recency > 0.0 && (q.since.is_some() || q.until.is_some()) {
        // Newest first among everything the other signals found (or, with no text, the window's newest rows).
        let mut pool: Vec<Key> = lists
            .iter()
            .flat_map(|l| l.items.iter().map(|(k, _)| *k))
            .collect();
        if q.text.trim().is_empty() {
            pool = recent_rows(&mut ctx)?;
        }
        pool.sort();
        pool.dedup();
        let mut dated: Vec<(Key, String)> = Vec::new();
        for k in pool {
            if let Some(m) = ctx.load(k)? {
                dated.push((k, m.occurred_at.clone().unwrap_or_default()));
            }
        }
        dated.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let items = dated
            .into_iter()
            .take(q.depth)
            .map(|(k, t)| {
                let secs = personkit_store::clock::parse_time(&t)
                    .map_or(0.0, |t| t.unix_timestamp() as f64);
                (k, secs)
            })
            .collect();
        lists.push(fusion::Ranked {
            signal: Signal::Recency,
            weight: q.weights.recency,
            items,
        });
    }
    let signals_used = lists.iter().map(|l| l.signal).collect();
    let fused = match q.fusion {
        Fusion::Rrf => fusion::rrf(&lists, q.rrf_k),
        Fusion::Convex => fusion::convex(&lists),
    };
    let fused = if q.context > 0.0 {
        with_context(&mut ctx, fused)?
    } else {
        fused
    };
    let fused = if q.heat {
        with_heat(&mut ctx, fused)?
    } else {
        fused
    };
    let mut hits = Vec::new();
    for f in fused.into_iter().take(q.k) {
        let Some(m) = ctx.load(f.key)? else { continue };
        hits.push(Hit {
            kind: kind_of(f.key).as_str(),
            snippet: text::snippet(&m.content, &terms, 160, "**", "**"),
            row: m.clone(),
            score: f.score,
            matched_via: f.via.iter().map(|(s, _)| *s).collect(),
            skipped: skipped.clone(),
            signals: f.via.into_iter().collect(),
        });
    }
    Ok(QueryResult {
        query: q.text.clone(),
        fusion: q.fusion,
        model,
        signals_used,
        signals_skipped: skipped,
        hits,
        knowledge,
    })
}

/// The approved knowledge entries the words match, and the messages they cite that pass the filters, each scored
/// by its best entry's `-bm25`.
fn knowledge_signal<R: SearchReader + ?Sized>(
    ctx: &mut Ctx<'_, R>,
    expr: &str,
) -> Result<(Vec<KnowledgeMatch>, Scored), SearchError> {
    let unfiltered = ctx.unfiltered();
    let mut entries = Vec::new();
    let mut items: Vec<(Key, f64)> = Vec::new();
    let mut listed = HashSet::new();
    for e in ctx.reader.knowledge(expr, KNOWLEDGE_ENTRIES)? {
        let mut cited = false;
        for &pk in &e.source_pks {
            let k = key(Kind::Message, pk);
            if listed.contains(&k) {
                // Entries come best first: a message cited twice keeps its better entry's score.
                cited = true;
            } else if ctx.passes(k)? {
                cited = true;
                listed.insert(k);
                items.push((k, -e.bm25));
            }
        }
        // With a filter (a site, threads, a time range), an entry counts only through a source inside it.
        if unfiltered || cited {
            entries.push(e);
        }
    }
    items.truncate(ctx.q.depth);
    Ok((entries, items))
}

/// The signals of time in the question ([`when`]), over the candidates the other signals found: the messages
/// from a date the question names, and, for a question asking when, the messages that say when.
fn time_signals<R: SearchReader + ?Sized>(
    ctx: &mut Ctx<'_, R>,
    lists: &mut Vec<fusion::Ranked<Key>>,
) -> Result<(), SearchError> {
    let q = ctx.q;
    let mentions = if q.dates > 0.0 {
        when::mentions(&q.text)
    } else {
        Vec::new()
    };
    let asks_when = q.when > 0.0 && when::asks_when(&q.text);
    if mentions.is_empty() && !asks_when {
        return Ok(());
    }
    let mut pool: Vec<Key> = lists
        .iter()
        .flat_map(|l| l.items.iter().map(|(k, _)| *k))
        .collect();
    pool.sort();
    pool.dedup();
    let mut dated = Vec::new();
    let mut telling = Vec::new();
    for k in pool {
        let Some(m) = ctx.load(k)? else { continue };
        let at = m.occurred_at.as_deref().unwrap_or_default();
        if mentions.iter().any(|d| d.covers(at)) {
            dated.push((k, 1.0));
        }
        if asks_when && when::says_when(&m.content) {
            telling.push((k, 1.0));
        }
    }
    let weight = mentions
        .iter()
        .map(when::Mention::weight)
        .fold(0.0, f64::max)
        * q.dates;
    if !dated.is_empty() {
        lists.push(fusion::Ranked {
            signal: Signal::Date,
            weight,
            items: dated,
        });
    }
    if !telling.is_empty() {
        lists.push(fusion::Ranked {
            signal: Signal::When,
            weight: q.when,
            items: telling,
        });
    }
    Ok(())
}

/// The message right after each of the best fused messages gains [`Query::context`] × that message's score (and
/// joins the results if it was not among them and passes the filters); the list is sorted again. Only the first
/// `max(5k, 50)` fused results pass score on, so a query costs at most that many look-ups.
fn with_context<R: SearchReader + ?Sized>(
    ctx: &mut Ctx<'_, R>,
    mut fused: Vec<fusion::Fused<Key>>,
) -> Result<Vec<fusion::Fused<Key>>, SearchError> {
    let share = ctx.q.context;
    let givers = fused.len().min((ctx.q.k * 5).max(50));
    let mut gains = Vec::new();
    for (i, f) in fused.iter().take(givers).enumerate() {
        if kind_of(f.key) != Kind::Message {
            continue;
        }
        if let Some(next) = ctx.reader.next_in_thread(f.key.1)? {
            let via = fusion::SignalRank {
                rank: i + 1,
                score: f.score,
            };
            gains.push((key(Kind::Message, next), share * f.score, via));
        }
    }
    let mut at: HashMap<Key, usize> = fused.iter().enumerate().map(|(i, f)| (f.key, i)).collect();
    for (k, gain, via) in gains {
        match at.get(&k) {
            Some(&i) => {
                let f = &mut fused[i];
                f.score += gain;
                if !f.via.iter().any(|(s, _)| *s == Signal::Context) {
                    f.via.push((Signal::Context, via));
                }
            }
            None => {
                if !ctx.passes(k)? {
                    continue;
                }
                at.insert(k, fused.len());
                fused.push(fusion::Fused {
                    key: k,
                    score: gain,
                    via: vec![(Signal::Context, via)],
                });
            }
        }
    }
    fused.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.key.cmp(&b.key)));
    Ok(fused)
}

/// The most fused results heat is read for.
pub const HEAT_CANDIDATES: usize = 1_000;

/// Heat after fusion: each result's score × `(1 + 0.1 · heat)` of its thread (a message) or itself (an event),
/// then sorted again. Heat is not relevance: it can lift a result past another only when that one scored less
/// than 10 % more. So only results within 10 % of the k-th score can change places with the first k, and heat
/// is read only for those (at most [`HEAT_CANDIDATES`]), in one bounded read per kind. Scores at or below zero are
/// left as they are.
fn with_heat<R: SearchReader + ?Sized>(
    ctx: &mut Ctx<'_, R>,
    mut fused: Vec<fusion::Fused<Key>>,
) -> Result<Vec<fusion::Fused<Key>>, SearchError> {
    let Some(kth) = fused.get(ctx.q.k.min(fused.len()).saturating_sub(1)) else {
        return Ok(fused);
    };
    let floor = kth.score / (1.0 + personkit_heat::MAX_BOOST);
    let n = fused
        .iter()
        .take(HEAT_CANDIDATES)
        .take_while(|f| f.score > 0.0 && f.score >= floor)
        .count();
    let mut owner: Vec<Option<(personkit_heat::Kind, String)>> = Vec::with_capacity(n);
    for f in &fused[..n] {
        let kind = kind_of(f.key);
        owner.push(ctx.load(f.key)?.and_then(|m| {
            match kind {
                Kind::Message => m
                    .thread_id
                    .clone()
                    .map(|t| (personkit_heat::Kind::Thread, t)),
                Kind::Event => Some((personkit_heat::Kind::Event, m.id.clone())),
            }
        }));
    }
    let mut heat: HashMap<(personkit_heat::Kind, String), f64> = HashMap::new();
    for kind in [personkit_heat::Kind::Thread, personkit_heat::Kind::Event] {
        let mut ids: Vec<String> = owner
            .iter()
            .flatten()
            .filter(|(k, _)| *k == kind)
            .map(|(_, id)| id.clone())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        if ids.is_empty() {
            continue;
        }
        for (id, h) in ctx.reader.heat_of(kind, &ids)? {
            heat.insert((kind, id), h);
        }
    }
    if heat.is_empty() {
        return Ok(fused);
    }
    for (f, o) in fused.iter_mut().zip(&owner) {
        if let Some(h) = o.as_ref().and_then(|o| heat.get(o)) {
            f.score = personkit_heat::tiebreak(f.score, *h);
        }
    }
    fused.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.key.cmp(&b.key)));
    Ok(fused)
}

fn recent_rows<R: SearchReader + ?Sized>(ctx: &mut Ctx<'_, R>) -> Result<Vec<Key>, SearchError> {
    let q = ctx.q;
    let since = q.since.clone().unwrap_or_default();
    let until = q.until.clone().unwrap_or_else(|| "9999".into());
    let rows: Vec<Key> = ctx
        .reader
        .recent_messages(&since, &until, q.depth * 4)?
        .into_iter()
        .map(|pk| key(Kind::Message, pk))
        .collect();
    let kept = ctx.filter(rows.into_iter().map(|k| (k, 0.0)).collect())?;
    Ok(kept.into_iter().map(|(k, _)| k).collect())
}
