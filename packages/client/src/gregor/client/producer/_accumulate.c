/*
 * The producer's per-record path in C: the common cases of Accumulator.append
 * (accumulator.py) and ProducerCore.append_record (core.py), which are the references and
 * say what they do.
 *
 *   bind(accumulator_type, batch_type, choice_type, future_type)
 *       -> append(accumulator, topic, partition, info, key, value, headers, timestamp,
 *                 callback), the same call as accumulator.append(...) and the same result
 *   bind_core(core_type) (after bind)
 *       -> append_record(core, topic, value, key, partition, headers, timestamp,
 *                        on_delivery), the same as core.append_record(...) (core.py): for a
 *          core without serializers whose keyless records stick, a known topic, no key
 *          unless the partition is given and no headers, it stamps the time and calls
 *          append directly; anything else goes to the reference
 *
 * It takes a record when nothing but counting happens: the partition's open batch has room
 * and stays open, the sticky partition does not switch, the buffer has room, the lock is
 * free, no headers, key and value are bytes or None. It reads and writes the same slots as
 * the reference, in the same way, through their offsets (resolved once, when bound). Any
 * other record goes to the reference, untouched, so the reference decides every rare case:
 * a new batch, a full one, waking the sender, errors. The record's bytes are written by
 * gregor-protocol's BatchBuilder append, reached through the capsule its extension exports
 * (_produced_batch.h): this module does not import without it.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <time.h>

#include "_produced_batch.h"

#define API_VERSION 2 /* builder_append and slot_offsets */
#define RECORD_OVERHEAD 21 /* accumulator.py's _RECORD_OVERHEAD */

static const gregor_produced_batch_api *api;

enum {
    /* the accumulator's */
    MAX_RECORD_SIZE, LOCK, MEMORY_USED, BUFFER_MEMORY, STOPPED, STICKY_CURRENT, SWITCH_AFTER,
    OPEN, BATCH_SIZE, FUTURE_TYPE,
    /* the batch's */
    IS_OPEN, COUNT, SIZE, CALLBACKS, BUILDER,
    /* the sticky choice's */
    PARTITION, PRODUCED,
    SLOTS
};
enum { ACCUMULATOR, BATCH, CHOICE, OWNERS };
static const int owner_first[OWNERS + 1] = {MAX_RECORD_SIZE, IS_OPEN, PARTITION, SLOTS};
static const char *const slot_names[SLOTS] = {
    "max_record_size", "lock", "memory_used", "buffer_memory", "stopped", "_sticky_current",
    "_switch_after", "_open", "batch_size", "future_type",
    "is_open", "count", "size", "callbacks", "builder",
    "partition", "produced"};
static Py_ssize_t slot_offset[SLOTS];
static PyTypeObject *owner_type[OWNERS];
static PyTypeObject *future_type;
static PyObject *reference; /* the accumulator class's append */
static PyObject *partitions_name, *empty_tuple;
/* The accumulator's lock is a threading.Lock: its acquire and release are called through
 * their C functions, skipping the method lookups (a third of the append's cost). */
static PyTypeObject *lock_type;
static PyCFunctionWithKeywords acquire_lock;
static PyCFunction release_lock;

static PyObject *
get_slot(PyObject *obj, int name)
{
    return *(PyObject **)((char *)obj + slot_offset[name]);
}

/* Stores value (a new reference, which it takes) into the slot. */
static void
set_slot(PyObject *obj, int name, PyObject *value)
{
    Py_XSETREF(*(PyObject **)((char *)obj + slot_offset[name]), value);
}

/* The slot's value as a C integer: 1 when it holds an int that fits, else 0. */
static int
slot_int(PyObject *obj, int name, long long *out)
{
    PyObject *value = get_slot(obj, name);
    if (value == NULL || !PyLong_CheckExact(value)) {
        return 0;
    }
    int overflow;
    *out = PyLong_AsLongLongAndOverflow(value, &overflow);
    return !overflow;
}

