/* The simulated machine's host tree (host.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

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
                if (r >= 0) /* the function can be reset (migkit then resets through nvidia-smi) */
                        r = put(dir, "reset", "", 0);
        }
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

int sim_host_write(const char *state_path, const struct sim_state *st, bool replace) {
        _cleanup_free_ char *root = sim_host_root(state_path), *tmp = NULL, *old = NULL;
        if (!root || asprintf(&tmp, "%s.tmp.%ld", root, (long) getpid()) < 0 ||
            asprintf(&old, "%s.old.%ld", root, (long) getpid()) < 0)
                return sim_error(-ENOMEM, "out of memory");
        struct stat sb;
        if (!replace && stat(root, &sb) == 0)
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
