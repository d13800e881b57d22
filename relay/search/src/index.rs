//! In-memory vector indexes: for every stored vector of one kind (message or event) and one model, its sign bits
//! (1 bit per dimension, for a Hamming first pass over all vectors) and an int8 copy with a per-vector scale (for
//! rescoring the first pass's candidates from memory).
//!
//! [`Indexes`] belongs to whoever serves queries (the server's state; one per CLI process). Each index is loaded
//! on first use (or warmed at `serve` start) and kept in step with the corpus through the vector change log
//! (`search_vec_log`): before each search it replays the log rows after the last sequence number it saw, so
//! vectors written by the embedding job, by `personkit corpus embed` or by another process show up at the next
//! query. It is a cache: it never writes the corpus, and rows it holds are still checked against the corpus
//! (current, filters) by the caller.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use personkit_store::retrieval::SearchReader;
use personkit_store::vectors::Kind;
use personkit_store::{Connection, DbError};

/// Sign bits and int8 copies of one kind's vectors for one model.
#[derive(Debug, Default)]
pub struct VecIndex {
    dim: usize,
    words: usize,
    pks: Vec<i64>,
    bits: Vec<u64>,
    q8: Vec<i8>,
    scale: Vec<f32>,
    pos: HashMap<i64, usize>,
    /// Last `search_vec_log.seq` applied.
    seen: i64,
}

impl VecIndex {
    fn new(dim: usize) -> Self {
        VecIndex {
            dim,
            words: dim.div_ceil(64),
            ..VecIndex::default()
        }
    }

    /// Number of vectors held.
    pub fn len(&self) -> usize {
        self.pks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pks.is_empty()
    }

    fn upsert(&mut self, pk: i64, v: &[f32]) {
        if v.len() != self.dim {
            self.remove(pk);
            return;
        }
        let i = match self.pos.get(&pk) {
            Some(&i) => i,
            None => {
                let i = self.pks.len();
                self.pks.push(pk);
                self.bits.extend(std::iter::repeat_n(0, self.words));
                self.q8.extend(std::iter::repeat_n(0, self.dim));
                self.scale.push(0.0);
                self.pos.insert(pk, i);
                i
            }
        };
        let bits = &mut self.bits[i * self.words..(i + 1) * self.words];
        bits.fill(0);
        for (d, x) in v.iter().enumerate() {
            // Same convention as sqlite-vec's vec_quantize_binary: bit set when the component is positive.
            if *x > 0.0 {
                bits[d / 64] |= 1 << (d % 64);
            }
        }
        let max = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        let s = if max > 0.0 { max / 127.0 } else { 1.0 };
        for (o, x) in self.q8[i * self.dim..(i + 1) * self.dim].iter_mut().zip(v) {
            *o = (x / s).round().clamp(-127.0, 127.0) as i8;
        }
        self.scale[i] = s;
    }

    fn remove(&mut self, pk: i64) {
        let Some(i) = self.pos.remove(&pk) else {
            return;
        };
        let last = self.pks.len() - 1;
        if i != last {
            let moved = self.pks[last];
            self.pks.swap(i, last);
            for w in 0..self.words {
                self.bits.swap(i * self.words + w, last * self.words + w);
            }
            for d in 0..self.dim {
                self.q8.swap(i * self.dim + d, last * self.dim + d);
            }
            self.scale.swap(i, last);
            self.pos.insert(moved, i);
        }
        self.pks.pop();
        self.bits.truncate(last * self.words);
        self.q8.truncate(last * self.dim);
        self.scale.pop();
    }

    /// Approximate nearest neighbours of `qv` (unit length): the `candidates` rows closest in Hamming distance
    /// of the sign bits (ties at the cut-off included), rescored with the int8 copies; returns `(pk, cosine)`
    /// best first, at most `want`.
    pub fn search(&self, qv: &[f32], want: usize, candidates: usize) -> Vec<(i64, f64)> {
        if qv.len() != self.dim || self.pks.is_empty() {
            return Vec::new();
        }
        let mut qb = vec![0u64; self.words];
        for (d, x) in qv.iter().enumerate() {
            if *x > 0.0 {
                qb[d / 64] |= 1 << (d % 64);
            }
        }
        let n = self.pks.len();
        let mut dist = Vec::with_capacity(n);
        let mut hist = vec![0usize; self.dim + 1];
        hamming_all(&self.bits, &qb, &mut dist, &mut hist);
        // Smallest distance t such that at least `candidates` rows lie within t.
        let mut cut = self.dim;
        let mut acc = 0;
        for (t, c) in hist.iter().enumerate() {
            acc += c;
            if acc >= candidates {
                cut = t;
                break;
            }
        }
        let mut scored: Vec<(i64, f64)> = Vec::with_capacity(acc.min(n));
        for (i, d) in dist.iter().enumerate() {
            if usize::from(*d) <= cut {
                let v = &self.q8[i * self.dim..(i + 1) * self.dim];
                let dot: f32 = v.iter().zip(qv).map(|(a, b)| f32::from(*a) * b).sum();
                scored.push((self.pks[i], f64::from(dot * self.scale[i])));
            }
        }
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        scored.truncate(want);
        scored
    }

