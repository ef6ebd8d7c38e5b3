#!/usr/bin/env bash
# Runs the whole test suite, under the race detector, after installing what it needs
# (scripts/setup.sh: what the service runs on; scripts/setup-test.sh: what only the tests
# need, promtool and the TodoMVC fixtures). This is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
# phase stamps each phase with the wall clock and the seconds since the start, so that a
# slow run shows where its time went (docs/reliability.md §10).
phase() { echo "test.sh: $(date -u +%H:%M:%S) +${SECONDS}s $*" >&2; }
trap 'phase "end, exit status $?"' EXIT
phase setup
bash scripts/setup.sh
phase setup-test
bash scripts/setup-test.sh
# go vet runs beside go test, niced, its output kept for the end: it compiles every package
# without -race (a clean clone's new directory misses the build cache), work go test does
# not reuse (its binaries are built with -race); run first it held go test back 13-33 s,
# beside it it takes CPU the waiting test lanes leave idle (docs/reliability.md §10).
phase "vet (beside go test)"
vetlog=$(mktemp)
nice -n 10 go vet ./... >"$vetlog" 2>&1 &
vetpid=$!
phase "go test (compiles the race test binaries, then runs them)"
# Packages run side by side, four at a time (go test's default is one per CPU, 2 on CI):
# the heavy packages wait on browser starts, page loads and child processes far more than
# they compute (an idle run kept 2 cores about half busy), so more lanes fill the idle CPU.
# Their tests wait on notifications or a synctest bubble, not on the wall clock, bound a
# render that is not about time by the test's own deadline, and count only their own
# browsers, so a neighbour's load or Chromium does not fail them (docs/reliability.md §10).
# The long packages are named first: go test compiles, links and runs packages in the order
# given (./... adds the rest, each once), so the lanes that decide the wall time start at
# once instead of behind thirty short packages.
# The test binaries are linked without DWARF (-ldflags=-w): the suite is CPU-bound on 2
# cores, and DWARF is a third of a race binary's link (cmd/downloader's: 10.7 against 6.4-7.4
# CPU-seconds); panics and race reports print file and line from the binary's own tables.
long=(./render ./cmd/downloader ./faults ./store/tikv)
status=0
go test -race -count=1 -p 4 -ldflags=-w -timeout 25m "${long[@]}" ./... || status=$?
phase "go test done (status $status); waiting for vet"
if wait "$vetpid"; then
	cat "$vetlog"
else
	cat "$vetlog" >&2
	echo "test.sh: go vet failed" >&2
	status=1
fi
rm -f "$vetlog"
exit "$status"
