/*
 * The fast append of gregor.storage, in C: the twins of LogSegment.fast_append
 * (segment.py) and Log._fast_append (log.py), which are the references and say what they
 * do; fast_append.py and log.py pick these when they were built. The tests run both on the
 * same appends.
 *
 *   bind_segment(result_type, segment_type, index_type, handle_type)
 *       -> segment_fast_append(segment, records, base_offset, leader_epoch, max_size,
 *                              log_start_offset)
 *       -> result_type(...) (the log's AppendInfo), or None, having written nothing
 *   bind_log(result_type, log_type, segments_type, config_type, producer_state_type,
 *            epoch_cache_type)
 *       -> log_fast_append(log, records, leader_epoch) -> result_type(...) or None
 *          the twin of Log._fast_append: the log's lock, segment_fast_append on its last
 *          segment and the log's bookkeeping, in one call
 *
 * They read and update the attributes as the references do, in the same order, through
 * the offsets of their slots (LogSegment, OffsetIndex, FileHandle, Log, SegmentList,
 * LogConfig, ProducerStateManager and LeaderEpochCache have __slots__), resolved once when
 * bound: a load or a store each, no lookup by name (only methods are called by name). The
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

/* The state the calls read and write: slots of the segment, its offset index and its file
 * handle (bind_segment), and of the log, its segment list and its config (bind_log), reached
 * through their offsets (resolved once, when bound), not by name. */
enum {
    FAST_SIZE_LIMIT, SIZE, BYTES_SINCE_INDEX, FAST_INDEX_INTERVAL, OFFSET_INDEX, LOG,
    FAST_OFFSET_LIMIT, FAST_TIMESTAMP_LIMIT, BASE_OFFSET, MAX_TIMESTAMP, FAST_TIME_INDEXED,
    TIME_INDEX, /* the segment's */
    MAPPING, ENTRIES, MAX_ENTRIES, /* the offset index's */
    FD, /* the file handle's */
    LOG_CONFIG, LOG_LOCK, LOG_SEGMENTS, LOG_OFFLINE, LOG_END_OFFSET, LOG_START_OFFSET,
    LOG_PRODUCER_STATE, LOG_EPOCH_CACHE, LOG_NOTED_EPOCH, LOG_NOTED_VERSION,
    LOG_RECOVERY_POINT, /* the log's */
    LAST_SEGMENT, /* the segment list's */
    FAST_APPENDS, FAST_APPEND_MAX_BYTES, FLUSH_MESSAGES, /* the config's */
    MAP_END_OFFSET, /* the producer state's */
    EPOCH_CACHE_VERSION, /* the leader epoch cache's */
    SLOTS
};
enum {
    SEGMENT, INDEX, HANDLE,
    LOG_OWNER, SEGMENTS_OWNER, CONFIG_OWNER, PRODUCER_STATE_OWNER, EPOCH_CACHE_OWNER,
    OWNERS
};
#define SEGMENT_OWNERS 3 /* bind_segment's: SEGMENT, INDEX, HANDLE; bind_log's follow */
static const struct {
    int owner;
    const char *name;
} slot_spec[SLOTS] = {
    {SEGMENT, "_fast_size_limit"}, {SEGMENT, "_size"}, {SEGMENT, "_bytes_since_index"},
    {SEGMENT, "_fast_index_interval"}, {SEGMENT, "_offset_index"}, {SEGMENT, "_log"},
    {SEGMENT, "_fast_offset_limit"}, {SEGMENT, "_fast_timestamp_limit"},
    {SEGMENT, "base_offset"}, {SEGMENT, "_max_timestamp"}, {SEGMENT, "_fast_time_indexed"},
    {SEGMENT, "_time_index"}, {INDEX, "mapping"}, {INDEX, "entries"},
    {INDEX, "max_entries"}, {HANDLE, "fd"},
    {LOG_OWNER, "config"}, {LOG_OWNER, "_lock"}, {LOG_OWNER, "segments"},
    {LOG_OWNER, "offline"}, {LOG_OWNER, "_leo"}, {LOG_OWNER, "_log_start_offset"},
    {LOG_OWNER, "producer_state"}, {LOG_OWNER, "epoch_cache"}, {LOG_OWNER, "_noted_epoch"},
    {LOG_OWNER, "_noted_version"}, {LOG_OWNER, "recovery_point"},
    {SEGMENTS_OWNER, "last"},
    {CONFIG_OWNER, "fast_appends"}, {CONFIG_OWNER, "fast_append_max_bytes"},
    {CONFIG_OWNER, "flush_messages"}, {PRODUCER_STATE_OWNER, "map_end_offset"},
    {EPOCH_CACHE_OWNER, "version"}};