/* len() of key or value, when it is bytes or None (-1 otherwise: the reference's case). */
static Py_ssize_t
field_size(PyObject *field)
{
    if (field == Py_None) {
        return 0;
    }
    return PyBytes_CheckExact(field) ? PyBytes_GET_SIZE(field) : -1;
}

/* The values the append stores and the record's future, RecordFuture((batch, index,
 * timestamp)) as the reference makes it, made before the record is written, so that nothing
 * can fail after it. */
typedef struct {
    PyObject *future, *count, *size, *memory_used, *produced, *entry, *callbacks, *index,
        *timestamp;
} updates;

static void
drop_updates(updates *u)
{
    Py_CLEAR(u->future);
    Py_CLEAR(u->count);
    Py_CLEAR(u->size);
    Py_CLEAR(u->memory_used);
    Py_CLEAR(u->produced);
    Py_CLEAR(u->entry);
    Py_CLEAR(u->callbacks);
    Py_CLEAR(u->index);
    Py_CLEAR(u->timestamp);
}

/* With the lock held: 1 and *future set when the record was taken, 0 for the reference
 * (nothing changed), -1 with an exception set (nothing changed). */
static int
append_locked(PyObject *acc, PyObject *topic, PyObject *partition, PyObject *info,
              PyObject *key, PyObject *value, PyObject *timestamp, long long ts,
              PyObject *callback, long long size, PyObject **future)
{
    long long memory_used, buffer_memory, batch_size, count, batch_bytes;
    long long switch_after, produced = 0;
    if (get_slot(acc, STOPPED) != Py_None || !slot_int(acc, MEMORY_USED, &memory_used) ||
        !slot_int(acc, BUFFER_MEMORY, &buffer_memory) || memory_used + size > buffer_memory ||
        !slot_int(acc, BATCH_SIZE, &batch_size)) {
        return 0;
    }
    PyObject *choice = NULL;
    if (partition == Py_None) {
        /* len(info.partitions) first: what follows borrows references and runs no Python. */
        PyObject *partitions = PyObject_GetAttr(info, partitions_name);
        if (partitions == NULL) {
            return -1;
        }
        Py_ssize_t count_partitions = PyObject_Length(partitions);
        Py_DECREF(partitions);
        if (count_partitions < 0) {
            return -1;
        }
        PyObject *current = get_slot(acc, STICKY_CURRENT);
        if (current == NULL || !PyDict_CheckExact(current)) {
            return 0;
        }
        choice = PyDict_GetItemWithError(current, topic);
        if (choice == NULL) {
            return PyErr_Occurred() ? -1 : 0;
        }
        long long chosen;
        if (Py_TYPE(choice) != owner_type[CHOICE] || !slot_int(choice, PARTITION, &chosen) ||
            chosen < 0 || chosen >= count_partitions ||
            !slot_int(choice, PRODUCED, &produced) ||
            !slot_int(acc, SWITCH_AFTER, &switch_after) || produced + size >= switch_after) {
            return 0;
        }
        partition = get_slot(choice, PARTITION);
    }
    else if (!PyLong_CheckExact(partition)) {
        return 0;
    }
    PyObject *open = get_slot(acc, OPEN);
    if (open == NULL || !PyDict_CheckExact(open)) {
        return 0;
    }
    PyObject *open_batches = PyDict_GetItemWithError(open, topic);
    if (open_batches == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    Py_ssize_t at = PyLong_AsSsize_t(partition);
    if (at == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (!PyList_CheckExact(open_batches) || at < 0 || at >= PyList_GET_SIZE(open_batches)) {
        return 0;
    }
    PyObject *batch = PyList_GET_ITEM(open_batches, at);
    PyObject *callbacks = NULL;
    if (Py_TYPE(batch) != owner_type[BATCH] || get_slot(batch, IS_OPEN) != Py_True ||
        !slot_int(batch, COUNT, &count) || count <= 0 || !slot_int(batch, SIZE, &batch_bytes) ||
        batch_bytes + size >= batch_size || get_slot(batch, BUILDER) == NULL) {
        return 0; /* a new batch, or this one full: the reference's */
    }
    if (callback != Py_None) {
        callbacks = get_slot(batch, CALLBACKS);
        if (callbacks == NULL || (callbacks != Py_None && !PyList_CheckExact(callbacks))) {
            return 0;
        }
    }
    /* The accumulator's future type: RecordFuture or a subclass with nothing added. */
    PyObject *type = get_slot(acc, FUTURE_TYPE);
    if (type == NULL || !PyType_Check(type) ||
        ((PyTypeObject *)type != future_type &&
         (!PyType_IsSubtype((PyTypeObject *)type, future_type) ||
          ((PyTypeObject *)type)->tp_basicsize != future_type->tp_basicsize))) {
        return 0;
    }
    updates u = {0};
    u.future = ((PyTypeObject *)type)->tp_alloc((PyTypeObject *)type, 3); /* filled last */
    u.count = PyLong_FromLongLong(count + 1);
    u.size = PyLong_FromLongLong(batch_bytes + size);
    u.memory_used = PyLong_FromLongLong(memory_used + size);
    u.produced = choice ? PyLong_FromLongLong(produced + size) : Py_NewRef(Py_None);
    u.index = Py_NewRef(get_slot(batch, COUNT)); /* the old count is the record's index */
    u.timestamp = Py_NewRef(timestamp);
    if (callback != Py_None) {
        u.entry = PyTuple_Pack(3, u.index, timestamp, callback);
        u.callbacks = callbacks == Py_None ? PyList_New(0) : Py_NewRef(callbacks);
    }
    if (u.future == NULL || u.count == NULL || u.size == NULL || u.memory_used == NULL ||
        u.produced == NULL ||
        (callback != Py_None && (u.entry == NULL || u.callbacks == NULL))) {
        drop_updates(&u);
        return -1;
    }
    /* The callback's entry goes in first (and out again if the record is not taken): a
     * list append can fail, and once the record is in the batch nothing may. */
    if (u.callbacks != NULL && PyList_Append(u.callbacks, u.entry) < 0) {
        drop_updates(&u);
        return -1;
    }
    int taken = api->builder_append(get_slot(batch, BUILDER), key, value, ts);
    if (taken != 1) {
        if (u.callbacks != NULL) {
            Py_ssize_t n = PyList_GET_SIZE(u.callbacks);
            PyList_SetSlice(u.callbacks, n - 1, n, NULL);
        }
        drop_updates(&u);
        return taken;
    }
    set_slot(batch, COUNT, u.count);
    set_slot(batch, SIZE, u.size);
    set_slot(acc, MEMORY_USED, u.memory_used);
    if (u.callbacks != NULL) {
        set_slot(batch, CALLBACKS, u.callbacks);
        Py_DECREF(u.entry);
    }
    if (choice != NULL) {
        set_slot(choice, PRODUCED, u.produced);
    }
    else {
        Py_DECREF(u.produced);
    }
    PyTuple_SET_ITEM(u.future, 0, Py_NewRef(batch));
    PyTuple_SET_ITEM(u.future, 1, u.index);
    PyTuple_SET_ITEM(u.future, 2, u.timestamp);
    *future = u.future;
    return 1;
}

static PyObject *
append(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9 || !PyObject_TypeCheck(args[0], owner_type[ACCUMULATOR])) {
        PyErr_SetString(PyExc_TypeError,
                        "append(accumulator, topic, partition, info, key, value, headers, "
                        "timestamp, callback)");
        return NULL;
    }
    PyObject *acc = args[0], *topic = args[1], *headers = args[6], *timestamp = args[7];
    Py_ssize_t key_size = field_size(args[4]), value_size = field_size(args[5]);
    long long ts = 0, max_record_size = 0;
    int overflow = 0;
    int simple = PyUnicode_CheckExact(topic) && key_size >= 0 && value_size >= 0 &&
                 (headers == Py_None || (PyTuple_CheckExact(headers) && !PyTuple_GET_SIZE(headers)) ||
                  (PyList_CheckExact(headers) && !PyList_GET_SIZE(headers))) &&
                 PyLong_CheckExact(timestamp) &&
                 ((ts = PyLong_AsLongLongAndOverflow(timestamp, &overflow)), !overflow) &&
                 slot_int(acc, MAX_RECORD_SIZE, &max_record_size);
    long long size = RECORD_OVERHEAD + (long long)key_size + (long long)value_size;
    PyObject *lock = get_slot(acc, LOCK);
    if (!simple || size > max_record_size || lock == NULL || Py_TYPE(lock) != lock_type) {
        goto reference_append;
    }
    /* A blocking acquire, as the reference's: it tries without letting go of the GIL first. */
    Py_INCREF(lock);
    PyObject *got = acquire_lock(lock, empty_tuple, NULL);
    if (got == NULL) {
        Py_DECREF(lock);
        return NULL;
    }
    Py_DECREF(got);
    PyObject *future = NULL;
    int taken = append_locked(acc, topic, args[2], args[3], args[4], args[5], timestamp, ts,
                              args[8], size, &future);
    PyObject *released = release_lock(lock, NULL);
    Py_DECREF(lock);
    if (released == NULL) {
        Py_XDECREF(future);
        return NULL;
    }
    Py_DECREF(released);
    if (taken != 0) {
        return taken < 0 ? NULL : future;
    }
reference_append:
    return PyObject_Vectorcall(reference, args, nargs, NULL);
}

static PyMethodDef append_def = {
    "append", (PyCFunction)(void (*)(void))append, METH_FASTCALL,
    "append(accumulator, topic, partition, info, key, value, headers, timestamp, callback)"};

/* -- ProducerCore.append_record's common case ---------------------------------------------- */

static PyObject *core_reference; /* ProducerCore.append_record */
static PyObject *plain_name, *client_name, *cluster_name, *topics_name, *accumulator_name;

/* Milliseconds since the epoch, as time.time_ns() // 1_000_000 reads them. */
static PyObject *
now_ms(void)
{
    struct timespec now;
    if (clock_gettime(CLOCK_REALTIME, &now) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return NULL;
    }
    return PyLong_FromLongLong((long long)now.tv_sec * 1000 + now.tv_nsec / 1000000);
}

/* obj.a.b: a new reference, or NULL with an exception set. */
static PyObject *
get_attr2(PyObject *obj, PyObject *a, PyObject *b)
{
    PyObject *first = PyObject_GetAttr(obj, a);
    if (first == NULL) {
        return NULL;
    }
    PyObject *second = PyObject_GetAttr(first, b);
    Py_DECREF(first);
    return second;
}

/* The record's partition for the C append: None (sticky), or the given one when it is an int
 * within the topic; NULL (no exception) when the reference must decide. */
static PyObject *
plain_partition(PyObject *partition, PyObject *key, PyObject *info)
{
    if (partition == Py_None) {
        return key == Py_None ? partition : NULL; /* a key is hashed by the reference */
    }
    if (!PyLong_CheckExact(partition)) {
        return NULL;
    }
    PyObject *partitions = PyObject_GetAttr(info, partitions_name);
    if (partitions == NULL) {
        PyErr_Clear();
        return NULL;
    }
    Py_ssize_t count = PyObject_Length(partitions);
    Py_DECREF(partitions);
    int overflow;
    long long index = PyLong_AsLongLongAndOverflow(partition, &overflow);
    if (count < 0 || overflow || index < 0 || index >= count) {
        PyErr_Clear();
        return NULL;
    }
    return partition;
}

/* append_record(core, topic, value, key, partition, headers, timestamp, on_delivery): the
 * same call and result as core.append_record(...), which decides every case but this one: a
 * core with no serializers whose keyless records stick (`plain`), a topic in the metadata,
 * no headers, no key unless the partition is given. */
static PyObject *
append_record(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "append_record(core, topic, value, key, partition, "
                                         "headers, timestamp, on_delivery)");
        return NULL;
    }
    PyObject *core = args[0], *topic = args[1], *value = args[2], *key = args[3];
    PyObject *headers = args[5], *timestamp = args[6];
    PyObject *plain = NULL, *topics = NULL, *info = NULL, *acc = NULL, *stamp = NULL;
    PyObject *result = NULL;
    int fast = 0;
    if (!PyUnicode_CheckExact(topic) || (timestamp != Py_None && !PyLong_CheckExact(timestamp)) ||
        !(headers == Py_None || (PyTuple_CheckExact(headers) && !PyTuple_GET_SIZE(headers)) ||
          (PyList_CheckExact(headers) && !PyList_GET_SIZE(headers)))) {
        goto done;
    }
    if ((plain = PyObject_GetAttr(core, plain_name)) == NULL) {
        return NULL;
    }
    if (plain != Py_True) {
        goto done;
    }
    if ((topics = get_attr2(core, client_name, cluster_name)) == NULL) {
        goto done;
    }
    Py_SETREF(topics, PyObject_GetAttr(topics, topics_name));
    if (topics == NULL || !PyDict_CheckExact(topics)) {
        goto done;
    }
    info = Py_XNewRef(PyDict_GetItemWithError(topics, topic));
    if (info == NULL) {
        goto done; /* an unknown topic: the reference waits for its metadata */
    }
    PyObject *partition = plain_partition(args[4], key, info);
    if (partition == NULL || (acc = PyObject_GetAttr(core, accumulator_name)) == NULL) {
        goto done;
    }
    stamp = timestamp == Py_None ? now_ms() : Py_NewRef(timestamp);
    if (stamp == NULL) {
        goto done;
    }
    fast = 1;
    PyObject *call[9] = {acc, topic, partition, info, key, value, empty_tuple, stamp, args[7]};
    result = append(module, call, 9);
