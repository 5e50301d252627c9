/* A two-phase plan set's first phase, compiled (transition.plan_set's fast path).
 *
 * lower(old, new, scale) -> bytes or None. ``old``, ``new``: the host tables of the plan in
 * force and of the next plan, compact JSON with sorted keys as orjson writes them (the
 * planner's HostTable). The result is phase 1's host table exactly as orjson writes
 * ``plan_set(...)["plans"][0]["hosts"]`` (transition._lower on every host of NEW against its
 * OLD entry or _NOTHING, then _prune_unmatched), without a Python object per host: NEW's
 * bytes are copied entry by entry, and only the members _lower changes are written anew.
 * ``scale``: SAMPLE_PROBABILITY_SCALE (local_rate of the ``sample`` mechanism = probability /
 * scale), passed in so that it is defined once.
 *
 * Application mirrors (``appmon``, where either plan's entry has the key): NEW's entries that
 * OLD's list has too, compared as Python compares the parsed values (json_equal: 1 == 1.0 ==
 * true), written as NEW has them; and those OLD has with another ``share`` only, the entry
 * with the smaller share, written as its plan has it (transition._lower_appmon).
 *
 * Numbers _lower computes (a minimum, a probability / scale) are written as orjson writes a
 * double: the shortest digits that read back as the same double, in decimal from 1e-5 up to
 * 1e16, else as ``1e-7``/``1.5e+16`` (_jsonnumber.h's format_double; format_float here, for
 * tests/plan/test_transition_compiled.py, which compares it with orjson). A text of at most 15 significant digits already holds those digits
 * (two decimals of 15 digits are never the same double); longer ones are formatted from
 * Python's repr digits (PyOS_double_to_string). Integers (sample_probability, sflow_sampling)
 * are written from their int64 values.
 *
 * None means "not the fast case", and the caller then runs the Python transition, whose
 * result or error this matches: everything the shared reader (_hosttable.h) refuses; an
 * ``appmon`` list that is null (Python iterates None) or holds entries whose equality a
 * double cannot settle (integers beyond 15 digits); a number _lower reads that is not a JSON
 * float (an integer literal: Python's float() makes it 1.0) or an integer _lower reads that
 * is not an integer literal of at most 18 digits;
 * ``local_mechanism`` other than "sflow"/"sample"; a missing value _lower reads (a KeyError in
 * Python); an item whose peer is not a string; a ``mirrors``/``receives`` list not strictly
 * increasing by peer (the planner writes them in name order: _min_shares's sort is then
 * NEW's order, and a peer never repeats); NEW's entries or items written with keys not
 * strictly increasing. Values copied as they are (every member _lower does not change) are
 * trusted to be orjson's text, as the whole table is: a table orjson wrote reads back and is
 * written again as the same bytes.
 *
 * format_float(x) -> bytes: orjson's text of the double ``x`` (the numbers lower writes).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "_hosttable.h"
#include "_jsonnumber.h"

#include "_hostfields.h"  /* FIELD[]: LOCAL_FIELDS of hostfields.py, generated from it */

/* ---- output ----------------------------------------------------------------------------- */

/* the table being written, in the bytes object returned (no copy at the end) */
typedef struct { PyObject *bytes; char *out; Py_ssize_t len, cap; } sink;

static inline int put(sink *s, const char *data, Py_ssize_t len) {
    if (s->len + len > s->cap) {
        Py_ssize_t cap = 2 * s->cap;
        while (cap < s->len + len) cap *= 2;
        if (_PyBytes_Resize(&s->bytes, cap) < 0) return -1;
        s->out = PyBytes_AS_STRING(s->bytes);
        s->cap = cap;
    }
    copy_bytes(s->out + s->len, data, (size_t)len);
    s->len += len;
    return 0;
}

/* ---- the transition --------------------------------------------------------------------- */

