/* The models' heads against plain-loop references: the classifier's four
 * poolings with and without a mask, the gradient through max and attention
 * pooling, the MLM head's tied and untied decoder, and which parameters are the encoder's. */
#include <math.h>
#include <stdlib.h>

#include "models_common.h"

/* y [N, out] = act(x [N, in] W^T + b) for the head references. */
static void ref_linear(const double *x, const struct nn_linear *l, int64_t n, bool gelu, double *y)
{
	double *w = tu_values(l->weight), *b = tu_values(l->bias);
	for (int64_t i = 0; i < n; i++)
		for (int64_t o = 0; o < l->out; o++) {
			double acc = b[o];
			for (int64_t c = 0; c < l->in; c++)
				acc += x[i * l->in + c] * w[o * l->in + c];
			y[i * l->out + o] = gelu ? 0.5 * acc * (1 + erf(acc / sqrt(2))) : acc;
		}
	free(w);
	free(b);
}

START_TEST(test_classifier_head_reference)
{
	/* logits = fc2(gelu(fc1(pool(h)))) with masked mean, masked max,
	 * first-token or attention pooling, computed from the encoder output with
	 * plain loops */
	const int64_t B = 3, T = 6, d = 8, len[3] = { 6, 2, 0 };
	const enum model_pooling pools[4] = { MODEL_POOL_MEAN, MODEL_POOL_MAX, MODEL_POOL_CLS,
					      MODEL_POOL_ATTENTION };
	for (int pi = 0; pi < 4; pi++) {
		enum model_pooling pool = pools[pi];
		struct model_config c = tiny("LS");
		c.pooling = pool;
		struct nn_params ps;
		struct model_classifier m;
		make_classifier(&m, &ps, &c, TENSOR_F64, 12);
		double q[8] = { 0 };
		if (pool == MODEL_POOL_ATTENTION) { /* zero at first (the mean), then random */
			tu_assert_close(m.pool_query, q, d, 0, 0);
			ck_assert_int_eq(tensor_uniform_(m.pool_query, 4, -2, 2), TENSOR_OK);
			double *qv = tu_values(m.pool_query);
			for (int64_t j = 0; j < d; j++)
				q[j] = qv[j];
			free(qv);
		} else {
			ck_assert_ptr_null(m.pool_query);
		}
		struct tensor *ids = rand_ids(B, T, 11, 13);
		struct tensor *mask = prefix_mask(B, T, len);
		for (int masked = 1; masked >= 0; masked--) {
			const struct tensor *mk = masked ? mask : NULL;
			double *h = tu_values(model_encoder_forward(&m.enc, ids, mk));
			double pooled[3 * 8] = { 0 }, hid[3 * 8], want[3 * 3];
			for (int64_t b = 0; b < B; b++) {
				/* attention weights: softmax over the real tokens of h q */
				int64_t nb = masked ? len[b] : T;
				double wt[6], mx = -INFINITY, z = 0;
				for (int64_t t = 0; t < nb; t++) {
					wt[t] = 0;
					for (int64_t j = 0; j < d; j++)
						wt[t] += h[(b * T + t) * d + j] * q[j];
					mx = fmax(mx, wt[t]);
				}
				for (int64_t t = 0; t < nb; t++)
					z += wt[t] = exp(wt[t] - mx);
				for (int64_t j = 0; j < d; j++) {
					int64_t n = masked ? len[b] : T;
					double acc = pool == MODEL_POOL_MAX ? -INFINITY : 0;
					for (int64_t t = 0; t < n && pool != MODEL_POOL_CLS; t++) {
						double x = h[(b * T + t) * d + j];
						acc = pool == MODEL_POOL_MAX ? fmax(acc, x)
						      : pool == MODEL_POOL_ATTENTION
							  ? acc + x * wt[t] / z
							  : acc + x / (double)n;
					}
					if (pool == MODEL_POOL_CLS)
						acc = h[(b * T) * d + j];
					/* a row without real tokens pools to zero */
					pooled[b * d + j] =
					    n == 0 && pool != MODEL_POOL_CLS ? 0 : acc;
				}
			}
			ref_linear(pooled, &m.fc1, B, true, hid);
			ref_linear(hid, &m.fc2, B, false, want);
			struct tensor *y = model_classifier_forward(&m, ids, mk);
			ck_assert_msg(y != NULL, "%s", tensor_last_error());
			tu_assert_close(y, want, B * 3, 1e-12, 1e-10);
			free(h);
		}
		model_classifier_free(&m);
		drop_params(&ps);
	}
}
END_TEST

