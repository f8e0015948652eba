/* Kafka records to flat columns and back: the per-record loops of raylog.kafka.records_py,
 * compiled. Same inputs, same outputs, same refusals (see records_py.py for the record layout
 * and the columns); records_c.py wraps these two functions.
 *
 *   decode(buf, count) -> tuple of 14 bytes objects (records_py.Columns' fields), or
 *                         ValueError for anything malformed
 *   encode(*columns)   -> bytes of Kafka records; ValueError for inconsistent columns
 *
 * Both hold the GIL throughout: the buffers they read cannot change under them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* ---- decode --------------------------------------------------------------------------- */

typedef struct {
    const uint8_t *p;
    const uint8_t *end;
} reader;

/* A zigzag varint of at most 64 bits; 0 on success, -1 (error set) otherwise. */
static int read_varint(reader *r, const uint8_t *end, int64_t *out) {
    uint64_t raw = 0;
    int shift = 0;
    for (;;) {
        if (r->p >= end || shift > 63) {
            PyErr_SetString(PyExc_ValueError, "truncated or overlong varint in a Kafka record");
            return -1;
        }
        uint8_t byte = *r->p++;
        if (shift == 63 && byte > 1) {
            PyErr_SetString(PyExc_ValueError, "varint of more than 64 bits in a Kafka record");
            return -1;
        }
        raw |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80)
            break;
        shift += 7;
    }
    *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
    return 0;
}

typedef struct {
    /* sizes, counted by the first pass */
    Py_ssize_t headers, key_bytes, value_bytes, name_bytes, hvalue_bytes;
    /* outputs, filled by the second pass (NULL during the first) */
    int64_t *ts, *deltas;
    int32_t *key_off, *value_off, *header_off, *name_off, *hvalue_off;
    uint8_t *key_valid, *value_valid, *hvalue_valid;
    uint8_t *key_data, *value_data, *name_data, *hvalue_data;
} columns;

/* One length-prefixed field (-1: null); copies it when filling. */
static int read_field(reader *r, const uint8_t *end, Py_ssize_t index, Py_ssize_t *bytes,
                      int32_t *offsets, uint8_t *valid, uint8_t *data, int nullable) {
    int64_t length;
    if (read_varint(r, end, &length) < 0)
        return -1;
    if (length < 0) {
        if (length != -1 || !nullable) {
            PyErr_Format(PyExc_ValueError, "bad length %lld in a Kafka record",
                         (long long)length);
            return -1;
        }
        if (valid) valid[index] = 0;
    } else {
        if (length > end - r->p) {
            PyErr_SetString(PyExc_ValueError, "a Kafka record's field runs past the record");
            return -1;
        }
        if (valid) valid[index] = 1;
        if (data) memcpy(data + *bytes, r->p, (size_t)length);
        r->p += length;
        *bytes += (Py_ssize_t)length;
    }
    if (offsets) offsets[index + 1] = (int32_t)*bytes;
    return 0;
}

/* One pass over the records: counts sizes, and fills the columns when c->ts is set. */
static int walk(const uint8_t *buf, Py_ssize_t len, Py_ssize_t count, columns *c) {
    reader r = {buf, buf + len};
    int fill = c->ts != NULL;
    c->headers = c->key_bytes = c->value_bytes = c->name_bytes = c->hvalue_bytes = 0;
    if (fill) {
        c->key_off[0] = c->value_off[0] = c->header_off[0] = c->name_off[0] =
            c->hvalue_off[0] = 0;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t length, value, headers;
        if (read_varint(&r, r.end, &length) < 0)
            return -1;
        if (length < 1 || length > r.end - r.p) {
            PyErr_Format(PyExc_ValueError, "Kafka record at byte %zd claims %lld bytes",
                         (Py_ssize_t)(r.p - buf), (long long)length);
            return -1;
        }
        const uint8_t *end = r.p + length;
        r.p++; /* attributes */
        if (read_varint(&r, end, &value) < 0)
            return -1;
        if (fill) c->ts[i] = value;
        if (read_varint(&r, end, &value) < 0)
            return -1;
        if (fill) c->deltas[i] = value;
        if (read_field(&r, end, i, &c->key_bytes, c->key_off, c->key_valid, c->key_data, 1) < 0
            || read_field(&r, end, i, &c->value_bytes, c->value_off, c->value_valid,
                          c->value_data, 1) < 0)
            return -1;
        if (read_varint(&r, end, &headers) < 0)
            return -1;
        if (headers < 0 || headers > end - r.p) {
            PyErr_Format(PyExc_ValueError, "bad header count %lld in a Kafka record",
                         (long long)headers);
            return -1;
        }
        for (int64_t h = 0; h < headers; h++) {
            Py_ssize_t k = c->headers++;
            if (read_field(&r, end, k, &c->name_bytes, c->name_off, NULL, c->name_data, 0) < 0
                || read_field(&r, end, k, &c->hvalue_bytes, c->hvalue_off, c->hvalue_valid,
                              c->hvalue_data, 1) < 0)
                return -1;
        }
        if (fill) c->header_off[i + 1] = (int32_t)c->headers;
        if (r.p != end) {
            PyErr_Format(PyExc_ValueError, "Kafka record ending at byte %zd says it ends at %zd",
                         (Py_ssize_t)(r.p - buf), (Py_ssize_t)(end - buf));
            return -1;
        }
    }
    if (r.p != r.end) {
        PyErr_Format(PyExc_ValueError, "%zd bytes after the last of %zd Kafka records",
                     (Py_ssize_t)(r.end - r.p), count);
        return -1;
    }
    return 0;
}

