#!/usr/bin/env bash
# Benchmarks, printed as Markdown reports.
#
#   bash scripts/bench.sh [args...]   entry A's benchmarks (polite utilisation and plain
#       throughput) side by side with a Colly crawler on the same real multi-host origin
#       on 127.0.0.1 (see docs/benchmarks-lease.md). The Colly comparison lives in its own
#       module (bench/) so that the downloader itself does not depend on Colly. Extra
#       arguments go to the benchmark (e.g. -run-count 5, -host-count 50 -page-count 20
#       -min-interval-ms 100 -latency-ms 20).
#       Scale: -host-count 1000 -page-count 5 -max-concurrent-count 1000 -only polite (and
#       10000 × 2); -only probe -probe-domain-count 10000 (entry C beside a bare net/http
#       client); -only cpu (CPU-seconds per 1,000 plain pages beside Colly and Colly + a
#       visible-text extraction); -only rss (RSS per task with 10^5 tasks queued over 10^4
#       hosts). Profiles of the whole run: -cpuprofile F -blockprofile F -mutexprofile F
#       -memprofile F; split a CPU profile by component with: python3 bench/profsplit.py
#       BINARY F (build the binary with: cd bench && go build -o /tmp/leasebench ./leasebench).
#
#   bash scripts/bench.sh render      renders on crawl-like traffic (BenchmarkRenderCrawl,
#       docs/benchmarks.md): one row per VARIANT · PAGE · c=N, then the issue's targets as
#       ratios from the same run. RENDER_BENCH_N (default 16) renders per row;
#       RENDER_BENCH_PAGES, RENDER_BENCH_VARIANTS, RENDER_BENCH_CONCURRENCY narrow the grid.
#       Needs the npm package todomvc (scripts/setup.sh fetches it).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $(go version | cut -d' ' -f3)" >&2

if [ "${1:-}" = "render" ]; then
	shift
	cd "$root"
	out="$(mktemp)"
	trap 'rm -f "$out"' EXIT
	go test -run '^$' -bench '^BenchmarkRenderCrawl$' -benchtime "${RENDER_BENCH_N:-16}x" -timeout 90m "$@" ./render/ | tee "$out" >&2
	awk '
	/^BenchmarkRenderCrawl\// {
		name = $1
		sub(/^BenchmarkRenderCrawl\//, "", name)
		sub(/-[0-9]+$/, "", name)
		split(name, part, "/")
		v = part[1]; pg = part[2]; c = part[3]
		key = v SUBSEP pg SUBSEP c
		if (!(key in seen)) { seen[key] = 1; order[n++] = key }
		for (i = 3; i < NF; i += 2) m[key, $(i + 1)] = $i
		pages[pg] = 1; conc[c] = 1; vars[v] = 1
	}
	function get(k, unit) { return ((k, unit) in m) ? m[k, unit] : "" }
	function ratio(a, b) { return (a == "" || b == "" || b + 0 == 0) ? "" : sprintf("%.2f×", a / b) }
	END {
		print "| row | pages/s | p50 ms | CPU ms per page | origin requests per page | peak PSS MB |"
		print "|---|---|---|---|---|---|"
		for (i = 0; i < n; i++) {
			k = order[i]; split(k, f, SUBSEP)
			printf "| %s · %s · %s | %.2f | %d | %d | %.1f | %d |\n", f[1], f[2], f[3], get(k, "pages/s"), get(k, "p50_ms"), get(k, "cpu_ms/page"), get(k, "origin_requests/page"), get(k, "peak_pss_MB")
		}
		print ""
		print "Targets (same run): pages/s of pool over bare-multisite (≥ 1.0× on todomvc, ≥ 1.3× on heavy and revisit) and over shared-context (≥ 1.0×), peak PSS of pool over bare-multisite (≤ 1.1×); CPU per page of pool over bare-multisite."
		print ""
		print "| page · c | pool / bare-multisite | pool / shared-context | pool / pool-context | PSS pool / bare | CPU pool / bare |"
		print "|---|---|---|---|---|---|"
		for (i = 0; i < n; i++) {
			k = order[i]; split(k, f, SUBSEP)
			if (f[1] != "pool") continue
			pool = "pool" SUBSEP f[2] SUBSEP f[3]; bare = "bare-multisite" SUBSEP f[2] SUBSEP f[3]
			shared = "shared-context" SUBSEP f[2] SUBSEP f[3]; ctx = "pool-context" SUBSEP f[2] SUBSEP f[3]
			printf "| %s · %s | %s | %s | %s | %s | %s |\n", f[2], f[3], ratio(get(pool, "pages/s"), get(bare, "pages/s")), ratio(get(pool, "pages/s"), get(shared, "pages/s")), ratio(get(pool, "pages/s"), get(ctx, "pages/s")), ratio(get(pool, "peak_pss_MB"), get(bare, "peak_pss_MB")), ratio(get(pool, "cpu_ms/page"), get(bare, "cpu_ms/page"))
		}
	}' "$out"
	exit 0
fi

cd "$root/bench"
exec go run ./leasebench "$@"
