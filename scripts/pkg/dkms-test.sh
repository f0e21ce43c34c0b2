#!/usr/bin/env bash
# The DKMS package tested as a user installs and upgrades it, on a kernel of the matrix
# (config/kernels.conf; CI: the rows whose "runs" include `package`): on a Debian root file
# system of that kernel's suite (trixie for trixie-backports' kernels, forky for forky's) with the
# kernel's modules and headers, through the local apt repository `make repo` makes (`deb
# [trusted=yes] file:... ./`), offline: `apt install rust-loop-dkms` (DKMS builds and installs
# rust_loop for that kernel, with the suite's own toolchain), then `apt upgrade` to a newer
# version of it (DKMS removes the old one's module and builds the new one's); the root is then
# booted with that kernel in a VM, where `modprobe loop` must give rust_loop, a --direct-io=on
# device must carry ext4 and a fio verify round, `modprobe -r loop` must unload it, and after
# `apt purge` `modprobe loop` must give the kernel's loop.ko again.
#
#   scripts/pkg/dkms-test.sh                          (as root; STOCK=<name>: the kernel, default 7.3)
#   STOCK=forky scripts/pkg/dkms-test.sh              forky's kernel on a forky root
#   STOCK=7.3 DKMS_TEST_ALSO=7.3-cloud scripts/pkg/dkms-test.sh
#                                                 both kernels in one root (of one suite): one
#                                                 install and one upgrade build rust_loop for
#                                                 each, each is booted and checked
#
#   DKMS_TEST_HANDOVER the kernels (names) whose Rust artefacts are handed over to rust-loop-build
#                      from scripts/kernels/stock.sh's build root instead of regenerated (CI: 7.3 regenerates,
#                      the other kernels' are handed over; see "handover" below)
#   DKMS_TEST_ROOTS    the directory of the roots (default: $RUST_LOOP_CACHE/stock; about 4 GB
#                      a root)
#
# Results in results/dkms-test-<name>/ (<name>+<name> with DKMS_TEST_ALSO): the logs of each
# phase, timings.txt; a row per kernel in results/matrix/results.tsv (name, "package", ok or
# FAIL, seconds, date, the run's provenance, partial for a kernel of DKMS_TEST_HANDOVER: README's
# "Supported kernels" table).
#
# Phases (each says what it does; any failed check stops the script with a non-zero status):
#  0. packages: the kernel's packages and image (scripts/kernels/stock.sh), the repository of this
#     checkout (scripts/pkg/repo.sh: results/repo/, version V), and the newer version the upgrade goes
#     to: the same source as V+upgrade1 (scripts/pkg/deb.sh with RUST_LOOP_DEB_VERSION, into
#     <results>/next/), in a second repository directory holding both (<results>/repo-next/).
#  1. root: $DKMS_TEST_ROOTS/user-root-<suite> (the row's build root suite: trixie, forky,
#     sid), made once by debootstrap (minbase, from Debian's archive; a suite the host's
#     debootstrap does not know by sid's script, as scripts/kernels/stock.sh does) with util-linux,
#     e2fsprogs, fio, kmod and udev; apt's sources are the suite and, when the kernel's packages
#     come from another (trixie-backports), that one. The kernel's modules and headers are
#     installed from the debs scripts/kernels/stock.sh downloaded (once per kernel: a root keeps the
#     modules of every kernel tested in it), and the headers of the root's other kernels are
#     removed, so that DKMS builds for the kernels under test alone. Every run: purge an earlier
#     rust-loop-dkms and what it pulled in, add the repository as /srv/rust-loop-repo
#     (sources.list.d/rust-loop.list), apt-get update, and download (only) what the package and
#     the kernel's source package need, so that the install needs no network. Two kernels'
#     headers DKMS cannot build rust_loop for are faked in /lib/modules: one of another series
#     with Rust, one without Rust.
#  2. install: in that root as a chroot on the host (building the Rust artefacts under TCG would
#     take very long), in a network namespace without network: apt install rust-loop-dkms and
#     the kernel's linux-source of the headers' version, as README "Install" has the user do
#     (its postinst runs DKMS for the kernels whose headers are installed). Checks: apt
#     downloaded nothing, `dkms status` says installed for the kernel, the postinst says why the
#     fake kernels keep loop.ko, modprobe's view.
#  3. upgrade: the repository gains V+upgrade1; apt-get update (of that source only: offline) and
#     apt upgrade. Checks: apt saw the upgrade, `dkms status` says V+upgrade1 installed and knows
#     no V, V's source is gone, the module in updates/dkms is new, the Rust artefacts were reused
#     (not regenerated), modprobe's view.
#  4. VM: the root booted with the kernel (virtme-ng --root, read-write; over 9p, or over
#     virtio-fs for a kernel without 9p: the cloud flavour), the checks above; then apt purge
#     rust-loop-dkms (in the root on the host: DKMS's depmod over the kernel's modules takes
#     minutes under TCG) and a second boot, where `modprobe loop` gives loop.ko.
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
stock_paths
[ "$(id -u)" = 0 ] || die "scripts/pkg/dkms-test.sh must run as root (debootstrap, chroot, mounts)"
command -v debootstrap >/dev/null || die "debootstrap not found: run scripts/setup.sh"
command -v vng >/dev/null || die "vng (virtme-ng) not found: run scripts/setup.sh"
command -v unshare >/dev/null || die "unshare not found (util-linux)"

