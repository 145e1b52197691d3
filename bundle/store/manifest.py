"""A bundle's manifest: its version and keys, read bounded, older versions upgraded in steps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bundle.files import (
    BundleError,
    loads_unique,
)

SCHEMA_VERSION = 3
KIND = "serving-ledger/bundle"

# Every manifest key of the current version; the reader refuses any other.
MANIFEST_KEYS = {
    "schema_version", "kind", "origin", "created_utc", "status", "status_reason",
    "clock", "tool", "host", "gpus", "gpu_absent_reason", "engine", "model",
    "plan", "files", "workload_source", "ray",
}
REQUIRED_KEYS = {"schema_version", "kind", "origin", "status", "clock", "tool", "engine", "plan"}
STATUSES = {"running", "complete", "interrupted", "failed"}
# Manifest keys that hold a JSON object (or null) and a list (or null).
OBJECT_KEYS = ("clock", "tool", "host", "engine", "model", "plan", "files", "workload_source", "ray")
LIST_KEYS = ("gpus",)
ORIGINS = {"recorded", "hand-built-fixture"}


def upgrade_manifest(manifest: dict[str, Any], path: Path) -> dict[str, Any]:
    """Bring an older manifest up to SCHEMA_VERSION through the chained upgrade_to_N steps."""
    version = manifest.get("schema_version")
    if version is None:
        raise BundleError(f"{path}: no schema_version; this is not a serving-ledger bundle "
                          "(re-record it with `make run`)")
    if not isinstance(version, int):
        raise BundleError(f"{path}: schema_version {version!r} is not an integer")
    if version > SCHEMA_VERSION:
        raise BundleError(f"{path}: schema_version {version} is newer than this tool reads "
                          f"({SCHEMA_VERSION}); upgrade serving-ledger")
    while version < SCHEMA_VERSION:
        step = UPGRADES.get(version + 1)
        if step is None:
            raise BundleError(f"{path}: schema_version {version} is older than any this tool "
                              f"can upgrade (oldest {min(UPGRADES, default=SCHEMA_VERSION)}); "
                              "re-record the round")
        manifest = step(manifest)
        version = manifest["schema_version"]
    return manifest


# upgrade_to_N(manifest_of_version_N_minus_1) -> manifest_of_version_N. Version 1 is the first.

# Version 1 named the embedded model with this English note after its name.
_V1_EMBEDDED_NOTE = " (embedded, random weights via --load-format dummy)"


def upgrade_to_2(manifest: dict[str, Any]) -> dict[str, Any]:
    """Version 2 states the model's load format as a field (`model.load_format`, "dummy" for
    random weights) where version 1 wrote it as a note in `model.name`."""
    model = dict(manifest.get("model") or {})
    name = model.get("name")
    if isinstance(name, str) and name.endswith(_V1_EMBEDDED_NOTE):
        model["name"] = name[: -len(_V1_EMBEDDED_NOTE)]
        model["load_format"] = "dummy"
    return {**manifest, "model": model, "schema_version": 2}


def upgrade_to_3(manifest: dict[str, Any]) -> dict[str, Any]:
    """Version 3 lets a round talk to several endpoints (`plan.engine.endpoints`): its scrapes'
    samples and its requests then carry the endpoint's index (`endpoint`). A version 2 bundle
    talked to one endpoint, so nothing in it changes."""
    return {**manifest, "schema_version": 3}


UPGRADES: dict[int, Any] = {2: upgrade_to_2, 3: upgrade_to_3}


MAX_MANIFEST_BYTES = 16 << 20


def read_manifest(mpath: Path) -> Any:
    """The JSON of a manifest.json: UTF-8, finite numbers, at most MAX_MANIFEST_BYTES."""
    with open(mpath, "rb") as f:
        data = f.read(MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        raise BundleError(f"{mpath}: over {MAX_MANIFEST_BYTES >> 20} MiB; not a manifest")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BundleError(f"{mpath}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset "
                          f"{e.start})") from None
    return loads_unique(text, str(mpath), whole_file=True)
