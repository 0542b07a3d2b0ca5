/* status_fields_md.c: writes docs/status-fields.md, the table of the group status fields,
 * from their one list (proxy/status_fields.h); --check tells whether the committed file is
 * still what the list makes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status_fields.h"

/* Each type and kind as the reader sees it; a row of another type or kind fails to build. */
#define TYPE_NAME      "string"
#define TYPE_NAME_OPT  "string; none: null (proto: empty)"
#define TYPE_TEXT      "string"
#define TYPE_BOOL      "bool"
#define TYPE_I32       "int32"
#define TYPE_I64       "int64"
#define TYPE_I64_OPT   "int64; unknown: null (proto: -1)"
#define TYPE_TOPICS    "array of strings"
#define TYPE_PARTS     "array of [partitions](#partitions)"
#define TYPE_SUBS      "array of [subscribers](#subscribers)"
#define TYPE_COUNTERS  "object: [counters](#counters)"
#define TYPE_MEMORY    "object: [memory](#memory)"
#define TYPE_CREDITS   "object: [credits](#credits)"
#define TYPE_HIST      "object: bounds_ms, counts (one more than bounds_ms), sum_ms, count"
#define KIND_COUNTER   "counter"
#define KIND_GAUGE     "gauge"
#define KIND_LABEL     "label"
#define KIND_TEXT      "text"
#define KIND_NESTED    "nested"
#define KIND_HISTOGRAM "histogram"

typedef struct {
    const char *type, *kind, *name;
    unsigned num;
    const char *doc;
} row_t;

#define ROW(type, m, pb, name, num, kind, doc) {TYPE_##type, KIND_##kind, name, num, doc},
static const row_t group_rows[] = {KS_STATUS_GROUP_FIELDS(ROW)};
static const row_t counter_rows[] = {KS_STATUS_COUNTER_FIELDS(ROW)};
static const row_t memory_rows[] = {KS_STATUS_MEMORY_FIELDS(ROW)};
static const row_t part_rows[] = {KS_STATUS_PART_FIELDS(ROW)};
static const row_t sub_rows[] = {KS_STATUS_SUB_FIELDS(ROW)};
static const row_t credits_rows[] = {KS_STATUS_CREDITS_FIELDS(ROW)};

/* One level: its heading (the anchor the types link to), where it sits in the JSON, its
 * proto message and its rows. */
static const struct {
    const char *title, *json, *msg;
    const row_t *rows;
    size_t n;
} levels[] = {
#define LEVEL(title, json, msg, v)                                                                 \
    {                                                                                              \
        title, json, msg, v, sizeof(v) / sizeof(v[0])                                              \
    }
    LEVEL("group", "each group", "`GroupStatus`", group_rows),
    LEVEL("counters", "`counters`", "`GroupStatus`, as its own fields", counter_rows),
    LEVEL("memory", "`memory`", "`MemoryStatus`", memory_rows),
    LEVEL("partitions", "each of `partitions`", "`PartitionStatus`", part_rows),
    LEVEL("subscribers", "each of `subscribers`", "`SubscriberStatus`", sub_rows),
    LEVEL("credits", "`credits` and `outstanding` of a subscriber", "`Credits`", credits_rows),
#undef LEVEL
};

static void write_md(FILE *f)
{
    fputs("<!-- Generated from proxy/status_fields.h by tools/status_fields_md.c: edit those,\n"
          "     then `cmake --build build --target docs-status-fields`. -->\n"
          "# Group status fields\n\n"
          "What `GET /v1/groups/{group}` (and each of `GET /v1/groups`) and gRPC `GetGroup`\n"
          "(and each of `ListGroups`) answer about a group running in this process. The JSON\n"
          "keys and the proto fields have the same names. Kind: `counter` only grows while the\n"
          "group runs here, `gauge` is a value now, `label` names what the other values are\n"
          "of, `text` is a setting or a state.\n\n"
          "A new field is a row in `proxy/status_fields.h`, the field in\n"
          "`proto/ksidecar/v1/consumer.proto`, and its value set in `proxy/group_status.c`;\n"
          "the tests fail when the list and the proto, or the list and this file, disagree.\n",
          f);
    for (size_t l = 0; l < sizeof(levels) / sizeof(levels[0]); l++) {
        fprintf(f, "\n## %s\n\nJSON: %s. Proto: %s.\n\n", levels[l].title, levels[l].json,
                levels[l].msg);
        fputs("| Field | Proto | Type | Kind | What it is |\n| --- | --- | --- | --- | --- |\n", f);
        for (size_t i = 0; i < levels[l].n; i++) {
            const row_t *r = &levels[l].rows[i];
            char num[16] = "-";
            if (r->num)
                snprintf(num, sizeof(num), "%u", r->num);
            fprintf(f, "| `%s` | %s | %s | %s | %s |\n", r->name, num, r->type, r->kind, r->doc);
        }
    }
}

/* The whole of path (caller frees), or NULL. */
static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t cap = 0;
    *len = 0;
    for (;;) {
        if (*len == cap) {
            cap = cap ? 2 * cap : 8192;
            char *nb = realloc(buf, cap);
            if (!nb)
                abort();
            buf = nb;
        }
        size_t got = fread(buf + *len, 1, cap - *len, f);
        if (got == 0)
            break;
        *len += got;
    }
    fclose(f);
    return buf;
}

int main(int argc, char **argv)
{
    if (argc == 1) {
        write_md(stdout);
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "-o")) {
        FILE *f = fopen(argv[2], "w");
        if (!f) {
            perror(argv[2]);
            return 1;
        }
        write_md(f);
        return fclose(f) ? 1 : 0;
    }
    if (argc == 3 && !strcmp(argv[1], "--check")) {
        char *want = NULL;
        size_t want_len = 0;
        FILE *m = open_memstream(&want, &want_len);
        if (!m)
            abort();
        write_md(m);
        fclose(m);
        size_t have_len;
        char *have = read_all(argv[2], &have_len);
        int stale = !have || have_len != want_len || memcmp(have, want, want_len) != 0;
        if (stale)
            fprintf(stderr,
                    "%s is not what proxy/status_fields.h makes: regenerate it with\n"
                    "  cmake --build build --target docs-status-fields\n",
                    argv[2]);
        free(have);
        free(want);
        return stale;
    }
    fprintf(stderr, "usage: %s [-o FILE | --check FILE]\n", argv[0]);
    return 2;
}