# The kernels under test: STOCK's row and DKMS_TEST_ALSO's, all of one root suite and package
# suite, amd64 (booted under TCG).
names=("$STOCK_NAME")
read -r -a also <<<"${DKMS_TEST_ALSO:-}"
names+=("${also[@]}")
suite=$STOCK_SUITE pkgs=$STOCK_PKGS
declare -A krel_of abi_of debver_of source_of
krels=()
for n in "${names[@]}"; do
	stock_row "$n"
	[ "$STOCK_ARCH" = amd64 ] || die "$n is a kernel for $STOCK_ARCH: the install test boots amd64 kernels (make arm64-boot boots arm64)"
	[ "$STOCK_SUITE" = "$suite" ] && [ "$STOCK_PKGS" = "$pkgs" ] ||
		die "DKMS_TEST_ALSO=$n: its kernel is of $STOCK_SUITE ($STOCK_PKGS), not of ${names[0]}'s root suite $suite ($pkgs)"
	[ -z "${krel_of[$n]:-}" ] || die "kernel $n named twice"
	case ",$STOCK_RUNS," in
	*,package,*) ;;
	*) say "dkms-test: note: $n's row in config/kernels.conf does not name 'package' (CI does not run this)" ;;
	esac
	krel_of[$n]=$STOCK_KREL abi_of[$n]=$STOCK_ABI debver_of[$n]=$STOCK_DEBVER source_of[$n]=$STOCK_SOURCE
	krels+=("$STOCK_KREL")
done
stock_row "${names[0]}"
# DKMS's name for the architecture (its trees and `dkms status` say x86_64, not amd64).
case "$STOCK_ARCH" in
amd64) dkms_arch=x86_64 ;;
*) die "no DKMS architecture name known for $STOCK_ARCH" ;;
esac

base=$CACHE/stock
roots=${DKMS_TEST_ROOTS:-$base}
uroot=$roots/user-root-$suite
tag=$(IFS=+; echo "${names[*]}")
out=$ROOT/results/dkms-test-$tag
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

# One install test at a time (each boots TCG VMs on the machine's 2 cores; the roots share the
# kernels' debs).
mkdir -p "$roots"
exec 9>"$roots/.user-root.lock"
flock -n 9 || die "another scripts/pkg/dkms-test.sh is running (lock $roots/.user-root.lock)"

# From here on, the result is recorded per kernel (README's table), a failure too.
t_start=$SECONDS
run_provenance
record_result() {
	local rc=$? n scope
	for n in "${names[@]}"; do
		# A kernel whose Rust artefacts were handed over skipped the package's own regeneration.
		scope=whole
		[[ " ${DKMS_TEST_HANDOVER:-} " != *" $n "* ]] || scope=partial
		result_row "$n" package "$([ "$rc" = 0 ] && echo ok || echo FAIL)" "$((SECONDS - t_start))" "$scope"
	done
}
trap record_result EXIT

# 0. Each kernel's debs and image (cached), and the packages.
declare -A vmlinuz_of
for n in "${names[@]}"; do
	STOCK=$n bash "$ROOT/scripts/kernels/stock.sh" >/dev/null || die "scripts/kernels/stock.sh failed for $n"
	vmlinuz_of[$n]=$(STOCK=$n bash "$ROOT/scripts/kernels/stock.sh" vmlinuz)
done
phase_start packages "the repository (scripts/pkg/repo.sh) and the version to upgrade to"
repo=$(bash "$ROOT/scripts/pkg/repo.sh") || die "scripts/pkg/repo.sh failed"
debver=$(sed -n 's/^Version: //p' "$repo/Packages")
[ "$(echo "$debver" | wc -l)" = 1 ] || die "$repo/Packages does not hold one version: '$debver'"
firstver=$debver nextver=$debver+upgrade1
rm -rf "$out/next" "$out/repo-next"
RUST_LOOP_DEB_OUT=$out/next RUST_LOOP_DEB_VERSION=$nextver bash "$ROOT/scripts/pkg/deb.sh" >/dev/null ||
	die "building rust-loop $nextver failed"
