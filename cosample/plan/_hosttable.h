/* A plan's host table read in place: the reader the compiled fast paths share (_slices.c, the
 * views; _transition.c, a two-phase plan set's first phase).
 *
 * The table is compact JSON with sorted keys, as orjson writes it (OPT_SORT_KEYS) and the
 * planner's HostTable holds it. read_table records, without copying anything, each host's name
 * and entry, the members of the entry named in the table's field list (``fields``), and every
 * item of its ``mirrors``/``receives``/``appmon`` lists with its peer and its ``rate`` and
 * ``pps`` values. Anything else -- a backslash anywhere (escaped strings do not compare as
 * their bytes), names not strictly increasing, white space, nesting deeper than MAX_DEPTH, a
 * list that is not a list of objects -- is "not the fast case" (0), and the caller then leaves
 * the work to Python, whose behaviour (or error) it matches by construction.
 *
 * Every function is static: each extension that includes this header has its own copy. An
 * includer may add members to table_t by defining TABLE_EXTRA before the #include.
 */
#ifndef COSAMPLE_HOSTTABLE_H
#define COSAMPLE_HOSTTABLE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define HT_FN static __attribute__((unused))

#define MAX_DEPTH 64
enum { K_NONE = 0, K_APPMON = 1, K_MIRRORS = 2, K_RECEIVES = 3 };
#define MAX_FIELDS 16
#define FIELD_CODE 4  /* classify's code of field j: FIELD_CODE + j, apart from K_* */

#ifndef TABLE_EXTRA
#define TABLE_EXTRA
#endif

typedef struct { Py_ssize_t s, e; } span;  /* [s, e) in the table */

typedef struct {
    Py_ssize_t owner;   /* host index */
    int key;            /* K_* */
    span item;          /* the item object */
    span peer;          /* the peer's name without quotes; s < 0: none (absent, null, a number) */
    span rate, pps;     /* the values of "rate" and "pps"; s < 0: absent */
} item_t;

typedef struct {
    const char *b;
    Py_ssize_t n;
    /* the members recorded per host (set before read_table): names without quotes */
    int fields;
    const char *const *field_name;
    const Py_ssize_t *field_len;
    Py_ssize_t hosts, cap_hosts;
    span *name;         /* quoted */
    span *entry;        /* the entry object */
    span *field;        /* ``fields`` per host: '"key":value'; s < 0: absent */
    Py_ssize_t items, cap_items;
    item_t *item;
    Py_ssize_t list_keys[4];  /* hosts whose entry has the list key K_* (any value) */
    unsigned char *lists_of;  /* per host: bit 1 << K_* the list key is there, 16 << K_* null */
    TABLE_EXTRA
} table_t;

/* memcmp's order of ``len`` bytes (<0, 0, >0), inline: the table's keys and names are short,
   and a call per comparison (10^7 of them per table) cost more than the comparing */
static inline int bytes_order(const char *a, const char *c, size_t len) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (; len >= 8; a += 8, c += 8, len -= 8) {
        uint64_t x, y;
        memcpy(&x, a, 8);
        memcpy(&y, c, 8);
        if (x != y) return __builtin_bswap64(x) < __builtin_bswap64(y) ? -1 : 1;
    }
#endif
    for (; len; a++, c++, len--)
        if (*a != *c) return (unsigned char)*a < (unsigned char)*c ? -1 : 1;
    return 0;
}

/* memcpy of ``len`` bytes, inline up to 32 (two loads and two stores that may overlap): the
   writers copy pieces of a table (names, keys, values) mostly that short, a call each */
