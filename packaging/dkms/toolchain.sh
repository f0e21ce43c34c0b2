# shellcheck shell=bash
# SPDX-License-Identifier: GPL-2.0
# rust-loop-dkms: the toolchain rule, the one place it is written. Sourced by the package's build
# command (rust-loop-build, from /usr/share/rust-loop/toolchain.sh) and by the project's
# scripts/kernels/stock.sh (from packaging/dkms/toolchain.sh).
#
# A module is built against a kernel with the compilers that kernel was built with, as its
# headers' .config names them:
#  - rustc and bindgen exactly (CONFIG_RUSTC_VERSION_TEXT, CONFIG_BINDGEN_VERSION_TEXT): the
#    Rust metadata the module is compiled against and the generated bindings depend on them;
#  - the C compiler of the same program and upstream version (CONFIG_CC_VERSION_TEXT): the
#    distribution's revision in parentheses may differ (gcc-16 16.2.0-4 for a kernel built with
#    16.2.0-3; Kbuild itself only warns when the C compiler differs), which is said in one line.
#
# rust_loop_toolchain_check WANT_RUSTC HAVE_RUSTC WANT_BINDGEN HAVE_BINDGEN WANT_CC HAVE_CC
#   Returns 0 when the installed toolchain (HAVE_*) may build for the kernel (WANT_*), printing
#   on stdout one "note: ..." line when only the C compiler's revision differs; returns 1 when it
#   may not, printing one line per refused compiler on stdout.

# rust_loop_cc_upstream TEXT: a C compiler's version text without its parenthesized
# distribution part: "x86_64-linux-gnu-gcc-16 (Debian 16.2.0-3) 16.2.0" -> "x86_64-linux-gnu-gcc-16
# 16.2.0"; "Debian clang version 19.1.7 (3+b1)" -> "Debian clang version 19.1.7".
rust_loop_cc_upstream() {
	local text=$1 words
	while [[ $text =~ ^(.*)\([^\(\)]*\)(.*)$ ]]; do
		text="${BASH_REMATCH[1]} ${BASH_REMATCH[2]}"
	done
	# Whitespace collapsed, none at either end.
	read -r -a words <<<"$text"
	echo "${words[*]}"
}

rust_loop_toolchain_check() {
	local want_rustc=$1 have_rustc=$2 want_bindgen=$3 have_bindgen=$4 want_cc=$5 have_cc=$6
	local refused=0
	if [ -z "$want_rustc" ] || [ -z "$want_bindgen" ] || [ -z "$want_cc" ]; then
		echo "  the kernel's .config names no rustc, bindgen or C compiler (CONFIG_RUSTC_VERSION_TEXT, CONFIG_BINDGEN_VERSION_TEXT, CONFIG_CC_VERSION_TEXT)"
		return 1
	fi
	if [ "$have_rustc" != "$want_rustc" ]; then
		echo "  rustc:   kernel built with '$want_rustc', installed: '${have_rustc:-none}' (must be the same)"
		refused=1
	fi
	if [ "$have_bindgen" != "$want_bindgen" ]; then
		echo "  bindgen: kernel built with '$want_bindgen', installed: '${have_bindgen:-none}' (must be the same)"
		refused=1
	fi
	if [ "$have_cc" != "$want_cc" ]; then
		if [ -n "$have_cc" ] && [ "$(rust_loop_cc_upstream "$have_cc")" = "$(rust_loop_cc_upstream "$want_cc")" ]; then
			[ $refused = 1 ] ||
				echo "note: the C compiler differs from the kernel's only in its distribution revision (kernel: '$want_cc', installed: '$have_cc'): accepted"
		else
			echo "  gcc:     kernel built with '$want_cc', installed: '${have_cc:-none}' (must be the same upstream version)"
			refused=1
		fi
	fi
	return $refused
}
