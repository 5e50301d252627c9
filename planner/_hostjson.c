/* The plan's host table written from its columns (hostjson.py's fast path): no Python object per
 * value or row.
 *
 * rows(parts, count) -> bytes | None: ``count`` rows, row j being each part's j-th piece in turn,
 * the bytes hostjson._rows writes from the same parts once each column is serialised
 * (hostjson._pieces). A part is
 *   - bytes: the same text in every row;
 *   - a list (or list subclass) of ``count`` bytes: each row's JSON as it is;
 *   - a one-dimensional buffer (a numpy array) of ``count`` values: float64 ('d'), int64 ('l'
 *     or 'q'), or objects ('O': None, int of 64 bits, float), written as orjson writes them.
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
#define NUMBER_WIDTH 32 /* at most 24 bytes of a double's text, 20 of an int64's */

enum { P_CONST, P_LIST, P_DOUBLE, P_INT, P_OBJECT };

typedef struct {
    int kind;
    const char *text;      /* P_CONST */
    Py_ssize_t len;
    PyObject *list;        /* P_LIST */
    Py_buffer view;        /* the buffer kinds */
    int has_view;
} part_t;

static const double POW10[23] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
                                  1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20,
                                  1e21, 1e22};

static int write_uint(unsigned long long value, char *out) {
    char digits[24];
    int count = 0;
    do { digits[count++] = (char)('0' + value % 10); value /= 10; } while (value);
    for (int k = 0; k < count; k++) out[k] = digits[count - 1 - k];
    return count;
}

static int write_int(long long value, char *out) {
    if (value < 0) {
        out[0] = '-';
        return 1 + write_uint(0ULL - (unsigned long long)value, out + 1);
    }
    return write_uint((unsigned long long)value, out);
}

/* orjson's text of a finite double; its length, -1 on failure */
static int write_double(double x, char *out) {
    if (!isfinite(x)) return -1;
    if (x != 0) {
        double a = fabs(x);
        int k = 14 - (int)floor(log10(a));  /* a * 10^k: 15 digits before the point */
        if (k >= -22 && k <= 22) {
            double whole = nearbyint(k >= 0 ? a * POW10[k] : a / POW10[-k]);
            if (whole >= 1 && whole < 1e15
                    && (k >= 0 ? whole / POW10[k] : whole * POW10[-k]) == a) {
                char text[40];
                int len = write_uint((unsigned long long)whole, text);
                text[len++] = 'e';
                len += write_int(-k, text + len);
                return format_double(x, text, len, out);
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

static void release(part_t *parts, int count) {
    for (int k = 0; k < count; k++)
        if (parts[k].has_view) PyBuffer_Release(&parts[k].view);
}

/* the part's kind and reference; 0: not the fast case (no error set) */
static int part_kind(PyObject *obj, Py_ssize_t rows, part_t *p, Py_ssize_t *size) {
    p->has_view = 0;
    if (PyBytes_Check(obj)) {
        p->kind = P_CONST;
        p->text = PyBytes_AS_STRING(obj);
        p->len = PyBytes_GET_SIZE(obj);
        *size += p->len * rows;
        return 1;
    }
    if (PyList_Check(obj)) {
        if (PyList_GET_SIZE(obj) != rows) return 0;
        for (Py_ssize_t j = 0; j < rows; j++) {
            PyObject *item = PyList_GET_ITEM(obj, j);
            if (!PyBytes_Check(item)) return 0;
            *size += PyBytes_GET_SIZE(item);
        }
        p->kind = P_LIST;
        p->list = obj;
        return 1;
    }
    if (!PyObject_CheckBuffer(obj)) return 0;
    if (PyObject_GetBuffer(obj, &p->view, PyBUF_RECORDS_RO) < 0) { PyErr_Clear(); return 0; }
    p->has_view = 1;
    const char *format = p->view.format ? p->view.format : "B";
    if (format[0] == '<' || format[0] == '=' || format[0] == '@') format++;
    if (p->view.ndim != 1 || p->view.shape[0] != rows) return 0;
    if (strcmp(format, "d") == 0 && p->view.itemsize == 8) p->kind = P_DOUBLE;
    else if ((strcmp(format, "l") == 0 || strcmp(format, "q") == 0) && p->view.itemsize == 8)
        p->kind = P_INT;
    else if (strcmp(format, "O") == 0 && p->view.itemsize == sizeof(PyObject *)) p->kind = P_OBJECT;
    else return 0;
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

static PyObject *number(PyObject *self, PyObject *value) {
    char out[NUMBER_WIDTH];
    int len = PyFloat_CheckExact(value) ? write_double(PyFloat_AS_DOUBLE(value), out) : -1;
    if (len < 0) Py_RETURN_NONE;
    return PyBytes_FromStringAndSize(out, len);
}

static PyMethodDef methods[] = {
    {"rows", rows, METH_VARARGS,
     "The rows of the parts (bytes), or None (not the fast case): see the module's source."},
    {"number", number, METH_O, "orjson's text of a finite float (bytes), or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hostjson",
                                    "The plan's host table written from columns.", -1, methods};

PyMODINIT_FUNC PyInit__hostjson(void) { return PyModule_Create(&module); }
