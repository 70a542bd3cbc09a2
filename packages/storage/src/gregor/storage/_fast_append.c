/*
 * The append fast path of gregor.storage, in C: the twin of LogSegment.append_produced
 * (segment.py), which is the reference and says what it does; fast_append.py picks this
 * one when it was built. The tests run both on the same appends.
 *
 *   bind(result_type, segment_type, index_type, handle_type)
 *       -> append_produced(segment, records, base_offset, leader_epoch, max_size,
 *                          log_start_offset)
 *       -> result_type(...) (the log's AppendInfo), or None, having written nothing
 *
 * It reads and updates the segment's fast-path attributes as the reference does, in the
 * same order, through the offsets of their slots (LogSegment, OffsetIndex and FileHandle
 * have __slots__), resolved once in bind: a load or a store each, no lookup by name. The
 * batch check and CRC-32C are gregor-protocol's, reached through the capsule its extension
 * exports (_produced_batch.h): this module does not import without it.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>
#include <sys/uio.h>

#include "_produced_batch.h"

#define INDEX_ENTRY 8 /* 4-byte relative offset, 4-byte position */
#define RESULT_FIELDS 10

static const gregor_produced_batch_api *api;

/* The state the call reads and writes: slots of the segment, its offset index and its file
 * handle, reached through their offsets (resolved once, in bind), not by name. */
enum {
    FAST_SIZE_LIMIT, SIZE, BYTES_SINCE_INDEX, FAST_INDEX_INTERVAL, OFFSET_INDEX, LOG,
    FAST_OFFSET_LIMIT, FAST_TIMESTAMP_LIMIT, BASE_OFFSET, MAX_TIMESTAMP, FAST_TIME_INDEXED,
    TIME_INDEX, /* the segment's */
    MAPPING, ENTRIES, MAX_ENTRIES, /* the offset index's */
    FD, /* the file handle's */
    SLOTS
};
enum { SEGMENT, INDEX, HANDLE, OWNERS };
static const struct {
    int owner;
    const char *name;
} slot_spec[SLOTS] = {
    {SEGMENT, "_fast_size_limit"}, {SEGMENT, "_size"}, {SEGMENT, "_bytes_since_index"},
    {SEGMENT, "_fast_index_interval"}, {SEGMENT, "_offset_index"}, {SEGMENT, "_log"},
    {SEGMENT, "_fast_offset_limit"}, {SEGMENT, "_fast_timestamp_limit"},
    {SEGMENT, "base_offset"}, {SEGMENT, "_max_timestamp"}, {SEGMENT, "_fast_time_indexed"},
    {SEGMENT, "_time_index"}, {INDEX, "mapping"}, {INDEX, "entries"},
    {INDEX, "max_entries"}, {HANDLE, "fd"}};
static Py_ssize_t slot_offset[SLOTS];
static PyTypeObject *owner_type[OWNERS]; /* the classes whose slots those are */
static PyObject *append_in_order_name;

static PyObject **
slot_ref(PyObject *obj, int name)
{
    return (PyObject **)((char *)obj + slot_offset[name]);
}

/* A borrowed reference to the slot's value; NULL with AttributeError when it is unset. */
static PyObject *
get_slot(PyObject *obj, int name)
{
    PyObject *value = *slot_ref(obj, name);
    if (value == NULL) {
        PyErr_Format(PyExc_AttributeError, "%s is not set", slot_spec[name].name);
    }
    return value;
}

/* Stores value (a new reference, which it takes) into the slot. */
static void
set_slot(PyObject *obj, int name, PyObject *value)
{
    Py_XSETREF(*slot_ref(obj, name), value);
}

/* obj, when it is an instance of the class whose slots the caller reads; else NULL with
 * TypeError (the offsets would point elsewhere in another object). */
static PyObject *
owned(PyObject *obj, int owner, const char *what)
{
    if (!PyObject_TypeCheck(obj, owner_type[owner])) {
        PyErr_Format(PyExc_TypeError, "%s is a %.100s, not a %.100s", what, Py_TYPE(obj)->tp_name,
                     owner_type[owner]->tp_name);
        return NULL;
    }
    return obj;
}

/* Writes the stamped prefix then the rest of the batch at position, finishing short writes
 * and retrying EINTR (after running signal handlers) as os.pwritev and FileHandle.pwrite
 * do. Returns 0, or -1 with an exception set (OSError with errno for I/O errors). */
