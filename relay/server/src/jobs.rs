//! Background jobs of a running relay: the embedding worker (embeds new messages and events on its own
//! connection; ingest never waits for it) and the warm-up of the vector indexes, so the first query does not pay
//! for loading them (seconds at 10^6 vectors).

use std::path::Path;
use std::time::Duration;

use personkit_embed::{EmbedderConfig, SharedEmbedder};
use personkit_search::indexer::{self, Worker};

use crate::state::AppState;

/// The embedder the configuration asks for (config file next to the corpus, or environment), and the line that
/// says which search that gives. One that fails to build is logged and treated as `none`: search still answers
/// from full text.
pub fn configured_embedder(db_path: &Path) -> (SharedEmbedder, String) {
    let config = EmbedderConfig::load(Some(db_path));
    let built = match &config {
        Ok(c) => personkit_embed::build(c),
        Err(e) => Err(personkit_embed::EmbedError::Config(e.to_string())),
    };
    let line = personkit_search::health::summary(config.as_ref().ok(), &built);
    match built {
        Ok(e) => {
            tracing::info!(model = ?e.as_ref().map(|e| e.model_key()), "{line}");
            (e, line)
        }
        Err(e) => {
            tracing::warn!(error = %e, hint = e.hint(), "embedder unavailable; search uses full text only");
            (None, line)
        }
    }
}

/// Starts the index warm-up and the embedding worker of `state` (nothing without an embedder). Returns the
/// worker, to stop at shutdown.
pub fn start(state: &AppState) -> Option<Worker> {
    let embedder = state.embedder.clone()?;
    let path = state.db.path().to_path_buf();
    let (indexes, model_key, dim) = (state.indexes.clone(), embedder.model_key(), embedder.dim());
    let warm_path = path.clone();
    let _ = indexes.warm_in_background(
        move || personkit_store::db::open_read_only(&warm_path).map_err(|e| e.to_string()),
        model_key,
        dim,
    );
    Some(indexer::spawn_worker(
        move || personkit_store::db::open(&path).map_err(|e| e.to_string()),
        embedder,
        state.clock.clone(),
        Duration::from_secs(1),
    ))
}

/// The sync job of `serve` (docs/sync.md): one round with every peer this relay calls — pull its new pages, push
/// this relay's — each `interval`, and at once when ingest or a pushed page added something. Rounds run one at a
/// time on their own connection; a failing peer is recorded (`personkit sync list`) and retried next round.
pub fn start_sync(state: &AppState, interval: Duration) -> tokio::task::JoinHandle<()> {
    let path = state.db.path().to_path_buf();
    let notify = state.sync_notify.clone();
    let clock = state.clock.clone();
    tokio::spawn(async move {
        let mut conn: Option<personkit_store::Connection> = None;
        loop {
            tokio::select! {
                () = notify.notified() => {}
                () = tokio::time::sleep(interval) => {}
            }
            let (path, clock) = (path.clone(), clock.clone());
            let taken = conn.take();
            let round = tokio::task::spawn_blocking(move || {
                let mut c = match taken {
                    Some(c) => c,
                    None => match personkit_store::db::open(&path) {
                        Ok(c) => c,
                        Err(e) => {
                            tracing::warn!(error = %e, "sync: cannot open the corpus");
                            return None;
                        }
                    },
                };
                match personkit_sync::sync_all(&mut c, &|| clock.now(), &mut |_, _| {}) {
                    Ok(reports) => {
                        for r in reports {
                            match r {
                                Ok(r) if r.pulled.stored + r.pushed.stored > 0 => tracing::info!(
                                    peer = %r.peer_id,
                                    pulled = r.pulled.stored,
                                    pushed = r.pushed.stored,
                                    "sync round"
                                ),
                                Ok(_) => {}
                                Err(e) => tracing::warn!(code = %e.code, error = %e.message, "sync round failed"),
                            }
                        }
                    }
                    Err(e) => tracing::warn!(code = %e.code, error = %e.message, "sync: cannot list peers"),
                }
                Some(c)
            })
            .await;
            conn = round.ok().flatten();
        }
    })
}

