"""What the model's architecture and the GPU's datasheet predict: the model's config read as vLLM reads it,
parameters and FLOPs, the KV layout, GPU peaks, and whether a plan fits. Imports the ledger's types only.
"""
