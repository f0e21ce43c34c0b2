# shellcheck shell=bash
# Module unload/reload cycles with devices created, used and removed: nothing is left behind.
#
#   RELOAD_CYCLES   cycles (default 100)
#
# On the debug kernel the end-of-run kmemleak scan (tests/run.sh) covers these cycles too.

timeout_t_module_reload_cycles() { echo 900; }

# meminfo_kb FIELD: a /proc/meminfo value in KiB.
meminfo_kb() { awk -v f="$1:" '$1 == f {print $2}' /proc/meminfo; }

# Unload/reload RELOAD_CYCLES times (tests/module_cycles.py: load with max_loop=0, create two
# devices through /dev/loop-control, bind one, write and read back, unloading refused with
# EWOULDBLOCK while a device is open, detach, remove both, unload): each step succeeds;
# afterwards no loop device, worker thread, sysfs entry or block major is left, and
# unreclaimable slab and vmalloc use have not grown with the cycles.
t_module_reload_cycles() {
	local cycles=${RELOAD_CYCLES:-100} mod load
	mod=$(loop_module)
	if is_rust; then load="insmod $KO max_loop=0"; else load="modprobe loop max_loop=0"; fi
	# kmod's rmmod says "in use" for a module pinned by an open device (the errno,
	# EWOULDBLOCK, is checked in the cycles).
	load_rust_loop
	exec 3</dev/loop0
	rmmod "$mod" 2>"$T/rmmod.err" && fail "rmmod with loop0 open succeeded"
	grep -q 'in use' "$T/rmmod.err" || fail "rmmod with loop0 open: $(cat "$T/rmmod.err")"
	exec 3<&-
	unload_loop_drivers
	mkimg "$T/img" 4M
	# Warm-up: first-time allocations (caches, sysfs names) are not leaks.
	python3 "$ROOT/tests/module_cycles.py" "$load" "$mod" 3 "$T/img" || fail "warm-up cycles failed"
	sync
	echo 3 >/proc/sys/vm/drop_caches
	local slab0 vmalloc0 slab1 vmalloc1
	slab0=$(meminfo_kb SUnreclaim)
	vmalloc0=$(meminfo_kb VmallocUsed)
	python3 "$ROOT/tests/module_cycles.py" "$load" "$mod" "$cycles" "$T/img" >"$T/cycles.out" ||
		fail "reload cycles failed"
	log "$(cat "$T/cycles.out")"
	udevadm settle -t 30 2>/dev/null || true
	sync
	echo 3 >/proc/sys/vm/drop_caches
	slab1=$(meminfo_kb SUnreclaim)
	vmalloc1=$(meminfo_kb VmallocUsed)
	log "SUnreclaim ${slab0} -> ${slab1} KiB, VmallocUsed ${vmalloc0} -> ${vmalloc1} KiB"
	[ ! -d "/sys/module/$mod" ] || fail "module still loaded"
	[ -z "$(ls /sys/block | grep '^loop' || true)" ] || fail "loop devices left: $(ls /sys/block)"
	[ ! -e /sys/class/misc/loop-control ] || fail "loop-control left"
	! grep -qw loop <(sed -n '/^Block devices:/,$p' /proc/devices) || fail "block major 7 still registered"
	[ -z "$(ls /sys/class/bdi | grep '^7:' || true)" ] || fail "bdi left: $(ls /sys/class/bdi | grep '^7:')"
	local threads
	threads=$(ps -e -o comm= | grep -E '^(loop[0-9]+(-cg)?|rust_loop/[0-9]+)$' || true)
	[ -z "$threads" ] || fail "loop threads left: $threads"
	# A leak of a device's tag set, queue or worker per cycle would be far above these bounds
	# (a tag set of 128 requests alone is hundreds of KiB).
	[ $((slab1 - slab0)) -lt 4096 ] || fail "unreclaimable slab grew by $((slab1 - slab0)) KiB over $cycles cycles"
	[ $((vmalloc1 - vmalloc0)) -lt 4096 ] || fail "vmalloc use grew by $((vmalloc1 - vmalloc0)) KiB over $cycles cycles"
}
