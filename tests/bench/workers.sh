#!/usr/bin/env bash
# Reviewer-worker benchmark (release build): throughput, claim latency, takeover; prints figures.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec cargo bench -p scafld-tests --bench workers "$@"
