/* The extender's cache and decisions (extender.h). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/dynbuf.h"
#include "base/log.h"
#include "base/macro.h"
#include "plan/fit.h"
#include "sched/extender.h"
#include "sched/inventory.h"
#include "sched/json.h"
#include "spec/sched-config.h"

/* --- a small string-keyed hash table --- */

struct entry {
        struct entry *next;
        void *value;
        uint64_t hash;
        char key[];                     /* in the entry: a lookup touches one allocation */
};

struct table {
        struct entry **buckets;
        size_t n_buckets, n;
};

static uint64_t hash_str(const char *s) {
        uint64_t h = 1469598103934665603ull; /* FNV-1a */
        for (; *s; s++)
                h = (h ^ (unsigned char) *s) * 1099511628211ull;
        return h;
}

static void *table_get(const struct table *t, const char *key) {
        if (!t->n_buckets)
                return NULL;
        uint64_t h = hash_str(key);
        for (struct entry *e = t->buckets[h & (t->n_buckets - 1)]; e; e = e->next)
                if (e->hash == h && streq(e->key, key))
                        return e->value;
        return NULL;
}

static int table_grow(struct table *t) {
        size_t nb = t->n_buckets ? t->n_buckets * 2 : 64;
        struct entry **b = calloc(nb, sizeof(*b));
        if (!b)
                return -ENOMEM;
        for (size_t i = 0; i < t->n_buckets; i++)
                for (struct entry *e = t->buckets[i], *next; e; e = next) {
                        next = e->next;
                        size_t k = e->hash & (nb - 1);
                        e->next = b[k];
                        b[k] = e;
                }
        free(t->buckets);
        t->buckets = b;
        t->n_buckets = nb;
        return 0;
}

/* Inserts a new key (the caller checked it is absent). */
static int table_put(struct table *t, const char *key, void *value) {
        if (t->n + 1 > t->n_buckets && table_grow(t) < 0)
                return -ENOMEM;
        size_t len = strlen(key);
        struct entry *e = malloc(sizeof(*e) + len + 1);
        if (!e)
                return -ENOMEM;
        memcpy(e->key, key, len + 1);
        e->hash = hash_str(key);
        size_t k = e->hash & (t->n_buckets - 1);
        e->value = value;
        e->next = t->buckets[k];
        t->buckets[k] = e;
        t->n++;
        return 0;
}

/* Removes a key and returns its value (NULL when absent). */
static void *table_del(struct table *t, const char *key) {
        if (!t->n_buckets)
                return NULL;
        for (struct entry **p = &t->buckets[hash_str(key) & (t->n_buckets - 1)]; *p; p = &(*p)->next)
                if (streq((*p)->key, key)) {
                        struct entry *e = *p;
                        void *v = e->value;
                        *p = e->next;
                        free(e);
                        t->n--;
                        return v;
                }
        return NULL;
}

static void table_clear(struct table *t, void (*free_value)(void *)) {
        for (size_t i = 0; i < t->n_buckets; i++)
                for (struct entry *e = t->buckets[i], *next; e; e = next) {
                        next = e->next;
                        if (free_value)
                                free_value(e->value);
                        free(e);
                }
        free(t->buckets);
        *t = (struct table) {0};
}

/* --- the cache --- */

struct pod_entry {
        struct mk_claim claim;
        bool pending;                   /* made by our bind, not yet observed on the pod */
        int64_t pending_since;
};

#define MEMO_SLOTS 4u                   /* shapes remembered per node (round robin) */
#define MEMO_MAX_SHAPES 4096u           /* distinct shapes interned before the table starts over */

struct node_entry {
        /* Decisions already made on this state, per request shape: filter
         * and prioritize of one pod, and pods of one shape (replicas), then
         * cost a lookup. Emptied under the write lock whenever anything a
         * decision reads changes (node_forget); filled by readers, one at a
         * time (memo_busy: a reader that finds it taken just decides). First
         * in the entry and compact: a filter over 1,000s of nodes reads this
         * line of each; the reasons, larger, only for failed nodes. */
        uint64_t memo_shape[MEMO_SLOTS];        /* shape ids; 0: empty slot */
        int memo_r[MEMO_SLOTS];                 /* eval_node's answer */
        int8_t memo_priority[MEMO_SLOTS];
        bool memo_has_reason[MEMO_SLOTS];       /* a failure's reason was kept (prioritize keeps none) */
        uint8_t memo_next;
        atomic_flag memo_busy;
        bool fit_valid;
        bool inv_reserved;              /* inv lists instances in state reserved (they name their pod) */
        unsigned n_pending;             /* claims made by our bind, not yet observed */
        struct mk_inventory *inv;       /* NULL when absent or malformed */
        char (*memo_reason)[MK_ERROR_MSG_MAX];  /* MEMO_SLOTS, allocated on the first failure kept */
        char *name;
        struct mk_fit_tables **tables;  /* per GPU of inv (entries may be NULL): the fit's accelerator */
        uint16_t *reps;                 /* per GPU of inv: gpu_rep(), computed once (NULL: per call) */
        char reason[MK_ERROR_MSG_MAX];  /* why inv is NULL */
        struct pod_entry **claims;      /* reservations on this node (borrowed from the pod table) */
        size_t n_claims, alloc_claims;
        /* The fit's view of the node with every active reservation, kept
         * current under the write lock so that most filters fit straight on
         * it (node_refit, fast_path). */
        struct mk_fit_gpu *fit_gpus;
        struct mk_fit_instance *fit_used;       /* n_gpus * MK_FIT_MAX_INSTANCES */
        struct mk_fit_node_cache *fit_cache;
        /* CPU and memory: the Node's allocatable, and the requests of the
         * active pods bound there (all pods, not only ours). */
        struct mk_fit_node_resources res;
};

/* What a bound pod takes from its node's CPU and memory. */
struct pod_usage {
        char node[MK_K8S_NAME_MAX];
        uint64_t cpu_milli, memory_bytes;
};

struct mk_sched {
        const struct mk_sched_config *cfg;
        pthread_rwlock_t lock;
        struct table nodes;             /* name -> node_entry */
        struct table pods;              /* uid -> pod_entry (pods with a reservation only) */
        struct table usage;             /* uid -> pod_usage (active pods bound to a node) */
        struct mk_sched_stats stats;
        /* Request shapes (what a decision reads of a pod) interned to ids
         * that are never reused, so a node's memo cannot match a shape that
         * was dropped. */
        pthread_mutex_t shapes_lock;
        struct table shapes;            /* canonical shape text -> uint64_t id */
        uint64_t next_shape;
        atomic_bool memo_off;
        /* The node entries of the last NodeNames list resolved (resolve_names),
         * in its order: kube-scheduler sends the same list again and again,
         * and a request with that list then skips a hash lookup per node.
         * Valid while nodes_gen is unchanged; guarded by names_lock, taken
         * with trylock (a reader that finds it busy looks the names up). */
        uint64_t nodes_gen;             /* bumped under the write lock when a node entry is added or freed */
        pthread_mutex_t names_lock;
        uint64_t names_gen;
        struct mk_buf names;            /* the names, each with its NUL */
        struct node_entry **names_nodes;
        size_t names_n, names_alloc;
};

static struct mk_fit_tables **tables_free(struct mk_fit_tables **t, size_t n) {
        for (size_t i = 0; t && i < n; i++)
                mk_fit_tables_free(t[i]);
        free(t);
        return NULL;
}

static bool same_gpu_kind(const struct mk_inv_gpu *a, const struct mk_inv_gpu *b) {
        if (a->n_profiles != b->n_profiles || a->memory_units != b->memory_units || a->slices != b->slices ||
            a->memory_mib != b->memory_mib || a->multiprocessors != b->multiprocessors)
                return false;
        for (size_t i = 0; i < a->n_profiles; i++) {
                const struct mk_gi_profile *p = &a->profiles[i], *q = &b->profiles[i];
                if (!streq(p->name, q->name) || p->id != q->id || p->slices != q->slices ||
                    p->memory_mib != q->memory_mib || p->max_count != q->max_count ||
                    p->multiprocessors != q->multiprocessors || p->n_placements != q->n_placements ||
                    memcmp(p->placements, q->placements, p->n_placements * sizeof(*p->placements)) != 0)
                        return false;
        }
        return true;
}

/* The first GPU of the node with the same description as GPU g: GPUs of
 * one kind share one profile array and one set of tables, which lets the
 * fit keep a compact per-node cache (plan/fit.h). */
static size_t gpu_rep(const struct mk_inventory *inv, size_t g) {
        for (size_t k = 0; k < g; k++)
                if (same_gpu_kind(&inv->gpus[k], &inv->gpus[g]))
                        return k;
        return g;
}

