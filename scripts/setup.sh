#!/usr/bin/env bash
# Installs what the downloader needs to RUN on a fresh Debian machine (run as root):
# Debian's headless Chromium for rendering, fonts (Latin and CJK, so pages have text
# metrics and the console's screenshots show Chinese labels), CA certificates, and the
# Go modules. What only the tests need (promtool, the TodoMVC fixtures) is
# scripts/setup-test.sh's; scripts/test.sh runs both. Safe to run again: it installs
# only what is missing.
set -euo pipefail

packages=(chromium-headless-shell fonts-liberation fonts-wqy-microhei ca-certificates)
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
fi
test -x /usr/lib/chromium/chromium-headless-shell || {
	echo "setup: /usr/lib/chromium/chromium-headless-shell not found after install" >&2
	exit 1
}

cd "$(dirname "$0")/.."
go mod download
