/*
 * The per-record hot paths of gregor.protocol.records, in C.
 *
 * records.py holds the reference implementation of each function here and falls back to
 * it when this module was not built; the tests run both on the same inputs, valid and
 * fuzzed. Every length is checked against the end of its record before it is used, so
 * malformed input raises the error class records.py hands over, and nothing else.
 *
 *   make_decoder(record_type, error_type) -> decode_records
 *   decode_records(data: bytes, count, base_offset, base_timestamp, append_time | None)
 *       -> list of record_type instances, built without calling its __init__: the
 *          fields are stored into the instance's slots (their offsets are read from the
 *          class's member descriptors once, in make_decoder).
 *   decode_columns(sections) -> records.decode_columns's tuple: the records of many
 *       batches' record sections as Arrow-layout column buffers (bytearrays), without a
 *       Python object per record; it checks every record as decode_records does
 *   murmur2(data) -> the Java client's murmur2, a signed 32-bit int
 *   crc32c(data, value=0) -> the CRC-32C of data, continuing from value (as the crc32c
 *       package computes it); SSE4.2 instructions in three interleaved streams where the
 *       CPU has them, a table otherwise
 *   stamp_produced_batch(data, base_offset, leader_epoch, max_size)
 *       -> (prefix, last_offset_delta, base_timestamp, max_timestamp, producer_id,
 *          producer_epoch, base_sequence), or None when data is anything but one
 *          well-formed batch as a client produces it; prefix is the batch's first 16
 *          bytes with the base offset and leader epoch set (nothing else changes).
 *   append_record(buf: bytearray, offset_delta, timestamp_delta, key, value)
 *       -> the bytes appended to buf: one record without headers, length first; None
 *          (buf untouched) when a field is outside what it encodes (not a buffer or None,
 *          a delta out of range), for the general encoder to handle
 *   bind_builder(BatchBuilder) -> builder_append(builder, value, key, timestamp)
 *       -> True, or None (builder untouched) for the general path: BatchBuilder.append of
 *          a record without headers, through the class's slots (offsets read once)
 *
 * The check of a produced batch, CRC-32C and the builder's append are also exported in a
 * capsule (_produced_batch.h), for gregor-storage's and gregor-client's extensions.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#include "_produced_batch.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define HAVE_SSE42_CRC 1
#endif

#define RECORD_FIELDS 5
static const char *const record_field_names[RECORD_FIELDS] = {
    "offset", "timestamp", "key", "value", "headers"};

typedef struct {
    PyTypeObject *record_type;
    PyObject *error_type;
    Py_ssize_t field_offsets[RECORD_FIELDS];
    PyObject *empty_tuple;
} module_state;

static module_state *
get_state(PyObject *module)
{
    return (module_state *)PyModule_GetState(module);
}

/* Sets the module's error with a message; returns NULL for `return fail(...)`. */
static PyObject *
fail(module_state *st, const char *message)
{
    PyErr_SetString(st->error_type, message);
    return NULL;
}

/* An unsigned LEB128 varint of at most `max_bytes` bytes from [*p, end). */
static int
read_uvarint(const unsigned char **p, const unsigned char *end, int max_bytes, uint64_t *out)
{
    const unsigned char *q = *p;
    uint64_t value = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (q >= end) {
            return -1;
        }
        unsigned char byte = *q++;
        if (shift == 63 && byte > 1) {
            return -1; /* more than 64 bits */
        }
        value |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *p = q;
            *out = value;
            return 0;
        }
        shift += 7;
    }
    return -1;
}

/* A zigzag varint (32-bit, five bytes at most), as Kafka's ByteUtils.readVarint. */
static int
read_varint(const unsigned char **p, const unsigned char *end, int32_t *out)
{
    const unsigned char *q = *p;
    if (q < end && *q < 0x80) { /* nearly every varint of a record is one byte */
        *out = (int32_t)((*q >> 1) ^ -(*q & 1));
        *p = q + 1;
        return 0;
    }
    uint64_t raw;
    if (read_uvarint(p, end, 5, &raw) < 0 || raw > 0xFFFFFFFFu) {
        return -1;
    }
    uint32_t u = (uint32_t)raw;
    *out = (int32_t)((u >> 1) ^ (~(u & 1) + 1));
    return 0;
}

/* A zigzag varlong (64-bit, ten bytes at most). */
static int
read_varlong(const unsigned char **p, const unsigned char *end, int64_t *out)
{
    uint64_t raw;
    if (read_uvarint(p, end, 10, &raw) < 0) {
        return -1;
    }
    *out = (int64_t)((raw >> 1) ^ (~(raw & 1) + 1));
    return 0;
}

/* base + delta as a Python int, exact even where int64 would overflow. */
static PyObject *
add_int64(int64_t base, int64_t delta)
{
    int64_t sum;
    if (!__builtin_add_overflow(base, delta, &sum)) {
        return PyLong_FromLongLong(sum);
    }
    PyObject *a = PyLong_FromLongLong(base);
    PyObject *b = a ? PyLong_FromLongLong(delta) : NULL;
    PyObject *result = b ? PyNumber_Add(a, b) : NULL;
    Py_XDECREF(a);
    Py_XDECREF(b);
    return result;
}

/* A length-prefixed byte string: None for a negative length. */
static PyObject *
read_nullable_bytes(module_state *st, const unsigned char **p, const unsigned char *end,
                    const char *what)
{
    int32_t size;
    if (read_varint(p, end, &size) < 0) {
        return fail(st, "record is truncated");
    }
    if (size < 0) {
        Py_RETURN_NONE;
    }
    if (size > end - *p) {
        PyErr_Format(st->error_type, "record %s of %d bytes does not fit the record", what,
                     (int)size);
        return NULL;
    }
    PyObject *result = PyBytes_FromStringAndSize((const char *)*p, size);
    *p += size;
    return result;
}

