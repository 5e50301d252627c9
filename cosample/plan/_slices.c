/* Every host's view and its Merkle leaf hash, compiled (slicebuild.build_slices's fast path).
 *
 * views(tables) -> (names, name_offsets, views, view_offsets, leaf_hashes) or None. ``tables``:
 * the host tables of one publication as compact JSON with sorted keys (orjson's OPT_SORT_KEYS,
 * as plans are written). ``names``: the sorted union of their host names (UTF-8), each followed
 * by a newline; ``views``: each name's view as slicebuild.view builds it and orjson writes it
 * (``{"hosts":[TABLE,...],"name":NAME}``); each laid end to end in one bytes object, item k
 * starting at offsets[k] (count + 1 native int64, as bytes): no object per host to allocate,
 * and to free a publication later (packed.py); ``leaf_hashes``:
 * SHA-256(0x00 || view) of each, end to end. The bytes of an entry, an item or
 * a value are copied from the table as they are (orjson wrote them, and writes them the same
 * when it writes the view). None means "not the fast case": a backslash anywhere (an escaped
 * string: names then do not compare as their bytes), names not strictly increasing, nesting
 * deeper than MAX_DEPTH, a list or item slicebuild.relations would not read as a list of
 * objects, a peer that is a list or object, anything that is not such JSON. The caller then
 * builds the views in Python, whose behaviour (or error) this matches by construction.
 *
 * parents(level) -> bytes: the Merkle level above ``level`` (merkle._parents).
 *
 * find(names, offsets, name) -> index or -1: ``name`` among views()'s names (packed.Names.find).
 *
 * configure(peer_fields): the fields of a peer every view keeps (slicebuild.PEER_FIELDS, the
 * one place they are named); views() is None until it is called.
 *
 * The tables are read by _hosttable.h (shared with _transition.c).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <openssl/sha.h>

/* each table's relations, per host: (peer, key, item index or -1), in slicebuild.relations's
   order */
#define TABLE_EXTRA Py_ssize_t *rel_start; struct relation { Py_ssize_t peer, item; int key; } *rel;
#include "_hosttable.h"

#define AHEAD 16  /* how far ahead random reads are fetched (fetch_ahead, relate) */
#define MAX_FIELD_NAME 64
/* The peer fields (configure): their names, how many, and the order a peer's cut is written
   in: its keys sorted, lists (K_*) and fields (FIELDS + index) together. */
static char field_name[MAX_FIELDS][MAX_FIELD_NAME];
static const char *field_ptr[MAX_FIELDS];
static Py_ssize_t field_len[MAX_FIELDS];
static int FIELDS = -1;
static int cut_order[MAX_FIELDS + 3];


/* slicebuild.relations as arrays: per host, (peer, None) for each peer it names, and
   (owner, key, item) at the peer for each item naming it, in the same order; ``slots``: its
   names by hash (index_names, of this table or of one with the same names) */
