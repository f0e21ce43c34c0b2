// SPDX-License-Identifier: GPL-2.0

//! [`IoState`]: what the data path knows of a bound device's backing file, read by its requests
//! without a lock.

use super::sys::{BackingFile, DiskOps, Request};

/// What the data path needs of a bound device. Replaced only while no request reads it
/// ([`super::sys::DataPathIdle`]): `queue_rq` reads it only after it has found the device
/// bound, which the device publishes with release ordering after the cells are written.
pub(crate) struct IoState {
    /// The backing file.
    pub(crate) file: BackingFile,
    /// Byte offset of the device's data in the file.
    pub(crate) offset: u64,
    /// Writes fail with an I/O error.
    pub(crate) read_only: bool,
    /// Reads and writes are direct I/O on the backing file.
    pub(crate) direct_io: bool,
    /// The backing file accepts `IOCB_NOWAIT` attempts.
    pub(crate) nowait: bool,
    /// The backing file's page cache honours `IOCB_DONTCACHE`.
    pub(crate) dontcache: bool,
    /// The backing file's direct-I/O offset and size alignment, less one: a read or write
    /// whose position in the file or length is not a multiple of it takes the buffered path.
    pub(crate) dio_mask: u64,
    /// The backing file is a regular file (not a block device).
    pub(crate) file_is_reg: bool,
    /// The backing file's data lives on another loop device.
    pub(crate) backing_on_loop: bool,
}

impl IoState {
    /// Whether `rq` (a read or write) meets the backing file's direct-I/O alignment: its
    /// position in the file and its length. Always so unless the device's block size or
    /// offset is below that alignment (see `LoopDevice::can_use_dio`). The memory of its
    /// segments meets the file's alignment through the queue's `dma_alignment`.
    ///
    /// A backing block device's logical block size is read at each request: it may have
    /// grown since the binding (`LOOP_SET_BLOCK_SIZE` on a loop device below), and the block
    /// layer fails direct I/O below it with `EINVAL`. loop.c keeps the alignment of the
    /// binding's time and fails such requests; here they go buffered.
    pub(crate) fn dio_aligned<D: DiskOps>(&self, rq: &Request<D>) -> bool {
        let mut mask = self.dio_mask;
        if !self.file_is_reg {
            if let Some(bs) = self.file.current_block_size() {
                mask |= u64::from(bs.max(1) - 1);
            }
        }
        (rq.pos().wrapping_add(self.offset) | u64::from(rq.bytes())) & mask == 0
    }
}