static PyObject *
read_headers(module_state *st, const unsigned char **p, const unsigned char *end)
{
    int32_t count;
    if (read_varint(p, end, &count) < 0) {
        return fail(st, "record is truncated");
    }
    if (count == 0) {
        Py_INCREF(st->empty_tuple);
        return st->empty_tuple;
    }
    /* A header is two bytes at least: a forged count must not size the tuple. */
    if (count < 0 || count > (end - *p) / 2) {
        PyErr_Format(st->error_type, "record declares %d headers", (int)count);
        return NULL;
    }
    PyObject *headers = PyTuple_New(count);
    if (headers == NULL) {
        return NULL;
    }
    for (int32_t i = 0; i < count; i++) {
        int32_t size;
        if (read_varint(p, end, &size) < 0) {
            Py_DECREF(headers);
            return fail(st, "record is truncated");
        }
        if (size < 0 || size > end - *p) {
            Py_DECREF(headers);
            return fail(st, "record header key does not fit the record");
        }
        PyObject *name = PyUnicode_DecodeUTF8((const char *)*p, size, NULL);
        if (name == NULL) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                PyErr_SetString(st->error_type, "record header key is not UTF-8");
            }
            Py_DECREF(headers);
            return NULL;
        }
        *p += size;
        PyObject *value = read_nullable_bytes(st, p, end, "header value");
        if (value == NULL) {
            Py_DECREF(name);
            Py_DECREF(headers);
            return NULL;
        }
        PyObject *pair = PyTuple_Pack(2, name, value);
        Py_DECREF(name);
        Py_DECREF(value);
        if (pair == NULL) {
            Py_DECREF(headers);
            return NULL;
        }
        PyTuple_SET_ITEM(headers, i, pair);
    }
    return headers;
}

/* One record from [*p, end); *p moves past it. */
static PyObject *
read_record(module_state *st, const unsigned char **p, const unsigned char *end,
            int64_t base_offset, int64_t base_timestamp, PyObject *append_time)
{
    int32_t size;
    if (read_varint(p, end, &size) < 0) {
        return fail(st, "record is truncated");
    }
    if (size < 6 || size > end - *p) {
        PyErr_Format(st->error_type, "record of %d bytes does not fit its batch", (int)size);
        return NULL;
    }
    const unsigned char *record_end = *p + size;
    int64_t timestamp_delta;
    int32_t offset_delta;
    (*p)++; /* attributes: no version defines any */
    if (read_varlong(p, record_end, &timestamp_delta) < 0 ||
        read_varint(p, record_end, &offset_delta) < 0) {
        return fail(st, "record is truncated");
    }
    PyObject *fields[RECORD_FIELDS] = {NULL};
    PyObject *record = NULL;
    fields[0] = add_int64(base_offset, offset_delta);
    if (fields[0] == NULL) {
        goto done;
    }
    if (append_time == Py_None) {
        fields[1] = add_int64(base_timestamp, timestamp_delta);
    }
    else {
        Py_INCREF(append_time);
        fields[1] = append_time;
    }
    if (fields[1] == NULL ||
        (fields[2] = read_nullable_bytes(st, p, record_end, "key")) == NULL ||
        (fields[3] = read_nullable_bytes(st, p, record_end, "value")) == NULL ||
        (fields[4] = read_headers(st, p, record_end)) == NULL) {
        goto done;
    }
    if (*p != record_end) {
        PyErr_Format(st->error_type, "record declares %zd bytes more than its fields hold",
                     (Py_ssize_t)(record_end - *p));
        goto done;
    }
    record = st->record_type->tp_alloc(st->record_type, 0);
    if (record == NULL) {
        goto done;
    }
    for (int i = 0; i < RECORD_FIELDS; i++) {
        /* the slot takes the reference */
        *(PyObject **)((char *)record + st->field_offsets[i]) = fields[i];
        fields[i] = NULL;
    }
    /* A record holds ints, bytes, None and tuples of str and bytes: it can never be part
     * of a reference cycle, so the cyclic GC need not walk it (which it would, for every
     * record of every batch, at every young collection). */
    if (PyObject_IS_GC(record)) {
        PyObject_GC_UnTrack(record);
    }
done:
    for (int i = 0; i < RECORD_FIELDS; i++) {
        Py_XDECREF(fields[i]);
    }
    return record;
}

static PyObject *
decode_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    module_state *st = get_state(module);
    if (st->record_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "make_decoder() was not called");
        return NULL;
    }
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "decode_records(data, count, base_offset, base_timestamp, append_time)");
        return NULL;
    }
    if (!PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "records data must be bytes");
        return NULL;
    }
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    int64_t base_offset = PyLong_AsLongLong(args[2]);
    int64_t base_timestamp = PyLong_AsLongLong(args[3]);
    PyObject *append_time = args[4];
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (append_time != Py_None && !PyLong_Check(append_time)) {
        PyErr_SetString(PyExc_TypeError, "append_time must be an int or None");
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    const unsigned char *end = p + PyBytes_GET_SIZE(args[0]);
    /* Seven bytes is the smallest record: a forged count must not size the list. */
    if (count < 0 || count > (end - p) / 7) {
        PyErr_Format(st->error_type, "batch declares %zd records in %zd bytes", count,
                     (Py_ssize_t)(end - p));
        return NULL;
    }
    PyObject *records = PyList_New(count);
    if (records == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *record = read_record(st, &p, end, base_offset, base_timestamp, append_time);
        if (record == NULL) {
            Py_DECREF(records);
            return NULL;
        }
        PyList_SET_ITEM(records, i, record);
    }
    if (p != end) {
        Py_DECREF(records);
        PyErr_Format(st->error_type, "batch holds %zd bytes after its %zd records",
                     (Py_ssize_t)(end - p), count);
        return NULL;
    }
    return records;
}

static PyMethodDef decode_records_def = {
    "decode_records", (PyCFunction)(void (*)(void))decode_records, METH_FASTCALL,
    "decode_records(data, count, base_offset, base_timestamp, append_time) -> list"};

/* The offsets of cls's writable slots `names` (from its member descriptors); -1 with
   TypeError when one is not such a slot. */
