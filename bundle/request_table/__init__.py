"""The requests of a bundle as columns: one row per request, every chunk in two flat arrays.

A round of a million requests holds some 64 M chunks; as Python objects (`[t, n]` lists in
dicts) they take many GB and minutes to walk. A RequestTable keeps each scalar field the
report reads as a numpy column, one value per request (NaN where the record has null or no
such field), and the chunks of all requests as `chunk_t` (arrival time) and `chunk_n`
(tokens; -1 where the server said null), request i's chunks being
`chunk_off[i]:chunk_off[i + 1]`. The record itself stays available: `table[i]` rebuilds the
dict as it was read (the record's JSON without its chunk pairs is kept as bytes).

`take` selects rows (a point, its measured requests) without copying the store; every
selection keeps the order of the records in the bundle.

Reading (`read_request_files`) parses whole blocks of lines at once: the chunk pairs, most of
a line, go through pandas' C number parser in bulk; the rest of each record through orjson. A
block that is not of the usual shape is read line by line instead, with the same result and
the same checks and messages as any other stream (`bundle.store.streams.iter_jsonl`).
"""