/* gpu_rep() of every GPU (the comparison of profile arrays is not free:
 * done once per inventory, not per fit). NULL when out of memory. */
static uint16_t *reps_new(const struct mk_inventory *inv) {
        uint16_t *r = calloc(inv->n_gpus + 1, sizeof(*r));
        for (size_t g = 0; r && g < inv->n_gpus; g++)
                r[g] = (uint16_t) gpu_rep(inv, g);
        return r;
}

/* The fit's capacity tables, built once per inventory for each kind of GPU
 * (at its representative's index; NULL elsewhere, and where the fit cannot
 * use tables: it then computes per call). */
static struct mk_fit_tables **tables_new(const struct mk_inventory *inv) {
        struct mk_fit_tables **t = calloc(inv->n_gpus + 1, sizeof(*t));
        for (size_t g = 0; t && g < inv->n_gpus; g++) {
                if (gpu_rep(inv, g) != g)
                        continue;
                const struct mk_inv_gpu *ig = &inv->gpus[g];
                struct mk_fit_gpu fg = {
                        .profiles = ig->profiles,
                        .n_profiles = ig->n_profiles,
                        .memory_units = ig->memory_units,
                        .slices = ig->slices,
                        .memory_mib = ig->memory_mib,
                        .multiprocessors = ig->multiprocessors,
                };
                if (mk_fit_tables_new(&fg, &t[g]) < 0)
                        t[g] = NULL;
        }
        return t;
}

static void node_entry_free(void *p) {
        struct node_entry *n = p;
        if (!n)
                return;
        n->tables = tables_free(n->tables, n->inv ? n->inv->n_gpus : 0);
        free(n->reps);
        mk_inventory_free(n->inv);
        free(n->fit_gpus);
        free(n->fit_used);
        free(n->fit_cache);
        free(n->memo_reason);
        free(n->claims);
        free(n->name);
        free(n);
}

/* Called with the write lock held whenever the node's inventory, its
 * reservations or its CPU and memory change. */
static void node_forget(struct node_entry *n) {
        for (size_t i = 0; i < MEMO_SLOTS; i++)
                n->memo_shape[i] = 0;
}

int mk_sched_new(const struct mk_sched_config *cfg, struct mk_sched **ret) {
        struct mk_sched *s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        s->cfg = cfg;
        if (pthread_rwlock_init(&s->lock, NULL) != 0) {
                free(s);
                return -ENOMEM;
        }
        if (pthread_mutex_init(&s->shapes_lock, NULL) != 0) {
                pthread_rwlock_destroy(&s->lock);
                free(s);
                return -ENOMEM;
        }
        if (pthread_mutex_init(&s->names_lock, NULL) != 0) {
                pthread_mutex_destroy(&s->shapes_lock);
                pthread_rwlock_destroy(&s->lock);
                free(s);
                return -ENOMEM;
        }
        mk_buf_init(&s->names, (size_t) MK_MAX_EXTENDER_NODES * MK_K8S_NAME_MAX);
        s->next_shape = 1;
        *ret = s;
        return 0;
}

struct mk_sched *mk_sched_free(struct mk_sched *s) {
        if (!s)
                return NULL;
        table_clear(&s->nodes, node_entry_free);
        table_clear(&s->pods, free);
        table_clear(&s->usage, free);
        table_clear(&s->shapes, free);
        mk_buf_done(&s->names);
        free(s->names_nodes);
        pthread_mutex_destroy(&s->names_lock);
        pthread_mutex_destroy(&s->shapes_lock);
        pthread_rwlock_destroy(&s->lock);
        free(s);
        return NULL;
}

struct mk_sched_stats *mk_sched_stats(struct mk_sched *s) {
        return &s->stats;
}

void mk_sched_counts(struct mk_sched *s, size_t *ret_nodes, size_t *ret_claims) {
        pthread_rwlock_rdlock(&s->lock);
        *ret_nodes = s->nodes.n;
        *ret_claims = s->pods.n;
        pthread_rwlock_unlock(&s->lock);
}

static int add_used_to(struct mk_fit_gpu *fg, struct mk_fit_instance *arr, unsigned profile_id, unsigned slices,
                       struct mk_placement p) {
        for (size_t i = 0; i < fg->n_used; i++)
                if (arr[i].placement.start == p.start && arr[i].placement.size == p.size)
                        return 0;
        if (fg->n_used >= MK_FIT_MAX_INSTANCES)
                return -E2BIG;
        arr[fg->n_used++] = (struct mk_fit_instance) {.profile_id = profile_id, .slices = slices, .placement = p};
        return 0;
}

/* Fills gpus[g] / used[g * MK_FIT_MAX_INSTANCES] from the inventory and the
 * active claims, leaving out `skip_uid`'s own and expired pending ones;
 * `req` (may be NULL) marks GPUs of an unwanted type unavailable. */
static int fill_gpus(struct mk_fit_gpu *gpus, struct mk_fit_instance *used, const struct mk_inventory *inv,
                     struct mk_fit_tables *const *tables, const uint16_t *reps, struct pod_entry *const *claims,
                     size_t n_claims,
                     const struct mk_pod_request *req, const char *skip_uid, int64_t now);

static void node_refit(struct node_entry *n) {
        node_forget(n);
        n->fit_valid = false;
        n->inv_reserved = false;
        n->n_pending = 0;
        for (size_t i = 0; i < n->n_claims; i++)
                n->n_pending += n->claims[i]->pending;
        for (size_t g = 0; n->inv && g < n->inv->n_gpus; g++)
                for (size_t i = 0; i < n->inv->gpus[g].n_instances; i++)
                        n->inv_reserved |= n->inv->gpus[g].instances[i].state == MK_INV_RESERVED;
        if (!n->inv || n->inv->n_gpus == 0 || n->inv->n_gpus > MK_FIT_MAX_NODE_GPUS)
                return;
        size_t ng = n->inv->n_gpus;
        if (!n->fit_gpus) {
                n->fit_gpus = calloc(MK_FIT_MAX_NODE_GPUS, sizeof(*n->fit_gpus));
                n->fit_used = calloc((size_t) MK_FIT_MAX_NODE_GPUS * MK_FIT_MAX_INSTANCES, sizeof(*n->fit_used));
                n->fit_cache = calloc(1, sizeof(*n->fit_cache));
                if (!n->fit_gpus || !n->fit_used || !n->fit_cache) {
                        free(n->fit_gpus);
                        free(n->fit_used);
                        free(n->fit_cache);
                        n->fit_gpus = NULL;
                        n->fit_used = NULL;
                        n->fit_cache = NULL;
                        return;
                }
        }
        if (fill_gpus(n->fit_gpus, n->fit_used, n->inv, n->tables, n->reps, n->claims, n->n_claims, NULL, NULL, 0) < 0)
                return;
        struct mk_fit_node fn = {.gpus = n->fit_gpus, .n_gpus = ng};
        (void) mk_fit_node_cache_update(&fn, n->fit_cache); /* an unusable cache only makes fits slower */
        n->fit_valid = true;
}

static struct node_entry *node_get_or_add(struct mk_sched *s, const char *name) {
        struct node_entry *n = table_get(&s->nodes, name);
        if (n)
                return n;
        n = calloc(1, sizeof(*n));
        if (!n || !(n->name = strdup(name)) || table_put(&s->nodes, name, n) < 0) {
                node_entry_free(n);
                return NULL;
        }
        s->nodes_gen++;
        snprintf(n->reason, sizeof(n->reason), "node has no %s annotation (is 'migkit scheduler node' running there?)",
                 MK_ANN_INVENTORY);
        return n;
}

static void node_unlink_claim(struct mk_sched *s, struct pod_entry *p) {
        struct node_entry *n = table_get(&s->nodes, p->claim.node);
        for (size_t i = 0; n && i < n->n_claims; i++)
                if (n->claims[i] == p) {
                        n->claims[i] = n->claims[--n->n_claims];
                        node_refit(n);
                        return;
                }
}

static int node_link_claim(struct mk_sched *s, struct pod_entry *p) {
        struct node_entry *n = node_get_or_add(s, p->claim.node);
        if (!n)
                return -ENOMEM;
        if (n->n_claims == n->alloc_claims) {
                size_t na = n->alloc_claims ? n->alloc_claims * 2 : 8;
                struct pod_entry **c = realloc(n->claims, na * sizeof(*c));
                if (!c)
                        return -ENOMEM;
                n->claims = c;
                n->alloc_claims = na;
        }
        n->claims[n->n_claims++] = p;
        node_refit(n);
        return 0;
}

