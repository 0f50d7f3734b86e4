/* Unit tests for pci/: sysfs enumeration, BAR0 MIG mode, reset and driver
 * detection, against fixture trees built at run time in a temporary
 * directory (go-nvlib v0.12 pkg/nvpci: resource0 is a sparse regular file here, as
 * in go-nvlib's pkg/nvpci/mock.go). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/host.h"
#include "base/macro.h"
#include "pci/pci.h"

/* Every cmocka test takes a `void **state`. */
#pragma GCC diagnostic ignored "-Wunused-parameter"

#define NV MK_PCI_VENDOR_NVIDIA
#define GA100 MK_PMC_BOOT_0_GA100
#define READY MK_BOOT_COMPLETE_VALUE
#define LE MK_PMC_BOOT_1_LITTLE_ENDIAN
#define BE MK_PMC_BOOT_1_BIG_ENDIAN
#define CLASS_AUDIO 0x040300u
#define BAR_FILE_SIZE 0x119000u          /* past MK_BAR0_MIG_REQUEST + 4 */
#define BAR_SIZE (16u * 1024 * 1024)     /* A100 BAR0 */
#define NEIGHBOUR 0xA5A5A5A5u            /* around the request register, must survive writes */

#define check_contains(haystack, needle)                                                             \
        do {                                                                                         \
                const char *h_ = (haystack), *n_ = (needle);                                         \
                if (!strstr(h_, n_))                                                                 \
                        fail_msg("%s:%d: '%s' does not contain '%s'", __FILE__, __LINE__, h_, n_);    \
        } while (0)

#define check_hex(what, got, want)                                                                   \
        do {                                                                                         \
                unsigned long long g_ = (got), w_ = (want);                                          \
                if (g_ != w_)                                                                        \
                        fail_msg("%s:%d: %s: %s = 0x%llx, want 0x%llx", __FILE__, __LINE__, (what), #got, \
                                 g_, w_);                                                            \
        } while (0)

/* Returns r and prints the error detail when r is not the wanted code. */
#define check_r(r, want, e)                                                                          \
        do {                                                                                         \
                int r_ = (r), w_ = (want);                                                           \
                if (r_ != w_)                                                                        \
                        fail_msg("%s:%d: %s = %d (%s), want %d (%s); error: '%s'", __FILE__, __LINE__, #r, \
                                 r_, strerror(r_ < 0 ? -r_ : r_), w_, strerror(w_ < 0 ? -w_ : w_),   \
                                 (e)->msg);                                                          \
        } while (0)

static uint64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

/* ---- fixture trees ---- */

struct fx {
        char root[PATH_MAX];
        struct mk_host host;
};

static char *fx_path(const struct fx *f, const char *rel) {
        char *p;
        assert_int_equal(mk_path_join(f->root, rel, &p), 0);
        return p;
}

static void mkdir_p(const char *path) {
        char buf[PATH_MAX];
        size_t n = strlen(path);
        assert_true(n < sizeof(buf));
        memcpy(buf, path, n + 1);
        for (char *p = buf + 1; *p; p++)
                if (*p == '/') {
                        *p = 0;
                        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
                                fail_msg("mkdir '%s': %s", buf, strerror(errno));
                        *p = '/';
                }
        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
                fail_msg("mkdir '%s': %s", buf, strerror(errno));
}

static void write_at(const char *dir, const char *name, const char *content) {
        _cleanup_free_ char *path = NULL;
        assert_int_equal(mk_path_join(dir, name, &path), 0);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
                fail_msg("open '%s': %s", path, strerror(errno));
        size_t n = strlen(content);
        assert_int_equal(write(fd, content, n), (ssize_t) n);
        close(fd);
}

static int fx_setup(void **state) {
        struct fx *f = calloc(1, sizeof(*f));
        if (!f)
                return -1;
        const char *base = getenv("MIGKIT_TEST_TMP");
        if (base && *base)
                (void) mkdir(base, 0755);
        snprintf(f->root, sizeof(f->root), "%s/test-pci.XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(f->root)) {
                snprintf(f->root, sizeof(f->root), "/tmp/test-pci.XXXXXX");
                if (!mkdtemp(f->root)) {
                        free(f);
                        return -1;
                }
        }
        static const char *const dirs[] = {"sys/bus/pci/devices", "sys/devices/pci0000:00", "proc", "dev"};
        for (size_t i = 0; i < ELEMENTSOF(dirs); i++) {
                _cleanup_free_ char *p = fx_path(f, dirs[i]);
                mkdir_p(p);
        }
        /* The roots come from the environment, as in the product. */
        _cleanup_free_ char *sys = fx_path(f, "sys"), *proc = fx_path(f, "proc"), *dev = fx_path(f, "dev");
        setenv("MIGKIT_SYSFS_ROOT", sys, 1);
        setenv("MIGKIT_PROC_ROOT", proc, 1);
        setenv("MIGKIT_DEV_ROOT", dev, 1);
        if (mk_host_init_from_env(&f->host) < 0) {
                free(f);
                return -1;
        }
        *state = f;
        return 0;
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
        return remove(p);
}

