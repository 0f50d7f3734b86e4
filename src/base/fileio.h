/* Whole files: a read bounded by a cap and an atomic replace. Every module
 * that reads a config, state or sysfs file, or writes one a reader may see
 * half-way, goes through these (STYLE.md habits 3 and 11). */
#pragma once

#include <stddef.h>
#include <sys/types.h>

#include "base/macro.h"

struct mk_error;

/* Largest sysfs attribute we read: one page, as the kernel's sysfs show()
 * callbacks fill at most PAGE_SIZE (Documentation/filesystems/sysfs.rst). */
#define MK_MAX_SYSFS_BYTES 4096

/* Reads the whole of `path` ("-" reads stdin) into a malloc'd buffer, with a
 * NUL after the last byte (the content may hold NUL bytes too). Only a
 * regular file (or a link to one) is read: it is opened non-blocking and
 * anything else (a FIFO, a device, a socket) is refused at once, -EINVAL
 * "'path' ... it is a FIFO, not a regular file" (-EISDIR for a directory),
 * so a file put in our way never blocks a daemon. Errors: -E2BIG "'path'
 * is larger than N bytes" when over cap; the open/read errno with the path
 * in the message. ret_* are written only on success; ret_len may be NULL. */
int mk_read_file(const char *path, size_t cap, char **ret_data, size_t *ret_len, struct mk_error *e)
        _nonnull_(1, 3) _wur_;

/* "a FIFO", "a directory", ... for a message about st_mode. */
const char *mk_file_type_name(mode_t mode);

/* mk_read_file() of an open fd, from its current offset to its end; `name`
 * stands for it in the error messages. The fd stays open. */
int mk_read_fd(int fd, const char *name, size_t cap, char **ret_data, size_t *ret_len, struct mk_error *e)
        _nonnull_(2, 4) _wur_;

/* Reads a sysfs attribute (at most MK_MAX_SYSFS_BYTES) and strips trailing
 * newlines and blanks. Returns a malloc'd string in *ret_value; errors as
 * mk_read_file(). */
int mk_read_sysfs_attr(const char *path, char **ret_value, struct mk_error *e) _nonnull_(1, 2) _wur_;

/* Reads a small text file (state, markers) of at most `cap` bytes: -EINVAL
 * ("'path' is corrupt") when it holds a NUL byte; trailing newlines and
 * blanks are dropped. *ret (malloc'd) is written only on success; errors
 * otherwise as mk_read_file(). */
int mk_read_text_file(const char *path, size_t cap, char **ret, struct mk_error *e) _nonnull_(1, 3) _wur_;

/* Replaces `path` atomically: a temporary file beside it named
 * "<path>.tmp.<pid>.<8 hex digits>" (so that mk_lock_for_write() can
 * recognise and remove the ones a crash left), written, given `mode`, fsync'ed, renamed
 * over `path`, then the directory fsync'ed. A reader sees the old content
 * or the new, never a part. On failure the temporary file is removed,
 * `path` is untouched and the message names the path and the step
 * ("(write)", "(rename)", ...). A `path` that exists and is neither a
 * regular file nor a symbolic link (a directory, a device, a FIFO) is not
 * replaced: -EISDIR or -EEXIST. */
int mk_write_file_atomic(const char *path, const void *data, size_t len, mode_t mode, struct mk_error *e)
        _nonnull_(1) _wur_;

/* The suffix mk_write_file_atomic() puts after the target's name. */
#define MK_TEMP_FILE_INFIX ".tmp."

/* For a file that only we write (a state file): takes the writers' lock, an
 * exclusive flock on "<path>.lock" (created 0644 beside it), waiting for it,
 * then removes the temporary files mk_write_file_atomic() left beside `path`
 * when a writer died before its rename (SIGKILL): under the lock no live
 * writer has one. Every writer of `path` must write it under this lock.
 * Returns the number of files removed; the lock's descriptor in *ret_fd
 * (closing it releases the lock), written only on success. */
int mk_lock_for_write(const char *path, int *ret_fd, struct mk_error *e) _nonnull_(1, 2) _wur_;

/* mkdir -p: creates the missing components of `dir` with `mode`. -ENOTDIR
 * when it exists but is not a directory; mkdir's errno otherwise. */
int mk_mkdir_parents(const char *dir, mode_t mode, struct mk_error *e) _nonnull_(1) _wur_;

/* fsync()s the directory that holds `path`, so a rename or unlink in it is
 * durable. 0 or -errno. */
int mk_fsync_parent_dir(const char *path) _nonnull_(1) _wur_;
