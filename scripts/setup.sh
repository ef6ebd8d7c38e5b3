#!/usr/bin/env bash
# Installs what the downloader needs on a fresh Debian machine (run as root):
# Debian's headless Chromium for rendering, fonts (Latin and CJK, so pages have text
# metrics and the console's screenshots show Chinese labels), Debian's prometheus
# package for promtool (the tests check monitoring/'s alert rules and the service's
# /metrics with it; the Prometheus server it also ships is stopped), Debian's nginx with
# its brotli modules (a real origin for the fetch tests, internal/nginxtest: each test runs
# its own; the system service the package starts is stopped), iproute2 and util-linux (ip
# and unshare: the canonical-host test makes its own network namespace), and the Go
# modules. Safe to run again: it installs only what is missing.
set -euo pipefail

packages=(chromium-headless-shell fonts-liberation fonts-wqy-microhei ca-certificates prometheus
	nginx libnginx-mod-http-brotli-filter libnginx-mod-http-brotli-static iproute2 util-linux)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "setup: need root to install: ${missing[*]}" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get -o DPkg::Lock::Timeout=600 update -q
	apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}"
	# Only promtool is wanted: a Prometheus server that the package may have started is stopped.
	if [[ " ${missing[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
		systemctl disable --now prometheus.service >/dev/null 2>&1 || true
	fi
	# Only the binary and the modules are wanted: the tests start nginx themselves.
	if [[ " ${missing[*]} " == *" nginx "* ]] && command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
		systemctl disable --now nginx.service >/dev/null 2>&1 || true
	fi
fi
test -x /usr/sbin/nginx || {
	echo "setup: /usr/sbin/nginx not found after install" >&2
	exit 1
}
test -x /usr/lib/chromium/chromium-headless-shell || {
	echo "setup: /usr/lib/chromium/chromium-headless-shell not found after install" >&2
	exit 1
}

# Real egress proxies for the egress-proxy tests (internal/proxytest starts them on
# 127.0.0.1 with configurations of their own): squid (HTTP CONNECT, basic auth checked by
# its basic_ncsa_auth helper over a file made with openssl) and dante-server (SOCKS5).
# The services the packages may start are stopped: the tests run their own.
proxy_packages=(squid dante-server openssl)
proxy_missing=()
for p in "${proxy_packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || proxy_missing+=("$p")
done
if [ ${#proxy_missing[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "setup: need root to install: ${proxy_missing[*]}" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get -o DPkg::Lock::Timeout=600 update -q
	apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${proxy_missing[@]}"
	if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
		systemctl disable --now squid.service danted.service >/dev/null 2>&1 || true
	fi
fi
for b in /usr/sbin/squid /usr/sbin/danted /usr/lib/squid/basic_ncsa_auth; do
	test -x "$b" || {
		echo "setup: $b not found after installing ${proxy_packages[*]}" >&2
		exit 1
	}
done

command -v promtool >/dev/null || test -x /usr/bin/promtool || {
	echo "setup: promtool not found after installing prometheus" >&2
	exit 1
}

cd "$(dirname "$0")/.."
go mod download

# Real framework apps for the render tests and `bash scripts/bench.sh render`: the npm
# package todomvc (React, Vue, AngularJS, Backbone, Ember, Knockout, Mithril, vanilla JS
# and more, each with its libraries), unpacked into .cache/todomvc/package. Tests that need
# it skip when it is absent outside CI, and fail inside CI.
todomvc_version=0.1.1
if [ ! -f .cache/todomvc/package/package.json ]; then
	if ! command -v npm >/dev/null; then
		if [ "$(id -u)" -eq 0 ]; then
			export DEBIAN_FRONTEND=noninteractive
			apt-get update -q
			apt-get install -y -q --no-install-recommends npm
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
