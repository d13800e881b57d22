-- 0002_search: bookkeeping for embeddings and the quantised first-pass vector indexes. Append-only.
--
-- `search_vec_state` says which text (by sha256 of the embedded text) and which model (`model_id@version`) the
-- vector currently stored for a message or event came from. A row whose model or text differs from the current
-- embedder's is pending; a message with no row is pending.
CREATE TABLE search_vec_state (
    kind      TEXT NOT NULL CHECK (kind IN ('message', 'event')),
    pk        INTEGER NOT NULL,
    text_hash TEXT NOT NULL,
    model_key TEXT NOT NULL,
    dim       INTEGER NOT NULL,
    PRIMARY KEY (kind, pk)
) STRICT;
CREATE INDEX search_vec_state_model ON search_vec_state(model_key);

-- Sign-bit copies of the float vectors (1 bit per dimension): a Hamming-distance first pass whose candidates are
-- rescored exactly with the float vectors of messages_vec_* / events_vec_*. Keyed by the same rowids.
CREATE VIRTUAL TABLE messages_vbit_384 USING vec0(embedding bit[384]);
CREATE VIRTUAL TABLE messages_vbit_768 USING vec0(embedding bit[768]);
CREATE VIRTUAL TABLE events_vbit_384 USING vec0(embedding bit[384]);
CREATE VIRTUAL TABLE events_vbit_768 USING vec0(embedding bit[768]);