static int
slot_offsets(PyObject *cls, const char *const *names, int count, Py_ssize_t *offsets)
{
    for (int i = 0; i < count; i++) {
        PyObject *descr = PyObject_GetAttrString(cls, names[i]);
        if (descr == NULL) {
            return -1;
        }
        int ok = Py_IS_TYPE(descr, &PyMemberDescr_Type) &&
                 ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX &&
                 !(((PyMemberDescrObject *)descr)->d_member->flags & READONLY);
        if (ok) {
            offsets[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
        }
        Py_DECREF(descr);
        if (!ok) {
            PyErr_Format(PyExc_TypeError, "%s is not a writable slot of %R", names[i], cls);
            return -1;
        }
    }
    return 0;
}

static PyObject *
make_decoder(PyObject *module, PyObject *args)
{
    PyObject *record_type;
    PyObject *error_type;
    if (!PyArg_ParseTuple(args, "O!O:make_decoder", &PyType_Type, &record_type, &error_type)) {
        return NULL;
    }
    if (!PyExceptionClass_Check(error_type)) {
        PyErr_SetString(PyExc_TypeError, "error_type must be an exception class");
        return NULL;
    }
    module_state *st = get_state(module);
    Py_ssize_t offsets[RECORD_FIELDS];
    if (slot_offsets(record_type, record_field_names, RECORD_FIELDS, offsets) < 0) {
        return NULL;
    }
    Py_INCREF(record_type);
    Py_INCREF(error_type);
    Py_XSETREF(st->record_type, (PyTypeObject *)record_type);
    Py_XSETREF(st->error_type, error_type);
    memcpy(st->field_offsets, offsets, sizeof(offsets));
    return PyCFunction_NewEx(&decode_records_def, module, NULL);
}

/* -- decode_columns: the records of many batches as Arrow-layout columns ----------------- */

#define SECTION_FIELDS 8

/* A column of nullable byte strings: validity bitmap (bit set: present), int32 offsets,
   data; each a bytearray sized for the worst case and trimmed at the end. */
typedef struct {
    PyObject *validity, *offsets, *data;
    int32_t length; /* bytes of data so far */
    Py_ssize_t nulls;
} binary_column;

static int
binary_column_init(binary_column *c, Py_ssize_t rows, Py_ssize_t bytes)
{
    c->length = 0;
    c->nulls = 0;
    c->validity = PyByteArray_FromStringAndSize(NULL, (rows + 7) / 8);
    c->offsets = PyByteArray_FromStringAndSize(NULL, 4 * (rows + 1));
    c->data = PyByteArray_FromStringAndSize(NULL, bytes);
    if (c->validity == NULL || c->offsets == NULL || c->data == NULL) {
        return -1;
    }
    memset(PyByteArray_AS_STRING(c->validity), 0, (size_t)PyByteArray_GET_SIZE(c->validity));
    memset(PyByteArray_AS_STRING(c->offsets), 0, 4);
    return 0;
}

static void
binary_column_clear(binary_column *c)
{
    Py_CLEAR(c->validity);
    Py_CLEAR(c->offsets);
    Py_CLEAR(c->data);
}

/* Row `row` of the column: the bytes [p, p + size), or null for a negative size. */
static void
binary_column_set(binary_column *c, Py_ssize_t row, const unsigned char *p, int32_t size)
{
    if (size < 0) {
        c->nulls++;
    }
    else {
        memcpy(PyByteArray_AS_STRING(c->data) + c->length, p, (size_t)size);
        c->length += size;
        PyByteArray_AS_STRING(c->validity)[row / 8] |= (char)(1 << (row % 8));
    }
    memcpy(PyByteArray_AS_STRING(c->offsets) + 4 * (row + 1), &c->length, 4);
}

/* The varint length of a nullable byte string in [*p, end), which must fit: -1 for null. */
static int
skip_nullable_bytes(module_state *st, const unsigned char **p, const unsigned char *end,
                    const char *what, int32_t *size)
{
    if (read_varint(p, end, size) < 0) {
        fail(st, "record is truncated");
        return -1;
    }
    if (*size > end - *p) {
        PyErr_Format(st->error_type, "record %s of %d bytes does not fit the record", what,
                     (int)*size);
        return -1;
    }
    if (*size > 0) {
        *p += *size;
    }
    return 0;
}

/* Checks the headers of a record (as read_headers does) and moves past them. */
static int
skip_headers(module_state *st, const unsigned char **p, const unsigned char *end)
{
    int32_t count;
    if (read_varint(p, end, &count) < 0) {
        fail(st, "record is truncated");
        return -1;
    }
    if (count < 0 || count > (end - *p) / 2) {
        PyErr_Format(st->error_type, "record declares %d headers", (int)count);
        return -1;
    }
    for (int32_t i = 0; i < count; i++) {
        int32_t size;
        if (read_varint(p, end, &size) < 0) {
            fail(st, "record is truncated");
            return -1;
        }
        if (size < 0 || size > end - *p) {
            fail(st, "record header key does not fit the record");
            return -1;
        }
        PyObject *name = PyUnicode_DecodeUTF8((const char *)*p, size, NULL);
        if (name == NULL) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                PyErr_SetString(st->error_type, "record header key is not UTF-8");
            }
            return -1;
        }
        Py_DECREF(name);
        *p += size;
        if (skip_nullable_bytes(st, p, end, "header value", &size) < 0) {
            return -1;
        }
    }
    return 0;
}

typedef struct {
    Py_buffer data;
    Py_ssize_t count;
    int64_t base_offset, base_timestamp, append_time, start, end;
    int has_append_time;
    int32_t timestamp_type;
} section;

/* One section tuple: (data, count, base_offset, base_timestamp, append_time or None,
   timestamp_type, start, end); the buffer is released by the caller (also on failure,
   when data.obj is set). */