static void pod_drop(struct mk_sched *s, const char *uid) {
        struct pod_entry *p = table_del(&s->pods, uid);
        if (p) {
                node_unlink_claim(s, p);
                free(p);
        }
}

/* Replaces the pod's entry with `c` (pending or observed). */
static int pod_set(struct mk_sched *s, const struct mk_claim *c, bool pending, int64_t now) {
        pod_drop(s, c->uid);
        struct pod_entry *p = calloc(1, sizeof(*p));
        if (!p)
                return -ENOMEM;
        p->claim = *c;
        p->pending = pending;
        p->pending_since = now;
        if (table_put(&s->pods, c->uid, p) < 0) {
                free(p);
                return -ENOMEM;
        }
        if (node_link_claim(s, p) < 0) {
                table_del(&s->pods, c->uid);
                free(p);
                return -ENOMEM;
        }
        return 0;
}

static const char *annotation(const json_t *o, const char *key) {
        return json_string_value(json_object_get(json_object_get(json_object_get(o, "metadata"), "annotations"), key));
}

/* The inventory of a Node object: 0 with *ret (NULL when absent, reason set). */
static int node_inventory(const json_t *node, struct mk_inventory **ret, char *reason, size_t size) {
        const char *v = annotation(node, MK_ANN_INVENTORY);
        *ret = NULL;
        if (!v) {
                snprintf(reason, size, "node has no %s annotation (is 'migkit scheduler node' running there?)",
                         MK_ANN_INVENTORY);
                return 0;
        }
        struct mk_error e = {0};
        char buf[MK_ERROR_MSG_MAX + MK_ERROR_LOC_MAX + 8];
        if (mk_inventory_parse(v, strlen(v), ret, &e) < 0) {
                snprintf(reason, size, "malformed %s annotation: %s", MK_ANN_INVENTORY,
                         mk_error_format(&e, buf, sizeof(buf)));
                *ret = NULL;
        }
        return 0;
}

int mk_sched_node_event(struct mk_sched *s, enum mk_kube_event_type type, const json_t *node) {
        const char *name = json_string_value(json_object_get(json_object_get(node, "metadata"), "name"));
        if (!name)
                return 0;
        const json_t *alloc = json_object_get(json_object_get(node, "status"), "allocatable");
        uint64_t cpu = 0, mem = 0;
        if (json_is_string(json_object_get(alloc, "cpu")) &&
            mk_quantity_parse_milli(json_string_value(json_object_get(alloc, "cpu")), &cpu) < 0)
                cpu = 0;
        if (json_is_string(json_object_get(alloc, "memory")) &&
            mk_quantity_parse_milli(json_string_value(json_object_get(alloc, "memory")), &mem) < 0)
                mem = 0;
        struct mk_inventory *inv = NULL;
        struct mk_fit_tables **tables = NULL;
        uint16_t *reps = NULL;
        char reason[MK_ERROR_MSG_MAX];
        if (type != MK_KUBE_EVENT_DELETED)
                (void) node_inventory(node, &inv, reason, sizeof(reason));
        if (inv) {
                tables = tables_new(inv);
                reps = reps_new(inv);
        }
        pthread_rwlock_wrlock(&s->lock);
        int r = 0;
        if (type == MK_KUBE_EVENT_DELETED) {
                struct node_entry *n = table_get(&s->nodes, name);
                if (n && n->n_claims == 0) {
                        node_entry_free(table_del(&s->nodes, name));
                        s->nodes_gen++;
                } else if (n) {
                        n->tables = tables_free(n->tables, n->inv ? n->inv->n_gpus : 0);
                        free(n->reps);
                        n->reps = NULL;
                        n->inv = mk_inventory_free(n->inv);
                        node_refit(n);
                        snprintf(n->reason, sizeof(n->reason), "node was deleted");
                }
        } else {
                struct node_entry *n = node_get_or_add(s, name);
                if (!n)
                        r = -ENOMEM;
                else {
                        tables_free(n->tables, n->inv ? n->inv->n_gpus : 0);
                        free(n->reps);
                        mk_inventory_free(n->inv);
                        n->tables = TAKE_PTR(tables);
                        n->reps = TAKE_PTR(reps);
                        n->inv = TAKE_PTR(inv);
                        n->res.cpu_allocatable_milli = cpu;
                        n->res.memory_allocatable_bytes = mem / 1000;
                        if (!n->inv)
                                snprintf(n->reason, sizeof(n->reason), "%s", reason);
                        node_refit(n);
                }
        }
        pthread_rwlock_unlock(&s->lock);
        tables_free(tables, inv ? inv->n_gpus : 0);
        free(reps);
        mk_inventory_free(inv);
        if (r < 0)
                log_debug_area("sched", "Node '%s': out of memory", name);
        return r;
}

/* Replaces the pod's CPU and memory usage (NULL: none). Takes `use`. */
static void usage_set(struct mk_sched *s, const char *uid, struct pod_usage *use) {
        struct pod_usage *old = table_del(&s->usage, uid);
        if (old) {
                struct node_entry *n = table_get(&s->nodes, old->node);
                if (n) {
                        node_forget(n);
                        n->res.cpu_requested_milli -= MIN(n->res.cpu_requested_milli, old->cpu_milli);
                        n->res.memory_requested_bytes -= MIN(n->res.memory_requested_bytes, old->memory_bytes);
                }
                free(old);
        }
        if (!use)
                return;
        struct node_entry *n = node_get_or_add(s, use->node);
        if (!n || table_put(&s->usage, uid, use) < 0) {
                free(use);
                return;
        }
        node_forget(n);
        n->res.cpu_requested_milli += use->cpu_milli;
        n->res.memory_requested_bytes += use->memory_bytes;
}

int mk_sched_pod_event(struct mk_sched *s, enum mk_kube_event_type type, const json_t *pod) {
        struct mk_claim *c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        struct mk_error e = {0};
        int has = mk_claim_from_pod(pod, c, &e);
        if (has < 0) {
                char buf[MK_ERROR_MSG_MAX + MK_ERROR_LOC_MAX + 8];
                log_debug_area("sched", "Pod ignored: %s", mk_error_format(&e, buf, sizeof(buf)));
                free(c);
                return 0;
        }
        const char *bound = json_string_value(json_object_get(json_object_get(pod, "spec"), "nodeName"));
        struct pod_usage *use = NULL;
        if (type != MK_KUBE_EVENT_DELETED && c->active && bound && strlen(bound) < MK_K8S_NAME_MAX &&
            (use = calloc(1, sizeof(*use)))) {
                snprintf(use->node, sizeof(use->node), "%s", bound);
                mk_pod_resource_requests(pod, &use->cpu_milli, &use->memory_bytes);
        }
        int r = 0;
        pthread_rwlock_wrlock(&s->lock);
        usage_set(s, c->uid, TAKE_PTR(use));
        struct pod_entry *old = table_get(&s->pods, c->uid);
        if (type == MK_KUBE_EVENT_DELETED || (has > 0 && !c->active))
                pod_drop(s, c->uid);
        else if (has > 0)
                r = pod_set(s, c, false, 0);
        else if (old && !old->pending)
                pod_drop(s, c->uid); /* the annotation was removed */
        /* else: a pending reservation not visible yet stays */
        pthread_rwlock_unlock(&s->lock);
        free(c);
        return r;
}

/* --- fitting one pod on one node --- */

struct scratch {
        struct mk_fit_gpu gpus[MK_FIT_MAX_NODE_GPUS];
        struct mk_fit_instance used[MK_FIT_MAX_NODE_GPUS][MK_FIT_MAX_INSTANCES];
};

static int add_used(struct scratch *sc, size_t g, unsigned profile_id, unsigned slices, struct mk_placement p) {
        return add_used_to(&sc->gpus[g], sc->used[g], profile_id, slices, p);
}

static bool pending_expired(const struct pod_entry *p, int64_t now) {
        return p->pending && now > 0 && p->pending_since > 0 && now - p->pending_since > MK_SCHED_PENDING_TTL_S;
}

