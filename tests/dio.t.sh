# shellcheck shell=bash
# Direct I/O: eligibility and reporting, merging by mode, data integrity under fio on XFS and
# ext4 (preallocated and sparse backing files), the NOWAIT fast path and its guards, page-cache
# use, zero fill past EOF, stacking, and toggling direct I/O under load.

# dio_verify DEV [extra fio args...]: mixed random reads/writes (block sizes 4k..1M, 96 MiB),
# then sequential 1 MiB writes of the next 32 MiB, each verified (fio_verify).
dio_verify() {
	local dev=$1
	shift
	fio_verify "$dev" --rw=randrw --bssplit=4k/40:16k/20:64k/20:256k/10:1m/10 --size=96M "$@"
	fio_verify "$dev" --rw=write --bs=1m --offset=96M --size=32M "$@"
}

# lo_flags DEV: lo_flags as LOOP_GET_STATUS64 reports them.
lo_flags() {
	python3 - "$1" <<'PY'
import fcntl, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
buf = bytearray(232)
fcntl.ioctl(fd, 0x4C05, buf)
print(struct.unpack_from("I", buf, 52)[0])
PY
}

# dio_attach FILE [losetup args]: attach with --direct-io=on and check it took.
dio_attach() {
	local f=$1
	shift
	local dev
	dev=$(losetup -f --show --direct-io=on "$@" "$f")
	assert_file "/sys/block/$(basename "$dev")/loop/dio" 1
	echo "$dev"
}

t_dio_flag_and_merging_follow_mode() {
	load_rust_loop
	scratch_fs xfs
	fallocate -l 64M "$SCRATCH/img"
	local dev n
	dev=$(dio_attach "$SCRATCH/img")
	n=$(basename "$dev")
	assert_file "/sys/block/$n/queue/nomerges" 0
	[ $(($(lo_flags "$dev") & 16)) = 16 ] || fail "GET_STATUS64 does not report LO_FLAGS_DIRECT_IO"
	losetup --direct-io=off "$dev"
	assert_file "/sys/block/$n/loop/dio" 0
	assert_file "/sys/block/$n/queue/nomerges" 2
	[ $(($(lo_flags "$dev") & 16)) = 0 ] || fail "GET_STATUS64 still reports LO_FLAGS_DIRECT_IO"
	losetup --direct-io=on "$dev"
	assert_file "/sys/block/$n/loop/dio" 1
	assert_file "/sys/block/$n/queue/nomerges" 0
	# max_hw_sectors is raised so that 1 MiB requests reach the backing file whole.
	[ "$(cat /sys/block/$n/queue/max_hw_sectors_kb)" -ge 1024 ] || fail "max_hw_sectors_kb too small"
	losetup -d "$dev"
}

# An offset below the backing file's direct-I/O alignment: loop.c turns direct I/O off for the
# whole device (and refuses LOOP_SET_DIRECT_IO with EINVAL); rust_loop keeps it on and does the
# requests that cannot be direct (here: all of them) buffered, counted in dio_fallbacks.
t_dio_unaligned_offset() {
	load_rust_loop
	scratch_fs xfs
	dd if=/dev/urandom of="$SCRATCH/img" bs=1M count=8 status=none
	local dev n
	dev=$(losetup -f --show --direct-io=on -o 256 "$SCRATCH/img")
	n=$(basename "$dev")
	if ! is_rust; then
		assert_file "/sys/block/$n/loop/dio" 0
		[ $(($(lo_flags "$dev") & 16)) = 0 ] || fail "GET_STATUS64 reports direct I/O on an unaligned offset"
		local out
		out=$(losetup --direct-io=on "$dev" 2>&1) && fail "LOOP_SET_DIRECT_IO succeeded on an unaligned offset"
		case "$out" in *"Invalid argument"*) ;; *) fail "expected EINVAL, got: $out" ;; esac
		losetup -d "$dev"
		return 0
	fi
	assert_file "/sys/block/$n/loop/dio" 1
	[ $(($(lo_flags "$dev") & 16)) = 16 ] || fail "GET_STATUS64 does not report direct I/O"
	losetup --direct-io=off "$dev" && losetup --direct-io=on "$dev" || fail "LOOP_SET_DIRECT_IO refused"
	assert_file "/sys/block/$n/loop/dio" 1
	cmp <(dd if="$dev" bs=64k iflag=direct status=none) <(tail -c +257 "$SCRATCH/img" | head -c $(((8 << 20) - 512))) ||
		fail "data at offset 256 differs"
	[ "$(stat_of "$dev" dio_fallbacks)" -gt 0 ] || fail "dio_fallbacks did not count the unaligned reads"
	losetup -d "$dev"
}

verify_on() {
	local fs=$1 kind=$2 dev
	load_rust_loop
	scratch_fs "$fs"
	case $kind in
	prealloc) fallocate -l 160M "$SCRATCH/img" && dd if=/dev/zero of="$SCRATCH/img" bs=1M count=160 conv=notrunc status=none ;;
	sparse) truncate -s 160M "$SCRATCH/img" ;;
	esac
	dev=$(dio_attach "$SCRATCH/img")
	# The default hands QD32 to the worker after the first few requests in flight; half the
	# runs keep every request on queue_rq's NOWAIT path instead (and its -EAGAIN retries).
	if [ -n "${3:-}" ] && is_rust; then
		echo "$3" >"/sys/block/$(basename "$dev")/rust_loop/nowait_max_depth"
	fi
	dio_verify "$dev"
	if is_rust; then
		log "$(grep -H . /sys/block/$(basename "$dev")/rust_loop/nowait_max_depth /sys/kernel/debug/rust_loop/$(basename "$dev")/{nowait_completions,nowait_eagain,nowait_skip_depth,worker_submissions})"
		# The data was verified on the paths that served it: the NOWAIT path always (the first
		# requests of the queue), the worker too by default (the deep queue).
		local nowait worker
		nowait=$(stat_of "$dev" nowait_completions)
		worker=$(stat_of "$dev" worker_submissions)
		[ "$nowait" -gt 0 ] || fail "no request completed on the NOWAIT path"
		if [ -n "${3:-}" ]; then
			[ "$nowait" -ge 200 ] || fail "only $nowait requests on the NOWAIT path with nowait_max_depth=$3"
		else
			[ "$worker" -gt 0 ] || fail "no request went through the worker"
		fi
	fi
	losetup -d "$dev"
}
t_dio_fio_verify_xfs_prealloc() { verify_on xfs prealloc; }
t_dio_fio_verify_xfs_sparse() { verify_on xfs sparse 1000000; }
t_dio_fio_verify_ext4_prealloc() { verify_on ext4 prealloc 1000000; }
t_dio_fio_verify_ext4_sparse() { verify_on ext4 sparse; }

