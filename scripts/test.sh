#!/usr/bin/env bash
# Runs the whole test suite, under the race detector, after installing what it needs
# (scripts/setup.sh: what the service runs on; scripts/setup-test.sh: what only the tests
# need, promtool and the TodoMVC fixtures). This is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
# phase stamps each phase with the wall clock and the seconds since the start, so that a
# slow run shows where its time went (docs/reliability.md §10).
phase() { echo "test.sh: $(date -u +%H:%M:%S) +${SECONDS}s $*" >&2; }
bindir=
trap 'status=$?; [[ -z $bindir ]] || rm -rf "$bindir"; phase "end, exit status $status"' EXIT
phase setup
bash scripts/setup.sh
phase setup-test
bash scripts/setup-test.sh
# The service's program is built once, at the start, for the packages whose tests run it
# (faults, cmd/downloader: testkit.StartServiceBuild waits for it through a shared lock on
# its ".lock", which this script holds until the build ends); go vet follows it, niced, and
# reuses its compiled packages. Built by each package beside vet, the module was compiled
# without -race three times at once on CI's two cores (docs/reliability.md §10). Both run
# beside go test, vet's output kept for the end, its failure still this script's.
bindir=$(mktemp -d)
vetlog="$bindir/vet.log"
export DOWNLOADER_TEST_BINARY="$bindir/downloader"
exec 9>"$DOWNLOADER_TEST_BINARY.lock"
flock 9
phase "service build, then vet (beside go test)"
(
	go build -ldflags=-w -o "$DOWNLOADER_TEST_BINARY" ./cmd/downloader \
		>"$DOWNLOADER_TEST_BINARY.log" 2>&1 9>&- || cat "$DOWNLOADER_TEST_BINARY.log" >&2
	exec 9>&- # the lock's last holder: the tests' waits return
	nice -n 10 go vet ./... >"$vetlog" 2>&1
) &
vetpid=$!
exec 9>&-
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
exit "$status"