static int fill_gpus(struct mk_fit_gpu *gpus, struct mk_fit_instance *used, const struct mk_inventory *inv,
                     struct mk_fit_tables *const *tables, const uint16_t *reps, struct pod_entry *const *claims,
                     size_t n_claims,
                     const struct mk_pod_request *req, const char *skip_uid, int64_t now) {
        int r = 0;
        for (size_t g = 0; g < inv->n_gpus && r >= 0; g++) {
                const struct mk_inv_gpu *ig = &inv->gpus[g];
                size_t rep = reps ? reps[g] : gpu_rep(inv, g);
                struct mk_fit_instance *u = used + g * MK_FIT_MAX_INSTANCES;
                gpus[g] = (struct mk_fit_gpu) {
                        .profiles = inv->gpus[rep].profiles,
                        .n_profiles = ig->n_profiles,
                        .memory_units = ig->memory_units,
                        .slices = ig->slices,
                        .memory_mib = ig->memory_mib,
                        .multiprocessors = ig->multiprocessors,
                        .used = u,
                        .tables = tables ? tables[rep] : NULL,
                        .unavailable = !ig->mig_enabled || (req && !mk_pod_request_gpu_type_ok(req, ig->model)),
                };
                for (size_t i = 0; i < ig->n_instances && r >= 0; i++) {
                        const struct mk_inv_instance *in = &ig->instances[i];
                        if (skip_uid && streq(in->uid, skip_uid) && in->state == MK_INV_RESERVED)
                                continue;
                        r = add_used_to(&gpus[g], u, in->profile_id, in->slices, in->placement);
                }
                for (size_t c = 0; c < n_claims && r >= 0; c++) {
                        const struct pod_entry *p = claims[c];
                        if (!p->claim.active || (skip_uid && streq(p->claim.uid, skip_uid)) ||
                            pending_expired(p, now))
                                continue;
                        for (size_t d = 0; d < p->claim.n_devices && r >= 0; d++)
                                if (streq(p->claim.devices[d].gpu, ig->uuid))
                                        r = add_used_to(&gpus[g], u, p->claim.devices[d].profile_id,
                                                        p->claim.devices[d].slices, p->claim.devices[d].placement);
                }
        }
        return r;
}

static void request_policies(const struct mk_pod_request *req, enum mk_fit_policy *np, enum mk_fit_policy *gp) {
        *np = req->node_policy[0] ? mk_fit_policy_from_string(req->node_policy) : MK_FIT_BINPACK;
        *gp = req->gpu_policy[0] ? mk_fit_policy_from_string(req->gpu_policy) : MK_FIT_SPREAD;
        if ((int) *np < 0)
                *np = MK_FIT_BINPACK;
        if ((int) *gp < 0)
                *gp = MK_FIT_SPREAD;
}

/* Whether the node's decisions depend only on its kept state and the
 * request: no pending reservation on the node (they may expire) and none
 * of the pod's own, in the cache (`own_node`: the node its reservation is
 * linked to) or in the inventory (left out of its fit). */
static bool node_state_plain(const struct node_entry *n, const char *uid, const struct node_entry *own_node) {
        if (n->n_pending > 0 || n == own_node)
                return false;
        for (size_t g = 0; n->inv_reserved && uid && g < n->inv->n_gpus; g++)
                for (size_t i = 0; i < n->inv->gpus[g].n_instances; i++)
                        if (n->inv->gpus[g].instances[i].state == MK_INV_RESERVED &&
                            streq(n->inv->gpus[g].instances[i].uid, uid))
                                return false;
        return true;
}

/* Whether a request can be fitted straight on the node's kept view: one
 * container, no GPU-type filter, a plain state (node_state_plain). */
static bool fast_path_ok(const struct node_entry *n, const struct mk_pod_request *req, bool plain) {
        return n->fit_valid && plain && req->n_containers == 1 && !req->use_types[0] && !req->nouse_types[0];
}

/* Appends `v` to the shape text as "<length>:<v>" (no separator can be forged). */
static bool shape_add(char *buf, size_t size, size_t *len, const char *fmt, ...) _printf_(4, 5);
static bool shape_add(char *buf, size_t size, size_t *len, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(buf + *len, size - *len, fmt, ap);
        va_end(ap);
        if (k < 0 || (size_t) k >= size - *len)
                return false;
        *len += (size_t) k;
        return true;
}

/* The id of the request's shape: everything of the pod that a decision on
 * a plain node reads (eval_node). 0 when it cannot be remembered (memo
 * off, a shape too long, out of memory). */
static uint64_t request_shape(struct mk_sched *s, const struct mk_pod_request *req) {
        char buf[8192];
        size_t len = 0;
        bool ok = !atomic_load(&s->memo_off) &&
                  shape_add(buf, sizeof(buf), &len, "%zu|%d|%" PRIu64 "|%" PRIu64 "|%zu:%s|%zu:%s|%zu:%s|%zu:%s|%zu:%s",
                            req->n_containers, (int) req->not_mig, req->cpu_milli, req->memory_bytes,
                            strlen(req->variant), req->variant, strlen(req->use_types), req->use_types,
                            strlen(req->nouse_types), req->nouse_types, strlen(req->node_policy), req->node_policy,
                            strlen(req->gpu_policy), req->gpu_policy);
        for (size_t i = 0; ok && i < req->n_containers && i < MK_MAX_POD_CONTAINERS; i++) {
                const struct mk_pod_request_container *c = &req->containers[i];
                ok = shape_add(buf, sizeof(buf), &len, "|%u,%u,%" PRIu64 ",%u,%u", c->index, c->gpus, c->mem_mib,
                               c->mem_percent, c->cores_percent);
        }
        if (!ok)
                return 0;
        uint64_t id = 0;
        pthread_mutex_lock(&s->shapes_lock);
        uint64_t *v = table_get(&s->shapes, buf);
        if (v)
                id = *v;
        else {
                if (s->shapes.n >= MEMO_MAX_SHAPES)
                        table_clear(&s->shapes, free); /* ids are not reused: old memos just stop matching */
                v = malloc(sizeof(*v));
                if (v && table_put(&s->shapes, buf, v) == 0) {
                        *v = id = s->next_shape++;
                } else
                        free(v);
        }
        pthread_mutex_unlock(&s->shapes_lock);
        return id;
}

/* The remembered decision of node `n` for `shape`: true with the answer
 * (and, when `size` > 0, a failure's reason). */
static bool memo_get(struct node_entry *n, uint64_t shape, int *r, int *priority, char *reason, size_t size) {
        bool hit = false;
        if (atomic_flag_test_and_set(&n->memo_busy))
                return false;
        for (size_t i = 0; i < MEMO_SLOTS; i++) {
                if (n->memo_shape[i] != shape)
                        continue;
                if (n->memo_r[i] < 0 && size > 0 && !n->memo_has_reason[i])
                        break; /* decided by a prioritize: decide again for the reason */
                *r = n->memo_r[i];
                *priority = n->memo_priority[i];
                if (*r < 0 && size > 0) {
                        size_t len = strnlen(n->memo_reason[i], MIN(size, sizeof(n->memo_reason[i])) - 1);
                        memcpy(reason, n->memo_reason[i], len);
                        reason[len] = 0;
                }
                hit = true;
                break;
        }
        atomic_flag_clear(&n->memo_busy);
        return hit;
}

/* `reason`: NULL when none was asked for. */
static void memo_put(struct node_entry *n, uint64_t shape, int r, int priority, const char *reason) {
        if (atomic_flag_test_and_set(&n->memo_busy))
                return;
        size_t k = MEMO_SLOTS;
        for (size_t i = 0; i < MEMO_SLOTS && k == MEMO_SLOTS; i++)
                if (n->memo_shape[i] == shape)
                        k = i;
        if (k == MEMO_SLOTS)
                k = n->memo_next++ % MEMO_SLOTS;
        if (r < 0 && reason && !n->memo_reason)
                n->memo_reason = calloc(MEMO_SLOTS, sizeof(*n->memo_reason));
        n->memo_shape[k] = shape;
        n->memo_r[k] = r;
        n->memo_priority[k] = (int8_t) priority;
        n->memo_has_reason[k] = r < 0 && reason && n->memo_reason;
        if (n->memo_has_reason[k])
                snprintf(n->memo_reason[k], sizeof(n->memo_reason[k]), "%s", reason);
        atomic_flag_clear(&n->memo_busy);
}

static int fit_fast(const struct node_entry *n, const struct mk_pod_request *req, double *ret_score, char *reason,
                    size_t size) {
        enum mk_fit_policy np, gp;
        request_policies(req, &np, &gp);
        const struct mk_pod_request_container *rc = &req->containers[0];
        struct mk_fit_request fr = {
                .gpus = rc->gpus,
                .mem_mib = rc->mem_mib,
                .mem_percent = rc->mem_percent,
                .cores_percent = rc->cores_percent,
                .variant = req->variant,
                .cpu_milli = req->cpu_milli,
                .memory_bytes = req->memory_bytes,
        };
        struct mk_fit_node fn = {.gpus = n->fit_gpus,
                                 .n_gpus = n->inv->n_gpus,
                                 .cache = n->fit_cache,
                                 .resources = n->res.cpu_allocatable_milli ? &n->res : NULL};
        struct mk_fit_result res;
        struct mk_error e = {0};
        int r = mk_fit_node(&fn, &fr, np, gp, &res, &e);
        if (r < 0) {
                snprintf(reason, size, "%s", e.msg[0] ? e.msg : "does not fit");
                return r;
        }
        *ret_score = res.score;
        return 0;
}

