/* The producer's per-record path in C: a batch's record columns, a record's place in its
 * batch, and the call that appends the commonest record (a keyless bytes value, stamped
 * now) to its topic's open sticky batch.
 *
 * Built as raylog.records._append by setup.py (`pip install -e .`, `make install`) or
 * `python -m raylog.kafka.build`; raylog/records/append.py falls back to its pure-Python
 * twin (append_py.py) where it was not built. The types:
 *
 *   Columns     the base of BatchBuilder: room, plain, timestamps, values, keys, headers,
 *               and _put(), which adds one record's columns in one call.
 *   RecordSlot  the base of RecordFuture: (_batch, _index, _timestamp).
 *   PlainSend   PlainSend(sticky, fallback, future_type, overhead) is a callable taking
 *               (topic, value). When topic is a str, value is bytes, sticky[topic] is an
 *               open batch whose builder is plain and has room, it appends the record there
 *               and returns future_type(batch.result, index, timestamp) without running
 *               Python; otherwise it returns fallback(*args, **kwargs) (Producer.send).
 *
 * Concurrency: PlainSend takes no lock. It relies on the GIL: one call of it, and one call
 * of Columns._put, runs whole, with no Python code and no release of the GIL in between
 * (the future, whose allocation may start the garbage collector and so run finalizers, is
 * made after the record is in its batch). The producer mutates a sticky batch's columns
 * only through _put, and removes a batch from `sticky` before it reads its record count
 * (docs/producer.md). So the module refuses to load without a GIL (free-threaded builds
 * use the pure-Python twin, which takes the producer's lock).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#ifdef Py_GIL_DISABLED
#error "raylog.records._append relies on the GIL; append_py.py serves free-threaded builds"
#endif

static PyObject *str_builder;  /* interned attribute names */
static PyObject *str_result;

/* -- Columns ------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    Py_ssize_t room;        /* record bytes the batch can still take */
    char plain;             /* no record so far had a key or headers */
    PyObject *timestamps;   /* list of int */
    PyObject *values;       /* list of bytes or None */
    PyObject *keys;         /* None, or a list with one entry per record */
    PyObject *headers;      /* None, or a list with one entry per record */
} Columns;