    /// Loads every vector of `kind` stored for `model_key`.
    pub fn load<R: SearchReader + ?Sized>(
        reader: &R,
        kind: Kind,
        model_key: &str,
        dim: usize,
    ) -> Result<Self, DbError> {
        let mut ix = VecIndex::new(dim);
        // Read the log position first: changes after it are replayed later (replaying is idempotent).
        ix.seen = reader.vector_log_head()?;
        reader.for_each_vector(kind, model_key, dim, &mut |pk, v| ix.upsert(pk, v))?;
        Ok(ix)
    }

    /// Applies the changes logged since the last call. Returns false when the index must reload: the log went
    /// backwards (another corpus at the same path) or rows it had not read yet were pruned.
    pub fn catch_up<R: SearchReader + ?Sized>(
        &mut self,
        reader: &R,
        kind: Kind,
        model_key: &str,
    ) -> Result<bool, DbError> {
        let changed = reader.vector_log_since(self.seen, kind)?;
        // Rows after `seen` were pruned before this index read them: what they said is lost, so reload.
        if self.seen < reader.vector_log_pruned_through()? {
            return Ok(false);
        }
        if changed.is_empty() {
            return Ok(reader.vector_log_head()? >= self.seen || self.seen == 0);
        }
        for (seq, pk) in changed {
            match reader.vector_of(kind, pk, model_key)? {
                Some(v) => self.upsert(pk, &v),
                None => self.remove(pk),
            }
            self.seen = self.seen.max(seq);
        }
        Ok(true)
    }
}

/// Hamming distance of the query bits `q` to every row of `bits` (rows of `q.len()` words): pushed to `dist`,
/// counted in `hist`. The hot loop of a vector query (10^6 rows at 1M messages).
fn hamming_all(bits: &[u64], q: &[u64], dist: &mut Vec<u16>, hist: &mut [usize]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("popcnt") {
        // SAFETY: the CPU supports POPCNT (checked just above), the only requirement of this target feature.
        #[allow(unsafe_code)]
        unsafe {
            hamming_popcnt(bits, q, dist, hist)
        };
        return;
    }
    hamming_rows(bits, q, dist, hist);
}

/// [`hamming_rows`] compiled with the POPCNT instruction (the x86-64 baseline lacks it, and its software
/// popcount is several times slower).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
fn hamming_popcnt(bits: &[u64], q: &[u64], dist: &mut Vec<u16>, hist: &mut [usize]) {
    hamming_rows(bits, q, dist, hist);
}

#[inline(always)]
fn hamming_rows(bits: &[u64], q: &[u64], dist: &mut Vec<u16>, hist: &mut [usize]) {
    // Fixed row widths for the two supported dimensions let the compiler unroll the inner loop.
    match q.len() {
        6 => hamming_fixed::<6>(bits, q, dist, hist),
        12 => hamming_fixed::<12>(bits, q, dist, hist),
        _ => {
            for c in bits.chunks_exact(q.len()) {
                let h: u32 = c.iter().zip(q).map(|(a, b)| (a ^ b).count_ones()).sum();
                dist.push(h as u16);
                hist[h as usize] += 1;
            }
        }
    }
}

#[inline(always)]
fn hamming_fixed<const W: usize>(bits: &[u64], q: &[u64], dist: &mut Vec<u16>, hist: &mut [usize]) {
    let Ok(q) = <&[u64; W]>::try_from(q) else {
        return;
    };
    for c in bits.chunks_exact(W) {
        let Ok(c) = <&[u64; W]>::try_from(c) else {
            continue;
        };
        let h: u32 = c.iter().zip(q).map(|(a, b)| (a ^ b).count_ones()).sum();
        dist.push(h as u16);
        hist[h as usize] += 1;
    }
}

type IndexKey = (Kind, String, usize);

/// The in-memory indexes of one corpus, one per (kind, model, dimension), owned by whoever serves queries. Cheap
/// to clone (shared handles).
#[derive(Debug, Clone, Default)]
pub struct Indexes {
    slots: Arc<Mutex<HashMap<IndexKey, Arc<Mutex<VecIndex>>>>>,
}

impl Indexes {
    pub fn new() -> Self {
        Self::default()
    }