/* Central differences of sum(logits * r) against p's gradient, every third element. */
static void check_grad(struct model_classifier *m, struct tensor *p, const struct tensor *ids,
		       const struct tensor *mask, const struct tensor *r)
{
	ck_assert_msg(p->grad != NULL, "no gradient reached %s through the pooling",
		      p == m->pool_query ? "the query" : "the embedding");
	double *g = tu_values(p->grad), eps = 1e-6;
	int64_t n = tensor_numel(p);
	for (int64_t i = 0; i < n; i += 3) {
		double v[2];
		for (int s = 0; s < 2; s++) {
			ag_no_grad_begin();
			struct tensor *e = tensor_narrow(tensor_reshape(p, 1, &n), 0, i, 1);
			double x0 = tensor_get(e, (int64_t[]){ 0 });
			tensor_fill_(e, x0 + (s ? eps : -eps));
			struct tensor *y = model_classifier_forward(m, ids, mask);
			v[s] = tensor_get(tensor_sum(tensor_mul(y, r), 0, NULL, false), NULL);
			tensor_fill_(e, x0);
			ag_no_grad_end();
		}
		ck_assert_msg(fabs((v[1] - v[0]) / (2 * eps) - g[i]) < 1e-6,
			      "element %lld: %g vs %g", (long long)i, (v[1] - v[0]) / (2 * eps),
			      g[i]);
	}
	free(g);
}

/* The gradient through the masked max and attention poolings: the token
 * embedding's (and the query's) gradient of sum(logits * R) against central
 * differences (rows with padding and an empty row). */
START_TEST(test_classifier_pool_gradient)
{
	const int64_t B = 3, T = 5, len[3] = { 5, 3, 0 };
	const enum model_pooling pools[2] = { MODEL_POOL_MAX, MODEL_POOL_ATTENTION };
	for (int pi = 0; pi < 2; pi++) {
		struct model_config c = tiny("SS");
		c.pooling = pools[pi];
		c.dropout = c.attn_dropout = 0;
		struct nn_params ps;
		struct model_classifier m;
		make_classifier(&m, &ps, &c, TENSOR_F64, 21);
		if (m.pool_query)
			ck_assert_int_eq(tensor_uniform_(m.pool_query, 6, -1, 1), TENSOR_OK);
		struct tensor *ids = rand_ids(B, T, 11, 17);
		struct tensor *mask = prefix_mask(B, T, len);
		struct tensor *r = tu_rand(TENSOR_F64, 2, (int64_t[]){ B, 3 }, 5);
		struct tensor *loss =
		    ag_sum(ag_mul(model_classifier_forward(&m, ids, mask), r), 0, NULL, false);
		ck_assert_int_eq(ag_backward(loss, NULL), TENSOR_OK);
		check_grad(&m, m.enc.embed.weight, ids, mask, r);
		if (m.pool_query)
			check_grad(&m, m.pool_query, ids, mask, r);
		model_classifier_free(&m);
		drop_params(&ps);
	}
}
END_TEST

START_TEST(test_mlm_tied_decoder)
{
	/* tied: logits = layer_norm(gelu(dense(h))) E^T + b, and the embedding's
	 * gradient reaches rows of tokens absent from the input (through the
	 * decoder) only when tied */
	const int64_t B = 2, T = 5, V = 11, d = 8;
	for (int tied = 0; tied < 2; tied++) {
		struct model_config c = tiny("LL");
		c.tie_embeddings = tied;
		struct nn_params ps;
		ck_assert_int_eq(nn_params_init(&ps, TENSOR_F64, TENSOR_CPU, 14), TENSOR_OK);
		struct model_mlm m;
		ck_assert_int_eq(model_mlm_init(&m, &ps, &c), TENSOR_OK);
		/* a nonzero decoder bias, so the reference checks it is added */
		ck_assert_int_eq(tensor_uniform_(m.decoder_bias, 3, -1, 1), TENSOR_OK);
		const int64_t v[10] = { 1, 2, 3, 1, 2, 3, 3, 2, 1, 1 };
		struct tensor *ids = ids_tensor(B, T, v);
		double *h = tu_values(model_encoder_forward(&m.enc, ids, NULL));
		double a[10 * 8], w[10 * 8];
		ref_linear(h, &m.dense, B * T, true, a);
		for (int64_t r = 0; r < B * T; r++) { /* LayerNorm, weight 1, bias 0 */
			double mu = 0, var = 0;
			for (int64_t j = 0; j < d; j++)
				mu += a[r * d + j] / d;
			for (int64_t j = 0; j < d; j++)
				var += (a[r * d + j] - mu) * (a[r * d + j] - mu) / d;
			for (int64_t j = 0; j < d; j++)
				w[r * d + j] = (a[r * d + j] - mu) / sqrt(var + 1e-5);
		}
		struct nn_linear dec = m.decoder;
		if (tied) {
			ck_assert(m.decoder.weight == m.enc.embed.weight);
			ck_assert(nn_params_find(&ps, "mlm.decoder.weight") == NULL);
		} else {
			ck_assert(m.decoder.weight != m.enc.embed.weight);
		}
		double *want = malloc(sizeof(double) * (size_t)(B * T * V));
		ref_linear(w, &dec, B * T, false, want);
		struct tensor *y = model_mlm_forward(&m, ids, NULL);
		tu_assert_close(y, want, B * T * V, 1e-10, 1e-9);
		free(want);
		ck_assert_int_eq(ag_backward(ag_sum(y, 0, NULL, false), NULL), TENSOR_OK);
		struct tensor *g = m.enc.embed.weight->grad;
		ck_assert(g != NULL);
		double *gv = tu_values(g), row7 = 0;
		for (int64_t j = 0; j < d; j++)
			row7 += fabs(gv[7 * d + j]);
		ck_assert_msg(tied ? row7 > 0 : row7 == 0, "tied %d: |grad row 7| = %g", tied,
			      row7);
		free(gv);
		free(h);
		model_mlm_free(&m);
		drop_params(&ps);
	}
}
END_TEST

