// The registration function of each op family file, one per upstream _ops/ file;
// EnsureStrategiesRegistered() (strategy.cc) calls them all once.
#pragma once

namespace dtsim {
namespace ops {

void RegisterMatrixOps();     // matrix_ops.cc: mm, addmm, bmm, baddbmm, t
void RegisterPointwiseOps();  // pointwise_ops.cc: unary/binary elementwise ops, their in-place and
                              // out= forms
void RegisterMathOps();       // math_ops.cc: reductions, softmax, norms, losses
void RegisterViewOps();       // view_ops.cc: view, reshape, transpose, permute, unsqueeze, squeeze,
                              // expand, ...
void RegisterTensorOps();  // tensor_ops.cc: clone, contiguous, detach, copy_, *_like, cat, stack,
                           // split, slice, ...
void RegisterEmbeddingOps();  // embedding_ops.cc: embedding and its backward
void RegisterRandomOps();     // random_ops.cc: in-place samplers, dropout, multinomial

}  // namespace ops
}  // namespace dtsim