static int
parse_section(module_state *st, PyObject *item, section *s)
{
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != SECTION_FIELDS) {
        PyErr_SetString(PyExc_TypeError,
                        "a section is (data, count, base_offset, base_timestamp, append_time, "
                        "timestamp_type, start, end)");
        return -1;
    }
    PyObject *append_time = PyTuple_GET_ITEM(item, 4);
    if (append_time != Py_None && !PyLong_Check(append_time)) {
        PyErr_SetString(PyExc_TypeError, "append_time must be an int or None");
        return -1;
    }
    s->count = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 1));
    s->base_offset = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 2));
    s->base_timestamp = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 3));
    s->has_append_time = append_time != Py_None;
    s->append_time = s->has_append_time ? PyLong_AsLongLong(append_time) : 0;
    s->timestamp_type = (int32_t)PyLong_AsLong(PyTuple_GET_ITEM(item, 5));
    s->start = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 6));
    s->end = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 7));
    if (PyErr_Occurred()) {
        return -1;
    }
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(item, 0), &s->data, PyBUF_SIMPLE) < 0) {
        return -1;
    }
    /* Seven bytes is the smallest record: a forged count must not size the columns. */
    if (s->count < 0 || s->count > s->data.len / 7) {
        PyErr_Format(st->error_type, "batch declares %zd records in %zd bytes", s->count,
                     s->data.len);
        return -1;
    }
    return 0;
}

typedef struct {
    Py_ssize_t rows;
    PyObject *offsets, *timestamps, *timestamp_types;
    binary_column key, value;
} columns;

/* The section's records with start <= offset < end, appended to the columns. */
static int
decode_section(module_state *st, const section *s, columns *out)
{
    const unsigned char *p = (const unsigned char *)s->data.buf;
    const unsigned char *end = p + s->data.len;
    int64_t *offsets = (int64_t *)PyByteArray_AS_STRING(out->offsets);
    int64_t *timestamps = (int64_t *)PyByteArray_AS_STRING(out->timestamps);
    int32_t *types = (int32_t *)PyByteArray_AS_STRING(out->timestamp_types);
    for (Py_ssize_t i = 0; i < s->count; i++) {
        int32_t size;
        if (read_varint(&p, end, &size) < 0) {
            fail(st, "record is truncated");
            return -1;
        }
        if (size < 6 || size > end - p) {
            PyErr_Format(st->error_type, "record of %d bytes does not fit its batch", (int)size);
            return -1;
        }
        const unsigned char *record_end = p + size;
        int64_t timestamp_delta;
        int32_t offset_delta;
        p++; /* attributes: no version defines any */
        if (read_varlong(&p, record_end, &timestamp_delta) < 0 ||
            read_varint(&p, record_end, &offset_delta) < 0) {
            fail(st, "record is truncated");
            return -1;
        }
        int32_t key_size, value_size; /* the pointers are where their data ends, less size */
        if (skip_nullable_bytes(st, &p, record_end, "key", &key_size) < 0) {
            return -1;
        }
        const unsigned char *key = p - (key_size > 0 ? key_size : 0);
        if (skip_nullable_bytes(st, &p, record_end, "value", &value_size) < 0) {
            return -1;
        }
        const unsigned char *value = p - (value_size > 0 ? value_size : 0);
        if (skip_headers(st, &p, record_end) < 0) {
            return -1;
        }
        if (p != record_end) {
            PyErr_Format(st->error_type, "record declares %zd bytes more than its fields hold",
                         (Py_ssize_t)(record_end - p));
            return -1;
        }
        int64_t offset, timestamp = s->append_time;
        if (__builtin_add_overflow(s->base_offset, (int64_t)offset_delta, &offset) ||
            (!s->has_append_time &&
             __builtin_add_overflow(s->base_timestamp, timestamp_delta, &timestamp))) {
            fail(st, "record offset or timestamp is outside int64");
            return -1;
        }
        if (offset < s->start || offset >= s->end) {
            continue;
        }
        Py_ssize_t row = out->rows++;
        offsets[row] = offset;
        timestamps[row] = timestamp;
        types[row] = s->timestamp_type;
        binary_column_set(&out->key, row, key, key_size);
        binary_column_set(&out->value, row, value, value_size);
    }
    if (p != end) {
        PyErr_Format(st->error_type, "batch holds %zd bytes after its %zd records",
                     (Py_ssize_t)(end - p), s->count);
        return -1;
    }
    return 0;
}

static PyObject *
decode_columns(PyObject *module, PyObject *arg)
{
    module_state *st = get_state(module);
    if (st->error_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "make_decoder() was not called");
        return NULL;
    }
    PyObject *items = PySequence_Fast(arg, "sections must be a sequence");
    if (items == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(items);
    section *sections = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof(section));
    columns out = {0};
    PyObject *result = NULL;
    if (sections == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t rows = 0, bytes = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (parse_section(st, PySequence_Fast_GET_ITEM(items, i), &sections[i]) < 0) {
            goto done;
        }
        rows += sections[i].count;
        bytes += sections[i].data.len;
    }
    if (bytes > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "sections of more than 2 GiB in one call");
        goto done;
    }
    out.offsets = PyByteArray_FromStringAndSize(NULL, 8 * rows);
    out.timestamps = PyByteArray_FromStringAndSize(NULL, 8 * rows);
    out.timestamp_types = PyByteArray_FromStringAndSize(NULL, 4 * rows);
    if (out.offsets == NULL || out.timestamps == NULL || out.timestamp_types == NULL ||
        binary_column_init(&out.key, rows, bytes) < 0 ||
        binary_column_init(&out.value, rows, bytes) < 0) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (decode_section(st, &sections[i], &out) < 0) {
            goto done;
        }
    }
    rows = out.rows;
    binary_column *binaries[2] = {&out.key, &out.value};
    if (PyByteArray_Resize(out.offsets, 8 * rows) < 0 || PyByteArray_Resize(out.timestamps, 8 * rows) < 0 ||
        PyByteArray_Resize(out.timestamp_types, 4 * rows) < 0) {
        goto done;
    }
    for (int i = 0; i < 2; i++) {
        binary_column *c = binaries[i];
        if (PyByteArray_Resize(c->validity, (rows + 7) / 8) < 0 || PyByteArray_Resize(c->offsets, 4 * (rows + 1)) < 0 ||
            PyByteArray_Resize(c->data, c->length) < 0) {
            goto done;
        }
    }
    result = Py_BuildValue("(nOOOOnOOOnOO)", rows, out.offsets, out.timestamps,
                           out.timestamp_types, out.key.validity, out.key.nulls,
                           out.key.offsets, out.key.data, out.value.validity, out.value.nulls,
                           out.value.offsets, out.value.data);
