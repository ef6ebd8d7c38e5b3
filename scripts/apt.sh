# Sourced by scripts/setup.sh and scripts/setup-test.sh: the one way they install Debian's
# packages.

# apt_install_missing WHO PACKAGE...: installs those of the packages that are not
# installed yet (as root: WHO names the script in the error otherwise), and sets
# apt_installed to the list it installed (empty when none was missing).
apt_install_missing() {
	local who=$1 p
	shift
	apt_installed=()
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || apt_installed+=("$p")
	done
	[ ${#apt_installed[@]} -gt 0 ] || return 0
	if [ "$(id -u)" -ne 0 ]; then
		echo "$who: need root to install: ${apt_installed[*]}" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get -o DPkg::Lock::Timeout=600 update -q
	apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${apt_installed[@]}"
}
