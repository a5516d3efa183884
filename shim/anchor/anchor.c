/*
 * The lower half's anchor: the first object loaded into the MPI library's link-map namespace.
 *
 * Everything the namespace loads after it resolves symbols through it first, so it can make the
 * whole namespace disposable (docs/lower-half.md):
 *   - dlopen() never pins: RTLD_NODELETE is dropped (UCX loads its modules and libucm with it)
 *     and every handle is remembered, so mpicr_anchor_close_all() can close what the library
 *     never closes itself. Once closed, glibc unloads the namespace and reuses it (and its
 *     static TLS) for the next generation.
 *   - malloc and friends come from a private heap of mmap'd slabs, and every mmap the libraries
 *     make (and every thread stack they need) is recorded, so after unloading the shim unmaps
 *     what the libraries leaked: nothing of a released generation stays in the image.
 * Written in C because it runs inside the namespace, under that namespace's own libc, before
 * anything else is there; it must not bring a second runtime (Rust's std) into it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* ---- raw system calls: the anchor's own mmap/munmap must not call the wrappers below ---- */

/* syscall() returns -1 and sets errno on failure. */
static void *raw_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    long r = syscall(SYS_mmap, addr, len, prot, flags, fd, off);
    return r == -1 ? MAP_FAILED : (void *)r;
}

static int raw_munmap(void *addr, size_t len) { return (int)syscall(SYS_munmap, addr, len); }

/* ---- the record of mappings made for or by the namespace ----
 * A flat array in raw-mmap'd memory, under one lock. Mappings are few (slabs, thread stacks,
 * the libraries' own regions), so linear searches are cheap. */

struct region {
    uintptr_t start, end;
};

static pthread_mutex_t regions_lock = PTHREAD_MUTEX_INITIALIZER;
static struct region *regions;
static size_t nregions, capregions;
static struct region regions_table; /* the table's own mapping, returned last */

static int regions_grow(void) {
    size_t cap = capregions ? capregions * 2 : 1024;
    size_t bytes = cap * sizeof(struct region);
    struct region *n = raw_mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (n == MAP_FAILED) return -1;
    if (regions) {
        memcpy(n, regions, nregions * sizeof(struct region));
        raw_munmap(regions, capregions * sizeof(struct region));
    }
    regions = n;
    capregions = cap;
    regions_table.start = (uintptr_t)n;
    regions_table.end = (uintptr_t)n + bytes;
    return 0;
}

/* Adds [start, end). Caller holds regions_lock. */
static void regions_add_locked(uintptr_t start, uintptr_t end) {
    if (nregions == capregions && regions_grow() != 0) return; /* out of memory: it leaks */
    regions[nregions].start = start;
    regions[nregions].end = end;
    nregions++;
}

static void regions_add(void *addr, size_t len) {
    pthread_mutex_lock(&regions_lock);
    regions_add_locked((uintptr_t)addr, (uintptr_t)addr + len);
    pthread_mutex_unlock(&regions_lock);
}

/* Removes [start, end) from the record, splitting regions it cuts. */
static void regions_remove(uintptr_t start, uintptr_t end) {
    pthread_mutex_lock(&regions_lock);
    for (size_t i = 0; i < nregions;) {
        struct region r = regions[i];
        if (r.end <= start || r.start >= end) {
            i++;
            continue;
        }
        regions[i] = regions[--nregions];
        if (r.start < start) regions_add_locked(r.start, start);
        if (r.end > end) regions_add_locked(end, r.end);
    }
    pthread_mutex_unlock(&regions_lock);
}

/* ---- mmap family, as the namespace's libraries see it ---- */

EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    void *p = raw_mmap(addr, len, prot, flags, fd, off);
    if (p == MAP_FAILED) return p;
    if (flags & MAP_FIXED) regions_remove((uintptr_t)p, (uintptr_t)p + len);
    regions_add(p, len);
    return p;
}

EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    return mmap(addr, len, prot, flags, fd, off);
}

EXPORT int munmap(void *addr, size_t len) {
    if (raw_munmap(addr, len) != 0) return -1; /* syscall() set errno */
    size_t page = 4096;
    regions_remove((uintptr_t)addr, ((uintptr_t)addr + len + page - 1) & ~(uintptr_t)(page - 1));
    return 0;
}

EXPORT void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...) {
    void *new_addr = NULL;
    if (flags & MREMAP_FIXED) {
        __builtin_va_list ap;
        __builtin_va_start(ap, flags);
        new_addr = __builtin_va_arg(ap, void *);
        __builtin_va_end(ap);
    }
    long r = syscall(SYS_mremap, old, old_len, new_len, flags, new_addr);
    if (r == -1) return MAP_FAILED; /* syscall() set errno */
    regions_remove((uintptr_t)old, (uintptr_t)old + old_len);
    regions_add((void *)r, new_len);
    return (void *)r;
}

