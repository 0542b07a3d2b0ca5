/* ksidecar._speedups: the Python library's per-record path in C (optional; see _accel.py).
 *
 * What it holds, each the C twin of pure-Python code that stays as the fallback and as the
 * reference (tests/test_speedups.py holds the two to the same results):
 *   - decode_batch(): a SubscribeResponse's batch read straight off the wire into Record
 *     objects (the fields of consumer.proto's Record), instead of protobuf objects;
 *   - MessageCore, BatchCore, BookCore: the fields of Message, Batch and Book, the Message
 *     getters and Message.ack() (_common.py's _PyMessageCore);
 *   - ack_ranges() (_common.py_ack_ranges);
 *   - Chain and DispatcherCore's receive(), hand(), settle(), take() and done()
 *     (_dispatch.py's _PyDispatcher), and Lock, the dispatcher's lock;
 *   - iter_messages(), iter_handed(), any_chained(), run_messages(): the loops that make,
 *     hand out and run a batch's messages (_common.py).
 *
 * Threads: every function runs with the GIL held and calls no Python code in the middle of
 * its own changes, except where it says so. The dispatcher's calls take its lock, as the
 * Python code does, because its Python methods change the same state under it.
 * Objects: "new" and "borrowed" references as in the CPython API; members are strong. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#if PY_VERSION_HEX < 0x030A0000
static inline PyObject *Py_NewRef(PyObject *o)
{
    Py_INCREF(o);
    return o;
}

static inline PyObject *Py_XNewRef(PyObject *o)
{
    Py_XINCREF(o);
    return o;
}
#endif

/* The references an object of ours holds are the object members of its type's member
 * table: tp_traverse, tp_clear and tp_dealloc walk the table (REFS below), so that a field
 * added to a type is never left out of them. */
static int members_visit(PyObject *o, const PyMemberDef *m, visitproc visit, void *arg)
{
    for (; m->name != NULL; m++)
        if (m->type == T_OBJECT || m->type == T_OBJECT_EX)
            Py_VISIT(*(PyObject **)((char *)o + m->offset));
    return 0;
}

static int members_clear(PyObject *o, const PyMemberDef *m)
{
    for (; m->name != NULL; m++)
        if (m->type == T_OBJECT || m->type == T_OBJECT_EX)
            Py_CLEAR(*(PyObject **)((char *)o + m->offset));
    return 0;
}

/* PREFIX_traverse and PREFIX_clear of a garbage-collected type whose references are the
 * object members of TABLE. */
#define REFS_WALK(PREFIX, TABLE)                                                                   \
    static int PREFIX##_traverse(PyObject *o, visitproc visit, void *arg)                          \
    {                                                                                              \
        return members_visit(o, TABLE, visit, arg);                                                \
    }                                                                                              \
    static int PREFIX##_clear(PyObject *o)                                                         \
    {                                                                                              \
        return members_clear(o, TABLE);                                                            \
    }

/* PREFIX_traverse, PREFIX_clear and PREFIX_dealloc of a garbage-collected type whose
 * references are the object members of TABLE. */
#define REFS(PREFIX, TABLE)                                                                        \
    REFS_WALK(PREFIX, TABLE)                                                                       \
    static void PREFIX##_dealloc(PyObject *o)                                                      \
    {                                                                                              \
        PyObject_GC_UnTrack(o);                                                                    \
        members_clear(o, TABLE);                                                                   \
        Py_TYPE(o)->tp_free(o);                                                                    \
    }

/* The same for a type that is not garbage-collected (it can hold no cycle). */
#define REFS_NOGC(PREFIX, TABLE)                                                                   \
    static void PREFIX##_dealloc(PyObject *o)                                                      \
    {                                                                                              \
        members_clear(o, TABLE);                                                                   \
        Py_TYPE(o)->tp_free(o);                                                                    \
    }

/* Whether o (may be NULL) is a T: the library's classes are direct subclasses of ours, so
 * tp_base answers before the walk of the MRO. */
#define IS_A(o, T)                                                                                 \
    ((o) != NULL &&                                                                                \
     (Py_IS_TYPE((o), &(T)) || Py_TYPE(o)->tp_base == &(T) || PyType_IsSubtype(Py_TYPE(o), &(T))))

/* Batch.state values (_dispatch.py): odd means settled. */
enum { UNSETTLED = 0, SETTLED = 1, RELEASED = 2, DROPPED = 3 };

/* _dispatch.CHAIN_RUN: how many of a chain's messages a worker runs before it lets other work
 * go first (exported as CHAIN_RUN; tests/test_speedups.py holds the two equal). */
enum { CHAIN_RUN = 64 };

static PyObject *s_ack_id, *s_topic, *s_partition, *s_offset, *s_key, *s_value, *s_ordering_chain,
    *s_append, *s_pop, *s_popleft, *s_remove, *s_settle, *s_flush, *s_hand, *s_acquire, *s_release,
    *s_empty_str, *s_book, *s_closing, *s_raised, *s_disp, *s_take, *s_done;
static PyObject *empty_bytes, *empty_tuple, *deque_type;
/* deque's append, pop and popleft (method descriptors): called on a deque without the look-up
 * of the method by its name. */
static PyObject *deque_append, *deque_pop, *deque_popleft;

/* q.name(*args) (nargs 0 or 1), by descr when q is a deque. New ref, or NULL. */
static PyObject *deque_call(PyObject *q, PyObject *descr, PyObject *name, PyObject *arg)
{
    PyObject *args[2] = {q, arg};
    size_t n = arg ? 2 : 1;
    if (Py_IS_TYPE(q, (PyTypeObject *)deque_type))
        return PyObject_Vectorcall(descr, args, n, NULL);
    return PyObject_VectorcallMethod(name, args, n, NULL);
}

/* ---- Record and Header: consumer.proto's messages, read-only ---- */

typedef struct {
    PyObject_HEAD PyObject *key;
    PyObject *value;
    char value_null;
} HeaderObject;

typedef struct {
    PyObject_HEAD PyObject *topic; /* str */
    PyObject *key;                 /* bytes */
    PyObject *value;               /* bytes */
    PyObject *headers;             /* tuple of Header */
    PyObject *ack_id;              /* str */
    PyObject *key_decoded;         /* Record.key_decoded's bytes (a Decoded), or None */
    PyObject *value_decoded;       /* Record.value_decoded's, or None */
    long long offset;
    long long timestamp_ms;
    unsigned long long ordering_chain;
    int partition;
    int attempt;
    char key_null;
    char value_null;
} RecordObject;

static PyTypeObject HeaderType, RecordType;

static PyObject *record_repr(RecordObject *r)
{
    return PyUnicode_FromFormat("Record(%U[%d]@%lld ack_id=%R)", r->topic, r->partition, r->offset,
                                r->ack_id);
}

static PyMemberDef header_members[] = {
    {"key", T_OBJECT, offsetof(HeaderObject, key), READONLY, NULL},
    {"value", T_OBJECT, offsetof(HeaderObject, value), READONLY, NULL},
    {"value_null", T_BOOL, offsetof(HeaderObject, value_null), READONLY, NULL},
    {NULL},
};

static PyMemberDef record_members[] = {
    {"topic", T_OBJECT, offsetof(RecordObject, topic), READONLY, NULL},
    {"partition", T_INT, offsetof(RecordObject, partition), READONLY, NULL},
    {"offset", T_LONGLONG, offsetof(RecordObject, offset), READONLY, NULL},
    {"timestamp_ms", T_LONGLONG, offsetof(RecordObject, timestamp_ms), READONLY, NULL},
    {"key", T_OBJECT, offsetof(RecordObject, key), READONLY, NULL},
    {"key_null", T_BOOL, offsetof(RecordObject, key_null), READONLY, NULL},
    {"value", T_OBJECT, offsetof(RecordObject, value), READONLY, NULL},
    {"value_null", T_BOOL, offsetof(RecordObject, value_null), READONLY, NULL},
    {"headers", T_OBJECT, offsetof(RecordObject, headers), READONLY, NULL},
    {"ack_id", T_OBJECT, offsetof(RecordObject, ack_id), READONLY, NULL},
    {"attempt", T_INT, offsetof(RecordObject, attempt), READONLY, NULL},
    {"ordering_chain", T_ULONGLONG, offsetof(RecordObject, ordering_chain), READONLY, NULL},
    {"key_decoded_raw", T_OBJECT, offsetof(RecordObject, key_decoded), READONLY, NULL},
    {"value_decoded_raw", T_OBJECT, offsetof(RecordObject, value_decoded), READONLY, NULL},
    {NULL},
};

REFS_NOGC(header, header_members)
REFS_NOGC(record, record_members)

/* The interned names of record_members' rows, for getattr on a record of another type. */
static PyObject *rec_names[sizeof record_members / sizeof record_members[0]];

/* ---- the wire: protobuf's varints and length-delimited fields ---- */

typedef struct {
    const unsigned char *p, *end;
} reader;

/* Reads a varint into *v (bits past 64 dropped, as protobuf reads them). Returns 0, or -1
 * with ValueError set (truncated, over 10 bytes). */
static int rd_varint(reader *r, uint64_t *v)
{
    uint64_t x = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (r->p >= r->end)
            break;
        unsigned char b = *r->p++;
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return 0;
        }
    }
    PyErr_SetString(PyExc_ValueError, "ksidecar: malformed varint in a SubscribeResponse");
    return -1;
}

/* A field's tag: its number (1 or more, as protobuf requires) and wire type. 0 or -1. */
static int rd_tag(reader *r, uint64_t *tag)
{
    if (rd_varint(r, tag) < 0)
        return -1;
    if (*tag > 0xffffffffu || (*tag >> 3) == 0) {
        PyErr_SetString(PyExc_ValueError, "ksidecar: malformed field tag in a SubscribeResponse");
        return -1;
    }
    return 0;
}

/* A length-delimited field's bytes: sets *sub to them and moves past. 0 or -1 (ValueError). */
static int rd_delimited(reader *r, reader *sub)
{
    uint64_t n;
    if (rd_varint(r, &n) < 0)
        return -1;
    if (n > (uint64_t)(r->end - r->p)) {
        PyErr_SetString(PyExc_ValueError, "ksidecar: truncated field in a SubscribeResponse");
        return -1;
    }
    sub->p = r->p;
    sub->end = r->p + n;
    r->p += n;
    return 0;
}

/* Skips a field of wire type wt. 0 or -1 (ValueError: groups and unknown wire types). */
static int rd_skip(reader *r, unsigned wt)
{
    uint64_t v;
    reader sub;
    switch (wt) {
    case 0:
        return rd_varint(r, &v);
    case 1:
    case 5: {
        size_t n = wt == 1 ? 8 : 4;
        if ((size_t)(r->end - r->p) < n)
            break;
        r->p += n;
        return 0;
    }
    case 2:
        return rd_delimited(r, &sub);
    default:
        break;
    }
    PyErr_SetString(PyExc_ValueError, "ksidecar: malformed field in a SubscribeResponse");
    return -1;
}