static int fx_teardown(void **state) {
        struct fx *f = *state;
        if (!f)
                return 0;
        nftw(f->root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        mk_host_done(&f->host);
        free(f);
        return 0;
}

struct fgpu {
        const char *address;
        uint16_t vendor, device;
        uint32_t class_code;
        uint32_t boot0, boot1, mode, request, boot_complete; /* BAR0 registers */
        bool with_reset, is_vf;
        bool symlink;              /* a link into sys/devices, as on a real system */
        bool no_subsystem;         /* no subsystem_vendor/subsystem_device files */
        size_t bar_file_size;      /* resource0's length; 0: BAR_FILE_SIZE */
        uint64_t bar_size;         /* what `resource` says; 0: BAR_SIZE */
};

static void put_reg(int fd, size_t file_size, uint32_t off, uint32_t value, bool big_endian) {
        if ((size_t) off + 4 > file_size)
                return;
        uint32_t raw = big_endian ? htobe32(value) : htole32(value);
        assert_int_equal(pwrite(fd, &raw, 4, off), 4);
}

/* Builds one PCI function: its attribute files, a `resource` line and a
 * sparse resource0 holding the registers, byte-swapped when PMC_BOOT_1 says
 * big-endian. Returns the function's directory (caller frees). */
static char *add_gpu(struct fx *f, const struct fgpu *s) {
        _cleanup_free_ char *devices = fx_path(f, "sys/bus/pci/devices");
        char *dir;
        char buf[256];

        assert_int_equal(mk_path_join(devices, s->address, &dir), 0);
        if (s->symlink) {
                char rel[128], target[128];
                snprintf(rel, sizeof(rel), "sys/devices/pci0000:00/%s", s->address);
                _cleanup_free_ char *real = fx_path(f, rel);
                mkdir_p(real);
                snprintf(target, sizeof(target), "../../../devices/pci0000:00/%s", s->address);
                assert_int_equal(symlink(target, dir), 0);
        } else
                mkdir_p(dir);

        snprintf(buf, sizeof(buf), "0x%04x\n", s->vendor);
        write_at(dir, "vendor", buf);
        snprintf(buf, sizeof(buf), "0x%04x\n", s->device);
        write_at(dir, "device", buf);
        snprintf(buf, sizeof(buf), "0x%06x\n", s->class_code);
        write_at(dir, "class", buf);
        if (!s->no_subsystem) {
                write_at(dir, "subsystem_vendor", "0x10de\n");
                snprintf(buf, sizeof(buf), "0x%04x\n", (unsigned) (s->device ^ 0x1000));
                write_at(dir, "subsystem_device", buf);
        }
        if (s->with_reset)
                write_at(dir, "reset", "");
        if (s->is_vf) {
                _cleanup_free_ char *link = NULL;
                assert_int_equal(mk_path_join(dir, "physfn", &link), 0);
                assert_int_equal(symlink("../0000:07:00.0", link), 0);
        }

        uint64_t start = 0xfa000000u, size = s->bar_size ? s->bar_size : BAR_SIZE;
        snprintf(buf, sizeof(buf),
                 "0x%016llx 0x%016llx 0x0000000000040200\n"
                 "0x0000038000000000 0x0000038fffffffff 0x000000000014220c\n"
                 "0x0000000000000000 0x0000000000000000 0x0000000000000000\n",
                 (unsigned long long) start, (unsigned long long) (start + size - 1));
        write_at(dir, "resource", buf);

        size_t file_size = s->bar_file_size ? s->bar_file_size : BAR_FILE_SIZE;
        _cleanup_free_ char *bar = NULL;
        assert_int_equal(mk_path_join(dir, "resource0", &bar), 0);
        int fd = open(bar, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        assert_int_equal(ftruncate(fd, (off_t) file_size), 0);
        bool big = s->boot1 == BE;
        put_reg(fd, file_size, MK_BAR0_PMC_BOOT_0, s->boot0, big);
        put_reg(fd, file_size, MK_BAR0_PMC_BOOT_1, s->boot1, big);
        put_reg(fd, file_size, MK_BAR0_MIG_MODE, s->mode, big);
        put_reg(fd, file_size, MK_BAR0_BOOT_COMPLETE, s->boot_complete, big);
        put_reg(fd, file_size, MK_BAR0_MIG_REQUEST - 4, NEIGHBOUR, big);
        put_reg(fd, file_size, MK_BAR0_MIG_REQUEST, s->request, big);
        put_reg(fd, file_size, MK_BAR0_MIG_REQUEST + 4, NEIGHBOUR, big);
        close(fd);
        return dir;
}

/* A ready A100 (device 0x20b0, 3D controller, with reset) linked as on a real system. */
static void add_a100(struct fx *f, const char *address, uint32_t mode, uint32_t request) {
        free(add_gpu(f, &(struct fgpu) {
                .address = address, .vendor = NV, .device = 0x20b0, .class_code = MK_PCI_CLASS_3D,
                .boot0 = GA100, .boot1 = LE, .mode = mode, .request = request, .boot_complete = READY,
                .with_reset = true, .symlink = true,
        }));
}

static void add_plain(struct fx *f, const struct fgpu *s) {
        free(add_gpu(f, s));
}

/* Enumerates and hands back a copy of the GPU at `address` (path owned by the copy). */
static struct mk_pci_gpu find_gpu(struct fx *f, const char *address) {
        struct mk_pci_gpu *g = NULL, ret = {};
        size_t n = 0;
        struct mk_error e = {};
        int r = mk_pci_enumerate(&f->host, &g, &n, &e);
        check_r(r, 0, &e);
        for (size_t i = 0; i < n; i++)
                if (streq(g[i].address, address)) {
                        ret = g[i];
                        ret.path = strdup(g[i].path);
                }
        mk_pci_gpus_free(g, n);
        if (!ret.path)
                fail_msg("GPU %s not enumerated (%zu GPUs)", address, n);
        return ret;
}

static char *resource0_of(const struct mk_pci_gpu *g) {
        char *p;
        assert_int_equal(mk_path_join(g->path, "resource0", &p), 0);
        return p;
}

static uint32_t read_reg(const struct mk_pci_gpu *g, uint32_t off, bool big_endian) {
        _cleanup_free_ char *bar = resource0_of(g);
        uint32_t raw;
        int fd = open(bar, O_RDONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        assert_int_equal(pread(fd, &raw, 4, off), 4);
        close(fd);
        return big_endian ? be32toh(raw) : le32toh(raw);
}

static void write_reg(const struct mk_pci_gpu *g, uint32_t off, uint32_t value) {
        _cleanup_free_ char *bar = resource0_of(g);
        uint32_t raw = htole32(value);
        int fd = open(bar, O_WRONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        assert_int_equal(pwrite(fd, &raw, 4, off), 4);
        close(fd);
}

/* The whole of resource0, to compare before and after a refused write. */
static char *slurp_bar(const struct mk_pci_gpu *g, size_t *ret_len) {
        _cleanup_free_ char *bar = resource0_of(g);
        struct stat st;
        assert_int_equal(stat(bar, &st), 0);
        char *data = malloc((size_t) st.st_size + 1);
        assert_non_null(data);
        int fd = open(bar, O_RDONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        assert_int_equal(pread(fd, data, (size_t) st.st_size, 0), st.st_size);
        close(fd);
        *ret_len = (size_t) st.st_size;
        return data;
}

static void check_bar_unchanged(const char *before, size_t before_len, const struct mk_pci_gpu *g) {
        size_t len;
        _cleanup_free_ char *after = slurp_bar(g, &len);
        assert_int_equal(len, before_len);
        for (size_t i = 0; i < len; i++)
                if (before[i] != after[i])
                        fail_msg("resource0 of %s changed at 0x%zx: 0x%02x, was 0x%02x", g->address, i,
                                 (unsigned char) after[i], (unsigned char) before[i]);
}

/* ---- enumeration ---- */

static void test_enumerate(void **state) {
        struct fx *f = *state;
        /* Created out of order; the result must be sorted by address. */
        add_a100(f, "0000:b7:00.0", 0, 0);
        add_plain(f, &(struct fgpu) {.address = "0001:01:00.0", .vendor = NV, .device = 0x20b2,
                                     .class_code = MK_PCI_CLASS_3D, .boot0 = GA100});
        add_plain(f, &(struct fgpu) {.address = "0000:07:00.0", .vendor = NV, .device = 0x20b0,
                                     .class_code = MK_PCI_CLASS_3D, .boot0 = GA100, .with_reset = true});
        add_plain(f, &(struct fgpu) {.address = "0000:41:00.0", .vendor = NV, .device = 0x1eb8,
                                     .class_code = MK_PCI_CLASS_VGA, .no_subsystem = true});
        /* Skipped: Intel audio, NVIDIA HDMI audio, an ASPEED VGA, a VF of 07:00.0. */
        add_plain(f, &(struct fgpu) {.address = "0000:00:1f.3", .vendor = 0x8086, .device = 0xa0c8,
                                     .class_code = CLASS_AUDIO, .symlink = true});
        add_plain(f, &(struct fgpu) {.address = "0000:07:00.1", .vendor = NV, .device = 0x1aef,
                                     .class_code = CLASS_AUDIO});
        add_plain(f, &(struct fgpu) {.address = "0000:02:00.0", .vendor = 0x1a03, .device = 0x2000,
                                     .class_code = MK_PCI_CLASS_VGA});
        add_plain(f, &(struct fgpu) {.address = "0000:07:00.4", .vendor = NV, .device = 0x20b0,
                                     .class_code = MK_PCI_CLASS_3D, .is_vf = true});
        /* Not a PCI address: ignored, not an error. */
        _cleanup_free_ char *junk = fx_path(f, "sys/bus/pci/devices/README");
        write_at(junk, "", "");

        static const struct {
                const char *address;
                uint16_t device, subsystem_vendor, subsystem_device;
                uint32_t class_code;
                bool has_reset;
        } want[] = {
                {"0000:07:00.0", 0x20b0, 0x10de, 0x30b0, MK_PCI_CLASS_3D, true},
                {"0000:41:00.0", 0x1eb8, 0, 0, MK_PCI_CLASS_VGA, false},
                {"0000:b7:00.0", 0x20b0, 0x10de, 0x30b0, MK_PCI_CLASS_3D, true},
                {"0001:01:00.0", 0x20b2, 0x10de, 0x30b2, MK_PCI_CLASS_3D, false},
        };

        struct mk_pci_gpu *g = NULL;
        size_t n = 0;
        struct mk_error e = {};
        check_r(mk_pci_enumerate(&f->host, &g, &n, &e), 0, &e);
        assert_int_equal(n, ELEMENTSOF(want));
        for (size_t i = 0; i < n; i++) {
                assert_string_equal(g[i].address, want[i].address);
                check_hex(want[i].address, g[i].vendor, NV);
                check_hex(want[i].address, g[i].device, want[i].device);
                check_hex(want[i].address, g[i].subsystem_vendor, want[i].subsystem_vendor);
                check_hex(want[i].address, g[i].subsystem_device, want[i].subsystem_device);
                check_hex(want[i].address, g[i].class_code, want[i].class_code);
                check_hex(want[i].address, g[i].has_reset, want[i].has_reset);
                _cleanup_free_ char *path = NULL;
                _cleanup_free_ char *devices = fx_path(f, "sys/bus/pci/devices");
                assert_int_equal(mk_path_join(devices, want[i].address, &path), 0);
                assert_string_equal(g[i].path, path);
        }
        mk_pci_gpus_free(g, n);
        mk_pci_gpus_free(NULL, 0);
}

static void test_enumerate_empty_and_missing(void **state) {
        struct fx *f = *state;
        struct mk_pci_gpu *g = (struct mk_pci_gpu *) 0x1;
        size_t n = 42;
        struct mk_error e = {};

        check_r(mk_pci_enumerate(&f->host, &g, &n, &e), 0, &e);
        assert_int_equal(n, 0);
        mk_pci_gpus_free(g, n);

        /* No bus/pci/devices: an error naming the directory; outputs untouched. */
        _cleanup_free_ char *devices = fx_path(f, "sys/bus/pci/devices");
        assert_int_equal(rmdir(devices), 0);
        g = (struct mk_pci_gpu *) 0x1;
        n = 42;
        check_r(mk_pci_enumerate(&f->host, &g, &n, &e), -ENOENT, &e);
        check_contains(e.msg, devices);
        assert_ptr_equal(g, (struct mk_pci_gpu *) 0x1);
        assert_int_equal(n, 42);
}

static void test_enumerate_bad_attribute(void **state) {
        struct fx *f = *state;
        struct mk_pci_gpu *g = NULL;
        size_t n = 0;
        struct mk_error e = {};

        add_a100(f, "0000:07:00.0", 0, 0);
        _cleanup_free_ char *dir = add_gpu(f, &(struct fgpu) {.address = "0000:0a:00.0", .vendor = NV,
                                                              .device = 0x20b0, .class_code = MK_PCI_CLASS_3D});
        /* Garbage in `device`: -EBADMSG naming the file. */
        write_at(dir, "device", "0xzz20\n");
        check_r(mk_pci_enumerate(&f->host, &g, &n, &e), -EBADMSG, &e);
        check_contains(e.msg, "0000:0a:00.0/device");
        check_contains(e.msg, "0xzz20");

        /* Out of 16-bit range. */
        write_at(dir, "device", "0x120b0\n");
        check_r(mk_pci_enumerate(&f->host, &g, &n, &e), -EBADMSG, &e);

        /* No 0x prefix (sysfs always writes one). */
        write_at(dir, "device", "20b0\n");
        check_r(mk_pci_enumerate(&f->host, &g, &n, &e), -EBADMSG, &e);

        /* An unreadable vendor (a directory): the read error naming the file. */
        write_at(dir, "device", "0x20b0\n");
        _cleanup_free_ char *vendor = NULL;
        assert_int_equal(mk_path_join(dir, "vendor", &vendor), 0);
        assert_int_equal(unlink(vendor), 0);
        assert_int_equal(mkdir(vendor, 0755), 0);
        check_r(mk_pci_enumerate(&f->host, &g, &n, &e), -EISDIR, &e);
        check_contains(e.msg, vendor);

        /* Missing `class`: an error too. */
        assert_int_equal(rmdir(vendor), 0);
        write_at(dir, "vendor", "0x10de\n");
        _cleanup_free_ char *class_path = NULL;
        assert_int_equal(mk_path_join(dir, "class", &class_path), 0);
        assert_int_equal(unlink(class_path), 0);
        check_r(mk_pci_enumerate(&f->host, &g, &n, &e), -ENOENT, &e);
        check_contains(e.msg, class_path);

        /* Repaired: both GPUs. */
        write_at(dir, "class", "0x030200\n");
        check_r(mk_pci_enumerate(&f->host, &g, &n, &e), 0, &e);
        assert_int_equal(n, 2);
        mk_pci_gpus_free(g, n);
}

/* ---- addresses ---- */

static void test_address_conversion(void **state) {
        static const struct {
                const char *sysfs, *nvml;
        } good[] = {
                {"0000:07:00.0", "00000000:07:00.0"},
                {"0000:b7:00.0", "00000000:B7:00.0"},
                {"0001:3a:1f.7", "00000001:3A:1F.7"},
                {"ffff:ff:1f.0", "0000FFFF:FF:1F.0"},
                {"10000:01:00.0", "00010000:01:00.0"},
        };
        char buf[64];

        for (size_t i = 0; i < ELEMENTSOF(good); i++) {
                int r = mk_pci_address_to_nvml(good[i].sysfs, buf, sizeof(buf));
                if (r < 0)
                        fail_msg("to_nvml('%s') = %d", good[i].sysfs, r);
                assert_string_equal(buf, good[i].nvml);
                r = mk_pci_address_from_nvml(good[i].nvml, buf, sizeof(buf));
                if (r < 0)
                        fail_msg("from_nvml('%s') = %d", good[i].nvml, r);
                assert_string_equal(buf, good[i].sysfs);
        }
        /* Input case does not matter; output case is fixed. */
        assert_int_equal(mk_pci_address_to_nvml("0000:B7:0A.1", buf, sizeof(buf)), 0);
        assert_string_equal(buf, "00000000:B7:0A.1");
        assert_int_equal(mk_pci_address_from_nvml("00000000:b7:0a.1", buf, sizeof(buf)), 0);
        assert_string_equal(buf, "0000:b7:0a.1");

        static const char *const bad_sysfs[] = {
                "", "000:07:00.0", "0000:7:00.0", "0000:007:00.0", "0000:07:0.0", "0000:07:00",
                "0000:07:00.", "0000:07:00.8", "0000:07:20.0", "0000:g7:00.0", " 0000:07:00.0",
                "0000:07:00.0 ", "0000:07:00.0\n", "0000-07:00.0", "0000:07-00.0", "0000:07:00:0",
                "000000000:07:00.0", "0x00:07:00.0", "0000:07:00.00",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad_sysfs); i++) {
                int r = mk_pci_address_to_nvml(bad_sysfs[i], buf, sizeof(buf));
                if (r != -EINVAL)
                        fail_msg("to_nvml('%s') = %d, want %d", bad_sysfs[i], r, -EINVAL);
        }
        static const char *const bad_nvml[] = {
                "", "0000:07:00.0", "0000000:07:00.0", "000000000:07:00.0", "00000000:07:00",
                "00000000:07:00.8", "00000000:7:00.0", "00000000:07:00.0\n", "0000000g:07:00.0",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad_nvml); i++) {
                int r = mk_pci_address_from_nvml(bad_nvml[i], buf, sizeof(buf));
                if (r != -EINVAL)
                        fail_msg("from_nvml('%s') = %d, want %d", bad_nvml[i], r, -EINVAL);
        }
        assert_int_equal(mk_pci_address_to_nvml(NULL, buf, sizeof(buf)), -EINVAL);
        assert_int_equal(mk_pci_address_from_nvml(NULL, buf, sizeof(buf)), -EINVAL);

        /* Buffers: exactly large enough, one short. */
        char small[17];
        assert_int_equal(mk_pci_address_to_nvml("0000:07:00.0", small, 17), 0);
        assert_string_equal(small, "00000000:07:00.0");
        assert_int_equal(mk_pci_address_to_nvml("0000:07:00.0", small, 16), -ENOBUFS);
        assert_int_equal(mk_pci_address_from_nvml("00000000:07:00.0", small, 13), 0);
        assert_string_equal(small, "0000:07:00.0");
        assert_int_equal(mk_pci_address_from_nvml("00000000:07:00.0", small, 12), -ENOBUFS);
}

/* ---- driver ---- */

static void test_driver_loaded(void **state) {
        struct fx *f = *state;
        _cleanup_free_ char *proc = fx_path(f, "proc");
        static const struct {
                const char *modules;
                bool want;
        } cases[] = {
                {"", false},
                {"nvidia_uvm 1380352 0 - Live 0x0000000000000000 (POE)\n", false},
                {"nvidia_uvm 1380352 0 - Live 0x0 (POE)\nnvidia_drm 73728 0 - Live 0x0 (POE)\n"
                 "nvidiafb 53248 0 - Live 0x0\n", false},
                {"snd 98304 1 nvidia, Live 0x0\n", false},
                {"nvidia 56819712 1 nvidia_uvm, Live 0x0000000000000000 (POE)\n", true},
                {"nvidia_uvm 1380352 0 - Live 0x0 (POE)\nnvidia 123 1 nvidia_uvm, Live 0x0 (POE)", true},
                {"ext4 1 0 - Live 0x0\nnvidia 123 0 - Live 0x0\nxfs 1 0 - Live 0x0\n", true},
        };

        /* No <proc>/modules: not loaded. */
        assert_false(mk_pci_driver_loaded(&f->host));
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                write_at(proc, "modules", cases[i].modules);
                bool got = mk_pci_driver_loaded(&f->host);
                if (got != cases[i].want)
                        fail_msg("modules '%s': loaded = %d, want %d", cases[i].modules, got, cases[i].want);
        }
}

/* ---- BAR0: capability and mode ---- */

static void test_mig_capable(void **state) {
        struct fx *f = *state;
        static const struct {
                const char *address;
                uint32_t boot0;
                bool want;
        } cases[] = {
                {"0000:07:00.0", GA100, true},
                {"0000:0a:00.0", 0x180000A1u, false}, /* an H100-like chip id */
                {"0000:0b:00.0", 0, false},
                {"0000:0c:00.0", 0x170000A2u, false},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                add_plain(f, &(struct fgpu) {.address = cases[i].address, .vendor = NV, .device = 0x20b0,
                                             .class_code = MK_PCI_CLASS_3D, .boot0 = cases[i].boot0,
                                             .boot_complete = READY});
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                struct mk_pci_gpu g = find_gpu(f, cases[i].address);
                struct mk_error e = {};
                bool got = !cases[i].want;
                check_r(mk_pci_mig_capable(&g, &got, &e), 0, &e);
                if (got != cases[i].want)
                        fail_msg("PMC_BOOT_0 0x%08x: capable = %d, want %d", cases[i].boot0, got, cases[i].want);
                free(g.path);
        }
}

static void test_get_mig_mode(void **state) {
        struct fx *f = *state;
        static const struct {
                uint32_t mode, request;
                bool current, pending;
        } cases[] = {
                {0x00000000, 0x00000000, false, false},
                {0x00000000, 0x0000C000, false, true},  /* enable requested */
                {0x00000000, 0x00008000, false, false}, /* disable requested, already off */
                {0x00000000, 0x00004000, false, false},
                {0x00008000, 0x00000000, true, false},
                {0x00008000, 0x00008000, true, true},   /* disable requested */
                {0x00008000, 0x0000C000, true, false},  /* enable requested, already on */
                {0x00008000, 0x00004000, true, false},
                /* Other bits do not count. */
                {0xFFFF7FFF, 0xFFFF3FFF, false, false},
                {0xFFFF7FFF, 0x1234C567, false, true},
                {0x00018000, 0xABCD8FFF, true, true},
                {0x00007FFF, 0x00003FFF, false, false},
        };
        char address[16];

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                snprintf(address, sizeof(address), "0000:%02zx:00.0", i + 1);
                add_a100(f, address, cases[i].mode, cases[i].request);
        }
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                snprintf(address, sizeof(address), "0000:%02zx:00.0", i + 1);
                struct mk_pci_gpu g = find_gpu(f, address);
                struct mk_error e = {};
                bool current = !cases[i].current, pending = !cases[i].pending;
                check_r(mk_pci_get_mig_mode(&g, &current, &pending, &e), 0, &e);
                if (current != cases[i].current || pending != cases[i].pending)
                        fail_msg("mode 0x%08x request 0x%08x: current %d pending %d, want current %d pending %d",
                                 cases[i].mode, cases[i].request, current, pending, cases[i].current,
                                 cases[i].pending);
                /* Either output may be NULL. */
                check_r(mk_pci_get_mig_mode(&g, NULL, &pending, &e), 0, &e);
                check_r(mk_pci_get_mig_mode(&g, &current, NULL, &e), 0, &e);
                free(g.path);
        }
}

