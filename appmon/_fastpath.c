/* The analyser's per-frame fast path, compiled (docs/appmon.md, "Speed").
 *
 * Engine(table, link, Connection, HalfStream, HttpParser, states, methods).run(frames, index, end)
 * takes ``frames[index:]`` (a list of (time, frame) pairs) one by one while each frame is the
 * common case of an HTTP/1.x connection already in the table, and returns the index of the first
 * frame it did not take (or of the end): the caller hands that one to ``Analyser.ingest``, the
 * Python path, and calls again after it. The common case: a TCP segment (decode.py's layouts)
 * without SYN, FIN or RST, captured whole, of a ``connections.Connection`` (exactly that class)
 * that is open and decided, nothing waiting out of order in either direction, and, when it has
 * payload, the next bytes of its stream; a frame at or after ``end`` (the window's end) is not
 * taken either. Such a frame's effect is the Python path's, step by step on the same objects:
 * the connection's ``last_seen``, then ``HttpParser.feed``'s loop, whose iterations this file
 * runs only for a message head complete in the segment (first line valid, Content-Length of
 * digits or none) and for body bytes of known length; any other iteration, and everything after
 * it, is ``feed`` itself (called with the rest: its loop is the same from any iteration on); then
 * the stream's next sequence number. Each message start calls the parser's ``on_start`` as
 * ``_announce`` does. The state lives in the Python objects' slots (read and written at the
 * offsets their classes declare; each object's class is checked first), so nothing is handed
 * over between the paths; a frame not taken is untouched. Bytes are read only inside ``frame``.
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>

#define FIN 0x01
#define SYN 0x02
#define RST 0x04
#define LINK_ETHERNET 1
#define LINK_RAW 101
#define LINK_RAW_ALT 12
#define LINK_SLL 113
#define LINK_SLL2 276
/* digits of a Content-Length this file takes; a longer one is the Python path's */
#define MAX_LENGTH_DIGITS 18

#define SLOT(object, offset) (*(PyObject **)((char *)(object) + (offset)))

typedef struct {
    PyObject_HEAD
    PyObject *table;  /* the ConnectionTable: its ``table`` dict is read at each run */
    int link;
    PyTypeObject *connection, *stream, *parser;
    Py_ssize_t c_closed, c_undecided, c_streams, c_last_seen;
    Py_ssize_t s_parser, s_next_seq, s_early;
    Py_ssize_t p_request, p_on_start, p_state, p_buffer, p_start_time, p_remaining, p_status,
        p_no_body, p_announced, p_start_seq, p_start_ack, p_position, p_ack, p_tentative;
    long head, body, chunk_size, until_close, dead; /* http.py's states */
    PyObject *methods;                                /* http.METHODS */
    PyObject *feed, *table_name;                      /* interned names */
    unsigned long long taken;
} Engine;

typedef struct {
    const unsigned char *src, *dst;
    int address;  /* bytes of an address: 4 or 16 */
    unsigned int sport, dport, flags;
    uint32_t seq, ack;
    Py_ssize_t start, captured, wire;  /* payload offset, bytes captured, length on the wire */
} Segment;

static inline unsigned int u16(const unsigned char *p) { return ((unsigned int)p[0] << 8) | p[1]; }
static inline uint32_t u32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* decode.decode's successful case; 0 for anything it would refuse (and for a frame it would
 * accept but this file does not take: the caller falls back to Python for both). */