    /// The up-to-date index of `kind`/`model_key`/`dim` (loaded on first use, caught up with the corpus), as a
    /// handle that another thread can search without the reader (only catching up needs the corpus).
    pub fn shared<R: SearchReader + ?Sized>(
        &self,
        reader: &R,
        kind: Kind,
        model_key: &str,
        dim: usize,
    ) -> Result<Arc<Mutex<VecIndex>>, DbError> {
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            slots
                .entry((kind, model_key.to_owned(), dim))
                .or_insert_with(|| Arc::new(Mutex::new(VecIndex::new(0))))
                .clone()
        };
        {
            let mut ix = slot.lock().unwrap_or_else(|e| e.into_inner());
            if ix.dim != dim || !ix.catch_up(reader, kind, model_key)? {
                *ix = VecIndex::load(reader, kind, model_key, dim)?;
            }
        }
        Ok(slot)
    }

    /// How many vectors the index of `kind`/`model_key`/`dim` holds, if it was loaded; never loads or waits
    /// for a load in progress (that reports `None`).
    pub fn loaded_len(&self, kind: Kind, model_key: &str, dim: usize) -> Option<usize> {
        let slot = {
            let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            slots.get(&(kind, model_key.to_owned(), dim))?.clone()
        };
        let ix = slot.try_lock().ok()?;
        (ix.dim == dim).then(|| ix.len())
    }

    /// Loads the message and event indexes of `model_key`/`dim` on a background thread, on a connection of its
    /// own that `open` makes (read-only is enough), so the first query does not pay for loading them (seconds
    /// at 10^6 vectors). A query that comes meanwhile waits for that load rather than starting a second one.
    /// A failure is logged and the first query loads the index itself. `serve` and `personkit mcp` call this
    /// at start; the handle is for tests.
    pub fn warm_in_background<F>(
        &self,
        open: F,
        model_key: String,
        dim: usize,
    ) -> Option<std::thread::JoinHandle<()>>
    where
        F: FnOnce() -> Result<Connection, String> + Send + 'static,
    {
        let indexes = self.clone();
        std::thread::Builder::new()
            .name("personkit-index-warm".into())
            .spawn(move || {
                let t = std::time::Instant::now();
                let conn = match open() {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(error = %e, "vector index warm-up cannot open the corpus; the first query loads it");
                        return;
                    }
                };
                for kind in [Kind::Message, Kind::Event] {
                    match indexes.with_index(&conn, kind, &model_key, dim, |ix| ix.len()) {
                        Ok(n) => tracing::info!(
                            kind = kind.as_str(),
                            vectors = n,
                            ms = t.elapsed().as_millis() as u64,
                            "vector index loaded"
                        ),
                        Err(e) => tracing::warn!(error = %e, "vector index warm-up failed; the first query loads it"),
                    }
                }
            })
            .map_err(|e| tracing::warn!(error = %e, "cannot start the vector index warm-up"))
            .ok()
    }

    /// Runs `f` on the up-to-date index of `kind`/`model_key`/`dim`.
    pub fn with_index<R: SearchReader + ?Sized, T>(
        &self,
        reader: &R,
        kind: Kind,
        model_key: &str,
        dim: usize,
        f: impl FnOnce(&VecIndex) -> T,
    ) -> Result<T, DbError> {
        let slot = self.shared(reader, kind, model_key, dim)?;
        let ix = slot.lock().unwrap_or_else(|e| e.into_inner());
        Ok(f(&ix))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    use personkit_store::vectors::{self, ModelRef};

    fn unit(seed: u64, dim: usize) -> Vec<f32> {
        personkit_testkit::Rng::new(seed).unit_vector(dim)
    }

    #[test]
    fn finds_itself_first_and_removal_keeps_positions_consistent() {
        let mut ix = VecIndex::new(384);
        for pk in 0..300 {
            ix.upsert(pk, &unit(pk as u64, 384));
        }
        for pk in (0..300).step_by(3) {
            ix.remove(pk);
        }
        assert_eq!(ix.len(), 200);
        for pk in [1i64, 2, 298, 299] {
            let hits = ix.search(&unit(pk as u64, 384), 5, 50);
            assert_eq!(hits[0].0, pk);
            assert!((hits[0].1 - 1.0).abs() < 0.01, "{}", hits[0].1);
        }
        let gone = ix.search(&unit(3, 384), 5, 50);
        assert!(gone.iter().all(|h| h.0 != 3));
    }

    /// Stores row `pk`'s vector (from `seed`) for `model`, as the embedding job does. Message rows need not
    /// exist: vectors are keyed by pk.
    fn put(conn: &mut Connection, pk: i64, seed: u64, model: (&str, &str)) {
        let v = unit(seed, 384);
        let h = format!("h{seed}-{}", model.0);
        let m = ModelRef {
            id: model.0,
            version: model.1,
            dim: 384,
        };
        let vectors = [(h.clone(), v.clone())].into_iter().collect();
        vectors::write_batch(
            conn,
            Kind::Message,
            m,
            &[(h.clone(), v)],
            &[(pk, h)],
            &vectors,
            "2026-11-22T10:00:00.000Z",
        )
        .expect("write vectors");
    }

    /// Two connections to one new corpus whose rows `1..=n` hold vectors of model `m@1` (seeded by their pk).
    fn two_connections(n: i64) -> (tempfile::TempDir, Connection, Connection) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.db");
        let mut a = personkit_store::db::open(&path).expect("open");
        let b = personkit_store::db::open(&path).expect("open");
        for pk in 1..=n {
            put(&mut a, pk, pk as u64, ("m", "1"));
        }
        (dir, a, b)
    }

    /// The index's size and its best hit for the vector of `seed`.
    fn top_hit(indexes: &Indexes, conn: &Connection, seed: u64) -> (usize, Vec<(i64, f64)>) {
        indexes
            .with_index(conn, Kind::Message, "m@1", 384, |ix| {
                (ix.len(), ix.search(&unit(seed, 384), 1, 10))
            })
            .expect("index")
    }

    #[test]
    fn warms_in_the_background_on_its_own_read_only_connection() {
        let (dir, a, _b) = two_connections(30);
        let path = dir.path().join("c.db");
        let indexes = Indexes::new();
        assert_eq!(indexes.loaded_len(Kind::Message, "m@1", 384), None);
        let handle = indexes
            .warm_in_background(
                move || personkit_store::db::open_read_only(&path).map_err(|e| e.to_string()),
                "m@1".into(),
                384,
            )
            .expect("thread");
        handle.join().expect("warm-up thread");
        // Loaded by the warm-up, before any query touched it.
        assert_eq!(indexes.loaded_len(Kind::Message, "m@1", 384), Some(30));
        assert_eq!(indexes.loaded_len(Kind::Message, "other@1", 384), None);
        assert_eq!(
            top_hit(&indexes, &a, 9),
            (30, top_hit(&Indexes::new(), &a, 9).1)
        );
        // A corpus that cannot be opened leaves nothing loaded and nothing broken.
        let gone = Indexes::new();
        gone.warm_in_background(|| Err("no corpus".into()), "m@1".into(), 384)
            .expect("thread")
            .join()
            .expect("warm-up thread");
        assert_eq!(gone.loaded_len(Kind::Message, "m@1", 384), None);
    }

    #[test]
    fn follows_writes_of_another_connection() {
        let (_dir, a, mut b) = two_connections(50);
        let m = ("m", "1");
        let indexes = Indexes::new();
        let top = |conn: &Connection, seed: u64| top_hit(&indexes, conn, seed);
        assert_eq!(top(&a, 7).0, 50);
        assert_eq!(top(&a, 7).1[0].0, 7);
        // Another connection adds a row, re-embeds row 7 with another text and moves row 8 to another model.
        put(&mut b, 51, 1000, m);
        put(&mut b, 7, 2000, m);
        put(&mut b, 8, 8, ("other", "1"));
        let (n, hit) = top(&a, 1000);
        assert_eq!((n, hit[0].0), (50, 51));
        assert_eq!(top(&a, 2000).1[0].0, 7);
        assert_ne!(top(&a, 7).1[0].0, 7);
        assert_ne!(top(&a, 8).1[0].0, 8);
        vectors::remove(&mut b, Kind::Message, 51).expect("remove");
        assert_eq!(top(&a, 1000).0, 49);
    }

    #[test]
    fn an_index_behind_a_pruned_log_reloads_and_misses_nothing() {
        let (_dir, a, mut b) = two_connections(20);
        let m = ("m", "1");
        let indexes = Indexes::new();
        let top = |conn: &Connection, seed: u64| top_hit(&indexes, conn, seed);
        assert_eq!(top(&a, 3).0, 20);
        // Nothing to prune yet with a generous keep; the log is intact.
        assert_eq!(vectors::prune_log(&b, 1_000).expect("prune"), 0);
        // Another connection re-embeds row 3, adds rows 21..=25, then prunes all but the newest 2 log rows:
        // the changes to rows 3 and 21..=23 are no longer in the log.
        put(&mut b, 3, 3000, m);
        for pk in 21..=25 {
            put(&mut b, pk, pk as u64, m);
        }
        let deleted = vectors::prune_log(&b, 2).expect("prune");
        let left = vectors::log_len(&b).expect("count");
        assert_eq!(left, 2);
        assert!(deleted >= 24, "deleted {deleted}");
        // Pruning again at the same keep is a no-op.
        assert_eq!(vectors::prune_log(&b, 2).expect("prune"), 0);
        // The index of `a` was behind the cut: it reloads and sees every change.
        let (n, hit) = top(&a, 3000);
        assert_eq!((n, hit[0].0), (25, 3));
        assert_eq!(top(&a, 22).1[0].0, 22);
        assert_ne!(top(&a, 3).1[0].0, 3);
    }
}
