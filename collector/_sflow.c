/* The flow-sample fast path of decode.parse_compact, compiled (docs/collector.md, "Speed").
 *
 * scan(data) -> (agent, sub-agent, datagram sequence, uptime, flows, others, alike, runs) or None.
 * ``flows`` are parse_compact's tuples; ``others`` the (format, start, end) of every counter or
 * discard sample, in order, for the Python decoder to turn into records; ``alike`` the flow
 * samples grouped as estimate.ingest adds them (or None: ingest groups them itself); ``runs`` each
 * sampler's samples as one run of numbers, as loss.sampler_runs (or None). None means "not the
 * fast case": any malformed part, anything the Python decoder would refuse; the caller then
 * decodes in Python, which raises the named DecodeError. So behaviour is the Python decoder's
 * by construction; this file only has to never read outside ``data`` (every read is checked
 * against the end of its enclosing sample, as in decode.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <string.h>

#define MAX_DATAGRAM_BYTES 65507
/* declared.MAX_FRAME_BYTES: a sample declaring a longer frame is left to estimate.ingest, which
 * drops it (the groups are not built; tests/collector/test_declared.py checks the two agree). */
#define MAX_FRAME_BYTES (65535 + 22)

static inline uint32_t u32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static PyObject *flow_tuple(uint32_t sequence, uint32_t source, uint32_t rate, uint32_t drops,
                            uint32_t frame_length, int has_vni, uint32_t vni,
                            PyObject *outer, Py_ssize_t head, Py_ssize_t tail,
                            uint32_t input_port, uint32_t output_port, uint32_t protocol) {
    PyObject *t = PyTuple_New(13);
    if (t == NULL) return NULL;
    PyObject *items[13];
    items[0] = PyLong_FromUnsignedLong(sequence);
    items[1] = PyLong_FromUnsignedLong(source);
    items[2] = PyLong_FromUnsignedLong(rate);
    items[3] = PyLong_FromUnsignedLong(drops);
    items[4] = PyLong_FromUnsignedLong(frame_length);
    if (has_vni) {
        items[5] = PyLong_FromUnsignedLong(vni);
    } else {
        Py_INCREF(Py_None);
        items[5] = Py_None;
    }
    if (outer != NULL) {
        items[6] = outer;  /* reference handed over */
    } else {
        Py_INCREF(Py_None);
        items[6] = Py_None;
    }
    items[7] = PyLong_FromSsize_t(head);
    items[8] = PyLong_FromSsize_t(tail);
    Py_INCREF(Py_None);
    items[9] = Py_None;
    items[10] = PyLong_FromUnsignedLong(input_port);
    items[11] = PyLong_FromUnsignedLong(output_port);
    items[12] = PyLong_FromUnsignedLong(protocol);
    int failed = 0;
    for (int k = 0; k < 13; k++) {
        if (items[k] == NULL) failed = 1;
        PyTuple_SET_ITEM(t, k, items[k]);  /* NULL slots are fine for Py_DECREF of a tuple */
    }
    if (failed) {
        Py_DECREF(t);
        return NULL;
    }
    return t;
}

/* Samples alike but for their size (rate, VNI, outer source), as estimate.ingest adds them. */
#define MAX_GROUPS 16
typedef struct {
    uint32_t rate, vni;
    int has_vni, has_outer;
    unsigned char outer[4];
    uint64_t n, sizes;
    unsigned __int128 squares;
} group_t;

/* Each sampler's samples in the datagram as one run of consecutive numbers (loss.sampler_runs). */
#define MAX_RUNS 16
typedef struct {
    uint32_t source, head, tail, drops;
} run_t;

typedef struct {
    group_t items[MAX_GROUPS];
    int count, overflow;
    run_t runs[MAX_RUNS];
    int run_count, runs_broken;
} groups_t;

static void add_to_run(groups_t *g, uint32_t source, uint32_t sequence, uint32_t drops) {
    for (int k = 0; k < g->run_count; k++) {
        run_t *it = &g->runs[k];
        if (it->source == source) {
            if (sequence != it->tail + 1u) {  /* uint32_t wraps as loss.WRAP does */
                g->runs_broken = 1;
                return;
            }
            it->tail = sequence;
            it->drops = drops;
            return;
        }
    }
    if (g->run_count == MAX_RUNS) {
        g->runs_broken = 1;
        return;
    }
    run_t *it = &g->runs[g->run_count++];
    it->source = source; it->head = it->tail = sequence; it->drops = drops;
}

/* The runs as loss.sampler_runs gives them: ``((source, head, tail, drops), ...)`` in order of
 * first appearance, or None (a sampler's numbers not consecutive, or more than MAX_RUNS). */