t_dio_nowait_path_serves_reads() {
	load_rust_loop
	scratch_fs xfs
	fallocate -l 64M "$SCRATCH/img"
	dd if=/dev/urandom of="$SCRATCH/img" bs=1M count=64 conv=notrunc status=none
	local dev before after
	dev=$(dio_attach "$SCRATCH/img")
	before=$(stat_of "$dev" nowait_completions)
	# One read at a time: queue_rq submits them itself (but a probe in 256).
	fio --name=r --filename="$dev" --direct=1 --ioengine=psync --rw=randread \
		--bs=4k --size=64M --io_size=32M --output=/dev/null
	after=$(stat_of "$dev" nowait_completions)
	[ "$after" -gt "$before" ] || fail "nowait_completions did not grow ($before -> $after)"
	# And the data read that way is the file's.
	cmp <(dd if="$dev" bs=1M iflag=direct status=none) "$SCRATCH/img" || fail "dio read data differs"
	losetup -d "$dev"
}

# Direct I/O stays on below the backing file's alignment: a 512-byte-sector device over a file on
# XFS with 4 KiB sectors (on null_blk bs=4096, so direct I/O on the file needs 4 KiB alignment).
# loop/dio stays 1; 4 KiB-aligned requests go direct (queue_rq's NOWAIT path), the others
# buffered (dio_fallbacks); the two paths never return stale data, and fio --verify=crc32c
# mixing 512 B and larger blocks finds no mismatch.
t_dio_stays_on_below_backing_alignment() {
	is_rust || return 0 # loop.c turns direct I/O off here (see t_dio_unaligned_offset)
	load_rust_loop
	modprobe null_blk nr_devices=1 queue_mode=2 memory_backed=1 gb=1 bs=4096 irqmode=0 ||
		fail "modprobe null_blk failed"
	trap 'losetup -D; umount "$T/nb" 2>/dev/null; rmmod null_blk 2>/dev/null' EXIT
	mkdir -p "$T/nb"
	mkfs.xfs -q -f -s size=4096 /dev/nullb0 && mount /dev/nullb0 "$T/nb" || fail "xfs on null_blk failed"
	fallocate -l 256M "$T/nb/img"
	local dev n nowait fallbacks
	dev=$(losetup -f --show --direct-io=on --sector-size 512 "$T/nb/img")
	n=$(basename "$dev")
	assert_file "/sys/block/$n/queue/logical_block_size" 512
	assert_file "/sys/block/$n/loop/dio" 1
	[ $(($(lo_flags "$dev") & 16)) = 16 ] || fail "GET_STATUS64 does not report direct I/O"
	udevadm settle 2>/dev/null || true
	# Aligned reads one at a time: direct, from queue_rq.
	nowait=$(stat_of "$dev" nowait_completions)
	fallbacks=$(stat_of "$dev" dio_fallbacks)
	dd if="$dev" of=/dev/null bs=4k count=256 iflag=direct status=none || fail "4k reads failed"
	[ $(($(stat_of "$dev" nowait_completions) - nowait)) -ge 200 ] ||
		fail "4 KiB-aligned reads did not go direct (nowait_completions $nowait -> $(stat_of "$dev" nowait_completions))"
	assert_eq "$(stat_of "$dev" dio_fallbacks)" "$fallbacks" "dio_fallbacks after aligned reads"
	dd if="$dev" of=/dev/null bs=512 skip=1 count=64 iflag=direct status=none || fail "512 B reads failed"
	[ $(($(stat_of "$dev" dio_fallbacks) - fallbacks)) -ge 64 ] || fail "512 B reads were not done buffered"
	# Buffered then direct, direct then buffered, on the same 4 KiB block: never stale.
	head -c 4096 /dev/urandom >"$T/a"
	head -c 512 /dev/urandom >"$T/b"
	head -c 4096 /dev/urandom >"$T/c"
	dd if="$T/a" of="$dev" bs=4096 oflag=direct status=none || fail "aligned write failed"
	dd if="$T/b" of="$dev" bs=512 seek=1 oflag=direct status=none || fail "512 B write failed"
	cmp <(dd if="$dev" bs=4096 count=1 iflag=direct status=none) \
		<(head -c 512 "$T/a"; cat "$T/b"; tail -c +1025 "$T/a") ||
		fail "a direct read missed the buffered write before it"
	dd if="$T/c" of="$dev" bs=4096 oflag=direct status=none || fail "aligned rewrite failed"
	cmp <(dd if="$dev" bs=512 skip=1 count=1 iflag=direct status=none) <(head -c 1024 "$T/c" | tail -c 512) ||
		fail "a buffered read returned data older than the direct write before it"
	# Mixed sizes at depth, verified.
	dio_verify "$dev" --bssplit=512/30:1k/10:4k/30:64k/30 --size=64M
	log "dio_fallbacks $(stat_of "$dev" dio_fallbacks), nowait_completions $(stat_of "$dev" nowait_completions), worker_submissions $(stat_of "$dev" worker_submissions)"
	losetup -d "$dev"
}

# A device in direct-I/O mode over another loop device whose logical block size grows while it
# is bound (LOOP_SET_BLOCK_SIZE on the lower device): requests below the new size go buffered,
# and read and write the right data. loop.c keeps the alignment of the binding's time, sends
# them direct and fails them with EIO (the block layer's EINVAL); a partition scan of such a
# device then failed in rust_loop too (the sequence test, seed 1438431249).
t_dio_follows_lower_block_size() {
	is_rust || return 0 # loop.c fails these reads and writes with EIO
	load_rust_loop
	trap cleanup_loops EXIT
	fillimg "$T/img" 8
	local lower upper shifted fallbacks
	lower=$(attach "$T/img")
	upper=$(attach "$lower" --direct-io=on)
	shifted=$(attach "$lower" --direct-io=on -o 512 -P)
	assert_sys "$upper" loop/dio 1
	assert_sys "$shifted" loop/dio 1
	lioctl "$lower" set-block-size 4096 || fail "LOOP_SET_BLOCK_SIZE 4096 on $lower failed"
	assert_sys "$lower" queue/logical_block_size 4096
	fallbacks=$(stat_of "$upper" dio_fallbacks)
	cmp <(dd if="$upper" bs=512 skip=1 count=7 iflag=direct status=none) <(dd if="$T/img" bs=512 skip=1 count=7 status=none) ||
		fail "512-byte direct reads below the lower device's new block size"
	[ $(($(stat_of "$upper" dio_fallbacks) - fallbacks)) -ge 7 ] || fail "512-byte reads were not done buffered"
	fallbacks=$(stat_of "$upper" dio_fallbacks)
	cmp <(dd if="$upper" bs=4096 skip=2 count=4 iflag=direct status=none) <(dd if="$T/img" bs=4096 skip=2 count=4 status=none) ||
		fail "4 KiB direct reads"
	assert_eq "$(stat_of "$upper" dio_fallbacks)" "$fallbacks" "dio_fallbacks after 4 KiB-aligned reads"
	head -c 512 /dev/urandom >"$T/b"
	# conv=fsync: the buffered write rests in the lower device's page cache until written back
	# (the image file, read directly below, saw it about 0.1 s later on 7.3-rt); the flush
	# (REQ_PREFLUSH, the lower device's fsync, then the file's) makes it reach the file.
	dd if="$T/b" of="$upper" bs=512 seek=3 oflag=direct conv=fsync status=none || fail "a 512-byte direct write failed"
	cmp <(dd if="$upper" bs=512 skip=3 count=1 iflag=direct status=none) "$T/b" || fail "the 512-byte write does not read back"
	# The device at offset 512: every request is below the new alignment.
	cmp <(head -c $((1 << 20)) "$shifted") <(tail -c +513 "$T/img" | head -c $((1 << 20))) ||
		fail "buffered reads of the device at offset 512 (after the write)"
	blockdev --rereadpt "$shifted" || fail "BLKRRPART on $shifted failed"
	log "dio_fallbacks: $(stat_of "$upper" dio_fallbacks) and $(stat_of "$shifted" dio_fallbacks)"
	detach "$shifted"
	detach "$upper"
	detach "$lower"
}

