#!/usr/bin/env bash
# Sets up a fresh Debian machine for running (scripts/setup.sh: no test fixtures) and runs the service on embedded defaults:
# API and console on http://127.0.0.1:8080, data in ./data. Extra arguments go to
# 'downloader serve' (e.g. --listen, --connect-to).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p bin
go build -o bin/downloader ./cmd/downloader
exec bin/downloader serve "$@"