static PyObject *runs_tuple(const groups_t *g) {
    if (g->runs_broken) Py_RETURN_NONE;
    PyObject *runs = PyTuple_New(g->run_count);
    if (runs == NULL) return NULL;
    for (int k = 0; k < g->run_count; k++) {
        const run_t *it = &g->runs[k];
        PyObject *t = Py_BuildValue("(IIII)", it->source, it->head, it->tail, it->drops);
        if (t == NULL) {
            Py_DECREF(runs);
            return NULL;
        }
        PyTuple_SET_ITEM(runs, k, t);
    }
    return runs;
}

static void add_to_group(groups_t *g, uint32_t rate, int has_vni, uint32_t vni,
                         const unsigned char *outer, uint32_t size) {
    for (int k = 0; k < g->count; k++) {
        group_t *it = &g->items[k];
        if (it->rate == rate && it->has_vni == has_vni && (!has_vni || it->vni == vni) &&
            it->has_outer == (outer != NULL) &&
            (outer == NULL || memcmp(it->outer, outer, 4) == 0)) {
            it->n += 1;
            it->sizes += size;
            it->squares += (unsigned __int128)size * size;
            return;
        }
    }
    if (g->count == MAX_GROUPS) {
        g->overflow = 1;
        return;
    }
    group_t *it = &g->items[g->count++];
    it->rate = rate; it->vni = has_vni ? vni : 0; it->has_vni = has_vni;
    it->has_outer = outer != NULL;
    if (outer != NULL) memcpy(it->outer, outer, 4);
    it->n = 1; it->sizes = size; it->squares = (unsigned __int128)size * size;
}

/* The groups as estimate.ingest's ``(rate, vni, outer, n, sizes, squares, None)`` in order of
 * first appearance, or None (too many groups, or a sum past 64 bits: ingest adds them itself). */
static PyObject *groups_list(const groups_t *g) {
    if (g->overflow) Py_RETURN_NONE;
    for (int k = 0; k < g->count; k++)
        if (g->items[k].squares >> 63) Py_RETURN_NONE;
    PyObject *list = PyList_New(g->count);
    if (list == NULL) return NULL;
    for (int k = 0; k < g->count; k++) {
        const group_t *it = &g->items[k];
        PyObject *vni = it->has_vni ? PyLong_FromUnsignedLong(it->vni) : Py_NewRef(Py_None);
        PyObject *outer = it->has_outer
            ? PyBytes_FromStringAndSize((const char *)it->outer, 4) : Py_NewRef(Py_None);
        PyObject *t = (vni && outer) ? Py_BuildValue("(INNKKKO)", it->rate, vni, outer,
                                                      (unsigned long long)it->n,
                                                      (unsigned long long)it->sizes,
                                                      (unsigned long long)it->squares, Py_None)
                                     : NULL;
        if (t == NULL) {
            if (!(vni && outer)) { Py_XDECREF(vni); Py_XDECREF(outer); }
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, k, t);
    }
    return list;
}

/* Decode the flow sample in [start, end); append its tuple to ``flows``, add it to ``groups``.
 * Returns 1 on success, 0 for "not the fast case", -1 on a Python error. */
static int flow_sample(const unsigned char *d, Py_ssize_t start, Py_ssize_t end, int expanded,
                       PyObject *flows, groups_t *groups) {
    uint32_t sequence, source, rate, drops, input_port, output_port, records;
    Py_ssize_t at;
    if (expanded) {
        if (start + 44 > end) return 0;
        const unsigned char *p = d + start;
        sequence = u32(p); source = u32(p + 8); rate = u32(p + 12); drops = u32(p + 20);
        input_port = u32(p + 28); output_port = u32(p + 36); records = u32(p + 40);
        at = start + 44;
    } else {
        if (start + 32 > end) return 0;
        const unsigned char *p = d + start;
        sequence = u32(p); source = u32(p + 4) & 0xFFFFFF; rate = u32(p + 8);
        drops = u32(p + 16); input_port = u32(p + 20) & 0x3FFFFFFF;
        output_port = u32(p + 24) & 0x3FFFFFFF; records = u32(p + 28);
        at = start + 32;
    }
    uint32_t frame_length = 0, vni = 0, protocol = 1;
    int has_vni = 0;
    Py_ssize_t head = 0, tail = 0, outer_at = -1;
    for (uint32_t r = 0; r < records; r++) {
        if (at + 8 > end) return 0;
        uint32_t kind = u32(d + at), length = u32(d + at + 4);
        Py_ssize_t body = at + 8;
        at = body + (Py_ssize_t)length;
        if (at > end) return 0;
        if (kind == 1) {
            if (length < 16) return 0;
            protocol = u32(d + body);
            frame_length = u32(d + body + 4);
            uint32_t header_length = u32(d + body + 12);
            if (header_length > length - 16) return 0;
            head = body + 16;
            tail = body + 16 + (Py_ssize_t)header_length;
        } else if (kind == 1024) {
            if (length < 32) return 0;
            outer_at = body + 8;
        } else if (kind == 1030) {
            if (length < 4) return 0;
            vni = u32(d + body);
            has_vni = 1;
        }
    }
    if (frame_length > MAX_FRAME_BYTES)
        groups->overflow = 1;  /* not grouped: ingest drops it by name */
    else
        add_to_group(groups, rate, has_vni, vni, outer_at >= 0 ? d + outer_at : NULL,
                     frame_length);
    if (!groups->runs_broken) add_to_run(groups, source, sequence, drops);
    PyObject *outer = NULL;
    if (outer_at >= 0) {
        outer = PyBytes_FromStringAndSize((const char *)d + outer_at, 4);
        if (outer == NULL) return -1;
    }
    PyObject *t = flow_tuple(sequence, source, rate, drops, frame_length, has_vni, vni, outer,
                             head, tail, input_port, output_port, protocol);
    if (t == NULL) return -1;
    int rc = PyList_Append(flows, t);
    Py_DECREF(t);
    return rc < 0 ? -1 : 1;
}

