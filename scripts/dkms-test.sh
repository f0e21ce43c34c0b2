#!/usr/bin/env bash
# The DKMS package tested as a user installs it: on a Debian trixie root file system with the
# stock 7.3 kernel (config/stock.conf) and its headers, `apt install ./rust-loop-dkms_*.deb`
# offline, DKMS builds and installs rust_loop for that kernel; the root is then booted with that
# kernel in a VM, where `modprobe loop` must give rust_loop, a --direct-io=on device must carry
# ext4 and a fio verify round, `modprobe -r loop` must unload it, and after `apt purge` `modprobe
# loop` must give the kernel's loop.ko again.
#
#   scripts/dkms-test.sh     (as root)
#
# Phases (each says what it does; any failed check stops the script with a non-zero status):
#  1. root: $RUST_LOOP_CACHE/stock/user-root-trixie, made once by debootstrap (minbase, from
#     Debian's archive) with util-linux, e2fsprogs, fio, kmod and udev; trixie-backports added;
#     the stock kernel's modules and headers installed from the debs scripts/stock.sh downloaded.
#     Every run: apt-get update, purge an earlier rust-loop-dkms, and download (only) what the
#     package needs, so that the install needs no network.
#  2. install: in that root as a chroot on the host (building the Rust artefacts under TCG would
#     take very long), in a network namespace without network: apt install ./rust-loop-dkms_*.deb
#     (its postinst runs DKMS for the kernels whose headers are installed: the stock one). Checks:
#     apt downloaded nothing, `dkms status` says installed for the stock kernel, modprobe's view.
#  3. VM: the root booted with the stock kernel (virtme-ng --root, read-write), the checks above;
#     then apt purge rust-loop-dkms (in the root on the host: DKMS's depmod over the kernel's
#     modules takes minutes under TCG) and a second boot, where `modprobe loop` gives loop.ko.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
stock_paths
[ "$(id -u)" = 0 ] || die "scripts/dkms-test.sh must run as root (debootstrap, chroot, mounts)"
command -v debootstrap >/dev/null || die "debootstrap not found: run scripts/setup.sh"
command -v vng >/dev/null || die "vng (virtme-ng) not found: run scripts/setup.sh"
command -v unshare >/dev/null || die "unshare not found (util-linux)"

base=$CACHE/stock
uroot=$base/user-root-trixie
debs=$base/debs/$STOCK_DEBVER
krel=$STOCK_KREL
kabi=${krel%-*}
out=$ROOT/results/dkms-test
mkdir -p "$out"
declare -A took

# Runs a command in the root as a chroot, with /proc, /sys and /dev mounted, in a mount namespace
# of its own (nothing stays mounted). DKMS_TEST_NONET=1: also without network.
uexec() {
	local net=()
	[ "${DKMS_TEST_NONET:-0}" != 1 ] || net=(-n)
	unshare -m "${net[@]}" --propagation private bash -c '
		set -e
		r=$1
		shift
		mount -t proc proc "$r/proc"
		mount -t sysfs sysfs "$r/sys"
		mount --rbind /dev "$r/dev"
		exec chroot "$r" env -i HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive \
			PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin TERM="${TERM:-dumb}" \
			bash -c "cd /root && exec \"\$@\"" _ "$@"
	' _ "$uroot" "$@"
}
phase_start() {
	phase=$1
	phase_t0=$SECONDS
	say "dkms-test: [$phase] $2"
}
phase_end() { took[$phase]=$((SECONDS - phase_t0)); }

exec 9>"$base/.user-root.lock"
flock -n 9 || die "another scripts/dkms-test.sh is running (lock $base/.user-root.lock)"

# 0. The stock kernel's debs and image (cached), and the package.
bash "$ROOT/scripts/stock.sh" >/dev/null || die "scripts/stock.sh failed"
vmlinuz=$(bash "$ROOT/scripts/stock.sh" vmlinuz)
deb=$(bash "$ROOT/scripts/deb.sh") || die "scripts/deb.sh failed"
debname=$(basename "$deb")
debver=$(dpkg-deb -f "$deb" Version)

# 1. The root file system.
phase_start root "the trixie root $uroot"
if [ ! -f "$uroot/.rust-loop-debootstrapped" ]; then
	say "dkms-test: debootstrap --variant=minbase $STOCK_SUITE from $STOCK_ARCHIVE (a few minutes)"
	rm -rf "$uroot"
	t0=$SECONDS
	debootstrap --variant=minbase --include=util-linux,e2fsprogs,fio,kmod,udev \
		"$STOCK_SUITE" "$uroot" "$STOCK_ARCHIVE" >"$base/user-root-debootstrap.log" 2>&1 ||
		die "debootstrap of $STOCK_SUITE failed (log: $base/user-root-debootstrap.log)"
	took[debootstrap]=$((SECONDS - t0))
	touch "$uroot/.rust-loop-debootstrapped"
