#!/usr/bin/env bash
# Installs what the TESTS need on top of scripts/setup.sh (run as root), from Debian's
# packages: prometheus for promtool (the tests check monitoring/'s alert rules and the
# service's /metrics with it), nginx with its brotli modules (a real origin,
# internal/nginxtest), squid, dante-server and openssl (real egress proxies,
# internal/proxytest), iproute2 and util-linux (ip and unshare: the canonical-host test
# makes its own network namespace); and the TodoMVC fixtures below. The services these
# packages start are stopped: the tests start their own on 127.0.0.1. scripts/test.sh runs
# setup.sh, then this. Safe to run again: it installs only what is missing.
set -euo pipefail

packages=(prometheus nginx libnginx-mod-http-brotli-filter libnginx-mod-http-brotli-static
	squid dante-server openssl iproute2 util-linux)
source "$(dirname "$0")/apt.sh"
apt_install_missing setup-test "${packages[@]}"
if [ ${#apt_installed[@]} -gt 0 ]; then
	if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
		systemctl disable --now prometheus.service nginx.service squid.service danted.service >/dev/null 2>&1 || true
	fi
fi
for b in /usr/bin/promtool /usr/sbin/nginx /usr/sbin/squid /usr/sbin/danted /usr/lib/squid/basic_ncsa_auth /usr/sbin/ip /usr/bin/unshare; do
	test -x "$b" || {
		echo "setup-test: $b not found after installing ${packages[*]}" >&2
		exit 1
	}
done

cd "$(dirname "$0")/.."
# Real framework apps for the render tests and `bash scripts/bench.sh render`: the npm
# package todomvc (React, Vue, AngularJS, Backbone, Ember, Knockout, Mithril, vanilla JS
# and more, each with its libraries), unpacked into .cache/todomvc/package. Tests that need
# it skip when it is absent outside CI, and fail inside CI.
todomvc_version=0.1.1
if [ ! -f .cache/todomvc/package/package.json ]; then
	if ! command -v npm >/dev/null; then
		if [ "$(id -u)" -eq 0 ]; then
			apt_install_missing setup-test npm
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
