// SPDX-License-Identifier: GPL-2.0

//! The partition-scan record: what the last scan of a bound device read and left, so that a scan
//! asked for again on an unchanged backing file is dropped instead of re-reading the table.

use super::*;

/// What a partition scan read: the backing file (an identity, never dereferenced), the
/// device's offset into it, size and logical block size, and the file's change cookie read
/// before the scan; and what it left: the digest of the partitions it created
/// ([`Disk::partitions_digest`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct PartTableStamp {
    file: usize,
    offset: u64,
    sectors: u64,
    /// The table's entries count in logical blocks, and a scan after `LOOP_SET_BLOCK_SIZE`
    /// raised it above the page-cache block size of an open device fails (`EIO`, as loop.c's).
    block_size: u32,
    cookie: u64,
    /// `None` until known (a scan run by someone else's open is not watched to its end).
    parts: Option<u64>,
}

impl LoopDevice {
    /// The state of the backing file a partition scan reads, if it can be known to be
    /// unchanged later (the file system keeps a change cookie).
    pub(super) fn part_table_stamp(&self) -> Option<PartTableStamp> {
        let file = self.backing.lock().clone()?;
        let cookie = file.change_cookie();
        if cookie == 0 {
            return None;
        }
        Some(PartTableStamp {
            file: file.as_raw() as usize,
            offset: self.offset(),
            sectors: self.calculate_size(&file),
            block_size: self.queue().limits().logical_block_size,
            cookie,
            parts: None,
        })
    }

    /// From `open`: a pending partition scan (`BLKRRPART`) over a partition table that cannot
    /// have changed since the last scan is dropped, so the partitions are not removed and
    /// added again. That is what made them appear, vanish and reappear after `losetup -P`:
    /// udev watches loop devices, and when `losetup` closes the device it had open for writing,
    /// udev asks for a rescan (`BLKRRPART`) right after the driver's own. The table cannot have
    /// changed when the backing file, its offset, size and logical block size are the same and
    /// its change cookie (`i_version`, bumped by every write and `fallocate`, through the device
    /// or not) is the one read before that scan, the device's page cache holds no unwritten
    /// data, and the partitions are still the ones that scan created (none added, removed or
    /// resized with `BLKPG` since: a rescan is how such changes are undone).
    pub(super) fn drop_redundant_part_scan(&self) {
        let now = self.part_table_stamp().map(|s| PartTableStamp {
            parts: Some(self.disk.partitions_digest()),
            ..s
        });
        let mut last = self.part_stamp.lock();
        if now.is_some() && *last == now && !self.disk.page_cache_dirty() {
            self.disk.cancel_part_scan();
            self.stats.partscan_skipped.fetch_add(1, Ordering::Relaxed);
        } else {
            // The scan goes ahead; what it leaves is not known here, so none is dropped until
            // the driver scans again.
            *last = None;
        }
    }

    pub(super) fn reread_partitions(&self) {
        let before = self.part_table_stamp();
        let scanned = self.disk.rescan_partitions(false);
        *self.part_stamp.lock() = match scanned {
            Ok(digest) => before.map(|s| PartTableStamp {
                parts: Some(digest),
                ..s
            }),
            Err(_) => None,
        };
        if let Err(e) = scanned {
            pr_warn!(
                "loop_reread_partitions: partition scan of loop{} failed (rc={})\n",
                self.number,
                e.to_errno()
            );
        }
    }
}
