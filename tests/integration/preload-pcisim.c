/* LD_PRELOAD shim for test-driverless.sh: makes a fixture sysfs tree behave
 * like GA100 GPUs across a function reset, and kills the process after its
 * Nth mutating PCI call, as the NVML simulator's `fault crash-after` does.
 *   MIGKIT_PCISIM_RESET=1          a write to <function>/reset applies the
 *                                  MIG mode request bits of its resource0 to
 *                                  the mode register (what a reset does)
 *   MIGKIT_PCISIM_CRASH_AFTER=N    SIGKILL right after the Nth mutation: an
 *                                  msync (the BAR0 mode request) or a reset
 * Register offsets: src/pci/pci.h. Test code only; never shipped. */
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define BAR0_MIG_MODE 0x001404u
#define BAR0_MIG_REQUEST 0x118F78u

static unsigned long mutations;

static void mutated(void) {
        const char *v = getenv("MIGKIT_PCISIM_CRASH_AFTER");
        unsigned long n = v ? strtoul(v, NULL, 10) : 0;
        if (++mutations == n && n > 0)
                raise(SIGKILL);
}

static int reset_path(int fd, char *dir, size_t size) {
        char link[64], path[PATH_MAX];
        snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
        ssize_t k = readlink(link, path, sizeof(path) - 1);
        if (k <= 6)
                return 0;
        path[k] = 0;
        if (strcmp(path + k - 6, "/reset") != 0)
                return 0;
        path[k - 6] = 0;
        snprintf(dir, size, "%s", path);
        return 1;
}

static void emulate_reset(const char *dir) {
        char p[PATH_MAX + 16];
        snprintf(p, sizeof(p), "%s/resource0", dir);
        int fd = open(p, O_RDWR | O_CLOEXEC);
        if (fd < 0)
                return;
        uint32_t req = 0, mode = 0;
        if (pread(fd, &req, 4, BAR0_MIG_REQUEST) == 4 && pread(fd, &mode, 4, BAR0_MIG_MODE) == 4) {
                if ((req & 0xC000u) == 0xC000u)
                        mode |= 0x8000u;
                else if ((req & 0xC000u) == 0x8000u)
                        mode &= ~0x8000u;
                (void) !pwrite(fd, &mode, 4, BAR0_MIG_MODE);
        }
        close(fd);
}

ssize_t write(int fd, const void *buf, size_t n) {
        static ssize_t (*real)(int, const void *, size_t);
        if (!real)
                real = (ssize_t (*)(int, const void *, size_t)) dlsym(RTLD_NEXT, "write");
        char dir[PATH_MAX];
        int is_reset = fd > 2 && reset_path(fd, dir, sizeof(dir));
        ssize_t k = real(fd, buf, n);
        if (is_reset && k > 0) {
                const char *v = getenv("MIGKIT_PCISIM_RESET");
                if (v && strcmp(v, "1") == 0)
                        emulate_reset(dir);
                mutated();
        }
        return k;
}

int msync(void *addr, size_t len, int flags) {
        static int (*real)(void *, size_t, int);
        if (!real)
                real = (int (*)(void *, size_t, int)) dlsym(RTLD_NEXT, "msync");
        int r = real(addr, len, flags);
        mutated();
        return r;
}