done:
    Py_XDECREF(plain);
    Py_XDECREF(topics);
    Py_XDECREF(info);
    Py_XDECREF(acc);
    Py_XDECREF(stamp);
    if (fast) {
        return result;
    }
    PyErr_Clear(); /* a lookup that failed: the reference meets it too, and says what it is */
    return PyObject_Vectorcall(core_reference, args, nargs, NULL);
}

static PyMethodDef append_record_def = {
    "append_record", (PyCFunction)(void (*)(void))append_record, METH_FASTCALL,
    "append_record(core, topic, value, key, partition, headers, timestamp, on_delivery)"};

/* The C function behind the method `name` of lock_type, when its calling convention is
 * `flags`; NULL with an exception set otherwise. */
static PyCFunction
lock_method(const char *name, int flags)
{
    PyObject *descr = PyObject_GetAttrString((PyObject *)lock_type, name);
    if (descr == NULL) {
        return NULL;
    }
    PyCFunction function = NULL;
    if (Py_IS_TYPE(descr, &PyMethodDescr_Type) &&
        ((PyMethodDescrObject *)descr)->d_method->ml_flags == flags) {
        function = ((PyMethodDescrObject *)descr)->d_method->ml_meth;
    }
    else {
        PyErr_Format(PyExc_TypeError, "threading.Lock.%s is not the C method it expects", name);
    }
    Py_DECREF(descr);
    return function;
}

