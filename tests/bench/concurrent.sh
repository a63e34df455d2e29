#!/usr/bin/env bash
# Concurrency benchmark (release build): 1 client, then 8 clients at once (p50/p99/max); prints figures only.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec cargo bench -p scafld-tests --bench concurrent "$@"
