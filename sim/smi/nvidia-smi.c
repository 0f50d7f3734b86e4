/* nvidia-smi stand-in for the NVML simulator.
 *
 * Answers the handful of nvidia-smi commands that migkit, mig-parted-style
 * scripts and our tests run, in the real tool's output format, computed only
 * from NVML calls (src/nvml/nvml-abi.h) against the simulated library. The one
 * exception is the GPU reset, which NVML does not expose: it calls the
 * simulator's control function mksim_reset_gpu().
 *
 * Output formats are taken from real nvidia-smi output quoted upstream:
 *   -L                  NVIDIA/go-dcgm#30, DataDog/datadog-agent#33120 (MIG lines,
 *                       "  MIG 1g.10gb     Device  0: (UUID: MIG-...)")
 *   mig -lgip           NVIDIA/mig-parted#139, #166, #187, gpu-operator#903 and the
 *                       MIG user guide (A100-40GB table); the name column widens to
 *                       the longest profile name (RTX PRO 6000, bigstack-oss/cubecos#312)
 *   mig -lgipp          MIG user guide ("GPU  0 Profile ID 19 Placements: {0,...}:1",
 *                       singular "Placement :" for a single placement)
 *   mig -lgi / -lci     NVIDIA/DCGM#138 and MIG user guide examples
 *   -r                  NVIDIA/gpu-operator#118, NVIDIA/NVSentinel#1690/#1692,
 *                       ComputeCanada/puppet-magic_castle#387
 *   -mig 0|1            MIG user guide ("Enabled MIG Mode for GPU ...", "All done.")
 * Exit codes follow nvidia-smi(1) RETURN VALUE: 0 success, 2 invalid argument
 * or flag, 3 not available on the target device, 6 a query to find an object
 * was unsuccessful, 9 driver not loaded, 255 other error (a reset refused
 * because the GPU is in use exits 255: NVSentinel#1690 "exit=255").
 *
 * Output goes to stdout, error messages included, as with the real tool
 * (scripts grep its stdout for "No MIG-enabled devices found."). */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/macro.h"
#include "nvml/nvml-abi.h"
#include "mksim.h"

/* Prototypes of the NVML entry points, from the ABI table. */
#define MK_DECLARE_NVML(name, ret, args) ret name args;
MK_NVML_FUNCTIONS(MK_DECLARE_NVML)
#undef MK_DECLARE_NVML

/* nvidia-smi(1) RETURN VALUE. */
enum {
        SMI_OK = 0,
        SMI_EINVAL = 2,
        SMI_ENOTSUP = 3,
        SMI_ENOPERM = 4,
        SMI_ENOTFOUND = 6,
        SMI_ENODRIVER = 9,
        SMI_EOTHER = 255,
};

/* Limits of this tool, well above any real machine (16 GPUs per node, 7 MIG
 * devices per GPU, 7 placements per profile). */
#define SMI_MAX_GPUS 64
#define SMI_MAX_PROFILES NVML_GPU_INSTANCE_PROFILE_COUNT
#define SMI_MAX_CI_PROFILES 9 /* CI enums 0..8 (8 = 7_SLICE_NVL) */
#define SMI_MAX_PLACEMENTS 32
#define SMI_MAX_INSTANCES 32
#define SMI_NAME_MIN_WIDTH 16 /* "MIG 1g.5gb+me" and shorter fit the default columns */
#define SMI_LINE_MAX 512

