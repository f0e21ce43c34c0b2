#!/bin/bash
# one-off (run: bash scripts/vm.sh --disk IMG -- env ROUNDS=.. MOUNTS=.. WLS=.. VARIANTS=.. bash docs/bench/lazytime-shared-depth/rw12-lazytime.sh): bench's dio 12-job rw (rw 50%, 4k, libaio QD16, per-job regions) on XFS on the virtio
# disk mounted with the default options and with lazytime: raw, C loop, rust_loop, counters.
cd /work/main
run() {
  c0=$(awk '/^ctxt/{print $2}' /proc/stat); t0=$(awk '/^cpu /{print $2+$3+$4+$6+$7+$8}' /proc/stat)
  if [ "${WL:-rw12}" = rw12 ]; then
  r=$(fio --name=rw --filename=$1 --direct=1 --ioengine=libaio --iodepth=16 --rw=rw --rwmixread=50 --bs=4k \
    --numjobs=12 --size=85M --offset_increment=85M --time_based --runtime=${RT:-4} --group_reporting \
    --output-format=terse --terse-version=3 | awk -F';' '{printf "%d", $8+$49}')
  else # one job, one I/O at a time, random 50/50 read/write
  r=$(fio --name=rw --filename=$1 --direct=1 --ioengine=psync --rw=randrw --rwmixread=50 --bs=4k \
    --size=1000M --time_based --runtime=${RT:-4} --norandommap --randrepeat=1 \
    --output-format=terse --terse-version=3 | awk -F';' '{printf "%d", $8+$49}')
  fi
  c1=$(awk '/^ctxt/{print $2}' /proc/stat); t1=$(awk '/^cpu /{print $2+$3+$4+$6+$7+$8}' /proc/stat)
  echo "iops=$r ctx/io=$(echo "scale=2; ($c1-$c0)/($r*${RT:-4})" | bc) cpu_us/io=$(echo "scale=1; ($t1-$t0)*10000/($r*${RT:-4})" | bc)"
}
mkdir -p /tmp/nb
for round in ${ROUNDS:-1 2}; do
for m in ${MOUNTS:-defaults lazytime}; do
  umount /tmp/nb 2>/dev/null; mkfs.xfs -q -f /dev/vda; mount -o $m /dev/vda /tmp/nb
  fio --name=p --filename=/tmp/nb/img --size=1020M --bs=1M --rw=write --direct=1 --output=/dev/null
  sync; echo 1 > /proc/sys/vm/drop_caches
  echo "# $(grep ' /tmp/nb ' /proc/mounts)"
  for WL in ${WLS:-rw12}; do
  for v in ${VARIANTS:-raw loop rust_loop}; do
    rmmod rust_loop 2>/dev/null; rmmod loop 2>/dev/null
    if [ $v = raw ]; then echo "== r$round $m $WL raw $(run /tmp/nb/img)"; continue; fi
    if [ $v = loop ]; then modprobe loop; else
      for i in 1 2 3 4 5; do insmod rust_loop.ko && break; sleep 1; done
    fi
    sleep 0.5
    dev=$(losetup -f); losetup --direct-io=on $dev /tmp/nb/img; n=$(basename $dev)
    [ $v = rust_loop_d0 ] && echo 0 > /sys/block/$n/rust_loop/nowait_max_depth
    echo "== r$round $m $WL $v $(run $dev)"
    if [ $v != loop ]; then
      (cd /sys/block/$n/rust_loop && for f in hw_queue_requests nowait_completions nowait_eagain worker_submissions nowait_skip_atime nowait_skip_cmtime nowait_skip_depth nowait_skip_writes nowait_probes; do printf "%s=%s " $f "$(cat $f)"; done; echo)
    fi
    losetup -d $dev
  done
  done
done
done
dmesg | grep -E "WARNING|BUG|Oops" | head