typedef struct {
    table_t old, new;
    Py_ssize_t *old_of;    /* per NEW host: its OLD entry's index, or -1 (absent or {}) */
    /* per host, its mirrors', receives' and appmon's items: [start, end) each (RANGES) */
    Py_ssize_t *range_old, *range_new;
    /* the lowered lists: per NEW host, mirrors then receives, pairs (NEW item, OLD item) */
    Py_ssize_t *low_start, *pair_new, *pair_old, pairs;
    char *keep;            /* per pair: kept by the pruning */
    long long scale;
} work_t;

#define RANGES 6
#define AT(key) ((key) == K_MIRRORS ? 0 : (key) == K_RECEIVES ? 2 : 4)

/* per host, its mirrors', receives' and appmon's item ranges; 0 when a mirror's or receive's
   peer is not a string or their list is not strictly increasing by peer */
static int list_ranges(const table_t *t, Py_ssize_t *range) {
    for (Py_ssize_t k = 0; k < RANGES * t->hosts; k++) range[k] = 0;
    for (Py_ssize_t j = 0; j < t->items; j++) {
        const item_t *it = &t->item[j];
        Py_ssize_t *r = range + RANGES * it->owner + AT(it->key);
        if (r[1] == 0) r[0] = j;
        if (it->key == K_APPMON) { r[1] = j + 1; continue; }
        if (it->peer.s < 0) return 0;
        if (r[0] != j) {
            const item_t *before = &t->item[j - 1];
            if (compare_bytes(t->b + before->peer.s, before->peer.e - before->peer.s,
                              t->b + it->peer.s, it->peer.e - it->peer.s) >= 0) return 0;
        }
        r[1] = j + 1;
    }
    return 1;
}

static int peer_order(const table_t *x, Py_ssize_t i, const table_t *y, Py_ssize_t j) {
    span a = x->item[i].peer, c = y->item[j].peer;
    return compare_bytes(x->b + a.s, a.e - a.s, y->b + c.s, c.e - c.s);
}

/* _min_shares's matches (NEW's items whose peer OLD's same list has), both lists in peer
   order: one merge */
static void match(work_t *w, Py_ssize_t a, Py_ssize_t a_end, Py_ssize_t c, Py_ssize_t c_end) {
    if (a == a_end || c == c_end) return;
    while (a < a_end && c < c_end) {
        int order = peer_order(&w->new, a, &w->old, c);
        if (order < 0) a++;
        else if (order > 0) c++;
        else { w->pair_new[w->pairs] = a++; w->pair_old[w->pairs++] = c++; }
    }
}

/* whether host ``h``'s lowered list ``which`` (0 mirrors, 1 receives) names host ``name`` */
static int lists(const work_t *w, Py_ssize_t h, int which, const char *name, Py_ssize_t len) {
    Py_ssize_t lo = w->low_start[2 * h + which], hi = w->low_start[2 * h + which + 1];
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        span p = w->new.item[w->pair_new[mid]].peer;
        int order = compare_bytes(w->new.b + p.s, p.e - p.s, name, len);
        if (order == 0) return 1;
        if (order < 0) lo = mid + 1; else hi = mid;
    }
    return 0;
}

/* _prune_unmatched: a mirror h -> t stays if t's lowered receives name h, a receive at h from
   f if f's lowered mirrors name h */
static int prune(work_t *w) {
    const table_t *t = &w->new;
    uint64_t mask = 0;
    Py_ssize_t *slots = index_names(t, &mask);
    if (slots == NULL) return -1;
    for (Py_ssize_t h = 0; h < t->hosts; h++) {
        span own = t->name[h];
        for (int which = 0; which < 2; which++) {
            for (Py_ssize_t k = w->low_start[2 * h + which]; k < w->low_start[2 * h + which + 1];
                 k++) {
                span p = t->item[w->pair_new[k]].peer;
                Py_ssize_t q = find(t, slots, mask, t->b, p.s, p.e);
                w->keep[k] = q >= 0 && lists(w, q, 1 - which, t->b + own.s + 1,
                                             own.e - own.s - 2);
            }
        }
    }
    PyMem_Free(slots);
    return 0;
}

