"""A point's timings as each side measured them: the server's queue and prefill (server), the client's own lag (client)."""
