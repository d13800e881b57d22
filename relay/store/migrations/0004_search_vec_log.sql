-- 0004_search_vec_log: a change log of search_vec_state, so an in-memory vector index (relay/src/search/index.rs)
-- can catch up with vectors written by another connection or process (the embed worker, `personkit corpus
-- embed`) by reading only the rows after the last sequence number it saw. Append-only; written by triggers.
CREATE TABLE search_vec_log (
    seq  INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    pk   INTEGER NOT NULL
) STRICT;
CREATE TRIGGER search_vec_state_log_ins AFTER INSERT ON search_vec_state
BEGIN
    INSERT INTO search_vec_log (kind, pk) VALUES (NEW.kind, NEW.pk);
END;
CREATE TRIGGER search_vec_state_log_upd AFTER UPDATE ON search_vec_state
BEGIN
    INSERT INTO search_vec_log (kind, pk) VALUES (NEW.kind, NEW.pk);
END;
CREATE TRIGGER search_vec_state_log_del AFTER DELETE ON search_vec_state
BEGIN
    INSERT INTO search_vec_log (kind, pk) VALUES (OLD.kind, OLD.pk);
END;