/* the value text of field ``f`` of a host's field spans ('"key":value') */
static span value_of(const span *fields, int f) {
    span v = fields[f];
    if (v.s >= 0) v.s += FIELD_LEN[f] + 3;
    return v;
}

static int text_is(const char *b, span v, const char *word) {
    size_t len = strlen(word);
    return v.s >= 0 && (size_t)(v.e - v.s) == len && bytes_order(b + v.s, word, len) == 0;
}

/* the smaller of two JSON floats (Python's min(first, second): the first unless the second
   is smaller), as orjson writes it, into ``out``; its length, or -1: not the fast case */
static int smaller(const char *b1, span first, const char *b2, span second, char *out) {
    double x, y;
    if (!read_float(b1, first, &x) || !read_float(b2, second, &y)) return -1;
    if (y < x) return format_double(y, b2 + second.s, second.e - second.s, out);
    return format_double(x, b1 + first.s, first.e - first.s, out);
}

/* one lowered item: NEW's item with rate (and pps, when both have it) the smaller */
static int put_item(sink *s, const work_t *w, Py_ssize_t j, Py_ssize_t i) {
    const table_t *nt = &w->new, *ot = &w->old;
    const item_t *now = &nt->item[j], *was = &ot->item[i];
    char rate[48], pps[48];
    int rate_len = smaller(nt->b, now->rate, ot->b, was->rate, rate), pps_len = -1;
    if (rate_len < 0) return 0;
    if (now->pps.s >= 0 && was->pps.s >= 0) {
        pps_len = smaller(nt->b, now->pps, ot->b, was->pps, pps);
        if (pps_len < 0) return 0;
    }
    const char *b = nt->b;
    Py_ssize_t n = now->item.e, p = now->item.s + 1;
    span previous = {-1, -1};
    if (put(s, "{", 1) < 0) return -1;
    if (b[p] != '}') {
        for (;;) {
            span k;
            Py_ssize_t v;
            if (member(b, n, &p, 4, &k, &v) < 0) return 0;
            if (previous.s >= 0 && compare_bytes(b + previous.s + 1, previous.e - previous.s - 2,
                                                 b + k.s + 1, k.e - k.s - 2) >= 0) return 0;
            previous = k;
            if (k.s > now->item.s + 1 && put(s, ",", 1) < 0) return -1;
            if (put(s, b + k.s, v - k.s) < 0) return -1;  /* "key": */
            int r;
            if (v == now->rate.s) r = put(s, rate, rate_len);
            else if (v == now->pps.s && pps_len >= 0) r = put(s, pps, pps_len);
            else r = put(s, b + v, p - v);
            if (r < 0) return -1;
            if (b[p] == '}') break;
            p++;
        }
    }
    return put(s, "}", 1) < 0 ? -1 : 1;
}

static int put_lowered(sink *s, const work_t *w, Py_ssize_t h, int which) {
    int first = 1;
    if (put(s, "[", 1) < 0) return -1;
    for (Py_ssize_t k = w->low_start[2 * h + which]; k < w->low_start[2 * h + which + 1]; k++) {
        if (!w->keep[k]) continue;
        if (!first && put(s, ",", 1) < 0) return -1;
        first = 0;
        int ok = put_item(s, w, w->pair_new[k], w->pair_old[k]);
        if (ok <= 0) return ok;
    }
    return put(s, "]", 1) < 0 ? -1 : 1;
}

/* a JSON value's kind, by its first byte */
enum { J_OBJECT, J_ARRAY, J_STRING, J_NULL, J_NUMBER };

static int kind_of(char c) {
    return c == '{' ? J_OBJECT : c == '[' ? J_ARRAY : c == '"' ? J_STRING : c == 'n' ? J_NULL
                                                                          : J_NUMBER;
}

/* Python's == on two parsed JSON values (appmon entries: ``e in old``): 1 equal, 0 not, -1
   cannot tell. The same text is the same value; otherwise objects (keys sorted) and arrays
   member by member, numbers, true and false by value, strings (no escapes) by their bytes. */
