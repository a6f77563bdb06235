"""Reductions: sum/mean/prod, min/max, arg-reductions, var/std, norms, logsumexp, any/all, softmax family."""
