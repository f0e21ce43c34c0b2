# shellcheck shell=bash
# Several hardware queues (one worker thread each) and cgroup attribution of the worker's I/O.

# hctx_count DEV: hardware queues blk-mq created for the device
hctx_count() { find "/sys/block/$(basename "$1")/mq" -mindepth 1 -maxdepth 1 -type d | wc -l; }
# worker_pids N: the PIDs of loopN's hardware queue workers, in queue order (sysfs)
worker_pids() { cat "/sys/block/loop$1/rust_loop/worker_pids"; }
# worker_threads: the PIDs of every hardware queue worker thread (`rust_loop/K`), sorted
worker_threads() { ps -e -o pid=,comm= | awk '$2 ~ /^rust_loop\/[0-9]+$/ { print $1 }' | sort -n | xargs; }
# assert_workers N COUNT WHAT: loopN has COUNT hardware queue workers, each a distinct live
# thread called rust_loop/K
assert_workers() {
	local pids p
	pids=$(worker_pids "$1")
	assert_eq "$(echo $pids | wc -w)" "$2" "$3"
	assert_eq "$(echo $pids | tr ' ' '\n' | sort -u | wc -w)" "$2" "$3: distinct threads"
	for p in $pids; do
		[[ "$(cat "/proc/$p/comm" 2>/dev/null)" =~ ^rust_loop/[0-9]+$ ]] ||
			fail "$3: PID $p is not a rust_loop/K thread ($(cat "/proc/$p/comm" 2>/dev/null))"
	done
}
# assert_threads EXPECTED WHAT: the worker threads (worker_threads) become EXPECTED within 3 s
# (a stopped kthread can linger in the task list for a moment after kthread_stop returned)
assert_threads() {
	local i
	for i in $(seq 30); do
		[ "$(worker_threads)" = "$1" ] && return 0
		sleep 0.1
	done
	assert_eq "$(worker_threads)" "$1" "$2"
}
# sysfs_write FILE VALUE: writes VALUE; prints the errno name on failure (echo's messages do not
# say which error it was)
sysfs_write() {
	python3 -S -c '
import errno, os, sys
fd = os.open(sys.argv[1], os.O_WRONLY)
try:
    os.write(fd, sys.argv[2].encode())
except OSError as e:
    print(errno.errorcode[e.errno])
    sys.exit(1)' "$1" "$2"
}

# The default number of hardware queues: one per online CPU, at most 8.
default_queues() {
	local n
	n=$(nproc)
	echo $((n < 8 ? n : 8))
}

t_mq_param_sets_queues_and_workers() {
	load_rust_loop nr_hw_queues=2 max_loop=2
	assert_eq "$(hctx_count /dev/loop0)" 2 "hardware queues of loop0"
	assert_sys /dev/loop0 rust_loop/nr_hw_queues 2
	# An unbound device has no thread (as loop.c's workqueue, created by binding).
	assert_workers 0 0 "worker threads of unbound loop0"
	assert_workers 1 0 "worker threads of unbound loop1"
	assert_threads "" "worker threads with no device bound"
	mkimg "$T/img" 8M
	local dev
	dev=$(attach "$T/img")
	assert_eq "$dev" /dev/loop0 "attached device"
	assert_workers 0 2 "worker threads of bound loop0"
	assert_workers 1 0 "worker threads of unbound loop1"
	assert_threads "$(worker_pids 0 | tr ' ' '\n' | sort -n | xargs)" "threads with loop0 bound"
	cmp "$dev" "$T/img" || fail "data differs with 2 queues"
	detach "$dev"
	assert_workers 0 0 "worker threads of loop0 after detaching"
	assert_threads "" "worker threads after detaching (worker_linger_ms 500)"
	# Out of range: clamped to 1..online CPUs.
	load_rust_loop nr_hw_queues=1000 max_loop=1
	assert_sys /dev/loop0 rust_loop/nr_hw_queues "$(nproc)"
	assert_eq "$(hctx_count /dev/loop0)" "$(nproc)" "hardware queues with nr_hw_queues=1000"
	# 0, the default: one per online CPU, at most 8.
	load_rust_loop nr_hw_queues=0 max_loop=1
	assert_sys /dev/loop0 rust_loop/nr_hw_queues "$(default_queues)"
	dev=$(attach "$T/img")
	assert_workers 0 "$(default_queues)" "worker threads with nr_hw_queues=0"
	detach "$dev"
	load_rust_loop max_loop=1
	assert_sys /dev/loop0 rust_loop/nr_hw_queues "$(default_queues)"
	assert_eq "$(hctx_count /dev/loop0)" "$(default_queues)" "hardware queues by default"
}

