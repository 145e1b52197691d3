#!/usr/bin/env bash
# The Debian packages the tool needs beyond Python: CJK fonts with a real bold (the Chinese
# PDF), HarfBuzz subsetting (small, reproducible PDFs), poppler (PDF checks), Chromium (the
# offline browser test), a C compiler and the Python headers (the compiled stream reader).
# As root, installs what is missing; otherwise prints the one command that would, and fails.
set -euo pipefail
PY=${1:-python3}
want="fonts-noto-cjk libharfbuzz-subset0 poppler-utils chromium gcc libc6-dev"
if ! "$PY" -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
  want="$want python3-dev"
fi
missing=""
for p in $want; do
  # "install ok installed" only: a removed package whose config files remain still answers dpkg -s
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "system packages missing:$missing (install them with your package manager)" >&2
  exit 1
fi
if [ "$(id -u)" != 0 ]; then
  echo "system packages missing; run: sudo apt-get install -y --no-install-recommends$missing" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends $missing
