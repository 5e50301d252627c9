/* JSON numbers as the compiled paths read and write them (static functions; _transition.c).
 *
 * Reading: a number's kind (JSON's grammar: float, integer, neither), a float's double as
 * Python's float() of what orjson read (PyOS_string_to_double: correctly rounded, no locale),
 * an integer of at most 18 digits, true/false/numbers as Python compares them. Writing:
 * format_double, orjson's text of a double (the shortest digits that read back as the same
 * double, in decimal from 1e-5 up to 1e16, else ``1e-7``/``1.5e+16``), checked against orjson
 * on random doubles and every sample probability in tests/plan/test_transition_compiled.py.
 */
#ifndef COSAMPLE_JSONNUMBER_H
#define COSAMPLE_JSONNUMBER_H

#include "_hosttable.h"
#include <math.h>

#define MAX_NUMBER 64  /* longer texts are not the fast case */
#define MAX_DIGITS 40

/* a JSON number's kind: 1 a float (with '.' or an exponent), 2 an integer, 0 not a number */
HT_FN int number_kind(const char *s, Py_ssize_t len) {
    Py_ssize_t i = 0;
    int is_float = 0;
    if (i < len && s[i] == '-') i++;
    if (i >= len) return 0;
    if (s[i] == '0') i++;
    else if (s[i] >= '1' && s[i] <= '9') while (i < len && s[i] >= '0' && s[i] <= '9') i++;
    else return 0;
    if (i < len && s[i] == '.') {
        i++;
        if (i >= len || s[i] < '0' || s[i] > '9') return 0;
        while (i < len && s[i] >= '0' && s[i] <= '9') i++;
        is_float = 1;
    }
    if (i < len && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < len && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= len || s[i] < '0' || s[i] > '9') return 0;
        while (i < len && s[i] >= '0' && s[i] <= '9') i++;
        is_float = 1;
    }
    return i != len ? 0 : is_float ? 1 : 2;
}

/* a JSON float's double (Python's float() of what orjson read); 0: not a finite JSON float */
HT_FN int read_float(const char *b, span v, double *x) {
    Py_ssize_t len = v.e - v.s;
    char text[MAX_NUMBER + 1];
    if (v.s < 0 || len > MAX_NUMBER || number_kind(b + v.s, len) != 1) return 0;
    memcpy(text, b + v.s, (size_t)len);
    text[len] = '\0';
    char *end = NULL;
    *x = PyOS_string_to_double(text, &end, NULL);
    if (*x == -1.0 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    return end == text + len && isfinite(*x);
}

/* a JSON integer of at most 18 digits; 0: anything else */
HT_FN int read_int(const char *b, span v, long long *x) {
    Py_ssize_t len = v.e - v.s;
    const char *s = b + v.s;
    if (v.s < 0 || len > 19 || number_kind(s, len) != 2) return 0;
    int neg = s[0] == '-';
    if (len - neg > 18) return 0;
    long long value = 0;
    for (Py_ssize_t i = neg; i < len; i++) value = value * 10 + (s[i] - '0');
    *x = neg ? -value : value;
    return 1;
}

/* the significant digits of a number's text (no leading or trailing zeros) and the decimal
   exponent of the first; 0 digits: zero; -1: not such a text */
HT_FN int decompose(const char *s, Py_ssize_t len, char *digits, int *e10) {
    Py_ssize_t i = 0;
    int count = 0, seen = 0, first = -1, before_point = -1, exponent = 0;
    if (i < len && s[i] == '-') i++;
    for (; i < len && ((s[i] >= '0' && s[i] <= '9') || s[i] == '.'); i++) {
        if (s[i] == '.') { before_point = seen; continue; }
        if (count == 0 && s[i] == '0') { seen++; continue; }
        if (count == 0) first = seen;
        if (count >= MAX_DIGITS) return -1;
        digits[count++] = s[i];
        seen++;
    }
    if (before_point < 0) before_point = seen;
    if (i < len && (s[i] == 'e' || s[i] == 'E')) {
        int sign = 1;
        i++;
        if (i < len && (s[i] == '+' || s[i] == '-')) sign = s[i++] == '-' ? -1 : 1;
        for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
            if (exponent > 100000) return -1;
            exponent = exponent * 10 + (s[i] - '0');
        }
        exponent *= sign;
    }
    if (i != len) return -1;
    while (count > 0 && digits[count - 1] == '0') count--;
    if (count == 0) return 0;
    *e10 = before_point - 1 - first + exponent;
    return count;
}