# Freeze protection (docs/nowait-hazards.md, hazard 12): while the backing file system is frozen,
# direct writes through the device wait (no write reaches the file, none fails: queue_rq's NOWAIT
# attempt cannot take freeze protection and hands the write to the worker, which waits for the
# thaw); after the thaw they all complete and the data verifies.
t_dio_backing_freeze_holds_writes() {
	load_rust_loop
	scratch_fs xfs
	fallocate -l 64M "$SCRATCH/img"
	local dev pid w1 w2 eagain=0
	dev=$(dio_attach "$SCRATCH/img")
	is_rust && eagain=$(stat_of "$dev" nowait_eagain)
	fio --name=f --filename="$dev" --direct=1 --ioengine=libaio --iodepth=8 --rw=randwrite \
		--bs=4k --size=48M --verify=crc32c --verify_fatal=1 --do_verify=1 --output="$T/fio.out" &
	pid=$!
	sleep 2
	kill -0 $pid 2>/dev/null || fail "fio ended before the freeze: $(tail -5 "$T/fio.out")"
	fsfreeze -f "$SCRATCH" || fail "fsfreeze -f failed"
	sleep 1
	w1=$(stat -c %Y "$SCRATCH/img")
	is_rust && w1=$(stat_of "$dev" write_bytes)
	sleep 3
	w2=$(stat -c %Y "$SCRATCH/img")
	is_rust && w2=$(stat_of "$dev" write_bytes)
	kill -0 $pid 2>/dev/null || { fsfreeze -u "$SCRATCH"; fail "fio ended while the backing file system was frozen: $(tail -5 "$T/fio.out")"; }
	fsfreeze -u "$SCRATCH" || fail "fsfreeze -u failed"
	assert_eq "$w2" "$w1" "writes that reached the frozen backing file system"
	wait $pid || fail "fio failed across the freeze: $(grep -iE 'err|verify' "$T/fio.out" | head -5)"
	grep -qE 'err= *0' "$T/fio.out" || fail "fio reported errors: $(grep -E 'err=' "$T/fio.out" | head -3)"
	is_rust && log "nowait_eagain during the run: $(($(stat_of "$dev" nowait_eagain) - eagain))"
	losetup -d "$dev"
}

# Fail closed: queue_rq submits direct I/O itself only on the file systems the nowait_fs
# parameter names (xfs,ext4 by default; "bdev" for block devices); on any other backing the
# worker submits, still with direct I/O and with the same data. loop/nowait shows the choice;
# the parameter is writable and read when a device publishes its configuration.
t_dio_nowait_fs_allowlist() {
	is_rust || return 0 # rust_loop's own parameter
	load_rust_loop
	assert_file /sys/module/rust_loop/parameters/nowait_fs xfs,ext4
	scratch_fs xfs
	fallocate -l 64M "$SCRATCH/img"
	dd if=/dev/urandom of="$SCRATCH/img" bs=1M count=64 conv=notrunc status=none
	local dev n lower nowait worker
	lower=$(dio_attach "$SCRATCH/img")
	assert_file "/sys/block/$(basename "$lower")/rust_loop/nowait" 1
	# A block device (the xfs-backed device) is not named by default.
	dev=$(dio_attach "$lower")
	n=$(basename "$dev")
	assert_file "/sys/block/$n/rust_loop/nowait" 0
	udevadm settle 2>/dev/null || true
	nowait=$(stat_of "$dev" nowait_completions)
	worker=$(stat_of "$dev" worker_submissions)
	fio --name=r --filename="$dev" --direct=1 --ioengine=psync --rw=randread \
		--bs=4k --size=64M --io_size=8M --output=/dev/null || fail "fio on $dev failed"
	assert_eq "$(stat_of "$dev" nowait_completions)" "$nowait" "NOWAIT completions on a backing not in nowait_fs"
	[ $(($(stat_of "$dev" worker_submissions) - worker)) -ge 2048 ] ||
		fail "the worker did not submit the 2048 reads ($worker -> $(stat_of "$dev" worker_submissions))"
	cmp <(dd if="$dev" bs=1M iflag=direct status=none) "$SCRATCH/img" || fail "data read through the worker differs"
	# Named at run time: the device's next reconfiguration (here LOOP_SET_DIRECT_IO) reads it.
	echo "xfs ext4,bdev" >/sys/module/rust_loop/parameters/nowait_fs
	losetup --direct-io=off "$dev" && losetup --direct-io=on "$dev" || fail "toggling direct I/O failed"
	assert_file "/sys/block/$n/loop/dio" 1
	assert_file "/sys/block/$n/rust_loop/nowait" 1
	fio --name=r --filename="$dev" --direct=1 --ioengine=psync --rw=randread \
		--bs=4k --size=64M --io_size=8M --output=/dev/null || fail "fio on $dev failed"
	[ "$(stat_of "$dev" nowait_completions)" -gt "$nowait" ] || fail "no NOWAIT completion once bdev is named"
	# Empty: none, also xfs.
	echo "" >/sys/module/rust_loop/parameters/nowait_fs
	losetup --direct-io=off "$lower" && losetup --direct-io=on "$lower" || fail "toggling direct I/O failed"
	assert_file "/sys/block/$(basename "$lower")/rust_loop/nowait" 0
	losetup -d "$dev"
	losetup -d "$lower"
}

