/* metrics_md.c: writes docs/metrics.md, the reference of every family GET /metrics writes,
 * from the one metric list (api/metric_list.h, with the status field families it makes);
 * --check tells whether the committed file is still what the list makes. */
#include <stdio.h>
#include <string.h>

#include "doc_file.h"
#include "metrics.h"

static const char *const type_names[] = {[KS_METRIC_COUNTER] = "counter",
                                         [KS_METRIC_GAUGE] = "gauge",
                                         [KS_METRIC_HISTOGRAM] = "histogram"};

/* Where a family's values come from, by its collector. */
static const char *const source_names[KS_METRIC_SRC_N] = {
    [KS_METRIC_SRC_STATUS] = "the groups' status",
    [KS_METRIC_SRC_EDGES] = "the HTTP and gRPC edges",
    [KS_METRIC_SRC_PROCESS] = "the process",
    [KS_METRIC_SRC_PUSH] = "push delivery, while it runs",
};

/* Text for a table cell: a '|' would end it. */
static void cell(FILE *f, const char *s)
{
    for (; *s; s++)
        if (*s == '|')
            fputs("\\|", f);
        else
            fputc(*s, f);
}

/* A status field's family: its field, linked to its level's table in status-fields.md
 * ("partitions[].lag": #partitions; "static": #group). */
static void field_link(FILE *f, const char *field)
{
    const char *dot = strrchr(field, '.');
    char level[32] = "group";
    if (dot)
        snprintf(level, sizeof(level), "%.*s", (int)strcspn(field, ".["), field);
    fprintf(f, "status field [`%s`](status-fields.md#%s)", field, level);
}

static void write_md(FILE *f)
{
    fputs("<!-- Generated from api/metric_list.h (and proxy/status_fields.h) by\n"
          "     tools/metrics_md.c: edit those, then `cmake --build build --target docs-metrics`. "
          "-->\n"
          "# Metrics\n\n"
          "Every family `GET /metrics` writes, in the order it writes them. Who may scrape,\n"
          "which groups a token sees and the series cap are in\n"
          "[operations.md](operations.md#metrics); what the values say, under \"What to watch\"\n"
          "there.\n\n"
          "- The `kafka_` families carry kafka_exporter's names and labels, so its dashboards\n"
          "  and KEDA's Kafka scaler read ksidecar unchanged (`promtool check metrics` flags the\n"
          "  `_sum` suffix of `kafka_consumergroup_lag_sum`; the name is kafka_exporter's and\n"
          "  is kept).\n"
          "- Each counter and gauge of the group status is a family of its own, made from the\n"
          "  one field list (`proxy/status_fields.h`, [status-fields.md](status-fields.md)): a\n"
          "  counter's name ends in `_total`; a field in milliseconds is written in seconds\n"
          "  under a `_seconds` name, histograms included.\n"
          "- A value that is unknown (a partition before its first commit) has no sample\n"
          "  rather than -1. `partition`, when a family has it, is the last label.\n"
          "- Push delivery's families are written while push runs (a static group with a push\n"
          "  url, or `push.allowed_urls` set).\n\n"
          "A new family is a row in `api/metric_list.h` and its case in its collector; a new\n"
          "status field needs no row. The test `docs_metrics` fails until this file is\n"
          "regenerated.\n\n"
          "A histogram's buckets (`le`, in seconds) are",
          f);
    for (size_t b = 0; b < KS_HIST_BUCKETS; b++)
        fprintf(f, "%s %g", b ? "," : "", (double)ks_hist_bounds_ms[b] / 1000.0);
    fputs(" and `+Inf`.\n\n"
          "| Family | Type | Labels | Meaning | From |\n| --- | --- | --- | --- | --- |\n",
          f);
    size_t n;
    const ks_metric_family_t *fams = ks_metrics_families(&n);
    for (size_t i = 0; i < n; i++) {
        const ks_metric_family_t *m = &fams[i];
        fprintf(f, "| `%s` | %s | ", m->name, type_names[m->type]);
        if (!m->labels[0] && !m->reason_field)
            fputs("-", f);
        for (size_t k = 0; m->labels[k]; k++)
            fprintf(f, "%s%s", k ? ", " : "", m->labels[k]);
        if (m->reason_field)
            fprintf(f, "%sand `reason` while `%s` is not empty", m->labels[0] ? ", " : "",
                    m->reason_field);
        fputs(" | ", f);
        cell(f, m->help);
        fputs(" | ", f);
        if (m->field)
            field_link(f, m->field);
        else
            fputs(source_names[m->source], f);
        fputs(" |\n", f);
    }
}

int main(int argc, char **argv)
{
    return ks_doc_file_main(argc, argv, write_md, "api/metric_list.h",
                            "cmake --build build --target docs-metrics");
}