static int decode(const unsigned char *f, Py_ssize_t length, int link, Segment *s) {
    Py_ssize_t offset, tcp, end;
    unsigned int ethertype;
    if (link == LINK_ETHERNET) {
        if (length < 14) return 0;
        ethertype = u16(f + 12);
        offset = 14;
        while (ethertype == 0x8100 || ethertype == 0x88A8 || ethertype == 0x9100) {
            if (length < offset + 4) return 0;
            ethertype = u16(f + offset + 2);
            offset += 4;
        }
    } else if (link == LINK_SLL) {
        if (length < 16) return 0;
        ethertype = u16(f + 14);
        offset = 16;
    } else if (link == LINK_SLL2) {
        if (length < 20) return 0;
        ethertype = u16(f);
        offset = 20;
    } else if (link == LINK_RAW || link == LINK_RAW_ALT) {
        if (length < 1) return 0;
        ethertype = (f[0] >> 4) == 4 ? 0x0800 : 0x86DD;
        offset = 0;
    } else {
        return 0;
    }
    if (ethertype == 0x0800) {
        if (length < offset + 20) return 0;
        const unsigned char *ip = f + offset;
        Py_ssize_t header = (ip[0] & 0x0F) * 4, total = u16(ip + 2);
        if ((ip[0] >> 4) != 4 || header < 20 || total < header) return 0;
        if (ip[9] != 6 || (u16(ip + 6) & 0x3FFF)) return 0;
        s->src = ip + 12;
        s->dst = ip + 16;
        s->address = 4;
        tcp = offset + header;
        end = offset + total;
    } else if (ethertype == 0x86DD) {
        if (length < offset + 40) return 0;
        const unsigned char *ip = f + offset;
        if ((ip[0] >> 4) != 6 || ip[6] != 6) return 0;
        s->src = ip + 8;
        s->dst = ip + 24;
        s->address = 16;
        tcp = offset + 40;
        end = offset + 40 + u16(ip + 4);
    } else {
        return 0;
    }
    if (length < tcp + 20 || end < tcp + 20) return 0;
    const unsigned char *t = f + tcp;
    Py_ssize_t start = tcp + (t[12] >> 4) * 4;
    if (start < tcp + 20 || start > end) return 0;
    s->sport = u16(t);
    s->dport = u16(t + 2);
    s->seq = u32(t + 4);
    s->ack = u32(t + 8);
    s->flags = t[13];
    s->start = start;
    s->wire = end - start;
    s->captured = (end <= length ? end : length) - start;
    if (s->captured < 0) s->captured = 0;
    return 1;
}

static Py_ssize_t find(const unsigned char *p, Py_ssize_t n, const char *what, Py_ssize_t size) {
    const unsigned char *at = memmem(p, (size_t)n, what, (size_t)size);
    return at ? at - p : -1;
}

static inline int is_space(unsigned char c) {  /* bytes.strip()'s whitespace */
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == 0x0b || c == 0x0c;
}

/* http._header_value over head[0:n] lower-cased: the value after the first "\r\n" + name
 * (``name`` lower case), to the next "\r\n", stripped; 0 when absent. */
static int header_value(const unsigned char *head, Py_ssize_t n, const char *name,
                        const unsigned char **value, Py_ssize_t *size) {
    Py_ssize_t k = (Py_ssize_t)strlen(name);
    for (Py_ssize_t i = 0; i + 2 + k <= n; i++) {
        if (head[i] != '\r' || head[i + 1] != '\n') continue;
        Py_ssize_t j = 0;
        while (j < k && Py_TOLOWER(head[i + 2 + j]) == (unsigned char)name[j]) j++;
        if (j < k) continue;
        Py_ssize_t start = i + 2 + k, end = find(head + start, n - start, "\r\n", 2);
        end = end < 0 ? n : start + end;
        while (start < end && is_space(head[start])) start++;
        while (end > start && is_space(head[end - 1])) end--;
        *value = head + start;
        *size = end - start;
        return 1;
    }
    return 0;
}

/* A message head wholly in data[0:n], as ``HttpParser._head`` with an empty buffer would read
 * it: the first line's value (the method or the status), where the head ends, and how its body
 * is framed. 0 when anything about it is not the common case. */
typedef struct {
    Py_ssize_t line, end;  /* first line's length; offset of the "\r\n\r\n" */
    int status;            /* responses */
    const unsigned char *method;
    Py_ssize_t method_size;
    int chunked, has_length;
    long long length;
} Head;