static int json_equal(const char *a, span x, const char *b, span y, int depth) {
    if (x.e - x.s == y.e - y.s && memcmp(a + x.s, b + y.s, (size_t)(x.e - x.s)) == 0) return 1;
    int kx = kind_of(a[x.s]), ky = kind_of(b[y.s]);
    if (kx != ky || kx == J_STRING || kx == J_NULL) return 0;
    if (kx == J_NUMBER) {
        double u, v;
        if (!as_double(a, x, &u) || !as_double(b, y, &v)) return -1;
        return u == v;
    }
    if (depth > MAX_DEPTH) return -1;
    Py_ssize_t p = x.s + 1, q = y.s + 1;
    int object = kx == J_OBJECT;
    char close = object ? '}' : ']';
    for (;;) {
        int end_x = a[p] == close, end_y = b[q] == close;
        if (end_x || end_y) return end_x && end_y;
        if (object) {  /* the same keys in the same (sorted) order */
            span kx_ = {p, 0}, ky_ = {q, 0};
            if (skip_string(a, x.e, &p) < 0 || skip_string(b, y.e, &q) < 0) return -1;
            kx_.e = p; ky_.e = q;
            if (compare_bytes(a + kx_.s, kx_.e - kx_.s, b + ky_.s, ky_.e - ky_.s) != 0) return 0;
            p++; q++;  /* ':' */
        }
        span vx = {p, 0}, vy = {q, 0};
        if (skip_value(a, x.e, &p, depth + 1) < 0 || skip_value(b, y.e, &q, depth + 1) < 0)
            return -1;
        vx.e = p; vy.e = q;
        int same = json_equal(a, vx, b, vy, depth + 1);
        if (same <= 0) return same;
        if (a[p] == ',') p++;
        if (b[q] == ',') q++;
    }
}

/* the member of object ``x`` at ``*p``: its key and value, ``*p`` moved past it and its
   comma; 1, 0 at the object's end, -1 cannot read */
static int next_member(const char *b, span x, Py_ssize_t *p, span *key, span *value) {
    if (b[*p] == '}') return 0;
    key->s = *p;
    if (skip_string(b, x.e, p) < 0) return -1;
    key->e = *p;
    value->s = ++*p;  /* past ':' */
    if (skip_value(b, x.e, p, 5) < 0) return -1;
    value->e = *p;
    if (b[*p] == ',') ++*p;
    return 1;
}

static inline int is_share(const char *b, span key) {
    return key.e - key.s == 7 && memcmp(b + key.s, "\"share\"", 7) == 0;
}

/* an application mirror's share (transition._share): 1 with ``*share`` (1 when absent or null),
   0 not a number, -1 cannot tell */
static int share_of(const char *b, span x, double *share) {
    Py_ssize_t p = x.s + 1;
    span key, value;
    int got;
    *share = 1.0;
    while ((got = next_member(b, x, &p, &key, &value)) == 1) {
        if (!is_share(b, key)) continue;
        char c = b[value.s];
        if (c == 'n') return 1;
        if (c == '{' || c == '[' || c == '"') return 0;
        return as_double(b, value, share) ? 1 : -1;
    }
    return got < 0 ? -1 : 1;
}

/* Python's == on two entries without their ``share`` (transition._but_share): 1, 0, -1 */
static int equal_but_share(const char *a, span x, const char *b, span y) {
    Py_ssize_t p = x.s + 1, q = y.s + 1;
    for (;;) {
        span ka, va, kb, vb;
        int ga, gb;
        while ((ga = next_member(a, x, &p, &ka, &va)) == 1 && is_share(a, ka)) {}
        while ((gb = next_member(b, y, &q, &kb, &vb)) == 1 && is_share(b, kb)) {}
        if (ga < 0 || gb < 0) return -1;
        if (ga == 0 || gb == 0) return ga == gb;
        if (compare_bytes(a + ka.s, ka.e - ka.s, b + kb.s, kb.e - kb.s) != 0) return 0;
        int same = json_equal(a, va, b, vb, 5);
        if (same <= 0) return same;
    }
}