/* Fits `req` on the node; on success the score (0..100) and, when `claim`
 * is set, its devices. `claims` may be NULL. Returns 0, -ENOSPC with the
 * reason, or another error. */
static int fit_pod(struct scratch *sc, const struct mk_inventory *inv, const struct mk_fit_node_resources *node_res,
                   struct mk_fit_tables *const *tables, const uint16_t *reps, struct pod_entry *const *claims,
                   size_t n_claims, const struct mk_pod_request *req, const char *skip_uid, int64_t now,
                   struct mk_claim *claim, double *ret_score, char *reason, size_t size) {
        if (inv->n_gpus > MK_FIT_MAX_NODE_GPUS) {
                snprintf(reason, size, "node has more than %u GPUs", MK_FIT_MAX_NODE_GPUS);
                return -E2BIG;
        }
        int r = fill_gpus(sc->gpus, &sc->used[0][0], inv, tables, reps, claims, n_claims, req, skip_uid, now);
        if (r < 0) {
                snprintf(reason, size, "a GPU has more than %u instances", MK_FIT_MAX_INSTANCES);
                return r;
        }
        enum mk_fit_policy np, gp;
        request_policies(req, &np, &gp);
        struct mk_fit_node fn = {.gpus = sc->gpus, .n_gpus = inv->n_gpus, .resources = node_res};
        double score = 0;
        size_t n_dev = 0;
        for (size_t k = 0; k < req->n_containers; k++) {
                const struct mk_pod_request_container *rc = &req->containers[k];
                struct mk_fit_request fr = {
                        .gpus = rc->gpus,
                        .mem_mib = rc->mem_mib,
                        .mem_percent = rc->mem_percent,
                        .cores_percent = rc->cores_percent,
                        .variant = req->variant,
                        .cpu_milli = req->cpu_milli,
                        .memory_bytes = req->memory_bytes,
                };
                struct mk_fit_result res;
                struct mk_error e = {0};
                r = mk_fit_node(&fn, &fr, np, gp, &res, &e);
                if (r < 0) {
                        if (req->n_containers > 1)
                                snprintf(reason, size, "container %u: %.400s", rc->index, e.msg);
                        else
                                snprintf(reason, size, "%s", e.msg[0] ? e.msg : "does not fit");
                        return r;
                }
                score = res.score;
                for (size_t i = 0; i < res.n_choices; i++) {
                        const struct mk_fit_choice *ch = &res.choices[i];
                        (void) add_used(sc, ch->gpu, ch->profile->id, ch->profile->slices, ch->placement);
                        if (claim && n_dev < MK_MAX_CLAIM_DEVICES) {
                                struct mk_claim_device *d = &claim->devices[n_dev];
                                *d = (struct mk_claim_device) {
                                        .container = rc->index,
                                        .profile_id = ch->profile->id,
                                        .slices = ch->profile->slices,
                                        .placement = ch->placement,
                                };
                                snprintf(d->gpu, sizeof(d->gpu), "%s", inv->gpus[ch->gpu].uuid);
                                snprintf(d->profile, sizeof(d->profile), "%s", ch->profile->name);
                        }
                        n_dev++;
                }
        }
        if (claim)
                claim->n_devices = MIN(n_dev, (size_t) MK_MAX_CLAIM_DEVICES);
        *ret_score = score;
        return 0;
}

/* --- the wire format --- */

static json_t *filter_error(const char *fmt, ...) _printf_(1, 2);
static json_t *filter_error(const char *fmt, ...) {
        char msg[MK_ERROR_MSG_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        return json_pack("{s:n, s:n, s:{}, s:s}", "Nodes", "NodeNames", "FailedNodes", "Error", msg);
}

static int64_t now_s(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t) ts.tv_sec;
}

static uint64_t mono_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

/* One node of a request: by name from the cache, or a Node object. */
struct cand {
        const char *name;
        size_t len;                     /* strlen(name) */
        const json_t *object;           /* from Nodes; NULL with NodeNames */
};

static int get_candidates(const json_t *args, struct cand **ret, size_t *ret_n, bool *ret_names, char *err,
                          size_t size) {
        const json_t *names = mk_json_get_ci(args, "NodeNames");
        const json_t *nodes = mk_json_get_ci(args, "Nodes");
        const json_t *items = json_is_object(nodes) ? mk_json_get_ci(nodes, "items") : NULL;
        bool by_name = json_is_array(names);
        size_t n = by_name ? json_array_size(names) : json_is_array(items) ? json_array_size(items) : 0;
        if (!by_name && !json_is_array(items)) {
                snprintf(err, size, "ExtenderArgs has neither NodeNames nor Nodes.items");
                return -EINVAL;
        }
        if (n > MK_MAX_EXTENDER_NODES) {
                snprintf(err, size, "more than %u nodes in one request", MK_MAX_EXTENDER_NODES);
                return -E2BIG;
        }
        struct cand *c = calloc(n + 1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                if (by_name)
                        c[i].name = json_string_value(json_array_get(names, i));
                else {
                        c[i].object = json_array_get(items, i);
                        const json_t *md = json_object_get(c[i].object, "metadata");
                        c[i].name = json_string_value(json_object_get(md, "name"));
                }
                if (!c[i].name || (c[i].len = strlen(c[i].name)) >= MK_K8S_NAME_MAX) {
                        snprintf(err, size, "node %zu has no valid name", i);
                        free(c);
                        return -EINVAL;
                }
        }
        *ret = c;
        *ret_n = n;
        *ret_names = by_name;
        return 0;
}

/* The extender's priority of a node score (0..100): MaxExtenderPriority is 10. */
static int score_priority(double score) {
        long pri = (long) (score / 10.0 + 0.5);
        return (int) MAX(0, MIN(10, pri));
}

/* Evaluates one candidate: 0 feasible with *priority, else <0 with reason.
 * `shape` (0: none) lets a plain node answer from its memo (*hits counts
 * those answers); `own_node`: where the pod's own reservation is linked. */
static int eval_node(struct mk_sched *s, struct scratch **scp, const struct cand *c, struct node_entry *n,
                     const struct mk_pod_request *req, uint64_t shape, const char *uid,
                     const struct node_entry *own_node, int64_t now, int *priority, unsigned long *hits, char *reason,
                     size_t size) {
        enum mk_sched_mode mode = s->cfg->n_nodes ? mk_sched_config_node_mode(s->cfg, c->name) : MK_SCHED_MODE_MIG;
        if (mode != MK_SCHED_MODE_MIG) {
                snprintf(reason, size, "node is in operating mode '%s', not mig", mk_sched_mode_to_string(mode));
                return -ENOSPC;
        }
        struct mk_inventory *own = NULL;
        const struct mk_inventory *inv = n ? n->inv : NULL;
        if (c->object) {
                (void) node_inventory(c->object, &own, reason, size);
                inv = own;
                if (!inv)
                        return -ENOSPC;
        } else if (!n) {
                snprintf(reason, size, "node is not in migkit's cache (not seen by its Node informer)");
                return -ENOENT;
        } else if (!inv) {
                snprintf(reason, size, "%s", n->reason);
                return -ENOSPC;
        }
        bool plain = !own && node_state_plain(n, uid, own_node);
        int r;
        if (plain && shape && memo_get(n, shape, &r, priority, reason, size)) {
                (*hits)++;
                return r;
        }
        double score = 0;
        if (!own && fast_path_ok(n, req, plain))
                r = fit_fast(n, req, &score, reason, size);
        else {
                /* The slow path's scratch, allocated once per request when first needed. */
                if (!*scp && !(*scp = malloc(sizeof(**scp)))) {
                        mk_inventory_free(own);
                        snprintf(reason, size, "out of memory");
                        return -ENOMEM;
                }
                const struct mk_fit_node_resources *res = n && n->res.cpu_allocatable_milli ? &n->res : NULL;
                r = fit_pod(*scp, inv, res, own ? NULL : n->tables, own ? NULL : n->reps, n ? n->claims : NULL,
                            n ? n->n_claims : 0, req,
                            uid, now, NULL, &score, reason, size);
                mk_inventory_free(own);
        }
        *priority = r >= 0 ? score_priority(score) : 0;
        if (plain && shape && r != -ENOMEM)
                memo_put(n, shape, r, *priority, size > 0 ? reason : NULL);
        return r;
}

