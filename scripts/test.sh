#!/usr/bin/env bash
# Runs the whole test suite, under the race detector, after installing what it needs
# (Debian's headless Chromium for the render tests). This is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
go vet ./...
go test -race -count=1 -timeout 25m ./...
