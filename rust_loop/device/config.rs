// SPDX-License-Identifier: GPL-2.0

//! Reconfiguring a [`LoopDevice`]: `LOOP_CONFIGURE`/`LOOP_SET_FD`, `LOOP_CHANGE_FD`,
//! `LOOP_SET_STATUS`/`LOOP_GET_STATUS`, `LOOP_SET_CAPACITY`, `LOOP_SET_DIRECT_IO` and
//! `LOOP_SET_BLOCK_SIZE`. Behaviour and errno values follow `drivers/block/loop.c`.

use super::super::stats::Count;
use super::*;

impl LoopDevice {
    /// Size of the device in sectors for `file` with the current offset and limit
    /// (`lo_calculate_size`).
    pub(super) fn calculate_size(&self, file: &BackingFile) -> u64 {
        let mut size = file.size().saturating_sub(self.offset());
        let limit = self.sizelimit();
        if limit > 0 && limit < size {
            size = limit;
        }
        size >> SECTOR_SHIFT
    }

    /// Whether direct I/O is possible (`lo_can_use_dio`): the backing file supports it. Unlike
    /// loop.c, a block size or offset below the file's direct-I/O alignment does not turn it
    /// off for the whole device: the reads and writes that meet the alignment still go to the
    /// file with `IOCB_DIRECT`, the others take the buffered path ([`IoState::dio_aligned`],
    /// counted in `dio_fallbacks`). The two paths stay coherent through the backing file
    /// system's own direct-I/O rules: a direct read first writes back dirty page-cache data
    /// of its range, a direct write invalidates the cached pages of its range before and
    /// after (`kiocb_write_and_wait`, `kiocb_invalidate_pages`,
    /// `kiocb_invalidate_post_direct_write`).
    pub(super) fn can_use_dio(&self, file: &BackingFile, dio: DioAlign) -> bool {
        file.can_direct_io() && dio.min_size != 0
    }

    /// Drops `LO_FLAGS_DIRECT_IO` when direct I/O is not possible (`loop_update_dio`).
    pub(super) fn update_dio(&self, file: &BackingFile, dio: DioAlign) {
        if self.flags() & FLAG_DIRECT_IO != 0 && !self.can_use_dio(file, dio) {
            self.set_flags(self.flags() & !FLAG_DIRECT_IO);
        }
    }

    /// Checks `info` and applies offset, size limit and file name (`loop_set_status_from_info`).
    pub(super) fn apply_info(&self, cfg: &mut Config, info: &loop_info64) -> Result {
        if info.lo_encrypt_key_size > uapi::LO_KEY_SIZE {
            return Err(EINVAL);
        }
        match info.lo_encrypt_type {
            uapi::LO_CRYPT_NONE => {}
            uapi::LO_CRYPT_XOR => {
                pr_warn!("support for the xor transformation has been removed.\n");
                return Err(EINVAL);
            }
            uapi::LO_CRYPT_CRYPTOAPI => {
                pr_warn!("support for cryptoloop has been removed.  Use dm-crypt instead.\n");
                return Err(EINVAL);
            }
            _ => return Err(EINVAL),
        }
        if info.lo_offset > i64::MAX as u64 || info.lo_sizelimit > i64::MAX as u64 {
            return Err(EOVERFLOW);
        }
        self.offset.store(info.lo_offset, Ordering::Relaxed);
        self.sizelimit.store(info.lo_sizelimit, Ordering::Relaxed);
        cfg.file_name = info.lo_file_name;
        cfg.file_name[NAME_SIZE - 1] = 0;
        Ok(())
    }

    /// Follows a chain of loop devices backing `file`: the chain must not reach `own_dev`
    /// (`loop_validate_file`). The caller holds the global validation lock if `file` is a loop
    /// device.
    pub(super) fn validate_file(file: &BackingFile, own_dev: u32) -> Result {
        let mut cur = file.clone();
        while let Some(other) = loop_device_of(&cur) {
            if cur.rdev() == own_dev {
                return Err(EBADF);
            }
            if other.state() != State::Bound {
                return Err(EINVAL);
            }
            cur = other.backing_file().ok_or(EINVAL)?;
        }
        if !cur.is_reg() && !cur.is_blk() {
            return Err(EINVAL);
        }
        Ok(())
    }

