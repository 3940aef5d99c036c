/* The reference interpreter: runs any graph of ops from ir/ops.def, plainly, in
 * double precision. It is the semantic definition every generated kernel (CPU and
 * CUDA, forward and gradient) is checked against (STYLE.md habit 7), so the meaning
 * of each op is written here once.
 *
 * Values. A tensor is a row-major array of shape_numel(shape) doubles, whatever
 * its dtype: i32 tensors hold integral values, float tensors hold doubles (no
 * dtype rounds values except cast). A scalar ([]) has one element.
 *
 * Semantics (x, a, b the inputs; "broadcast" is numpy's, aligned from the right):
 *  const            the scalar `value`.        arange   0, 1, ..., n-1.
 *  embedding        out[..., :] = table[idx[...], :]; an index outside [0, rows) is
 *                   an internal error naming the node.
 *  matmul           out[batch, i, j] = sum_k op(a)[batch, i, k] op(b)[batch, k, j],
 *                   op() swapping the last two axes when transpose_a/_b is set; the
 *                   batch axes (all but the last two) broadcast.
 *  add sub mul div  broadcast, elementwise.       neg   -x.
 *  gelu             0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  (tanh form)
 *  gelu_erf         0.5 x (1 + erf(x / sqrt(2)))  (exact form; the kernels compute erf
 *                   with a rational approximation good to 5e-7, as Eigen and XLA do)
 *  silu             x * sigmoid(x).               relu  max(x, 0).
 *  dropout(p, seed) out[i] = keep ? x[i] / (1 - p) : 0 with keep = (u >= (float)p),
 *                   u = dropout_uniform(seed, step, i) (ir/rand.h), i the flat element
 *                   index. p = 0 is the identity.
 *  cast(dtype)      the identity when dtype is x's dtype; otherwise rounds to the
 *                   nearest value of dtype (ties to even, subnormals kept): f32, bf16,
 *                   f16 and e5m2 overflow to +-inf, e4m3 (the "fn" variant, no inf)
 *                   to NaN; i32 truncates toward zero (NaN or outside the i32 range:
 *                   internal error).
 *  rotary(heads, theta, inverse, scaling, low_freq, high_freq, original_ctx)
 *                   x [..., S, H*hd]: s = coordinate of axis -2; in
 *                   each head, for i < hd/2, angle = s * f_i, f_i = theta^(-2i/hd)
 *                   or with scaling F != 1 (LLaMA 3.1) f_i ((1 - b) / F + b), b =
 *                   clamp((original_ctx f_i / 2π - low_freq) / (high_freq - low_freq),
 *                   0, 1): wavelengths 2π/f_i above original_ctx / low_freq slowed F
 *                   times, below original_ctx / high_freq kept, blended between,
 *                   out[i] = x[i] cos - x[i + hd/2] sin, out[i + hd/2] =
 *                   x[i + hd/2] cos + x[i] sin (Hugging Face LLaMA "rotate_half");
 *                   inverse uses -sin.
 *  layernorm(eps)   (x - mean) / sqrt(var + eps) * w + b over the last axis, var biased.
 *  rmsnorm(eps)     x / sqrt(mean(x^2) + eps) * w over the last axis.
 *  softmax(axis, causal)  exp(x - max) / sum exp(x - max) along axis; causal (axis
 *                   last, x [..., S, T]): entries with j > i + (T - S), i the
 *                   coordinate of axis -2 and j of axis -1, are left out (0).
 *  sum mean(axis, keepdim)  over axis, or over all axes when axis is unset.
 *  cross_entropy(ignore_index)  logits [..., V], targets [...]: the mean over rows
 *                   whose target != ignore_index of logsumexp(row) - row[target]; 0
 *                   when no row counts; another target outside [0, V) is an
 *                   internal error.
 *  attention(heads, causal, scale)  q [B, S, H*hd], k, v [B, T, H*hd]: per batch and
 *                   head, softmax(q k^T * scale) v with softmax's causal mask;
 *                   scale defaults to 1/sqrt(hd).
 *  reshape          the same elements in the same order.
 *  transpose(perm)  out.shape[i] = x.shape[perm[i]], out[c] = x[c'] with
 *                   c'[perm[i]] = c[i].
 *  slice(axis, start, end), concat(axis), pad(axis, before, after): along axis;
 *                   pad puts zeros around.
 *  broadcast(shape) x broadcast to shape.      sum_to(shape)  sums x over the axes
 *                   along which shape broadcasts to x's shape (the transpose of
 *                   broadcast).
 *  gelu_grad gelu_erf_grad silu_grad relu_grad (x, g)  g * f'(x); relu'(0) = 0.
 *  layernorm_grad(x, w, g, which, eps)  which 0: dx; 1: dw = sum over rows of
 *                   g * xhat; 2: db = sum over rows of g.
 *  rmsnorm_grad(x, w, g, which, eps)    which 0: dx; 1: dw = sum over rows of
 *                   g * x / rms.
 *  softmax_grad(y, g, axis)  y * (g - sum_axis(g * y)).
 *  cross_entropy_grad(logits, targets, g)  per row: g * (softmax(row) -
 *                   onehot(target)) / count for counted rows, 0 for ignored rows
 *                   (count as in cross_entropy).
 *  embedding_grad(idx, g, rows)  [rows, D] zeros plus g[r, :] added into row idx[r]
 *                   for every r (a scatter-add).
 *  fp8_state(history)  zeros: the state of a first step (its amax records are not kept).
 *  fp8_quantize(x, state, dtype, margin)  with s the state's scale (ir/ops.def; 1 when
 *                   [0] is 0): x*s clamped to dtype's largest finite value, rounded to
 *                   dtype, divided by s (NaN kept).
 *  scaled_matmul(a, b, ...)  matmul of a and b rounded to dtype.
 * input and param are not computed: the caller gives their values. */
#ifndef COLOSSALC_IR_INTERP_H
#define COLOSSALC_IR_INTERP_H
#include <stdint.h>
#include "ir/ir.h"

/* Runs nodes [0, g->n) in order. vals has g->n entries: the caller sets those of
 * INPUT and PARAM nodes (it owns them); for every other node a NULL entry gets a
 * new buffer (malloc) and a non-NULL one, left by an earlier interp_run of the same
 * graph, is overwritten. step feeds dropout's key. A missing input value is an
 * internal error. To run the forward pass only, pass a copy of the Graph with n set
 * to n_forward. */
void interp_run(const Graph *g, double **vals, int64_t step);

/* Frees the buffers interp_run allocated (every entry but INPUT and PARAM nodes')
 * and sets them to NULL. */
void interp_release(const Graph *g, double **vals);

/* One node: out (numel of n) from in[0..n->nin) (numel of each input), by its op's
 * run_<name> (ir/interp.c). input and param are an internal error, as is a
 * collective over more than one rank. */
void interp_eval(const Node *n, const double *const *in, double *out, int64_t step);

/* x rounded to dtype t, as cast does. */
double interp_round(double x, DType t);

#endif
