"""Round plans: what a round runs, read strictly from TOML (or built from ad-hoc flags).

A plan names the engine, the workload, the sweep, the samplers and the client processes
([client]: how many worker processes drive a point; docs/scale.md). Points are the cross
product of the server-flag sets, input lengths, and concurrencies (or request rates), in that
nesting order, so that the server restarts only when its flags change.
"""