struct gpu {
        unsigned index;
        nvmlDevice_t dev;
        char bus_id[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
        char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
        unsigned domain, bus, device;
        bool mig_enabled;
};

struct gi_profile {
        unsigned nvml_enum;
        nvmlGpuInstanceProfileInfo_v2_t info;
        char display[NVML_DEVICE_NAME_V2_BUFFER_SIZE + 8]; /* "MIG 1g.5gb" */
};

struct options {
        bool help, list, reset, mig;
        bool lgip, lgipp, lgi, lci;
        bool set_mig;
        unsigned mig_mode;
        const char *ids;  /* -i argument, NULL for all GPUs */
        const char *gi;   /* mig -gi filter for -lci */
};

static struct gpu gpus[SMI_MAX_GPUS];
static unsigned n_gpus;

/* ---- small helpers ----------------------------------------------------- */

static int parse_uint(const char *s, unsigned *ret) {
        char *end = NULL;
        unsigned long v;

        if (!s || *s < '0' || *s > '9')
                return -EINVAL;
        errno = 0;
        v = strtoul(s, &end, 10);
        if (errno != 0 || !end || *end != '\0' || v > UINT_MAX)
                return -EINVAL;
        *ret = (unsigned) v;
        return 0;
}

static int parse_hex(const char *s, size_t len, unsigned *ret) {
        char buf[16], *end = NULL;
        unsigned long v;

        if (len == 0 || len >= sizeof(buf))
                return -EINVAL;
        memcpy(buf, s, len);
        buf[len] = '\0';
        for (size_t i = 0; i < len; i++)
                if (!strchr("0123456789abcdefABCDEF", buf[i]))
                        return -EINVAL;
        errno = 0;
        v = strtoul(buf, &end, 16);
        if (errno != 0 || !end || *end != '\0' || v > UINT_MAX)
                return -EINVAL;
        *ret = (unsigned) v;
        return 0;
}

/* "[domain:]bus:device[.function]" in hex, as nvidia-smi accepts PCI ids. */
static int parse_bus_id(const char *s, unsigned *domain, unsigned *bus, unsigned *dev) {
        const char *c1 = strchr(s, ':'), *c2, *dot;
        unsigned d = 0;

        if (!c1)
                return -EINVAL;
        c2 = strchr(c1 + 1, ':');
        if (c2) {
                if (parse_hex(s, (size_t) (c1 - s), &d) < 0)
                        return -EINVAL;
                s = c1 + 1;
                c1 = c2;
        }
        if (parse_hex(s, (size_t) (c1 - s), bus) < 0)
                return -EINVAL;
        s = c1 + 1;
        dot = strchr(s, '.');
        if (parse_hex(s, dot ? (size_t) (dot - s) : strlen(s), dev) < 0)
                return -EINVAL;
        if (dot) {
                unsigned fn;
                if (parse_hex(dot + 1, strlen(dot + 1), &fn) < 0 || fn != 0)
                        return -EINVAL;
        }
        *domain = d;
        return 0;
}

static void repeat(char c, unsigned n) {
        for (unsigned i = 0; i < n; i++)
                putchar(c);
}

/* "+----+" or "|====|" of total width `width`. */
static void rule(char edge, char fill, unsigned width) {
        putchar(edge);
        repeat(fill, width - 2);
        putchar(edge);
        putchar('\n');
}

/* A table line: the formatted text, padded with spaces, closed by '|' at
 * column width-1. Text longer than the table is printed as is. */
_printf_(2, 3) static void row(unsigned width, const char *fmt, ...) {
        char buf[SMI_LINE_MAX];
        va_list ap;
        int n;

        va_start(ap, fmt);
        n = vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        if (n < 0)
                return;
        fputs(buf, stdout);
        if ((unsigned) n < width - 1)
                repeat(' ', width - 1 - (unsigned) n);
        puts("|");
}

static const char *nvml_message(nvmlReturn_t r) {
        const char *s = nvmlErrorString(r);
        return s ? s : "Unknown Error";
}

/* Maps an NVML failure to the nvidia-smi exit code. */
static int smi_code(nvmlReturn_t r) {
        switch (r) {
        case NVML_SUCCESS:
                return SMI_OK;
        case NVML_ERROR_INVALID_ARGUMENT:
                return SMI_EINVAL;
        case NVML_ERROR_NOT_SUPPORTED:
                return SMI_ENOTSUP;
        case NVML_ERROR_NO_PERMISSION:
                return SMI_ENOPERM;
        case NVML_ERROR_NOT_FOUND:
                return SMI_ENOTFOUND;
        case NVML_ERROR_DRIVER_NOT_LOADED:
                return SMI_ENODRIVER;
        default:
                return SMI_EOTHER;
        }
}

static int invalid_arguments(void) {
        puts("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.");
        return SMI_EINVAL;
}

static int unknown_option(const char *opt) {
        printf("ERROR: Option %s is not recognized. Please run 'nvidia-smi -h' for help.\n", opt);
        return SMI_EINVAL;
}

/* ---- GPUs ------------------------------------------------------------- */

static int load_gpus(void) {
        unsigned count;
        nvmlReturn_t r;

        r = nvmlDeviceGetCount_v2(&count);
        if (r != NVML_SUCCESS) {
                printf("Unable to determine the device count. %s\n", nvml_message(r));
                return smi_code(r);
        }
        if (count == 0) {
                puts("No devices were found");
                return SMI_ENOTFOUND;
        }
        if (count > SMI_MAX_GPUS)
                count = SMI_MAX_GPUS;
        for (unsigned i = 0; i < count; i++) {
                struct gpu *g = &gpus[i];
                nvmlPciInfo_t pci;
                unsigned cur = 0, pend = 0;

                memset(g, 0, sizeof(*g));
                memset(&pci, 0, sizeof(pci));
                g->index = i;
                r = nvmlDeviceGetHandleByIndex_v2(i, &g->dev);
                if (r == NVML_SUCCESS)
                        r = nvmlDeviceGetName(g->dev, g->name, sizeof(g->name));
                if (r == NVML_SUCCESS)
                        r = nvmlDeviceGetUUID(g->dev, g->uuid, sizeof(g->uuid));
                if (r == NVML_SUCCESS)
                        r = nvmlDeviceGetPciInfo_v3(g->dev, &pci);
                if (r != NVML_SUCCESS) {
                        printf("Unable to query GPU %u: %s\n", i, nvml_message(r));
                        return smi_code(r);
                }
                snprintf(g->bus_id, sizeof(g->bus_id), "%s", pci.busId);
                g->domain = pci.domain;
                g->bus = pci.bus;
                g->device = pci.device;
                r = nvmlDeviceGetMigMode(g->dev, &cur, &pend);
                g->mig_enabled = r == NVML_SUCCESS && cur == NVML_DEVICE_MIG_ENABLE;
        }
        n_gpus = count;
        return SMI_OK;
}

/* One -i token: an index, a UUID or a PCI bus id. */
static struct gpu *find_gpu(const char *id) {
        unsigned u, domain, bus, dev;

