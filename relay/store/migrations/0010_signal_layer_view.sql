-- 0010_signal_layer_view: the signal layer becomes a view of the message rows instead of a second keyed row per
-- turn, and the messages index no query uses goes. Append-only.
--
-- Every column of a `persona_observations` row was a copy or a function of its message: id and message_id are the
-- message id, source_surface is the thread's surface, observed_at is captured_at, attrs counts characters and
-- looks for a code fence, kind is the only v1 kind. Writing it cost every stored turn a row, a random-keyed
-- primary-key b-tree and a (surface, time) index. Its own origin_seq is gone with it: a derived row does not
-- travel, a peer derives it from the message it receives. `processed_at` was never written; whatever processes
-- the signal layer keeps its own state keyed by message.
DROP TABLE persona_observations;
CREATE VIEW persona_observations AS
SELECT m.id            AS id,
       'thread_turn'   AS kind,
       t.surface       AS source_surface,
       m.thread_id     AS thread_id,
       m.id            AS message_id,
       m.role          AS role,
       m.captured_at   AS observed_at,
       json_object('chars', length(m.content),
                   'has_code', json(CASE WHEN instr(m.content, '```') > 0 THEN 'true' ELSE 'false' END)) AS attrs,
       m.origin_device AS origin_device,
       m.origin_seq    AS origin_seq
FROM messages m JOIN threads t ON t.id = m.thread_id;

-- (origin_device, origin_seq) was kept for relay-to-relay sync, which has no code yet and no query reads it; the
-- migration that adds the sync feed adds the index it needs.
DROP INDEX messages_origin;