#define NOUT 14

static PyObject *decode(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "y*n", &view, &count))
        return NULL;
    PyObject *out[NOUT] = {0};
    PyObject *result = NULL;
    const uint8_t *buf = view.buf;
    Py_ssize_t len = view.len;
    columns c = {0};
    /* Every record takes at least 7 bytes: a count beyond that is a lie, refused before
     * anything is allocated for it; offsets are int32. */
    if (count < 0 || count > len / 7 + 1 || len > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%zd Kafka records cannot fit in %zd bytes", count, len);
        goto done;
    }
    if (walk(buf, len, count, &c) < 0)
        goto done;
    Py_ssize_t n = count, m = c.headers;
    Py_ssize_t sizes[NOUT] = {
        8 * n, 8 * n, 4 * (n + 1), n, c.key_bytes, 4 * (n + 1), n, c.value_bytes,
        4 * (n + 1), 4 * (m + 1), c.name_bytes, 4 * (m + 1), m, c.hvalue_bytes,
    };
    char *ptr[NOUT];
    for (int i = 0; i < NOUT; i++) {
        out[i] = PyBytes_FromStringAndSize(NULL, sizes[i]);
        if (!out[i])
            goto done;
        ptr[i] = PyBytes_AS_STRING(out[i]);
    }
    c.ts = (int64_t *)ptr[0];
    c.deltas = (int64_t *)ptr[1];
    c.key_off = (int32_t *)ptr[2];
    c.key_valid = (uint8_t *)ptr[3];
    c.key_data = (uint8_t *)ptr[4];
    c.value_off = (int32_t *)ptr[5];
    c.value_valid = (uint8_t *)ptr[6];
    c.value_data = (uint8_t *)ptr[7];
    c.header_off = (int32_t *)ptr[8];
    c.name_off = (int32_t *)ptr[9];
    c.name_data = (uint8_t *)ptr[10];
    c.hvalue_off = (int32_t *)ptr[11];
    c.hvalue_valid = (uint8_t *)ptr[12];
    c.hvalue_data = (uint8_t *)ptr[13];
    if (walk(buf, len, count, &c) < 0)
        goto done;
    result = PyTuple_New(NOUT);
    if (!result)
        goto done;
    for (int i = 0; i < NOUT; i++) {
        PyTuple_SET_ITEM(result, i, out[i]);
        out[i] = NULL;
    }
done:
    for (int i = 0; i < NOUT; i++)
        Py_XDECREF(out[i]);
    PyBuffer_Release(&view);
    return result;
}

/* ---- encode --------------------------------------------------------------------------- */

static inline int varint_size(uint64_t raw) {
    int size = 1;
    while (raw >= 0x80) {
        raw >>= 7;
        size++;
    }
    return size;
}

static inline uint64_t zigzag(int64_t value) {
    return ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
}

static inline uint8_t *put_varint(uint8_t *p, int64_t value) {
    uint64_t raw = zigzag(value);
    while (raw >= 0x80) {
        *p++ = (uint8_t)(raw | 0x80);
        raw >>= 7;
    }
    *p++ = (uint8_t)raw;
    return p;
}

typedef struct {
    const int32_t *off;
    const uint8_t *valid;
    const uint8_t *data;
    Py_ssize_t data_len;
} binary;