static inline void copy_bytes(char *to, const char *from, size_t len) {
    if (len > 32) { memcpy(to, from, len); return; }
    if (len >= 16) {
        char head[16], tail[16];
        memcpy(head, from, 16); memcpy(tail, from + len - 16, 16);
        memcpy(to, head, 16); memcpy(to + len - 16, tail, 16);
    } else if (len >= 8) {
        uint64_t head, tail;
        memcpy(&head, from, 8); memcpy(&tail, from + len - 8, 8);
        memcpy(to, &head, 8); memcpy(to + len - 8, &tail, 8);
    } else if (len >= 4) {
        uint32_t head, tail;
        memcpy(&head, from, 4); memcpy(&tail, from + len - 4, 4);
        memcpy(to, &head, 4); memcpy(to + len - 4, &tail, 4);
    } else {
        for (size_t k = 0; k < len; k++) to[k] = from[k];
    }
}

/* two byte strings in Python's str order (for UTF-8: code point order) */
static inline int compare_bytes(const char *a, Py_ssize_t la, const char *c, Py_ssize_t lc) {
    int r = bytes_order(a, c, (size_t)(la < lc ? la : lc));
    return r ? r : la < lc ? -1 : la > lc;
}

HT_FN int skip_value(const char *b, Py_ssize_t n, Py_ssize_t *p, int depth);

/* Strings and numbers are scanned 16 bytes at a time where the CPU has SSE2 (every x86-64):
   a plan's table is mostly short keys, names and numbers, and a byte loop spent a quarter of
   the compiled transition's time in them. */
HT_FN int skip_string(const char *b, Py_ssize_t n, Py_ssize_t *p) {
    if (*p >= n || b[*p] != '"') return -1;
    Py_ssize_t q = *p + 1;
#ifdef __SSE2__
    const __m128i quote = _mm_set1_epi8('"');
    for (; q + 16 <= n; q += 16) {  /* no backslash in a table read (read_table): the next
                                       quote ends the string */
        __m128i chunk = _mm_loadu_si128((const __m128i *)(b + q));
        unsigned hits = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(chunk, quote));
        if (hits) { *p = q + __builtin_ctz(hits) + 1; return 0; }
    }
#endif
    if (q >= n) return -1;
    const char *end = memchr(b + q, '"', (size_t)(n - q));
    if (end == NULL) return -1;
    *p = end - b + 1;
    return 0;
}

HT_FN int skip_container(const char *b, Py_ssize_t n, Py_ssize_t *p, int depth) {
    char open = b[*p], close = open == '{' ? '}' : ']';
    if (depth > MAX_DEPTH) return -1;
    (*p)++;
    if (*p < n && b[*p] == close) { (*p)++; return 0; }
    for (;;) {
        if (open == '{') {
            if (skip_string(b, n, p) < 0 || *p >= n || b[*p] != ':') return -1;
            (*p)++;
        }
        if (skip_value(b, n, p, depth + 1) < 0 || *p >= n) return -1;
        if (b[*p] == ',') { (*p)++; continue; }
        if (b[*p] == close) { (*p)++; return 0; }
        return -1;
    }
}

HT_FN int skip_value(const char *b, Py_ssize_t n, Py_ssize_t *p, int depth) {
    if (*p >= n) return -1;
    char c = b[*p];
    if (c == '"') return skip_string(b, n, p);
    if (c == '{' || c == '[') return skip_container(b, n, p, depth);
    Py_ssize_t start = *p;
#ifdef __SSE2__
    /* a number, true, false or null: up to the first , } or ], with none of '"{[: ' or a
       newline before it */
    for (; *p + 16 <= n; *p += 16) {
        __m128i c16 = _mm_loadu_si128((const __m128i *)(b + *p));
#define HT_IS(ch) _mm_cmpeq_epi8(c16, _mm_set1_epi8(ch))
        unsigned stops = (unsigned)_mm_movemask_epi8(
            _mm_or_si128(_mm_or_si128(HT_IS(','), HT_IS('}')), HT_IS(']')));
        unsigned bad = (unsigned)_mm_movemask_epi8(_mm_or_si128(
            _mm_or_si128(_mm_or_si128(HT_IS('"'), HT_IS('{')), _mm_or_si128(HT_IS('['), HT_IS(':'))),
            _mm_or_si128(HT_IS(' '), HT_IS('\n'))));
#undef HT_IS
        if (stops) {
            unsigned at = (unsigned)__builtin_ctz(stops);
            if (bad & ((1u << at) - 1)) return -1;
            *p += at;
            return *p > start ? 0 : -1;
        }
        if (bad) return -1;
    }
#endif
    while (*p < n && b[*p] != ',' && b[*p] != '}' && b[*p] != ']') {
        char d = b[*p];
        if (d == '"' || d == '{' || d == '[' || d == ':' || d == ' ' || d == '\n') return -1;
        (*p)++;
    }
    return *p > start ? 0 : -1;
}