done:
    if (sections != NULL) {
        for (Py_ssize_t i = 0; i < n; i++) {
            if (sections[i].data.obj != NULL) {
                PyBuffer_Release(&sections[i].data);
            }
        }
        PyMem_Free(sections);
    }
    Py_XDECREF(out.offsets);
    Py_XDECREF(out.timestamps);
    Py_XDECREF(out.timestamp_types);
    binary_column_clear(&out.key);
    binary_column_clear(&out.value);
    Py_DECREF(items);
    return result;
}

static PyObject *
murmur2(PyObject *module, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *data = (const unsigned char *)view.buf;
    Py_ssize_t length = view.len;
    const uint32_t m = 0x5bd1e995;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    Py_ssize_t words = length / 4;
    for (Py_ssize_t i = 0; i < words; i++) {
        const unsigned char *w = data + 4 * i;
        uint32_t k = (uint32_t)w[0] | ((uint32_t)w[1] << 8) | ((uint32_t)w[2] << 16) |
                     ((uint32_t)w[3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    const unsigned char *tail = data + 4 * words;
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)tail[2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)tail[1] << 8;
        /* fall through */
    case 1:
        h ^= tail[0];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    PyBuffer_Release(&view);
    return PyLong_FromLong((long)(int32_t)h);
}

/* -- CRC-32C ------------------------------------------------------------------------- */

/* The reflected Castagnoli polynomial. In this representation bit 31 is the coefficient of
 * x^0 and bit 0 that of x^31; the CRC register holds the remainder mod P this way. */
#define CRC32C_POLY 0x82F63B78u

static uint32_t crc32c_table[256];

/* a * b mod P, both in the reflected representation (shift-and-add, one bit at a time). */
static uint32_t
gf2_multiply(uint32_t a, uint32_t b)
{
    uint32_t product = 0;
    for (uint32_t bit = 1u << 31; bit != 0; bit >>= 1) {
        if (a & bit) {
            product ^= b;
        }
        b = (b & 1) ? (b >> 1) ^ CRC32C_POLY : b >> 1; /* b *= x */
    }
    return product;
}

/* x^(8 * nbytes) mod P: what the register is multiplied by when nbytes zeros go through. */
static uint32_t
x_to_the_8n(size_t nbytes)
{
    uint32_t result = 1u << 31; /* x^0 */
    uint32_t square = 1u << 23; /* x^8 */
    while (nbytes) {
        if (nbytes & 1) {
            result = gf2_multiply(result, square);
        }
        square = gf2_multiply(square, square);
        nbytes >>= 1;
    }
    return result;
}

static uint32_t
crc32c_software(uint32_t crc, const unsigned char *p, size_t n)
{
    while (n--) {
        crc = (crc >> 8) ^ crc32c_table[(crc ^ *p++) & 0xFF];
    }
    return crc;
}

#ifdef HAVE_SSE42_CRC
/* The crc32 instruction takes three cycles to give its result but can start one every
 * cycle, so three independent streams over three adjacent blocks keep it busy. The
 * register of a stream that started from zero is then folded in: the register after
 * A then B is (register after A) * x^(8|B|) + (register of B from zero), and multiplying
 * by the constant x^(8|B|) is linear, so four 256-entry tables (one per byte) do it. */
#define LONG_BLOCK 2048
#define SHORT_BLOCK 256

static uint32_t long_shift[4][256];
static uint32_t short_shift[4][256];
static int have_sse42;

static void
make_shift_table(uint32_t table[4][256], size_t nbytes)
{
    uint32_t factor = x_to_the_8n(nbytes);
    for (int byte = 0; byte < 4; byte++) {
        for (uint32_t value = 0; value < 256; value++) {
            table[byte][value] = gf2_multiply(factor, value << (8 * byte));
        }
    }
}

static inline uint32_t
shift_crc(const uint32_t table[4][256], uint32_t crc)
{
    return table[0][crc & 0xFF] ^ table[1][(crc >> 8) & 0xFF] ^ table[2][(crc >> 16) & 0xFF] ^
           table[3][crc >> 24];
}

static inline uint64_t
load64(const unsigned char *p)
{
    uint64_t word;
    memcpy(&word, p, 8);
    return word;
}

__attribute__((target("sse4.2"))) static uint32_t
crc32c_three_streams(uint32_t crc, const unsigned char **pp, size_t *np, size_t block,
                     const uint32_t table[4][256])
{
    const unsigned char *p = *pp;
    size_t n = *np;
    while (n >= 3 * block) {
        uint64_t c0 = crc, c1 = 0, c2 = 0;
        const unsigned char *end = p + block;
        do {
            c0 = _mm_crc32_u64(c0, load64(p));
            c1 = _mm_crc32_u64(c1, load64(p + block));
            c2 = _mm_crc32_u64(c2, load64(p + 2 * block));
            p += 8;
        } while (p < end);
        crc = shift_crc(table, shift_crc(table, (uint32_t)c0) ^ (uint32_t)c1) ^ (uint32_t)c2;
        p += 2 * block;
        n -= 3 * block;
    }
    *pp = p;
    *np = n;
    return crc;
}

__attribute__((target("sse4.2"))) static uint32_t
crc32c_hardware(uint32_t crc, const unsigned char *p, size_t n)
{
    crc = crc32c_three_streams(crc, &p, &n, LONG_BLOCK, long_shift);
    crc = crc32c_three_streams(crc, &p, &n, SHORT_BLOCK, short_shift);
    uint64_t c = crc;
    for (; n >= 8; n -= 8, p += 8) {
        c = _mm_crc32_u64(c, load64(p));
    }
    crc = (uint32_t)c;
    for (; n; n--) {
        crc = _mm_crc32_u8(crc, *p++);
    }
    return crc;
}
#endif

static void
crc32c_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t crc = i;
        for (int k = 0; k < 8; k++) {
            crc = (crc & 1) ? (crc >> 1) ^ CRC32C_POLY : crc >> 1;
        }
        crc32c_table[i] = crc;
    }
#ifdef HAVE_SSE42_CRC
    __builtin_cpu_init();
    have_sse42 = __builtin_cpu_supports("sse4.2");
    if (have_sse42) {
        make_shift_table(long_shift, LONG_BLOCK);
        make_shift_table(short_shift, SHORT_BLOCK);
    }
#endif
}

