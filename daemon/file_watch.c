/* file_watch.c: a file's identity and times from stat, compared with the last look. */
#include "file_watch.h"

#include <string.h>
#include <sys/stat.h>

/* Whether two timespecs differ. */
static bool ts_ne(struct timespec a, struct timespec b)
{
    return a.tv_sec != b.tv_sec || a.tv_nsec != b.tv_nsec;
}

/* Reads w->path's stat into w; returns whether it differs from what w held. */
static bool look(ks_file_watch_t *w)
{
    struct stat st;
    if (!w->path || !*w->path || stat(w->path, &st) < 0) {
        w->seen = false;
        return false;
    }
    bool changed =
        w->seen && (st.st_dev != w->dev || st.st_ino != w->ino || st.st_size != w->size ||
                    ts_ne(st.st_mtim, w->mtime) || ts_ne(st.st_ctim, w->ctime));
    bool back = !w->seen;
    w->seen = true;
    w->dev = st.st_dev;
    w->ino = st.st_ino;
    w->size = st.st_size;
    w->mtime = st.st_mtim;
    w->ctime = st.st_ctim;
    return changed || back;
}

void ks_file_watch_init(ks_file_watch_t *w, const char *path)
{
    memset(w, 0, sizeof(*w));
    w->path = path;
    look(w);
}

bool ks_file_watch_changed(ks_file_watch_t *w)
{
    return look(w);
}
