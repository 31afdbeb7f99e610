/* The op-specific test cases of the test_ops program, one file per op family
 * (tests/test_ops_<family>.c), beside the op table's generic walk in
 * tests/test_ops.c: special values, edge shapes, in-place behaviour, named
 * wrappers, error paths with their messages, and the gradient checks on
 * seeded random shapes that the table's fixed rows do not reach. Each adds
 * its TCases to the suite. */
#ifndef CFORMER_TEST_OPS_H
#define CFORMER_TEST_OPS_H

#include <check.h>

void ops_elementwise_tcases(Suite *s);
void ops_where_tcases(Suite *s);
void ops_reduce_tcases(Suite *s);
void ops_norm_tcases(Suite *s);
void ops_index_tcases(Suite *s);
void ops_grad_elementwise_tcases(Suite *s);
void ops_grad_math_tcases(Suite *s);
void ops_grad_index_tcases(Suite *s);

#endif