        if (parse_uint(id, &u) == 0)
                return u < n_gpus ? &gpus[u] : NULL;
        for (unsigned i = 0; i < n_gpus; i++)
                if (strcasecmp(gpus[i].uuid, id) == 0)
                        return &gpus[i];
        if (parse_bus_id(id, &domain, &bus, &dev) == 0)
                for (unsigned i = 0; i < n_gpus; i++)
                        if (gpus[i].domain == domain && gpus[i].bus == bus && gpus[i].device == dev)
                                return &gpus[i];
        return NULL;
}

static int gpu_order(const void *a, const void *b) {
        const struct gpu *x = *(const struct gpu *const *) a, *y = *(const struct gpu *const *) b;

        return x->index < y->index ? -1 : x->index > y->index;
}

/* Resolves the comma separated -i list (NULL: every GPU) into `sel`. */
static int select_gpus(const char *ids, struct gpu **sel, unsigned *ret_n) {
        char buf[SMI_LINE_MAX];
        unsigned n = 0;

        if (!ids) {
                for (unsigned i = 0; i < n_gpus; i++)
                        sel[n++] = &gpus[i];
                *ret_n = n;
                return SMI_OK;
        }
        if (strlen(ids) >= sizeof(buf))
                return invalid_arguments();
        for (const char *p = ids; *p;) {
                const char *comma = strchr(p, ',');
                size_t len = comma ? (size_t) (comma - p) : strlen(p);
                struct gpu *g;
                bool dup = false;

                memcpy(buf, p, len);
                buf[len] = '\0';
                if (len == 0)
                        return invalid_arguments();
                g = find_gpu(buf);
                if (!g) {
                        puts("No devices were found");
                        return SMI_ENOTFOUND;
                }
                for (unsigned i = 0; i < n; i++)
                        dup = dup || sel[i] == g;
                if (!dup && n < SMI_MAX_GPUS)
                        sel[n++] = g;
                p += len;
                if (*p == ',')
                        p++;
        }
        if (n == 0)
                return invalid_arguments();
        /* Listed in index order, whatever the order of the ids. */
        qsort(sel, n, sizeof(*sel), gpu_order);
        *ret_n = n;
        return SMI_OK;
}

/* ---- profiles ---------------------------------------------------------- */

static void display_name(const char *nvml_name, char *buf, size_t size) {
        /* Real NVML names GI/CI profiles "MIG 1g.5gb"; accept a bare "1g.5gb". */
        if (strncmp(nvml_name, "MIG ", 4) == 0)
                snprintf(buf, size, "%s", nvml_name);
        else
                snprintf(buf, size, "MIG %s", nvml_name);
}

static int profile_order(const void *a, const void *b) {
        const struct gi_profile *x = a, *y = b;

        /* The order nvidia-smi lists profiles in: by compute slices, then
         * memory, then profile id (A100: 19, 20, 15, 14, 9, 5, 0; RTX PRO 6000:
         * 14, 21, 47, 65, 67, 5, 35, ...). */
        if (x->info.sliceCount != y->info.sliceCount)
                return x->info.sliceCount < y->info.sliceCount ? -1 : 1;
        if (x->info.memorySizeMB != y->info.memorySizeMB)
                return x->info.memorySizeMB < y->info.memorySizeMB ? -1 : 1;
        if (x->info.id != y->info.id)
                return x->info.id < y->info.id ? -1 : 1;
        return 0;
}

/* The GI profiles a GPU supports, sorted as nvidia-smi lists them. */
static int gi_profiles(const struct gpu *g, struct gi_profile *out, unsigned *ret_n) {
        unsigned n = 0;

        for (unsigned e = 0; e < NVML_GPU_INSTANCE_PROFILE_COUNT; e++) {
                struct gi_profile *p = &out[n];
                nvmlReturn_t r;

                memset(p, 0, sizeof(*p));
                p->nvml_enum = e;
                p->info.version = nvmlGpuInstanceProfileInfo_v2;
                r = nvmlDeviceGetGpuInstanceProfileInfoV(g->dev, e, &p->info);
                if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_INVALID_ARGUMENT)
                        continue;
                if (r != NVML_SUCCESS) {
                        printf("Failed to display GPU instance profiles: %s\n", nvml_message(r));
                        return smi_code(r);
                }
                p->info.name[sizeof(p->info.name) - 1] = '\0';
                display_name(p->info.name, p->display, sizeof(p->display));
                n++;
        }
        qsort(out, n, sizeof(*out), profile_order);
        *ret_n = n;
        return SMI_OK;
}