static int read_head(const unsigned char *data, Py_ssize_t n, int request, Head *h) {
    Py_ssize_t line = find(data, n, "\r\n", 2);
    if (line < 0) return 0;
    h->line = line;
    if (request) { /* request_method: three parts split on spaces, a method, HTTP/1.x */
        Py_ssize_t first = -1, second = -1;
        for (Py_ssize_t i = 0; i < line; i++) {
            if (data[i] != ' ') continue;
            if (first < 0) first = i;
            else if (second < 0) second = i;
            else return 0;
        }
        if (second < 0 || line - second - 1 < 7 || memcmp(data + second + 1, "HTTP/1.", 7))
            return 0;
        h->method = data;
        h->method_size = first;
    } else { /* status_code */
        if (line < 12 || memcmp(data, "HTTP/1.", 7) || data[8] != ' ') return 0;
        if (!Py_ISDIGIT(data[9]) || !Py_ISDIGIT(data[10]) || !Py_ISDIGIT(data[11])) return 0;
        if (line > 12 && data[12] != ' ') return 0;
        h->status = (data[9] - '0') * 100 + (data[10] - '0') * 10 + (data[11] - '0');
        if (h->status < 100 || h->status > 599) return 0;
    }
    Py_ssize_t end = find(data, n, "\r\n\r\n", 4);
    if (end < 0) return 0;
    h->end = end;
    const unsigned char *value;
    Py_ssize_t size;
    h->chunked = header_value(data, end + 2, "transfer-encoding:", &value, &size) &&
                 size >= 7 && Py_TOLOWER(value[size - 7]) == 'c' &&
                 Py_TOLOWER(value[size - 6]) == 'h' && Py_TOLOWER(value[size - 5]) == 'u' &&
                 Py_TOLOWER(value[size - 4]) == 'n' && Py_TOLOWER(value[size - 3]) == 'k' &&
                 Py_TOLOWER(value[size - 2]) == 'e' && Py_TOLOWER(value[size - 1]) == 'd';
    h->has_length = header_value(data, end + 2, "content-length:", &value, &size);
    h->length = 0;
    if (h->has_length) { /* bytes.isdigit() then int(): others are the Python path's */
        if (size == 0 || size > MAX_LENGTH_DIGITS) return 0; /* b"".isdigit() is False */
        for (Py_ssize_t i = 0; i < size; i++) {
            if (!Py_ISDIGIT(value[i])) return 0;
            h->length = h->length * 10 + (value[i] - '0');
        }
    }
    return 1;
}

static int set_slot(PyObject *object, Py_ssize_t offset, PyObject *value /* stolen */) {
    if (value == NULL) return -1;
    PyObject *old = SLOT(object, offset);
    SLOT(object, offset) = value;
    Py_XDECREF(old);
    return 0;
}

static inline int set_long(PyObject *object, Py_ssize_t offset, long long value) {
    return set_slot(object, offset, PyLong_FromLongLong(value));
}

static inline int set_object(PyObject *object, Py_ssize_t offset, PyObject *value) {
    Py_INCREF(value);
    return set_slot(object, offset, value);
}

/* A slot's int, or -1 (with no error set) when it is not a small non-negative int. */
static long long slot_long(PyObject *object, Py_ssize_t offset) {
    PyObject *value = SLOT(object, offset);
    if (value == NULL || !PyLong_CheckExact(value)) return -1;
    int overflow;
    long long result = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow || result < 0) {
        PyErr_Clear();
        return -1;
    }
    return result;
}