static PyObject *
Columns_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    Columns *self = (Columns *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->plain = 1;
    self->timestamps = PyList_New(0);
    self->values = PyList_New(0);
    self->keys = Py_NewRef(Py_None);
    self->headers = Py_NewRef(Py_None);
    if (self->timestamps == NULL || self->values == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int
Columns_traverse(Columns *self, visitproc visit, void *arg)
{
    Py_VISIT(self->timestamps);
    Py_VISIT(self->values);
    Py_VISIT(self->keys);
    Py_VISIT(self->headers);
    return 0;
}

static int
Columns_clear(Columns *self)
{
    Py_CLEAR(self->timestamps);
    Py_CLEAR(self->values);
    Py_CLEAR(self->keys);
    Py_CLEAR(self->headers);
    return 0;
}

static void
Columns_dealloc(Columns *self)
{
    /* A static type: a Python subclass's dealloc releases the subclass (and untracks). */
    PyObject_GC_UnTrack(self);
    Columns_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A column of `n` Nones followed by `last`, for the first record with a key (headers). */
static PyObject *
backfilled(Py_ssize_t n, PyObject *last)
{
    PyObject *list = PyList_New(n);
    if (list == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++)
        PyList_SET_ITEM(list, i, Py_NewRef(Py_None));
    if (PyList_Append(list, last) < 0) {
        Py_DECREF(list);
        return NULL;
    }
    return list;
}

/* _put(size, timestamp, key, value, headers) -> records now held, or 0 (nothing added) when
 * the batch holds a record and `size` exceeds its room. Arguments are checked by the caller
 * (BatchBuilder.append); `headers` is None or a non-empty list. */
static PyObject *
Columns_put(Columns *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "_put takes 5 arguments");
        return NULL;
    }
    Py_ssize_t size = PyLong_AsSsize_t(args[0]);
    if (size == -1 && PyErr_Occurred())
        return NULL;
    PyObject *timestamp = args[1], *key = args[2], *value = args[3], *headers = args[4];
    Py_ssize_t n = PyList_GET_SIZE(self->values);
    if (size > self->room && n > 0)
        return PyLong_FromLong(0);
    /* Every allocation that can fail comes before the first change. */
    PyObject *keys = NULL, *header_lists = NULL;
    if (key != Py_None && self->keys == Py_None && (keys = backfilled(n, key)) == NULL)
        return NULL;
    if (headers != Py_None && self->headers == Py_None
            && (header_lists = backfilled(n, headers)) == NULL) {
        Py_XDECREF(keys);
        return NULL;
    }
    if (PyList_Append(self->timestamps, timestamp) < 0)
        goto fail;
    if (keys != NULL) {
        Py_SETREF(self->keys, keys);
        keys = NULL;
        self->plain = 0;
    } else if (self->keys != Py_None && PyList_Append(self->keys, key) < 0) {
        goto fail_appended;
    }
    if (header_lists != NULL) {
        Py_SETREF(self->headers, header_lists);
        header_lists = NULL;
        self->plain = 0;
    } else if (self->headers != Py_None && PyList_Append(self->headers, headers) < 0) {
        goto fail_appended;
    }
    if (PyList_Append(self->values, value) < 0)
        goto fail_appended;
    self->room -= size;
    return PyLong_FromSsize_t(n + 1);
fail_appended:
    /* Out of memory halfway: the columns no longer line up; refuse the batch for good. */
    self->room = PY_SSIZE_T_MIN;
fail:
    Py_XDECREF(keys);
    Py_XDECREF(header_lists);
    return NULL;
}

static Py_ssize_t
Columns_len(Columns *self)
{
    return PyList_GET_SIZE(self->values);
}

static PyMethodDef Columns_methods[] = {
    {"_put", (PyCFunction)(void (*)(void))Columns_put, METH_FASTCALL,
     "_put(size, timestamp, key, value, headers): add one record's columns; the records "
     "now held, or 0 when it does not fit."},
    {NULL},
};

static PyMemberDef Columns_members[] = {
    {"room", T_PYSSIZET, offsetof(Columns, room), 0, "record bytes the batch can still take"},
    {"plain", T_BOOL, offsetof(Columns, plain), READONLY, "no record had a key or headers"},
    {"timestamps", T_OBJECT_EX, offsetof(Columns, timestamps), READONLY, NULL},
    {"values", T_OBJECT_EX, offsetof(Columns, values), READONLY, NULL},
    {"keys", T_OBJECT_EX, offsetof(Columns, keys), READONLY, NULL},
    {"headers", T_OBJECT_EX, offsetof(Columns, headers), READONLY, NULL},
    {NULL},
};

static PySequenceMethods Columns_as_sequence = {
    .sq_length = (lenfunc)Columns_len,
};

static PyTypeObject ColumnsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "raylog.records._append.Columns",
    .tp_doc = "A batch's record columns (the base of BatchBuilder).",
    .tp_basicsize = sizeof(Columns),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = Columns_new,
    .tp_traverse = (traverseproc)Columns_traverse,
    .tp_clear = (inquiry)Columns_clear,
    .tp_dealloc = (destructor)Columns_dealloc,
    .tp_methods = Columns_methods,
    .tp_members = Columns_members,
    .tp_as_sequence = &Columns_as_sequence,
};

/* -- RecordSlot --------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *batch;        /* the batch's shared result */
    Py_ssize_t index;       /* the record's index in its batch */
    PyObject *timestamp;    /* int, ms */
} RecordSlot;

static PyObject *
RecordSlot_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"batch", "index", "timestamp", NULL};
    PyObject *batch, *timestamp;
    Py_ssize_t index;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OnO", names, &batch, &index, &timestamp))
        return NULL;
    RecordSlot *self = (RecordSlot *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->batch = Py_NewRef(batch);
    self->index = index;
    self->timestamp = Py_NewRef(timestamp);
    return (PyObject *)self;
}

static int
RecordSlot_traverse(RecordSlot *self, visitproc visit, void *arg)
{
    Py_VISIT(self->batch);
    Py_VISIT(self->timestamp);
    return 0;
}

static int
RecordSlot_clear(RecordSlot *self)
{
    Py_CLEAR(self->batch);
    Py_CLEAR(self->timestamp);
    return 0;
}

static void
RecordSlot_dealloc(RecordSlot *self)
{
    PyObject_GC_UnTrack(self);
    RecordSlot_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef RecordSlot_members[] = {
    {"_batch", T_OBJECT_EX, offsetof(RecordSlot, batch), READONLY, NULL},
    {"_index", T_PYSSIZET, offsetof(RecordSlot, index), READONLY, NULL},
    {"_timestamp", T_OBJECT_EX, offsetof(RecordSlot, timestamp), READONLY, NULL},
    {NULL},
};

static PyTypeObject RecordSlotType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "raylog.records._append.RecordSlot",
    .tp_doc = "RecordSlot(batch, index, timestamp): a record's place in its batch.",
    .tp_basicsize = sizeof(RecordSlot),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = RecordSlot_new,
    .tp_traverse = (traverseproc)RecordSlot_traverse,
    .tp_clear = (inquiry)RecordSlot_clear,
    .tp_dealloc = (destructor)RecordSlot_dealloc,
    .tp_members = RecordSlot_members,
};