/* The CRC-32C of [p, p + n) continuing from `value` (a finished CRC, 0 to start). */
static uint32_t
crc32c_update(uint32_t value, const unsigned char *p, size_t n)
{
    uint32_t crc = ~value;
#ifdef HAVE_SSE42_CRC
    if (have_sse42) {
        return ~crc32c_hardware(crc, p, n);
    }
#endif
    return ~crc32c_software(crc, p, n);
}

/* Large inputs are checksummed without the GIL, so other threads go on meanwhile. */
#define CRC_GIL_RELEASE_BYTES (256 * 1024)

static PyObject *
crc32c(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "crc32c(data, value=0)");
        return NULL;
    }
    uint32_t value = 0;
    if (nargs == 2) {
        unsigned long v = PyLong_AsUnsignedLongMask(args[1]);
        if (v == (unsigned long)-1 && PyErr_Occurred()) {
            return NULL;
        }
        value = (uint32_t)v;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    uint32_t result;
    if (view.len >= CRC_GIL_RELEASE_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        result = crc32c_update(value, view.buf, (size_t)view.len);
        Py_END_ALLOW_THREADS
    }
    else {
        result = crc32c_update(value, view.buf, (size_t)view.len);
    }
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(result);
}

/* -- stamping a produced batch ------------------------------------------------------ */

/* The check behind stamp_produced_batch (and gregor-storage's append), on the caller's
 * bytes: they are not copied, so the caller keeps them unchanged until it has written them. */
static int
check_produced_batch(const unsigned char *in, int64_t size, int64_t leader_epoch,
                     int64_t max_size, gregor_produced_header *out)
{
    /* The header, as records.py's _HEADER reads it. */
    if (size < 61 || leader_epoch < INT32_MIN || leader_epoch > INT32_MAX || size > max_size) {
        return 0;
    }
    int64_t given_base_offset = (int64_t)gregor_read_be(in, 8);
    int magic = in[16];
    uint32_t stored_crc = (uint32_t)gregor_read_be(in + 17, 4);
    int attributes = (int16_t)gregor_read_be(in + 21, 2);
    int32_t records_count = (int32_t)gregor_read_be(in + 57, 4);
    out->batch_length = (int32_t)gregor_read_be(in + 8, 4);
    out->last_offset_delta = (int32_t)gregor_read_be(in + 23, 4);
    out->base_timestamp = (int64_t)gregor_read_be(in + 27, 8);
    out->max_timestamp = (int64_t)gregor_read_be(in + 35, 8);
    out->producer_id = (int64_t)gregor_read_be(in + 43, 8);
    out->producer_epoch = (int16_t)gregor_read_be(in + 51, 2);
    out->base_sequence = (int32_t)gregor_read_be(in + 53, 4);
    if (out->batch_length + 12 != size || magic != 2 || given_base_offset != 0 ||
        records_count < 1 || (int64_t)out->last_offset_delta != (int64_t)records_count - 1 ||
        (attributes & 0x20) /* control */ || (attributes & 0x07) > 4 /* unknown codec */ ||
        ((attributes & 0x10) && out->producer_id < 0) /* transactional without a producer */) {
        return 0;
    }
    return crc32c_update(0, in + 21, (size_t)(size - 21)) == stored_crc;
}

static PyObject *
stamp_produced_batch(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError,
                        "stamp_produced_batch(data, base_offset, leader_epoch, max_size)");
        return NULL;
    }
    long long base_offset = PyLong_AsLongLong(args[1]);
    long long leader_epoch = PyLong_AsLongLong(args[2]);
    long long max_size = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    gregor_produced_header h;
    unsigned char prefix[GREGOR_STAMPED_PREFIX];
    PyObject *result;
    if (check_produced_batch(view.buf, view.len, leader_epoch, max_size, &h)) {
        gregor_stamp_prefix(prefix, view.buf, base_offset, (int32_t)leader_epoch);
        result = Py_BuildValue("(y#iLLLii)", (const char *)prefix, (Py_ssize_t)sizeof prefix,
                               (int)h.last_offset_delta, (long long)h.base_timestamp,
                               (long long)h.max_timestamp, (long long)h.producer_id,
                               h.producer_epoch, (int)h.base_sequence);
    }
    else {
        result = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&view);
    return result;
}

/* -- encoding one record (the producer's per-record path) -------------------------------- */

/* Bytes of v as a zigzag varlong. */
static int
zigzag_size(int64_t v)
{
    uint64_t raw = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    int n = 1;
    while (raw >= 0x80) {
        raw >>= 7;
        n++;
    }
    return n;
}

static unsigned char *
put_zigzag(unsigned char *out, int64_t v)
{
    uint64_t raw = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (raw >= 0x80) {
        *out++ = (unsigned char)(raw | 0x80);
        raw >>= 7;
    }
    *out++ = (unsigned char)raw;
    return out;
}

/* A key or value: bytes (or any contiguous buffer), or None. 1 on success, 0 for a type
   the general encoder must handle (it raises the error), -1 with an exception set. */