/// What `serve`'s harvest job reads (`personkit_import::harvest`): the home folder the sources' default paths
/// are under, how often, and the user's redaction patterns. Which sources run is read from the corpus at each
/// pass, so `personkit harvest enable` takes effect without a restart.
#[derive(Debug, Clone)]
pub struct HarvestSchedule {
    pub every: Duration,
    pub home: std::path::PathBuf,
    pub patterns: Vec<String>,
    /// The tools' own path variables (`personkit_import::harvest::ENV`) as `serve` found them.
    pub env: std::collections::BTreeMap<String, String>,
}

/// The running harvest job; [`HarvestJob::stop`] ends it between passes (a pass in progress finishes first).
#[derive(Debug)]
pub struct HarvestJob {
    stop: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl HarvestJob {
    pub fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

/// Starts the harvest job: a pass right away, then one every `schedule.every`, each on its own connection
/// (short transactions beside ingest). Logs counts and problems (file and line), never content.
pub fn start_harvest(
    db_path: &Path,
    schedule: HarvestSchedule,
    clock: personkit_store::clock::Clock,
) -> std::io::Result<HarvestJob> {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let path = db_path.to_path_buf();
    let thread = std::thread::Builder::new()
        .name("harvest".into())
        .spawn(move || {
            loop {
                harvest_pass(&path, &schedule, &clock);
                match rx.recv_timeout(schedule.every) {
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
            }
        })?;
    Ok(HarvestJob { stop: tx, thread })
}

fn harvest_pass(path: &Path, schedule: &HarvestSchedule, clock: &personkit_store::clock::Clock) {
    use personkit_import::harvest;
    let mut conn = match personkit_store::db::open(path) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "harvest: cannot open the corpus");
            return;
        }
    };
    let mut config = harvest::Config::new(schedule.home.clone());
    config.env.clone_from(&schedule.env);
    let sources = match config.load(&conn) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "harvest: cannot read its settings");
            return;
        }
    };
    if sources.is_empty() {
        return;
    }
    let opts = personkit_import::Options {
        patterns: schedule.patterns.clone(),
        ..personkit_import::Options::default()
    };
    match harvest::run(
        &mut conn,
        &config,
        &sources,
        &opts,
        clock.now(),
        &mut |_| {},
    ) {
        Ok(report) => {
            for s in &report.sources {
                tracing::info!(
                    source = %s.source, files = s.files, files_read = s.files_read, stored = s.stored,
                    duplicate = s.duplicate, rejected = s.rejected, problems = s.problems.len(),
                    "harvest pass"
                );
                for p in &s.problems {
                    tracing::warn!(source = %s.source, problem = %p, "harvest");
                }
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "harvest pass failed; it runs again at the next interval")
        }
    }
}

/// What `serve`'s events job reads (`personkit_events`): the home folder, the tools' path variables
/// (`personkit_events::ENV`), the user's redaction patterns, and how often it looks for due sources. Which
/// sources run, and when, is read from the corpus at each look: an enabled source runs once its cadence has
/// passed since its last run.
#[derive(Debug, Clone)]
pub struct EventsSchedule {
    pub check_every: Duration,
    pub home: std::path::PathBuf,
    pub env: std::collections::BTreeMap<String, String>,
    pub patterns: Vec<String>,
}

