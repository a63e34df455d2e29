#!/usr/bin/env bash
# Sourced by the benchmark scripts: installs the Python scafld 2.0.0 from PyPI into a venv under
# target/ once, and exports SCAFLD_PY, the path of its executable.
venv=target/bench-venv
if [ ! -x "$venv/bin/scafld" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q scafld==2.0.0
fi
export SCAFLD_PY="$PWD/$venv/bin/scafld"
