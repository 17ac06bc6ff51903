/* op_list.h — the op table's rows: one X(ENUM, symbol) per op kind.
 *
 * X(NAME, sym) makes the enum value OP_NAME and points the table entry at `const OpInfo sym_info`,
 * defined in the op family's file under compiler/ops/ (shape inference, cost, gradient rule, CPU
 * reference). Adding an op = one row here + its OpInfo in its family file. Rows are grouped by
 * family; backward-only ops (no gradient rule of their own) sit beside their forward op. */
#ifndef STEPC_OP_LIST_H
#define STEPC_OP_LIST_H

#define OP_LIST(X)                                                                                 \
  /* elementwise.c */                                                                              \
  X(ADD, op_add)                     /* y = a + b (same shape) */                                  \
  X(ACCUM, op_accum)                 /* acc += x, in place (gradient accumulation) */              \
  X(ZERO, op_zero)                   /* t = 0, in place */

#endif