# A block device below the backing file system that takes no REQ_NOWAIT bio (dm-flakey here;
# dm-crypt, dm-thin, dm-snapshot alike): the block layer fails a NOWAIT bio to it with
# BLK_STS_NOTSUPP. rust_loop ended the loop request with that ("operation not supported" on every
# direct-I/O read and write over a file on such a device; found by the crash tests, whose backing
# file system is on dm-flakey over dm-log-writes). Now the guard sends those requests to the
# worker (nowait_skip_bdev), also after the device-mapper table is swapped under a bound device,
# and a NOWAIT submission that gets -EOPNOTSUPP all the same (a file of an XFS realtime device
# without REQ_NOWAIT: the guard looks at the data device) is retried by the worker
# (nowait_eagain). fio verifies the data each time. loop.c, which never submits NOWAIT, passes it
# too (TEST_DRIVER=loop).
nw_cleanup() {
	cleanup_loops
	! mountpoint -q "$T/nw" || wait_for 10 umount "$T/nw" || umount -l "$T/nw"
	local d
	for d in tnw-data tnw-rt; do
		! dmsetup info "$d" >/dev/null 2>&1 || wait_for 10 dmsetup remove "$d" || echo "cannot remove $d" >&2
	done
}
t_dio_nowait_device_without_nowait() {
	load_rust_loop
	modprobe dm-flakey || fail "modprobe dm-flakey failed"
	trap nw_cleanup EXIT
	nw_cleanup
	local half dev dev_rt skip eagain
	half=$(($(blockdev --getsz "$SCRATCH_DEV") / 2))
	dmsetup create tnw-data --table "0 $half linear $SCRATCH_DEV 0" || fail "dm-linear failed"
	dmsetup create tnw-rt --table "0 $half flakey $SCRATCH_DEV $half 180 0" || fail "dm-flakey failed"
	mkfs.xfs -q -f -r rtdev=/dev/mapper/tnw-rt /dev/mapper/tnw-data || fail "mkfs.xfs with a realtime device failed"
	mkdir -p "$T/nw"
	mount -o rtdev=/dev/mapper/tnw-rt /dev/mapper/tnw-data "$T/nw" || fail "mounting it failed"
	fallocate -l 64M "$T/nw/img"
	# A realtime file: its data on the realtime device (dm-flakey).
	xfs_io -f -c "chattr +r" "$T/nw/rtimg" && fallocate -l 64M "$T/nw/rtimg" || fail "a realtime file failed"
	dev=$(dio_attach "$T/nw/img")
	dev_rt=$(dio_attach "$T/nw/rtimg")
	# 1. The data device takes NOWAIT bios (dm-linear): the NOWAIT path serves the file's.
	fio_verify "$dev" --rw=randwrite --bs=4k --size=4M --iodepth=1
	! is_rust || [ "$(stat_of "$dev" nowait_completions)" -gt 0 ] || fail "no NOWAIT completion over dm-linear"
	# 2. The realtime file: NOWAIT attempts get -EOPNOTSUPP and are retried by the worker.
	fio_verify "$dev_rt" --rw=randwrite --bs=4k --size=4M --iodepth=1
	if is_rust; then
		eagain=$(stat_of "$dev_rt" nowait_eagain)
		log "realtime file: nowait_eagain $eagain, worker_submissions $(stat_of "$dev_rt" worker_submissions)"
		[ "$eagain" -gt 0 ] || fail "no NOWAIT attempt was refused on the realtime device"
	fi
	# 3. The data device's table swapped for dm-flakey (no REQ_NOWAIT) under the bound device.
	dmsetup suspend --nolockfs tnw-data && dmsetup load tnw-data --table "0 $half flakey $SCRATCH_DEV 0 180 0" &&
		dmsetup resume tnw-data || fail "swapping the table failed"
	is_rust && skip=$(stat_of "$dev" nowait_skip_bdev)
	fio_verify "$dev" --rw=randrw --bs=4k --size=4M --iodepth=1
	if is_rust; then
		log "after the swap: nowait_skip_bdev $skip -> $(stat_of "$dev" nowait_skip_bdev)"
		[ "$(stat_of "$dev" nowait_skip_bdev)" -gt "$skip" ] || fail "the guard did not see the device without REQ_NOWAIT"
	fi
	! dmesg | grep -q "operation not supported error, dev loop" || fail "a loop request ended with 'operation not supported'"
	detach "$dev"
	detach "$dev_rt"
}

# A single task that keeps a deep queue is handed to the worker (which submits on another CPU
# while the task prepares its next requests); one that waits for each request stays on
# queue_rq's NOWAIT path, but for a probe every 256 requests. nowait_max_depth (per device,
# writable; 0: always the worker) is the in-flight depth from which a task's requests go over.
t_dio_deep_queue_goes_to_worker() {
	is_rust || return 0 # rust_loop's own counters and knob
	load_rust_loop
	scratch_fs xfs
	fallocate -l 64M "$SCRATCH/img"
	dd if=/dev/urandom of="$SCRATCH/img" bs=1M count=64 conv=notrunc status=none
	local dev n skip nowait worker ios probes
	dev=$(dio_attach "$SCRATCH/img")
	n=$(basename "$dev")
	udevadm settle 2>/dev/null || true # no probe reads in the counts below
	assert_file "/sys/block/$n/rust_loop/nowait_max_depth" 1
	# One read at a time (after the first, which may update the atime): NOWAIT but the probes.
	dd if="$dev" of=/dev/null bs=4k count=1 iflag=direct status=none
	skip=$(stat_of "$dev" nowait_skip_depth)
	nowait=$(stat_of "$dev" nowait_completions)
	probes=$(stat_of "$dev" nowait_probes)
	fio --name=qd1 --filename="$dev" --direct=1 --ioengine=psync --rw=randread --bs=4k \
		--size=64M --io_size=4M --output=/dev/null
	assert_eq "$(stat_of "$dev" nowait_skip_depth)" "$skip" "nowait_skip_depth after QD1 reads"
	ios=$(($(stat_of "$dev" nowait_completions) - nowait))
	[ "$ios" -ge 1010 ] || fail "only $ios of 1024 QD1 reads took the NOWAIT path"
	probes=$(($(stat_of "$dev" nowait_probes) - probes))
	[ "$probes" -ge 1 ] && [ "$probes" -le 4 ] || fail "$probes probes in 1024 QD1 reads (1 in 256 expected)"
	# 32 in flight: after the first few, queue_rq hands the reads to the worker.
	skip=$(stat_of "$dev" nowait_skip_depth)
	worker=$(stat_of "$dev" worker_submissions)
	fio --name=qd32 --filename="$dev" --direct=1 --ioengine=libaio --iodepth=32 --rw=randread \
		--bs=4k --size=64M --io_size=8M --output=/dev/null
	ios=$(($(stat_of "$dev" nowait_skip_depth) - skip))
	[ "$ios" -ge 1024 ] || fail "only $ios of 2048 QD32 reads were handed over for depth"
	[ $(($(stat_of "$dev" worker_submissions) - worker)) -ge "$ios" ] ||
		fail "the worker ran fewer reads than were handed to it"
	# Several tasks: 8 jobs at QD16 keep the hardware queue deep (16 in flight), and the
	# worker takes their reads; 4 jobs that wait for each read never have 16 in flight and
	# keep the NOWAIT path. How many the 8 jobs keep in flight is the backing device's latency
	# over the guest's CPU time per read (Little's law), and under TCG the guest is slow: on the
	# virtio disk Debian's RT kernel had 16 in flight for 40% of the reads, on a 10 ms device the
	# debug kernel with PREEMPT_RT for 2.5%. So the 8 jobs share one hardware queue, and the
	# backing file lives on a device that takes 200 ms for every request (null_blk, timer
	# completion; blk-mq, so it takes NOWAIT bios): after each job's first 16 reads, every read
	# finds the others' in flight however slow the guest.
	modprobe null_blk nr_devices=1 queue_mode=2 memory_backed=1 gb=1 irqmode=2 \
		completion_nsec=200000000 hw_queue_depth=256 || fail "modprobe null_blk failed"
	trap 'losetup -D; umount "$T/nb" 2>/dev/null; rmmod null_blk 2>/dev/null' EXIT
	mkdir -p "$T/nb"
	mkfs.xfs -q -f -K /dev/nullb0 && mount /dev/nullb0 "$T/nb" || fail "xfs on null_blk failed"
	# Written, not only allocated: XFS reads unwritten extents as zeroes without the device.
	dd if=/dev/zero of="$T/nb/img" bs=1M count=16 conv=fsync status=none || fail "writing the image failed"
	local slow
	slow=$(losetup -f)
	echo 1 >"/sys/block/$(basename "$slow")/rust_loop/nr_hw_queues" || fail "one hardware queue for $slow"
	assert_eq "$(dio_attach "$T/nb/img")" "$slow" "the device with one hardware queue"
	udevadm settle 2>/dev/null || true
	skip=$(stat_of "$slow" nowait_skip_depth)
	fio --name=mt --filename="$slow" --direct=1 --ioengine=libaio --iodepth=16 --rw=randread \
		--bs=4k --size=16M --io_size=512k --numjobs=8 --output=/dev/null
	ios=$(($(stat_of "$slow" nowait_skip_depth) - skip))
	[ "$ios" -ge 512 ] || fail "only $ios of 1024 reads of 8 jobs at QD16 were handed over for depth"
	losetup -d "$slow"
	nowait=$(stat_of "$dev" nowait_completions)
	fio --name=mt1 --filename="$dev" --direct=1 --ioengine=psync --rw=randread \
		--bs=4k --size=64M --io_size=1M --numjobs=4 --output=/dev/null
	ios=$(($(stat_of "$dev" nowait_completions) - nowait))
	[ "$ios" -ge 920 ] || fail "only $ios of 1024 reads of 4 psync jobs took the NOWAIT path"
	# 0: the worker submits every request, even one at a time.
	echo 0 >"/sys/block/$n/rust_loop/nowait_max_depth"
	nowait=$(stat_of "$dev" nowait_completions)
	skip=$(stat_of "$dev" nowait_skip_depth)
	fio --name=w0 --filename="$dev" --direct=1 --ioengine=psync --rw=randread --bs=4k \
		--size=64M --io_size=1M --output=/dev/null
	assert_eq "$(stat_of "$dev" nowait_completions)" "$nowait" "NOWAIT completions at nowait_max_depth 0"
	[ $(($(stat_of "$dev" nowait_skip_depth) - skip)) -ge 256 ] ||
		fail "fewer than 256 reads handed over at nowait_max_depth 0"
	# Above any depth: QD32 stays on the NOWAIT path.
	echo 1000000 >"/sys/block/$n/rust_loop/nowait_max_depth"
	assert_file "/sys/block/$n/rust_loop/nowait_max_depth" 1000000
	skip=$(stat_of "$dev" nowait_skip_depth)
	fio --name=inl --filename="$dev" --direct=1 --ioengine=libaio --iodepth=32 --rw=randread \
		--bs=4k --size=64M --io_size=4M --output=/dev/null
	assert_eq "$(stat_of "$dev" nowait_skip_depth)" "$skip" "nowait_skip_depth with no depth limit"
	# Not a number: EINVAL, the value stays.
	assert_fails sh -c "echo x >/sys/block/$n/rust_loop/nowait_max_depth"
	assert_fails sh -c "echo -1 >/sys/block/$n/rust_loop/nowait_max_depth"
	assert_file "/sys/block/$n/rust_loop/nowait_max_depth" 1000000
	# And the data read both ways is the file's.
	echo 1 >"/sys/block/$n/rust_loop/nowait_max_depth"
	cmp <(dd if="$dev" bs=1M iflag=direct status=none) "$SCRATCH/img" || fail "dio read data differs"
	losetup -d "$dev"
	# The module parameter sets the default of new devices.
	load_rust_loop nowait_max_depth=7
	dev=$(dio_attach "$SCRATCH/img")
	assert_file "/sys/block/$(basename "$dev")/rust_loop/nowait_max_depth" 7
	losetup -d "$dev"
}