/* The MIG-enabled GPUs among the selection; prints the real tool's message
 * when there is none. */
static int mig_gpus(const struct options *o, struct gpu **sel, unsigned *ret_n) {
        struct gpu *all[SMI_MAX_GPUS];
        unsigned n_all = 0, n = 0;
        int k;

        k = select_gpus(o->ids, all, &n_all);
        if (k != SMI_OK)
                return k;
        for (unsigned i = 0; i < n_all; i++)
                if (all[i]->mig_enabled)
                        sel[n++] = all[i];
        if (n == 0) {
                puts("No MIG-enabled devices found.");
                return SMI_ENOTFOUND;
        }
        *ret_n = n;
        return SMI_OK;
}

static unsigned name_width(struct gpu **sel, unsigned n) {
        unsigned w = SMI_NAME_MIN_WIDTH;

        for (unsigned i = 0; i < n; i++) {
                struct gi_profile p[SMI_MAX_PROFILES];
                unsigned np = 0;

                if (gi_profiles(sel[i], p, &np) != SMI_OK)
                        continue;
                for (unsigned j = 0; j < np; j++)
                        w = MAX(w, (unsigned) strlen(p[j].display));
        }
        return w;
}

static int cmd_lgip(const struct options *o) {
        struct gpu *sel[SMI_MAX_GPUS];
        unsigned n, w, width;
        int k;

        if ((k = mig_gpus(o, sel, &n)) != SMI_OK)
                return k;
        w = name_width(sel, n);
        width = w + 63;
        rule('+', '-', width);
        row(width, "| GPU instance profiles:");
        row(width, "| GPU   Name%*sID    Instances   Memory     P2P    SM    DEC   ENC  ", (int) (w - 3), "");
        row(width, "|%*sFree/Total   GiB              CE    JPEG  OFA  ", (int) (w + 14), "");
        rule('|', '=', width);
        for (unsigned i = 0; i < n; i++) {
                struct gi_profile p[SMI_MAX_PROFILES];
                unsigned np;

                if ((k = gi_profiles(sel[i], p, &np)) != SMI_OK)
                        return k;
                for (unsigned j = 0; j < np; j++) {
                        const nvmlGpuInstanceProfileInfo_v2_t *info = &p[j].info;
                        unsigned free_count = 0;
                        char mem[32];
                        nvmlReturn_t r;

                        r = nvmlDeviceGetGpuInstanceRemainingCapacity(sel[i]->dev, info->id, &free_count);
                        if (r != NVML_SUCCESS) {
                                printf("Failed to display GPU instance profiles: %s\n", nvml_message(r));
                                return smi_code(r);
                        }
                        snprintf(mem, sizeof(mem), "%.2f", (double) info->memorySizeMB / 1024.0);
                        printf("|%4u  %-*s%4u%6u/%-9u%-11s%-7s%-6u%2u%6u   |\n", sel[i]->index, (int) w, p[j].display,
                               info->id, free_count, info->instanceCount, mem, info->isP2pSupported ? "Yes" : "No",
                               info->multiprocessorCount, info->decoderCount, info->encoderCount);
                        printf("|%*s%2u%6u%6u   |\n", (int) (w + 44), "", info->copyEngineCount, info->jpegCount,
                               info->ofaCount);
                        rule('+', '-', width);
                }
        }
        return SMI_OK;
}

static int cmd_lgipp(const struct options *o) {
        struct gpu *sel[SMI_MAX_GPUS];
        unsigned n;
        int k;

        if ((k = mig_gpus(o, sel, &n)) != SMI_OK)
                return k;
        for (unsigned i = 0; i < n; i++) {
                struct gi_profile p[SMI_MAX_PROFILES];
                unsigned np;

                if ((k = gi_profiles(sel[i], p, &np)) != SMI_OK)
                        return k;
                for (unsigned j = 0; j < np; j++) {
                        nvmlGpuInstancePlacement_t pl[SMI_MAX_PLACEMENTS];
                        unsigned count = 0;
                        nvmlReturn_t r;

                        r = nvmlDeviceGetGpuInstancePossiblePlacements_v2(sel[i]->dev, p[j].info.id, NULL, &count);
                        if (r == NVML_SUCCESS && count > SMI_MAX_PLACEMENTS)
                                r = NVML_ERROR_INSUFFICIENT_SIZE;
                        if (r == NVML_SUCCESS && count > 0)
                                r = nvmlDeviceGetGpuInstancePossiblePlacements_v2(sel[i]->dev, p[j].info.id, pl,
                                                                                  &count);
                        if (r != NVML_SUCCESS) {
                                printf("Failed to display GPU instance possible placements: %s\n", nvml_message(r));
                                return smi_code(r);
                        }
                        if (count == 0)
                                continue;
                        printf("GPU %2u Profile ID %2u %s: {", sel[i]->index, p[j].info.id,
                               count == 1 ? "Placement " : "Placements");
                        for (unsigned c = 0; c < count; c++)
                                printf("%s%u", c ? "," : "", pl[c].start);
                        printf("}:%u\n", pl[0].size);
                }
        }
        return SMI_OK;
}