/* A string field: a new str (strict UTF-8, as protobuf checks proto3 strings), or NULL. */
static PyObject *rd_str(const reader *f)
{
    return PyUnicode_DecodeUTF8((const char *)f->p, f->end - f->p, NULL);
}

static PyObject *rd_bytes(const reader *f)
{
    if (f->end == f->p)
        return Py_NewRef(empty_bytes);
    return PyBytes_FromStringAndSize((const char *)f->p, f->end - f->p);
}

/* Replaces *slot (a strong reference) with v (new, may be NULL). 0, or -1 if v is NULL. */
static int put(PyObject **slot, PyObject *v)
{
    if (v == NULL)
        return -1;
    Py_SETREF(*slot, v);
    return 0;
}

/* Checks that f holds a Decoded as protobuf reads one (its strings UTF-8); returns its bytes,
 * or NULL with ValueError. */
static PyObject *rd_decoded(reader *f)
{
    reader r = *f, s;
    while (r.p < r.end) {
        uint64_t tag, v;
        if (rd_tag(&r, &tag) < 0)
            return NULL;
        unsigned field = (unsigned)(tag >> 3), wt = (unsigned)(tag & 7);
        if ((field == 1 || field == 2 || field == 4) && wt == 2) {
            if (rd_delimited(&r, &s) < 0)
                return NULL;
            PyObject *str = rd_str(&s);
            if (str == NULL)
                return NULL;
            Py_DECREF(str);
        } else if (field == 3 && wt == 0) {
            if (rd_varint(&r, &v) < 0)
                return NULL;
        } else if (rd_skip(&r, wt) < 0) {
            return NULL;
        }
    }
    return rd_bytes(f);
}

/* Keeps v, the bytes of a message field, in *slot: after the bytes already there (None:
 * none), as protobuf merges a message field that comes twice. */
static int put_merged(PyObject **slot, PyObject *v)
{
    if (v == NULL)
        return -1;
    if (*slot != Py_None) {
        PyObject *both =
            PyBytes_FromStringAndSize(NULL, PyBytes_GET_SIZE(*slot) + PyBytes_GET_SIZE(v));
        if (both == NULL) {
            Py_DECREF(v);
            return -1;
        }
        memcpy(PyBytes_AS_STRING(both), PyBytes_AS_STRING(*slot), (size_t)PyBytes_GET_SIZE(*slot));
        memcpy(PyBytes_AS_STRING(both) + PyBytes_GET_SIZE(*slot), PyBytes_AS_STRING(v),
               (size_t)PyBytes_GET_SIZE(v));
        Py_DECREF(v);
        v = both;
    }
    return put(slot, v);
}

static PyObject *decode_header(reader *r)
{
    HeaderObject *h = PyObject_New(HeaderObject, &HeaderType);
    if (h == NULL)
        return NULL;
    h->key = Py_NewRef(s_empty_str);
    h->value = Py_NewRef(empty_bytes);
    h->value_null = 0;
    while (r->p < r->end) {
        uint64_t tag, v;
        reader f;
        if (rd_tag(r, &tag) < 0)
            goto fail;
        unsigned field = (unsigned)(tag >> 3), wt = (unsigned)(tag & 7);
        if (field == 1 && wt == 2) {
            if (rd_delimited(r, &f) < 0 || put(&h->key, rd_str(&f)) < 0)
                goto fail;
        } else if (field == 2 && wt == 2) {
            if (rd_delimited(r, &f) < 0 || put(&h->value, rd_bytes(&f)) < 0)
                goto fail;
        } else if (field == 3 && wt == 0) {
            if (rd_varint(r, &v) < 0)
                goto fail;
            h->value_null = v != 0;
        } else if (rd_skip(r, wt) < 0) {
            goto fail;
        }
    }
    return (PyObject *)h;
fail:
    Py_DECREF(h);
    return NULL;
}

/* The topic of the last record decoded in a batch: records of one batch share the str. */
typedef struct {
    const unsigned char *p;
    size_t n;
    PyObject *str; /* strong; released at the end of decode_batch */
} topic_cache;

static PyObject *decode_topic(const reader *f, topic_cache *tc)
{
    size_t n = f->end - f->p;
    if (tc->str != NULL && tc->n == n && memcmp(tc->p, f->p, n) == 0)
        return Py_NewRef(tc->str);
    PyObject *s = rd_str(f);
    if (s != NULL) {
        tc->p = f->p;
        tc->n = n;
        Py_XSETREF(tc->str, Py_NewRef(s));
    }
    return s;
}

/* One Record from its bytes: a new reference, or NULL with an exception set. Unknown
 * fields, and known ones of another wire type, are skipped; a field given twice takes the
 * last value (headers add up), as protobuf parses. */
static PyObject *decode_record(reader *r, topic_cache *tc)
{
    RecordObject *rec = PyObject_New(RecordObject, &RecordType);
    if (rec == NULL)
        return NULL;
    rec->topic = Py_NewRef(s_empty_str);
    rec->key = Py_NewRef(empty_bytes);
    rec->value = Py_NewRef(empty_bytes);
    rec->headers = Py_NewRef(empty_tuple);
    rec->ack_id = Py_NewRef(s_empty_str);
    rec->key_decoded = Py_NewRef(Py_None);
    rec->value_decoded = Py_NewRef(Py_None);
    rec->offset = rec->timestamp_ms = 0;
    rec->ordering_chain = 0;
    rec->partition = rec->attempt = 0;
    rec->key_null = rec->value_null = 0;
    PyObject *headers = NULL; /* a list while headers come */
    while (r->p < r->end) {
        uint64_t tag, v = 0;
        reader f;
        if (rd_tag(r, &tag) < 0)
            goto fail;
        unsigned field = (unsigned)(tag >> 3), wt = (unsigned)(tag & 7);
        int varint = field == 2 || field == 3 || field == 4 || field == 6 || field == 8 ||
                     field == 11 || field == 12;
        int delimited = field == 1 || field == 5 || field == 7 || field == 9 || field == 10 ||
                        field == 13 || field == 14;
        if (varint && wt == 0) {
            if (rd_varint(r, &v) < 0)
                goto fail;
        } else if (delimited && wt == 2) {
            if (rd_delimited(r, &f) < 0)
                goto fail;
        } else {
            if (rd_skip(r, wt) < 0)
                goto fail;
            continue;
        }
        switch (field) {
        case 1:
            if (put(&rec->topic, decode_topic(&f, tc)) < 0)
                goto fail;
            break;
        case 2:
            rec->partition = (int32_t)(uint32_t)v;
            break;
        case 3:
            rec->offset = (int64_t)v;
            break;
        case 4:
            rec->timestamp_ms = (int64_t)v;
            break;
        case 5:
            if (put(&rec->key, rd_bytes(&f)) < 0)
                goto fail;
            break;
        case 6:
            rec->key_null = v != 0;
            break;
        case 7:
            if (put(&rec->value, rd_bytes(&f)) < 0)
                goto fail;
            break;
        case 8:
            rec->value_null = v != 0;
            break;
        case 9: {
            PyObject *h = decode_header(&f);
            if (h == NULL)
                goto fail;
            if (headers == NULL && (headers = PyList_New(0)) == NULL) {
                Py_DECREF(h);
                goto fail;
            }
            int rc = PyList_Append(headers, h);
            Py_DECREF(h);
            if (rc < 0)
                goto fail;
            break;
        }
        case 10:
            if (put(&rec->ack_id, rd_str(&f)) < 0)
                goto fail;
            break;
        case 11:
            rec->attempt = (int32_t)(uint32_t)v;
            break;
        case 12:
            rec->ordering_chain = v;
            break;
        case 13:
            if (put_merged(&rec->key_decoded, rd_decoded(&f)) < 0)
                goto fail;
            break;
        case 14:
            if (put_merged(&rec->value_decoded, rd_decoded(&f)) < 0)
                goto fail;
            break;
        }
    }
    if (headers != NULL) {
        PyObject *t = PyList_AsTuple(headers);
        Py_DECREF(headers);
        headers = NULL;
        if (put(&rec->headers, t) < 0)
            goto fail;
    }
    return (PyObject *)rec;
fail:
    Py_XDECREF(headers);
    Py_DECREF(rec);
    return NULL;
}

/* decode_batch(data): the records of a SubscribeResponse whose kind is batch, as a list of
 * Record; None for any other response (the caller parses it with protobuf). Raises
 * ValueError (or UnicodeDecodeError) on bytes that are not a valid SubscribeResponse. */
static PyObject *decode_batch(PyObject *mod, PyObject *data)
{
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    reader r = {view.buf, (const unsigned char *)view.buf + view.len};
    PyObject *recs = NULL;
    topic_cache tc = {NULL, 0, NULL};
    while (r.p < r.end) {
        uint64_t tag;
        reader batch;
        if (rd_tag(&r, &tag) < 0)
            goto fail;
        unsigned field = (unsigned)(tag >> 3), wt = (unsigned)(tag & 7);
        if (field >= 2 && field <= 4) {
            /* Another kind of the oneof: protobuf parses it (it may also come after a
             * batch, which it then replaces). */
            Py_CLEAR(recs);
            break;
        }
        if (field != 1 || wt != 2) {
            if (rd_skip(&r, wt) < 0)
                goto fail;
            continue;
        }
        if (rd_delimited(&r, &batch) < 0)
            goto fail;
        if (recs == NULL && (recs = PyList_New(0)) == NULL)
            goto fail;
        while (batch.p < batch.end) {
            reader rf;
            if (rd_tag(&batch, &tag) < 0)
                goto fail;
            if (tag != ((1u << 3) | 2)) {
                if (rd_skip(&batch, (unsigned)(tag & 7)) < 0)
                    goto fail;
                continue;
            }
            if (rd_delimited(&batch, &rf) < 0)
                goto fail;
            PyObject *rec = decode_record(&rf, &tc);
            if (rec == NULL)
                goto fail;
            int rc = PyList_Append(recs, rec);
            Py_DECREF(rec);
            if (rc < 0)
                goto fail;
        }
    }
    PyBuffer_Release(&view);
    Py_XDECREF(tc.str);
    if (recs == NULL)
        Py_RETURN_NONE;
    return recs;
fail:
    PyBuffer_Release(&view);
    Py_XDECREF(tc.str);
    Py_XDECREF(recs);
    return NULL;
}

/* ---- BookCore, BatchCore: the fields Message.ack() reads ---- */

typedef struct {
    PyObject_HEAD Py_ssize_t gen;
    Py_ssize_t max_ids;
    PyObject *acks; /* collections.deque of ack ids */
    PyObject *wake;
    PyObject *disp;
    char armed;
} BookObject;

