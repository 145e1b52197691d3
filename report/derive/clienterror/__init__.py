"""The client's own error: its ITL timing against the engine's (itl), and a Ray round's client nodes and clocks (nodes)."""
