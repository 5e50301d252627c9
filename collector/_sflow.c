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

/* Whether every group's sums fit 63 bits (else ingest adds the samples itself). */
static int groups_fit(const groups_t *g) {
    for (int k = 0; k < g->count; k++)
        if (g->items[k].squares >> 63) return 0;
    return 1;
}

/* The groups as estimate.ingest's ``(rate, vni, outer, n, sizes, squares, None)`` in order of
 * first appearance, or None (too many groups, or a sum past 64 bits: ingest adds them itself). */
static PyObject *groups_list(const groups_t *g) {
    if (g->overflow || !groups_fit(g)) Py_RETURN_NONE;
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
    if (flows == NULL) return 1;  /* scan_counted: the groups and runs only */
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

/* A datagram's header as the scan read it, and how many samples of each kind it holds. */
typedef struct {
    char text[INET6_ADDRSTRLEN];
    uint32_t sub_agent, sequence, uptime;
    Py_ssize_t flows, others;  /* flow samples; counter and discard samples */
} header_t;

/* Read a datagram's header and samples: flow samples into ``groups`` (and their tuples into
 * ``flows`` unless NULL), the spans of counter and discard samples into ``others`` (unless NULL:
 * then only counted). Returns 1 for the fast case, 0 for "not the fast case", -1 on an error. */
static int scan_core(const unsigned char *d, Py_ssize_t size, PyObject *flows, PyObject *others,
                     header_t *h, groups_t *groups) {
    Py_ssize_t offset;
    uint32_t count;
    groups->count = groups->overflow = groups->run_count = groups->runs_broken = 0;
    h->flows = h->others = 0;
    if (size > MAX_DATAGRAM_BYTES || size < 8 || u32(d) != 5) return 0;
    uint32_t kind = u32(d + 4);
    if (kind == 1) {
        if (size < 28) return 0;
        if (inet_ntop(AF_INET, d + 8, h->text, sizeof h->text) == NULL) return 0;
        h->sub_agent = u32(d + 12); h->sequence = u32(d + 16); h->uptime = u32(d + 20);
        count = u32(d + 24);
        offset = 28;
    } else if (kind == 2) {
        if (size < 40) return 0;
        if (inet_ntop(AF_INET6, d + 8, h->text, sizeof h->text) == NULL) return 0;
        h->sub_agent = u32(d + 24); h->sequence = u32(d + 28); h->uptime = u32(d + 32);
        count = u32(d + 36);
        offset = 40;
    } else {
        return 0;
    }
    if ((uint64_t)count * 8 > (uint64_t)(size - offset)) return 0;
    for (uint32_t k = 0; k < count; k++) {
        if (offset + 8 > size) return 0;
        uint32_t fmt = u32(d + offset), length = u32(d + offset + 4);
        Py_ssize_t start = offset + 8, end = start + (Py_ssize_t)length;
        if (end > size || (length & 3)) return 0;
        offset = end;
        if (fmt == 1 || fmt == 3) {
            int rc = flow_sample(d, start, end, fmt == 3, flows, groups);
            if (rc <= 0) return rc;
            h->flows++;
        } else if (fmt == 2 || fmt == 4 || fmt == 5) {
            h->others++;
            if (others == NULL) continue;
            PyObject *span = Py_BuildValue("(Inn)", fmt, start, end);
            if (span == NULL) return -1;
            int rc = PyList_Append(others, span);
            Py_DECREF(span);
            if (rc < 0) return -1;
        }
    }
    return 1;
}

static PyObject *scan_impl(PyObject *arg, int counted) {
    groups_t groups;
    header_t h;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *result = NULL, *flows = NULL, *others = NULL, *agent = NULL;
    if (!counted) {
        flows = PyList_New(0);
        if (flows == NULL) goto error;
    }
    others = PyList_New(0);
    if (others == NULL) goto error;
    int rc = scan_core((const unsigned char *)view.buf, view.len, flows, others, &h, &groups);
    if (rc < 0) goto error;
    if (rc == 0) goto slow;
    if (counted && (groups.overflow || groups.runs_broken || !groups_fit(&groups)))
        goto slow;  /* ingest needs the flows */
    agent = PyUnicode_FromString(h.text);
    if (agent == NULL) goto error;
    PyObject *flow_tuple_ = counted ? PyLong_FromSsize_t(h.flows) : PyList_AsTuple(flows);
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
    result = Py_BuildValue("(NIIINNNN)", agent, h.sub_agent, h.sequence, h.uptime, flow_tuple_,
                           others, alike, runs);
    agent = others = NULL;  /* stolen by N (also on failure) */
    Py_XDECREF(flows);
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

static PyObject *scan(PyObject *self, PyObject *arg) { return scan_impl(arg, 0); }

/* scan_counted(data): scan's result with the number of flow samples in place of their tuples,
 * for estimate.ingest's common case; None also when the samples cannot all be grouped or their
 * runs do not hold (ingest then needs the flows: decode.parse_grouped). */
static PyObject *scan_counted(PyObject *self, PyObject *arg) { return scan_impl(arg, 1); }

/* ingest(data, now, context) -> the flow samples counted, or None: estimate.Estimator.ingest's
 * common case in one call, on the estimator's own objects. ``context`` is
 * ``[bucket, loss agents, slots, last, tallies, sums]`` (estimate.Estimator._context): the
 * newest bucket's number, LossTracker._agents, Estimator._slots, Estimator._last and the newest
 * bucket's per-agent tallies and sums. The common case: a well-formed datagram of flow samples
 * only (no counter or discard sample), from an agent the loss tracker knows that did not
 * restart, each sampler's run continuing it (loss.LossTracker.datagram's first return), and
 * every group of samples alike already decided (a slot: Estimator._slot, where the attribution,
 * the plan's 1-in-N and the streams were checked; a slot of an older bucket moves to the
 * newest, whose sums it then adds to, as _slot would decide it again). Then it does what the
 * Python code does, in the same order (the same float operations: the same sums), and returns
 * the number of flow samples. Anything else returns None before changing anything, and the
 * Python code decides (tests/collector/test_ingest_compiled.py: the same state either way). */
#define RESTART_SLACK_MS 2000u /* loss.RESTART_SLACK_MS */
#define HALF 0x80000000u

static PyObject *s_high, *s_high_t, *s_probation, *s_drops, *s_drops_sure, *s_loose;

static int as_u32(PyObject *o, uint32_t *out) {
    if (o == NULL || !PyLong_CheckExact(o)) return 0;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || v < 0 || v > 0xFFFFFFFFLL) {
        PyErr_Clear();
        return 0;
    }
    *out = (uint32_t)v;
    return 1;
}

static int attr_u32(PyObject *state, PyObject *name, uint32_t *out) {
    PyObject *value = PyObject_GetAttr(state, name);
    if (value == NULL) {
        PyErr_Clear();
        return 0;
    }
    int ok = as_u32(value, out);
    Py_DECREF(value);
    return ok;
}

/* list[index] = value (a new reference, stolen); -1 on an error. */
static int set_item(PyObject *list, Py_ssize_t index, PyObject *value) {
    if (value == NULL) return -1;
    return PyList_SetItem(list, index, value);
}

static PyObject *ingest(PyObject *self, PyObject *args) {
    Py_buffer view;
    double now;
    PyObject *context;
    if (!PyArg_ParseTuple(args, "y*dO!", &view, &now, &PyList_Type, &context)) return NULL;
    groups_t g;
    header_t h;
    PyObject *agent = NULL, *key = NULL, *result = NULL;
    PyObject *states[MAX_RUNS] = {NULL}, *slot_of[MAX_GROUPS] = {NULL};
    int failed = 0;
    if (PyList_GET_SIZE(context) != 6) goto done;
    PyObject *bucket = PyList_GET_ITEM(context, 0), *agents = PyList_GET_ITEM(context, 1);
    PyObject *slots = PyList_GET_ITEM(context, 2), *last = PyList_GET_ITEM(context, 3);
    PyObject *tallies = PyList_GET_ITEM(context, 4), *sums = PyList_GET_ITEM(context, 5);
    if (!PyDict_CheckExact(agents) || !PyDict_CheckExact(slots) || !PyDict_CheckExact(last) ||
        !PyDict_CheckExact(tallies) || !PyDict_CheckExact(sums))
        goto done;
    int rc = scan_core((const unsigned char *)view.buf, view.len, NULL, NULL, &h, &g);
    if (rc < 0) goto fail;
    if (rc == 0 || h.others || !h.flows || g.overflow || g.runs_broken || !groups_fit(&g))
        goto done;
    /* the loss tracker's state of this agent: known, not restarted, every run continues */
    agent = PyUnicode_FromString(h.text);
    if (agent == NULL) goto fail;
    PyObject *sub_agent = PyLong_FromUnsignedLong(h.sub_agent);
    key = sub_agent == NULL ? NULL : PyTuple_Pack(2, agent, sub_agent);
    Py_XDECREF(sub_agent);
    if (key == NULL) goto fail;
    PyObject *entry = PyDict_GetItemWithError(agents, key);
    if (entry == NULL) {
        if (PyErr_Occurred()) goto fail;
        goto done;
    }
    uint32_t known_uptime, known_number;
    if (!PyList_CheckExact(entry) || PyList_GET_SIZE(entry) != 3 ||
        !as_u32(PyList_GET_ITEM(entry, 0), &known_uptime) ||
        !as_u32(PyList_GET_ITEM(entry, 2), &known_number) ||
        !PyDict_CheckExact(PyList_GET_ITEM(entry, 1)))
        goto done;
    uint32_t back = known_uptime - h.uptime;
    if (RESTART_SLACK_MS < back && back < HALF) goto done;  /* restarted */
    /* behind the newest number (0 < behind < HALF): a repeat, a reordered datagram or one of
     * a restarted agent (loss._restarted weighs uptime and numbers): loss.py decides */
    if (known_number - h.sequence - 1u < HALF - 1u) goto done;
    PyObject *samplers = PyList_GET_ITEM(entry, 1);
    for (int k = 0; k < g.run_count; k++) {
        const run_t *run = &g.runs[k];
        PyObject *source = PyLong_FromUnsignedLong(run->source);
        if (source == NULL) goto fail;
        PyObject *state = PyDict_GetItemWithError(samplers, source);
        Py_DECREF(source);
        if (state == NULL) {
            if (PyErr_Occurred()) goto fail;
            goto done;
        }
        uint32_t high, drops;
        if (!attr_u32(state, s_high, &high) || !attr_u32(state, s_drops, &drops)) goto done;
        if ((uint32_t)(run->head - high) != 1u || drops != run->drops) goto done;
        PyObject *loose = PyObject_GetAttr(state, s_loose);
        if (loose == NULL) {
            PyErr_Clear();
            goto done;
        }
        int holes = PyObject_IsTrue(loose);
        Py_DECREF(loose);
        if (holes != 0) {
            if (holes < 0) PyErr_Clear();
            goto done;
        }
        Py_INCREF(state);
        states[k] = state;
    }
    /* every group decided in this bucket (its slot) */
    for (int k = 0; k < g.count; k++) {
        const group_t *it = &g.items[k];
        PyObject *vni = it->has_vni ? PyLong_FromUnsignedLong(it->vni) : Py_NewRef(Py_None);
        PyObject *outer = it->has_outer
            ? PyBytes_FromStringAndSize((const char *)it->outer, 4) : Py_NewRef(Py_None);
        PyObject *rate = PyLong_FromUnsignedLong(it->rate);
        PyObject *slot_key = (vni && outer && rate) ? PyTuple_Pack(4, agent, rate, vni, outer)
                                                    : NULL;
        Py_XDECREF(vni);
        Py_XDECREF(outer);
        Py_XDECREF(rate);
        if (slot_key == NULL) goto fail;
        PyObject *slot = PyDict_GetItemWithError(slots, slot_key);
        Py_DECREF(slot_key);
        if (slot == NULL) {
            if (PyErr_Occurred()) goto fail;
            goto done;
        }
        if (!PyList_CheckExact(slot) || PyList_GET_SIZE(slot) != 8 ||
            !PyFloat_CheckExact(PyList_GET_ITEM(slot, 2)) ||
            !PyFloat_CheckExact(PyList_GET_ITEM(slot, 3)))
            goto done;
        int same = PyObject_RichCompareBool(PyList_GET_ITEM(slot, 0), bucket, Py_EQ);
        if (same < 0) goto fail;
        PyObject *acc = same ? PyList_GET_ITEM(slot, 1) : NULL;
        if (!same) {  /* an older bucket's: the newest bucket's sums, if any yet */
            acc = PyDict_GetItemWithError(sums, PyList_GET_ITEM(slot, 7));
            if (acc == NULL && PyErr_Occurred()) goto fail;
        }
        if (acc != NULL) {
            if (!PyList_CheckExact(acc) || PyList_GET_SIZE(acc) != 7) goto done;
            for (int j = 1; j < 6; j++)
                if (!PyFloat_CheckExact(PyList_GET_ITEM(acc, j))) goto done;
        }
        Py_INCREF(slot);
        slot_of[k] = slot;
    }
    /* the common case: change what the Python code changes, in its order */
    if ((uint32_t)(h.uptime - known_uptime) < HALF &&
        set_item(entry, 0, PyLong_FromUnsignedLong(h.uptime)) < 0)
        goto fail;
    if (!((uint32_t)(known_number - h.sequence) < HALF) &&
        set_item(entry, 2, PyLong_FromUnsignedLong(h.sequence)) < 0)
        goto fail;
    for (int k = 0; k < g.run_count; k++) {
        PyObject *tail = PyLong_FromUnsignedLong(g.runs[k].tail), *at = PyFloat_FromDouble(now);
        int bad = tail == NULL || at == NULL || PyObject_SetAttr(states[k], s_high, tail) < 0 ||
                  PyObject_SetAttr(states[k], s_high_t, at) < 0 ||
                  PyObject_SetAttr(states[k], s_probation, Py_None) < 0 ||
                  PyObject_SetAttr(states[k], s_drops_sure, Py_True) < 0;
        Py_XDECREF(tail);
        Py_XDECREF(at);
        if (bad) goto fail;
    }
    unsigned long long received = 0;
    for (int k = 0; k < g.count; k++) {
        const group_t *it = &g.items[k];
        PyObject *slot = slot_of[k], *acc = PyList_GET_ITEM(slot, 1);
        int same = PyObject_RichCompareBool(PyList_GET_ITEM(slot, 0), bucket, Py_EQ);
        if (same < 0) goto fail;
        if (!same) {  /* moved to the newest bucket: its sums, made as _slot makes them */
            PyObject *sums_key = PyList_GET_ITEM(slot, 7);
            acc = PyDict_GetItemWithError(sums, sums_key);
            if (acc == NULL) {
                if (PyErr_Occurred()) goto fail;
                acc = Py_BuildValue("[iddddd]", 0, 0.0, 0.0, 0.0, 0.0, 0.0);  /* + now */
                PyObject *at = PyFloat_FromDouble(now);
                int bad = acc == NULL || at == NULL || PyList_Append(acc, at) < 0 ||
                          PyDict_SetItem(sums, sums_key, acc) < 0;
                Py_XDECREF(at);
                Py_XDECREF(acc);  /* held by sums */
                if (bad) goto fail;
            }
            Py_INCREF(bucket);
            if (PyList_SetItem(slot, 0, bucket) < 0) goto fail;
            Py_INCREF(acc);
            if (PyList_SetItem(slot, 1, acc) < 0) goto fail;
        }
        double weight = PyFloat_AS_DOUBLE(PyList_GET_ITEM(slot, 2));
        double variance = PyFloat_AS_DOUBLE(PyList_GET_ITEM(slot, 3));
        double n = (double)it->n, sizes = (double)it->sizes;
        double squares = (double)(uint64_t)it->squares; /* < 2^63: groups_fit */
        double adds[6] = {0.0, n * weight, sizes * weight, squares * weight, n * variance,
                          squares * variance};
        PyObject *count = PyLong_FromUnsignedLongLong(it->n);
        if (count == NULL) goto fail;
        PyObject *total = PyNumber_Add(PyList_GET_ITEM(acc, 0), count);
        Py_DECREF(count);
        if (set_item(acc, 0, total) < 0) goto fail;
        for (int j = 1; j < 6; j++) {
            double value = PyFloat_AS_DOUBLE(PyList_GET_ITEM(acc, j)) + adds[j];
            if (set_item(acc, j, PyFloat_FromDouble(value)) < 0) goto fail;
        }
        if (set_item(acc, 6, PyFloat_FromDouble(now)) < 0) goto fail;
        PyObject *server = PyList_GET_ITEM(slot, 4);
        PyObject *seen = PyDict_GetItemWithError(last, server);
        if (seen == NULL && PyErr_Occurred()) goto fail;
        double before = seen == NULL ? 0.0 : PyFloat_AsDouble(seen);
        if (before == -1.0 && PyErr_Occurred()) goto fail;
        if (before < now) {
            PyObject *at = PyFloat_FromDouble(now);
            if (at == NULL || PyDict_SetItem(last, server, at) < 0) {
                Py_XDECREF(at);
                goto fail;
            }
            Py_DECREF(at);
        }
        received += it->n;
    }
    PyObject *tally = PyDict_GetItemWithError(tallies, agent);
    if (tally == NULL && PyErr_Occurred()) goto fail;
    PyObject *got = PyLong_FromUnsignedLongLong(received);
    PyObject *sum = got == NULL ? NULL : tally == NULL ? Py_NewRef(got) : PyNumber_Add(tally, got);
    Py_XDECREF(got);
    if (sum == NULL || PyDict_SetItem(tallies, agent, sum) < 0) {
        Py_XDECREF(sum);
        goto fail;
    }
    Py_DECREF(sum);
    result = PyLong_FromSsize_t(h.flows);
    goto done;
fail:
    failed = 1;
done:
    for (int k = 0; k < MAX_RUNS; k++) Py_XDECREF(states[k]);
    for (int k = 0; k < MAX_GROUPS; k++) Py_XDECREF(slot_of[k]);
    Py_XDECREF(agent);
    Py_XDECREF(key);
    PyBuffer_Release(&view);
    if (failed) {
        Py_XDECREF(result);
        return NULL;
    }
    if (result == NULL) Py_RETURN_NONE;
    return result;
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
    {"ingest", ingest, METH_VARARGS,
     "ingest(data, now, context) -> flow samples counted, or None (estimate.Estimator.ingest)"},
    {"scan_counted", scan_counted, METH_O,
     "scan_counted(data) -> (agent, sub_agent, sequence, uptime, n, others, alike, runs) or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_sflow",
                                    "Compiled fast path of the sFlow v5 decoder.", -1, methods};

PyMODINIT_FUNC PyInit__sflow(void) {
    s_high = PyUnicode_InternFromString("high");
    s_high_t = PyUnicode_InternFromString("high_t");
    s_probation = PyUnicode_InternFromString("probation");
    s_drops = PyUnicode_InternFromString("drops");
    s_drops_sure = PyUnicode_InternFromString("drops_sure");
    s_loose = PyUnicode_InternFromString("loose");
    if (!s_high || !s_high_t || !s_probation || !s_drops || !s_drops_sure || !s_loose) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "MAX_FRAME_BYTES", MAX_FRAME_BYTES) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