typedef struct {
    PyObject_HEAD PyObject *book;
    PyObject *recs;
    PyObject *state; /* bytearray, one byte a record */
    PyObject *msgs;
    Py_ssize_t gen;
    double t, until;
} BatchObject;

static PyTypeObject BookCoreType, BatchCoreType, MessageCoreType, ChainType, DispatcherCoreType;

static PyMemberDef book_members[] = {
    {"gen", T_PYSSIZET, offsetof(BookObject, gen), 0, "the current stream's generation"},
    {"max_ids", T_PYSSIZET, offsetof(BookObject, max_ids), 0, NULL},
    {"acks", T_OBJECT, offsetof(BookObject, acks), 0, NULL},
    {"wake", T_OBJECT, offsetof(BookObject, wake), 0, NULL},
    {"disp", T_OBJECT, offsetof(BookObject, disp), 0, NULL},
    {"armed", T_BOOL, offsetof(BookObject, armed), 0, NULL},
    {NULL},
};

REFS(book, book_members)

static PyMemberDef batch_members[] = {
    {"book", T_OBJECT, offsetof(BatchObject, book), 0, NULL},
    {"gen", T_PYSSIZET, offsetof(BatchObject, gen), 0, NULL},
    {"t", T_DOUBLE, offsetof(BatchObject, t), 0, NULL},
    {"until", T_DOUBLE, offsetof(BatchObject, until), 0, NULL},
    {"recs", T_OBJECT, offsetof(BatchObject, recs), 0, NULL},
    {"state", T_OBJECT, offsetof(BatchObject, state), 0, NULL},
    {"msgs", T_OBJECT, offsetof(BatchObject, msgs), 0, NULL},
    {NULL},
};

REFS(batch, batch_members)

/* ---- MessageCore ---- */

typedef struct {
    PyObject_HEAD PyObject *rec;
    PyObject *batch;
    PyObject *fut; /* NULL until a *_with_result() */
    PyObject *ch;  /* its Chain, or None */
    Py_ssize_t i;
} MessageObject;

/* A new message of type cls (MessageCore or a subclass whose __init__ is MessageCore's). */
static PyObject *msg_make(PyTypeObject *cls, PyObject *rec, PyObject *batch, Py_ssize_t i)
{
    MessageObject *m = (MessageObject *)cls->tp_alloc(cls, 0);
    if (m == NULL)
        return NULL;
    m->rec = Py_NewRef(rec);
    m->batch = Py_NewRef(batch);
    m->ch = Py_NewRef(Py_None);
    m->i = i;
    return (PyObject *)m;
}

static PyObject *msg_new(PyTypeObject *cls, PyObject *args, PyObject *kw)
{
    PyObject *rec, *batch;
    Py_ssize_t i;
    static char *names[] = {"rec", "batch", "i", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOn", names, &rec, &batch, &i))
        return NULL;
    return msg_make(cls, rec, batch, i);
}

/* Borrowed: m's record, or NULL with AttributeError (a cleared message). */
static PyObject *msg_rec(MessageObject *m)
{
    if (m->rec == NULL)
        PyErr_SetString(PyExc_AttributeError, "_rec");
    return m->rec;
}

#define REC(o) ((RecordObject *)(o))

/* A field of m's record: the C Record's own, else getattr (a protobuf Record). New ref. */
static PyObject *rec_attr(PyObject *rec, PyObject *name)
{
    return PyObject_GetAttr(rec, name);
}

static PyObject *msg_get_ack_id(MessageObject *m, void *c)
{
    PyObject *r = msg_rec(m);
    if (r == NULL)
        return NULL;
    return Py_IS_TYPE(r, &RecordType) ? Py_NewRef(REC(r)->ack_id) : rec_attr(r, s_ack_id);
}

/* The getter of a field of m's record; closure is the field's row of record_members (set at
 * module init from the getter's name). A C Record is read through the row, any other record
 * (protobuf's) with getattr. */
static PyObject *msg_get_field(MessageObject *m, void *closure)
{
    PyMemberDef *f = closure;
    PyObject *r = msg_rec(m);
    if (r == NULL)
        return NULL;
    if (Py_IS_TYPE(r, &RecordType))
        return PyMember_GetOne((const char *)r, f);
    return rec_attr(r, rec_names[f - record_members]);
}

/* key or value: None when its _null flag (the next row of record_members) is set, else the
 * bytes. closure as msg_get_field's. */
static PyObject *msg_get_nullable(MessageObject *m, void *closure)
{
    PyMemberDef *f = closure;
    PyObject *r = msg_rec(m);
    if (r == NULL)
        return NULL;
    if (Py_IS_TYPE(r, &RecordType)) {
        if (*((const char *)r + f[1].offset))
            Py_RETURN_NONE;
        return PyMember_GetOne((const char *)r, f);
    }
    PyObject *flag = rec_attr(r, rec_names[f + 1 - record_members]);
    if (flag == NULL)
        return NULL;
    int null = PyObject_IsTrue(flag);
    Py_DECREF(flag);
    if (null < 0)
        return NULL;
    if (null)
        Py_RETURN_NONE;
    return rec_attr(r, rec_names[f - record_members]);
}

static PyObject *msg_get_size(MessageObject *m, void *c)
{
    PyObject *r = msg_rec(m);
    if (r == NULL)
        return NULL;
    if (Py_IS_TYPE(r, &RecordType))
        return PyLong_FromSsize_t(PyBytes_GET_SIZE(REC(r)->key) + PyBytes_GET_SIZE(REC(r)->value));
    Py_ssize_t n[2];
    PyObject *names[2] = {s_key, s_value};
    for (int k = 0; k < 2; k++) {
        PyObject *v = rec_attr(r, names[k]);
        if (v == NULL)
            return NULL;
        n[k] = PyObject_Size(v);
        Py_DECREF(v);
        if (n[k] < 0)
            return NULL;
    }
    return PyLong_FromSsize_t(n[0] + n[1]);
}

/* Borrowed: the state byte of message i of batch b, or NULL with an exception set. */
static char *state_at(PyObject *batch, Py_ssize_t i)
{
    if (batch == NULL || !IS_A(batch, BatchCoreType)) {
        PyErr_SetString(PyExc_TypeError, "ksidecar: a message's _batch is not a Batch");
        return NULL;
    }
    PyObject *st = ((BatchObject *)batch)->state;
    if (st == NULL || !PyByteArray_Check(st)) {
        PyErr_SetString(PyExc_TypeError, "ksidecar: Batch.state is not a bytearray");
        return NULL;
    }
    if (i < 0 || i >= PyByteArray_GET_SIZE(st)) {
        PyErr_SetString(PyExc_IndexError, "ksidecar: message index out of its batch");
        return NULL;
    }
    return PyByteArray_AS_STRING(st) + i;
}

static PyObject *msg_get_settled(MessageObject *m, void *c)
{
    char *st = state_at(m->batch, m->i);
    if (st == NULL)
        return NULL;
    return PyBool_FromLong(*st & 1);
}

/* The truth of obj.name (0/1), or -1. */
static int call_truth_attr(PyObject *obj, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL)
        return -1;
    int t = PyObject_IsTrue(v);
    Py_DECREF(v);
    return t;
}

/* Calls obj.name(*args); returns its truth (0/1) or -1. */
static int call_truth(PyObject *obj, PyObject *name, PyObject *a, PyObject *b)
{
    PyObject *args[3] = {obj, a, b};
    PyObject *r = PyObject_VectorcallMethod(name, args,
                                            (b   ? 3
                                             : a ? 2
                                                 : 1) |
                                                PY_VECTORCALL_ARGUMENTS_OFFSET,
                                            NULL);
    if (r == NULL)
        return -1;
    int t = PyObject_IsTrue(r);
    Py_DECREF(r);
    return t;
}

static int disp_settle_c(PyObject *self, PyObject *m, int nack);

/* Message.ack(): _common.py's _PyMessageCore.ack, step for step. */
static PyObject *msg_ack(MessageObject *m, PyObject *unused)
{
    PyObject *res = NULL, *ack_id = NULL;
    BatchObject *b = (BatchObject *)m->batch;
    if (b == NULL || !IS_A(b, BatchCoreType) || b->book == NULL || !IS_A(b->book, BookCoreType)) {
        PyErr_SetString(PyExc_TypeError, "ksidecar: a message's _batch is not a Batch of a Book");
        return NULL;
    }
    Py_INCREF(b);
    BookObject *book = (BookObject *)Py_NewRef(b->book);
    if (m->ch != NULL && m->ch != Py_None) {
        /* Marks it SETTLED and hands its chain on. */
        int t =
            book->disp != NULL && IS_A(book->disp, DispatcherCoreType)
                ? disp_settle_c(book->disp, (PyObject *)m, 0)
                : call_truth(book->disp ? book->disp : Py_None, s_settle, (PyObject *)m, Py_False);
        if (t <= 0) {
            if (t == 0)
                res = Py_NewRef(Py_None);
            goto out;
        }
    } else {
        char *st = state_at((PyObject *)b, m->i);
        if (st == NULL)
            goto out;
        if (*st & 1) {
            res = Py_NewRef(Py_None);
            goto out;
        }
        *st = SETTLED;
    }
    /* A batch of the current stream means a stream to send on (stream_lost moves gen on). */
    if (b->gen != book->gen) { /* STALE */
        if (call_truth((PyObject *)book, s_settle, (PyObject *)m, Py_None) >= 0)
            res = Py_NewRef(Py_None);
        goto out;
    }
    PyObject *acks = book->acks;
    if (acks == NULL || (ack_id = msg_get_ack_id(m, NULL)) == NULL) {
        if (acks == NULL)
            PyErr_SetString(PyExc_AttributeError, "acks");
        goto out;
    }
    Py_INCREF(acks);
    PyObject *r = deque_call(acks, deque_append, s_append, ack_id);
    Py_ssize_t n = r ? PyObject_Size(acks) : -1;
    Py_XDECREF(r);
    Py_DECREF(acks);
    if (n < 0)
        goto out;
    if (n >= book->max_ids) {
        r = PyObject_CallMethodNoArgs((PyObject *)book, s_flush);
    } else if (!book->armed) {
        book->armed = 1;
        r = book->wake ? PyObject_CallNoArgs(book->wake) : Py_NewRef(Py_None);
    } else {
        r = Py_NewRef(Py_None);
    }
    if (r == NULL)
        goto out;
    Py_DECREF(r);
    res = Py_NewRef(Py_None);
out:
    Py_XDECREF(ack_id);
    Py_DECREF(book);
    Py_DECREF(b);
    return res;
}

static PyMemberDef msg_members[] = {
    {"_rec", T_OBJECT_EX, offsetof(MessageObject, rec), 0, NULL},
    {"_batch", T_OBJECT_EX, offsetof(MessageObject, batch), 0, NULL},
    {"_fut", T_OBJECT_EX, offsetof(MessageObject, fut), 0, NULL},
    {"_ch", T_OBJECT, offsetof(MessageObject, ch), 0, NULL},
    {"_i", T_PYSSIZET, offsetof(MessageObject, i), 0, NULL},
    {NULL},
};