void mk_sched_set_memo(struct mk_sched *s, bool on) {
        atomic_store(&s->memo_off, !on);
}

static int parse_pod(struct mk_sched *s, const json_t *args, struct mk_pod_request *req, const char **uid, char *err,
                     size_t size) {
        const json_t *pod = mk_json_get_ci(args, "Pod");
        if (!json_is_object(pod)) {
                snprintf(err, size, "ExtenderArgs has no Pod");
                return -EINVAL;
        }
        *uid = json_string_value(json_object_get(json_object_get(pod, "metadata"), "uid"));
        struct mk_error e = {0};
        char buf[MK_ERROR_MSG_MAX + MK_ERROR_LOC_MAX + 8];
        if (mk_pod_request_parse(pod, s->cfg, req, &e) < 0) {
                snprintf(err, size, "pod request: %s", mk_error_format(&e, buf, sizeof(buf)));
                return -EINVAL;
        }
        return 0;
}

/* A NodeNames list read from a request body without jansson (scan_names):
 * the array's bytes [start, end) of the body, its names (NUL-terminated
 * in buf). */
struct plain_names {
        size_t start, end;
        char *buf;
        struct cand *cands;
        size_t n;
};

static void plain_names_done(struct plain_names *pn) {
        free(pn->buf);
        free(pn->cands);
        *pn = (struct plain_names) {0};
}

static const char *skip_ws(const char *p, const char *end) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
                p++;
        return p;
}

/* A plain name at p (after its opening quote): its length, the closing
 * quote at p[len]; 0 when it is empty, too long, or holds anything but
 * printable ASCII other than quotes and backslashes. */
static size_t plain_name(const char *p, const char *end) {
        size_t k = 0;
        while (p + k < end && k < MK_K8S_NAME_MAX && p[k] > 0x20 && p[k] < 0x7f && p[k] != '"' && p[k] != '\\')
                k++;
        return p + k < end && p[k] == '"' && k < MK_K8S_NAME_MAX ? k : 0;
}

/* Finds the top-level key "NodeNames" (this spelling) of the object in
 * body whose value is an array of plain names (plain_name), at most
 * MK_MAX_EXTENDER_NODES. false when there is none, or anything at all is
 * unusual (an escape in a key, other names): jansson then reads the body
 * as it is, and reports what is wrong. The scan only finds the array; the
 * rest of the body is left to jansson. */
static bool scan_names(const char *body, size_t len, struct plain_names *ret) {
        const char *end = body + len, *p = skip_ws(body, end), *arr = NULL;
        if (p == end || *p != '{')
                return false;
        size_t depth = 0;
        char last = 0; /* the last structural character outside strings */
        while (p < end && !arr) {
                char c = *p;
                if (c == '"') {
                        const char *q = p + 1;
                        while (q < end && *q != '"')
                                q += *q == '\\' ? 2 : 1;
                        if (q >= end)
                                return false;
                        bool key = depth == 1 && (last == '{' || last == ',');
                        if (key && q - p - 1 == 9 && memcmp(p + 1, "NodeNames", 9) == 0) {
                                const char *v = skip_ws(q + 1, end);
                                if (v == end || *v != ':')
                                        return false;
                                v = skip_ws(v + 1, end);
                                if (v == end || *v != '[')
                                        return false;
                                arr = v;
                        }
                        p = q + 1;
                        last = '"';
                        continue;
                }
                if (c == '{' || c == '[')
                        depth++;
                else if (c == '}' || c == ']') {
                        if (depth == 0)
                                return false;
                        depth--;
                }
                if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
                        last = c;
                p++;
        }
        if (!arr)
                return false;
        /* Two passes over the array: check and count, then copy. */
        size_t n = 0;
        p = skip_ws(arr + 1, end);
        if (p < end && *p == ']')
                p++;
        else
                for (;;) {
                        size_t k = p < end && *p == '"' ? plain_name(p + 1, end) : 0;
                        if (k == 0 || ++n > MK_MAX_EXTENDER_NODES)
                                return false;
                        p = skip_ws(p + k + 2, end);
                        if (p < end && *p == ']') {
                                p++;
                                break;
                        }
                        if (p == end || *p != ',')
                                return false;
                        p = skip_ws(p + 1, end);
                }
        struct plain_names pn = {.start = (size_t) (arr - body), .end = (size_t) (p - body), .n = n};
        pn.buf = malloc(pn.end - pn.start);
        pn.cands = calloc(n + 1, sizeof(*pn.cands));
        if (!pn.buf || !pn.cands) {
                plain_names_done(&pn);
                return false;
        }
        char *out = pn.buf;
        p = arr + 1;
        for (size_t i = 0; i < n; i++) {
                p = skip_ws(p, end); /* at the quote */
                size_t k = plain_name(p + 1, end);
                memcpy(out, p + 1, k);
                out[k] = 0;
                pn.cands[i] = (struct cand) {.name = out, .len = k};
                out += k + 1;
                p = skip_ws(p + k + 2, end) + 1; /* past ',' or ']' */
        }
        *ret = pn;
        return true;
}

/* One request's decisions, before they are written out as JSON (a json_t
 * for mk_sched_filter/prioritize, text for the _text variants). */
struct verdict {
        int r;                          /* eval_node's answer (0: feasible) */
        int priority;                   /* 0..10 */
        size_t reason;                  /* failed: offset of its reason in decisions.reasons */
};

struct decisions {
        struct cand *cands;
        size_t n;
        bool by_name;
        struct verdict *v;
        struct mk_buf reasons;          /* NUL-separated, filter only */
        size_t feasible;
};

static void decisions_done(struct decisions *d) {
        free(d->cands);
        free(d->v);
        mk_buf_done(&d->reasons);
        *d = (struct decisions) {0};
}

/* The node entry of every candidate (NULL: not in the cache) into
 * ret[0..d->n), with the read lock held: copied from the last list
 * resolved when the names and the node entries are the same, else looked
 * up (and kept for the next request when names_lock is free). */
static void resolve_names(struct mk_sched *s, const struct decisions *d, struct node_entry **ret) {
        bool locked = pthread_mutex_trylock(&s->names_lock) == 0;
        if (locked && s->names_gen == s->nodes_gen && s->names_n == d->n && s->names.data) {
                const char *p = s->names.data, *end = s->names.data + s->names.len;
                size_t i = 0;
                for (; i < d->n; i++) {
                        const struct cand *c = &d->cands[i];
                        if ((size_t) (end - p) <= c->len || memcmp(p, c->name, c->len + 1) != 0)
                                break;
                        p += c->len + 1;
                }
                if (i == d->n) {
                        memcpy(ret, s->names_nodes, d->n * sizeof(*ret));
                        pthread_mutex_unlock(&s->names_lock);
                        return;
                }
        }
        for (size_t i = 0; i < d->n; i++)
                ret[i] = table_get(&s->nodes, d->cands[i].name);
        if (!locked)
                return;
        /* Kept only when all of it fits: a partial copy must not match. */
        s->names_n = 0;
        s->names.len = 0;
        if (s->names.data)
                s->names.data[0] = 0;
        if (d->n > s->names_alloc) {
                struct node_entry **a = realloc(s->names_nodes, d->n * sizeof(*a));
                if (!a) {
                        pthread_mutex_unlock(&s->names_lock);
                        return;
                }
                s->names_nodes = a;
                s->names_alloc = d->n;
        }
        int r = 0;
        for (size_t i = 0; i < d->n && r >= 0; i++)
                r = mk_buf_append(&s->names, d->cands[i].name, d->cands[i].len + 1);
        if (r >= 0 && d->n > 0) {
                memcpy(s->names_nodes, ret, d->n * sizeof(*ret));
                s->names_n = d->n;
                s->names_gen = s->nodes_gen;
        } else
                s->names.len = 0;
        pthread_mutex_unlock(&s->names_lock);
}

/* Decides every candidate of `args`: 0, or <0 with `err` for a malformed
 * request (a filter's Error). `with_reasons`: keep the failed nodes' reasons. */
