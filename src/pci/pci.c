/* NVIDIA GPUs on the PCI bus without the driver: sysfs enumeration (the GPU
 * index of mig-parted v0.15.0 api/spec/v1), BAR0 register access through resource0 and
 * MIG mode on GA100 (go-nvlib v0.12 pkg/nvpci, after mig-parted pkg/mig/mode/pci.go
 * and go-nvlib pkg/nvpci). Library code: errors go to struct mk_error, logs
 * only at debug in the "pci" area. */
#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/host.h"
#include "base/log.h"
#include "base/macro.h"
#include "base/parse.h"
#include "pci/pci.h"

#define PCI_AREA "pci"

/* ---- PCI addresses ---- */

struct pci_addr {
        uint32_t domain;
        uint32_t bus, dev, fn;
};

static int hex_digit(char c) {
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

/* min..max (<= 8) hex digits, either case, and not one more. NULL on a
 * mismatch, else the first character after the digits. */
static const char *parse_hex_field(const char *p, size_t min, size_t max, uint32_t *ret) {
        uint32_t v = 0;
        size_t n = 0;

        for (; n < max && hex_digit(p[n]) >= 0; n++)
                v = v << 4 | (uint32_t) hex_digit(p[n]);
        if (n < min || hex_digit(p[n]) >= 0)
                return NULL;
        *ret = v;
        return p + n;
}

/* "DDDD:BB:SS.F": a domain of min_domain..8 hex digits, two-digit bus and
 * slot (slot <= 0x1f), function 0-7. Nothing before or after. */
static int pci_addr_parse(const char *s, size_t min_domain, struct pci_addr *ret) {
        struct pci_addr a;
        const char *p = s;

        if (!s)
                return -EINVAL;
        if (!(p = parse_hex_field(p, min_domain, 8, &a.domain)) || *p++ != ':')
                return -EINVAL;
        if (!(p = parse_hex_field(p, 2, 2, &a.bus)) || *p++ != ':')
                return -EINVAL;
        if (!(p = parse_hex_field(p, 2, 2, &a.dev)) || *p++ != '.')
                return -EINVAL;
        if (!(p = parse_hex_field(p, 1, 1, &a.fn)) || *p != 0)
                return -EINVAL;
        if (a.dev > 0x1f || a.fn > 7)
                return -EINVAL;
        *ret = a;
        return 0;
}

static int pci_addr_cmp(const struct pci_addr *a, const struct pci_addr *b) {
        if (a->domain != b->domain)
                return a->domain < b->domain ? -1 : 1;
        if (a->bus != b->bus)
                return a->bus < b->bus ? -1 : 1;
        if (a->dev != b->dev)
                return a->dev < b->dev ? -1 : 1;
        if (a->fn != b->fn)
                return a->fn < b->fn ? -1 : 1;
        return 0;
}

/* The kernel's sysfs name ("%04x:%02x:%02x.%d", drivers/pci/probe.c). */
static int pci_addr_format_sysfs(const struct pci_addr *a, char *buf, size_t size) {
        int n = snprintf(buf, size, "%04" PRIx32 ":%02" PRIx32 ":%02" PRIx32 ".%" PRIx32, a->domain, a->bus,
                         a->dev, a->fn);
        return n < 0 ? -EINVAL : (size_t) n >= size ? -ENOBUFS : 0;
}

/* NVML's bus id ("%08X:%02X:%02X.0", NVML_DEVICE_PCI_BUS_ID_FMT in nvml.h),
 * keeping the function number. */
static int pci_addr_format_nvml(const struct pci_addr *a, char *buf, size_t size) {
        int n = snprintf(buf, size, "%08" PRIX32 ":%02" PRIX32 ":%02" PRIX32 ".%" PRIX32, a->domain, a->bus,
                         a->dev, a->fn);
        return n < 0 ? -EINVAL : (size_t) n >= size ? -ENOBUFS : 0;
}

int mk_pci_address_to_nvml(const char *address, char *buf, size_t size) {
        struct pci_addr a;
        int r = pci_addr_parse(address, 4, &a);
        if (r < 0)
                return r;
        return pci_addr_format_nvml(&a, buf, size);
}

int mk_pci_address_from_nvml(const char *bus_id, char *buf, size_t size) {
        struct pci_addr a;
        int r = pci_addr_parse(bus_id, 8, &a);
        if (r < 0)
                return r;
        return pci_addr_format_sysfs(&a, buf, size);
}

/* ---- sysfs enumeration ---- */

static inline void closedirp(DIR **d) {
        if (*d)
                closedir(*d);
}

/* A "0x"-prefixed hex sysfs attribute (vendor, device, class...) no larger
 * than max. -ENOENT is returned without a message when missing_ok. */
static int read_hex_attr(const char *dir, const char *name, uint32_t max, bool missing_ok, uint32_t *ret,
                         struct mk_error *e) {
        _cleanup_free_ char *path = NULL, *value = NULL;
        uint32_t v;
        int r;

        r = mk_path_join(dir, name, &path);
        if (r < 0)
                return mk_error_set(e, r, "Failed to read '%s/%s': %s", dir, name, strerror(-r));
        if (missing_ok && access(path, F_OK) < 0 && errno == ENOENT)
                return -ENOENT;
        r = mk_read_sysfs_attr(path, &value, e);
        if (r < 0)
                return r;
        if (!strneq(value, "0x", 2) || mk_parse_u32_base(value + 2, 16, &v) < 0 || v > max)
                return mk_error_set(e, -EBADMSG, "Failed to parse '%s': '%s' is not a hex number up to 0x%" PRIx32,
                                    path, value, max);
        *ret = v;
        return 0;
}

/* Whether dir/name exists (not following a final symlink: physfn is one). */
static int entry_exists(const char *dir, const char *name, bool *ret, struct mk_error *e) {
        _cleanup_free_ char *path = NULL;
        struct stat st;
        int r;

        r = mk_path_join(dir, name, &path);
        if (r < 0)
                return mk_error_set(e, r, "Failed to check '%s/%s': %s", dir, name, strerror(-r));
        if (lstat(path, &st) < 0) {
                r = negative_errno();
                if (r != -ENOENT)
                        return mk_error_set(e, r, "Failed to check '%s': %s", path, strerror(-r));
                *ret = false;
                return 0;
        }
        *ret = true;
        return 0;
}

struct gpu_list {
        struct mk_pci_gpu *gpus;
        struct pci_addr *addrs; /* parallel to gpus, for sorting */
        size_t n, alloc;
};

static void gpu_list_done(struct gpu_list *l) {
        mk_pci_gpus_free(l->gpus, l->n);
        free(l->addrs);
        *l = (struct gpu_list) {};
}

static int gpu_list_grow(struct gpu_list *l) {
        if (l->n < l->alloc)
                return 0;
        size_t alloc = l->alloc ? l->alloc * 2 : 8;
        struct mk_pci_gpu *g = reallocarray(l->gpus, alloc, sizeof(*g));
        if (!g)
                return -ENOMEM;
        l->gpus = g;
        struct pci_addr *a = reallocarray(l->addrs, alloc, sizeof(*a));
        if (!a)
                return -ENOMEM;
        l->addrs = a;
        l->alloc = alloc;
        return 0;
}

/* Fills *ret (path owned by it) when the function at dir/name is an NVIDIA
 * VGA or 3D controller and not a VF; *ret_is_gpu says whether it was. */
static int probe_function(const char *dir, const char *name, const struct pci_addr *a, struct mk_pci_gpu *ret,
                          bool *ret_is_gpu, struct mk_error *e) {
        _cleanup_free_ char *path = NULL;
        struct mk_pci_gpu g = {};
        uint32_t vendor, device, class_code, sub_vendor = 0, sub_device = 0;
        struct stat st;
        bool is_vf;
        int r;

        r = mk_path_join(dir, name, &path);
        if (r < 0)
                return mk_error_set(e, r, "Failed to enumerate '%s': %s", dir, strerror(-r));
        if (stat(path, &st) < 0) {
                r = negative_errno();
                if (r == -ENOENT) { /* removed under us, or a dangling link */
                        log_debug_area(PCI_AREA, "Ignoring '%s': %s", path, strerror(-r));
                        *ret_is_gpu = false;
                        return 0;
                }
                return mk_error_set(e, r, "Failed to check '%s': %s", path, strerror(-r));
        }
        if (!S_ISDIR(st.st_mode)) {
                log_debug_area(PCI_AREA, "Ignoring '%s': not a directory", path);
                *ret_is_gpu = false;
                return 0;
        }

        r = read_hex_attr(path, "vendor", UINT16_MAX, false, &vendor, e);
        if (r < 0)
                return r;
        if (vendor != MK_PCI_VENDOR_NVIDIA) {
                *ret_is_gpu = false;
                return 0;
        }
        r = read_hex_attr(path, "class", 0xffffff, false, &class_code, e);
        if (r < 0)
                return r;
        if (class_code != MK_PCI_CLASS_VGA && class_code != MK_PCI_CLASS_3D) {
                log_debug_area(PCI_AREA, "Ignoring NVIDIA function %s: class 0x%06" PRIx32, name, class_code);
                *ret_is_gpu = false;
                return 0;
        }
        r = entry_exists(path, "physfn", &is_vf, e);
        if (r < 0)
                return r;
        if (is_vf) {
                log_debug_area(PCI_AREA, "Ignoring NVIDIA function %s: SR-IOV virtual function", name);
                *ret_is_gpu = false;
                return 0;
        }
        r = read_hex_attr(path, "device", UINT16_MAX, false, &device, e);
        if (r < 0)
                return r;
        /* Missing subsystem files read as 0:0 (mig-parted v0.15.0 pkg/types/device.go). */
        r = read_hex_attr(path, "subsystem_vendor", UINT16_MAX, true, &sub_vendor, e);
        if (r < 0 && r != -ENOENT)
                return r;
        r = read_hex_attr(path, "subsystem_device", UINT16_MAX, true, &sub_device, e);
        if (r < 0 && r != -ENOENT)
                return r;
        r = entry_exists(path, "reset", &g.has_reset, e);
        if (r < 0)
                return r;

        r = pci_addr_format_sysfs(a, g.address, sizeof(g.address));
        if (r < 0)
                return mk_error_set(e, -ENAMETOOLONG, "PCI address '%s' is too long", name);
        g.vendor = (uint16_t) vendor;
        g.device = (uint16_t) device;
        g.subsystem_vendor = (uint16_t) sub_vendor;
        g.subsystem_device = (uint16_t) sub_device;
        g.class_code = class_code;
        g.path = TAKE_PTR(path);
        log_debug_area(PCI_AREA, "GPU %s: %04x:%04x subsystem %04x:%04x class 0x%06" PRIx32 "%s", g.address,
                       g.vendor, g.device, g.subsystem_vendor, g.subsystem_device, g.class_code,
                       g.has_reset ? ", has reset" : "");
        *ret = g;
        *ret_is_gpu = true;
        return 0;
}

int mk_pci_enumerate(const struct mk_host *h, struct mk_pci_gpu **ret, size_t *ret_n, struct mk_error *e) {
        _cleanup_free_ char *dir = NULL;
        _cleanup_(closedirp) DIR *d = NULL;
        _cleanup_(gpu_list_done) struct gpu_list l = {};
        int r;

        r = mk_host_path(h, MK_HOST_SYSFS, "bus/pci/devices", &dir);
        if (r < 0)
                return mk_error_set(e, r, "Failed to build the sysfs PCI devices path: %s", strerror(-r));
        d = opendir(dir);
        if (!d) {
                r = negative_errno();
                return mk_error_set(e, r, "Failed to open '%s': %s", dir, strerror(-r));
        }

        for (;;) {
                struct pci_addr a;
                bool is_gpu = false;

                errno = 0;
                struct dirent *de = readdir(d);
                if (!de) {
                        if (errno != 0) {
                                r = negative_errno();
                                return mk_error_set(e, r, "Failed to read '%s': %s", dir, strerror(-r));
                        }
                        break;
                }
                if (de->d_name[0] == '.')
                        continue;
                if (pci_addr_parse(de->d_name, 4, &a) < 0) {
                        log_debug_area(PCI_AREA, "Ignoring '%s/%s': not a PCI address", dir, de->d_name);
                        continue;
                }
                r = gpu_list_grow(&l);
                if (r < 0)
                        return mk_error_set(e, r, "Failed to enumerate '%s': %s", dir, strerror(-r));
                r = probe_function(dir, de->d_name, &a, &l.gpus[l.n], &is_gpu, e);
                if (r < 0)
                        return r;
                if (is_gpu)
                        l.addrs[l.n++] = a;
        }

        /* Insertion sort by address: a handful of GPUs, and it keeps the two
         * parallel arrays together without a qsort context. */
        for (size_t i = 1; i < l.n; i++)
                for (size_t j = i; j > 0 && pci_addr_cmp(&l.addrs[j - 1], &l.addrs[j]) > 0; j--) {
                        struct mk_pci_gpu tg = l.gpus[j];
                        l.gpus[j] = l.gpus[j - 1];
                        l.gpus[j - 1] = tg;
                        struct pci_addr ta = l.addrs[j];
                        l.addrs[j] = l.addrs[j - 1];
                        l.addrs[j - 1] = ta;
                }

        *ret_n = l.n;
        l.n = 0;
        *ret = TAKE_PTR(l.gpus);
        return 0;
}

void mk_pci_gpus_free(struct mk_pci_gpu *g, size_t n) {
        if (!g)
                return;
        for (size_t i = 0; i < n; i++)
                free(g[i].path);
        free(g);
}

/* ---- driver ---- */

bool mk_pci_driver_loaded(const struct mk_host *h) {
        _cleanup_free_ char *path = NULL, *data = NULL;
        struct mk_error e = {};
        size_t len;
        int r;

        r = mk_host_path(h, MK_HOST_PROC, "modules", &path);
        if (r < 0)
                return false;
        r = mk_read_file(path, MK_MAX_PROC_MODULES_BYTES, &data, &len, &e);
        if (r < 0) {
                log_debug_area(PCI_AREA, "%s, assuming the nvidia module is not loaded", e.msg);
                return false;
        }
        /* "nvidia 56823808 ..." is the driver; nvidia_uvm, nvidia_drm or
         * nvidiafb alone are not. */
        for (size_t i = 0; i < len;) {
                const char *line = data + i;
                const char *nl = memchr(line, '\n', len - i);
                size_t n = nl ? (size_t) (nl - line) : len - i;
                if (n >= 7 && memcmp(line, "nvidia ", 7) == 0)
                        return true;
                i += n + 1;
        }
        return false;
}

/* ---- BAR0 ---- */

struct bar0 {
        const char *address; /* of the GPU, for messages; not owned */
        char *path;          /* resource0 */
        uint8_t *base;       /* the mapping; accessed through volatile pointers */
        size_t size;         /* bytes mapped */
        bool big_endian;
};

static void bar0_done(struct bar0 *b) {
        if (b->base)
                (void) munmap(b->base, b->size);
        free(b->path);
        *b = (struct bar0) {};
}

/* Only 32-bit aligned registers wholly inside the mapping: a resource0 that
 * is shorter than the BAR (a fixture, a truncated file) must not fault. */
static int bar0_check(const struct bar0 *b, uint32_t off, struct mk_error *e) {
        if (off % 4 != 0 || off > b->size || b->size - off < 4)
                return mk_error_set(e, -ENXIO,
                                    "GPU %s: register 0x%06" PRIx32 " lies outside BAR0 ('%s', %zu bytes mapped)",
                                    b->address, off, b->path, b->size);
        return 0;
}

static uint32_t bar0_load(const struct bar0 *b, uint32_t off) {
        uint32_t raw = *(const volatile uint32_t *) (const void *) (b->base + off);
        return b->big_endian ? be32toh(raw) : le32toh(raw);
}

static int bar0_read32(const struct bar0 *b, uint32_t off, uint32_t *ret, struct mk_error *e) {
        int r = bar0_check(b, off, e);
        if (r < 0)
                return r;
        *ret = bar0_load(b, off);
        return 0;
}

static int bar0_write32(const struct bar0 *b, uint32_t off, uint32_t value, struct mk_error *e) {
        int r = bar0_check(b, off, e);
        if (r < 0)
                return r;
        *(volatile uint32_t *) (void *) (b->base + off) = b->big_endian ? htobe32(value) : htole32(value);
        return 0;
}

/* BAR0's size from line 0 of <dev>/resource: "start end flags", each
 * "0x%016llx" (drivers/pci/pci-sysfs.c resource_show()). */
static int bar0_size(const struct mk_pci_gpu *g, uint64_t *ret, struct mk_error *e) {
        _cleanup_free_ char *path = NULL, *data = NULL;
        uint64_t v[3];
        char *save = NULL, *tok;
        size_t n = 0;
        int r;

        r = mk_path_join(g->path, "resource", &path);
        if (r < 0)
                return mk_error_set(e, r, "GPU %s: %s", g->address, strerror(-r));
        r = mk_read_file(path, MK_MAX_SYSFS_BYTES, &data, NULL, e);
        if (r < 0)
                return r;
        data[strcspn(data, "\n")] = 0;
        for (tok = strtok_r(data, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
                if (n == ELEMENTSOF(v) || !strneq(tok, "0x", 2) || mk_parse_u64_base(tok + 2, 16, &v[n]) < 0)
                        return mk_error_set(e, -EBADMSG, "GPU %s: cannot parse line 1 of '%s'", g->address, path);
                n++;
        }
        if (n != ELEMENTSOF(v) || v[1] < v[0])
                return mk_error_set(e, -EBADMSG, "GPU %s: cannot parse line 1 of '%s'", g->address, path);
        if (v[0] == 0 && v[1] == 0)
                return mk_error_set(e, -ENODEV, "GPU %s has no BAR0 ('%s')", g->address, path);
        *ret = v[1] - v[0] + 1;
        return 0;
}

/* Maps the whole of BAR0 (read-only, or read-write for writes) and probes its
 * endianness with PMC_BOOT_1 (go-nvlib pkg/nvpci/resources.go). */
static int bar0_open(const struct mk_pci_gpu *g, bool writable, struct bar0 *ret, struct mk_error *e) {
        _cleanup_(bar0_done) struct bar0 b = { .address = g->address };
        _cleanup_close_ int fd = -1;
        uint64_t bar_size = 0, map_size;
        uint32_t boot1;
        struct stat st;
        void *p;
        int r;

        if (!g->path)
                return mk_error_set(e, -EINVAL, "GPU %s has no sysfs path", g->address);
        r = bar0_size(g, &bar_size, e);
        if (r < 0)
                return r;
        r = mk_path_join(g->path, "resource0", &b.path);
        if (r < 0)
                return mk_error_set(e, r, "GPU %s: %s", g->address, strerror(-r));

        fd = open(b.path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NOCTTY);
        if (fd < 0) {
                r = negative_errno();
                return mk_error_set(e, r, "GPU %s: failed to open '%s' %s: %s%s", g->address, b.path,
                                    writable ? "read-write" : "read-only", strerror(-r),
                                    r == -EACCES || r == -EPERM ? " (needs root and an unlocked resource0)" : "");
        }
        if (fstat(fd, &st) < 0) {
                r = negative_errno();
                return mk_error_set(e, r, "GPU %s: failed to stat '%s': %s", g->address, b.path, strerror(-r));
        }
        /* sysfs gives resource0 the BAR's length; a shorter regular file
         * (a fixture) is mapped only as far as it goes, since touching a
         * page past its end raises SIGBUS. */
        map_size = bar_size;
        if (S_ISREG(st.st_mode) && (uint64_t) st.st_size < map_size)
                map_size = (uint64_t) st.st_size;
        if (map_size < MK_BAR0_PMC_BOOT_1 + 4)
                return mk_error_set(e, -ENXIO, "GPU %s: BAR0 ('%s') is only %" PRIu64 " bytes", g->address,
                                    b.path, map_size);
        if (map_size > SIZE_MAX)
                return mk_error_set(e, -EFBIG, "GPU %s: BAR0 ('%s') is too large to map", g->address, b.path);

        p = mmap(NULL, (size_t) map_size, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
                r = negative_errno();
                return mk_error_set(e, r, "GPU %s: failed to map '%s': %s%s", g->address, b.path, strerror(-r),
                                    r == -EPERM ? " (kernel lockdown or iomem=strict blocks resource0)" : "");
        }
        b.base = p;
        b.size = (size_t) map_size;

        r = bar0_read32(&b, MK_BAR0_PMC_BOOT_1, &boot1, e);
        if (r < 0)
                return r;
        if (boot1 == MK_PMC_BOOT_1_BIG_ENDIAN)
                b.big_endian = true;
        else if (boot1 != MK_PMC_BOOT_1_LITTLE_ENDIAN)
                return mk_error_set(e, -EIO, "GPU %s: unexpected PMC_BOOT_1 value 0x%08" PRIx32 " in '%s'",
                                    g->address, boot1, b.path);
        log_debug_area(PCI_AREA, "GPU %s: mapped %zu bytes of BAR0 %s, %s-endian", g->address, b.size,
                       writable ? "read-write" : "read-only", b.big_endian ? "big" : "little");
        *ret = b;
        b = (struct bar0) {};
        return 0;
}

/* PMC_BOOT_0 must be GA100's, the only chip whose registers are known. */
static int bar0_check_chip(const struct bar0 *b, struct mk_error *e) {
        uint32_t boot0;
        int r = bar0_read32(b, MK_BAR0_PMC_BOOT_0, &boot0, e);
        if (r < 0)
                return r;
        if (boot0 != MK_PMC_BOOT_0_GA100)
                return mk_error_set(e, -EOPNOTSUPP,
                                    "GPU %s: chip 0x%08" PRIx32
                                    " is not a known MIG-capable chip (GA100), refusing to touch it",
                                    b->address, boot0);
        return 0;
}

int mk_pci_mig_capable(const struct mk_pci_gpu *g, bool *ret, struct mk_error *e) {
        _cleanup_(bar0_done) struct bar0 b = {};
        uint32_t boot0;
        int r;

        r = bar0_open(g, false, &b, e);
        if (r < 0)
                return r;
        r = bar0_read32(&b, MK_BAR0_PMC_BOOT_0, &boot0, e);
        if (r < 0)
                return r;
        log_debug_area(PCI_AREA, "GPU %s: PMC_BOOT_0 0x%08" PRIx32, g->address, boot0);
        *ret = boot0 == MK_PMC_BOOT_0_GA100;
        return 0;
}

int mk_pci_get_mig_mode(const struct mk_pci_gpu *g, bool *ret_current, bool *ret_pending, struct mk_error *e) {
        _cleanup_(bar0_done) struct bar0 b = {};
        uint32_t mode, request;
        bool current, pending;
        int r;

        r = bar0_open(g, false, &b, e);
        if (r < 0)
                return r;
        r = bar0_check_chip(&b, e);
        if (r < 0)
                return r;
        r = bar0_read32(&b, MK_BAR0_MIG_MODE, &mode, e);
        if (r < 0)
                return r;
        r = bar0_read32(&b, MK_BAR0_MIG_REQUEST, &request, e);
        if (r < 0)
                return r;

        current = (mode & MK_MIG_MODE_ENABLED) != 0;
        request &= MK_MIG_REQUEST_MASK;
        pending = (current && request == MK_MIG_REQUEST_DISABLE) || (!current && request == MK_MIG_REQUEST_ENABLE);
        log_debug_area(PCI_AREA, "GPU %s: MIG mode register 0x%08" PRIx32 ", request bits 0x%04" PRIx32, g->address,
                       mode, request);
        if (ret_current)
                *ret_current = current;
        if (ret_pending)
                *ret_pending = pending;
        return 0;
}

static uint64_t now_ms(void) {
        struct timespec ts;
        (void) clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

static void sleep_ms(uint64_t ms) {
        struct timespec ts = { .tv_sec = (time_t) (ms / 1000), .tv_nsec = (long) (ms % 1000) * 1000000 };
        while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR)
                ;
}

/* Boot complete (0x118234 == 0x3FF) before the request register is touched
 * (mig-parted pkg/mig/mode/pci.go: every 100 ms, for 5 s). */
static int bar0_wait_boot_complete(const struct bar0 *b, unsigned timeout_ms, unsigned poll_ms, struct mk_error *e) {
        uint64_t start = now_ms();
        uint32_t v;
        int r;

        for (;;) {
                r = bar0_read32(b, MK_BAR0_BOOT_COMPLETE, &v, e);
                if (r < 0)
                        return r;
                if (v == MK_BOOT_COMPLETE_VALUE)
                        return 0;
                uint64_t elapsed = now_ms() - start;
                if (elapsed >= timeout_ms)
                        return mk_error_set(e, -ETIMEDOUT,
                                            "GPU %s: timed out after %u ms waiting for boot complete "
                                            "(register 0x%06x is 0x%08" PRIx32 ", want 0x%03x)",
                                            b->address, timeout_ms, MK_BAR0_BOOT_COMPLETE, v, MK_BOOT_COMPLETE_VALUE);
                sleep_ms(MIN((uint64_t) MAX(poll_ms, 1u), timeout_ms - elapsed));
        }
}

int mk_pci_set_mig_mode(const struct mk_pci_gpu *g, bool enabled, unsigned timeout_ms, unsigned poll_ms,
                        struct mk_error *e) {
        uint32_t old, want;
        int r;

        /* Read-only first: an unknown chip is never opened for writing. */
        {
                _cleanup_(bar0_done) struct bar0 ro = {};
                r = bar0_open(g, false, &ro, e);
                if (r < 0)
                        return r;
                r = bar0_check_chip(&ro, e);
                if (r < 0)
                        return r;
        }

        _cleanup_(bar0_done) struct bar0 b = {};
        r = bar0_open(g, true, &b, e);
        if (r < 0)
                return r;
        r = bar0_check_chip(&b, e); /* the same file, but reading is free */
        if (r < 0)
                return r;
        r = bar0_wait_boot_complete(&b, timeout_ms, poll_ms, e);
        if (r < 0)
                return r;
        r = bar0_read32(&b, MK_BAR0_MIG_REQUEST, &old, e);
        if (r < 0)
                return r;
        want = (old & ~MK_MIG_REQUEST_MASK) | (enabled ? MK_MIG_REQUEST_ENABLE : MK_MIG_REQUEST_DISABLE);
        r = bar0_write32(&b, MK_BAR0_MIG_REQUEST, want, e);
        if (r < 0)
                return r;
        if (msync(b.base, b.size, MS_SYNC | MS_INVALIDATE) < 0) {
                r = negative_errno();
                return mk_error_set(e, r, "GPU %s: failed to sync '%s' after writing the MIG mode request: %s",
                                    g->address, b.path, strerror(-r));
        }
        log_debug_area(PCI_AREA, "GPU %s: MIG mode request 0x%08" PRIx32 " -> 0x%08" PRIx32 " (%s at the next reset)",
                       g->address, old, want, enabled ? "enable" : "disable");
        return 0;
}

/* ---- reset ---- */

int mk_pci_reset(const struct mk_pci_gpu *g, struct mk_error *e) {
        _cleanup_free_ char *path = NULL;
        _cleanup_close_ int fd = -1;
        ssize_t n;
        int r;

        if (!g->path)
                return mk_error_set(e, -EINVAL, "GPU %s has no sysfs path", g->address);
        r = mk_path_join(g->path, "reset", &path);
        if (r < 0)
                return mk_error_set(e, r, "GPU %s: %s", g->address, strerror(-r));
        fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0) {
                r = negative_errno();
                if (r == -ENOENT)
                        return mk_error_set(e, r, "GPU %s has no function reset ('%s' is missing); a reboot is needed",
                                            g->address, path);
                return mk_error_set(e, r, "GPU %s: failed to open '%s': %s", g->address, path, strerror(-r));
        }
        do
                n = write(fd, "1", 1);
        while (n < 0 && errno == EINTR);
        if (n != 1) {
                r = n < 0 ? negative_errno() : -EIO;
                return mk_error_set(e, r, "GPU %s: failed to write '1' to '%s': %s", g->address, path, strerror(-r));
        }
        if (close(TAKE_FD(fd)) < 0) {
                r = negative_errno();
                return mk_error_set(e, r, "GPU %s: failed to write '1' to '%s': %s", g->address, path, strerror(-r));
        }
        log_debug_area(PCI_AREA, "GPU %s: function reset through '%s'", g->address, path);
        return 0;
}
