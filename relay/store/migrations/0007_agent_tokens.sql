-- 0007_agent_tokens: a token is either a paired device's (kind 'device': may send turns and read) or an agent's
-- (kind 'agent', made by `personkit agents add`: may only read, e.g. over MCP). Both live in `devices`, so they
-- are listed and revoked together. Append-only.
ALTER TABLE devices ADD COLUMN kind TEXT NOT NULL DEFAULT 'device' CHECK (kind IN ('device', 'agent'));
