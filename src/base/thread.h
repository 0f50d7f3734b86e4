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
