/* CUDA driver simulator: user objects (cuUserObjectCreate, Retain, Release)
 * and the references graphs hold to them (cuGraphRetainUserObject,
 * cuGraphReleaseUserObject). An object's destructor runs when its count
 * reaches 0, in the thread that dropped the last reference (the driver runs it
 * on a thread of its own; CU_USER_OBJECT_NO_DESTRUCTOR_SYNC is required as by
 * the driver). Destroying a graph releases its references; an instantiated
 * graph holds its own copy of them, as with the driver, so resources a library
 * ties to a captured graph live as long as the executable graph. */
#include <stdlib.h>

#include "cuda/internal.h"

#define MAGIC_USEROBJ 0x55534f31

struct cu_user_object {
        uint32_t magic;
        unsigned refs;
        void *ptr;
        CUhostFn destroy;
};

struct cu_user_ref {
        struct cu_user_object *obj;
        unsigned count;
        struct cu_user_ref *next;
};

static struct cu_user_object *as_obj(CUuserObject h) {
        struct cu_user_object *o = (struct cu_user_object *) h;
        return o && o->magic == MAGIC_USEROBJ ? o : NULL;
}

/* Drops count references; runs the destructor at 0 (without cu_lock held by this file). */
static void obj_release(struct cu_user_object *o, unsigned count) {
        pthread_mutex_lock(&cu_lock);
        bool last = o->refs <= count;
        o->refs = last ? 0 : o->refs - count;
        if (last)
                o->magic = 0;
        pthread_mutex_unlock(&cu_lock);
        if (last) {
                if (o->destroy)
                        o->destroy(o->ptr);
                free(o);
        }
}

CU_EXPORT CUresult cuUserObjectCreate(CUuserObject *object_out, void *ptr, CUhostFn destroy,
                                      unsigned int initialRefcount, unsigned int flags) {
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        if (!object_out || !destroy || initialRefcount == 0 || flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
                return CUDA_ERROR_INVALID_VALUE;
        struct cu_user_object *o = calloc(1, sizeof(*o));
        if (!o)
                return CUDA_ERROR_OUT_OF_MEMORY;
        *o = (struct cu_user_object) { MAGIC_USEROBJ, initialRefcount, ptr, destroy };
        *object_out = (CUuserObject) o;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuUserObjectRetain(CUuserObject object, unsigned int count) {
        pthread_mutex_lock(&cu_lock);
        struct cu_user_object *o = as_obj(object);
        if (o && count)
                o->refs += count;
        pthread_mutex_unlock(&cu_lock);
        return o && count ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CU_EXPORT CUresult cuUserObjectRelease(CUuserObject object, unsigned int count) {
        pthread_mutex_lock(&cu_lock);
        struct cu_user_object *o = as_obj(object);
        bool ok = o && count && count <= o->refs;
        pthread_mutex_unlock(&cu_lock);
        if (!ok)
                return CUDA_ERROR_INVALID_VALUE;
        obj_release(o, count);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuGraphRetainUserObject(CUgraph graph, CUuserObject object, unsigned int count, unsigned int flags) {
        struct cu_graph *g = (struct cu_graph *) graph;
        if (!g || g->magic != MAGIC_GRAPH || !count || (flags & ~(unsigned) CU_GRAPH_USER_OBJECT_MOVE))
                return CUDA_ERROR_INVALID_VALUE;
        struct cu_user_ref *ref = calloc(1, sizeof(*ref));
        if (!ref)
                return CUDA_ERROR_OUT_OF_MEMORY;
        pthread_mutex_lock(&cu_lock);
        struct cu_user_object *o = as_obj(object);
        bool ok = o && (!(flags & CU_GRAPH_USER_OBJECT_MOVE) || count <= o->refs);
        if (ok) {
                if (!(flags & CU_GRAPH_USER_OBJECT_MOVE)) /* MOVE: the caller's references become the graph's */
                        o->refs += count;
                *ref = (struct cu_user_ref) { o, count, g->urefs };
                g->urefs = ref;
        }
        pthread_mutex_unlock(&cu_lock);
        if (!ok)
                free(ref);
        return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CU_EXPORT CUresult cuGraphReleaseUserObject(CUgraph graph, CUuserObject object, unsigned int count) {
        struct cu_graph *g = (struct cu_graph *) graph;
        if (!g || g->magic != MAGIC_GRAPH || !count)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        struct cu_user_ref **p = &g->urefs;
        while (*p && ((*p)->obj != (struct cu_user_object *) object || (*p)->count < count))
                p = &(*p)->next;
        struct cu_user_ref *ref = *p;
        if (ref) {
                ref->count -= count;
                if (ref->count == 0)
                        *p = ref->next;
        }
        pthread_mutex_unlock(&cu_lock);
        if (!ref)
                return CUDA_ERROR_INVALID_VALUE;
        struct cu_user_object *o = ref->obj;
        if (ref->count == 0)
                free(ref);
        obj_release(o, count);
        return CUDA_SUCCESS;
}

void cu_graph_release_user_objects(struct cu_graph *g) {
        struct cu_user_ref *ref = g->urefs;
        g->urefs = NULL;
        while (ref) {
                struct cu_user_ref *next = ref->next;
                obj_release(ref->obj, ref->count);
                free(ref);
                ref = next;
        }
}

CUresult cu_graph_copy_user_objects(struct cu_graph *dst, const struct cu_graph *src) {
        pthread_mutex_lock(&cu_lock);
        for (const struct cu_user_ref *r = src->urefs; r; r = r->next) {
                struct cu_user_ref *c = calloc(1, sizeof(*c));
                if (!c) {
                        pthread_mutex_unlock(&cu_lock);
                        return CUDA_ERROR_OUT_OF_MEMORY;
                }
                *c = (struct cu_user_ref) { r->obj, r->count, dst->urefs };
                r->obj->refs += r->count;
                dst->urefs = c;
        }
        pthread_mutex_unlock(&cu_lock);
        return CUDA_SUCCESS;
}