mkdir -p "$out/repo-next"
cp "$repo"/*.deb "$repo"/*.dsc "$repo"/*.tar.xz "$out/next/"*.deb "$out/next/"*.dsc "$out/next/"*.tar.xz "$out/repo-next/"
bash "$ROOT/scripts/pkg/repo.sh" --index "$out/repo-next" >/dev/null || die "indexing $out/repo-next failed"
phase_end

# 1. The root file system.
phase_start root "the $suite root $uroot"
if [ ! -f "$uroot/.rust-loop-debootstrapped" ]; then
	# A suite newer than the host's debootstrap knows (forky on bookworm) is made by sid's script.
	script=/usr/share/debootstrap/scripts/$suite
	[ -e "$script" ] || script=/usr/share/debootstrap/scripts/sid
	say "dkms-test: debootstrap --variant=minbase $suite from $STOCK_ARCHIVE (a few minutes)"
	rm -rf "$uroot"
	t0=$SECONDS
	debootstrap --variant=minbase --include=util-linux,e2fsprogs,fio,kmod,udev \
		"$suite" "$uroot" "$STOCK_ARCHIVE" "$script" >"$roots/user-root-$suite-debootstrap.log" 2>&1 ||
		die "debootstrap of $suite failed (log: $roots/user-root-$suite-debootstrap.log)"
	took[debootstrap]=$((SECONDS - t0))
	touch "$uroot/.rust-loop-debootstrapped"
fi
# The suite the kernel comes from, when it is not the root's own (trixie-backports).
if [ "$pkgs" != "$suite" ]; then
	echo "deb $STOCK_ARCHIVE $pkgs main" >"$uroot/etc/apt/sources.list.d/backports.list"
else
	rm -f "$uroot/etc/apt/sources.list.d/backports.list"
fi
# An archive whose suite's Release has expired (its Valid-Until passed: forky's and sid's as this
# machine's mirror serves them, a month old) is still used: apt would refuse it, and the test is
# about the package, not the mirror's freshness. Signatures are still checked.
cat >"$uroot/etc/apt/apt.conf.d/99rust-loop-test" <<'EOF'
// scripts/pkg/dkms-test.sh: a mirror serving an expired Release (Valid-Until past) is still used.
Acquire::Check-Valid-Until "false";
EOF
# A user's rust-loop-dkms from an earlier run goes first (the VM phase purges it; a failed run may not).
if uexec dpkg-query -W -f='${db:Status-Abbrev}' rust-loop-dkms 2>/dev/null | grep -q '^[^u]'; then
	say "dkms-test: purging the rust-loop-dkms an earlier run left in the root"
	uexec apt-get purge -y -q rust-loop-dkms >"$out/purge-earlier.log" 2>&1 ||
		die "purging an earlier rust-loop-dkms failed (log: $out/purge-earlier.log)"
fi
# The kernels: their packages at the matrix's versions (installed once, from the debs
# scripts/kernels/stock.sh fetched; apt takes what they depend on, the compiler among them, from the
# archive), and no other kernel's headers (DKMS builds for every kernel with headers).
kfiles=()
for n in "${names[@]}"; do
	k=${krel_of[$n]} a=${abi_of[$n]} v=${debver_of[$n]}
	for p in "linux-base-$k" "linux-modules-$k" "linux-headers-$k" "linux-headers-$a-common" "linux-kbuild-$a"; do
		[ "$(uexec dpkg-query -W -f='${db:Status-Abbrev}${Version}' "$p" 2>/dev/null)" != "ii $v" ] || continue
		f=$(compgen -G "$base/debs/$v/${p}_${v}_*.deb" | head -n 1) || die "no $p deb in $base/debs/$v: run scripts/kernels/stock.sh"
		kfiles+=("$f")
	done
done
others=$(uexec dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' 'linux-headers-*' 2>/dev/null |
	awk '$1 ~ /^.i/ && $2 !~ /-common$/ { print $2 }' | grep -vxF -f <(printf 'linux-headers-%s\n' "${krels[@]}") || true)
if [ -n "$others" ]; then
	say "dkms-test: removing the headers of the root's other kernels (${others//$'\n'/ })"
	# shellcheck disable=SC2086 # package names
	uexec apt-get purge -y -q $others >"$out/headers-remove.log" 2>&1 ||
		die "removing the other kernels' headers failed (log: $out/headers-remove.log)"
fi
if [ ${#kfiles[@]} -gt 0 ]; then
	say "dkms-test: installing the kernel packages in the root ($(printf '%s ' "${kfiles[@]##*/}"))"
	uexec apt-get update -q >"$out/apt-update.log" 2>&1 || die "apt-get update in $uroot failed (log: $out/apt-update.log)"
	rm -rf "$uroot/root/kernel-debs" && mkdir -p "$uroot/root/kernel-debs"
	cp "${kfiles[@]}" "$uroot/root/kernel-debs/"
	uexec apt-get install -y -q --no-install-recommends "${kfiles[@]/#*\//./kernel-debs/}" >"$out/kernel-install.log" 2>&1 ||
		die "installing the kernel packages in the root failed (log: $out/kernel-install.log)"
	rm -rf "$uroot/root/kernel-debs"
