"""Running a configuration on real devices: the job and its result, the launcher and rank
processes, our runtime and torch's pipelining runtime, weight versions, memory policies and CPU
memory, one rank alone, tensor-, expert- and context-parallel replays, and the one-process
numerics reference.

Importing this package imports nothing (no torch): import its modules.
"""
