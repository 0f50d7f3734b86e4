/* The simulated machine's host tree (host.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/host.h"
#include "lib/state.h"
#include "lib/util.h"

#define PCI_CLASS_3D 0x030200u /* every simulated model is a 3D controller (data-center part) */

char *sim_host_root(const char *state_path) {
        char *p = NULL;
        return asprintf(&p, "%s.host", state_path) < 0 ? NULL : p;
}

unsigned sim_host_cap_minor(unsigned gpu, unsigned gi, unsigned ci) {
        unsigned base = 3 + gpu * SIM_CAPS_GIS * SIM_CAPS_PER_GI + gi * SIM_CAPS_PER_GI;
        return ci == SIM_ID_NONE ? base : base + 1 + ci;
}

static int mkdirs(char *path) {
        for (char *p = path + 1; *p; p++)
                if (*p == '/') {
                        *p = 0;
                        int r = mkdir(path, 0755) < 0 && errno != EEXIST ? -errno : 0;
                        *p = '/';
                        if (r < 0)
                                return r;
                }
        return mkdir(path, 0755) < 0 && errno != EEXIST ? -errno : 0;
}

static int put(const char *dir, const char *name, const void *data, size_t len) {
        _cleanup_free_ char *path = NULL;
        if (asprintf(&path, "%s/%s", dir, name) < 0)
                return -ENOMEM;
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        const char *p = data;
        while (len > 0) {
                ssize_t n = write(fd, p, len);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                p += n;
                len -= (size_t) n;
        }
        return 0;
}

static int putf(const char *dir, const char *name, const char *fmt, ...) _printf_(3, 4);
static int putf(const char *dir, const char *name, const char *fmt, ...) {
        _cleanup_free_ char *text = NULL;
        va_list ap;
        va_start(ap, fmt);
        int n = vasprintf(&text, fmt, ap);
        va_end(ap);
        return n < 0 ? -ENOMEM : put(dir, name, text, (size_t) n);
}

/* A 256-byte configuration space: ids, class, subsystem, and a capability
 * list of power management then PCI Express (no vendor-specific vGPU
 * capability: a bare-metal GPU). */
static void config_space(unsigned char c[256], unsigned id, unsigned sub, unsigned class) {
        memset(c, 0, 256);
        c[0x00] = (unsigned char) (id & 0xff);
        c[0x01] = (unsigned char) ((id >> 8) & 0xff);
        c[0x02] = (unsigned char) ((id >> 16) & 0xff);
        c[0x03] = (unsigned char) ((id >> 24) & 0xff);
        c[0x06] = 0x10; /* status: capability list */
        c[0x09] = (unsigned char) (class & 0xff);
        c[0x0a] = (unsigned char) ((class >> 8) & 0xff);
        c[0x0b] = (unsigned char) ((class >> 16) & 0xff);
        c[0x2c] = (unsigned char) (sub & 0xff);
        c[0x2d] = (unsigned char) ((sub >> 8) & 0xff);
        c[0x2e] = (unsigned char) ((sub >> 16) & 0xff);
        c[0x2f] = (unsigned char) ((sub >> 24) & 0xff);
        c[0x34] = 0x60;
        c[0x60] = 0x01; /* power management */
        c[0x61] = 0x78;
        c[0x78] = 0x10; /* PCI Express, last */
}

/* "00000000:07:00.0" -> "0000:07:00.0" (sysfs names), lower case. */
static void sysfs_address(const char *bus_id, char *buf, size_t size) {
        const char *colon = strchr(bus_id, ':');
        const char *src = colon && colon - bus_id == 8 ? bus_id + 4 : bus_id;
        size_t i = 0;
        for (; src[i] && i + 1 < size; i++)
                buf[i] = (char) (src[i] >= 'A' && src[i] <= 'F' ? src[i] - 'A' + 'a' : src[i]);
        buf[i] = 0;
}

/* Bumped when the tree gains files: a state file's older tree is replaced
 * when loaded (its `version` file differs). */
