#!/usr/bin/env bash
# Host-side checks of the toolchain rule (packaging/dkms/toolchain.sh), which scripts/kernels/stock.sh and
# the package's rust-loop-build both source: rustc and bindgen exactly as the kernel's .config
# names them, the C compiler of the same upstream version (a revision that differs is said in one
# line and accepted), anything else refused. Each outcome on the rule itself, then (as root) on
# rust-loop-build --check with a fabricated kernel's headers and compilers.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"
# shellcheck source=../../packaging/dkms/toolchain.sh
source packaging/dkms/toolchain.sh

rustc='rustc 1.97.1 (1f1d2a4e3 2026-08-20) (built from a source tarball)'
bindgen='bindgen 0.72.1'
cc3='x86_64-linux-gnu-gcc-16 (Debian 16.2.0-3) 16.2.0'
cc4='x86_64-linux-gnu-gcc-16 (Debian 16.2.0-4) 16.2.0'
cc_next='x86_64-linux-gnu-gcc-16 (Debian 16.3.0-1) 16.3.0'
# re TEXT: TEXT as an extended regular expression matching itself.
re() { sed 's/[][\.*^$()+?{}|]/\\&/g' <<<"$1"; }

# expect NAME STATUS REGEX WANT_RUSTC HAVE_RUSTC WANT_BINDGEN HAVE_BINDGEN WANT_CC HAVE_CC: the
# rule returns STATUS and its output matches REGEX (an empty REGEX: no output).
expect() {
	local name=$1 want=$2 rx=$3 out rc=0
	shift 3
	out=$(rust_loop_toolchain_check "$@") || rc=$?
	[ "$rc" = "$want" ] || fail "$name: status $rc, expected $want (output: $out)"
	if [ -z "$rx" ]; then
		[ -z "$out" ] || fail "$name: expected no output, got: $out"
	else
		echo "$out" | grep -qE "$rx" || fail "$name: output does not match /$rx/: $out"
	fi
}
expect "equal" 0 "" "$rustc" "$rustc" "$bindgen" "$bindgen" "$cc3" "$cc3"
expect "revision differs" 0 "^note: the C compiler differs from the kernel's only in its distribution revision \(kernel: '$(re "$cc3")', installed: '$(re "$cc4")'\): accepted$" \
	"$rustc" "$rustc" "$bindgen" "$bindgen" "$cc3" "$cc4"
[ "$(rust_loop_toolchain_check "$rustc" "$rustc" "$bindgen" "$bindgen" "$cc3" "$cc4" | wc -l)" = 1 ] ||
	fail "revision differs: not said in one line"
expect "version differs" 1 "^  gcc: .*'$(re "$cc3")'.*'$(re "$cc_next")'.*same upstream version" \
	"$rustc" "$rustc" "$bindgen" "$bindgen" "$cc3" "$cc_next"
expect "another compiler program" 1 "^  gcc: " \
	"$rustc" "$rustc" "$bindgen" "$bindgen" "$cc3" "x86_64-linux-gnu-gcc-15 (Debian 16.2.0-3) 16.2.0"
expect "no compiler" 1 "^  gcc: .*installed: 'none'" "$rustc" "$rustc" "$bindgen" "$bindgen" "$cc3" ""
expect "rustc differs" 1 "^  rustc: .*'$(re "$rustc")'.*'rustc 1\.97\.0 .*must be the same" \
	"$rustc" "rustc 1.97.0 (4d91de4e4 2026-07-10) (built from a source tarball)" "$bindgen" "$bindgen" "$cc3" "$cc3"
expect "rustc's build differs" 1 "^  rustc: " \
	"$rustc" "rustc 1.97.1 (1f1d2a4e3 2026-08-20)" "$bindgen" "$bindgen" "$cc3" "$cc3"
expect "bindgen differs" 1 "^  bindgen: .*'bindgen 0.72.1'.*'bindgen 0.71.1'" \
	"$rustc" "$rustc" "$bindgen" "bindgen 0.71.1" "$cc3" "$cc3"
# A refusal lists every compiler refused, and no note beside it.
out=$(rust_loop_toolchain_check "$rustc" "rustc 1.85.1" "$bindgen" "bindgen 0.71.1" "$cc3" "$cc4") &&
	fail "rustc and bindgen differ: accepted"