/* one member of an object the reader has checked: its quoted key's span in ``key``, where its
   value starts in ``value``, ``*p`` after the value; -1: not JSON the reader takes */
HT_FN int member(const char *b, Py_ssize_t n, Py_ssize_t *p, int depth, span *key,
                 Py_ssize_t *value) {
    key->s = *p;
    if (skip_string(b, n, p) < 0 || *p >= n || b[*p] != ':') return -1;
    key->e = *p;
    *value = ++*p;
    return skip_value(b, n, p, depth);
}

/* whether a quoted key is ``word`` */
static inline int key_is(const char *b, span key, const char *word) {
    size_t len = strlen(word);
    return (size_t)(key.e - key.s) == len + 2 && bytes_order(b + key.s + 1, word, len) == 0;
}

HT_FN int grow(void **array, Py_ssize_t *cap, Py_ssize_t need, size_t size) {
    if (need <= *cap) return 0;
    Py_ssize_t cap2 = *cap ? *cap * 2 : 1024;
    while (cap2 < need) cap2 *= 2;
    void *bigger = PyMem_Realloc(*array, (size_t)cap2 * size);
    if (bigger == NULL) return -1;
    *array = bigger;
    *cap = cap2;
    return 0;
}

/* one list (mirrors, receives, appmon) of host ``owner``; 1: fine, 0: not the fast case */
HT_FN int read_list(table_t *t, Py_ssize_t *p, Py_ssize_t owner, int key) {
    const char *b = t->b;
    Py_ssize_t n = t->n;
    const char *other = key == K_RECEIVES ? "from" : "to";
    if (*p >= n || b[*p] != '[') return 0;
    (*p)++;
    if (*p < n && b[*p] == ']') { (*p)++; return 1; }
    for (;;) {
        if (*p >= n || b[*p] != '{') return 0;  /* an item that is not an object */
        item_t it = {owner, key, {*p, 0}, {-1, -1}, {-1, -1}, {-1, -1}};
        (*p)++;
        if (*p < n && b[*p] == '}') {
            (*p)++;
        } else {
            for (;;) {
                span k = {*p, 0};
                if (skip_string(b, n, p) < 0 || *p >= n || b[*p] != ':') return 0;
                k.e = *p;
                (*p)++;
                Py_ssize_t v = *p;
                if (skip_value(b, n, p, 4) < 0 || *p >= n) return 0;
                if (key_is(b, k, other)) {
                    if (b[v] == '"') { it.peer.s = v + 1; it.peer.e = *p - 1; }
                    else if (b[v] == '{' || b[v] == '[') return 0;  /* unhashable in Python */
                    else { it.peer.s = -1; }  /* null, a number: no such host */
                } else if (key_is(b, k, "rate")) {
                    it.rate.s = v; it.rate.e = *p;
                } else if (key_is(b, k, "pps")) {
                    it.pps.s = v; it.pps.e = *p;
                }
                if (b[*p] == ',') { (*p)++; continue; }
                if (b[*p] == '}') { (*p)++; break; }
                return 0;
            }
        }
        it.item.e = *p;
        if (grow((void **)&t->item, &t->cap_items, t->items + 1, sizeof(item_t)) < 0) return -1;
        t->item[t->items++] = it;
        if (*p >= n) return 0;
        if (b[*p] == ',') { (*p)++; continue; }
        if (b[*p] == ']') { (*p)++; return 1; }
        return 0;
    }
}

