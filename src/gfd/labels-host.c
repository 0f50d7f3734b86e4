/* Host facts for the GFD labels (labels-host.h): PCI class and vGPU capability from sysfs. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "base/log.h"
#include "base/macro.h"
#include "base/parse.h"
#include "mig/gpu.h"
#include "gfd/labels-host.h"

#define PCI_VENDOR_NVIDIA "0x10de"
#define PCI_CLASS_VGA 0x030000u
#define PCI_CLASS_3D 0x030200u

int mk_pci_attr_by_bus_id(const struct mk_host *h, const char *nvml_bus_id, const char *attr, char **ret) {
        /* NVML writes an 8-digit domain, sysfs a 4-digit one, lower case. */
        char bus[MK_BUS_ID_MAX];
        const char *colon = strchr(nvml_bus_id, ':');
        const char *src = colon && colon - nvml_bus_id == 8 ? nvml_bus_id + 4 : nvml_bus_id;
        size_t i = 0;
        for (; src[i] && i + 1 < sizeof(bus); i++) {
                char ch = (char) tolower((unsigned char) src[i]);
                if (!isxdigit((unsigned char) ch) && ch != ':' && ch != '.')
                        return -EINVAL;
                bus[i] = ch;
        }
        if (i == 0 || src[i])
                return -EINVAL;
        bus[i] = 0;
        _cleanup_free_ char *rel = NULL, *path = NULL;
        if (asprintf(&rel, "bus/pci/devices/%s/%s", bus, attr) < 0)
                return -ENOMEM;
        int r = mk_host_path(h, MK_HOST_SYSFS, rel, &path);
        if (r < 0)
                return r;
        return mk_read_sysfs_attr(path, ret, NULL);
}

const char *mk_labels_gpu_mode(const struct mk_host *h, const struct mk_snapshot *s) {
        uint32_t first = 0;
        for (size_t i = 0; i < s->n_gpus; i++) {
                _cleanup_free_ char *v = NULL;
                uint32_t class;
                int r = mk_pci_attr_by_bus_id(h, s->gpus[i].bus_id, "class", &v);
                if (r < 0 || mk_parse_u32_base(v, 0, &class) < 0) {
                        log_warning("GPU %u (%s): cannot read its PCI class%s%s, nvidia.com/gpu.mode=unknown",
                                    s->gpus[i].index, s->gpus[i].bus_id, r < 0 ? ": " : "",
                                    r < 0 ? strerror(-r) : "");
                        return "unknown";
                }
                if (i == 0)
                        first = class;
                else if (class != first) {
                        log_info("Not all GPUs have the same PCI class (0x%06x, 0x%06x), nvidia.com/gpu.mode=unknown",
                                 first, class);
                        return "unknown";
                }
        }
        if (s->n_gpus == 0)
                return "unknown";
        return first == PCI_CLASS_3D ? "compute" : first == PCI_CLASS_VGA ? "graphics" : "unknown";
}

/* Copies `n` bytes at `p` as a string with the NULs around it trimmed. */
static void copy_trimmed(char dst[16], const unsigned char *p, size_t n) {
        size_t k = 0;
        for (size_t i = 0; i < n && k + 1 < 16; i++)
                if (p[i])
                        dst[k++] = isprint(p[i]) ? (char) p[i] : '?';
        dst[k] = 0;
}

int mk_pci_config_vgpu(const unsigned char *cfg, size_t len, char version[16], char branch[16]) {
        version[0] = branch[0] = 0;
        if (len < 256)
                return -ENODATA;
        if (!(cfg[0x06] & 0x10)) /* status: no capability list */
                return 0;
        bool visited[256] = {false};
        for (unsigned pos = cfg[0x34]; pos != 0 && pos + 2 < 256 && !visited[pos]; pos = cfg[pos + 1]) {
                visited[pos] = true;
                if (cfg[pos] == 0xff)
                        break;
                if (cfg[pos] != 0x09) /* vendor specific */
                        continue;
                size_t clen = cfg[pos + 2];
                if (pos + clen > len)
                        clen = len - pos;
                const unsigned char *c = cfg + pos;
                if (clen < 5 || c[3] != 0x56 || c[4] != 0x46) /* "VF" */
                        return 0;
                /* Records from offset 5: id, length, data; record 0 is the host
                 * driver version (10 bytes) then its branch (10 bytes). */
                size_t p = 5;
                while (p + 1 < clen && c[p] != 0 && c[p + 1] != 0)
                        p += c[p + 1];
                if (p < clen && c[p] == 0 && p + 2 + 20 <= clen) {
                        copy_trimmed(version, c + p + 2, 10);
                        copy_trimmed(branch, c + p + 12, 10);
                }
                return 1;
        }
        return 0;
}

void mk_labels_host_read(const struct mk_host *h, const struct mk_snapshot *s, struct mk_labels_host *ret) {
        *ret = (struct mk_labels_host) {.gpu_mode = mk_labels_gpu_mode(h, s), .vgpu_present = -1};
        _cleanup_free_ char *dir = NULL;
        if (mk_host_path(h, MK_HOST_SYSFS, "bus/pci/devices", &dir) < 0)
                return;
        DIR *d = opendir(dir);
        if (!d) {
                log_debug_area("plugin", "Cannot list '%s' (%m): no nvidia.com/vgpu.present label", dir);
                return;
        }
        bool unreadable = false;
        int present = 0;
        for (struct dirent *de; present <= 0 && (de = readdir(d));) {
                if (de->d_name[0] == '.')
                        continue;
                _cleanup_free_ char *vp = NULL, *cp = NULL, *vendor = NULL, *cfg = NULL;
                size_t len = 0;
                if (asprintf(&vp, "%s/%s/vendor", dir, de->d_name) < 0 ||
                    asprintf(&cp, "%s/%s/config", dir, de->d_name) < 0)
                        break;
                if (mk_read_sysfs_attr(vp, &vendor, NULL) < 0 || strcasecmp(vendor, PCI_VENDOR_NVIDIA) != 0)
                        continue;
                if (mk_read_file(cp, MK_PCI_CONFIG_MAX, &cfg, &len, NULL) < 0) {
                        unreadable = true;
                        continue;
                }
                int r = mk_pci_config_vgpu((const unsigned char *) cfg, len, ret->vgpu_host_driver_version,
                                           ret->vgpu_host_driver_branch);
                if (r < 0)
                        unreadable = true;
                else if (r > 0)
                        present = 1;
        }
        closedir(d);
        if (present)
                ret->vgpu_present = 1;
        else if (!unreadable)
                ret->vgpu_present = 0;
        else
                log_debug_area("plugin", "The PCI configuration space of an NVIDIA function is not readable in "
                                         "full (unprivileged?): no nvidia.com/vgpu.present label");
}