#define HOST_TREE_VERSION "2\n"

/* The `resource` file of a GPU as the kernel writes it for a device without
 * SR-IOV: 13 lines (BARs 0-5, the ROM, 6 IOV BARs) of start, end (inclusive)
 * and flags, each "0x%016llx", zeros for an unused one. A data-center GPU
 * has a 16 MiB 32-bit BAR0 (registers), a 64-bit prefetchable BAR1 (the
 * framebuffer window: the next power of two above the memory) taking lines
 * 1 and 2, and a 32 MiB 64-bit prefetchable BAR3 taking lines 3 and 4.
 * Addresses are made up, distinct per GPU and aligned to their size. */
static int put_resource(const char *dir, unsigned gpu, unsigned long long memory_mib) {
        const unsigned long long mem32 = 0x00040200ULL, mem64pf = 0x0014220cULL;
        unsigned long long bar1 = 1ULL << 30;
        while (bar1 < memory_mib * 1024ULL * 1024ULL && bar1 < (1ULL << 40))
                bar1 <<= 1;
        unsigned long long base64 = 0x200000000000ULL + (unsigned long long) gpu * 0x20000000000ULL; /* 2 TiB apart */
        struct {
                unsigned long long start, size, flags;
        } line[13] = {
                [0] = {0x90000000ULL + (unsigned long long) gpu * 0x01000000ULL, 16ULL << 20, mem32},
                [1] = {base64, bar1, mem64pf},
                [3] = {base64 + 0x10000000000ULL, 32ULL << 20, mem64pf},
        };
        char text[13 * 60];
        size_t k = 0;
        for (size_t i = 0; i < ELEMENTSOF(line); i++)
                k += (size_t) snprintf(text + k, sizeof(text) - k, "0x%016llx 0x%016llx 0x%016llx\n",
                                       line[i].size ? line[i].start : 0ULL,
                                       line[i].size ? line[i].start + line[i].size - 1 : 0ULL, line[i].flags);
        return put(dir, "resource", text, k);
}