/* HttpParser.feed(payload, time, True, seq, ack) on a parser of the right class. -1: error. */
static int feed(Engine *e, PyObject *parser, const unsigned char *data, Py_ssize_t n,
                PyObject *time, uint32_t seq, uint32_t ack) {
    int request = SLOT(parser, e->p_request) == Py_True;
    if (set_long(parser, e->p_ack, ack) < 0) return -1;
    Py_ssize_t at = 0;
    int segment_start = 1;
    while (at < n) {
        long long state = slot_long(parser, e->p_state);
        PyObject *buffer = SLOT(parser, e->p_buffer);
        Head h = {0};
        if (state == e->head && SLOT(parser, e->p_tentative) == Py_False &&
            SLOT(parser, e->p_announced) == Py_False && buffer != NULL &&
            PyBytes_CheckExact(buffer) && PyBytes_GET_SIZE(buffer) == 0 &&
            read_head(data + at, n - at, request, &h)) {
            long long start = (long long)seq + at;
            PyObject *value = request ? PyBytes_FromStringAndSize((const char *)data + at,
                                                                  h.method_size)
                                      : PyLong_FromLong(h.status);
            if (value == NULL) return -1;
            if (request) {
                int known = PySet_Contains(e->methods, value);
                if (known <= 0) {
                    Py_DECREF(value);
                    if (known < 0) return -1;
                    goto python; /* not a method: the Python path counts it */
                }
            }
            if (set_long(parser, e->p_position, start) < 0 ||
                set_object(parser, e->p_start_time, time) < 0 ||
                set_long(parser, e->p_start_seq, start) < 0 ||
                set_long(parser, e->p_start_ack, ack) < 0 ||
                set_object(parser, e->p_announced, Py_True) < 0 ||
                set_slot(parser, e->p_status, PyLong_FromLong(request ? 0 : h.status)) < 0 ||
                set_object(parser, e->p_tentative, Py_False) < 0) {
                Py_DECREF(value);
                return -1;
            }
            PyObject *on_start = SLOT(parser, e->p_on_start);
            Py_XINCREF(on_start); /* held through the call, whatever the callback does */
            PyObject *answer = on_start ? PyObject_CallFunctionObjArgs(on_start, time, value, NULL)
                                        : NULL;
            Py_XDECREF(on_start);
            Py_DECREF(value);
            if (answer == NULL) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_AttributeError, "on_start");
                return -1;
            }
            int no_body = PyObject_IsTrue(answer);
            Py_DECREF(answer);
            if (no_body < 0) return -1;
            if (request && h.method_size == 7 && !memcmp(data + at, "CONNECT", 7)) no_body = 1;
            if (set_object(parser, e->p_no_body, no_body ? Py_True : Py_False) < 0 ||
                set_slot(parser, e->p_buffer, PyBytes_FromStringAndSize("", 0)) < 0 ||
                set_object(parser, e->p_announced, Py_False) < 0)
                return -1;
            /* _frame_body */
            int status = request ? 0 : h.status, failed = 0;
            if (status == 101 || (request && no_body)) {
                failed = set_slot(parser, e->p_state,
                                  PyLong_FromLong(status == 101 ? e->dead : e->head));
                if (status != 101 && !failed) failed = set_long(parser, e->p_remaining, 0);
            } else if (no_body || (100 <= status && status < 200) || status == 204 ||
                       status == 304) {
                failed = set_slot(parser, e->p_state, PyLong_FromLong(e->head));
            } else if (h.chunked) {
                failed = set_slot(parser, e->p_state, PyLong_FromLong(e->chunk_size)) ||
                         set_slot(parser, e->p_buffer, PyBytes_FromStringAndSize("", 0));
            } else if (h.has_length) {
                failed = set_long(parser, e->p_remaining, h.length) ||
                         set_slot(parser, e->p_state,
                                  PyLong_FromLong(h.length ? e->body : e->head));
            } else {
                failed = set_slot(parser, e->p_state,
                                  PyLong_FromLong(request ? e->head : e->until_close));
            }
            if (failed) return -1;
            at += h.end + 4;
        } else if (state == e->body) {
            long long remaining = slot_long(parser, e->p_remaining);
            if (remaining <= 0) goto python;
            if (set_long(parser, e->p_position, (long long)seq + at) < 0) return -1;
            long long take = remaining < n - at ? remaining : n - at;
            remaining -= take;
            at += take;
            if (set_long(parser, e->p_remaining, remaining) < 0) return -1;
            if (!remaining && (set_slot(parser, e->p_state, PyLong_FromLong(e->head)) < 0 ||
                               set_slot(parser, e->p_buffer, PyBytes_FromStringAndSize("", 0)) <
                                   0 ||
                               set_object(parser, e->p_announced, Py_False) < 0))
                return -1;
        } else {
            goto python;
        }
        segment_start = 0;
    }
    return 0;
python: { /* this iteration and the rest: the Python loop itself */
    PyObject *rest = PyBytes_FromStringAndSize((const char *)data + at, n - at);
    PyObject *first = PyLong_FromLongLong((long long)seq + at);
    PyObject *acked = PyLong_FromUnsignedLong(ack);
    PyObject *result = NULL;
    if (rest && first && acked)
        result = PyObject_CallMethodObjArgs(parser, e->feed, rest, time,
                                            segment_start ? Py_True : Py_False, first, acked,
                                            NULL);
    Py_XDECREF(rest);
    Py_XDECREF(first);
    Py_XDECREF(acked);
    if (result == NULL) return -1;
    Py_DECREF(result);
    return 0;
}
}

static inline int empty_dict(PyObject *object) {
    return object != NULL && PyDict_CheckExact(object) && PyDict_GET_SIZE(object) == 0;
}

