-- The limits the scripts enforce (redis_history/limits.py; a test keeps them equal).
-- MAX_READ_BYTES: the most bytes of envelopes a rewrite reads; MAX_ENTRY_BYTES: the
-- largest envelope a history writes, so that a read never passes the budget by more;
-- MAX_REWRITE: the most messages a splice or a truncate removes; MAX_ROLLBACK: how far
-- from the tail a rollback looks; MAX_BLOB_TOTAL: the most inline data a conversation keeps
-- outside its list; MAX_BLOBS: the most pieces of it counted.
local MAX_READ_BYTES, MAX_ENTRY_BYTES, MAX_REWRITE, MAX_ROLLBACK, MAX_BLOB_TOTAL, MAX_BLOBS = 8388608, 1048576, 10000, 1000, 134217728, 4096