# Unbinding parks the device's threads for worker_linger_ms: the next binding, of the same
# device or another, takes the same threads back (no thread started), a binding while none is
# parked starts threads, the reaper stops what nobody took, module unload stops parked threads,
# and worker_linger_ms=0 stops them at unbinding.
t_mq_workers_kept_for_rebinding() {
	is_rust || return 0 # rust_loop's own module parameter
	load_rust_loop max_loop=2 nr_hw_queues=2 worker_linger_ms=20000
	mkimg "$T/img" 8M
	local dev p0 p1
	dev=$(attach "$T/img")
	assert_eq "$dev" /dev/loop0 "attached device"
	assert_workers 0 2 "worker threads of bound loop0"
	p0=$(worker_pids 0 | tr ' ' '\n' | sort -n | xargs)
	detach "$dev"
	assert_workers 0 0 "worker threads of loop0 after detaching"
	assert_eq "$(worker_threads)" "$p0" "loop0's threads parked after detaching"
	dev=$(attach "$T/img")
	assert_eq "$dev" /dev/loop0 "attached device again"
	assert_eq "$(worker_pids 0 | tr ' ' '\n' | sort -n | xargs)" "$p0" "loop0's threads taken back by its next binding"
	dd if=/dev/urandom of="$dev" bs=64k count=16 oflag=direct status=none
	cmp -n 1M "$dev" "$T/img" || fail "data differs on reused worker threads"
	detach "$dev"
	# A LOOP_CONFIGURE that fails after taking the threads (EINVAL from the loop_info64 checks)
	# parks them again.
	expect_errno EINVAL /dev/loop0 configure "$T/img" --encrypt-type 1
	assert_eq "$(worker_threads)" "$p0" "threads parked again after a failed configure"
	# Another device number takes the same threads: binding starts none.
	losetup /dev/loop1 "$T/img" || fail "losetup /dev/loop1 failed"
	assert_workers 1 2 "worker threads of bound loop1"
	assert_eq "$(worker_pids 1 | tr ' ' '\n' | sort -n | xargs)" "$p0" "loop1 took loop0's parked threads"
	dd if=/dev/urandom of=/dev/loop1 bs=64k count=16 oflag=direct status=none
	cmp -n 1M /dev/loop1 "$T/img" || fail "data differs through loop1 on loop0's former threads"
	# With loop1 holding them, loop0's binding starts threads of its own.
	dev=$(attach "$T/img")
	assert_eq "$dev" /dev/loop0 "attached loop0 beside loop1"
	assert_workers 0 2 "worker threads of loop0 beside loop1"
	assert_eq "$(echo $(worker_pids 0) $(worker_pids 1) | tr ' ' '\n' | sort -u | wc -w)" 4 \
		"loop0 and loop1 share no thread"
	detach "$dev"
	detach /dev/loop1
	assert_eq "$(worker_threads | wc -w)" 4 "all four threads parked"
	# Unloading stops parked threads (robust-module checks the same over many cycles).
	unload_loop_drivers
	assert_threads "" "threads left after unloading"
	# The reaper: parked threads stop after 1-2 s.
	load_rust_loop max_loop=1 worker_linger_ms=1000
	dev=$(attach "$T/img")
	p0=$(worker_pids 0)
	detach "$dev"
	local i
	for i in $(seq 150); do
		[ -z "$(worker_threads)" ] && break
		sleep 0.1
	done
	assert_eq "$(worker_threads)" "" "parked threads after 15 s with worker_linger_ms=1000"
	dev=$(attach "$T/img")
	[ "$(worker_pids 0)" != "$p0" ] || fail "thread $p0 reused after the reaper ran"
	detach "$dev"
	# worker_linger_ms=0: stopped at unbinding.
	load_rust_loop max_loop=1 worker_linger_ms=0
	dev=$(attach "$T/img")
	assert_workers 0 "$(default_queues)" "worker threads with worker_linger_ms=0"
	detach "$dev"
	assert_threads "" "worker threads after detaching with worker_linger_ms=0"
}

