"""Splitting a model's layers across ranks: tensor parallelism (Megatron with torch's
``parallelize_module``) and whether a GPT splits, context parallelism (all-gather, ring
attention, Ulysses), expert parallelism (all-to-all dispatch), and keeping shared or tied
parameters one parameter across ranks.

Importing this package imports nothing (no torch): import its modules.
"""
