"""The run bundle format: its files, records, writer, reader and request table.

This layer imports nothing else of ours; the collectors (`bench`) write bundles through it
and the report (`report`) reads them through it. See docs/bundle.md.
"""
