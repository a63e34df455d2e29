#!/usr/bin/env bash
# Build benchmark (release build), beside the Python scafld 2.0.0 from PyPI in a local venv.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/bench/python-scafld.sh
exec cargo bench -p scafld-tests --bench build "$@"