static int
bind_lock(void)
{
    PyObject *thread = PyImport_ImportModule("_thread");
    if (thread == NULL) {
        return -1;
    }
    PyObject *type = PyObject_GetAttrString(thread, "LockType");
    Py_DECREF(thread);
    if (type == NULL) {
        return -1;
    }
    if (!PyType_Check(type)) {
        Py_DECREF(type);
        PyErr_SetString(PyExc_TypeError, "_thread.LockType is not a type");
        return -1;
    }
    lock_type = (PyTypeObject *)type;
    acquire_lock = (PyCFunctionWithKeywords)(void (*)(void))lock_method(
        "acquire", METH_VARARGS | METH_KEYWORDS);
    release_lock = acquire_lock == NULL ? NULL : lock_method("release", METH_NOARGS);
    if (release_lock == NULL) {
        Py_CLEAR(lock_type);
        return -1;
    }
    return 0;
}

/* bind(accumulator_type, batch_type, choice_type, future_type) -> append */
static PyObject *
bind(PyObject *module, PyObject *args)
{
    PyObject *types[OWNERS], *future;
    if (!PyArg_ParseTuple(args, "O!O!O!O!:bind", &PyType_Type, &types[ACCUMULATOR],
                          &PyType_Type, &types[BATCH], &PyType_Type, &types[CHOICE],
                          &PyType_Type, &future)) {
        return NULL;
    }
    if (!PyType_IsSubtype((PyTypeObject *)future, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "future_type must be a tuple subclass");
        return NULL;
    }
    if (api == NULL) {
        const gregor_produced_batch_api *table = PyCapsule_Import(GREGOR_PRODUCED_BATCH_CAPSULE, 0);
        if (table == NULL) {
            return NULL;
        }
        if (table->version < API_VERSION) {
            PyErr_Format(PyExc_ImportError, "gregor.protocol's batch API is version %d, not %d+",
                         table->version, API_VERSION);
            return NULL;
        }
        api = table;
    }
    Py_ssize_t offsets[SLOTS];
    for (int owner = 0; owner < OWNERS; owner++) {
        int first = owner_first[owner];
        if (api->slot_offsets(types[owner], slot_names + first, owner_first[owner + 1] - first,
                              offsets + first) < 0) {
            return NULL;
        }
    }
    PyObject *method = PyObject_GetAttrString(types[ACCUMULATOR], "append");
    if (method == NULL) {
        return NULL;
    }
    if ((partitions_name == NULL &&
         (partitions_name = PyUnicode_InternFromString("partitions")) == NULL) ||
        (empty_tuple == NULL && (empty_tuple = PyTuple_New(0)) == NULL) ||
        (lock_type == NULL && bind_lock() < 0)) {
        Py_DECREF(method);
        return NULL;
    }
    memcpy(slot_offset, offsets, sizeof offsets);
    for (int owner = 0; owner < OWNERS; owner++) {
        Py_XSETREF(owner_type[owner], (PyTypeObject *)Py_NewRef(types[owner]));
    }
    Py_XSETREF(future_type, (PyTypeObject *)Py_NewRef(future));
    Py_XSETREF(reference, method);
    return PyCFunction_NewEx(&append_def, module, NULL);
}

