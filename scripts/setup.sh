#!/usr/bin/env bash
# Installs what the downloader needs to RUN on a fresh Debian machine (run as root):
# Debian's headless Chromium for rendering, fonts (Latin and CJK, so pages have text
# metrics and the console's screenshots show Chinese labels), CA certificates, and the
# Go modules. What only the tests need (promtool, the TodoMVC fixtures) is
# scripts/setup-test.sh's; scripts/test.sh runs both. Safe to run again: it installs
# only what is missing.
set -euo pipefail

packages=(chromium-headless-shell fonts-liberation fonts-wqy-microhei ca-certificates)
source "$(dirname "$0")/apt.sh"
apt_install_missing setup "${packages[@]}"
test -x /usr/lib/chromium/chromium-headless-shell || {
	echo "setup: /usr/lib/chromium/chromium-headless-shell not found after install" >&2
	exit 1
}

cd "$(dirname "$0")/.."
go mod download
