// SPDX-License-Identifier: GPL-2.0

//! The queue limits a bound device advertises (`loop_update_limits`): block sizes, discard and
//! write-zeroes, the direct-I/O memory alignment, merging.

use super::*;

/// `max_hw_sectors` of a loop queue: 4 MiB, so that large (merged, in direct-I/O mode) requests
/// reach the backing file whole (loop.c keeps the historic 2560-sector cap).
pub(super) const MAX_HW_SECTORS: u32 = 8192;

/// `max_segments`: enough for a 4 MiB request of scattered pages.
pub(super) const MAX_SEGMENTS: u16 = 1024;

impl LoopDevice {
    /// Fills `lim` for `file` with block size `bsize` (0: the default) (`loop_update_limits`).
    pub(super) fn fill_limits(
        &self,
        lim: &mut bindings::queue_limits,
        file: &BackingFile,
        dio: DioAlign,
        bsize: u32,
    ) {
        let flags = self.flags();
        let bsize = match bsize {
            0 if flags & FLAG_DIRECT_IO != 0 => dio.min_size,
            0 => SECTOR_SIZE,
            b => b,
        };
        let (granularity, max_discard) = file.discard_config();
        lim.logical_block_size = bsize;
        lim.physical_block_size = bsize;
        lim.io_min = bsize;
        lim.dma_alignment = Self::dma_alignment(flags, dio);
        lim.features &= !(BLK_FEAT_WRITE_CACHE | bindings::BLK_FEAT_ROTATIONAL);
        if file.has_fsync() && flags & FLAG_READ_ONLY == 0 {
            lim.features |= BLK_FEAT_WRITE_CACHE;
        }
        if file.is_rotational() {
            lim.features |= bindings::BLK_FEAT_ROTATIONAL;
        }
        lim.max_hw_discard_sectors = max_discard;
        lim.max_write_zeroes_sectors = max_discard;
        // A write-zeroes that may unmap punches a hole: as cheap as a discard, and the range
        // reads as zeroes. Advertised, file systems on the device can offer
        // `FALLOC_FL_WRITE_ZEROES` themselves (xfs and ext4 ask the device for this limit).
        lim.max_hw_wzeroes_unmap_sectors = max_discard;
        lim.discard_granularity = if max_discard != 0 { granularity } else { 0 };
    }

    pub(super) fn dma_alignment(flags: u32, dio: DioAlign) -> u32 {
        if flags & FLAG_DIRECT_IO != 0 {
            dio.mem_mask.max(SECTOR_SIZE - 1)
        } else {
            SECTOR_SIZE - 1
        }
    }
}
