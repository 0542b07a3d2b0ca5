/* calloc.h: whether this build defines the process's own calloc (daemon/calloc.c). */
#ifndef KS_CALLOC_H
#define KS_CALLOC_H

#include <stdlib.h> /* defines __GLIBC__ on glibc */

/* Sanitizer builds keep their runtime's calloc, which tracks every block. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) ||                         \
    __has_feature(memory_sanitizer)
#define KS_CALLOC_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KS_CALLOC_SANITIZED 1
#endif

/* KS_NO_OWN_CALLOC: built with -DKSIDECAR_OWN_CALLOC=OFF. */
#if !defined(KS_CALLOC_SANITIZED) && !defined(KS_NO_OWN_CALLOC) && defined(__GLIBC__)
#define KS_OWN_CALLOC 1
#else
#define KS_OWN_CALLOC 0
#endif

/* glibc's per-thread cache serves requests up to 1,032 bytes on 64-bit targets. */
#define KS_CALLOC_TCACHE_MAX 1032

#endif