REFS(msg, msg_members)

static PyGetSetDef msg_getset[] = {
    {"ack_id", (getter)msg_get_ack_id, NULL, NULL, NULL},
    {"topic", (getter)msg_get_field, NULL, NULL, NULL},
    {"partition", (getter)msg_get_field, NULL, NULL, NULL},
    {"offset", (getter)msg_get_field, NULL, NULL, NULL},
    {"timestamp_ms", (getter)msg_get_field, NULL, NULL, NULL},
    {"attempt", (getter)msg_get_field, NULL, NULL, NULL},
    {"key", (getter)msg_get_nullable, NULL, NULL, NULL},
    {"value", (getter)msg_get_nullable, NULL, NULL, NULL},
    {"size", (getter)msg_get_size, NULL, "key plus value bytes", NULL},
    {"settled", (getter)msg_get_settled, NULL,
     "Acked or nacked (or dropped unhanded, taken back by ksidecar).", NULL},
    {NULL},
};

static PyMethodDef msg_methods[] = {
    {"ack", (PyCFunction)msg_ack, METH_NOARGS,
     "Acks the record (batched on the wire). Never blocks, never raises."},
    {NULL},
};

/* ---- ack_ranges ---- */

/* The offset field of ack id a, "a1<16 hex digits>-<epoch>-<partition>-<offset>-<attempt>-
 * <topic>": 1 with [*s, *e) its place and *off its value, or 0 for an id of another form
 * (a leading zero, over 19 digits or 2^63 and above included), as _offset_field. */
static int offset_field(PyObject *a, Py_ssize_t *s, Py_ssize_t *e, unsigned long long *off)
{
    if (!PyUnicode_Check(a))
        return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(a);
    int kind = PyUnicode_KIND(a);
    const void *d = PyUnicode_DATA(a);
    if (n < 20 || PyUnicode_READ(kind, d, 0) != 'a' || PyUnicode_READ(kind, d, 1) != '1' ||
        PyUnicode_READ(kind, d, 18) != '-')
        return 0;
    Py_ssize_t dash[4];
    int k = 0;
    for (Py_ssize_t x = 0; x < n && k < 4; x++)
        if (PyUnicode_READ(kind, d, x) == '-')
            dash[k++] = x;
    if (k < 4 || dash[1] - dash[0] < 2 || dash[2] - dash[1] < 2)
        return 0;
    Py_ssize_t os = dash[2] + 1, oe = dash[3];
    if (oe - os < 1 || oe - os > 19 || (PyUnicode_READ(kind, d, os) == '0' && oe - os > 1))
        return 0;
    unsigned long long v = 0;
    for (Py_ssize_t x = os; x < oe; x++) {
        Py_UCS4 c = PyUnicode_READ(kind, d, x);
        if (c < '0' || c > '9')
            return 0;
        v = v * 10 + (c - '0');
    }
    if (v >= 1ULL << 63)
        return 0;
    *s = os;
    *e = oe;
    *off = v;
    return 1;
}

/* next in decimal into buf (no terminator); returns the count of digits. */
static Py_ssize_t decimal(char buf[24], unsigned long long next)
{
    char tmp[24];
    Py_ssize_t n = 0;
    do {
        tmp[n++] = (char)('0' + next % 10);
        next /= 10;
    } while (next);
    for (Py_ssize_t k = 0; k < n; k++)
        buf[k] = tmp[n - 1 - k];
    return n;
}

/* Whether b == a[:s] + str(next) + a[e:]. */
static int follows(PyObject *b, PyObject *a, Py_ssize_t s, Py_ssize_t e, unsigned long long next)
{
    if (!PyUnicode_Check(b))
        return 0;
    char digits[24];
    Py_ssize_t nd = decimal(digits, next);
    Py_ssize_t an = PyUnicode_GET_LENGTH(a), tail = an - e;
    if (PyUnicode_GET_LENGTH(b) != s + nd + tail)
        return 0;
    if (PyUnicode_IS_COMPACT_ASCII(a) && PyUnicode_IS_COMPACT_ASCII(b)) {
        const char *pa = (const char *)PyUnicode_DATA(a), *pb = (const char *)PyUnicode_DATA(b);
        return memcmp(pa, pb, s) == 0 && memcmp(pb + s, digits, nd) == 0 &&
               memcmp(pa + e, pb + s + nd, tail) == 0;
    }
    int ka = PyUnicode_KIND(a), kb = PyUnicode_KIND(b);
    const void *da = PyUnicode_DATA(a), *db = PyUnicode_DATA(b);
    for (Py_ssize_t x = 0; x < s; x++)
        if (PyUnicode_READ(ka, da, x) != PyUnicode_READ(kb, db, x))
            return 0;
    for (Py_ssize_t x = 0; x < nd; x++)
        if (PyUnicode_READ(kb, db, s + x) != (Py_UCS4)(unsigned char)digits[x])
            return 0;
    for (Py_ssize_t x = 0; x < tail; x++)
        if (PyUnicode_READ(ka, da, e + x) != PyUnicode_READ(kb, db, s + nd + x))
            return 0;
    return 1;
}

/* ack_ranges(ids): as _common.ack_ranges (a new list; ids any sequence). */
static PyObject *ack_ranges(PyObject *mod, PyObject *ids)
{
    PyObject *seq = PySequence_Fast(ids, "ack_ranges: ids must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **v = PySequence_Fast_ITEMS(seq);
    PyObject *out = PyList_New(0);
    if (out == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n;) {
        PyObject *a = v[i];
        Py_ssize_t j = i + 1, s, e;
        unsigned long long first, last;
        PyObject *item = NULL;
        if (j < n && offset_field(a, &s, &e, &first)) {
            last = first;
            while (j < n && follows(v[j], a, s, e, last + 1)) {
                last++;
                j++;
            }
            if (last > first) {
                PyObject *head = PyUnicode_Substring(a, 0, s);
                PyObject *tail = head ? PyUnicode_Substring(a, e, PyUnicode_GET_LENGTH(a)) : NULL;
                if (tail != NULL)
                    item = PyUnicode_FromFormat("%U%llu~%llu%U", head, first, last, tail);
                Py_XDECREF(head);
                Py_XDECREF(tail);
                if (item == NULL)
                    goto fail;
            }
        }
        if (item == NULL)
            item = Py_NewRef(a);
        int rc = PyList_Append(out, item);
        Py_DECREF(item);
        if (rc < 0)
            goto fail;
        i = j;
    }
    Py_DECREF(seq);
    return out;
fail:
    Py_XDECREF(out);
    Py_DECREF(seq);
    return NULL;
}

/* ---- Chain ---- */

typedef struct {
    PyObject_HEAD PyObject *key; /* (topic, partition, ordering_chain) */
    PyObject *q;                 /* deque of Messages received, not handed out */
    PyObject *out;               /* handed to a handler, or None */
    PyObject *fence;             /* a nacked Message, or None */
    PyObject *fence_at;          /* when its result came (a float), or None */
    long long top;               /* offset of the last message received */
    char returned, sched;
} ChainObject;

/* Empty deques of freed chains, for the next chains: with many keys and few of a key's
 * records in a batch, a chain is made and freed for nearly every message (a batch's chains
 * freed together, with its messages), and a new deque allocates (malloc) its first block. At
 * most DEQUE_POOL, about 1 KB each; the GIL guards them. */
enum { DEQUE_POOL = 1024 };
static PyObject *deque_pool[DEQUE_POOL];
static int deque_pooled;

/* A new Chain of key (borrowed), or NULL. */
static PyObject *chain_make(PyTypeObject *cls, PyObject *key)
{
    ChainObject *c = (ChainObject *)cls->tp_alloc(cls, 0);
    if (c == NULL)
        return NULL;
    /* deque() without deque.__init__'s argument parsing: its __new__ makes an empty,
     * unbounded deque. */
    c->q =
        deque_pooled > 0
            ? deque_pool[--deque_pooled]
            : ((PyTypeObject *)deque_type)->tp_new((PyTypeObject *)deque_type, empty_tuple, NULL);
    if (c->q == NULL) {
        Py_DECREF(c);
        return NULL;
    }
    c->key = Py_NewRef(key);
    c->out = Py_NewRef(Py_None);
    c->fence = Py_NewRef(Py_None);
    c->fence_at = Py_NewRef(Py_None);
    c->top = -1;
    return (PyObject *)c;
}

static PyObject *chain_new(PyTypeObject *cls, PyObject *args, PyObject *kw)
{
    PyObject *key;
    static char *names[] = {"key", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O", names, &key))
        return NULL;
    return chain_make(cls, key);
}

static PyMemberDef chain_members[] = {
    {"key", T_OBJECT, offsetof(ChainObject, key), 0, NULL},
    {"q", T_OBJECT, offsetof(ChainObject, q), 0, NULL},
    {"out", T_OBJECT, offsetof(ChainObject, out), 0, NULL},
    {"returned", T_BOOL, offsetof(ChainObject, returned), 0, NULL},
    {"sched", T_BOOL, offsetof(ChainObject, sched), 0, NULL},
    {"top", T_LONGLONG, offsetof(ChainObject, top), 0, NULL},
    {"fence", T_OBJECT, offsetof(ChainObject, fence), 0, NULL},
    {"fence_at", T_OBJECT, offsetof(ChainObject, fence_at), 0, NULL},
    {NULL},
};

REFS_WALK(chain, chain_members)

/* Frees a chain, its empty deque (held by nothing else) kept in deque_pool. */
static void chain_dealloc(PyObject *o)
{
    ChainObject *c = (ChainObject *)o;
    PyObject_GC_UnTrack(o);
    PyObject *q = c->q;
    if (q != NULL && Py_IS_TYPE(q, (PyTypeObject *)deque_type) && Py_REFCNT(q) == 1 &&
        deque_pooled < DEQUE_POOL && PyObject_Size(q) == 0) {
        c->q = NULL; /* its reference goes to the pool */
        deque_pool[deque_pooled++] = q;
    }
    members_clear(o, chain_members);
    Py_TYPE(o)->tp_free(o);
}

/* ---- Lock: a dispatcher's lock, which its C calls take without a method call ---- */

typedef struct {
    PyObject_HEAD PyThread_type_lock lock;
    char locked;
} LockObject;

static PyTypeObject LockType;

/* Takes l, waiting with the GIL released while another thread holds it. */
static void lock_take(LockObject *l)
{
    if (!PyThread_acquire_lock(l->lock, NOWAIT_LOCK)) {
        Py_BEGIN_ALLOW_THREADS PyThread_acquire_lock(l->lock, WAIT_LOCK);
        Py_END_ALLOW_THREADS
    }
    l->locked = 1;
}

/* Releases l. 0, or -1 with RuntimeError when it was not held. */
static int lock_give(LockObject *l)
{
    if (!l->locked) {
        PyErr_SetString(PyExc_RuntimeError, "release unlocked lock");
        return -1;
    }
    l->locked = 0;
    PyThread_release_lock(l->lock);
    return 0;
}

static PyObject *lock_new(PyTypeObject *cls, PyObject *args, PyObject *kw)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kw != NULL && PyDict_GET_SIZE(kw) != 0)) {
        PyErr_SetString(PyExc_TypeError, "Lock() takes no arguments");
        return NULL;
    }
    LockObject *l = (LockObject *)cls->tp_alloc(cls, 0);
    if (l == NULL)
        return NULL;
    if ((l->lock = PyThread_allocate_lock()) == NULL) {
        Py_DECREF(l);
        return PyErr_NoMemory();
    }
    return (PyObject *)l;
}