static int relate(table_t *t, const Py_ssize_t *slots, uint64_t mask) {
    Py_ssize_t n = t->hosts;
    Py_ssize_t *peer_of = PyMem_Malloc((size_t)(t->items + 1) * sizeof(Py_ssize_t));
    t->rel_start = PyMem_Calloc((size_t)n + 1, sizeof(Py_ssize_t));
    if (peer_of == NULL || t->rel_start == NULL) {
        PyMem_Free(peer_of); return -1;
    }
    /* each peer's hash first (the items are read in order), so that its slot and then the
       name there are fetched ahead of the look-ups (random places in 10^6 names) */
    for (Py_ssize_t j = 0; j < t->items; j++) {
        item_t *it = &t->item[j];
        peer_of[j] = it->peer.s < 0 ? -1
                     : (Py_ssize_t)(hash_name(t->b + it->peer.s, it->peer.e - it->peer.s) & mask);
    }
    for (Py_ssize_t j = 0; j < t->items; j++) {
        /* three stages ahead: the slot, then the name's span there, then its text (and the
           counts find's host adds to), each once the one before has arrived */
        if (j + AHEAD < t->items && peer_of[j + AHEAD] >= 0)
            __builtin_prefetch(&slots[peer_of[j + AHEAD]]);
        if (j + AHEAD / 2 < t->items && peer_of[j + AHEAD / 2] >= 0) {
            Py_ssize_t h = slots[peer_of[j + AHEAD / 2]];
            if (h >= 0) __builtin_prefetch(&t->name[h]);
        }
        if (j + AHEAD / 4 < t->items && peer_of[j + AHEAD / 4] >= 0) {
            Py_ssize_t h = slots[peer_of[j + AHEAD / 4]];
            if (h >= 0) {
                __builtin_prefetch(t->b + t->name[h].s);
                __builtin_prefetch(&t->rel_start[h + 1], 1);
            }
        }
        item_t *it = &t->item[j];
        Py_ssize_t q = it->peer.s < 0 ? -1 : find(t, slots, mask, t->b, it->peer.s, it->peer.e);
        if (q == it->owner) q = -1;
        peer_of[j] = q;
        if (q >= 0) { t->rel_start[it->owner + 1]++; t->rel_start[q + 1]++; }
    }
    for (Py_ssize_t h = 0; h < n; h++) t->rel_start[h + 1] += t->rel_start[h];
    Py_ssize_t total = t->rel_start[n];
    Py_ssize_t *fill = PyMem_Malloc((size_t)(n + 1) * sizeof(Py_ssize_t));
    t->rel = PyMem_Malloc((size_t)(total + 1) * sizeof(struct relation));
    if (fill == NULL || t->rel == NULL) {
        PyMem_Free(fill); PyMem_Free(peer_of); return -1;
    }
    memcpy(fill, t->rel_start, (size_t)(n + 1) * sizeof(Py_ssize_t));
    /* items are in owner order, each owner's lists in table key order: relations walks
       mirrors, receives, appmon; the order matters only within one peer's one list */
    for (Py_ssize_t j = 0; j < t->items; j++) {
        Py_ssize_t q = peer_of[j];
        if (q < 0) continue;
        item_t *it = &t->item[j];
        Py_ssize_t a = fill[it->owner]++;
        t->rel[a].peer = q; t->rel[a].key = K_NONE; t->rel[a].item = -1;
        Py_ssize_t c = fill[q]++;
        t->rel[c].peer = it->owner; t->rel[c].key = it->key; t->rel[c].item = j;
    }
    PyMem_Free(fill);
    PyMem_Free(peer_of);
    return 0;
}

/* what is being written: a bytes object grown as needed (views laid end to end: 10^6 bytes
   objects cost their allocation, page faults and later their frees), cut to its length at the
   end (finish) */
typedef struct { PyObject *bytes; char *out; Py_ssize_t len, cap; int failed; } sink;

static int open_sink(sink *s, Py_ssize_t cap) {
    s->bytes = PyBytes_FromStringAndSize(NULL, cap < 64 ? 64 : cap);
    s->out = s->bytes ? PyBytes_AS_STRING(s->bytes) : NULL;
    s->len = 0;
    s->cap = s->bytes ? PyBytes_GET_SIZE(s->bytes) : 0;
    s->failed = s->bytes == NULL;
    return s->failed ? -1 : 0;
}

static inline void put(sink *s, const char *data, Py_ssize_t len) {
    if (s->len + len > s->cap) {
        if (s->failed) return;
        Py_ssize_t cap = s->cap + s->cap / 2;
        if (cap < s->len + len) cap = s->len + len;
        if (_PyBytes_Resize(&s->bytes, cap) < 0) {  /* frees it and sets it NULL */
            PyErr_Clear();
            s->failed = 1;
            s->out = NULL;
            s->len = s->cap = 0;  /* every later put comes here and writes nothing */
            return;
        }
        s->out = PyBytes_AS_STRING(s->bytes);
        s->cap = cap;
    }
    copy_bytes(s->out + s->len, data, (size_t)len);
    s->len += len;
}

/* the bytes written (a new reference, the sink emptied), or NULL with MemoryError */
static PyObject *finish(sink *s) {
    if (s->failed || _PyBytes_Resize(&s->bytes, s->len) < 0) {
        Py_CLEAR(s->bytes);
        PyErr_NoMemory();
        return NULL;
    }
    PyObject *out = s->bytes;
    s->bytes = NULL;
    return out;
}