static Py_ssize_t slot_offset[SLOTS];
static PyTypeObject *owner_type[OWNERS]; /* the classes whose slots those are */

/* The methods it calls. */
enum { APPEND_IN_ORDER, ACQUIRE, RELEASE, REQUEST_FLUSH, NAMES };
static const char *const name_text[NAMES] = {
    "append_in_order", "acquire", "release", "_request_flush"};
static PyObject *names[NAMES];

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
            PyObject *ok = PyObject_CallMethodObjArgs(times, names[APPEND_IN_ORDER],
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

/* LogSegment.fast_append, given a segment (checked to be one) and C ints; the next
 * offset goes to *next when it returns a result. */
static PyObject *
append_segment(PyTypeObject *result_type, PyObject *segment, PyObject *records,
               long long base_offset, long long leader_epoch, long long max_size,
               long long log_start_offset, long long *next)
{
    long long size_limit;
    if (get_int(segment, FAST_SIZE_LIMIT, &size_limit) < 0) {
        return NULL;
    }
    if (size_limit < 0) { /* disarmed: the files may be gone */
        Py_RETURN_NONE;
    }
    Py_buffer view, index;
    if (PyObject_GetBuffer(records, &view, PyBUF_SIMPLE) < 0) {
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
    result = make_result(result_type, values, leader_epoch);
    *next = last_offset + 1;
done:
    if (index.obj != NULL) {
        PyBuffer_Release(&index);
    }
    Py_XDECREF(mapping);
    Py_XDECREF(offsets);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *
segment_fast_append(PyObject *result_type, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "segment_fast_append(segment, records, base_offset, leader_epoch, "
                        "max_size, log_start_offset)");
        return NULL;
    }
    PyObject *segment = owned(args[0], SEGMENT, "segment");
    long long base_offset, leader_epoch, max_size, log_start_offset, next;
    if (segment == NULL || as_int(args[2], "base_offset", &base_offset) < 0 ||
        as_int(args[3], "leader_epoch", &leader_epoch) < 0 ||
        as_int(args[4], "max_size", &max_size) < 0 ||
        as_int(args[5], "log_start_offset", &log_start_offset) < 0) {
        return NULL;
    }
    return append_segment((PyTypeObject *)result_type, segment, args[1], base_offset,
                          leader_epoch, max_size, log_start_offset, &next);
}

/* Log._fast_append's steps under the log's lock (which the caller holds). */
static PyObject *
log_fast_append_locked(PyTypeObject *result_type, PyObject *log, PyObject *config, PyObject *records,
              long long leader_epoch)
{
    PyObject *segments = get_slot(log, LOG_SEGMENTS);
    if (segments == NULL || owned(segments, SEGMENTS_OWNER, "the log's segments") == NULL) {
        return NULL;
    }
    PyObject *segment = get_slot(segments, LAST_SEGMENT);
    PyObject *offline = get_slot(log, LOG_OFFLINE);
    if (segment == NULL || offline == NULL) {
        return NULL;
    }
    int is_offline = PyObject_IsTrue(offline);
    if (is_offline < 0) {
        return NULL;
    }
    if (segment == Py_None || is_offline) {
        Py_RETURN_NONE;
    }
    long long offset, max_size, log_start_offset, end;
    if (owned(segment, SEGMENT, "the last segment") == NULL ||
        get_int(log, LOG_END_OFFSET, &offset) < 0 ||
        get_int(config, FAST_APPEND_MAX_BYTES, &max_size) < 0 ||
        get_int(log, LOG_START_OFFSET, &log_start_offset) < 0) {
        return NULL;
    }
    Py_INCREF(segment);
    PyObject *info = append_segment(result_type, segment, records, offset, leader_epoch,
                                    max_size, log_start_offset, &end);
    Py_DECREF(segment);
    if (info == NULL || info == Py_None) {
        return info;
    }
    /* The log's bookkeeping, as the reference does it, in the same order. */
    PyObject *state = get_slot(log, LOG_PRODUCER_STATE);
    PyObject *end_value = PyLong_FromLongLong(end);
    if (state == NULL || owned(state, PRODUCER_STATE_OWNER, "the producer state") == NULL ||
        end_value == NULL) {
        Py_XDECREF(end_value);
        goto fail;
    }
    set_slot(log, LOG_END_OFFSET, Py_NewRef(end_value));
    set_slot(state, MAP_END_OFFSET, end_value);
    if (leader_epoch >= 0) {
        long long noted_epoch, noted_version, version = 0;
        if (get_int(log, LOG_NOTED_EPOCH, &noted_epoch) < 0) {
            goto fail;
        }
        int note = leader_epoch != noted_epoch;
        if (!note) {
            PyObject *cache = get_slot(log, LOG_EPOCH_CACHE);
            if (cache == NULL || owned(cache, EPOCH_CACHE_OWNER, "the epoch cache") == NULL ||
                get_int(cache, EPOCH_CACHE_VERSION, &version) < 0 ||
                get_int(log, LOG_NOTED_VERSION, &noted_version) < 0) {
                goto fail;
            }
            note = version != noted_version;
        }
        if (note) {
            PyObject *done = PyObject_CallMethod(log, "_note_epoch", "LL", leader_epoch, offset);
            if (done == NULL) {
                goto fail;
            }
            Py_DECREF(done);
        }
    }
    long long recovery_point, flush_messages;
    if (get_int(log, LOG_RECOVERY_POINT, &recovery_point) < 0 ||
        get_int(config, FLUSH_MESSAGES, &flush_messages) < 0) {
        goto fail;
    }
    if (end - recovery_point >= flush_messages) {
        PyObject *done = PyObject_CallMethodNoArgs(log, names[REQUEST_FLUSH]);
        if (done == NULL) {
            goto fail;
        }
        Py_DECREF(done);
    }
    return info;
fail:
    Py_DECREF(info);
    return NULL;
}

/* Log._fast_append(records, leader_epoch): the log's lock taken and released here. */
static PyObject *
log_fast_append(PyObject *result_type, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "log_fast_append(log, records, leader_epoch)");
        return NULL;
    }
    PyObject *log = owned(args[0], LOG_OWNER, "log");
    PyObject *config = log == NULL ? NULL : get_slot(log, LOG_CONFIG);
    long long leader_epoch;
    if (config == NULL || owned(config, CONFIG_OWNER, "the log's config") == NULL ||
        as_int(args[2], "leader_epoch", &leader_epoch) < 0) {
        return NULL;
    }
    PyObject *fast = get_slot(config, FAST_APPENDS);
    int on = fast == NULL ? -1 : PyObject_IsTrue(fast);
    if (on <= 0) {
        return on < 0 ? NULL : Py_NewRef(Py_None);
    }
    Py_INCREF(config); /* the log's attributes may change while it waits for the lock */
    PyObject *lock = Py_XNewRef(get_slot(log, LOG_LOCK));
    PyObject *taken = lock == NULL ? NULL : PyObject_CallMethodNoArgs(lock, names[ACQUIRE]);
    PyObject *result = NULL;
    if (taken != NULL) {
        Py_DECREF(taken);
        result = log_fast_append_locked((PyTypeObject *)result_type, log, config, args[1], leader_epoch);
        /* Released whatever happened, keeping the append's exception. */
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        PyObject *released = PyObject_CallMethodNoArgs(lock, names[RELEASE]);
        if (released == NULL) {
            Py_CLEAR(result);
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(traceback);
        }
        else {
            Py_DECREF(released);
            PyErr_Restore(type, value, traceback);
        }
    }
    Py_XDECREF(lock);
    Py_DECREF(config);
    return result;
}

