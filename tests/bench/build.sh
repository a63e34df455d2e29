#!/usr/bin/env bash
# Build benchmark (release build), beside the Python scafld 2.0.0 from PyPI in a local venv.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=target/bench-venv
if [ ! -x "$venv/bin/scafld" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q scafld==2.0.0
fi
SCAFLD_PY="$PWD/$venv/bin/scafld" exec cargo bench -p scafld-tests --bench build "$@"