static void test_set_mig_mode(void **state) {
        struct fx *f = *state;
        struct mk_error e = {};
        bool current, pending;

        add_a100(f, "0000:07:00.0", 0x00000000, 0x12340567);
        struct mk_pci_gpu g = find_gpu(f, "0000:07:00.0");

        /* Enable: bits 15:14 become 11, every other bit of the register and
         * its neighbours stays. */
        check_r(mk_pci_set_mig_mode(&g, true, 1000, 10, &e), 0, &e);
        check_hex("request after enable", read_reg(&g, MK_BAR0_MIG_REQUEST, false), 0x1234C567);
        check_hex("word before request", read_reg(&g, MK_BAR0_MIG_REQUEST - 4, false), NEIGHBOUR);
        check_hex("word after request", read_reg(&g, MK_BAR0_MIG_REQUEST + 4, false), NEIGHBOUR);
        check_hex("mode register", read_reg(&g, MK_BAR0_MIG_MODE, false), 0);
        check_hex("boot complete", read_reg(&g, MK_BAR0_BOOT_COMPLETE, false), READY);
        check_hex("PMC_BOOT_0", read_reg(&g, MK_BAR0_PMC_BOOT_0, false), GA100);
        check_r(mk_pci_get_mig_mode(&g, &current, &pending, &e), 0, &e);
        assert_false(current);
        assert_true(pending);

        /* Enable again: idempotent. */
        check_r(mk_pci_set_mig_mode(&g, true, 1000, 10, &e), 0, &e);
        check_hex("request after second enable", read_reg(&g, MK_BAR0_MIG_REQUEST, false), 0x1234C567);

        /* Disable: 10, nothing pending while the mode is off. */
        check_r(mk_pci_set_mig_mode(&g, false, 1000, 10, &e), 0, &e);
        check_hex("request after disable", read_reg(&g, MK_BAR0_MIG_REQUEST, false), 0x12348567);
        check_hex("word after request", read_reg(&g, MK_BAR0_MIG_REQUEST + 4, false), NEIGHBOUR);
        check_r(mk_pci_get_mig_mode(&g, &current, &pending, &e), 0, &e);
        assert_false(current);
        assert_false(pending);

        /* The "reset" took enable: mode on, disable pending. */
        write_reg(&g, MK_BAR0_MIG_MODE, MK_MIG_MODE_ENABLED);
        check_r(mk_pci_get_mig_mode(&g, &current, &pending, &e), 0, &e);
        assert_true(current);
        assert_true(pending);
        check_r(mk_pci_set_mig_mode(&g, true, 1000, 10, &e), 0, &e);
        check_r(mk_pci_get_mig_mode(&g, &current, &pending, &e), 0, &e);
        assert_true(current);
        assert_false(pending);

        /* Request bits that were all set: disable clears only bit 14. */
        write_reg(&g, MK_BAR0_MIG_REQUEST, 0xFFFFFFFF);
        check_r(mk_pci_set_mig_mode(&g, false, 1000, 10, &e), 0, &e);
        check_hex("request after disable from all-ones", read_reg(&g, MK_BAR0_MIG_REQUEST, false), 0xFFFFBFFF);
        free(g.path);
}