static void lock_dealloc(LockObject *l)
{
    if (l->lock != NULL) {
        if (l->locked)
            PyThread_release_lock(l->lock);
        PyThread_free_lock(l->lock);
    }
    Py_TYPE(l)->tp_free((PyObject *)l);
}

/* acquire(blocking=True): as threading.Lock's, without a timeout. */
static PyObject *lock_acquire(LockObject *l, PyObject *const *args, Py_ssize_t nargs)
{
    int blocking = 1;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "acquire(blocking=True) takes at most 1 argument");
        return NULL;
    }
    if (nargs == 1 && (blocking = PyObject_IsTrue(args[0])) < 0)
        return NULL;
    if (!blocking) {
        if (!PyThread_acquire_lock(l->lock, NOWAIT_LOCK))
            Py_RETURN_FALSE;
        l->locked = 1;
        Py_RETURN_TRUE;
    }
    lock_take(l);
    Py_RETURN_TRUE;
}

static PyObject *lock_release(LockObject *l, PyObject *const *args, Py_ssize_t nargs)
{
    if (lock_give(l) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *lock_locked(LockObject *l, PyObject *unused)
{
    return PyBool_FromLong(l->locked);
}

static PyMethodDef lock_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))lock_acquire, METH_FASTCALL, NULL},
    {"__enter__", (PyCFunction)(void (*)(void))lock_acquire, METH_FASTCALL, NULL},
    {"release", (PyCFunction)(void (*)(void))lock_release, METH_FASTCALL, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))lock_release, METH_FASTCALL, NULL},
    {"locked", (PyCFunction)lock_locked, METH_NOARGS, NULL},
    {NULL},
};

/* ---- DispatcherCore: the per-message calls of _dispatch.Dispatcher ---- */

typedef struct {
    PyObject_HEAD PyObject *book;
    PyObject *lock; /* threading.Lock: the Python methods hold it too */
    PyObject *chains;
    PyObject *fenced;
    PyObject *push;
    double grace;
    Py_ssize_t dropped;
} DispatcherObject;

static PyMemberDef disp_members[] = {
    {"book", T_OBJECT, offsetof(DispatcherObject, book), 0, NULL},
    {"lock", T_OBJECT, offsetof(DispatcherObject, lock), 0, NULL},
    {"chains", T_OBJECT, offsetof(DispatcherObject, chains), 0, NULL},
    {"fenced", T_OBJECT, offsetof(DispatcherObject, fenced), 0, NULL},
    {"push", T_OBJECT, offsetof(DispatcherObject, push), 0, NULL},
    {"grace", T_DOUBLE, offsetof(DispatcherObject, grace), 0, NULL},
    {"dropped", T_PYSSIZET, offsetof(DispatcherObject, dropped), 0, NULL},
    {NULL},
};

REFS(disp, disp_members)

/* Takes d's lock (which may wait, the GIL released). 0, or -1 with an exception set. */
static int disp_lock(DispatcherObject *d)
{
    if (d->lock == NULL || d->chains == NULL || d->fenced == NULL || !PyDict_Check(d->chains) ||
        !PyDict_Check(d->fenced)) {
        PyErr_SetString(PyExc_TypeError, "ksidecar: Dispatcher not initialized");
        return -1;
    }
    if (Py_IS_TYPE(d->lock, &LockType)) {
        lock_take((LockObject *)d->lock);
        return 0;
    }
    PyObject *r = PyObject_CallMethodNoArgs(d->lock, s_acquire);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* Releases d's lock, keeping any exception already set. */
static void disp_unlock(DispatcherObject *d)
{
    if (Py_IS_TYPE(d->lock, &LockType)) {
        ((LockObject *)d->lock)->locked = 0; /* taken by disp_lock: held */
        PyThread_release_lock(((LockObject *)d->lock)->lock);
        return;
    }
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyObject *r = PyObject_CallMethodNoArgs(d->lock, s_release);
    if (r == NULL)
        PyErr_WriteUnraisable(d->lock);
    Py_XDECREF(r);
    PyErr_Restore(et, ev, tb);
}

/* The generation of a Batch or a Book: 0 and *gen, or -1. */
static int gen_of(PyObject *o, Py_ssize_t *gen)
{
    if (o != NULL && IS_A(o, BatchCoreType)) {
        *gen = ((BatchObject *)o)->gen;
        return 0;
    }
    if (o != NULL && IS_A(o, BookCoreType)) {
        *gen = ((BookObject *)o)->gen;
        return 0;
    }
    PyErr_SetString(PyExc_TypeError, "ksidecar: expected a Batch or a Book");
    return -1;
}

static int is_msg(PyObject *m)
{
    if (m != NULL && IS_A(m, MessageCoreType))
        return 1;
    PyErr_SetString(PyExc_TypeError, "ksidecar: expected a Message");
    return 0;
}

#define MSG(o)   ((MessageObject *)(o))
#define CHAIN(o) ((ChainObject *)(o))

/* A message's record offset: 0 and *off, or -1. */
static int msg_offset(PyObject *m, long long *off)
{
    PyObject *r = msg_rec(MSG(m));
    if (r == NULL)
        return -1;
    if (Py_IS_TYPE(r, &RecordType)) {
        *off = REC(r)->offset;
        return 0;
    }
    PyObject *v = rec_attr(r, s_offset);
    if (v == NULL)
        return -1;
    *off = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return *off == -1 && PyErr_Occurred() ? -1 : 0;
}

/* _drop: marks m DROPPED unless settled. 0 or -1. */
static int d_drop(DispatcherObject *d, PyObject *m)
{
    if (!is_msg(m))
        return -1;
    char *st = state_at(MSG(m)->batch, MSG(m)->i);
    if (st == NULL)
        return -1;
    if (!(*st & 1)) {
        *st = DROPPED;
        d->dropped++;
    }
    return 0;
}

/* _drop_from: drops q's messages from offset off on (q in offset order). 0 or -1. */
static int d_drop_from(DispatcherObject *d, PyObject *q, long long off)
{
    for (;;) {
        Py_ssize_t n = PyObject_Size(q);
        if (n < 0)
            return -1;
        if (n == 0)
            return 0;
        PyObject *last = PySequence_GetItem(q, n - 1);
        if (last == NULL)
            return -1;
        long long o;
        int rc = is_msg(last) ? msg_offset(last, &o) : -1;
        Py_DECREF(last);
        if (rc < 0)
            return -1;
        if (o < off)
            return 0;
        PyObject *m = deque_call(q, deque_pop, s_pop, NULL);
        if (m == NULL)
            return -1;
        rc = d_drop(d, m);
        Py_DECREF(m);
        if (rc < 0)
            return -1;
    }
}

/* Pops key from dict if there (dict.pop(key, None)), without making a KeyError when it is
 * not (a chain already forgotten is asked again). 0 or -1. */
static int dict_discard(PyObject *dict, PyObject *key)
{
    int in = PyDict_Contains(dict, key);
    return in <= 0 ? in : PyDict_DelItem(dict, key);
}

/* _forget: deletes c from d->chains when nothing of it is left; only c (once forgotten, a
 * newer chain may hold its key). 0 or -1. */
static int d_forget(DispatcherObject *d, ChainObject *c)
{
    if (c->out != Py_None || c->sched || c->fence != Py_None)
        return 0;
    Py_ssize_t n = PyObject_Size(c->q);
    if (n != 0)
        return n < 0 ? -1 : 0;
    PyObject *held = PyDict_GetItemWithError(d->chains, c->key); /* borrowed */
    if (held != (PyObject *)c)
        return held == NULL && PyErr_Occurred() ? -1 : 0;
    return PyDict_DelItem(d->chains, c->key);
}

/* _unfence: lifts c's fence. 0 or -1. */
static int d_unfence(DispatcherObject *d, ChainObject *c)
{
    if (!is_msg(c->fence))
        return -1;
    PyObject *id = msg_get_ack_id(MSG(c->fence), NULL);
    if (id == NULL)
        return -1;
    int rc = dict_discard(d->fenced, id);
    Py_DECREF(id);
    if (rc < 0)
        return -1;
    Py_SETREF(c->fence, Py_NewRef(Py_None));
    Py_SETREF(c->fence_at, Py_NewRef(Py_None));
    return 0;
}

/* _finished: c's message out is done. 1 when c has another to run (left scheduled), 0 when
 * not, -1 on error. */
static int d_finished(DispatcherObject *d, ChainObject *c)
{
    Py_SETREF(c->out, Py_NewRef(Py_None));
    c->returned = 0;
    Py_ssize_t n = PyObject_Size(c->q);
    if (n < 0)
        return -1;
    if (n == 0)
        return d_forget(d, c) < 0 ? -1 : 0;
    c->sched = 1;
    return 1;
}

/* The chain key of m's record (a new tuple), or Py_None (new) when its chain is 0, or NULL. */
static PyObject *chain_key(PyObject *m, long long *off)
{
    PyObject *r = msg_rec(MSG(m));
    if (r == NULL)
        return NULL;
    if (Py_IS_TYPE(r, &RecordType)) {
        RecordObject *rec = REC(r);
        if (rec->ordering_chain == 0)
            Py_RETURN_NONE;
        *off = rec->offset;
        PyObject *p = PyLong_FromLong(rec->partition);
        PyObject *cid = p ? PyLong_FromUnsignedLongLong(rec->ordering_chain) : NULL;
        PyObject *key = cid ? PyTuple_Pack(3, rec->topic, p, cid) : NULL;
        Py_XDECREF(p);
        Py_XDECREF(cid);
        if (key != NULL)
            PyObject_GC_UnTrack(key); /* a str and two ints: in no cycle, nothing to walk */
        return key;
    }
    PyObject *cid = rec_attr(r, s_ordering_chain);
    if (cid == NULL)
        return NULL;
    int t = PyObject_IsTrue(cid);
    if (t <= 0) {
        Py_DECREF(cid);
        if (t < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    PyObject *topic = rec_attr(r, s_topic);
    PyObject *p = topic ? rec_attr(r, s_partition) : NULL;
    PyObject *key = p ? PyTuple_Pack(3, topic, p, cid) : NULL;
    Py_XDECREF(topic);
    Py_XDECREF(p);
    Py_DECREF(cid);
    if (key != NULL && msg_offset(m, off) < 0)
        Py_CLEAR(key);
    return key;
}

static double monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* time.monotonic()'s clock on Linux */
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One chained message of receive(), under the lock. 1 when its chain is to be pushed (in
 * *ready), 0 when not, -1 on error. */
static int receive_one(DispatcherObject *d, PyObject *m, double now, PyObject **ready)
{
    long long off = 0;
    *ready = NULL;
    if (!is_msg(m))
        return -1;
    PyObject *key = chain_key(m, &off);
    if (key == NULL)
        return -1;
    if (key == Py_None) {
        Py_DECREF(key);
        return 0;
    }
    PyObject *c = PyDict_GetItemWithError(d->chains, key); /* borrowed */
    if (c == NULL) {
        if (PyErr_Occurred() || (c = chain_make(&ChainType, key)) == NULL) {
            Py_DECREF(key);
            return -1;
        }
        int rc = PyDict_SetItem(d->chains, key, c);
        Py_DECREF(c); /* the dict holds it */
        if (rc < 0) {
            Py_DECREF(key);
            return -1;
        }
    }
    Py_DECREF(key);
    if (!Py_IS_TYPE(c, &ChainType)) {
        PyErr_SetString(PyExc_TypeError, "ksidecar: Dispatcher.chains holds a non-Chain");
        return -1;
    }
    Py_INCREF(c);
    int res = -1;
    Py_SETREF(MSG(m)->ch, Py_NewRef(c));
    ChainObject *ch = CHAIN(c);
    if (ch->fence != Py_None) {
        PyObject *f = ch->fence;
        Py_ssize_t gm, gf;
        long long foff;
        if (!is_msg(f) || gen_of(MSG(m)->batch, &gm) < 0 || gen_of(MSG(f)->batch, &gf) < 0 ||
            msg_offset(f, &foff) < 0)
            goto out;
        int fresh = ch->fence_at == Py_None;
        if (!fresh) {
            double at = PyFloat_AsDouble(ch->fence_at);
            if (at == -1.0 && PyErr_Occurred())
                goto out;
            fresh = now - at < d->grace;
        }
        if (gm == gf && off > foff && fresh) {
            ch->top = off; /* sent before ksidecar read the nack: taken back */
            res = d_drop(d, m) < 0 ? -1 : 0;
            goto out;
        }
        if (d_unfence(d, ch) < 0) /* the nacked record (or a new stream) goes on */
            goto out;
    }
    if (off <= ch->top && d_drop_from(d, ch->q, off) < 0)
        goto out;
    ch->top = off;
    PyObject *r = deque_call(ch->q, deque_append, s_append, m);
    if (r == NULL)
        goto out;
    Py_DECREF(r);
    res = 0;
    if (d->push != NULL && d->push != Py_None && ch->out == Py_None && !ch->sched) {
        ch->sched = 1;
        *ready = Py_NewRef(c);
        res = 1;
    }
out:
    Py_DECREF(c);
    return res;
}

/* receive(msgs): Dispatcher.receive. */
static PyObject *disp_receive(DispatcherObject *d, PyObject *msgs)
{
    PyObject *seq = PySequence_Fast(msgs, "receive: msgs must be a sequence");
    if (seq == NULL)
        return NULL;
    PyObject *ready = PyList_New(0), *push = NULL;
    double now = monotonic_s();
    if (ready == NULL || disp_lock(d) < 0)
        goto fail;
    push = Py_XNewRef(d->push);
    int err = 0;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq) && !err; i++) {
        PyObject *c;
        int rc = receive_one(d, PySequence_Fast_GET_ITEM(seq, i), now, &c);
        if (rc > 0) {
            err = PyList_Append(ready, c) < 0;
            Py_DECREF(c);
        }
        err |= rc < 0;
    }
    disp_unlock(d);
    if (err)
        goto fail;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ready); i++) {
        PyObject *r = PyObject_CallOneArg(push, PyList_GET_ITEM(ready, i));
        if (r == NULL)
            goto fail;
        Py_DECREF(r);
    }
    Py_XDECREF(push);
    Py_DECREF(ready);
    Py_DECREF(seq);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(push);
    Py_XDECREF(ready);
    Py_DECREF(seq);
    return NULL;
}