static PyObject *scan(PyObject *self, PyObject *arg) {
    groups_t groups;
    groups.count = groups.overflow = groups.run_count = groups.runs_broken = 0;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *d = (const unsigned char *)view.buf;
    Py_ssize_t size = view.len, offset;
    PyObject *result = NULL, *flows = NULL, *others = NULL, *agent = NULL;
    uint32_t sub_agent, sequence, uptime, count;
    char text[INET6_ADDRSTRLEN];
    if (size > MAX_DATAGRAM_BYTES || size < 8 || u32(d) != 5) goto slow;
    uint32_t kind = u32(d + 4);
    if (kind == 1) {
        if (size < 28) goto slow;
        if (inet_ntop(AF_INET, d + 8, text, sizeof text) == NULL) goto slow;
        sub_agent = u32(d + 12); sequence = u32(d + 16); uptime = u32(d + 20);
        count = u32(d + 24);
        offset = 28;
    } else if (kind == 2) {
        if (size < 40) goto slow;
        if (inet_ntop(AF_INET6, d + 8, text, sizeof text) == NULL) goto slow;
        sub_agent = u32(d + 24); sequence = u32(d + 28); uptime = u32(d + 32);
        count = u32(d + 36);
        offset = 40;
    } else {
        goto slow;
    }
    if ((uint64_t)count * 8 > (uint64_t)(size - offset)) goto slow;
    flows = PyList_New(0);
    others = PyList_New(0);
    if (flows == NULL || others == NULL) goto error;
    for (uint32_t k = 0; k < count; k++) {
        if (offset + 8 > size) goto slow;
        uint32_t fmt = u32(d + offset), length = u32(d + offset + 4);
        Py_ssize_t start = offset + 8, end = start + (Py_ssize_t)length;
        if (end > size || (length & 3)) goto slow;
        offset = end;
        if (fmt == 1 || fmt == 3) {
            int rc = flow_sample(d, start, end, fmt == 3, flows, &groups);
            if (rc < 0) goto error;
            if (rc == 0) goto slow;
        } else if (fmt == 2 || fmt == 4 || fmt == 5) {
            PyObject *span = Py_BuildValue("(Inn)", fmt, start, end);
            if (span == NULL) goto error;
            int rc = PyList_Append(others, span);
            Py_DECREF(span);
            if (rc < 0) goto error;
        }
    }
    agent = PyUnicode_FromString(text);
    if (agent == NULL) goto error;
    PyObject *flow_tuple_ = PyList_AsTuple(flows);
    if (flow_tuple_ == NULL) goto error;
    PyObject *alike = groups_list(&groups);
    if (alike == NULL) {
        Py_DECREF(flow_tuple_);
        goto error;
    }
    PyObject *runs = runs_tuple(&groups);
    if (runs == NULL) {
        Py_DECREF(flow_tuple_);
        Py_DECREF(alike);
        goto error;
    }
    result = Py_BuildValue("(NIIINNNN)", agent, sub_agent, sequence, uptime, flow_tuple_, others,
                           alike, runs);
    agent = others = NULL;  /* stolen by N (also on failure) */
    Py_DECREF(flows);
    PyBuffer_Release(&view);
    return result;
slow:
    Py_XDECREF(flows);
    Py_XDECREF(others);
    Py_XDECREF(agent);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
error:
    Py_XDECREF(flows);
    Py_XDECREF(others);
    Py_XDECREF(agent);
    PyBuffer_Release(&view);
    return NULL;
}

