"""vLLM's own counters against what the theory predicts: its FLOP and byte estimator (estimator), the KV pool (kvpool), and each point against the model as ledger quantities (model)."""