static const char *const LIST_NAME[] = {"", "appmon", "mirrors", "receives"};
static const Py_ssize_t LIST_NAME_LEN[] = {0, 6, 7, 8};

/* what an entry's key is: K_* for a list, FIELD_CODE + index for a recorded field, -1 for
   neither; by its length and first byte first */
HT_FN int classify(const table_t *t, span key) {
    const char *b = t->b;
    Py_ssize_t len = key.e - key.s - 2;
    const char *word = b + key.s + 1;
    for (int k = K_APPMON; k <= K_RECEIVES; k++)
        if (LIST_NAME_LEN[k] == len && word[0] == LIST_NAME[k][0] &&
            bytes_order(word, LIST_NAME[k], (size_t)len) == 0)
            return k;
    for (int j = 0; j < t->fields; j++)
        if (t->field_len[j] == len && word[0] == t->field_name[j][0] &&
            bytes_order(word, t->field_name[j], (size_t)len) == 0)
            return FIELD_CODE + j;
    return -1;
}

/* 1: read, 0: not the fast case, -1: out of memory */
HT_FN int read_table(table_t *t) {
    const char *b = t->b;
    Py_ssize_t n = t->n, p = 0;
    int fields = t->fields;
    if (fields < 0 || fields > MAX_FIELDS) return 0;
    if (memchr(b, '\\', (size_t)n) != NULL) return 0;
    if (n < 2 || b[0] != '{') return 0;
    p = 1;
    if (b[p] == '}') return p + 1 == n;
    for (;;) {
        Py_ssize_t h = t->hosts;
        if (h == t->cap_hosts) {  /* names, entries and fields grow together */
            Py_ssize_t cap = t->cap_hosts ? 2 * t->cap_hosts : 1024;
            span *name = PyMem_Realloc(t->name, (size_t)cap * sizeof(span));
            if (name == NULL) return -1;
            t->name = name;
            span *entry = PyMem_Realloc(t->entry, (size_t)cap * sizeof(span));
            if (entry == NULL) return -1;
            t->entry = entry;
            span *field = PyMem_Realloc(t->field, (size_t)cap * (fields ? fields : 1) * sizeof(span));
            if (field == NULL) return -1;
            t->field = field;
            unsigned char *lists_of = PyMem_Realloc(t->lists_of, (size_t)cap);
            if (lists_of == NULL) return -1;
            t->lists_of = lists_of;
            t->cap_hosts = cap;
        }
        span nm = {p, 0};
        if (skip_string(b, n, &p) < 0 || p >= n || b[p] != ':') return 0;
        nm.e = p;
        t->name[h] = nm;
        p++;
        if (p >= n || b[p] != '{') return 0;  /* an entry that is not an object */
        span en = {p, 0};
        span f[MAX_FIELDS];
        unsigned seen = 0, nulls = 0;
        for (int k = 0; k < fields; k++) f[k].s = f[k].e = -1;
        p++;
        if (p < n && b[p] == '}') {
            p++;
        } else {
            for (;;) {
                span k = {p, 0};
                if (skip_string(b, n, &p) < 0 || p >= n || b[p] != ':') return 0;
                k.e = p;
                p++;
                int code = classify(t, k);
                if (code >= 0) {  /* a key twice: Python's dict keeps the last; leave it to it */
                    if (seen & (1u << code)) return 0;
                    seen |= 1u << code;
                }
                int list = code >= K_APPMON && code <= K_RECEIVES ? code : K_NONE;
                if (list != K_NONE) t->list_keys[list]++;
                if (list != K_NONE && p < n && b[p] == '[') {
                    int ok = read_list(t, &p, h, list);
                    if (ok <= 0) return ok;
                } else if (list != K_NONE && p + 4 <= n && memcmp(b + p, "null", 4) == 0) {
                    p += 4;  /* falsy: read as no items */
                    nulls |= 16u << list;
                } else if (list != K_NONE) {
                    return 0;  /* not a list: Python would not read it as one */
                } else {
                    if (skip_value(b, n, &p, 3) < 0) return 0;
                    if (code >= FIELD_CODE) { f[code - FIELD_CODE].s = k.s; f[code - FIELD_CODE].e = p; }
                }
                if (p >= n) return 0;
                if (b[p] == ',') { p++; continue; }
                if (b[p] == '}') { p++; break; }
                return 0;
            }
        }
        en.e = p;
        t->entry[h] = en;
        memcpy(t->field + h * fields, f, (size_t)fields * sizeof(span));
        t->lists_of[h] = (unsigned char)((seen & 0xE) | nulls);
        t->hosts = h + 1;
        if (h > 0) {  /* strictly increasing names (contents, without quotes) */
            span a = t->name[h - 1];
            if (compare_bytes(b + a.s + 1, a.e - a.s - 2, b + nm.s + 1, nm.e - nm.s - 2) >= 0)
                return 0;
        }
        if (p >= n) return 0;
        if (b[p] == ',') { p++; continue; }
        if (b[p] == '}') { p++; break; }
        return 0;
    }
    return p == n;
}

