/* The plan's host table written from its columns (hostjson.py's fast path): no Python object per
 * value or row.
 *
 * rows(parts, count) -> bytes | None: ``count`` rows, row j being each part's j-th piece in turn,
 * the bytes hostjson._rows writes from the same parts once each column is serialised
 * (hostjson._pieces). A part is
 *   - bytes: the same text in every row;
 *   - a tuple (text, offsets): row j's JSON is text[offsets[j]:offsets[j + 1]] (bytes and
 *     ``count`` + 1 int64, not decreasing: lists.packed's);
 *   - a tuple (values, present): float64 or int64 numbers, null where the bool present is
 *     False (hostjson.Nullable);
 *   - a list (or list subclass) of ``count`` bytes: each row's JSON as it is; or of
 *     ``count`` str: each row's string, quoted and escaped as orjson does;
 *   - a one-dimensional buffer (a numpy array) of ``count`` values: float64 ('d'), int64 ('l'
 *     or 'q'), or objects ('O': None, int of 64 bits, float), written as orjson writes them,
 *     or fixed-width bytes ('5s': each row's JSON padded with NULs, which JSON text never
 *     holds raw, as numpy's ``S`` arrays are).
 * Anything else -- another type or format, a length other than ``count``, a non-finite float
 * (orjson writes null), an int beyond 64 bits, a bool or a numpy scalar in an object array --
 * is "not the fast case": None, and the caller serialises the columns in Python.
 *
 * Doubles: a double that is the nearest to a decimal of at most 15 significant digits (the plan's
 * numbers have 12: planfile.significant) is that decimal (two such decimals are never the same
 * double), found by one scaling by a power of ten that is exact (10^0..10^22) and checked by the
 * correctly rounded inverse operation; the others (and the layout of every one) go through
 * _jsonnumber.h's format_double, checked against orjson (tests/planner/test_hostjson_compiled.py,
 * tests/plan/test_transition_compiled.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "../cosample/plan/_jsonnumber.h"

#define MAX_PARTS 256
#define AT64(view, j) (*(const long long *)((const char *)(view).buf + (j) * (view).strides[0]))
#define NUMBER_WIDTH 32 /* at most 24 bytes of a double's text, 20 of an int64's */

enum { P_CONST, P_LIST, P_DOUBLE, P_INT, P_OBJECT, P_FIXED, P_STR, P_PACKED, P_NULLABLE };

/* a buffer format of fixed-width bytes ('5s', or 's' for one byte) of ``itemsize`` */
static int fixed_format(const char *format, Py_ssize_t itemsize) {
    size_t len = strlen(format);
    return itemsize > 0 && len > 0 && format[len - 1] == 's'
           && (len == 1 ? itemsize == 1 : atol(format) == itemsize);
}

typedef struct {
    int kind;
    const char *text;      /* P_CONST */
    Py_ssize_t len;
    PyObject *list;        /* P_LIST */
    Py_buffer view;        /* the buffer kinds */
    int has_view;
    Py_buffer present;     /* P_NULLABLE: null where 0 */
    int has_present, doubles;
} part_t;

static const double POW10[23] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
                                  1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20,
                                  1e21, 1e22};