/* -- PlainSend ---------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *sticky;            /* dict: topic -> its open sticky batch */
    PyObject *fallback;          /* called with the arguments whenever this cannot append */
    PyTypeObject *future_type;   /* a subtype of RecordSlot */
    Py_ssize_t overhead;         /* bytes a record costs beyond its value */
} PlainSend;

/* Milliseconds since the epoch, as time.time_ns() // 1_000_000 (CLOCK_REALTIME). */
static int
now_ms(long long *ms)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    *ms = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    return 0;
}

/* Append (topic, value) to sticky[topic]; a new reference to its future, NULL with an error
 * set, or NULL without one when the record is not for this path. */
static PyObject *
append_plain(PlainSend *self, PyObject *topic, PyObject *value)
{
    if (!PyUnicode_CheckExact(topic) || !PyBytes_CheckExact(value))
        return NULL;
    PyObject *batch = PyDict_GetItemWithError(self->sticky, topic);  /* borrowed */
    if (batch == NULL)
        return NULL;
    PyObject *builder = PyObject_GetAttr(batch, str_builder);
    if (builder == NULL)
        return NULL;
    if (!PyObject_TypeCheck(builder, &ColumnsType)) {
        Py_DECREF(builder);
        return NULL;
    }
    Columns *columns = (Columns *)builder;
    /* Compared before subtracting: a batch refused for good has room PY_SSIZE_T_MIN. */
    Py_ssize_t size = self->overhead + PyBytes_GET_SIZE(value);
    if (columns->room < size || !columns->plain) {
        Py_DECREF(builder);
        return NULL;
    }
    PyObject *result = PyObject_GetAttr(batch, str_result);
    long long ms;
    PyObject *timestamp = NULL;
    if (result == NULL || now_ms(&ms) < 0 || (timestamp = PyLong_FromLongLong(ms)) == NULL)
        goto fail;
    if (PyList_Append(columns->timestamps, timestamp) < 0)
        goto fail;
    if (PyList_Append(columns->values, value) < 0) {
        columns->room = PY_SSIZE_T_MIN;  /* the columns no longer line up: see _put */
        goto fail;
    }
    columns->room -= size;
    Py_ssize_t index = PyList_GET_SIZE(columns->values) - 1;
    Py_DECREF(builder);
    /* Last: allocating the future may run the garbage collector, and with it Python code
     * and other threads; the record is in its batch by then. */
    RecordSlot *future = (RecordSlot *)self->future_type->tp_alloc(self->future_type, 0);
    if (future == NULL) {
        Py_DECREF(result);
        Py_DECREF(timestamp);
        return NULL;
    }
    future->batch = result;
    future->index = index;
    future->timestamp = timestamp;
    return (PyObject *)future;
fail:
    Py_DECREF(builder);
    Py_XDECREF(result);
    Py_XDECREF(timestamp);
    return NULL;
}

static PyObject *
PlainSend_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                     PyObject *kwnames)
{
    PlainSend *self = (PlainSend *)callable;
    if (PyVectorcall_NARGS(nargsf) == 2 && kwnames == NULL) {
        PyObject *future = append_plain(self, args[0], args[1]);
        if (future != NULL || PyErr_Occurred())
            return future;
    }
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

static PyObject *
PlainSend_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"sticky", "fallback", "future_type", "overhead", NULL};
    PyObject *sticky, *fallback;
    PyTypeObject *future_type;
    Py_ssize_t overhead;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!OO!n", names, &PyDict_Type, &sticky,
                                     &fallback, &PyType_Type, &future_type, &overhead))
        return NULL;
    if (!PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "fallback must be callable");
        return NULL;
    }
    if (!PyType_IsSubtype(future_type, &RecordSlotType)) {
        PyErr_SetString(PyExc_TypeError, "future_type must be a subclass of RecordSlot");
        return NULL;
    }
    PlainSend *self = (PlainSend *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = PlainSend_vectorcall;
    self->sticky = Py_NewRef(sticky);
    self->fallback = Py_NewRef(fallback);
    self->future_type = (PyTypeObject *)Py_NewRef((PyObject *)future_type);
    self->overhead = overhead;
    return (PyObject *)self;
}