static void test_refuse_unknown_chip(void **state) {
        struct fx *f = *state;
        static const uint32_t chips[] = {0x180000A1u, 0, 0x170000A0u, 0xFFFFFFFFu};
        char address[16];

        for (size_t i = 0; i < ELEMENTSOF(chips); i++) {
                snprintf(address, sizeof(address), "0000:%02zx:00.0", i + 1);
                /* Not even booted: the refusal must come before any wait. */
                add_plain(f, &(struct fgpu) {.address = address, .vendor = NV, .device = 0x2330,
                                             .class_code = MK_PCI_CLASS_3D, .boot0 = chips[i],
                                             .mode = 0, .request = 0x00000567, .boot_complete = 0});
        }
        for (size_t i = 0; i < ELEMENTSOF(chips); i++) {
                snprintf(address, sizeof(address), "0000:%02zx:00.0", i + 1);
                struct mk_pci_gpu g = find_gpu(f, address);
                size_t len;
                _cleanup_free_ char *before = slurp_bar(&g, &len);
                struct mk_error e = {};
                char chip[16];
                snprintf(chip, sizeof(chip), "0x%08x", chips[i]);

                for (int enable = 0; enable <= 1; enable++) {
                        uint64_t t0 = now_ms();
                        check_r(mk_pci_set_mig_mode(&g, enable, 5000, 50, &e), -EOPNOTSUPP, &e);
                        uint64_t took = now_ms() - t0;
                        if (took >= 1000)
                                fail_msg("refusal took %llu ms: it waited for boot complete", (unsigned long long) took);
                        check_contains(e.msg, address);
                        check_contains(e.msg, chip);
                        check_contains(e.msg, "not a known MIG-capable chip (GA100), refusing to touch it");
                        check_bar_unchanged(before, len, &g);
                }
                bool current = true, pending = true;
                check_r(mk_pci_get_mig_mode(&g, &current, &pending, &e), -EOPNOTSUPP, &e);
                check_contains(e.msg, chip);
                assert_true(current); /* outputs untouched on failure */
                assert_true(pending);
                check_bar_unchanged(before, len, &g);
                free(g.path);
        }
}