[ "$(echo "$out" | wc -l)" = 2 ] || fail "rustc and bindgen differ: expected 2 lines, got: $out"
expect "no .config values" 1 "names no rustc" "" "$rustc" "$bindgen" "$bindgen" "$cc3" "$cc3"
[ "$(rust_loop_cc_upstream "Debian clang version 19.1.7 (3+b1)")" = "Debian clang version 19.1.7" ] ||
	fail "clang's version text: $(rust_loop_cc_upstream "Debian clang version 19.1.7 (3+b1)")"

# One rule: both consumers call it, neither compares versions itself, and the package ships it
# where rust-loop-build looks.
for f in scripts/kernels/stock.sh packaging/dkms/rust-loop-build; do
	grep -q 'rust_loop_toolchain_check "\$want_rustc" "\$have_rustc"' "$f" || fail "$f does not apply packaging/dkms/toolchain.sh"
	! grep -nE '"\$\{?(have|want)_(rustc|bindgen|cc)\}?" *!?= *"' "$f" || fail "$f compares toolchain versions itself"
done
grep -qx 'packaging/dkms/toolchain.sh usr/share/rust-loop/' debian/rust-loop-dkms.install ||
	fail "the package does not install packaging/dkms/toolchain.sh in /usr/share/rust-loop"
grep -q '/usr/share/rust-loop/toolchain.sh' packaging/dkms/rust-loop-build ||
	fail "rust-loop-build does not look for the rule where the package installs it"

# rust-loop-build --check as DKMS runs it, on a fabricated kernel (its headers' .config in a
# private /usr/src) with fabricated compilers in PATH: past the toolchain, it stops at dpkg (the
# headers belong to no installed package), which shows the toolchain was accepted.
if [ "$(id -u)" != 0 ] || ! unshare -m true 2>/dev/null; then
	echo "rust-loop-build --check not tried: needs root (a private mount of /usr/src)"
	exit "$failed"
fi
kver=7.3.4+deb13-amd64
mkdir -p "$tmp/usr-src/linux-headers-$kver" "$tmp/bin" "$tmp/libexec"
cat >"$tmp/usr-src/linux-headers-$kver/.config" <<EOF
CONFIG_CC_VERSION_TEXT="$cc3"
CONFIG_RUST=y
CONFIG_RUSTC_VERSION_TEXT="$rustc"
CONFIG_BINDGEN_VERSION_TEXT="$bindgen"
EOF
sed 's/@KERNEL_SERIES@/7.2 7.3/' packaging/dkms/rust-loop-build >"$tmp/libexec/rust-loop-build"
cp packaging/dkms/toolchain.sh "$tmp/libexec/"
# check HAVE_RUSTC HAVE_BINDGEN HAVE_CC: rust-loop-build --check's output.
check() {
	printf '#!/bin/sh\necho "%s"\n' "$1" >"$tmp/bin/rustc"
	printf '#!/bin/sh\necho "%s"\n' "$2" >"$tmp/bin/bindgen"
	printf '#!/bin/sh\necho "%s"\n' "$3" >"$tmp/bin/x86_64-linux-gnu-gcc-16"
	chmod +x "$tmp/bin"/*
	unshare -m bash -c 'mount --bind "$1/usr-src" /usr/src && PATH=$1/bin:$PATH bash "$1/libexec/rust-loop-build" --check "$2"' \
		_ "$tmp" "$kver" 2>&1 || true
}
nopkg="belongs to no installed package"
out=$(check "$rustc" "$bindgen" "$cc3")
echo "$out" | grep -q "$nopkg" && ! echo "$out" | grep -q "note:" || fail "rust-loop-build, equal: $out"
out=$(check "$rustc" "$bindgen" "$cc4")
echo "$out" | grep -q "^rust-loop-build: note: the C compiler differs from the kernel's only in its distribution revision" &&
	echo "$out" | grep -q "$nopkg" || fail "rust-loop-build, revision differs: $out"
out=$(check "$rustc" "$bindgen" "$cc_next")
echo "$out" | grep -q "^rust-loop-build: error: the installed toolchain is not the one kernel $kver was built with" &&
	echo "$out" | grep -q "^  gcc: " && ! echo "$out" | grep -q "$nopkg" || fail "rust-loop-build, version differs: $out"
out=$(check "rustc 1.97.0 (4d91de4e4 2026-07-10)" "$bindgen" "$cc3")
echo "$out" | grep -q "^  rustc: " && ! echo "$out" | grep -q "$nopkg" || fail "rust-loop-build, rustc differs: $out"
out=$(check "$rustc" "bindgen 0.71.1" "$cc4")
echo "$out" | grep -q "^  bindgen: " && ! echo "$out" | grep -qE "$nopkg|note:" || fail "rust-loop-build, bindgen differs: $out"

exit "$failed"
