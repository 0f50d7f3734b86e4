#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/dynbuf.h"
#include "base/parse.h"
#include "base/macro.h"
#include "cli/cli.h"
#include "cli/options.h"

static void help(void) {
        printf("Usage: migkit profiles [-o table|json|yaml] [-i INDEX[,INDEX...]]\n"
               "\n"
               "List, per GPU, the GPU instance profiles the GPU reports (driver profile id,\n"
               "compute slices, memory, SMs, maximum count, placements as {starts}:size in\n"
               "memory units) and the compute instance profiles of each. Identical GPUs are\n"
               "grouped in the table.\n");
}

/* "{0,1,2,3,4,5,6}:1" as nvidia-smi writes placements; sizes differ only on
 * unusual hardware, then each placement is written start:size. */
static void format_placements(const struct mk_gi_profile *p, char *buf, size_t size) {
        size_t k = 0;
        buf[0] = 0;
        if (p->n_placements == 0) {
                snprintf(buf, size, "-");
                return;
        }
        bool same = true;
        for (size_t i = 1; i < p->n_placements; i++)
                same = same && p->placements[i].size == p->placements[0].size;
        for (size_t i = 0; i < p->n_placements && k < size; i++) {
                int n;
                if (same)
                        n = snprintf(buf + k, size - k, "%s%u", i ? "," : "{", p->placements[i].start);
                else
                        n = snprintf(buf + k, size - k, "%s%u:%u", i ? "," : "", p->placements[i].start,
                                     p->placements[i].size);
                if (n < 0)
                        return;
                k += (size_t) n;
        }
        if (same && k < size)
                snprintf(buf + k, size - k, "}:%u", p->placements[0].size);
}

static int render_gpu_table(const struct mk_gpu *g, struct mk_buf *b) {
        int r = 0;
        if (!g->mig_capable)
                return mk_buf_printf(b, "  not MIG-capable\n");
        if (g->n_profiles == 0)
                return mk_buf_printf(b, "  no GPU instance profiles reported (an older driver may list them only "
                                        "with MIG enabled)\n");
        r = mk_buf_printf(b, "  %-16s %4s %6s %10s %5s %4s  %-18s %s\n", "PROFILE", "ID", "SLICES", "MEMORY", "SMS",
                          "MAX", "PLACEMENTS", "COMPUTE INSTANCE PROFILES");
        for (size_t i = 0; i < g->n_profiles && r >= 0; i++) {
                const struct mk_gi_profile *p = &g->profiles[i];
                char pl[128], mem[32], cis[512] = "";
                format_placements(p, pl, sizeof(pl));
                snprintf(mem, sizeof(mem), "%" PRIu64 " MiB", p->memory_mib);
                size_t k = 0;
                for (size_t j = 0; j < p->n_ci_profiles; j++) {
                        int n = snprintf(cis + k, sizeof(cis) - k, "%s%s", j ? ", " : "", p->ci_profiles[j].name);
                        if (n < 0 || (size_t) n >= sizeof(cis) - k)
                                break;
                        k += (size_t) n;
                }
                r = mk_buf_printf(b, "  %-16s %4u %6u %10s %5u %4u  %-18s %s\n", p->name, p->id, p->slices, mem,
                                  p->multiprocessors, p->max_count, pl, cis);
        }
        return r;
}

static int print_table(const struct mk_snapshot *s) {
        struct mk_buf *tables = calloc(s->n_gpus ? s->n_gpus : 1, sizeof(*tables));
        if (!tables)
                return -ENOMEM;
        int r = 0;
        for (size_t i = 0; i < s->n_gpus && r >= 0; i++) {
                mk_buf_init(&tables[i], 1 << 20);
                r = render_gpu_table(&s->gpus[i], &tables[i]);
        }
        printf("Driver %s, NVML %s, %zu GPU%s\n", s->driver_version, s->nvml_version, s->n_gpus,
               s->n_gpus == 1 ? "" : "s");
        /* Group runs of GPUs with the same name, mode and profile table. */
        for (size_t i = 0; i < s->n_gpus && r >= 0;) {
                const struct mk_gpu *g = &s->gpus[i];
                size_t j = i + 1;
                while (j < s->n_gpus && streq(s->gpus[j].name, g->name) &&
                       s->gpus[j].mig_current == g->mig_current && s->gpus[j].mig_pending == g->mig_pending &&
                       streq(mk_buf_str(&tables[j]), mk_buf_str(&tables[i])))
                        j++;
                char mode[64];
                if (!g->mig_capable)
                        snprintf(mode, sizeof(mode), "MIG unsupported");
                else if (g->mig_current == g->mig_pending)
                        snprintf(mode, sizeof(mode), "MIG %s", cli_mig_mode_str(g->mig_current));
                else
                        snprintf(mode, sizeof(mode), "MIG %s, pending %s", cli_mig_mode_str(g->mig_current),
                                 cli_mig_mode_str(g->mig_pending));
                printf("\n");
                if (j - i == 1)
                        printf("GPU %u: %s (UUID: %s, bus %s, %s)\n", g->index, g->name, g->uuid, g->bus_id, mode);
                else
                        printf("GPUs %u-%u: %s (%zu GPUs, %s)\n", g->index, s->gpus[j - 1].index, g->name, j - i,
                               mode);
                fputs(mk_buf_str(&tables[i]), stdout);
                i = j;
        }
        for (size_t i = 0; i < s->n_gpus; i++)
                mk_buf_done(&tables[i]);
        free(tables);
        return r;
}