static const char PAIRS[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

static int write_uint(unsigned long long value, char *out) {
    char digits[24];
    int at = 24;
    while (value >= 100) {  /* two digits at a time */
        unsigned pair = (unsigned)(value % 100);
        value /= 100;
        at -= 2;
        memcpy(digits + at, PAIRS + 2 * pair, 2);
    }
    if (value >= 10) {
        at -= 2;
        memcpy(digits + at, PAIRS + 2 * value, 2);
    } else digits[--at] = (char)('0' + value);
    memcpy(out, digits + at, (size_t)(24 - at));
    return 24 - at;
}

static int write_int(long long value, char *out) {
    if (value < 0) {
        out[0] = '-';
        return 1 + write_uint(0ULL - (unsigned long long)value, out + 1);
    }
    return write_uint((unsigned long long)value, out);
}

/* floor(log10(a)) for a positive normal double, from its binary exponent (without log10);
   it may be one too low for a within an ulp or so of a power of ten (the caller checks) */
static int decade(double a) {
    uint64_t bits;
    memcpy(&bits, &a, sizeof bits);
    int binary = (int)((bits >> 52) & 0x7ff) - 1023;  /* floor(log2(a)) */
    int e = (int)floor(binary * 0.30102999566398120);  /* floor(log10(2^binary)) */
    if (e >= -22 && e + 1 <= 22 && a >= (e + 1 >= 0 ? POW10[e + 1] : 1.0 / POW10[-e - 1]))
        e++;
    return e;
}

/* orjson's text of a finite double; its length, -1 on failure */
static int write_double(double x, char *out) {
    if (!isfinite(x)) return -1;
    if (x != 0) {
        double a = fabs(x);
        int k = 14 - decade(a);  /* a * 10^k: 15 digits before the point */
        if (k >= -22 && k <= 22) {
            double whole = nearbyint(k >= 0 ? a * POW10[k] : a / POW10[-k]);
            if (whole >= 1 && whole < 1e15
                    && (k >= 0 ? whole / POW10[k] : whole * POW10[-k]) == a) {
                unsigned long long digits = (unsigned long long)whole;
                int exponent = -k;  /* of the last digit */
                while (digits % 10 == 0) { digits /= 10; exponent++; }
                char text[24];
                int count = write_uint(digits, text);
                return layout_double(x < 0, text, count, count - 1 + exponent, out);
            }
        }
    }
    return format_double(x, NULL, 0, out);
}

/* one object array element's JSON; -1: not the fast case */
static int write_object(PyObject *item, char *out) {
    if (item == Py_None) { memcpy(out, "null", 4); return 4; }
    if (PyFloat_CheckExact(item)) return write_double(PyFloat_AS_DOUBLE(item), out);
    if (PyLong_CheckExact(item)) {
        int overflow = 0;
        long long value = PyLong_AsLongLongAndOverflow(item, &overflow);
        if (overflow || (value == -1 && PyErr_Occurred())) { PyErr_Clear(); return -1; }
        return write_int(value, out);
    }
    return -1;
}

/* a string's JSON from its UTF-8 as orjson (and json's encode_basestring) writes it: quoted,
   '"' and '\\' and control characters escaped, everything else as it is */
static int write_string(const char *text, Py_ssize_t size, char *out) {
    static const char hex[] = "0123456789abcdef";
    int len = 0;
    out[len++] = '"';
    for (Py_ssize_t k = 0; k < size; k++) {
        unsigned char c = (unsigned char)text[k];
        if (c >= 0x20 && c != '"' && c != '\\') { out[len++] = (char)c; continue; }
        out[len++] = '\\';
        switch (c) {
        case '"': out[len++] = '"'; break;
        case '\\': out[len++] = '\\'; break;
        case '\n': out[len++] = 'n'; break;
        case '\r': out[len++] = 'r'; break;
        case '\t': out[len++] = 't'; break;
        case '\b': out[len++] = 'b'; break;
        case '\f': out[len++] = 'f'; break;
        default:
            memcpy(out + len, "u00", 3);
            len += 3;
            out[len++] = hex[c >> 4];
            out[len++] = hex[c & 15];
        }
    }
    out[len++] = '"';
    return len;
}

static void release(part_t *parts, int count) {
    for (int k = 0; k < count; k++) {
        if (parts[k].has_view) PyBuffer_Release(&parts[k].view);
        if (parts[k].has_present) PyBuffer_Release(&parts[k].present);
    }
}

/* a one-dimensional buffer of ``rows`` items (any number: ``rows`` < 0), its format without a
   native byte-order prefix (NULL: not such a buffer; no error set); ``*has``: ``view`` is held
   (to be released) */
static const char *vector(PyObject *obj, Py_buffer *view, Py_ssize_t rows, int *has) {
    if (!PyObject_CheckBuffer(obj) || PyObject_GetBuffer(obj, view, PyBUF_RECORDS_RO) < 0) {
        PyErr_Clear();
        return NULL;
    }
    *has = 1;
    const char *format = view->format ? view->format : "B";
    if (format[0] == '<' || format[0] == '=' || format[0] == '@') format++;
    return view->ndim == 1 && (rows < 0 || view->shape[0] == rows) ? format : NULL;
}

/* whether items of ``format`` and ``itemsize`` are int64 */
static int is_int64(const char *format, Py_ssize_t itemsize) {
    return itemsize == 8 && (strcmp(format, "l") == 0 || strcmp(format, "q") == 0);
}

/* (values, present): float64 or int64 numbers, null where the bool ``present`` is False */
static int nullable_kind(PyObject *obj, Py_ssize_t rows, part_t *p, Py_ssize_t *size) {
    const char *format = vector(PyTuple_GET_ITEM(obj, 0), &p->view, rows, &p->has_view);
    if (format == NULL || p->view.itemsize != 8) return 0;
    if (strcmp(format, "d") == 0) p->doubles = 1;
    else if (is_int64(format, p->view.itemsize)) p->doubles = 0;
    else return 0;
    format = vector(PyTuple_GET_ITEM(obj, 1), &p->present, rows, &p->has_present);
    if (format == NULL || strcmp(format, "?") != 0 || p->present.itemsize != 1) return 0;
    p->kind = P_NULLABLE;
    *size += NUMBER_WIDTH * rows;
    return 1;
}

/* the part's kind and reference; 0: not the fast case (no error set) */
static int part_kind(PyObject *obj, Py_ssize_t rows, part_t *p, Py_ssize_t *size) {
    p->has_view = p->has_present = 0;
    if (PyTuple_Check(obj) && PyTuple_GET_SIZE(obj) == 2
            && !PyBytes_Check(PyTuple_GET_ITEM(obj, 0)))
        return nullable_kind(obj, rows, p, size);
    if (PyBytes_Check(obj)) {
        p->kind = P_CONST;
        p->text = PyBytes_AS_STRING(obj);
        p->len = PyBytes_GET_SIZE(obj);
        *size += p->len * rows;
        return 1;
    }
    if (PyTuple_Check(obj)) {  /* (text, offsets): row j is text[offsets[j]:offsets[j + 1]] */
        if (PyTuple_GET_SIZE(obj) != 2 || !PyBytes_Check(PyTuple_GET_ITEM(obj, 0))) return 0;
        PyObject *text = PyTuple_GET_ITEM(obj, 0);
        const char *format = vector(PyTuple_GET_ITEM(obj, 1), &p->view, rows + 1, &p->has_view);
        if (format == NULL || !is_int64(format, p->view.itemsize)) return 0;
        long long before = AT64(p->view, 0);
        if (before < 0) return 0;
        for (Py_ssize_t j = 1; j <= rows; j++) {
            long long at = AT64(p->view, j);
            if (at < before) return 0;
            before = at;
        }
        if (before > PyBytes_GET_SIZE(text)) return 0;
        *size += before - AT64(p->view, 0);
        p->kind = P_PACKED;
        p->text = PyBytes_AS_STRING(text);
        return 1;
    }
    if (PyList_Check(obj)) {
        if (PyList_GET_SIZE(obj) != rows) return 0;
        if (rows > 0 && PyUnicode_CheckExact(PyList_GET_ITEM(obj, 0))) {
            for (Py_ssize_t j = 0; j < rows; j++) {  /* strings: quoted and escaped here */
                PyObject *item = PyList_GET_ITEM(obj, j);
                Py_ssize_t len;
                if (!PyUnicode_CheckExact(item)) return 0;
                if (PyUnicode_AsUTF8AndSize(item, &len) == NULL) {  /* a lone surrogate */
                    PyErr_Clear();
                    return 0;
                }
                *size += 2 + 6 * len;
            }
            p->kind = P_STR;
            p->list = obj;
            return 1;
        }
        for (Py_ssize_t j = 0; j < rows; j++) {
            PyObject *item = PyList_GET_ITEM(obj, j);
            if (!PyBytes_Check(item)) return 0;
            *size += PyBytes_GET_SIZE(item);
        }
        p->kind = P_LIST;
        p->list = obj;
        return 1;
    }
    const char *format = vector(obj, &p->view, rows, &p->has_view);
    if (format == NULL) return 0;
    if (strcmp(format, "d") == 0 && p->view.itemsize == 8) p->kind = P_DOUBLE;
    else if (is_int64(format, p->view.itemsize)) p->kind = P_INT;
    else if (strcmp(format, "O") == 0 && p->view.itemsize == sizeof(PyObject *)) p->kind = P_OBJECT;
    else if (fixed_format(format, p->view.itemsize)) {
        p->kind = P_FIXED;
        *size += p->view.itemsize * rows;
        return 1;
    } else return 0;
    *size += NUMBER_WIDTH * rows;
    return 1;
}

static PyObject *rows(PyObject *self, PyObject *args) {
    PyObject *list;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "O!n", &PyList_Type, &list, &count)) return NULL;
    Py_ssize_t n_parts = PyList_GET_SIZE(list);
    if (n_parts > MAX_PARTS || count < 0) Py_RETURN_NONE;
    part_t parts[MAX_PARTS];
    Py_ssize_t size = 0;
    int ready = 0;
    for (; ready < n_parts; ready++)
        if (!part_kind(PyList_GET_ITEM(list, ready), count, &parts[ready], &size)) {
            release(parts, ready + 1);
            Py_RETURN_NONE;
        }
    PyObject *bytes = PyBytes_FromStringAndSize(NULL, size);
    if (bytes == NULL) { release(parts, ready); return NULL; }
    char *out = PyBytes_AS_STRING(bytes);
    Py_ssize_t len = 0;
    for (Py_ssize_t j = 0; j < count; j++) {
        for (Py_ssize_t k = 0; k < n_parts; k++) {
            part_t *p = &parts[k];
            int written = 0;
            switch (p->kind) {
            case P_CONST:
                memcpy(out + len, p->text, (size_t)p->len);
                len += p->len;
                break;
            case P_LIST: {
                PyObject *item = PyList_GET_ITEM(p->list, j);
                memcpy(out + len, PyBytes_AS_STRING(item), (size_t)PyBytes_GET_SIZE(item));
                len += PyBytes_GET_SIZE(item);
                break;
            }
            case P_NULLABLE: {
                const char *at = (const char *)p->view.buf + j * p->view.strides[0];
                if (!*((const char *)p->present.buf + j * p->present.strides[0])) {
                    memcpy(out + len, "null", 4);
                    written = 4;
                } else if (p->doubles) written = write_double(*(const double *)at, out + len);
                else written = write_int(*(const long long *)at, out + len);
                break;
            }
            case P_PACKED: {
                long long from = AT64(p->view, j), to = AT64(p->view, j + 1);
                memcpy(out + len, p->text + from, (size_t)(to - from));
                len += to - from;
                break;
            }
            case P_STR: {
                Py_ssize_t size;
                const char *text = PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(p->list, j), &size);
                written = write_string(text, size, out + len);
                break;
            }
            case P_FIXED: {
                const char *at = (const char *)p->view.buf + j * p->view.strides[0];
                written = (int)strnlen(at, (size_t)p->view.itemsize);
                memcpy(out + len, at, (size_t)written);
                break;
            }
            case P_DOUBLE:
                written = write_double(
                    *(const double *)((const char *)p->view.buf + j * p->view.strides[0]),
                    out + len);
                break;
            case P_INT:
                written = write_int(
                    *(const long long *)((const char *)p->view.buf + j * p->view.strides[0]),
                    out + len);
                break;
            case P_OBJECT:
                written = write_object(
                    *(PyObject *const *)((const char *)p->view.buf + j * p->view.strides[0]),
                    out + len);
                break;
            }
            if (written < 0) {
                Py_DECREF(bytes);
                release(parts, ready);
                Py_RETURN_NONE;
            }
            len += written;
        }
    }
    release(parts, ready);
    if (_PyBytes_Resize(&bytes, len) < 0) return NULL;
    return bytes;
}

