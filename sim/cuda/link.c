/* CUDA driver simulator: JIT linking (cuLink*). Inputs (PTX, cubins, fat
 * binaries, objects, libraries) are accepted and not compiled; the linked
 * image is a small placeholder that cuModuleLoadData accepts like any image
 * (images are not parsed: every function name exists). */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda/internal.h"

#define MAGIC_LINK 0x4c4e4b31

struct cu_link {
        uint32_t magic;
        unsigned inputs;
        unsigned char image[64]; /* what cuLinkComplete hands out: an ELF header's first bytes */
};

/* The log buffers a caller passes get an empty log. */
static void empty_logs(unsigned n, const CUjit_option *options, void **values) {
        size_t info = 0, error = 0;
        if (!options || !values || n > 64)
                return;
        for (unsigned i = 0; i < n; i++) {
                if (options[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES)
                        info = (size_t) (uintptr_t) values[i];
                else if (options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
                        error = (size_t) (uintptr_t) values[i];
        }
        for (unsigned i = 0; i < n; i++) {
                if (options[i] == CU_JIT_INFO_LOG_BUFFER && values[i] && info > 0)
                        ((char *) values[i])[0] = '\0';
                else if (options[i] == CU_JIT_ERROR_LOG_BUFFER && values[i] && error > 0)
                        ((char *) values[i])[0] = '\0';
        }
}

static struct cu_link *as_link(CUlinkState h) {
        struct cu_link *l = (struct cu_link *) h;
        return l && l->magic == MAGIC_LINK ? l : NULL;
}

static bool input_type_ok(CUjitInputType type) {
        return type == CU_JIT_INPUT_CUBIN || type == CU_JIT_INPUT_PTX || type == CU_JIT_INPUT_FATBINARY ||
               type == CU_JIT_INPUT_OBJECT || type == CU_JIT_INPUT_LIBRARY;
}

CU_EXPORT CUresult cuLinkCreate_v2(unsigned int numOptions, CUjit_option *options, void **optionValues,
                                   CUlinkState *stateOut) {
        struct cu_ctx *c;
        CUresult r = cu_ctx_or_current(NULL, &c);
        if (r != CUDA_SUCCESS)
                return r;
        if (!stateOut || (numOptions && (!options || !optionValues)))
                return CUDA_ERROR_INVALID_VALUE;
        struct cu_link *l = calloc(1, sizeof(*l));
        if (!l)
                return CUDA_ERROR_OUT_OF_MEMORY;
        l->magic = MAGIC_LINK;
        memcpy(l->image, "\x7f" "ELF\x02\x01\x01\x33", 8);
        empty_logs(numOptions, options, optionValues);
        *stateOut = (CUlinkState) l;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void *data, size_t size, const char *name,
                                    unsigned int numOptions, CUjit_option *options, void **optionValues) {
        (void) name;
        struct cu_link *l = as_link(state);
        if (!l)
                return CUDA_ERROR_INVALID_HANDLE;
        if (!data || size == 0 || !input_type_ok(type) || (numOptions && (!options || !optionValues)))
                return CUDA_ERROR_INVALID_VALUE;
        empty_logs(numOptions, options, optionValues);
        l->inputs++;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char *path, unsigned int numOptions,
                                    CUjit_option *options, void **optionValues) {
        struct stat st;
        struct cu_link *l = as_link(state);
        if (!l)
                return CUDA_ERROR_INVALID_HANDLE;
        if (!path || !input_type_ok(type) || (numOptions && (!options || !optionValues)))
                return CUDA_ERROR_INVALID_VALUE;
        int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0)
                return CUDA_ERROR_FILE_NOT_FOUND;
        bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
        close(fd);
        if (!ok)
                return CUDA_ERROR_INVALID_IMAGE;
        empty_logs(numOptions, options, optionValues);
        l->inputs++;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuLinkComplete(CUlinkState state, void **cubinOut, size_t *sizeOut) {
        struct cu_link *l = as_link(state);
        if (!l)
                return CUDA_ERROR_INVALID_HANDLE;
        if (!cubinOut || !sizeOut || l->inputs == 0)
                return CUDA_ERROR_INVALID_VALUE;
        *cubinOut = l->image; /* owned by the link state, as with the driver */
        *sizeOut = sizeof(l->image);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuLinkDestroy(CUlinkState state) {
        struct cu_link *l = as_link(state);
        if (!l)
                return CUDA_ERROR_INVALID_HANDLE;
        l->magic = 0;
        free(l);
        return CUDA_SUCCESS;
}
