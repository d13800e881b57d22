-- 0005_search_vec_log_pruning: search_vec_log (0004) is pruned to its newest rows by the embedding store, so it
-- no longer grows with every vector ever written. `through` is the highest seq ever deleted: an in-memory index
-- whose last applied seq is below it may have missed changes and reloads from the vector tables instead.
CREATE TABLE search_vec_log_pruned (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    through INTEGER NOT NULL
) STRICT;
INSERT INTO search_vec_log_pruned (id, through) VALUES (1, 0);