/* a nonzero double's text as orjson lays it out, from its shortest significant ``digits``
   (``count``, no trailing zeros) and the decimal exponent of the first (``e10``) */
HT_FN int layout_double(int negative, const char *digits, int count, int e10, char *out) {
    int len = 0;
    if (negative) out[len++] = '-';
    if (e10 >= -5 && e10 < 16) {
        if (e10 < 0) {
            memcpy(out + len, "0.", 2);
            len += 2;
            for (int k = 0; k < -e10 - 1; k++) out[len++] = '0';
            memcpy(out + len, digits, (size_t)count);
            len += count;
        } else if (count <= e10 + 1) {
            memcpy(out + len, digits, (size_t)count);
            len += count;
            for (int k = count; k < e10 + 1; k++) out[len++] = '0';
            memcpy(out + len, ".0", 2);
            len += 2;
        } else {
            memcpy(out + len, digits, (size_t)e10 + 1);
            len += e10 + 1;
            out[len++] = '.';
            memcpy(out + len, digits + e10 + 1, (size_t)(count - e10 - 1));
            len += count - e10 - 1;
        }
        return len;
    }
    out[len++] = digits[0];
    if (count > 1) {
        out[len++] = '.';
        memcpy(out + len, digits + 1, (size_t)count - 1);
        len += count - 1;
    }
    len += snprintf(out + len, 8, "e%c%d", e10 > 0 ? '+' : '-', e10 > 0 ? e10 : -e10);
    return len;
}

/* orjson's text of a finite double, into ``out`` (at least 40 bytes); its length, -1 on
   failure. ``text``: a text that reads as ``x`` (NULL: none), used for its digits when it has
   at most 15 significant digits. */
HT_FN int format_double(double x, const char *text, Py_ssize_t text_len, char *out) {
    char digits[MAX_DIGITS];
    int e10 = 0, count = -1, len = 0;
    if (x == 0) {
        if (signbit(x)) out[len++] = '-';
        memcpy(out + len, "0.0", 3);
        return len + 3;
    }
    if (text != NULL) {
        count = decompose(text, text_len, digits, &e10);
        if (count > 15 || e10 < -300 || e10 > 300) count = -1;
    }
    if (count <= 0) {
        char *repr = PyOS_double_to_string(x, 'r', 0, 0, NULL);
        if (repr == NULL) { PyErr_Clear(); return -1; }
        count = decompose(repr, (Py_ssize_t)strlen(repr), digits, &e10);
        PyMem_Free(repr);
        if (count <= 0 || count > 17) return -1;
    }
    return layout_double(x < 0, digits, count, e10, out);
}

/* a number, true or false as Python compares them (True == 1, False == 0.0); 0: cannot tell
   exactly (an integer beyond 15 digits, not a number) */
HT_FN int as_double(const char *b, span v, double *x) {
    Py_ssize_t len = v.e - v.s;
    if (len == 4 && memcmp(b + v.s, "true", 4) == 0) { *x = 1.0; return 1; }
    if (len == 5 && memcmp(b + v.s, "false", 5) == 0) { *x = 0.0; return 1; }
    int kind = number_kind(b + v.s, len);
    if (kind == 1) return read_float(b, v, x);
    long long i;
    if (kind != 2 || len - (b[v.s] == '-') > 15 || !read_int(b, v, &i)) return 0;
    *x = (double)i;
    return 1;
}

#endif