static int
write_batch(int fd, const unsigned char *prefix, const unsigned char *data, Py_ssize_t size,
            long long position)
{
    Py_ssize_t done = 0;
    while (done < size) {
        struct iovec iov[2];
        int count = 0;
        if (done < GREGOR_STAMPED_PREFIX) {
            iov[count].iov_base = (void *)(prefix + done);
            iov[count++].iov_len = (size_t)(GREGOR_STAMPED_PREFIX - done);
            iov[count].iov_base = (void *)(data + GREGOR_STAMPED_PREFIX);
            iov[count++].iov_len = (size_t)(size - GREGOR_STAMPED_PREFIX);
        }
        else {
            iov[count].iov_base = (void *)(data + done);
            iov[count++].iov_len = (size_t)(size - done);
        }
        ssize_t n;
        Py_BEGIN_ALLOW_THREADS
        n = pwritev(fd, iov, count, (off_t)(position + done));
        Py_END_ALLOW_THREADS
        if (n < 0) {
            if (errno == EINTR) {
                if (PyErr_CheckSignals() < 0) {
                    return -1;
                }
                continue;
            }
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        done += n;
    }
    return 0;
}

/* Not PyLong_AsLongLong: for ints past 2**30 (the limits, timestamps) it goes through a
 * byte array; this one reads the digits. */
static int
as_int(PyObject *value, const char *what, long long *out)
{
    int overflow;
    *out = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow) {
        PyErr_Format(PyExc_OverflowError, "%s does not fit 64 bits", what);
        return -1;
    }
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int
get_int(PyObject *obj, int name, long long *out)
{
    PyObject *value = get_slot(obj, name);
    return value == NULL ? -1 : as_int(value, slot_spec[name].name, out);
}

static int
set_int(PyObject *obj, int name, long long value)
{
    PyObject *number = PyLong_FromLongLong(value);
    if (number == NULL) {
        return -1;
    }
    set_slot(obj, name, number);
    return 0;
}

/* The segment's bookkeeping after the write, as the reference does it. */
static int
account(PyObject *segment, PyObject *offsets, long long position, long long size,
        long long since, int index_due, long long slot, long long last_offset,
        long long max_timestamp)
{
    if (set_int(segment, SIZE, position + size) < 0) {
        return -1;
    }
    PyObject *entry = Py_XNewRef(get_slot(segment, MAX_TIMESTAMP));
    if (entry == NULL) {
        return -1;
    }
    long long entry_timestamp = 0;
    int grows = entry == Py_None;
    if (!grows) {
        PyObject *first = PyTuple_Check(entry) && PyTuple_GET_SIZE(entry) == 2
                              ? PyTuple_GET_ITEM(entry, 0)
                              : NULL;
        if (first == NULL) {
            PyErr_SetString(PyExc_TypeError, "_max_timestamp is not a (timestamp, offset) pair");
            goto fail;
        }
        if (as_int(first, "_max_timestamp", &entry_timestamp) < 0) {
            goto fail;
        }
        grows = max_timestamp > entry_timestamp;
    }
    if (grows) {
        Py_DECREF(entry);
        entry = Py_BuildValue("(LL)", max_timestamp, last_offset);
        if (entry == NULL) {
            goto fail;
        }
        set_slot(segment, MAX_TIMESTAMP, Py_NewRef(entry));
        entry_timestamp = max_timestamp;
    }
    if (index_due) {
        long long max_entries, time_indexed;
        if (set_int(offsets, ENTRIES, slot + 1) < 0 ||
            get_int(offsets, MAX_ENTRIES, &max_entries) < 0 ||
            get_int(segment, FAST_TIME_INDEXED, &time_indexed) < 0) {
            goto fail;
        }
        int room = slot + 1 < max_entries;
        if (entry_timestamp > time_indexed) {
            if (set_int(segment, FAST_TIME_INDEXED, entry_timestamp) < 0) {
                goto fail;
            }
            PyObject *times = Py_XNewRef(get_slot(segment, TIME_INDEX));
            if (times == NULL) {
                goto fail;
            }
            PyObject *ok = PyObject_CallMethodObjArgs(times, append_in_order_name,
                                                      PyTuple_GET_ITEM(entry, 0),
                                                      PyTuple_GET_ITEM(entry, 1), NULL);
            Py_DECREF(times);
            int truth = ok == NULL ? -1 : PyObject_IsTrue(ok);
            Py_XDECREF(ok);
            if (truth < 0) {
                goto fail;
            }
            room = truth && room;
        }
        if (!room && set_int(segment, FAST_SIZE_LIMIT, -1) < 0) { /* the next append rolls */
            goto fail;
        }
        since = 0;
    }
    Py_DECREF(entry);
    return set_int(segment, BYTES_SINCE_INDEX, since + size);
fail:
    Py_XDECREF(entry);
    return -1;
}

/* result_type(first..records_count, leader epoch or None, False), without its __new__. */
static PyObject *
make_result(PyTypeObject *type, const long long values[8], long long leader_epoch)
{
    PyObject *result = type->tp_alloc(type, RESULT_FIELDS);
    if (result == NULL) {
        return NULL;
    }
    for (int i = 0; i < 8; i++) {
        PyObject *value = PyLong_FromLongLong(values[i]);
        if (value == NULL) {
            Py_DECREF(result);
            return NULL;
        }
        PyTuple_SET_ITEM(result, i, value);
    }
    PyObject *epoch = leader_epoch >= 0 ? PyLong_FromLongLong(leader_epoch) : Py_NewRef(Py_None);
    if (epoch == NULL) {
        Py_DECREF(result);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 8, epoch);
    PyTuple_SET_ITEM(result, 9, Py_NewRef(Py_False));
    return result;
}

static PyObject *
append_produced(PyObject *result_type, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "append_produced(segment, records, base_offset, leader_epoch, "
                        "max_size, log_start_offset)");
        return NULL;
    }
    PyObject *segment = owned(args[0], SEGMENT, "segment");
    if (segment == NULL) {
        return NULL;
    }
    long long base_offset, leader_epoch, max_size, log_start_offset, size_limit;
    if (as_int(args[2], "base_offset", &base_offset) < 0 ||
        as_int(args[3], "leader_epoch", &leader_epoch) < 0 ||
        as_int(args[4], "max_size", &max_size) < 0 ||
        as_int(args[5], "log_start_offset", &log_start_offset) < 0 ||
        get_int(segment, FAST_SIZE_LIMIT, &size_limit) < 0) {
        return NULL;
    }
    if (size_limit < 0) { /* disarmed: the files may be gone */
        Py_RETURN_NONE;
    }
    Py_buffer view, index;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    index.obj = NULL;
    PyObject *offsets = NULL, *mapping = NULL, *result = NULL;
    gregor_produced_header h;
    if (!api->check(view.buf, view.len, leader_epoch, max_size, &h) || h.producer_id >= 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    long long last_offset = base_offset + h.last_offset_delta;
    long long max_timestamp = h.max_timestamp < -1 ? -1 : h.max_timestamp;
    long long position, offset_limit, timestamp_limit, since, interval, slot, fd, base;
    if (get_int(segment, SIZE, &position) < 0 ||
        get_int(segment, FAST_OFFSET_LIMIT, &offset_limit) < 0 ||
        get_int(segment, FAST_TIMESTAMP_LIMIT, &timestamp_limit) < 0) {
        goto done;
    }
    if (position + view.len > size_limit || last_offset > offset_limit ||
        max_timestamp > timestamp_limit) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (get_int(segment, BYTES_SINCE_INDEX, &since) < 0 ||
        (offsets = Py_XNewRef(get_slot(segment, OFFSET_INDEX))) == NULL ||
        owned(offsets, INDEX, "the offset index") == NULL ||
        get_int(segment, FAST_INDEX_INTERVAL, &interval) < 0 ||
        get_int(offsets, ENTRIES, &slot) < 0 ||
        (mapping = Py_XNewRef(get_slot(offsets, MAPPING))) == NULL) {
        goto done;
    }
    int index_due = since > interval;
    if (index_due) {
        if (mapping == Py_None || PyObject_GetBuffer(mapping, &index, PyBUF_WRITABLE) < 0 ||
            (slot + 1) * INDEX_ENTRY > index.len) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "offset index slot %lld is out of range", slot);
            goto done;
        }
    }
    /* The descriptor as it is now (-1 once closed: the write then fails with EBADF). */
    PyObject *handle = get_slot(segment, LOG);
    if (handle == NULL || owned(handle, HANDLE, "the segment's file") == NULL ||
        get_int(handle, FD, &fd) < 0 || get_int(segment, BASE_OFFSET, &base) < 0) {
        goto done;
    }
    unsigned char prefix[GREGOR_STAMPED_PREFIX];
    gregor_stamp_prefix(prefix, view.buf, base_offset, (int32_t)leader_epoch);
    if (write_batch((int)fd, prefix, view.buf, view.len, position) < 0) {
        goto done;
    }
    if (index_due) {
        unsigned char *entry = (unsigned char *)index.buf + slot * INDEX_ENTRY;
        gregor_write_be(entry, (uint64_t)(last_offset - base), 4);
        gregor_write_be(entry + 4, (uint64_t)position, 4);
    }
    if (account(segment, offsets, position, view.len, since, index_due, slot, last_offset,
                max_timestamp) < 0) {
        goto done;
    }
    const long long values[8] = {base_offset,
                                 last_offset,
                                 max_timestamp,
                                 max_timestamp != -1 ? last_offset : -1,
                                 -1, /* no log append time */
                                 log_start_offset,
                                 view.len,
                                 (long long)h.last_offset_delta + 1};
    result = make_result((PyTypeObject *)result_type, values, leader_epoch);
