"""_foreach_* ops (what torch.optim's default foreach implementations call): the pointwise lowerings mapped over tensor lists, one kernel per call."""
