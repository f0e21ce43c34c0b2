# shellcheck shell=bash
# fstests built from its source at the pinned commit (scripts/third_party/third_party.sh), once, into
# $CACHE/fstests-<tarball hash>: what `make fstests` runs and what the crash tests take their tools
# from (scripts/third_party/crash-tools.sh). Source it after scripts/common.sh, with FSTESTS_TARBALL set;
# then fstests_packages installs what fstests builds and runs with, fstests_build builds it.

# What fstests builds with (the list in ../shared/README.md, plus libcap and gdbm's ndbm for the
# tests that want them) and what its tests run (fsstress/fsx are its own; xfs_io, mkfs.*,
# xfs_repair and fio come from scripts/setup.sh's list).
FSTESTS_PKGS=(
	build-essential autoconf automake libtool-bin pkg-config
	xfslibs-dev uuid-dev libattr1-dev libacl1-dev libaio-dev liburing-dev libgdbm-dev
	libgdbm-compat-dev libcap-dev
	attr acl quota bc psmisc gawk uuid-runtime xfsdump xfsprogs e2fsprogs btrfs-progs fio keyutils
)

# Installs the missing packages, in scripts/setup.sh's way.
fstests_packages() {
	local missing=() p
	for p in "${FSTESTS_PKGS[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	[ ${#missing[@]} -gt 0 ] || return 0
	[ "$(id -u)" = 0 ] || die "fstests needs these packages (run as root to install them): ${missing[*]}"
	if [ ! -f /var/lib/apt/periodic/rust-loop-updated ]; then
		say "apt-get update"
		apt-get update -q || die "apt-get update failed: check the network"
		mkdir -p /var/lib/apt/periodic && touch /var/lib/apt/periodic/rust-loop-updated
	fi
	say "apt-get install ${missing[*]}"
	# Waits for the dpkg lock rather than failing when another set-up is installing.
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
		-o DPkg::Lock::Timeout=600 "${missing[@]}" ||
		die "apt-get install failed for: ${missing[*]} (see the apt output above)"
}

# Builds fstests from the tarball in $CACHE/fstests-<hash>/src (once: a cache hit rebuilds
# nothing) and prints the path of fstests.tar, the built tree without its objects (21 MB) that
# the guest unpacks into its tmpfs: a copy of the tree's 5000 files over 9p takes minutes there.
fstests_build() {
	local hash dir
	[ -f "$FSTESTS_TARBALL" ] || die "fstests snapshot not found: $FSTESTS_TARBALL (FSTESTS_TARBALL)"
	hash=$(sha256sum "$FSTESTS_TARBALL" | cut -c1-12)
	dir="$CACHE/fstests-$hash"
	mkdir -p "$CACHE"
	# One build at a time: a second caller waits, then finds the finished build.
	exec 8>"$dir.lock"
	flock 8
	if [ -f "$dir/.rust-loop-built" ] && [ -f "$dir/fstests.tar" ]; then
		say "fstests: cache hit ($dir)"
	else
		say "fstests: building $(basename "$FSTESTS_TARBALL") in $dir (about a minute)"
		rm -rf "$dir" && mkdir -p "$dir/src"
		# A git archive without a top directory.
		tar -xzf "$FSTESTS_TARBALL" -C "$dir/src" || die "extracting $FSTESTS_TARBALL failed"
		[ -f "$dir/src/check" ] || die "no fstests 'check' script at the top of $FSTESTS_TARBALL"
		make -C "$dir/src" -j"$(nproc)" >"$dir/build.log" 2>&1 ||
			{ tail -n 30 "$dir/build.log" >&2; die "building fstests failed (log: $dir/build.log)"; }
		[ -x "$dir/src/ltp/fsstress" ] && [ -x "$dir/src/ltp/fsx" ] && [ -x "$dir/src/ltp/aio-stress" ] &&
			[ -x "$dir/src/src/log-writes/replay-log" ] ||
			die "fstests build incomplete: no ltp/fsstress, ltp/fsx, aio-stress or src/log-writes/replay-log (log: $dir/build.log)"
		tar -C "$dir/src" --exclude='*.o' --exclude=autom4te.cache -cf "$dir/fstests.tar" . ||
			die "packing $dir/fstests.tar failed"
		touch "$dir/.rust-loop-built"
	fi
	exec 8>&-
	echo "$dir/fstests.tar"
}

