/* json_read.h — reading the members of a JSON object in place, for the small files stepc takes from
 * other tools (a Hugging Face config.json, model.safetensors.index.json). No tree is built: a value
 * is a span of the text, read by type when asked for. Malformed text, nesting deeper than 32 and
 * strings with escapes beyond \" \\ \/ \n \t are refused. */
#ifndef STEPC_JSON_READ_H
#define STEPC_JSON_READ_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
  const char *p, *end; /* the value's text, [p, end) */
} JsonSpan;

/* The whole text as one value span: 0, or -1 when it is not one well-formed JSON value. */
int json_value(const char *text, size_t n, JsonSpan *v);
/* Walks an object's members: *at starts at 0; each call gives the next key (truncated to nkey) and
 * value. 1 a member, 0 no more, -1 malformed or not an object. */
int json_member_next(JsonSpan obj, size_t *at, char *key, size_t nkey, JsonSpan *val);
/* The member named key of an object: 1 found, 0 absent, -1 malformed. */
int json_member(JsonSpan obj, const char *key, JsonSpan *val);

bool json_is_null(JsonSpan v);
bool json_is_object(JsonSpan v);
/* 0 and the value, or -1 when v is not of that type. */
int json_number(JsonSpan v, double *out);
int json_bool(JsonSpan v, bool *out);
int json_string(JsonSpan v, char *buf, size_t n); /* -1 also when it does not fit */

#endif