fi
for k in "${krels[@]}"; do
	[ -e "$uroot/lib/modules/$k/build/.config" ] || die "the root has no headers for $k (/lib/modules/$k/build)"
done
# What apt installed for an earlier run's package goes too, so that every run installs the
# toolchain and the kernel's source as a user's first install does (from the cached debs).
if [ -n "$(uexec apt-mark showauto 2>/dev/null)" ]; then
	say "dkms-test: removing the packages an earlier run's install pulled in (apt autoremove)"
	# (sudo, which dkms recommends, refuses to go without SUDO_FORCE_REMOVE.)
	uexec env SUDO_FORCE_REMOVE=yes apt-get autoremove --purge -y -q >"$out/autoremove.log" 2>&1 ||
		die "apt-get autoremove in the root failed (log: $out/autoremove.log)"
fi
rm -rf "$uroot/var/cache/rust-loop" "$uroot"/root/rust-loop-dkms_*.deb
# The repository, as a user adds it (README "Install").
rm -rf "$uroot/srv/rust-loop-repo" && mkdir -p "$uroot/srv/rust-loop-repo"
cp "$repo"/* "$uroot/srv/rust-loop-repo/"
echo "deb [trusted=yes] file:/srv/rust-loop-repo ./" >"$uroot/etc/apt/sources.list.d/rust-loop.list"
say "dkms-test: apt-get update in the root"
uexec apt-get update -q >"$out/apt-update.log" 2>&1 || die "apt-get update in $uroot failed (log: $out/apt-update.log)"
cand=$(uexec apt-cache policy rust-loop-dkms | sed -n 's/^ *Candidate: //p')
[ "$cand" = "$debver" ] || die "apt's candidate for rust-loop-dkms is '$cand', not the repository's $debver"
# Each kernel's linux-source of its headers' version, installed with the package (README
# "Install" has the user install it with the kernel; the package's dependency names the newest
# series first). If the archive has moved on, the pinned one (downloaded by scripts/kernels/stock.sh) is
# installed first, as a user keeping that kernel would.
declare -A srcver
for n in "${names[@]}"; do
	s=${source_of[$n]} v=${debver_of[$n]}
	[ -z "${srcver[$s]:-}" ] || [ "${srcver[$s]}" = "$v" ] ||
		die "the kernels under test want $s at two versions (${srcver[$s]}, $v): test them one at a time"
	srcver[$s]=$v
done
srcspecs=()
for s in "${!srcver[@]}"; do
	v=${srcver[$s]}
	srcspecs+=("$s=$v")
	cand=$(uexec apt-cache policy "$s" | sed -n 's/^ *Candidate: //p')
	if [ "$cand" != "$v" ]; then
		say "dkms-test: the archive's $s is '$cand', not $v: installing the pinned one"
		f=$(compgen -G "$base/debs/$v/${s}_${v}_*.deb" | head -n 1) || die "no $s deb in $base/debs/$v"
		cp "$f" "$uroot/root/" && uexec apt-get install -y -q "./$(basename "$f")" >"$out/source-install.log" 2>&1 ||
			die "installing the pinned $s failed (log: $out/source-install.log)"
	fi
done
say "dkms-test: downloading (only) what rust-loop-dkms and ${srcspecs[*]} need"
uexec apt-get install -y -q --download-only rust-loop-dkms "${srcspecs[@]}" >"$out/download.log" 2>&1 ||
	die "apt-get install --download-only rust-loop-dkms failed (log: $out/download.log)"
# Kernels rust_loop is not built for: headers (as DKMS looks for them) of a series this version
# does not support, with Rust, and of one without Rust. The postinst must say why each keeps
# loop.ko, and neither may fail the install.
fake_rust=6.12.99-rust-loop-test fake_norust=6.12.98-rust-loop-test-norust
for k in $fake_rust $fake_norust; do
	rm -rf "$uroot/lib/modules/$k" && mkdir -p "$uroot/lib/modules/$k/build/include"
	cp "$uroot/lib/modules/${krels[0]}/build/.config" "$uroot/lib/modules/$k/build/.config"
done
sed -i '/^CONFIG_RUST=/d' "$uroot/lib/modules/$fake_norust/build/.config"
phase_end

# What apt printed must show no download from an archive: checks LOG.
# (apt lists the local repository's package as "Get:1 file:/srv/...": only a fetch over the
# network counts.)
no_download() {
	! grep -Eq '^(Get|Err|Ign|Hit):[0-9]+ [a-z+]+://' "$1" || die "apt downloaded (see $1)"
	if grep -q '^Need to get' "$1"; then
		grep -q '^Need to get 0 B/' "$1" || die "apt needed to download (see $1)"
	fi
}
# The module DKMS installed for kernel $1, and modprobe's view of `loop` there.
check_module() {
	local k=$1 modfile show
	modfile=$(uexec modinfo -k "$k" -F filename rust_loop) || die "modinfo -k $k rust_loop failed in the root"
	echo "module ($k): $modfile"
	[[ $modfile == */updates/dkms/rust_loop.ko* ]] || die "rust_loop resolves to $modfile for $k, not DKMS's updates/dkms"
	show=$(uexec modprobe -S "$k" --show -v loop 2>&1 || true)
	echo "modprobe -n loop ($k): $show"
	[[ $show == *"--ignore-install rust_loop"* ]] || die "modprobe loop does not go through rust-loop.conf on $k: '$show'"
}