t_mq_sysfs_knob_on_unbound_device() {
	load_rust_loop max_loop=1 nr_hw_queues=1
	local q=/sys/block/loop0/rust_loop/nr_hw_queues
	assert_file "$q" 1
	echo 2 >"$q" || fail "setting 2 queues on an unbound device failed"
	assert_file "$q" 2
	assert_eq "$(hctx_count /dev/loop0)" 2 "hardware queues after writing 2"
	assert_workers 0 0 "worker threads of the unbound device after writing 2"
	assert_eq "$(sysfs_write "$q" 0)" EINVAL "writing 0"
	assert_eq "$(sysfs_write "$q" abc)" EINVAL "writing abc"
	assert_eq "$(sysfs_write "$q" $(($(nproc) + 1)))" EINVAL "writing more than the CPUs"
	mkimg "$T/img" 16M
	local dev
	dev=$(attach "$T/img")
	assert_eq "$dev" /dev/loop0 "attached device"
	assert_workers 0 2 "worker threads once bound with 2 queues"
	# Bound: EBUSY.
	assert_eq "$(sysfs_write "$q" 1)" EBUSY "changing the queues of a bound device"
	dd if=/dev/urandom of="$dev" bs=64k count=16 oflag=direct status=none
	cmp -n 1M "$dev" "$T/img" || fail "data differs with 2 queues"
	detach "$dev"
	echo 1 >"$q" || fail "going back to 1 queue failed"
	assert_eq "$(hctx_count /dev/loop0)" 1 "hardware queues after writing 1"
	assert_workers 0 0 "worker threads of the unbound device after writing 1"
	dev=$(attach "$T/img")
	assert_workers 0 1 "worker threads once bound with 1 queue"
	cmp -n 1M "$dev" "$T/img" || fail "data differs after going back to 1 queue"
}

# Changing the hardware queues races binding, I/O, detaching, removal and re-adding of the same
# device (tests/mq_resize_race.py): every operation either succeeds or gets the errno of a busy or
# missing device, data written through each binding reads back, and afterwards the queues,
# workers and the knob agree and the device still works.
t_mq_sysfs_knob_races_bind_and_remove() {
	is_rust || return 0 # rust_loop's own knob
	load_rust_loop max_loop=1
	mkimg "$T/img" 8M
	python3 "$ROOT/tests/mq_resize_race.py" 0 "$T/img" 20 >"$T/race.out" ||
		fail "race: $(cat "$T/race.out")"
	log "$(cat "$T/race.out")"
	udevadm settle
	[ -e /sys/block/loop0 ] || lioctl $CTL ctl-add 0 >/dev/null
	udevadm settle
	local q=/sys/block/loop0/rust_loop/nr_hw_queues n
	n=$(cat "$q")
	assert_eq "$(hctx_count /dev/loop0)" "$n" "hardware queues after the race"
	assert_workers 0 0 "worker threads of the unbound device after the race"
	echo 2 >"$q" || fail "setting 2 queues after the race failed"
	fillimg "$T/img" 8
	local dev
	dev=$(attach "$T/img")
	assert_workers 0 2 "worker threads once bound with 2 queues after the race"
	cmp "$dev" "$T/img" || fail "data differs after the race"
	detach "$dev"
}