/* ---- the private heap ----
 * Size classes up to 64 KiB carved from 1 MiB slabs, each block behind a 16-byte header;
 * larger blocks are mappings of their own. One lock: the MPI library allocates mostly at
 * setup (it pools its requests), so contention is not a concern. */

#define HDR 16
#define SLAB (1u << 20)
#define NCLASS 20
#define MAX_SMALL (64u << 10)

enum kind { SMALL = 1, LARGE = 2, ALIGNED = 3 };

struct hdr {
    size_t size; /* SMALL: class size; LARGE: mapping length; ALIGNED: unused */
    size_t kind; /* enum kind, or for ALIGNED: (offset back to the real block << 2) | ALIGNED */
};

static const size_t class_size[NCLASS] = {16,   32,   48,   64,    96,    128,   192,   256,   384,   512,
                                           1024, 2048, 4096, 8192, 12288, 16384, 24576, 32768, 49152, 65536};

static pthread_mutex_t heap_lock = PTHREAD_MUTEX_INITIALIZER;
static void *free_list[NCLASS];
static char *slab_next, *slab_end;

static int class_of(size_t n) {
    for (int c = 0; c < NCLASS; c++)
        if (n <= class_size[c]) return c;
    return -1;
}

static void *alloc_block(size_t n) {
    int c = class_of(n);
    if (c < 0) {
        size_t len = (n + HDR + 4095) & ~(size_t)4095;
        char *m = raw_mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return NULL;
        regions_add(m, len);
        struct hdr *h = (struct hdr *)m;
        h->size = len;
        h->kind = LARGE;
        return m + HDR;
    }
    pthread_mutex_lock(&heap_lock);
    char *b = free_list[c];
    if (b) {
        free_list[c] = *(void **)b;
    } else {
        size_t need = class_size[c] + HDR;
        if (slab_next == NULL || (size_t)(slab_end - slab_next) < need) {
            char *s = raw_mmap(NULL, SLAB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (s == MAP_FAILED) {
                pthread_mutex_unlock(&heap_lock);
                return NULL;
            }
            regions_add(s, SLAB);
            slab_next = s;
            slab_end = s + SLAB;
        }
        struct hdr *h = (struct hdr *)slab_next;
        h->size = class_size[c];
        h->kind = SMALL;
        b = slab_next + HDR;
        slab_next += need;
    }
    pthread_mutex_unlock(&heap_lock);
    return b;
}

static struct hdr *header(void *p) { return (struct hdr *)((char *)p - HDR); }

/* The block that holds p, and p's usable size. */
static void *block_of(void *p, size_t *usable) {
    struct hdr *h = header(p);
    if ((h->kind & 3) == ALIGNED) {
        char *base = (char *)p - (h->kind >> 2);
        size_t base_usable;
        block_of(base, &base_usable);
        *usable = base_usable - (size_t)((char *)p - base);
        return base;
    }
    *usable = (h->kind == LARGE) ? h->size - HDR : h->size;
    return p;
}

EXPORT void *malloc(size_t n) {
    void *p = alloc_block(n ? n : 1);
    if (!p) errno = ENOMEM;
    return p;
}

EXPORT void free(void *p) {
    if (!p) return;
    size_t usable;
    p = block_of(p, &usable);
    struct hdr *h = header(p);
    if (h->kind == LARGE) {
        size_t len = h->size;
        raw_munmap(h, len);
        regions_remove((uintptr_t)h, (uintptr_t)h + len);
        return;
    }
    int c = class_of(h->size);
    pthread_mutex_lock(&heap_lock);
    *(void **)p = free_list[c];
    free_list[c] = p;
    pthread_mutex_unlock(&heap_lock);
}

EXPORT void *calloc(size_t n, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = malloc(total);
    if (p) memset(p, 0, total);
    return p;
}

EXPORT void *realloc(void *p, size_t n) {
    if (!p) return malloc(n);
    if (n == 0) {
        free(p);
        return NULL;
    }
    size_t usable;
    block_of(p, &usable);
    if (n <= usable) return p;
    void *q = malloc(n);
    if (!q) return NULL;
    memcpy(q, p, usable);
    free(p);
    return q;
}

EXPORT void *reallocarray(void *p, size_t n, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(p, total);
}

EXPORT void *memalign(size_t align, size_t n) {
    if (align <= HDR) return malloc(n);
    if (align & (align - 1)) {
        errno = EINVAL;
        return NULL;
    }
    char *base = malloc(n + align + HDR);
    if (!base) return NULL;
    uintptr_t a = ((uintptr_t)base + HDR + align - 1) & ~(uintptr_t)(align - 1);
    struct hdr *h = header((void *)a);
    h->size = 0;
    h->kind = (((size_t)(a - (uintptr_t)base)) << 2) | ALIGNED;
    return (void *)a;
}

EXPORT int posix_memalign(void **out, size_t align, size_t n) {
    if (align < sizeof(void *) || (align & (align - 1))) return EINVAL;
    void *p = memalign(align, n);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}

EXPORT void *aligned_alloc(size_t align, size_t n) { return memalign(align, n); }
EXPORT void *valloc(size_t n) { return memalign(4096, n); }
EXPORT void *pvalloc(size_t n) { return memalign(4096, (n + 4095) & ~(size_t)4095); }

EXPORT size_t malloc_usable_size(void *p) {
    if (!p) return 0;
    size_t usable;
    block_of(p, &usable);
    return usable;
}

/* ---- threads: stacks the namespace's libc would otherwise cache and leak ---- */

EXPORT int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg) {
    static int (*real)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
    if (!real) real = (int (*)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *))dlsym(RTLD_NEXT, "pthread_create");
    void *stack = NULL;
    size_t size = 0;
    if (attr && pthread_attr_getstack(attr, &stack, &size) == 0 && stack) return real(t, attr, fn, arg);
    pthread_attr_t a;
    if (attr) {
        memcpy(&a, attr, sizeof a);
        pthread_attr_getstacksize(attr, &size);
    } else {
        pthread_attr_init(&a);
    }
    if (size < (2u << 20)) size = 8u << 20;
    size = (size + 4095) & ~(size_t)4095;
    char *m = raw_mmap(NULL, size + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (m == MAP_FAILED) return EAGAIN;
    syscall(SYS_mprotect, m, 4096, PROT_NONE); /* guard page */
    regions_add(m, size + 4096);
    pthread_attr_setstack(&a, m + 4096, size);
    int r = real(t, &a, fn, arg);
    if (!attr) pthread_attr_destroy(&a);
    return r;
}

