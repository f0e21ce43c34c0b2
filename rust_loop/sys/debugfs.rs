// SPDX-License-Identifier: GPL-2.0

//! debugfs directories whose files are safe functions of the data they show: a [`DebugDir`]
//! (removed when dropped) and [`DebugFiles`], one file per name of a list, each printing its
//! value of an `Arc<T>` that the files keep alive until they are removed (and, for the
//! writable ones, taking a written word).
//!
//! C header: [`include/linux/debugfs.h`](srctree/include/linux/debugfs.h).

use core::{ffi::c_void, fmt::Write, marker::PhantomData};
use kernel::{
    bindings,
    prelude::*,
    sync::Arc,
    uaccess::{UserPtr, UserSlice},
};

// rust_loop/helpers.c: `debugfs_create_file_aux` is a macro. The dentry, the file and the
// operations are passed as `void *`: their structs contain zero-sized C members.
extern "C" {
    fn rust_loop_debugfs_file(
        name: *const u8,
        mode: u16,
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

    /// Takes `word`, written to the writable file `tag` (UTF-8, surrounding white space
    /// trimmed).
    fn store(&self, tag: usize, word: &str) -> Result;
}

/// The longest word a writable file takes.
const STORE_MAX: usize = 32;

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

/// A directory of files showing `data`: file number `i` prints `data.show(i)` (and a writable
/// one passes what is written to `data.store(i)`). Dropping it removes the files (waiting for
/// the reads and writes in progress) and then lets `data` go.
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

    const FOPS_RW: bindings::file_operations = bindings::file_operations {
        write: Some(Self::write_callback),
        ..Self::FOPS
    };

    /// The directory `name` under `parent`, with one read-only file per name of `lists`, then
    /// one writable (by root) file per name of `writable`, each showing `data`; the tags number
    /// the files across the lists, in order.
    pub(crate) fn new(
        name: &CStr,
        parent: &DebugDir,
        data: Arc<T>,
        lists: &[&[&'static CStr]],
        writable: &[&'static CStr],
    ) -> Self {
        let dir = DebugDir::new(name, Some(parent));
        let files = lists.iter().flat_map(|l| l.iter()).map(|f| (f, false));
        let files = Iterator::chain(files, writable.iter().map(|f| (f, true)));
        for (tag, (file, rw)) in files.enumerate() {
            let (mode, fops) = match rw {
                false => (0o444, &Self::FOPS),
                true => (0o644, &Self::FOPS_RW),
            };
            // SAFETY: `file` is NUL-terminated and `dir.dentry` a directory of ours (or an
            // error pointer). The file's data is `data`, which lives until the file is removed
            // (field order: `_dir` is dropped first); its aux is the tag. `FOPS` and `FOPS_RW`
            // are promoted constants.
            unsafe {
                rust_loop_debugfs_file(
                    file.as_char_ptr(),
                    mode,
                    dir.dentry.cast(),
                    Arc::as_ptr(&data).cast_mut().cast(),
                    tag as *mut c_void,
                    core::ptr::from_ref(fops).cast(),
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

impl<T: DebugShow> DebugFiles<T> {
    /// # Safety
    ///
    /// Only the VFS calls this, through the debugfs proxy, to write to a writable file of
    /// [`Self::new`] opened by [`Self::open_callback`]; `buf` is a user address of `count`
    /// bytes.
    unsafe extern "C" fn write_callback(
        file: *mut bindings::file,
        buf: *const kernel::ffi::c_char,
        count: usize,
        _ppos: *mut bindings::loff_t,
    ) -> isize {
        // SAFETY: `file` is open (its seq_file is its private data, that seq_file's private
        // data the `T`, alive while the file exists); its aux is the tag.
        let (data, tag) = unsafe {
            let m = (*file).private_data.cast::<bindings::seq_file>();
            (
                &*(*m).private.cast::<T>(),
                rust_loop_debugfs_aux(file.cast_const().cast()) as usize,
            )
        };
        let mut word = [0u8; STORE_MAX];
        let Some(dst) = word.get_mut(..count) else {
            return EINVAL.to_errno() as isize;
        };
        let read = UserSlice::new(UserPtr::from_addr(buf as usize), count)
            .reader()
            .read_slice(dst);
        let stored = read.and_then(|()| {
            let text = core::str::from_utf8(dst).map_err(|_| EINVAL)?;
            data.store(tag, text.trim())
        });
        match stored {
            Ok(()) => count as isize,
            Err(e) => e.to_errno() as isize,
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