/* _lower's appmon (transition._lower_appmon): NEW's entries that OLD's list has too (Python's
   ``in``: equal values), and those OLD has with another share only, at the smaller share (the
   entry that has it, as its plan writes it) */
static int put_appmon(sink *s, const work_t *w, Py_ssize_t h) {
    const table_t *nt = &w->new, *ot = &w->old;
    Py_ssize_t oh = w->old_of[h];
    const Py_ssize_t *rn = w->range_new + RANGES * h + 4;
    const Py_ssize_t *ro = oh >= 0 ? w->range_old + RANGES * oh + 4 : NULL;
    int first = 1;
    if (put(s, "[", 1) < 0) return -1;
    for (Py_ssize_t j = rn[0]; j < rn[1] && ro != NULL; j++) {
        span x = nt->item[j].item;
        const char *text = nt->b;
        int found = 0;
        for (Py_ssize_t i = ro[0]; i < ro[1] && !found; i++) {
            found = json_equal(nt->b, x, ot->b, ot->item[i].item, 4);
            if (found < 0) return 0;
        }
        double share, was_share;
        int numeric = found ? 0 : nt->b[x.s] == '{' ? share_of(nt->b, x, &share) : 0;
        if (numeric < 0) return 0;
        for (Py_ssize_t i = ro[0]; i < ro[1] && numeric && !found; i++) {
            span y = ot->item[i].item;
            if (ot->b[y.s] != '{') continue;
            int twin = share_of(ot->b, y, &was_share);
            if (twin == 1) twin = equal_but_share(nt->b, x, ot->b, y);
            if (twin < 0) return 0;
            if (twin && was_share < share) { text = ot->b; x = y; }
            found = twin;
        }
        if (!found) continue;
        if (!first && put(s, ",", 1) < 0) return -1;
        first = 0;
        if (put(s, text + x.s, x.e - x.s) < 0) return -1;
    }
    return put(s, "]", 1) < 0 ? -1 : 1;
}

enum { I_APPMON, I_RATE, I_MIRRORS, I_RECEIVES, I_SAMPLING, I_COUNT };  /* in key order */
static const char *const INSERTED[I_COUNT] = {"appmon", "local_rate", "mirrors", "receives",
                                              "sflow_sampling"};
static const Py_ssize_t INSERTED_LEN[I_COUNT] = {6, 10, 7, 8, 14};

/* _lower_local's members: what replaces local_rate, sflow_sampling and sample_probability,
   and whether the ``sample`` keys go */
typedef struct {
    char rate[48], sampling[24], probability[24];
    int rate_len, sampling_len, probability_len;  /* sampling_len, probability_len < 0: kept */
    int drop_sample_keys;
} local_t;

static int mechanism(const char *b, const span *fields, int *sample) {
    span v = value_of(fields, F_LOCAL_MECHANISM);
    if (v.s < 0 || text_is(b, v, "\"sflow\"")) { *sample = 0; return 1; }
    if (text_is(b, v, "\"sample\"")) { *sample = 1; return 1; }
    return 0;
}

