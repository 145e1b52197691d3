"""docs/bundle.md's table of files, made from bundle/schema.py's STREAMS: print it, or --write it
in place.

    .venv/bin/python tools/stream_table.py [--write]
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bundle.schema import STREAMS  # noqa: E402
from tools.doc_block import block, main  # noqa: E402

DOC = ROOT / "docs" / "bundle.md"
# The table stands between the two lines of docs/bundle.md's block "files".
BLOCK = block("files")
HEAD = "| file | written | one line / content |\n|---|---|---|\n"
# The bundle's files that are not sample streams: before the streams, after the stream named, last.
FIRST = ("| `manifest.json` | at start; replaced atomically on every change "
         "| provenance and status (below) |\n")
AFTER = {"requests": "| `requests.w{k}.jsonl` | appended by load-generating worker process k "
                     "(0, 1, ...) | the same, see below |\n"}
LAST = ("| `server.log` | streamed by the engine | the engine's log (when this tool started it) |\n"
        "| `writer.lock` | while `run` writes the bundle "
        "| the pid of the one process writing it (below) |\n")
DOC_LINK = re.compile(r"\((\w+\.md)\)")


def files_table() -> str:
    """The table of a bundle's files: one row per declared stream, in STREAMS' order."""
    rows = [HEAD, FIRST]
    for s in STREAMS:
        what = DOC_LINK.sub(r"([\1](\1))", s.what)     # a document it names, linked
        rows.append(f"| `{s.file}` | {s.written} | {what} |\n")
        rows.append(AFTER.get(s.name, ""))
    return "".join(rows) + LAST


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], DOC, "files", files_table))