static void test_big_endian(void **state) {
        struct fx *f = *state;
        struct mk_error e = {};
        bool capable = false, current = false, pending = false;

        add_plain(f, &(struct fgpu) {.address = "0000:07:00.0", .vendor = NV, .device = 0x20b0,
                                     .class_code = MK_PCI_CLASS_3D, .boot0 = GA100, .boot1 = BE,
                                     .mode = MK_MIG_MODE_ENABLED, .request = 0x00018000, .boot_complete = READY});
        struct mk_pci_gpu g = find_gpu(f, "0000:07:00.0");
        /* Stored byte-swapped: a little-endian read would see 0xA1000017. */
        check_hex("raw PMC_BOOT_0", read_reg(&g, MK_BAR0_PMC_BOOT_0, false), 0xA1000017);

        check_r(mk_pci_mig_capable(&g, &capable, &e), 0, &e);
        assert_true(capable);
        check_r(mk_pci_get_mig_mode(&g, &current, &pending, &e), 0, &e);
        assert_true(current);
        assert_true(pending);

        check_r(mk_pci_set_mig_mode(&g, true, 1000, 10, &e), 0, &e);
        check_hex("request (big-endian)", read_reg(&g, MK_BAR0_MIG_REQUEST, true), 0x0001C000);
        check_hex("word after request (big-endian)", read_reg(&g, MK_BAR0_MIG_REQUEST + 4, true), NEIGHBOUR);
        check_r(mk_pci_get_mig_mode(&g, &current, &pending, &e), 0, &e);
        assert_true(current);
        assert_false(pending);
        free(g.path);
}