/* ---- grouped lists ------------------------------------------------------------------------ */

/* a field's values: ``source`` (a list of bytes, a fixed-width bytes array 'Ns' padded with
   NULs, or a float64 array) read at ``index`` (int64, one per object; None: the source is in
   the objects' order already, as an array gathered by numpy is: a gather here would wait on
   each cache miss in turn) */
typedef struct {
    PyObject *list;
    Py_buffer source, index;
    int has_source, has_index, kind;  /* P_LIST, P_FIXED, P_DOUBLE */
    Py_ssize_t size;
} field_t;

static void release_fields(field_t *fields, int count) {
    for (int k = 0; k < count; k++) {
        if (fields[k].has_source) PyBuffer_Release(&fields[k].source);
        if (fields[k].has_index) PyBuffer_Release(&fields[k].index);
    }
}

/* ``view`` of a one-dimensional int64 buffer of ``count`` items (any: < 0); 0: not such a
   buffer (nothing held, no error set) */
static int int64_view(PyObject *obj, Py_buffer *view, Py_ssize_t count) {
    int has = 0;
    const char *format = vector(obj, view, count, &has);
    if (format != NULL && is_int64(format, view->itemsize)) return 1;
    if (has) PyBuffer_Release(view);
    return 0;
}


/* the field's source and index; 0: not the fast case (no error set) */
static int field_kind(PyObject *pair, Py_ssize_t count, field_t *f) {
    f->has_source = f->has_index = 0;
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) return 0;
    PyObject *source = PyTuple_GET_ITEM(pair, 0);
    if (PyTuple_GET_ITEM(pair, 1) != Py_None) {
        if (!int64_view(PyTuple_GET_ITEM(pair, 1), &f->index, count)) return 0;
        f->has_index = 1;
    }
    if (PyList_Check(source)) {
        f->kind = P_LIST;
        f->list = source;
        f->size = PyList_GET_SIZE(source);
        for (Py_ssize_t j = 0; j < f->size; j++)
            if (!PyBytes_Check(PyList_GET_ITEM(source, j))) return 0;
    } else {
        const char *format = vector(source, &f->source, -1, &f->has_source);
        if (format == NULL) return 0;
        f->size = f->source.shape[0];
        if (strcmp(format, "d") == 0 && f->source.itemsize == 8) f->kind = P_DOUBLE;
        else if (fixed_format(format, f->source.itemsize)) f->kind = P_FIXED;
        else return 0;
    }
    if (!f->has_index) return f->size == count;
    for (Py_ssize_t j = 0; j < count; j++) {
        long long at = AT64(f->index, j);
        if (at < 0 || at >= f->size) return 0;
    }
    return 1;
}