# Completions from task context run on the completing stack or in the worker's batch, not
# through the BLOCK softirq (which, from task context, wakes ksoftirqd for every request of a
# single-queue device). Buffered mode: every request is finished by the worker thread, so all
# of them are ended by its batch. Direct I/O on XFS on the virtio disk: reads complete from the disk's interrupt
# (deferred), NOWAIT-refused or blocking ones partly in task context; every request is counted
# exactly once either way, and the data is the file's.
t_completion_context_counted() {
	is_rust || return 0 # rust_loop's own counters
	load_rust_loop
	scratch_fs xfs
	fallocate -l 32M "$SCRATCH/img"
	dd if=/dev/urandom of="$SCRATCH/img" bs=1M count=32 conv=notrunc status=none
	local dev n here deferred batched started
	dev=$(attach "$SCRATCH/img")
	n=$(basename "$dev")
	dd if="$dev" of=/dev/null bs=4k count=2048 iflag=direct status=none
	here=$(stat_of "$dev" completions_here)
	deferred=$(stat_of "$dev" completions_deferred)
	batched=$(stat_of "$dev" completions_batched)
	started=$(stat_of "$n" hw_queue_requests | tr ' ' '\n' | awk '{s += $1} END {print s}')
	log "buffered: completions_here=$here completions_deferred=$deferred completions_batched=$batched started=$started"
	assert_eq "$deferred" 0 "buffered completions through blk_mq_complete_request"
	[ "$batched" -ge 2048 ] || fail "buffered: only $batched of 2048+ requests ended by the worker's batch"
	assert_eq "$batched" "$started" "completions vs requests started"
	losetup -d "$dev"
	dev=$(dio_attach "$SCRATCH/img")
	fio --name=rw --filename="$dev" --direct=1 --ioengine=libaio --iodepth=16 --rw=randrw \
		--bs=4k --size=32M --io_size=16M --output=/dev/null
	cmp <(dd if="$dev" bs=1M iflag=direct status=none) "$SCRATCH/img" || fail "dio data differs from the file"
	here=$(stat_of "$dev" completions_here)
	deferred=$(stat_of "$dev" completions_deferred)
	batched=$(stat_of "$dev" completions_batched)
	started=$(stat_of "$dev" hw_queue_requests | tr ' ' '\n' | awk '{s += $1} END {print s}')
	log "dio: completions_here=$here completions_deferred=$deferred completions_batched=$batched started=$started"
	assert_eq "$((here + deferred + batched))" "$started" "dio completions vs requests started"
	losetup -d "$dev"
}

t_dio_guard_rqqos_goes_to_worker() {
	load_rust_loop
	scratch_fs xfs
	fallocate -l 64M "$SCRATCH/img"
	local dev n before skip
	dev=$(dio_attach "$SCRATCH/img")
	n=$(basename "$dev")
	# wbt is off by default on loop queues (the NOWAIT path must never sleep in rq-qos): its
	# latency file is 0, or refuses to read when no wbt is attached at all...
	local lat
	lat=$(cat "/sys/block/$n/queue/wbt_lat_usec" 2>/dev/null || echo 0)
	assert_eq "$lat" 0 "wbt_lat_usec"
	# ...and turning it on makes queue_rq leave every submission to the worker.
	echo 2000 >"/sys/block/$n/queue/wbt_lat_usec"
	before=$(stat_of "$dev" nowait_completions)
	fio --name=r --filename="$dev" --direct=1 --ioengine=libaio --iodepth=16 --rw=randread \
		--bs=4k --size=64M --io_size=8M --output=/dev/null
	assert_eq "$(stat_of "$dev" nowait_completions)" "$before" "NOWAIT completions with rq-qos on"
	skip=$(stat_of "$dev" nowait_skip_rqqos)
	[ "$skip" -gt 0 ] || fail "nowait_skip_rqqos did not count"
	losetup -d "$dev"
}