static int decide(struct mk_sched *s, const json_t *args, struct plain_names *pn, bool with_reasons,
                  struct decisions *d, char *err, size_t size) {
        *d = (struct decisions) {0};
        mk_buf_init(&d->reasons, (size_t) MK_MAX_EXTENDER_NODES * (MK_ERROR_MSG_MAX + 1));
        struct mk_pod_request *req = calloc(1, sizeof(*req));
        const char *uid = NULL;
        if (!req) {
                snprintf(err, size, "out of memory");
                return -ENOMEM;
        }
        int r = parse_pod(s, args, req, &uid, err, size);
        if (r >= 0 && pn) {
                d->cands = pn->cands; /* taken over */
                d->n = pn->n;
                d->by_name = true;
                pn->cands = NULL;
        } else if (r >= 0)
                r = get_candidates(args, &d->cands, &d->n, &d->by_name, err, size);
        if (r >= 0 && !(d->v = calloc(d->n + 1, sizeof(*d->v)))) {
                snprintf(err, size, "out of memory");
                r = -ENOMEM;
        }
        if (r < 0) {
                free(req);
                decisions_done(d);
                return r;
        }
        uint64_t shape = d->by_name ? request_shape(s, req) : 0;
        struct node_entry **ents = calloc(d->n + 1, sizeof(*ents));
        if (!ents) {
                snprintf(err, size, "out of memory");
                free(req);
                decisions_done(d);
                return -ENOMEM;
        }
        struct scratch *sc = NULL; /* reused for every node: fit_pod sets what it reads */
        int64_t now = now_s();
        unsigned long hits = 0;
        pthread_rwlock_rdlock(&s->lock);
        const struct pod_entry *mine = uid ? table_get(&s->pods, uid) : NULL;
        const struct node_entry *own_node = mine ? table_get(&s->nodes, mine->claim.node) : NULL;
        if (d->by_name)
                resolve_names(s, d, ents);
        else
                for (size_t i = 0; i < d->n; i++)
                        ents[i] = table_get(&s->nodes, d->cands[i].name);
        for (size_t i = 0; i < d->n; i++) {
                char reason[MK_ERROR_MSG_MAX];
                size_t rsize = with_reasons ? sizeof(reason) : 0; /* prioritize: no reasons written */
                int priority = 0;
                int q;
                reason[0] = 0;
                if (req->not_mig) {
                        snprintf(reason, sizeof(reason), "pod asks %s '%s'; migkit schedules MIG instances only",
                                 MK_ANN_VGPU_MODE, annotation(mk_json_get_ci(args, "Pod"), MK_ANN_VGPU_MODE));
                        q = -ENOSPC;
                } else if (req->n_containers == 0)
                        q = 0;
                else
                        q = eval_node(s, &sc, &d->cands[i], ents[i], req, shape, uid, own_node, now, &priority,
                                      &hits, reason, rsize);
                struct verdict *v = &d->v[i];
                v->r = q;
                if (q >= 0) {
                        v->priority = priority;
                        d->feasible++;
                } else if (with_reasons) {
                        v->reason = d->reasons.len;
                        if (mk_buf_append(&d->reasons, reason, strlen(reason) + 1) < 0)
                                v->reason = SIZE_MAX;
                }
        }
        pthread_rwlock_unlock(&s->lock);
        atomic_fetch_add(&s->stats.memo_hits, hits);
        free(ents);
        free(sc);
        free(req);
        return 0;
}

static const char *verdict_reason(const struct decisions *d, const struct verdict *v) {
        return v->reason < d->reasons.len ? d->reasons.data + v->reason : "out of memory";
}

static json_t *filter_json(const struct decisions *d) {
        json_t *ok = json_array(), *failed = json_object(), *res = json_object();
        for (size_t i = 0; i < d->n; i++) {
                if (d->v[i].r >= 0) {
                        if (d->by_name)
                                json_array_append_new(ok, json_string(d->cands[i].name));
                        else
                                json_array_append(ok, (json_t *) d->cands[i].object);
                } else {
                        char msg[MK_ERROR_MSG_MAX + 16];
                        snprintf(msg, sizeof(msg), "migkit: %s", verdict_reason(d, &d->v[i]));
                        json_object_set_new(failed, d->cands[i].name, json_string(msg));
                }
        }
        if (d->by_name) {
                json_object_set_new(res, "Nodes", json_null());
                json_object_set_new(res, "NodeNames", ok);
        } else {
                json_object_set_new(res, "Nodes", json_pack("{s:o}", "items", ok));
                json_object_set_new(res, "NodeNames", json_null());
        }
        json_object_set_new(res, "FailedNodes", failed);
        json_object_set_new(res, "Error", json_string(""));
        return res;
}

static void filter_account(struct mk_sched *s, const struct decisions *d, uint64_t t0) {
        atomic_fetch_add(&s->stats.filter_ns_total, mono_ns() - t0);
        atomic_fetch_add(&s->stats.filter_nodes_total, d->n);
        atomic_fetch_add(&s->stats.feasible_total, d->feasible);
}

json_t *mk_sched_filter(struct mk_sched *s, const json_t *args) {
        atomic_fetch_add(&s->stats.filter, 1);
        uint64_t t0 = mono_ns();
        char err[MK_ERROR_MSG_MAX];
        struct decisions d;
        if (decide(s, args, NULL, true, &d, err, sizeof(err)) < 0) {
                atomic_fetch_add(&s->stats.errors, 1);
                return filter_error("%s", err);
        }
        json_t *res = filter_json(&d);
        filter_account(s, &d, t0);
        decisions_done(&d);
        return res;
}

json_t *mk_sched_prioritize(struct mk_sched *s, const json_t *args) {
        atomic_fetch_add(&s->stats.prioritize, 1);
        char err[MK_ERROR_MSG_MAX];
        struct decisions d;
        json_t *list = json_array();
        if (decide(s, args, NULL, false, &d, err, sizeof(err)) < 0) {
                atomic_fetch_add(&s->stats.errors, 1);
                return list;
        }
        for (size_t i = 0; i < d.n; i++) {
                json_t *h = json_object();
                json_object_set_new(h, "Host", json_string(d.cands[i].name));
                json_object_set_new(h, "Score", json_integer(d.v[i].r >= 0 ? d.v[i].priority : 0));
                json_array_append_new(list, h);
        }
        decisions_done(&d);
        return list;
}

/* --- the same answers written as text, without building a json_t --- */

/* Appends `v` as a JSON string. Bytes that are not valid UTF-8 (a reason
 * cut in the middle of a character) become '?'. */
static int put_json_string(struct mk_buf *b, const char *v) {
        static const char hex[] = "0123456789abcdef";
        char out[512];
        size_t k = 0;
        int r;
        out[k++] = '"';
        for (const unsigned char *p = (const unsigned char *) v; *p;) {
                if (k > sizeof(out) - 16) {
                        if ((r = mk_buf_append(b, out, k)) < 0)
                                return r;
                        k = 0;
                }
                unsigned char c = *p;
                if (c == '"' || c == '\\') {
                        out[k++] = '\\';
                        out[k++] = (char) c;
                        p++;
                } else if (c < 0x20) {
                        memcpy(out + k, "\\u00", 4);
                        out[k + 4] = hex[c >> 4];
                        out[k + 5] = hex[c & 15];
                        k += 6;
                        p++;
                } else if (c < 0x80) {
                        out[k++] = (char) c;
                        p++;
                } else {
                        /* the length of a well-formed sequence (RFC 3629), else 0 */
                        size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
                        for (size_t j = 1; j < n; j++)
                                if ((p[j] & 0xc0) != 0x80)
                                        n = 0;
                        if (n >= 3) {
                                unsigned cp = n == 3 ? (c & 0x0fu) << 12 | (p[1] & 0x3fu) << 6 | (p[2] & 0x3fu)
                                                     : (c & 0x07u) << 18 | (p[1] & 0x3fu) << 12 | (p[2] & 0x3fu) << 6 |
                                                               (p[3] & 0x3fu);
                                if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
                                    (n == 4 && (cp < 0x10000 || cp > 0x10ffff)))
                                        n = 0;
                        }
                        if (n == 0) {
                                out[k++] = '?';
                                p++;
                        } else {
                                memcpy(out + k, p, n);
                                k += n;
                                p += n;
                        }
                }
        }
        out[k++] = '"';
        return mk_buf_append(b, out, k);
}

static char *json_text(json_t *v) {
        char *t = json_dumps(v, JSON_COMPACT);
        json_decref(v);
        return t;
}

