/* Small pieces of pthread setup the daemons' threads share. */
#pragma once

#include <pthread.h>
#include <time.h>

/* A condition variable whose timed waits run on CLOCK_MONOTONIC (a
 * wall-clock step neither shortens nor stretches them). */
static inline void mk_cond_init_monotonic(pthread_cond_t *c) {
        pthread_condattr_t attr;
        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        pthread_cond_init(c, &attr);
        pthread_condattr_destroy(&attr);
}

/* The CLOCK_MONOTONIC time `ms` from now, for a timed wait on a condition
 * variable made by mk_cond_init_monotonic(). */
static inline struct timespec mk_deadline_in_ms(unsigned ms) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += (time_t) (ms / 1000);
        ts.tv_nsec += (long) (ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
        }
        return ts;
}