/// The running events job; [`EventsJob::stop`] ends it between passes.
#[derive(Debug)]
pub struct EventsJob {
    stop: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl EventsJob {
    pub fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

/// Starts the events job: at start and every `schedule.check_every`, the due sources run, on one connection of
/// its own (short transactions beside ingest). Logs counts and problems (file, line or repository), never
/// content.
pub fn start_events(
    db_path: &Path,
    schedule: EventsSchedule,
    clock: personkit_store::clock::Clock,
) -> std::io::Result<EventsJob> {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let path = db_path.to_path_buf();
    let thread = std::thread::Builder::new()
        .name("events".into())
        .spawn(move || {
            let mut conn: Option<personkit_store::Connection> = None;
            loop {
                conn = events_pass(conn, &path, &schedule, &clock);
                match rx.recv_timeout(schedule.check_every) {
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
            }
        })?;
    Ok(EventsJob { stop: tx, thread })
}

fn events_pass(
    conn: Option<personkit_store::Connection>,
    path: &Path,
    schedule: &EventsSchedule,
    clock: &personkit_store::clock::Clock,
) -> Option<personkit_store::Connection> {
    let conn = match conn {
        Some(c) => c,
        None => match personkit_store::db::open(path) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "events: cannot open the corpus");
                return None;
            }
        },
    };
    let now = clock.now();
    let due = match personkit_events::due(&conn, now) {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(error = %e, "events: cannot read its settings");
            return Some(conn);
        }
    };
    if due.is_empty() {
        return Some(conn);
    }
    let mut config = personkit_events::Config::new(schedule.home.clone());
    config.env.clone_from(&schedule.env);
    config.patterns.clone_from(&schedule.patterns);
    if let Err(e) = config.load(&conn) {
        tracing::warn!(error = %e, "events: cannot read its settings");
        return Some(conn);
    }
    match personkit_events::run(&conn, &config, &due, now, &mut |_| {}) {
        Ok(report) => {
            for s in &report.sources {
                tracing::info!(
                    source = %s.source, read = s.read, stored = s.stored, duplicate = s.duplicate,
                    rejected = s.rejected, problems = s.problems.len(), "events pass"
                );
                for p in &s.problems {
                    tracing::warn!(source = %s.source, problem = %p, "events");
                }
            }
        }
        Err(e) => tracing::warn!(error = %e, "events pass failed; it runs again at the next look"),
    }
    Some(conn)
}

/// The `[knowledge]` settings from the config file the `[llm]` settings come from (defaults when there is none or
/// it cannot be read: a broken file is reported by `corpus health` and `knowledge run`).
pub fn knowledge_settings(db_path: &Path) -> personkit_knowledge::Settings {
    personkit_llm::LlmConfig::load(Some(db_path))
        .ok()
        .and_then(|c| personkit_knowledge::Settings::load(c.file.as_deref()).ok())
        .unwrap_or_default()
}

