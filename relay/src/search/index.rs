//! In-memory vector index of the relay process: for every stored vector of one kind (message or event) and one
//! model, its sign bits (1 bit per dimension, for a Hamming first pass over all vectors) and an int8 copy with a
//! per-vector scale (for rescoring the first pass's candidates from memory).
//!
//! Loaded lazily from the corpus on the first query (the float vec0 table, rows chosen by `search_vec_state`)
//! and kept in sync through `search_vec_log` (migration 0004): before each search the index reads the log rows
//! after the last sequence number it saw and reloads those rows' vectors, so vectors written by the embed worker,
//! by `personkit corpus embed` or by another process show up at the next query. It is a cache: it never writes
//! the corpus, and rows it holds are still checked against the corpus (current, filters) by the caller.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use rusqlite::{Connection, OptionalExtension, params};

use crate::embed::store::{Kind, blob_to_vec};

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

    fn vector_of(
        conn: &Connection,
        kind: Kind,
        pk: i64,
        model_key: &str,
    ) -> rusqlite::Result<Option<Vec<f32>>> {
        let (model_id, version) = model_key.rsplit_once('@').unwrap_or((model_key, ""));
        conn.prepare_cached(
            "SELECT e.vector FROM search_vec_state s
             JOIN embeddings e ON e.text_hash = s.text_hash AND e.model_id = ?3 AND e.model_version = ?4
             WHERE s.kind = ?1 AND s.pk = ?2 AND s.model_key = ?5",
        )?
        .query_row(
            params![kind.as_str(), pk, model_id, version, model_key],
            |r| r.get::<_, Vec<u8>>(0),
        )
        .optional()
        .map(|o| o.map(|b| blob_to_vec(&b)))
    }

    fn last_seq(conn: &Connection) -> rusqlite::Result<i64> {
        conn.query_row(
            "SELECT COALESCE(MAX(seq), 0) FROM search_vec_log",
            [],
            |r| r.get(0),
        )
    }

    /// Loads every vector of `kind` stored for `model_key`.
    pub fn load(
        conn: &Connection,
        kind: Kind,
        model_key: &str,
        dim: usize,
    ) -> rusqlite::Result<Self> {
        let mut ix = VecIndex::new(dim);
        // Read the log position first: changes after it are replayed later (replaying is idempotent).
        ix.seen = Self::last_seq(conn)?;
        // Every row holding a vector of this model, with its vector from the `embeddings` cache (keyed by text
        // hash and model). At 10^6 rows this is ~25x faster than a scan of the float vec0 table, whose full scan
        // reads row by row through its chunks.
        let (model_id, version) = model_key.rsplit_once('@').unwrap_or((model_key, ""));
        let mut st = conn.prepare(
            "SELECT s.pk, e.vector FROM search_vec_state s
             JOIN embeddings e ON e.text_hash = s.text_hash AND e.model_id = ?3 AND e.model_version = ?4
             WHERE s.kind = ?1 AND s.model_key = ?2 AND s.dim = ?5",
        )?;
        let mut rows = st.query(params![
            kind.as_str(),
            model_key,
            model_id,
            version,
            dim as i64
        ])?;
        while let Some(r) = rows.next()? {
            let pk: i64 = r.get(0)?;
            let v = blob_to_vec(r.get_ref(1)?.as_blob()?);
            ix.upsert(pk, &v);
        }
        Ok(ix)
    }

    /// Applies the changes logged since the last call. Returns false when the log went backwards (another
    /// corpus at the same path): the caller reloads.
    pub fn catch_up(
        &mut self,
        conn: &Connection,
        kind: Kind,
        model_key: &str,
    ) -> rusqlite::Result<bool> {
        let changed: Vec<(i64, i64)> = conn
            .prepare_cached("SELECT seq, pk FROM search_vec_log WHERE seq > ?1 AND kind = ?2")?
            .query_map(params![self.seen, kind.as_str()], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?
            .collect::<Result<_, _>>()?;
        // Rows after `seen` were pruned before this index read them: what they said is lost, so reload.
        if self.seen < pruned_through(conn)? {
            return Ok(false);
        }
        if changed.is_empty() {
            return Ok(Self::last_seq(conn)? >= self.seen || self.seen == 0);
        }
        for (seq, pk) in changed {
            match Self::vector_of(conn, kind, pk, model_key)? {
                Some(v) => self.upsert(pk, &v),
                None => self.remove(pk),
            }
            self.seen = self.seen.max(seq);
        }
        Ok(true)
    }
}

