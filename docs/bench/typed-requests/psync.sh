#!/bin/bash
cd "${KO_DIR:-/work/exp14}"  # old.ko, new*.ko: rust_loop.ko of the commits compared (VARIANTS)
modprobe null_blk nr_devices=1 queue_mode=2 memory_backed=1 gb=1 bs=4096 irqmode=0
mkfs.xfs -q -f /dev/nullb0; mkdir -p /tmp/nb; mount /dev/nullb0 /tmp/nb
fio --name=p --filename=/tmp/nb/img --size=256M --bs=1M --rw=write --direct=1 --output=/dev/null
sync
for round in 1 2; do
for v in ${VARIANTS:-old new}; do
  rmmod rust_loop 2>/dev/null
  insmod $v.ko || exit 1
  sleep 0.5
  dev=$(losetup -f); losetup --direct-io=on $dev /tmp/nb/img; n=$(basename $dev)
  for wl in "psync 1" "libaio 32"; do set -- $wl
  d0=$(cd /sys/block/$n/rust_loop && grep -H . * 2>/dev/null | tr '\n' ' ')
  r=$(fio --name=r --filename=$dev --direct=1 --ioengine=$1 --iodepth=$2 --rw=randread --bs=4k --time_based --runtime=1 --output-format=terse --terse-version=3 | awk -F';' '{print $8}')
  d1=$(cd /sys/block/$n/rust_loop && grep -H . * 2>/dev/null | tr '\n' ' ')
  echo "== r$round $v $1/$2 iops=$r insn/io=$(( 1000000000 / r ))"
  python3 - "$d0" "$d1" <<'PY'
import sys
def p(s):
    out={}
    for kv in s.split():
        k,_,v=kv.partition(':')
        try: out[k]=int(v)
        except: pass
    return out
a,b=p(sys.argv[1]),p(sys.argv[2])
print("   ", " ".join(f"{k}={b[k]-a.get(k,0)}" for k in sorted(b) if b[k]-a.get(k,0)))
PY
  done
  losetup -d $dev
done
done