/* push(c), after the lock: gives chain c to the workers. 0 or -1. */
static int d_push(DispatcherObject *d, PyObject *c)
{
    PyObject *push = Py_XNewRef(d->push);
    if (push == NULL || push == Py_None) {
        Py_XDECREF(push);
        PyErr_SetString(PyExc_TypeError, "ksidecar: Dispatcher.push is not set");
        return -1;
    }
    PyObject *r = PyObject_CallOneArg(push, c);
    Py_DECREF(push);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* hand(m) under the lock: 1 (hand it out), 0 (dropped: skip it), -1. */
static int disp_hand_c(DispatcherObject *d, PyObject *m)
{
    if (!is_msg(m) || disp_lock(d) < 0)
        return -1;
    int res = -1;
    char *st = state_at(MSG(m)->batch, MSG(m)->i);
    if (st == NULL)
        goto out;
    if (*st & 1) {
        res = 0;
        goto out;
    }
    PyObject *c = MSG(m)->ch;
    if (c == NULL || !Py_IS_TYPE(c, &ChainType)) {
        PyErr_SetString(PyExc_TypeError, "ksidecar: hand() of a message of no Chain");
        goto out;
    }
    Py_INCREF(c);
    PyObject *q = CHAIN(c)->q;
    Py_ssize_t n = PyObject_Size(q);
    PyObject *first = n > 0 ? PySequence_GetItem(q, 0) : NULL;
    PyObject *r = NULL;
    if (n < 0 || (n > 0 && first == NULL)) {
        /* error set */
    } else if (first == m) {
        r = deque_call(q, deque_popleft, s_popleft, NULL);
    } else {
        int in = n > 0 ? PySequence_Contains(q, m) : 0;
        r = in > 0    ? PyObject_CallMethodOneArg(q, s_remove, m)
            : in == 0 ? Py_NewRef(Py_None)
                      : NULL;
    }
    Py_XDECREF(first);
    if (r != NULL) {
        Py_DECREF(r);
        res = d_forget(d, CHAIN(c)) < 0 ? -1 : 1;
    }
    Py_DECREF(c);
out:
    disp_unlock(d);
    return res;
}

static PyObject *disp_hand(DispatcherObject *d, PyObject *m)
{
    int t = disp_hand_c(d, m);
    return t < 0 ? NULL : PyBool_FromLong(t);
}

/* settle(m, nack) (self a DispatcherCore): 1 when m was settled now, 0 when it was already
 * (or dropped), -1 on error. May call push (a chain handed on) after the lock. */
static int disp_settle_c(PyObject *self, PyObject *m, int nack)
{
    DispatcherObject *d = (DispatcherObject *)self;
    if (!is_msg(m))
        return -1;
    PyObject *c = MSG(m)->ch;
    if (c == NULL || !Py_IS_TYPE(c, &ChainType)) {
        PyErr_SetString(PyExc_TypeError, "ksidecar: settle() of a message of no Chain");
        return -1;
    }
    if (disp_lock(d) < 0)
        return -1;
    Py_INCREF(c);
    int res = -1, more = 0;
    ChainObject *ch = CHAIN(c);
    char *st = state_at(MSG(m)->batch, MSG(m)->i);
    if (st == NULL)
        goto out;
    if (*st & 1) {
        res = 0;
        goto out;
    }
    *st = SETTLED;
    if (nack) {
        Py_ssize_t gm, gb;
        if (gen_of(MSG(m)->batch, &gm) < 0 || gen_of(d->book, &gb) < 0)
            goto out;
        if (gm == gb) {
            /* The iterator form forgets a chain once all of it was handed out: the fence
             * goes on the chain now known by that key. */
            PyObject *f = PyDict_SetDefault(d->chains, ch->key, c); /* borrowed */
            long long off;
            if (f == NULL || msg_offset(m, &off) < 0)
                goto out;
            if (!Py_IS_TYPE(f, &ChainType)) {
                PyErr_SetString(PyExc_TypeError, "ksidecar: Dispatcher.chains holds a non-Chain");
                goto out;
            }
            Py_INCREF(f);
            PyObject *id = NULL;
            int ok = d_drop_from(d, CHAIN(f)->q, off + 1) == 0;
            if (ok && CHAIN(f)->fence != Py_None) {
                ok = is_msg(CHAIN(f)->fence) &&
                     (id = msg_get_ack_id(MSG(CHAIN(f)->fence), NULL)) != NULL &&
                     dict_discard(d->fenced, id) == 0;
                Py_CLEAR(id);
            }
            if (ok) {
                Py_SETREF(CHAIN(f)->fence, Py_NewRef(m));
                Py_SETREF(CHAIN(f)->fence_at, Py_NewRef(Py_None));
                ok = (id = msg_get_ack_id(MSG(m), NULL)) != NULL &&
                     PyDict_SetItem(d->fenced, id, f) == 0;
                Py_XDECREF(id);
            }
            Py_DECREF(f);
            if (!ok)
                goto out;
        }
    }
    if (ch->out == m && ch->returned) {
        if ((more = d_finished(d, ch)) < 0)
            goto out;
    } else if (ch->out == Py_None && d_forget(d, ch) < 0) {
        goto out;
    }
    res = 1;
out:
    disp_unlock(d);
    if (res == 1 && more && d_push(d, c) < 0)
        res = -1;
    Py_DECREF(c);
    return res;
}

static PyObject *disp_settle(DispatcherObject *d, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "settle(m, nack) takes 2 arguments");
        return NULL;
    }
    int nack = PyObject_IsTrue(args[1]);
    if (nack < 0)
        return NULL;
    int t = disp_settle_c((PyObject *)d, args[0], nack);
    return t < 0 ? NULL : PyBool_FromLong(t);
}