t_dio_guard_stack_margin_goes_to_worker() {
	# A margin larger than any kernel stack: no submission may happen in queue_rq.
	load_rust_loop nowait_min_stack=1048576
	scratch_fs xfs
	fallocate -l 64M "$SCRATCH/img"
	local dev
	dev=$(dio_attach "$SCRATCH/img")
	fio --name=r --filename="$dev" --direct=1 --ioengine=libaio --iodepth=16 --rw=randrw \
		--bs=4k --size=64M --io_size=8M --output=/dev/null
	assert_eq "$(stat_of "$dev" nowait_completions)" 0 "NOWAIT completions with no stack margin"
	[ "$(stat_of "$dev" nowait_skip_stack)" -gt 0 ] || fail "nowait_skip_stack did not count"
	losetup -d "$dev"
}

t_dio_guard_cmtime_goes_to_worker() {
	# The first write after a timestamp tick must update the file's mtime/ctime, which XFS
	# (without lazytime) refuses under IOCB_NOWAIT: queue_rq hands it to the worker at once
	# (nowait_skip_cmtime) instead of trying in vain (nowait_eagain), and the worker's write
	# updates the timestamps and the data.
	is_rust || return 0 # rust_loop's own counters
	load_rust_loop
	scratch_fs xfs
	fallocate -l 16M "$SCRATCH/img"
	dd if=/dev/zero of="$SCRATCH/img" bs=1M count=16 conv=notrunc,fsync status=none
	local dev skip eagain worker mtime
	dev=$(dio_attach "$SCRATCH/img")
	head -c 4096 /dev/urandom >"$T/blk"
	sleep 0.2 # past the timestamp granularity (one tick)
	skip=$(stat_of "$dev" nowait_skip_cmtime)
	eagain=$(stat_of "$dev" nowait_eagain)
	worker=$(stat_of "$dev" worker_submissions)
	mtime=$(stat -c %Y.%y "$SCRATCH/img")
	dd if="$T/blk" of="$dev" bs=4k seek=7 count=1 oflag=direct conv=notrunc status=none
	assert_eq "$(stat_of "$dev" nowait_skip_cmtime)" "$((skip + 1))" "nowait_skip_cmtime after one write"
	assert_eq "$(stat_of "$dev" nowait_eagain)" "$eagain" "nowait_eagain after one write"
	[ "$(stat_of "$dev" worker_submissions)" -gt "$worker" ] || fail "the worker did not run the write"
	[ "$(stat -c %Y.%y "$SCRATCH/img")" != "$mtime" ] || fail "backing file mtime unchanged by the write"
	cmp <(dd if="$SCRATCH/img" bs=4k skip=7 count=1 status=none) "$T/blk" || fail "written block differs"
	losetup -d "$dev"
}

t_dio_guard_atime_goes_to_worker() {
	# A read that must first update the backing file's atime (relatime: mtime newer than
	# atime) would start an XFS transaction in queue_rq's caller (touch_atime ignores NOWAIT):
	# queue_rq hands it to the worker (nowait_skip_atime), which updates the atime; the next
	# read needs no update and takes the NOWAIT path.
	is_rust || return 0 # rust_loop's own counters
	load_rust_loop
	scratch_fs xfs
	dd if=/dev/urandom of="$SCRATCH/img" bs=1M count=16 conv=fsync status=none
	local dev skip worker nowait atime
	dev=$(dio_attach "$SCRATCH/img")
	udevadm settle
	sleep 0.2 # past the timestamp granularity (one tick)
	touch -m "$SCRATCH/img" # mtime now newer than atime
	sleep 0.1 # the atime the read writes is a tick later than that mtime
	atime=$(stat -c %X.%x "$SCRATCH/img")
	skip=$(stat_of "$dev" nowait_skip_atime)
	worker=$(stat_of "$dev" worker_submissions)
	dd if="$dev" of="$T/blk1" bs=4k skip=9 count=1 iflag=direct status=none
	assert_eq "$(stat_of "$dev" nowait_skip_atime)" "$((skip + 1))" "nowait_skip_atime after one read"
	[ "$(stat_of "$dev" worker_submissions)" -gt "$worker" ] || fail "the worker did not run the read"
	[ "$(stat -c %X.%x "$SCRATCH/img")" != "$atime" ] || fail "backing file atime unchanged by the read"
	cmp "$T/blk1" <(dd if="$SCRATCH/img" bs=4k skip=9 count=1 status=none) || fail "read block differs"
	nowait=$(stat_of "$dev" nowait_completions)
	dd if="$dev" of=/dev/null bs=4k skip=10 count=1 iflag=direct status=none
	assert_eq "$(stat_of "$dev" nowait_skip_atime)" "$((skip + 1))" "nowait_skip_atime after a second read"
	[ "$(stat_of "$dev" nowait_completions)" -gt "$nowait" ] || fail "the second read did not use NOWAIT"
	losetup -d "$dev"
}

# One direct write and one direct read through DEV on a backing file that needs a timestamp
# update for each, on the file system mounted at $SCRATCH; checks the data and that the
# update happened, leaves the counters to the caller. $T/lazy.{cmtime,atime} get the counters
# of the two guards before each I/O, $T/lazy.nowait.{w,r} the NOWAIT completions before them.
lazy_timestamp_io() {
	local dev=$1 img=$SCRATCH/img mtime atime
	# Warm-up: the file system's first asynchronous direct I/O creates its completion
	# workqueue, which only the worker may do.
	dd if="$dev" of=/dev/null bs=4k count=1 iflag=direct status=none
	dd if="$dev" of="$dev" bs=4k count=1 seek=1 iflag=direct oflag=direct conv=notrunc status=none
	head -c 4096 /dev/urandom >"$T/blk"
	sleep 0.2 # past the timestamp granularity (one tick)
	stat_of "$dev" nowait_skip_cmtime >"$T/lazy.cmtime"
	stat_of "$dev" nowait_completions >"$T/lazy.nowait.w"
	mtime=$(stat -c %Y.%y "$img")
	dd if="$T/blk" of="$dev" bs=4k seek=7 count=1 oflag=direct conv=notrunc status=none
	[ "$(stat -c %Y.%y "$img")" != "$mtime" ] || fail "backing file mtime unchanged by the write"
	cmp <(dd if="$img" bs=4k skip=7 count=1 status=none) "$T/blk" || fail "written block differs"
	sleep 0.2
	touch -m "$img" # mtime now newer than atime: relatime updates atime on the next read
	sleep 0.1
	atime=$(stat -c %X.%x "$img")
	stat_of "$dev" nowait_skip_atime >"$T/lazy.atime"
	stat_of "$dev" nowait_completions >"$T/lazy.nowait.r"
	dd if="$dev" of="$T/blk1" bs=4k skip=9 count=1 iflag=direct status=none
	[ "$(stat -c %X.%x "$img")" != "$atime" ] || fail "backing file atime unchanged by the read"
	cmp "$T/blk1" <(dd if="$img" bs=4k skip=9 count=1 status=none) || fail "read block differs"
}