static int
get_field(PyObject *obj, Py_buffer *view, int *is_null)
{
    *is_null = 0;
    if (obj == Py_None) {
        *is_null = 1;
        view->buf = NULL;
        view->len = 0;
        view->obj = NULL;
        return 1;
    }
    if (!PyObject_CheckBuffer(obj) || PyUnicode_Check(obj)) {
        return 0;
    }
    return PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) == 0 ? 1 : -1;
}

/* One record without headers at the end of buf (a bytearray): the bytes appended; -2 when a
   field needs the general encoder (records.py's _record_body; buf untouched); -1 with an
   exception set. */
static Py_ssize_t
encode_record(PyObject *buf, long long offset_delta, long long timestamp_delta, PyObject *key_obj,
              PyObject *value_obj)
{
    if (offset_delta < 0 || offset_delta > INT32_MAX) {
        return -2;
    }
    Py_buffer key, value;
    int key_null, value_null;
    int ok = get_field(key_obj, &key, &key_null);
    if (ok <= 0) {
        return ok == 0 ? -2 : -1;
    }
    ok = get_field(value_obj, &value, &value_null);
    if (ok <= 0) {
        if (!key_null) {
            PyBuffer_Release(&key);
        }
        return ok == 0 ? -2 : -1;
    }
    Py_ssize_t total = -2;
    if (key.len > INT32_MAX || value.len > INT32_MAX) {
        goto done;
    }
    int64_t key_len = key_null ? -1 : (int64_t)key.len;
    int64_t value_len = value_null ? -1 : (int64_t)value.len;
    Py_ssize_t body = 1 + zigzag_size(timestamp_delta) + zigzag_size(offset_delta) +
                      zigzag_size(key_len) + key.len + zigzag_size(value_len) + value.len + 1;
    Py_ssize_t start = PyByteArray_GET_SIZE(buf);
    if (PyByteArray_Resize(buf, start + zigzag_size(body) + body) < 0) {
        total = -1;
        goto done;
    }
    total = zigzag_size(body) + body;
    unsigned char *out = (unsigned char *)PyByteArray_AS_STRING(buf) + start;
    out = put_zigzag(out, body);
    *out++ = 0; /* attributes */
    out = put_zigzag(out, timestamp_delta);
    out = put_zigzag(out, offset_delta);
    out = put_zigzag(out, key_len);
    if (key.len) {
        memcpy(out, key.buf, key.len);
        out += key.len;
    }
    out = put_zigzag(out, value_len);
    if (value.len) {
        memcpy(out, value.buf, value.len);
        out += value.len;
    }
    *out++ = 0; /* no headers */
done:
    if (!key_null) {
        PyBuffer_Release(&key);
    }
    if (!value_null) {
        PyBuffer_Release(&value);
    }
    return total;
}

/* append_record(buf, offset_delta, timestamp_delta, key, value) -> size appended, or None
   when a field needs the general encoder (records.py's _record_body). No headers. */
static PyObject *
append_record(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyByteArray_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError,
                        "append_record(buf: bytearray, offset_delta, timestamp_delta, key, value)");
        return NULL;
    }
    if (!PyLong_CheckExact(args[1]) || !PyLong_CheckExact(args[2])) {
        Py_RETURN_NONE;
    }
    int overflow = 0;
    long long offset_delta = PyLong_AsLongLongAndOverflow(args[1], &overflow);
    if (overflow) {
        Py_RETURN_NONE;
    }
    long long timestamp_delta = PyLong_AsLongLongAndOverflow(args[2], &overflow);
    if (overflow) {
        Py_RETURN_NONE;
    }
    Py_ssize_t size = encode_record(args[0], offset_delta, timestamp_delta, args[3], args[4]);
    if (size == -2) {
        Py_RETURN_NONE;
    }
    return size < 0 ? NULL : PyLong_FromSsize_t(size);
}

/* -- BatchBuilder.append, through the builder's slots --------------------------------------- */

/* The BatchBuilder slots the append reads and writes, by offset (bind_builder reads them
   from the class's member descriptors); process-wide, as the capsule's users need them. */
enum { B_BUF, B_BASE_TIMESTAMP, B_LAST_DELTA, B_COUNT, B_MAX_TIMESTAMP, BUILDER_SLOTS };
static const char *const builder_slot_names[BUILDER_SLOTS] = {
    "_buf", "_base_timestamp", "_last_delta", "_count", "_max_timestamp"};
static Py_ssize_t builder_offsets[BUILDER_SLOTS];
static PyTypeObject *builder_type; /* NULL until bound */

static PyObject **
builder_slot(PyObject *builder, int name)
{
    return (PyObject **)((char *)builder + builder_offsets[name]);
}

/* The slot's int, when it holds one that fits int64 (else 0). */
static int
builder_int(PyObject *builder, int name, long long *out)
{
    PyObject *value = *builder_slot(builder, name);
    if (value == NULL || !PyLong_CheckExact(value)) {
        return 0;
    }
    int overflow;
    *out = PyLong_AsLongLongAndOverflow(value, &overflow);
    return !overflow;
}

/* The capsule's builder_append: what BatchBuilder.append does for a record without headers
   and with a timestamp, offset_delta one past the previous record's. */