static json_t *placements_json(const struct mk_placement *pl, size_t n) {
        json_t *a = json_array();
        for (size_t i = 0; i < n; i++)
                json_array_append_new(a, json_pack("{s:I,s:I}", "start", (json_int_t) pl[i].start, "size",
                                                   (json_int_t) pl[i].size));
        return a;
}

static json_t *gpu_json(const struct mk_gpu *g) {
        char devid[16], subid[16];
        snprintf(devid, sizeof(devid), "0x%08" PRIX32, g->pci_device_id);
        snprintf(subid, sizeof(subid), "0x%08" PRIX32, g->pci_subsystem_id);
        json_t *o = json_pack("{s:I,s:s,s:s,s:s,s:s,s:s,s:I,s:b,s:{s:s,s:s},s:I}", "index", (json_int_t) g->index,
                              "uuid", g->uuid, "name", g->name, "pci_bus_id", g->bus_id, "pci_device_id", devid,
                              "pci_subsystem_id", subid, "memory_mib", (json_int_t) (g->memory_total_bytes >> 20),
                              "mig_capable", g->mig_capable, "mig_mode", "current", cli_mig_mode_str(g->mig_current),
                              "pending", cli_mig_mode_str(g->mig_pending), "memory_units",
                              (json_int_t) g->memory_units);
        if (!o)
                return NULL;
        json_t *profiles = json_array();
        for (size_t i = 0; i < g->n_profiles; i++) {
                const struct mk_gi_profile *p = &g->profiles[i];
                json_t *cis = json_array();
                for (size_t j = 0; j < p->n_ci_profiles; j++) {
                        const struct mk_ci_profile *c = &p->ci_profiles[j];
                        json_t *co = json_pack("{s:s,s:I,s:I,s:s}", "name", c->name, "nvml_enum",
                                               (json_int_t) c->nvml_enum, "slices", (json_int_t) c->slices, "source",
                                               c->queried ? "nvml" : "derived");
                        if (c->queried) {
                                json_object_set_new(co, "id", json_integer(c->id));
                                json_object_set_new(co, "max_count", json_integer(c->max_count));
                                json_object_set_new(co, "multiprocessors", json_integer(c->multiprocessors));
                                json_object_set_new(co, "placements", placements_json(c->placements, c->n_placements));
                        }
                        json_array_append_new(cis, co);
                }
                json_t *po = json_pack("{s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:{s:I,s:I,s:I,s:I,s:I},s:o,s:o}", "name",
                                       p->name, "id", (json_int_t) p->id, "nvml_enum", (json_int_t) p->nvml_enum,
                                       "slices", (json_int_t) p->slices, "memory_mib", (json_int_t) p->memory_mib,
                                       "max_count", (json_int_t) p->max_count, "multiprocessors",
                                       (json_int_t) p->multiprocessors, "engines", "copy",
                                       (json_int_t) p->copy_engines, "decoders", (json_int_t) p->decoders,
                                       "encoders", (json_int_t) p->encoders, "jpeg", (json_int_t) p->jpegs, "ofa",
                                       (json_int_t) p->ofas, "placements",
                                       placements_json(p->placements, p->n_placements), "compute_instance_profiles",
                                       cis);
                json_array_append_new(profiles, po);
        }
        json_object_set_new(o, "gpu_instance_profiles", profiles);
        return o;
}

int cli_profiles(int argc, char **argv) {
        const char *format = NULL, *only = NULL;
        const struct cli_option options[] = {
                {"output", 'o', required_argument, NULL, &format},
                {"output-format", 0, required_argument, NULL, &format},
                {"index", 'i', required_argument, NULL, &only},
                {},
        };
        int r = cli_options_parse(argc, argv, options, help);
        if (r != CLI_CONTINUE)
                return r;
        enum mk_output_format fmt;
        if (cli_parse_output("profiles", format, CLI_OUTPUT(MK_OUTPUT_TABLE) | CLI_OUTPUT(MK_OUTPUT_YAML) |
                             CLI_OUTPUT(MK_OUTPUT_JSON), MK_OUTPUT_TABLE, &fmt) < 0)
                return MK_EXIT_USAGE;

        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = cli_snapshot();
        if (!s)
                return MK_EXIT_FAILURE;

        if (only) {
                /* Keep only the listed indices, in snapshot order. */
                bool keep[256] = {false};
                _cleanup_free_ char *list = strdup(only);
                if (!list)
                        return MK_EXIT_FAILURE;
                char *save = NULL;
                for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                        uint32_t idx;
                        if (mk_parse_u32(t, &idx) < 0 || idx >= s->n_gpus) {
                                fprintf(stderr, "Error: no GPU with index '%s' (this node has %zu)\n", t, s->n_gpus);
                                return MK_EXIT_FAILURE;
                        }
                        keep[idx] = true;
                }
                size_t k = 0;
                for (size_t i = 0; i < s->n_gpus; i++) {
                        if (keep[i])
                                s->gpus[k++] = s->gpus[i];
                        else
                                mk_gpu_done(&s->gpus[i]);
                }
                s->n_gpus = k;
        }

        if (fmt == MK_OUTPUT_TABLE)
                return print_table(s) < 0 ? MK_EXIT_FAILURE : MK_EXIT_OK;

        json_t *root = json_pack("{s:s,s:s,s:[]}", "driver_version", s->driver_version, "nvml_version",
                                 s->nvml_version, "gpus");
        json_t *gpus = json_object_get(root, "gpus");
        for (size_t i = 0; i < s->n_gpus; i++)
                json_array_append_new(gpus, gpu_json(&s->gpus[i]));
        return cli_print_document(fmt, root, false);
}
