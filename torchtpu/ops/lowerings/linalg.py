"""Matrix products: mm, bmm, addmm, baddbmm, mv, dot, ... (float32 precision from torch's matmul precision setting)."""