HT_FN void free_table_spans(table_t *t) {
    PyMem_Free(t->name); PyMem_Free(t->entry); PyMem_Free(t->field); PyMem_Free(t->item);
    PyMem_Free(t->lists_of);
    t->lists_of = NULL;
    t->name = t->entry = t->field = NULL;
    t->item = NULL;
}

static inline uint64_t hash_name(const char *p, Py_ssize_t len) {  /* FNV-1a */
    uint64_t h = 1469598103934665603ULL;
    for (Py_ssize_t k = 0; k < len; k++) h = (h ^ (unsigned char)p[k]) * 1099511628211ULL;
    return h ^ (h >> 29);
}

/* the names by hash (open addressing, at most half full): one or two reads per look-up, where
   a binary search over 10^6 names misses the cache twenty times */
HT_FN Py_ssize_t *index_names(const table_t *t, uint64_t *mask) {
    uint64_t size = 2;
    while (size < 2 * (uint64_t)t->hosts) size *= 2;
    Py_ssize_t *slots = PyMem_Malloc(size * sizeof(Py_ssize_t));
    if (slots == NULL) return NULL;
    for (uint64_t k = 0; k < size; k++) slots[k] = -1;
    for (Py_ssize_t h = 0; h < t->hosts; h++) {
        span a = t->name[h];
        uint64_t k = hash_name(t->b + a.s + 1, a.e - a.s - 2) & (size - 1);
        while (slots[k] >= 0) k = (k + 1) & (size - 1);
        slots[k] = h;
    }
    *mask = size - 1;
    return slots;
}

/* the index of the host named b[s:e] (no quotes) in ``t``, or -1 */
HT_FN Py_ssize_t find(const table_t *t, const Py_ssize_t *slots, uint64_t mask, const char *b,
                     Py_ssize_t s, Py_ssize_t e) {
    Py_ssize_t lb = e - s;
    for (uint64_t k = hash_name(b + s, lb) & mask;; k = (k + 1) & mask) {
        Py_ssize_t h = slots[k];
        if (h < 0) return -1;
        span a = t->name[h];
        if (a.e - a.s - 2 == lb && bytes_order(t->b + a.s + 1, b + s, (size_t)lb) == 0) return h;
    }
}

/* host names in order (as Python compares str: bytes_order of the contents): <0, 0, >0 */
HT_FN int compare_names(const table_t *x, Py_ssize_t i, const table_t *y, Py_ssize_t j) {
    span a = x->name[i], c = y->name[j];
    return compare_bytes(x->b + a.s + 1, a.e - a.s - 2, y->b + c.s + 1, c.e - c.s - 2);
}

#endif