fi
echo "deb $STOCK_ARCHIVE $STOCK_SUITE-backports main" >"$uroot/etc/apt/sources.list.d/backports.list"
say "dkms-test: apt-get update in the root"
uexec apt-get update -q >"$out/apt-update.log" 2>&1 || die "apt-get update in $uroot failed (log: $out/apt-update.log)"
kpkgs=("linux-base-$krel" "linux-modules-$krel" "linux-headers-$krel" "linux-headers-$kabi-common"
	"linux-kbuild-$kabi")
if [ ! -f "$uroot/.rust-loop-kernel-$STOCK_DEBVER" ]; then
	say "dkms-test: installing the stock kernel's modules and headers ($STOCK_DEBVER) in the root"
	mkdir -p "$uroot/root/kernel-debs"
	files=()
	for p in "${kpkgs[@]}"; do
		f=$(compgen -G "$debs/${p}_*.deb" | head -n 1) || die "no $p deb in $debs: run scripts/stock.sh"
		cp "$f" "$uroot/root/kernel-debs/"
		files+=("./kernel-debs/$(basename "$f")")
	done
	uexec apt-get install -y -q --no-install-recommends "${files[@]}" >"$out/kernel-install.log" 2>&1 ||
		die "installing the kernel packages in the root failed (log: $out/kernel-install.log)"
	rm -rf "$uroot/root/kernel-debs"
	touch "$uroot/.rust-loop-kernel-$STOCK_DEBVER"
fi
[ -e "$uroot/lib/modules/$krel/build/.config" ] || die "the root has no headers for $krel (/lib/modules/$krel/build)"
# A user's rust-loop-dkms from an earlier run goes first (the VM phase purges it; a failed run may not).
if uexec dpkg-query -W -f='${db:Status-Abbrev}' rust-loop-dkms 2>/dev/null | grep -q '^[^u]'; then
	say "dkms-test: purging the rust-loop-dkms an earlier run left in the root"
	uexec apt-get purge -y -q rust-loop-dkms >"$out/purge-earlier.log" 2>&1 ||
		die "purging an earlier rust-loop-dkms failed (log: $out/purge-earlier.log)"
fi
# What apt installed for an earlier run's package goes too, so that every run installs the
# toolchain as a user's first install does (from the cached debs).
if [ -n "$(uexec apt-mark showauto 2>/dev/null)" ]; then
	say "dkms-test: removing the packages an earlier run's install pulled in (apt autoremove)"
	# (sudo, which dkms recommends, refuses to go without SUDO_FORCE_REMOVE.)
	uexec env SUDO_FORCE_REMOVE=yes apt-get autoremove --purge -y -q >"$out/autoremove.log" 2>&1 ||
		die "apt-get autoremove in the root failed (log: $out/autoremove.log)"
fi
rm -rf "$uroot/var/cache/rust-loop"
# linux-source-7.3 must be of the headers' version; if the archive has moved on, the pinned one
# (downloaded by scripts/stock.sh) is installed first, as a user keeping that kernel would.
cand=$(uexec apt-cache policy "$STOCK_SOURCE" | sed -n 's/^ *Candidate: //p')
if [ "$cand" != "$STOCK_DEBVER" ]; then
	say "dkms-test: the archive's $STOCK_SOURCE is '$cand', not $STOCK_DEBVER: installing the pinned one"
	f=$(compgen -G "$debs/${STOCK_SOURCE}_*.deb" | head -n 1) || die "no $STOCK_SOURCE deb in $debs"
	cp "$f" "$uroot/root/" && uexec apt-get install -y -q "./$(basename "$f")" >"$out/source-install.log" 2>&1 ||
		die "installing the pinned $STOCK_SOURCE failed (log: $out/source-install.log)"
fi
rm -f "$uroot"/root/rust-loop-dkms_*.deb
cp "$deb" "$uroot/root/$debname"
say "dkms-test: downloading (only) what $debname needs"
uexec apt-get install -y -q --download-only "./$debname" >"$out/download.log" 2>&1 ||
	die "apt-get install --download-only ./$debname failed (log: $out/download.log)"
phase_end

# 2. The install, offline, as a chroot on the host.
phase_start install "apt install ./$debname (offline, chroot; DKMS builds rust_loop for $krel)"
status=0
DKMS_TEST_NONET=1 uexec apt-get install -y "./$debname" 2>&1 | tee "$out/install.log" || status=$?
[ "$status" = 0 ] || die "apt install ./$debname failed (status $status; log: $out/install.log)"
# (apt lists the local .deb as "Get:1 /root/...": only a fetch from an archive counts.)
! grep -Eq '^(Get|Err|Ign|Hit):[0-9]+ [a-z+]+://' "$out/install.log" ||
	die "apt downloaded during the install (see $out/install.log)"
