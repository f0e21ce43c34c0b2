// SPDX-License-Identifier: GPL-2.0

//! The file systems `queue_rq` may call into: the `nowait_fs` module parameter.
//!
//! Submitting direct I/O from `queue_rq` (with `IOCB_NOWAIT`) runs the backing file system in
//! the context of whoever submitted the request, which is what upstream's 2025 series could not
//! make safe in general (see `docs/nowait-hazards.md`). rust_loop's guards cover the hazards
//! found and tested on the file systems named here (xfs and ext4 by default); on every other
//! file system (and on block devices, `bdev`, unless named) the worker submits, still with
//! direct I/O. The parameter is a comma- or space-separated list of file system type names
//! (`/proc/filesystems`), `all` for every file system that supports `IOCB_NOWAIT`, empty for
//! none; a device reads it whenever it publishes its configuration (at binding, and at
//! `LOOP_SET_STATUS`, `LOOP_CHANGE_FD`, `LOOP_SET_BLOCK_SIZE` and the like).

use kernel::prelude::*;

/// Room for the parameter's value (the C side's buffer is as large).
const LIST_LEN: usize = 256;

/// Whether the `nowait_fs` parameter lets `queue_rq` submit to a file on file system `fs`
/// (a [`super::sys::BackingFile::fs_type`]).
pub(crate) fn allows(fs: &CStr) -> bool {
    let mut buf = [0u8; LIST_LEN];
    list_allows(super::sys::nowait_fs_param(&mut buf), fs.to_bytes())
}

/// Whether `list` (names separated by commas or white space) names `fs`, or is `all`.
fn list_allows(list: &[u8], fs: &[u8]) -> bool {
    list.split(|&b| b == b',' || b.is_ascii_whitespace())
        .filter(|name| !name.is_empty())
        .any(|name| name == b"all" || name == fs)
}