# fio_verify_jobs DEV JOBS: 12 jobs of mixed random reads/writes with crc32c verify, each on its
# own slice of the device.
fio_verify_jobs() {
	local dev=$1 jobs=$2 size
	size=$(($(devsize "$dev") / jobs / 1048576))
	fio --name=mqverify --filename="$dev" --direct=1 --ioengine=libaio --iodepth=16 \
		--rw=randrw --bsrange=4k-64k --numjobs="$jobs" --size="${size}M" --offset_increment="${size}M" \
		--verify=crc32c --verify_fatal=1 --do_verify=1 --group_reporting \
		--verify_state_save=0 --output="$T/fio.out" ||
		fail "fio verify failed: $(tail -5 "$T/fio.out")"
	grep -qE "verify: bad|crc32c: verify failed" "$T/fio.out" && fail "fio reported a mismatch"
	return 0
}

t_mq_fio_verify_4_queues_12_jobs() {
	[ "$(nproc)" -ge 4 ] || fail "needs 4 CPUs in the VM (have $(nproc)); scripts/check.sh boots 4"
	load_rust_loop nr_hw_queues=4 max_loop=1
	assert_eq "$(hctx_count /dev/loop0)" 4 "hardware queues"
	scratch_fs xfs
	local mode dev
	for mode in on off; do
		fallocate -l 384M "$SCRATCH/img.$mode"
		dev=$(attach "$SCRATCH/img.$mode" --direct-io=$mode)
		assert_sys "$dev" loop/dio "$([ $mode = on ] && echo 1 || echo 0)"
		local before after used=0 i=1
		before=$(stat_of "$dev" hw_queue_requests)
		fio_verify_jobs "$dev" 12
		after=$(stat_of "$dev" hw_queue_requests)
		log "dio=$mode requests per hardware queue before: $before after: $after"
		for n in $after; do
			[ "$n" -gt "$(echo "$before" | cut -d' ' -f$i)" ] && used=$((used + 1))
			i=$((i + 1))
		done
		[ "$used" -ge 2 ] || fail "dio=$mode: only $used of 4 hardware queues dispatched requests"
		detach "$dev"
	done
	scratch_umount
}

# switches_of PID: the voluntary context switches of a thread (one per time it ran out of work)
switches_of() { awk '/^voluntary_ctxt_switches/ { print $2 }' "/proc/$1/status"; }

# One task keeping a deep queue on one hardware queue: when its queue's worker has requests
# waiting and the other queue's has none, the other worker takes them (dispatch.rs
# `spread_worker`), so both workers run its requests, while blk-mq dispatched all of them on the
# task's own hardware queue. The data is checked too.
t_mq_deep_submitter_spreads_over_two_workers() {
	[ "$(nproc)" -ge 2 ] || fail "needs 2 CPUs in the VM (have $(nproc))"
	load_rust_loop nr_hw_queues=2 max_loop=1 nowait_max_depth=0
	scratch_fs xfs
	fallocate -l 256M "$SCRATCH/img"
	local dev pids p before=() after=() i reqs0 reqs1
	dev=$(attach "$SCRATCH/img" --direct-io=on)
	assert_sys "$dev" loop/dio 1
	read -r -a pids <<<"$(worker_pids 0)"
	assert_eq "${#pids[@]}" 2 "worker threads"
	for p in "${pids[@]}"; do before+=("$(switches_of "$p")"); done
	# udev probes the device (blkid) after fio closes it, from any CPU: measured on 7.3, 95
	# requests on the second queue within a second of the close (the debug kernel with PREEMPT_RT
	# read the counters after 82 of them). Its rules wait until the counters are read.
	udevadm control --stop-exec-queue || fail "udevadm control --stop-exec-queue failed"
	trap 'udevadm control --start-exec-queue; cleanup_loops' EXIT
	reqs0=$(stat_of "$dev" hw_queue_requests)
	local spread0 spread1
	spread0=$(stat_of "$dev" worker_spread)
	taskset -c 0 fio --name=deep --filename="$dev" --direct=1 --ioengine=libaio --iodepth=32 \
		--rw=randrw --bs=4k --size=64M --runtime=4 --time_based --verify=crc32c \
		--verify_fatal=1 --output="$T/fio.out" >/dev/null || fail "fio failed: $(tail -n 20 "$T/fio.out")"
	reqs1=$(stat_of "$dev" hw_queue_requests)
	spread1=$(stat_of "$dev" worker_spread)
	for p in "${pids[@]}"; do after+=("$(switches_of "$p")"); done
	udevadm control --start-exec-queue || fail "udevadm control --start-exec-queue failed"
	log "requests per hardware queue before: $reqs0 after: $reqs1; worker switches before: ${before[*]} after: ${after[*]}; worker_spread $spread0 -> $spread1"
	# blk-mq maps CPU 0 to the first hardware queue: the other one started (almost) nothing.
	local q0 q1
	q0=$(($(echo "$reqs1" | cut -d' ' -f1) - $(echo "$reqs0" | cut -d' ' -f1)))
	q1=$(($(echo "$reqs1" | cut -d' ' -f2) - $(echo "$reqs0" | cut -d' ' -f2)))
	[ "$q0" -gt 1000 ] && [ "$q1" -lt $((q0 / 100 + 10)) ] ||
		fail "requests started per queue: $q0 and $q1 (expected all on the first)"
	[ $((spread1 - spread0)) -ge $((q0 / 20)) ] ||
		fail "worker_spread counted $((spread1 - spread0)) of $q0 requests (expected at least 5 %)"
	# A worker that takes a share of the task's requests runs out of work over and over; the
	# second queue's worker would otherwise run only what its own queue started (q1).
	local min=$((q0 / 50 + q1 + 50))
	for i in 0 1; do
		[ $((after[i] - before[i])) -ge "$min" ] ||
			fail "worker $i (PID ${pids[i]}) ran out of work $((after[i] - before[i])) times (< $min): it took (almost) none of the task's requests"
	done
	detach "$dev"
	scratch_umount
}