if grep -q '^Need to get' "$out/install.log"; then
	grep -q '^Need to get 0 B/' "$out/install.log" || die "apt needed to download (see $out/install.log)"
fi
dkms_status=$(uexec dkms status -m rust-loop -v "$debver" -k "$krel")
echo "dkms status: $dkms_status"
[[ $dkms_status == *"rust-loop/$debver, $krel, x86_64: installed"* ]] ||
	die "dkms status does not say rust-loop/$debver installed for $krel: '$dkms_status'"
modfile=$(uexec modinfo -k "$krel" -F filename rust_loop) || die "modinfo -k $krel rust_loop failed in the root"
echo "module: $modfile"
[[ $modfile == */updates/dkms/rust_loop.ko* ]] || die "rust_loop resolves to $modfile, not DKMS's updates/dkms"
show=$(uexec modprobe -S "$krel" --show -v loop 2>&1 || true)
echo "modprobe -n loop: $show"
[[ $show == *"--ignore-install rust_loop"* ]] || die "modprobe loop does not go through rust-loop.conf: '$show'"
phase_end

# 3. The VM: boot the root with the stock kernel; checks, purge, loop.ko.
phase_start vm "booting the root with $krel (virtme-ng, TCG): modprobe loop, losetup, mkfs, fio; purge; loop.ko back"
cat >"$uroot/root/dkms-test-guest.sh" <<EOF
#!/bin/bash
set -uo pipefail
krel=$krel
EOF
cat >>"$uroot/root/dkms-test-guest.sh" <<'EOF'
fail() { echo "FAIL: $*"; exit 1; }
step() { printf '\n== %s\n' "$*"; }
loaded() { [ -d "/sys/module/$1" ]; }
step "kernel $(uname -r)"
[ "$(uname -r)" = "$krel" ] || fail "booted $(uname -r), not $krel"
for m in rust_loop loop; do ! loaded $m || fail "$m is loaded at boot, before modprobe"; done

step "modprobe loop"
modprobe -v loop || fail "modprobe loop failed"
loaded rust_loop || fail "modprobe loop did not load rust_loop"
! loaded loop || fail "modprobe loop loaded loop.ko"
echo "rust_loop loaded ($(modinfo -F filename rust_loop)); loop.ko not loaded"

step "losetup -f --show --direct-io=on, mkfs.ext4, fio verify"
mkdir -p /run/dkms-test/backing /run/dkms-test/mnt
mount -t tmpfs -o size=400M tmpfs /run/dkms-test/backing || fail "tmpfs mount failed"
img=/run/dkms-test/backing/img
truncate -s 256M "$img"
dev=$(losetup -f --show --direct-io=on "$img") || fail "losetup failed"
n=$(basename "$dev")
losetup -l "$dev"
dio=$(cat "/sys/block/$n/loop/dio")
echo "$dev: dio=$dio"
[ "$dio" = 1 ] || fail "$dev is not in direct I/O mode"
mkfs.ext4 -q -F "$dev" || fail "mkfs.ext4 failed"
mount "$dev" /run/dkms-test/mnt || fail "mount failed"
fio --name=verify --filename=/run/dkms-test/mnt/fio.dat --size=64M --rw=randwrite --bs=4k \
	--direct=1 --ioengine=libaio --iodepth=16 --verify=crc32c --do_verify=1 --verify_fatal=1 \
	--output-format=terse --terse-version=3 >/run/dkms-test/fio.out || fail "fio verify failed"
echo "fio verify: 64M of 4k random writes, verified (crc32c)"
umount /run/dkms-test/mnt || fail "umount failed"
e2fsck -fn "$dev" >/dev/null || fail "e2fsck found errors"
echo "e2fsck: clean"
losetup -d "$dev" || fail "losetup -d failed"

step "modprobe -r loop"
# The detach's last close sends a uevent, for which udev opens the device (blkid): until it has
# closed it the module is in use, as loop.ko would be. Wait for udev, then up to 30 s.
udevadm settle --timeout=60 2>/dev/null || true
for i in $(seq 150); do loaded rust_loop || break; modprobe -r loop 2>/dev/null && break; sleep 0.2; done
! loaded rust_loop || fail "modprobe -r loop did not unload rust_loop: $(modprobe -r loop 2>&1)" \
	"(refcnt $(cat /sys/module/rust_loop/refcnt 2>/dev/null); holders: $(ls /sys/module/rust_loop/holders 2>/dev/null))"
echo "rust_loop unloaded"