/* bind_core(core_type) -> append_record; after bind. */
static PyObject *
bind_core(PyObject *module, PyObject *core_type)
{
    if (!PyType_Check(core_type)) {
        PyErr_SetString(PyExc_TypeError, "bind_core takes the ProducerCore class");
        return NULL;
    }
    if (reference == NULL) {
        PyErr_SetString(PyExc_ValueError, "bind_core needs bind first (the accumulator's)");
        return NULL;
    }
    PyObject *method = PyObject_GetAttrString(core_type, "append_record");
    if (method == NULL) {
        return NULL;
    }
    const char *const texts[] = {"plain", "client", "cluster", "topics", "accumulator"};
    PyObject **names[] = {&plain_name, &client_name, &cluster_name, &topics_name,
                          &accumulator_name};
    for (int i = 0; i < 5; i++) {
        if (*names[i] == NULL && (*names[i] = PyUnicode_InternFromString(texts[i])) == NULL) {
            Py_DECREF(method);
            return NULL;
        }
    }
    Py_XSETREF(core_reference, method);
    return PyCFunction_NewEx(&append_record_def, module, NULL);
}

static PyMethodDef module_methods[] = {
    {"bind", bind, METH_VARARGS,
     "bind(accumulator_type, batch_type, choice_type, future_type) -> append"},
    {"bind_core", bind_core, METH_O, "bind_core(core_type) -> append_record (after bind)"},
    {NULL, NULL, 0, NULL},
};

/* No per-module state (the slot offsets and the API are process-wide): single-phase init. */
static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "gregor.client.producer._accumulate",
    .m_doc = "The common case of Accumulator.append, in C.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__accumulate(void)
{
    return PyModule_Create(&module_def);
}
