// SPDX-License-Identifier: GPL-2.0

//! debugfs directories whose files are safe functions of the data they show: a [`DebugDir`]
//! (removed when dropped) and [`DebugFiles`], one read-only file per name of a list, each
//! printing its value of an `Arc<T>` that the files keep alive until they are removed.
//!
//! C header: [`include/linux/debugfs.h`](srctree/include/linux/debugfs.h).

use core::{ffi::c_void, fmt::Write, marker::PhantomData};
use kernel::{bindings, prelude::*, sync::Arc};

// rust_loop/helpers.c: `debugfs_create_file_aux` is a macro. The dentry, the file and the
// operations are passed as `void *`: their structs contain zero-sized C members.
extern "C" {
    fn rust_loop_debugfs_file(
        name: *const u8,
        parent: *mut c_void,
        data: *mut c_void,
        aux: *mut c_void,
        fops: *const c_void,
    ) -> *mut c_void;
    fn rust_loop_debugfs_aux(file: *const c_void) -> *mut c_void;
}

/// Data with debugfs files ([`DebugFiles`]): file `tag` prints [`DebugShow::show`].
pub(crate) trait DebugShow: Send + Sync + Sized + 'static {
    /// The module the files belong to (their `owner`).
    type Module: kernel::ModuleMetadata;

    /// Prints the value of file `tag` (its index in the list of names) into `out`.
    fn show(&self, tag: usize, out: &mut dyn Write) -> Result;
}

/// A debugfs directory, removed with everything in it when dropped.
///
/// # Invariants
///
/// `dentry` is what `debugfs_create_dir` returned: a directory, or an error pointer (debugfs
/// absent or full), which every debugfs function takes as a no-op parent or entry.
pub(crate) struct DebugDir {
    dentry: *mut bindings::dentry,
}

// SAFETY: A dentry pointer is usable from any thread; debugfs serialises its own changes.
unsafe impl Send for DebugDir {}
// SAFETY: As for `Send`: `&DebugDir` only creates entries under it.
unsafe impl Sync for DebugDir {}

impl DebugDir {
    /// The directory `name` under `parent` (the debugfs root if `None`). Never fails: without
    /// debugfs, the directory and what is made in it do not exist, as for C callers.
    pub(crate) fn new(name: &CStr, parent: Option<&DebugDir>) -> Self {
        let parent = parent.map_or(core::ptr::null_mut(), |p| p.dentry);
        // SAFETY: `name` is a NUL-terminated string; `parent` is null or a dentry of
        // `debugfs_create_dir` (type invariant), an error pointer included.
        let dentry = unsafe { bindings::debugfs_create_dir(name.as_char_ptr(), parent) };
        // INVARIANT: from `debugfs_create_dir`.
        Self { dentry }
    }
}

impl Drop for DebugDir {
    fn drop(&mut self) {
        // SAFETY: `dentry` is ours (type invariant); `debugfs_remove` ignores an error pointer,
        // and waits for the file operations in progress in the tree.
        unsafe { bindings::debugfs_remove(self.dentry) };
    }
}

/// A directory of read-only files showing `data`: file number `i` prints `data.show(i)`.
/// Dropping it removes the files (waiting for the reads in progress) and then lets `data` go.
pub(crate) struct DebugFiles<T: DebugShow> {
    // Declared first: dropped (the files removed) before `data`.
    _dir: DebugDir,
    _data: Arc<T>,
}

impl<T: DebugShow> DebugFiles<T> {
    const FOPS: bindings::file_operations = bindings::file_operations {
        owner: super::compat::this_module::<T::Module>(),
        open: Some(Self::open_callback),
        read: Some(bindings::seq_read),
        llseek: Some(bindings::seq_lseek),
        release: Some(bindings::single_release),
        // SAFETY: All-zero is a valid `file_operations` (every callback absent).
        ..unsafe { core::mem::zeroed() }
    };

    /// The directory `name` under `parent`, with one file per name of `lists`, each showing
    /// `data`; the tags number the files across the lists, in order.
    pub(crate) fn new(
        name: &CStr,
        parent: &DebugDir,
        data: Arc<T>,
        lists: &[&[&'static CStr]],
    ) -> Self {
        let dir = DebugDir::new(name, Some(parent));
        for (tag, file) in lists.iter().flat_map(|l| l.iter()).enumerate() {
            // SAFETY: `file` is NUL-terminated and `dir.dentry` a directory of ours (or an
            // error pointer). The file's data is `data`, which lives until the file is removed
            // (field order: `_dir` is dropped first); its aux is the tag. `FOPS` is a promoted
            // constant.
            unsafe {
                rust_loop_debugfs_file(
                    file.as_char_ptr(),
                    dir.dentry.cast(),
                    Arc::as_ptr(&data).cast_mut().cast(),
                    tag as *mut c_void,
                    core::ptr::from_ref(&Self::FOPS).cast(),
                )
            };
        }
        Self {
            _dir: dir,
            _data: data,
        }
    }

    /// # Safety
    ///
    /// Only the VFS calls this, through the debugfs proxy, to open a file of [`Self::new`].
    unsafe extern "C" fn open_callback(
        inode: *mut bindings::inode,
        file: *mut bindings::file,
    ) -> i32 {
        // SAFETY: `file` is being opened on `inode`, a file of `new` whose private data is the
        // `T` it shows, alive while the file exists; `single_open` keeps it as the seq_file's
        // private data for `show_callback`.
        unsafe { bindings::single_open(file, Some(Self::show_callback), (*inode).i_private) }
    }

    /// # Safety
    ///
    /// Only `seq_read` calls this, for a file opened by [`Self::open_callback`].
    unsafe extern "C" fn show_callback(m: *mut bindings::seq_file, _v: *mut c_void) -> i32 {
        // SAFETY: `m` is the seq_file of an open file of `new`: its private data is the `T`
        // (alive: debugfs removes the file, waiting for this call, before `data` goes) and its
        // file's aux the tag.
        let (data, tag) = unsafe {
            (
                &*(*m).private.cast::<T>(),
                rust_loop_debugfs_aux((*m).file.cast()) as usize,
            )
        };
        let mut out = SeqOut(m, PhantomData);
        match data.show(tag, &mut out) {
            Ok(()) => 0,
            Err(e) => e.to_errno(),
        }
    }
}

/// Writes into a seq_file (for [`DebugShow::show`]).
struct SeqOut<'a>(*mut bindings::seq_file, PhantomData<&'a ()>);

impl Write for SeqOut<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        // SAFETY: `self.0` is the seq_file of the `show` in progress; `s` is `s.len()`
        // readable bytes. An overflow is noted in the seq_file, which retries with more room.
        unsafe { bindings::seq_write(self.0, s.as_ptr().cast(), s.len()) };
        Ok(())
    }
}