/* 1: ``out`` holds host h's local members, 0: not the fast case */
static int lower_local(const work_t *w, Py_ssize_t h, local_t *out) {
    static const span NONE[F_COUNT] = {{-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}};
    const table_t *nt = &w->new, *ot = &w->old;
    Py_ssize_t oh = w->old_of[h];
    const span *fn = nt->field + h * F_COUNT;
    const span *fo = oh >= 0 ? ot->field + oh * F_COUNT : NONE;
    int sample_new, sample_old;
    if (!mechanism(nt->b, fn, &sample_new) || !mechanism(ot->b, fo, &sample_old)) return 0;
    out->drop_sample_keys = 0;
    out->sampling_len = out->probability_len = -1;
    if (sample_new && sample_old) {
        long long pn, po;
        if (!read_int(nt->b, value_of(fn, F_SAMPLE_PROBABILITY), &pn) ||
            !read_int(ot->b, value_of(fo, F_SAMPLE_PROBABILITY), &po)) return 0;
        long long p = po < pn ? po : pn;
        out->rate_len = format_double((double)p / (double)w->scale, NULL, 0, out->rate);
        out->probability_len = snprintf(out->probability, sizeof out->probability, "%lld", p);
        return out->rate_len >= 0;
    }
    out->rate_len = 3;
    memcpy(out->rate, "0.0", 3);
    out->sampling_len = 4;
    memcpy(out->sampling, "null", 4);
    if (sample_new || sample_old) {  /* mechanisms differ: sampling off, no sample keys */
        out->drop_sample_keys = 1;
        return 1;
    }
    double rn, ro = 0.0;
    span vn = value_of(fn, F_LOCAL_RATE), vo = value_of(fo, F_LOCAL_RATE);
    if (!read_float(nt->b, vn, &rn)) return 0;
    if (oh >= 0 && !read_float(ot->b, vo, &ro)) return 0;
    long long nn = 0, no = 0;  /* sflow_sampling: absent or null is falsy */
    span sn = value_of(fn, F_SFLOW_SAMPLING), so = value_of(fo, F_SFLOW_SAMPLING);
    if (sn.s >= 0 && !text_is(nt->b, sn, "null") && !read_int(nt->b, sn, &nn)) return 0;
    if (so.s >= 0 && !text_is(ot->b, so, "null") && !read_int(ot->b, so, &no)) return 0;
    double rate = rn < ro ? rn : ro;  /* min(old, new): OLD unless NEW is smaller */
    if (!(rate > 0 && no != 0 && nn != 0)) return 1;  /* off */
    out->rate_len = rn < ro ? format_double(rn, nt->b + vn.s, vn.e - vn.s, out->rate)
                            : format_double(ro, ot->b + vo.s, vo.e - vo.s, out->rate);
    out->sampling_len = snprintf(out->sampling, sizeof out->sampling, "%lld", nn > no ? nn : no);
    return out->rate_len >= 0;
}

/* one inserted or replaced member (INSERTED[which]) */
static int put_member(sink *s, const work_t *w, Py_ssize_t h, const local_t *local, int which) {
    if (put(s, "\"", 1) < 0 || put(s, INSERTED[which], INSERTED_LEN[which]) < 0 ||
        put(s, "\":", 2) < 0) return -1;
    switch (which) {
    case I_RATE: return put(s, local->rate, local->rate_len) < 0 ? -1 : 1;
    case I_SAMPLING: return put(s, local->sampling, local->sampling_len) < 0 ? -1 : 1;
    case I_APPMON: return put_appmon(s, w, h);
    case I_MIRRORS: return put_lowered(s, w, h, 0);
    default: return put_lowered(s, w, h, 1);
    }
}