static int write_tree(const char *root, const struct sim_state *st) {
        size_t n = st->n_gpus;
        size_t half = n <= 4 ? 4 : (n + 1) / 2; /* GPUs per socket, as topo.c */
        int r = 0;
        for (size_t i = 0; i < n && r >= 0; i++) {
                const struct sim_gpu *g = &st->gpus[i];
                const struct sim_model *m = g->model;
                char addr[32];
                sysfs_address(g->bus_id, addr, sizeof(addr));
                _cleanup_free_ char *dir = NULL;
                if (asprintf(&dir, "%s/sys/bus/pci/devices/%s", root, addr) < 0)
                        return -ENOMEM;
                r = mkdirs(dir);
                unsigned char cfg[256];
                config_space(cfg, m->pci_device_id, m->pci_subsystem_id, PCI_CLASS_3D);
                if (r >= 0)
                        r = putf(dir, "vendor", "0x%04x\n", m->pci_device_id & 0xffff);
                if (r >= 0)
                        r = putf(dir, "device", "0x%04x\n", m->pci_device_id >> 16);
                if (r >= 0)
                        r = putf(dir, "subsystem_vendor", "0x%04x\n", m->pci_subsystem_id & 0xffff);
                if (r >= 0)
                        r = putf(dir, "subsystem_device", "0x%04x\n", m->pci_subsystem_id >> 16);
                if (r >= 0)
                        r = putf(dir, "class", "0x%06x\n", PCI_CLASS_3D);
                if (r >= 0)
                        r = putf(dir, "numa_node", "%zu\n", i / half);
                if (r >= 0)
                        r = put(dir, "config", cfg, sizeof(cfg));
                if (r >= 0)
                        r = put_resource(dir, (unsigned) i, m->memory_mib);
                if (r >= 0) /* the function can be reset (migkit then resets through nvidia-smi) */
                        r = put(dir, "reset", "", 0);
                if (r >= 0) { /* bound to the nvidia driver, as sysfs links it */
                        _cleanup_free_ char *link = NULL;
                        if (asprintf(&link, "%s/driver", dir) < 0)
                                return -ENOMEM;
                        r = symlink("../../drivers/nvidia", link) < 0 ? -errno : 0;
                }
        }
        if (r >= 0) {
                _cleanup_free_ char *drv = NULL;
                if (asprintf(&drv, "%s/sys/bus/pci/drivers/nvidia", root) < 0)
                        return -ENOMEM;
                r = mkdirs(drv);
        }
        if (r >= 0)
                r = put(root, "version", HOST_TREE_VERSION, strlen(HOST_TREE_VERSION));
        if (r < 0)
                return r;
        _cleanup_free_ char *caps = NULL, *proc = NULL;
        if (asprintf(&caps, "%s/proc/driver/nvidia-caps", root) < 0 || asprintf(&proc, "%s/proc", root) < 0)
                return -ENOMEM;
        r = mkdirs(caps);
        /* The driver is loaded on a simulated machine (/proc/modules as lsmod reads it). */
        if (r >= 0)
                r = putf(proc, "modules", "nvidia 56823808 0 - Live 0x0000000000000000 (POE)\n");
        if (r < 0)
                return r;
        /* GPU minors are the NVML indices (0..n-1) in the simulator. */
        size_t cap = 64 + n * SIM_CAPS_GIS * SIM_CAPS_PER_GI * 32;
        _cleanup_free_ char *text = malloc(cap);
        if (!text)
                return -ENOMEM;
        size_t k = (size_t) snprintf(text, cap, "config 1\nmonitor 2\n");
        for (unsigned gpu = 0; gpu < n; gpu++)
                for (unsigned gi = 0; gi < SIM_CAPS_GIS; gi++) {
                        k += (size_t) snprintf(text + k, cap - k, "gpu%u/gi%u/access %u\n", gpu, gi,
                                               sim_host_cap_minor(gpu, gi, SIM_ID_NONE));
                        for (unsigned ci = 0; ci < SIM_CAPS_PER_GI - 1; ci++)
                                k += (size_t) snprintf(text + k, cap - k, "gpu%u/gi%u/ci%u/access %u\n", gpu, gi,
                                                       ci, sim_host_cap_minor(gpu, gi, ci));
                }
        return put(caps, "mig-minors", text, k);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
        (void) sb;
        (void) flag;
        (void) ftw;
        return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

static void rm_tree(const char *path) {
        (void) nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Whether `root` holds a tree of this version. */
static bool tree_current(const char *root) {
        _cleanup_free_ char *path = NULL;
        char buf[16] = "";
        if (asprintf(&path, "%s/version", root) < 0)
                return false;
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return false;
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        return n > 0 && (size_t) n == strlen(HOST_TREE_VERSION) && memcmp(buf, HOST_TREE_VERSION, (size_t) n) == 0;
}

int sim_host_write(const char *state_path, const struct sim_state *st, bool replace) {
        _cleanup_free_ char *root = sim_host_root(state_path), *tmp = NULL, *old = NULL;
        if (!root || asprintf(&tmp, "%s.tmp.%ld", root, (long) getpid()) < 0 ||
            asprintf(&old, "%s.old.%ld", root, (long) getpid()) < 0)
                return sim_error(-ENOMEM, "out of memory");
        if (!replace && tree_current(root))
                return 0;
        rm_tree(tmp);
        int r = write_tree(tmp, st);
        if (r < 0) {
                rm_tree(tmp);
                return sim_error(r, "cannot write the simulated host tree '%s': %s", root, strerror(-r));
        }
        if (rename(root, old) == 0)
                rm_tree(old);
        if (rename(tmp, root) < 0) {
                r = -errno;
                rm_tree(tmp);
                if (!replace && (r == -EEXIST || r == -ENOTEMPTY))
                        return 0; /* another process wrote it first */
                return sim_error(r, "cannot rename '%s' to '%s': %s", tmp, root, strerror(-r));
        }
        return 0;
}
