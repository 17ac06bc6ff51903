/* diag.h — diagnostics: rule id, severity, field, message, where, hint; as text and as JSON. */
#ifndef STEPC_DIAG_H
#define STEPC_DIAG_H

#include <stdio.h>

#include "ir.h" /* json_write_string */

typedef enum { DIAG_ERROR, DIAG_WARNING, DIAG_NOTE } DiagSeverity;

typedef struct {
  char rule[24]; /* "MCORE-24", "STEPC-3", "LOAD" */
  DiagSeverity severity;
  char field[96]; /* "model.recompute_modules" or "" */
  char message[640];
  char where[160]; /* "models/x.lua:12", "override model.fp8=null" or "" */
  char hint[320];  /* what to change, or "" */
} Diag;

typedef struct {
  Diag *items;
  int n, cap;
} DiagList;

void diag_init(DiagList *d);
void diag_free(DiagList *d);
/* src into dst (n bytes, always terminated), every byte a terminal could obey written as \xHH:
 * control characters but tab, DEL and the C1 controls (as UTF-8 or as lone bytes). Recipe text and
 * values reach diagnostics (error messages, print, field values), and diag_add and diag_hint store
 * every string through this, so no renderer shows an escape sequence raw. Returns dst's length. */
size_t diag_escape(char *dst, size_t n, const char *src);
/* Appends one diagnostic; returns it so a caller may add a hint. Out of memory drops it silently. */
Diag *diag_add(DiagList *d, DiagSeverity sev, const char *rule, const char *field, const char *where,
               const char *fmt, ...) __attribute__((format(printf, 6, 7)));
void diag_hint(Diag *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int diag_count(const DiagList *d, DiagSeverity sev);
/* Human form: "models/x.lua:12: error [MCORE-24] model.recompute_modules: message\n  hint: ..." */
void diag_print(const DiagList *d, FILE *out);
/* The array body of the JSON "diagnostics" field. */
void diag_print_json(const DiagList *d, FILE *out);

#endif