static int
builder_append_c(PyObject *builder, PyObject *key, PyObject *value, int64_t timestamp)
{
    if (builder_type == NULL || Py_TYPE(builder) != builder_type) {
        return 0;
    }
    PyObject *buf = *builder_slot(builder, B_BUF);
    PyObject *base_obj = *builder_slot(builder, B_BASE_TIMESTAMP);
    long long base = timestamp, last_delta, count, max_timestamp, delta;
    if (buf == NULL || !PyByteArray_CheckExact(buf) || base_obj == NULL ||
        (base_obj != Py_None && !builder_int(builder, B_BASE_TIMESTAMP, &base)) ||
        !builder_int(builder, B_LAST_DELTA, &last_delta) ||
        !builder_int(builder, B_COUNT, &count) ||
        !builder_int(builder, B_MAX_TIMESTAMP, &max_timestamp) || last_delta >= INT32_MAX ||
        __builtin_sub_overflow((long long)timestamp, base, &delta)) {
        return 0;
    }
    /* The new values first: once the record is in buf, nothing may fail. */
    PyObject *new_base = base_obj == Py_None ? PyLong_FromLongLong(base) : Py_NewRef(base_obj);
    PyObject *new_delta = PyLong_FromLongLong(last_delta + 1);
    PyObject *new_count = PyLong_FromLongLong(count + 1);
    PyObject *new_max = timestamp > max_timestamp ? PyLong_FromLongLong(timestamp)
                                                   : Py_NewRef(*builder_slot(builder, B_MAX_TIMESTAMP));
    int result = -1;
    if (new_base != NULL && new_delta != NULL && new_count != NULL && new_max != NULL) {
        Py_ssize_t size = encode_record(buf, last_delta + 1, delta, key, value);
        result = size == -2 ? 0 : size < 0 ? -1 : 1;
    }
    if (result == 1) {
        Py_SETREF(*builder_slot(builder, B_BASE_TIMESTAMP), new_base);
        Py_SETREF(*builder_slot(builder, B_LAST_DELTA), new_delta);
        Py_SETREF(*builder_slot(builder, B_COUNT), new_count);
        Py_SETREF(*builder_slot(builder, B_MAX_TIMESTAMP), new_max);
        return 1;
    }
    Py_XDECREF(new_base);
    Py_XDECREF(new_delta);
    Py_XDECREF(new_count);
    Py_XDECREF(new_max);
    return result;
}

/* builder_append(builder, value, key, timestamp) -> True, or None when the general path
   must do it (builder untouched). */
static PyObject *
builder_append(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "builder_append(builder, value, key, timestamp)");
        return NULL;
    }
    if (!PyLong_CheckExact(args[3])) {
        Py_RETURN_NONE;
    }
    int overflow;
    long long timestamp = PyLong_AsLongLongAndOverflow(args[3], &overflow);
    if (overflow) {
        Py_RETURN_NONE;
    }
    int done = builder_append_c(args[0], args[2], args[1], timestamp);
    if (done < 0) {
        return NULL;
    }
    return Py_NewRef(done ? Py_True : Py_None);
}

/* bind_builder(BatchBuilder) -> builder_append: reads the offsets of the class's slots. */
static PyObject *
bind_builder(PyObject *module, PyObject *cls)
{
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "bind_builder takes the BatchBuilder class");
        return NULL;
    }
    Py_ssize_t offsets[BUILDER_SLOTS];
    if (slot_offsets(cls, builder_slot_names, BUILDER_SLOTS, offsets) < 0) {
        return NULL;
    }
    memcpy(builder_offsets, offsets, sizeof offsets);
    Py_XSETREF(builder_type, (PyTypeObject *)Py_NewRef(cls));
    return PyObject_GetAttrString(module, "builder_append");
}

static gregor_produced_batch_api produced_batch_api = {
    .version = GREGOR_PRODUCED_BATCH_API_VERSION,
    .check = check_produced_batch,
    .crc32c = crc32c_update,
    .builder_append = builder_append_c,
    .slot_offsets = slot_offsets,
};

static PyMethodDef module_methods[] = {
    {"make_decoder", make_decoder, METH_VARARGS,
     "make_decoder(record_type, error_type) -> decode_records"},
    {"decode_columns", decode_columns, METH_O,
     "decode_columns(sections) -> the sections' records as columns (see records.py)"},
    {"murmur2", murmur2, METH_O, "murmur2(data) -> the Java client's murmur2 (signed int32)"},
    {"crc32c", (PyCFunction)(void (*)(void))crc32c, METH_FASTCALL,
     "crc32c(data, value=0) -> the CRC-32C of data, continuing from value"},
    {"stamp_produced_batch", (PyCFunction)(void (*)(void))stamp_produced_batch, METH_FASTCALL,
     "stamp_produced_batch(data, base_offset, leader_epoch, max_size) -> tuple or None"},
    {"append_record", (PyCFunction)(void (*)(void))append_record, METH_FASTCALL,
     "append_record(buf, offset_delta, timestamp_delta, key, value) -> size or None"},
    {"bind_builder", bind_builder, METH_O,
     "bind_builder(BatchBuilder) -> builder_append, which reads the class's slots"},
    {"builder_append", (PyCFunction)(void (*)(void))builder_append, METH_FASTCALL,
     "builder_append(builder, value, key, timestamp) -> True, or None for the general path"},
    {NULL, NULL, 0, NULL},
};

static int
module_exec(PyObject *module)
{
    module_state *st = get_state(module);
    crc32c_init();
    PyObject *api = PyCapsule_New(&produced_batch_api, GREGOR_PRODUCED_BATCH_CAPSULE, NULL);
    if (api == NULL) {
        return -1;
    }
    if (PyModule_AddObject(module, "produced_batch_api", api) < 0) {
        Py_DECREF(api);
        return -1;
    }
    st->empty_tuple = PyTuple_New(0);
    return st->empty_tuple == NULL ? -1 : 0;
}

static int
module_traverse(PyObject *module, visitproc visit, void *arg)
{
    module_state *st = get_state(module);
    Py_VISIT(st->record_type);
    Py_VISIT(st->error_type);
    return 0;
}

static int
module_clear(PyObject *module)
{
    module_state *st = get_state(module);
    Py_CLEAR(st->record_type);
    Py_CLEAR(st->error_type);
    Py_CLEAR(st->empty_tuple);
    return 0;
}

static void
module_free(void *module)
{
    module_clear((PyObject *)module);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "gregor.protocol._records_speedups",
    .m_doc = "C versions of the per-record hot paths of gregor.protocol.records.",
    .m_size = sizeof(module_state),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC
PyInit__records_speedups(void)
{
    return PyModuleDef_Init(&module_def);
}
