#!/usr/bin/env bash
# Runs entry A's benchmarks (polite utilisation and plain throughput) side by side with a
# Colly crawler on the same real multi-host origin on 127.0.0.1, and prints a Markdown
# report (see docs/benchmarks-lease.md). The Colly comparison lives in its own module
# (bench/) so that the downloader itself does not depend on Colly. Extra arguments go to
# the benchmark (e.g. -run-count 5, -host-count 50 -page-count 20 -min-interval-ms 100 -latency-ms 20).
# Scale: -host-count 1000 -page-count 5 -max-concurrent-count 1000 -only polite (and 10000 × 2);
# -only probe -probe-domain-count 10000 (entry C beside a bare net/http client);
# -only cpu (CPU-seconds per 1,000 plain pages beside Colly and Colly + a visible-text
# extraction; -only cpu-a: entry A's rows alone, for profiles); -only rss (RSS per task with
# 10^5 tasks queued over 10^4 hosts).
# Profiles of the whole run: -cpuprofile F -blockprofile F -mutexprofile F -memprofile F;
# split a CPU profile by component with: python3 bench/profsplit.py BINARY F (build the
# binary with: cd bench && go build -o /tmp/leasebench ./leasebench).
set -euo pipefail
cd "$(dirname "$0")/../bench"
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $(go version | cut -d' ' -f3)" >&2
exec go run ./leasebench "$@"