static void test_bad_probe(void **state) {
        struct fx *f = *state;
        struct mk_error e = {};
        bool b = true;

        add_plain(f, &(struct fgpu) {.address = "0000:07:00.0", .vendor = NV, .device = 0x20b0,
                                     .class_code = MK_PCI_CLASS_3D, .boot0 = GA100, .boot1 = 0x12345678,
                                     .boot_complete = READY});
        struct mk_pci_gpu g = find_gpu(f, "0000:07:00.0");
        size_t len;
        _cleanup_free_ char *before = slurp_bar(&g, &len);

        check_r(mk_pci_mig_capable(&g, &b, &e), -EIO, &e);
        check_contains(e.msg, "unexpected PMC_BOOT_1 value");
        check_contains(e.msg, "0x12345678");
        assert_true(b);
        check_r(mk_pci_get_mig_mode(&g, &b, &b, &e), -EIO, &e);
        check_r(mk_pci_set_mig_mode(&g, true, 1000, 10, &e), -EIO, &e);
        check_contains(e.msg, "unexpected PMC_BOOT_1 value");
        check_bar_unchanged(before, len, &g);
        free(g.path);
}

static void test_boot_timeout(void **state) {
        struct fx *f = *state;
        static const uint32_t not_ready[] = {0, 0x3FE, 0x7FF};
        char address[16];

        for (size_t i = 0; i < ELEMENTSOF(not_ready); i++) {
                snprintf(address, sizeof(address), "0000:%02zx:00.0", i + 1);
                add_plain(f, &(struct fgpu) {.address = address, .vendor = NV, .device = 0x20b0,
                                             .class_code = MK_PCI_CLASS_3D, .boot0 = GA100,
                                             .request = 0x00000567, .boot_complete = not_ready[i]});
        }
        for (size_t i = 0; i < ELEMENTSOF(not_ready); i++) {
                snprintf(address, sizeof(address), "0000:%02zx:00.0", i + 1);
                struct mk_pci_gpu g = find_gpu(f, address);
                struct mk_error e = {};
                size_t len;
                _cleanup_free_ char *before = slurp_bar(&g, &len);

                uint64_t t0 = now_ms();
                check_r(mk_pci_set_mig_mode(&g, true, 300, 50, &e), -ETIMEDOUT, &e);
                uint64_t took = now_ms() - t0;
                if (took < 300 || took > 3000)
                        fail_msg("boot complete 0x%x: gave up after %llu ms, want 300..3000", not_ready[i],
                                 (unsigned long long) took);
                check_contains(e.msg, address);
                check_contains(e.msg, "timed out after 300 ms");
                check_bar_unchanged(before, len, &g);
                free(g.path);
        }
}