static inline void put_span(sink *s, const char *b, span x) { put(s, b + x.s, x.e - x.s); }

typedef struct { Py_ssize_t peer; int key; Py_ssize_t seq; Py_ssize_t item; } rel_t;

static inline int by_peer_key_seq(const void *x, const void *y) {
    const rel_t *a = x, *b = y;
    if (a->peer != b->peer) return a->peer < b->peer ? -1 : 1;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

static void put_list(sink *s, const table_t *t, const rel_t *r, Py_ssize_t from, Py_ssize_t to,
                     const char *key, int *first) {
    if (from == to) return;
    if (!*first) put(s, ",", 1);
    *first = 0;
    put(s, key, (Py_ssize_t)strlen(key));
    for (Py_ssize_t k = from; k < to; k++) {
        if (k > from) put(s, ",", 1);
        put_span(s, t->b, t->item[r[k].item].item);
    }
    put(s, "]", 1);
}

/* host ``h``'s table of plan ``t`` (slicebuild.view), sorted by name as orjson writes it;
   ``scratch`` holds at least its relations */
static void put_table(sink *s, const table_t *t, Py_ssize_t h, rel_t *scratch) {
    const char *b = t->b;
    Py_ssize_t from = t->rel_start[h], count = t->rel_start[h + 1] - from;
    put(s, "{", 1);
    if (count == 0) {
        put_span(s, b, t->name[h]); put(s, ":", 1); put_span(s, b, t->entry[h]);
        put(s, "}", 1);
        return;
    }
    for (Py_ssize_t k = 0; k < count; k++) {
        scratch[k].peer = t->rel[from + k].peer;
        scratch[k].key = t->rel[from + k].key;
        scratch[k].item = t->rel[from + k].item;
        scratch[k].seq = k;
    }
    if (count > 16) {
        qsort(scratch, (size_t)count, sizeof(rel_t), by_peer_key_seq);
    } else {  /* most views: a few relations, sorted in place without a call per comparison */
        for (Py_ssize_t i = 1; i < count; i++) {
            rel_t x = scratch[i];
            Py_ssize_t j = i;
            for (; j > 0 && by_peer_key_seq(&scratch[j - 1], &x) > 0; j--)
                scratch[j] = scratch[j - 1];
            scratch[j] = x;
        }
    }
    int own = 0;  /* written yet */
    Py_ssize_t k = 0;
    int first_member = 1;
    while (k < count || !own) {
        Py_ssize_t m = k < count ? scratch[k].peer : -1;
        if (!own && (m < 0 || h < m)) {
            if (!first_member) put(s, ",", 1);
            first_member = 0;
            put_span(s, b, t->name[h]); put(s, ":", 1); put_span(s, b, t->entry[h]);
            own = 1;
            continue;
        }
        Py_ssize_t end = k;
        while (end < count && scratch[end].peer == m) end++;
        /* the peer's cut, its keys sorted (cut_order); lists only with items about h */
        Py_ssize_t bounds[5];  /* key K starts at bounds[K] */
        Py_ssize_t q = k;
        for (int key = K_NONE; key <= K_RECEIVES; key++) {
            while (q < end && scratch[q].key < key) q++;
            bounds[key] = q;
        }
        bounds[4] = end;
        if (!first_member) put(s, ",", 1);
        first_member = 0;
        put_span(s, b, t->name[m]);
        put(s, ":{", 2);
        int first = 1;
        const span *f = t->field + m * FIELDS;
        static const char *const OPEN[] = {"", "\"appmon\":[", "\"mirrors\":[",
                                           "\"receives\":["};
        for (int o = 0; o < FIELDS + 3; o++) {
            int code = cut_order[o];
            if (code < FIELD_CODE) {  /* a list: K_APPMON .. K_RECEIVES */
                put_list(s, t, scratch, bounds[code], bounds[code + 1], OPEN[code], &first);
                continue;
            }
            const span v = f[code - FIELD_CODE];
            if (v.s < 0) continue;
            if (!first) put(s, ",", 1);
            first = 0;
            put_span(s, b, v);
        }
        put(s, "}", 1);
        k = end;
    }
    put(s, "}", 1);
}

/* Views visit their peers in random order: 10^6 views miss the cache several times each. So
   the records of the peers of the view AHEAD places on are fetched ahead, and their text half
   as far ahead (once the records are in), while this view is written. */
static void fetch_ahead(const table_t *t, Py_ssize_t h, int text) {
    if (h < 0) return;
    for (Py_ssize_t r = t->rel_start[h]; r < t->rel_start[h + 1]; r++) {
        Py_ssize_t m = t->rel[r].peer, j = t->rel[r].item;
        if (!text) {
            __builtin_prefetch(&t->name[m]);
            __builtin_prefetch(&t->field[m * FIELDS]);
            __builtin_prefetch(&t->field[m * FIELDS + FIELDS - 1]);
            if (j >= 0) __builtin_prefetch(&t->item[j]);
            continue;
        }
        const span *f = &t->field[m * FIELDS];
        __builtin_prefetch(t->b + t->name[m].s);
        for (int k = 0; k < FIELDS; k++)
            if (f[k].s >= 0) __builtin_prefetch(t->b + f[k].s);
        if (j >= 0) __builtin_prefetch(t->b + t->item[j].item.s);
    }
}

/* An upper bound of the views' bytes, in passes over the hosts and items in order: one buffer
   of that size is written without a copy (10^6 views: 2.0 times a plan's table, 1.6 times a
   plan set's two). Each host's own member, and its peers' cuts (name, the fields views keep,
   braces, a comma): host m's cut is in as many views as m has relations (relate: each item
   puts its owner's cut into its peer's view and the peer's into the owner's); each item in one
   view, with at most its list's key and brackets and a comma; per view, its frame, its name
   and per table a comma or "{}". ``name_room``: the names' bytes (quoted: a newline each). */
static Py_ssize_t view_room(const table_t *t, Py_ssize_t nt, Py_ssize_t *name_room) {
    Py_ssize_t room = 0;
    for (Py_ssize_t k = 0; k < nt; k++) {
        const table_t *x = &t[k];
        for (Py_ssize_t h = 0; h < x->hosts; h++) {
            Py_ssize_t name = x->name[h].e - x->name[h].s, cut = name + 4;
            const span *f = x->field + h * FIELDS;
            for (int q = 0; q < FIELDS; q++)
                if (f[q].s >= 0) cut += f[q].e - f[q].s + 1;
            room += name + (x->entry[h].e - x->entry[h].s) + 4
                    + (x->rel_start[h + 1] - x->rel_start[h]) * cut
                    + name + 20 + 3 * nt;
            *name_room += name;
        }
        for (Py_ssize_t j = 0; j < x->items; j++)
            room += x->item[j].item.e - x->item[j].item.s + 16;
    }
    return room;
}

/* whether two tables name the same hosts (in the same order: both are sorted) */
static int same_names(const table_t *x, const table_t *y) {
    if (x->hosts != y->hosts) return 0;
    for (Py_ssize_t h = 0; h < x->hosts; h++)
        if (compare_names(x, h, y, h) != 0) return 0;
    return 1;
}

static void free_table(table_t *t) {
    free_table_spans(t);
    PyMem_Free(t->rel_start); PyMem_Free(t->rel);
}

static PyObject *views(PyObject *self, PyObject *arg) {
    (void)self;
    if (FIELDS < 0) Py_RETURN_NONE;  /* not configured: the Python builder */
    if (!PyList_Check(arg)) { PyErr_SetString(PyExc_TypeError, "a list of bytes"); return NULL; }
    Py_ssize_t nt = PyList_GET_SIZE(arg);
    if (nt < 1 || nt > 64) Py_RETURN_NONE;
    table_t *t = PyMem_Calloc((size_t)nt, sizeof(table_t));
    Py_ssize_t *at = PyMem_Calloc((size_t)nt, sizeof(Py_ssize_t));
    Py_ssize_t **index = PyMem_Calloc((size_t)nt, sizeof(Py_ssize_t *));
    PyObject *name_at = NULL, *view_at = NULL, *hashes = NULL, *result = NULL;
    rel_t *scratch = NULL;
    Py_ssize_t *slots = NULL;
    uint64_t mask = 0;
    sink names = {NULL, NULL, 0, 0, 0}, out = {NULL, NULL, 0, 0, 0};
    if (t == NULL || at == NULL || index == NULL) { PyErr_NoMemory(); goto done; }
    Py_ssize_t most = 1;
    for (Py_ssize_t k = 0; k < nt; k++) {
        PyObject *data = PyList_GET_ITEM(arg, k);
        if (!PyBytes_Check(data)) { PyErr_SetString(PyExc_TypeError, "a list of bytes"); goto done; }
        t[k].b = PyBytes_AS_STRING(data);
        t[k].n = PyBytes_GET_SIZE(data);
        t[k].fields = FIELDS;
        t[k].field_name = field_ptr;
        t[k].field_len = field_len;
        int ok = read_table(&t[k]);
        if (ok < 0) { PyErr_NoMemory(); goto done; }
        if (ok == 0) { result = Py_None; Py_INCREF(result); goto done; }
    }
    /* a plan set's phases name the same hosts (transition.plan_set): their names are indexed
       once and need no merge */
    int same = 1;
    for (Py_ssize_t k = 1; k < nt && same; k++) same = same_names(&t[0], &t[k]);
    for (Py_ssize_t k = 0; k < nt; k++) {
        if (slots == NULL || !same) {
            PyMem_Free(slots);
            slots = index_names(&t[k], &mask);
            if (slots == NULL) { PyErr_NoMemory(); goto done; }
        }
        if (relate(&t[k], slots, mask) < 0) { PyErr_NoMemory(); goto done; }
        for (Py_ssize_t h = 0; h < t[k].hosts; h++) {
            Py_ssize_t c = t[k].rel_start[h + 1] - t[k].rel_start[h];
            if (c > most) most = c;
        }
    }
    /* the union of the names, merged; index[k][u]: host u's index in table k, or -1 */
    Py_ssize_t cap = 0;
    for (Py_ssize_t k = 0; k < (same ? 1 : nt); k++) cap += t[k].hosts;
    for (Py_ssize_t k = 0; k < nt; k++) {
        index[k] = PyMem_Malloc((size_t)(cap + 1) * sizeof(Py_ssize_t));
        if (index[k] == NULL) { PyErr_NoMemory(); goto done; }
    }
    Py_ssize_t u = 0;
    if (same) {  /* host u is host u of every table */
        for (; u < cap; u++)
            for (Py_ssize_t k = 0; k < nt; k++) index[k][u] = u;
    } else {
        for (;;) {
            Py_ssize_t least = -1;
            for (Py_ssize_t k = 0; k < nt; k++)
                if (at[k] < t[k].hosts &&
                    (least < 0 || compare_names(&t[k], at[k], &t[least], at[least]) < 0))
                    least = k;
            if (least < 0) break;
            Py_ssize_t pick = at[least];
            for (Py_ssize_t k = 0; k < nt; k++) {
                if (at[k] < t[k].hosts && compare_names(&t[k], at[k], &t[least], pick) == 0)
                    index[k][u] = at[k]++;
                else
                    index[k][u] = -1;
            }
            u++;
        }
    }
    Py_ssize_t count = u;
    Py_ssize_t name_room = 0, room = view_room(t, nt, &name_room);
    scratch = PyMem_Malloc((size_t)most * sizeof(rel_t));
    name_at = PyBytes_FromStringAndSize(NULL, (count + 1) * (Py_ssize_t)sizeof(int64_t));
    view_at = PyBytes_FromStringAndSize(NULL, (count + 1) * (Py_ssize_t)sizeof(int64_t));
    hashes = PyBytes_FromStringAndSize(NULL, count * SHA256_DIGEST_LENGTH);
    if (scratch == NULL || name_at == NULL || view_at == NULL || hashes == NULL ||
        open_sink(&names, name_room) < 0 || open_sink(&out, room) < 0)
        { PyErr_NoMemory(); goto done; }
    unsigned char *digest = (unsigned char *)PyBytes_AS_STRING(hashes);
    int64_t *name_offset = (int64_t *)PyBytes_AS_STRING(name_at);
    int64_t *view_offset = (int64_t *)PyBytes_AS_STRING(view_at);
    unsigned char high = 0;  /* any byte of a name >= 0x80 */
    for (u = 0; u < count; u++) {
        const table_t *named = NULL;
        Py_ssize_t at_named = -1;
        for (Py_ssize_t k = 0; k < nt && named == NULL; k++)
            if (index[k][u] >= 0) { named = &t[k]; at_named = index[k][u]; }
        span nm = named->name[at_named];
        name_offset[u] = names.len;
        put(&names, named->b + nm.s + 1, nm.e - nm.s - 2);
        put(&names, "\n", 1);
        for (Py_ssize_t j = nm.s + 1; j < nm.e - 1; j++) high |= (unsigned char)named->b[j];
        for (Py_ssize_t k = 0; k < nt; k++) {
            if (u + AHEAD < count) fetch_ahead(&t[k], index[k][u + AHEAD], 0);
            if (u + AHEAD / 2 < count) fetch_ahead(&t[k], index[k][u + AHEAD / 2], 1);
        }
        Py_ssize_t start = out.len;
        view_offset[u] = start;
        put(&out, "{\"hosts\":[", 10);
        for (Py_ssize_t k = 0; k < nt; k++) {
            if (k) put(&out, ",", 1);
            if (index[k][u] < 0) put(&out, "{}", 2);
            else put_table(&out, &t[k], index[k][u], scratch);
        }
        put(&out, "],\"name\":", 9);
        put_span(&out, named->b, nm);
        put(&out, "}", 1);
        if (out.failed || names.failed) { PyErr_NoMemory(); goto done; }
        SHA256_CTX ctx;
        SHA256_Init(&ctx);
        SHA256_Update(&ctx, "\0", 1);
        SHA256_Update(&ctx, out.out + start, (size_t)(out.len - start));
        SHA256_Final(digest + u * SHA256_DIGEST_LENGTH, &ctx);
    }
    name_offset[count] = names.len;
    view_offset[count] = out.len;
    if (high & 0x80) {  /* not ASCII: UTF-8 (orjson never writes else), or Python's to judge */
        PyObject *text = PyUnicode_DecodeUTF8(names.out, names.len, "strict");
        if (text == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) goto done;
            PyErr_Clear();
            result = Py_None;
            Py_INCREF(result);
            goto done;
        }
        Py_DECREF(text);
    }
    PyObject *name_bytes = finish(&names);
    PyObject *view_bytes = name_bytes != NULL ? finish(&out) : NULL;
    if (view_bytes != NULL)
        result = PyTuple_Pack(5, name_bytes, name_at, view_bytes, view_at, hashes);
    Py_XDECREF(name_bytes); Py_XDECREF(view_bytes);
done:
    Py_XDECREF(name_at); Py_XDECREF(view_at); Py_XDECREF(hashes);
    Py_XDECREF(names.bytes); Py_XDECREF(out.bytes);
    PyMem_Free(scratch);
    PyMem_Free(slots);
    if (t != NULL) for (Py_ssize_t k = 0; k < nt; k++) free_table(&t[k]);
    if (index != NULL) for (Py_ssize_t k = 0; k < nt; k++) PyMem_Free(index[k]);
    PyMem_Free(t); PyMem_Free(at); PyMem_Free(index);
    return result;
}

