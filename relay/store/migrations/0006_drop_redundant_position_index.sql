-- messages_position (thread_id, position_key) is a prefix of messages_position_order (thread_id, position_key,
-- captured_at, content_hash), which serves every query it served; keeping both cost a b-tree write per message.
DROP INDEX IF EXISTS messages_position;