/* One frame: 1 taken, 0 not the common case (nothing changed), -1 error. */
static int take(Engine *e, PyObject *table, PyObject *time, PyObject *frame) {
    Segment s;
    const unsigned char *f = (const unsigned char *)PyBytes_AS_STRING(frame);
    if (!decode(f, PyBytes_GET_SIZE(frame), e->link, &s)) return 0;
    if (s.flags & (SYN | FIN | RST) || s.captured != s.wire) return 0;
    PyObject *key = Py_BuildValue("(y#y#II)", s.src, (Py_ssize_t)s.address, s.dst,
                                  (Py_ssize_t)s.address, s.sport, s.dport);
    if (key == NULL) return -1;
    PyObject *entry = PyDict_GetItemWithError(table, key); /* borrowed */
    Py_DECREF(key);
    if (entry == NULL) return PyErr_Occurred() ? -1 : 0;
    if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 2) return 0;
    PyObject *connection = PyTuple_GET_ITEM(entry, 0), *side_object = PyTuple_GET_ITEM(entry, 1);
    if (Py_TYPE(connection) != e->connection || !PyLong_CheckExact(side_object)) return 0;
    long side = PyLong_AsLong(side_object);
    PyObject *streams = SLOT(connection, e->c_streams);
    if ((side != 0 && side != 1) || SLOT(connection, e->c_closed) != Py_False ||
        SLOT(connection, e->c_undecided) != Py_False || streams == NULL ||
        !PyTuple_CheckExact(streams) || PyTuple_GET_SIZE(streams) != 2)
        return 0;
    PyObject *stream = PyTuple_GET_ITEM(streams, side), *other = PyTuple_GET_ITEM(streams, 1 - side);
    if (Py_TYPE(stream) != e->stream || Py_TYPE(other) != e->stream ||
        !empty_dict(SLOT(stream, e->s_early)) || !empty_dict(SLOT(other, e->s_early)))
        return 0;
    PyObject *parser = SLOT(stream, e->s_parser);
    if (s.wire) {
        if (slot_long(stream, e->s_next_seq) != (long long)s.seq || parser == NULL ||
            Py_TYPE(parser) != e->parser || SLOT(parser, e->p_tentative) != Py_False)
            return 0;
    }
    /* from here on the frame is the fast path's: the Python path's steps, in its order */
    Py_INCREF(connection); /* callbacks may drop the table's references */
    Py_INCREF(stream);
    int failed = set_object(connection, e->c_last_seen, time);
    if (!failed && s.wire) {
        Py_INCREF(parser);
        failed = feed(e, parser, f + s.start, s.wire, time, s.seq, s.ack) ||
                 set_slot(stream, e->s_next_seq,
                          PyLong_FromUnsignedLong((s.seq + (uint32_t)s.wire) & 0xFFFFFFFFu));
        Py_DECREF(parser);
    }
    Py_DECREF(stream);
    Py_DECREF(connection);
    return failed ? -1 : 1;
}

static PyObject *engine_run(Engine *self, PyObject *args) {
    PyObject *frames;
    Py_ssize_t index;
    double end;
    if (!PyArg_ParseTuple(args, "O!nd", &PyList_Type, &frames, &index, &end)) return NULL;
    if (self->table == NULL) {
        PyErr_SetString(PyExc_TypeError, "Engine not initialised");
        return NULL;
    }
    PyObject *table = PyObject_GetAttr(self->table, self->table_name);
    if (table == NULL) return NULL;
    if (!PyDict_CheckExact(table)) {
        Py_DECREF(table);
        PyErr_SetString(PyExc_TypeError, "the connection table is not a dict");
        return NULL;
    }
    Py_INCREF(frames);
    if (index < 0) index = 0;
    for (; index < PyList_GET_SIZE(frames); index++) {
        PyObject *item = PyList_GET_ITEM(frames, index);
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2) break;
        PyObject *time = PyTuple_GET_ITEM(item, 0), *frame = PyTuple_GET_ITEM(item, 1);
        if (!PyFloat_CheckExact(time) || !PyBytes_CheckExact(frame) ||
            !(PyFloat_AS_DOUBLE(time) < end))
            break;
        Py_INCREF(item);
        int taken = take(self, table, time, frame);
        Py_DECREF(item);
        if (taken < 0) {
            Py_DECREF(frames);
            Py_DECREF(table);
            return NULL;
        }
        if (!taken) break;
        self->taken++;
    }
    Py_DECREF(frames);
    Py_DECREF(table);
    return PyLong_FromSsize_t(index);
}