/* find(names, offsets, name) -> index or -1: ``name`` (UTF-8 bytes) among names laid end to
   end, each followed by a newline, sorted in Python's str order (as bytes: UTF-8 keeps code
   point order), item k at offsets[k] (int64); a bisection without a Python call per step */
static PyObject *find_name(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer names, offsets;
    const char *key;
    Py_ssize_t key_len;
    if (!PyArg_ParseTuple(args, "y*y*y#", &names, &offsets, &key, &key_len)) return NULL;
    const char *b = names.buf;
    const int64_t *at = offsets.buf;
    Py_ssize_t count = offsets.len / (Py_ssize_t)sizeof(int64_t) - 1, lo = 0, hi = count;
    Py_ssize_t found = -1;
    if (count >= 0 && at[count] <= names.len) {
        while (lo < hi) {
            Py_ssize_t mid = lo + (hi - lo) / 2;
            Py_ssize_t len = (Py_ssize_t)(at[mid + 1] - at[mid]) - 1;
            if (at[mid] < 0 || len < 0 || at[mid + 1] > names.len) {  /* not views()'s */
                PyBuffer_Release(&names);
                PyBuffer_Release(&offsets);
                PyErr_SetString(PyExc_ValueError, "offsets outside the names");
                return NULL;
            }
            int c = memcmp(b + at[mid], key, (size_t)(len < key_len ? len : key_len));
            if (c == 0) c = len < key_len ? -1 : len > key_len;
            if (c == 0) { found = mid; break; }
            if (c < 0) lo = mid + 1; else hi = mid;
        }
    }
    PyBuffer_Release(&names);
    PyBuffer_Release(&offsets);
    return PyLong_FromSsize_t(found);
}

