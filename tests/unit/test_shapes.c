/* The shape rule of every op, by construction (STYLE.md habit 7): the test walks the
 * op table and fails for an op that has no accepted case, or (for ops with inputs) no
 * rejected case. Each case is a small graph in the IR text form; ir_parse re-infers
 * every node and checks it against the declared type, so an accepted case asserts
 * the inferred shape and dtype, and a rejected case asserts the error message. */
#include <stdlib.h>
#include <string.h>
#include "ir/ir.h"

typedef struct Case {
  const char *ir;
  const char *error;
} Case; /* error NULL: must succeed */

#define A(x) "%0 = input a : " x "\n"
#define B(x) "%1 = input b : " x "\n"
#define C(x) "%2 = input c : " x "\n"

static const Case cases[] = {
    {"%0 = input x : i32[2, 3]\n", NULL},
    {"%0 = param w init=normal(0.02, 0) : f32[4, 5]\n", NULL},
    {"%0 = param w init=zeros : i32[4]\n", "must have a floating-point dtype"},
    {"%0 = const value=0.5 : f32[]\n", NULL},
    {"%0 = arange n=7 : i32[7]\n", NULL},
    {"%0 = loss_scale : f32[]\n", NULL},
    {"%0 = arange n=-1 : i32[1]\n", "must not be negative"},
    /* embedding */
    {A("f32[10, 4]") B("i32[2, 3]") "%2 = embedding %0, %1 : f32[2, 3, 4]\n", NULL},
    {A("f32[10, 4]") B("f32[2, 3]") "%2 = embedding %0, %1 : f32[2, 3, 4]\n", "indices must be i32"},
    {A("f32[10]") B("i32[2]") "%2 = embedding %0, %1 : f32[2]\n", "table must be 2-D"},
    {A("f32[10, 4]") "%1 = arange n=12 : i32[12]\n%2 = embedding %0, %1 : f32[12, 4]\n",
     "positions 0..11 do not fit the table's 10 rows"},
    /* matmul */
    {A("f32[2, 3]") B("f32[3, 4]") "%2 = matmul %0, %1 : f32[2, 4]\n", NULL},
    {A("f32[5, 2, 3]") B("f32[3, 4]") "%2 = matmul %0, %1 : f32[5, 2, 4]\n", NULL},
    {A("f32[5, 1, 2, 3]") B("f32[7, 4, 3]") "%2 = matmul %0, %1 transpose_b=1 : f32[5, 7, 2, 4]\n", NULL},
    {A("f32[3, 2]") B("f32[3, 4]") "%2 = matmul %0, %1 transpose_a=1 : f32[2, 4]\n", NULL},
    {A("f32[2, 3]") B("f32[5, 4]") "%2 = matmul %0, %1 : f32[2, 4]\n", "inner dimensions differ"},
    {A("f32[2, 2, 3]") B("f32[3, 3, 4]") "%2 = matmul %0, %1 : f32[2, 2, 4]\n", "do not broadcast"},
    {A("f32[3]") B("f32[3, 4]") "%2 = matmul %0, %1 : f32[4]\n", "at least 2 dimensions"},
    {A("f32[2, 3]") B("bf16[3, 4]") "%2 = matmul %0, %1 : f32[2, 4]\n", "different dtypes"},
    /* fp8 */
    {"%0 = fp8_state history=16 : f32[18]\n", NULL},
    {"%0 = fp8_state history=0 : f32[2]\n", "history must be in"},
    {A("f32[2, 3]") "%1 = fp8_state history=4 : f32[6]\n%2 = fp8_quantize %0, %1 dtype=e4m3 : e4m3[2, 3]\n", NULL},
    {A("bf16[2, 3]") "%1 = fp8_state history=4 : f32[6]\n%2 = fp8_quantize %0, %1 dtype=e5m2 margin=2 : e5m2[2, 3]\n",
     NULL},
    {A("f32[2, 3]") "%1 = fp8_state history=4 : f32[6]\n%2 = fp8_quantize %0, %1 dtype=bf16 : bf16[2, 3]\n",
     "must be e4m3 or e5m2"},
    {A("f32[2, 3]") B("f32[6]") "%2 = fp8_quantize %0, %1 dtype=e4m3 : e4m3[2, 3]\n", "must be an fp8_state"},
    {A("e4m3[5, 2, 3]")
         B("e4m3[4, 3]") "%2 = fp8_state history=4 : f32[6]\n"
                         "%3 = scaled_matmul %0, %1, %2, %2, %2 transpose_b=1 dtype=bf16 : bf16[5, 2, 4]\n",
     NULL},
    {A("e5m2[2, 3]") B("e4m3[3, 4]") "%2 = fp8_state history=4 : f32[6]\n"
                                     "%3 = scaled_matmul %0, %1, %2, %2, %2 dtype=f32 : f32[2, 4]\n",
     NULL},
    {A("bf16[2, 3]") B("e4m3[3, 4]") "%2 = fp8_state history=4 : f32[6]\n"
                                     "%3 = scaled_matmul %0, %1, %2, %2, %2 dtype=f32 : f32[2, 4]\n",
     "must be e4m3 or e5m2"},
    {A("e4m3[2, 3]") B("e4m3[3, 4]") "%2 = fp8_state history=4 : f32[6]\n"
                                     "%3 = scaled_matmul %0, %1, %2, %2, %2 dtype=e4m3 : e4m3[2, 4]\n",
     "dtype must be f32, bf16 or f16"},
    {A("e4m3[2, 3]") B("e4m3[5, 4]") "%2 = fp8_state history=4 : f32[6]\n"
                                     "%3 = scaled_matmul %0, %1, %2, %2, %2 dtype=f32 : f32[2, 4]\n",
     "inner dimensions differ"},
    /* binary elementwise */
    {A("f32[2, 3]") B("f32[3]") "%2 = add %0, %1 : f32[2, 3]\n", NULL},
    {A("f32[2, 1]") B("f32[1, 3]") "%2 = sub %0, %1 : f32[2, 3]\n", NULL},
    {A("bf16[4]") B("bf16[]") "%2 = mul %0, %1 : bf16[4]\n", NULL},
    {A("f32[4, 2]") B("f32[4, 2]") "%2 = div %0, %1 : f32[4, 2]\n", NULL},
    {A("f32[2, 3]") B("f32[2]") "%2 = add %0, %1 : f32[2, 3]\n", "do not broadcast"},
    {A("f32[2]") B("f32[3]") "%2 = sub %0, %1 : f32[2]\n", "do not broadcast"},
    {A("f32[2]") B("i32[2]") "%2 = mul %0, %1 : f32[2]\n", "different dtypes"},
    {A("i32[2]") B("i32[2]") "%2 = div %0, %1 : i32[2]\n", "floating-point"},
    /* unary elementwise */
    {A("f32[2, 3]") "%1 = neg %0 : f32[2, 3]\n", NULL},
    {A("bf16[2, 3]") "%1 = gelu %0 : bf16[2, 3]\n", NULL},
    {A("f32[8]") "%1 = silu %0 : f32[8]\n", NULL},
    {A("f32[2, 3]") "%1 = gelu_erf %0 : f32[2, 3]\n", NULL},
    {A("i32[8]") "%1 = gelu_erf %0 : i32[8]\n", "floating-point"},
    {A("f16[8]") "%1 = relu %0 : f16[8]\n", NULL},
    {A("f32[8]") "%1 = dropout %0 p=0.25 : f32[8]\n", NULL},
    {A("f32[8]") "%1 = cast %0 dtype=bf16 : bf16[8]\n", NULL},
    {A("i32[8]") "%1 = gelu %0 : i32[8]\n", "floating-point"},
    {A("i32[8]") "%1 = silu %0 : i32[8]\n", "floating-point"},
    {A("i32[8]") "%1 = relu %0 : i32[8]\n", "floating-point"},
    {A("f32[8]") "%1 = dropout %0 p=1 : f32[8]\n", "p must be in [0, 1)"},
    {A("f32[8]") "%1 = neg %0 : f32[9]\n", "declared type differs"},
    {A("f32[8]") "%1 = cast %0 dtype=i32 : f32[8]\n", "declared type differs"},
    {A("f32[2, 5, 8]") "%1 = rotary %0 heads=2 : f32[2, 5, 8]\n", NULL},
    {A("f32[2, 5, 6]") "%1 = rotary %0 heads=2 : f32[2, 5, 6]\n", "even size"},
    /* normalisations and reductions */
    {A("f32[2, 3, 8]") B("f32[8]") C("f32[8]") "%3 = layernorm %0, %1, %2 : f32[2, 3, 8]\n", NULL},
    {A("f32[2, 3, 8]") B("f32[7]") C("f32[8]") "%3 = layernorm %0, %1, %2 : f32[2, 3, 8]\n", "must have shape [8]"},
    {A("f32[2, 8]") B("f32[8]") "%2 = rmsnorm %0, %1 : f32[2, 8]\n", NULL},
    {A("f32[2, 8]") B("f32[2, 8]") "%2 = rmsnorm %0, %1 : f32[2, 8]\n", "must have shape [8]"},
    {A("f32[2, 8]") B("f32[8]") "%2 = rmsnorm %0, %1 eps=0 : f32[2, 8]\n", "eps must be positive"},
    {A("f32[2, 8]") "%1 = softmax %0 : f32[2, 8]\n", NULL},
    {A("f32[2, 8]") "%1 = softmax %0 axis=2 : f32[2, 8]\n", "out of range"},
    {A("f32[2, 3, 4]") "%1 = sum %0 axis=1 : f32[2, 4]\n", NULL},
    {A("f32[2, 3, 4]") "%1 = sum %0 : f32[]\n", NULL},
    {A("f32[2, 3, 4]") "%1 = sum %0 axis=-1 keepdim=1 : f32[2, 3, 1]\n", NULL},
    {A("f32[2, 3, 4]") "%1 = sum %0 axis=3 : f32[2, 3]\n", "out of range"},
    {A("f32[2, 3, 4]") "%1 = mean %0 axis=0 : f32[3, 4]\n", NULL},
    {A("i32[2, 3]") "%1 = mean %0 axis=0 : i32[3]\n", "floating-point"},
    {A("f32[2, 3, 10]") B("i32[2, 3]") "%2 = cross_entropy %0, %1 : f32[]\n", NULL},
    {A("f32[2, 3, 10]") B("i32[2, 4]") "%2 = cross_entropy %0, %1 : f32[]\n", "must match the logits"},
    {A("f32[2, 10]") B("f32[2]") "%2 = cross_entropy %0, %1 : f32[]\n", "targets must be i32"},
    {A("i32[2, 3]") "%1 = ce_count %0 ignore_index=-100 : f32[]\n", NULL},
    {A("f32[2, 3]") "%1 = ce_count %0 : f32[]\n", "targets must be i32"},
    /* attention */
    {A("f32[2, 5, 8]") B("f32[2, 5, 8]")
         C("f32[2, 5, 8]") "%3 = attention %0, %1, %2 heads=2 causal=1 : f32[2, 5, 8]\n",
     NULL},
    {A("f32[2, 5, 8]") B("f32[2, 7, 8]") C("f32[2, 7, 8]") "%3 = attention %0, %1, %2 heads=4 : f32[2, 5, 8]\n", NULL},
    {A("f32[2, 5, 8]") B("f32[2, 5, 8]") C("f32[2, 5, 8]") "%3 = attention %0, %1, %2 heads=3 : f32[2, 5, 8]\n",
     "do not split into 3 heads"},
    {A("f32[2, 5, 8]") B("f32[2, 7, 8]")
         C("f32[2, 7, 8]") "%3 = attention %0, %1, %2 heads=2 causal=1 : f32[2, 5, 8]\n",
     "causal attention"},
    {A("f32[2, 5, 8]") B("f32[2, 5, 8]") C("f32[2, 6, 8]") "%3 = attention %0, %1, %2 heads=2 : f32[2, 5, 8]\n",
     "differ in shape"},
    {A("f32[10, 8]") B("f32[10, 8]") C("f32[10, 8]") "%3 = attention %0, %1, %2 heads=2 : f32[10, 8]\n", "must be 3-D"},
    /* the fused classifier: a scalar loss; its gradients packed, x's then w's */
    {A("f32[2, 5, 8]") B("f32[16, 8]") C("i32[2, 5]") "%3 = classifier_ce %0, %1, %2 transpose_b=1 chunk=4 : f32[]\n",
     NULL},
    {A("f32[2, 5, 8]") B("f32[8, 16]")
         C("i32[2, 5]") "%3 = classifier_ce %0, %1, %2 chunk=4 : f32[]\n%4 = input g : f32[]\n"
                        "%5 = classifier_ce_grad %0, %1, %2, %4 chunk=4 : f32[208]\n",
     NULL},
    {A("f32[2, 5, 8]") B("f32[16, 8]") C("i32[2, 5]") "%3 = classifier_ce %0, %1, %2 chunk=4 : f32[]\n",
     "does not fit w"},
    {A("f32[2, 5, 8]") B("f32[8, 16]") C("i32[2, 5]") "%3 = input g : f32[2]\n"
                                                      "%4 = classifier_ce_grad %0, %1, %2, %3 chunk=4 : f32[208]\n",
     "must be a scalar"},
    {A("f32[2, 5, 8]") B("f32[16, 8]") C("i32[2, 4]") "%3 = classifier_ce %0, %1, %2 transpose_b=1 chunk=4 : f32[]\n",
     "must be i32 and match"},
    {A("f32[2, 5, 8]") B("f32[16, 8]") C("i32[2, 5]") "%3 = classifier_ce %0, %1, %2 transpose_b=1 chunk=0 : f32[]\n",
     "chunk must be positive"},
    /* fused attention: the output rows end with one log-sum-exp per head */
    {A("bf16[2, 5, 8]") B("bf16[2, 5, 8]")
         C("bf16[2, 5, 8]") "%3 = flash_attention %0, %1, %2 heads=2 causal=1 : f32[2, 5, 10]\n",
     NULL},
    {A("f32[2, 5, 8]") B("f32[2, 5, 8]") C("f32[2, 5, 8]") "%3 = flash_attention %0, %1, %2 heads=3 : f32[2, 5, 11]\n",
     "do not split into 3 heads"},
    {A("f32[2, 5, 8]") B("f32[2, 7, 8]")
         C("f32[2, 7, 8]") "%3 = flash_attention %0, %1, %2 heads=4 : f32[2, 5, 12]\n"
                           "%4 = input o : f32[2, 5, 12]\n%5 = input d : f32[2, 5, 4]\n"
                           "%6 = flash_attention_grad %0, %1, %2, %3, %4, %5 heads=4 which=1 : f32[2, 7, 8]\n",
     NULL},
    {A("f32[2, 5, 8]") B("f32[2, 7, 8]")
         C("f32[2, 7, 8]") "%3 = flash_attention %0, %1, %2 heads=4 : f32[2, 5, 12]\n"
                           "%4 = input d : f32[2, 5, 2]\n"
                           "%5 = flash_attention_grad %0, %1, %2, %3, %3, %4 heads=4 which=0 : f32[2, 5, 8]\n",
     "do not fit queries"},
    {A("f32[2, 5, 8]") B("f32[2, 5, 8]")
         C("f32[2, 5, 8]") "%3 = flash_attention %0, %1, %2 heads=4 : f32[2, 5, 12]\n"
                           "%4 = input d : f32[2, 5, 4]\n"
                           "%5 = flash_attention_grad %0, %1, %2, %3, %3, %4 heads=4 which=3 : f32[2, 5, 8]\n",
     "which must be 0, 1 or 2"},
    /* data movement */
    {A("f32[2, 3, 4]") "%1 = reshape %0 shape=[6,4] : f32[6, 4]\n", NULL},
    {A("f32[2, 3, 4]") "%1 = reshape %0 shape=[2,-1] : f32[2, 12]\n", NULL},
    {A("f32[2, 3, 4]") "%1 = reshape %0 shape=[5,5] : f32[5, 5]\n", "has 24 elements, the new shape has 25"},
    {A("f32[2, 3, 4]") "%1 = reshape %0 shape=[5,-1] : f32[5, 5]\n", "cannot infer"},
    {A("f32[2, 3, 4]") "%1 = transpose %0 perm=[2,0,1] : f32[4, 2, 3]\n", NULL},
    {A("f32[2, 3, 4]") "%1 = transpose %0 perm=[0,0,1] : f32[2, 2, 3]\n", "permutation"},
    {A("f32[2, 3, 4]") "%1 = transpose %0 perm=[1,0] : f32[3, 2]\n", "permutation has 2 entries"},
    {A("f32[2, 9]") "%1 = slice %0 axis=1 start=3 end=6 : f32[2, 3]\n", NULL},
    {A("f32[2, 9]") "%1 = slice %0 axis=1 start=3 end=10 : f32[2, 7]\n", "outside 0..9"},
    {A("f32[2, 3]") B("f32[2, 5]") "%2 = concat %0, %1 axis=1 : f32[2, 8]\n", NULL},
    {A("f32[2, 3]") B("f32[2, 3]") C("f32[2, 3]") "%3 = concat %0, %1, %2 axis=0 : f32[6, 3]\n", NULL},
    {A("f32[2, 3]") B("f32[3, 5]") "%2 = concat %0, %1 axis=1 : f32[2, 8]\n", "differ outside axis 1"},
    {A("f32[1, 1, 4]") "%1 = broadcast %0 shape=[3,2,4] : f32[3, 2, 4]\n", NULL},
    {A("f32[2, 4]") "%1 = broadcast %0 shape=[3,4] : f32[3, 4]\n", "does not broadcast to [3, 4]"},
    {A("f32[2, 5, 7]") "%1 = softmax %0 causal=1 : f32[2, 5, 7]\n", NULL},
    {A("f32[2, 7, 5]") "%1 = softmax %0 causal=1 : f32[2, 7, 5]\n", "S <= T"},
    /* gradient ops */
    {A("f32[2, 3, 4]") "%1 = sum_to %0 shape=[4] : f32[4]\n", NULL},
    {A("f32[2, 3, 4]") "%1 = sum_to %0 shape=[2,1,4] : f32[2, 1, 4]\n", NULL},
    {A("f32[2, 3, 4]") "%1 = sum_to %0 shape=[3,1] : f32[3, 1]\n", NULL},
    {A("f32[2, 3, 4]") "%1 = sum_to %0 shape=[5] : f32[5]\n", "does not broadcast"},
    {A("f32[2, 3]") B("f32[2, 3]") "%2 = gelu_grad %0, %1 : f32[2, 3]\n", NULL},
    {A("f32[2, 3]") B("f32[3]") "%2 = gelu_grad %0, %1 : f32[2, 3]\n", "differ in shape"},
    {A("f32[2, 3]") B("f32[2, 3]") "%2 = silu_grad %0, %1 : f32[2, 3]\n", NULL},
    {A("f32[2, 3]") B("bf16[2, 3]") "%2 = silu_grad %0, %1 : f32[2, 3]\n", "different dtypes"},
    {A("f32[2, 3]") B("f32[2, 3]") "%2 = gelu_erf_grad %0, %1 : f32[2, 3]\n", NULL},
    {A("f32[2, 3]") B("f32[2]") "%2 = gelu_erf_grad %0, %1 : f32[2, 3]\n", "differ in shape"},
    {A("f32[2, 3]") B("f32[2, 3]") "%2 = relu_grad %0, %1 : f32[2, 3]\n", NULL},
    {A("i32[2, 3]") B("i32[2, 3]") "%2 = relu_grad %0, %1 : i32[2, 3]\n", "floating-point"},
    {A("f32[2, 8]") B("f32[8]") C("f32[2, 8]") "%3 = layernorm_grad %0, %1, %2 which=0 : f32[2, 8]\n", NULL},
    {A("f32[2, 8]") B("f32[8]") C("f32[2, 8]") "%3 = layernorm_grad %0, %1, %2 which=2 : f32[8]\n", NULL},
    {A("f32[2, 8]") B("f32[8]") C("f32[2, 8]") "%3 = layernorm_grad %0, %1, %2 which=3 : f32[8]\n", "which must be"},
    {A("f32[2, 8]") B("f32[8]") C("f32[2, 8]") "%3 = rmsnorm_grad %0, %1, %2 which=1 : f32[8]\n", NULL},
    {A("f32[2, 8]") B("f32[7]") C("f32[2, 8]") "%3 = rmsnorm_grad %0, %1, %2 which=0 : f32[2, 8]\n", "expects x"},
    {A("f32[2, 8]") B("f32[2, 8]") "%2 = softmax_grad %0, %1 : f32[2, 8]\n", NULL},
    {A("f32[2, 8]") B("f32[2, 7]") "%2 = softmax_grad %0, %1 : f32[2, 8]\n", "differ in shape"},
    {A("f32[2, 10]") B("i32[2]") C("f32[]") "%3 = cross_entropy_grad %0, %1, %2 : f32[2, 10]\n", NULL},
    {A("f32[2, 10]") B("i32[2]") C("f32[2]") "%3 = cross_entropy_grad %0, %1, %2 : f32[2, 10]\n", "must be a scalar"},
    {A("i32[2, 3]") B("f32[2, 3, 4]") "%2 = embedding_grad %0, %1 rows=10 : f32[10, 4]\n", NULL},
    {A("i32[2, 3]") B("f32[2, 4, 4]") "%2 = embedding_grad %0, %1 rows=10 : f32[10, 4]\n", "does not match"},
    {A("f32[2, 3]") "%1 = pad %0 axis=1 before=1 after=2 : f32[2, 6]\n", NULL},
    {A("f32[2, 3]") "%1 = pad %0 axis=1 before=-1 after=2 : f32[2, 4]\n", "non-negative"},
    /* collectives over the tensor-parallel group */
    {A("f32[2, 6]") "%1 = all_reduce %0 ranks=2 : f32[2, 6]\n", NULL},
    {A("i32[2, 6]") "%1 = all_reduce %0 ranks=2 : i32[2, 6]\n", "collectives move f32"},
    {A("f32[2, 6]") "%1 = tp_copy %0 ranks=2 : f32[2, 6]\n", NULL},
    {A("f32[2, 6]") "%1 = tp_copy %0 ranks=0 : f32[2, 6]\n", "ranks must be positive"},
    {A("f32[2, 6]") "%1 = all_gather %0 axis=1 ranks=2 : f32[2, 12]\n", NULL},
    {A("f32[2, 6]") "%1 = all_gather %0 axis=1 ranks=2 blocks=4 : f32[2, 12]\n", "does not split"},
    {A("f32[2, 6]") "%1 = split %0 axis=1 ranks=2 blocks=3 : f32[2, 3]\n", NULL},
    {A("f32[2, 6]") "%1 = split %0 axis=-1 ranks=4 : f32[2, 6]\n", "does not split"},
    {A("f32[2, 6]") "%1 = reduce_scatter %0 axis=0 ranks=2 : f32[1, 6]\n", NULL},
    {A("f32[3, 6]") "%1 = reduce_scatter %0 axis=0 ranks=2 : f32[1, 6]\n", "does not split"},
    {A("f32[2, 3, 4]") "%1 = all_to_all %0 ranks=2 : f32[2, 3, 4]\n", NULL},
    {A("f32[3, 2]") "%1 = all_to_all %0 ranks=2 : f32[3, 2]\n", "dimension 0 must be the ranks"},
};