/* The GPU finishes booting while set waits: the write then goes through. */
static void test_boot_becomes_ready(void **state) {
        struct fx *f = *state;
        struct mk_error e = {};

        add_plain(f, &(struct fgpu) {.address = "0000:07:00.0", .vendor = NV, .device = 0x20b0,
                                     .class_code = MK_PCI_CLASS_3D, .boot0 = GA100, .boot_complete = 0});
        struct mk_pci_gpu g = find_gpu(f, "0000:07:00.0");

        uint64_t t0 = now_ms();
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                struct timespec ts = {.tv_nsec = 200 * 1000000L};
                nanosleep(&ts, NULL);
                write_reg(&g, MK_BAR0_BOOT_COMPLETE, READY);
                _exit(0);
        }
        int r = mk_pci_set_mig_mode(&g, true, 5000, 20, &e);
        uint64_t took = now_ms() - t0;
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        check_r(r, 0, &e);
        if (took < 190)
                fail_msg("set returned after %llu ms, before the GPU was ready (200 ms)", (unsigned long long) took);
        check_hex("request", read_reg(&g, MK_BAR0_MIG_REQUEST, false), MK_MIG_REQUEST_ENABLE);
        free(g.path);
}

static void test_small_or_bad_bar(void **state) {
        struct fx *f = *state;
        static const struct {
                const char *address;
                size_t file_size;
                uint64_t bar_size;
                int capable_r, get_r, set_r;
        } cases[] = {
                /* resource0 shorter than the registers; `resource` says 16 MiB. */
                {"0000:01:00.0", 0x1000, 0, 0, -ENXIO, -ENXIO},
                {"0000:02:00.0", 0x2000, 0, 0, -ENXIO, -ENXIO},      /* 0x1404 inside, 0x118F78 not */
                {"0000:03:00.0", 0x118F78, 0, 0, -ENXIO, -ENXIO},    /* ends right at the request register */
                {"0000:04:00.0", 0x118F7A, 0, 0, -ENXIO, -ENXIO},    /* half of it */
                {"0000:05:00.0", 0x4, 0, -ENXIO, -ENXIO, -ENXIO},    /* not even PMC_BOOT_1 */
                /* A long file, but `resource` says the BAR is 4 KiB: never read past the BAR. */
                {"0000:06:00.0", 0, 0x1000, 0, -ENXIO, -ENXIO},
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                add_plain(f, &(struct fgpu) {.address = cases[i].address, .vendor = NV, .device = 0x20b0,
                                             .class_code = MK_PCI_CLASS_3D, .boot0 = GA100,
                                             .boot_complete = READY, .bar_file_size = cases[i].file_size,
                                             .bar_size = cases[i].bar_size});
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                struct mk_pci_gpu g = find_gpu(f, cases[i].address);
                struct mk_error e = {};
                bool b;
                check_r(mk_pci_mig_capable(&g, &b, &e), cases[i].capable_r, &e);
                check_r(mk_pci_get_mig_mode(&g, &b, &b, &e), cases[i].get_r, &e);
                check_contains(e.msg, cases[i].address);
                check_r(mk_pci_set_mig_mode(&g, true, 300, 50, &e), cases[i].set_r, &e);
                check_contains(e.msg, cases[i].address);
                free(g.path);
        }

        /* An empty resource0, no resource0, a BAR that is not there, a garbled `resource`. */
        _cleanup_free_ char *dir = add_gpu(f, &(struct fgpu) {.address = "0000:07:00.0", .vendor = NV,
                                                              .device = 0x20b0, .class_code = MK_PCI_CLASS_3D,
                                                              .boot0 = GA100, .boot_complete = READY});
        struct mk_pci_gpu g = find_gpu(f, "0000:07:00.0");
        struct mk_error e = {};
        bool b;
        _cleanup_free_ char *bar = resource0_of(&g);
        assert_int_equal(truncate(bar, 0), 0);
        check_r(mk_pci_mig_capable(&g, &b, &e), -ENXIO, &e);
        assert_int_equal(unlink(bar), 0);
        check_r(mk_pci_mig_capable(&g, &b, &e), -ENOENT, &e);
        check_contains(e.msg, bar);
        static const struct {
                const char *resource;
                int want;
        } resources[] = {
                {"0x0000000000000000 0x0000000000000000 0x0000000000000000\n", -ENODEV},
                {"0x00000000fa000000 0x00000000f9ffffff 0x0000000000040200\n", -EBADMSG},
                {"0x00000000fa000000 0x00000000faffffff\n", -EBADMSG},
                {"0x00000000fa000000 0x00000000faffffff 0x40200 0x1\n", -EBADMSG},
                {"fa000000 faffffff 40200\n", -EBADMSG},
                {"0x00000000fa00000g 0x00000000faffffff 0x0000000000040200\n", -EBADMSG},
                {"", -EBADMSG},
        };
        for (size_t i = 0; i < ELEMENTSOF(resources); i++) {
                write_at(dir, "resource", resources[i].resource);
                int r = mk_pci_mig_capable(&g, &b, &e);
                if (r != resources[i].want)
                        fail_msg("resource '%s': %d (%s), want %d", resources[i].resource, r, e.msg,
                                 resources[i].want);
        }
        free(g.path);
}

