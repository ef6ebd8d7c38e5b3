#!/usr/bin/env bash
# Runs entry A's benchmarks (polite utilisation and plain throughput) side by side with a
# Colly crawler on the same real multi-host origin on 127.0.0.1, and prints a Markdown
# report (see docs/benchmarks-lease.md). The Colly comparison lives in its own module
# (bench/) so that the downloader itself does not depend on Colly. Extra arguments go to
# the benchmark (e.g. -run-count 5, -host-count 50 -page-count 20 -min-interval-ms 100 -latency-ms 20).
set -euo pipefail
cd "$(dirname "$0")/../bench"
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $(go version | cut -d' ' -f3)" >&2
exec go run ./leasebench "$@"