static PyMethodDef log_def = {
    "log_fast_append", (PyCFunction)(void (*)(void))log_fast_append, METH_FASTCALL,
    "log_fast_append(log, records, leader_epoch) -> result or None (see Log._fast_append)"};

static PyMethodDef segment_def = {
    "segment_fast_append", (PyCFunction)(void (*)(void))segment_fast_append, METH_FASTCALL,
    "segment_fast_append(segment, records, base_offset, leader_epoch, max_size, "
    "log_start_offset) -> result or None (see LogSegment.fast_append)"};

/* The offset of the writable object slot that descr describes, or -1 when it is not one. */
static Py_ssize_t
writable_slot_offset(PyObject *descr)
{
    if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        return -1;
    }
    PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
    return member->type == T_OBJECT_EX && !(member->flags & READONLY) ? member->offset : -1;
}

/* The offsets of the slots named in slot_spec for the owners first..first+count-1, from the
 * classes' member descriptors. */
static int
resolve_slots(PyTypeObject *const types[OWNERS], int first, int count, Py_ssize_t offsets[SLOTS])
{
    for (int i = 0; i < SLOTS; i++) {
        int owner = slot_spec[i].owner;
        if (owner < first || owner >= first + count) {
            continue;
        }
        PyObject *descr = PyObject_GetAttrString((PyObject *)types[owner], slot_spec[i].name);
        if (descr == NULL && !PyErr_ExceptionMatches(PyExc_AttributeError)) {
            return -1;
        }
        PyErr_Clear(); /* no such attribute: not a slot either */
        offsets[i] = writable_slot_offset(descr);
        Py_XDECREF(descr);
        if (offsets[i] < 0) {
            PyErr_Format(PyExc_TypeError, "%.100s.%s is not a writable slot",
                         types[owner]->tp_name, slot_spec[i].name);
            return -1;
        }
    }
    return 0;
}