struct gi_row {
        unsigned gpu;
        nvmlGpuInstance_t handle;
        nvmlGpuInstanceInfo_t info;
        const char *name;
};

/* Every GI of the selected GPUs, in profile order. `names` keeps the
 * profile tables the rows point into. */
static int collect_gis(struct gpu **sel, unsigned n, struct gi_profile (*names)[SMI_MAX_PROFILES], struct gi_row *rows,
                       unsigned max_rows, unsigned *ret_n) {
        unsigned nr = 0;
        int k;

        for (unsigned i = 0; i < n; i++) {
                unsigned np;

                if ((k = gi_profiles(sel[i], names[i], &np)) != SMI_OK)
                        return k;
                for (unsigned j = 0; j < np; j++) {
                        nvmlGpuInstance_t h[SMI_MAX_INSTANCES];
                        unsigned count = SMI_MAX_INSTANCES;
                        nvmlReturn_t r;

                        r = nvmlDeviceGetGpuInstances(sel[i]->dev, names[i][j].info.id, h, &count);
                        if (r != NVML_SUCCESS) {
                                printf("Failed to display GPU instances: %s\n", nvml_message(r));
                                return smi_code(r);
                        }
                        for (unsigned c = 0; c < count && c < SMI_MAX_INSTANCES && nr < max_rows; c++) {
                                struct gi_row *gr = &rows[nr];

                                memset(gr, 0, sizeof(*gr));
                                gr->gpu = sel[i]->index;
                                gr->handle = h[c];
                                gr->name = names[i][j].display;
                                r = nvmlGpuInstanceGetInfo(h[c], &gr->info);
                                if (r != NVML_SUCCESS) {
                                        printf("Failed to display GPU instances: %s\n", nvml_message(r));
                                        return smi_code(r);
                                }
                                nr++;
                        }
                }
        }
        *ret_n = nr;
        return SMI_OK;
}

static int cmd_lgi(const struct options *o) {
        static struct gi_profile names[SMI_MAX_GPUS][SMI_MAX_PROFILES];
        static struct gi_row rows[SMI_MAX_GPUS * SMI_MAX_INSTANCES];
        struct gpu *sel[SMI_MAX_GPUS];
        unsigned n, nr, w, width;
        int k;

        if ((k = mig_gpus(o, sel, &n)) != SMI_OK)
                return k;
        if ((k = collect_gis(sel, n, names, rows, ELEMENTSOF(rows), &nr)) != SMI_OK)
                return k;
        if (nr == 0) {
                puts("No GPU instances found: Not Found");
                return SMI_ENOTFOUND;
        }
        w = name_width(sel, n);
        width = w + 41;
        rule('+', '-', width);
        row(width, "| GPU instances:");
        row(width, "| GPU   Name%*sProfile  Instance   Placement  ", (int) (w - 3), "");
        row(width, "|%*sID       ID       Start:Size ", (int) (w + 10), "");
        rule('|', '=', width);
        for (unsigned i = 0; i < nr; i++) {
                printf("|%4u  %-*s%6u%9u%11u:%-6u|\n", rows[i].gpu, (int) w, rows[i].name, rows[i].info.profileId,
                       rows[i].info.id, rows[i].info.placement.start, rows[i].info.placement.size);
                rule('+', '-', width);
        }
        return SMI_OK;
}

struct ci_row {
        unsigned gpu, gi;
        nvmlComputeInstanceInfo_t info;
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE + 8];
};