# ----- cgroups -----

CG=/sys/fs/cgroup
cg_setup() {
	mountpoint -q $CG || mount -t cgroup2 none $CG || fail "cannot mount cgroup2"
	grep -qw io $CG/cgroup.controllers || fail "no io controller"
	grep -qw memory $CG/cgroup.controllers || fail "no memory controller"
	echo "+io +memory" >$CG/cgroup.subtree_control
	local g
	for g in "$@"; do
		rmdir "$CG/$g" 2>/dev/null || true
		mkdir "$CG/$g"
	done
}
# cg_run GROUP COMMAND...: runs COMMAND inside the cgroup
cg_run() {
	local g=$1
	shift
	bash -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$CG/$g" "$@"
}
cg_cleanup() {
	local g
	for g in "$@"; do rmdir "$CG/$g" 2>/dev/null || true; done
}
# fio_read_bw DEV RUNTIME OUT [OFFSET SIZE]: sequential direct reads; prints KiB/s
fio_read_bw() {
	fio --name=bw --filename="$1" --direct=1 --ioengine=libaio --iodepth=8 --rw=read --bs=64k \
		--offset="${4:-0}" --size="${5:-100%}" \
		--runtime="$2" --time_based --output-format=json --output="$3" >/dev/null ||
		fail "fio failed: $(cat "$3")"
	jq '.jobs[0].read.bw' "$3"
}

# cg_io_max_case DIO: fio in a cgroup whose io.max limits reads of the scratch disk (under the
# backing file) to 5 MB/s reads through the loop device at 5 MB/s +-20 %.
cg_io_max_case() {
	local dio=$1
	load_rust_loop max_loop=1
	scratch_fs xfs
	dd if=/dev/urandom of="$SCRATCH/img" bs=1M count=192 status=none
	sync
	cg_setup limited
	local disk
	disk=$(cat "/sys/class/block/$(basename "$SCRATCH_DEV")/dev")
	echo "$disk rbps=5242880" >$CG/limited/io.max
	local dev bw
	dev=$(attach "$SCRATCH/img" --direct-io="$dio")
	echo 3 >/proc/sys/vm/drop_caches
	bw=$(cg_run limited bash -c "$(declare -f fio_read_bw fail); fio_read_bw $dev 12 $T/fio.json")
	log "dio=$dio: read bandwidth under io.max rbps=5MiB/s: $bw KiB/s"
	[ "$bw" -ge 4096 ] && [ "$bw" -le 6144 ] ||
		fail "dio=$dio: $bw KiB/s is not within 20 % of 5120 KiB/s (io.max on $disk)"
	detach "$dev"
	cg_cleanup limited
	scratch_umount
}