/* NEW's entry of host h lowered; 1: written, 0: not the fast case, -1: out of memory */
static int put_entry(sink *s, const work_t *w, Py_ssize_t h) {
    local_t local;
    if (!lower_local(w, h, &local)) return 0;
    int pending[I_COUNT], count = 0, next = 0;
    Py_ssize_t oh = w->old_of[h];
    unsigned lists = w->new.lists_of[h] | (oh >= 0 ? w->old.lists_of[oh] : 0);
    if (lists & (16u << K_APPMON)) return 0;  /* appmon null: Python iterates None */
    for (int k = 0; k < I_COUNT; k++)
        if ((k != I_SAMPLING || local.sampling_len >= 0) &&
            (k != I_APPMON || lists & (1u << K_APPMON))) pending[count++] = k;
    const char *b = w->new.b;
    span entry = w->new.entry[h];
    Py_ssize_t n = entry.e, p = entry.s + 1;
    span previous = {-1, -1};
    int first = 1, ok;
    if (put(s, "{", 1) < 0) return -1;
    while (b[p] != '}') {
        span k;
        Py_ssize_t v;
        if (member(b, n, &p, 3, &k, &v) < 0) return 0;
        const char *key = b + k.s + 1;
        Py_ssize_t len = k.e - k.s - 2;
        if (previous.s >= 0 && compare_bytes(b + previous.s + 1, previous.e - previous.s - 2,
                                             key, len) >= 0) return 0;
        previous = k;
        int replaced = 0;
        while (next < count) {
            int order = compare_bytes(INSERTED[pending[next]], INSERTED_LEN[pending[next]],
                                      key, len);
            if (order > 0) break;
            if (!first && put(s, ",", 1) < 0) return -1;
            first = 0;
            if ((ok = put_member(s, w, h, &local, pending[next++])) <= 0) return ok;
            if (order == 0) { replaced = 1; break; }
        }
        if (!replaced) {
            int field = -1;
            for (int f = F_LOCAL_MECHANISM; f < F_COUNT; f++)
                if (len == FIELD_LEN[f] && key[0] == FIELD[f][0] &&
                    bytes_order(key, FIELD[f], (size_t)len) == 0) field = f;
            if (field < 0 || !local.drop_sample_keys) {
                if (!first && put(s, ",", 1) < 0) return -1;
                first = 0;
                if (field == F_SAMPLE_PROBABILITY && local.probability_len >= 0) {
                    if (put(s, b + k.s, v - k.s) < 0 ||
                        put(s, local.probability, local.probability_len) < 0) return -1;
                } else if (put(s, b + k.s, p - k.s) < 0) {
                    return -1;
                }
            }
        }
        if (b[p] == '}') break;
        p++;
    }
    for (; next < count; next++) {
        if (!first && put(s, ",", 1) < 0) return -1;
        first = 0;
        if ((ok = put_member(s, w, h, &local, pending[next])) <= 0) return ok;
    }
    return put(s, "}", 1) < 0 ? -1 : 1;
}

/* 1: the lists lowered and pruned, 0: not the fast case, -1: out of memory */
static int prepare(work_t *w) {
    table_t *nt = &w->new, *ot = &w->old;
    Py_ssize_t hosts = nt->hosts;
    w->old_of = PyMem_Malloc(((size_t)hosts + 1) * sizeof(Py_ssize_t));
    w->range_new = PyMem_Malloc((RANGES * (size_t)hosts + 1) * sizeof(Py_ssize_t));
    w->range_old = PyMem_Malloc((RANGES * (size_t)ot->hosts + 1) * sizeof(Py_ssize_t));
    w->low_start = PyMem_Malloc((2 * (size_t)hosts + 1) * sizeof(Py_ssize_t));
    w->pair_new = PyMem_Malloc(((size_t)nt->items + 1) * sizeof(Py_ssize_t));
    w->pair_old = PyMem_Malloc(((size_t)nt->items + 1) * sizeof(Py_ssize_t));
    w->keep = PyMem_Malloc((size_t)nt->items + 1);
    if (!w->old_of || !w->range_new || !w->range_old || !w->low_start || !w->pair_new ||
        !w->pair_old || !w->keep) return -1;
    if (!list_ranges(nt, w->range_new) || !list_ranges(ot, w->range_old)) return 0;
    /* both tables are in name order: OLD's entries by one merge */
    Py_ssize_t c = 0;
    for (Py_ssize_t h = 0; h < hosts; h++) {
        while (c < ot->hosts && compare_names(ot, c, nt, h) < 0) c++;
        int same = c < ot->hosts && compare_names(ot, c, nt, h) == 0;
        w->old_of[h] = same && ot->entry[c].e - ot->entry[c].s > 2 ? c : -1;  /* {}: _NOTHING */
    }
    w->pairs = 0;
    for (Py_ssize_t h = 0; h < hosts; h++) {
        Py_ssize_t oh = w->old_of[h];
        for (int which = 0; which < 2; which++) {
            w->low_start[2 * h + which] = w->pairs;
            if (oh < 0) continue;
            const Py_ssize_t *rn = w->range_new + RANGES * h + 2 * which;
            const Py_ssize_t *ro = w->range_old + RANGES * oh + 2 * which;
            match(w, rn[0], rn[1], ro[0], ro[1]);
        }
    }
    w->low_start[2 * hosts] = w->pairs;
    return prune(w) < 0 ? -1 : 1;
}