static int cmd_lci(const struct options *o) {
        static struct gi_profile names[SMI_MAX_GPUS][SMI_MAX_PROFILES];
        static struct gi_row gis[SMI_MAX_GPUS * SMI_MAX_INSTANCES];
        static struct ci_row rows[SMI_MAX_GPUS * SMI_MAX_INSTANCES];
        struct gpu *sel[SMI_MAX_GPUS];
        unsigned n, ngi, nr = 0, w = SMI_NAME_MIN_WIDTH, width, gi_filter = UINT_MAX;
        int k;

        if (o->gi && parse_uint(o->gi, &gi_filter) < 0)
                return invalid_arguments();
        if ((k = mig_gpus(o, sel, &n)) != SMI_OK)
                return k;
        if ((k = collect_gis(sel, n, names, gis, ELEMENTSOF(gis), &ngi)) != SMI_OK)
                return k;
        for (unsigned i = 0; i < ngi; i++) {
                if (gi_filter != UINT_MAX && gis[i].info.id != gi_filter)
                        continue;
                for (unsigned e = 0; e < SMI_MAX_CI_PROFILES; e++) {
                        nvmlComputeInstanceProfileInfo_v2_t cp;
                        nvmlComputeInstance_t h[SMI_MAX_INSTANCES];
                        unsigned count = SMI_MAX_INSTANCES;
                        nvmlReturn_t r;

                        memset(&cp, 0, sizeof(cp));
                        cp.version = nvmlComputeInstanceProfileInfo_v2;
                        r = nvmlGpuInstanceGetComputeInstanceProfileInfoV(
                                gis[i].handle, e, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &cp);
                        if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_INVALID_ARGUMENT)
                                continue;
                        if (r == NVML_SUCCESS)
                                r = nvmlGpuInstanceGetComputeInstances(gis[i].handle, cp.id, h, &count);
                        if (r != NVML_SUCCESS) {
                                printf("Failed to display compute instances: %s\n", nvml_message(r));
                                return smi_code(r);
                        }
                        cp.name[sizeof(cp.name) - 1] = '\0';
                        for (unsigned c = 0; c < count && c < SMI_MAX_INSTANCES && nr < ELEMENTSOF(rows); c++) {
                                struct ci_row *cr = &rows[nr];

                                memset(cr, 0, sizeof(*cr));
                                cr->gpu = gis[i].gpu;
                                cr->gi = gis[i].info.id;
                                display_name(cp.name, cr->name, sizeof(cr->name));
                                r = nvmlComputeInstanceGetInfo_v2(h[c], &cr->info);
                                if (r != NVML_SUCCESS) {
                                        printf("Failed to display compute instances: %s\n", nvml_message(r));
                                        return smi_code(r);
                                }
                                w = MAX(w, (unsigned) strlen(cr->name));
                                nr++;
                        }
                }
        }
        if (nr == 0) {
                puts("No compute instances found: Not Found");
                return SMI_ENOTFOUND;
        }
        width = w + 54;
        rule('+', '-', width);
        row(width, "| Compute instances:");
        row(width, "| GPU     GPU       Name%*sProfile   Instance   Placement  ", (int) (w - 3), "");
        row(width, "|       Instance%*sID        ID       Start:Size ", (int) (w + 7), "");
        row(width, "|         ID");
        rule('|', '=', width);
        for (unsigned i = 0; i < nr; i++) {
                printf("|%4u%7u       %-*s%6u%10u%11u:%-6u|\n", rows[i].gpu, rows[i].gi, (int) w, rows[i].name,
                       rows[i].info.profileId, rows[i].info.id, rows[i].info.placement.start,
                       rows[i].info.placement.size);
                rule('+', '-', width);
        }
        return SMI_OK;
}

/* ---- -L ------------------------------------------------------------------ */

/* The MIG profile part of a MIG device: NVML names MIG devices
 * "<GPU name> MIG <profile>" (e.g. "NVIDIA A100-SXM4-40GB MIG 1g.5gb"). */
static void mig_profile_name(nvmlDevice_t mig, char *buf, size_t size) {
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "";
        const char *p = NULL;

        if (nvmlDeviceGetName(mig, name, sizeof(name)) == NVML_SUCCESS)
                for (const char *s = strstr(name, "MIG "); s; s = strstr(s + 1, "MIG "))
                        if (s == name || s[-1] == ' ')
                                p = s + 4;
        snprintf(buf, size, "%s", p && *p ? p : "N/A");
}

static int cmd_list(const struct options *o) {
        struct gpu *sel[SMI_MAX_GPUS];
        unsigned n;
        int k;

        if ((k = select_gpus(o->ids, sel, &n)) != SMI_OK)
                return k;
        for (unsigned i = 0; i < n; i++) {
                const struct gpu *g = sel[i];
                unsigned max = 0, shown = 0;

                printf("GPU %u: %s (UUID: %s)\n", g->index, g->name, g->uuid);
                if (!g->mig_enabled || nvmlDeviceGetMaxMigDeviceCount(g->dev, &max) != NVML_SUCCESS)
                        continue;
                for (unsigned j = 0; j < max; j++) {
                        nvmlDevice_t mig;
                        char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE], profile[NVML_DEVICE_NAME_V2_BUFFER_SIZE];

                        if (nvmlDeviceGetMigDeviceHandleByIndex(g->dev, j, &mig) != NVML_SUCCESS)
                                continue; /* empty slot */
                        if (nvmlDeviceGetUUID(mig, uuid, sizeof(uuid)) != NVML_SUCCESS)
                                continue;
                        mig_profile_name(mig, profile, sizeof(profile));
                        printf("  MIG %-11s Device %2u: (UUID: %s)\n", profile, shown++, uuid);
                }
        }
        return SMI_OK;
}

