#!/usr/bin/env bash
# Longer property run of the spec parser and projection writer than `cargo test` does
# (generated and mutated specs; see daemon/src/domain/spec/props.rs), then the parser's
# scaling on pathological inputs. Prints cases tried and failures found.
# Usage: tests/fuzz-specs.sh [CASES]   (default 200000)
set -euo pipefail
cd "$(dirname "$0")/.."
cases="${1:-200000}"
SCAFLD_PROPTEST_CASES="$cases" cargo test --release -p scafld-daemon --lib spec::props -- --nocapture 2>&1 \
  | grep -E "spec properties|test result|minimal failing input|Test failed" || true
cargo bench -p scafld-tests --bench parse