/* ---- reset ---- */

static void test_reset(void **state) {
        struct fx *f = *state;
        struct mk_error e = {};

        add_a100(f, "0000:07:00.0", 0, 0);
        add_plain(f, &(struct fgpu) {.address = "0000:0a:00.0", .vendor = NV, .device = 0x20b0,
                                     .class_code = MK_PCI_CLASS_3D, .boot0 = GA100, .with_reset = false});
        struct mk_pci_gpu g = find_gpu(f, "0000:07:00.0");
        assert_true(g.has_reset);
        check_r(mk_pci_reset(&g, &e), 0, &e);
        _cleanup_free_ char *reset = NULL, *content = NULL;
        assert_int_equal(mk_path_join(g.path, "reset", &reset), 0);
        check_r(mk_read_file(reset, 16, &content, NULL, &e), 0, &e);
        assert_string_equal(content, "1");
        free(g.path);

        /* No reset file (passthrough): -ENOENT naming the path, and nothing created. */
        g = find_gpu(f, "0000:0a:00.0");
        assert_false(g.has_reset);
        check_r(mk_pci_reset(&g, &e), -ENOENT, &e);
        _cleanup_free_ char *missing = NULL;
        assert_int_equal(mk_path_join(g.path, "reset", &missing), 0);
        check_contains(e.msg, missing);
        check_contains(e.msg, "0000:0a:00.0");
        assert_int_equal(access(missing, F_OK), -1);

        /* A reset that cannot be written (a directory here): the errno and the path. */
        assert_int_equal(mkdir(missing, 0755), 0);
        check_r(mk_pci_reset(&g, &e), -EISDIR, &e);
        check_contains(e.msg, missing);
        free(g.path);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_enumerate, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_enumerate_empty_and_missing, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_enumerate_bad_attribute, fx_setup, fx_teardown),
                cmocka_unit_test(test_address_conversion),
                cmocka_unit_test_setup_teardown(test_driver_loaded, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_mig_capable, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_get_mig_mode, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_set_mig_mode, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_refuse_unknown_chip, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_big_endian, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_bad_probe, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_boot_timeout, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_boot_becomes_ready, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_small_or_bad_bar, fx_setup, fx_teardown),
                cmocka_unit_test_setup_teardown(test_reset, fx_setup, fx_teardown),
        };
        return cmocka_run_group_tests_name("pci", tests, NULL, NULL);
}
