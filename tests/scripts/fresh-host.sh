#!/usr/bin/env bash
# Host-side test of the set-up on a fresh machine (no kernel, no VM; scripts/check.sh runs it
# before the VM):
#
#   bash tests/scripts/fresh-host.sh      (as root)
#
# A minimal machine (a container image) lacks host paths this one has: /lib/modules,
# /usr/src, /etc/apt/sources.list.d, /etc/apt/preferences.d, /var/lib/apt/periodic, and ~/.cargo
# (no rustup). `make run` once stopped at `ln: failed to create symbolic link
# '/lib/modules/<release>'`. Here the set-up's own scripts, scripts/setup.sh (twice: the second
# run changes nothing) and scripts/kernels/stock.sh, run in a mount namespace where those paths are gone
# (overlays with whiteouts over /usr, /etc/apt and /var/lib/apt; an empty directory over
# ~/.cargo), as on such a machine; what they write there lands in the overlays, not on this
# host. Checks: both succeed; setup.sh made the apt source and pin files (and said that rustup is
# missing, not failed on it), stock.sh the /lib/modules/<release> link virtme-ng boots with.
#
# apt-get, apt and debootstrap are stand-ins that fail: the host's packages and the stock
# flavour's cache must already be there (scripts/check.sh runs scripts/setup.sh first; CI runs
# scripts/kernels/stock.sh first). When either is missing, the test is skipped with that reason.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"
skip() {
	echo "SKIP: $*"
	exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root (mount namespaces, overlays)"
command -v unshare >/dev/null || skip "needs unshare (util-linux)"
grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null || skip "needs overlayfs"

krel=$(bash -c 'source scripts/common.sh; KERNEL=stock; unset KDIR; stock_paths; echo "$STOCK_KREL"')
[ -n "$krel" ] || fail "no stock kernel release from scripts/common.sh's stock_paths"

# The stand-ins: any call means the host was not ready; it is recorded and fails.
stubs=$tmp/stubs
mkdir -p "$stubs"
for c in apt-get apt debootstrap; do
	printf '#!/bin/sh\necho "%s $*" >>%s/called\necho "fresh-host: %s is a stand-in here" >&2\nexit 1\n' \
		"$c" "$tmp" "$c" >"$stubs/$c"
	chmod +x "$stubs/$c"
done

# The fresh machine: each "DIR NAME..." hides DIR/NAME... behind an overlay on DIR.
hide=("/usr lib/modules src" "/etc/apt sources.list.d preferences.d" "/var/lib/apt periodic")
cargo=$HOME/.cargo
rc=0
unshare -m --propagation private bash -c '
	set -euo pipefail
	t=$1 stubs=$2 cargo=$3 hide=$4
	while IFS= read -r spec; do
		set -- $spec
		dir=$1
		shift
		o=$t/overlay$(echo "$dir" | tr / _)
		mkdir -p "$o/upper" "$o/work"
		for name; do
			[ -e "$dir/$name" ] || continue
			mkdir -p "$(dirname "$o/upper/$name")"
			mknod "$o/upper/$name" c 0 0 # a whiteout: gone from the overlay
		done
		mount -t overlay overlay -o "lowerdir=$dir,upperdir=$o/upper,workdir=$o/work" "$dir"
	done <<<"$hide"
	if [ -d "$cargo" ]; then
		mkdir -p "$t/empty"
		mount --bind "$t/empty" "$cargo"
	fi
	for p in /lib/modules /usr/src /etc/apt/sources.list.d /etc/apt/preferences.d /var/lib/apt/periodic; do
		[ ! -e "$p" ] || { echo "FAIL: $p is still there in the namespace"; exit 1; }
	done
	! command -v rustup >/dev/null || { echo "FAIL: rustup is still found in the namespace"; exit 1; }
	export PATH=$stubs:$PATH KERNEL=stock
	unset KDIR SETUP_PROJECT_TOOLCHAIN
	status=0
	bash scripts/setup.sh >"$t/setup1.log" 2>&1 || status=$?
	echo "setup.sh (1st): $status"
	[ $status = 0 ] || exit 10
	bash scripts/setup.sh >"$t/setup2.log" 2>&1 || status=$?
	echo "setup.sh (2nd): $status"
	[ $status = 0 ] || exit 11
	bash scripts/kernels/stock.sh >"$t/stock.log" 2>&1 || status=$?
	echo "stock.sh: $status"
	[ $status = 0 ] || exit 12
' _ "$tmp" "$stubs" "$cargo" "$(printf '%s\n' "${hide[@]}")" || rc=$?

if [ -s "$tmp/called" ]; then
	skip "the host is not set up for it (scripts/setup.sh, scripts/kernels/stock.sh): the set-up called $(sort -u "$tmp/called" | cut -d' ' -f1,2 | tr '\n' ',' | sed 's/,$//; s/,/, /g')"
fi
for f in setup1 setup2 stock; do
	[ -f "$tmp/$f.log" ] || continue
	echo "--- $f.log (last lines):"
	tail -n 5 "$tmp/$f.log"
done
[ "$rc" = 0 ] || fail "the set-up failed on the fresh machine (status $rc; logs above)"

u_usr=$tmp/overlay_usr/upper u_apt=$tmp/overlay_etc_apt/upper
link=$u_usr/lib/modules/$krel
if [ -L "$link" ]; then
	[ -d "$(readlink "$link")" ] || fail "/lib/modules/$krel points to $(readlink "$link"), which is missing"
else
	fail "stock.sh made no /lib/modules/$krel link"
fi
[ -f "$u_apt/sources.list.d/rust-loop.sources" ] || fail "setup.sh made no /etc/apt/sources.list.d/rust-loop.sources"
[ -f "$u_apt/preferences.d/rust-loop.pref" ] || fail "setup.sh made no /etc/apt/preferences.d/rust-loop.pref"
grep -q 'rustup not found' "$tmp/setup1.log" || fail "setup.sh did not say that rustup is missing"
! grep -q 'apt: ' "$tmp/setup2.log" || fail "setup.sh's second run changed the apt files again: $(grep 'apt: ' "$tmp/setup2.log")"
[ "$failed" = 0 ] || exit 1
echo "fresh-host: the set-up runs without /lib/modules, /usr/src, the apt directories and ~/.cargo"
