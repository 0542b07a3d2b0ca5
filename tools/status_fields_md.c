/* status_fields_md.c: writes docs/status-fields.md, the table of the group status fields,
 * from their one list (proxy/status_fields.h); --check tells whether the committed file is
 * still what the list makes. */
#include <stdio.h>

#include "doc_file.h"
#include "status_fields.h"

/* Each type and kind as the reader sees it; a row of another type or kind fails to build. (What
 * /metrics makes of a kind is in docs/metrics.md: a GAUGE_MS row's family is in seconds, a
 * REASON row is a label of the row above.) */
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
#define KIND_GAUGE_MS  "gauge"
#define KIND_REASON    "text"
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

int main(int argc, char **argv)
{
    return ks_doc_file_main(argc, argv, write_md, "proxy/status_fields.h",
                            "cmake --build build --target docs-status-fields");
}