/* take(c): Dispatcher.take, the callback forms' next message of scheduled chain c. */
static PyObject *disp_take(DispatcherObject *d, PyObject *c)
{
    Py_ssize_t gen;
    if (!Py_IS_TYPE(c, &ChainType)) {
        PyErr_SetString(PyExc_TypeError, "ksidecar: take() of a non-Chain");
        return NULL;
    }
    if (gen_of(d->book, &gen) < 0 || disp_lock(d) < 0)
        return NULL;
    ChainObject *ch = CHAIN(c);
    PyObject *res = NULL;
    Py_INCREF(c);
    ch->sched = 0;
    for (;;) {
        Py_ssize_t n = PyObject_Size(ch->q);
        if (n <= 0) {
            if (n == 0 && d_forget(d, ch) == 0)
                res = Py_NewRef(Py_None);
            break;
        }
        PyObject *m = deque_call(ch->q, deque_popleft, s_popleft, NULL);
        Py_ssize_t gm;
        if (m == NULL || !is_msg(m) || gen_of(MSG(m)->batch, &gm) < 0) {
            Py_XDECREF(m);
            break;
        }
        if (gm != gen) { /* purge ran or is about to: its lease is gone */
            int rc = d_drop(d, m);
            Py_DECREF(m);
            if (rc < 0)
                break;
            continue;
        }
        Py_SETREF(ch->out, Py_NewRef(m));
        ch->returned = 0;
        res = m;
        break;
    }
    disp_unlock(d);
    Py_DECREF(c);
    return res;
}

/* done(c, m, n): Dispatcher.done, after m's handler returned (n of c's messages ran before
 * it in this turn). */
static PyObject *disp_done(DispatcherObject *d, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t n;
    if (nargs != 3 || !Py_IS_TYPE(args[0], &ChainType) || !is_msg(args[1])) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "done(c, m, n): a Chain, a Message and a count");
        return NULL;
    }
    if ((n = PyLong_AsSsize_t(args[2])) == -1 && PyErr_Occurred())
        return NULL;
    PyObject *c = args[0], *m = args[1];
    ChainObject *ch = CHAIN(c);
    int go = -1, push = 0;
    if (disp_lock(d) < 0)
        return NULL;
    Py_INCREF(c);
    char *st = state_at(MSG(m)->batch, MSG(m)->i);
    if (st != NULL) {
        if (!(*st & 1)) {
            if (*st == UNSETTLED)
                *st = RELEASED;
            ch->returned = 1;
            go = 0;
        } else if ((go = d_finished(d, ch)) > 0 && n + 1 >= CHAIN_RUN) {
            push = 1;
            go = 0;
        }
    }
    disp_unlock(d);
    if (push && d_push(d, c) < 0)
        go = -1;
    Py_DECREF(c);
    return go < 0 ? NULL : PyBool_FromLong(go);
}

static PyMethodDef disp_methods[] = {
    {"receive", (PyCFunction)disp_receive, METH_O, NULL},
    {"hand", (PyCFunction)disp_hand, METH_O, NULL},
    {"settle", (PyCFunction)(void (*)(void))disp_settle, METH_FASTCALL, NULL},
    {"take", (PyCFunction)disp_take, METH_O, NULL},
    {"done", (PyCFunction)(void (*)(void))disp_done, METH_FASTCALL, NULL},
    {NULL},
};

/* ---- the loops: a batch's messages made and handed out one at a time ---- */

typedef struct {
    PyObject_HEAD PyObject *cls; /* a MessageCore subclass */
    PyObject *batch;
    PyObject *seq; /* iter_messages: the batch's records; iter_handed: its messages */
    PyObject *disp;
    Py_ssize_t i;
} LoopObject;

static PyTypeObject MessagesIterType, HandedIterType;

/* Not exposed: the loops' references, for REFS. */
static PyMemberDef loop_refs[] = {
    {"cls", T_OBJECT, offsetof(LoopObject, cls), READONLY, NULL},
    {"batch", T_OBJECT, offsetof(LoopObject, batch), READONLY, NULL},
    {"seq", T_OBJECT, offsetof(LoopObject, seq), READONLY, NULL},
    {"disp", T_OBJECT, offsetof(LoopObject, disp), READONLY, NULL},
    {NULL},
};

REFS(loop, loop_refs)

static PyObject *messages_next(LoopObject *l)
{
    if (l->seq == NULL || l->i >= PySequence_Fast_GET_SIZE(l->seq)) {
        loop_clear((PyObject *)l);
        return NULL;
    }
    PyObject *rec = PySequence_Fast_GET_ITEM(l->seq, l->i);
    PyTypeObject *cls = (PyTypeObject *)l->cls;
    Py_ssize_t i = l->i++;
    if (cls->tp_new == MessageCoreType.tp_new && cls->tp_init == PyBaseObject_Type.tp_init)
        return msg_make(cls, rec, l->batch, i);
    return PyObject_CallFunction(l->cls, "OOn", rec, l->batch, i);
}

/* iter_messages(cls, batch): an iterator of a new cls(rec, batch, i) for each record of
 * batch.recs, made when asked for (map(cls, recs, repeat(batch), range(n))). */
static PyObject *iter_messages(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyType_Check(args[0]) ||
        !PyType_IsSubtype((PyTypeObject *)args[0], &MessageCoreType) ||
        !IS_A(args[1], BatchCoreType)) {
        PyErr_SetString(PyExc_TypeError, "iter_messages(cls, batch): a Message class and a Batch");
        return NULL;
    }
    PyObject *recs = ((BatchObject *)args[1])->recs;
    if (recs == NULL) {
        PyErr_SetString(PyExc_TypeError, "iter_messages: the batch has no records");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(recs, "iter_messages: batch.recs must be a sequence");
    if (seq == NULL)
        return NULL;
    LoopObject *l = PyObject_GC_New(LoopObject, &MessagesIterType);
    if (l == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    l->cls = Py_NewRef(args[0]);
    l->batch = Py_NewRef(args[1]);
    l->seq = seq;
    l->disp = NULL;
    l->i = 0;
    PyObject_GC_Track(l);
    return (PyObject *)l;
}

static PyObject *handed_next(LoopObject *l)
{
    while (l->seq != NULL && l->i < PySequence_Fast_GET_SIZE(l->seq)) {
        PyObject *m = Py_NewRef(PySequence_Fast_GET_ITEM(l->seq, l->i));
        l->i++;
        if (!is_msg(m)) {
            Py_DECREF(m);
            return NULL;
        }
        if (MSG(m)->ch == NULL || MSG(m)->ch == Py_None)
            return m;
        int t = IS_A(l->disp, DispatcherCoreType) ? disp_hand_c((DispatcherObject *)l->disp, m)
                                                  : call_truth(l->disp, s_hand, m, NULL);
        if (t > 0)
            return m;
        Py_DECREF(m);
        if (t < 0)
            return NULL;
    }
    loop_clear((PyObject *)l);
    return NULL;
}

/* iter_handed(msgs, disp): msgs' messages in order, each unordered one as it is and each
 * chained one when disp.hand(m) takes it (asked when it is its turn). */
static PyObject *iter_handed(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "iter_handed(msgs, disp) takes 2 arguments");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[0], "iter_handed: msgs must be a sequence");
    if (seq == NULL)
        return NULL;
    LoopObject *l = PyObject_GC_New(LoopObject, &HandedIterType);
    if (l == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    l->cls = NULL;
    l->batch = NULL;
    l->seq = seq;
    l->disp = Py_NewRef(args[1]);
    l->i = 0;
    PyObject_GC_Track(l);
    return (PyObject *)l;
}

/* Subscriber._handle: callback(m); an Exception from it goes to sub._raised(m, e), its
 * traceback attached. 0, or -1 with any other exception (KeyboardInterrupt, SystemExit) or
 * one of _raised set. */
static int handle(PyObject *callback, PyObject *sub, PyObject *m)
{
    PyObject *r = PyObject_CallOneArg(callback, m);
    if (r == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            return -1;
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        PyErr_NormalizeException(&et, &ev, &tb);
        if (tb != NULL)
            PyException_SetTraceback(ev, tb);
        PyObject *call[3] = {sub, m, ev};
        r = PyObject_VectorcallMethod(s_raised, call, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
        if (r == NULL)
            return -1;
    }
    Py_DECREF(r);
    return 0;
}

/* run_messages(msgs, callback, sub): _common.run_messages, a sync Subscriber's worker on
 * unordered messages. An Exception from callback goes to sub._raised(m, e), its traceback
 * attached; any other (KeyboardInterrupt, SystemExit) ends the worker as it would in Python. */
static PyObject *run_messages(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "run_messages(msgs, callback, sub) takes 3 arguments");
        return NULL;
    }
    PyObject *callback = args[1], *sub = args[2], *res = NULL;
    PyObject *seq = PySequence_Fast(args[0], "run_messages: msgs must be a sequence");
    if (seq == NULL)
        return NULL;
    PyObject *book = PyObject_GetAttr(sub, s_book);
    if (book == NULL)
        goto out;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *m = PySequence_Fast_GET_ITEM(seq, i);
        Py_ssize_t gm, gb;
        int closing = call_truth_attr(sub, s_closing);
        if (closing != 0) {
            if (closing > 0)
                res = Py_NewRef(Py_False);
            goto out;
        }
        if (!is_msg(m) || gen_of(MSG(m)->batch, &gm) < 0 || gen_of(book, &gb) < 0)
            goto out;
        if (gm != gb)
            continue; /* its stream broke: ksidecar delivers it again */
        Py_INCREF(m);
        if (handle(callback, sub, m) < 0) {
            Py_DECREF(m);
            goto out;
        }
        char *st = state_at(MSG(m)->batch, MSG(m)->i); /* released if not settled */
        Py_DECREF(m);
        if (st == NULL)
            goto out;
        if (*st == UNSETTLED)
            *st = RELEASED;
    }
    res = Py_NewRef(Py_True);
out:
    Py_XDECREF(book);
    Py_DECREF(seq);
    return res;
}

/* run_chain(c, callback, sub): _dispatch.run_chain, a sync Subscriber's worker running
 * scheduled chain c's messages one after another while the next is ready (the dispatcher's
 * take and done called in C when sub.book.disp is a DispatcherCore). */
static PyObject *run_chain(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "run_chain(c, callback, sub) takes 3 arguments");
        return NULL;
    }
    PyObject *c = args[0], *callback = args[1], *sub = args[2], *disp = NULL, *res = NULL;
    PyObject *book = PyObject_GetAttr(sub, s_book);
    if (book == NULL || (disp = PyObject_GetAttr(book, s_disp)) == NULL)
        goto out;
    int fast = IS_A(disp, DispatcherCoreType);
    for (Py_ssize_t n = 0;; n++) {
        int closing = call_truth_attr(sub, s_closing);
        if (closing < 0)
            goto out;
        if (closing)
            break;
        PyObject *m = fast ? disp_take((DispatcherObject *)disp, c)
                           : PyObject_CallMethodOneArg(disp, s_take, c);
        if (m == NULL)
            goto out;
        if (m == Py_None) {
            Py_DECREF(m);
            break;
        }
        PyObject *r = NULL, *nn = handle(callback, sub, m) < 0 ? NULL : PyLong_FromSsize_t(n);
        if (nn != NULL) {
            PyObject *call[4] = {disp, c, m, nn};
            r = fast ? disp_done((DispatcherObject *)disp, call + 1, 3)
                     : PyObject_VectorcallMethod(s_done, call, 4 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                                 NULL);
            Py_DECREF(nn);
        }
        Py_DECREF(m);
        int go = r ? PyObject_IsTrue(r) : -1;
        Py_XDECREF(r);
        if (go < 0)
            goto out;
        if (!go)
            break; /* not settled yet (its settle goes on), or pushed for later */
    }
    res = Py_NewRef(Py_None);
