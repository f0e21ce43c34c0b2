// SPDX-License-Identifier: GPL-2.0
/*
 * The loop ioctls as a 32-bit program issues them (built with gcc -m32; the kernel's
 * compat_ioctl path converts struct loop_info). Usage: loop32 /dev/loopN BACKING-FILE
 *
 * Prints "ok: ..." per check and exits 1 at the first check that fails.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

static int failed;

#define CHECK(cond, ...)                                                        \
	do {                                                                    \
		if (cond) {                                                     \
			printf("ok: " __VA_ARGS__);                              \
			printf("\n");                                            \
		} else {                                                        \
			printf("FAIL: " __VA_ARGS__);                            \
			printf(" (errno %d: %s)\n", errno, strerror(errno));      \
			exit(1);                                                \
		}                                                               \
	} while (0)

int main(int argc, char **argv)
{
	struct loop_info info, got;
	struct loop_info64 info64;
	struct loop_config cfg;
	int dev, file, rc;

	if (argc != 3) {
		fprintf(stderr, "usage: %s /dev/loopN FILE\n", argv[0]);
		return 2;
	}
	CHECK(sizeof(long) == 4, "running as a 32-bit program");
	dev = open(argv[1], O_RDWR);
	CHECK(dev >= 0, "open %s", argv[1]);
	file = open(argv[2], O_RDWR);
	CHECK(file >= 0, "open %s", argv[2]);

	CHECK(ioctl(dev, LOOP_SET_FD, file) == 0, "LOOP_SET_FD");
	errno = 0;
	rc = ioctl(dev, LOOP_SET_FD, file);
	CHECK(rc == -1 && errno == EBUSY, "LOOP_SET_FD on a bound device: EBUSY");

	memset(&got, 0, sizeof(got));
	CHECK(ioctl(dev, LOOP_GET_STATUS, &got) == 0, "LOOP_GET_STATUS");
	CHECK(got.lo_offset == 0 && got.lo_flags == 0, "LOOP_GET_STATUS: offset 0, flags 0");

	memset(&info, 0, sizeof(info));
	info.lo_offset = 4096;
	info.lo_flags = LO_FLAGS_AUTOCLEAR;
	strcpy(info.lo_name, "compat-name");
	CHECK(ioctl(dev, LOOP_SET_STATUS, &info) == 0, "LOOP_SET_STATUS");
	memset(&got, 0, sizeof(got));
	CHECK(ioctl(dev, LOOP_GET_STATUS, &got) == 0, "LOOP_GET_STATUS after SET");
	CHECK(got.lo_offset == 4096, "LOOP_GET_STATUS: offset %d", got.lo_offset);
	CHECK(got.lo_flags == LO_FLAGS_AUTOCLEAR, "LOOP_GET_STATUS: flags %d", got.lo_flags);
	CHECK(strcmp(got.lo_name, "compat-name") == 0, "LOOP_GET_STATUS: name '%s'", got.lo_name);
	CHECK(got.lo_number == atoi(argv[1] + strlen("/dev/loop")), "LOOP_GET_STATUS: number %d",
	      got.lo_number);

	memset(&info64, 0, sizeof(info64));
	CHECK(ioctl(dev, LOOP_GET_STATUS64, &info64) == 0, "LOOP_GET_STATUS64");
	CHECK(info64.lo_offset == 4096 && info64.lo_flags == LO_FLAGS_AUTOCLEAR,
	      "LOOP_GET_STATUS64 agrees: offset %llu flags %u",
	      (unsigned long long)info64.lo_offset, info64.lo_flags);
	info64.lo_sizelimit = 65536;
	info64.lo_flags = 0;
	CHECK(ioctl(dev, LOOP_SET_STATUS64, &info64) == 0, "LOOP_SET_STATUS64");
	memset(&got, 0, sizeof(got));
	CHECK(ioctl(dev, LOOP_GET_STATUS, &got) == 0 && got.lo_flags == 0,
	      "LOOP_GET_STATUS after SET_STATUS64: flags %d", got.lo_flags);

	/* An offset a 32-bit loop_info cannot carry. */
	info64.lo_offset = 1ULL << 32;
	info64.lo_sizelimit = 0;
	CHECK(ioctl(dev, LOOP_SET_STATUS64, &info64) == 0, "LOOP_SET_STATUS64 offset 4 GiB");
	errno = 0;
	rc = ioctl(dev, LOOP_GET_STATUS, &got);
	CHECK(rc == -1 && errno == EOVERFLOW, "LOOP_GET_STATUS with a 4 GiB offset: EOVERFLOW");

	errno = 0;
	rc = ioctl(dev, LOOP_GET_STATUS, NULL);
	CHECK(rc == -1 && errno == EINVAL, "LOOP_GET_STATUS NULL: EINVAL");
	errno = 0;
	rc = ioctl(dev, LOOP_SET_STATUS, NULL);
	/* loop.c copies the argument in first: EFAULT (only the GET forms check for NULL). */
	CHECK(rc == -1 && errno == EFAULT, "LOOP_SET_STATUS NULL: EFAULT");
	CHECK(ioctl(dev, LOOP_SET_CAPACITY, 0) == 0, "LOOP_SET_CAPACITY");
	CHECK(ioctl(dev, LOOP_SET_BLOCK_SIZE, 4096) == 0, "LOOP_SET_BLOCK_SIZE 4096");
	errno = 0;
	rc = ioctl(dev, LOOP_SET_BLOCK_SIZE, 1000);
	CHECK(rc == -1 && errno == EINVAL, "LOOP_SET_BLOCK_SIZE 1000: EINVAL");
	CHECK(ioctl(dev, LOOP_CLR_FD, 0) == 0, "LOOP_CLR_FD");
	/* The clear happens at the last close (as loop.c); udev may still hold the device. */
	close(dev);
	/* Up to 60 s for the other openers to go (udev is slow on a loaded TCG guest; its last
	 * close clears the device, and opens meanwhile get ENXIO); the last descriptor opened
	 * stays open for the checks below. */
	for (int i = 0;; i++) {
		dev = open(argv[1], O_RDWR);
		if (dev < 0 && errno == ENXIO && i < 600) {
			/* Being cleared by the last closer (udev): open refuses, as loop.c's does. */
			usleep(100000);
			continue;
		}
		if (dev < 0) {
			printf("FAIL: reopen %s (errno %d: %s)\n", argv[1], errno, strerror(errno));
			exit(1);
		}
		errno = 0;
		if (ioctl(dev, LOOP_GET_STATUS, &got) == -1 && errno == ENXIO)
			break;
		if (i == 600)
			break;
		close(dev);
		usleep(100000);
	}
	errno = 0;
	rc = ioctl(dev, LOOP_GET_STATUS, &got);
	CHECK(rc == -1 && errno == ENXIO, "LOOP_GET_STATUS unbound: ENXIO");

	memset(&cfg, 0, sizeof(cfg));
	cfg.fd = file;
	cfg.info.lo_offset = 8192;
	cfg.info.lo_flags = LO_FLAGS_READ_ONLY;
	strcpy((char *)cfg.info.lo_file_name, "compat-config");
	CHECK(ioctl(dev, LOOP_CONFIGURE, &cfg) == 0, "LOOP_CONFIGURE");
	memset(&got, 0, sizeof(got));
	CHECK(ioctl(dev, LOOP_GET_STATUS, &got) == 0 && got.lo_offset == 8192 &&
		      (got.lo_flags & LO_FLAGS_READ_ONLY),
	      "LOOP_GET_STATUS after LOOP_CONFIGURE: offset %d flags %d", got.lo_offset,
	      got.lo_flags);
	CHECK(ioctl(dev, LOOP_CLR_FD, 0) == 0, "LOOP_CLR_FD after LOOP_CONFIGURE");
	close(file);
	close(dev);
	printf("all compat checks passed\n");
	return failed;
}