static int run_case(const Case *c, const char **opname) {
  Arena *a = arena_new();
  SrcFile src = {"case.ir", NULL, 0};
  char *text = arena_printf(a, "graph t\n%s", c->ir);
  src.text = text;
  src.len = strlen(text);
  /* the op under test is the last node's */
  const char *last = strrchr(c->ir, '=');
  while (last > c->ir && last[-1] != '\n') last--;
  static char op[32];
  sscanf(strchr(last, '=') + 1, " %31s", op);
  *opname = op;
  DiagJump j;
  diag_push(&j);
  int failed = 0;
  if (setjmp(j.jb)) {
    diag_pop(&j);
    if (!c->error) {
      printf("FAIL %s: unexpected error: %s\n%s", op, diag_last, c->ir);
      failed = 1;
    } else if (!strstr(diag_last, c->error)) {
      printf("FAIL %s: error '%s' lacks '%s'\n%s", op, diag_last, c->error, c->ir);
      failed = 1;
    }
    arena_free(a);
    return failed;
  }
  Graph *g = ir_parse(a, &src);
  ir_verify(g);
  diag_pop(&j);
  if (c->error) {
    printf("FAIL %s: accepted, expected error '%s'\n%s", op, c->error, c->ir);
    failed = 1;
  }
  arena_free(a);
  return failed;
}

int main(void) {
  diag_stream = NULL;
  op_table_init();
  int ok_cases[OP_COUNT] = {0}, err_cases[OP_COUNT] = {0}, failures = 0, n = sizeof cases / sizeof *cases;
  for (int i = 0; i < n; i++) {
    const char *op;
    failures += run_case(&cases[i], &op);
    int k = op_lookup(op);
    if (k < 0) {
      printf("FAIL case %d names unknown op '%s'\n", i, op);
      failures++;
      continue;
    }
    (cases[i].error ? err_cases : ok_cases)[k]++;
  }
  for (int k = 0; k < OP_COUNT; k++) {
    const OpInfo *oi = op_info((OpKind)k);
    if (!ok_cases[k]) {
      printf("FAIL op %s has no accepted shape case\n", oi->name);
      failures++;
    }
    if (oi->nin != 0 && !err_cases[k]) {
      printf("FAIL op %s has no rejected shape case\n", oi->name);
      failures++;
    }
  }
  printf("%d cases over %d ops: %d passed, %d failed\n", n, OP_COUNT, n - failures, failures);
  return failures != 0;
}