/* Bytes a field takes; -1 (error set) when its offsets do not fit its data. */
static inline Py_ssize_t field_size(const binary *b, Py_ssize_t i) {
    if (b->valid && !b->valid[i])
        return 1;
    int32_t lo = b->off[i], hi = b->off[i + 1];
    if (lo < 0 || hi < lo || hi > b->data_len) {
        PyErr_SetString(PyExc_ValueError, "column offsets outside their data");
        return -1;
    }
    return varint_size(zigzag(hi - lo)) + (hi - lo);
}

static inline uint8_t *put_field(uint8_t *p, const binary *b, Py_ssize_t i) {
    if (b->valid && !b->valid[i])
        return put_varint(p, -1);
    int32_t lo = b->off[i], hi = b->off[i + 1];
    p = put_varint(p, hi - lo);
    memcpy(p, b->data + lo, (size_t)(hi - lo));
    return p + (hi - lo);
}

static PyObject *encode(PyObject *self, PyObject *args) {
    Py_buffer v[NOUT];
    int got = 0;
    PyObject *result = NULL;
    if (PyTuple_GET_SIZE(args) != NOUT) {
        PyErr_Format(PyExc_TypeError, "encode takes %d buffers", NOUT);
        return NULL;
    }
    for (; got < NOUT; got++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(args, got), &v[got], PyBUF_C_CONTIGUOUS) < 0)
            goto done;
    }
    Py_ssize_t n = v[0].len / 8;
    const int64_t *ts = v[0].buf, *deltas = v[1].buf;
    const int32_t *header_off = v[8].buf;
    binary key = {v[2].buf, v[3].buf, v[4].buf, v[4].len};
    binary value = {v[5].buf, v[6].buf, v[7].buf, v[7].len};
    binary name = {v[9].buf, NULL, v[10].buf, v[10].len};
    binary hvalue = {v[11].buf, v[12].buf, v[13].buf, v[13].len};
    Py_ssize_t m_names = v[9].len / 4 - 1, m_values = v[12].len;
    if (v[0].len != 8 * n || v[1].len < 8 * n || v[2].len < 4 * (n + 1) || v[3].len < n ||
        v[5].len < 4 * (n + 1) || v[6].len < n || v[8].len < 4 * (n + 1) ||
        v[11].len / 4 - 1 < m_values) {
        PyErr_SetString(PyExc_ValueError, "record columns of different lengths");
        goto done;
    }
    /* First pass: every record's size, checking every offset against its data. */
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t first = header_off[i], last = header_off[i + 1];
        if (first < 0 || last < first || last > m_names || last > m_values) {
            PyErr_SetString(PyExc_ValueError, "header offsets outside the headers");
            goto done;
        }
        Py_ssize_t k = field_size(&key, i), val = field_size(&value, i);
        if (k < 0 || val < 0)
            goto done;
        Py_ssize_t body = 1 + varint_size(zigzag(ts[i])) + varint_size(zigzag(deltas[i])) + k +
                          val + varint_size(zigzag(last - first));
        for (int32_t h = first; h < last; h++) {
            Py_ssize_t a = field_size(&name, h), b = field_size(&hvalue, h);
            if (a < 0 || b < 0)
                goto done;
            body += a + b;
        }
        total += varint_size(zigzag(body)) + body;
    }
    result = PyBytes_FromStringAndSize(NULL, total);
    if (!result)
        goto done;
    uint8_t *p = (uint8_t *)PyBytes_AS_STRING(result);
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t first = header_off[i], last = header_off[i + 1];
        Py_ssize_t body = 1 + varint_size(zigzag(ts[i])) + varint_size(zigzag(deltas[i])) +
                          field_size(&key, i) + field_size(&value, i) +
                          varint_size(zigzag(last - first));
        for (int32_t h = first; h < last; h++)
            body += field_size(&name, h) + field_size(&hvalue, h);
        p = put_varint(p, body);
        *p++ = 0; /* attributes */
        p = put_varint(p, ts[i]);
        p = put_varint(p, deltas[i]);
        p = put_field(p, &key, i);
        p = put_field(p, &value, i);
        p = put_varint(p, last - first);
        for (int32_t h = first; h < last; h++) {
            p = put_field(p, &name, h);
            p = put_field(p, &hvalue, h);
        }
    }
done:
    for (int i = 0; i < got; i++)
        PyBuffer_Release(&v[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS, "Kafka records -> the 14 column buffers (records_py)."},
    {"encode", encode, METH_VARARGS, "The 14 column buffers -> Kafka records (records_py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_records",
    "Kafka records to columns and back, compiled (see raylog/kafka/records_py.py).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__records(void) { return PyModule_Create(&module); }
