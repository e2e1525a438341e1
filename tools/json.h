/* A tiny streaming JSON writer for the CLI's --json output. */
#ifndef PSR_CLI_JSON_H
#define PSR_CLI_JSON_H

#include <stdbool.h>
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
void json_double(json_writer *w, double v);
void json_bool(json_writer *w, bool v);
void json_null(json_writer *w);
/* Ends the document with a newline. */
void json_finish(json_writer *w);

#endif
