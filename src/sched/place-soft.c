/* The unified pool's placement: soft slices and the mode choice (place-soft.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "claim/claim.h"
#include "sched/inventory.h"
#include "sched/nodecache.h"
#include "sched/place-soft.h"
#include "sched/request.h"

/* Whether GPU `ig`'s published soft slices hold pod `uid`'s container. */
static bool soft_published(const struct mk_inv_gpu *ig, const char *uid, unsigned container) {
        for (size_t i = 0; i < ig->n_soft; i++)
                if (ig->soft[i].container == container && streq(ig->soft[i].uid, uid))
                        return true;
        return false;
}

static int add_slice(struct mk_sched_scratch *sc, size_t k, uint64_t memory_mib, unsigned cores) {
        struct mk_fit_shared_gpu *g = &sc->soft_gpus[k];
        if (g->n_used >= MK_FIT_SOFT_MAX_SLICES)
                return -E2BIG;
        sc->soft_used[k][g->n_used++] = (struct mk_fit_soft_slice) {.memory_mib = memory_mib, .cores = cores};
        return 0;
}

/* The node's shared GPUs, and its idle MIG GPUs that may turn shared
 * (switchable), with every soft slice held or reserved there but this
 * pod's own; a shared GPU with MIG on (unless a switch turns it shared),
 * or of an unwanted type, is unavailable (mk_sched_gpu_mode). */
static int fill_soft(struct mk_sched_scratch *sc, const struct mk_sched_place *p, size_t *ret_n) {
        const struct mk_inventory *inv = p->inv;
        const struct mk_sched_node *n = p->node;
        bool own = !n || n->inv != inv;
        size_t k = 0;
        int r = 0;
        for (size_t g = 0; g < inv->n_gpus && g < MK_FIT_MAX_NODE_GPUS && r >= 0; g++) {
                const struct mk_inv_gpu *ig = &inv->gpus[g];
                if (ig->mode != MK_CLAIM_SOFT && !ig->switchable)
                        continue;
                bool sw;
                enum mk_claim_mode mode = mk_sched_gpu_mode(ig, n ? n->claims : NULL, own ? 0 : n->n_claims, p->uid,
                                                            p->now, &sw);
                sc->soft_inv[k] = (unsigned) g;
                sc->soft_gpus[k] = (struct mk_fit_shared_gpu) {
                        .memory_mib = ig->memory_mib,
                        .split = ig->split,
                        .used = sc->soft_used[k],
                        .unavailable = !(sw || (mode == MK_CLAIM_SOFT && (!ig->mig_enabled || ig->switchable))) ||
                                       !mk_pod_request_gpu_type_ok(p->req, ig->model),
                        .switchable = sw && ig->mode != MK_CLAIM_SOFT,
                };
                for (size_t i = 0; i < ig->n_soft && r >= 0; i++)
                        if (!p->uid || !streq(ig->soft[i].uid, p->uid))
                                r = add_slice(sc, k, ig->soft[i].memory_mib, ig->soft[i].cores);
                for (size_t c = 0; !own && c < n->n_claims && r >= 0; c++) {
                        const struct mk_sched_pod *pod = n->claims[c];
                        if (!pod->claim.active || (p->uid && streq(pod->claim.uid, p->uid)) ||
                            mk_sched_pod_expired(pod, p->now))
                                continue;
                        for (size_t d = 0; d < pod->claim.n_devices && r >= 0; d++) {
                                const struct mk_claim_device *cd = &pod->claim.devices[d];
                                if (cd->mode == MK_CLAIM_SOFT && streq(cd->gpu, ig->uuid) &&
                                    !soft_published(ig, pod->claim.uid, cd->container))
                                        r = add_slice(sc, k, cd->memory_mib, cd->cores);
                        }
                }
                k++;
        }
        *ret_n = k;
        return r;
}

/* Takes container `container`'s soft fit: its slices into the view and,
 * with `claim`, its devices. */
static void take_soft(struct mk_sched_scratch *sc, const struct mk_inventory *inv,
                      const struct mk_fit_soft_result *res, unsigned container, struct mk_claim *claim,
                      size_t *n_dev) {
        for (size_t i = 0; i < res->n_choices; i++) {
                const struct mk_fit_soft_choice *ch = &res->choices[i];
                (void) add_slice(sc, ch->gpu, ch->memory_mib, ch->cores);
                if (claim && *n_dev < MK_MAX_CLAIM_DEVICES) {
                        struct mk_claim_device *d = &claim->devices[*n_dev];
                        *d = (struct mk_claim_device) {
                                .container = container,
                                .mode = MK_CLAIM_SOFT,
                                .memory_mib = ch->memory_mib,
                                .cores = ch->cores,
                        };
                        snprintf(d->gpu, sizeof(d->gpu), "%s", inv->gpus[sc->soft_inv[ch->gpu]].uuid);
                }
                (*n_dev)++;
        }
}

