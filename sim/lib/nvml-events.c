/* NVML's events: Xid and ECC event types, sets, and the wait that polls the
 * state file for events other processes raise (migkit-sim xid). */
#include <time.h>

#include "lib/nvml-call.h"

#define SIM_EVENT_POLL_MS 20
#define SIM_SUPPORTED_EVENTS (nvmlEventTypeXidCriticalError | nvmlEventTypeSingleBitEccError | \
                              nvmlEventTypeDoubleBitEccError)

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
        struct call c;

        CALL_BEGIN(&c, false);
        if (!set)
                return call_end(&c, NVML_ERROR_INVALID_ARGUMENT);
        nvmlEventSet_t s = calloc(1, sizeof(*s));
        if (!s)
                return call_end(&c, NVML_ERROR_MEMORY);
        s->magic = HANDLE_MAGIC;
        s->cursor = c.st->event_seq;
        if (!nvml_event_set_add(s)) {
                free(s);
                return call_end(&c, NVML_ERROR_MEMORY);
        }
        *set = s;
        return call_end(&c, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set) {
        struct call c;
        struct dev d;

        CALL_BEGIN(&c, false);
        nvmlReturn_t r = resolve_gpu(&c, device, &d);
        if (r == NVML_SUCCESS && !nvml_event_set_known(set))
                r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS && (eventTypes & ~(unsigned long long) SIM_SUPPORTED_EVENTS))
                r = NVML_ERROR_NOT_SUPPORTED;
        if (r == NVML_SUCCESS) {
                nvml_lock();
                struct event_reg *reg = &set->reg[d.index];
                if (reg->mask == 0)
                        reg->since = c.st->event_seq;
                reg->mask |= eventTypes;
                nvml_unlock();
        }
        return call_end(&c, r);
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes) {
        DEVICE_GETTER(resolve_gpu, eventTypes, true, SIM_SUPPORTED_EVENTS);
}

/* Whether a GPU registered in `set` has fallen off the bus. */
static bool set_has_lost_gpu(const struct sim_state *st, nvmlEventSet_t set) {
        bool lost = false;

        nvml_lock();
        for (size_t i = 0; i < st->n_gpus && i < SIM_MAX_GPUS; i++)
                lost = lost || (set->reg[i].mask && st->gpus[i].lost);
        nvml_unlock();
        return lost;
}

/* The first queued event for `set`, if any; called inside a session. */
static bool next_event(const struct sim_state *st, nvmlEventSet_t set, nvmlEventData_t *data) {
        bool found = false;

        nvml_lock();
        for (size_t i = 0; i < st->n_events && !found; i++) {
                const struct sim_event *e = &st->events[i];
                if (e->seq <= set->cursor || e->gpu >= SIM_MAX_GPUS)
                        continue;
                const struct event_reg *reg = &set->reg[e->gpu];
                if (!(reg->mask & e->type) || e->seq <= reg->since)
                        continue;
                set->cursor = e->seq;
                found = true;
                nvml_unlock();
                nvmlDevice_t dev = intern_device(e->gpu, SIM_ID_NONE, SIM_ID_NONE);
                nvml_lock();
                *data = (nvmlEventData_t) {
                        .device = dev,
                        .eventType = e->type,
                        .eventData = e->data,
                        .gpuInstanceId = e->gi,
                        .computeInstanceId = e->ci,
                };
        }
        nvml_unlock();
        return found;
}

static long long now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (long long) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
        struct call c;

        CALL_BEGIN(&c, false);
        if (!nvml_event_set_known(set) || !data)
                return call_end(&c, NVML_ERROR_INVALID_ARGUMENT);
        if (set_has_lost_gpu(c.st, set))
                return call_end(&c, NVML_ERROR_GPU_IS_LOST);
        if (next_event(c.st, set, data))
                return call_end(&c, NVML_SUCCESS);
        _cleanup_free_ char *path = strdup(c.path);
        call_end(&c, NVML_SUCCESS);
        if (!path)
                return NVML_ERROR_MEMORY;

        /* Poll the state file: events come from other processes. */
        long long deadline = now_ms() + timeoutms;
        for (;;) {
                long long left = deadline - now_ms();
                if (left <= 0)
                        return NVML_ERROR_TIMEOUT;
                struct timespec ts = { .tv_sec = 0, .tv_nsec = (long) MIN(left, SIM_EVENT_POLL_MS) * 1000000L };
                nanosleep(&ts, NULL);

                struct sim_session ss;
                if (sim_session_begin(&ss, path, false, true) < 0) {
                        report(sim_error_get());
                        return NVML_ERROR_UNKNOWN;
                }
                if (!nvml_event_set_known(set)) {
                        sim_session_end(&ss);
                        return NVML_ERROR_INVALID_ARGUMENT; /* freed meanwhile */
                }
                if (set_has_lost_gpu(ss.state, set)) {
                        sim_session_end(&ss);
                        return NVML_ERROR_GPU_IS_LOST;
                }
                bool found = next_event(ss.state, set, data);
                sim_session_end(&ss);
                if (found)
                        return NVML_SUCCESS;
        }
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
        struct call c;

        CALL_BEGIN(&c, false);
        bool ok = nvml_event_set_remove(set);
        if (ok)
                free(set);
        return call_end(&c, ok ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT);
}