step "autoloading: modprobe char-major-10-237 (what opening /dev/loop-control asks for)"
modprobe char-major-10-237 || fail "modprobe char-major-10-237 failed"
loaded rust_loop || fail "the loop-control alias did not load rust_loop"
! loaded loop || fail "the loop-control alias loaded loop.ko"
echo "rust_loop loaded, loop.ko not loaded"
for i in $(seq 50); do loaded rust_loop || break; modprobe -r loop 2>/dev/null && break; sleep 0.2; done
! loaded rust_loop || fail "modprobe -r loop did not unload rust_loop: $(modprobe -r loop 2>&1)"

echo
echo "PASS"
EOF
# After the purge (made on the host: in the guest, DKMS's depmod over the kernel's 4000
# compressed modules takes 5-10 minutes under TCG), a second boot: loop.ko is back.
cat >"$uroot/root/dkms-test-guest-purged.sh" <<'EOF'
#!/bin/bash
set -uo pipefail
fail() { echo "FAIL: $*"; exit 1; }
loaded() { [ -d "/sys/module/$1" ]; }
printf '\n== %s\n' "modprobe loop after the purge"
[ ! -e /usr/lib/modprobe.d/rust-loop.conf ] || fail "rust-loop.conf is still there"
! modinfo -F filename rust_loop 2>/dev/null || fail "rust_loop is still installed"
modprobe -v loop || fail "modprobe loop failed"
loaded loop || fail "modprobe loop did not load loop.ko"
! loaded rust_loop || fail "modprobe loop loaded rust_loop after the purge"
echo "loop.ko loaded ($(modinfo -F filename loop))"
# loop.ko makes its max_loop devices at load; udev's probes of them hold the module for a
# moment (CI saw "Module loop is in use" once), so the unload is retried as for rust_loop.
udevadm settle 2>/dev/null || true
for i in $(seq 50); do loaded loop || break; modprobe -r loop 2>/dev/null && break; sleep 0.2; done
! loaded loop || fail "modprobe -r loop (loop.ko) did not unload it: $(modprobe -r loop 2>&1)"
echo "loop.ko unloaded"
echo
echo "PASS"
EOF
chmod +x "$uroot/root/dkms-test-guest.sh" "$uroot/root/dkms-test-guest-purged.sh"
# run_vm SCRIPT LOG: boots the root with the stock kernel and runs SCRIPT in it; dies unless it
# exits 0. The status travels through a file in the root (the console may lose it); vng's output
# goes through a pipe (it reopens its stdout with O_TRUNC, see scripts/vm.sh).
run_vm() {
	local script=$1 log=$2 status=0 gstatus
	local args=(--run "$vmlinuz" --root "$uroot" --rw --force-9p --cpus "${VM_CPUS:-2}"
		--memory "${VM_MEM:-2G}" --cwd "$uroot/root" --disable-kvm)
	rm -f "$uroot/root/dkms-test-guest.status"
	(cd "$uroot/root" && timeout "${DKMS_TEST_VM_TIMEOUT:-900}" vng "${args[@]}" \
		--exec "bash /root/$script; echo \$? > /root/dkms-test-guest.status" </dev/null 2>&1 |
		cat) | tee "$log" || status=$?
	[ "$status" = 0 ] || die "the VM failed or timed out (status $status; log: $log)"
	gstatus=$(cat "$uroot/root/dkms-test-guest.status" 2>/dev/null || true)
	[ -n "$gstatus" ] || die "the guest did not report a status (boot failure or crash; log: $log)"
	[ "$gstatus" = 0 ] || die "the checks in the VM failed (status $gstatus; log: $log)"
}
run_vm dkms-test-guest.sh "$out/vm.log"

say "dkms-test: apt purge rust-loop-dkms (in the root, offline)"
DKMS_TEST_NONET=1 uexec apt-get purge -y rust-loop-dkms >"$out/purge.log" 2>&1 ||
	die "apt purge rust-loop-dkms failed (log: $out/purge.log)"
[ -z "$(uexec dkms status rust-loop 2>/dev/null)" ] || die "dkms still knows rust-loop after the purge"
[ ! -e "$uroot/usr/lib/modprobe.d/rust-loop.conf" ] || die "the purge left rust-loop.conf behind"
[ ! -e "$uroot/var/cache/rust-loop" ] || die "the purge left $uroot/var/cache/rust-loop behind"
[ ! -e "$uroot/usr/src/rust-loop-$debver" ] && [ ! -e "$uroot/var/lib/dkms/rust-loop" ] ||
	die "the purge left rust-loop's source or DKMS tree behind"
! compgen -G "$uroot/lib/modules/$krel/updates/dkms/rust_loop.ko*" >/dev/null ||
	die "the purge left rust_loop.ko in updates/dkms"
run_vm dkms-test-guest-purged.sh "$out/vm-purged.log"
phase_end

say "dkms-test: PASS ($debname on $krel)"
for p in debootstrap root install vm; do
	[ -z "${took[$p]:-}" ] || printf '  %-12s %4d s\n' "$p" "${took[$p]}"
done | tee "$out/timings.txt"