    /// `LOOP_CONFIGURE` and `LOOP_SET_FD` (`loop_configure`), with loop.c's order of checks and
    /// what each failure leaves behind: a failure up to the flags check changes nothing; one in
    /// `loop_set_status_from_info` leaves nothing either; after it the offset, size limit, name
    /// and flags stay stored (invisible until the next binding, which replaces them), and a
    /// failure to apply the queue limits (a block size the block layer refuses) comes after the
    /// media change and the read-only state were applied, so the device keeps the read-only
    /// state of the failed binding, as with loop.c. Two leftovers of loop.c's failure path are
    /// not copied, both invisible to the ioctl ABI: the backing file's page-cache allocation
    /// mask is restored (loop.c leaves the file's mapping without `__GFP_IO | __GFP_FS`), and
    /// uevents are allowed again (loop.c leaves the disk's uevents suppressed, so that its
    /// removal would not be announced).
    pub(crate) fn configure(&self, mode: u32, bdev: &BlockDevice, config: &loop_config) -> Result {
        let file = BackingFile::from_fd(config.fd)?;
        file.check_ops()?;
        let is_loop = loop_device_of(&file).is_some();
        let module_ref = ModuleRef::get::<crate::LoopModule>();
        let claim = bdev.claim(mode)?;
        let validate = if is_loop { Some(VALIDATE.lock()) } else { None };
        let mut cfg = self.cfg.lock();

        if self.state() != State::Unbound {
            return Err(EBUSY);
        }
        Self::validate_file(&file, self.disk.devt())?;
        let info = &config.info;
        if info.lo_flags & !CONFIGURE_SETTABLE != 0 {
            return Err(EINVAL);
        }
        self.apply_info(&mut cfg, info)?;
        let mut flags = info.lo_flags;
        if !file.is_writable() || mode & BLK_OPEN_WRITE == 0 {
            flags |= FLAG_READ_ONLY;
        }
        self.set_flags(flags);
        // loop.c allocates its workqueue here. The workers run only while the device is bound;
        // on a later failure they are parked again (a retry takes them back).
        let queues = ScopeGuard::new_with_data(
            HwQueues::start(self.nr_hw_queues(), &cfg.retired_requests)?,
            HwQueues::park,
        );

        self.disk.suppress_uevents(true);
        self.disk.force_media_change();
        self.disk.set_read_only(flags & FLAG_READ_ONLY != 0);

        // `loop_assign_backing_file`.
        cfg.old_gfp = file.restrict_gfp();
        if file.is_o_direct() {
            self.set_flags(self.flags() | FLAG_DIRECT_IO);
        }
        cfg.dio = file.dio_align();
        self.dio_min_size.store(cfg.dio.min_size, Ordering::Relaxed);
        self.discard_on.store(true, Ordering::Relaxed);
        self.write_zeroes_on.store(true, Ordering::Relaxed);
        let dio = cfg.dio;
        // The block layer validates the block size (`blk_validate_limits`): EINVAL here, as in
        // loop.c, which does not check it before.
        if let Err(e) = self
            .queue()
            .update_limits(|lim| self.fill_limits(lim, &file, dio, config.block_size))
        {
            file.restore_gfp(cfg.old_gfp);
            self.disk.suppress_uevents(false);
            return Err(e);
        }
        // Direct I/O may follow: write back what the page cache holds now.
        file.fsync();
        self.update_dio(&file, dio);
        self.set_merging();
        *self.backing.lock() = Some(file.clone());
        self.sysfs_add();
        self.disk.set_capacity(self.calculate_size(&file));
        {
            // SAFETY: The state is `Unbound` (checked above under the device mutex, which every
            // state change holds); the last unbinding ran at the last close, with no request in
            // flight, and no request has found the device bound since. `set_state` publishes the
            // cells below.
            let idle = unsafe { DataPathIdle::assume(&cfg) };
            self.publish_io(&idle, Some(file));
            // The old value is empty (unbound).
            drop(self.hw_queues.replace(&cfg, &idle, queues.dismiss()));
        }
        self.set_state(State::Bound);
        // A bound device keeps the module loaded until it is cleared.
        cfg.module_ref = Some(module_ref);
        if self.part_shift != 0 {
            self.set_flags(self.flags() | FLAG_PARTSCAN);
        }
        let partscan = self.flags() & FLAG_PARTSCAN != 0;
        if partscan {
            self.disk.set_part_scan(true);
        }
        self.disk.suppress_uevents(false);
        self.disk.uevent_change();
        drop(cfg);
        drop(validate);
        if partscan {
            self.reread_partitions();
        }
        drop(claim);
        Ok(())
    }

    /// Merging on in direct-I/O mode, off (nomerges=2) in buffered mode.
    pub(super) fn set_merging(&self) {
        self.queue().set_flag(
            bindings::QUEUE_FLAG_NOMERGES,
            self.flags() & FLAG_DIRECT_IO == 0,
        );
    }

