// SPDX-License-Identifier: GPL-2.0

//! The device's own sysfs knobs (`/sys/block/loopN/rust_loop/`): `nowait_max_depth`,
//! `cache_mode`, `nr_hw_queues`; what they change and when they refuse.

use super::*;

impl LoopDevice {
    /// Whether buffered backing I/O keeps the page cache free of the device's data
    /// (`IOCB_DONTCACHE`: read data is dropped once copied, written data once written back),
    /// so that it is cached once, in the device's own page cache, instead of twice. Applies in
    /// buffered mode, where the backing file supports it ([`IoState::dontcache`]).
    pub(crate) fn dontcache(&self) -> bool {
        self.dontcache_on.load(Ordering::Relaxed)
    }

    /// The cache mode as `rust_loop/cache_mode` shows it: `dontcache` when chosen and (while
    /// bound) the backing file supports it, else `normal`.
    pub(crate) fn cache_mode(&self) -> &'static str {
        let bound = self.state() == State::Bound;
        if self.dontcache() && (!bound || self.dontcache_capable.load(Ordering::Relaxed)) {
            "dontcache"
        } else {
            "normal"
        }
    }

    /// Chooses the cache mode (`normal` or `dontcache`); the next request sees it. `EINVAL` for
    /// another mode, `EOPNOTSUPP` for `dontcache` while bound to a file that does not support
    /// it (an unbound device keeps the choice, and a binding to such a file uses `normal`).
    pub(crate) fn set_cache_mode(&self, mode: &str) -> Result {
        let dontcache = match mode {
            "normal" => false,
            "dontcache" => true,
            _ => return Err(EINVAL),
        };
        let _cfg = self.cfg.lock();
        if dontcache
            && self.state() == State::Bound
            && !self.dontcache_capable.load(Ordering::Relaxed)
        {
            return Err(crate::rust_loop::sys::compat::code::eopnotsupp());
        }
        self.dontcache_on.store(dontcache, Ordering::Relaxed);
        Ok(())
    }

    /// Number of hardware queues, each with its worker.
    pub(crate) fn nr_hw_queues(&self) -> u32 {
        self.nr_hw_queues.load(Ordering::Relaxed)
    }

    /// Changes the number of hardware queues of an unbound device (the per-device form of the
    /// `nr_hw_queues` module parameter): 1 to the number of online CPUs. Their workers start
    /// when the device is bound.
    pub(crate) fn set_nr_hw_queues(&self, count: u32) -> Result {
        if count == 0 || count > super::super::sys::online_cpus() {
            return Err(EINVAL);
        }
        {
            let mut cfg = self.cfg.lock();
            if self.state() != State::Unbound {
                return Err(EBUSY);
            }
            if count == self.nr_hw_queues() {
                return Ok(());
            }
            self.set_state(State::Resizing);
            // New queues count from zero.
            cfg.retired_requests.clear();
        }
        // Not under the device mutex: `blk_mq_update_nr_hw_queues` takes the tag set's
        // `update_nr_hwq_lock`, which `del_gendisk` holds while it takes `open_mutex`, under
        // which `open` takes the device mutex. `Resizing` keeps binding and removal out.
        let got = self.disk.set_nr_hw_queues(count);
        self.nr_hw_queues.store(got, Ordering::Relaxed);
        {
            let _cfg = self.cfg.lock();
            self.set_state(State::Unbound);
        }
        if got == count {
            Ok(())
        } else {
            Err(ENOMEM)
        }
    }
}
