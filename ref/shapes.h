/* shapes.h — the dimension letters of refine, declared once (STYLE.md, "Files and names").
 *
 * Every signature and shape comment in ref/, gpu/, train/ and tests/ uses these letters:
 *
 *   B    batch (micro-batch size: sequences per step)
 *   T    sequence length (tokens per sequence)
 *   N    rows = B·T (tokens in a micro-batch), the leading dimension of activations
 *   C    model width (hidden_size)
 *   H    query heads (num_attention_heads)
 *   KVH  key/value heads (num_key_value_heads); H % KVH == 0, group size H/KVH (GQA)
 *   D    head dimension (head_dim; C = H·D for every Llama config except where head_dim is set)
 *   F    MLP width (intermediate_size)
 *   V    vocabulary size
 *   L    layers (num_hidden_layers)
 *   R    adapter rank (LoRA/DoRA r)
 *
 * A linear layer maps C_in → C_out with weight W (C_out, C_in), as torch.nn.Linear:
 * y = x Wᵀ (+ b). Tensors are contiguous row-major unless a header says otherwise. Shapes are int;
 * element offsets and byte sizes are int64_t / size_t.
 *
 * Conventions that every op header restates where it applies:
 *   - parameter gradients ACCUMULATE (dw += ...), so gradient accumulation over micro-batches is free;
 *   - activation gradients OVERWRITE (dx = ...);
 *   - ops never allocate, free, synchronize or touch globals; scratch comes from a
 *     ..._workspace_size() query.
 */
#ifndef REFINE_REF_SHAPES_H
#define REFINE_REF_SHAPES_H

/* Activation storage type an op must emulate: the CPU reference computes in fp32 and, where the
 * GPU path stores bf16, rounds to bf16 at the same points (DESIGN "Numbers and memory"). */
enum act_dtype {
    ACT_F32 = 0,  /* no rounding: the fp32 oracle */
    ACT_BF16 = 1, /* round to bfloat16 (RNE) wherever the GPU path stores bf16 */
};

#endif /* REFINE_REF_SHAPES_H */