# lazytime_case FS WRITE_SKIPS: lazy_timestamp_io on FS mounted lazytime; the write must be
# handed to the worker WRITE_SKIPS (0 or 1) times for its mtime/ctime, the read never for its
# atime, nothing may be refused with -EAGAIN, and what was not handed over used NOWAIT.
lazytime_case() {
	local fs=$1 wskip=$2 dev eagain
	scratch_fs "$fs" lazytime
	dd if=/dev/urandom of="$SCRATCH/img" bs=1M count=16 conv=fsync status=none
	# No cached pages of the file: a NOWAIT direct write over cached pages is refused (-EAGAIN).
	echo 1 >/proc/sys/vm/drop_caches
	dev=$(dio_attach "$SCRATCH/img")
	udevadm settle 2>/dev/null || true
	eagain=$(stat_of "$dev" nowait_eagain)
	lazy_timestamp_io "$dev"
	assert_eq "$(stat_of "$dev" nowait_skip_cmtime)" "$(($(cat "$T/lazy.cmtime") + wskip))" \
		"$fs lazytime: nowait_skip_cmtime after the write"
	assert_eq "$(stat_of "$dev" nowait_skip_atime)" "$(cat "$T/lazy.atime")" \
		"$fs lazytime: nowait_skip_atime after the read"
	assert_eq "$(stat_of "$dev" nowait_eagain)" "$eagain" "$fs lazytime: nowait_eagain"
	[ "$(stat_of "$dev" nowait_completions)" -ge "$(($(cat "$T/lazy.nowait.w") + 2 - wskip))" ] ||
		fail "$fs lazytime: fewer NOWAIT completions than I/Os not handed over"
	[ "$(stat_of "$dev" nowait_completions)" -gt "$(cat "$T/lazy.nowait.r")" ] ||
		fail "$fs lazytime: the read did not use NOWAIT"
	losetup -d "$dev"
}

t_dio_lazytime_timestamps_stay_nowait() {
	# With lazytime, XFS records a timestamp update as I_DIRTY_TIME without a transaction,
	# also under IOCB_NOWAIT, so neither the write's mtime/ctime update nor the read's atime
	# update sends the request to the worker. ext4 has ->dirty_inode, for which
	# generic_update_time refuses NOWAIT: its write still goes to the worker, its read not.
	is_rust || return 0 # rust_loop's own counters
	load_rust_loop
	lazytime_case xfs 0
	lazytime_case ext4 1
}

t_dio_guard_journal_info_goes_to_worker() {
	# A read submitted by a task inside a filesystem transaction (current->journal_info set,
	# as ext4 holding a jbd2 handle) must go to the worker: tests/kmod/rl_journal_probe does
	# exactly that submission. Natural workloads here dispatch such I/O from kthreads.
	load_rust_loop
	scratch_fs ext4
	dd if=/dev/urandom of="$SCRATCH/img" bs=1M count=16 status=none
	local dev out
	dev=$(dio_attach "$SCRATCH/img")
	assert_eq "$(stat_of "$dev" nowait_skip_journal)" 0 "nowait_skip_journal before"
	out=$(insmod "$ROOT/tests/kmod/rl_journal_probe.ko" dev="$dev" 2>&1) && fail "probe module stayed loaded"
	dmesg | grep -q "rl_journal_probe: read $dev with journal_info set: 0" ||
		fail "the probe's read failed: $out $(dmesg | grep rl_journal_probe)"
	assert_eq "$(stat_of "$dev" nowait_skip_journal)" 1 "nowait_skip_journal after one read"
	# Without journal_info the same read takes the NOWAIT path.
	local before
	before=$(stat_of "$dev" nowait_completions)
	dd if="$dev" of=/dev/null bs=4k count=1 skip=100 iflag=direct status=none
	[ "$(stat_of "$dev" nowait_completions)" -gt "$before" ] || fail "plain read did not use NOWAIT"
	losetup -d "$dev"
}

t_dio_page_cache_stays_small() {
	# Reading 512 MiB through the device (O_DIRECT on the loop device itself, so that only the
	# backing file's page cache can grow): in dio mode it must grow by < 10% of buffered mode.
	load_rust_loop
	scratch_fs xfs
	dd if=/dev/zero of="$SCRATCH/img" bs=1M count=512 status=none
	local dev growth_dio growth_buf c0 c1
	cached() { awk '/^Cached:/ {print $2}' /proc/meminfo; }
	dev=$(dio_attach "$SCRATCH/img")
	sync; echo 3 >/proc/sys/vm/drop_caches
	c0=$(cached)
	dd if="$dev" of=/dev/null bs=1M iflag=direct status=none
	c1=$(cached)
	growth_dio=$((c1 - c0))
	losetup --direct-io=off "$dev"
	sync; echo 3 >/proc/sys/vm/drop_caches
	c0=$(cached)
	dd if="$dev" of=/dev/null bs=1M iflag=direct status=none
	c1=$(cached)
	growth_buf=$((c1 - c0))
	log "Cached growth: dio ${growth_dio} KiB, buffered ${growth_buf} KiB"
	[ "$growth_buf" -gt $((400 * 1024)) ] || fail "buffered read grew the page cache by only $growth_buf KiB"
	[ $((growth_dio * 10)) -lt "$growth_buf" ] ||
		fail "dio grew the page cache by $growth_dio KiB, >= 10% of buffered $growth_buf KiB"
	losetup -d "$dev"
}

