/* commit_track.c: one partition's commits sent and confirmed, and the acks they cover. */
#include "commit_track.h"

static uint64_t meta_hash(const void *meta, size_t len)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    const unsigned char *b = meta;
    for (size_t i = 0; b && i < len; i++) {
        h ^= b[i];
        h *= 1099511628211ULL;
    }
    return h ^ len;
}

void ks_commit_track_init(ks_commit_track_t *t, int64_t confirmed)
{
    *t = (ks_commit_track_t){.confirmed = confirmed, .sent = -1};
}

void ks_commit_track_sent(ks_commit_track_t *t, int64_t offset, const void *meta, size_t len)
{
    t->sent = offset;
    t->sent_meta = meta_hash(meta, len);
    t->acks_sent = t->acks;
}

bool ks_commit_track_confirmed(ks_commit_track_t *t, int64_t offset, const void *meta, size_t len)
{
    /* Kafka keeps the last commit it wrote: an older one answered after a newer one (a
     * commit retried by librdkafka past a later one, across a broker's restart) is what the
     * group holds now, below what was confirmed. */
    bool behind = offset < t->confirmed;
    t->confirmed = offset;
    if (offset == t->sent && meta_hash(meta, len) == t->sent_meta) {
        if (t->acks_sent > t->acks_confirmed)
            t->acks_confirmed = t->acks_sent;
        t->sent = -1;
    }
    return behind;
}

void ks_commit_track_failed(ks_commit_track_t *t)
{
    t->sent = -1;
}

int64_t ks_commit_track_in_flight(const ks_commit_track_t *t)
{
    return t->sent;
}

int64_t ks_commit_track_unconfirmed(const ks_commit_track_t *t)
{
    return t->acks - t->acks_confirmed;
}