/* the buffer lists are written into: PyMem (one list at a time), or a bytes object (``bytes``
   not NULL: all the lists, returned as they are) */
typedef struct { char *out; Py_ssize_t len, cap; PyObject *bytes; } scratch_t;

static int room(scratch_t *s, Py_ssize_t more) {
    if (s->len + more <= s->cap) return 1;
    Py_ssize_t cap = s->cap ? 2 * s->cap : 4096;
    while (cap < s->len + more) cap *= 2;
    if (s->bytes != NULL) {
        if (_PyBytes_Resize(&s->bytes, cap) < 0) return 0;
        s->out = PyBytes_AS_STRING(s->bytes);
        s->cap = cap;
        return 1;
    }
    char *out = PyMem_Realloc(s->out, (size_t)cap);
    if (out == NULL) { PyErr_NoMemory(); return 0; }
    s->out = out;
    s->cap = cap;
    return 1;
}

/* object j's value of field f; -1: not the fast case, -2: an error */
static int write_value(const field_t *f, Py_ssize_t j, scratch_t *s) {
    long long at = f->has_index ? AT64(f->index, j) : j;
    if (f->kind == P_LIST) {
        PyObject *item = PyList_GET_ITEM(f->list, at);
        Py_ssize_t len = PyBytes_GET_SIZE(item);
        if (!room(s, len)) return -2;
        memcpy(s->out + s->len, PyBytes_AS_STRING(item), (size_t)len);
        s->len += len;
        return 0;
    }
    const char *at_source = (const char *)f->source.buf + at * f->source.strides[0];
    if (f->kind == P_FIXED) {
        Py_ssize_t len = (Py_ssize_t)strnlen(at_source, (size_t)f->source.itemsize);
        if (!room(s, len)) return -2;
        memcpy(s->out + s->len, at_source, (size_t)len);
        s->len += len;
        return 0;
    }
    if (!room(s, NUMBER_WIDTH)) return -2;
    int len = write_double(*(const double *)at_source, s->out + s->len);
    if (len < 0) return -1;
    s->len += len;
    return 0;
}