/* agent(data) -> the agent address of a datagram whose header decode._header accepts, else None. */
static PyObject *agent(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *d = (const unsigned char *)view.buf;
    Py_ssize_t size = view.len, offset = 0;
    char text[INET6_ADDRSTRLEN];
    int ok = 0;
    if (size <= MAX_DATAGRAM_BYTES && size >= 8 && u32(d) == 5) {
        uint32_t kind = u32(d + 4);
        if (kind == 1 && size >= 28) {
            offset = 28;
            ok = inet_ntop(AF_INET, d + 8, text, sizeof text) != NULL;
        } else if (kind == 2 && size >= 40) {
            offset = 40;
            ok = inet_ntop(AF_INET6, d + 8, text, sizeof text) != NULL;
        }
        if (ok && (uint64_t)u32(d + offset - 4) * 8 > (uint64_t)(size - offset)) ok = 0;
    }
    PyBuffer_Release(&view);
    if (!ok) Py_RETURN_NONE;
    return PyUnicode_FromString(text);
}

static inline uint32_t u32_order(const unsigned char *p, int little) {
    return little ? ((uint32_t)p[3] << 24) | ((uint32_t)p[2] << 16) | ((uint32_t)p[1] << 8) | p[0]
                  : u32(p);
}

/* pcap_run(buffer, offset, little_endian, unit, limit) -> (records, offset, [(time, payload)])
 *
 * The records of an Ethernet pcap from ``offset`` on, as long as each is the common case
 * (whole record; Ethernet, 802.1Q/802.1ad tags, IPv4, UDP, not a fragment, UDP header inside
 * the frame), at most ``limit``; stops before the first record that is not, for pcap.py to
 * handle with its own rules (skip counters, a cut end). Payloads are cut as pcap.py cuts them.
 */
static PyObject *pcap_run(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t offset, limit;
    int little;
    double unit;
    if (!PyArg_ParseTuple(args, "y*npdn", &view, &offset, &little, &unit, &limit)) return NULL;
    const unsigned char *d = (const unsigned char *)view.buf;
    Py_ssize_t size = view.len, records = 0;
    PyObject *out = PyList_New(0);
    if (out == NULL) goto error;
    while (records < limit && offset >= 0 && offset + 16 <= size) {
        uint32_t seconds = u32_order(d + offset, little);
        uint32_t fraction = u32_order(d + offset + 4, little);
        uint32_t included = u32_order(d + offset + 8, little);
        Py_ssize_t start = offset + 16, stop = start + (Py_ssize_t)included;
        if (included > (1u << 18) || stop > size) break;
        const unsigned char *f = d + start;
        Py_ssize_t flen = included, at = 14;
        if (flen < 14) break;
        unsigned ethertype = ((unsigned)f[12] << 8) | f[13];
        while (ethertype == 0x8100 || ethertype == 0x88A8) {
            if (at + 4 > flen) goto done;
            ethertype = ((unsigned)f[at + 2] << 8) | f[at + 3];
            at += 4;
        }
        if (ethertype != 0x0800 || flen < at + 20) break;
        Py_ssize_t header_length = (Py_ssize_t)(f[at] & 0x0F) * 4;
        Py_ssize_t total = ((Py_ssize_t)f[at + 2] << 8) | f[at + 3];
        if (f[at + 9] != 17) break;
        if ((((unsigned)f[at + 6] << 8) | f[at + 7]) & 0x3FFF) break;
        Py_ssize_t udp = at + header_length, end = at + total;
        if (flen < udp + 8) break;
        Py_ssize_t length = ((Py_ssize_t)f[udp + 4] << 8) | f[udp + 5];
        Py_ssize_t lo = udp + 8, hi = udp + length;
        if (end < hi) hi = end;
        if (flen < hi) hi = flen;
        if (hi < lo) hi = lo;
        PyObject *item = Py_BuildValue("(dy#)", (double)seconds + (double)fraction * unit,
                                       (const char *)f + lo, hi - lo);
        if (item == NULL) goto error;
        int rc = PyList_Append(out, item);
        Py_DECREF(item);
        if (rc < 0) goto error;
        records++;
        offset = stop;
    }
done:
    PyBuffer_Release(&view);
    return Py_BuildValue("(nnN)", records, offset, out);
error:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return NULL;
}

static PyMethodDef methods[] = {
    {"agent", agent, METH_O, "agent(data) -> agent address of a well-formed header, or None"},
    {"pcap_run", pcap_run, METH_VARARGS,
     "pcap_run(buffer, offset, little_endian, unit, limit) -> (records, offset, items)"},
    {"scan", scan, METH_O,
     "scan(data) -> (agent, sub_agent, sequence, uptime, flows, others, alike, runs) or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_sflow",
                                    "Compiled fast path of the sFlow v5 decoder.", -1, methods};

PyMODINIT_FUNC PyInit__sflow(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "MAX_FRAME_BYTES", MAX_FRAME_BYTES) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
