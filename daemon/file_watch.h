/* file_watch.h: notices that a file was replaced or rewritten, by polling its stat. */
#ifndef KS_FILE_WATCH_H
#define KS_FILE_WATCH_H

#include <stdbool.h>
#include <sys/types.h>
#include <time.h>

/* What stat says of a file; a change of any part means new content. The path is followed,
 * so a Kubernetes volume's symlink swap counts. */
typedef struct ks_file_watch {
    const char *path; /* borrowed; NULL or "": nothing watched */
    bool seen;        /* the last stat succeeded */
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime, ctime;
} ks_file_watch_t;

/* Starts watching path as it is now. */
void ks_file_watch_init(ks_file_watch_t *w, const char *path);

/* Whether the file changed since the last call (or init); a file that is missing counts
 * as unchanged until it comes back. Only the caller's thread. */
bool ks_file_watch_changed(ks_file_watch_t *w);

#endif
