// SPDX-License-Identifier: GPL-2.0

//! [`ClaimList`]: a short list of values that its users claim rather than borrow: a value
//! stays in the list, at its address, while any [`ListClaim`] on it exists, and only an unclaimed
//! one is taken out. What a request keeps in its PDU to use a shared value across threads
//! until it ends (loop.c counts the commands of a `struct loop_worker` the same way).

use core::{
    ops::Deref,
    ptr::NonNull,
    sync::atomic::{AtomicU32, Ordering},
};
use kernel::{prelude::*, sync::SpinLock};

/// A value of a [`ClaimList`] and the count of its claims.
struct Entry<T> {
    value: T,
    /// Claims on the value: only incremented under the list's lock, decremented by
    /// [`ListClaim`]'s drop as the very last thing the claim does.
    claims: AtomicU32,
}

/// Values that stay while claimed.
///
/// # Invariants
///
/// An entry is removed from `list` (and may be freed) only while its `claims` count is zero
/// under the lock; entries are boxed, so they do not move while in the list.
#[pin_data]
pub(crate) struct ClaimList<T> {
    #[pin]
    list: SpinLock<KVec<KBox<Entry<T>>>>,
}

/// A claim on a value of a [`ClaimList`]: the list keeps the value while the claim exists.
///
/// # Invariants
///
/// `entry` points to an entry of a [`ClaimList`] whose `claims` count includes this claim.
pub(crate) struct ListClaim<T> {
    entry: NonNull<Entry<T>>,
}

// SAFETY: A claim is a counted shared reference to `T`: it may move to and be used from any
// thread if `T` may be shared between threads; the count is atomic.
unsafe impl<T: Sync> Send for ListClaim<T> {}
// SAFETY: As above: `&ListClaim<T>` only gives `&T`.
unsafe impl<T: Sync> Sync for ListClaim<T> {}

impl<T> Deref for ListClaim<T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: The entry stays in its list, unmoved, while this claim is counted (type
        // invariants of `ListClaim` and `ClaimList`).
        unsafe { &self.entry.as_ref().value }
    }
}

impl<T> Drop for ListClaim<T> {
    fn drop(&mut self) {
        // SAFETY: As in `deref`. The last access: once the count may be zero, the entry may
        // be taken out and freed.
        unsafe { self.entry.as_ref() }
            .claims
            .fetch_sub(1, Ordering::Release);
    }
}

impl<T> ClaimList<T> {
    /// An empty list.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            list <- kernel::new_spinlock!(KVec::new()),
        })
    }

    /// A claim on the first value that `which` selects.
    pub(crate) fn claim(&self, which: impl Fn(&T) -> bool) -> Option<ListClaim<T>> {
        Self::claim_in(&self.list.lock(), which)
    }

    /// Claims the first value of `list` (whose lock the caller holds) that `which` selects.
    fn claim_in(list: &KVec<KBox<Entry<T>>>, which: impl Fn(&T) -> bool) -> Option<ListClaim<T>> {
        let entry = list.iter().find(|e| which(&e.value))?;
        entry.claims.fetch_add(1, Ordering::Relaxed);
        // INVARIANT: counted under the lock; the entry is in the list.
        Some(ListClaim {
            entry: NonNull::from(&**entry),
        })
    }

    /// How many values the list holds.
    pub(crate) fn len(&self) -> usize {
        self.list.lock().len()
    }

    /// Claims the first value that `which` selects, else adds `value` and claims it if the
    /// list holds fewer than `max`. The value comes back (second) when it was not added, for
    /// the caller to drop outside the lock.
    pub(crate) fn claim_or_add(
        &self,
        which: impl Fn(&T) -> bool,
        value: T,
        max: usize,
    ) -> (Option<ListClaim<T>>, Option<T>) {
        let entry = match KBox::new(
            Entry {
                value,
                claims: AtomicU32::new(0),
            },
            GFP_KERNEL,
        ) {
            Ok(entry) => entry,
            Err(_) => return (self.claim(which), None),
        };
        let mut list = self.list.lock();
        if let Some(claim) = Self::claim_in(&list, &which) {
            drop(list);
            return (Some(claim), Some(KBox::into_inner(entry).value));
        }
        if list.len() >= max || list.reserve(1, GFP_NOWAIT).is_err() {
            drop(list);
            return (None, Some(KBox::into_inner(entry).value));
        }
        entry.claims.fetch_add(1, Ordering::Relaxed);
        // INVARIANT: counted under the lock, as the entry goes into the list; the box does
        // not move its contents when pushed.
        let claim = ListClaim {
            entry: NonNull::from(&*entry),
        };
        if let Err(e) = list.push_within_capacity(entry) {
            // Cannot happen (reserved above); the claim was never on a listed entry.
            drop(list);
            core::mem::forget(claim);
            return (None, Some(KBox::into_inner(e.0).value));
        }
        (Some(claim), None)
    }

    /// Takes out one value that `which` selects and no one claims, for the caller to drop
    /// outside the lock.
    pub(crate) fn take_unclaimed(&self, which: impl Fn(&T) -> bool) -> Option<T> {
        let mut list = self.list.lock();
        let i = list
            .iter()
            .position(|e| e.claims.load(Ordering::Acquire) == 0 && which(&e.value))?;
        let entry = list.remove(i).ok()?;
        drop(list);
        Some(KBox::into_inner(entry).value)
    }
}