/// How many of the newest `search_vec_log` rows [`prune_log`] keeps: an index that fell further behind than this
/// (another process's, idle while that many vectors were written) reloads instead of replaying.
pub const LOG_KEEP: i64 = 10_000;

/// The highest `search_vec_log.seq` ever pruned (0: none).
fn pruned_through(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached("SELECT through FROM search_vec_log_pruned WHERE id = 1")?
        .query_row([], |r| r.get(0))
        .optional()
        .map(|o| o.unwrap_or(0))
}

/// Deletes all but the newest `keep` rows of `search_vec_log` and records how far it deleted, so that indexes
/// behind that point reload. Returns the number of rows deleted. Cheap when there is nothing to prune (two
/// look-ups on the primary key); the embedding store calls it in each batch's transaction.
pub fn prune_log(conn: &Connection, keep: i64) -> rusqlite::Result<usize> {
    let last = VecIndex::last_seq(conn)?;
    let cut = last - keep;
    if cut <= pruned_through(conn)? {
        return Ok(0);
    }
    let n = conn
        .prepare_cached("DELETE FROM search_vec_log WHERE seq <= ?1")?
        .execute([cut])?;
    conn.prepare_cached("UPDATE search_vec_log_pruned SET through = ?1 WHERE id = 1")?
        .execute([cut])?;
    Ok(n)
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

type IndexKey = (String, Kind, String, usize);

fn registry() -> &'static Mutex<HashMap<IndexKey, Arc<Mutex<VecIndex>>>> {
    static R: OnceLock<Mutex<HashMap<IndexKey, Arc<Mutex<VecIndex>>>>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Runs `f` on the up-to-date index of `kind`/`model_key`/`dim` for this corpus (loaded on first use). A
/// connection without a file path (in-memory corpus) gets a fresh, uncached index.
pub fn with_index<T>(
    conn: &Connection,
    kind: Kind,
    model_key: &str,
    dim: usize,
    f: impl FnOnce(&VecIndex) -> T,
) -> rusqlite::Result<T> {
    let slot = shared(conn, kind, model_key, dim)?;
    let ix = slot.lock().unwrap_or_else(|e| e.into_inner());
    Ok(f(&ix))
}

/// The up-to-date index of `kind`/`model_key`/`dim` for this corpus (loaded on first use), as a handle that
/// another thread can search without the connection (only catching up needs the corpus). A connection without a
/// file path (in-memory corpus) gets a fresh, uncached index.
pub fn shared(
    conn: &Connection,
    kind: Kind,
    model_key: &str,
    dim: usize,
) -> rusqlite::Result<Arc<Mutex<VecIndex>>> {
    let path = conn.path().filter(|p| !p.is_empty()).map(str::to_owned);
    let Some(path) = path else {
        return Ok(Arc::new(Mutex::new(VecIndex::load(
            conn, kind, model_key, dim,
        )?)));
    };
    let slot = {
        let mut reg = registry().lock().unwrap_or_else(|e| e.into_inner());
        reg.entry((path, kind, model_key.to_owned(), dim))
            .or_insert_with(|| Arc::new(Mutex::new(VecIndex::new(0))))
            .clone()
    };
    {
        let mut ix = slot.lock().unwrap_or_else(|e| e.into_inner());
        if ix.dim != dim || !ix.catch_up(conn, kind, model_key)? {
            *ix = VecIndex::load(conn, kind, model_key, dim)?;
        }
    }
    Ok(slot)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn unit(seed: u64, dim: usize) -> Vec<f32> {
        let mut r = crate::search::latency::Rng::new(seed);
        let mut v: Vec<f32> = (0..dim).map(|_| r.gauss()).collect();
        crate::embed::l2_normalize(&mut v);
        v
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

    fn put(conn: &Connection, pk: i64, seed: u64, model: (&str, &str)) {
        let v = unit(seed, 384);
        let h = format!("h{seed}-{}", model.0);
        conn.execute(
            "INSERT OR IGNORE INTO embeddings (text_hash, model_id, model_version, dim, vector, created_at)
             VALUES (?1, ?2, ?3, 384, ?4, 'now')",
            params![h, model.0, model.1, crate::embed::store::vec_to_blob(&v)],
        )
        .expect("embedding");
        conn.execute(
            "INSERT INTO search_vec_state (kind, pk, text_hash, model_key, dim) VALUES ('message', ?1, ?2, ?3, 384)
             ON CONFLICT (kind, pk) DO UPDATE SET text_hash = excluded.text_hash, model_key = excluded.model_key",
            params![pk, h, format!("{}@{}", model.0, model.1)],
        )
        .expect("state");
        // As the store does: the float vec0 row is replaced in the same write.
        conn.execute("DELETE FROM messages_vec_384 WHERE rowid = ?1", [pk])
            .expect("vec delete");
        conn.execute(
            "INSERT INTO messages_vec_384(rowid, embedding) VALUES (?1, ?2)",
            params![pk, crate::embed::store::vec_to_blob(&v)],
        )
        .expect("vec insert");
    }

    #[test]
    fn follows_writes_of_another_connection() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.db");
        let a = crate::db::open(&path).expect("open");
        let b = crate::db::open(&path).expect("open");
        let m = ("m", "1");
        for pk in 1..=50 {
            put(&a, pk, pk as u64, m);
        }
        let top = |conn: &Connection, seed: u64| {
            with_index(conn, Kind::Message, "m@1", 384, |ix| {
                (ix.len(), ix.search(&unit(seed, 384), 1, 10))
            })
            .expect("index")
        };
        assert_eq!(top(&a, 7).0, 50);
        assert_eq!(top(&a, 7).1[0].0, 7);
        // Another connection adds a row, re-embeds row 7 with another text and moves row 8 to another model.
        put(&b, 51, 1000, m);
        put(&b, 7, 2000, m);
        put(&b, 8, 8, ("other", "1"));
        let (n, hit) = top(&a, 1000);
        assert_eq!((n, hit[0].0), (50, 51));
        assert_eq!(top(&a, 2000).1[0].0, 7);
        assert_ne!(top(&a, 7).1[0].0, 7);
        assert_ne!(top(&a, 8).1[0].0, 8);
        b.execute("DELETE FROM search_vec_state WHERE pk = 51", [])
            .expect("delete");
        assert_eq!(top(&a, 1000).0, 49);
    }

    #[test]
    fn an_index_behind_a_pruned_log_reloads_and_misses_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.db");
        let a = crate::db::open(&path).expect("open");
        let b = crate::db::open(&path).expect("open");
        let m = ("m", "1");
        for pk in 1..=20 {
            put(&a, pk, pk as u64, m);
        }
        let top = |conn: &Connection, seed: u64| {
            with_index(conn, Kind::Message, "m@1", 384, |ix| {
                (ix.len(), ix.search(&unit(seed, 384), 1, 10))
            })
            .expect("index")
        };
        assert_eq!(top(&a, 3).0, 20);
        // Nothing to prune yet with a generous keep; the log is intact.
        assert_eq!(prune_log(&b, 1_000).expect("prune"), 0);
        // Another connection re-embeds row 3, adds rows 21..=25, then prunes all but the newest 2 log rows:
        // the changes to rows 3 and 21..=23 are no longer in the log.
        put(&b, 3, 3000, m);
        for pk in 21..=25 {
            put(&b, pk, pk as u64, m);
        }
        let deleted = prune_log(&b, 2).expect("prune");
        let left: i64 = b
            .query_row("SELECT count(*) FROM search_vec_log", [], |r| r.get(0))
            .expect("count");
        assert_eq!(left, 2);
        assert!(deleted >= 24, "deleted {deleted}");
        // Pruning again at the same keep is a no-op.
        assert_eq!(prune_log(&b, 2).expect("prune"), 0);
        // The index of `a` was behind the cut: it reloads and sees every change.
        let (n, hit) = top(&a, 3000);
        assert_eq!((n, hit[0].0), (25, 3));
        assert_eq!(top(&a, 22).1[0].0, 22);
        assert_ne!(top(&a, 3).1[0].0, 3);
    }
}
