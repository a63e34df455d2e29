#!/usr/bin/env bash
# Review packet benchmark (release build); prints figures only.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec cargo bench -p scafld-tests --bench packet "$@"