static int put_text(scratch_t *s, const char *text, Py_ssize_t len) {
    if (!room(s, len)) return 0;
    memcpy(s->out + s->len, text, (size_t)len);
    s->len += len;
    return 1;
}

/* the objects of one owner (from pair *j on, while the owner is ``owner``) as a JSON array;
   0, -1: not the fast case, -2: an error */
static int write_list(scratch_t *s, const Py_buffer *owners, Py_ssize_t count, Py_ssize_t *j,
                      long long owner, PyObject *keys, const field_t *fields, Py_ssize_t n_fields) {
    if (!put_text(s, "[", 1)) return -2;
    Py_ssize_t start = s->len;
    for (; *j < count && AT64(*owners, *j) == owner; (*j)++) {
        if (!put_text(s, s->len > start ? ",{" : "{", s->len > start ? 2 : 1)) return -2;
        for (Py_ssize_t k = 0; k < n_fields; k++) {
            PyObject *key = PyList_GET_ITEM(keys, k);
            if (!put_text(s, PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key))) return -2;
            int got = write_value(&fields[k], *j, s);
            if (got < 0) return got;
        }
        if (!put_text(s, "}", 1)) return -2;
    }
    return put_text(s, "]", 1) ? 0 : -2;
}

static PyObject *lists(PyObject *self, PyObject *args) {
    PyObject *owners_obj, *keys, *sources, *slots_obj;
    Py_ssize_t n;
    int packed = 0;
    if (!PyArg_ParseTuple(args, "OO!O!nO|p", &owners_obj, &PyList_Type, &keys, &PyList_Type,
                          &sources, &n, &slots_obj, &packed)) return NULL;
    Py_ssize_t n_fields = PyList_GET_SIZE(keys);
    if (n_fields != PyList_GET_SIZE(sources) || n_fields > MAX_PARTS || n < 0) Py_RETURN_NONE;
    if (packed && slots_obj != Py_None) Py_RETURN_NONE;
    for (Py_ssize_t k = 0; k < n_fields; k++)
        if (!PyBytes_Check(PyList_GET_ITEM(keys, k))) Py_RETURN_NONE;
    Py_buffer owners, slots;
    if (!int64_view(owners_obj, &owners, -1)) Py_RETURN_NONE;
    Py_ssize_t count = owners.shape[0];
    int has_slots = slots_obj != Py_None;
    if (has_slots && !int64_view(slots_obj, &slots, n)) {
        PyBuffer_Release(&owners);
        Py_RETURN_NONE;
    }
    field_t fields[MAX_PARTS];
    int ready = 0;
    PyObject *result = NULL, *empty = NULL, *offsets = NULL;
    scratch_t s = {NULL, 0, 0, NULL};
    int fast = 1, got = 0;
    for (; ready < n_fields; ready++)
        if (!field_kind(PyList_GET_ITEM(sources, ready), count, &fields[ready])) {
            ready++;
            fast = 0;
            goto done;
        }
    for (Py_ssize_t j = 0; j < count; j++) {  /* owners grouped in increasing order */
        long long owner = AT64(owners, j);
        if (owner < 0 || owner >= n || (j > 0 && owner < AT64(owners, j - 1))) {
            fast = 0;
            goto done;
        }
    }
    if (has_slots) {  /* each owner's own slot */
        char *seen = PyMem_Calloc((size_t)n + 1, 1);
        if (seen == NULL) { PyErr_NoMemory(); goto done; }
        for (Py_ssize_t i = 0; i < n && fast; i++) {
            long long slot = AT64(slots, i);
            if (slot < 0 || slot >= n || seen[slot]) fast = 0;
            else seen[slot] = 1;
        }
        PyMem_Free(seen);
        if (!fast) goto done;
    }
    if (packed) {  /* every owner's array in turn, one buffer, and where each starts */
        s.bytes = PyBytes_FromStringAndSize(NULL, 4096);
        offsets = s.bytes == NULL ? NULL : PyBytes_FromStringAndSize(NULL, (n + 1) * 8);
        if (offsets == NULL) goto done;
        s.out = PyBytes_AS_STRING(s.bytes);
        s.cap = 4096;
        int64_t *start = (int64_t *)PyBytes_AS_STRING(offsets);
        Py_ssize_t j = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            start[i] = s.len;
            if ((got = write_list(&s, &owners, count, &j, i, keys, fields, n_fields)) < 0)
                goto fail;
        }
        start[n] = s.len;
        if (_PyBytes_Resize(&s.bytes, s.len) < 0) goto done;
        result = PyTuple_Pack(2, s.bytes, offsets);
        goto done;
    }
    empty = PyBytes_FromStringAndSize("[]", 2);
    result = empty == NULL ? NULL : PyList_New(n);
    if (result == NULL) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_INCREF(empty);
        PyList_SET_ITEM(result, i, empty);
    }
    for (Py_ssize_t j = 0; j < count;) {
        long long owner = AT64(owners, j);
        s.len = 0;
        if ((got = write_list(&s, &owners, count, &j, owner, keys, fields, n_fields)) < 0)
            goto fail;
        PyObject *text = PyBytes_FromStringAndSize(s.out, s.len);
        if (text == NULL) goto fail;
        Py_ssize_t slot = has_slots ? (Py_ssize_t)AT64(slots, owner) : (Py_ssize_t)owner;
        PyObject *before = PyList_GET_ITEM(result, slot);  /* the shared "[]" */
        PyList_SET_ITEM(result, slot, text);
        Py_DECREF(before);
    }
    goto done;