static int slot_offsets(PyTypeObject *type, const char *const *names, Py_ssize_t *const *out) {
    for (int k = 0; names[k] != NULL; k++) {
        PyObject *descriptor = PyDict_GetItemString(type->tp_dict, names[k]);
        if (descriptor == NULL || !PyObject_TypeCheck(descriptor, &PyMemberDescr_Type) ||
            ((PyMemberDescrObject *)descriptor)->d_member->type != T_OBJECT_EX) {
            PyErr_Format(PyExc_TypeError, "%s.%s is not a slot", type->tp_name, names[k]);
            return -1;
        }
        *out[k] = ((PyMemberDescrObject *)descriptor)->d_member->offset;
    }
    return 0;
}

static int engine_init(Engine *self, PyObject *args, PyObject *kwargs) {
    PyObject *table, *connection, *stream, *parser, *methods;
    int link;
    if (!PyArg_ParseTuple(args, "OiO!O!O!(lllll)O!", &table, &link, &PyType_Type, &connection,
                          &PyType_Type, &stream, &PyType_Type, &parser, &self->head, &self->body,
                          &self->chunk_size, &self->until_close, &self->dead, &PyFrozenSet_Type,
                          &methods))
        return -1;
    const char *const c_names[] = {"closed", "undecided", "streams", "last_seen", NULL};
    Py_ssize_t *const c_out[] = {&self->c_closed, &self->c_undecided, &self->c_streams,
                                 &self->c_last_seen};
    const char *const s_names[] = {"parser", "next_seq", "early", NULL};
    Py_ssize_t *const s_out[] = {&self->s_parser, &self->s_next_seq, &self->s_early};
    const char *const p_names[] = {"request", "on_start", "state", "buffer", "start_time",
                                   "remaining", "status", "no_body", "announced", "start_seq",
                                   "start_ack", "position", "ack", "tentative", NULL};
    Py_ssize_t *const p_out[] = {&self->p_request, &self->p_on_start, &self->p_state,
                                 &self->p_buffer, &self->p_start_time, &self->p_remaining,
                                 &self->p_status, &self->p_no_body, &self->p_announced,
                                 &self->p_start_seq, &self->p_start_ack, &self->p_position,
                                 &self->p_ack, &self->p_tentative};
    if (self->table != NULL) {
        PyErr_SetString(PyExc_TypeError, "an Engine is initialised once");
        return -1;
    }
    if (slot_offsets((PyTypeObject *)connection, c_names, c_out) < 0 ||
        slot_offsets((PyTypeObject *)stream, s_names, s_out) < 0 ||
        slot_offsets((PyTypeObject *)parser, p_names, p_out) < 0)
        return -1;
    self->link = link;
    Py_INCREF(table);
    self->table = table;
    Py_INCREF(connection);
    self->connection = (PyTypeObject *)connection;
    Py_INCREF(stream);
    self->stream = (PyTypeObject *)stream;
    Py_INCREF(parser);
    self->parser = (PyTypeObject *)parser;
    Py_INCREF(methods);
    Py_XSETREF(self->methods, methods);
    Py_XSETREF(self->feed, PyUnicode_InternFromString("feed"));
    Py_XSETREF(self->table_name, PyUnicode_InternFromString("table"));
    return self->feed && self->table_name ? 0 : -1;
}

static void engine_dealloc(Engine *self) {
    Py_XDECREF(self->table);
    Py_XDECREF((PyObject *)self->connection);
    Py_XDECREF((PyObject *)self->stream);
    Py_XDECREF((PyObject *)self->parser);
    Py_XDECREF(self->methods);
    Py_XDECREF(self->feed);
    Py_XDECREF(self->table_name);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef engine_methods[] = {
    {"run", (PyCFunction)engine_run, METH_VARARGS,
     "run(frames, index, end) -> the index of the first frame not taken"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef engine_members[] = {
    {"taken", T_ULONGLONG, offsetof(Engine, taken), READONLY, "frames taken so far"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "cosample.appmon._fastpath.Engine",
    .tp_basicsize = sizeof(Engine),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The analyser's per-frame fast path (appmon/_fastpath.c).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)engine_init,
    .tp_dealloc = (destructor)engine_dealloc,
    .tp_methods = engine_methods,
    .tp_members = engine_members,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastpath", "The analyser's per-frame fast path.", -1, NULL,
};

PyMODINIT_FUNC PyInit__fastpath(void) {
    if (PyType_Ready(&EngineType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&EngineType);
    if (PyModule_AddObject(m, "Engine", (PyObject *)&EngineType) < 0) {
        Py_DECREF(&EngineType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
