// SPDX-License-Identifier: GPL-2.0

//! sysfs attribute groups on a disk's device whose files are safe functions of the disk's data:
//! a `show` formats into a [`Page`], a `store` gets the written word.
//!
//! A group is three statics, all built at compile time: the attributes
//! (`[DiskAttr<T>; N]`), the NULL-terminated pointer array ([`AttrPtrs`]) and the group
//! ([`AttrGroup`]); [`Disk::add_group`](super::Disk::add_group) shows it.
//!
//! C header: [`include/linux/sysfs.h`](srctree/include/linux/sysfs.h).

use super::{Disk, DiskOps};
use core::{cell::UnsafeCell, fmt::Write, marker::PhantomData};
use kernel::{bindings, prelude::*, str::as_char_ptr_in_const_context};

/// Formats what a `show` prints into its sysfs page (keeping room for the terminating NUL).
pub(crate) struct Page<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl Page<'_> {
    /// The whole page, to be written by a C function that fills it in its own way; the caller
    /// then sets the length with [`Page::set_len`].
    pub(crate) fn raw(&mut self) -> &mut [u8] {
        self.buf
    }

    /// Sets the length of what [`Page::raw`]'s user wrote (at most the page size less one).
    pub(crate) fn set_len(&mut self, len: usize) {
        self.len = len.min(self.buf.len().saturating_sub(1));
    }
}

impl Write for Page<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let b = s.as_bytes();
        let end = self.len + b.len();
        // Keep room for the terminating NUL.
        if end >= self.buf.len() {
            return Err(core::fmt::Error);
        }
        let dst = self.buf.get_mut(self.len..end).ok_or(core::fmt::Error)?;
        dst.copy_from_slice(b);
        self.len = end;
        Ok(())
    }
}