# DKMS_TEST_HANDOVER: the kernels whose Rust artefacts rust-loop-build finds made (CI: all but
# one, as regenerating them takes 2.5 minutes a kernel on 2 cores, 12 under load): scripts/kernels/stock.sh's tree
# for the kernel (the same `make rust/kernel.o` of the same linux-source with the same compilers,
# in the kernel's build root), copied to where rust-loop-build keeps its own with the stamp it
# writes (rustc and bindgen as the kernel's .config names them, the root's C compiler) and the
# source pruned as it prunes it. rust-loop-build then builds the module at once; the install
# log must not show a regeneration. The other kernels' artefacts are regenerated as on a
# user's machine.
handover=()
for n in ${DKMS_TEST_HANDOVER:-}; do
	[ -n "${krel_of[$n]:-}" ] || die "DKMS_TEST_HANDOVER=$n: not a kernel under test (${names[*]})"
	handover+=("$n")
done
for n in "${handover[@]}"; do
	# Made here if not yet (idempotent; waits for a run that is making it: CI's matrix runs
	# beside this test).
	STOCK=$n bash "$ROOT/scripts/kernels/stock.sh" >/dev/null || die "DKMS_TEST_HANDOVER=$n: scripts/kernels/stock.sh failed"
	(
		STOCK=$n
		stock_paths
		k=$STOCK_KREL hdr=$uroot/usr/src/linux-headers-$STOCK_KREL
		kb=$STOCK_ROOT$STOCK_KBUILD_IN src=$STOCK_ROOT$STOCK_SRC_IN
		[ -f "$kb/rust/libkernel.rmeta" ] && [ -f "$src/Makefile" ] ||
			die "DKMS_TEST_HANDOVER=$n: scripts/kernels/stock.sh has not made $kb (run STOCK=$n scripts/kernels/stock.sh)"
		[ -f "$hdr/.config" ] || die "DKMS_TEST_HANDOVER=$n: no $hdr/.config in the root"
		cfgv() { sed -n "s/^$1=\"\(.*\)\"\$/\1/p" "$hdr/.config"; }
		cache=$uroot/var/cache/rust-loop/$k
		say "dkms-test: handing over scripts/kernels/stock.sh's Rust artefacts for $k to rust-loop-build ($cache)"
		rm -rf "$cache" && mkdir -p "$cache/src"
		# The source as rust-loop-build leaves it after its build (pruned: the headers, the build
		# scripts, rust/, the kernel's own arch/).
		keep=()
		for a in "$hdr"/arch/*/; do keep+=(! -name "$(basename "$a")"); done
		tar -C "$src" --exclude=./Documentation --exclude=./LICENSES --exclude=./drivers --exclude=./fs \
			--exclude=./net --exclude=./samples --exclude=./sound --exclude=./tools -cf - . |
			tar -C "$cache/src" -xf - || die "copying $src failed"
		find "$cache/src/arch" -mindepth 1 -maxdepth 1 "${keep[@]}" -exec rm -rf {} +
		echo "$STOCK_DEBVER pruned" >"$cache/src/.rust-loop-extracted"
		cp -a "$kb" "$cache/kbuild"
		# Its paths, as rust-loop-build's own build tree has them.
		in_src=/var/cache/rust-loop/$k/src in_kb=/var/cache/rust-loop/$k/kbuild
		ln -sfn "$in_src" "$cache/kbuild/source"
		sed -i -e "s|$STOCK_KBUILD_IN|$in_kb|g" -e "s|$STOCK_SRC_IN|$in_src|g" "$cache/kbuild/Makefile"
		# The C compiler as rust-loop-build sees it: the root's (its Debian revision may differ
		# from the kernel's: packaging/dkms/toolchain.sh), else the one the .config names.
		want_cc=$(cfgv CONFIG_CC_VERSION_TEXT)
		have_cc=$(uexec "${want_cc%% *}" --version 2>/dev/null | head -n 1 || true)
		echo "headers=linux-headers-$k/$STOCK_DEBVER source=$STOCK_DEBVER rustc=$(cfgv CONFIG_RUSTC_VERSION_TEXT) bindgen=$(cfgv CONFIG_BINDGEN_VERSION_TEXT) cc=${have_cc:-$want_cc}" \
			>"$cache/kbuild/.rust-loop-built"
	) || exit 1
done

# 2. The install, offline, as a chroot on the host.
phase_start install "apt install rust-loop-dkms $debver from the repository (offline, chroot; DKMS builds rust_loop for ${krels[*]})"
status=0
DKMS_TEST_NONET=1 uexec apt-get install -y rust-loop-dkms "${srcspecs[@]}" 2>&1 | tee "$out/install.log" || status=$?
[ "$status" = 0 ] || die "apt install rust-loop-dkms failed (status $status; log: $out/install.log)"
no_download "$out/install.log"
grep -q "^Get:[0-9]* file:/srv/rust-loop-repo ./ rust-loop-dkms $debver" "$out/install.log" ||
	die "apt did not install rust-loop-dkms $debver from the repository (see $out/install.log)"
# The source goes with the package at the next run's clean-up (apt autoremove), as what the
# package pulled in does.
uexec apt-mark auto "${!srcver[@]}" >/dev/null || die "apt-mark auto ${!srcver[*]} failed"
for k in "${krels[@]}"; do
	dkms_status=$(uexec dkms status -m rust-loop -v "$debver" -k "$k")
	echo "dkms status: $dkms_status"
	[[ $dkms_status == *"rust-loop/$debver, $k, $dkms_arch: installed"* ]] ||
		die "dkms status does not say rust-loop/$debver installed for $k: '$dkms_status'"
	grep -qF "rust-loop-dkms: $k: rust_loop installed, 'modprobe loop' loads it" "$out/install.log" ||
		die "the postinst did not say rust_loop is installed for $k (see $out/install.log)"
done
grep -qF "rust-loop-dkms: $fake_rust: rust_loop not built, 'modprobe loop' loads loop.ko: kernel $fake_rust is not of a series this rust_loop supports (Linux " "$out/install.log" ||
	die "the postinst did not say why rust_loop is not built for $fake_rust (another series; see $out/install.log)"
grep -qF "rust-loop-dkms: $fake_norust: rust_loop not built, 'modprobe loop' loads loop.ko: kernel $fake_norust was built without Rust support" "$out/install.log" ||
	die "the postinst did not say why rust_loop is not built for $fake_norust (no Rust; see $out/install.log)"
rm -rf "$uroot/lib/modules/$fake_rust" "$uroot/lib/modules/$fake_norust"
for k in "${krels[@]}"; do check_module "$k"; done
# DKMS's log of each build (rust-loop-build's output): a handed-over kernel's shows no
# regeneration; every other kernel's shows the package's own, from the source it extracted.
for n in "${names[@]}"; do
	k=${krel_of[$n]}
	makelog=$uroot/var/lib/dkms/rust-loop/$debver/$k/$dkms_arch/log/make.log
	cp "$makelog" "$out/install-make-$k.log" 2>/dev/null || die "no DKMS build log $makelog after the install"
	if [[ " ${handover[*]} " == *" $n "* ]]; then
		! grep -q "regenerating the Rust artefacts for $k" "$makelog" ||
			die "rust-loop-build regenerated the handed-over artefacts of $k (their stamp or paths differ; see $out/install-make-$k.log)"
	else
		grep -q "extracting .*linux-source-.* into /var/cache/rust-loop/$k/src" "$makelog" &&
			grep -q "regenerating the Rust artefacts for $k" "$makelog" ||
			die "rust-loop-build did not extract linux-source and regenerate the Rust artefacts for $k (see $out/install-make-$k.log)"
	fi
done
phase_end

# 3. The upgrade, offline: the repository gains a newer version; apt update and apt upgrade (both
# with that source alone: the archive's lists stay as the root phase fetched them, unused).
phase_start upgrade "apt upgrade to rust-loop-dkms $nextver from the repository (offline; DKMS rebuilds rust_loop)"
rm -rf "$uroot/srv/rust-loop-repo" && mkdir -p "$uroot/srv/rust-loop-repo"
cp "$out/repo-next"/* "$uroot/srv/rust-loop-repo/"
only_repo=(-o Dir::Etc::SourceList=/etc/apt/sources.list.d/rust-loop.list -o Dir::Etc::SourceParts=-
	-o APT::Get::List-Cleanup=0)
DKMS_TEST_NONET=1 uexec apt-get "${only_repo[@]}" update -q >"$out/upgrade-update.log" 2>&1 ||
	die "apt-get update of the repository failed (log: $out/upgrade-update.log)"
upgradable=$(DKMS_TEST_NONET=1 uexec apt-get "${only_repo[@]}" -s upgrade | sed -n 's/^Inst \([^ ]*\) .*/\1/p' | tr '\n' ' ')
[ "$upgradable" = "rust-loop-dkms " ] || die "apt upgrade would upgrade '$upgradable', not rust-loop-dkms alone"
declare -A mod_before
for k in "${krels[@]}"; do
	mod_before[$k]=$(compgen -G "$uroot/lib/modules/$k/updates/dkms/rust_loop.ko*" | head -n 1)
done
touch "$out/upgrade.stamp"
sleep 1
status=0
DKMS_TEST_NONET=1 uexec apt-get "${only_repo[@]}" upgrade -y 2>&1 | tee "$out/upgrade.log" || status=$?
[ "$status" = 0 ] || die "apt upgrade failed (status $status; log: $out/upgrade.log)"
no_download "$out/upgrade.log"
dkms_status=$(uexec dkms status -m rust-loop)
echo "dkms status: $dkms_status"
[[ $dkms_status != *"rust-loop/$debver,"* ]] && [[ $dkms_status != *"rust-loop/$debver:"* ]] ||
	die "dkms still knows rust-loop/$debver after the upgrade: '$dkms_status'"
[ ! -e "$uroot/usr/src/rust-loop-$debver" ] || die "the upgrade left /usr/src/rust-loop-$debver behind"
for k in "${krels[@]}"; do
	[[ $dkms_status == *"rust-loop/$nextver, $k, $dkms_arch: installed"* ]] ||
		die "dkms status does not say rust-loop/$nextver installed for $k: '$dkms_status'"
	mod_after=$(compgen -G "$uroot/lib/modules/$k/updates/dkms/rust_loop.ko*" | head -n 1) ||
		die "no rust_loop.ko in updates/dkms for $k after the upgrade"
	[ "$mod_after" -nt "$out/upgrade.stamp" ] ||
		die "$mod_after is not newer than the upgrade (it was ${mod_before[$k]} before): DKMS did not install a rebuilt module"
	# DKMS's log of the build (rust-loop-build's output).
	makelog=$uroot/var/lib/dkms/rust-loop/$nextver/$k/$dkms_arch/log/make.log
	cp "$makelog" "$out/upgrade-make-$k.log" 2>/dev/null || die "no DKMS build log $makelog after the upgrade"
	grep -q "building rust_loop.ko for $k" "$makelog" ||
		die "DKMS's build log shows no build of rust_loop.ko for $k (see $out/upgrade-make-$k.log)"
	! grep -q 'regenerating the Rust artefacts' "$makelog" ||
		die "the upgrade regenerated the Rust artefacts for $k instead of reusing /var/cache/rust-loop (see $out/upgrade-make-$k.log)"
	check_module "$k"
done
debver=$nextver
phase_end

# 4. The VM: boot the root with each kernel; checks, purge, loop.ko.
phase_start vm "booting the root with ${krels[*]} (virtme-ng, TCG): modprobe loop, losetup, mkfs, fio; purge; loop.ko back"
cat >"$uroot/root/dkms-test-guest.sh" <<'GUEST'
#!/bin/bash
set -uo pipefail
krel=$1
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
# A detach's last close and a load's new devices send uevents, for which udev opens the devices
# (blkid): until it has closed them the module is in use, as loop.ko would be. So: wait for
# udev, then up to 30 s.
unload() {
	udevadm settle --timeout=60 2>/dev/null || true
	for i in $(seq 150); do loaded rust_loop || break; modprobe -r loop 2>/dev/null && break; sleep 0.2; done
	! loaded rust_loop || fail "modprobe -r loop did not unload rust_loop: $(modprobe -r loop 2>&1)" \
		"(refcnt $(cat /sys/module/rust_loop/refcnt 2>/dev/null); holders: $(ls /sys/module/rust_loop/holders 2>/dev/null))"
}
unload
echo "rust_loop unloaded"

step "autoloading: modprobe char-major-10-237 (what opening /dev/loop-control asks for)"
modprobe char-major-10-237 || fail "modprobe char-major-10-237 failed"
loaded rust_loop || fail "the loop-control alias did not load rust_loop"
! loaded loop || fail "the loop-control alias loaded loop.ko"
echo "rust_loop loaded, loop.ko not loaded"
unload

echo
echo "PASS"
GUEST
# After the purge (made on the host: in the guest, DKMS's depmod over the kernel's 4000
# compressed modules takes 5-10 minutes under TCG), a second boot: loop.ko is back.
cat >"$uroot/root/dkms-test-guest-purged.sh" <<'GUEST'
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
GUEST
chmod +x "$uroot/root/dkms-test-guest.sh" "$uroot/root/dkms-test-guest-purged.sh"
# run_vm NAME LOG SCRIPT [ARG]: boots the root with kernel NAME's image and runs SCRIPT in it;
# dies unless it exits 0. The root reaches the guest over 9p, or over virtio-fs when the kernel
# has no 9p (the cloud flavour; virtiofsd from the build root: scripts/kernels/stock.sh virtiofsd). The
# status travels through a file in the root (the console may lose it); vng's output goes through
# a pipe (it reopens its stdout with O_TRUNC, see scripts/vm/vm.sh).
run_vm() {
	local n=$1 log=$2 script=$3 arg=${4:-} status=0 gstatus path=$PATH
	local k=${krel_of[$1]}
	local args=(--run "${vmlinuz_of[$n]}" --root "$uroot" --rw --cpus "${VM_CPUS:-2}"
		--memory "${VM_MEM:-2G}" --cwd "$uroot/root" --disable-kvm)
	if grep -qE '^CONFIG_NET_9P=[ym]' "$uroot/lib/modules/$k/build/.config"; then
		args+=(--force-9p)
	else
		path=$(STOCK=$n bash "$ROOT/scripts/kernels/stock.sh" virtiofsd):$PATH || die "no virtiofsd for $k (scripts/kernels/stock.sh virtiofsd)"
		say "dkms-test: $k has no 9p: the root goes to the guest over virtio-fs"
	fi
	rm -f "$uroot/root/dkms-test-guest.status"
	(cd "$uroot/root" && PATH=$path timeout "${DKMS_TEST_VM_TIMEOUT:-900}" vng "${args[@]}" \
		--exec "bash /root/$script $arg; echo \$? > /root/dkms-test-guest.status" </dev/null 2>&1 |
		cat) | tee "$log" || status=$?
	[ "$status" = 0 ] || die "the VM ($k) failed or timed out (status $status; log: $log)"
	gstatus=$(cat "$uroot/root/dkms-test-guest.status" 2>/dev/null || true)
	[ -n "$gstatus" ] || die "the guest ($k) did not report a status (boot failure or crash; log: $log)"
	[ "$gstatus" = 0 ] || die "the checks in the VM ($k) failed (status $gstatus; log: $log)"
}
for n in "${names[@]}"; do
	run_vm "$n" "$out/vm-$n.log" dkms-test-guest.sh "${krel_of[$n]}"
done

say "dkms-test: apt purge rust-loop-dkms (in the root, offline)"
DKMS_TEST_NONET=1 uexec apt-get purge -y rust-loop-dkms >"$out/purge.log" 2>&1 ||
	die "apt purge rust-loop-dkms failed (log: $out/purge.log)"
[ -z "$(uexec dkms status rust-loop 2>/dev/null)" ] || die "dkms still knows rust-loop after the purge"
[ ! -e "$uroot/usr/lib/modprobe.d/rust-loop.conf" ] || die "the purge left rust-loop.conf behind"
[ ! -e "$uroot/var/cache/rust-loop" ] || die "the purge left $uroot/var/cache/rust-loop behind"
[ ! -e "$uroot/usr/src/rust-loop-$debver" ] && [ ! -e "$uroot/var/lib/dkms/rust-loop" ] ||
	die "the purge left rust-loop's source or DKMS tree behind"
for k in "${krels[@]}"; do
	! compgen -G "$uroot/lib/modules/$k/updates/dkms/rust_loop.ko*" >/dev/null ||
		die "the purge left rust_loop.ko in $k's updates/dkms"
done
# loop.ko back: on the first kernel (what the purge changes is the same for every kernel).
run_vm "${names[0]}" "$out/vm-purged.log" dkms-test-guest-purged.sh
phase_end

say "dkms-test: PASS (rust-loop-dkms $firstver from the repository, upgraded to $nextver, on ${krels[*]})"
took[total]=$((SECONDS - t_start))
for p in packages debootstrap root install upgrade vm total; do
	[ -z "${took[$p]:-}" ] || printf '  %-12s %4d s\n' "$p" "${took[$p]}"
done | tee "$out/timings.txt"
