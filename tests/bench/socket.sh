#!/usr/bin/env bash
# Socket and client-process benchmark (release build); prints figures only.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec cargo bench -p scafld-tests --bench socket "$@"