    /// `LOOP_CHANGE_FD`: swap the backing file of a read-only device for one of the same size.
    pub(crate) fn change_fd(&self, fd: u32) -> Result {
        let file = BackingFile::from_fd(fd)?;
        file.check_ops()?;
        self.disk.suppress_uevents(true);
        let result = self.change_fd_locked(file);
        self.disk.suppress_uevents(false);
        let partscan = matches!(result, Ok(true));
        if partscan {
            self.reread_partitions();
        }
        self.disk.uevent_change();
        result.map(|_| ())
    }

    pub(super) fn change_fd_locked(&self, file: BackingFile) -> Result<bool> {
        let is_loop = loop_device_of(&file).is_some();
        let validate = if is_loop { Some(VALIDATE.lock()) } else { None };
        let mut cfg = self.cfg.lock();
        if self.state() != State::Bound {
            return Err(ENXIO);
        }
        if self.flags() & FLAG_READ_ONLY == 0 {
            return Err(EINVAL);
        }
        Self::validate_file(&file, self.disk.devt())?;
        let old = self.backing_file().ok_or(ENXIO)?;
        if self.calculate_size(&file) != self.calculate_size(&old) {
            return Err(EINVAL);
        }
        // A read-only device advertises no volatile write cache (as loop.c's): no flush comes
        // to it, so what `LOOP_CHANGE_FD` races is its reads, in flight when it begins or when
        // it freezes the queue (which waits for them).
        let mut racing = self.hw_queues.any_busy(&cfg);
        file.fsync();
        self.disk.force_media_change();
        racing |= self.hw_queues.any_busy(&cfg);
        if racing {
            self.stats.change_fd_racing_io.inc();
        }
        {
            let frozen = self.queue().freeze();
            old.restore_gfp(cfg.old_gfp);
            cfg.old_gfp = file.restrict_gfp();
            if file.is_o_direct() {
                self.set_flags(self.flags() | FLAG_DIRECT_IO);
            }
            cfg.dio = file.dio_align();
            self.dio_min_size.store(cfg.dio.min_size, Ordering::Relaxed);
            self.update_dio(&file, cfg.dio);
            *self.backing.lock() = Some(file.clone());
            self.publish_io(&DataPathIdle::frozen(&frozen), Some(file));
        }
        self.set_merging();
        let partscan = self.flags() & FLAG_PARTSCAN != 0;
        drop(cfg);
        drop(validate);
        // Let a concurrent validation that may still look at the old file finish first.
        if !is_loop {
            drop(VALIDATE.lock());
        }
        drop(old);
        Ok(partscan)
    }

    /// `LOOP_SET_STATUS[64]` (`loop_set_status`).
    pub(crate) fn set_status(&self, info: &loop_info64) -> Result {
        let mut cfg = self.cfg.lock();
        if self.state() != State::Bound {
            return Err(ENXIO);
        }
        let file = self.backing_file().ok_or(ENXIO)?;
        let watch = FlushWatch::new(&self.per_queue, &self.stats.flushes_racing_set_status);
        let size_changed = self.offset() != info.lo_offset || self.sizelimit() != info.lo_sizelimit;
        if size_changed {
            self.disk.sync_and_invalidate_bdev();
        }
        let mut partscan = false;
        let result = {
            let frozen = self.queue().freeze();
            let r = self.apply_info(&mut cfg, info);
            if r.is_ok() {
                let flags = self.flags();
                partscan = flags & FLAG_PARTSCAN == 0 && info.lo_flags & FLAG_PARTSCAN != 0;
                self.set_flags(
                    (flags & !SET_STATUS_CLEARABLE) | (info.lo_flags & SET_STATUS_SETTABLE),
                );
                self.update_dio(&file, cfg.dio);
                self.publish_io(&DataPathIdle::frozen(&frozen), Some(file.clone()));
            }
            r
        };
        self.set_merging();
        if partscan {
            self.disk.set_part_scan(true);
        }
        if result.is_ok() && size_changed {
            self.disk.set_capacity(self.calculate_size(&file));
        }
        drop(watch);
        drop(cfg);
        if partscan {
            self.reread_partitions();
        }
        result
    }