# Buffered mode without double caching: in the dontcache cache mode (rust_loop/cache_mode) the
# backing file's page cache does not keep what is read or written through the device (O_DIRECT
# on the device, so that only the backing file's cache can grow): < 10% of normal buffered mode,
# the data intact. A backing file system without FOP_DONTCACHE (tmpfs) refuses the mode.
t_buffered_dontcache_caches_once() {
	is_rust || return 0 # rust_loop's own cache mode
	load_rust_loop
	scratch_fs xfs
	dd if=/dev/zero of="$SCRATCH/img" bs=1M count=512 status=none
	local dev n mode growth
	local -A grew
	cached() { awk '/^Cached:/ {print $2}' /proc/meminfo; }
	dev=$(losetup -f --show --direct-io=off "$SCRATCH/img")
	n=$(basename "$dev")
	assert_file "/sys/block/$n/rust_loop/cache_mode" normal
	for mode in normal dontcache; do
		echo "$mode" >"/sys/block/$n/rust_loop/cache_mode" || fail "cache_mode $mode refused"
		assert_file "/sys/block/$n/rust_loop/cache_mode" "$mode"
		sync; echo 3 >/proc/sys/vm/drop_caches
		growth=$(cached)
		dd if="$dev" of=/dev/null bs=1M iflag=direct status=none || fail "read in $mode mode failed"
		grew[$mode-read]=$(($(cached) - growth))
		sync; echo 3 >/proc/sys/vm/drop_caches
		growth=$(cached)
		dd if=/dev/zero of="$dev" bs=1M count=512 oflag=direct conv=fsync status=none || fail "write in $mode mode failed"
		grew[$mode-write]=$(($(cached) - growth))
	done
	log "Cached growth for 512 MiB: read normal ${grew[normal-read]} KiB, dontcache ${grew[dontcache-read]} KiB; write normal ${grew[normal-write]} KiB, dontcache ${grew[dontcache-write]} KiB"
	for mode in read write; do
		[ "${grew[normal-$mode]}" -gt $((400 * 1024)) ] ||
			fail "normal buffered $mode grew the page cache by only ${grew[normal-$mode]} KiB"
		[ $((grew[dontcache-$mode] * 10)) -lt "${grew[normal-$mode]}" ] ||
			fail "dontcache $mode grew the page cache by ${grew[dontcache-$mode]} KiB, >= 10% of normal's ${grew[normal-$mode]} KiB"
	done
	# The data goes through intact.
	head -c $((64 << 20)) /dev/urandom >"$T/data"
	dd if="$T/data" of="$dev" bs=1M oflag=direct conv=fsync status=none || fail "data write failed"
	cmp <(dd if="$dev" bs=1M count=64 iflag=direct status=none) "$T/data" || fail "data read through the device differs"
	losetup -d "$dev"
	cmp <(head -c $((64 << 20)) "$SCRATCH/img") "$T/data" || fail "the backing file does not hold the data"
	# Unknown modes are refused; tmpfs (no FOP_DONTCACHE) refuses dontcache while bound.
	dev=$(losetup -f --show "$SCRATCH/img")
	n=$(basename "$dev")
	assert_fails sh -c "echo bogus >/sys/block/$n/rust_loop/cache_mode"
	losetup -d "$dev"
	mkdir -p "$T/tmpfs" && mount -t tmpfs -o size=64M none "$T/tmpfs" || fail "mounting tmpfs failed"
	truncate -s 16M "$T/tmpfs/img"
	dev=$(losetup -f --show "$T/tmpfs/img")
	n=$(basename "$dev")
	assert_fails sh -c "echo dontcache >/sys/block/$n/rust_loop/cache_mode"
	assert_file "/sys/block/$n/rust_loop/cache_mode" normal
	losetup -d "$dev"
	wait_for 10 umount "$T/tmpfs" || fail "umount tmpfs failed"
}

eof_zero_fill() {
	local mode=$1 dev
	load_rust_loop
	scratch_fs xfs
	dd if=/dev/urandom of="$SCRATCH/img" bs=1M count=4 status=none
	dev=$(losetup -f --show --direct-io="$mode" "$SCRATCH/img")
	# Shrink the file under the device to a size that is not a multiple of the block size.
	head -c $((2 * 1024 * 1024 + 300)) "$SCRATCH/img" >"$T/expect"
	truncate -s $((2 * 1024 * 1024 + 300)) "$SCRATCH/img"
	dd if="$dev" of="$T/got" bs=4096 skip=512 count=4 iflag=direct status=none ||
		fail "read at the end of the file failed"
	# 300 bytes of data, then zeroes.
	cmp -n 300 "$T/got" <(tail -c 300 "$T/expect") || fail "data before EOF differs"
	cmp <(tail -c +301 "$T/got") <(head -c $((16384 - 300)) /dev/zero) || fail "no zeroes past EOF"
	losetup -d "$dev"
}
t_dio_read_past_eof_zero_fills() { eof_zero_fill on; }
t_buffered_read_past_eof_zero_fills() { eof_zero_fill off; }

# stacked_loops XFS_MOUNT_OPTIONS TOP_FS: TOP_FS on loop (dio) on a file on XFS on loop (dio) on
# a file on XFS (scratch); both XFS mounted with XFS_MOUNT_OPTIONS (may be empty). fio verify on
# top, then both file systems are checked.
stacked_loops() {
	local opts=$1 top=$2
	load_rust_loop
	scratch_fs xfs "$opts"
	truncate -s 512M "$SCRATCH/outer.img"
	local outer inner m1=$T/m1 m2=$T/m2
	outer=$(dio_attach "$SCRATCH/outer.img")
	mkfs.xfs -q -f "$outer"
	mkdir -p "$m1" "$m2" && mount ${opts:+-o "$opts"} "$outer" "$m1"
	truncate -s 320M "$m1/inner.img" # XFS needs 300 MB
	inner=$(dio_attach "$m1/inner.img")
	case $top in
	ext4) mkfs.ext4 -q -F "$inner" ;;
	xfs) mkfs.xfs -q -f "$inner" ;;
	esac
	mount "$inner" "$m2"
	fio --name=s --directory="$m2" --direct=1 --ioengine=libaio --iodepth=32 --rw=randrw \
		--bssplit=4k/50:64k/40:1m/10 --size=64M --verify=crc32c --verify_fatal=1 \
		--do_verify=1 --numjobs=2 --output=/dev/null || fail "fio on the stacked setup failed"
	umount "$m2"
	case $top in
	ext4) e2fsck -fn "$inner" >/dev/null || fail "inner ext4 damaged" ;;
	xfs) xfs_repair -n "$inner" >/dev/null 2>&1 || fail "inner XFS damaged" ;;
	esac
	losetup -d "$inner"
	umount "$m1"
	xfs_repair -n "$outer" >/dev/null 2>&1 || fail "middle XFS damaged"
	losetup -d "$outer"
}

t_dio_stacked_loop_on_xfs_on_loop() {
	stacked_loops "" ext4
}

t_dio_stacked_loop_on_lazytime_xfs() {
	# The same with lazytime XFS below each loop device and XFS on top: the backing files'
	# timestamp updates now happen in queue_rq (I_DIRTY_TIME, no transaction), under the
	# transactions of the XFS above (lockdep on the debug kernel).
	stacked_loops lazytime xfs
}

t_dio_toggle_during_io_loses_nothing() {
	load_rust_loop
	scratch_fs xfs
	fallocate -l 128M "$SCRATCH/img"
	local dev pid i
	dev=$(dio_attach "$SCRATCH/img")
	fio --name=t --filename="$dev" --direct=1 --ioengine=libaio --iodepth=16 --rw=randwrite \
		--bssplit=4k/50:64k/50 --size=128M --verify=crc32c --verify_fatal=1 --do_verify=1 \
		--output="$T/fio.out" &
	pid=$!
	for i in $(seq 1 20); do
		losetup --direct-io=off "$dev"
		sleep 0.2
		losetup --direct-io=on "$dev"
		sleep 0.2
		kill -0 $pid 2>/dev/null || break
	done
	wait $pid || fail "fio failed while direct I/O was toggled: $(grep -iE 'err|verify' "$T/fio.out" | head -5)"
	# Everything written is in the file, whichever mode wrote it.
	cmp <(dd if="$dev" bs=1M iflag=direct status=none) <(dd if="$SCRATCH/img" bs=1M iflag=direct status=none) ||
		fail "device and file differ"
	losetup -d "$dev"
}
