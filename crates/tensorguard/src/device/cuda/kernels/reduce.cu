// reduce.cu: placeholder so that this branch builds; helper "ix" writes the
// reduction and softmax kernels here (the merge keeps ix's file).
