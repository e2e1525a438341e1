#include "json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void json_init(json_writer *w, FILE *out)
{
    memset(w, 0, sizeof *w);
    w->out = out;
}

/* Separates values: a comma unless first in its container or after a key. */
static void before_value(json_writer *w)
{
    if (w->after_key) {
        w->after_key = false;
        return;
    }
    if (w->depth > 0 && w->need_comma[w->depth])
        fputc(',', w->out);
    if (w->depth > 0)
        w->need_comma[w->depth] = true;
}

static void begin_container(json_writer *w, char c)
{
    before_value(w);
    fputc(c, w->out);
    if (w->depth < 31)
        w->depth++;
    w->need_comma[w->depth] = false;
}

static void end_container(json_writer *w, char c)
{
    fputc(c, w->out);
    if (w->depth > 0)
        w->depth--;
}

void json_begin_object(json_writer *w) { begin_container(w, '{'); }
void json_end_object(json_writer *w) { end_container(w, '}'); }
void json_begin_array(json_writer *w) { begin_container(w, '['); }
void json_end_array(json_writer *w) { end_container(w, ']'); }

static void write_escaped(FILE *out, const char *s)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", out); break;
        case '\\': fputs("\\\\", out); break;
        case '\n': fputs("\\n", out); break;
        case '\r': fputs("\\r", out); break;
        case '\t': fputs("\\t", out); break;
        default:
            if (*p < 0x20)
                fprintf(out, "\\u%04x", *p);
            else
                fputc(*p, out);
        }
    }
    fputc('"', out);
}

void json_key(json_writer *w, const char *key)
{
    before_value(w);
    write_escaped(w->out, key);
    fputc(':', w->out);
    w->after_key = true;
}

void json_string(json_writer *w, const char *s)
{
    before_value(w);
    write_escaped(w->out, s ? s : "");
}

void json_int(json_writer *w, int64_t v)
{
    before_value(w);
    fprintf(w->out, "%lld", (long long)v);
}

void json_uint(json_writer *w, uint64_t v)
{
    before_value(w);
    fprintf(w->out, "%llu", (unsigned long long)v);
}

void json_format_double(char *buf, size_t len, double v)
{
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, len, "%.*g", digits, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

void json_format_float(char *buf, size_t len, float v)
{
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(buf, len, "%.*g", digits, (double)v);
        if (strtof(buf, NULL) == v)
            return;
    }
}

/* A finite number as `format` writes it; JSON has no inf or NaN. */
static void write_number(json_writer *w, double v, void (*format)(char *, size_t, double))
{
    char buf[JSON_NUMBER_CHARS];
    before_value(w);
    if (isfinite(v)) {
        format(buf, sizeof buf, v);
        fputs(buf, w->out);
    } else {
        fputs("null", w->out);
    }
}

/* json_format_float over a double that holds a float. */
static void format_as_float(char *buf, size_t len, double v)
{
    json_format_float(buf, len, (float)v);
}

void json_double(json_writer *w, double v)
{
    write_number(w, v, json_format_double);
}

void json_float(json_writer *w, float v)
{
    write_number(w, v, format_as_float);
}

void json_bool(json_writer *w, bool v)
{
    before_value(w);
    fputs(v ? "true" : "false", w->out);
}

void json_null(json_writer *w)
{
    before_value(w);
    fputs("null", w->out);
}

/* json_key_TYPE: a key, then its value. */
#define KEY_THEN(name, type, write_value)                   \
    void name(json_writer *w, const char *key, type v)      \
    {                                                       \
        json_key(w, key);                                   \
        write_value(w, v);                                  \
    }
KEY_THEN(json_key_string, const char *, json_string)
KEY_THEN(json_key_int, int64_t, json_int)
KEY_THEN(json_key_uint, uint64_t, json_uint)
KEY_THEN(json_key_double, double, json_double)
KEY_THEN(json_key_float, float, json_float)
KEY_THEN(json_key_bool, bool, json_bool)
#undef KEY_THEN

void json_key_numbers(json_writer *w, const json_number *n, size_t count)
{
    for (size_t i = 0; i < count; i++)
        json_key_double(w, n[i].key, n[i].value);
}

void json_key_texts(json_writer *w, const json_text *t, size_t count)
{
    for (size_t i = 0; i < count; i++)
        json_key_string(w, t[i].key, t[i].value);
}

void json_finish(json_writer *w)
{
    fputc('\n', w->out);
    fflush(w->out);
}