/* ---- -r ------------------------------------------------------------------ */

static int cmd_reset(const struct options *o) {
        struct gpu *sel[SMI_MAX_GPUS];
        struct {
                const struct gpu *g;
                int r;
        } failed[SMI_MAX_GPUS];
        unsigned n, n_failed = 0, n_busy = 0;
        int k;

        if ((k = select_gpus(o->ids, sel, &n)) != SMI_OK)
                return k;
        /* The GPUs reset together: one operation's time for all of them. */
        if (mksim_op_wait() < 0) {
                printf("%s\n", mksim_last_error());
                return SMI_EOTHER;
        }
        for (unsigned i = 0; i < n; i++) {
                int r = mksim_reset_gpu(sel[i]->index);

                if (r >= 0) {
                        printf("GPU %s was successfully reset.\n", sel[i]->bus_id);
                        continue;
                }
                failed[n_failed].g = sel[i];
                failed[n_failed++].r = r;
                if (r == -EBUSY)
                        n_busy++;
        }
        /* No "All done." after a reset: the real tool prints it after -pm and
         * -mig, not after -r (NVSentinel#1690: `nvidia-smi -r -i <uuid>` prints
         * only "GPU 00000000:1A:00.0 was successfully reset.", exit 0). */
        if (n_failed == 0)
                return SMI_OK;
        /* Driver 535+ wording (NVSentinel#1690, magic_castle#387). */
        puts("The following GPUs could not be reset:");
        for (unsigned i = 0; i < n_failed; i++)
                printf("  GPU %s: %s\n", failed[i].g->bus_id,
                       failed[i].r == -EBUSY    ? "In use by another client"
                       : failed[i].r == -ENODEV ? "Not Found"
                                                : "Unknown Error");
        if (n_busy > 0)
                printf("\n%u device%s currently being used by one or more other processes (e.g., Fabric Manager, "
                       "CUDA application, graphics application such as an X server, or a monitoring application such "
                       "as another instance of nvidia-smi). Please first kill all processes using %s device%s and all "
                       "compute applications running in the system.\n",
                       n_busy, n_busy == 1 ? " is" : "s are", n_busy == 1 ? "this" : "these", n_busy == 1 ? "" : "s");
        return SMI_EOTHER;
}

/* ---- -mig ---------------------------------------------------------------- */

static int cmd_set_mig(const struct options *o) {
        struct gpu *sel[SMI_MAX_GPUS];
        const char *state = o->mig_mode ? "enable" : "disable";
        unsigned n;
        int k, ret = SMI_OK;

        if ((k = select_gpus(o->ids, sel, &n)) != SMI_OK)
                return k;
        for (unsigned i = 0; i < n; i++) {
                nvmlReturn_t activation = NVML_SUCCESS, r;
                unsigned cur = 0, pend = 0;

                r = nvmlDeviceSetMigMode(sel[i]->dev, o->mig_mode, &activation);
                if (r != NVML_SUCCESS) {
                        printf("Unable to %s MIG Mode for GPU %s: %s\n", state, sel[i]->bus_id, nvml_message(r));
                        ret = smi_code(r);
                        continue;
                }
                r = nvmlDeviceGetMigMode(sel[i]->dev, &cur, &pend);
                if (r == NVML_SUCCESS && activation == NVML_SUCCESS && cur == o->mig_mode) {
                        printf("%s MIG Mode for GPU %s\n", o->mig_mode ? "Enabled" : "Disabled", sel[i]->bus_id);
                        continue;
                }
                printf("Warning: MIG mode is in pending %s state for GPU %s:%s\n", state, sel[i]->bus_id,
                       nvml_message(activation));
                if (activation == NVML_ERROR_IN_USE)
                        printf("%s is currently being used by one or more other processes (e.g. CUDA application or a "
                               "monitoring application such as another instance of nvidia-smi). Please first kill all "
                               "processes using the device and retry the command or reboot the system to make MIG "
                               "mode effective.\n",
                               sel[i]->bus_id);
                else
                        printf("Reboot the system or try nvidia-smi --gpu-reset to make MIG mode effective on GPU %s\n",
                               sel[i]->bus_id);
        }
        puts("All done.");
        return ret;
}

/* ---- arguments ----------------------------------------------------------- */

static void help(void) {
        puts("NVIDIA System Management Interface -- simulated (migkit NVML simulator).\n"
             "\n"
             "nvidia-smi [OPTION1 [ARG1]] [OPTION2 [ARG2]] ...\n"
             "\n"
             "    -h,   --help                Print usage information and exit.\n"
             "    -L,   --list-gpus           Display a list of GPUs connected to the system.\n"
             "    -i,   --id=                 Target a specific GPU (index, UUID or PCI bus id;\n"
             "                                comma separated for several).\n"
             "    -r    --gpu-reset           Trigger reset of the GPU(s).\n"
             "    -mig  --multi-instance-gpu= Enable or disable Multi Instance GPU: 0/DISABLED, 1/ENABLED.\n"
             "    mig                         MIG management:\n"
             "        -lgip  --list-gpu-instance-profiles\n"
             "        -lgipp --list-gpu-instance-possible-placements\n"
             "        -lgi   --list-gpu-instances\n"
             "        -lci   --list-compute-instances [-gi ID]\n"
             "\n"
             "Only the commands above are simulated.");
}