static PyObject *parents(PyObject *self, PyObject *arg) {
    (void)self;
    if (!PyBytes_Check(arg)) { PyErr_SetString(PyExc_TypeError, "bytes"); return NULL; }
    const unsigned char *level = (const unsigned char *)PyBytes_AS_STRING(arg);
    Py_ssize_t count = PyBytes_GET_SIZE(arg) / SHA256_DIGEST_LENGTH;
    Py_ssize_t up = (count + 1) / 2;
    PyObject *out = PyBytes_FromStringAndSize(NULL, up * SHA256_DIGEST_LENGTH);
    if (out == NULL) return NULL;
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
    for (Py_ssize_t k = 0; k + 1 < count; k += 2) {
        SHA256_CTX ctx;
        SHA256_Init(&ctx);
        SHA256_Update(&ctx, "\1", 1);
        SHA256_Update(&ctx, level + k * SHA256_DIGEST_LENGTH, 2 * SHA256_DIGEST_LENGTH);
        SHA256_Final(o + (k / 2) * SHA256_DIGEST_LENGTH, &ctx);
    }
    if (count % 2)
        memcpy(o + (up - 1) * SHA256_DIGEST_LENGTH, level + (count - 1) * SHA256_DIGEST_LENGTH,
               SHA256_DIGEST_LENGTH);
    return out;
}