/* Makes this namespace's libc know that the process has threads. glibc's mutexes skip the
   atomic lock and the futex wake while their libc has never created a thread
   (__libc_single_threaded), and each libc copy keeps that flag for itself: threads created
   through another copy do not clear it. The program's threads call into this libc too (the
   gate lets one at a time into the library, not into libc), so it must never believe it is
   alone. One short thread created through it clears the flag for good. */
static void *no_op(void *arg) { return arg; }

EXPORT int mpicr_anchor_mark_threaded(void) {
    pthread_t t;
    int r = pthread_create(&t, NULL, no_op, NULL);
    if (r != 0) return r;
    return pthread_join(t, NULL);
}

/* ---- dlopen: nothing pins itself, and everything opened can be closed ---- */

static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;
static void **handles;
static size_t nhandles, caphandles;

EXPORT void *dlopen(const char *file, int flags) {
    static void *(*real)(const char *, int);
    if (!real) real = (void *(*)(const char *, int))dlsym(RTLD_NEXT, "dlopen");
    void *h = real(file, flags & ~RTLD_NODELETE);
    if (h && file && !(flags & RTLD_NOLOAD)) {
        pthread_mutex_lock(&handles_lock);
        if (nhandles == caphandles) {
            size_t cap = caphandles ? caphandles * 2 : 256;
            void **n = raw_mmap(NULL, cap * sizeof(void *), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (n != MAP_FAILED) {
                if (handles) {
                    memcpy(n, handles, nhandles * sizeof(void *));
                    raw_munmap(handles, caphandles * sizeof(void *));
                }
                handles = n;
                caphandles = cap;
            }
        }
        if (nhandles < caphandles) handles[nhandles++] = h;
        pthread_mutex_unlock(&handles_lock);
    } else if (h && file && (flags & RTLD_NOLOAD)) {
        /* A NOLOAD open still takes a reference; give it back at once unless asked to pin,
           which is exactly what this anchor refuses. */
        if (flags & RTLD_NODELETE) dlclose(h);
    }
    return h;
}

/* Closes every handle the namespace's libraries opened and never closed (newest first).
   Returns how many were closed. */
EXPORT int mpicr_anchor_close_all(void) {
    int n = 0;
    pthread_mutex_lock(&handles_lock);
    while (nhandles > 0) {
        void *h = handles[--nhandles];
        pthread_mutex_unlock(&handles_lock);
        dlclose(h);
        n++;
        pthread_mutex_lock(&handles_lock);
    }
    if (handles) raw_munmap(handles, caphandles * sizeof(void *));
    handles = NULL;
    caphandles = 0;
    pthread_mutex_unlock(&handles_lock);
    return n;
}

/* The mappings to remove once the namespace is unloaded: copies up to `max` regions into
   `out` (pairs of start, end) and returns how many there are in all, the record's own table
   last. The caller unmaps them after dlclose of the anchor: no code of the namespace runs
   then. */
EXPORT size_t mpicr_anchor_regions(uintptr_t *out, size_t max) {
    pthread_mutex_lock(&regions_lock);
    size_t total = nregions + (regions ? 1 : 0);
    size_t i = 0;
    for (; i < nregions && i < max; i++) {
        out[2 * i] = regions[i].start;
        out[2 * i + 1] = regions[i].end;
    }
    if (regions && i < max) {
        out[2 * i] = regions_table.start;
        out[2 * i + 1] = regions_table.end;
    }
    pthread_mutex_unlock(&regions_lock);
    return total;
}