/* args: a tuple subclass (the result type), then the classes of owners first..first+count-1,
 * whose slot offsets it resolves and keeps; a function of def bound to the result type. */
static PyObject *
bind_owners(PyObject *const *args, Py_ssize_t nargs, int first, int count, PyMethodDef *def,
            const char *usage)
{
    if (nargs != 1 + count || !PyType_Check(args[0]) ||
        !PyType_IsSubtype((PyTypeObject *)args[0], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, usage);
        return NULL;
    }
    PyTypeObject *types[OWNERS] = {NULL};
    for (int i = 0; i < count; i++) {
        if (!PyType_Check(args[1 + i])) {
            PyErr_SetString(PyExc_TypeError, usage);
            return NULL;
        }
        types[first + i] = (PyTypeObject *)args[1 + i];
    }
    Py_ssize_t offsets[SLOTS];
    if (resolve_slots(types, first, count, offsets) < 0) {
        return NULL;
    }
    for (int i = first; i < first + count; i++) {
        /* The offsets are process-wide: one set of classes for every bound function. */
        if (owner_type[i] != NULL && owner_type[i] != types[i]) {
            PyErr_Format(PyExc_ValueError, "already bound to %.100s, not %.100s",
                         owner_type[i]->tp_name, types[i]->tp_name);
            return NULL;
        }
    }
    for (int i = 0; i < SLOTS; i++) {
        int owner = slot_spec[i].owner;
        if (owner >= first && owner < first + count) {
            slot_offset[i] = offsets[i];
        }
    }
    for (int i = first; i < first + count; i++) {
        if (owner_type[i] == NULL) {
            owner_type[i] = (PyTypeObject *)Py_NewRef(types[i]);
        }
    }
    return PyCFunction_NewEx(def, args[0], NULL);
}

static PyObject *
bind_segment(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    return bind_owners(args, nargs, SEGMENT, SEGMENT_OWNERS, &segment_def,
                       "bind_segment(result_type, segment_type, index_type, handle_type): a tuple "
                       "subclass and the classes of the segment, its offset index and its "
                       "file handle");
}

static PyObject *
bind_log(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (owner_type[SEGMENT] == NULL) {
        PyErr_SetString(PyExc_ValueError,
                        "bind_log needs bind_segment first (the segment's slots)");
        return NULL;
    }
    return bind_owners(args, nargs, LOG_OWNER, OWNERS - LOG_OWNER, &log_def,
                       "bind_log(result_type, log_type, segments_type, config_type, "
                       "producer_state_type, epoch_cache_type): a tuple subclass and the "
                       "classes of the log, its segment list, config, producer state and "
                       "leader epoch cache");
}

static PyMethodDef module_methods[] = {
    {"bind_segment", (PyCFunction)(void (*)(void))bind_segment, METH_FASTCALL,
     "bind_segment(result_type, segment_type, index_type, handle_type) -> "
     "segment_fast_append, returning result_type"},
    {"bind_log", (PyCFunction)(void (*)(void))bind_log, METH_FASTCALL,
     "bind_log(result_type, log_type, segments_type, config_type, producer_state_type, "
     "epoch_cache_type) -> log_fast_append, returning result_type"},
    {NULL, NULL, 0, NULL},
};

/* Interns the names and takes gregor-protocol's API; -1 with an exception set when that
 * extension is missing or older than this module needs. */
static int
prepare(void)
{
    for (int i = 0; i < NAMES; i++) {
        if (names[i] == NULL && (names[i] = PyUnicode_InternFromString(name_text[i])) == NULL) {
            return -1;
        }
    }
    api = PyCapsule_Import(GREGOR_PRODUCED_BATCH_CAPSULE, 0);
    if (api == NULL) {
        return -1;
    }
    if (api->version < 1) { /* check and crc32c are all it uses */
        PyErr_Format(PyExc_ImportError, "gregor.protocol's batch API is version %d, not 1+",
                     api->version);
        return -1;
    }
    return 0;
}

/* No per-module state (the slot offsets, the names and the API are process-wide):
 * single-phase init. */
static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "gregor.storage._fast_append",
    .m_doc = "The fast append of gregor.storage, in C (see LogSegment.fast_append).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__fast_append(void)
{
    return prepare() < 0 ? NULL : PyModule_Create(&module_def);
}