t_cgroup_io_max_holds_dio() { cg_io_max_case on; }

# Buffered mode: every read goes through the worker, which must run it in the reader's blkcg.
t_cgroup_io_max_holds_buffered() { cg_io_max_case off; }

# The page cache that buffered loop writes create in the backing file is charged to the writer's
# memory cgroup, not to the worker's (root).
t_cgroup_buffered_writes_charge_writer_memcg() {
	load_rust_loop max_loop=1
	scratch_fs xfs
	fallocate -l 128M "$SCRATCH/img"
	cg_setup writer
	local dev before after
	dev=$(attach "$SCRATCH/img" --direct-io=off)
	echo 3 >/proc/sys/vm/drop_caches
	before=$(awk '$1 == "file" {print $2}' $CG/writer/memory.stat)
	cg_run writer dd if=/dev/zero of="$dev" bs=1M count=96 oflag=direct status=none ||
		fail "dd through $dev failed"
	after=$(awk '$1 == "file" {print $2}' $CG/writer/memory.stat)
	log "writer cgroup page cache: $before -> $after bytes"
	[ $((after - before)) -ge $((80 << 20)) ] ||
		fail "writer's memcg was charged $(((after - before) >> 20)) MiB of page cache for 96 MiB written"
	detach "$dev"
	echo 3 >/proc/sys/vm/drop_caches
	cg_cleanup writer
	scratch_umount
}

# A cgroup throttled to 1 MB/s and an unthrottled one read through the same device at the same
# time, each its own half of the device (no page cache shared between them): the throttled one's
# commands must not hold up the other's.
cg_starve_case() {
	local dio=$1
	load_rust_loop max_loop=1
	scratch_fs xfs
	dd if=/dev/urandom of="$SCRATCH/img" bs=1M count=256 status=none
	sync
	cg_setup slow fast
	local disk dev
	disk=$(cat "/sys/class/block/$(basename "$SCRATCH_DEV")/dev")
	echo "$disk rbps=1048576" >$CG/slow/io.max
	dev=$(attach "$SCRATCH/img" --direct-io="$dio")
	echo 3 >/proc/sys/vm/drop_caches
	cg_run slow bash -c "$(declare -f fio_read_bw fail); fio_read_bw $dev 10 $T/slow.json 0 128M" >"$T/slow.bw" &
	local pid=$!
	local fast slow
	fast=$(cg_run fast bash -c "$(declare -f fio_read_bw fail); fio_read_bw $dev 10 $T/fast.json 128M 128M")
	wait $pid || fail "the throttled reader failed"
	slow=$(cat "$T/slow.bw")
	log "dio=$dio: throttled reader: $slow KiB/s, unthrottled reader: $fast KiB/s"
	[ "$slow" -le 1536 ] || fail "the throttled reader was not throttled ($slow KiB/s)"
	[ "$fast" -ge $((slow * 8)) ] || fail "the unthrottled reader only got $fast KiB/s next to $slow KiB/s"
	if is_rust && [ "$dio" = off ]; then
		# Each non-root cgroup got a worker thread; clearing the device stops them.
		local cg
		cg=$(ps -e -o comm= | grep -c '^loop0-cg$' || true)
		[ "$cg" = 2 ] || fail "expected 2 cgroup worker threads (loop0-cg), found $cg"
		detach "$dev"
		cg=$(ps -e -o comm= | grep -c '^loop0-cg$' || true)
		[ "$cg" = 0 ] || fail "cgroup worker threads left after clearing the device: $cg"
	else
		detach "$dev"
	fi
	cg_cleanup slow fast
	scratch_umount
}

t_cgroup_throttled_reader_does_not_starve_others_dio() { cg_starve_case on; }

# Buffered mode: the worker's reads of the backing file block while the throttled cgroup's bios
# wait, so its commands must not sit in front of the other cgroup's.
t_cgroup_throttled_reader_does_not_starve_others_buffered() { cg_starve_case off; }