static int
PlainSend_traverse(PlainSend *self, visitproc visit, void *arg)
{
    Py_VISIT(self->sticky);
    Py_VISIT(self->fallback);
    Py_VISIT(self->future_type);
    return 0;
}

static int
PlainSend_clear(PlainSend *self)
{
    Py_CLEAR(self->sticky);
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->future_type);
    return 0;
}

static void
PlainSend_dealloc(PlainSend *self)
{
    PyObject_GC_UnTrack(self);
    PlainSend_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject PlainSendType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "raylog.records._append.PlainSend",
    .tp_doc = "PlainSend(sticky, fallback, future_type, overhead): send(topic, value) that "
              "appends to the open sticky batch in C, else calls fallback.",
    .tp_basicsize = sizeof(PlainSend),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(PlainSend, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = PlainSend_new,
    .tp_traverse = (traverseproc)PlainSend_traverse,
    .tp_clear = (inquiry)PlainSend_clear,
    .tp_dealloc = (destructor)PlainSend_dealloc,
};

/* -- a plain batch's columns as Arrow buffers ------------------------------------------------ */

/* plain_columns(timestamps, values) -> (int64 timestamps, int32 offsets, value bytes), the
 * buffers of Arrow's int64 and binary arrays of the two lists, in one pass; or None when a
 * value is not bytes (a null needs a validity bitmap: pa.array does that) or the values
 * exceed 2 GiB (int32 offsets). */
static PyObject *
plain_columns(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyList_Check(args[0]) || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "plain_columns takes two lists");
        return NULL;
    }
    PyObject *timestamps = args[0], *values = args[1];
    Py_ssize_t n = PyList_GET_SIZE(values);
    if (PyList_GET_SIZE(timestamps) != n) {
        PyErr_SetString(PyExc_ValueError, "plain_columns: the lists differ in length");
        return NULL;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *value = PyList_GET_ITEM(values, i);
        if (!PyBytes_CheckExact(value))
            Py_RETURN_NONE;
        total += PyBytes_GET_SIZE(value);
        if (total > INT32_MAX)
            Py_RETURN_NONE;
    }
    PyObject *ts = PyBytes_FromStringAndSize(NULL, n * 8);
    PyObject *offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
    PyObject *data = PyBytes_FromStringAndSize(NULL, total);
    if (ts == NULL || offsets == NULL || data == NULL)
        goto fail;
    int64_t *t = (int64_t *)PyBytes_AS_STRING(ts);
    int32_t *o = (int32_t *)PyBytes_AS_STRING(offsets);
    char *d = PyBytes_AS_STRING(data);
    int32_t at = 0;
    o[0] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        /* The values are bytes (checked above) and the lists are not changed meanwhile: the
         * caller owns a sealed batch, and nothing here runs Python code. */
        long long stamp = PyLong_AsLongLong(PyList_GET_ITEM(timestamps, i));
        if (stamp == -1 && PyErr_Occurred())
            goto fail;
        t[i] = stamp;
        PyObject *value = PyList_GET_ITEM(values, i);
        Py_ssize_t size = PyBytes_GET_SIZE(value);
        memcpy(d + at, PyBytes_AS_STRING(value), size);
        at += (int32_t)size;
        o[i + 1] = at;
    }
    return Py_BuildValue("(NNN)", ts, offsets, data);
fail:
    Py_XDECREF(ts);
    Py_XDECREF(offsets);
    Py_XDECREF(data);
    return NULL;
}

static PyMethodDef module_methods[] = {
    {"plain_columns", (PyCFunction)(void (*)(void))plain_columns, METH_FASTCALL,
     "plain_columns(timestamps, values) -> (int64 timestamps, int32 offsets, data) as bytes, "
     "or None when a value is not bytes."},
    {NULL},
};

/* -- the module --------------------------------------------------------------------------- */

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "raylog.records._append",
    .m_doc = "The producer's per-record append in C (see append.py).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__append(void)
{
    if (PyType_Ready(&ColumnsType) < 0 || PyType_Ready(&RecordSlotType) < 0
            || PyType_Ready(&PlainSendType) < 0)
        return NULL;
    str_builder = PyUnicode_InternFromString("builder");
    str_result = PyUnicode_InternFromString("result");
    if (str_builder == NULL || str_result == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddType(m, &ColumnsType) < 0 || PyModule_AddType(m, &RecordSlotType) < 0
            || PyModule_AddType(m, &PlainSendType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
