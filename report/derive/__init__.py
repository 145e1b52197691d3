"""The ledger's quantities: pure functions over a round's raw samples, and the round's ledger built from them
(`round/`). Imports `architecture` and the ledger's types; nothing of `judge` or `publish`.
"""