# max_cgroup_workers bounds the per-cgroup worker threads of a device: 200 cgroups read through
# one buffered device at once (every command goes to a worker); no more than the bound run and
# every read succeeds. A cgroup past the bound, whose commands run on the hardware queue's
# worker, is still held to its io.max.
# 200 cgroups and a 12 s throttled read: a few minutes on a busy TCG host.
timeout_t_cgroup_workers_bounded() { echo $((600 * ${TEST_SLOWDOWN:-1})); }
t_cgroup_workers_bounded() {
	is_rust || return 0 # rust_loop's own module parameter
	load_rust_loop max_loop=1 max_cgroup_workers=4
	scratch_fs xfs
	dd if=/dev/urandom of="$SCRATCH/img" bs=1M count=192 status=none
	sync
	local i groups=() dev max=0 n
	for i in $(seq 200); do groups+=("many$i"); done
	cg_setup "${groups[@]}" limited
	dev=$(attach "$SCRATCH/img" --direct-io=off)
	echo 3 >/proc/sys/vm/drop_caches
	# One process forks a reader into each cgroup (200 bash + dd execs cost minutes under TCG).
	python3 -S - "$dev" "$CG" >"$T/many.out" 2>&1 <<'PY' &
import mmap, os, sys
dev, cg = sys.argv[1], sys.argv[2]
pids = []
for i in range(1, 201):
    pid = os.fork()
    if pid == 0:
        try:
            with open(f"{cg}/many{i}/cgroup.procs", "w") as f:
                f.write(str(os.getpid()))
            fd = os.open(dev, os.O_RDONLY | os.O_DIRECT)
            buf = mmap.mmap(-1, 128 << 10)
            os._exit(0 if os.preadv(fd, [buf], i << 17) == 128 << 10 else 1)
        except Exception as e:
            print(f"cgroup many{i}: {e}", flush=True)
            os._exit(1)
    pids.append(pid)
bad = sum(1 for p in pids if os.waitpid(p, 0)[1] != 0)
print(f"{bad} of 200 reads failed")
sys.exit(1 if bad else 0)
PY
	local readers=$!
	while kill -0 "$readers" 2>/dev/null; do
		n=$(ps -e -o comm= | grep -c '^loop0-cg$' || true)
		[ "$n" -gt "$max" ] && max=$n
		sleep 0.1
	done
	wait "$readers" || fail "reads in the 200 cgroups: $(cat "$T/many.out")"
	n=$(ps -e -o comm= | grep -c '^loop0-cg$' || true)
	log "200 cgroups: at most $max cgroup worker threads seen, $n now (bound 4)"
	[ "$max" -le 4 ] && [ "$n" -le 4 ] || fail "more than 4 cgroup worker threads ($max)"
	[ "$n" -ge 1 ] || fail "no cgroup worker thread ran the 200 cgroups' reads"
	local disk bw
	disk=$(cat "/sys/class/block/$(basename "$SCRATCH_DEV")/dev")
	echo "$disk rbps=5242880" >$CG/limited/io.max
	echo 3 >/proc/sys/vm/drop_caches
	bw=$(cg_run limited bash -c "$(declare -f fio_read_bw fail); fio_read_bw $dev 12 $T/fio.json")
	n=$(ps -e -o comm= | grep -c '^loop0-cg$' || true)
	log "cgroup past the bound: $bw KiB/s under io.max rbps=5MiB/s ($n cgroup worker threads)"
	[ "$n" -le 4 ] || fail "the bound of 4 cgroup worker threads broke: $n"
	[ "$bw" -ge 4096 ] && [ "$bw" -le 6144 ] ||
		fail "$bw KiB/s is not within 20 % of 5120 KiB/s (io.max on $disk) past the bound"
	detach "$dev"
	n=$(ps -e -o comm= | grep -c '^loop0-cg$' || true)
	[ "$n" = 0 ] || fail "cgroup worker threads left after clearing the device: $n"
	cg_cleanup "${groups[@]}" limited
	scratch_umount
}