/// The running knowledge job; [`KnowledgeJob::stop`] ends it (a pass in progress finishes first).
#[derive(Debug)]
pub struct KnowledgeJob {
    stop: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl KnowledgeJob {
    pub fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

/// How often the knowledge job looks at the clock.
const KNOWLEDGE_TICK: Duration = Duration::from_secs(30);

/// Starts the daily knowledge pass when a language model is configured (`None` and a log line otherwise): once a
/// day, in the hour `[knowledge] hour` of local time (`local` is the machine's offset from UTC, read at start),
/// on its own writer connection, the model loaded for the pass and dropped after it. Logs counts, never content.
pub fn start_knowledge(
    db_path: &Path,
    clock: personkit_store::clock::Clock,
    local: time::UtcOffset,
) -> std::io::Result<Option<KnowledgeJob>> {
    let llm = match personkit_llm::LlmConfig::load(Some(db_path)) {
        Ok(c) if c.kind != personkit_llm::LlmKind::None => c,
        Ok(_) => {
            tracing::info!("knowledge pipeline off: no language model configured ([llm] kind)");
            return Ok(None);
        }
        Err(e) => {
            tracing::warn!(error = %e, "knowledge pipeline off: the [llm] settings are unusable");
            return Ok(None);
        }
    };
    let mut settings = personkit_knowledge::Settings::load(llm.file.as_deref()).unwrap_or_default();
    settings.max_tokens = llm.max_tokens;
    settings.call_timeout = llm.timeout();
    tracing::info!(model = %llm.describe(), hour = settings.hour, "knowledge pipeline on: a pass daily");
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let path = db_path.to_path_buf();
    let thread = std::thread::Builder::new()
        .name("knowledge".into())
        .spawn(move || {
            let mut last_day = None;
            loop {
                let now = clock.now().to_offset(local);
                if now.hour() == settings.hour && last_day != Some(now.date()) {
                    last_day = Some(now.date());
                    knowledge_pass(&path, &llm, &settings, &clock);
                }
                match rx.recv_timeout(KNOWLEDGE_TICK) {
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
            }
        })?;
    Ok(Some(KnowledgeJob { stop: tx, thread }))
}

fn knowledge_pass(
    path: &Path,
    llm: &personkit_llm::LlmConfig,
    settings: &personkit_knowledge::Settings,
    clock: &personkit_store::clock::Clock,
) {
    let model = match personkit_llm::open(llm) {
        Ok(Some(m)) => m,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(error = %e, hint = e.hint(), "knowledge pass: cannot load the model");
            return;
        }
    };
    let db = match personkit_store::Db::open(path) {
        Ok(db) => db,
        Err(e) => {
            tracing::warn!(error = %e, "knowledge pass: cannot open the corpus");
            return;
        }
    };
    match personkit_knowledge::run_once(&db, model.as_ref(), settings, clock, &mut |_| {}) {
        Ok(r) => tracing::info!(
            turns = r.turns, windows = r.windows, calls = r.calls, new = r.new_entries,
            reinforced = r.reinforced, variants = r.variants, dropped_by_judge = r.dropped_by_judge,
            judge_failures = r.judge_failures, sent_as = %r.sent_as, "knowledge pass"
        ),
        Err(e) => tracing::warn!(error = %e, "knowledge pass failed"),
    }
}

/// The running memory job; [`MemoryJob::stop`] ends it (a run in progress finishes first).
#[derive(Debug)]
pub struct MemoryJob {
    stop: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl MemoryJob {
    pub fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

/// How often the memory job looks at the clock (and at tiers a forget made due).
const MEMORY_TICK: Duration = Duration::from_secs(30);

/// Starts the memory schedule: short daily at 03:00, mid on Sundays at 03:30, long on the 1st at 04:00 (local
/// time, `local` read at start), each when enabled — and caught up at the next tick when the machine was off at
/// the time. Short also runs again at once when a forget withdrew its version. Runs hold `busy` (one distillation
/// at a time, shared with `POST /v1/distill/{tier}`) and use a connection of their own; the settings are read
/// afresh for every run. Logs outcomes and counts, never content.
pub fn start_memory(
    db_path: &Path,
    clock: personkit_store::clock::Clock,
    local: time::UtcOffset,
    busy: std::sync::Arc<tokio::sync::Mutex<()>>,
) -> std::io::Result<MemoryJob> {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let path = db_path.to_path_buf();
    let thread = std::thread::Builder::new()
        .name("memory".into())
        .spawn(move || {
            // A tier that failed is tried again at its next scheduled start, not every tick.
            let mut failed_at: std::collections::HashMap<
                personkit_memory::Tier,
                time::OffsetDateTime,
            > = Default::default();
            // One connection for the job's life, opened again only after a read on it failed.
            let mut conn = None;
            loop {
                if conn.is_none() {
                    conn = personkit_store::db::open(&path).ok();
                }
                if let Some(c) = &conn
                    && memory_tick(c, &path, &clock, local, &busy, &mut failed_at).is_err()
                {
                    conn = None;
                }
                match rx.recv_timeout(MEMORY_TICK) {
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
            }
        })?;
    Ok(MemoryJob { stop: tx, thread })
}

/// One look at the schedule; `Err` when the corpus could not be read (the connection is opened again).
fn memory_tick(
    conn: &personkit_store::Connection,
    path: &Path,
    clock: &personkit_store::clock::Clock,
    local: time::UtcOffset,
    busy: &tokio::sync::Mutex<()>,
    failed_at: &mut std::collections::HashMap<personkit_memory::Tier, time::OffsetDateTime>,
) -> Result<(), personkit_store::DbError> {
    use personkit_memory::{Tier, run::Configured};
    let Ok(cfg) = Configured::load(path) else {
        return Ok(());
    };
    for tier in Tier::ALL {
        let now = clock.now();
        let local_now = now.to_offset(local);
        if !cfg.settings.tier(tier).enabled {
            continue;
        }
        if tier != Tier::Short
            && cfg.llm.as_ref().is_ok_and(|c| {
                cfg.settings
                    .llm_for(tier, c)
                    .is_ok_and(|c| c.kind == personkit_llm::LlmKind::None)
            })
        {
            continue;
        }
        if failed_at
            .get(&tier)
            .is_some_and(|f| *f >= tier.last_scheduled(local_now))
        {
            continue;
        }
        if !personkit_memory::scheduled_due(conn, tier, local_now)? {
            continue;
        }
        let Ok(_guard) = busy.try_lock() else {
            return Ok(());
        };
        match personkit_memory::run::run_tier(conn, tier, &cfg, now, local, "scheduled") {
            Ok(r) => {
                failed_at.remove(&tier);
                tracing::info!(tier = tier.as_str(), outcome = %r.outcome, tokens = r.tokens, ms = r.elapsed_ms, "memory run")
            }
            Err(e) => {
                failed_at.insert(tier, now);
                tracing::warn!(
                    tier = tier.as_str(),
                    code = e.code(),
                    hint = e.hint(),
                    "memory run failed; the current version stays"
                )
            }
        }
    }
    Ok(())
}

/// The running heat job; [`HeatJob::stop`] ends it (a pass in progress finishes first).
#[derive(Debug)]
pub struct HeatJob {
    stop: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl HeatJob {
    pub fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

/// How often the heat job looks at the clock.
pub const HEAT_TICK: Duration = Duration::from_secs(60);

/// Starts the heat job: every `tick` it asks whether the recompute is due (`personkit_heat::RECOMPUTE_EVERY`
/// since the last one, which the corpus remembers) and runs it, so a relay that was stopped catches up at its
/// first tick, which comes at once. One connection for the job's life, opened again after a failure. Logs
/// counts, never ids.
pub fn start_heat(
    db_path: &Path,
    clock: personkit_store::clock::Clock,
    tick: Duration,
) -> std::io::Result<HeatJob> {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let path = db_path.to_path_buf();
    let thread = std::thread::Builder::new()
        .name("heat".into())
        .spawn(move || {
            let mut conn = None;
            loop {
                if conn.is_none() {
                    conn = personkit_store::db::open(&path).ok();
                }
                if let Some(c) = &conn {
                    match personkit_heat::run_if_due(c, clock.now()) {
                        Ok(Some(n)) => tracing::info!(records = n, "heat recomputed"),
                        Ok(None) => {}
                        Err(e) => {
                            tracing::warn!(error = %e, "heat recompute failed; it is tried again at the next tick");
                            conn = None;
                        }
                    }
                }
                match rx.recv_timeout(tick) {
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
            }
        })?;
    Ok(HeatJob { stop: tx, thread })
}

/// The running graph derivation; [`GraphJob::stop`] ends it (a pass in progress finishes first).
#[derive(Debug)]
pub struct GraphJob {
    stop: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl GraphJob {
    pub fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

/// Batches one graph tick runs at most (the rest waits for the next tick).
const GRAPH_BATCHES_PER_TICK: usize = 20;

/// Starts the entity graph's derivation (`personkit_graph::run`): every `interval`, the turns not read yet and the
/// threads a forget queued, in bounded batches, on a connection of its own. Logs counts, never names.
pub fn start_graph(
    db_path: &Path,
    clock: personkit_store::clock::Clock,
    interval: Duration,
) -> std::io::Result<GraphJob> {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let path = db_path.to_path_buf();
    let thread = std::thread::Builder::new()
        .name("graph".into())
        .spawn(move || {
            let mut conn = None;
            let mut extraction = Extraction::default();
            loop {
                if conn.is_none() {
                    conn = personkit_store::db::open(&path).ok();
                }
                if let Some(c) = &conn
                    && let Err(e) = personkit_graph::run::build(
                        c,
                        clock.now(),
                        personkit_graph::run::BATCH,
                        GRAPH_BATCHES_PER_TICK,
                    )
                {
                    tracing::warn!(code = e.code(), "graph pass failed; tried again next tick");
                    conn = None;
                }
                if let Some(c) = &conn {
                    extraction.tick(c, &path, clock.now());
                }
                match rx.recv_timeout(interval) {
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
            }
        })?;
    Ok(GraphJob { stop: tx, thread })
}

/// The model-based entity extraction as the graph job runs it: only with `[graph] extract = true` and a model
/// configured; the model is opened when there are turns to read and closed when there are none.
#[derive(Default)]
struct Extraction {
    model: Option<std::sync::Arc<dyn personkit_llm::ChatModel>>,
}

impl Extraction {
    fn tick(&mut self, conn: &personkit_store::Connection, db: &Path, now: time::OffsetDateTime) {
        let Ok(llm) = personkit_llm::LlmConfig::load(Some(db)) else {
            return;
        };
        let settings = match personkit_graph::extract::Settings::load(llm.file.as_deref()) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(
                    code = e.code(),
                    "[graph] settings unusable; extraction skipped"
                );
                return;
            }
        };
        if !settings.extract {
            self.model = None;
            return;
        }
        if self.model.is_none() {
            match personkit_llm::open(&llm) {
                Ok(m) => self.model = m,
                Err(e) => {
                    tracing::warn!(code = e.code(), "entity extraction: the model did not open");
                    return;
                }
            }
        }
        let Some(model) = &self.model else { return };
        let mut knowledge =
            personkit_knowledge::Settings::load(llm.file.as_deref()).unwrap_or_default();
        knowledge.call_timeout = llm.timeout();
        let limits = personkit_graph::extract::Limits {
            calls: settings.extract_calls,
            timeout: knowledge.call_timeout,
        };
        match personkit_graph::extract::run(conn, model.as_ref(), &knowledge, limits, now) {
            Ok(r) if !r.more => self.model = None,
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(
                    code = e.code(),
                    "entity extraction failed; tried again next tick"
                );
                self.model = None;
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod heat_job_tests {
    use super::*;
    use personkit_store::clock::Clock;
    use personkit_store::heat::{self as rows, Kind, Tier};

    /// Waits (at most 20 s) until the job has recomputed at `at`; the job runs on its own thread.
    fn recomputed_at(db: &Path, at: time::OffsetDateTime) -> bool {
        let conn = personkit_store::db::open(db).unwrap();
        for _ in 0..2_000 {
            if rows::last_recompute(&conn).unwrap() == Some(at) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// The job catches up at start, then computes again once six hours have passed on the clock, and cools what
    /// was not used since.
    #[test]
    fn the_heat_job_catches_up_at_start_and_runs_every_six_hours() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("corpus.db");
        let clock = Clock::manual(time::macros::datetime!(2026-11-01 09:00 UTC));
        {
            let conn = personkit_store::db::open(&db).unwrap();
            for _ in 0..7 {
                personkit_heat::record_access(&conn, "thread", "t", clock.now()).unwrap();
            }
        }
        let job = start_heat(&db, clock.clone(), Duration::from_millis(5)).unwrap();
        assert!(recomputed_at(&db, clock.now()), "no pass at start");
        clock.advance(personkit_heat::RECOMPUTE_EVERY);
        assert!(recomputed_at(&db, clock.now()), "no pass six hours later");
        job.stop();
        let conn = personkit_store::db::open(&db).unwrap();
        let r = rows::get(&conn, Kind::Thread, "t").unwrap().unwrap();
        assert_eq!(r.computed_at, "2026-11-01T15:00:00.000Z");
        assert_eq!(
            r.tier,
            Tier::Warm,
            "six hours took it below 0.7: {}",
            r.heat
        );
    }
}
