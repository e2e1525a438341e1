/* A tiny streaming JSON writer for the CLI's --json output. */
#ifndef PSR_CLI_JSON_H
#define PSR_CLI_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct json_writer {
    FILE *out;
    int depth;
    bool need_comma[32];
    bool after_key;
} json_writer;

void json_init(json_writer *w, FILE *out);
void json_begin_object(json_writer *w);
void json_end_object(json_writer *w);
void json_begin_array(json_writer *w);
void json_end_array(json_writer *w);
void json_key(json_writer *w, const char *key);
void json_string(json_writer *w, const char *s);
void json_int(json_writer *w, int64_t v);
void json_uint(json_writer *w, uint64_t v);
/* Numbers in the fewest digits that read back as the same value: 15 to
 * 17 significant digits for a double, 6 to 9 for a float (a float's
 * shortest text is shorter than its double's); inf and NaN as null. */
void json_double(json_writer *w, double v);
void json_float(json_writer *w, float v);
void json_bool(json_writer *w, bool v);
void json_null(json_writer *w);
/* A key and its value in one call. */
void json_key_string(json_writer *w, const char *key, const char *s);
void json_key_int(json_writer *w, const char *key, int64_t v);
void json_key_uint(json_writer *w, const char *key, uint64_t v);
void json_key_double(json_writer *w, const char *key, double v);
void json_key_float(json_writer *w, const char *key, float v);
void json_key_bool(json_writer *w, const char *key, bool v);
/* Runs of keys with values of one kind, from a table (JSON_COUNT entries).
 * Numbers are written as json_double writes them, which is how
 * json_int and json_uint write whole numbers below 2^53. */
typedef struct json_number {
    const char *key;
    double value;
} json_number;
typedef struct json_text {
    const char *key;
    const char *value;
} json_text;
#define JSON_COUNT(table) (sizeof(table) / sizeof((table)[0]))
void json_key_numbers(json_writer *w, const json_number *n, size_t count);
void json_key_texts(json_writer *w, const json_text *t, size_t count);
/* The text json_double and json_float write for a finite value, into buf
 * (JSON_NUMBER_CHARS bytes are always enough). */
#define JSON_NUMBER_CHARS 32
void json_format_double(char *buf, size_t len, double v);
void json_format_float(char *buf, size_t len, float v);
/* Ends the document with a newline. */
void json_finish(json_writer *w);

#endif