/* model_encoder_has_param: every parameter an encoder registered, in a classifier, an MLM
 * model or alone, whatever its positions and layers; no head's; false where it cannot tell. */
START_TEST(test_encoder_params)
{
	static const char *const presets[] = { "SS", "LL", "LC", "CM" };
	for (int p = 0; p < 4; p++)
		for (int pos = 0; pos < 4; pos++)
			for (int kind = 0; kind < 3; kind++) {
				struct model_config c = tiny(presets[p]);
				c.positions = pos == 3 ? MODEL_POS_NONE : (enum model_positions)pos;
				c.position_kernel = pos == 3 ? 3 : 0; /* convolutional */
				c.sharing = p == 1 && kind == 0 ? NN_SHARE_LAYERWISE : c.sharing;
				c.tie_embeddings = pos != 1;
				c.pooling = pos == 2 ? MODEL_POOL_ATTENTION : MODEL_POOL_MEAN;
				struct nn_params ps;
				ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 1),
						 TENSOR_OK);
				struct model_classifier cls;
				struct model_mlm mlm;
				struct model_encoder alone;
				const struct model_encoder *enc = kind == 0   ? &cls.enc
								  : kind == 1 ? &mlm.enc
									      : &alone;
				int rc = kind == 0   ? model_classifier_init(&cls, &ps, &c)
					 : kind == 1 ? model_mlm_init(&mlm, &ps, &c)
						     : model_encoder_init(&alone, &ps, &c);
				ck_assert_msg(rc == TENSOR_OK, "%s", tensor_last_error());
				int heads = 0, conv = 0;
				for (int i = 0; i < ps.n; i++) {
					const char *name = ps.items[i].name;
					bool head =
					    !strncmp(name, "head.", 5) || !strncmp(name, "mlm.", 4);
					heads += head;
					conv += !strcmp(name, "pos_conv.weight");
					ck_assert_msg(model_encoder_has_param(enc, &ps, name) ==
							  !head,
						      "%s (%s, positions %d, kind %d)", name,
						      presets[p], pos, kind);
				}
				ck_assert_int_eq(conv, pos == 3);
				ck_assert_int_eq(heads > 0, kind < 2);
				ck_assert(!model_encoder_has_param(enc, &ps, "head.fc1.weight"));
				ck_assert(!model_encoder_has_param(enc, &ps, "nope"));
				ck_assert(!model_encoder_has_param(enc, NULL, "embed.weight"));
				ck_assert(!model_encoder_has_param(NULL, &ps, "embed.weight"));
				ck_assert(!model_encoder_has_param(enc, &ps, NULL));
				/* another list of the same names is not the one it was built in */
				struct nn_params other;
				struct model_classifier o;
				ck_assert_int_eq(nn_params_init(&other, TENSOR_F32, TENSOR_CPU, 1),
						 TENSOR_OK);
				ck_assert_int_eq(model_classifier_init(&o, &other, &c), TENSOR_OK);
				ck_assert(!model_encoder_has_param(enc, &other, "embed.weight"));
				model_classifier_free(&o);
				drop_params(&other);
				if (kind == 0)
					model_classifier_free(&cls);
				else if (kind == 1)
					model_mlm_free(&mlm);
				else
					model_encoder_free(&alone);
				ck_assert(!model_encoder_has_param(enc, &ps, "embed.weight"));
				drop_params(&ps);
			}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("models_heads");
	TCase *tc = tu_tcase("heads");
	tcase_add_test(tc, test_classifier_head_reference);
	tcase_add_test(tc, test_classifier_pool_gradient);
	tcase_add_test(tc, test_mlm_tied_decoder);
	tcase_add_test(tc, test_encoder_params);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