static char *filter_text(struct mk_sched *s, const json_t *args, struct plain_names *pn) {
        atomic_fetch_add(&s->stats.filter, 1);
        uint64_t t0 = mono_ns();
        char err[MK_ERROR_MSG_MAX];
        struct decisions d;
        if (decide(s, args, pn, true, &d, err, sizeof(err)) < 0) {
                atomic_fetch_add(&s->stats.errors, 1);
                return json_text(filter_error("%s", err));
        }
        if (!d.by_name) {
                /* Full Node objects are echoed back: jansson writes them. */
                char *t = json_text(filter_json(&d));
                filter_account(s, &d, t0);
                decisions_done(&d);
                return t;
        }
        struct mk_buf b;
        mk_buf_init(&b, SIZE_MAX);
        int r = mk_buf_puts(&b, "{\"Nodes\":null,\"NodeNames\":[");
        for (size_t i = 0, k = 0; r >= 0 && i < d.n; i++)
                if (d.v[i].r >= 0 && (r = k++ ? mk_buf_putc(&b, ',') : 0) >= 0)
                        r = put_json_string(&b, d.cands[i].name);
        if (r >= 0)
                r = mk_buf_puts(&b, "],\"FailedNodes\":{");
        for (size_t i = 0, k = 0; r >= 0 && i < d.n; i++) {
                char msg[MK_ERROR_MSG_MAX + 16];
                if (d.v[i].r >= 0)
                        continue;
                const char *why = verdict_reason(&d, &d.v[i]);
                size_t len = strnlen(why, sizeof(msg) - sizeof("migkit: "));
                memcpy(msg, "migkit: ", sizeof("migkit: ") - 1);
                memcpy(msg + sizeof("migkit: ") - 1, why, len);
                msg[sizeof("migkit: ") - 1 + len] = 0;
                if ((r = k++ ? mk_buf_putc(&b, ',') : 0) >= 0 && (r = put_json_string(&b, d.cands[i].name)) >= 0 &&
                    (r = mk_buf_putc(&b, ':')) >= 0)
                        r = put_json_string(&b, msg);
        }
        if (r >= 0)
                r = mk_buf_puts(&b, "},\"Error\":\"\"}");
        filter_account(s, &d, t0);
        decisions_done(&d);
        if (r < 0) {
                mk_buf_done(&b);
                return NULL;
        }
        return mk_buf_take(&b);
}

static char *prioritize_text(struct mk_sched *s, const json_t *args, struct plain_names *pn) {
        atomic_fetch_add(&s->stats.prioritize, 1);
        char err[MK_ERROR_MSG_MAX];
        struct decisions d;
        if (decide(s, args, pn, false, &d, err, sizeof(err)) < 0) {
                atomic_fetch_add(&s->stats.errors, 1);
                return strdup("[]");
        }
        struct mk_buf b;
        mk_buf_init(&b, SIZE_MAX);
        int r = mk_buf_putc(&b, '[');
        for (size_t i = 0; r >= 0 && i < d.n; i++) {
                char tail[32];
                snprintf(tail, sizeof(tail), ",\"Score\":%d}", d.v[i].r >= 0 ? d.v[i].priority : 0);
                if ((r = mk_buf_puts(&b, i ? ",{\"Host\":" : "{\"Host\":")) >= 0 &&
                    (r = put_json_string(&b, d.cands[i].name)) >= 0)
                        r = mk_buf_puts(&b, tail);
        }
        if (r >= 0)
                r = mk_buf_putc(&b, ']');
        decisions_done(&d);
        if (r < 0) {
                mk_buf_done(&b);
                return NULL;
        }
        return mk_buf_take(&b);
}

char *mk_sched_filter_text(struct mk_sched *s, const json_t *args) {
        return filter_text(s, args, NULL);
}

char *mk_sched_prioritize_text(struct mk_sched *s, const json_t *args) {
        return prioritize_text(s, args, NULL);
}

int mk_sched_body_text(struct mk_sched *s, bool filter, const char *body, size_t len, size_t cap, char **ret,
                       struct mk_error *e) {
        struct plain_names pn = {0};
        json_t *args = NULL;
        char *copy = NULL;
        if (len <= cap && body && scan_names(body, len, &pn) && (copy = malloc(len + 1))) {
                /* jansson reads the rest, the array emptied to its length (positions in errors stay). */
                memcpy(copy, body, len);
                copy[len] = 0;
                memset(copy + pn.start + 1, ' ', pn.end - pn.start - 2);
                copy[pn.end - 1] = ']';
        } else
                plain_names_done(&pn);
        int r = mk_json_load(copy ? copy : body, len, cap, "request body", &args, e);
        free(copy);
        if (r < 0) {
                plain_names_done(&pn);
                return r;
        }
        struct plain_names *names = pn.cands ? &pn : NULL;
        *ret = filter ? filter_text(s, args, names) : prioritize_text(s, args, names);
        plain_names_done(&pn);
        json_decref(args);
        return 0;
}

int mk_bind_args_parse(const json_t *args, struct mk_bind_args *ret, struct mk_error *e) {
        struct {
                const char *key;
                char *buf;
                size_t size;
        } f[] = {
                {"PodName", ret->pod_name, sizeof(ret->pod_name)},
                {"PodNamespace", ret->pod_namespace, sizeof(ret->pod_namespace)},
                {"PodUID", ret->pod_uid, sizeof(ret->pod_uid)},
                {"Node", ret->node, sizeof(ret->node)},
        };
        struct mk_bind_args tmp = {0};
        char *bufs[] = {tmp.pod_name, tmp.pod_namespace, tmp.pod_uid, tmp.node};
        if (!json_is_object(args))
                return mk_error_set_field(e, -EINVAL, "ExtenderBindingArgs", "must be an object");
        for (size_t i = 0; i < ELEMENTSOF(f); i++) {
                const char *v = json_string_value(mk_json_get_ci(args, f[i].key));
                if (!v || !*v)
                        return mk_error_set_field(e, -EINVAL, f[i].key, "missing or not a string");
                if (strlen(v) >= f[i].size || !mk_json_token_ok(v) || strchr(v, '/') || strchr(v, '?') ||
                    strchr(v, '%') || strchr(v, '#'))
                        return mk_error_set_field(e, -EINVAL, f[i].key, "not a valid name");
                snprintf(bufs[i], f[i].size, "%s", v);
        }
        *ret = tmp;
        return 0;
}

json_t *mk_bind_object(const struct mk_bind_args *a) {
        return json_pack("{s:s, s:s, s:{s:s, s:s, s:s}, s:{s:s, s:s, s:s}}", "apiVersion", "v1", "kind", "Binding",
                         "metadata", "name", a->pod_name, "namespace", a->pod_namespace, "uid", a->pod_uid, "target",
                         "apiVersion", "v1", "kind", "Node", "name", a->node);
}

int mk_sched_reserve(struct mk_sched *s, const json_t *pod, const char *node, int64_t now, struct mk_claim *ret,
                     struct mk_error *e) {
        struct mk_claim *c = calloc(1, sizeof(*c));
        struct mk_pod_request *req = calloc(1, sizeof(*req));
        int r;
        if (!c || !req) {
                r = -ENOMEM;
                goto out;
        }
        r = mk_claim_from_pod(pod, c, e);
        if (r < 0)
                goto out;
        if (r > 0 && streq(c->node, node)) {
                *ret = *c; /* a retried bind: keep what was reserved */
                r = 0;
                goto out;
        }
        if ((r = mk_pod_request_parse(pod, s->cfg, req, e)) < 0)
                goto out;
        c->n_devices = 0;
        c->time = now;
        c->active = true;
        c->allocated = false;
        snprintf(c->node, sizeof(c->node), "%s", node);
        pthread_rwlock_wrlock(&s->lock);
        struct node_entry *n = table_get(&s->nodes, node);
        char reason[MK_ERROR_MSG_MAX];
        double score;
        struct scratch *sc = NULL;
        if (req->not_mig)
                r = mk_error_set(e, -ENOSPC, "pod asks %s other than mig", MK_ANN_VGPU_MODE);
        else if (!n)
                r = mk_error_set(e, -ENOENT, "node '%s' is not in migkit's cache", node);
        else if (!n->inv)
                r = mk_error_set(e, -ENOSPC, "node '%s': %s", node, n->reason);
        else if (req->n_containers == 0)
                r = 0;
        else if (!(sc = malloc(sizeof(*sc))))
                r = -ENOMEM;
        else if ((r = fit_pod(sc, n->inv, n->res.cpu_allocatable_milli ? &n->res : NULL, n->tables, n->reps, n->claims,
                              n->n_claims, req, c->uid, now, c, &score, reason, sizeof(reason))) < 0)
                r = mk_error_set(e, r, "node '%s': %s", node, reason);
        if (r >= 0 && c->n_devices > 0)
                r = pod_set(s, c, true, now);
        pthread_rwlock_unlock(&s->lock);
        free(sc);
        if (r >= 0)
                *ret = *c;
out:
        free(c);
        free(req);
        return r;
}

void mk_sched_unreserve(struct mk_sched *s, const char *uid) {
        pthread_rwlock_wrlock(&s->lock);
        struct pod_entry *p = table_get(&s->pods, uid);
        if (p && p->pending)
                pod_drop(s, uid);
        pthread_rwlock_unlock(&s->lock);
}
