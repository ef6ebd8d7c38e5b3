#!/usr/bin/env bash
# Runs the whole test suite, under the race detector, after installing what it needs
# (Debian's headless Chromium for the render tests). This is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
go vet ./...
# One package at a time: the render, faults and end-to-end packages each drive real
# Chromium and real servers; run side by side on 2 cores they starve each other's timing.
go test -race -count=1 -p 1 -timeout 25m ./...
