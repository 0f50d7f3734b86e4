/* Small language helpers shared by every module: cleanup attributes, ownership
 * transfer, array sizes. GNU C11 (gcc and clang). */
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <errno.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _unused_ __attribute__((unused))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _wur_ __attribute__((warn_unused_result))
#define _nonnull_(...) __attribute__((nonnull(__VA_ARGS__)))
#define _noreturn_ __attribute__((noreturn))

#define ELEMENTSOF(x) (sizeof(x) / sizeof((x)[0]))

/* Hand ownership on: returns the pointer and clears the variable so its
 * cleanup attribute no longer frees it. */
#define TAKE_PTR(p)                     \
        ({                              \
                typeof(p) _p_ = (p);    \
                (p) = NULL;             \
                _p_;                    \
        })

#define TAKE_FD(fd)                     \
        ({                              \
                int _fd_ = (fd);        \
                (fd) = -1;              \
                _fd_;                   \
        })

static inline void freep(void *p) {
        free(*(void **) p);
}
#define _cleanup_free_ _cleanup_(freep)

static inline void fclosep(FILE **f) {
        if (*f)
                fclose(*f);
}
#define _cleanup_fclose_ _cleanup_(fclosep)

static inline void closep(int *fd) {
        if (*fd >= 0) {
                int saved = errno;
                close(*fd);
                errno = saved;
        }
}
#define _cleanup_close_ _cleanup_(closep)

/* Frees a NULL-terminated array of strings and the array. Accepts NULL. */
static inline char **strv_free(char **l) {
        if (l)
                for (char **i = l; *i; i++)
                        free(*i);
        free(l);
        return NULL;
}
static inline void strv_freep(char ***l) {
        strv_free(*l);
}
#define _cleanup_strv_free_ _cleanup_(strv_freep)

/* Defines xp(T **p) { x(*p); } for a destructor that returns NULL. */
#define DEFINE_TRIVIAL_CLEANUP_FUNC(type, func)         \
        static inline void func##p(type *p) {           \
                if (*p)                                 \
                        (void) func(*p);                \
        }

#define streq(a, b) (strcmp((a), (b)) == 0)
#define strneq(a, b, n) (strncmp((a), (b), (n)) == 0)
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* Negative errno from a libc call that sets errno; never 0. */
static inline int negative_errno(void) {
        return errno > 0 ? -errno : -EIO;
}

/* The to_string()/from_string() pair of an enum with a string table (STYLE 13):
 * to_string gives NULL outside [0, max), from_string `invalid` for an unknown
 * or NULL name. */
#define MK_DEFINE_STRING_TABLE_LOOKUP(name, type, table, max, invalid)            \
        const char *name##_to_string(type v) {                                    \
                return v >= 0 && v < (max) ? table[v] : NULL;                     \
        }                                                                         \
        type name##_from_string(const char *s) {                                  \
                for (int i = 0; s && i < (max); i++)                              \
                        if (table[i] && streq(s, table[i]))                       \
                                return (type) i;                                  \
                return invalid;                                                   \
        }                                                                         \
        struct mk_string_table_semicolon_##name