out:
    Py_XDECREF(disp);
    Py_XDECREF(book);
    return res;
}

/* unchained(msgs): a list of msgs' messages of no ordering chain (their _ch None). */
static PyObject *unchained(PyObject *mod, PyObject *msgs)
{
    PyObject *seq = PySequence_Fast(msgs, "unchained: msgs must be a sequence");
    if (seq == NULL)
        return NULL;
    PyObject *out = PyList_New(0);
    for (Py_ssize_t i = 0; out != NULL && i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *m = PySequence_Fast_GET_ITEM(seq, i);
        if (!is_msg(m) ||
            ((MSG(m)->ch == NULL || MSG(m)->ch == Py_None) && PyList_Append(out, m) < 0))
            Py_CLEAR(out);
    }
    Py_DECREF(seq);
    return out;
}

/* any_chained(recs): whether some record has an ordering_chain. */
static PyObject *any_chained(PyObject *mod, PyObject *recs)
{
    PyObject *seq = PySequence_Fast(recs, "any_chained: recs must be a sequence");
    if (seq == NULL)
        return NULL;
    int found = 0;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq) && !found; i++) {
        PyObject *r = PySequence_Fast_GET_ITEM(seq, i);
        if (Py_IS_TYPE(r, &RecordType)) {
            found = REC(r)->ordering_chain != 0;
            continue;
        }
        PyObject *v = rec_attr(r, s_ordering_chain);
        found = v ? PyObject_IsTrue(v) : -1;
        Py_XDECREF(v);
        if (found < 0) {
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_DECREF(seq);
    return PyBool_FromLong(found);
}

/* ---- types and module ---- */

static PyTypeObject HeaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ksidecar._speedups.Header",
    .tp_basicsize = sizeof(HeaderObject),
    .tp_dealloc = (destructor)header_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A record header (consumer.proto Header): key, value, value_null.",
    .tp_members = header_members,
};

static PyTypeObject RecordType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ksidecar._speedups.Record",
    .tp_basicsize = sizeof(RecordObject),
    .tp_dealloc = (destructor)record_dealloc,
    .tp_repr = (reprfunc)record_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A delivered record (consumer.proto Record), read-only, made by decode_batch.",
    .tp_members = record_members,
};

#define GC_TYPE(NAME, STRUCT, PREFIX)                                                              \
    .tp_name = "ksidecar._speedups." NAME, .tp_basicsize = sizeof(STRUCT),                         \
    .tp_dealloc = (destructor)PREFIX##_dealloc, .tp_traverse = (traverseproc)PREFIX##_traverse,    \
    .tp_clear = (inquiry)PREFIX##_clear,                                                           \
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE

static PyTypeObject BookCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0) GC_TYPE("BookCore", BookObject, book),
    .tp_doc = "The fields of a Book that Message.ack() reads.",
    .tp_members = book_members,
    .tp_new = PyType_GenericNew,
};

static PyTypeObject BatchCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0) GC_TYPE("BatchCore", BatchObject, batch),
    .tp_doc = "The fields of a Batch.",
    .tp_members = batch_members,
    .tp_new = PyType_GenericNew,
};

static PyTypeObject MessageCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0) GC_TYPE("MessageCore", MessageObject, msg),
    .tp_doc = "MessageCore(rec, batch, i): a Message's fields, getters and ack().",
    .tp_members = msg_members,
    .tp_getset = msg_getset,
    .tp_methods = msg_methods,
    .tp_new = msg_new,
};

static PyTypeObject ChainType = {
    PyVarObject_HEAD_INIT(NULL, 0) GC_TYPE("Chain", ChainObject, chain),
    .tp_doc = "Chain(key): what the dispatcher knows of one ordering chain.",
    .tp_members = chain_members,
    .tp_new = chain_new,
};

static PyTypeObject DispatcherCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0) GC_TYPE("DispatcherCore", DispatcherObject, disp),
    .tp_doc = "The fields of a Dispatcher and its per-message calls: receive, hand, settle.",
    .tp_members = disp_members,
    .tp_methods = disp_methods,
    .tp_new = PyType_GenericNew,
};

static PyTypeObject LockType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ksidecar._speedups.Lock",
    .tp_basicsize = sizeof(LockObject),
    .tp_dealloc = (destructor)lock_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Lock(): a lock as threading.Lock (acquire(blocking), release, with), that the "
              "extension's dispatcher calls take without a method call.",
    .tp_methods = lock_methods,
    .tp_new = lock_new,
};

static PyTypeObject MessagesIterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ksidecar._speedups.MessagesIter",
    .tp_basicsize = sizeof(LoopObject),
    .tp_dealloc = (destructor)loop_dealloc,
    .tp_traverse = (traverseproc)loop_traverse,
    .tp_clear = (inquiry)loop_clear,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)messages_next,
};

static PyTypeObject HandedIterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ksidecar._speedups.HandedIter",
    .tp_basicsize = sizeof(LoopObject),
    .tp_dealloc = (destructor)loop_dealloc,
    .tp_traverse = (traverseproc)loop_traverse,
    .tp_clear = (inquiry)loop_clear,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)handed_next,
};

static PyMethodDef module_methods[] = {
    {"decode_batch", decode_batch, METH_O,
     "decode_batch(data): a batch SubscribeResponse's records (a list of Record), or None for "
     "another kind of response."},
    {"ack_ranges", ack_ranges, METH_O, "ack_ranges(ids): as ksidecar._common.ack_ranges."},
    {"iter_messages", (PyCFunction)(void (*)(void))iter_messages, METH_FASTCALL,
     "iter_messages(cls, batch): a new cls(rec, batch, i) for each record, when asked for."},
    {"iter_handed", (PyCFunction)(void (*)(void))iter_handed, METH_FASTCALL,
     "iter_handed(msgs, disp): the messages to hand out, asking disp.hand() of chained ones."},
    {"run_messages", (PyCFunction)(void (*)(void))run_messages, METH_FASTCALL,
     "run_messages(msgs, callback, sub): a sync Subscriber's worker on unordered messages."},
    {"run_chain", (PyCFunction)(void (*)(void))run_chain, METH_FASTCALL,
     "run_chain(c, callback, sub): a sync Subscriber's worker on scheduled chain c."},
    {"unchained", unchained, METH_O,
     "unchained(msgs): the messages of msgs of no ordering chain, in a list."},
    {"any_chained", any_chained, METH_O,
     "any_chained(recs): whether a record has an ordering_chain."},
    {NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "ksidecar._speedups",
    "The ksidecar library's per-record path in C (the pure-Python modules are the reference).",
    -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__speedups(void)
{
    struct {
        PyObject **s;
        const char *v;
    } names[] = {
        {&s_ack_id, "ack_id"},
        {&s_topic, "topic"},
        {&s_partition, "partition"},
        {&s_offset, "offset"},
        {&s_key, "key"},
        {&s_value, "value"},
        {&s_ordering_chain, "ordering_chain"},
        {&s_append, "append"},
        {&s_pop, "pop"},
        {&s_popleft, "popleft"},
        {&s_remove, "remove"},
        {&s_settle, "settle"},
        {&s_flush, "flush"},
        {&s_hand, "hand"},
        {&s_acquire, "acquire"},
        {&s_release, "release"},
        {&s_empty_str, ""},
        {&s_book, "book"},
        {&s_closing, "_closing"},
        {&s_raised, "_raised"},
        {&s_disp, "disp"},
        {&s_take, "take"},
        {&s_done, "done"},
    };
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (*names[k].s == NULL && (*names[k].s = PyUnicode_InternFromString(names[k].v)) == NULL)
            return NULL;
    for (size_t k = 0; record_members[k].name != NULL; k++)
        if (rec_names[k] == NULL &&
            (rec_names[k] = PyUnicode_InternFromString(record_members[k].name)) == NULL)
            return NULL;
    /* Each field getter's row of record_members, found by its name: a getter without one
     * fails the import. */
    for (PyGetSetDef *g = msg_getset; g->name != NULL; g++) {
        if (g->get != (getter)msg_get_field && g->get != (getter)msg_get_nullable)
            continue;
        for (PyMemberDef *f = record_members; f->name != NULL && g->closure == NULL; f++)
            if (strcmp(f->name, g->name) == 0)
                g->closure = f;
        PyMemberDef *f = g->closure;
        if (f == NULL || (g->get == (getter)msg_get_nullable &&
                          (f[1].type != T_BOOL || strncmp(f[1].name, f->name, strlen(f->name))))) {
            PyErr_Format(PyExc_SystemError, "ksidecar._speedups: no Record field for %s", g->name);
            return NULL;
        }
    }
    if (empty_bytes == NULL && (empty_bytes = PyBytes_FromStringAndSize(NULL, 0)) == NULL)
        return NULL;
    if (empty_tuple == NULL && (empty_tuple = PyTuple_New(0)) == NULL)
        return NULL;
    if (deque_type == NULL) {
        PyObject *collections = PyImport_ImportModule("collections");
        if (collections == NULL)
            return NULL;
        deque_type = PyObject_GetAttrString(collections, "deque");
        Py_DECREF(collections);
        if (deque_type == NULL || !PyType_Check(deque_type) ||
            (deque_append = PyObject_GetAttr(deque_type, s_append)) == NULL ||
            (deque_pop = PyObject_GetAttr(deque_type, s_pop)) == NULL ||
            (deque_popleft = PyObject_GetAttr(deque_type, s_popleft)) == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_SystemError,
                                "ksidecar._speedups: collections.deque is not a type");
            return NULL;
        }
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "CHAIN_RUN", CHAIN_RUN) < 0)
        goto fail;
    struct {
        PyTypeObject *t;
        const char *name;
    } types[] = {
        {&HeaderType, "Header"},
        {&RecordType, "Record"},
        {&BookCoreType, "BookCore"},
        {&BatchCoreType, "BatchCore"},
        {&MessageCoreType, "MessageCore"},
        {&ChainType, "Chain"},
        {&DispatcherCoreType, "DispatcherCore"},
        {&LockType, "Lock"},
        {&MessagesIterType, NULL},
        {&HandedIterType, NULL},
    };
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        if (PyType_Ready(types[k].t) < 0)
            goto fail;
        if (types[k].name != NULL) {
            Py_INCREF(types[k].t);
            if (PyModule_AddObject(m, types[k].name, (PyObject *)types[k].t) < 0) {
                Py_DECREF(types[k].t);
                goto fail;
            }
        }
    }
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
