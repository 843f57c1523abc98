"""Measuring this machine as the replay uses it: matmuls, copies, links and collectives per
rank, the runtime's own costs and memory reserve, tensor-parallel dispatch overhead, the
hardware YAML built from them (``sim calibrate``), and the GPU ground-truth steps of issue 8.

Importing this package imports nothing (no torch): import its modules.
"""
