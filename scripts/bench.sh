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
#       visible-text extraction; -only cpu-a: entry A's rows alone, -only cpu-c: Colly's alone, for profiles; -only polite-a, -only polite-c the same for the polite table); -only
#       rss (RSS per task with 10^5 tasks queued over 10^4 hosts). Profiles of the whole
#       run: -cpuprofile F -blockprofile F -mutexprofile F -memprofile F -trace F; split a CPU
#       profile by component with: python3 bench/profsplit.py BINARY F (build the binary with: cd bench && go build -o /tmp/leasebench ./leasebench).
#       Every table gives the median of -run-count runs (default 3), its rows alternating
#       (downloader, peer, downloader, ...), and the load average beside each row: quote
#       figures only from an otherwise idle machine.
#
#   bash scripts/bench.sh render      renders on crawl-like traffic (BenchmarkRenderCrawl,
#       docs/benchmarks.md): one row per VARIANT · PAGE · c=N (the variant service is
#       POST /v1/render through the whole service), then the issue's targets as ratios from
#       the same run. RENDER_BENCH_N (default 16) renders per row;
#       RENDER_BENCH_PAGES, RENDER_BENCH_VARIANTS, RENDER_BENCH_CONCURRENCY narrow the grid.
#       RENDER_BENCH_COUNT (default 1) runs the whole grid that many times, the rows
#       alternating, and reports each row's median (use 3 for figures in docs).
#       Needs the npm package todomvc (scripts/setup-test.sh fetches it).
#
#   bash scripts/bench.sh render-overload   adaptive render concurrency on an overloaded
#       machine (BenchmarkRenderOverload, docs/benchmarks-render.md): 8 renders offered at
#       once, the pool fixed at 1, 2, 4, 8 slots and adaptive up to 8, beside one render
#       alone (the unloaded p50), in one run. RENDER_BENCH_N (default 64) renders per row.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
machine() { echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $(go version | cut -d' ' -f3)"; }
machine >&2

# fail says why a benchmark cannot run, and fails: a report with no rows is no result.
fail() {
	echo "bench: $*" >&2
	exit 1
}

# render_bench BENCHMARK N [args...] runs one of render's benchmarks, N renders per row
# unless RENDER_BENCH_N says otherwise, showing its output on stderr and keeping it in $out
# for the table. It fails, saying why, when the browser or the fixtures are missing or the
# benchmark gave no row.
render_bench() {
	local bench=$1 n=$2
	shift 2
	cd "$root"
	test -x /usr/lib/chromium/chromium-headless-shell || fail "no headless Chromium: run bash scripts/setup.sh"
	if [ "$bench" = BenchmarkRenderCrawl ]; then
		test -f .cache/todomvc/package/package.json || fail "no TodoMVC fixtures in .cache/todomvc: run bash scripts/setup-test.sh"
	fi
	out="$(mktemp)"
	trap 'rm -f "$out"' EXIT
	go test -run '^$' -bench "^$bench\$" -benchtime "${RENDER_BENCH_N:-$n}x" -count "${RENDER_BENCH_COUNT:-1}" -timeout 90m "$@" ./render/ | tee "$out" >&2 ||
		fail "$bench failed"
	if grep -q -- '--- SKIP' "$out"; then
		fail "$bench skipped: $(grep -A1 -- '--- SKIP' "$out" | tail -1 | sed 's/^ *//')"
	fi
	grep -q "^$bench/" "$out" || fail "$bench gave no row"
}

if [ "${1:-}" = "render" ]; then
	shift
	render_bench BenchmarkRenderCrawl 16 "$@"
	echo "Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores; the median of ${RENDER_BENCH_COUNT:-1} run(s) per row, the rows alternating."
	echo
	awk '
	/^BenchmarkRenderCrawl\// {
		name = $1
		sub(/^BenchmarkRenderCrawl\//, "", name)
		sub(/-[0-9]+$/, "", name)
		split(name, part, "/")
		v = part[1]; pg = part[2]; c = part[3]
		key = v SUBSEP pg SUBSEP c
		if (!(key in seen)) { seen[key] = 1; order[n++] = key }
		for (i = 3; i < NF; i += 2) { u = $(i + 1); cnt[key, u]++; vals[key, u, cnt[key, u]] = $i }
		pages[pg] = 1; conc[c] = 1; vars[v] = 1
	}
	# median of a row'"'"'s values of one unit over the runs (-count)
	function get(k, unit,   j, l, t, a, c) {
		c = cnt[k, unit]
		if (c == 0) return ""
		for (j = 1; j <= c; j++) a[j] = vals[k, unit, j] + 0
		for (j = 2; j <= c; j++) { t = a[j]; for (l = j - 1; l >= 1 && a[l] > t; l--) a[l + 1] = a[l]; a[l + 1] = t }
		return a[int((c + 1) / 2)]
	}
	function ratio(a, b) { return (a == "" || b == "" || b + 0 == 0) ? "" : sprintf("%.2f×", a / b) }
	END {
		print "| row | pages/s | p50 ms | CPU ms per page | origin requests per page | peak PSS MB | tab wait ms |"
		print "|---|---|---|---|---|---|---|"
		for (i = 0; i < n; i++) {
			k = order[i]; split(k, f, SUBSEP)
			printf "| %s · %s · %s | %.2f | %d | %d | %.1f | %d | %s |\n", f[1], f[2], f[3], get(k, "pages/s"), get(k, "p50_ms"), get(k, "cpu_ms/page"), get(k, "origin_requests/page"), get(k, "peak_pss_MB"), get(k, "tab_wait_ms")
		}
		print ""
		print "Targets (same run): pages/s of pool over bare-multisite (≥ 1.0× on todomvc, ≥ 1.3× on heavy and revisit) and over shared-context (≥ 1.0×), peak PSS of pool over bare-multisite (≤ 1.1×); CPU per page of pool over bare-multisite (≤ 1.0×); the same for service (POST /v1/render through the whole service)."
		print ""
		print "| page · c | pool / bare-multisite | pool / shared-context | pool / pool-context | PSS pool / bare | CPU pool / bare | service / bare-multisite | PSS service / bare | CPU service / bare |"
		print "|---|---|---|---|---|---|---|---|---|"
		for (i = 0; i < n; i++) {
			k = order[i]; split(k, f, SUBSEP)
			if (f[1] != "pool") continue
			pool = "pool" SUBSEP f[2] SUBSEP f[3]; bare = "bare-multisite" SUBSEP f[2] SUBSEP f[3]
			shared = "shared-context" SUBSEP f[2] SUBSEP f[3]; ctx = "pool-context" SUBSEP f[2] SUBSEP f[3]
			svc = "service" SUBSEP f[2] SUBSEP f[3]
			printf "| %s · %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", f[2], f[3], ratio(get(pool, "pages/s"), get(bare, "pages/s")), ratio(get(pool, "pages/s"), get(shared, "pages/s")), ratio(get(pool, "pages/s"), get(ctx, "pages/s")), ratio(get(pool, "peak_pss_MB"), get(bare, "peak_pss_MB")), ratio(get(pool, "cpu_ms/page"), get(bare, "cpu_ms/page")), ratio(get(svc, "pages/s"), get(bare, "pages/s")), ratio(get(svc, "peak_pss_MB"), get(bare, "peak_pss_MB")), ratio(get(svc, "cpu_ms/page"), get(bare, "cpu_ms/page"))
		}
	}' "$out"
	exit 0
fi

if [ "${1:-}" = "render-overload" ]; then
	shift
	render_bench BenchmarkRenderOverload 64 "$@"
	echo "Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores; the median of ${RENDER_BENCH_COUNT:-1} run(s) per row, the rows alternating."
	echo
	awk '
	/^BenchmarkRenderOverload\// {
		name = $1
		sub(/^BenchmarkRenderOverload\//, "", name)
		sub(/-[0-9]+$/, "", name)
		if (!(name in seen)) { seen[name] = 1; order[n++] = name }
		for (i = 3; i < NF; i += 2) { u = $(i + 1); cnt[name, u]++; vals[name, u, cnt[name, u]] = $i }
	}
	# median of a row'"'"'s values of one unit over the runs (-count)
	function get(k, unit,   j, l, t, a, c) {
		c = cnt[k, unit]
		if (c == 0) return ""
		for (j = 1; j <= c; j++) a[j] = vals[k, unit, j] + 0
		for (j = 2; j <= c; j++) { t = a[j]; for (l = j - 1; l >= 1 && a[l] > t; l--) a[l + 1] = a[l]; a[l + 1] = t }
		return a[int((c + 1) / 2)]
	}
	END {
		base = get("unloaded", "p50_ms"); best = 0
		for (i = 0; i < n; i++) if (order[i] ~ /^fixed-/ && get(order[i], "pages/s") > best) best = get(order[i], "pages/s")
		print "| row | pages/s | of best fixed | p50 ms | of unloaded p50 | p90 ms | render_timeout | slots (mean, final) |"
		print "|---|---|---|---|---|---|---|---|"
		for (i = 0; i < n; i++) {
			k = order[i]
			slots = (get(k, "mean_slots") == "") ? "" : sprintf("%.1f, %d", get(k, "mean_slots"), get(k, "final_slots"))
			printf "| %s | %.2f | %.2f× | %d | %.2f× | %d | %d | %s |\n", k, get(k, "pages/s"), (best > 0 ? get(k, "pages/s") / best : 0), get(k, "p50_ms"), (base > 0 ? get(k, "p50_ms") / base : 0), get(k, "p90_ms"), get(k, "render_timeouts"), slots
		}
		print ""
		print "Goal (adaptive): p50 within 1.5× of the unloaded p50, no render_timeout, pages/s within 10 % of the best fixed count."
	}' "$out"
	exit 0
fi

# The Colly peer lives in its own module: build it first, so that a peer that cannot be
# built (no Colly in the module cache and no network) fails here with the reason rather than
# as a half-printed report.
cd "$root/bench"
bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/leasebench" ./leasebench 2>"$bin/build.log" ||
	fail "the Colly peer (bench/, module downloader/bench) does not build: $(tail -5 "$bin/build.log")"
"$bin/leasebench" "$@" || fail "leasebench failed (its reason is above)"