int mk_sched_place_pool(struct mk_sched_scratch **scp, const struct mk_sched_place *p, double *ret_score,
                        char *reason, size_t size) {
        const struct mk_inventory *inv = p->inv;
        const struct mk_pod_request *req = p->req;
        if (!*scp && !(*scp = malloc(sizeof(**scp)))) {
                snprintf(reason, size, "out of memory");
                return -ENOMEM;
        }
        struct mk_sched_scratch *sc = *scp;
        size_t n_soft = 0;
        bool any_mig = false;
        for (size_t g = 0; g < inv->n_gpus; g++)
                any_mig |= inv->gpus[g].mode == MK_CLAIM_MIG || inv->gpus[g].switchable;
        int r = 0;
        if (req->allow_soft && (r = fill_soft(sc, p, &n_soft)) < 0) {
                snprintf(reason, size, "a shared GPU has more than %u soft slices", MK_FIT_SOFT_MAX_SLICES);
                return r;
        }
        if (req->allow_mig && any_mig && (r = mk_sched_fill_mig(sc, p, reason, size)) < 0)
                return r;
        enum mk_fit_policy np = req->fit_node_policy, gp = req->fit_gpu_policy;
        const struct mk_sched_node *n = p->node;
        const struct mk_fit_node_resources *node_res = n && n->res.cpu_allocatable_milli ? &n->res : NULL;
        struct mk_fit_node mig = {.gpus = sc->gpus, .n_gpus = inv->n_gpus, .resources = node_res};
        struct mk_fit_soft_node soft = {.gpus = sc->soft_gpus, .n_gpus = n_soft, .resources = node_res};
        const struct mk_fit_node *migp = req->allow_mig && any_mig ? &mig : NULL;
        const struct mk_fit_soft_node *softp = req->allow_soft && n_soft > 0 ? &soft : NULL;
        /* Both allowed: the first container chooses; else the one allowed. */
        bool choose = req->allow_mig && req->allow_soft;
        enum mk_fit_mode mode = req->allow_mig ? MK_FIT_MODE_MIG : MK_FIT_MODE_SOFT;
        struct mk_fit_mode_result mr;
        double score = 0;
        bool scored = false; /* by the mode choice: its tiers rank nodes for this pod */
        size_t n_dev = 0;
        for (size_t k = 0; k < req->n_containers; k++) {
                const struct mk_pod_request_container *rc = &req->containers[k];
                struct mk_fit_request fr = mk_sched_fit_request(req, rc);
                struct mk_error e = {0};
                if (choose) {
                        r = mk_fit_choose_mode(migp, softp, &fr, np, gp, &mr, &e);
                        mode = mr.mode;
                        score = mr.score;
                        choose = false;
                        scored = r >= 0;
                } else if (mode == MK_FIT_MODE_MIG)
                        r = migp ? mk_fit_node(migp, &fr, np, gp, &mr.mig, &e)
                                 : mk_error_set(&e, -ENOSPC, "MIG: no MIG GPU on this node");
                else
                        r = softp ? mk_fit_soft_node(softp, &fr, np, gp, &mr.soft, &e)
                                  : mk_error_set(&e, -ENOSPC, "hami-core: no shared GPU on this node");
                if (r < 0) {
                        mk_sched_fit_reason(req, rc->index, &e, reason, size);
                        return r;
                }
                if (mode == MK_FIT_MODE_MIG) {
                        score = scored ? score : mr.mig.score;
                        mk_sched_take_mig(sc, inv, &mr.mig, rc->index, p->claim, &n_dev);
                } else {
                        score = scored ? score : mr.soft.score;
                        take_soft(sc, inv, &mr.soft, rc->index, p->claim, &n_dev);
                }
        }
        if (p->claim) {
                p->claim->n_devices = MIN(n_dev, (size_t) MK_MAX_CLAIM_DEVICES);
                p->claim->mode_why = scored ? mr.why : NULL;
        }
        *ret_score = score;
        return 0;
}