fail:
    if (got == -1) fast = 0;
    Py_CLEAR(result);
done:
    Py_XDECREF(empty);
    Py_XDECREF(offsets);
    if (packed) Py_XDECREF(s.bytes);  /* NULL if a resize failed */
    else PyMem_Free(s.out);
    release_fields(fields, ready);
    PyBuffer_Release(&owners);
    if (has_slots) PyBuffer_Release(&slots);
    if (result == NULL && !fast && !PyErr_Occurred()) Py_RETURN_NONE;
    return result;
}

static PyObject *number(PyObject *self, PyObject *value) {
    char out[NUMBER_WIDTH];
    int len = PyFloat_CheckExact(value) ? write_double(PyFloat_AS_DOUBLE(value), out) : -1;
    if (len < 0) Py_RETURN_NONE;
    return PyBytes_FromStringAndSize(out, len);
}

static PyMethodDef methods[] = {
    {"rows", rows, METH_VARARGS,
     "The rows of the parts (bytes), or None (not the fast case): see the module's source."},
    {"lists", lists, METH_VARARGS,
     "lists(owners, keys, sources, n, slots, packed=False): each owner's JSON array of "
     "objects (a list of n bytes; packed: one bytes and the n + 1 int64 offsets where each "
     "starts, as bytes), or None (not the fast case): see hostjson.grouped."},
    {"number", number, METH_O, "orjson's text of a finite float (bytes), or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hostjson",
                                    "The plan's host table written from columns.", -1, methods};

PyMODINIT_FUNC PyInit__hostjson(void) { return PyModule_Create(&module); }
