#!/usr/bin/env bash
# Installs what the TESTS need on top of scripts/setup.sh (run as root): Debian's
# prometheus package for promtool (the tests check monitoring/'s alert rules and the
# service's /metrics with it; the Prometheus server it also ships is stopped), and the
# TodoMVC fixtures below. scripts/test.sh runs setup.sh, then this. Safe to run again.
set -euo pipefail

if ! command -v promtool >/dev/null && ! test -x /usr/bin/promtool; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "setup-test: need root to install: prometheus (for promtool)" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get -o DPkg::Lock::Timeout=600 update -q
	apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends prometheus
	# Only promtool is wanted: a Prometheus server that the package may have started is stopped.
	if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
		systemctl disable --now prometheus.service >/dev/null 2>&1 || true
	fi
fi
command -v promtool >/dev/null || test -x /usr/bin/promtool || {
	echo "setup-test: promtool not found after installing prometheus" >&2
	exit 1
}

cd "$(dirname "$0")/.."
# Real framework apps for the render tests and `bash scripts/bench.sh render`: the npm
# package todomvc (React, Vue, AngularJS, Backbone, Ember, Knockout, Mithril, vanilla JS
# and more, each with its libraries), unpacked into .cache/todomvc/package. Tests that need
# it skip when it is absent outside CI, and fail inside CI.
todomvc_version=0.1.1
if [ ! -f .cache/todomvc/package/package.json ]; then
	if ! command -v npm >/dev/null; then
		if [ "$(id -u)" -eq 0 ]; then
			export DEBIAN_FRONTEND=noninteractive
			apt-get -o DPkg::Lock::Timeout=600 update -q
			apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends npm
		else
			echo "setup: npm not found: the TodoMVC tests will skip" >&2
		fi
	fi
	if command -v npm >/dev/null; then
		rm -rf .cache/todomvc
		mkdir -p .cache/todomvc
		(cd .cache/todomvc && npm pack --silent "todomvc@$todomvc_version" >/dev/null && tar xzf "todomvc-$todomvc_version.tgz" && rm "todomvc-$todomvc_version.tgz")
	fi
fi