static void release(work_t *w) {
    free_table_spans(&w->old);
    free_table_spans(&w->new);
    PyMem_Free(w->old_of); PyMem_Free(w->range_new); PyMem_Free(w->range_old);
    PyMem_Free(w->low_start); PyMem_Free(w->pair_new); PyMem_Free(w->pair_old);
    PyMem_Free(w->keep);
}

static PyObject *lower(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *old_bytes, *new_bytes;
    long long scale;
    if (!PyArg_ParseTuple(args, "SSL", &old_bytes, &new_bytes, &scale)) return NULL;
    if (scale <= 0) { PyErr_SetString(PyExc_ValueError, "scale: a positive integer"); return NULL; }
    work_t w;
    memset(&w, 0, sizeof w);
    w.scale = scale;
    table_t *tables[2] = {&w.old, &w.new};
    PyObject *data[2] = {old_bytes, new_bytes};
    sink s = {NULL, NULL, 0, 0};
    int ok = 1;
    for (int k = 0; k < 2 && ok > 0; k++) {
        table_t *t = tables[k];
        t->b = PyBytes_AS_STRING(data[k]);
        t->n = PyBytes_GET_SIZE(data[k]);
        t->fields = F_COUNT;
        t->field_name = FIELD;
        t->field_len = FIELD_LEN;
        ok = read_table(t);
    }
    if (ok > 0) ok = prepare(&w);
    if (ok > 0) {
        s.cap = w.new.n + w.new.n / 8 + 64;
        s.bytes = PyBytes_FromStringAndSize(NULL, s.cap);
        if (s.bytes == NULL) { release(&w); return NULL; }
        s.out = PyBytes_AS_STRING(s.bytes);
        ok = put(&s, "{", 1) < 0 ? -1 : 1;
        for (Py_ssize_t h = 0; h < w.new.hosts && ok > 0; h++) {
            span name = w.new.name[h];
            if ((h > 0 && put(&s, ",", 1) < 0) || put(&s, w.new.b + name.s, name.e - name.s) < 0 ||
                put(&s, ":", 1) < 0) { ok = -1; break; }
            ok = put_entry(&s, &w, h);
        }
        if (ok > 0 && put(&s, "}", 1) < 0) ok = -1;
        if (ok > 0 && _PyBytes_Resize(&s.bytes, s.len) < 0) ok = -1;
    }
    release(&w);
    if (ok < 0) {
        Py_XDECREF(s.bytes);
        if (!PyErr_Occurred()) PyErr_NoMemory();
        return NULL;
    }
    if (ok == 0) {
        Py_XDECREF(s.bytes);
        Py_RETURN_NONE;
    }
    return s.bytes;
}

static PyObject *format_float(PyObject *self, PyObject *arg) {
    (void)self;
    double x = PyFloat_AsDouble(arg);
    if (x == -1.0 && PyErr_Occurred()) return NULL;
    if (!isfinite(x)) { PyErr_SetString(PyExc_ValueError, "a finite float"); return NULL; }
    char out[48];
    int len = format_double(x, NULL, 0, out);
    if (len < 0) { PyErr_SetString(PyExc_ValueError, "cannot format"); return NULL; }
    return PyBytes_FromStringAndSize(out, len);
}

static PyMethodDef methods[] = {
    {"lower", lower, METH_VARARGS,
     "Phase 1's host table from OLD's and NEW's (bytes), or None (not the fast case)."},
    {"format_float", format_float, METH_O, "orjson's text of a finite float (bytes)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_transition",
                                    "Two-phase plan sets' fast path (transition).", -1, methods};

PyMODINIT_FUNC PyInit__transition(void) { return PyModule_Create(&module); }
