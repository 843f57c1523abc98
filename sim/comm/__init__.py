"""Communication: NCCL's cost model, its rings, hierarchical collectives across servers and all-to-alls on the topology."""