static int by_name(const void *x, const void *y) {
    int a = *(const int *)x, c = *(const int *)y;
    const char *na = a < FIELD_CODE ? LIST_NAME[a] : field_name[a - FIELD_CODE];
    const char *nc = c < FIELD_CODE ? LIST_NAME[c] : field_name[c - FIELD_CODE];
    return strcmp(na, nc);
}

static PyObject *configure(PyObject *self, PyObject *arg) {
    (void)self;
    if (!PyTuple_Check(arg) || PyTuple_GET_SIZE(arg) > MAX_FIELDS) {
        PyErr_Format(PyExc_ValueError, "a tuple of at most %d field names", MAX_FIELDS);
        return NULL;
    }
    int count = (int)PyTuple_GET_SIZE(arg);
    for (int j = 0; j < count; j++) {
        Py_ssize_t len;
        const char *name = PyUnicode_Check(PyTuple_GET_ITEM(arg, j))
            ? PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(arg, j), &len) : NULL;
        if (name == NULL || len >= MAX_FIELD_NAME || len < 1 || strchr(name, '"') || strchr(name, '\\')) {
            PyErr_Clear();
            PyErr_SetString(PyExc_ValueError, "field names: short plain strings");
            return NULL;
        }
        memcpy(field_name[j], name, (size_t)len + 1);
        field_ptr[j] = field_name[j];
        field_len[j] = len;
    }
    FIELDS = count;
    for (int k = K_APPMON; k <= K_RECEIVES; k++) cut_order[k - K_APPMON] = k;
    for (int j = 0; j < count; j++) cut_order[3 + j] = FIELD_CODE + j;
    qsort(cut_order, (size_t)count + 3, sizeof(int), by_name);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_O, "Set the peer fields views keep (slicebuild.PEER_FIELDS)."},
    {"views", views, METH_O, "Every host's view and leaf hash, or None (not the fast case)."},
    {"find", find_name, METH_VARARGS, "A name's index among names laid end to end, or -1."},
    {"parents", parents, METH_O, "The Merkle level above a level of 32-byte hashes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_slices",
                                    "Plan slices' fast path (slicebuild).", -1, methods};

PyMODINIT_FUNC PyInit__slices(void) { return PyModule_Create(&module); }