    /// `LOOP_GET_STATUS[64]` (`loop_get_status`).
    pub(crate) fn get_status(&self) -> Result<loop_info64> {
        let (mut info, file) = {
            let cfg = self.cfg.lock();
            if self.state() != State::Bound {
                return Err(ENXIO);
            }
            let mut info = <loop_info64 as pin_init::Zeroable>::zeroed();
            info.lo_number = self.number;
            info.lo_offset = self.offset();
            info.lo_sizelimit = self.sizelimit();
            info.lo_flags = self.flags();
            info.lo_file_name = cfg.file_name;
            (info, self.backing_file().ok_or(ENXIO)?)
        };
        // Outside the mutex: this calls into the filesystem.
        let id = file.identity()?;
        info.lo_device = huge_encode_dev(id.dev);
        info.lo_inode = id.ino;
        info.lo_rdevice = huge_encode_dev(id.rdev);
        Ok(info)
    }

    /// `LOOP_SET_CAPACITY` (`loop_set_capacity`).
    pub(crate) fn set_capacity(&self) -> Result {
        let _cfg = self.cfg.lock();
        if self.state() != State::Bound {
            return Err(ENXIO);
        }
        let file = self.backing_file().ok_or(ENXIO)?;
        self.disk.set_capacity(self.calculate_size(&file));
        Ok(())
    }

    /// `LOOP_SET_DIRECT_IO` (`loop_set_dio`).
    pub(crate) fn set_direct_io(&self, on: bool) -> Result {
        let cfg = self.cfg.lock();
        if self.state() != State::Bound {
            return Err(ENXIO);
        }
        if on == (self.flags() & FLAG_DIRECT_IO != 0) {
            return Ok(());
        }
        let file = self.backing_file().ok_or(ENXIO)?;
        if on {
            if !self.can_use_dio(&file, cfg.dio) {
                return Err(EINVAL);
            }
            // Flush dirty pages before direct I/O starts.
            file.fsync();
        }
        let dio = cfg.dio;
        self.queue().update_limits_frozen(
            |lim| {
                let flags = if on {
                    self.flags() | FLAG_DIRECT_IO
                } else {
                    self.flags() & !FLAG_DIRECT_IO
                };
                lim.dma_alignment = Self::dma_alignment(flags, dio);
            },
            |frozen| {
                let f = self.flags();
                self.set_flags(if on {
                    f | FLAG_DIRECT_IO
                } else {
                    f & !FLAG_DIRECT_IO
                });
                self.publish_io(&DataPathIdle::frozen(frozen), Some(file.clone()));
            },
        )?;
        self.set_merging();
        Ok(())
    }

    /// `LOOP_SET_BLOCK_SIZE` (`loop_set_block_size`).
    pub(crate) fn set_block_size(&self, mode: u32, bdev: &BlockDevice, arg: usize) -> Result {
        let _claim = bdev.claim(mode)?;
        let cfg = self.cfg.lock();
        if self.state() != State::Bound {
            return Err(ENXIO);
        }
        if self.queue().limits().logical_block_size as usize == arg {
            return Ok(());
        }
        // 0 means the default (as loop.c): 512, or the direct-I/O size in direct-I/O mode. The
        // block layer validates it at the commit, after the page cache was written back and
        // dropped, as in loop.c; and like loop.c's `unsigned int bsize`, only the low 32 bits of
        // the argument count from here on.
        let file = self.backing_file().ok_or(ENXIO)?;
        self.disk.sync_and_invalidate_bdev();
        let dio = cfg.dio;
        self.queue().update_limits_frozen(
            |lim| self.fill_limits(lim, &file, dio, arg as u32),
            |frozen| {
                self.update_dio(&file, dio);
                self.publish_io(&DataPathIdle::frozen(frozen), Some(file.clone()));
            },
        )?;
        self.set_merging();
        Ok(())
    }
}

/// `huge_encode_dev`: a kernel `dev_t` in the 64-bit user-space encoding.
fn huge_encode_dev(dev: u32) -> u64 {
    let major = u64::from(dev >> bindings::MINORBITS);
    let minor = u64::from(dev & ((1 << bindings::MINORBITS) - 1));
    (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)
}

#[kernel::macros::kunit_tests(rust_loop_device)]
mod tests {
    use super::*;

    /// `huge_encode_dev` (`new_encode_dev`): the low 8 minor bits, then 12 major bits, then the
    /// rest of the minor, as `stat(2)`'s `st_rdev`.
    #[test]
    fn encode_dev() {
        let mkdev = |major: u32, minor: u32| (major << bindings::MINORBITS) | minor;
        assert_eq!(huge_encode_dev(mkdev(7, 0)), 0x700);
        assert_eq!(huge_encode_dev(mkdev(7, 3)), 0x703);
        assert_eq!(huge_encode_dev(mkdev(259, 0x12345)), 0x1231_0345);
        assert_eq!(huge_encode_dev(0), 0);
    }
}
