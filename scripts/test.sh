#!/usr/bin/env bash
# Runs the whole test suite, under the race detector, after installing what it needs
# (scripts/setup.sh: what the service runs on; scripts/setup-test.sh: what only the tests
# need, promtool and the TodoMVC fixtures). This is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup-test.sh
go vet ./...
# Packages run side by side (go test's default: as many as there are CPUs). Their tests
# wait on notifications or a synctest bubble, not on the wall clock, and count only their
# own browsers, so a neighbour's load or Chromium does not fail them (docs/decisions.md).
go test -race -count=1 -timeout 25m ./...
