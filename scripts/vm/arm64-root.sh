#!/usr/bin/env bash
# The root an arm64 guest of scripts/vm/vm.sh boots on: Debian arm64 of the kernel's suite, made
# once in $RUST_LOOP_CACHE/stock/root-<suite>-arm64, the kernel's modules linked into it. Prints
# its path. Run by scripts/vm/vm.sh for an arm64 kernel of the matrix (STOCK=<name>), which holds
# the root's lock ($root.lock) meanwhile and has had scripts/kernels/stock.sh unpack the image.
#
# The root: `debootstrap --foreign --arch=arm64 --variant=minbase` with what the guests run
# (kmod, util-linux, mount, e2fsprogs, fio: the smoke test), its dependencies resolved and every
# package checked against the suite's signed index, the packages its second stage needs
# unpacked; the rest are then unpacked here the same way, and no maintainer script is run.
# Why: the second stage runs the arm64 packages' maintainer scripts, which this amd64 host
# cannot execute without qemu-user and a binfmt_misc handler registered host-wide (a change to
# the whole machine, which a CI container may not be allowed to make); run as the init of the
# arm64 guest instead, it had not finished after 80 minutes under TCG on this 2-core machine
# while other VMs ran (dpkg, its triggers and the maintainer scripts of some 140 packages, fio's
# python3 among them, all emulated). The guests need the packages' files, not their
# configuration: the guest's init runs ldconfig once, and /etc/passwd and /etc/group are
# base-passwd's masters. A root whose package list changed is made again. No udev: devtmpfs
# makes the device nodes (`udevadm settle` is optional in the smoke test).
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
[ "$(id -u)" = 0 ] || die "scripts/vm/arm64-root.sh must run as root (debootstrap)"
stock_row
[ "$STOCK_ARCH" = arm64 ] || die "STOCK=$STOCK_NAME is $STOCK_ARCH, not arm64"
image=$CACHE/stock/image-$STOCK_KREL
[ -d "$image/lib/modules/$STOCK_KREL" ] ||
	die "no modules of $STOCK_KREL in $image: run STOCK=$STOCK_NAME STOCK_IMAGE=1 scripts/kernels/stock.sh"

# The root's packages, beyond minbase: what tests/smoke.sh runs.
ROOT_PKGS=(kmod util-linux mount e2fsprogs fio)
aroot=$CACHE/stock/root-$STOCK_SUITE-arm64
want_made="debootstrap --foreign --arch=arm64 --variant=minbase $STOCK_SUITE +${ROOT_PKGS[*]}; unpacked"
if [ "$(cat "$aroot/.rust-loop-made" 2>/dev/null)" != "$want_made" ]; then
	command -v debootstrap >/dev/null || die "debootstrap not found: run scripts/setup.sh"
	script=/usr/share/debootstrap/scripts/$STOCK_SUITE
	[ -e "$script" ] || script=/usr/share/debootstrap/scripts/sid
	t1=$SECONDS
	say "arm64: making a Debian $STOCK_SUITE arm64 root in $aroot (debootstrap --foreign, then unpacking)"
	rm -rf "$aroot"
	debootstrap --foreign --arch=arm64 --variant=minbase --include="$(
		IFS=,
		echo "${ROOT_PKGS[*]}"
	)" "$STOCK_SUITE" "$aroot" "$STOCK_ARCHIVE" "$script" >"$aroot.debootstrap.log" 2>&1 ||
		die "debootstrap --foreign --arch=arm64 $STOCK_SUITE failed (log: $aroot.debootstrap.log)"
	# The first stage unpacked the packages the second stage needs (debootstrap/required); the
	# others (debootstrap/base: the included ones and their dependencies) are unpacked as it
	# unpacks (merged /usr's directory symlinks kept), their maintainer scripts not run.
	while read -r pkg; do
		deb=$(awk -v p="$pkg" '$1 == p { print $2; exit }' "$aroot/debootstrap/debpaths")
		[ -n "$deb" ] && [ -f "$aroot$deb" ] || die "debootstrap left no package file of $pkg in $aroot"
		dpkg-deb --fsys-tarfile "$aroot$deb" | tar -C "$aroot" --keep-directory-symlink --skip-old-files -xf - ||
			die "unpacking $pkg into $aroot failed"
	done < <(tr -s ' ' '\n' <"$aroot/debootstrap/base" | grep .)
	# What base-passwd's preinst makes (user and group names for ls, mount, fio).
	for f in passwd group; do
		[ -f "$aroot/etc/$f" ] || cp "$aroot/usr/share/base-passwd/$f.master" "$aroot/etc/$f"
	done
	# The first stage leaves /proc a symlink to the host's /proc, which the guest cannot mount on.
	rm -f "$aroot/proc" && mkdir -p "$aroot/proc"
	for c in bash dmesg losetup mount insmod rmmod modprobe mkfs.ext4 fsck.ext4 fio ldconfig; do
		[ -e "$aroot/usr/bin/$c" ] || [ -e "$aroot/usr/sbin/$c" ] || die "the arm64 root has no $c"
	done
	echo "$want_made" >"$aroot/.rust-loop-made"
	say "arm64: root made in $((SECONDS - t1)) s"
fi

# The kernel's modules (hard links into the cached image where they can be: the same file system).
mods=$aroot/usr/lib/modules/$STOCK_KREL
if [ ! -f "$mods/.rust-loop-linked" ]; then
	rm -rf "$mods" && mkdir -p "$(dirname "$mods")"
	cp -al "$image/lib/modules/$STOCK_KREL" "$mods" 2>/dev/null || {
		rm -rf "$mods"
		cp -a "$image/lib/modules/$STOCK_KREL" "$mods"
	} || die "copying the modules of $STOCK_KREL into $aroot failed"
	touch "$mods/.rust-loop-linked"
fi
echo "$aroot"
