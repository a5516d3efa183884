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
#include <sys/stat.h>
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
 * larger blocks are mappings of their own. One lock for the shared free lists and slabs, and
 * in front of it a small cache of free blocks per thread (as glibc's tcache): MPICH allocates
 * and frees a block or two in many calls (a short MPI_Allreduce: one of each), and the lock's
 * two atomic operations per malloc and per free were most of what the shim added to such a
 * call. A thread that ends leaves its cached blocks unused (at most TCACHE_MAX blocks of each
 * class up to 1 KiB, ~46 KiB); they go with the slabs when the namespace is
 * released. */

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

#define TCACHE_CLASSES 11 /* the classes up to 1 KiB (class_size[10]) */
#define TCACHE_MAX 16
/* This thread's cached free blocks of each small class (a list through their first word).
 * Dynamic TLS of this namespace's copy of the anchor: a new generation starts empty. */
static __thread struct {
    void *head[TCACHE_CLASSES];
    unsigned char count[TCACHE_CLASSES];
} tcache;

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
    if (c < TCACHE_CLASSES && tcache.head[c]) {
        void *t = tcache.head[c];
        tcache.head[c] = *(void **)t;
        tcache.count[c]--;
        return t;
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
    if (c < TCACHE_CLASSES && tcache.count[c] < TCACHE_MAX) {
        *(void **)p = tcache.head[c];
        tcache.head[c] = p;
        tcache.count[c]++;
        return;
    }
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

/* ---- the environment: the namespace's own copy ----
 * At load, the namespace's libc gets the program's `environ` array itself. Its setenv then
 * builds a new array from its own heap, but unsetenv and putenv change the shared one in place
 * (Open MPI and PMIx set and unset their variables as they initialise and finalize), and the
 * base namespace's setenv may free what this copy still points to. A deep copy in the anchor's
 * heap, made before the library loads, keeps each side to its own. */
extern char **environ;

EXPORT int mpicr_anchor_private_environ(void) {
    size_t n = 0;
    char **old = environ;
    while (old && old[n]) n++;
    char **copy = malloc((n + 1) * sizeof(char *));
    if (!copy) return ENOMEM;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(old[i]) + 1;
        copy[i] = malloc(len);
        if (!copy[i]) return ENOMEM; /* what was copied stays in the heap the release unmaps */
        memcpy(copy[i], old[i], len);
    }
    copy[n] = NULL;
    environ = copy;
    return 0;
}

/* ---- thread-specific data: the program's libc's keys ----
 * A key is an index into the thread's own table of values (in its `struct pthread`, which
 * every libc copy of the process shares), but each libc copy hands out indices from a table of
 * its own. The namespace's libc would give out the indices the program's libc gives out (the
 * two would overwrite each other's values), and each generation's libc gives out the same
 * indices again, with the same sequence numbers, so a new generation reads the values the last
 * one left, pointers into memory that was unmapped at its release (measured: Open MPI 5.0.11
 * and 4.1.4 faulted in snprintf and inet_ntop inside MPI_Init, on buffers found that way, from
 * the second to the twentieth generation depending on the environment's size). So the
 * namespace's keys are made by the program's libc, recorded, and deleted at release
 * (mpicr_anchor_delete_keys): a later key at the same index has a new sequence number, and
 * stale values read as NULL. */
static int (*real_dlclose(void))(void *);

struct base_keys {
    int (*create)(pthread_key_t *, void (*)(void *));
    int (*delete)(pthread_key_t);
    void *(*get)(pthread_key_t);
    int (*set)(pthread_key_t, const void *);
};

static pthread_mutex_t keys_lock = PTHREAD_MUTEX_INITIALIZER;
static struct base_keys base_keys;
static pthread_key_t made_keys[1024];
static size_t nmade_keys;

/* The program's libc's key functions, looked up once (also from the libraries' constructors,
   which run before the anchor's own). */
static const struct base_keys *keys_of_base(void) {
    static struct base_keys *ready;
    if (__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) return ready;
    pthread_mutex_lock(&keys_lock);
    if (!ready) {
        void *libc = dlmopen(LM_ID_BASE, "libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
        if (libc) {
            base_keys.create = (int (*)(pthread_key_t *, void (*)(void *)))dlsym(libc, "pthread_key_create");
            base_keys.delete = (int (*)(pthread_key_t))dlsym(libc, "pthread_key_delete");
            base_keys.get = (void *(*)(pthread_key_t))dlsym(libc, "pthread_getspecific");
            base_keys.set = (int (*)(pthread_key_t, const void *))dlsym(libc, "pthread_setspecific");
            real_dlclose()(libc); /* the base libc stays: the program runs on it */
        }
        if (!base_keys.create || !base_keys.delete || !base_keys.get || !base_keys.set) {
            /* Never expected; the namespace's own functions are then the lesser evil. */
            base_keys.create = (int (*)(pthread_key_t *, void (*)(void *)))dlsym(RTLD_NEXT, "pthread_key_create");
            base_keys.delete = (int (*)(pthread_key_t))dlsym(RTLD_NEXT, "pthread_key_delete");
            base_keys.get = (void *(*)(pthread_key_t))dlsym(RTLD_NEXT, "pthread_getspecific");
            base_keys.set = (int (*)(pthread_key_t, const void *))dlsym(RTLD_NEXT, "pthread_setspecific");
        }
        __atomic_store_n(&ready, &base_keys, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&keys_lock);
    return ready;
}

EXPORT int pthread_key_create(pthread_key_t *key, void (*destructor)(void *)) {
    int r = keys_of_base()->create(key, destructor);
    if (r == 0) {
        pthread_mutex_lock(&keys_lock);
        if (nmade_keys < sizeof made_keys / sizeof made_keys[0]) made_keys[nmade_keys++] = *key;
        pthread_mutex_unlock(&keys_lock);
    }
    return r;
}

EXPORT int pthread_key_delete(pthread_key_t key) {
    pthread_mutex_lock(&keys_lock);
    for (size_t i = 0; i < nmade_keys; i++) {
        if (made_keys[i] == key) {
            made_keys[i] = made_keys[--nmade_keys];
            break;
        }
    }
    pthread_mutex_unlock(&keys_lock);
    return keys_of_base()->delete(key);
}

EXPORT void *pthread_getspecific(pthread_key_t key) { return keys_of_base()->get(key); }

EXPORT int pthread_setspecific(pthread_key_t key, const void *value) { return keys_of_base()->set(key, value); }

/* Deletes every key the namespace made and kept: called at release, after MPI_Finalize, when no
   code of the namespace runs any more (their destructors are the namespace's code, and are
   not called). Returns how many. */
EXPORT int mpicr_anchor_delete_keys(void) {
    int n = 0;
    pthread_mutex_lock(&keys_lock);
    while (nmade_keys > 0) {
        keys_of_base()->delete(made_keys[--nmade_keys]);
        n++;
    }
    pthread_mutex_unlock(&keys_lock);
    return n;
}

/* ---- Open MPI's generations meet in PMIx before its MPI_Init fences ----
 * Each generation of Open MPI initialises PMIx anew against the same server (the launcher's),
 * under the same name (namespace and rank). The PMIx servers of Open MPI 5.0 and 4.1 lose track
 * of such a client between its PMIx_Finalize and its next PMIx_Init: a fence that a faster rank
 * opens meanwhile leaves it out (it counts as finalized, or its old connection's late close
 * prunes it), completes short, and from then on the ranks' fences are one apart: a rank waits
 * in MPI_Init's barrier for ever while the others have moved on (measured: Open MPI 5.0.11 and
 * 4.1.4, 2 and 4 ranks on 2 loaded cores, within tens of back-to-back generations; upstream:
 * openpmix issues 3931 and 4113). So when the lower half asks (mpicr_anchor_meet_in_pmix), the
 * first PMIx_Init of the namespace is followed by fences until one completes whole: a short one
 * reports an error (PMIX_ERR_PARTIAL_SUCCESS) and is repeated, and the one that succeeds had
 * every rank connected, so the library's own fences that follow find them all. The library's
 * calls resolve here first: the anchor heads the namespace's global scope (Open MPI 4.1's PMIx
 * component, opened later, too). */
static int meet_in_pmix, met_in_pmix, pmix_fences;

EXPORT void mpicr_anchor_meet_in_pmix(int on) { meet_in_pmix = on; }

/* How many fences the meeting took (0: none yet). */
EXPORT int mpicr_anchor_pmix_fences(void) { return __atomic_load_n(&pmix_fences, __ATOMIC_ACQUIRE); }

/* The real PMIx function `name`: next in the global scope (Open MPI 5), else in the system's
   libpmix, which Open MPI 4.1's component loaded. */
static void *pmix_symbol(const char *name) {
    void *f = dlsym(RTLD_NEXT, name);
    if (f) return f;
    void *h = dlopen("libpmix.so.2", RTLD_LAZY | RTLD_NOLOAD);
    if (!h) return NULL;
    f = dlsym(h, name);
    real_dlclose()(h); /* (not the wrapper: this reference was never recorded) */
    return f;
}

EXPORT int PMIx_Init(void *proc, void *info, size_t ninfo) {
    int (*real)(void *, void *, size_t) = (int (*)(void *, void *, size_t))pmix_symbol("PMIx_Init");
    if (!real) return -1; /* PMIX_ERROR */
    int rc = real(proc, info, ninfo);
    if (rc != 0 || !meet_in_pmix || __atomic_exchange_n(&met_in_pmix, 1, __ATOMIC_ACQ_REL)) return rc;
    int (*fence)(const void *, size_t, const void *, size_t) =
        (int (*)(const void *, size_t, const void *, size_t))pmix_symbol("PMIx_Fence");
    if (!fence) return rc;
    /* All the namespace's procs, no info; about 300 s of retries before the library's own
       fences are left to fail. */
    for (int tries = 0; tries < 15000; tries++) {
        __atomic_add_fetch(&pmix_fences, 1, __ATOMIC_ACQ_REL);
        if (fence(NULL, 0, NULL, 0) == 0) break;
        usleep(20000);
    }
    return rc;
}

/* ---- dlopen: nothing pins itself, and everything opened can be closed ---- */

static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;
static void **handles;
static size_t nhandles, caphandles;

EXPORT void *dlopen(const char *file, int flags) {
    static void *(*real)(const char *, int);
    if (!real) real = (void *(*)(const char *, int))dlsym(RTLD_NEXT, "dlopen");
    /* RTLD_GLOBAL too: glibc 2.36 adds a global object of a namespace made by dlmopen to that
       namespace's global scope, which it never allocated, and faults inside ld.so (measured:
       Open MPI 4.1's component loader, libltdl, opens every mca_*.so with it). Everything
       here is loaded for one library, so its own scope is enough. */
    void *h = real(file, flags & ~(RTLD_NODELETE | RTLD_GLOBAL));
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

static int (*real_dlclose(void))(void *) {
    static int (*real)(void *);
    if (!real) real = (int (*)(void *))dlsym(RTLD_NEXT, "dlclose");
    return real;
}

/* A handle the library closes itself leaves the record (one entry per dlopen): closing it
   again at release would hand ld.so a handle of an object already unloaded (measured: Open
   MPI 4.1 closes its components at MPI_Finalize, and the fourth generation's release then
   faulted inside ld.so's error path). */
EXPORT int dlclose(void *h) {
    pthread_mutex_lock(&handles_lock);
    for (size_t i = nhandles; i > 0; i--) {
        if (handles[i - 1] == h) {
            memmove(&handles[i - 1], &handles[i], (nhandles - i) * sizeof(void *));
            nhandles--;
            break;
        }
    }
    pthread_mutex_unlock(&handles_lock);
    return real_dlclose()(h);
}

/* ---- descriptors the namespace's libraries make and never close ----
 * Open MPI 5 leaves an epoll, an eventfd and a pipe per generation after MPI_Finalize (its
 * event bases): restorable, but they belong to the released generation and pile up in every
 * image. The anchor records those the namespace creates (with their inode, so that a number
 * the library closed and the program reused is never touched) and closes them at release. */
#define MAX_FDS 256
static struct { int fd; dev_t dev; ino_t ino; } fds[MAX_FDS];
static int nfds;
static pthread_mutex_t fds_lock = PTHREAD_MUTEX_INITIALIZER;

static int raw_fstat(int fd, struct stat *st) { return (int)syscall(SYS_fstat, fd, st); }

static void fd_record(int fd) {
    struct stat st;
    if (fd < 0 || raw_fstat(fd, &st) != 0) return;
    dev_t dev = st.st_dev;
    ino_t ino = st.st_ino;
    pthread_mutex_lock(&fds_lock);
    if (nfds < MAX_FDS) {
        fds[nfds].fd = fd;
        fds[nfds].dev = dev;
        fds[nfds].ino = ino;
        nfds++;
    }
    pthread_mutex_unlock(&fds_lock);
}

static void *next_fn(const char *name) { return dlsym(RTLD_NEXT, name); }

EXPORT int epoll_create(int size) {
    int (*f)(int) = (int (*)(int))next_fn("epoll_create");
    int fd = f ? f(size) : (errno = ENOSYS, -1);
    fd_record(fd);
    return fd;
}

EXPORT int epoll_create1(int flags) {
    int (*f)(int) = (int (*)(int))next_fn("epoll_create1");
    int fd = f ? f(flags) : (errno = ENOSYS, -1);
    fd_record(fd);
    return fd;
}

EXPORT int eventfd(unsigned int initval, int flags) {
    int (*f)(unsigned int, int) = (int (*)(unsigned int, int))next_fn("eventfd");
    int fd = f ? f(initval, flags) : (errno = ENOSYS, -1);
    fd_record(fd);
    return fd;
}

EXPORT int pipe(int p[2]) {
    int (*f)(int *) = (int (*)(int *))next_fn("pipe");
    int rc = f ? f(p) : (errno = ENOSYS, -1);
    if (rc == 0) { fd_record(p[0]); fd_record(p[1]); }
    return rc;
}

EXPORT int pipe2(int p[2], int flags) {
    int (*f)(int *, int) = (int (*)(int *, int))next_fn("pipe2");
    int rc = f ? f(p, flags) : (errno = ENOSYS, -1);
    if (rc == 0) { fd_record(p[0]); fd_record(p[1]); }
    return rc;
}

/* Closes the recorded descriptors that are still the ones the namespace made. */
static int close_recorded_fds(void) {
    int n = 0;
    pthread_mutex_lock(&fds_lock);
    for (int i = 0; i < nfds; i++) {
        struct stat st;
        if (raw_fstat(fds[i].fd, &st) == 0 && st.st_dev == fds[i].dev && st.st_ino == fds[i].ino) {
            syscall(SYS_close, fds[i].fd);
            n++;
        }
    }
    nfds = 0;
    pthread_mutex_unlock(&fds_lock);
    return n;
}

/* Closes every handle the namespace's libraries opened and never closed (newest first), then
   the descriptors they made and left open. Returns how many handles were closed. */
EXPORT int mpicr_anchor_close_all(void) {
    int n = 0;
    pthread_mutex_lock(&handles_lock);
    while (nhandles > 0) {
        void *h = handles[--nhandles];
        pthread_mutex_unlock(&handles_lock);
        real_dlclose()(h);
        n++;
        pthread_mutex_lock(&handles_lock);
    }
    if (handles) raw_munmap(handles, caphandles * sizeof(void *));
    handles = NULL;
    caphandles = 0;
    pthread_mutex_unlock(&handles_lock);
    close_recorded_fds();
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

