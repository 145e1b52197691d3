"""Collectors: drive an OpenAI-compatible server and write run bundles of raw samples."""

__version__ = "0.1.0"