/* Matches `arg` against a short and a long option; the long form also
 * accepts "--long=value". The value, if any, comes back in *value (NULL:
 * take the next argument). */
static bool option(const char *arg, const char *s, const char *l, const char **value) {
        size_t n;

        *value = NULL;
        if (s && strcmp(arg, s) == 0)
                return true;
        if (!l)
                return false;
        n = strlen(l);
        if (strncmp(arg, l, n) != 0)
                return false;
        if (arg[n] == '\0')
                return true;
        if (arg[n] == '=') {
                *value = arg + n + 1;
                return true;
        }
        return false;
}

static int parse_mig_mode(const char *s, unsigned *ret) {
        if (strcmp(s, "1") == 0 || strcasecmp(s, "ENABLED") == 0)
                *ret = 1;
        else if (strcmp(s, "0") == 0 || strcasecmp(s, "DISABLED") == 0)
                *ret = 0;
        else
                return -EINVAL;
        return 0;
}

static int parse_args(int argc, char **argv, struct options *o) {
        for (int i = 1; i < argc; i++) {
                const char *a = argv[i], *v;

#define VALUE()                                                 \
        do {                                                    \
                if (!v) {                                       \
                        if (i + 1 >= argc)                      \
                                return invalid_arguments();     \
                        v = argv[++i];                          \
                }                                               \
        } while (0)

                if (i == 1 && strcmp(a, "mig") == 0) {
                        o->mig = true;
                        continue;
                }
                if (option(a, "-h", "--help", &v))
                        o->help = true;
                else if (option(a, "-i", "--id", &v)) {
                        VALUE();
                        o->ids = v;
                } else if (!o->mig && option(a, "-L", "--list-gpus", &v))
                        o->list = true;
                else if (!o->mig && option(a, "-r", "--gpu-reset", &v))
                        o->reset = true;
                else if (!o->mig && option(a, "-mig", "--multi-instance-gpu", &v)) {
                        VALUE();
                        if (parse_mig_mode(v, &o->mig_mode) < 0)
                                return invalid_arguments();
                        o->set_mig = true;
                } else if (o->mig && option(a, "-lgip", "--list-gpu-instance-profiles", &v))
                        o->lgip = true;
                else if (o->mig && option(a, "-lgipp", "--list-gpu-instance-possible-placements", &v))
                        o->lgipp = true;
                else if (o->mig && option(a, "-lgi", "--list-gpu-instances", &v))
                        o->lgi = true;
                else if (o->mig && option(a, "-lci", "--list-compute-instances", &v))
                        o->lci = true;
                else if (o->mig && option(a, "-gi", "--gpu-instance-id", &v)) {
                        VALUE();
                        o->gi = v;
                } else
                        return unknown_option(a);
#undef VALUE
        }
        return SMI_OK;
}

static int run(const struct options *o) {
        unsigned actions = (unsigned) o->list + o->reset + o->set_mig + o->lgip + o->lgipp + o->lgi + o->lci;
        nvmlReturn_t r;
        int k;

        if (actions != 1 || (o->gi && !o->lci))
                return invalid_arguments();
        r = nvmlInit_v2();
        if (r != NVML_SUCCESS) {
                puts("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that "
                     "the latest NVIDIA driver is installed and running.");
                return SMI_ENODRIVER;
        }
        k = load_gpus();
        if (k == SMI_OK) {
                if (o->list)
                        k = cmd_list(o);
                else if (o->reset)
                        k = cmd_reset(o);
                else if (o->set_mig)
                        k = cmd_set_mig(o);
                else if (o->lgip)
                        k = cmd_lgip(o);
                else if (o->lgipp)
                        k = cmd_lgipp(o);
                else if (o->lgi)
                        k = cmd_lgi(o);
                else
                        k = cmd_lci(o);
        }
        (void) nvmlShutdown();
        return k;
}

int main(int argc, char **argv) {
        struct options o = {};
        int k;

        k = parse_args(argc, argv, &o);
        if (k != SMI_OK)
                return k;
        if (o.help) {
                help();
                return SMI_OK;
        }
        if (argc == 1) {
                /* The summary table is not simulated. */
                puts("nvidia-smi (simulated): the default summary is not available; run 'nvidia-smi -h'.");
                return SMI_ENOTSUP;
        }
        k = run(&o);
        fflush(stdout);
        return k;
}
