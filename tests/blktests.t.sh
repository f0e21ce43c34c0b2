# shellcheck shell=bash
# blktests' loop group (blktests at its pinned commit, config/third_party.conf; built by
# scripts/third_party/blktests.sh into tests/blktests.tar), run as a blktests user runs it against
# the driver under test: `modprobe loop`, which blktests runs before each test, loads rust_loop
# (or loop.ko with TEST_DRIVER=loop) through a modprobe.d install directive (README "From source, without the package").
#
# Two things of the guest's are set up as on a Debian machine with systemd: udevd is drained
# before each test (tests/lib.sh: udev_drain; loop/006 leaves hundreds of events behind, and
# loop/009's `udevadm monitor` listens for 5 seconds only, which udevd's working through them
# made too short, with either driver), and `systemctl` is answered for the one unit the group
# uses, systemd-udevd (is-active, stop, start, mask, unmask: loop/010 and loop/013 stop udevd;
# the guest's init is not systemd). loop/012 needs systemd 259 and reports "not run".
#
#   BLKTESTS_TIMEOUT  seconds of the group's timed tests (loop/006, loop/010; blktests' TIMEOUT,
#                     default 30)

# The systemctl of the group: systemd-udevd's unit only; anything else goes to the real one.
blktests_systemctl() {
	local bin=$1
	mkdir -p "$bin"
	cat >"$bin/systemctl" <<-SH
		#!/bin/bash
		# systemctl for blktests in a guest without systemd: the systemd-udevd unit only.
		source "$ROOT/tests/lib.sh" >/dev/null
		args=("\$@") unit= verb=
		for a in "\$@"; do
			case \$a in --quiet|-q) ;; systemd-udevd|systemd-udevd.service) unit=udevd ;; -*) ;; *) [ -n "\$verb" ] || verb=\$a ;; esac
		done
		if [ "\$unit" != udevd ]; then
			PATH=\${PATH#"$bin":} exec systemctl "\${args[@]}"
		fi
		case \$verb in
		is-active) pgrep -x systemd-udevd >/dev/null ;;
		stop) udev_stop ;;
		start) udev_restart; pgrep -x systemd-udevd >/dev/null ;;
		mask|unmask) ;;
		*) echo "systemctl \$verb systemd-udevd: not answered here" >&2; exit 1 ;;
		esac
	SH
	chmod +x "$bin/systemctl"
}

t_blktests_loop_group() {
	[ -f "$ROOT/tests/blktests.tar" ] ||
		skip "no blktests: $(head -n 1 "$ROOT/tests/blktests.missing" 2>/dev/null || echo 'run scripts/check.sh')"
	local bt=$T/blktests bin=$T/blktests-bin conf=/run/modprobe.d/rust-loop-tests.conf t out
	rm -rf "$bt" "$bin" && mkdir -p "$bt" /run/modprobe.d
	tar -xf "$ROOT/tests/blktests.tar" -C "$bt" || fail "unpacking tests/blktests.tar failed"
	blktests_systemctl "$bin"
	unload_loop_drivers
	[ ! -f "$conf" ] || cp "$conf" "$T/modprobe.conf.saved"
	# shellcheck disable=SC2064
	trap "rm -f '$conf'; [ ! -f '$T/modprobe.conf.saved' ] || mv '$T/modprobe.conf.saved' '$conf'; udev_restart; unload_loop_drivers" EXIT
	if is_rust; then
		printf '%s\n' "install loop grep -q '^rust_loop ' /proc/modules || /sbin/insmod $KO \$CMDLINE_OPTS" \
			"remove loop /sbin/rmmod rust_loop" >"$conf"
	else
		rm -f "$conf"
	fi
	echo 'TEST_DEVS=()' >"$bt/config"
	: >"$T/blktests.log"
	local loads
	loads=$(dmesg | grep -c 'rust_loop: module loaded' || true)
	for t in $(cd "$bt/tests/loop" && ls | grep -E '^[0-9]+$'); do
		udev_drain
		(cd "$bt" && PATH="$bin:$PATH" TIMEOUT=${BLKTESTS_TIMEOUT:-30} ./check "loop/$t") >>"$T/blktests.log" 2>&1 || true
	done
	out=$(grep -E '^loop/[0-9]+ .*\[(passed|failed|not run)\]' "$T/blktests.log" | sed 's/  */ /g' || true)
	echo "$out" | sed 's/^/  # /'
	# blktests loads the driver before each test and unloads it after: each load is in the log.
	if is_rust; then
		[ "$(dmesg | grep -c 'rust_loop: module loaded' || true)" -gt "$loads" ] ||
			fail "blktests never loaded rust_loop (modprobe.d: $(cat "$conf" 2>/dev/null))"
	fi
	[ "$(echo "$out" | grep -c . || true)" = "$(cd "$bt/tests/loop" && ls | grep -cE '^[0-9]+$')" ] ||
		fail "not every test of the group reported a result: $(tail -n 20 "$T/blktests.log")"
	if echo "$out" | grep -q '\[failed\]'; then
		for t in $(echo "$out" | sed -n 's/^\(loop\/[0-9]*\) .*\[failed\]/\1/p'); do
			echo "--- $t"
			head -n 30 "$bt/results/nodev/$t.out.bad" 2>/dev/null || true
			diff "$bt/tests/$t.out" "$bt/results/nodev/$t.out.bad" 2>/dev/null | head -n 20 || true
		done
		fail "blktests: $(echo "$out" | grep -c '\[failed\]') of the loop group failed"
	fi
	echo "$out" | grep -q '\[passed\]' || fail "blktests: no test of the loop group passed"
}
timeout_t_blktests_loop_group() { echo 1500; }