done:
    if (index.obj != NULL) {
        PyBuffer_Release(&index);
    }
    Py_XDECREF(mapping);
    Py_XDECREF(offsets);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef append_def = {
    "append_produced", (PyCFunction)(void (*)(void))append_produced, METH_FASTCALL,
    "append_produced(segment, records, base_offset, leader_epoch, max_size, log_start_offset)"
    " -> result or None (see LogSegment.append_produced)"};

/* The offsets of the slots named in slot_spec, from the classes' member descriptors. */
static int
resolve_slots(PyTypeObject *const types[OWNERS], Py_ssize_t offsets[SLOTS])
{
    for (int i = 0; i < SLOTS; i++) {
        PyObject *descr = PyObject_GetAttrString((PyObject *)types[slot_spec[i].owner],
                                                 slot_spec[i].name);
        if (descr == NULL && !PyErr_ExceptionMatches(PyExc_AttributeError)) {
            return -1;
        }
        PyErr_Clear();
        int ok = descr != NULL && Py_IS_TYPE(descr, &PyMemberDescr_Type) &&
                 ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX &&
                 !(((PyMemberDescrObject *)descr)->d_member->flags & READONLY);
        if (ok) {
            offsets[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
        }
        Py_XDECREF(descr);
        if (!ok) {
            PyErr_Format(PyExc_TypeError, "%.100s.%s is not a writable slot",
                         types[slot_spec[i].owner]->tp_name, slot_spec[i].name);
            return -1;
        }
    }
    return 0;
}

static PyObject *
bind(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    static const char usage[] =
        "bind(result_type, segment_type, index_type, handle_type): a tuple subclass and the "
        "classes of the segment, its offset index and its file handle";
    if (nargs != 1 + OWNERS || !PyType_Check(args[0]) ||
        !PyType_IsSubtype((PyTypeObject *)args[0], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, usage);
        return NULL;
    }
    PyTypeObject *types[OWNERS];
    for (int i = 0; i < OWNERS; i++) {
        if (!PyType_Check(args[1 + i])) {
            PyErr_SetString(PyExc_TypeError, usage);
            return NULL;
        }
        types[i] = (PyTypeObject *)args[1 + i];
    }
    Py_ssize_t offsets[SLOTS];
    if (resolve_slots(types, offsets) < 0) {
        return NULL;
    }
    for (int i = 0; i < OWNERS; i++) {
        /* The offsets are process-wide: one set of classes for every bound function. */
        if (owner_type[i] != NULL && owner_type[i] != types[i]) {
            PyErr_Format(PyExc_ValueError, "already bound to %.100s, not %.100s",
                         owner_type[i]->tp_name, types[i]->tp_name);
            return NULL;
        }
    }
    for (int i = 0; i < OWNERS; i++) {
        if (owner_type[i] == NULL) {
            owner_type[i] = (PyTypeObject *)Py_NewRef(types[i]);
        }
    }
    memcpy(slot_offset, offsets, sizeof(offsets));
    return PyCFunction_NewEx(&append_def, args[0], NULL);
}

static PyMethodDef module_methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL,
     "bind(result_type, segment_type, index_type, handle_type) -> append_produced, returning "
     "result_type"},
    {NULL, NULL, 0, NULL},
};

/* Interns the method name and takes gregor-protocol's API; -1 with an exception set when
 * that extension is missing or of another version. */
static int
prepare(void)
{
    if (append_in_order_name == NULL &&
        (append_in_order_name = PyUnicode_InternFromString("append_in_order")) == NULL) {
        return -1;
    }
    api = PyCapsule_Import(GREGOR_PRODUCED_BATCH_CAPSULE, 0);
    if (api == NULL) {
        return -1;
    }
    if (api->version != GREGOR_PRODUCED_BATCH_API_VERSION) {
        PyErr_Format(PyExc_ImportError, "gregor.protocol's batch API is version %d, not %d",
                     api->version, GREGOR_PRODUCED_BATCH_API_VERSION);
        return -1;
    }
    return 0;
}

/* No per-module state (the slot offsets, the name and the API are process-wide): single-phase init. */
static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "gregor.storage._fast_append",
    .m_doc = "The append fast path of gregor.storage, in C (see LogSegment.append_produced).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__fast_append(void)
{
    return prepare() < 0 ? NULL : PyModule_Create(&module_def);
}