/// A `show`: prints the value of the data `D` into the page; `tag` is the attribute's own
/// number (0 for every attribute today).
pub(crate) type ShowFn<D> = fn(&D, usize, &mut Page<'_>) -> Result;
/// A `store`: takes the written text, as UTF-8 without surrounding white space.
pub(crate) type StoreFn<D> = fn(&D, &str) -> Result;

/// One file of a group: a `device_attribute` whose callbacks run `show`/`store` on the data of
/// the disk it belongs to.
///
/// # Invariants
///
/// `raw` is the first field (the callbacks find the rest from it); its callbacks are
/// [`DiskAttr::show_callback`] and [`DiskAttr::store_callback`] for the same `T`.
#[repr(C)]
pub(crate) struct DiskAttr<T: DiskOps> {
    raw: UnsafeCell<bindings::device_attribute>,
    tag: usize,
    show: ShowFn<T::Data>,
    store: Option<StoreFn<T::Data>>,
}

// SAFETY: Built at compile time and then only read, by sysfs and the callbacks.
unsafe impl<T: DiskOps> Sync for DiskAttr<T> {}

impl<T: DiskOps> DiskAttr<T> {
    /// A read-only (0444) file `name`.
    pub(crate) const fn ro(name: &'static CStr, show: ShowFn<T::Data>) -> Self {
        Self::new(name, 0, show, None)
    }

    /// A writable (0644) file `name`.
    pub(crate) const fn rw(
        name: &'static CStr,
        show: ShowFn<T::Data>,
        store: StoreFn<T::Data>,
    ) -> Self {
        Self::new(name, 0, show, Some(store))
    }

    const fn new(
        name: &'static CStr,
        tag: usize,
        show: ShowFn<T::Data>,
        store: Option<StoreFn<T::Data>>,
    ) -> Self {
        // SAFETY: All-zero is a valid `device_attribute`.
        let mut a: bindings::device_attribute = unsafe { core::mem::zeroed() };
        a.attr.name = as_char_ptr_in_const_context(name);
        a.attr.mode = 0o444;
        a.__bindgen_anon_1.show = Some(Self::show_callback);
        if store.is_some() {
            a.attr.mode = 0o644;
            a.__bindgen_anon_2.store = Some(Self::store_callback);
        }
        // INVARIANT: `raw` comes first (`repr(C)`) and has our callbacks.
        Self {
            raw: UnsafeCell::new(a),
            tag,
            show,
            store,
        }
    }

    /// # Safety
    ///
    /// `attr` must be the `raw` field of a `DiskAttr<T>`.
    unsafe fn of<'a>(attr: *mut bindings::device_attribute) -> &'a Self {
        // SAFETY: `raw` is the first field of the `repr(C)` struct (type invariant), so the
        // attribute's address is the `DiskAttr`'s; attributes are statics.
        unsafe { &*attr.cast::<Self>() }
    }

    /// # Safety
    ///
    /// Only sysfs calls this, as the `show` of a `DiskAttr<T>` of a group added with
    /// [`Disk::add_group`]: `dev` is the device of a live disk of `T` and `buf` a
    /// `PAGE_SIZE` buffer.
    unsafe extern "C" fn show_callback(
        dev: *mut bindings::device,
        attr: *mut bindings::device_attribute,
        buf: *mut u8,
    ) -> isize {
        // SAFETY: As the function's safety section says.
        let (data, a, buf) = unsafe {
            (
                Disk::<T>::data_of_device(dev),
                Self::of(attr),
                core::slice::from_raw_parts_mut(buf, kernel::page::PAGE_SIZE),
            )
        };
        let mut page = Page { buf, len: 0 };
        match (a.show)(data, a.tag, &mut page) {
            Ok(()) => {
                let n = page.len;
                if let Some(nul) = page.buf.get_mut(n) {
                    *nul = 0;
                }
                n as isize
            }
            Err(e) => e.to_errno() as isize,
        }
    }

    /// # Safety
    ///
    /// Only sysfs calls this, as the `store` of a `DiskAttr<T>` of a group added with
    /// [`Disk::add_group`]: `dev` is the device of a live disk of `T` and `buf` holds
    /// `count` readable bytes.
    unsafe extern "C" fn store_callback(
        dev: *mut bindings::device,
        attr: *mut bindings::device_attribute,
        buf: *const u8,
        count: usize,
    ) -> isize {
        // SAFETY: As the function's safety section says.
        let (data, a, input) = unsafe {
            (
                Disk::<T>::data_of_device(dev),
                Self::of(attr),
                core::slice::from_raw_parts(buf, count),
            )
        };
        let Some(store) = a.store else {
            return EINVAL.to_errno() as isize;
        };
        let word = core::str::from_utf8(input).map_err(|_| EINVAL);
        match word.and_then(|s| store(data, s.trim())) {
            Ok(()) => count as isize,
            Err(e) => e.to_errno() as isize,
        }
    }
}

/// The NULL-terminated pointer array of a group's `M - 1` attributes.
///
/// # Invariants
///
/// Every pointer but the last is the `raw` attribute of a static `DiskAttr<T>`; the last is null.
pub(crate) struct AttrPtrs<T: DiskOps, const M: usize>(
    UnsafeCell<[*mut bindings::attribute; M]>,
    PhantomData<T>,
);

// SAFETY: Built at compile time and then only read by sysfs.
unsafe impl<T: DiskOps, const M: usize> Sync for AttrPtrs<T, M> {}

impl<T: DiskOps, const M: usize> AttrPtrs<T, M> {
    /// The pointers to `lists`' attributes, in order, then null; `M` must be their number plus
    /// one (checked at compile time).
    pub(crate) const fn new(lists: &[&'static [DiskAttr<T>]]) -> Self {
        let mut ptrs = [core::ptr::null_mut(); M];
        let mut n = 0;
        let mut l = 0;
        while l < lists.len() {
            let mut i = 0;
            while i < lists[l].len() {
                assert!(
                    n + 1 < M,
                    "AttrPtrs: M is not the number of attributes plus one"
                );
                ptrs[n] = lists[l][i].raw.get().cast();
                n += 1;
                i += 1;
            }
            l += 1;
        }
        assert!(
            n + 1 == M,
            "AttrPtrs: M is not the number of attributes plus one"
        );
        // INVARIANT: filled from static `DiskAttr<T>`s, the last entry stays null.
        Self(UnsafeCell::new(ptrs), PhantomData)
    }
}

/// A named attribute group (`/sys/block/<disk>/<name>/`) of a disk of `T`.
///
/// # Invariants
///
/// `raw.attrs` points to an [`AttrPtrs<T, _>`] static.
pub(crate) struct AttrGroup<T: DiskOps>(UnsafeCell<bindings::attribute_group>, PhantomData<T>);

// SAFETY: Built at compile time and then only read by sysfs.
unsafe impl<T: DiskOps> Sync for AttrGroup<T> {}

impl<T: DiskOps> AttrGroup<T> {
    /// The group `name` of the attributes in `ptrs`.
    pub(crate) const fn new<const M: usize>(
        name: &'static CStr,
        ptrs: &'static AttrPtrs<T, M>,
    ) -> Self {
        // SAFETY: All-zero is a valid `attribute_group`.
        let mut g: bindings::attribute_group = unsafe { core::mem::zeroed() };
        g.name = as_char_ptr_in_const_context(name);
        g.__bindgen_anon_2.attrs = ptrs.0.get().cast();
        // INVARIANT: `attrs` is the static `ptrs`.
        Self(UnsafeCell::new(g), PhantomData)
    }

    pub(super) fn as_raw(&self) -> *mut bindings::attribute_group {
        self.0.get()
    }
}
